"""Anthropic Messages request -> Chat Completions request.

What maps: `system` (string or text blocks) and system-role messages (Claude Code's
`mid-conversation-system` beta) -> one leading system message; text and image blocks
(base64 or url) -> text / `image_url` parts; assistant `tool_use` -> `tool_calls`; user
`tool_result` -> `tool` messages placed right after the assistant turn (Chat requires that), with
any images from results moved to a user message after them; `tools` (`input_schema` ->
`parameters`), `tool_choice` (auto/any/tool/none, `disable_parallel_tool_use`), `stop_sequences`,
`max_tokens`, `temperature`, `top_p`, `stream`.

What is dropped on purpose: `metadata`, `thinking` and `output_config.effort` (Chat has no portable
equivalent; prior
`thinking` blocks are not sent back), `top_k` (not part of Chat Completions; cloud providers reject
it), `cache_control`, `service_tier`, `container`, `mcp_servers`, `context_management`, server
tools (web search, bash, text editor…) the upstream cannot run, and content kinds without a Chat
equivalent (search results, server tool results); each drop is logged at info level.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from gateway.translate.common import (
    OPENAI_TOOL_NAME_MAX,
    TranslationError,
    chat_function,
    chat_tools,
    refuse_tool_name,
    text_of,
)

logger = logging.getLogger(__name__)

# Anthropic client tools have no `type`, or `type: "custom"`; anything else is a server tool
# (`web_search_20250305`, `bash_20250124`, …) that only Anthropic can execute.
CLIENT_TOOL_TYPES = (None, "custom")


def to_chat_request(body: dict[str, Any]) -> dict[str, Any]:
    """Translate a Messages request body; raises TranslationError for what cannot be expressed."""
    if not isinstance(body, dict):
        raise TranslationError("The request body must be a JSON object.")
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise TranslationError("`messages` must be a list.", "messages")

    out: list[dict[str, Any]] = []
    system = [_system_text(body.get("system"))]
    for index, message in enumerate(messages):
        if isinstance(message, dict) and message.get("role") == "system":
            # Claude Code's `mid-conversation-system` beta puts system messages among the turns;
            # many chat templates (Qwen's among them) accept a system message only first.
            system.append(_system_text(message.get("content")))
            continue
        out.extend(_message(message, index))
    system_text = "\n\n".join(s for s in system if s)
    if system_text:
        out.insert(0, {"role": "system", "content": system_text})

    chat: dict[str, Any] = {"model": body.get("model"), "messages": out}
    if body.get("max_tokens") is not None:
        chat["max_tokens"] = body["max_tokens"]
    for name in ("temperature", "top_p"):
        if body.get(name) is not None:
            chat[name] = body[name]
    stops = body.get("stop_sequences")
    if stops:
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            raise TranslationError("`stop_sequences` must be a list of strings.", "stop_sequences")
        chat["stop"] = list(stops)

    tools = chat_tools(body.get("tools"), _function)
    choice = body.get("tool_choice")
    if tools:
        chat["tools"] = tools
        if choice is not None:
            chat.update(_tool_choice(choice))

    if body.get("stream"):
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    ignored = ("metadata", "thinking", "top_k", "service_tier", "container", "output_config", "context_management")
    dropped = sorted(k for k in ignored if k in body)
    if dropped:
        logger.info("messages->chat: ignored fields %s", ", ".join(dropped))
    return chat


def refuse_empty_messages(body: dict[str, Any]) -> None:
    """Anthropic's own 400s for a message without words (content `""` or `[]`, or a text block,
    a string content being one, empty or only whitespace), said before any upstream is asked:
    only the final assistant message (a prefill) may be so. A Chat upstream got an empty user
    message instead, and answered it."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or (index == len(messages) - 1 and message.get("role") == "assistant"):
            continue
        where, content = f"messages[{index}]", message.get("content")
        if content in ("", []):
            raise TranslationError(
                f"`{where}`: all messages must have non-empty content except for the optional final assistant message.",
                where,
            )
        if isinstance(content, str):
            _refuse_blank_text(content, f"{where}.content")
        elif isinstance(content, list):
            for number, block in enumerate(content):
                if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
                    _refuse_blank_text(block["text"], f"{where}.content[{number}]")


