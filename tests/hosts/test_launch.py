"""Launch jobs end to end: real sshd on 127.0.0.1, real llama.cpp (xllamacpp) started over SSH.

The job runs in-process through `jobs.run_inline` (what the Celery tasks call, one health look at a time); everything it
touches is real: SSH, the detached server, its /health, /props, the database rows it writes.
"""

from __future__ import annotations

import os
import socket

import openai
import pytest
from django.urls import reverse

from accounts.models import AuditLog
from channels.choices import ChannelKind, ChannelStatus
from channels.models import Channel, ModelRoute, ProbeResult
from hosts import backends, diagnose
from hosts.choices import DeploymentStatus, HostStatus, JobAction, JobState
from hosts.deployments import jobs, services
from hosts.models import Deployment, DeploymentRun, Host, LaunchJob
from hosts.remote import commands, inventory
from tests.fakes.llamacpp import tiny_gguf_path
from tests.services import free_port

# The tiny model has random weights and may emit EOS at once; llama.cpp's ignore_eos makes the
# number of generated tokens exactly max_tokens, so usage can be asserted to the token.
EXACT = {"ignore_eos": True}


@pytest.fixture(autouse=True)
def quick_timings(settings):
    settings.HOSTS_HEALTH_TIMEOUT = 60
    settings.HOSTS_HEALTH_POLL = 0.1
    settings.HOSTS_STOP_GRACE = 5


@pytest.fixture
def eager_celery():
    """Queued tasks (the probe the launch job triggers) run inline, as a worker would run them."""
    from portal.celery import app

    before = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = before


@pytest.fixture
def online_host(gpu_host):
    inventory.refresh(gpu_host)
    return gpu_host


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for our purposes (PID 1 in some containers never reaps).
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def llama_deployment(
    host, *, model_path=None, port=None, name="tiny", gpus=(0,), extra_args=(), **options
) -> Deployment:
    return services.save_deployment(
        host=host,
        name=name,
        backend="llamacpp",
        model_path=str(model_path or tiny_gguf_path()),
        served_model_name="tiny-chat",
        gpu_indices=list(gpus),
        port=port or free_port(),
        options={"ctx_size": 1024, "threads": 1, "parallel": 1, **options},
        extra_args=list(extra_args),
    )


def run(deployment: Deployment, action: str = JobAction.LAUNCH) -> LaunchJob:
    job = jobs.request_job(deployment, action)
    jobs.run_inline(job.pk)
    job.refresh_from_db()
    deployment.refresh_from_db()
    return job


def test_llamacpp_deployment_launches_registers_a_channel_and_stops(online_host, started_pids, eager_celery):
    deployment = llama_deployment(online_host)
    checked_before = Host.objects.get(pk=online_host.pk).last_checked
    job = run(deployment)
    if job.pid:
        started_pids.append(job.pid)
    assert Host.objects.get(pk=online_host.pk).last_checked > checked_before  # GPUs re-read after the job

    assert job.state == JobState.RUNNING, job.message
    assert [t["state"] for t in job.transitions] == ["queued", "connecting", "starting", "waiting_health", "running"]
    assert deployment.status == DeploymentStatus.RUNNING and deployment.pid == job.pid and alive(job.pid)
    assert deployment.upstream_api_key not in job.command and job.command.endswith("--api-key-file api_key")
    assert deployment.last_fit["verdict"] == "fits" and deployment.last_fit["source"] == "GGUF metadata"

    channel = deployment.channel
    assert channel.kind == ChannelKind.LLAMACPP
    assert channel.base_url == f"http://127.0.0.1:{deployment.port}/v1"
    assert channel.api_key == deployment.upstream_api_key and channel.deployments.get().host == online_host
    assert channel.status == ChannelStatus.HEALTHY, channel.status_message  # the probe the job triggered
    route = ModelRoute.objects.get(channel=channel)
    assert route.model.name == "tiny-chat"
    assert route.context_window == route.discovered_context_window == 1024  # what llama.cpp's /props said

    # The channel's key is the one the server enforces.
    client = openai.OpenAI(base_url=channel.base_url, api_key=channel.api_key)
    reply = client.chat.completions.create(
        model="tiny-chat", messages=[{"role": "user", "content": "hello"}], max_tokens=3, extra_body=EXACT
    )
    assert reply.usage.completion_tokens == 3  # (without ignore_eos the tiny model may stop sooner: CI saw 2)
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=channel.base_url, api_key="wrong").models.list()

    # Launching the same deployment again does not start a second server.
    again = run(deployment)
    assert again.state == JobState.RUNNING and again.pid == job.pid
    assert "not starting a second server" in again.transitions[3]["message"]
    assert Channel.objects.count() == 1

    stop = run(deployment, JobAction.STOP)
    assert stop.state == JobState.STOPPED, stop.message
    assert not alive(job.pid)
    channel.refresh_from_db()
    assert deployment.status == DeploymentStatus.STOPPED and deployment.pid is None
    assert channel.enabled is False

    # The GPU-hours showback's record: one run, on the channel it served, from running to stopped
    # (the second launch found it running and opened nothing).
    (gpu_run,) = DeploymentRun.objects.filter(deployment=deployment)
    assert gpu_run.channel_id == channel.pk and gpu_run.gpus == len(deployment.gpu_indices)
    assert gpu_run.stopped is not None and gpu_run.started < gpu_run.stopped


