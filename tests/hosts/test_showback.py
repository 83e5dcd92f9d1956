"""GPU-hours showback: runs recorded by the launch jobs' status moves, attributed by token share on
the deployment's channel while it ran, per month; the page and its CSV are for admins."""

from __future__ import annotations

import csv
import datetime as dt
import io

import pytest

from accounts.models import Team
from channels.models import Channel
from gateway.usage import write_batch
from hosts.choices import DeploymentStatus
from hosts.deployments import services
from hosts.models import Deployment, DeploymentRun, Host
from hosts.showback.services import IDLE, monthly, record_status
from keys.services import issue_key
from tests.keys.test_usage import event

pytestmark = pytest.mark.django_db

UTC = dt.UTC


def at(day: int, hour: int = 0, month: int = 11) -> dt.datetime:
    return dt.datetime(2026, month, day, hour, tzinfo=UTC)


@pytest.fixture
def channel(db) -> Channel:
    return Channel.objects.create(name="qwen@gpu-1", kind="vllm", base_url="http://10.0.0.5:8000/v1")


@pytest.fixture
def deployment(db, channel) -> Deployment:
    host = Host.objects.create(name="gpu-1", address="10.0.0.5", username="ubuntu")
    return Deployment.objects.create(
        name="qwen",
        host=host,
        backend="vllm",
        model_path="Qwen/Qwen3-32B",
        served_model_name="qwen3-32b",
        gpu_indices=[0, 1],
        port=8000,
        channel=channel,
    )


def run(deployment: Deployment, start: dt.datetime, stop: dt.datetime | None) -> None:
    deployment.status = DeploymentStatus.RUNNING
    record_status(deployment, now=start)
    if stop is not None:
        deployment.status = DeploymentStatus.STOPPED
        record_status(deployment, now=stop)


def test_the_launch_jobs_status_moves_open_and_close_a_run(deployment):
    services.set_status(deployment, DeploymentStatus.RUNNING, "Serving")
    services.set_status(deployment, DeploymentStatus.RUNNING, "Adopted")  # a second move keeps one run
    (opened,) = DeploymentRun.objects.all()
    assert (opened.gpus, opened.channel_id, opened.stopped) == (2, deployment.channel_id, None)
    # Relaunching a running deployment passes through "starting" while the server keeps serving,
    # and a server being stopped still holds its GPUs: the run stays open through both.
    for status in (DeploymentStatus.STARTING, DeploymentStatus.RUNNING, DeploymentStatus.STOPPING):
        services.set_status(deployment, status, "")
    opened.refresh_from_db()
    assert opened.stopped is None and DeploymentRun.objects.count() == 1
    services.set_status(deployment, DeploymentStatus.STOPPED, "Stopped")
    opened.refresh_from_db()
    assert opened.stopped is not None
    services.set_status(deployment, DeploymentStatus.FAILED, "")
    assert DeploymentRun.objects.count() == 1


def test_gpu_hours_follow_the_token_share_while_it_ran(deployment, channel, alice, mallory, team):
    """10 h on 2 GPUs: alice (team alpha) sent 300 tokens, mallory (no team) 100 → 15 and 5
    GPU-hours. Tokens on the channel outside the run, and a run in another month, do not count."""
    run(deployment, at(3, 8), at(3, 18))
    run(deployment, at(2, 0, month=10), at(2, 5, month=10))
    alice_key = issue_key(owner=alice, name="laptop")[0]
    mallory_key = issue_key(owner=mallory, name="laptop")[0]
    write_batch(
        [
            event(alice_key, created=at(3, 9), channel_id=channel.pk, team_id=team.pk, completion_tokens=297),
            event(mallory_key, created=at(3, 10), channel_id=channel.pk, completion_tokens=97),
            event(mallory_key, created=at(3, 20), channel_id=channel.pk, completion_tokens=10_000),  # after
        ]
    )
    report = monthly(dt.date(2026, 11, 1), now=at(30))
    assert [(d.name, d.gpus, d.hours, d.gpu_hours) for d in report.deployments] == [("qwen", 2, 10.0, 20.0)]
    assert report.people == [("alpha", "alice", 15.0, 300), (None, "mallory", 5.0, 100)]
    assert report.teams == [("alpha", 15.0, 300), (None, 5.0, 100)]


