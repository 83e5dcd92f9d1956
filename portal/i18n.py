"""The language a page is written in (issue 30): the signed-in person's saved preference, else what
Django's LocaleMiddleware chose (the `django_language` cookie the header's switcher sets, else the
browser's Accept-Language, else English)."""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.utils import translation
from django.utils.translation import gettext_lazy as _lazy
from django.utils.translation import pgettext


def supported(code: str | None) -> str:
    """`code` if it names one of LANGUAGES (case-insensitive), else ""."""
    code = (code or "").lower()
    return code if code in dict(settings.LANGUAGES) else ""


def language_of(user) -> str:
    """A user's saved language, "" when they chose none (or for anyone not signed in)."""
    return supported(getattr(user, "language", "")) if getattr(user, "is_authenticated", False) else ""


class UserLanguageMiddleware:
    """After AuthenticationMiddleware: a saved preference wins over the cookie and Accept-Language,
    so the choice follows the person to another browser and survives logging out and in."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        user = getattr(request, "user", None)
        code = language_of(user)
        if not code and getattr(user, "is_authenticated", False):
            # A choice made with the switcher before logging in becomes the person's preference.
            code = supported(request.COOKIES.get(settings.LANGUAGE_COOKIE_NAME))
            if code:
                user.language = code
                user.save(update_fields=["language"])
        if code and code != getattr(request, "LANGUAGE_CODE", None):
            translation.activate(code)
            request.LANGUAGE_CODE = code
        response = self.get_response(request)
        if code and request.COOKIES.get(settings.LANGUAGE_COOKIE_NAME) != code:
            set_language_cookie(response, code)  # so the login page after logging out speaks it too
        return response


def set_language_cookie(response, code: str) -> None:
    response.set_cookie(
        settings.LANGUAGE_COOKIE_NAME,
        code,
        max_age=settings.LANGUAGE_COOKIE_AGE,
        samesite=settings.LANGUAGE_COOKIE_SAMESITE,
        secure=settings.SESSION_COOKIE_SECURE,
        httponly=True,
    )


# Texts written by background work (launch and download jobs, the SSH layer, health checks) and read
# later by someone else, in their own language. The writer stores the English sentence (so logs,
# the audit log and old readers keep working) AND its msgid and named values; a page or an API
# answer renders it again with gettext in the reader's language. A row without a code (written
# before, or verbatim text such as a server's own error) shows the stored text.


class Message:
    """A sentence to store now and translate when read: `code` is its English msgid (mark it with
    `gettext_noop` where it is written, so makemessages finds it), `params` its named values, which
    may be Messages themselves ("Launch failed: %(reason)s")."""

    __slots__ = ("code", "params")

    def __init__(self, code: str, /, **params: object) -> None:
        self.code = code
        self.params: dict[str, object] = {
            k: v if isinstance(v, Message | int | float | bool | None) else str(v) for k, v in params.items()
        }

    @classmethod
    def verbatim(cls, text: str) -> Message:
        """Text that is shown as written in every language (a server's own error, a log line)."""
        return cls("", text=text)

    @classmethod
    def label(cls, label: object) -> Message:
        """A choice's label (`JobAction.LAUNCH.label`, a lazy gettext string) as a value of another
        message: stored as its msgid, translated when read."""
        with translation.override(None):  # no catalog: the English msgid itself
            return cls(str(label))

    @classmethod
    def filesize(cls, size: int) -> Message:
        """A number of bytes as a value of another message, formatted when it is read ("12.3 GB",
        Django's `filesizeformat`: the reader's unit words and number format), not when written."""
        return cls(FILESIZE, bytes=size)

    def render(self, *, translate: bool = True) -> str:
        """The sentence in the active language (`translate`), else in English."""
        if not self.code:
            return str(self.params.get("text", ""))
        if self.code == FILESIZE:
            from django.template.defaultfilters import filesizeformat

            with contextlib.nullcontext() if translate else translation.override(settings.LANGUAGE_CODE):
                size = self.params.get("bytes")
                return filesizeformat(size if isinstance(size, int | float) else 0)
        params = {k: v.render(translate=translate) if isinstance(v, Message) else v for k, v in self.params.items()}
        if self.code == JOINED:
            return sentences(params.get("first"), params.get("second"))
        text = translation.gettext(self.code) if translate else self.code
        if not params:
            return text
        try:
            return text % params
        except (KeyError, ValueError, TypeError):  # a broken translation must not break the page
            return self.code % params

    @property
    def english(self) -> str:
        return self.render(translate=False)

    def __str__(self) -> str:
        return self.render()

    def __repr__(self) -> str:
        return f"Message({self.code!r}, {self.params!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Message) and (self.code, self.params) == (other.code, other.params)

    def __hash__(self) -> int:
        return hash(self.code)

    def __add__(self, other: Message) -> Message:
        """Two sentences one after the other (`"%(first)s %(second)s"` is not worth a msgid)."""
        return Message(JOINED, first=self, second=other)

    def json_params(self) -> dict[str, object]:
        return {k: v.as_json() if isinstance(v, Message) else v for k, v in self.params.items()}

    def as_json(self) -> dict[str, object]:
        return {"code": self.code, "params": self.json_params()}

    def as_item(self) -> dict[str, object]:
        """The message as one item of a stored JSON list: its English text, code and values
        (`rendered_items` shows the list in the reader's language)."""
        return {"text": self.english, **self.as_json()}

    @classmethod
    def from_stored(cls, text: str, code: str, params: dict[str, object] | None) -> Message:
        """What `columns` stored: the code and its values, or the stored text when there is no code."""
        if not code:
            return cls.verbatim(text)
        return cls(code, **{k: _loaded(v) for k, v in (params or {}).items()})

    def columns(self, field: str, max_length: int | None = None) -> dict[str, object]:
        """The values to store for the model field `field` and its `<field>_code`/`<field>_params`:
        `Model.objects.filter(…).update(**msg.columns("message", 1000))`."""
        english = self.english
        return {
            field: english[:max_length] if max_length else english,
            f"{field}_code": self.code,
            f"{field}_params": self.json_params() if self.code else {},
        }


JOINED = "%(first)s %(second)s"
FILESIZE = "filesize"  # not a msgid: `Message.filesize`, formatted by Django's filesizeformat


def _loaded(value: object) -> object:
    if isinstance(value, dict) and set(value) == {"code", "params"}:  # a nested Message (`as_json`)
        return Message(str(value["code"]), **{k: _loaded(v) for k, v in dict(value["params"]).items()})
    return value


def as_message(value: Message | str) -> Message:
    """A plain string (a caller that has no msgid) is stored and shown as written."""
    return value if isinstance(value, Message) else Message.verbatim(value)


def stored_text(text: str, code: str = "", params: dict[str, object] | None = None) -> str:
    """A stored message in the reader's language (the stored text when it has no code)."""
    return Message.from_stored(text, code, params).render() if code else text


def rendered_items(items: list[Any]) -> list[str]:
    """A stored JSON list of messages (`Message.as_item`) in the reader's language; a plain string
    (a list written before) is shown as stored."""
    return [
        stored_text(str(i.get("text", "")), str(i.get("code", "")), i.get("params")) if isinstance(i, dict) else str(i)
        for i in items
    ]


def english_items(items: list[Any]) -> list[str]:
    """The same list as stored in English (logs, tests, old readers)."""
    return [str(i.get("text", "")) if isinstance(i, dict) else str(i) for i in items]


def codes_reading(text: str) -> list[str]:
    """The msgids whose translation in the active language contains `text` (case-insensitive),
    for a search box over stored messages: a row keeps its English sentence and its msgid
    (`<field>_code`), and a reader searches the words they read. Empty in English (the stored
    sentence is what they read) and for a blank `text`."""
    language = translation.get_language() or settings.LANGUAGE_CODE
    needle = text.strip().casefold()
    if not needle or language.split("-")[0] == "en":
        return []
    return [code for code, translated in _catalog(language) if needle in translated]


@functools.lru_cache(maxsize=8)
def _catalog(language: str) -> tuple[tuple[str, str], ...]:
    """(msgid, casefolded translation) of every singular message of `language`'s catalogs."""
    from django.utils.translation import trans_real

    catalog = trans_real.translation(language)._catalog  # type: ignore[attr-defined]
    return tuple((k, v.casefold()) for k, v in catalog.items() if isinstance(k, str) and k and k != v)


def code_field() -> Any:
    """`<field>_code`: the stored message's msgid, empty when the text is shown as stored."""
    from django.db import models

    return models.TextField(
        blank=True,
        default="",
        help_text=_lazy("The message's id: its English text as a gettext msgid (empty: shown as stored)."),
    )


def params_field() -> Any:
    """`<field>_params`: the stored message's named values."""
    from django.db import models

    return models.JSONField(default=dict, blank=True, help_text=_lazy("The message's named values."))


class TranslatedText:
    """A model attribute reading the stored message `field` in the reader's language:
    `message_text = TranslatedText("message")` next to `message`, `message_code`, `message_params`."""

    def __init__(self, field: str) -> None:
        self.field = field

    def __get__(self, obj: object, owner: type | None = None) -> Any:
        if obj is None:
            return self
        return stored(obj, self.field).render()


def cleared(field: str) -> dict[str, object]:
    """The values that empty a stored message (its code and params too)."""
    return Message.verbatim("").columns(field)


def stored(obj: object, field: str) -> Message:
    """The message stored in `field` of a row (with its `_code`/`_params`), to store again elsewhere."""
    return Message.from_stored(getattr(obj, field), getattr(obj, f"{field}_code"), getattr(obj, f"{field}_params"))


def set_message(obj: object, field: str, message: Message | str) -> dict[str, object]:
    """Put a message on a row in memory (cut to the field's length); returns the columns, to save
    (`update_fields=[*columns]`) or to write with `update(**columns)`."""
    columns = as_message(message).columns(field, obj._meta.get_field(field).max_length)  # type: ignore[attr-defined]
    for name, value in columns.items():
        setattr(obj, name, value)
    return columns


# A space after a Chinese full stop, colon or semicolon (or after the tags closing there): put between
# two messages for English, it shows in Chinese as a gap in the middle of the text ("页面。 如果").
_SPACE_AFTER_CHINESE_STOP = re.compile(r"(?<=[。！？；：])((?:</\w+>)*) +")


def sentences(*parts: Any) -> str:
    """Sentences, each a message of its own, as one text: spaced in English, not after a Chinese
    sentence's end."""
    return tidy_sentences(" ".join(str(p) for p in parts if p))


def listing(items: Iterable[object], most: int | None = None) -> str:
    """Items named in a sentence ("may not use: a, b"), joined the reader's way: ", " in English,
    "、" in Chinese; with `most`, the first `most` and "…" when there are more."""
    names = [str(i) for i in items]
    shown = names if most is None else names[:most]
    return pgettext("separator between the items of a list in a sentence", ", ").join(shown) + (
        "…" if len(names) > len(shown) else ""
    )


def tidy_sentences(text: str) -> str:
    """`text` (plain or HTML) without the spaces after the end of a Chinese sentence."""
    return _SPACE_AFTER_CHINESE_STOP.sub(r"\1", text)
