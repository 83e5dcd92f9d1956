"""Chat Completions request -> Anthropic Messages request (a Chat client on an Anthropic channel).

What maps: every `system` / `developer` message -> `system` (joined, in order; Messages has one);
user text and `image_url` parts (a `data:` URL -> a base64 image block, an http(s) URL -> a url
image block); assistant text and `tool_calls` -> `text` / `tool_use` blocks; `tool` messages ->
`tool_result` blocks of the next user turn (consecutive turns of one role are merged, results
first, as Messages requires); `tools` (`parameters` -> `input_schema`), `tool_choice`
(auto/required/none/a function), `parallel_tool_calls: false` -> `disable_parallel_tool_use`,
`stop` -> `stop_sequences`, `max_completion_tokens` / `max_tokens` (Messages requires one: the
caller's default when the client sent none), `temperature` (capped at 1, Messages' maximum),
`top_p`, `user` -> `metadata.user_id`, `stream`, `reasoning_effort` -> `thinking` with a token
budget (`THINKING_BUDGETS`, kept below `max_tokens`; Messages allows no `temperature`/`top_p`
below 0.95 and no forced tool with thinking, so those are left out, and thinking is left off
inside a tool loop, whose earlier thinking blocks a Chat client cannot send back signed).

Refused (400 naming the field): `n` > 1, `audio` output, non-function tools, a tool name Anthropic
refuses (`common.refuse_tool_name`), declared or in an earlier assistant turn's `tool_calls`,
`response_format` json_schema / json_object (no portable equivalent), content parts other than text
and images, a call without an `id` whose tool message cannot be told apart (`_missing_id`).
Tool call ids Anthropic refuses (other providers' `functions.get_weather:0`) are rewritten, the
same way in a call and its result (`anthropic_tool_id`).
Dropped with an info log: `logprobs`, `top_logprobs`, `seed`, `frequency_penalty`,
`presence_penalty`, `logit_bias`, `store`, `metadata`, `service_tier`, `prediction`,
`prompt_cache_key`, `safety_identifier`, `modalities` of text only.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import re
from typing import Any

from gateway.translate.common import (
    ANTHROPIC_TOOL_NAME_MAX,
    TOOL_NAME,
    TranslationError,
    parse_arguments,
    refuse_tool_name,
    text_of,
)

logger = logging.getLogger(__name__)

# reasoning_effort -> thinking budget (tokens). Anthropic's minimum budget is 1024; "minimal" and
# "none" ask for no thinking at all.
THINKING_BUDGETS = {"low": 1024, "medium": 4096, "high": 16384, "xhigh": 32768}
MIN_THINKING_BUDGET = 1024
IMAGE_MEDIA_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
DROPPED = (
    "logprobs",
    "top_logprobs",
    "seed",
    "frequency_penalty",
    "presence_penalty",
    "logit_bias",
    "store",
    "metadata",
    "service_tier",
    "prediction",
    "prompt_cache_key",
    "safety_identifier",
    "modalities",
    "web_search_options",
    "verbosity",
)


def to_messages_request(body: dict[str, Any], *, default_max_tokens: int) -> dict[str, Any]:
    """Translate a Chat Completions body; raises TranslationError for what cannot be expressed.

    `default_max_tokens` is sent when the client asked for no limit (Messages requires one)."""
    if not isinstance(body, dict):
        raise TranslationError("The request body must be a JSON object.")
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise TranslationError("`messages` must be a list.", "messages")
    _refuse_unsupported(body)

    system: list[str] = []
    turns: list[dict[str, Any]] = []
    missing: str | None = None  # the id given to the last assistant turn's call that had none
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise TranslationError(f"`{where}` must be an object.", where)
        role = message.get("role")
        if role in ("system", "developer"):
            text = text_of(message.get("content"))
            if text:
                system.append(text)
            continue
        if role == "user":
            _append(turns, "user", _user_blocks(message.get("content"), where))
        elif role == "assistant":
            missing = _missing_id(messages, index)
            _append(turns, "assistant", _assistant_blocks(message, where, missing))
        elif role == "tool":
            _append(turns, "user", [_tool_result(message, where, missing)])
        else:
            raise TranslationError(f"`{where}.role` must be system, developer, user, assistant or tool.", where)
    if not turns:
        raise TranslationError("`messages` needs at least one user or assistant message.", "messages")

    out: dict[str, Any] = {"model": body.get("model"), "messages": turns}
    if system:
        out["system"] = "\n\n".join(system)
    max_tokens = _max_tokens(body, default_max_tokens)
    out["max_tokens"] = max_tokens
    stops = body.get("stop")
    if isinstance(stops, str):
        stops = [stops]
    if stops:
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            raise TranslationError("`stop` must be a string or a list of strings.", "stop")
        out["stop_sequences"] = [s for s in stops if s.strip()]  # Messages refuses blank ones
        if not out["stop_sequences"]:
            del out["stop_sequences"]
    temperature = body.get("temperature")
    if temperature is not None:
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
            raise TranslationError("`temperature` must be a number.", "temperature")
        out["temperature"] = min(float(temperature), 1.0)
    top_p = body.get("top_p")
    if top_p is not None:
        if isinstance(top_p, bool) or not isinstance(top_p, (int, float)):
            raise TranslationError("`top_p` must be a number.", "top_p")
        out["top_p"] = top_p
    if isinstance(body.get("user"), str) and body["user"]:
        out["metadata"] = {"user_id": body["user"]}

    tools = _tools(body.get("tools"))
    if tools:
        out["tools"] = tools
        choice = _tool_choice(body.get("tool_choice"), body.get("parallel_tool_calls"))
        if choice is not None:
            out["tool_choice"] = choice
    _thinking(out, body.get("reasoning_effort"), turns)
    if body.get("stream"):
        out["stream"] = True
    dropped = sorted(k for k in DROPPED if body.get(k) is not None)
    if dropped:
        logger.info("chat->messages: ignored fields %s", ", ".join(dropped))
    return out


def _refuse_unsupported(body: dict[str, Any]) -> None:
    n = body.get("n")
    if n is not None and n != 1:
        raise TranslationError("`n` must be 1: this model's channel (Anthropic) answers one choice.", "n")
    if body.get("audio") is not None:
        raise TranslationError("`audio` output is not available on this model's channel (Anthropic).", "audio")
    response_format = body.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type") not in (None, "text"):
        raise TranslationError(
            "`response_format` json_schema / json_object is not available on this model's channel (Anthropic): "
            "describe the format in the prompt or use a tool.",
            "response_format",
        )


def _max_tokens(body: dict[str, Any], default: int) -> int:
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise TranslationError(f"`{name}` must be a positive integer.", name)
            return value
    return default


def _append(turns: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]) -> None:
    """Add blocks as a turn of `role`, merged into the previous turn when it has the same role
    (Messages alternates roles; a user turn answering tool calls starts with its tool results).
    Blank messages are left out: Messages refuses blank text."""
    if not blocks:
        return
    if turns and turns[-1]["role"] == role:
        previous = turns[-1]["content"]
        if role == "user":
            results = [b for b in previous + blocks if b["type"] == "tool_result"]
            others = [b for b in previous + blocks if b["type"] != "tool_result"]
            turns[-1]["content"] = results + others
        else:
            previous.extend(blocks)
        return
    turns.append({"role": role, "content": blocks})


def _user_blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content.strip() else []
    if not isinstance(content, list):
        raise TranslationError(f"`{where}.content` must be a string or a list of parts.", where)
    blocks = [_part(part, where) for part in content]
    return [b for b in blocks if b is not None]


def _part(part: Any, where: str) -> dict[str, Any] | None:
    if not isinstance(part, dict):
        raise TranslationError(f"`{where}.content` parts must be objects.", where)
    kind = part.get("type")
    if kind == "text":
        text = part.get("text") or ""
        if not isinstance(text, str):
            raise TranslationError(f"`{where}` has a text part whose `text` is not a string.", where)
        if not text.strip():
            return None  # Messages refuses blank text blocks
        block: dict[str, Any] = {"type": "text", "text": text}
    elif kind == "image_url":
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, dict) else image
        block = _image(url, where)
    else:
        raise TranslationError(
            f"`{where}` has a {kind!r} part; this model's channel (Anthropic) accepts text and images.", where
        )
    if isinstance(part.get("cache_control"), dict):
        block["cache_control"] = part["cache_control"]
    return block


def _image(url: Any, where: str) -> dict[str, Any]:
    if not isinstance(url, str) or not url:
        raise TranslationError(f"`{where}` has an image part without a url.", where)
    if url.startswith("data:"):
        header, _, data = url[5:].partition(",")
        media_type, _, encoding = header.partition(";")
        if encoding != "base64" or media_type not in IMAGE_MEDIA_TYPES:
            raise TranslationError(f"`{where}` has an image data URL that is not base64 JPEG, PNG, GIF or WebP.", where)
        try:
            base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise TranslationError(f"`{where}` has an image data URL whose data is not base64.", where) from None
        return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}
    if url.startswith(("https://", "http://")):
        return {"type": "image", "source": {"type": "url", "url": url}}
    raise TranslationError(f"`{where}` has an image url that is neither a data: nor an http(s) URL.", where)


def anthropic_tool_id(call_id: str) -> str:
    """A client's tool call id as Anthropic takes it (the tool names' characters): itself when it
    does, else with every other character replaced by `_` and a hash of it appended, so two ids
    never become one and a call and its result still match. Deterministic: next turn's history is
    sent the same, and Anthropic's prompt cache still hits."""
    if TOOL_NAME.fullmatch(call_id):
        return call_id
    digest = hashlib.sha256(call_id.encode()).hexdigest()[:12]
    return f"{re.sub(r'[^a-zA-Z0-9_-]', '_', call_id)}_{digest}"


