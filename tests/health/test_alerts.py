"""Status-change notifications through a real webhook receiver on 127.0.0.1 and Django's mail outbox."""

import datetime as dt
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core import mail
from django.test import override_settings
from django.utils import timezone

from channels.choices import AlertKind, ChannelStatus
from channels.health import services
from channels.health.alerts import notify_pending
from channels.models import AlertDelivery, AlertTarget, Channel, StatusChange
from tests.services import free_port

pytestmark = pytest.mark.django_db


class Receiver:
    """A real HTTP server that records JSON posts (a stand-in for Slack's incoming webhook)."""

    def __init__(self, status: int = 200) -> None:
        self.posts: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.posts.append(json.loads(body))
                self.send_response(status)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.stop()


@pytest.fixture
def targets(receiver):
    AlertTarget.objects.create(name="slack", kind=AlertKind.WEBHOOK, url=receiver.url)
    AlertTarget.objects.create(name="oncall", kind=AlertKind.EMAIL, email="oncall@example.com")


def test_each_step_down_sends_one_webhook_and_one_email(make_channel, receiver, targets):
    ch = make_channel("gpu-1", f"http://127.0.0.1:{free_port()}/v1")
    Channel.objects.filter(pk=ch.pk).update(status=ChannelStatus.HEALTHY, alerted_status=ChannelStatus.HEALTHY)

    for _ in range(5):
        services.run_round()

    # healthy → degraded (first failure), degraded → down (third): getting worse is never held back
    assert [p["status"] for p in receiver.posts] == ["degraded", "down"]
    post = receiver.posts[1]
    assert post["previous_status"] == "degraded" and post["channel"]["name"] == "gpu-1"
    assert "gpu-1 is down" in post["text"]  # Slack shows `text`
    assert len(mail.outbox) == 2 and mail.outbox[1].to == ["oncall@example.com"]
    assert "gpu-1 is down" in mail.outbox[1].subject
    assert AlertDelivery.objects.filter(ok=True).count() == 4


def test_a_flapping_channel_sends_a_bounded_number_of_alerts(upstream, make_channel, receiver, targets):
    up = upstream()
    ch = make_channel("flappy", up.base_url)
    Channel.objects.filter(pk=ch.pk).update(status=ChannelStatus.HEALTHY, alerted_status=ChannelStatus.HEALTHY)
    with override_settings(PORTAL_HEALTH_DOWN_AFTER=1, PORTAL_HEALTH_UP_AFTER=1):
        for i in range(12):
            up.behave(mode="status" if i % 2 == 0 else "ok", status=503)
            services.run_round()

    changes = StatusChange.objects.filter(channel=ch).count()
    assert changes >= 10  # it really flapped
    assert len(receiver.posts) == 1  # … but the cool-down held the rest
    assert len(mail.outbox) == 1


def test_a_recovery_inside_the_cool_down_waits_for_one_catch_up_alert(make_channel, receiver, targets):
    ch = make_channel("gpu-2", "http://127.0.0.1:9/v1")
    recent = timezone.now() - dt.timedelta(seconds=30)
    Channel.objects.filter(pk=ch.pk).update(
        status=ChannelStatus.HEALTHY, alerted_status=ChannelStatus.DOWN, alerted_at=recent
    )
    StatusChange.objects.create(channel=ch, from_status="down", to_status="healthy")

    assert notify_pending() == 0  # cooling down: "recovered" waits
    Channel.objects.filter(pk=ch.pk).update(alerted_at=timezone.now() - dt.timedelta(hours=2))
    StatusChange.objects.create(channel=ch, from_status="healthy", to_status="degraded")
    StatusChange.objects.create(channel=ch, from_status="degraded", to_status="healthy")

    assert notify_pending() == 2  # webhook + e-mail, once, with the status it has now
    assert notify_pending() == 0  # de-duplicated
    assert receiver.posts[0]["status"] == "healthy" and receiver.posts[0]["suppressed_changes"] == 2


def test_a_status_that_returns_to_where_it_was_during_the_cool_down_sends_nothing(make_channel, receiver, targets):
    ch = make_channel("gpu-3", "http://127.0.0.1:9/v1")
    Channel.objects.filter(pk=ch.pk).update(
        status=ChannelStatus.HEALTHY, alerted_status=ChannelStatus.HEALTHY, alerted_at=timezone.now()
    )
    assert notify_pending() == 0
    assert receiver.posts == []


def test_a_new_channel_coming_up_is_not_news(upstream, make_channel, receiver, targets):
    up = upstream()
    make_channel("fresh", up.base_url)
    services.run_round()
    assert receiver.posts == [] and mail.outbox == []


def test_a_broken_webhook_is_logged_and_does_not_stop_the_round(make_channel, targets):
    AlertTarget.objects.filter(name="slack").update(url=f"http://127.0.0.1:{free_port()}/nothing")
    ch = make_channel("gpu-4", "http://127.0.0.1:9/v1")
    Channel.objects.filter(pk=ch.pk).update(status=ChannelStatus.DOWN, alerted_status=ChannelStatus.HEALTHY)

    assert notify_pending() == 1  # the e-mail still went out
    failed = AlertDelivery.objects.get(target_name="slack")
    assert not failed.ok and "could not reach" in failed.error
    # The delivery history is read in the reader's language (the English stays for logs and the API).
    from django.utils import translation

    with translation.override("zh-hans"):
        assert "无法连接" in failed.error_text and "could not reach" not in failed.error_text, failed.error_text
