"""Weight downloads end to end: the host's real `hf` (huggingface_hub) over the suite's real sshd,
against a Hugging Face-compatible server on 127.0.0.1 (`tests/fakes/hf_hub.py`) through HF_ENDPOINT.

Each step is `services.advance` (what the Celery task runs, then re-schedules); the tests call it
in a loop as the re-scheduled task would. Pauses come from the fake server holding a file at a
byte offset until the test releases it, never from timing.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from django.test import Client
from rest_framework.test import APIClient

from hosts.choices import DeploymentStatus, JobState
from hosts.deployments import services as deployment_services
from hosts.downloads import services
from hosts.downloads.choices import DownloadState
from hosts.downloads.models import ModelDownload
from hosts.models import Deployment
from hosts.remote import inventory
from tests.fakes.hf_hub import COMMIT, FakeHub, small_repo
from tests.fakes.tinygguf import write_tiny_gguf
from tests.services import free_port

pytestmark = pytest.mark.slow

REPO = "acme/tiny-chat"
GGUF = "tiny-Q8_0.gguf"
MiB = 1024 * 1024
TOKEN = "hf_portalTestToken0123456789"
HF_CHUNK = 10 * MiB  # huggingface_hub writes its partial file in chunks of this size


@pytest.fixture(scope="session")
def gguf_bytes() -> bytes:
    """A real llama GGUF of ~21 MB (bigger than one client chunk, so progress shows mid-file)."""
    path = Path(tempfile.gettempdir()) / f"portal-tests-{os.getuid()}" / "tiny-llama-512.gguf"
    if not path.exists():
        write_tiny_gguf(path, n_embd=512, n_ff=1024)
    return path.read_bytes()


@pytest.fixture
def hub(gguf_bytes):
    with FakeHub({REPO: small_repo(gguf_bytes)}, token=TOKEN) as server:
        yield server


@pytest.fixture
def host_bin(ssh_target):
    """Files the test puts first on the host's PATH (the sshd's bin folder), removed after."""
    added: list[Path] = []

    def put(name: str, *, link: str = "", script: str = "") -> None:
        path = ssh_target.bin / name
        if link:
            path.symlink_to(link)
        else:
            path.write_text(script)
            path.chmod(0o755)
        added.append(path)

    yield put
    for path in added:
        path.unlink(missing_ok=True)


@pytest.fixture
def hf_on_host(host_bin):
    """The host has huggingface_hub's `hf` (the test machine's, as the host's python is ours)."""
    host_bin("hf", link=str(Path(sys.executable).parent / "hf"))


@pytest.fixture
def quick(settings, hub):
    settings.HOSTS_HF_ENDPOINT = hub.url
    settings.HOSTS_DOWNLOAD_DISK_RESERVE_MIB = 1
    settings.HOSTS_HEALTH_TIMEOUT = 60
    settings.HOSTS_HEALTH_POLL = 0.1
    settings.HOSTS_STOP_GRACE = 5


def drive(job: ModelDownload, until, *, timeout: float = 120.0) -> ModelDownload:
    """Run steps as the re-scheduled task would, until `until(job)` or the job finishes."""
    deadline = time.monotonic() + timeout
    while True:
        services.advance(job.pk)
        job.refresh_from_db()
        if until(job) or not job.is_active:
            return job
        assert time.monotonic() < deadline, f"stuck in {job.state}: {job.message}"
        time.sleep(0.2)


