"""The gateway's API surfaces, one module each, every path listed in `gateway.asgi.ROUTES`.

`chat` (OpenAI Chat Completions, Completions, Embeddings), `messages` (Anthropic Messages, for
Claude Code), `responses` (OpenAI Responses, for Codex) and `models` (discovery in OpenAI's or
Anthropic's shape). Each handler runs the same stages: `admission.open_call` (key, model,
limits), a `call.Plan` over `call.routes` (`catalog.select_routes`), `Call.forward` (failover), then
`relay.relay` or `Call.send_json`. Messages and Responses go through unchanged to channels
that speak them natively and are translated (`gateway.translate`, `translated`) for all others.
"""
