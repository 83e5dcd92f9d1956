"""Two admins edit the same object: the later save does not undo the earlier one unseen."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse

from accounts.models import Team

pytestmark = pytest.mark.django_db


def stamp_of(page: bytes) -> str:
    found = re.search(rb'name="edited_from" value="([0-9a-f]+)"', page)
    assert found, "the edit form carries what it showed"
    return found.group(1).decode()


def team_form(team: Team, stamp: str, **changes) -> dict:
    form = {"name": team.name, "description": team.description or "", "edited_from": stamp}
    for name in ("requests_per_minute", "tokens_per_minute", "tokens_per_day", "parallel_requests"):
        value = getattr(team, name, None)
        form[name] = "" if value is None else str(value)
    form.update(changes)
    return form


def test_a_save_over_someone_elses_change_is_refused_until_sent_again(admin):
    team = Team.objects.create(name="red", tokens_per_day=1000)
    url = reverse("team_edit", args=[team.pk])
    first, second = Client(), Client()
    first.force_login(admin)
    second.force_login(admin)
    stale = stamp_of(first.get(url).content)  # the first admin opens the page…

    fresh = stamp_of(second.get(url).content)  # …the second changes the daily tokens meanwhile
    assert second.post(url, team_form(team, fresh, tokens_per_day="777")).status_code == 302
    team.refresh_from_db()
    assert team.tokens_per_day == 777

    # The first saves a description from the page as it was: refused, the 777 kept.
    stale_values = team_form(team, stale, description="for the red squad", tokens_per_day="1000")
    refused = first.post(url, stale_values)
    assert refused.status_code == 409 and "changed by someone else" in refused.content.decode()
    team.refresh_from_db()
    assert (team.tokens_per_day, team.description) == (777, "")

    # Sent again from the page that said so, it is the first admin's choice: saved.
    again = first.post(url, {**stale_values, "edited_from": stamp_of(refused.content)})
    assert again.status_code == 302
    team.refresh_from_db()
    assert (team.tokens_per_day, team.description) == (1000, "for the red squad")


def test_a_change_of_something_the_form_does_not_show_is_no_conflict(admin_client, channel):
    """A channel's health moves on its own (every probe round): not another admin's edit."""
    url = reverse("channel_edit", args=[channel.pk])
    stamp = stamp_of(admin_client.get(url).content)
    channel.status = "down"
    channel.save()
    form = {
        "name": channel.name,
        "kind": channel.kind,
        "base_url": channel.base_url,
        "priority": "3",
        "weight": "1",
        "enabled": "on",
        "edited_from": stamp,
    }
    assert admin_client.post(url, form).status_code == 302
    channel.refresh_from_db()
    assert channel.priority == 3
