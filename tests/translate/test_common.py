"""SSE parsing, SSE encoding and the count_tokens estimate shared by both surfaces."""

from __future__ import annotations

import json

import pytest

from gateway.translate.common import (
    IMAGE_TOKENS,
    MESSAGE_OVERHEAD_TOKENS,
    chat_chunks,
    encode_sse,
    estimate_tokens,
    parse_arguments,
    text_tokens,
)
from gateway.usage import estimate_tokens as estimate_value_tokens


async def _bytes(*pieces: bytes):
    for piece in pieces:
        yield piece


async def _parse(*pieces: bytes) -> list[dict]:
    return [c async for c in chat_chunks(_bytes(*pieces))]


async def test_it_parses_chat_sse_split_at_arbitrary_byte_boundaries():
    body = b'data: {"a": 1}\n\n: keep-alive\n\ndata:{"b": "x\\ny"}\r\n\r\ndata: [DONE]\n\ndata: {"after": 1}\n\n'
    whole = await _parse(body)
    assert whole == [{"a": 1}, {"b": "x\ny"}]
    for size in (1, 3, 7):
        assert await _parse(*[body[i : i + size] for i in range(0, len(body), size)]) == whole


async def test_it_skips_garbage_and_keeps_a_final_line_without_newline():
    assert await _parse(b'data: not json\n\nevent: ping\ndata: []\n\ndata: {"last": true}') == [{"last": True}]


def test_sse_frames_carry_the_event_name_the_sdks_dispatch_on():
    frame = encode_sse({"type": "message_stop"})
    assert frame == b'event: message_stop\ndata: {"type":"message_stop"}\n\n'


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [("", {}), ("  ", {}), ('{"a": 1}', {"a": 1}), ("[1]", {"value": [1]}), ("{oops", {"raw_arguments": "{oops"})],
)
def test_tool_arguments_always_parse_to_an_object(arguments, expected):
    assert parse_arguments(arguments) == expected


def test_the_token_estimate_counts_text_tools_messages_and_images():
    chat = {
        "messages": [
            {"role": "system", "content": "abcd" * 10},
            {
                "role": "user",
                "content": [{"type": "text", "text": "abcd"}, {"type": "image_url", "image_url": {"url": "x"}}],
            },
        ],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
    }
    tools_chars = len(json.dumps(chat["tools"]))
    text_chars = 40 + 1 + 4 + 1 + tools_chars  # joined with newlines
    expected = -(-text_chars // 4) + 2 * MESSAGE_OVERHEAD_TOKENS + IMAGE_TOKENS
    assert estimate_tokens(chat) == expected
    assert estimate_tokens(chat, counted=10) == 10 + 2 * MESSAGE_OVERHEAD_TOKENS + IMAGE_TOKENS


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("", 0),
        ("word " * 100, 125),  # ASCII: 4 characters a token, rounded up
        ("请把这个函数改写成异步的，并补上单元测试。", 11),  # 21 wide characters (Qwen: 15 tokens)
        ("def f(): return '你好'", 6),  # 18 narrow + 2 wide
        ("こんにちは、世界", 4),  # kana, CJK punctuation and ideographs
        ("안녕하세요", 3),  # hangul
        ("naïve café", 3),  # accents are not wide: 4 characters a token still
        ("Привет, мир", 3),
    ],
)
def test_text_tokens_counts_cjk_at_half_a_token_a_character_and_the_rest_at_four_characters(text, tokens):
    assert text_tokens(text) == tokens
    # The request-side estimate (strings, lists, messages) agrees with it on every shape.
    assert estimate_value_tokens(text) == tokens
    assert estimate_value_tokens([text, text]) == 2 * tokens
    assert estimate_value_tokens({"role": "user", "content": text}) == tokens


def test_a_prompt_of_token_ids_is_counted_one_token_an_id():
    """Completions' `prompt` and Embeddings' `input` may be token ids (one list, or one per input)."""
    assert estimate_value_tokens([101, 2023, 2003]) == 3
    assert estimate_value_tokens([[1] * 500, [2] * 300]) == 800
    assert estimate_value_tokens([True, "abcd"]) == 1  # a bool is no token id
