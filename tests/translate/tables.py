"""Table loading and golden-file checking for the translation tests.

Inputs live in tests/translate/tables/<table>.json; the expected translations in
tests/translate/golden/<table>.<direction>.json, keyed by case name. `UPDATE_GOLDEN=1` rewrites the
golden files from the current code: review the diff before committing it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
TABLES = HERE / "tables"
GOLDEN = HERE / "golden"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"

_pending: dict[Path, dict[str, Any]] = {}


def cases(table: str) -> list[Any]:
    """pytest params for every case of a table, with the case name as the test id."""
    import pytest

    rows = json.loads((TABLES / f"{table}.json").read_text())
    return [pytest.param(row, id=row["name"]) for row in rows]


def check_golden(table: str, direction: str, name: str, actual: Any) -> None:
    """Compare with the stored expectation, or record it when UPDATE_GOLDEN=1."""
    path = GOLDEN / f"{table}.{direction}.json"
    actual = json.loads(json.dumps(actual))  # tuples -> lists, as stored
    if UPDATE:
        data = _pending.setdefault(path, json.loads(path.read_text()) if path.exists() else {})
        data[name] = actual
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(json.dumps(data, indent=1, ensure_ascii=False, sort_keys=True) + "\n")
        return
    assert path.exists(), f"{path} missing: run with UPDATE_GOLDEN=1 and review it"
    expected = json.loads(path.read_text())
    assert name in expected, f"no golden entry {name!r} in {path.name}: run with UPDATE_GOLDEN=1 and review it"
    assert actual == expected[name]


class Ids:
    """Deterministic ids for golden output: prefix + counter."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n:04d}"


class UpstreamDropped(ConnectionError):
    """What the chunk source raises in the `raise_after` cases."""


async def chunk_source(row: dict[str, Any]):
    """The case's chunks as an async iterator, failing after `raise_after` chunks if asked."""
    for i, chunk in enumerate(row["chunks"]):
        if row.get("raise_after") == i:
            raise UpstreamDropped("connection reset by peer")
        yield chunk
    if row.get("raise_after") == len(row["chunks"]):
        raise UpstreamDropped("connection reset by peer")


def assemble(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """The non-streamed Chat Completion equivalent to a finished chunk sequence.

    Written independently of the translators so that streamed and whole translations can be
    checked against each other.
    """
    message: dict[str, Any] = {"role": "assistant", "content": None}
    text, reasoning, calls, finish, usage, stop_reason = "", "", {}, None, None, None
    order: list[int] = []
    for chunk in chunks:
        usage = chunk.get("usage") or usage
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            text += delta.get("content") or ""
            reasoning += delta.get("reasoning_content") or ""
            for call in delta.get("tool_calls") or []:
                key = call.get("index", order[-1] if order and not call.get("id") else len(order))
                if key not in calls:
                    order.append(key)
                    calls[key] = {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
                if call.get("id"):
                    calls[key]["id"] = call["id"]
                function = call.get("function") or {}
                calls[key]["function"]["name"] += function.get("name") or ""
                calls[key]["function"]["arguments"] += function.get("arguments") or ""
            if choice.get("finish_reason"):
                finish = choice["finish_reason"]
                stop_reason = choice.get("stop_reason")
    message["content"] = text or (None if calls else "")
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = [calls[k] for k in order]
    choice = {"index": 0, "message": message, "finish_reason": finish}
    if stop_reason is not None:
        choice["stop_reason"] = stop_reason
    out: dict[str, Any] = {"id": "chatcmpl-x", "object": "chat.completion", "choices": [choice]}
    if usage:
        out["usage"] = usage
    return out
