"""Secrets out of logged bodies before they are stored.

Two layers, in this order:

1. `FORMATS`: one exact pattern per known credential format (Anthropic, OpenAI, GitHub, Google,
   Hugging Face, Stripe, Slack, GitLab, npm, PyPI, AWS, Azure, this portal's own keys and API
   tokens, private-key blocks, JWTs, credentials in URLs, `Authorization:` values). Each matches
   the whole secret, to its last character, on the whole text (a private key spans lines), so
   nothing of it is left behind. An AWS secret access key has no prefix: a 40-character
   base64 word is taken for one when an AWS key id or the words "aws" / "secret access key" are
   near it (`AWS_WINDOW` characters).
2. Yelp's detect-secrets plugins, line by line, for what the formats do not name: its other token
   patterns (Twilio, SendGrid, Discord, Telegram, …; each match extended to the end of its token),
   and its keyword (`password: x`, `api_key = "y"`) and high-entropy findings, replaced wherever
   the value occurs. Public IP addresses are kept: they are not credentials.

The plugins are used directly (not `scan_line`), so no global detect-secrets settings are
touched; a `Redactor` belongs to one thread. SECURITY.md lists what is and is not caught; the
corpus in `tests/keys/test_redaction_corpus.py` has one realistic fake per format.
"""

from __future__ import annotations

import re
import time
from functools import partial
from typing import TYPE_CHECKING, Any

from keys.models import KEY_PREFIX

if TYPE_CHECKING:
    from detect_secrets.plugins.base import BasePlugin

# Keyword findings read as config lines (`password: x`, `api_key = "y"`), which prompts resemble.
_AS_FILE = "prompt.yaml"

_T = r"[A-Za-z0-9_\-]"  # a url-safe token character
_START = r"(?<![A-Za-z0-9_\-])"  # a token starts here, not inside a longer word
_END = r"(?![A-Za-z0-9_\-])"

# (label, pattern). A named group `keep` is kept in place (a header's name, `AccountKey=`); the
# rest of the match is the secret. Earlier formats win where two could match.
FORMATS: list[tuple[str, str]] = [
    # Private keys: PEM (RSA, EC, DSA, ENCRYPTED, OPENSSH, PGP … BLOCK), SSH2, PuTTY. A block whose END
    # line was cut off (a truncated body) is redacted to the end of the text.
    (
        "Private Key",
        r"-----BEGIN ((?:[A-Z0-9]+ )*)PRIVATE KEY((?: BLOCK)?)-----.*?(?:-----END \1PRIVATE KEY\2-----|\Z)",
    ),
    ("Private Key", r"---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----.*?(?:---- END SSH2 ENCRYPTED PRIVATE KEY ----|\Z)"),
    ("Private Key", r"PuTTY-User-Key-File-\d+:.*?(?:Private-MAC: [0-9a-fA-F]+|\Z)"),
    # Cloud LLM providers.
    ("Anthropic Key", rf"{_START}sk-ant-[a-z]+[0-9]*-{_T}{{20,}}"),
    ("OpenAI Token", rf"{_START}sk-(?:proj|svcacct|admin|None)-{_T}{{20,}}"),
    ("OpenAI Token", rf"{_START}sk-{_T}*T3BlbkFJ{_T}+"),
    ("API Key", rf"{_START}sk-[A-Za-z0-9]{{32,}}{_END}"),  # legacy OpenAI (48), DeepSeek, many proxies
    ("Hugging Face Token", rf"{_START}(?:hf|api_org)_[A-Za-z0-9]{{30,}}"),
    ("Google API Key", rf"{_START}AIza{_T}{{35,}}"),
    # Code hosting and package registries.
    ("GitHub Token", rf"{_START}gh[pousr]_[A-Za-z0-9]{{30,}}"),
    ("GitHub Token", rf"{_START}github_pat_{_T}{{30,}}"),
    ("GitLab Token", rf"{_START}gl(?:pat|dt|ptt|rt|oas|cbt|ft|soat|imt|agent|ffct|wt)-{_T}{{20,}}(?:\.{_T}+)*"),
    ("GitLab Token", rf"{_START}GR1348941{_T}{{20,}}"),
    ("NPM tokens", rf"{_START}npm_[A-Za-z0-9]{{36,}}"),
    ("PyPI Token", rf"{_START}pypi-{_T}{{50,}}"),
    # Payments and chat.
    ("Stripe Key", rf"{_START}(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{{16,}}"),
    ("Stripe Key", rf"{_START}whsec_[A-Za-z0-9]{{24,}}"),
    ("Slack Webhook", r"https://hooks\.slack(?:-gov)?\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/\-]+"),
    ("Slack Token", rf"{_START}xox(?:e\.xox)?[abposre]-[A-Za-z0-9\-]{{10,}}"),
    ("Slack Token", rf"{_START}xapp-[0-9]+-[A-Za-z0-9\-]{{10,}}"),
    # Clouds.
    (
        "AWS Access Key",
        r"(?<![A-Z0-9])(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA|APKA|ASCA)[A-Z0-9]{16}(?![A-Z0-9])",
    ),
    (
        "Azure Key",
        r"(?P<keep>(?i:\b(?:AccountKey|SharedAccessKey|AccessKey|PrimaryKey|SecondaryKey))=)[A-Za-z0-9+/]{16,}={0,2}",
    ),
    ("Azure SAS Signature", r"(?P<keep>\bsig=)[A-Za-z0-9%+/=]{16,}"),
    # This portal's developer keys and API tokens (`portal.models.ShownOnceSecret`: prefix + 43).
    ("Gateway Portal key", rf"(?<![A-Za-z0-9]){re.escape(KEY_PREFIX)}{_T}{{20,}}"),
    ("Gateway Portal API token", rf"(?<![A-Za-z0-9])gpt-{_T}{{43}}{_END}"),
    # Shapes that carry a secret whoever issued it.
    ("JSON Web Token", rf"{_START}eyJ{_T}{{8,}}\.{_T}{{8,}}\.{_T}*(?:\.{_T}*){{0,2}}"),
    ("Basic Auth Credentials", r"(?P<keep>\b[a-zA-Z][a-zA-Z0-9+.\-]*://)[^\s:@/?#'\"<>]+:[^\s@/?#'\"<>]+(?=@)"),
    (
        "Authorization",
        r"(?P<keep>(?i:\b(?:proxy-)?authorization\b[\"']?\s*[:=]\s*[\"']?(?:(?:bearer|basic|token|digest|negotiate|bot)\s+)?))"
        r"[^\s\"',;]+",
    ),
    (
        "API Key",
        r"(?P<keep>(?i:\b(?:x-api-key|api-key|x-goog-api-key|x-auth-token)\b[\"']?\s*[:=]\s*[\"']?))[^\s\"',;]{8,}",
    ),
    ("Authorization", r"(?P<keep>\bBearer\s+)[A-Za-z0-9._~+/\-]{16,}=*"),
]

