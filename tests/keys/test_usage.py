"""Usage: batched writes with daily aggregates, "My usage", the admin report with CSV, the REST API."""

from __future__ import annotations

import asyncio
import csv
import datetime as dt
import io
import re

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from channels.models import Channel
from gateway.usage import UsageEvent, UsageWriter, write_batch
from keys.models import Key, UsageDaily, UsageRecord
from keys.services import issue_key

pytestmark = pytest.mark.django_db


def event(key: Key, **overrides) -> UsageEvent:
    fields = dict(
        created=timezone.now(),
        request_id="r1",
        key_id=key.id,
        user_id=key.owner_id,
        model="qwen3-32b",
        channel_id=None,
        surface="chat",
        stream=False,
        prompt_tokens=3,
        completion_tokens=5,
        estimated=False,
        status="ok",
        http_status=200,
        latency_ms=12.5,
        ttft_ms=3.0,
    )
    fields.update(overrides)
    return UsageEvent(**fields)


@pytest.fixture
def alice_key(alice):
    return issue_key(owner=alice, name="laptop")[0]


@pytest.fixture
def mallory_key(mallory):
    return issue_key(owner=mallory, name="evil")[0]


def test_batches_write_records_and_add_up_daily_buckets(alice_key):
    channel = Channel.objects.create(name="c1", base_url="http://127.0.0.1:1/v1")
    write_batch([event(alice_key), event(alice_key, estimated=True, completion_tokens=7, channel_id=channel.id)])
    write_batch([event(alice_key, status="upstream_error", http_status=502, prompt_tokens=0, completion_tokens=0)])
    assert UsageRecord.objects.count() == 3
    record = UsageRecord.objects.filter(channel=channel).get()
    assert (record.total_tokens, record.estimated, record.latency_ms) == (10, True, 12.5)
    no_channel = UsageDaily.objects.get(channel__isnull=True)
    assert (no_channel.requests, no_channel.errors, no_channel.total_tokens) == (2, 1, 8)
    with_channel = UsageDaily.objects.get(channel=channel)
    assert (with_channel.requests, with_channel.estimated_requests, with_channel.total_tokens) == (1, 1, 10)
    alice_key.refresh_from_db()
    assert alice_key.last_used_at is not None


def test_the_writer_flushes_in_the_background_and_at_stop(alice_key, transactional_db, settings, tmp_path):
    # A journal folder of its own: journals an interrupted run left in the data folder would be
    # adopted (and their records written) by this writer too.
    settings.GATEWAY_STATE_DIR = tmp_path

    async def run():
        writer = UsageWriter(interval=0.05)
        writer.start()
        writer.record(event(alice_key))
        await asyncio.sleep(0.3)
        writer.record(event(alice_key, request_id="r2"))
        await writer.stop()

    asyncio.run(run())
    assert sorted(UsageRecord.objects.values_list("request_id", flat=True)) == ["r1", "r2"]


def test_my_usage_shows_only_my_tokens_against_my_limits(client, alice, alice_key, mallory_key):
    alice.tokens_per_day = 1000
    alice.save()
    write_batch([event(alice_key, completion_tokens=97), event(mallory_key, model="secret-model")])
    client.force_login(alice)
    page = client.get("/usage/")
    html = page.content.decode()
    assert page.status_code == 200
    assert "qwen3-32b" in html and "secret-model" not in html
    assert "vendor/chart-4.6.1.umd.min.js" in html and "usage-chart-data" in html
    assert "1,000" in html and 'value="10"' in html  # 100 of 1,000 tokens today


