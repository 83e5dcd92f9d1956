"""The playground: a page where a signed-in user tries models through the real gateway, with a
short-lived credential bound to their browser session instead of an API key (`credential`)."""