def test_an_embedding_server_launched_registers_an_embedding_model_healthy_on_an_embedding(
    online_host, started_pids, eager_celery
):
    """`--embeddings` in the further arguments starts an embedding server: the model the launch
    creates is an embedding model (client configs offer it for embeddings only, the gateway refuses
    a conversation with it), and its channel's first health check times an embedding, no chat."""
    deployment = llama_deployment(online_host, extra_args=["--embeddings", "--pooling", "mean"])
    job = run(deployment)
    if job.pid:
        started_pids.append(job.pid)
    assert job.state == JobState.RUNNING, job.message
    route = ModelRoute.objects.get(channel=deployment.channel)
    assert (route.model.name, route.model.kind) == ("tiny-chat", "embedding")
    channel = Channel.objects.get(pk=deployment.channel.pk)
    assert channel.status == ChannelStatus.HEALTHY, channel.status_message
    assert "an embedding model" in str(ProbeResult.objects.filter(channel=channel).latest("created").error_message)
    client = openai.OpenAI(base_url=channel.base_url, api_key=channel.api_key)
    assert client.embeddings.create(model="tiny-chat", input="hello").data[0].embedding


@pytest.mark.parametrize(
    ("backend", "args", "embeds"),
    [
        ("llamacpp", ["--embedding"], True),
        ("llamacpp", ["--pooling", "mean"], False),
        ("vllm", ["--task", "embed"], True),
        ("vllm", ["--runner=pooling"], True),
        ("vllm", ["--convert", "embed", "--trust-remote-code"], True),
        ("vllm", ["--task", "generate"], False),
        ("sglang", ["--is-embedding"], True),
        ("sglang", [], False),
    ],
)
def test_the_further_arguments_say_whether_a_server_embeds(backend, args, embeds):
    assert backends.get(backend).serves_embeddings(args) is embeds


def test_restart_replaces_the_process(online_host, started_pids):
    deployment = llama_deployment(online_host)
    first = run(deployment)
    started_pids.append(first.pid)
    second = run(deployment, JobAction.RESTART)
    started_pids.append(second.pid)
    assert second.state == JobState.RUNNING, second.message
    assert second.pid != first.pid and not alive(first.pid) and alive(second.pid)
    assert "stopping" in [t["state"] for t in second.transitions]
    run(deployment, JobAction.STOP)


def test_adopt_takes_over_a_server_started_by_hand(online_host, ssh_target, started_pids):
    deployment = llama_deployment(online_host)
    port = deployment.port
    # Someone started llama-server by hand on the host, with their own key.
    from hosts.remote import ssh

    with ssh.connect(online_host) as remote:
        argv = f"llama-server -m {tiny_gguf_path()} -c 512 -t 1 --host 127.0.0.1 --port {port} --api-key hand-made-key"
        pid = int(remote.run(f"{{ setsid nohup {argv} >/dev/null 2>&1 </dev/null & echo $!; }}").stdout.strip())
    started_pids.append(pid)
    job = run(deployment, JobAction.ADOPT)
    assert job.state == JobState.RUNNING, job.message
    assert job.pid == pid
    assert deployment.upstream_api_key == "hand-made-key"
    assert ModelRoute.objects.get(channel=deployment.channel).context_window == 512
    run(deployment, JobAction.STOP)
    assert not alive(pid)


def test_a_missing_model_file_is_refused_before_anything_starts(online_host, ssh_target):
    deployment = llama_deployment(online_host, model_path="/nonexistent/model-Q4_K_M.gguf", name="never-started")
    job = run(deployment)
    assert job.state == JobState.FAILED
    assert (
        job.message == "The model file /nonexistent/model-Q4_K_M.gguf does not exist on the host. Nothing was started."
    )
    assert job.pid is None and job.command == "" and "waiting_health" not in [t["state"] for t in job.transitions]
    assert not (ssh_target.home / deployment.remote_dir / "server.log").exists()  # nothing ever ran
    assert deployment.status == DeploymentStatus.FAILED
    assert not Channel.objects.exists() and not ModelRoute.objects.exists()


@pytest.mark.parametrize(
    ("content", "expected"),
    [(b"", "is empty"), (b"PK\x03\x04 not a gguf", "is not a GGUF file")],
)
def test_a_model_file_that_is_not_gguf_is_refused_before_launch(online_host, tmp_path, content, expected):
    bad = tmp_path / "model-Q4_K_M.gguf"
    bad.write_bytes(content)
    job = run(llama_deployment(online_host, model_path=bad))
    assert job.state == JobState.FAILED and expected in job.message and job.pid is None


def test_vllm_model_folder_without_config_is_refused_before_launch(online_host, tmp_path):
    deployment = services.save_deployment(
        host=online_host,
        name="empty-folder",
        backend="vllm",
        model_path=str(tmp_path),
        served_model_name="nothing",
        gpu_indices=[0],
        port=free_port(),
        options={"max_model_len": 4096},
        extra_args=[],
        fit_override=True,
    )
    job = run(deployment)
    assert job.state == JobState.FAILED and job.pid is None
    assert job.message == f"The model folder {tmp_path} has no readable config.json. Nothing was started."


