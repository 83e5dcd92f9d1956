"""The dashboard is composed by the apps (portal.dashboard): each registers its counters and its
section at start-up, so these tests check that every app's part arrives, in order, with real counts."""

from __future__ import annotations

import datetime
import re

from django.urls import reverse
from django.utils import timezone

from channels.models import Model
from keys.services import issue_key, revoke_key


def _tiles(page: str) -> list[tuple[str, str, str]]:
    """(label, value, link) of each counter tile, in page order."""
    found = re.findall(
        r'<article class="stat"><a href="([^"]+)"><span class="value">([^<]*)</span><span class="label">([^<]*)</span>',
        page,
    )
    return [(label, value, href) for href, value, label in found]


def test_admin_sees_every_apps_counter_in_order_with_real_counts(admin_client, alice, mallory, model, alice_key):
    issue_key(owner=mallory, name="old", expires_at=timezone.now() - datetime.timedelta(days=1))
    revoke_key(issue_key(owner=mallory, name="gone")[0])
    alice.is_active = False
    alice.save()
    page = admin_client.get(reverse("dashboard")).content.decode()
    assert _tiles(page) == [
        ("Hosts", "1", reverse("host_list")),
        ("Channels", "1", reverse("channel_list")),
        ("Models", "1", reverse("model_list")),
        ("Users", "2", reverse("user_list")),  # admin and mallory; alice is deactivated
        ("Active keys", "1", reverse("key_all") + "?state=active"),  # alice's: not revoked, not expired
    ]
    assert "Recent changes" in page and reverse("audit_log") in page


def test_a_developer_sees_their_own_keys_and_models_and_no_counters(client, alice, mallory, model, alice_key):
    Model.objects.create(name="hidden-model", enabled=False)
    issue_key(owner=mallory, name="mallory-laptop")
    client.force_login(alice)
    page = client.get(reverse("dashboard")).content.decode()
    assert _tiles(page) == []
    assert "Recent changes" not in page
    assert "<strong>1</strong> active key" in page
    assert "<code>qwen3-32b</code>" in page and "hidden-model" not in page
