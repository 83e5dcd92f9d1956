"""Settings read on the gateway's hot path, as plain attributes.

`django.conf.settings.X` runs Python on every read (`LazyObject.__getattribute__`, which raises and
drops an AttributeError inside on each one: ~1.9 k instructions); a gateway request read 14 of
them. `hot.X` reads a setting once per process and keeps it as an attribute of this object, so
the next read is a plain attribute lookup. A changed setting (`override_settings`, pytest-django's
`settings` fixture) is forgotten through Django's `setting_changed` signal and read again.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.signals import setting_changed


class HotSettings:
    """`settings`, cached per attribute for this process (see the module's docstring)."""

    def __getattr__(self, name: str) -> Any:  # only for a setting not read yet
        value = getattr(settings, name)
        self.__dict__[name] = value
        return value

    def forget(self, name: str) -> None:
        self.__dict__.pop(name, None)


hot = HotSettings()


def _forget(*, setting: str, **kwargs: Any) -> None:
    hot.forget(setting)


setting_changed.connect(_forget, dispatch_uid="portal.hot")
