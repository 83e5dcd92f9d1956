"""The async hot path: OpenAI and Anthropic surfaces, admission, routing, calls, SSE relay, usage."""
