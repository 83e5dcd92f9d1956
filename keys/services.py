"""Issuing, verifying, revoking and rotating developer keys."""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from types import EllipsisType
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext, gettext_noop
from django.utils.translation import gettext as _

from channels.models import Model
from portal import audit
from portal.choices import AuditAction
from portal.forms import LIMIT_LABELS
from portal.i18n import Message, listing

from .models import Key

if TYPE_CHECKING:
    from accounts.models import User


def clean_presented_key(raw: str | None) -> str:
    """Keys pasted with whitespace, a newline or a `Bearer ` prefix still work."""
    value = (raw or "").strip()
    if value.lower().startswith("bearer "):
        value = value[7:].strip()
    return value


@transaction.atomic
def issue_key(*, owner: User, name: str, allowed_models: Iterable[Model] = (), **fields: Any) -> tuple[Key, str]:
    """Create a key and return it with its plaintext, which is never stored."""
    stored, plaintext = Key.mint()
    defaults = {k: v for k, v in (owner.key_defaults or {}).items() if k in Key.LIMIT_FIELDS}
    defaults.update(fields)
    key = Key.objects.create(
        owner=owner,
        name=name,
        **stored,
        **defaults,
    )
    models = list(allowed_models)
    if models:
        key.allowed_models.set(models)
    return key, plaintext


def find_key(presented: str) -> Key | None:
    """The active or inactive key matching `presented`, or None. Constant-time final compare."""
    return Key.find(clean_presented_key(presented), Key.objects.select_related("owner"))


def verify_key(presented: str) -> Key | None:
    """The key if it is usable now (not revoked, not expired, owner active), else None."""
    key = find_key(presented)
    return key if key is not None and key.is_active else None


def revoke_key(key: Key) -> Key:
    key.revoke()
    return key


def check_rotatable(key: Key) -> None:
    """Raise ValidationError when `key` cannot be rotated: it is revoked, or it was rotated already
    (its replacement is the key to rotate: a second replacement of it would take over its grace
    expiry and stop with it)."""
    _refuse_ended(
        key,
        _("A revoked key cannot be rotated."),
        _("This key was already rotated; rotate its replacement %(masked)s instead."),
    )


def check_editable(key: Key) -> None:
    """Raise ValidationError when `key`'s settings cannot change: it is revoked, or it was rotated
    (a new expiry would keep it working past its grace period)."""
    _refuse_ended(
        key,
        _("A revoked key cannot be changed."),
        _("This key was rotated; it stops at the end of its grace period. Change its replacement %(masked)s."),
    )


def _refuse_ended(key: Key, revoked: str, rotated: str) -> None:
    """`revoked` for a revoked key, `rotated` (naming the replacement as `%(masked)s`) for a rotated one."""
    if key.revoked_at is not None:
        raise ValidationError(revoked)
    replacement = key.rotated_to.order_by("-created").first()
    if replacement is not None:
        raise ValidationError(rotated % {"masked": replacement.masked})


@transaction.atomic
def rotate_key(key: Key, *, grace: datetime.timedelta | None = None) -> tuple[Key, str]:
    """Issue a replacement with the same settings; the old key stops now or after `grace`. A key
    rotated already or revoked is refused (`check_rotatable`)."""
    # Locked, so of two rotations racing for one key the second sees the first's replacement.
    Key.objects.select_for_update().filter(pk=key.pk).first()
    key.refresh_from_db(fields=["revoked_at", "expires_at", "name"])
    check_rotatable(key)
    old_name = key.name
    now = timezone.now()
    # The replacement keeps a still-future expiry: rotating must not turn a temporary key permanent.
    keep_expiry = key.expires_at if key.expires_at is not None and key.expires_at > now else None
    # Free the active name for the new key: the old one keeps working under a suffixed name.
    # Unique per key and second, so rotating again within a minute cannot collide.
    suffix = f" (rotated {now:%Y-%m-%d %H:%M:%S} #{key.pk})"
    key.name = old_name[: 100 - len(suffix)] + suffix
    if grace:
        ends = now + grace
        key.expires_at = min(key.expires_at, ends) if key.expires_at else ends
    else:
        key.revoked_at = now
    key.save()
    new, plaintext = issue_key(
        owner=key.owner,
        name=old_name,
        allowed_models=key.allowed_models.all(),
        **key.limits(),
        ip_allowlist=list(key.ip_allowlist),
        expires_at=keep_expiry,
        rotated_from=key,
        client=key.client,
        local_only=key.local_only,
        admin_ceilings=dict(key.admin_ceilings or {}),
        lead_ceilings=dict(key.lead_ceilings or {}),
    )
    # The budgets move with the key: their spend is counted per budget, so the window goes on.
    key.budgets.update(key=new)
    return new, plaintext


