"""`ArgumentsGuard`: a Chat tool call's streamed arguments stay one JSON object on the Messages side.

The check is the one the anthropic SDK makes as a stream comes (`jiter.from_json(...,
partial_mode=True)` on the text so far, `messages.stream()`), then `json.loads` of the whole at the
block's end. The properties run derandomized (the same examples on every run: CI is no lottery);
they held for 15,000 random examples each when written."""

from __future__ import annotations

import json

import jiter
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gateway.translate.arguments import ArgumentsGuard

scalars = st.none() | st.booleans() | st.integers(-(10**12), 10**12) | st.floats(allow_nan=False, allow_infinity=False)
texts = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
values = st.recursive(
    scalars | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=12,
)
objects = st.dictionaries(texts, values, max_size=5)
layouts = st.sampled_from([{}, {"indent": 2}, {"separators": (",", ":")}, {"ensure_ascii": False}])


def pieces_of(text: str, cuts: list[int]) -> list[str]:
    at = sorted({min(c, len(text)) for c in cuts})
    return [text[a:b] for a, b in zip([0, *at], [*at, len(text)], strict=True)]


def stream(guard: ArgumentsGuard, pieces: list[str]) -> str:
    """What the client gets, checked after every delta as the SDK checks it, and the close."""
    sent = ""
    for piece in pieces:
        out = guard.feed(piece)
        if out:
            sent += out
            jiter.from_json(sent.encode(), partial_mode=True)  # raises where the SDK would
    return sent + guard.close()


@settings(max_examples=300, deadline=None, derandomize=True)
@given(objects, layouts, st.lists(st.integers(0, 400), max_size=8))
def test_json_arguments_pass_through_unchanged_in_any_pieces(obj, layout, cuts):
    text = json.dumps(obj, **layout)
    guard = ArgumentsGuard()
    assert stream(guard, pieces_of(text, cuts)) == text


@settings(max_examples=300, deadline=None, derandomize=True)
@given(objects, layouts, st.integers(0, 400))
def test_arguments_cut_short_are_left_as_they_are(obj, layout, length):
    text = json.dumps(obj, **layout)[:length]
    guard = ArgumentsGuard()
    sent = stream(guard, [text])  # as the Messages API leaves a tool call max_tokens cut...
    assert text.startswith(sent)
    assert sent == text or unfinished_escape(text[len(sent) :])  # ...but for an escape not yet whole


B = "\\"
JUNK = ["'", "}", "]", ",", "x", "\n", "01", B + "q", B + "u12z", "tru,", "-.", "1e+", ":", B + "ud83dx", B + "ude00"]


@settings(max_examples=500, deadline=None, derandomize=True)
@example({}, {}, 0, "\n", "0", [])  # white space, then no object: found by CI's run
@example({}, {}, 0, "\n", "", [])  # white space alone
@given(objects, layouts, st.integers(0, 400), st.sampled_from(JUNK), st.text(max_size=6), st.lists(st.integers(0, 400)))
def test_anything_else_ends_as_one_object_that_keeps_every_character(obj, layout, length, junk, more, cuts):
    text = json.dumps(obj, **layout)[:length] + junk + more
    guard = ArgumentsGuard()
    sent = ""
    for piece in pieces_of(text, cuts):
        sent += guard.feed(piece)
        jiter.from_json(sent.encode() or b"{}", partial_mode=True)  # the SDK's check, as they come
    body = text.lstrip(" \t\r\n")  # (white space before the object is not sent)
    assert body.startswith(sent)  # what is sent is the model's text, unchanged
    rest = guard.close()
    if not rest:  # all JSON (maybe cut short: an unfinished escape is not sent), or prose after it
        left = body[len(sent) :]
        assert complete(sent) or not left or unfinished_escape(left), (text, sent)
        return
    whole = json.loads(sent + rest)
    assert isinstance(whole, dict)
    assert body[len(sent) :] in strings_in(whole), (text, sent, whole)  # held back: kept, whole


def unfinished_escape(text: str) -> bool:
    """At most a \\u escape and a surrogate's pair, not yet whole (`\\ud83d\\ude0`)."""
    return text.startswith(B) and len(text) <= 11 and text.count(B) <= 2


def complete(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def strings_in(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings_in(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings_in(v)]
    return []


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ("{'city': 'Paris'}", {"raw_arguments": "'city': 'Paris'}"}),
        ('{"city": "Paris", \'unit\': c}', {"city": "Paris", "raw_arguments": "'unit': c}"}),
        ('{"code": "a\nb"}', {"code": "a", "raw_arguments": '\nb"}'}),
        ('{"n": 01}', {"n": 0, "raw_arguments": "1}"}),
        ('{"n": -}', {"n": -0, "raw_arguments": "}"}),
        ('{"ok": tru}', {"ok": True, "raw_arguments": "}"}),
        ('{"list": [1, 2 3]}', {"list": [1, 2, "3]}"]}),
        ('{"k" "v"}', {"k": '"v"}'}),
        ('{"path": "C:\\Users"}', {"path": "C:", "raw_arguments": '\\Users"}'}),
        ("Sure! Here it is", {"raw_arguments": "Sure! Here it is"}),
        ("[1, 2]", {"raw_arguments": "[1, 2]"}),
    ],
)
def test_what_models_write_instead_of_json(arguments, expected):
    guard = ArgumentsGuard()
    assert json.loads(stream(guard, list(arguments))) == expected  # one character at a time


def test_prose_after_a_complete_object_is_dropped():
    guard = ArgumentsGuard()
    assert stream(guard, ['{"a": 1}', " I called the tool."]).rstrip() == '{"a": 1}'
