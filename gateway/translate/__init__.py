"""Translation between the Anthropic Messages / OpenAI Responses APIs and Chat Completions.

Most channels speak only Chat Completions, while Claude Code speaks only Messages and Codex only
Responses. One module per direction, each made of pure functions over dicts (requests, complete
responses) and async iterators of parsed events (streams), so the tables in tests/translate can pin
every shape down without a server:

    anthropic_request   Messages request        -> Chat Completions request
    anthropic_response  Chat Completion / chunks -> Messages response / SSE events (+ errors)
    responses_request   Responses request       -> Chat Completions request
    responses_response  Chat Completion / chunks -> Responses object / SSE events (+ errors)

The gateway surfaces (gateway/surfaces/) do the I/O around them.
"""

from gateway.translate.common import TranslationError

__all__ = ["TranslationError"]