def alive(pid: int) -> bool:
    """The process exists and is not a zombie (PID 1 in some containers never reaps)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def api(user) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


def test_download_progress_cut_resume_restart_checksums_and_launch(
    gpu_host, admin, django_user_model, hub, hf_on_host, quick, started_pids
):
    hub.cut_after[GGUF] = 12 * MiB  # the first GET of the GGUF is cut mid-body
    hub.hold_at[GGUF] = 16 * MiB  # every GET then waits there until released
    body = {"host": gpu_host.pk, "repo_id": REPO, "revision": "main", "pattern": "*.gguf config.json", "token": TOKEN}

    # The same download asked twice (two admins, two sessions) is one job.
    first = api(admin).post("/api/downloads/", body, format="json")
    other_admin = django_user_model.objects.create_user(username="ops", password="x-pass-123", role="admin")
    second = api(other_admin).post("/api/downloads/", body, format="json")
    assert first.status_code == 201 and second.status_code == 200, (first.json(), second.json())
    assert second.json()["id"] == first.json()["id"] and second.json()["joined"] is True
    assert "token" not in first.json() and first.json()["has_token"] is True
    assert ModelDownload.objects.count() == 1
    job = ModelDownload.objects.get()

    # Checking: the file list, sizes and LFS sha256 from the endpoint; then the host's hf starts.
    job = drive(job, lambda j: j.state == DownloadState.DOWNLOADING)
    assert job.state == DownloadState.DOWNLOADING, job.message
    assert job.commit == COMMIT and sorted(f["name"] for f in job.files) == ["config.json", GGUF]
    gguf_size = len(hub.repos[REPO][GGUF].data)
    assert job.total_bytes == gguf_size + len(hub.repos[REPO]["config.json"].data)
    assert job.tool.endswith("/hf") and job.local_path.endswith("/.gateway-portal/models/acme--tiny-chat")
    started_pids.append(job.pid)

    # Held at 16 MiB after the cut at 12 MiB: the client resumed with a Range request and has
    # written its first 10 MiB chunk. Progress comes from the database, for anyone.
    job = drive(job, lambda j: hub.holding.is_set() and j.done_bytes >= HF_CHUNK)
    assert hub.gets_of(GGUF) == ["", f"bytes={HF_CHUNK}-"]
    watcher = api(other_admin).get(f"/api/downloads/{job.pk}/").json()
    assert watcher["state"] == "downloading" and 0 < watcher["done_bytes"] < watcher["total_bytes"]
    per_file = {f["name"]: f["done"] for f in watcher["files"]}
    assert per_file == {"config.json": len(hub.repos[REPO]["config.json"].data), GGUF: HF_CHUNK}
    assert watcher["rate_bps"] > 0 and watcher["eta_seconds"] is not None
    browser = Client()
    browser.force_login(other_admin)
    page = browser.get(f"/downloads/{job.pk}/progress/").content.decode()
    assert f"{watcher['percent']} %" in page and GGUF in page

    # The token reached the client (the fake hub demands it) but no command line, no file left.
    assert any(r[3] == f"Bearer {TOKEN}" for r in hub.requests if "/resolve/" in r[1])
    assert TOKEN not in subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    job_dir = Path(job.local_path).parents[1] / "downloads" / str(job.pk)  # ~/.gateway-portal/downloads/<id>
    assert (job_dir / "download.pid").exists() and not (job_dir / "token").exists()

    # The host "reboots" under the download: the process is gone; the next poll starts it again.
    os.killpg(job.pid, signal.SIGKILL)
    job = drive(job, lambda j: j.restarts == 1)
    assert job.state == DownloadState.DOWNLOADING and "started again" in job.message
    started_pids.append(job.pid)

    hub.release()
    job = drive(job, lambda j: False)
    assert job.state == DownloadState.DONE, (job.message, job.log_tail)
    assert "sha256" in job.message and job.done_bytes == job.total_bytes and job.token == TOKEN  # kept for copies
    on_disk = Path(job.local_path) / GGUF
    assert hashlib.sha256(on_disk.read_bytes()).hexdigest() == hub.repos[REPO][GGUF].sha256
    assert len(hub.gets_of("config.json")) == 1  # finished files are kept across the restart
    assert not job_dir.exists()  # the job's folder (logs, pid) is cleaned up

    # The launch form offers it; the fit reads the downloaded file; llama.cpp serves it.
    browser.force_login(admin)
    form = browser.get(f"/hosts/{gpu_host.pk}/deployments/new/").content.decode()
    assert str(on_disk) in form and "Already on gpu-box" in form
    prefilled = browser.get(
        f"/hosts/{gpu_host.pk}/deployments/new/", {"model_path": str(on_disk), "backend": "llamacpp"}
    )
    assert f'value="{on_disk}"' in prefilled.content.decode()
    inventory.refresh(gpu_host)
    deployment = deployment_services.save_deployment(
        host=gpu_host,
        name="downloaded",
        backend="llamacpp",
        model_path=str(on_disk),
        served_model_name="tiny-downloaded",
        gpu_indices=[0],
        port=free_port(),
        options={"ctx_size": 1024, "threads": 1, "parallel": 1},
        extra_args=[],
    )
    from hosts.deployments import jobs

    launch = jobs.request_job(deployment, "launch")
    jobs.run_inline(launch.pk)
    launch.refresh_from_db()
    if launch.pid:
        started_pids.append(launch.pid)
    deployment.refresh_from_db()
    assert launch.state == JobState.RUNNING, launch.message
    assert deployment.status == DeploymentStatus.RUNNING
    assert deployment.last_fit["source"] == "GGUF metadata"
    # Its weights are not deleted under it (its restart would find them gone).
    refused = browser.post(f"/hosts/{gpu_host.pk}/models/acme--tiny-chat/delete/", follow=True).content.decode()
    assert f"Deployment {deployment.name} serves from acme--tiny-chat: stop it first." in refused
    assert (Path(job.local_path) / GGUF).exists()
    jobs.run_inline(jobs.request_job(deployment, "stop").pk)

    # The host page lists it on disk; an admin deletes it behind a confirmation page.
    listing = browser.get(f"/hosts/{gpu_host.pk}/models/").content.decode()
    assert "acme--tiny-chat" in listing and GGUF in listing
    confirm = browser.get(f"/hosts/{gpu_host.pk}/models/acme--tiny-chat/delete/")
    assert confirm.status_code == 200 and "Delete acme--tiny-chat from gpu-box?" in confirm.content.decode()
    assert Path(job.local_path).exists()
    browser.post(f"/hosts/{gpu_host.pk}/models/acme--tiny-chat/delete/")
    assert not Path(job.local_path).exists()


def test_a_download_that_does_not_fit_is_refused_before_it_starts(gpu_host, admin, hub, hf_on_host, host_bin, quick):
    # The host's df says 5 MiB are free: less than the 21 MB GGUF.
    host_bin(
        "df",
        script="#!/bin/sh\necho 'Filesystem 1-blocks Used Available Capacity Mounted on'\n"
        "echo '/dev/fake 100000000 94757280 5242880 95% /'\n",
    )
    job, created = services.request_download(host=gpu_host, repo_id=REPO, pattern="*.gguf", token=TOKEN, user=admin)
    job = drive(job, lambda j: False)
    assert created and job.state == DownloadState.FAILED
    assert "Not enough disk space on gpu-box" in job.message and "Nothing was downloaded" in job.message
    assert not any("/resolve/" in r[1] for r in hub.requests) and job.pid is None


def test_a_disk_that_fills_up_during_the_download_fails_it_at_once_saying_so(
    gpu_host, admin, hub, host_bin, quick, ssh_target
):
    """Something else filled the host's disk after the check: the tool dies with ENOSPC. It was
    started again and again (each dying at once) and ended as "stopped 6 times; see the log"."""
    runs = ssh_target.home / "hf-runs"
    runs.unlink(missing_ok=True)
    host_bin(
        "hf",
        script=f"""#!/bin/sh