def _refuse_blank_text(text: str, where: str) -> None:
    if not text:
        raise TranslationError(f"`{where}`: text content blocks must be non-empty.", where)
    if not text.strip():
        raise TranslationError(f"`{where}`: text content blocks must contain non-whitespace text.", where)


def refuse_openai_tool_names(body: dict[str, Any]) -> None:
    """The client tools' names, and those of the `tool_use` blocks of earlier assistant turns (sent
    as `tool_calls`), as a cloud OpenAI-compatible channel takes them (64 characters where Anthropic
    allows 128), refused by the client's own field before that channel is asked."""
    named = []
    tools = body.get("tools")
    for index, tool in enumerate(tools if isinstance(tools, list) else []):
        if isinstance(tool, dict) and tool.get("type") in CLIENT_TOOL_TYPES:
            named.append((tool.get("name"), f"tools[{index}].name"))
    messages = body.get("messages")
    for index, message in enumerate(messages if isinstance(messages, list) else []):
        content = message.get("content") if isinstance(message, dict) and message.get("role") == "assistant" else None
        for number, block in enumerate(content if isinstance(content, list) else []):
            if isinstance(block, dict) and block.get("type") == "tool_use":
                named.append((block.get("name"), f"messages[{index}].content[{number}].name"))
    for name, where in named:
        refuse_tool_name(name, where, channel="OpenAI-compatible cloud", longest=OPENAI_TOOL_NAME_MAX)


def _system_text(system: Any) -> str:
    if system is None:
        return ""
    if isinstance(system, str):
        return system
    if isinstance(system, list):
        texts = [_text(b, "system") for b in system if isinstance(b, dict) and b.get("type") == "text"]
        return "\n\n".join(t for t in texts if t)
    raise TranslationError("`system` must be a string or a list of text blocks.", "system")


def _blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list) and all(isinstance(b, dict) for b in content):
        return content
    raise TranslationError(f"`{where}.content` must be a string or a list of content blocks.", where)


def _message(message: Any, index: int) -> list[dict[str, Any]]:
    where = f"messages[{index}]"
    if not isinstance(message, dict):
        raise TranslationError(f"`{where}` must be an object.", where)
    role = message.get("role")
    blocks = _blocks(message.get("content"), where)
    if role == "assistant":
        return [_assistant(blocks, where)]
    if role == "user":
        return _user(blocks, where)
    raise TranslationError(f"`{where}.role` must be 'user', 'assistant' or 'system'.", where)


def _assistant(blocks: list[dict[str, Any]], where: str) -> dict[str, Any]:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "text":
            texts.append(_text(block, where))
        elif kind == "tool_use":
            calls.append(
                {
                    "id": block.get("id"),
                    "type": "function",
                    "function": {
                        "name": block.get("name"),
                        "arguments": json.dumps(block.get("input") or {}, ensure_ascii=False),
                    },
                }
            )
        else:  # thinking, redacted_thinking, server tool blocks: nothing the upstream can use
            logger.info("messages->chat: dropped assistant %s block in %s", kind, where)
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts or not calls else None}
    if calls:
        message["tool_calls"] = calls
    return message