# --- validation shared by the web forms and the REST API --------------------------------------

MAX_CIDR_ENTRIES = 50


def normalize_cidrs(entries: str | Iterable[object] | None) -> list[str]:
    """Canonical CIDR strings, or ValueError naming the bad entry."""
    if isinstance(entries, str):
        entries = [e for e in entries.replace(",", "\n").split()]
    result: list[str] = []
    for raw in entries or []:
        text = str(raw).strip()
        if not text:
            continue
        try:
            result.append(str(ipaddress.ip_network(text, strict=False)))
        except ValueError:
            raise ValueError(
                _("%(entry)r is not an IP address or CIDR block (e.g. 10.0.0.0/8).") % {"entry": text}
            ) from None
    if len(result) > MAX_CIDR_ENTRIES:
        raise ValueError(_("At most %(count)d entries.") % {"count": MAX_CIDR_ENTRIES})
    return list(dict.fromkeys(result))


# In `Key.admin_ceilings` / `Key.lead_ceilings`: an admin (a team lead) set "Local channels only".
LOCAL_ONLY_LOCK = "local_only"

ADMIN, LEAD = "admin", "lead"  # who set a ceiling
OWN = "own"  # a team lead's own key: its limits are an admin's to raise (`own_limit_bounds`)


def editor_role(editor: User | None, owner: User) -> str:
    """What `editor` is to the owner of a key: ADMIN, LEAD (the lead of the owner's team, not the
    owner), or "" (the owner, or nobody in particular: a command)."""
    from accounts.services import may_manage

    if editor is not None and editor.is_admin:
        return ADMIN
    if editor is not None and editor.pk != owner.pk and may_manage(editor, owner):
        return LEAD
    return ""


def _binding_locks(key: Key | None, editor: User | None) -> list[tuple[str, Any, str]]:
    """(name, value, who) of each ceiling and lock on `key` that binds `editor`: an admin's bind
    everyone but admins, a team lead's bind the member (the lead who set them and admins may lift
    them), and a team lead's own key binds them to the limits it has (OWN)."""
    from accounts.services import own_limit_bounds

    if key is None:
        return []
    role = editor_role(editor, key.owner)
    if role == ADMIN:
        return []
    found = [(name, value, ADMIN) for name, value in (key.admin_ceilings or {}).items()]
    if role != LEAD:
        found += [(name, value, LEAD) for name, value in (key.lead_ceilings or {}).items()]
    found += [(name, value, OWN) for name, value in own_limit_bounds(editor, key.owner, key).items()]
    return found


def binding_ceilings(key: Key | None, editor: User | None) -> dict[str, tuple[int, str]]:
    """The limits (and "local only") of `key` that `editor` may lower but never raise or clear,
    each with who set it (ADMIN or LEAD; the smaller when both did)."""
    found: dict[str, tuple[int, str]] = {}
    for name, value, who in _binding_locks(key, editor):
        if name not in RESTRICTIONS and (name not in found or int(value) < found[name][0]):
            found[name] = (int(value), who)
    return found


# Restrictions an admin (a team lead) sets on a key are recorded in `Key.admin_ceilings`
# (`Key.lead_ceilings`) with the value they set, as a limit is, and bind the same people: they may
# tighten them, and loosen them again up to that value (`_tighter`), never past it.
RESTRICTIONS = ("ip_allowlist", "expires_at", "allowed_models")


def binding_restrictions(key: Key | None, editor: User | None) -> dict[str, list[tuple[Any, str]]]:
    """The restrictions of `key` that bind `editor`: for each, the values set (comparable, as
    `_restriction_value` gives them) and who set each; the editor's value must be within all."""
    found: dict[str, list[tuple[Any, str]]] = {}
    for name, value, who in _binding_locks(key, editor):
        if name in RESTRICTIONS:
            found.setdefault(name, []).append((_restriction_bound(key, name, value), who))
    return found


