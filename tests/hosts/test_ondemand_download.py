"""A cold start whose llama.cpp file is on no host: the placement downloads it onto the host it
chose, as a supervised download job, then launches there. Two real sshd "GPU hosts" (gpu-a full,
gpu-b with room), the hosts' real `hf` (huggingface_hub) against a Hugging Face-compatible server
on 127.0.0.1 (`tests/fakes/hf_hub.py`), the real llama.cpp server.

The file came from a download onto gpu-a that was later deleted from its disk (the two "hosts"
share this machine's filesystem, so a file still on gpu-a would be visible from gpu-b too). The
"another host still has it" test runs gpu-b's sshd in its own mount namespace with gpu-a's home
hidden (`SSHTarget.hidden`), so there gpu-a keeps its copy and gpu-b really lacks it.
"""

from __future__ import annotations

import hashlib
import sys
import time
from pathlib import Path

import httpx
import pytest
from django.utils import timezone

from hosts.choices import DeploymentStatus
from hosts.deployments import services
from hosts.downloads import services as downloads
from hosts.downloads.choices import DownloadState
from hosts.downloads.models import ModelDownload
from hosts.models import ColdStart, Deployment
from hosts.ondemand import services as ondemand
from hosts.ondemand.models import ColdStartState
from keys.services import issue_key
from tests.fakes.hf_hub import COMMIT, FakeHub, RepoFile
from tests.fakes.llamacpp import tiny_gguf_path
from tests.fakes.sshd import SSHTarget
from tests.services import free_port

from .test_ondemand import chat, gateway, hosts, namespace, servers, two_targets  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.slow]

REPO = "acme/tiny-chat"
GGUF = "tiny-Q8_0.gguf"
HOLDS = [{"name": "GPU 0", "index": 0, "need_gib": 0.2508, "have_gib": 0.38}]  # the tiny model's estimate


@pytest.fixture
def hub():
    with FakeHub({REPO: {GGUF: RepoFile(tiny_gguf_path().read_bytes(), lfs=True)}}) as server:
        yield server


@pytest.fixture
def hf_on_hosts(two_targets):  # noqa: F811
    """Both hosts have huggingface_hub's `hf` (the test machine's: the hosts' python is ours)."""
    links = [t.bin / "hf" for t in two_targets]
    for link in links:
        link.unlink(missing_ok=True)
        link.symlink_to(Path(sys.executable).parent / "hf")
    yield
    for link in links:
        link.unlink(missing_ok=True)


@pytest.fixture
def setup(hosts, two_targets, hub, hf_on_hosts, settings):  # noqa: F811
    """gpu-a is full (a running deployment that is not on demand holds its GPU); the model's file
    was downloaded onto gpu-a once and is gone from its disk since."""
    settings.HOSTS_HF_ENDPOINT = hub.url
    settings.HOSTS_DOWNLOAD_DISK_RESERVE_MIB = 1
    settings.HOSTS_HEALTH_POLL = 0.2
    a, b = hosts
    occupy(a)
    data = tiny_gguf_path().read_bytes()
    folder = two_targets[0].home / ".gateway-portal" / "models" / "acme--tiny-chat"
    ModelDownload.objects.create(
        host=a,
        repo_id=REPO,
        commit=COMMIT,
        state=DownloadState.DONE,
        local_path=str(folder),
        files=[{"name": GGUF, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}],
        total_bytes=len(data),
        done_bytes=len(data),
        finished=timezone.now(),
    )
    return a, b, f"{folder}/{GGUF}"


def occupy(host) -> None:
    """A running deployment that holds the host's GPU (the placement must look elsewhere)."""
    holder = services.save_deployment(
        host=host,
        name="holds-a",
        backend="llamacpp",
        model_path="/models/other.gguf",
        served_model_name="holds-a",
        gpu_indices=[0],
        port=free_port(),
        options={},
        extra_args=[],
    )
    Deployment.objects.filter(pk=holder.pk).update(status=DeploymentStatus.RUNNING, last_fit={"devices": HOLDS})


def cold_model(host, model_path: str, **fields) -> Deployment:
    return services.save_deployment(
        host=host,
        name="od-dl",
        backend="llamacpp",
        model_path=model_path,
        served_model_name="od-dl",
        gpu_indices=[0],
        port=free_port(),
        options={"ctx_size": 1024, "threads": 1, "parallel": 1},
        extra_args=[],
        on_demand=True,
        idle_ttl=30,
        **{"cold_start_budget": 150, **fields},
    )


def drive(job: ModelDownload, timeout: float = 120.0) -> ModelDownload:
    """Run the download's steps as its re-scheduled task would, until it finishes."""
    deadline = time.monotonic() + timeout
    while job.is_active:
        downloads.advance(job.pk)
        job.refresh_from_db()
        assert time.monotonic() < deadline, f"stuck in {job.state}: {job.message}"
        time.sleep(0.1)
    return job


