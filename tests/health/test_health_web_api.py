"""Health pages and API: admin-only, Check now in place, chart data, alert targets, schedule."""

import datetime as dt
import re

import pytest
from django.test import Client
from django.urls import reverse
from django_celery_beat.models import PeriodicTask

from channels.choices import ChannelStatus
from channels.health.schedule import PROBE_TASK_NAME
from channels.models import AlertDelivery, AlertTarget, Channel, ProbeResult, StatusChange

pytestmark = pytest.mark.django_db


@pytest.fixture
def ch(make_channel):
    return make_channel("gpu-a", "http://127.0.0.1:9/v1")


def web_urls(ch, target=None):
    urls = [
        ("get", reverse("channel-health-overview")),
        ("get", reverse("channel-health", args=[ch.pk])),
        ("get", reverse("channel-health-series", args=[ch.pk])),
        ("post", reverse("channel-health-check", args=[ch.pk])),
        ("get", reverse("channel-alert-targets")),
        ("post", reverse("channel-health-schedule")),
    ]
    if target:
        urls += [("get", reverse("channel-alert-target-delete", args=[target.pk]))]
    return urls


def test_anonymous_is_sent_to_login_and_developers_get_403(alice_client, ch):
    client = Client()  # `client` and `alice_client` are one object in conftest
    target = AlertTarget.objects.create(name="t", kind="email", email="a@example.com")
    for method, url in web_urls(ch, target):
        resp = getattr(client, method)(url)
        assert resp.status_code == 302 and "/login/" in resp["Location"], url
    for method, url in web_urls(ch, target):
        assert getattr(alice_client, method)(url).status_code == 403, url
    assert ProbeResult.objects.count() == 0  # nobody probed anything


def test_api_is_admin_only(alice_client, ch):
    client = Client()
    for url in [
        "/api/health/channels/",
        f"/api/health/channels/{ch.pk}/probes/",
        "/api/health/alert-targets/",
        "/api/health/schedule/",
    ]:
        assert client.get(url).status_code in (401, 403)
        assert alice_client.get(url).status_code == 403
    assert alice_client.post(f"/api/health/channels/{ch.pk}/check/").status_code == 403


def test_health_page_shows_status_chart_routes_and_log(admin_client, upstream, make_channel):
    up = upstream(max_model_len=32768)
    ch = make_channel("gpu-b", up.base_url)
    admin_client.post(reverse("channel-health-check", args=[ch.pk]))

    page = admin_client.get(reverse("channel-health", args=[ch.pk])).content.decode()

    assert "Healthy" in page and "health-chart" in page and "chart-4.6.1.umd.min.js" in page
    assert "32768" in page and "mismatch" in page  # configured 4096 vs discovered
    assert "Check now" in page and 'hx-post="/channels/' in page
    assert "/v1/chat/completions" not in page and "//cdn" not in page.lower()  # a CSRF token may spell "cdn"


def test_check_now_answers_in_place_with_the_result_and_fresh_log(admin_client, upstream, make_channel):
    up = upstream()
    ch = make_channel("gpu-c", up.base_url)

    resp = admin_client.post(reverse("channel-health-check", args=[ch.pk]), HTTP_HX_REQUEST="true")

    html = resp.content.decode()
    assert resp.status_code == 200 and "<html" not in html  # a fragment, not a page
    assert 'id="health-check-result"' in html and "OK" in html and "unknown → <strong>healthy" in html
    assert (
        'id="health-probe-log" class="table-wrap" hx-swap-oob="true"' in html
        and 'id="health-status" hx-swap-oob="true"' in html
    )
    assert Channel.objects.get(pk=ch.pk).status == ChannelStatus.HEALTHY


def test_series_json(admin_client, ch):
    data = admin_client.get(reverse("channel-health-series", args=[ch.pk]) + "?range=7d").json()
    assert data["range"] == "7d" and len(data["labels"]) == 168
    assert admin_client.get(reverse("channel-health-series", args=[ch.pk]) + "?range=1y").status_code == 400


def test_unknown_channel_is_404(admin_client):
    assert admin_client.get(reverse("channel-health", args=[999999])).status_code == 404
    assert admin_client.get("/api/health/channels/999999/probes/").status_code == 404


def test_alert_targets_create_validate_and_delete_with_confirmation(admin_client):
    url = reverse("channel-alert-targets")
    bad = admin_client.post(url, {"name": "x", "kind": "webhook", "url": ""})
    assert bad.status_code == 400 and "A webhook needs a URL." in bad.content.decode()
    ok = admin_client.post(url, {"name": "slack", "kind": "webhook", "url": "http://127.0.0.1:9/hook", "enabled": "on"})
    assert ok.status_code == 302
    target = AlertTarget.objects.get(name="slack")

    confirm = admin_client.get(reverse("channel-alert-target-delete", args=[target.pk]))
    assert "Delete alert target slack?" in confirm.content.decode()
    assert AlertTarget.objects.filter(pk=target.pk).exists()  # GET only asks
    admin_client.post(reverse("channel-alert-target-delete", args=[target.pk]))
    assert not AlertTarget.objects.filter(pk=target.pk).exists()