def _restriction_bound(key: Key | None, name: str, stored: Any) -> Any:
    """A restriction's bound as recorded (`_restriction_record`), comparable. A lock recorded as 1
    (before the value was kept) binds to the key's value, all that is known of what was set."""
    if stored == 1:
        return _restriction(key, name)
    if name == "expires_at":
        return datetime.datetime.fromisoformat(stored)
    return frozenset(stored)


def _restriction_record(name: str, value: Any) -> Any:
    """A restriction (as `_restriction_value` gives it) as a lock records it in JSON: model ids,
    CIDR blocks, an ISO time."""
    if name == "expires_at":
        return value.isoformat()
    return sorted(value)


def _restriction_value(name: str, value: Any) -> Any:
    """A restriction in a comparable form; empty or None when it restricts nothing."""
    if name == "allowed_models":
        return frozenset(m.pk for m in value or ())
    if name == "ip_allowlist":
        return frozenset(value or ())
    return value


def _restriction(key: Key | None, name: str) -> Any:
    if key is None:
        return _restriction_value(name, None)
    if name == "allowed_models":
        return frozenset(key.allowed_models.values_list("pk", flat=True))
    return _restriction_value(name, getattr(key, name))


def _tighter(name: str, old: Any, new: Any) -> bool:
    """Whether `new` allows no more than `old` (or as much): fewer models, smaller networks, an
    earlier expiry."""
    if not new:
        return False
    if not old:
        return True
    if name == "expires_at":
        return bool(new <= old)
    if name == "allowed_models":
        return bool(new <= old)
    olds = [ipaddress.ip_network(n) for n in old]
    return all(
        any(net.version == o.version and net.subnet_of(o) for o in olds)  # type: ignore[arg-type]
        for net in map(ipaddress.ip_network, new)
    )


def _restriction_error(name: str, who: str) -> str:
    if name == "ip_allowlist":
        if who == ADMIN:
            return _("An admin restricted the addresses of this key; you can narrow them but not widen them.")
        return _("A team lead restricted the addresses of this key; you can narrow them but not widen them.")
    if name == "expires_at":
        if who == ADMIN:
            return _("An admin set this key's expiry; you can bring it forward but not postpone or remove it.")
        return _("A team lead set this key's expiry; you can bring it forward but not postpone or remove it.")
    if who == ADMIN:
        return _("An admin restricted the models of this key; you can remove models but not add any or allow all.")
    return _("A team lead restricted the models of this key; you can remove models but not add any or allow all.")


def _lock(name: str, value: Any, role: str, admin_ceilings: dict[str, Any], lead_ceilings: dict[str, Any]) -> None:
    """Record the restriction `role` set on a key ("local only" as 1, `RESTRICTIONS` with their
    `value`), or lift it (`value` None): what an admin sets or lifts replaces a lead's lock on it."""
    locks = admin_ceilings if role == ADMIN else lead_ceilings
    if role == ADMIN:
        lead_ceilings.pop(name, None)
    if value is None:
        locks.pop(name, None)
    else:
        locks[name] = value


def drop_lead_locks(sender: Any, user: User, team: Any, **kwargs: Any) -> None:
    """`user` left `team`, whose leads managed them (`accounts.signals.left_lead`): the limits and
    restrictions those leads locked on their keys stop binding them (the keys keep their values).
    Those leads no longer answer for the keys, and a new team's lead could not tell them from their
    own; what an admin locked stays. Each key's change and the reason are in the audit log."""
    keys = list(Key.objects.filter(owner=user).not_revoked().exclude(lead_ceilings={}))
    for key in keys:
        key.lead_ceilings = {}
        key.save(update_fields=["lead_ceilings"])  # one save each: audited, and the gateway's cache sees it
    if keys:
        lifted = gettext_noop("left the team %(team)s: the locks its leads set on %(count)s key(s) were lifted")
        audit.record(AuditAction.ACTION, user, message=Message(lifted, team=str(team or "-"), count=len(keys)))


def _ceiling_error(who: str, value: int, cleared: bool) -> str:
    from accounts.services import own_limit_error

    if who == OWN:
        return own_limit_error(value, cleared=cleared)
    if who == ADMIN:
        if cleared:
            return _("An admin set this limit to %(value)s; you can lower it but not remove it.") % {
                "value": f"{value:,}"
            }
        return _("An admin set this limit to %(value)s; you can lower it but not raise it.") % {"value": f"{value:,}"}
    if cleared:
        return _("A team lead set this limit to %(value)s; you can lower it but not remove it.") % {
            "value": f"{value:,}"
        }
    return _("A team lead set this limit to %(value)s; you can lower it but not raise it.") % {"value": f"{value:,}"}