def test_the_file_is_downloaded_onto_the_chosen_host_then_the_model_starts_there(setup, servers):  # noqa: F811
    a, b, gone = setup
    d = cold_model(a, gone)
    cold_id = ondemand.demand(d.pk)["cold_start_id"]

    # Nobody has the file: the least loaded host that can download it is chosen; nothing stopped.
    assert ondemand.place(cold_id) is not None  # look again once the download may be done
    cold = ColdStart.objects.get(pk=cold_id)
    assert cold.state == ColdStartState.DOWNLOADING and cold.host_name == "gpu-b", cold.reasons_english
    assert cold.reasons_english[-1] == "chosen gpu-b" and all(
        "downloads the weights first" in r for r in cold.reasons_english[:2]
    )
    job = cold.download
    assert job is not None and (job.host, job.repo_id, job.revision) == (b, REPO, COMMIT)
    seen = ondemand.observe(cold_id)
    assert seen["state"] == "downloading" and "gpu-b" in seen["downloading"]

    # A second attempt while it downloads joins the same job.
    assert ondemand.place(cold_id) is not None
    assert ModelDownload.objects.filter(host=b).count() == 1

    job = drive(job)
    assert job.state == DownloadState.DONE, job.message
    # The file is on gpu-b now: its header gives the fit, and the launch goes there.
    assert ondemand.place(cold_id) is None
    cold.refresh_from_db()
    assert cold.state == ColdStartState.LAUNCHING and cold.reasons_english[-1] == "chosen gpu-b", cold.reasons_english
    assert any(r.startswith("gpu-b: fits on GPU 0") and "has the weights" in r for r in cold.reasons_english), (
        cold.reasons_english
    )
    d.refresh_from_db()
    assert d.host == b and d.model_path == f"{job.local_path}/{GGUF}" and d.model_path != gone
    launched = ondemand.launch(cold_id)
    assert launched is not None and launched[1] is None
    d.refresh_from_db()
    assert d.status == DeploymentStatus.RUNNING, d.status_message
    assert ondemand.observe(cold_id)["state"] == "ready"


def test_a_request_that_cannot_wait_for_the_download_gets_503_saying_so(setup, gateway, alice):  # noqa: F811
    """No worker runs here: the pinned model's placement (in the gateway's process) asks for the
    download, which no worker steps; the request waits its 5 s budget, then is told why."""
    _a, b, gone = setup
    cold_model(b, gone, pin_host=True, cold_start_budget=5)
    _key, key = issue_key(owner=alice, name="laptop")
    reply = chat(gateway, key, "od-dl")
    assert reply.status_code == 503, reply.text
    error = reply.json()["error"]
    assert error["code"] == "model_downloading" and "being downloaded" in error["message"], error
    assert int(reply.headers["retry-after"]) >= 1
    job = ModelDownload.objects.get(host=b)
    assert job.is_active and job.repo_id == REPO
    again = httpx.post(
        f"{gateway}/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}", "Prefer": "wait=1"},
        json={"model": "od-dl", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
        timeout=60,
    )
    assert again.status_code == 503 and again.json()["error"]["code"] == "model_downloading", again.text
    assert ModelDownload.objects.filter(host=b).count() == 1  # the second cold start joined it


VLLM_REPO = "acme/tiny-vllm"
TINY_CONFIG = (
    b'{"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 4, "head_dim": 16,'
    b' "num_hidden_layers": 2, "intermediate_size": 128, "vocab_size": 256, "max_position_embeddings": 512}'
)


@pytest.fixture
def roomy_b(two_targets):  # noqa: F811
    """gpu-b with an RTX 4090 (vLLM's own overhead does not fit the 300 MiB fake card)."""
    two_targets[1].use_gpus("nvidia_smi_rtx4090")
    yield
    two_targets[1].use_gpus("nvidia_smi_small_b")