# An AWS secret access key: 40 base64 characters standing alone, near an AWS key id or the words.
AWS_WINDOW = 200
_AWS_SECRET = re.compile(r"(?<![A-Za-z0-9/+_\-])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=_\-])")
_AWS_ANCHOR = re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])|(?i:\baws|secret[ _\-]?access[ _\-]?key)")


def _looks_random(word: str) -> bool:
    """Upper and lower case and a digit or `/`/`+`: a SHA-1 in hex or an English word run is not."""
    return (
        any(c.isupper() for c in word)
        and any(c.islower() for c in word)
        and any(c.isdigit() or c in "/+" for c in word)
    )


def _mark(kind: str) -> str:
    return f"[REDACTED {kind}]"


def _replace(mark: str, match: re.Match[str]) -> str:
    """The mark in place of the secret; a `keep` group (a header's name) stays."""
    return (match.groupdict().get("keep") or "") + mark


class Redactor:
    def __init__(self) -> None:
        # Imported here, not with the module: detect-secrets loads every plugin it has, about a tenth
        # of a Django process's start-up, and only a process that stores request logs needs them.
        from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
        from detect_secrets.plugins.base import RegexBasedDetector
        from detect_secrets.plugins.ip_public import IPPublicDetector
        from detect_secrets.plugins.private_key import PrivateKeyDetector

        self.formats = [(re.compile(p, re.DOTALL), _mark(label)) for label, p in FORMATS]
        known: dict[str, type[BasePlugin]] = dict(get_mapping_from_secret_type_to_class())
        classes = [c for c in known.values() if c not in (IPPublicDetector, PrivateKeyDetector)]
        plugins = [c() for c in classes]
        # A detect-secrets pattern may stop short of its token's end (Stripe's takes 24 characters):
        # each match runs on to the end of the token, so no tail is kept.
        self.patterns: list[tuple[re.Pattern[str], str]] = [
            (re.compile(f"(?:{pattern.pattern}){_T}*", pattern.flags), _mark(p.secret_type))
            for p in plugins
            if isinstance(p, RegexBasedDetector)
            for pattern in p.denylist
        ]
        self.finders = [p for p in plugins if not isinstance(p, RegexBasedDetector)]
        self.count = 0  # replacements made by this redactor

    def text(self, value: str) -> str:
        """`value` with every secret found replaced by `[REDACTED <kind>]`."""
        value = self._aws_secrets(value)
        for pattern, mark in self.formats:
            value, n = pattern.subn(partial(_replace, mark), value)
            self.count += n
        out: list[str] = []
        for line in value.split("\n"):
            out.append(self._line(line))
            # Hand the GIL back after each line (~0.1 ms of regex work): the gateway's event loop
            # shares this process, and would otherwise wait up to the switch interval each time.
            time.sleep(0)
        return "\n".join(out)

    def _aws_secrets(self, value: str) -> str:
        anchors = [m.start() for m in _AWS_ANCHOR.finditer(value)]
        if not anchors:
            return value

        def near(m: re.Match[str]) -> str:
            word = m.group(0)
            if _looks_random(word) and any(abs(a - m.start()) <= AWS_WINDOW for a in anchors):
                self.count += 1
                return _mark("AWS Secret Key")
            return word

        return _AWS_SECRET.sub(near, value)

    def _line(self, line: str) -> str:
        for pattern, mark in self.patterns:
            line, n = pattern.subn(mark, line)
            self.count += n
        found: set[str] = set()
        for plugin in self.finders:
            for secret in plugin.analyze_line(filename=_AS_FILE, line=line, line_number=0):
                if secret.secret_value and "[REDACTED" not in secret.secret_value:
                    found.add(secret.secret_value)
        for value in sorted(found, key=len, reverse=True):
            self.count += line.count(value)
            line = line.replace(value, _mark("secret"))
        return line

    def json(self, value: Any) -> Any:
        """Every string of a parsed JSON value redacted, object keys included."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.json(v) for v in value]
        if isinstance(value, dict):
            return {self.text(k): self.json(v) for k, v in value.items()}
        return value
