"""The check that every text a person reads in templates/ is marked for translation (issue 30):
text between tags and the title/placeholder/aria-label/alt attributes, outside {% translate %},
{% blocktranslate %}, comments, <code>, <pre>, <script> and <style>, must contain no English word
(brand names and technical terms in ALLOWED excepted). Run by tests/portal/test_i18n.py."""

from __future__ import annotations

import re
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

from django.template.base import Lexer, TokenType

# Words that stay as they are in every language: the product, brands, units and protocol names.
ALLOWED = {
    "Gateway Portal", "API", "REST", "GPU", "GPUs", "SSH", "URL", "URLs", "ID", "TTFT", "vLLM",
    "SGLang", "llama.cpp", "Ollama", "OpenAI", "Anthropic", "HTTP", "HTTPS", "JSON", "YAML", "CSV",
    "Redis", "PostgreSQL", "VRAM", "MiB", "GiB", "GB", "ms", "tok/s", "OK", "SSE", "TLS", "CUDA",
    "Hugging Face", "ModelScope", "NVIDIA", "Docker", "PowerShell", "Cline", "Roo Code", "Kilo Code",
    "Continue", "Aider", "Codex", "Claude Code", "Qwen Code", "OpenCode", "Crush", "Zed", "CC Switch",
    "Linux", "macOS", "Windows", "OpenSSH", "PID", "CIDR", "Swagger", "ReDoc", "OIDC", "SSO", "LAN", "RPM", "TPM",
    "curl", "Python", "JavaScript", "openai", "anthropic",
}  # fmt: skip
WORD = re.compile(r"[A-Za-z]{2,}")
ATTRIBUTES = {"title", "placeholder", "aria-label", "alt", "hx-confirm", "data-confirm"}
SKIP_ELEMENTS = {"code", "pre", "script", "style", "kbd", "samp"}
MARK = "\x00"
# A literal string a person reads, passed in a tag or a filter (`default:"not yet"`,
# `with label="Your key"`): must be `_("…")` or come from {% translate … as x %}.
LITERAL_ARG = re.compile(
    r"""default:(["'])(?=[^"']*[A-Za-z]{2})(?=[^"']*[\sA-Z])[^"']*\1"""  # ids and CSS classes: one lowercase word
    r"""|\s\w*(?:label|lost|title|question|detail|button|text|message)\w*=(["'])[^"']*[A-Za-z]{2,}[^"']*\2"""
)


@dataclass(frozen=True)
class Finding:
    template: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.template}:{self.line}: {self.text!r}"


# The allowed terms as whole words only: "SSH" is taken out of "SSH key", not out of "OpenSSH".
_ALLOWED_TERMS = re.compile(
    "|".join(rf"(?<![A-Za-z]){re.escape(term)}(?![A-Za-z])" for term in sorted(ALLOWED, key=len, reverse=True))
)


def without_allowed(text: str) -> str:
    """`text` with every allowed term (at word boundaries) replaced by a space."""
    return _ALLOWED_TERMS.sub(" ", text)


def has_words(text: str) -> bool:
    return bool(WORD.search(without_allowed(text)))


class _TextFinder(HTMLParser):
    def __init__(self, report):
        super().__init__(convert_charrefs=True)
        self.report, self.skipping = report, []

    def handle_starttag(self, tag, attrs):
        if tag in SKIP_ELEMENTS:
            self.skipping.append(tag)
        for name, value in attrs:
            if name in ATTRIBUTES and value and has_words(value.replace(MARK, " ")):
                self.report(value, self.getpos()[0])

    def handle_endtag(self, tag):
        if self.skipping and self.skipping[-1] == tag:
            self.skipping.pop()

    def handle_data(self, data):
        if not self.skipping and has_words(data.replace(MARK, " ")):
            self.report(data.strip(), self.getpos()[0])


def lint(path: Path, name: str) -> list[Finding]:
    """The unmarked texts of one template."""
    source = path.read_text()
    findings: list[Finding] = []
    parts: list[str] = []
    skip_until: str | None = None
    for token in Lexer(source).tokenize():
        contents = token.contents
        if token.token_type == TokenType.BLOCK:
            command = contents.split()[0] if contents else ""
            if skip_until:
                if command == skip_until:
                    skip_until = None
            elif command in ("blocktranslate", "blocktrans"):
                skip_until = "end" + command
            elif command == "comment":
                skip_until = "endcomment"
            elif command not in ("translate", "trans") and LITERAL_ARG.search(" " + contents):
                findings.append(Finding(name, token.lineno or 0, "{% " + contents + " %}"))
        elif token.token_type == TokenType.VAR and not skip_until and LITERAL_ARG.search(contents):
            findings.append(Finding(name, token.lineno or 0, "{{ " + contents + " }}"))
        if token.token_type == TokenType.TEXT and not skip_until:
            parts.append(contents)
        else:  # keep line numbers: a tag's own newlines stay
            parts.append(
                MARK + "\n" * ("\n" in contents and token.token_type != TokenType.TEXT and contents.count("\n"))
            )
    finder = _TextFinder(lambda text, line: findings.append(Finding(name, line, " ".join(text.split()))))
    finder.feed("".join(parts))
    finder.close()
    return sorted(findings, key=lambda f: f.line)


# A sentence glued together outside the catalog: a message that continues one before it
# (`": choose this team…"`), or sentence punctuation left after a translated text or the `endif`
# that closes one (`{% translate "No keys" %}{% if f %} {% translate "match" %}{% endif %}.`). A
# translator cannot reorder the parts or use Chinese punctuation; the sentence must be one message.
_CONTINUATION = re.compile(r"""^(?:translate|trans)\s+(["'])[:;.]""")
_ENDS_A_TEXT = {"translate", "trans", "endblocktranslate", "endblocktrans", "endif", "else"}


def fragments(path: Path, name: str) -> list[Finding]:
    """The sentences of one template built from several messages."""
    findings: list[Finding] = []
    previous = None
    for token in Lexer(path.read_text()).tokenize():
        contents = token.contents
        if token.token_type == TokenType.BLOCK and _CONTINUATION.match(contents):
            findings.append(Finding(name, token.lineno or 0, "{% " + contents + " %}"))
        elif (
            token.token_type == TokenType.TEXT
            and previous is not None
            and previous.token_type == TokenType.BLOCK
            and previous.contents.split()[0] in _ENDS_A_TEXT
            and re.match(r"[.:;?!](\s|<|$)", contents)
        ):
            findings.append(Finding(name, token.lineno or 0, "{% " + previous.contents + " %}" + contents[:1]))
        previous = token
    return findings


def lint_all(root: Path, skip: frozenset[str] = frozenset()) -> list[Finding]:
    found = []
    for path in sorted(root.rglob("*.html")):
        name = str(path.relative_to(root))
        if name not in skip:
            found += lint(path, name) + fragments(path, name)
    return found