def test_launch_that_exits_at_once_reports_its_log_and_registers_nothing(online_host, tmp_path):
    broken = tmp_path / "broken-Q4_K_M.gguf"
    broken.write_bytes(b"GGUF" + b"\xff" * 64)  # passes the pre-launch check, llama.cpp cannot load it
    deployment = llama_deployment(online_host, model_path=broken)
    job = run(deployment)
    assert job.state == JobState.FAILED
    assert "exit code 1" in job.message
    assert job.exit_code == 1 and str(broken) in job.log_tail  # llama.cpp's own last log lines
    assert deployment.status == DeploymentStatus.FAILED
    assert not Channel.objects.exists() and not ModelRoute.objects.exists()


def test_port_in_use_is_refused_before_starting(online_host):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        deployment = llama_deployment(online_host, port=taken.getsockname()[1])
        job = run(deployment)
    assert job.state == JobState.FAILED
    assert f"Port {deployment.port} is already in use" in job.message
    assert job.pid is None and not Channel.objects.exists()


def test_a_launch_that_does_not_fit_is_refused_unless_overridden(online_host, tmp_path):
    # A file by that name whose header cannot be read: the estimate falls back to the preset.
    model = tmp_path / "Qwen3-Coder-30B-A3B-Instruct-Q4_K_M.gguf"
    model.write_bytes(b"GGUF" + bytes(1024))
    deployment = llama_deployment(online_host, model_path=model, ctx_size=32768)
    job = run(deployment)
    assert job.state == JobState.FAILED
    assert job.message.startswith("Does not fit (GPU 0 is short): needs about ")
    assert "smallest change that fits: " in job.message
    assert deployment.last_fit["source"] == "preset qwen3-coder-30b-a3b"
    assert job.pid is None

    Deployment.objects.filter(pk=deployment.pk).update(fit_override=True)
    deployment.refresh_from_db()
    job = run(deployment)
    assert job.state == JobState.FAILED and "could not be loaded" in job.message  # it did try


def vllm_qwen(
    host, port: int | None = None, instance: Deployment | None = None, extra_args=(), **options
) -> Deployment:
    return services.save_deployment(
        instance=instance,
        host=host,
        name="qwen",
        backend="vllm",
        model_path="Qwen/Qwen3-8B",
        served_model_name="qwen3-8b",
        gpu_indices=[0],
        port=port or free_port(),
        options={"max_model_len": 4096, **options},
        extra_args=list(extra_args),
        fit_override=True,  # 16 GB of bf16 weights on a 12 GB card: the estimate says no
    )


def test_vllm_deployment_through_a_fake_vllm(online_host, started_pids):
    deployment = vllm_qwen(online_host, extra_args=["--trust-remote-code"], enable_prefix_caching=True)
    job = run(deployment)
    started_pids.append(job.pid)
    assert job.state == JobState.RUNNING, job.message
    assert "vllm serve Qwen/Qwen3-8B --served-model-name qwen3-8b --tensor-parallel-size 1" in job.command
    assert deployment.channel.kind == ChannelKind.VLLM
    assert ModelRoute.objects.get(channel=deployment.channel).context_window == 4096
    run(deployment, JobAction.STOP)
    assert not alive(job.pid)


TOOLS = [
    {
        "type": "function",
        "function": {"name": "read_file", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}},
    }
]