echo run >>{runs}
echo 'Traceback (most recent call last):' >&2
echo "OSError: [Errno 28] No space left on device: '/home/portal/.gateway-portal/models/x/{GGUF}'" >&2
exit 1
""",
    )
    job, _ = services.request_download(host=gpu_host, repo_id=REPO, pattern="*.gguf", token=TOKEN, user=admin)
    job = drive(job, lambda j: False)
    assert job.state == DownloadState.FAILED and job.restarts == 0
    assert runs.read_text().count("run") == 1
    assert job.message.startswith("The disk of gpu-box is full (No space left on device)"), job.message
    assert "request the download again to resume" in job.message and "No space left" in job.log_tail
    body = api(admin).get(f"/api/downloads/{job.pk}/", HTTP_ACCEPT_LANGUAGE="zh-hans").json()
    assert body["message"].startswith("gpu-box 的磁盘已满"), body["message"]


def test_without_the_tool_and_without_consent_it_refuses_and_says_how(gpu_host, admin, hub, quick, ssh_target):
    assert not (ssh_target.bin / "hf").exists()
    job, _ = services.request_download(host=gpu_host, repo_id=REPO, pattern="config.json", token=TOKEN, user=admin)
    job = drive(job, lambda j: False)
    assert job.state == DownloadState.FAILED and "is not installed on gpu-box" in job.message
    assert "install the tool" in job.message


def test_cancel_stops_the_remote_download(gpu_host, admin, hub, hf_on_host, quick, started_pids):
    hub.hold_at[GGUF] = 4 * MiB
    job, _ = services.request_download(host=gpu_host, repo_id=REPO, pattern="*.gguf", token=TOKEN, user=admin)
    job = drive(job, lambda j: hub.holding.is_set())
    started_pids.append(job.pid)
    # A worker died after starting the tool but before recording it: the next step re-attaches.
    ModelDownload.objects.filter(pk=job.pk).update(state=DownloadState.CHECKING, pid=None)
    job = drive(job, lambda j: j.state == DownloadState.DOWNLOADING)
    assert job.state == DownloadState.DOWNLOADING and "Re-attached" in job.message and job.pid == started_pids[0]
    assert len(hub.gets_of(GGUF)) == 1  # no second download process
    answer = api(admin).post(f"/api/downloads/{job.pk}/cancel/")
    assert answer.status_code == 200 and answer.json()["state"] == "cancelled"
    assert not alive(job.pid)
    assert api(admin).post(f"/api/downloads/{job.pk}/cancel/").status_code == 409
    # Finished: the same target may be requested again, as a new job.
    again, created = services.request_download(host=gpu_host, repo_id=REPO, pattern="*.gguf", user=admin)
    assert created and again.pk != job.pk


def test_a_host_with_a_running_download_is_not_deleted_until_it_is_cancelled(
    gpu_host, admin, hub, hf_on_host, quick, started_pids
):
    """Deleting the host once took the download's row with it (CASCADE) and left the tool filling
    the host's disk, with nothing left to cancel it by."""
    from django.urls import reverse

    from hosts.models import Host

    hub.hold_at[GGUF] = 4 * MiB
    job, _ = services.request_download(host=gpu_host, repo_id=REPO, pattern="*.gguf", token=TOKEN, user=admin)
    job = drive(job, lambda j: hub.holding.is_set())
    started_pids.append(job.pid)
    answer = api(admin).delete(f"/api/hosts/{gpu_host.pk}/")
    assert answer.status_code == 409, answer.content
    assert answer.json()["detail"] == f"Downloads to gpu-box are still running (#{job.pk}): cancel them first."
    page = Client()
    page.force_login(admin)
    assert page.get(reverse("host_delete", args=[gpu_host.pk])).status_code == 302  # refused before the question
    refused = page.post(reverse("host_delete", args=[gpu_host.pk]), follow=True)
    assert f"still running (#{job.pk}): cancel them first" in refused.content.decode()
    assert ModelDownload.objects.get(pk=job.pk).is_active and alive(job.pid)
    assert api(admin).post(f"/api/downloads/{job.pk}/cancel/").status_code == 200
    question = page.get(reverse("host_delete", args=[gpu_host.pk]), HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "下载记录" in question  # the question says the download records go with the host
    assert api(admin).delete(f"/api/hosts/{gpu_host.pk}/").status_code == 204
    assert not Host.objects.filter(pk=gpu_host.pk).exists() and not ModelDownload.objects.filter(pk=job.pk).exists()


def test_the_sweep_restarts_the_polling_of_a_job_whose_worker_died(db, gpu_host, admin, monkeypatch):
    from django.utils import timezone

    sent = []
    monkeypatch.setattr(
        services.signals.step_needed, "send", lambda sender, download_id, countdown: sent.append(download_id)
    )
    job, _ = services.request_download(host=gpu_host, repo_id=REPO, user=admin)
    ModelDownload.objects.filter(pk=job.pk).update(state=DownloadState.DOWNLOADING, polled=timezone.now())
    assert services.sweep() == []
    later = timezone.now() + timezone.timedelta(seconds=60)
    assert services.sweep(later) == [job.pk] and sent == [job.pk]


def test_a_downloaded_folder_feeds_the_fit_from_its_config_json(gpu_host, admin, hub, hf_on_host, quick):
    job, _ = services.request_download(
        host=gpu_host, repo_id=REPO, pattern="config.json tokenizer.json", token=TOKEN, user=admin
    )
    job = drive(job, lambda j: False)
    assert job.state == DownloadState.DONE, (job.message, job.log_tail)
    assert "no checksums" in job.message  # no LFS file among them: sizes checked only
    offers = services.downloaded_on(gpu_host)
    assert [(o["path"], o["backend"]) for o in offers] == [(job.local_path, "vllm")]
    deployment = Deployment(host=gpu_host, backend="vllm", model_path=offers[0]["path"])
    arch = deployment_services.host_architecture(deployment)
    assert arch is not None and (arch.layers, arch.heads, arch.kv_heads, arch.hidden) == (2, 4, 2, 256)


def test_the_models_on_a_hosts_disk_are_listed_and_deleted_through_the_api(
    gpu_host, admin, alice, hub, hf_on_host, quick
):
    """The host page's "Models on disk" and its Delete had no REST equivalent."""
    job, _ = services.request_download(host=gpu_host, repo_id=REPO, pattern="config.json", token=TOKEN, user=admin)
    assert drive(job, lambda j: False).state == DownloadState.DONE
    url = f"/api/hosts/{gpu_host.pk}/models/"
    assert api(alice).get(url).status_code == 403
    assert api(alice).delete(f"{url}acme--tiny-chat/").status_code == 403
    listed = api(admin).get(url)
    assert listed.status_code == 200, listed.content
    assert [(m["name"], m["has_config"], m["busy"]) for m in listed.json()] == [("acme--tiny-chat", True, False)]
    assert api(admin).delete(f"{url}no-such-folder/").status_code == 400
    assert api(admin).delete(f"{url}acme--tiny-chat/").status_code == 204
    assert not Path(job.local_path).exists() and api(admin).get(url).json() == []


def test_a_checksum_mismatch_fails_and_deletes_the_file(gpu_host, admin, hub, hf_on_host, quick):
    hub.corrupt.add(GGUF)
    job, _ = services.request_download(host=gpu_host, repo_id=REPO, pattern="*.gguf", token=TOKEN, user=admin)
    job = drive(job, lambda j: False)
    assert job.state == DownloadState.FAILED and f"Checksum mismatch for {GGUF}" in job.message
    assert not (Path(job.local_path) / GGUF).exists()


def test_with_consent_a_missing_tool_is_installed_into_a_venv_first(gpu_host, admin, hub, host_bin, quick):
    # The far end of the install: `python3 -m venv DIR` makes DIR/bin/{pip,hf} (hf: the real one),
    # and pip records what it was asked to install (the host has no PyPI here).
    real_hf = Path(sys.executable).parent / "hf"
    host_bin(
        "python3",
        script=f"""#!/bin/sh
[ "$1 $2" = "-m venv" ] || exit 2
mkdir -p "$3/bin" && ln -sf {real_hf} "$3/bin/hf"
printf '#!/bin/sh\necho "$@" >"$(dirname "$0")/../pip-args"\n' >"$3/bin/pip" && chmod +x "$3/bin/pip"
""",
    )
    job, _ = services.request_download(
        host=gpu_host, repo_id=REPO, pattern="config.json", token=TOKEN, install_tool=True, user=admin
    )
    job = drive(job, lambda j: False)
    assert job.state == DownloadState.DONE, (job.message, job.log_tail)
    states = [t["state"] for t in job.transitions]
    assert states == ["queued", "checking", "installing", "downloading", "done"]
    venv = Path(job.local_path).parents[1] / "tools" / "hf"
    assert job.tool == str(venv / "bin" / "hf")
    assert (venv / "pip-args").read_text().split() == ["install", "--quiet", "--upgrade", "huggingface_hub"]


MODELSCOPE_CLI = """#!/bin/sh
export PYTHONPATH={root}
exec {python} -m tests.fakes.modelscope "$@"
"""


def test_a_modelscope_download_runs_the_hosts_modelscope_tool(
    gpu_host, admin, host_bin, ssh_target, settings, gguf_bytes
):
    """ModelScope as the source: the host's `modelscope download` (a stand-in: tests/fakes/modelscope.py)
    against a ModelScope-compatible hub on loopback, named by MODELSCOPE_DOMAIN, the token in its
    environment; sizes and sha256 from the hub's file list are checked on the host afterwards."""
    from tests.fakes import argv_log
    from tests.fakes.llamacpp import REPO_ROOT
    from tests.fakes.modelscope import FakeModelScope

    (ssh_target.home / argv_log.NAME).unlink(missing_ok=True)
    host_bin("modelscope", script=MODELSCOPE_CLI.format(root=REPO_ROOT, python=sys.executable))
    settings.HOSTS_DOWNLOAD_DISK_RESERVE_MIB = 1
    with FakeModelScope({REPO: small_repo(gguf_bytes)}, token=TOKEN) as hub:
        settings.HOSTS_MODELSCOPE_ENDPOINT = hub.url
        job, created = services.request_download(
            host=gpu_host, repo_id=REPO, pattern="*.gguf config.json", source="modelscope", token=TOKEN, user=admin
        )
        job = drive(job, lambda j: False)
    assert created and job.state == DownloadState.DONE, (job.message, job.log_tail)
    assert job.local_path.endswith("/.gateway-portal/models/modelscope--acme--tiny-chat")
    assert sorted(f["name"] for f in job.files) == ["config.json", GGUF]
    assert job.done_bytes == job.total_bytes == len(gguf_bytes) + len(hub.repos[REPO]["config.json"].data)
    assert "sha256" in job.message and job.token == TOKEN  # kept for copies
    on_disk = Path(job.local_path) / GGUF
    assert hashlib.sha256(on_disk.read_bytes()).hexdigest() == hub.repos[REPO][GGUF].sha256
    assert not (Path(job.local_path) / "._____temp" / GGUF).exists()

    [call] = argv_log.calls(ssh_target.home, "modelscope")
    assert call["argv"] == [
        "download", "--model", REPO, "--revision", "master", "--local_dir", ".", "--include", "*.gguf", "config.json"
    ]  # fmt: skip
    assert call["env"] == {"MODELSCOPE_DOMAIN": hub.url.removeprefix("http://")}
    # The token reached the hub from the host's tool (the fake hub demands it), never on its argv.
    downloads = [r for r in hub.requests if r[1]]
    assert sorted(r[1] for r in downloads) == ["config.json", GGUF]
    assert all(r[2] == f"Bearer {TOKEN}" for r in downloads)
    assert TOKEN not in " ".join(call["argv"])
