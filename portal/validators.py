"""Rules for values the portal sends upstream in HTTP headers (a channel's API key, an MCP
server's token and extra headers). HTTP carries header names and values as ASCII bytes: httpx
refuses anything else with a UnicodeEncodeError, so such a value is refused when it is typed, not
when the first request is sent."""

from __future__ import annotations

import re

# RFC 9110 `token`: the characters a header name may be made of.
HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def is_header_name(name: str) -> bool:
    return HEADER_NAME.fullmatch(name) is not None


def sendable_in_header(value: str) -> bool:
    """Whether `value` can be sent as a header value: visible ASCII, spaces and tabs only (no
    other script, no control character, no line break)."""
    return all(c == "\t" or " " <= c <= "~" for c in value)
