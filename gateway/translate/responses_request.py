"""OpenAI Responses request -> Chat Completions request.

What maps: `instructions` and every `system`/`developer` message -> one leading system message
(several chat templates, Qwen's among them, reject a system message anywhere but first);
`input` as a string or items: messages with `input_text` / `output_text` / `refusal` /
`input_image` parts, `function_call` items -> assistant `tool_calls` (consecutive calls, and the
assistant text just before them, share one assistant message, as Chat expects for parallel calls),
`function_call_output` -> `tool` messages (images in an output go to a user message after them);
`tools` of type `function` (flat Responses shape -> nested Chat shape), `tool_choice`,
`parallel_tool_calls`, `max_output_tokens` -> `max_tokens`, `temperature`, `top_p`,
`text.format` json_schema / json_object -> `response_format`, `reasoning.effort` ->
`reasoning_effort`, `stream` (+ usage in the stream).

Codex (0.169) sends each MCP server's tools as one `namespace` tool named `mcp__<server>`: those
become plain functions named `<namespace>__<tool>` (a `function_call` item's `namespace` joins its
name the same way), and responses_response splits a call to one back (`mcp_functions`).
Dropped on purpose, with an info log: tools of other types (Codex sends `web_search`, its other
`namespace`s, `local_shell`, `custom`… which no Chat upstream can run), `reasoning` items sent back
by the client, `reasoning.summary`, `store`,
`include`, `prompt_cache_key`, `client_metadata`, `metadata`, `truncation`, `service_tier`,
`user`, `safety_identifier`. `previous_response_id` and `conversation` are refused: the gateway
stores no responses, so it cannot continue one.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from gateway.translate.common import (
    TranslationError,
    chat_function,
    chat_tools,
    flat_function_fields,
    flat_name,
    flat_tools,
    refuse_tool_name,
    text_of,
)

logger = logging.getLogger(__name__)

# Responses' `reasoning.effort` -> Chat's `reasoning_effort`, in the three values every server
# that takes it accepts (vLLM refuses others); "none" asks for no reasoning, so nothing is sent.
REASONING_EFFORTS = {"minimal": "low", "low": "low", "medium": "medium", "high": "high", "xhigh": "high"}
# The Chat fields `to_chat_request` makes of Responses ones named otherwise (other fields keep their names).
CHAT_FIELDS = {
    "response_format": "text.format",
    "max_tokens": "max_output_tokens",
    "reasoning_effort": "reasoning.effort",
    "messages": "input",
}
TEXT_PART_TYPES = ("input_text", "output_text", "text", "summary_text", "reasoning_text")


def to_chat_request(body: dict[str, Any], *, map_reasoning: bool = True) -> dict[str, Any]:
    """Translate a Responses request body; raises TranslationError for what cannot be expressed.

    `reasoning.effort` is forwarded as Chat's `reasoning_effort` (`REASONING_EFFORTS`): the
    client asked for it, and vLLM, llama.cpp and OpenAI-compatible reasoning models take it;
    `map_reasoning=False` leaves it out.
    """
    if not isinstance(body, dict):
        raise TranslationError("The request body must be a JSON object.")
    for field in ("previous_response_id", "conversation"):
        if body.get(field):
            raise TranslationError(
                f"`{field}` is not supported: this gateway does not store responses. Send the whole "
                "conversation in `input` (and `store: false`).",
                field,
            )

    messages = _build(body).messages()
    if not messages:  # OpenAI refuses it too; sent on, an upstream's answer to nothing is its own
        raise TranslationError("`input` is empty: send at least one message.", "input")
    chat: dict[str, Any] = {"model": body.get("model"), "messages": messages}
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    for name in ("temperature", "top_p"):
        if body.get(name) is not None:
            chat[name] = body[name]
    tools = chat_tools(flat_tools(body.get("tools")), _function)
    named = body.get("tool_choice")
    if isinstance(named, dict) and named.get("type") == "function" and named.get("name"):
        if not isinstance(named["name"], str) or named["name"] not in {t["function"]["name"] for t in tools}:
            raise TranslationError(
                f"`tool_choice` names the function {named['name']!r}, which is not in `tools`.", "tool_choice"
            )
    if tools:
        chat["tools"] = tools
        choice = _tool_choice(body.get("tool_choice"))
        if choice is not None:
            chat["tool_choice"] = choice
        if body.get("parallel_tool_calls") is not None:
            chat["parallel_tool_calls"] = bool(body["parallel_tool_calls"])
    response_format = _response_format(body.get("text"))
    if response_format:
        chat["response_format"] = response_format
    effort = (body.get("reasoning") or {}).get("effort") if isinstance(body.get("reasoning"), dict) else None
    effort = REASONING_EFFORTS.get(effort) if isinstance(effort, str) else None
    if map_reasoning and effort is not None:
        chat["reasoning_effort"] = effort
    if body.get("stream"):
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    return chat


def refuse_call_names(body: dict[str, Any], *, channel: str, longest: int) -> None:
    """The names of the `function_call` items of `input` (earlier turns' calls, sent as
    `tool_calls`) as the translated request's cloud API takes them, refused by the client's own
    field (`input[3].name`) before it is asked, as declared tools' are."""
    items = body.get("input")
    for index, item in enumerate(items if isinstance(items, list) else []):
        if isinstance(item, dict) and item.get("type") == "function_call" and _filled(item.get("name")):
            name = flat_name(item["namespace"], item["name"]) if item.get("namespace") else item["name"]
            refuse_tool_name(name, f"input[{index}].name", channel=channel, longest=longest)


