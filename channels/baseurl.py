"""Base URL normalisation: one canonical form per upstream, and a note for each thing changed.

People paste `https://x/api`, `https://x/api/v1/`, `https://x/v1/chat/completions?utm_source=…`,
with spaces or a newline. We store `scheme://host[:port]/path/v1` (no trailing slash, no query),
and the gateway appends `/chat/completions` and friends. A path that already carries a version
segment (`/v1beta/openai`, `/v2`) is kept as it is, because such providers do not live under `/v1`.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

from django.utils.translation import gettext as _

ENDPOINT_SUFFIXES = (
    "/chat/completions",
    "/completions",
    "/embeddings",
    "/models",
    "/messages",
    "/responses",
)
_VERSION = re.compile(r"^v\d+(?:(?:alpha|beta)\d*)?$")


class BaseURLError(ValueError):
    pass


def normalize_base_url(raw: str) -> tuple[str, list[str]]:
    """Return (canonical URL, notes on what was changed). Raise BaseURLError if unusable."""
    notes: list[str] = []
    if raw is None:
        raise BaseURLError(_("Enter a base URL."))
    url = raw.strip()
    if url != raw:
        notes.append(_("removed surrounding whitespace"))
    if not url:
        raise BaseURLError(_("Enter a base URL."))
    if any(c.isspace() for c in url):
        raise BaseURLError(_("A URL cannot contain spaces."))
    if "://" not in url:
        raise BaseURLError(_("Include the scheme, e.g. https://api.example.com/v1"))
    try:
        parts = urlsplit(url)
        hostname = parts.hostname
    except ValueError:  # e.g. an IPv6 literal without its closing bracket
        raise BaseURLError(
            _("The host name is not valid (an IPv6 address goes in brackets: http://[::1]:8000).")
        ) from None
    after_bracket = parts.netloc.rpartition("@")[2].partition("]")[2] if "[" in parts.netloc else ""
    if after_bracket and not after_bracket.startswith(":"):
        raise BaseURLError(_("The host name is not valid (an IPv6 address goes in brackets: http://[::1]:8000)."))
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise BaseURLError(_("Only http:// and https:// URLs are supported."))
    if not hostname:
        raise BaseURLError(_("The URL has no host name."))
    if parts.username or parts.password:
        raise BaseURLError(_("Do not put credentials in the URL; use the API key field."))
    try:
        port = parts.port
    except ValueError:
        raise BaseURLError(_("The port is not a number between 1 and 65535.")) from None
    if parts.query:
        notes.append(_("dropped the query string ?%(query)s") % {"query": parts.query})
    if parts.fragment:
        notes.append(_("dropped the #fragment"))

    path = re.sub(r"/{2,}", "/", parts.path)
    if path.rstrip("/") != parts.path.rstrip("/"):
        notes.append(_("collapsed repeated slashes"))
    path = path.rstrip("/")
    for suffix in ENDPOINT_SUFFIXES:
        if path.lower().endswith(suffix):
            path = path[: -len(suffix)].rstrip("/")
            notes.append(_("removed the endpoint path %(path)s (the gateway adds it)") % {"path": suffix})
            break
    while path.lower().endswith("/v1/v1"):
        path = path[:-3]
        notes.append(_("removed a doubled /v1"))
    segments = [s for s in path.split("/") if s]
    if not any(_VERSION.match(s.lower()) for s in segments):
        path = path + "/v1"
        notes.append(_("added /v1"))

    host = hostname.lower()
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    default_port = {"http": 80, "https": 443}[scheme]
    netloc = host if port in (None, default_port) else f"{host}:{port}"
    canonical = urlunsplit((scheme, netloc, path, "", ""))
    if len(canonical) > 500:
        raise BaseURLError(_("The URL is longer than 500 characters."))
    return canonical, notes


def root_url(base_url: str) -> str:
    """The server root for health endpoints that live outside /v1 (vLLM and llama.cpp `/health`)."""
    return re.sub(r"/v1$", "", base_url)
