"""The OpenAI surface: `/v1/chat/completions`, `/v1/completions` and `/v1/embeddings`.

Every channel but Anthropic's speaks it, so the request goes to each route as sent (with `model`
rewritten); Chat and Completions always as a stream asked for usage, assembled again for a client
that did not ask for one (`call.send_upstream`); the answer comes back as is, minus what the
gateway asked for on its own behalf. Anthropic channels get the request translated to Messages
and the answer translated back (`chat_anthropic`).
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.admission import open_call
from gateway.call import Call, Plan, UpstreamResponse, recount
from gateway.http import GatewayError, Request
from gateway.relay import ChatDialect, model_renames, relay, renamed
from gateway.translate.common import answer_usage
from gateway.usage import Usage, estimate_tokens, usage_from
from keys.choices import ApiSurface

from . import chat_anthropic
from .translated import MAX_TOKENS, stream_of


async def chat_completions(req: Request) -> None:
    await _proxy(req, ApiSurface.CHAT, "/chat/completions")


async def completions(req: Request) -> None:
    await _proxy(req, ApiSurface.COMPLETIONS, "/completions")


async def embeddings(req: Request) -> None:
    await _proxy(req, ApiSurface.EMBEDDINGS, "/embeddings")


async def _proxy(req: Request, surface: str, path: str) -> None:
    body = await req.json()
    stream = surface != ApiSurface.EMBEDDINGS and stream_of(body)
    if surface == ApiSurface.CHAT:
        if not isinstance(body.get("messages"), list):
            raise GatewayError(400, "`messages` must be a list.", code="invalid_value", param="messages")
        prompt = estimate_tokens(body["messages"])
    elif surface == ApiSurface.COMPLETIONS:
        prompt = estimate_tokens(body.get("prompt"))
    else:
        prompt = estimate_tokens(body.get("input"))
    max_tokens = 0 if surface == ApiSurface.EMBEDDINGS else _max_tokens(body)
    choices = 1 if surface == ApiSurface.EMBEDDINGS else generations(body, legacy=surface == ApiSurface.COMPLETIONS)
    call = await open_call(
        req,
        surface=surface,
        model=body.get("model"),
        stream=stream,
        prompt_tokens=prompt,
        max_tokens=max_tokens,
        body=body,
        choices=choices,
    )
    options = body.get("stream_options")
    wants_usage = stream and isinstance(options, dict) and bool(options.get("include_usage"))
    # Chat and Completions go upstream as streams (`call.send_upstream`), asked for usage; an
    # Anthropic channel gets the body translated to Messages (`chat_anthropic`).
    default_max = max_tokens if max_tokens is not None else call.max_tokens
    up = await call.forward(
        Plan(call.routes, chat_anthropic.outgoing_for(call, surface, path, body, req.headers, default_max))
    )
    legacy = surface == ApiSurface.COMPLETIONS
    if chat_anthropic.translates(up.route):
        if up.streaming:
            await relay(call, up, chat_anthropic.AnthropicChatDialect(call, legacy=legacy, include_usage=wants_usage))
        else:
            await chat_anthropic.relay_json(call, up, legacy=legacy)
        return
    if up.streaming:
        await relay(
            call, up, ChatDialect(call.max_tokens, choices=choices, wants_usage=wants_usage, model=call.model.name)
        )
        return
    await _relay_json(call, up, prompt)


def _max_tokens(body: dict[str, Any]) -> int | None:
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOKENS:
                raise GatewayError(
                    400, f"`{name}` must be an integer from 0 to {MAX_TOKENS}.", code="invalid_value", param=name
                )
            return value
    return None


# OpenAI's bounds: `n` at most 128 choices; legacy Completions' `best_of` at most 20 candidates.
MAX_N = 128
MAX_BEST_OF = 20


def generations(body: dict[str, Any], *, legacy: bool) -> int:
    """How many outputs the upstream generates for the request, each of which may produce the
    reserved output: `n` choices (1 to 128), on legacy Completions `best_of` candidates when more
    (1 to 20, never fewer than `n`), for each prompt of a prompt list. The upstream gets the body
    as sent, so a value the gateway could not count is refused rather than counted as one."""
    n = _count(body, "n", MAX_N)
    if not legacy:
        return n
    if body.get("best_of") is not None:
        best_of = _count(body, "best_of", MAX_BEST_OF)
        if best_of < n:
            raise GatewayError(400, "`best_of` must be at least `n`.", code="invalid_value", param="best_of")
        n = best_of
    return n * _prompts(body.get("prompt"))


def _count(body: dict[str, Any], name: str, most: int) -> int:
    value = body.get(name)
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise GatewayError(400, f"`{name}` must be an integer from 1 to {most}.", code="invalid_value", param=name)
    return value


def _prompts(prompt: Any) -> int:
    """The prompts of a legacy Completions `prompt`: a list of strings or of token-id lists is one
    prompt each (a list of token ids, or a string, is one prompt)."""
    if isinstance(prompt, list) and prompt and all(isinstance(item, (str, list)) for item in prompt):
        return len(prompt)
    return 1


async def _relay_json(call: Call, up: UpstreamResponse, prompt: int) -> None:
    status, raw, content_type = up.status, up.body, up.content_type
    usage: Usage | None = None
    if status < 400:
        data = up.json()
        renames = model_renames(data.get("model"), call.model.name) if isinstance(data, dict) else ()
        if renames:  # the public name in the upstream's id's place
            data["model"] = call.model.name
            raw = renamed(raw, renames)
        usage = usage_from(answer_usage(data))
        if usage is None:
            # No usage from the upstream: its own tokenizer counts where it has one, else our estimate.
            usage = await recount(up, Usage(prompt, _estimated_completion(data), estimated=True), _answer_text(data))
            if isinstance(data, dict):  # (an answer cut at the reservation has none either) the client gets ours
                data["usage"] = call.bounded(usage)[0].as_chat()
                raw = orjson.dumps(data)
        elif (charged := call.bounded(usage)[0]) is not usage:  # implausible: shown as charged
            charged.shown_in(data["usage"], "chat")
            raw = orjson.dumps(data)
    else:
        # An upstream client error (e.g. llama.cpp's exceed_context_size_error) passes through,
        # always in the OpenAI error shape.
        try:
            data = orjson.loads(raw)
            shaped = isinstance(data, dict) and isinstance(data.get("error"), dict)
        except orjson.JSONDecodeError:
            shaped = False
        if not shaped:
            text = raw[:500].decode(errors="replace").strip() or f"HTTP {status}"
            raw = GatewayError(status, f"The upstream rejected the request: {text}", code="upstream_error").body()
            content_type = b"application/json"
    await call.send_json(status, raw, usage, content_type)


def _answer_text(data: Any) -> str | None:
    """What a JSON answer generated, for the upstream's tokenizer: each choice's text, reasoning,
    content and tool calls (their names and arguments)."""
    if not isinstance(data, dict):
        return None
    parts = []
    for choice in data.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        parts.append(str(choice.get("text") or ""))
        message = choice.get("message")
        if not isinstance(message, dict):
            continue
        parts += (str(message.get(name) or "") for name in ("reasoning_content", "reasoning", "content"))
        for call in message.get("tool_calls") or ():
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict):
                parts += (str(function.get("name") or ""), str(function.get("arguments") or ""))
    return "\n".join(part for part in parts if part)


def _estimated_completion(data: Any) -> int:
    """Completion tokens of a JSON answer without usage, estimated (`translate.common.text_tokens`)."""
    if not isinstance(data, dict):
        return 0
    total = 0
    for choice in data.get("choices") or ():
        if isinstance(choice, dict):
            total += estimate_tokens(choice.get("message") or {}) + estimate_tokens(choice.get("text") or "")
    return total
