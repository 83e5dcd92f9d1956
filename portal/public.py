"""Where the portal says it lives, and who is asking.

`public_url()` is the root written into client configs, installers and links. It is
PORTAL_PUBLIC_URL; when that is unset it is built from the address the server listens on, never
from the request's Host header (a forged Host must not end up in an installer).
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from django.conf import settings
from django.http.request import split_domain_port

DEFAULT_PORTS = {"http": "80", "https": "443"}
UNSPECIFIED = {"", "0.0.0.0", "::", "unknown"}  # "every interface" or no socket: not an address to give out


def public_url(request=None, *, server: tuple[str, int | str] | None = None, scheme: str = "http") -> str:
    """PORTAL_PUBLIC_URL, else `scheme://<listening address>:<port>` (no trailing slash)."""
    if settings.PORTAL_PUBLIC_URL:
        return settings.PORTAL_PUBLIC_URL
    if request is not None:
        server = (request.META.get("SERVER_NAME", ""), request.META.get("SERVER_PORT", ""))
        scheme = request.scheme
    host, port = server or ("127.0.0.1", 8000)
    host = "127.0.0.1" if host in UNSPECIFIED else host
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    port = str(port or "")
    suffix = "" if port in ("", "0", DEFAULT_PORTS.get(scheme)) else f":{port}"
    return f"{scheme}://{host}{suffix}"


def client_ip(request) -> str | None:
    """The client's address: REMOTE_ADDR, already resolved from trusted proxies by portal.asgi."""
    return request.META.get("REMOTE_ADDR") or None


def _is_loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_mismatch(request) -> dict[str, str | bool] | None:
    """When the browser reached the portal by another host name than the one every generated file
    uses (`public_url()`), the two hosts, for the warning on the dashboard and Connect; else None.

    With PORTAL_PUBLIC_URL set, any other host name the browser used counts; unset, the files
    name the listening address, so a browser that came by a non-loopback name (a developer on
    the LAN) is told. The Host header is only compared here, never written anywhere."""
    browser_host, _port = split_domain_port(request.get_host())
    url = public_url(request)
    configured = (urlsplit(url).hostname or "").lower()
    if settings.PORTAL_PUBLIC_URL:
        if not browser_host or browser_host.strip("[]") == configured:
            return None
    elif not browser_host or _is_loopback(browser_host):
        return None
    return {"browser_host": browser_host, "public_url": url, "configured": bool(settings.PORTAL_PUBLIC_URL)}