def test_a_webhook_typed_without_its_scheme_is_an_https_one(admin_client):
    url = reverse("channel-alert-targets")
    ok = admin_client.post(url, {"name": "slack", "kind": "webhook", "url": "hooks.slack.com/services/T0/B0/x"})
    assert ok.status_code == 302
    assert AlertTarget.objects.get(name="slack").url == "https://hooks.slack.com/services/T0/B0/x"


def test_alert_targets_sort_by_any_column_both_ways(admin_client):
    AlertTarget.objects.create(name="b-mail", kind="email", email="a@example.com", enabled=False)
    AlertTarget.objects.create(name="a-hook", kind="webhook", url="http://127.0.0.1:9/z", enabled=True)
    AlertTarget.objects.create(name="c-hook", kind="webhook", url="http://127.0.0.1:9/b", enabled=True)
    url = reverse("channel-alert-targets")

    def names(query: str) -> list[str]:
        page = admin_client.get(url + query).content.decode()
        return re.findall(r"<td>([abc]-(?:mail|hook))</td>", page)

    assert names("") == ["a-hook", "b-mail", "c-hook"]
    assert names("?sort=-name") == ["c-hook", "b-mail", "a-hook"]
    assert names("?sort=destination") == ["b-mail", "c-hook", "a-hook"]  # a@…, http://…/b, http://…/z
    assert names("?sort=enabled")[0] == "b-mail"
    page = admin_client.get(url + "?sort=-kind").content.decode()
    assert 'aria-sort="descending"><a href="?sort=kind"' in page
    assert names("?sort=nonsense") == ["a-hook", "b-mail", "c-hook"]  # ignored, not a 500


def test_alert_targets_api_crud(admin_client):
    r = admin_client.post(
        "/api/health/alert-targets/", {"name": "mail", "kind": "email"}, content_type="application/json"
    )
    assert r.status_code == 400 and "email" in r.json()
    r = admin_client.post(
        "/api/health/alert-targets/",
        {"name": "mail", "kind": "email", "email": "ops@example.com"},
        content_type="application/json",
    )
    assert r.status_code == 201
    pk = r.json()["id"]
    dup = admin_client.post(
        "/api/health/alert-targets/",
        {"name": "mail", "kind": "email", "email": "x@example.com"},
        content_type="application/json",
    )
    assert dup.status_code == 400
    assert (
        admin_client.patch(
            f"/api/health/alert-targets/{pk}/", {"enabled": False}, content_type="application/json"
        ).json()["enabled"]
        is False
    )
    assert admin_client.delete(f"/api/health/alert-targets/{pk}/").status_code == 204


def test_api_check_history_summary_and_probe_settings(admin_client, upstream, make_channel):
    up = upstream()
    ch = make_channel("gpu-d", up.base_url)

    r = admin_client.post(f"/api/health/channels/{ch.pk}/check/")
    assert r.status_code == 200
    body = r.json()
    assert body["previous_status"] == "unknown" and body["channel"]["status"] == "healthy"
    assert body["probe"]["ok"] is True and body["probe"]["ttft_ms"] is not None

    history = admin_client.get(f"/api/health/channels/{ch.pk}/probes/").json()
    assert history["count"] == 1 and history["results"][0]["source"] == "active"

    listing = admin_client.get("/api/health/channels/?status=healthy").json()
    assert [c["name"] for c in listing["results"]] == ["gpu-d"] and listing["results"][0]["samples_24h"] == 1

    summary = admin_client.get("/api/health/channels/summary/").json()
    assert summary["by_status"]["healthy"] == 1 and summary["recent_changes"][0]["to_status"] == "healthy"

    r = admin_client.patch(
        f"/api/health/channels/{ch.pk}/", {"probe_inference": False, "status": "down"}, content_type="application/json"
    )
    assert r.status_code == 200 and r.json()["probe_inference"] is False and r.json()["status"] == "healthy"
    assert (
        admin_client.patch(
            f"/api/health/channels/{ch.pk}/", {"probe_max_tokens": 0}, content_type="application/json"
        ).status_code
        == 400
    )


def test_checking_a_channel_whose_stored_key_no_header_can_carry_answers_why_not_a_500(admin_client, make_channel):
    ch = make_channel("cyrillic", "http://127.0.0.1:9/v1", kind="openai")
    Channel.objects.filter(pk=ch.pk).update(api_key="ключ")

    r = admin_client.post(f"/api/health/channels/{ch.pk}/check/")

    assert r.status_code == 200
    body = r.json()
    assert body["probe"]["ok"] is False and body["probe"]["error"] == "config"
    channel = body["channel"]
    assert channel["status"] == "down" and "cannot be sent in an HTTP header" in channel["status_message"]
    page = admin_client.post(reverse("channel-health-check", args=[ch.pk]), HTTP_HX_REQUEST="true")
    assert page.status_code == 200 and "cannot be sent in an HTTP header" in page.content.decode()