def as_sent(body: dict[str, Any], exc: TranslationError) -> TranslationError:
    """`exc` from a later check or translation of this body's Chat request (Chat -> Messages, on an
    Anthropic channel) naming the field the client sent in place of the Chat one the gateway made
    of it, in its param and its message: `input[2]` for `messages[3]`, `tools[1].name` for
    `tools[0].function.name`, `text.format` for `response_format`."""
    param = exc.param or ""
    chat, sent = _sent_field(body, param)
    if sent is None:
        return exc
    message = re.sub(rf"`{re.escape(chat)}(?=[`.])", f"`{sent}", exc.message)
    return TranslationError(message, sent + param[len(chat) :])


def _sent_field(body: dict[str, Any], param: str) -> tuple[str, str | None]:
    """(the Chat field `param` starts with, the field the client sent for it, if known)."""
    if (found := re.match(r"messages\[(\d+)\]", param)) is not None:
        origins = _build(body).origins
    elif (found := re.match(r"tools\[(\d+)\]\.function\.name", param)) is not None:
        origins = flat_function_fields(body.get("tools"))
    else:
        return param, CHAT_FIELDS.get(param)
    index = int(found[1])
    return found[0], origins[index] if index < len(origins) else None


def _build(body: dict[str, Any]) -> _Builder:
    builder = _Builder()
    if body.get("instructions"):
        builder.system(text_of(body["instructions"]), "instructions")
    items = body.get("input")
    if isinstance(items, str):
        builder.add({"role": "user", "content": items}, "input")
    elif isinstance(items, list):
        for index, item in enumerate(items):
            builder.item(item, f"input[{index}]")
    elif items is not None:
        raise TranslationError("`input` must be a string or a list of items.", "input")
    return builder


class _Builder:
    """Accumulates Chat messages; merges what Chat wants merged."""

    def __init__(self) -> None:
        self._system: list[str] = []
        self._messages: list[dict[str, Any]] = []
        self._sent: list[str] = []  # the field each of `_messages` was made of (`input[2]`)
        self._system_sent = ""
        self._pending_images: list[dict[str, Any]] = []
        self._images_sent = ""

    def system(self, text: str, where: str) -> None:
        if text:
            self._system.append(text)
            self._system_sent = self._system_sent or where

    def add(self, message: dict[str, Any], where: str) -> None:
        self._flush_images()
        self._messages.append(message)
        self._sent.append(where)

    def _flush_images(self) -> None:
        if self._pending_images:
            images, self._pending_images = self._pending_images, []
            self._messages.append({"role": "user", "content": images})
            self._sent.append(self._images_sent)

    def messages(self) -> list[dict[str, Any]]:
        self._flush_images()
        head = [{"role": "system", "content": "\n\n".join(self._system)}] if self._system else []
        return head + self._messages

    @property
    def origins(self) -> list[str]:
        """The field each of `messages()` was made of, in the same order."""
        self._flush_images()
        return ([self._system_sent] if self._system else []) + self._sent

    def item(self, item: Any, where: str) -> None:
        if not isinstance(item, dict):
            raise TranslationError(f"`{where}` must be an object.", where)
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind == "message":
            self._message(item, where)
        elif kind == "function_call":
            self._function_call(item, where)
        elif kind == "function_call_output":
            self._function_output(item, where)
        else:  # reasoning, item_reference, web_search_call, custom/local_shell calls…
            logger.info("responses->chat: dropped %s item at %s", kind, where)

    def _message(self, item: dict[str, Any], where: str) -> None:
        role = item.get("role")
        content = item.get("content")
        if role in ("system", "developer"):
            self.system(_plain_text(content, where), where)
            return
        if role not in ("user", "assistant"):
            raise TranslationError(f"`{where}.role` must be user, assistant, system or developer.", where)
        if role == "assistant":
            self.add({"role": "assistant", "content": _plain_text(content, where)}, where)
            return
        parts = _parts(content, where)
        if len(parts) == 1 and parts[0]["type"] == "text":
            self.add({"role": "user", "content": parts[0]["text"]}, where)
        else:
            self.add({"role": "user", "content": parts or ""}, where)

    def _function_call(self, item: dict[str, Any], where: str) -> None:
        if not _filled(item.get("call_id")) or not _filled(item.get("name")):
            raise TranslationError(f"`{where}` (function_call) needs `call_id` and `name` (strings).", where)
        name = flat_name(item["namespace"], item["name"]) if item.get("namespace") else item["name"]
        call = {
            "id": item["call_id"],
            "type": "function",
            "function": {"name": name, "arguments": item.get("arguments") or "{}"},
        }
        last = self._messages[-1] if self._messages and not self._pending_images else None
        if last is not None and last["role"] == "assistant":
            if last.get("content") == "":
                last["content"] = None
            last.setdefault("tool_calls", []).append(call)
        else:
            self.add({"role": "assistant", "content": None, "tool_calls": [call]}, where)

    def _function_output(self, item: dict[str, Any], where: str) -> None:
        if not _filled(item.get("call_id")):
            raise TranslationError(f"`{where}` (function_call_output) needs `call_id` (a string).", where)
        output = item.get("output")
        images: list[dict[str, Any]] = []
        if isinstance(output, list):
            parts = _parts(output, where)
            text = "\n".join(p["text"] for p in parts if p["type"] == "text")
            images = [p for p in parts if p["type"] != "text"]
        else:
            text = output if isinstance(output, str) else text_of(output)
        # Tool messages must directly follow the assistant turn: images wait until the last one.
        self._messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": text})
        self._sent.append(where)
        if images and not self._pending_images:
            self._images_sent = where
        self._pending_images.extend(images)


