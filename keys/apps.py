from typing import Any

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class KeysConfig(AppConfig):
    name = "keys"
    verbose_name = "Keys"

    def ready(self) -> None:
        from accounts.signals import left_lead, user_reactivated
        from channels.signals import daily_prune
        from portal import audit, dashboard, showback

        from .models import Budget, Key, PayloadLogging, RequestPayload
        from .payloads.services import prune as prune_payloads
        from .usage.retention import prune as prune_usage

        audit.register(Key, ignore={"last_used_at"})
        audit.register(PayloadLogging)
        audit.register(Budget)
        audit.name_type(RequestPayload)  # every read of its bodies
        daily_prune.connect(prune_payloads, dispatch_uid="keys-prune-request-payloads")
        daily_prune.connect(prune_usage, dispatch_uid="keys-prune-usage")
        dashboard.register_stat(50, _("Active keys"), _active_keys, "key_all", "?state=active")
        dashboard.register_context(lambda user: {"my_active_keys": _active_keys(owner=user)})
        dashboard.register_context(_unpriced_under_budget)
        dashboard.register_step(
            40, "key", _("Give the developer a key"), _developer_has_key, "key_create", _("Create a key")
        )
        user_reactivated.connect(_revoke_keys_on_reactivation, dispatch_uid="keys-revoke-on-reactivation")
        from .services import drop_lead_locks

        left_lead.connect(drop_lead_locks, dispatch_uid="keys-drop-lead-locks")
        dashboard.register_section(10, "keys/_dashboard_usage.html", _usage_last_day)
        from .usage.services import spend_by_person, windows_token_shares

        showback.register_token_source(windows_token_shares)
        showback.register_spend_source(spend_by_person)
        from channels.services import register_model_holders

        register_model_holders(_keys_limited_to)  # deleting that model must not open these keys to all


def _keys_limited_to(model: Any) -> list[str]:
    """Keys not revoked whose allowed models are `model` alone (an expired key can be extended)."""
    from django.db.models import Count

    from .models import Key

    holding = Key.allowed_models.through.objects.filter(model=model).values("key_id")
    keys = (
        Key.objects.not_revoked()
        .filter(pk__in=holding)
        .annotate(n=Count("allowed_models"))
        .filter(n=1)
        .select_related("owner")
        .order_by("owner__username", "name")
    )
    return [_("key %(key)s of %(owner)s") % {"key": k.shown_name, "owner": k.owner.username} for k in keys]


def _usage_last_day(user: Any) -> dict[str, Any]:
    from .usage.services import last_day

    return last_day(user)


def _unpriced_under_budget(user: Any) -> dict[str, Any]:
    """Of the models the dashboard lists as `user`'s, the ids of those the gateway refuses them
    under their own or their team's budget for want of a price (`model_not_priced`), as
    `/v1/models`, Connect and the playground leave them out."""
    from channels.models import Model

    from .budgets.services import budgeted, unpayable

    if not budgeted(user):
        return {"unpriced_under_budget": set()}
    return {"unpriced_under_budget": set(unpayable(Model.objects.usable_by(user)).values_list("pk", flat=True))}


def _developer_has_key() -> bool:
    from accounts.choices import Role

    from .models import Key

    return Key.objects.not_revoked().exclude(owner__role=Role.ADMIN).exists()


def _active_keys(**filters: Any) -> int:
    from .models import Key

    return Key.objects.unexpired().filter(**filters).count()


def _revoke_keys_on_reactivation(sender: Any, user: Any, restore_keys: bool, **kwargs: Any) -> None:
    """A reactivated user's old keys stay dead unless the admin chose to restore them."""
    from .models import Key

    if not restore_keys:
        for key in Key.objects.filter(owner=user).not_revoked():
            key.revoke()  # one save each: the audit log and the gateway's key cache see it
