"""Background jobs' messages are stored as a msgid and its values and read in the reader's language
(issue 30): the page and the API render them through the catalog; switching language changes
nothing stored; rows from before (no code) show their stored text."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.conf import settings
from django.urls import reverse
from django.utils import timezone, translation

from hosts import backends
from hosts.choices import DeploymentStatus, JobState
from hosts.deployments import jobs, supervisor
from hosts.downloads import services as downloads
from hosts.models import Deployment, DeploymentEvent, Host, LaunchJob, ModelDownload
from portal.i18n import Message, stored_text

CJK = re.compile(r"[\u4e00-\u9fff]")
STORED = ("message", "message_code", "message_params")


@pytest.fixture
def host(db):
    return Host.objects.create(name="box", address="10.0.0.9", username="gpu", host_key_fingerprint="SHA256:x")


@pytest.fixture
def deployment(host):
    options = backends.get("vllm").clean_options({}, 1)
    return Deployment.objects.create(
        name="qwen", host=host, backend="vllm", model_path="a/b", served_model_name="qwen", port=8000, options=options
    )


def in_language(code: str, msgid: str, params: dict[str, object]) -> str:
    with translation.override(code):
        return translation.gettext(msgid) % params


def page(client, url: str, language: str) -> str:
    return client.get(url, HTTP_ACCEPT_LANGUAGE=language).content.decode()


def test_an_automatic_restarts_message_is_stored_as_a_msgid_and_shown_in_the_readers_language(admin_client, deployment):
    """The supervisor writes it in a worker (English); a zh-Hans reader gets the catalog's sentence."""
    Deployment.objects.filter(pk=deployment.pk).update(
        status=DeploymentStatus.CRASHED, auto_restart=True, next_restart_at=timezone.now() - dt.timedelta(seconds=1)
    )
    assert supervisor.supervise()["restarted"] == 1

    deployment.refresh_from_db()
    event = DeploymentEvent.objects.get(deployment=deployment, status=DeploymentStatus.STARTING)
    msgid = "Automatic restart %(number)s of %(limit)s this hour."
    params = {"number": 1, "limit": 3}
    assert (deployment.status_message_code, deployment.status_message_params) == (msgid, params)
    assert (event.message_code, event.message_params) == (msgid, params)
    english = msgid % params
    assert deployment.status_message == event.message == english  # logs, audit and old readers keep English
    chinese = in_language("zh-hans", msgid, params)
    assert CJK.search(chinese), "the catalog translates this msgid"

    url = reverse("deployment_detail", args=[deployment.pk])
    assert page(admin_client, url, "zh-hans").count(chinese) == 2  # status line and event
    assert english not in page(admin_client, url, "zh-hans")
    assert page(admin_client, url, "en").count(english) == 2
    with translation.override("zh-hans"):
        assert deployment.status_message_text == chinese
    deployment.refresh_from_db()
    assert (deployment.status_message, deployment.status_message_code) == (english, msgid)  # nothing stored moved


def test_a_launch_jobs_message_renders_through_the_catalog_in_zh_hans(admin_client, admin, deployment):
    """A message with a nested value: each part is looked up in the catalog when read; the row keeps
    its English text, code and params whatever language reads it."""
    job = jobs.request_job(deployment, "launch", user=admin, queue=False)
    LaunchJob.objects.filter(pk=job.pk).update(created=timezone.now() - dt.timedelta(hours=1), worker="")
    admin.language = "zh-hans"
    admin.save(update_fields=["language"])
    assert jobs.recover_stale_jobs() == 1  # no worker took it: failed with a message saying so

    job.refresh_from_db()
    msgid = job.message_code
    assert msgid.startswith("No worker picked this job up within %(seconds)s s")
    assert job.message_params == {"seconds": f"{settings.HOSTS_QUEUED_JOB_SECONDS:g}"}
    before = {f: getattr(job, f) for f in STORED}
    expected = in_language("zh-hans", msgid, job.message_params)

    html = page(admin_client, reverse("job_progress", args=[job.pk]), "en")  # the saved language wins
    assert expected in html
    assert job.history[-1]["state"] == JobState.FAILED
    with translation.override("zh-hans"):
        assert job.message_text == expected == job.history[-1]["message"]
    job.refresh_from_db()
    assert {f: getattr(job, f) for f in STORED} == before
    assert job.message == msgid % job.message_params  # English, as the worker wrote it