def validate_key_settings(
    owner: User,
    *,
    editor: User | None = None,
    key: Key | None = None,
    limits: dict[str, Any] | None = None,
    allowed_models: Iterable[Model] | None = None,
    ip_allowlist: str | Iterable[object] | None = None,
    expires_at: datetime.datetime | EllipsisType | None = ...,
    local_only: bool | None = None,
) -> dict[str, Any]:
    """Check a key's settings against its owner; return cleaned values or raise ValidationError
    with field errors. Used by both the key form and the key serializer, so the rules are one.

    Limits keep their owner by role: what an admin (`editor`) sets on a key becomes its ceiling
    (`cleaned["admin_ceilings"]`) that only an admin lifts; what the lead of the owner's team sets
    on a member's key becomes a lead's ceiling (`cleaned["lead_ceilings"]`) that the member may
    lower, never raise or clear (the lead or an admin may). A limit counts as set by this edit
    when it differs from the key's (a form posts every limit). The owner's own limits and their
    team's cap every key of theirs. "Local channels only" works the same way (`LOCAL_ONLY_LOCK`),
    and so do the restrictions in `RESTRICTIONS`, which the member may set anywhere within what was
    set (tighten, and loosen again as far as that).
    `expires_at`: `...` leaves it as it is, None clears it."""
    errors: dict[str, list[str]] = {}
    cleaned: dict[str, Any] = {}
    role = editor_role(editor, owner)
    binding = binding_ceilings(key, editor)
    admin_ceilings: dict[str, Any] = dict(key.admin_ceilings or {}) if key is not None else {}
    lead_ceilings: dict[str, Any] = dict(key.lead_ceilings or {}) if key is not None else {}
    team = owner.team
    for name, value in (limits or {}).items():
        bound = binding.get(name)
        if value in (None, ""):
            if bound is not None:
                errors.setdefault(name, []).append(_ceiling_error(bound[1], bound[0], cleared=True))
            cleaned[name] = None
            continue
        try:
            number = int(value)
        except (TypeError, ValueError):
            errors.setdefault(name, []).append(_("Enter a whole number, or leave blank for unlimited."))
            continue
        if number < 1:
            errors.setdefault(name, []).append(_("Must be at least 1 (leave blank for unlimited)."))
        elif number > 10**12:
            errors.setdefault(name, []).append(_("That is more than 10^12; leave blank for unlimited."))
        ceiling = getattr(owner, name, None)
        if ceiling is not None and number > ceiling:
            errors.setdefault(name, []).append(
                _("Cannot exceed the owner's limit of %(value)s.") % {"value": f"{ceiling:,}"}
            )
        team_ceiling = getattr(team, name, None) if team is not None else None
        if team_ceiling is not None and number > team_ceiling:
            errors.setdefault(name, []).append(
                _("Cannot exceed the team %(team)s's limit of %(value)s.")
                % {"team": team, "value": f"{team_ceiling:,}"}
            )
        if bound is not None and number > bound[0]:
            errors.setdefault(name, []).append(_ceiling_error(bound[1], bound[0], cleared=False))
        cleaned[name] = number
    changed = [n for n in (limits or {}) if n in cleaned and (key is None or cleaned[n] != getattr(key, n))]
    if role and changed:
        for name in changed:
            value = cleaned[name]
            if role == ADMIN:
                # An admin's value replaces whatever a lead set; clearing lifts both.
                lead_ceilings.pop(name, None)
                target = admin_ceilings
            else:
                target = lead_ceilings
            if value is None:
                target.pop(name, None)
            else:
                target[name] = value
        cleaned["admin_ceilings"], cleaned["lead_ceilings"] = admin_ceilings, lead_ceilings
    if local_only is not None:
        if role:
            _lock(LOCAL_ONLY_LOCK, 1 if local_only else None, role, admin_ceilings, lead_ceilings)
            cleaned["admin_ceilings"], cleaned["lead_ceilings"] = admin_ceilings, lead_ceilings
        lock = binding.get(LOCAL_ONLY_LOCK)
        if not local_only and lock is not None:
            errors.setdefault("local_only", []).append(
                _("An admin restricted this key to local channels; only an admin can lift it.")
                if lock[1] == ADMIN
                else _("A team lead restricted this key to local channels; only a team lead or an admin can lift it.")
            )
        cleaned["local_only"] = local_only
    if allowed_models is not None:
        models = list(allowed_models)
        permitted = set(Model.objects.usable_by(owner).values_list("pk", flat=True))
        refused = sorted(str(m) for m in models if m.pk not in permitted)
        if refused:
            errors.setdefault("allowed_models", []).append(
                _("%(username)s may not use: %(models)s.") % {"username": owner.username, "models": listing(refused)}
            )
        cleaned["allowed_models"] = models
    if ip_allowlist is not None:
        try:
            cleaned["ip_allowlist"] = normalize_cidrs(ip_allowlist)
        except ValueError as exc:
            errors.setdefault("ip_allowlist", []).append(str(exc))
    if expires_at is not ...:
        if expires_at is not None and expires_at <= timezone.now() and (key is None or expires_at != key.expires_at):
            errors.setdefault("expires_at", []).append(_("The expiry must be in the future."))
        cleaned["expires_at"] = expires_at
    restrictions = binding_restrictions(key, editor)
    for name in RESTRICTIONS:
        if name not in cleaned:
            continue
        old, new = _restriction(key, name), _restriction_value(name, cleaned[name])
        if old == new:
            continue
        outside = [who for bound, who in restrictions.get(name, ()) if not _tighter(name, bound, new)]
        if outside:
            errors.setdefault(name, []).append(_restriction_error(name, outside[0]))
        for locks in (admin_ceilings, lead_ceilings):
            if locks.get(name) == 1 and old:  # recorded before the value was kept: keep the value it binds to now
                locks[name] = _restriction_record(name, old)
                cleaned["admin_ceilings"], cleaned["lead_ceilings"] = admin_ceilings, lead_ceilings
        if role:
            _lock(name, _restriction_record(name, new) if new else None, role, admin_ceilings, lead_ceilings)
            cleaned["admin_ceilings"], cleaned["lead_ceilings"] = admin_ceilings, lead_ceilings
    if errors:
        raise ValidationError(errors)
    return cleaned


