"""The routing explanation on a usage record (`UsageRecord.route_explanation`): why the gateway sent
a request where it did, one short English line per step, read back in the reader's language.

Every line is one of TEMPLATES, an English msgid with named values. The gateway builds a line with
`%` on the request path (no gettext, no lookup: it costs what the f-string before it did) and the
record stores the English text only, so 10 M rows keep one JSON list and no new column. A page or
an API answer matches each stored line back to its template (`parse`: regexes compiled once, here)
and renders gettext(template) % values (`translated`); the values named in NESTED (why a route was
skipped, why the policy chose a channel) are templates of the same table and are translated too.
A line no template matches (older wording, text from elsewhere) is shown as stored.
"""

from __future__ import annotations

import re

from django.utils.translation import gettext, gettext_noop

# One line per routing step.
ALIAS = gettext_noop("alias %(alias)s -> %(targets)s")
PINNED = gettext_noop("pinned to channel #%(channel)s (playground test)")
# Translators: %(channel)s is a channel, or the alias's target model when the target is disabled.
SKIPPED = gettext_noop("skipped %(channel)s: %(why)s")
SKIPPED_TARGET = gettext_noop("skipped %(channel)s (%(model)s): %(why)s")  # a route of an alias's target
CHOSEN = gettext_noop("%(policy)s: %(channel)s of %(count)s")  # the balancing policy put a channel first
FAILOVER = gettext_noop("failover after %(error)s from %(channel)s")
ALL_FAILED = gettext_noop("every route failed")
SENT = gettext_noop("sent to %(channel)s")
SENT_TARGET = gettext_noop("sent to %(channel)s (%(model)s)")
WAITED = gettext_noop("waited %(seconds)s s for the on-demand model to start")
REFUSED = gettext_noop("refused: %(code)s")
# A channel whose breaker is open (it just hung or refused the connection): moved to the end.
COOLING = gettext_noop("tried last: %(channel)s is cooling after %(error)s")

# Why a route or an alias's target was skipped (SKIPPED's `why`).
DISABLED = gettext_noop("disabled")
EXTERNAL_FOR_KEY = gettext_noop("external channel, key is local-only")
EXTERNAL_FOR_MODEL = gettext_noop("external channel, model is local-only")
NOT_UNDER_TEST = gettext_noop("not the channel under test")
WINDOW = gettext_noop("window %(window)s < %(need)s needed")
NO_PRICE = gettext_noop("no price, and this key has a budget")

# Why the balancing policy put a channel first (CHOSEN's `policy`, also `balance.Choice.reason`).
BY_WEIGHT = gettext_noop("weighted")
LEAST_BUSY = gettext_noop("least busy")
AFFINITY_HIT = gettext_noop("affinity hit")
AFFINITY_SPILL = gettext_noop("affinity spill")
AFFINITY_MOVED = gettext_noop("affinity moved")
AFFINITY_NEW = gettext_noop("affinity new")

TEMPLATES = (
    ALIAS, PINNED, SKIPPED, SKIPPED_TARGET, CHOSEN, FAILOVER, ALL_FAILED, SENT, SENT_TARGET, WAITED, REFUSED, COOLING,
    DISABLED, EXTERNAL_FOR_KEY, EXTERNAL_FOR_MODEL, NOT_UNDER_TEST, WINDOW, NO_PRICE,
    BY_WEIGHT, LEAST_BUSY, AFFINITY_HIT, AFFINITY_SPILL, AFFINITY_MOVED, AFFINITY_NEW,
)  # fmt: skip
NESTED = frozenset({"why", "policy"})

_PLACEHOLDER = re.compile(r"%\((\w+)\)s")


def _literal(template: str) -> str:
    return _PLACEHOLDER.sub("", template)


def _pattern(template: str) -> re.Pattern[str]:
    parts = _PLACEHOLDER.split(template)  # literal, name, literal, name, …, literal
    return re.compile("".join(re.escape(p) if i % 2 == 0 else f"(?P<{p}>.+?)" for i, p in enumerate(parts)))


# The most specific template first (the most fixed text), so "skipped x: disabled" is read as
# SKIPPED with the reason DISABLED, and a line naming an alias's target as SKIPPED_TARGET.
_MATCHERS = [(_pattern(t), t) for t in sorted(TEMPLATES, key=lambda t: -len(_literal(t)))]


def parse(line: str) -> tuple[str, dict[str, str]] | None:
    """The template a stored line was built from and its values, or None."""
    for pattern, template in _MATCHERS:
        if (m := pattern.fullmatch(line)) is not None:
            return template, m.groupdict()
    return None


def translated(line: str) -> str:
    """A stored line in the active language; as stored when no template matches it."""
    found = parse(line)
    if found is None:
        return line
    template, values = found
    values = {k: translated(v) if k in NESTED else v for k, v in values.items()}
    text = gettext(template)
    try:
        return text % values if values else text
    except (KeyError, ValueError, TypeError):  # a broken translation must not break the page
        return template % values


def translated_lines(lines: list[str]) -> list[str]:
    return [translated(str(line)) for line in lines]
