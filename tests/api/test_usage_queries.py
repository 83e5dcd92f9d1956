"""A script's usage queries: a date, number or choice the API cannot read, a range that ends before
it starts, or one the retention no longer covers is a 400 naming the parameter, never the
unfiltered figures (which the script took for the ones it asked for)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from accounts.services import issue_token
from gateway.usage import write_batch
from keys.services import issue_key
from tests.keys.test_usage import event

pytestmark = pytest.mark.django_db


@pytest.fixture
def script(alice):
    """alice's script: her API token, as a script sends it."""
    from rest_framework.test import APIClient

    _token, plaintext = issue_token(user=alice, name="report script")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {plaintext}")
    return client


@pytest.fixture
def used(alice):
    key, _plaintext = issue_key(owner=alice, name="laptop")
    write_batch([event(key)])
    return key


def refused(response, parameter: str) -> str:
    assert response.status_code == 400, response.content[:300]
    return " ".join(response.json()[parameter])


@pytest.mark.parametrize(
    ("query", "parameter", "words"),
    [
        ({"since": "last tuesday"}, "since", "YYYY-MM-DD"),
        ({"until": "2026-02-30"}, "until", "YYYY-MM-DD"),
        ({"days": "thirty"}, "days", "1 to 366"),
        ({"days": "0"}, "days", "1"),
        ({"days": "400"}, "days", "366"),
        ({"group_by": "nope"}, "group_by", "model, user, team, key"),
        ({"group_by": "channel"}, "group_by", "model, user, team, key"),
        ({"since": "2026-03-02", "until": "2026-03-01"}, "until", "since"),
        ({"since": "2026-03-01", "days": "7"}, "days", "since"),
    ],
)
def test_a_summary_query_it_cannot_read_is_a_400_naming_the_parameter(script, used, query, parameter, words):
    assert words in refused(script.get("/api/usage/summary/", query), parameter)


def test_a_summary_reaching_past_the_kept_daily_totals_says_how_far_back_they_go(script, used, settings):
    settings.PORTAL_ROLLUP_RETENTION_DAYS = 10
    old = (timezone.now().date() - dt.timedelta(days=11)).isoformat()
    assert "kept 10 days" in refused(script.get("/api/usage/summary/", {"since": old}), "since")
    assert "kept 10 days" in refused(script.get("/api/usage/summary/", {"days": 30}), "days")
    assert "kept 10 days" in refused(script.get("/api/usage/summary/", {"until": "0001-01-02"}), "until")


def test_the_summary_counts_the_days_from_since_to_until(script, used):
    today = timezone.now().date()
    yesterday = (today - dt.timedelta(days=1)).isoformat()
    before = script.get("/api/usage/summary/", {"since": yesterday, "until": yesterday}).json()
    assert before["results"] == [] and before["since"] == before["until"] == yesterday
    now = script.get("/api/usage/summary/", {"since": yesterday}).json()
    assert [row["total_tokens"] for row in now["results"]] == [8] and now["until"] == today.isoformat()


def test_a_record_or_daily_range_that_ends_before_it_starts_is_a_400_on_until(script, used):
    late, early = "2026-03-02T00:00:00Z", "2026-03-01T00:00:00Z"
    assert "since" in refused(script.get("/api/usage/records/", {"since": late, "until": early}), "until")
    assert "since" in refused(script.get("/api/usage/daily/", {"since": "2026-03-02", "until": "2026-03-01"}), "until")


def test_a_record_range_before_the_kept_records_says_how_far_back_they_go(script, used, settings):
    settings.PORTAL_USAGE_RETENTION_DAYS = 7
    until = (timezone.now() - dt.timedelta(days=8)).isoformat()
    assert "kept 7 days" in refused(script.get("/api/usage/records/", {"until": until}), "until")
    assert script.get("/api/usage/records/", {"since": until}).json()["count"] == 1  # reaches into what is kept