def test_admin_usage_groups_and_exports_csv(admin_client, alice_key, mallory_key, alice):
    evil = issue_key(owner=alice, name="=HYPERLINK(1)")[0]
    hidden = issue_key(owner=alice, name="\t@SUM(1)")[0]  # a tab first hides the sign from a glance
    write_batch([event(alice_key), event(mallory_key, model="llama-8b"), event(evil), event(hidden, model="llama-8b")])
    by_user = admin_client.get("/usage/all/?group_by=user").content.decode()
    assert "alice" in by_user and "mallory" in by_user
    csv_text = admin_client.get("/usage/all/?group_by=model&format=csv").content.decode("utf-8-sig")
    lines = csv_text.strip().splitlines()
    assert lines[0].startswith("Model,First day (UTC),Last day (UTC),Requests,")
    assert any(line.startswith("qwen3-32b,") and ",16," in line for line in lines)
    keyed = admin_client.get("/usage/all/?group_by=key&format=csv").content.decode("utf-8-sig")
    assert "'=HYPERLINK(1)" in keyed
    cells = [row[0] for row in csv.reader(io.StringIO(keyed))]
    assert [c for c in cells if "SUM" in c] == [f"'\t@SUM(1) ({hidden.masked}, alice)"]


def test_the_usage_csv_opens_in_excel_in_the_readers_language(admin_client, alice):
    """Excel reads a CSV without a byte order mark in the system's code page: on a Chinese Windows
    the Chinese key name came out as mojibake, under English ids for headers."""
    chinese_name = issue_key(owner=alice, name="笔记本")[0]
    write_batch([event(chinese_name)])
    download = admin_client.get("/usage/all/?group_by=key&format=csv", HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert download["Content-Type"] == "text/csv; charset=utf-8"
    assert download.content.startswith(b"\xef\xbb\xbf")  # UTF-8's byte order mark
    header, row = csv.reader(io.StringIO(download.content.decode("utf-8-sig")))
    assert header[:4] == ["密钥", "首日（UTC）", "末日（UTC）", "请求数"]
    assert header[-4:] == ["缓存命中率", "费用", "币种", "无价格的请求"]
    assert row[0] == f"笔记本 ({chinese_name.masked}, alice)" and row[header.index("总 token 数")] == "8"


def test_usage_tables_sort_by_any_column_both_ways(admin_client, client, alice_key, mallory_key, alice):
    write_batch(
        [
            event(alice_key, model="b-model", prompt_tokens=100, completion_tokens=1),
            event(mallory_key, model="a-model", prompt_tokens=1, completion_tokens=50, request_id="m1"),
            event(mallory_key, model="c-model", prompt_tokens=10, completion_tokens=10, request_id="m2"),
        ]
    )

    def models(url: str) -> list[str]:
        return re.findall(r"<td>([abc]-model)</td>", admin_client.get(url).content.decode())

    base = "/usage/all/?group_by=model&days=7"
    assert models(base) == ["b-model", "a-model", "c-model"]  # most tokens first by default
    assert models(base + "&sort=name") == ["a-model", "b-model", "c-model"]
    assert models(base + "&sort=-name") == ["c-model", "b-model", "a-model"]
    assert models(base + "&sort=completion_tokens") == ["b-model", "c-model", "a-model"]
    assert models(base + "&sort=-prompt_tokens") == ["b-model", "c-model", "a-model"]
    page = admin_client.get(base + "&sort=-requests").content.decode()
    assert 'aria-sort="descending"' in page and "group_by=model" in page.split('aria-sort="descending"')[1][:200]
    assert models(base + "&sort=nonsense") == ["b-model", "a-model", "c-model"]  # ignored, not a 500

    client.force_login(alice)
    write_batch([event(alice_key, model="a-model", prompt_tokens=1, completion_tokens=1, request_id="a2")])
    mine = client.get("/usage/?sort=-model").content.decode()
    assert re.findall(r"<td>([abc]-model)</td>", mine) == ["b-model", "a-model"]


def test_developers_cannot_see_the_admin_report(client, alice):
    client.force_login(alice)
    assert client.get("/usage/all/").status_code == 403
    assert client.get("/usage/all/?format=csv").status_code == 403


def test_usage_pages_need_login(client):
    assert client.get("/usage/").status_code == 302


def api(user) -> APIClient:
    c = APIClient()
    c.force_authenticate(user)
    return c


def test_api_records_are_scoped_to_the_caller(alice, mallory, admin, alice_key, mallory_key):
    write_batch([event(alice_key), event(mallory_key, request_id="m1")])
    mine = api(alice).get("/api/usage/records/").json()
    assert [r["request_id"] for r in mine["results"]] == ["r1"]
    assert mine["results"][0]["key_name"] == "laptop" and mallory.username not in str(mine)
    other = UsageRecord.objects.get(request_id="m1")
    assert api(alice).get(f"/api/usage/records/{other.pk}/").status_code == 404
    assert api(admin).get("/api/usage/records/").json()["count"] == 2
    assert api(alice).post("/api/usage/records/", {}).status_code == 405


def test_api_daily_and_summary(alice, admin, alice_key, mallory_key):
    write_batch([event(alice_key), event(alice_key), event(mallory_key, model="llama-8b")])
    daily = api(alice).get("/api/usage/daily/").json()["results"]
    assert len(daily) == 1 and daily[0]["requests"] == 2 and daily[0]["total_tokens"] == 16
    summary = api(admin).get("/api/usage/summary/?group_by=model&days=7").json()
    assert {r["group"]: r["total_tokens"] for r in summary["results"]} == {"qwen3-32b": 16, "llama-8b": 8}
    assert summary["since"] == (timezone.now().date() - dt.timedelta(days=6)).isoformat()
    mine = api(alice).get("/api/usage/summary/?group_by=user").json()["results"]
    assert [r["group"] for r in mine] == ["alice"]
    bad = api(alice).get("/api/usage/summary/?group_by=nope")
    assert bad.status_code == 400 and "group_by" in bad.json().get("errors", bad.json()).__str__()


def test_cached_tokens_add_up_with_the_hit_ratio_per_model_and_developer(
    client, admin_client, admin, alice, alice_key, mallory_key
):
    write_batch(
        [
            event(alice_key, prompt_tokens=100, cached_tokens=80),
            event(alice_key, prompt_tokens=100, cached_tokens=40, cache_creation_tokens=50),
            event(mallory_key, model="llama-8b", prompt_tokens=10),
        ]
    )
    (bucket,) = UsageDaily.objects.filter(key=alice_key)
    assert (bucket.prompt_tokens, bucket.cached_tokens, bucket.cache_creation_tokens) == (200, 120, 50)
    by_model = {r["group"]: r for r in api(alice).get("/api/usage/summary/?group_by=model").json()["results"]}
    assert (by_model["qwen3-32b"]["cached_tokens"], by_model["qwen3-32b"]["cache_hit_ratio"]) == (120, 0.6)
    summary = api(admin).get("/api/usage/summary/?group_by=user").json()["results"]
    by_user = {r["group"]: r["cache_hit_ratio"] for r in summary}
    assert by_user == {"alice": 0.6, "mallory": 0.0}
    record = api(alice).get("/api/usage/records/").json()["results"][0]
    assert (record["cached_tokens"], record["cache_creation_tokens"]) == (40, 50)
    lines = admin_client.get("/usage/all/?group_by=user&format=csv").content.decode("utf-8-sig").strip().splitlines()
    assert lines[0].endswith(",Cached tokens,Cache write tokens,Cache hit ratio,Cost,Currency,Unpriced requests")
    assert any(line.startswith("alice,") and line.endswith(",120,50,0.6000,0.000000000,USD,0") for line in lines)
    page = admin_client.get("/usage/all/?group_by=model").content.decode()
    assert "Cache hits" in page and "60 %" in page
    client.force_login(alice)
    mine = client.get("/usage/").content.decode()
    assert "60 %" in mine and "of prompt tokens from a prompt cache" in mine


def test_the_usage_charts_say_in_the_readers_language_that_their_days_and_hours_are_utc(client, alice, alice_key):
    """The labels are UTC days and hours, made on the server: each chart's time axis says so."""
    alice.language = "zh-hans"
    alice.save(update_fields=["language"])
    write_batch([event(alice_key)])
    client.force_login(alice)
    usage = client.get("/usage/").content.decode()
    assert 'id="usage-chart"' in usage and 'data-time-axis="日期（UTC）"' in usage
    dashboard = client.get("/").content.decode()
    assert 'id="usage-24h-chart"' in dashboard and 'data-time-axis="小时（UTC）"' in dashboard
