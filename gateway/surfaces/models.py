"""Model discovery: `GET /v1/models` and `GET /v1/models/{id}`, and Claude Code's `/api/hello` probe.

Requests with `anthropic-version` (Claude Code) get Anthropic's shapes (`display_name`,
`created_at`, paging) and errors; everyone else gets OpenAI's. A model served by an on-demand
deployment carries the same extension fields in both shapes: `on_demand: true` and `cold` (no
server is up: the next request starts it and waits, see `gateway.ondemand`).
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any
from urllib.parse import parse_qsl

from channels.choices import ModelKind
from gateway.admission import not_priced
from gateway.auth import authenticate
from gateway.cache import KeyInfo, ModelInfo, snapshot
from gateway.catalog import limits_for, payable, resolve_model, usable_models
from gateway.http import GatewayError, Request, send_bytes, send_json

from .messages import send_anthropic_error


async def list_models(req: Request) -> None:
    if "anthropic-version" in req.headers:
        await _list_anthropic(req)
        return
    key = await authenticate(req)
    models = sorted(usable_models(key, await snapshot.get_catalog()), key=lambda m: m.name)
    await send_json(req.send, 200, {"object": "list", "data": [_openai_model(m, key) for m in models]})


async def _list_anthropic(req: Request) -> None:
    try:
        key = await authenticate(req)
    except GatewayError as exc:
        await send_anthropic_error(req, exc)
        return
    models = sorted(usable_models(key, await snapshot.get_catalog()), key=lambda m: m.name)
    # Anthropic's list is of models that answer Messages (Claude Code's gateway model discovery).
    data = [_anthropic_model(m, key) for m in models if m.kind != ModelKind.EMBEDDING]
    query = dict(parse_qsl(req.scope.get("query_string", b"").decode("latin-1")))
    ids = [d["id"] for d in data]
    if query.get("after_id") in ids:
        data = data[ids.index(query["after_id"]) + 1 :]
    elif query.get("before_id") in ids:
        data = data[: ids.index(query["before_id"])]
    try:
        limit = max(1, min(int(query.get("limit", 1000)), 1000))
    except ValueError:
        limit = 1000
    page, more = data[:limit], len(data) > limit
    await send_json(
        req.send,
        200,
        {
            "data": page,
            "has_more": more,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
        },
    )


async def get_model(req: Request) -> None:
    name = req.subpath[len("/models/") :]
    if "anthropic-version" not in req.headers:
        key = await authenticate(req)
        model = resolve_model(key, await snapshot.get_catalog(), name)
        if not model.has_routes and model.starts_for(key.local_only) is None:
            raise GatewayError(404, f"The model '{name}' has no channel right now.", code="model_not_found")
        _check_payable(key, model)
        await send_json(req.send, 200, _openai_model(model, key))
        return
    try:
        key = await authenticate(req)
        model = resolve_model(key, await snapshot.get_catalog(), name)
        _check_payable(key, model)
    except GatewayError as exc:
        await send_anthropic_error(req, exc)
        return
    await send_json(req.send, 200, _anthropic_model(model, key))


def _check_payable(key: KeyInfo, model: ModelInfo) -> None:
    """A budgeted key is told of a model it would be refused for want of a price, as a request
    would be (the list leaves such models out: `catalog.usable_models`)."""
    if key.budgets and not payable(model, time.time(), local=key.local_only):
        raise not_priced(model)


async def hello(req: Request) -> None:
    """Claude Code's startup connectivity probe."""
    await send_bytes(req.send, 200, b"" if req.method == "HEAD" else b'{"ok":true}')


def _openai_model(m: ModelInfo, key: KeyInfo) -> dict[str, Any]:
    window, output = limits_for(m, key)
    return {
        "id": m.name,
        "object": "model",
        "created": m.created,
        "owned_by": "portal",
        "max_model_len": window,
        "context_window": window,
        "max_output_tokens": output,
        "description": m.description,
        "kind": m.kind,  # chat or embedding (the portal's model kind): the playground lists chat models only
        **_on_demand(m, key),
    }


def _anthropic_model(m: ModelInfo, key: KeyInfo) -> dict[str, Any]:
    created_at = dt.datetime.fromtimestamp(m.created or 0, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"type": "model", "id": m.name, "display_name": m.name, "created_at": created_at, **_on_demand(m, key)}


def _on_demand(m: ModelInfo, key: KeyInfo) -> dict[str, Any]:
    """The extension fields of an on-demand model, the same in both shapes (none for the others):
    cold while no channel this key may use serves it (its request starts it)."""
    if m.on_demand is None:
        return {}
    return {"on_demand": True, "cold": m.starts_for(key.local_only) is not None}