def test_a_vllm_server_launched_for_coding_agents_gets_its_tool_call_parser(
    transactional_db, online_host, alice, admin_client, started_pids, gateway
):
    """Coding agents send tools with every request; vLLM refuses them unless started with a
    tool-call parser. Launched without one, the deployment page says so and names the model's
    (Qwen3: hermes); with it set, the same request through the gateway is answered."""
    from django.urls import reverse

    from keys.services import issue_key

    deployment = vllm_qwen(online_host)
    job = run(deployment)
    started_pids.append(job.pid)
    assert job.state == JobState.RUNNING, job.message
    _key, plaintext = issue_key(owner=alice, name="laptop")
    client = openai.OpenAI(base_url=gateway + "/v1", api_key=plaintext, max_retries=0)
    ask = {"model": "qwen3-8b", "messages": [{"role": "user", "content": "open README"}], "tools": TOOLS}
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(**ask)
    assert "--enable-auto-tool-choice" in str(refused.value)
    url = reverse("deployment_detail", args=[deployment.pk])
    page = admin_client.get(url).content.decode()
    assert 'id="tool-calling-note"' in page and "This model&#x27;s format: hermes" in page
    assert "工具调用解析器" in admin_client.get(url, HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()

    run(deployment, JobAction.STOP)
    vllm_qwen(online_host, port=deployment.port, instance=deployment, tool_call_parser="hermes")
    job = run(deployment)
    started_pids.append(job.pid)
    assert job.state == JobState.RUNNING, job.message
    assert "--enable-auto-tool-choice --tool-call-parser hermes" in job.command
    assert client.chat.completions.create(**ask).choices[0].finish_reason == "stop"
    assert 'id="tool-calling-note"' not in admin_client.get(url).content.decode()
    run(deployment, JobAction.STOP)


def test_a_parser_vllm_does_not_know_fails_the_launch_in_vllms_words(online_host, started_pids):
    deployment = vllm_qwen(online_host, tool_call_parser="qwen25")  # SGLang's name for it, not vLLM's
    job = run(deployment)
    if job.pid:
        started_pids.append(job.pid)
    assert job.state == JobState.FAILED
    assert "invalid tool call parser: qwen25" in job.message + job.log_tail


def slow_deployment(host):
    """A vLLM (fake) deployment whose /health answers after 3 s: a launch waits for a few looks."""
    return services.save_deployment(
        host=host,
        name="slow",
        backend="vllm",
        model_path="Qwen/Qwen3-8B",
        served_model_name="qwen3-8b",
        gpu_indices=[0],
        port=free_port(),
        options={"max_model_len": 4096},
        extra_args=["--fake-startup-delay", "3"],
        fit_override=True,
    )


def test_no_worker_waits_while_the_server_loads_each_health_look_is_rescheduled(online_host, started_pids):
    """The task returns after one look at /health with the delay of the next (hosts.tasks re-schedules
    it with that countdown); between looks no process holds the job, and looks are not attempts."""
    deployment = slow_deployment(online_host)
    job = jobs.request_job(deployment, JobAction.LAUNCH)
    delay = jobs.run_job(job.pk)
    job.refresh_from_db()
    started_pids.append(job.pid)
    assert delay == 0.1  # HOSTS_HEALTH_POLL
    assert job.state == JobState.WAITING_HEALTH and job.worker.startswith(jobs.POLL)
    assert jobs.run_job(job.pk) is None  # a duplicate delivery does not take a job waiting for its look
    looks = 0
    while delay is not None:
        looks += 1
        delay = jobs.poll_job(job.pk)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING, job.message
    assert looks >= 2 and job.attempts == 1
    assert jobs.poll_job(job.pk) is None  # a late look leaves a running job alone
    run(deployment, JobAction.STOP)


def test_a_health_look_the_database_did_not_answer_is_taken_again_later(transactional_db, online_host, started_pids):
    """The database away during a look at a starting server (PostgreSQL restarted): the poll task
    schedules its next look instead of raising, which ended the looks and left the job to the sweep,
    handed on "as its worker stopped" once its heartbeat was old, one attempt spent."""
    import json

    import redis

    from hosts import tasks
    from portal.celery import app
    from tests.portal.test_database_unavailable import broken_database
    from tests.services import redis_url

    deployment = slow_deployment(online_host)
    job = jobs.request_job(deployment, JobAction.LAUNCH, queue=False)
    assert jobs.run_job(job.pk) is not None  # started; the next look is a poll task
    job.refresh_from_db()
    started_pids.append(job.pid)
    queue = f"poll-test-{job.pk}-{os.getpid()}"
    before = app.conf.task_default_queue, app.conf.task_always_eager
    app.conf.task_default_queue, app.conf.task_always_eager = queue, False
    broker = redis.Redis.from_url(redis_url())
    try:
        with broken_database():
            tasks.poll_job(job.pk)  # as a worker runs it: no exception, the next look is queued
        queued = [json.loads(m)["headers"] for m in broker.lrange(queue, 0, -1)]
    finally:
        app.conf.task_default_queue, app.conf.task_always_eager = before
        broker.delete(queue)
        broker.close()
    assert [(h["task"], h["argsrepr"]) for h in queued] == [(tasks.POLL_TASK, f"({job.pk},)")]

    delay: float | None = 0.0
    while delay is not None:  # the queued looks, taken with the database back
        delay = jobs.poll_job(job.pk)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.attempts == 1, job.message
    assert not any("handed to another worker" in t["message"] for t in job.transitions)
    run(deployment, JobAction.STOP)


def test_a_second_job_while_one_is_active_is_refused(online_host):
    deployment = llama_deployment(online_host)
    jobs.request_job(deployment, JobAction.LAUNCH)
    with pytest.raises(jobs.JobConflict, match="still running"):
        jobs.request_job(deployment, JobAction.STOP)


def test_a_job_whose_worker_died_is_handed_on_then_failed_after_its_attempts(online_host, settings):
    from datetime import timedelta

    from django.utils import timezone

    from hosts import signals

    handed: list[int] = []

    def receiver(sender, job_id, **kwargs):
        handed.append(job_id)

    signals.job_requested.connect(receiver, dispatch_uid="test-handed-on")
    try:
        deployment = llama_deployment(online_host)
        job = jobs.request_job(deployment, JobAction.LAUNCH)
        silent = timezone.now() - timedelta(seconds=settings.HOSTS_STALE_JOB_SECONDS + 5)
        LaunchJob.objects.filter(pk=job.pk).update(
            state=JobState.WAITING_HEALTH, heartbeat=silent, worker="other-host:4242", attempts=1
        )
        assert jobs.recover_stale_jobs() == 1
        job.refresh_from_db()
        assert job.state == JobState.WAITING_HEALTH and job.worker == "" and handed == [job.pk]
        assert "handed to another worker" in job.message
        assert jobs.recover_stale_jobs() == 0  # handed on, waiting for a worker: not handed on again

        LaunchJob.objects.filter(pk=job.pk).update(
            heartbeat=silent, worker="other-host:4243", attempts=settings.HOSTS_JOB_MAX_ATTEMPTS
        )
        assert jobs.recover_stale_jobs() == 1
        job.refresh_from_db()
        deployment.refresh_from_db()
        assert job.state == JobState.FAILED and "worker stopped during this job 3 times" in job.message
        assert deployment.status == DeploymentStatus.FAILED
        jobs.run_job(job.pk)  # a redelivered task leaves a finished job alone
        job.refresh_from_db()
        assert job.state == JobState.FAILED
    finally:
        signals.job_requested.disconnect(dispatch_uid="test-handed-on")


def test_a_job_held_by_a_dead_process_of_this_host_is_handed_on_at_once(online_host):
    """The worker-start sweep: the heartbeat is fresh, but the process that held it is gone."""
    import socket
    import subprocess

    from django.utils import timezone

    gone = subprocess.Popen(["true"])
    gone.wait()
    deployment = llama_deployment(online_host)
    job = jobs.request_job(deployment, JobAction.LAUNCH)
    LaunchJob.objects.filter(pk=job.pk).update(
        state=JobState.STARTING, heartbeat=timezone.now(), worker=f"{socket.gethostname()}:{gone.pid}", attempts=1
    )
    assert jobs.recover_stale_jobs() == 1
    job.refresh_from_db()
    assert job.worker == "" and job.state == JobState.STARTING


def test_a_job_nobody_picks_up_is_failed_with_a_hint(online_host, settings):
    from datetime import timedelta

    from django.utils import timezone

    deployment = llama_deployment(online_host)
    job = jobs.request_job(deployment, JobAction.LAUNCH)
    assert jobs.recover_stale_jobs() == 0  # just queued
    LaunchJob.objects.filter(pk=job.pk).update(
        created=timezone.now() - timedelta(seconds=settings.HOSTS_QUEUED_JOB_SECONDS + 1)
    )
    assert jobs.recover_stale_jobs() == 1
    job.refresh_from_db()
    assert job.state == JobState.FAILED and "is a Celery worker running" in job.message


def test_a_restart_nobody_picked_up_leaves_the_running_deployment_running(online_host, settings, started_pids):
    """No worker touched the server (the job was never claimed): failing the job must not mark a
    deployment that still serves "failed", which also took it out of supervision."""
    from datetime import timedelta

    from django.utils import timezone

    deployment = llama_deployment(online_host)
    first = run(deployment)
    started_pids.append(first.pid)
    assert deployment.status == DeploymentStatus.RUNNING, deployment.status_message
    serving = deployment.status_message

    job = jobs.request_job(deployment, JobAction.RESTART)
    LaunchJob.objects.filter(pk=job.pk).update(
        created=timezone.now() - timedelta(seconds=settings.HOSTS_QUEUED_JOB_SECONDS + 1)
    )
    assert jobs.recover_stale_jobs() == 1
    job.refresh_from_db()
    deployment.refresh_from_db()
    assert job.state == JobState.FAILED and "is a Celery worker running" in job.message
    assert deployment.status == DeploymentStatus.RUNNING and deployment.status_message == serving
    assert deployment.pid == first.pid and alive(first.pid)


def test_stop_takes_over_a_job_whose_worker_died(online_host, settings, started_pids):
    from datetime import timedelta

    from django.utils import timezone

    deployment = llama_deployment(online_host)
    first = run(deployment)
    started_pids.append(first.pid)
    stuck = jobs.request_job(deployment, JobAction.RESTART)
    LaunchJob.objects.filter(pk=stuck.pk).update(
        state=JobState.STARTING, worker="other-host:1", heartbeat=timezone.now()
    )
    with pytest.raises(jobs.JobConflict):  # its worker is alive (fresh heartbeat): no take-over
        jobs.request_job(deployment, JobAction.STOP)
    LaunchJob.objects.filter(pk=stuck.pk).update(
        heartbeat=timezone.now() - timedelta(seconds=settings.HOSTS_STALE_JOB_SECONDS + 5)
    )
    stop = run(deployment, JobAction.STOP)
    stuck.refresh_from_db()
    assert stuck.state == JobState.FAILED and "Taken over by Stop" in stuck.message
    assert stop.state == JobState.STOPPED and not alive(first.pid)


@pytest.fixture
def gateway(transactional_db, settings):
    """The real portal ASGI app (gateway included) under uvicorn on 127.0.0.1."""
    from tests.gateway.conftest import ThreadServer

    settings.GATEWAY_USAGE_FLUSH_INTERVAL = 0.1
    server = ThreadServer().start()
    yield server.url
    server.stop()


def test_chat_completion_through_the_gateway_reaches_the_launched_llamacpp(
    transactional_db, online_host, alice, started_pids, gateway
):
    from keys.services import issue_key

    deployment = llama_deployment(online_host)
    job = run(deployment)
    started_pids.append(job.pid)
    assert job.state == JobState.RUNNING, job.message
    _key, plaintext = issue_key(owner=alice, name="laptop")

    client = openai.OpenAI(base_url=gateway + "/v1", api_key=plaintext)
    assert "tiny-chat" in [m.id for m in client.models.list().data]
    reply = client.chat.completions.create(
        model="tiny-chat", messages=[{"role": "user", "content": "hello world"}], max_tokens=4, extra_body=EXACT
    )
    assert reply.usage.completion_tokens == 4 and reply.usage.prompt_tokens > 0

    run(deployment, JobAction.STOP)
    assert not alive(job.pid)
    with pytest.raises(openai.APIStatusError) as stopped:  # the disabled channel is no longer routed to
        client.chat.completions.create(model="tiny-chat", messages=[{"role": "user", "content": "hi"}], max_tokens=1)
    assert stopped.value.status_code in (404, 503)


@pytest.mark.parametrize(
    ("log", "exit_code", "expected"),
    [
        (
            "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 12800.00 MiB on device 0: "
            "cudaMalloc failed: out of memory\nllama_model_load: error loading model",
            1,
            "Out of memory (exit code 1)",
        ),
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
            "of 79.10 GiB of which 1.2 GiB is free.",
            1,
            "Out of memory",
        ),
        (
            "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`",
            1,
            "Out of memory",
        ),
        (
            "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): address already in use",
            1,
            "Port 8000 is in use",
        ),
        ("sh: 1: vllm: not found", 127, "vllm was not found on the host's PATH"),
        ("Traceback …\nKeyError: 'model_type'", 1, "The server exited (exit code 1)"),
    ],
)
def test_failure_reasons_are_recognised_from_real_log_lines(db, log, exit_code, expected):
    host = Host(name="h", address="10.0.0.1", username="u")
    deployment = Deployment(host=host, name="d", backend="vllm", model_path="a/b", served_model_name="b", port=8000)
    message = diagnose.explain_failure(log, exit_code, deployment).english
    assert message.startswith(expected)
    assert log.strip().splitlines()[-1] in message  # the last log lines come along