def test_probe_schedule_is_editable_through_the_api_and_the_page(admin_client):
    assert admin_client.get("/api/health/schedule/").json()["interval_seconds"] == 60
    r = admin_client.put(
        "/api/health/schedule/", {"interval_seconds": 30, "enabled": True}, content_type="application/json"
    )
    assert r.status_code == 200 and r.json()["interval_seconds"] == 30
    task = PeriodicTask.objects.get(name=PROBE_TASK_NAME)
    assert (
        task.interval.every == 30
        and task.interval.period == "seconds"
        and task.task == "channels.tasks.probe_all_channels"
    )
    assert (
        admin_client.patch(
            "/api/health/schedule/", {"interval_seconds": 1}, content_type="application/json"
        ).status_code
        == 400
    )

    resp = admin_client.post(reverse("channel-health-schedule"), {"interval_seconds": 120, "enabled": "on"})
    assert resp.status_code == 302
    assert PeriodicTask.objects.get(name=PROBE_TASK_NAME).interval.every == 120


def test_the_default_schedule_exists_after_migrate():
    names = set(PeriodicTask.objects.values_list("task", flat=True))
    assert {
        "channels.tasks.probe_all_channels",
        "channels.tasks.aggregate_probe_hours",
        "channels.tasks.prune_probe_results",
    } <= names


def test_overview_and_partials_render(admin_client, upstream, make_channel):
    from django.template import Context, Template

    up = upstream()
    ch = make_channel("gpu-e", up.base_url)
    admin_client.post(reverse("channel-health-check", args=[ch.pk]))
    page = admin_client.get(reverse("channel-health-overview")).content.decode()
    assert "gpu-e" in page and "Recent status changes" in page and 'data-status="healthy"' in page

    html = Template("{% load channel_health %}{% health_badge channel %}{% health_dashboard %}").render(
        Context({"channel": Channel.objects.get(pk=ch.pk)})
    )
    assert "Healthy" in html and 'class="health-dashboard"' in html and "gpu-e" in html


def test_the_ui_pages_show_the_health_partials(admin_client, upstream, make_channel, django_assert_max_num_queries):
    up = upstream()
    channels = [make_channel(f"list-{i}", up.base_url) for i in range(8)]
    from channels.health import services

    services.run_round()

    with django_assert_max_num_queries(25):  # badges are filled in one go, not per row
        listing = admin_client.get(reverse("channel_list")).content.decode()
    assert listing.count('data-status="healthy"') == 8

    detail = admin_client.get(reverse("channel_detail", args=[channels[0].pk])).content.decode()
    assert 'class="health-detail"' in detail and "Check now" in detail and 'id="health-probe-log"' in detail

    dashboard = admin_client.get(reverse("dashboard")).content.decode()
    assert 'class="health-dashboard"' in dashboard


def test_check_channels_command_runs_one_round(upstream, make_channel):
    from io import StringIO

    from django.core.management import call_command

    up = upstream()
    make_channel("cmd", up.base_url)
    out = StringIO()
    call_command("check_channels", "--once", stdout=out)
    assert "unknown → healthy" in out.getvalue() and "1 channels in" in out.getvalue()


def test_celery_task_probe_channel_runs_inline(upstream, make_channel):
    from channels.tasks import probe_all_channels, probe_channel

    up = upstream()
    ch = make_channel("task", up.base_url)
    assert probe_channel(ch.pk) == "healthy"
    assert probe_channel(999999) is None
    assert probe_all_channels() == 1


def test_health_pages_write_times_as_every_other_page_does(admin_client, ch):
    """Regression: the health pages wrote "Dec 7 14:11:49", in Chinese "十二月 7 14:11:49", where
    every other page writes 2026-12-07 14:11."""
    at = dt.datetime(2026, 12, 7, 14, 11, 49, tzinfo=dt.UTC)
    ProbeResult.objects.create(channel=ch, created=at, ok=True)
    change = StatusChange.objects.create(
        channel=ch, created=at, from_status=ChannelStatus.UNKNOWN, to_status=ChannelStatus.HEALTHY
    )
    AlertDelivery.objects.create(status_change=change, target_name="slack", created=at, ok=True)
    zh = {"HTTP_ACCEPT_LANGUAGE": "zh-hans"}
    pages = {  # how many times each page writes the time
        reverse("channel-health", args=[ch.pk]): ("2026-12-07 14:11:49", 2),  # the probe log, the changes
        reverse("channel-alert-targets"): ("2026-12-07 14:11:49", 1),
        reverse("dashboard"): ("2026-12-07 14:11", 1),
    }
    for url, (when, times) in pages.items():
        page = admin_client.get(url, **zh).content.decode()
        assert page.count(when) >= times and "十二月" not in page, url