def test_a_vllm_model_folder_is_downloaded_onto_the_chosen_host_too(setup, roomy_b, settings):
    """A vLLM model is a folder (a repository's files), not one file: the placement finds the
    download it came from by the folder, downloads the same files onto the chosen host, reads the
    size there (config.json and the safetensors) and moves the model path to that host's folder."""
    a, b, _gone = setup
    weights = b"\0" * 4096
    files = {"config.json": RepoFile(TINY_CONFIG, lfs=False), "model.safetensors": RepoFile(weights, lfs=True)}
    with FakeHub({VLLM_REPO: files}) as vllm_hub:
        settings.HOSTS_HF_ENDPOINT = vllm_hub.url
        folder = a.downloads.get().local_path.replace("acme--tiny-chat", "acme--tiny-vllm")  # not on gpu-a's disk
        ModelDownload.objects.create(
            host=a,
            repo_id=VLLM_REPO,
            commit=COMMIT,
            state=DownloadState.DONE,
            local_path=folder,
            files=[{"name": "config.json", "size": len(TINY_CONFIG)}, {"name": "model.safetensors", "size": 4096}],
            total_bytes=len(TINY_CONFIG) + 4096,
            done_bytes=len(TINY_CONFIG) + 4096,
            finished=timezone.now(),
        )
        d = services.save_deployment(
            host=a,
            name="od-vllm",
            backend="vllm",
            model_path=folder,
            served_model_name="od-vllm",
            gpu_indices=[0],
            port=free_port(),
            options={"max_model_len": 256},
            extra_args=[],
            on_demand=True,
            idle_ttl=30,
            cold_start_budget=150,
        )
        cold_id = ondemand.demand(d.pk)["cold_start_id"]
        assert ondemand.place(cold_id) is not None
        cold = ColdStart.objects.get(pk=cold_id)
        assert cold.state == ColdStartState.DOWNLOADING and cold.host_name == "gpu-b", cold.reasons_english
        job = cold.download
        assert job is not None and (job.host, job.repo_id, job.revision, job.pattern) == (b, VLLM_REPO, COMMIT, "")

        job = drive(job)
        assert job.state == DownloadState.DONE, job.message
        assert (Path(job.local_path) / "config.json").read_bytes() == TINY_CONFIG
        ondemand.place(cold_id)
        cold.refresh_from_db()
        d.refresh_from_db()
        assert any(r.startswith("gpu-b:") and "has the weights" in r for r in cold.reasons_english), (
            cold.reasons_english
        )
        assert cold.state == ColdStartState.LAUNCHING, cold.reasons_english
        assert d.host == b and d.model_path == job.local_path != folder


@pytest.fixture
def apart():
    """Two sshd "GPU hosts" that do not share the model: gpu-b's sshd cannot see gpu-a's home."""
    from .test_ondemand import _target

    a = _target("nvidia_smi_small_a")
    b = SSHTarget(sshd=a.sshd)
    b.hidden = [a.home]
    b.start()
    b.use_gpus("nvidia_smi_small_b")
    yield a, b
    a.stop()
    b.stop()


def test_a_host_that_still_has_the_file_gives_its_size_and_the_chosen_host_downloads_it(
    apart,
    transactional_db,
    hub,
    settings,
    servers,  # noqa: F811
):
    """gpu-a still has the file but no room (a deployment that is not on demand fills it); gpu-b
    has room and not the file. The fit reads the size from gpu-a's copy, chooses gpu-b (it fits
    there once downloaded), downloads it there, then launches on gpu-b's own copy."""
    from .conftest import registered_host

    settings.HOSTS_HF_ENDPOINT = hub.url
    settings.HOSTS_DOWNLOAD_DISK_RESERVE_MIB = 1
    settings.HOSTS_HEALTH_POLL = 0.2
    for target in apart:
        (target.bin / "hf").symlink_to(Path(sys.executable).parent / "hf")
    a, b = registered_host("gpu-a", apart[0]), registered_host("gpu-b", apart[1])
    occupy(a)
    data = tiny_gguf_path().read_bytes()
    folder = apart[0].home / ".gateway-portal" / "models" / "acme--tiny-chat"
    folder.mkdir(parents=True)
    (folder / GGUF).write_bytes(data)
    ModelDownload.objects.create(
        host=a,
        repo_id=REPO,
        commit=COMMIT,
        state=DownloadState.DONE,
        local_path=str(folder),
        files=[{"name": GGUF, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}],
        total_bytes=len(data),
        done_bytes=len(data),
        finished=timezone.now(),
    )
    d = cold_model(a, f"{folder}/{GGUF}")
    cold_id = ondemand.demand(d.pk)["cold_start_id"]

    assert ondemand.place(cold_id) is not None
    cold = ColdStart.objects.get(pk=cold_id)
    assert cold.state == ColdStartState.DOWNLOADING and cold.host_name == "gpu-b", cold.reasons_english
    reasons = cold.reasons_english
    assert reasons[0].startswith("gpu-a: no room") and reasons[-1] == "chosen gpu-b", reasons
    assert reasons[1].startswith("gpu-b: fits on GPU 0") and "downloads the weights" in reasons[1], reasons
    job = drive(cold.download)
    assert job.state == DownloadState.DONE and job.host == b, job.message
    assert (folder / GGUF).exists()  # gpu-a's copy is untouched

    assert ondemand.place(cold_id) is None
    cold.refresh_from_db()
    d.refresh_from_db()
    assert cold.state == ColdStartState.LAUNCHING and "has the weights" in cold.reasons_english[1], cold.reasons_english
    assert d.host == b and d.model_path == f"{job.local_path}/{GGUF}" and job.local_path.startswith(str(apart[1].home))
    launched = ondemand.launch(cold_id)
    assert launched is not None and launched[1] is None
    d.refresh_from_db()
    assert d.status == DeploymentStatus.RUNNING, d.status_message
    assert ondemand.observe(cold_id)["state"] == "ready"