def test_fit_reads_config_json_and_weight_sizes_over_ssh(online_host, tmp_path):
    folder = tmp_path / "Qwen3-32B"
    folder.mkdir()
    (folder / "config.json").write_text(
        '{"hidden_size": 5120, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128,'
        ' "num_hidden_layers": 64, "intermediate_size": 25600, "vocab_size": 151936,'
        ' "max_position_embeddings": 40960}'
    )
    for i in range(2):  # sparse files: the size is what counts
        with open(folder / f"model-0000{i}.safetensors", "wb") as f:
            f.truncate(10 * 1024**3)
    deployment = services.save_deployment(
        host=online_host,
        name="qwen32",
        backend="vllm",
        model_path=str(folder),
        served_model_name="qwen3-32b",
        gpu_indices=[0],
        port=free_port(),
        options={"max_model_len": 4096},
        extra_args=[],
    )
    from hosts.remote import ssh

    with ssh.connect(online_host) as remote:
        result = services.check_fit(deployment, remote)
    assert result["source"] == "config.json"
    assert result["weights_gib"] == 20.0  # the files, not the parameter count
    assert result["verdict"] == "does_not_fit"  # on a 12 GB card


def test_a_redelivered_job_resumes_and_finds_the_server_it_started(online_host, started_pids):
    """The worker died after starting the server; Celery redelivers the task (acks_late)."""
    from datetime import timedelta

    from django.utils import timezone

    deployment = llama_deployment(online_host)
    first = run(deployment)
    started_pids.append(first.pid)
    job = jobs.request_job(deployment, JobAction.LAUNCH)
    LaunchJob.objects.filter(pk=job.pk).update(
        state=JobState.WAITING_HEALTH, heartbeat=timezone.now() - timedelta(minutes=5), worker="dead-host:1"
    )
    jobs.run_inline(job.pk)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.pid == first.pid
    assert Channel.objects.count() == 1
    run(deployment, JobAction.STOP)