@dataclass(frozen=True)
class EffectiveLimit:
    """One limit of a key as the gateway applies it, and who set the value that binds."""

    name: str
    label: str
    value: int | None  # what binds this key now; None: unlimited
    source: str  # "key" | "user" | "team" | "" (unlimited)
    set_by: str  # who set the binding value, for people: "an admin", "alice", ""
    key_value: int | None
    user_value: int | None
    admin_ceiling: int | None  # the key's own ceiling set by an admin (the owner may only lower it)
    team_value: int | None = None  # the owner's team's, shared by all its members
    lead_ceiling: int | None = None  # the key's own ceiling set by the owner's team lead

    @property
    def locked_for_owner(self) -> bool:
        return self.admin_ceiling is not None or self.lead_ceiling is not None


def effective_limits(key: Key) -> list[EffectiveLimit]:
    """Each limit of `key`: the key's own value, its owner's (shared by all their keys), their
    team's (shared by all its members), and the smallest, which is what binds this key."""
    ceilings = key.admin_ceilings or {}
    lead_ceilings = key.lead_ceilings or {}
    owner = key.owner
    team = owner.team
    user_ceilings = owner.admin_ceilings or {}
    rows = []
    for name, label in LIMIT_LABELS.items():
        own, user = getattr(key, name), getattr(owner, name)
        shared = getattr(team, name) if team is not None else None
        ceiling, lead_ceiling = ceilings.get(name), lead_ceilings.get(name)
        candidates = [(v, src) for v, src in ((own, "key"), (user, "user"), (shared, "team")) if v is not None]
        if not candidates:
            value, source, set_by = None, "", ""
        else:
            value, source = min(candidates, key=lambda c: c[0])  # ties: the key's own value first
            if source == "team":
                set_by = gettext("an admin")
            elif source == "user":
                set_by = (
                    gettext("a team lead")
                    if team is not None and user_ceilings.get(name) != user
                    else gettext("an admin")
                )
            elif ceiling is not None and own == ceiling:
                set_by = gettext("an admin")
            elif lead_ceiling is not None and own == lead_ceiling:
                set_by = gettext("a team lead")
            else:
                set_by = owner.username
        rows.append(EffectiveLimit(name, str(label), value, source, set_by, own, user, ceiling, shared, lead_ceiling))
    return rows
