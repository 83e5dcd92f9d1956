"""Audit log: every create/change/delete of audited models is recorded by signal handlers.

Views, serializers, tasks and commands all go through the ORM, so hooking `pre_save`/`post_save`/
`post_delete` covers them all. The acting user comes from a context variable that the middleware
(web, session API) and the token authentication (scripts) set. Secrets (every encrypted field, and
the hashes named in `SECRET_FIELDS`) are logged as "set" or "changed", never with a value. Bulk
`.update()` (the gateway's `last_used_at`) is not audited on purpose: it is telemetry, not an
administrative change.
"""

from __future__ import annotations

import contextvars
import datetime
import decimal
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import models
from django.db.models.signals import m2m_changed, post_delete, post_save, pre_save

from .choices import AuditAction
from .fields import EncryptedTextField
from .i18n import Message, as_message

_actor: contextvars.ContextVar = contextvars.ContextVar("audit_actor", default=None)
_ip: contextvars.ContextVar = contextvars.ContextVar("audit_ip", default=None)

# Secrets stored as hashes; every `EncryptedTextField` (a secret the portal must read back) is one too.
SECRET_FIELDS = {"password", "key_hash", "token_hash"}
IGNORED_FIELDS = {"updated", "created", "last_login", "last_used_at", "last_checked"}
_registered: dict[type[models.Model], set[str]] = {}
_named: list[type[models.Model]] = []
_sink: Callable[[dict[str, Any]], None] | None = None


def set_actor(user, ip: str | None = None) -> None:
    _actor.set(user if (user is not None and getattr(user, "is_authenticated", False)) else None)
    if ip is not None:
        _ip.set(ip)


class AuditContextMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        t1 = _actor.set(request.user if request.user.is_authenticated else None)
        t2 = _ip.set(request.META.get("REMOTE_ADDR"))
        try:
            return self.get_response(request)
        finally:
            _actor.reset(t1)
            _ip.reset(t2)


def _plain(value: Any) -> Any:
    if isinstance(value, datetime.datetime | datetime.date | decimal.Decimal | uuid.UUID):
        return str(value)
    if isinstance(value, models.Model):
        return str(value)
    return value


@dataclass(frozen=True, slots=True)
class _Secret:
    """A secret's value in a snapshot: compared with the other snapshot's, never written out."""

    value: Any


def snapshot(instance: models.Model, ignore: set[str] | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for field in instance._meta.concrete_fields:
        if field.name in IGNORED_FIELDS or (ignore and field.name in ignore):
            continue
        value = _plain(getattr(instance, field.attname))
        secret = field.name in SECRET_FIELDS or isinstance(field, EncryptedTextField)
        data[field.name] = _Secret(value) if secret else value
    return data


def diff(before: dict[str, Any] | None, after: dict[str, Any]) -> dict[str, Any]:
    changes: dict[str, Any] = {}
    for name, new in after.items():
        old = before.get(name) if before is not None else None
        if before is not None and old == new:
            continue
        secret = isinstance(new, _Secret)
        if before is None and (new.value if secret else new) in (None, "", [], {}):
            continue
        if secret:
            changes[name] = "changed" if before is not None else "set"
        else:
            changes[name] = [old, new] if before is not None else new
    return changes


def set_sink(write: Callable[[dict[str, Any]], None]) -> None:
    """Where entries go: the accounts app stores them as `AuditLog` rows (set in its `ready()`), so
    this ground-floor module records changes of every app without importing one."""
    global _sink
    _sink = write


def record(
    action: str,
    instance: models.Model | None = None,
    *,
    object_type: str = "",
    changes=None,
    message: Message | str = "",
    actor=None,
) -> None:
    """Store one entry. `message` is a `Message` (stored in English with its msgid and values, and
    shown in the reader's language) or a plain string shown as written."""
    if _sink is None:
        raise ImproperlyConfigured("No audit log is installed: add the accounts app to INSTALLED_APPS.")
    actor = actor if actor is not None else _actor.get()
    _sink(
        {
            "actor": actor if actor is not None and actor.pk else None,
            "actor_name": getattr(actor, "username", "") or "",
            "action": action,
            "object_type": object_type or (instance._meta.model_name if instance is not None else ""),
            "object_id": str(instance.pk) if instance is not None and instance.pk is not None else "",
            "object_repr": str(instance)[:200] if instance is not None else "",
            "changes": changes or {},
            **as_message(message).columns("message", 300),
            "ip_address": _ip.get(),
        }
    )


def _pre_save(sender, instance, raw=False, **kwargs):
    if raw:
        return
    before = None
    if instance.pk is not None:
        old = sender._default_manager.filter(pk=instance.pk).first()
        if old is not None:
            before = snapshot(old, _registered[sender])
    instance._audit_before = before


def _post_save(sender, instance, created, raw=False, **kwargs):
    if raw:
        return
    before = getattr(instance, "_audit_before", None)
    changes = diff(None if created else before, snapshot(instance, _registered[sender]))
    if not created and not changes:
        return
    record(AuditAction.CREATE if created else AuditAction.UPDATE, instance, changes=changes)


def _post_delete(sender, instance, **kwargs):
    record(AuditAction.DELETE, instance)


# The m2m verbs in `changes` (`{"teams": {"added": [...]}}`): stored in English, shown translated.
M2M_VERBS = {"post_add": "added", "post_remove": "removed", "post_clear": "cleared"}


def _m2m_changed(sender, instance, action, pk_set, model, **kwargs):
    if action not in ("post_add", "post_remove", "post_clear") or type(instance) not in _registered:
        return
    names = sorted(str(o) for o in model._default_manager.filter(pk__in=pk_set or []))
    verb = M2M_VERBS[action]
    record(AuditAction.UPDATE, instance, changes={str(model._meta.verbose_name_plural): {verb: names}})


def registered() -> list[type[models.Model]]:
    """The audited models and those named with `name_type`: their `model_name`s are the
    `object_type`s of the entries."""
    return [*_registered, *(m for m in _named if m not in _registered)]


def name_type(model: type[models.Model]) -> None:
    """A model whose changes are not audited but that entries are written about by hand
    (`record(…, download)`): the audit page names its type like an audited model's."""
    if model not in _named:
        _named.append(model)


def register(model: type[models.Model], ignore: set[str] | None = None) -> None:
    """Audit every create/change/delete of `model` (call from the app's `ready()`). An ignored
    stored message (`portal.i18n.Message`) takes its `_code` and `_params` along."""
    ignored = set(ignore or ())
    _registered[model] = ignored | {f"{f}{part}" for f in ignored for part in ("_code", "_params")}
    uid = f"audit-{model._meta.label}"
    pre_save.connect(_pre_save, sender=model, dispatch_uid=uid + "-pre")
    post_save.connect(_post_save, sender=model, dispatch_uid=uid + "-post")
    post_delete.connect(_post_delete, sender=model, dispatch_uid=uid + "-del")
    m2m_changed.connect(_m2m_changed, dispatch_uid="audit-m2m")