def test_a_job_held_by_a_live_worker_is_not_run_twice(online_host):
    from django.utils import timezone

    deployment = llama_deployment(online_host)
    job = jobs.request_job(deployment, JobAction.LAUNCH)
    LaunchJob.objects.filter(pk=job.pk).update(
        state=JobState.STARTING, heartbeat=timezone.now(), worker="other-host:77"
    )
    jobs.run_job(job.pk)
    job.refresh_from_db()
    assert job.state == JobState.STARTING and len(job.transitions) == 1


def test_stop_kills_a_server_that_ignores_term_after_the_grace_period(online_host, started_pids, settings):
    from hosts.remote import ssh

    settings.HOSTS_STOP_GRACE = 0.5
    deployment = llama_deployment(online_host)
    with ssh.connect(online_host) as remote:
        stubborn = (
            "{ setsid nohup sh -c 'trap \"\" TERM; while :; do sleep 0.1; done' >/dev/null 2>&1 </dev/null & echo $!; }"
        )
        pid = int(remote.run(stubborn).stdout.strip())
    started_pids.append(pid)
    Deployment.objects.filter(pk=deployment.pk).update(pid=pid, status=DeploymentStatus.RUNNING)
    deployment.refresh_from_db()
    job = run(deployment, JobAction.STOP)
    assert job.state == JobState.STOPPED, job.message
    assert not alive(pid)


def test_a_channel_name_taken_by_hand_gets_a_suffix(online_host, started_pids):
    Channel.objects.create(name="tiny@gpu-box", kind="openai", base_url="https://api.example.com/v1")
    deployment = llama_deployment(online_host)
    job = run(deployment)
    started_pids.append(job.pid)
    assert job.state == JobState.RUNNING, job.message
    assert deployment.channel.name == "tiny@gpu-box-2"
    run(deployment, JobAction.STOP)