def test_an_audit_or_request_log_range_that_ends_before_it_starts_is_a_400(admin_api, admin_client):
    query = {"created_after": "2026-03-02T00:00:00Z", "created_before": "2026-03-01T00:00:00Z"}
    assert "created_after" in refused(admin_api.get("/api/audit-log/", query), "created_before")
    query = {"since": "2026-03-02T00:00:00Z", "until": "2026-03-01T00:00:00Z"}
    assert "since" in refused(admin_api.get("/api/request-logs/", query), "until")
    page = admin_client.get("/usage/request-logs/", {"since": "2026-03-02", "until": "2026-03-01"})
    assert "until must not be before since." in page.content.decode()


def test_a_yes_no_it_cannot_read_on_probes_and_deliveries_is_a_400(admin_api, probe):
    assert refused(admin_api.get(f"/api/health/channels/{probe.channel_id}/probes/", {"ok": "maybe"}), "ok")
    assert admin_api.get(f"/api/health/channels/{probe.channel_id}/probes/", {"ok": "1"}).json()["count"] == 1
    assert admin_api.get(f"/api/health/channels/{probe.channel_id}/probes/", {"ok": "no"}).json()["count"] == 0
    assert refused(admin_api.get("/api/health/alert-targets/deliveries/", {"failed": "maybe"}), "failed")


def test_the_schema_documents_the_usage_parameters_with_their_formats(openapi_schema):
    def parameters(path: str) -> dict:
        return {p["name"]: p["schema"] for p in openapi_schema["paths"][path]["get"]["parameters"]}

    summary = parameters("/api/usage/summary/")
    assert summary["since"]["format"] == summary["until"]["format"] == "date"
    assert summary["days"]["type"] == "integer"
    records = parameters("/api/usage/records/")
    assert records["since"]["format"] == records["until"]["format"] == "date-time"
    assert parameters("/api/usage/daily/")["since"]["format"] == "date"
    assert parameters("/api/health/alert-targets/deliveries/")["failed"]["type"] == "boolean"


@pytest.mark.parametrize(
    "url",
    [
        "/usage/?days=abc",
        "/usage/all/?days=9999",
        "/usage/all/?group_by=nope",
        "/usage/all/?since=yesterday&format=csv",
    ],
)
def test_a_usage_page_asked_for_what_it_cannot_show_says_so_in_the_readers_language(admin_client, used, url):
    page = admin_client.get(url)
    assert page.status_code == 400 and page["Content-Type"].startswith("text/html")
    assert "cannot show" in page.content.decode()
    chinese = admin_client.get(url, HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "无法显示" in chinese


@pytest.mark.parametrize("days", ["abc", "0", "-5", "367"])
def test_a_period_out_of_range_is_told_in_the_same_words_as_one_not_a_number(alice_client, days):
    page = alice_client.get("/usage/", {"days": days}, HTTP_ACCEPT_LANGUAGE="en")
    assert page.status_code == 400 and "Enter a whole number of days from 1 to 366." in page.content.decode()
    alice_client.post("/language/", {"language": "zh-hans", "next": "/"})
    chinese = alice_client.get("/usage/", {"days": days}).content.decode()
    assert "时间段（days）：请输入 1 到 366 之间的整数天数。" in chinese and "确保" not in chinese


def test_the_request_list_page_says_a_range_ends_before_it_starts(admin_client, used):
    page = admin_client.get("/usage/requests/", {"since": "2026-03-02T00:00", "until": "2026-03-01T00:00"})
    assert "until must not be before since." in page.content.decode()


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("/gpu-hours/?month=2026-13", "YYYY-MM"),
        ("/gpu-hours/?month=march&format=csv", "YYYY-MM"),
        ("/gpu-hours/?month=0001-01", "go back to"),
        ("/gpu-hours/?month=9999-12", "has not started"),
    ],
)
def test_the_showback_asked_for_a_month_it_cannot_show_says_so(admin_client, url, words):
    page = admin_client.get(url)
    assert page.status_code == 400 and words in page.content.decode()


def test_the_usage_page_shows_the_days_asked_for_as_the_chosen_period(admin_client, used):
    today = timezone.now().date()
    since = (today - dt.timedelta(days=3)).isoformat()
    page = admin_client.get("/usage/all/", {"since": since}).content.decode()
    assert f'<option value="" selected>{since} – {today.isoformat()}</option>' in page
    assert f"since={since}&amp;until={today.isoformat()}&amp;format=csv" in page  # the CSV of those days
