import datetime

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from channels.models import Model
from keys.models import Key
from keys.services import issue_key, revoke_key, rotate_key, validate_key_settings, verify_key

pytestmark = pytest.mark.django_db


def test_plaintext_is_shown_once_and_only_a_keyed_hash_is_stored(alice):
    key, plaintext = issue_key(owner=alice, name="laptop")
    assert plaintext.startswith("gp-") and len(plaintext) > 40
    stored = Key.objects.values().get(pk=key.pk)
    assert plaintext not in str(stored)
    assert key.prefix == plaintext[:9] and key.last_four == plaintext[-4:]
    assert verify_key(plaintext) == key


def test_it_accepts_keys_with_whitespace_and_bearer_prefix(alice):
    key, plaintext = issue_key(owner=alice, name="laptop")
    assert verify_key(f"  {plaintext}\n") == key
    assert verify_key(f"Bearer {plaintext}") == key


def test_it_rejects_unknown_revoked_expired_and_inactive_owner_keys(alice):
    key, plaintext = issue_key(owner=alice, name="laptop")
    assert verify_key(plaintext[:-1] + ("A" if plaintext[-1] != "A" else "B")) is None
    revoke_key(key)
    assert verify_key(plaintext) is None

    _key2, plain2 = issue_key(owner=alice, name="k2", expires_at=timezone.now() - datetime.timedelta(seconds=1))
    assert verify_key(plain2) is None

    _key3, plain3 = issue_key(owner=alice, name="k3")
    alice.is_active = False
    alice.save()
    assert verify_key(plain3) is None


def test_rotation_keeps_settings_and_old_key_works_only_during_grace(alice):
    key, old_plain = issue_key(owner=alice, name="ci", tokens_per_day=1000, ip_allowlist=["10.0.0.0/8"])
    new, new_plain = rotate_key(key, grace=datetime.timedelta(minutes=5))
    assert new.name == "ci" and new.tokens_per_day == 1000 and new.ip_allowlist == ["10.0.0.0/8"]
    assert verify_key(new_plain) == new
    assert verify_key(old_plain) == key  # grace period
    Key.objects.filter(pk=key.pk).update(expires_at=timezone.now() - datetime.timedelta(seconds=1))
    assert verify_key(old_plain) is None


def test_rotation_without_grace_stops_the_old_key_now(alice):
    key, old_plain = issue_key(owner=alice, name="ci")
    rotate_key(key)
    assert verify_key(old_plain) is None


def test_key_defaults_prefill_limits(alice):
    alice.key_defaults = {"tokens_per_day": 5000, "bogus": 1}
    alice.save()
    key, _ = issue_key(owner=alice, name="k")
    assert key.tokens_per_day == 5000


def test_validation_reports_every_bad_field(alice):
    alice.tokens_per_day = 10_000
    alice.save()
    other = Model.objects.create(name="secret-model")
    alice.allowed_models.add(Model.objects.create(name="qwen3-32b"))
    with pytest.raises(ValidationError) as exc:
        validate_key_settings(
            alice,
            limits={"tokens_per_day": 20_000, "requests_per_minute": -5, "tokens_per_month": 10**15},
            allowed_models=[other],
            ip_allowlist=["10.0.0.0/33"],
            expires_at=timezone.now() - datetime.timedelta(days=1),
        )
    errors = exc.value.message_dict
    assert "10,000" in errors["tokens_per_day"][0]
    assert set(errors) == {
        "tokens_per_day",
        "requests_per_minute",
        "tokens_per_month",
        "allowed_models",
        "ip_allowlist",
        "expires_at",
    }


def test_validation_normalises_cidrs(alice):
    cleaned = validate_key_settings(alice, ip_allowlist="10.1.2.3/8, 192.168.1.7\n10.0.0.0/8")
    assert cleaned["ip_allowlist"] == ["10.0.0.0/8", "192.168.1.7/32"]


def test_rotation_keeps_a_future_expiry_on_the_replacement(alice):
    ends = timezone.now() + datetime.timedelta(days=3)
    key, _ = issue_key(owner=alice, name="temp", expires_at=ends)
    new, _ = rotate_key(key, grace=datetime.timedelta(minutes=5))
    assert new.expires_at == ends
    key.refresh_from_db()
    assert key.expires_at <= timezone.now() + datetime.timedelta(minutes=5)


def test_rotating_twice_within_a_minute_with_grace_works(alice):
    key, _ = issue_key(owner=alice, name="ci")
    second, _ = rotate_key(key, grace=datetime.timedelta(minutes=5))
    third, plain = rotate_key(second, grace=datetime.timedelta(minutes=5))
    assert third.name == "ci" and verify_key(plain) == third
    assert Key.objects.filter(owner=alice, revoked_at__isnull=True).count() == 3


def test_the_active_queryset_and_is_active_agree_on_every_state(alice, mallory, admin):
    past = timezone.now() - datetime.timedelta(seconds=1)
    issue_key(owner=alice, name="usable")
    revoke_key(issue_key(owner=alice, name="revoked")[0])
    issue_key(owner=alice, name="expired", expires_at=past)
    issue_key(owner=alice, name="grace", expires_at=timezone.now() + datetime.timedelta(minutes=5))
    issue_key(owner=mallory, name="owner-gone")
    mallory.is_active = False
    mallory.save()
    by_rule = {k.name for k in Key.objects.select_related("owner") if k.is_active}
    assert by_rule == {"usable", "grace"}
    assert set(Key.objects.active().values_list("name", flat=True)) == by_rule
    assert set(Key.objects.unexpired().values_list("name", flat=True)) == {"usable", "grace", "owner-gone"}
    assert set(Key.objects.not_revoked().values_list("name", flat=True)) == {"usable", "grace", "expired", "owner-gone"}
    assert set(Key.objects.visible_to(alice).values_list("owner__username", flat=True)) == {"alice"}
    assert Key.objects.visible_to(admin).count() == 5