# --- the key never on a command line; the server's own memory report -------------------------------------
def _command_lines(remote) -> str:
    """Every process's argv as `ps` and /proc show it to any user of the host."""
    ps = remote.run(["ps", "-eo", "pid=,args="]).stdout
    proc = remote.run("for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' <\"$f\"; echo; done 2>/dev/null").stdout
    return ps + proc


def test_ps_on_the_host_never_shows_the_server_key(online_host, started_pids, ssh_target):
    from hosts.remote import ssh

    llama = llama_deployment(online_host, name="secret-llama")
    vllm = services.save_deployment(
        host=online_host,
        name="secret-vllm",
        backend="vllm",
        model_path="Qwen/Qwen3-8B",
        served_model_name="qwen3-8b",
        gpu_indices=[0],
        port=free_port(),
        options={"max_model_len": 4096},
        extra_args=[],
        fit_override=True,
    )
    jobs_ = [run(llama), run(vllm)]
    started_pids.extend(j.pid for j in jobs_ if j.pid)
    assert [j.state for j in jobs_] == [JobState.RUNNING, JobState.RUNNING], [j.message for j in jobs_]
    with ssh.connect(online_host) as remote:
        seen = _command_lines(remote)
        assert str(jobs_[0].pid) in seen and "llama-server" in seen and "tests.fakes.vllm_cli" in seen
        for d in (llama, vllm):
            assert d.upstream_api_key not in seen
            mode = remote.run(f"stat -c %a {commands.deployment_dir(d.remote_dir)}/api_key").stdout.strip()
            assert mode == "600"
        # vLLM got it the way it documents, in its environment (readable only by the same user).
        children = remote.run(["ps", "-o", "pid=", "--ppid", str(jobs_[1].pid)]).stdout.split()
        environ = remote.run(f"tr '\\0' '\\n' </proc/{children[0]}/environ").stdout
        assert f"VLLM_API_KEY={vllm.upstream_api_key}" in environ.splitlines()
    for d in (llama, vllm):  # and the server enforces it
        d.refresh_from_db()
        client = openai.OpenAI(base_url=d.channel.base_url, api_key=d.upstream_api_key)
        assert [m.id for m in client.models.list().data]
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=d.channel.base_url, api_key="wrong").models.list()
    for d in (llama, vllm):
        run(d, JobAction.STOP)


def test_the_launch_compares_the_estimate_with_what_llamacpp_allocated(online_host, started_pids):
    deployment = llama_deployment(online_host, name="calibrated")
    job = run(deployment)
    started_pids.append(job.pid)
    assert job.state == JobState.RUNNING, job.message
    alloc = deployment.last_allocation
    assert alloc["actual"]["backend"] == "llamacpp" and alloc["actual"]["flash_attention"] == "on"
    rows = {r["what"]: r for r in alloc["rows"]}
    # llama.cpp's own KV buffer for -c 1024 of the tiny model is what the estimate says, to the byte.
    assert rows["KV cache (MiB)"]["actual"] == 0.25 and rows["KV cache (MiB)"]["ratio"] == 1.0
    assert rows["Weights (MiB)"]["ratio"] == pytest.approx(1.0, abs=0.1)
    assert "CPU-only" in alloc["notes"][0]  # a GPU was chosen, this llama.cpp has no CUDA
    online_host.refresh_from_db()
    assert online_host.fit_calibration["llamacpp"]["flash_attention_auto"] == "on"
    # The next estimate on this host knows that this build turns -fa auto on.
    from hosts.remote import ssh

    with ssh.connect(online_host) as remote:
        again = services.check_fit(deployment, remote)
    assert again["flash_attention"] == "on"
    run(deployment, JobAction.STOP)


def test_cpu_only_llamacpp_is_judged_against_the_hosts_ram(online_host, started_pids):
    deployment = llama_deployment(online_host, name="cpu-only", gpus=())
    job = run(deployment)
    started_pids.append(job.pid)
    assert job.state == JobState.RUNNING, job.message
    fit = deployment.last_fit
    assert fit["verdict"] == "fits" and fit["layers_on_gpu"] == 0
    assert [d["name"] for d in fit["devices"]] == ["RAM"] and fit["devices"][0]["have_gib"] > 0
    assert job.command.startswith("llama-server ")  # no CUDA_VISIBLE_DEVICES without GPUs
    run(deployment, JobAction.STOP)


def test_a_stop_the_host_did_not_answer_leaves_the_deployment_running_and_says_so(online_host, started_pids):
    """The job never reached the server: marking the deployment failed took a server that still
    serves out of supervision and the GPU-hours' showback, and let it be deleted as if it were gone."""
    deployment = llama_deployment(online_host)
    first = run(deployment)
    started_pids.append(first.pid)
    assert deployment.status == DeploymentStatus.RUNNING, deployment.status_message
    port = online_host.ssh_port
    Host.objects.filter(pk=online_host.pk).update(ssh_port=free_port())  # the host stops answering SSH
    job = run(deployment, JobAction.STOP)
    assert job.state == JobState.FAILED and "refused" in job.message
    assert deployment.status == DeploymentStatus.RUNNING and alive(first.pid)
    assert deployment.status_message == (
        f"Stop not done: SSH to gpu-box failed ({job.message}). The server is still running there: "
        "try again once SSH to the host works."
    )
    assert deployment.runs.get().stopped is None  # its GPU-hours still count
    with pytest.raises(services.ValidationError):
        services.delete_deployment(deployment)
    Host.objects.filter(pk=online_host.pk).update(ssh_port=port)
    assert run(deployment, JobAction.STOP).state == JobState.STOPPED
    assert deployment.status == DeploymentStatus.STOPPED and not alive(first.pid)