def test_the_api_returns_the_code_the_params_and_the_text_in_the_requests_language(admin_client, admin, host):
    job = ModelDownload.objects.create(host=host, repo_id="Qwen/Qwen3-8B", transitions=[])
    downloads.cancel(job, user=admin)
    msgid, params = "Cancelled%(by)s.", {"by": " (admin)"}

    url = f"/api/downloads/{job.pk}/"
    zh = admin_client.get(url, HTTP_ACCEPT_LANGUAGE="zh-hans").json()
    en = admin_client.get(url, HTTP_ACCEPT_LANGUAGE="en").json()
    chinese = in_language("zh-hans", msgid, params)
    assert CJK.search(chinese)
    assert (zh["message"], zh["message_code"], zh["message_params"]) == (chinese, msgid, params)
    assert (en["message"], en["message_code"], en["message_params"]) == ("Cancelled (admin).", msgid, params)
    assert zh["transitions"][-1]["message"] == chinese and zh["transitions"][-1]["message_code"] == msgid
    assert chinese in page(admin_client, reverse("download_detail", args=[job.pk]), "zh-hans")
    job.refresh_from_db()
    assert (job.message, job.message_code, job.message_params) == ("Cancelled (admin).", msgid, params)


def test_the_openapi_schema_documents_the_message_fields(admin_client):
    schema = admin_client.get(reverse("api-schema"), {"format": "json"}).json()["components"]["schemas"]
    job = schema["LaunchJob"]["properties"]
    assert {"message", "message_code", "message_params"} <= set(job)
    assert "request's language" in job["message"]["description"]
    assert "msgid" in job["message_code"]["description"]


def test_rows_from_before_show_their_stored_text(admin_client, deployment):
    job = LaunchJob.objects.create(
        deployment=deployment,
        state=JobState.FAILED,
        message="Written before messages had codes.",
        transitions=[{"state": "failed", "at": "2026-01-01T00:00:00", "message": "Old transition."}],
    )
    html = page(admin_client, reverse("job_progress", args=[job.pk]), "zh-hans")
    assert "Written before messages had codes." in html and "Old transition." in html


def test_a_message_nests_renders_verbatim_text_as_is_and_survives_a_broken_translation(monkeypatch):
    inner = Message("Stopped.")
    outer = Message("%(first)s %(second)s", first=inner, second=Message.verbatim("100%"))
    columns = outer.columns("message", 5)
    assert columns["message"] == "Stopp"  # cut to the field
    assert stored_text("x", columns["message_code"], columns["message_params"]) == "Stopped. 100%"
    assert Message.from_stored("", columns["message_code"], columns["message_params"]) == outer
    assert stored_text("as stored") == "as stored"
    assert Message("%(n)s GPU(s) seen.", n=2).render() == "2 GPU(s) seen."
    monkeypatch.setattr(translation, "gettext", lambda msgid: "%(missing)s")  # a translator's typo
    assert Message("%(n)s GPU(s) seen.", n=2).render() == "2 GPU(s) seen."


def test_a_size_in_a_message_is_stored_as_bytes_and_formatted_in_the_readers_language(admin_client, host):
    """A download's "Downloaded 1000 bytes" keeps the number, not the English words: a zh-Hans reader
    gets Django's own unit words and number format, the stored English text is what it was."""
    from django.template.defaultfilters import filesizeformat

    from hosts.downloads.services import _start_verify

    job = ModelDownload.objects.create(
        host=host,
        repo_id="Qwen/Qwen3-8B",
        state="verifying",
        files=[{"name": "tiny.gguf", "size": 1000, "done": 1000}],
        total_bytes=1000,
        transitions=[],
    )
    _start_verify(job, conn=None)  # no checksums to verify: nothing is asked of the host

    job.refresh_from_db()
    msgid = "Downloaded %(size)s; no checksums to verify."
    assert job.message_code == msgid
    assert job.message_params == {"size": {"code": "filesize", "params": {"bytes": 1000}}}
    with translation.override("en"):
        assert (
            job.message == msgid % {"size": filesizeformat(1000)} == "Downloaded 1000\xa0bytes; no checksums to verify."
        )
    with translation.override("zh-hans"):
        size = filesizeformat(1000)
        expected = translation.gettext(msgid) % {"size": size}
    assert CJK.search(size), "Django's catalog has the unit in Chinese"
    html = page(admin_client, reverse("download_detail", args=[job.pk]), "zh-hans")
    assert expected in html
    assert "1000\xa0bytes" not in html and "1000&nbsp;bytes" not in html
