from django.db import models
from django.utils.translation import gettext_lazy as _


class HostStatus(models.TextChoices):
    """unknown → host_key_unconfirmed → online | unreachable | no_driver | host_key_changed | auth_failed.

    Moved by every SSH contact (inventory task, launch jobs); an admin confirming the host key
    moves host_key_unconfirmed/host_key_changed back to unknown until the next contact.
    """

    UNKNOWN = "unknown", _("Unknown")
    ONLINE = "online", _("Online")
    UNREACHABLE = "unreachable", _("Unreachable")
    NO_DRIVER = "no_driver", _("No GPU driver")
    HOST_KEY_CHANGED = "host_key_changed", _("Host key changed")
    AUTH_FAILED = "auth_failed", _("Authentication failed")
    HOST_KEY_UNCONFIRMED = "host_key_unconfirmed", _("Host key awaiting confirmation")


class Backend(models.TextChoices):
    """Inference servers a deployment can run; each has a module in `hosts/backends/`."""

    VLLM = "vllm", _("vLLM")
    SGLANG = "sglang", _("SGLang")
    LLAMACPP = "llamacpp", _("llama.cpp (llama-server)")


class DeploymentStatus(models.TextChoices):
    """stopped → starting → running | failed; running → stopped | failed;
    running → crashed → starting (automatic restart) → running, or → crash_loop;
    starting | running | stopping → failed (forgotten).

    Launch, stop, restart and adopt jobs move the first arrows; the admin only asks for them. A stop
    or restart whose SSH failed leaves a running deployment running. The admin moves the last arrow
    directly, with no job ("Forget this server", `services.forget_deployment`), only while SSH to the
    host fails: the server may live on, but the deployment leaves supervision and routing and may be
    deleted. The supervisor (`hosts.deployments.supervisor`, a beat task) moves running → crashed
    when the server's process is gone, crashed → starting when it queues the automatic restart (with
    backoff), and crashed → crash_loop when the deployment crashed more than its restarts per hour
    allow (or an automatic restart failed that often); only an admin's launch leaves crash_loop.
    """

    STOPPED = "stopped", _("Stopped")
    STARTING = "starting", _("Starting")
    RUNNING = "running", _("Running")
    STOPPING = "stopping", _("Stopping")
    FAILED = "failed", _("Failed")
    CRASHED = "crashed", _("Crashed")
    CRASH_LOOP = "crash_loop", _("Crash loop")


# No server of the deployment should be up: it may be edited, deleted or launched.
IDLE_DEPLOYMENT_STATUSES = (
    DeploymentStatus.STOPPED,
    DeploymentStatus.FAILED,
    DeploymentStatus.CRASHED,
    DeploymentStatus.CRASH_LOOP,
)


class NodeRole(models.TextChoices):
    """A node of a multi-node deployment: the head runs Ray's head and the API server."""

    HEAD = "head", _("Head")
    WORKER = "worker", _("Worker")


class RayState(models.TextChoices):
    """not_started → running → stopped (stop job) | dead (the supervisor found its process gone);
    unreachable when the supervisor could not reach the node over SSH. Launch jobs move a node to
    running, stop jobs to stopped, the supervisor to dead or unreachable (and back to running)."""

    NOT_STARTED = "not_started", _("Not started")
    RUNNING = "running", _("Running")
    STOPPED = "stopped", _("Stopped")
    DEAD = "dead", _("Dead")
    UNREACHABLE = "unreachable", _("Unreachable")


class JobAction(models.TextChoices):
    LAUNCH = "launch", _("Launch")
    STOP = "stop", _("Stop")
    RESTART = "restart", _("Restart")
    ADOPT = "adopt", _("Adopt")


class JobState(models.TextChoices):
    """queued → connecting → starting → waiting_health → running, or → failed at any step.

    A stop job goes queued → connecting → stopping → stopped. The Celery task moves every arrow;
    `recover_stale_jobs` fails a job whose worker died (no heartbeat) so none stays active forever.
    """

    QUEUED = "queued", _("Queued")
    CONNECTING = "connecting", _("Connecting")
    STARTING = "starting", _("Starting")
    WAITING_HEALTH = "waiting_health", _("Waiting for health")
    RUNNING = "running", _("Running")
    STOPPING = "stopping", _("Stopping")
    STOPPED = "stopped", _("Stopped")
    FAILED = "failed", _("Failed")


ACTIVE_JOB_STATES = (
    JobState.QUEUED,
    JobState.CONNECTING,
    JobState.STARTING,
    JobState.WAITING_HEALTH,
    JobState.STOPPING,
)