def _filled(value: Any) -> bool:
    return isinstance(value, str) and bool(value)


def _missing_id(messages: list[Any], index: int) -> str | None:
    """The id for the one call of assistant turn `index` sent without an id, when exactly one of the
    tool messages answering that turn has no `tool_call_id` either (a 400 when the two cannot be
    paired); None when every call has its id."""
    calls = messages[index].get("tool_calls")
    calls = calls if isinstance(calls, list) else []
    without = [n for n, call in enumerate(calls) if isinstance(call, dict) and not _filled(call.get("id"))]
    if not without:
        return None
    unanswered = 0
    for message in messages[index + 1 :]:
        role = message.get("role") if isinstance(message, dict) else None
        if role == "assistant":
            break
        if role == "tool" and not _filled(message.get("tool_call_id")):
            unanswered += 1
    field = f"messages[{index}].tool_calls[{without[-1]}].id"
    if len(without) > 1 or unanswered != 1:
        raise TranslationError(
            f"`{field}` is missing and the call's tool message cannot be told apart: send each call's `id`, "
            "and the same `tool_call_id` in its tool message.",
            field,
        )
    return f"call_{hashlib.sha256(field.encode()).hexdigest()[:24]}"


def _assistant_blocks(message: dict[str, Any], where: str, missing: str | None) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    content = message.get("content")
    text = text_of(content) if not isinstance(content, str) else content
    if not text and message.get("refusal"):
        text = str(message["refusal"])
    if text.strip():
        blocks.append({"type": "text", "text": text})
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise TranslationError(f"`{where}.tool_calls` must be a list.", where)
    for number, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not function.get("name"):
            raise TranslationError(f"`{where}.tool_calls` needs a `function.name` in each call.", where)
        # An earlier turn's call is checked as a declared tool is: Anthropic refuses either name.
        refuse_tool_name(
            function["name"],
            f"{where}.tool_calls[{number}].function.name",
            channel="Anthropic",
            longest=ANTHROPIC_TOOL_NAME_MAX,
        )
        blocks.append(
            {
                "type": "tool_use",
                "id": anthropic_tool_id(call["id"]) if _filled(call.get("id")) else missing,
                "name": function["name"],
                "input": parse_arguments(function.get("arguments")),
            }
        )
    return blocks


