"""The allowlist rule (`mcpservers.access`): grants add up over key, user and team; none means nothing."""

import pytest
from django.utils import timezone

from keys.services import issue_key
from mcpservers.access import allowed_servers, allowed_tools
from tests.mcpservers.factories import grant, make_server

pytestmark = pytest.mark.django_db


def names(tools):
    return sorted(t.name for t in tools)


def test_a_key_without_grants_may_call_nothing(alice):
    make_server(tools=["echo", "secret"])
    key, _ = issue_key(owner=alice, name="k")
    assert allowed_servers(key) == []


def test_grants_of_key_user_and_team_add_up(alice, mallory, team):
    tracker = make_server(slug="tracker", tools=["echo", "secret"])
    docs = make_server(slug="docs", tools=["search"])
    wiki = make_server(slug="wiki", tools=["read"])
    key, _ = issue_key(owner=alice, name="k")
    grant(tracker, tool="echo", key=key)
    grant(docs, user=alice)
    grant(wiki, team=team)
    assert [s.slug for s in allowed_servers(key)] == ["docs", "tracker", "wiki"]
    assert names(allowed_tools(key, tracker)) == ["echo"]
    other, _ = issue_key(owner=mallory, name="m")
    assert allowed_servers(other) == []


def test_disabled_servers_and_tools_and_inactive_keys_are_left_out(alice):
    tracker = make_server(slug="tracker", tools=["echo"])
    key, _ = issue_key(owner=alice, name="k")
    grant(tracker, key=key)
    tracker.tools.update(enabled=False)
    assert allowed_servers(key) == []
    tracker.tools.update(enabled=True)
    tracker.enabled = False
    tracker.save()
    assert allowed_servers(key) == []
    tracker.enabled = True
    tracker.save()
    key.revoked_at = timezone.now()
    key.save()
    assert allowed_servers(key) == []


def test_a_recreated_server_starts_without_the_old_grants(alice):
    key, _ = issue_key(owner=alice, name="k")
    old = make_server(slug="tracker")
    grant(old, key=key)
    old.delete()
    make_server(slug="tracker")
    assert allowed_servers(key) == []
