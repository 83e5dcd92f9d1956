"""The dashboard is composed by the apps (portal.dashboard): each registers its counters and its
section at start-up, so these tests check that every app's part arrives, in order, with real counts."""

from __future__ import annotations

import datetime
import re
from decimal import Decimal

from django.urls import reverse
from django.utils import timezone

from channels.models import Model
from channels.services import set_route_price
from keys.models import Budget
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


def test_a_model_without_a_price_says_why_a_budgeted_developer_cannot_use_it(client, alice, model, alice_key):
    """Under a budget the gateway refuses a model without a price (`model_not_priced`), and
    `/v1/models`, Connect and the playground leave it out; the dashboard listed it among hers."""
    client.force_login(alice)

    def said() -> str:
        page = client.get(reverse("dashboard")).content.decode()
        return page.split("<code>qwen3-32b</code>")[1].split("</li>")[0]

    assert said() == ""  # no budget: the gateway serves it to her
    Budget.objects.create(user=alice, window="month", amount=Decimal("10"))
    assert "No price yet, and a budget applies to you: an admin must price it before you can use it." in said()
    set_route_price(model.routes.get(), input=1, output=2)
    assert said() == ""


def test_needs_attention_lists_failing_hosts_channels_deployments_and_jobs(admin_client, host, channel):
    from channels.choices import ChannelStatus
    from hosts.choices import DeploymentStatus, HostStatus, JobState
    from hosts.models import Deployment, Host, LaunchJob

    page = admin_client.get(reverse("dashboard")).content.decode()
    # A new host (never checked) and a never-checked channel are not "nothing to do".
    assert "Nothing needs attention" not in page
    Host.objects.filter(pk=host.pk).update(status=HostStatus.ONLINE)
    Channel = channel.__class__
    Channel.objects.filter(pk=channel.pk).update(status=ChannelStatus.HEALTHY)
    page = admin_client.get(reverse("dashboard")).content.decode()
    assert "Nothing needs attention" in page

    Host.objects.create(
        name="gpu-2",
        address="10.0.0.6",
        username="u",
        status=HostStatus.UNREACHABLE,
        status_message="Connection refused on port 22.",
    )
    Channel.objects.filter(pk=channel.pk).update(status=ChannelStatus.DOWN, status_message="Connection refused.")
    broken = Deployment.objects.create(
        host=host,
        name="broken",
        backend="llamacpp",
        model_path="/m.gguf",
        served_model_name="m",
        port=8001,
        status=DeploymentStatus.FAILED,
        status_message="exit code 1",
    )
    running = Deployment.objects.create(
        host=host,
        name="stuck",
        backend="llamacpp",
        model_path="/m.gguf",
        served_model_name="m2",
        port=8002,
        status=DeploymentStatus.RUNNING,
    )
    LaunchJob.objects.create(
        deployment=running, action="stop", state=JobState.FAILED, message="kill: permission denied"
    )
    LaunchJob.objects.create(deployment=broken, action="launch", state=JobState.FAILED, message="exit code 1")
    page = admin_client.get(reverse("dashboard")).content.decode()
    assert "Nothing needs attention" not in page
    attention = page.split('id="attention"', 1)[1].split("</ul>", 1)[0]
    assert "gpu-2" in attention and "Connection refused on port 22." in attention
    assert "vllm-a" in attention and "Connection refused." in attention
    assert "broken on gpu-1" in attention and "exit code 1" in attention
    assert "Stop stuck" in attention and "kill: permission denied" in attention
    assert "Launch broken" not in attention  # its deployment is listed already


def test_the_dashboard_shows_usage_of_the_last_day_and_ttft_per_channel(admin_client, client, alice, mallory, channel):
    from gateway.usage import write_batch
    from tests.keys.test_usage import event

    a, _ = issue_key(owner=alice, name="a")
    m, _ = issue_key(owner=mallory, name="m")
    now = timezone.now()
    write_batch(
        [event(a, channel_id=channel.pk, ttft_ms=float(t), request_id=f"a{t}") for t in range(10, 110, 10)]
        + [event(m, channel_id=channel.pk, ttft_ms=500.0, request_id="m1")]
        + [event(a, created=now - datetime.timedelta(hours=30), request_id="old")]
    )
    page = admin_client.get(reverse("dashboard")).content.decode()
    assert "<strong>11</strong> requests · <strong>88</strong> tokens" in page
    row = page.split('id="ttft-by-channel"', 1)[1].split("</tbody>", 1)[0]
    assert "vllm-a" in row and '<td class="num">11</td>' in row
    # Estimated from the hourly TTFT histogram (keys.models.TTFT_BOUNDS_MS), linear inside a bucket:
    # p50 of 10..100 and 500 (true 60) falls in (50, 100] -> 55; p95 (true 500) in (300, 500] -> 390.
    assert "55 ms" in row and "390 ms" in row

    client.force_login(alice)
    page = client.get(reverse("dashboard")).content.decode()
    assert "<strong>10</strong> requests · <strong>80</strong> tokens" in page  # only hers
    assert 'id="ttft-by-channel"' not in page and "vllm-a" not in page  # routes are hidden from developers