def _user(blocks: list[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    tool_messages: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "tool_result":
            text, images = _tool_result(block, where)
            tool_messages.append({"role": "tool", "tool_call_id": block.get("tool_use_id"), "content": text})
            parts.extend(images)
        else:
            part = _part(block, where)
            if part is not None:
                parts.append(part)
    if blocks and not parts and not tool_messages:  # every block dropped: an empty turn would be sent
        kinds = ", ".join(sorted({str(b.get("type")) for b in blocks}))
        raise TranslationError(
            f"`{where}` has no block this model's channel can take ({kinds}); send text, images or tool results.",
            where,
        )
    out = list(tool_messages)
    if parts or not tool_messages:
        out.append({"role": "user", "content": _content(parts)})
    return out


def _tool_result(block: dict[str, Any], where: str) -> tuple[str, list[dict[str, Any]]]:
    content = block.get("content")
    texts: list[str] = []
    images: list[dict[str, Any]] = []
    if isinstance(content, str):
        texts.append(content)
    elif isinstance(content, list):
        for item in content:
            part = _part(item, where) if isinstance(item, dict) else None
            if part is None:
                continue
            if part["type"] == "text":
                texts.append(part["text"])
            else:
                images.append(part)
    text = "\n".join(texts)
    if block.get("is_error"):
        text = f"Error: {text}" if text else "Error"
    return text, images


def _part(block: dict[str, Any], where: str) -> dict[str, Any] | None:
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "text": _text(block, where)}
    if kind == "image":
        return {"type": "image_url", "image_url": {"url": _image_url(_source(block, where), where)}}
    if kind == "document":
        source = _source(block, where)
        if source.get("type") == "text":
            return {"type": "text", "text": source.get("data", "")}
        if source.get("type") == "content":
            return {"type": "text", "text": text_of(source.get("content"))}
        raise TranslationError(
            f"`{where}` has a {source.get('type')!r} document block; this model's channel accepts only text "
            "and images.",
            where,
        )
    logger.info("messages->chat: dropped %s block in %s", kind, where)
    return None


def _text(block: dict[str, Any], where: str) -> str:
    """A text block's `text`, which the client must send as a string (a 400 otherwise, as Anthropic's)."""
    text = block.get("text", "")
    if not isinstance(text, str):
        raise TranslationError(f"`{where}` has a text block whose `text` is not a string.", where)
    return text


def _source(block: dict[str, Any], where: str) -> dict[str, Any]:
    """An image or document block's `source` object."""
    source = block.get("source")
    if not isinstance(source, dict):
        raise TranslationError(f"`{where}` has a {block.get('type')} block whose `source` is not an object.", where)
    return source


def _image_url(source: dict[str, Any], where: str) -> str:
    if source.get("type") == "base64":
        return f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}"
    if source.get("type") == "url" and source.get("url"):
        url: str = source["url"]
        return url
    raise TranslationError(f"`{where}` has an image whose source is neither base64 nor url.", where)


def _content(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """A lone text part as a plain string: every chat template understands that."""
    if len(parts) == 1 and parts[0]["type"] == "text":
        text: str = parts[0]["text"]
        return text
    if not parts:
        return ""
    return parts


def _function(tool: dict[str, Any]) -> dict[str, Any] | None:
    if tool.get("type") not in CLIENT_TOOL_TYPES:
        logger.info("messages->chat: dropped server tool %s (%s)", tool.get("name"), tool.get("type"))
        return None
    if not tool.get("name") or not isinstance(tool["name"], str):
        raise TranslationError("Each tool needs a `name` (a string).", "tools")
    return chat_function(tool["name"], tool.get("input_schema"), tool.get("description"))


def _tool_choice(choice: Any) -> dict[str, Any]:
    if not isinstance(choice, dict):
        raise TranslationError("`tool_choice` must be an object.", "tool_choice")
    kind = choice.get("type")
    out: dict[str, Any]
    if kind == "auto":
        out = {"tool_choice": "auto"}
    elif kind == "any":
        out = {"tool_choice": "required"}
    elif kind == "none":
        out = {"tool_choice": "none"}
    elif kind == "tool":
        if not choice.get("name"):
            raise TranslationError("`tool_choice` of type 'tool' needs a `name`.", "tool_choice")
        out = {"tool_choice": {"type": "function", "function": {"name": choice["name"]}}}
    else:
        raise TranslationError("`tool_choice.type` must be one of auto, any, tool, none.", "tool_choice")
    if choice.get("disable_parallel_tool_use") and kind != "none":
        out["parallel_tool_calls"] = False
    return out
