"""Download pages and API without a host to talk to: requests only queue jobs (the step task is
sent on commit, never inside a test transaction), so nothing here opens SSH."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from accounts.models import AuditLog
from hosts.downloads import services
from hosts.downloads.choices import DownloadState
from hosts.downloads.models import ModelDownload
from hosts.models import Host

pytestmark = pytest.mark.django_db


@pytest.fixture
def host() -> Host:
    return Host.objects.create(
        name="gpu-a", address="10.0.0.9", username="ubuntu", host_key_fingerprint="SHA256:pinned"
    )


@pytest.fixture
def admin_api_client(admin):
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_login(admin)
    return client


FORM = {"source": "huggingface", "repo_id": "unsloth/Qwen3-8B-GGUF", "revision": "main", "pattern": " *Q4_K_M.gguf "}


def test_the_form_queues_a_download_and_a_second_request_joins_it(admin_client, host):
    first = admin_client.post(f"/hosts/{host.pk}/downloads/new/", {**FORM, "token": "hf_x"}, follow=True)
    job = ModelDownload.objects.get()
    assert first.redirect_chain[-1][0] == f"/downloads/{job.pk}/"
    assert job.pattern == "*Q4_K_M.gguf" and job.token == "hf_x" and job.state == DownloadState.QUEUED
    assert b"hf_x" not in first.content and b"set (encrypted)" in first.content

    second = admin_client.post(f"/hosts/{host.pk}/downloads/new/", FORM, follow=True)
    assert second.redirect_chain[-1][0] == f"/downloads/{job.pk}/"
    assert b"already running" in second.content and ModelDownload.objects.count() == 1

    page = admin_client.get(f"/hosts/{host.pk}/").content.decode()
    assert "unsloth/Qwen3-8B-GGUF" in page and f"/downloads/{job.pk}/" in page


def test_the_database_allows_one_active_job_per_target(host):
    ModelDownload.objects.create(host=host, repo_id="a/b", pattern="*.gguf")
    with pytest.raises(IntegrityError), transaction.atomic():
        ModelDownload.objects.create(host=host, repo_id="a/b", pattern="*.gguf")
    ModelDownload.objects.create(host=host, repo_id="a/b", pattern="*.safetensors")  # another target
    ModelDownload.objects.filter(pattern="*.gguf").update(state=DownloadState.DONE)
    ModelDownload.objects.create(host=host, repo_id="a/b", pattern="*.gguf")  # the old one finished


def test_bad_input_is_refused_with_field_errors(admin_client, admin_api_client, host):
    page = admin_client.post(
        f"/hosts/{host.pk}/downloads/new/", {**FORM, "repo_id": "no-slash", "pattern": "-rf /", "revision": "../x"}
    )
    assert page.status_code == 400 and not ModelDownload.objects.exists()
    answer = admin_api_client.post("/api/downloads/", {"host": host.pk, "repo_id": "a/b", "endpoint": "file:///etc"})
    assert answer.status_code == 400 and "endpoint" in answer.json()
    unconfirmed = Host.objects.create(name="new", address="10.0.0.10", username="ubuntu")
    answer = admin_api_client.post("/api/downloads/", {"host": unconfirmed.pk, "repo_id": "a/b"})
    assert answer.status_code == 400 and "Confirm the host key" in str(answer.json())


def test_an_unconfirmed_host_key_is_an_error_on_the_host(admin_client, admin_api_client):
    """It was a non-field error in the API; the page (whose host is not a field) shows it on top."""
    unconfirmed = Host.objects.create(name="new", address="10.0.0.10", username="ubuntu")
    answer = admin_api_client.post("/api/downloads/", {"host": unconfirmed.pk, "repo_id": "a/b"})
    assert answer.status_code == 400
    assert answer.json() == {"host": ["Confirm the host key of new before downloading to it."]}
    page = admin_client.post(f"/hosts/{unconfirmed.pk}/downloads/new/", FORM)
    assert page.status_code == 400 and "Confirm the host key of new before downloading to it." in page.content.decode()
    assert not ModelDownload.objects.exists()


def test_developers_cannot_see_or_request_downloads(alice_client, host):
    job, _ = services.request_download(host=host, repo_id="a/b")
    assert alice_client.get(f"/downloads/{job.pk}/").status_code == 403
    assert alice_client.post(f"/hosts/{host.pk}/downloads/new/", FORM).status_code == 403
    assert alice_client.get(f"/hosts/{host.pk}/models/").status_code == 403


def test_cancel_has_a_confirmation_page_and_a_queued_job_needs_no_host(admin_client, host):
    job, _ = services.request_download(host=host, repo_id="a/b", token="hf_secret")
    confirm = admin_client.get(f"/downloads/{job.pk}/cancel/")
    assert confirm.status_code == 200 and b"Cancel the download of a/b to gpu-a?" in confirm.content
    admin_client.post(f"/downloads/{job.pk}/cancel/")
    job.refresh_from_db()
    assert job.state == DownloadState.CANCELLED and job.token == "" and job.finished is not None


def test_the_launch_form_offers_finished_downloads_and_prefills_from_one(admin_client, host):
    ModelDownload.objects.create(
        host=host,
        repo_id="unsloth/Qwen3-8B-GGUF",
        state=DownloadState.DONE,
        local_path="/home/u/.gateway-portal/models/unsloth--Qwen3-8B-GGUF",
        files=[{"name": "Qwen3-8B-Q4_K_M.gguf", "size": 5, "done": 5}],
    )
    ModelDownload.objects.create(
        host=host, repo_id="Qwen/Qwen3-8B", state=DownloadState.DONE, local_path="/home/u/m/Qwen--Qwen3-8B"
    )
    page = admin_client.get(f"/hosts/{host.pk}/deployments/new/").content.decode()
    gguf = "/home/u/.gateway-portal/models/unsloth--Qwen3-8B-GGUF/Qwen3-8B-Q4_K_M.gguf"
    assert gguf in page and "/home/u/m/Qwen--Qwen3-8B" in page and "Download a model first" in page
    filled = admin_client.get(f"/hosts/{host.pk}/deployments/new/", {"model_path": gguf, "backend": "llamacpp"})
    assert f'value="{gguf}"' in filled.content.decode()


def test_the_form_proposes_the_mirror_this_host_used_last(admin_client, host):
    assert b'value="https://hf-mirror.com"' not in admin_client.get(f"/hosts/{host.pk}/downloads/new/").content
    services.request_download(host=host, repo_id="a/b", endpoint="https://hf-mirror.com")
    assert b'value="https://hf-mirror.com"' in admin_client.get(f"/hosts/{host.pk}/downloads/new/").content


def test_a_finished_download_keeps_its_token_for_a_copy_until_an_admin_forgets_it(admin_client, alice, host):
    """A private repository's weights can be downloaded again onto another host (a model on demand
    placed there) with the token the first download was given, stored encrypted; the download's
    page says so and an admin can forget it. A failed or cancelled download keeps nothing."""
    from django.db import connection
    from django.test import Client

    alice_client = Client()
    alice_client.force_login(alice)
    job, _ = services.request_download(host=host, repo_id="acme/private", pattern="*.gguf", token="hf_secret")
    services._move(job, DownloadState.DOWNLOADING, "downloading")
    ModelDownload.objects.filter(pk=job.pk).update(
        local_path="/home/ubuntu/.gateway-portal/models/acme--private", files=[{"name": "m.gguf", "size": 1}]
    )
    assert services._move(job, DownloadState.DONE, "done")
    job.refresh_from_db()
    assert job.token == "hf_secret"
    with connection.cursor() as cursor:  # encrypted at rest, as channel API keys are
        cursor.execute("SELECT token FROM hosts_modeldownload WHERE id = %s", [job.pk])
        assert "hf_secret" not in cursor.fetchone()[0]

    other = Host.objects.create(name="gpu-b", address="10.0.0.10", username="ubuntu", host_key_fingerprint="SHA256:b")
    weights = services.weights_of("/home/ubuntu/.gateway-portal/models/acme--private/m.gguf")
    assert weights is not None
    copy = weights.fetch(other)
    assert (copy.host, copy.repo_id, copy.token) == (other, "acme/private", "hf_secret")

    page = admin_client.get(f"/downloads/{job.pk}/").content.decode()
    assert "kept to download the same files onto another host" in page and "hf_secret" not in page
    assert alice_client.get(f"/downloads/{job.pk}/forget-token/").status_code == 403
    assert alice_client.post(f"/downloads/{job.pk}/forget-token/").status_code == 403
    job.refresh_from_db()
    assert job.token == "hf_secret"
    # The page's button leads to a confirmation page (as Cancel does); asking forgets nothing.
    assert f'href="/downloads/{job.pk}/forget-token/"' in page
    confirm = admin_client.get(f"/downloads/{job.pk}/forget-token/")
    question = "Forget the access token of the download of acme/private to gpu-a"
    assert confirm.status_code == 200 and question in confirm.content.decode()
    assert '<form method="post"' in confirm.content.decode()
    job.refresh_from_db()
    assert job.token == "hf_secret" and not AuditLog.objects.filter(message__contains="Access token").exists()
    done = admin_client.post(f"/downloads/{job.pk}/forget-token/", follow=True)
    assert done.redirect_chain[-1][0] == f"/downloads/{job.pk}/"
    job.refresh_from_db()
    assert job.token == ""
    assert "Forget the token" not in done.content.decode()
    audit = AuditLog.objects.get(message__contains="Access token forgotten")
    assert audit.actor_name == "admin" and audit.object_id == str(job.pk)

    # The copy is still running: its token is not forgotten under it; failing clears it.
    refused = admin_client.post(f"/downloads/{copy.pk}/forget-token/", follow=True)
    assert "still running" in refused.content.decode()
    copy.refresh_from_db()
    assert copy.token == "hf_secret"
    assert services._move(copy, DownloadState.FAILED, "failed")
    copy.refresh_from_db()
    assert copy.token == ""


def test_an_admin_forgets_a_finished_downloads_token_through_the_api(admin_api_client, alice, host):
    """POST /api/downloads/{id}/forget-token/: admins only (a developer 403, an unknown id 404),
    refused with 409 while the download runs, audited, documented in the OpenAPI schema."""
    from rest_framework.test import APIClient

    running, _ = services.request_download(host=host, repo_id="acme/private", pattern="*.gguf", token="hf_secret")
    finished, _ = services.request_download(host=host, repo_id="acme/other", token="hf_other")
    assert services._move(finished, DownloadState.DONE, "done")
    developer = APIClient()
    developer.force_login(alice)

    assert developer.post(f"/api/downloads/{finished.pk}/forget-token/").status_code == 403
    assert admin_api_client.post("/api/downloads/999999/forget-token/").status_code == 404
    conflict = admin_api_client.post(f"/api/downloads/{running.pk}/forget-token/")
    assert conflict.status_code == 409 and "still running" in conflict.json()["detail"]
    running.refresh_from_db()
    finished.refresh_from_db()
    assert (running.token, finished.token) == ("hf_secret", "hf_other")
    assert not AuditLog.objects.filter(message__contains="Access token").exists()

    answer = admin_api_client.post(f"/api/downloads/{finished.pk}/forget-token/")
    assert answer.status_code == 200 and answer.json()["has_token"] is False
    assert "hf_other" not in answer.content.decode()
    finished.refresh_from_db()
    assert finished.token == ""
    audit = AuditLog.objects.get(message__contains="Access token forgotten")
    assert audit.actor_name == "admin" and audit.object_id == str(finished.pk)

    schema = admin_api_client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    operation = schema["paths"]["/api/downloads/{id}/forget-token/"]["post"]
    assert {"200", "409"} <= set(operation["responses"]) and "requestBody" not in operation