def _filled(value: Any) -> bool:
    """A non-empty string, as the API requires of ids and names (Chat's or Messages' field would
    be refused later, named as the client never sent it)."""
    return isinstance(value, str) and bool(value)


def _plain_text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            _text(p, "refusal" if p.get("type") == "refusal" else "text", where)
            for p in content
            if isinstance(p, dict) and (p.get("type") in TEXT_PART_TYPES or p.get("type") == "refusal")
        )
    if content is None:
        return ""
    raise TranslationError(f"`{where}.content` must be a string or a list of parts.", where)


def _text(part: dict[str, Any], field: str, where: str) -> str:
    """A text or refusal part's words, which the client must send as a string (a 400 otherwise)."""
    text = part.get(field) or ""
    if not isinstance(text, str):
        raise TranslationError(f"`{where}` has a {part.get('type')} part whose `{field}` is not a string.", where)
    return text


def _parts(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise TranslationError(f"`{where}.content` must be a string or a list of parts.", where)
    parts: list[dict[str, Any]] = []
    for part in content:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind in TEXT_PART_TYPES:
            parts.append({"type": "text", "text": _text(part, "text", where)})
        elif kind == "refusal":
            parts.append({"type": "text", "text": _text(part, "refusal", where)})
        elif kind == "input_image":
            url = part.get("image_url")
            if not _filled(url):
                raise TranslationError(
                    f"`{where}` has an input_image without `image_url` (file ids are not supported).", where
                )
            image: dict[str, Any] = {"url": url}
            if part.get("detail") in ("low", "high"):
                image["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": image})
        elif kind == "input_file":
            raise TranslationError(f"`{where}` has an input_file; this model's channel accepts text and images.", where)
        else:
            logger.info("responses->chat: dropped %s part in %s", kind, where)
    return parts


def _function(tool: dict[str, Any]) -> dict[str, Any] | None:
    if tool.get("type") != "function":
        logger.info("responses->chat: dropped %s tool %s", tool.get("type"), tool.get("name", ""))
        return None
    if not tool.get("name") or not isinstance(tool["name"], str):
        raise TranslationError("Each function tool needs a `name` (a string).", "tools")
    return chat_function(tool["name"], tool.get("parameters"), tool.get("description"))


def _tool_choice(choice: Any) -> Any:
    if choice is None or choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and choice.get("name"):
        return {"type": "function", "function": {"name": choice["name"]}}
    # allowed_tools, hosted tools, mcp…: nothing narrower to ask of a Chat upstream
    logger.info("responses->chat: tool_choice %r sent as auto", choice)
    return "auto"


def _response_format(text: Any) -> dict[str, Any] | None:
    fmt = text.get("format") if isinstance(text, dict) else None
    if not isinstance(fmt, dict):
        return None
    if fmt.get("type") == "json_object":
        return {"type": "json_object"}
    if fmt.get("type") == "json_schema":
        schema: dict[str, Any] = {"name": fmt.get("name") or "response", "schema": fmt.get("schema") or {}}
        if fmt.get("strict") is not None:
            schema["strict"] = fmt["strict"]
        if fmt.get("description"):
            schema["description"] = fmt["description"]
        return {"type": "json_schema", "json_schema": schema}
    return None
