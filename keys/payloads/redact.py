"""Secrets out of logged bodies before they are stored, with Yelp's detect-secrets.

Every string of a body is scanned line by line with the plugins detect-secrets ships: its token
patterns (OpenAI, AWS, GitHub, Slack, Stripe, JWT, basic-auth URLs, …) are replaced where they
match, the keyword and high-entropy plugins' findings wherever the value occurs, and a line that
opens a private key (its `PrivateKeyDetector`) is replaced with everything up to the key's END
line. Public IP addresses are kept: they are not credentials. The plugins are used directly (not
`scan_line`), so no global detect-secrets settings are touched; a `Redactor` belongs to one thread.
"""

from __future__ import annotations

import re
import time
from typing import Any

from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
from detect_secrets.plugins.base import BasePlugin, RegexBasedDetector
from detect_secrets.plugins.ip_public import IPPublicDetector
from detect_secrets.plugins.private_key import PrivateKeyDetector

from keys.models import KEY_PREFIX

# Keyword findings read as config lines (`password: x`, `api_key = "y"`), which prompts resemble.
_AS_FILE = "prompt.yaml"
_KEY_END = re.compile(r"-----END[ A-Z0-9]*PRIVATE KEY[ A-Z]*-----|---- END SSH2 ENCRYPTED PRIVATE KEY ----")


class GatewayKeyDetector(RegexBasedDetector):
    """This portal's own developer keys (`gp-…`), unknown to detect-secrets."""

    secret_type = "Gateway Portal key"  # noqa: S105 - a label, not a password
    denylist = [re.compile(r"\b" + re.escape(KEY_PREFIX) + r"[A-Za-z0-9_\-]{20,}")]


def _mark(kind: str) -> str:
    return f"[REDACTED {kind}]"


class Redactor:
    def __init__(self) -> None:
        known: dict[str, type[BasePlugin]] = dict(get_mapping_from_secret_type_to_class())
        classes = [c for c in known.values() if c not in (IPPublicDetector, PrivateKeyDetector)]
        plugins = [c() for c in classes]
        regex_based = [p for p in [*plugins, GatewayKeyDetector()] if isinstance(p, RegexBasedDetector)]
        self.patterns: list[tuple[re.Pattern[str], str]] = [
            (pattern, _mark(p.secret_type)) for p in regex_based for pattern in p.denylist
        ]
        self.finders = [p for p in plugins if not isinstance(p, RegexBasedDetector)]
        self.key_starts: list[re.Pattern[str]] = list(PrivateKeyDetector().denylist)
        self.count = 0  # replacements made by this redactor

    def text(self, value: str) -> str:
        """`value` with every secret found replaced by `[REDACTED <kind>]`."""
        out: list[str] = []
        in_key = False
        for line in value.split("\n"):
            if in_key:
                if _KEY_END.search(line):
                    in_key = False
                continue
            if any(p.search(line) for p in self.key_starts):
                self.count += 1
                out.append(_mark(PrivateKeyDetector.secret_type))
                in_key = not _KEY_END.search(line)
                continue
            out.append(self._line(line))
            # Hand the GIL back after each line (~0.1 ms of regex work): the gateway's event loop
            # shares this process, and would otherwise wait up to the switch interval each time.
            time.sleep(0)
        return "\n".join(out)

    def _line(self, line: str) -> str:
        for pattern, mark in self.patterns:
            line, n = pattern.subn(mark, line)
            self.count += n
        found: set[str] = set()
        for plugin in self.finders:
            for secret in plugin.analyze_line(filename=_AS_FILE, line=line, line_number=0):
                if secret.secret_value and not secret.secret_value.startswith("[REDACTED"):
                    found.add(secret.secret_value)
        for value in sorted(found, key=len, reverse=True):
            kind = "secret"
            self.count += line.count(value)
            line = line.replace(value, _mark(kind))
        return line

    def json(self, value: Any) -> Any:
        """Every string (keys stay) in a parsed JSON value, redacted."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.json(v) for v in value]
        if isinstance(value, dict):
            return {k: self.json(v) for k, v in value.items()}
        return value