def test_list_columns_sort_both_ways_and_keep_the_filters(admin_client):
    from channels.models import Channel as Ch

    for name, priority in (("b-chan", 5), ("a-chan", 1), ("c-chan", 9)):
        Ch.objects.create(name=name, kind="vllm", base_url=f"http://10.0.0.{priority}:8000/v1", priority=priority)

    def names(query):
        page = admin_client.get(reverse("channel_list") + query).content.decode()
        return re.findall(r">([abc]-chan)</a>", page), page

    assert names("?sort=priority")[0] == ["a-chan", "b-chan", "c-chan"]
    order, page = names("?sort=-priority&enabled=true")
    assert order == ["c-chan", "b-chan", "a-chan"]
    assert 'aria-sort="descending"' in page
    # The sorted column's header sorts the other way, keeping the filter.
    assert re.search(
        r'aria-sort="descending"><a href="\?(sort=priority&amp;enabled=true|enabled=true&amp;sort=priority)"', page
    )
    assert names("?sort=nonsense")[1].count("a-chan") >= 1  # an unknown column is ignored, not a 500


def _steps(page: str) -> dict[str, str]:
    """The first-run checklist: step key -> "done" / "todo"."""
    return dict(re.findall(r'<li data-step="(\w+)" class="(done|todo)">', page))


def test_the_first_run_checklist_ticks_each_step_and_goes_away_when_all_are_done(admin_client, django_user_model):
    from channels.models import Channel
    from clientconfigs.models import ConfigDownload

    page = admin_client.get(reverse("dashboard")).content.decode()
    assert _steps(page) == {"source": "todo", "model": "todo", "developer": "todo", "key": "todo", "connect": "todo"}
    assert reverse("channel_create") in page and reverse("host_create") in page
    assert ">New key</a>" not in page  # useless before a channel and a model exist
    channel = Channel.objects.create(name="local", base_url="http://127.0.0.1:9/v1")
    Model.objects.create(name="qwen3-32b")
    bob = django_user_model.objects.create_user(username="bob", password="bob-pass-123")
    assert _steps(admin_client.get(reverse("dashboard")).content.decode()) == {
        "source": "done",
        "model": "done",
        "developer": "done",
        "key": "todo",
        "connect": "todo",
    }
    key = issue_key(owner=bob, name="laptop")[0]
    ConfigDownload.objects.create(user=bob, client="cline", version="1", key=key)
    page = admin_client.get(reverse("dashboard")).content.decode()
    assert _steps(page) == {} and 'id="first-run"' not in page and ">New key</a>" in page
    assert channel.pk  # the channel stays; nothing else is needed


def test_a_host_alone_ticks_the_first_step(admin_client, host):
    assert _steps(admin_client.get(reverse("dashboard")).content.decode())["source"] == "done"


def test_developers_never_see_the_checklist(alice_client):
    assert _steps(alice_client.get(reverse("dashboard")).content.decode()) == {}


def test_the_public_url_warning_names_the_host_the_browser_used(admin_client, settings):
    settings.ALLOWED_HOSTS = ["localhost", "127.0.0.1", "gpu-portal.lan"]
    settings.PORTAL_PUBLIC_URL = ""
    assert (
        'id="public-url-warning"' not in admin_client.get(reverse("dashboard"), HTTP_HOST="localhost").content.decode()
    )
    lan = admin_client.get(reverse("dashboard"), HTTP_HOST="gpu-portal.lan:8000").content.decode()
    assert 'id="public-url-warning"' in lan and "PORTAL_PUBLIC_URL is not set" in lan and "gpu-portal.lan" in lan
    connect = admin_client.get(reverse("connect"), HTTP_HOST="gpu-portal.lan:8000").content.decode()
    assert 'id="public-url-warning"' in connect

    settings.PORTAL_PUBLIC_URL = "http://gpu-portal.lan:8000"
    assert (
        'id="public-url-warning"'
        not in admin_client.get(reverse("dashboard"), HTTP_HOST="gpu-portal.lan:8000").content.decode()
    )
    local = admin_client.get(reverse("dashboard"), HTTP_HOST="127.0.0.1:8000").content.decode()
    assert "You opened the portal as 127.0.0.1, but every generated file points at http://gpu-portal.lan:8000." in local