def _tool_result(message: dict[str, Any], where: str, missing: str | None) -> dict[str, Any]:
    """The `tool_result` block of a tool message; `missing` answers the previous assistant turn's call
    sent without an id, whose result is the one tool message without a `tool_call_id`."""
    sent = message.get("tool_call_id")
    call_id = anthropic_tool_id(sent) if isinstance(sent, str) and sent else missing
    if call_id is None:
        raise TranslationError(f"`{where}` (a tool message) needs a `tool_call_id`.", where)
    content = message.get("content")
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id}
    if isinstance(content, list):
        parts = [p for p in (_part(part, where) for part in content) if p is not None]
        if parts:
            block["content"] = parts
    elif content:
        block["content"] = str(content)
    return block


def _tools(tools: Any) -> list[dict[str, Any]]:
    if not tools:
        return []
    if not isinstance(tools, list):
        raise TranslationError("`tools` must be a list.", "tools")
    out = []
    for index, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            raise TranslationError("Only `function` tools are available on this model's channel (Anthropic).", "tools")
        function = tool.get("function") or {}
        if not isinstance(function, dict) or not function.get("name"):
            raise TranslationError("Each tool needs a `function.name`.", "tools")
        refuse_tool_name(
            function["name"], f"tools[{index}].function.name", channel="Anthropic", longest=ANTHROPIC_TOOL_NAME_MAX
        )
        entry: dict[str, Any] = {
            "name": function["name"],
            "input_schema": function.get("parameters") or {"type": "object", "properties": {}},
        }
        if function.get("description"):
            entry["description"] = function["description"]
        out.append(entry)
    return out


