"""Translation between the Anthropic Messages / OpenAI Responses APIs and Chat Completions.

Most channels speak only Chat Completions, while Claude Code speaks only Messages and Codex only
Responses; Anthropic channels speak only Messages. One module per direction, each made of pure
functions over dicts (requests, complete responses) and stream translators fed one parsed event
at a time, so the tables in tests/translate can pin every shape down without a server:

    anthropic_request   Messages request        -> Chat Completions request
    anthropic_response  Chat Completion / chunks -> Messages response / SSE events (+ errors)
    responses_request   Responses request       -> Chat Completions request
    responses_response  Chat Completion / chunks -> Responses object / SSE events (+ errors)
    chat_request        Chat Completions request -> Messages request (Chat clients on Anthropic channels)
    chat_response       Messages response / SSE events -> Chat Completion / chunks (+ errors)

The gateway surfaces (gateway/surfaces/) do the I/O around them.
"""

from gateway.translate.common import TranslationError

__all__ = ["TranslationError"]