def gone_for_good(deployment: Deployment, started_pids: list[int]) -> LaunchJob:
    """A running deployment whose host stops answering SSH, and the stop that could not reach it."""
    first = run(deployment)
    started_pids.append(first.pid)
    assert deployment.status == DeploymentStatus.RUNNING, deployment.status_message
    Host.objects.filter(pk=deployment.host_id).update(ssh_port=free_port())  # decommissioned
    deployment.host.refresh_from_db()
    stop = run(deployment, JobAction.STOP)
    assert stop.state == JobState.FAILED and deployment.status == DeploymentStatus.RUNNING
    return first


def test_a_server_whose_host_is_gone_is_forgotten_through_the_api_then_it_and_its_host_are_deleted(
    online_host, started_pids, admin_client, admin
):
    """A stop that cannot reach its host leaves the deployment running; with the host gone for good
    nothing could take it out of Running, so neither it nor its host could ever be deleted."""
    deployment = llama_deployment(online_host)
    first = gone_for_good(deployment, started_pids)
    forgotten = admin_client.post(f"/api/deployments/{deployment.pk}/forget/")
    assert forgotten.status_code == 200, forgotten.content
    assert forgotten.json()["status"] == DeploymentStatus.FAILED
    deployment.refresh_from_db()
    assert deployment.status == DeploymentStatus.FAILED and not deployment.restarting
    assert deployment.status_message.startswith("Forgotten without stopping its server: SSH to gpu-box failed (")
    assert "may still be running there and using its GPUs" in deployment.status_message
    assert alive(first.pid)  # nothing was sent to the host: the server lives on, as the page warned
    channel = deployment.channel
    assert channel.enabled is False and "was forgotten" in channel.status_message  # out of routing
    assert deployment.runs.get().stopped is not None  # its GPU-hours no longer count
    entry = AuditLog.objects.get(object_type="deployment", message__contains="Forgotten without stopping")
    assert entry.actor == admin and entry.message.startswith("Running → Failed: ")
    assert admin_client.delete(f"/api/deployments/{deployment.pk}/").status_code == 204
    assert admin_client.delete(f"/api/hosts/{online_host.pk}/").status_code == 204
    assert not Host.objects.filter(pk=online_host.pk).exists()


def test_a_server_whose_host_is_gone_is_forgotten_from_its_page(online_host, started_pids, admin_client, admin):
    deployment = llama_deployment(online_host)
    gone_for_good(deployment, started_pids)
    detail = admin_client.get(reverse("deployment_detail", args=[deployment.pk])).content.decode()
    forget_url = reverse("deployment_forget", args=[deployment.pk])
    assert f'href="{forget_url}"' in detail
    question = admin_client.get(forget_url).content.decode()
    assert "Forget the server of tiny without stopping it?" in question
    assert "may still be running there and using its GPUs" in question and "its channel is disabled" in question
    answer = admin_client.post(forget_url, follow=True)
    page = answer.content.decode()
    assert "tiny forgotten; its server was not stopped." in page and f'href="{forget_url}"' not in page
    deployment.refresh_from_db()
    assert deployment.status == DeploymentStatus.FAILED and deployment.channel.enabled is False
    assert AuditLog.objects.get(message__contains="Forgotten without stopping").actor == admin
    admin_client.post(reverse("deployment_delete", args=[deployment.pk]))
    admin_client.post(reverse("host_delete", args=[online_host.pk]))
    assert not Deployment.objects.exists() and not Host.objects.filter(pk=online_host.pk).exists()


def test_a_server_whose_host_answers_is_not_forgotten_but_stopped(online_host, started_pids, admin_client):
    """Forgetting a server the portal can still stop would leave it running, owned by nobody."""
    deployment = llama_deployment(online_host)
    first = run(deployment)
    started_pids.append(first.pid)
    Host.objects.filter(pk=online_host.pk).update(status=HostStatus.UNREACHABLE)  # stale: SSH works again
    assert f'href="{reverse("deployment_forget", args=[deployment.pk])}"' in (
        admin_client.get(reverse("deployment_detail", args=[deployment.pk])).content.decode()
    )
    refused = admin_client.post(f"/api/deployments/{deployment.pk}/forget/")
    assert refused.status_code == 409
    assert refused.json() == {"detail": "SSH to gpu-box works: stop the deployment instead, which stops its server."}
    page = admin_client.post(reverse("deployment_forget", args=[deployment.pk]), follow=True).content.decode()
    assert "SSH to gpu-box works: stop the deployment instead" in page
    deployment.refresh_from_db()
    assert deployment.status == DeploymentStatus.RUNNING and deployment.channel.enabled and alive(first.pid)
    assert not AuditLog.objects.filter(message__contains="Forgotten").exists()
    assert run(deployment, JobAction.STOP).state == JobState.STOPPED
    stopped = admin_client.post(f"/api/deployments/{deployment.pk}/forget/")
    assert stopped.status_code == 409 and "delete it instead" in stopped.json()["detail"]
