"""What the translation checks read: the zh-Hans catalog (locale/zh_Hans/LC_MESSAGES/*.po)."""

from __future__ import annotations

from pathlib import Path

import polib
from django.conf import settings

LOCALE = "zh_Hans"


def po_files() -> list[Path]:
    return sorted((Path(settings.LOCALE_PATHS[0]) / LOCALE / "LC_MESSAGES").glob("*.po"))


def untranslated() -> list[str]:
    """Every msgid without a usable translation (a fuzzy one counts as none), with where it is."""
    found = []
    for path in po_files():
        for entry in polib.pofile(str(path)):
            if entry.obsolete:
                continue
            done = entry.msgstr_plural and all(entry.msgstr_plural.values()) if entry.msgid_plural else entry.msgstr
            if not done or "fuzzy" in entry.flags:
                where = ", ".join(f for f, _ in entry.occurrences[:3])
                found.append(f"{entry.msgid!r} ({where}){' [fuzzy]' if 'fuzzy' in entry.flags else ''}")
    return found