def _tool_choice(choice: Any, parallel: Any) -> dict[str, Any] | None:
    out: dict[str, Any] | None
    if choice is None:
        out = None
    elif choice == "auto":
        out = {"type": "auto"}
    elif choice == "required":
        out = {"type": "any"}
    elif choice == "none":
        return {"type": "none"}
    elif isinstance(choice, dict) and isinstance(choice.get("function"), dict) and choice["function"].get("name"):
        out = {"type": "tool", "name": choice["function"]["name"]}
    else:
        raise TranslationError(
            "`tool_choice` must be auto, required, none or {type: function, function: {name}}.", "tool_choice"
        )
    if parallel is False:
        out = {**(out or {"type": "auto"}), "disable_parallel_tool_use": True}
    return out


def _thinking(out: dict[str, Any], effort: Any, turns: list[dict[str, Any]]) -> None:
    if effort is None:
        return
    budget = THINKING_BUDGETS.get(effort) if isinstance(effort, str) else None
    if budget is None:
        if effort not in ("none", "minimal"):
            raise TranslationError(
                "`reasoning_effort` must be one of none, minimal, low, medium, high, xhigh.", "reasoning_effort"
            )
        return
    if (out.get("tool_choice") or {}).get("type") in ("any", "tool"):
        logger.info("chat->messages: no thinking with a forced tool choice")
        return
    if _in_tool_loop(turns):
        logger.info("chat->messages: no thinking inside a tool loop (its thinking blocks cannot be sent back)")
        return
    budget = min(budget, out["max_tokens"] - 1)
    if budget < MIN_THINKING_BUDGET:
        logger.info("chat->messages: max_tokens %s leaves no room for thinking", out["max_tokens"])
        return
    out["thinking"] = {"type": "enabled", "budget_tokens": budget}
    out.pop("temperature", None)
    if out.get("top_p") is not None and out["top_p"] < 0.95:
        out.pop("top_p")


def _in_tool_loop(turns: list[dict[str, Any]]) -> bool:
    """Does the conversation end with tool results answering the last assistant turn?"""
    last = turns[-1]
    return last["role"] == "user" and any(b["type"] == "tool_result" for b in last["content"])