def test_a_run_is_clipped_to_the_month_and_hours_without_tokens_are_idle(deployment):
    run(deployment, at(30, 20, month=10), None)  # 4 h in October, still running on 2 November, 06:00
    report = monthly(dt.date(2026, 11, 1), now=at(2, 6))
    assert report.total_gpu_hours == pytest.approx(2 * 30)
    assert report.people == [(None, IDLE, pytest.approx(60.0), 0)]
    assert monthly(dt.date(2026, 10, 1), now=at(2, 6)).total_gpu_hours == pytest.approx(2 * 28)


def test_a_moved_member_is_shown_back_under_the_team_of_the_request(deployment, channel, alice, team):
    run(deployment, at(3, 0), at(3, 1))
    key = issue_key(owner=alice, name="laptop")[0]
    beta = Team.objects.create(name="beta")
    write_batch([event(key, created=at(3, 0) + dt.timedelta(minutes=10), channel_id=channel.pk, team_id=team.pk)])
    alice.team = beta
    alice.save()
    write_batch([event(key, created=at(3, 0) + dt.timedelta(minutes=20), channel_id=channel.pk, team_id=beta.pk)])
    report = monthly(dt.date(2026, 11, 1), now=at(30))
    assert sorted(report.teams) == [("alpha", 1.0, 8), ("beta", 1.0, 8)]


def test_the_showback_page_and_csv_are_for_admins(deployment, channel, alice, team, admin_client, client):
    run(deployment, at(3, 8), at(3, 18))
    key = issue_key(owner=alice, name="laptop")[0]
    write_batch([event(key, created=at(3, 9), channel_id=channel.pk, team_id=team.pk)])
    page = admin_client.get("/gpu-hours/?month=2026-11")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="total-gpu-hours">20.00<' in html and "alpha" in html and "alice" in html
    download = admin_client.get("/gpu-hours/?month=2026-11&format=csv")
    assert download["Content-Type"].startswith("text/csv")
    assert download.content.startswith("\ufeff".encode())  # Excel reads it as UTF-8, not the code page
    rows = list(csv.reader(io.StringIO(download.content.decode("utf-8-sig"))))
    assert rows == [["Month", "Team", "User", "GPU-hours", "Tokens"], ["2026-11", "alpha", "alice", "20.000", "8"]]
    chinese = admin_client.get("/gpu-hours/?month=2026-11&format=csv", HTTP_ACCEPT_LANGUAGE="zh-hans")
    header = next(csv.reader(io.StringIO(chinese.content.decode("utf-8-sig"))))
    assert header == ["月份", "团队", "用户", "GPU 时", "token 数"]
    assert admin_client.get("/gpu-hours/?month=garbage").status_code == 400  # says so: not this month, nor a 500
    client.force_login(alice)
    assert client.get("/gpu-hours/").status_code == 403


def test_a_local_routes_price_from_gpu_hours_matches_a_hand_calculation(deployment, channel, alice):
    """$2.50 per GPU-hour, 10 h on 2 GPUs = 20 GPU-hours = $50, for 400,000 tokens served:
    $50 / 0.4 million tokens = $125.000 per million, for input and output alike."""
    from decimal import Decimal

    from django.core.management import call_command
    from django.utils import timezone

    from channels.models import Model, ModelRoute, RoutePrice
    from hosts.showback.services import derive_price

    route = ModelRoute.objects.create(model=Model.objects.create(name="qwen3-32b"), channel=channel)
    now = timezone.now()
    assert derive_price(deployment).per_million is None  # no cost set: nothing derived, never 0
    deployment.host.gpu_hour_cost = Decimal("2.50")
    deployment.host.save()
    run(deployment, now - dt.timedelta(hours=12), now - dt.timedelta(hours=2))
    key = issue_key(owner=alice, name="k")[0]
    write_batch(
        [
            event(
                key,
                channel_id=channel.id,
                prompt_tokens=150_000,
                completion_tokens=50_000,
                created=now - dt.timedelta(hours=5),
            ),
            event(
                key,
                channel_id=channel.id,
                prompt_tokens=100_000,
                completion_tokens=100_000,
                created=now - dt.timedelta(hours=4),
            ),
            # outside the run: not served by this deployment's GPU time
            event(
                key, channel_id=channel.id, prompt_tokens=999, completion_tokens=1, created=now - dt.timedelta(hours=1)
            ),
        ]
    )
    derived = derive_price(deployment)
    assert (round(derived.gpu_hours, 6), derived.tokens) == (20.0, 400_000)
    assert derived.per_million == Decimal("2.50") * 20 / Decimal("0.4") == Decimal("125.000")
    out = io.StringIO()
    call_command("price_local_routes", stdout=out)
    assert "125.000 per million" in out.getvalue()
    price = RoutePrice.objects.get(route=route)
    assert (price.input, price.output, price.source) == (Decimal("125.000"), Decimal("125.000"), "gpu_hours")
    assert "20.00 GPU-h" in price.note


