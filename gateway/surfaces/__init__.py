"""API surfaces besides OpenAI's own: Anthropic Messages (Claude Code) and OpenAI Responses (Codex).

Each surface is a handler over the shared pipeline (`gateway.pipeline`): the same key scope,
limits, failover and usage as Chat Completions. Requests go through unchanged to channels that
speak the surface's API natively and are translated (`gateway.translate`) for all others.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.asgi import RouteTable


def register(routes: RouteTable) -> None:
    """Add the surfaces' paths to the gateway's route table (called once by `gateway.asgi`)."""
    from . import messages, responses

    routes.register("POST", "/messages", messages.create_message)
    routes.register("POST", "/messages/count_tokens", messages.count_tokens)
    routes.register_exact("HEAD", "/api/hello", messages.hello)
    routes.register_exact("GET", "/api/hello", messages.hello)
    # Claude Code's model discovery sends `anthropic-version`; everyone else gets OpenAI's list.
    routes.register("GET", "/models", messages.list_models, bare=False)
    routes.register("POST", "/responses", responses.create_response)
    routes.register("GET", "/responses", responses.refuse_get)