def test_the_showback_puts_spend_beside_the_gpu_cost_per_developer(deployment, channel, alice, admin_client):
    """10 h on 2 GPUs at $1.50 per GPU-hour = $30 of GPU time, all alice's (she sent every token);
    her cloud spend this month beside it."""
    from decimal import Decimal

    deployment.host.gpu_hour_cost = Decimal("1.50")
    deployment.host.save()
    start = at(3, 8)
    run(deployment, start, at(3, 18))
    key = issue_key(owner=alice, name="k")[0]
    write_batch([event(key, channel_id=channel.id, created=start + dt.timedelta(minutes=30))])
    write_batch([event(key, channel_id=None, created=start, cost_nanos=2_500_000_000)])  # $2.50 in the cloud
    report = monthly(start.date())
    ((_team, _user, gpu, spent),) = [row for row in report.money if row[1] == "alice"]
    assert (gpu, spent) == (30 * 10**9, 2_500_000_000)
    page = admin_client.get("/gpu-hours/?month=" + f"{start:%Y-%m}").content.decode()
    assert "$30.0000" in page and "$2.5000" in page and "$32.5000" in page


def test_a_gpu_types_cost_prices_the_gpu_hours_of_hosts_without_their_own(deployment, channel, alice, admin_client):
    """The deployment holds GPUs 0 and 1 (H100s) of a host that also has an RTX 4090 and no cost of
    its own: 10 h on 2 GPUs at the H100's $2.00 per GPU-hour = $40, in the showback and in the price
    derived for the model; a cost set on the host wins."""
    from decimal import Decimal

    from hosts.models import GPU, GPUTypeCost
    from hosts.showback.services import derive_price

    host = deployment.host
    for index, name in enumerate(["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 4090"]):
        GPU.objects.create(host=host, index=index, name=name)
    start = at(3, 8)
    run(deployment, start, at(3, 18))
    key = issue_key(owner=alice, name="k")[0]
    write_batch([event(key, channel_id=channel.id, created=start + dt.timedelta(minutes=30))])
    page = admin_client.get(f"/gpu-hours/?month={start:%Y-%m}").content.decode()
    assert "NVIDIA GeForce RTX 4090" in page and "No cost per GPU-hour is set for gpu-1" in page
    from django.test import Client

    client = Client()
    client.force_login(alice)
    assert client.post("/gpu-hours/", {"gpu_name": "NVIDIA H100 80GB HBM3", "hour_cost": "2"}).status_code == 403
    assert not GPUTypeCost.objects.exists()
    saved = admin_client.post(
        f"/gpu-hours/?month={start:%Y-%m}", {"gpu_name": "NVIDIA H100 80GB HBM3", "hour_cost": "2"}
    )
    assert saved.status_code == 302
    assert admin_client.post("/gpu-hours/", {"gpu_name": "x", "hour_cost": "-1"}).status_code == 400
    ((_t, _u, gpu, _spent),) = [row for row in monthly(start.date()).money if row[1] == "alice"]
    assert gpu == 40 * 10**9
    assert "$40.0000" in admin_client.get(f"/gpu-hours/?month={start:%Y-%m}").content.decode()
    assert derive_price(deployment).gpu_hour_cost == Decimal("2.0000")
    host.gpu_hour_cost = Decimal("3.00")
    host.save()
    ((_t, _u, gpu, _spent),) = [row for row in monthly(start.date()).money if row[1] == "alice"]
    assert gpu == 60 * 10**9
