"""GPU hosts reached over SSH and their GPUs."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.utils.translation import gettext_lazy as _

from portal import i18n
from portal.choices import labelled
from portal.fields import EncryptedTextField
from portal.models import TimeStampedModel

from .choices import (
    ACTIVE_JOB_STATES,
    IDLE_DEPLOYMENT_STATUSES,
    Backend,
    DeploymentStatus,
    HostStatus,
    JobAction,
    JobState,
    NodeRole,
    RayState,
)

USERNAME_VALIDATOR = RegexValidator(r"^[a-z_][a-z0-9_.-]{0,31}$", _("A POSIX user name (lowercase, up to 32)."))
ADDRESS_VALIDATOR = RegexValidator(
    r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$|^[0-9a-fA-F:]{2,45}$",
    _("A host name or an IPv4/IPv6 address."),
)


class HostQuerySet(models.QuerySet[Any]):
    def key_confirmed(self) -> HostQuerySet:
        """Hosts an admin has pinned a host key for: the only ones SSH will talk to."""
        return self.exclude(host_key_fingerprint="")


class Host(TimeStampedModel):
    """A GPU machine. The private key is encrypted at rest and decrypted only in the worker.

    `host_key_fingerprint` is empty until the admin confirms the key seen on first contact;
    afterwards a different key is refused.
    """

    objects = HostQuerySet.as_manager()

    name = models.CharField(max_length=100, unique=True)
    address = models.CharField(max_length=253, validators=[ADDRESS_VALIDATOR])
    ssh_port = models.PositiveIntegerField(default=22, validators=[MinValueValidator(1), MaxValueValidator(65535)])
    username = models.CharField(max_length=32, validators=[USERNAME_VALIDATOR])
    private_key = EncryptedTextField(blank=True, help_text=_("OpenSSH private key; write-only."))
    host_key_fingerprint = models.CharField(max_length=100, blank=True)
    seen_host_key_fingerprint = models.CharField(
        max_length=100, blank=True, help_text=_("Key offered on the last contact, awaiting confirmation.")
    )
    labels = models.JSONField(default=list, blank=True)
    gpu_hour_cost = models.DecimalField(
        max_digits=12,
        decimal_places=4,
        null=True,
        blank=True,
        validators=[MinValueValidator(0)],
        help_text=_(
            "What one GPU of this host costs per hour, in the portal's currency (for the prices of its models)."
        ),
    )
    notes = models.TextField(blank=True, max_length=5000)
    status = models.CharField(max_length=20, choices=HostStatus, default=HostStatus.UNKNOWN)
    status_message = models.CharField(max_length=300, blank=True)
    status_message_code = i18n.code_field()
    status_message_params = i18n.params_field()
    status_message_text = i18n.TranslatedText("status_message")
    last_checked = models.DateTimeField(null=True, blank=True)
    driver_version = models.CharField(max_length=50, blank=True)
    cuda_version = models.CharField(max_length=50, blank=True)
    # [{"name": "eth0", "addresses": ["10.0.0.5/24"]}, …] as the last inventory saw them: offered
    # as the network interface of a multi-node deployment whose head this host is.
    network_interfaces = models.JSONField(default=list, blank=True)
    fit_calibration = models.JSONField(
        default=dict,
        blank=True,
        help_text=_("Per backend: actual / estimated memory over the last launches, and what -fa auto did."),
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class GPU(TimeStampedModel):
    """One GPU as the last inventory saw it."""

    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    uuid = models.CharField(max_length=100, blank=True)
    name = models.CharField(max_length=100)
    memory_total_mib = models.PositiveIntegerField(null=True, blank=True)
    memory_used_mib = models.PositiveIntegerField(null=True, blank=True)
    utilization_pct = models.PositiveSmallIntegerField(null=True, blank=True)
    temperature_c = models.SmallIntegerField(null=True, blank=True)
    processes = models.JSONField(default=list, blank=True)
    # The last inventory failed (nvidia-smi gone, driver broken): the figures are old and the GPU
    # cannot be chosen until an inventory sees it again.
    stale = models.BooleanField(default=False)

    class Meta:
        ordering = ["host__name", "index"]
        constraints = [models.UniqueConstraint(fields=["host", "index"], name="gpu_unique_host_index")]

    def __str__(self) -> str:
        return f"{self.host}#{self.index} {self.name}"

    @property
    def memory_free_mib(self) -> int | None:
        if self.memory_total_mib is None or self.memory_used_mib is None:
            return None
        return max(self.memory_total_mib - self.memory_used_mib, 0)


class GPUTypeCost(TimeStampedModel):
    """What one GPU of a type costs per hour (the name as nvidia-smi reports it, as `GPU.name`): the
    GPU-hour cost of every host that has no cost of its own (`Host.gpu_hour_cost` wins), for the
    showback's GPU cost and the prices derived for self-hosted models."""

    gpu_name = models.CharField(max_length=100, unique=True, help_text=_("As the inventory shows it."))
    hour_cost = models.DecimalField(
        max_digits=12,
        decimal_places=4,
        validators=[MinValueValidator(0)],
        help_text=_("What one GPU of this type costs per hour, in the portal's currency."),
    )

    class Meta:
        ordering = ["gpu_name"]

    def __str__(self) -> str:
        return f"{self.gpu_name}: {self.hour_cost}/h"


class GPUHour(TimeStampedModel):
    """One GPU's figures over one hour, rolled up from the samples of that hour (`hosts.gpu_history`):
    averages are the sums over `samples`. Kept 30 days (pruned by the sampling task)."""

    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="gpu_hours")
    gpu_index = models.PositiveSmallIntegerField()
    hour = models.DateTimeField(db_index=True)
    samples = models.PositiveIntegerField(default=0)
    utilization_sum = models.BigIntegerField(default=0)
    utilization_max = models.PositiveSmallIntegerField(default=0)
    memory_used_sum_mib = models.BigIntegerField(default=0)
    memory_used_max_mib = models.PositiveIntegerField(default=0)
    temperature_sum = models.BigIntegerField(default=0)
    temperature_max = models.SmallIntegerField(default=0)

    class Meta:
        ordering = ["host", "gpu_index", "hour"]
        constraints = [
            models.UniqueConstraint(fields=["host", "gpu_index", "hour"], name="gpuhour_unique_host_gpu_hour")
        ]

    def __str__(self) -> str:
        return f"{self.host_id}#{self.gpu_index} {self.hour:%Y-%m-%d %H}:00"


DEPLOYMENT_NAME_VALIDATOR = RegexValidator(
    r"^[a-z0-9][a-z0-9-]{0,62}$", "Lowercase letters, digits and dashes (it names a folder on the host)."
)


class Deployment(TimeStampedModel):
    """A model served by vLLM, SGLang or llama-server on some GPUs of a host, reached as one channel.

    `upstream_api_key` is generated by the portal, handed to the server in a 0600 file (never on
    its command line) and used by the channel; it never leaves the worker in clear. `status` is
    moved only by launch jobs (see `DeploymentStatus`); `pid` is the detached server's process
    group on the host. `last_fit` is the estimate, `last_allocation` what the server reported.
    """

    name = models.CharField(max_length=63, unique=True, validators=[DEPLOYMENT_NAME_VALIDATOR])
    # PROTECT: a deployment may still have a server running on the host; deleting the host must not
    # silently forget it. The UI and the API explain what blocks the delete (409 in the API).
    host = models.ForeignKey(Host, on_delete=models.PROTECT, related_name="deployments")
    backend = models.CharField(max_length=16, choices=Backend)
    model_path = models.CharField(
        max_length=500, help_text=_("Hugging Face id or folder (vLLM), or the .gguf file (llama.cpp) on the host.")
    )
    served_model_name = models.CharField(
        max_length=128, help_text=_("The public model name the gateway will serve it under.")
    )
    gpu_indices = models.JSONField(default=list, blank=True, help_text=_("GPU indices → CUDA_VISIBLE_DEVICES."))
    port = models.PositiveIntegerField(validators=[MinValueValidator(1024), MaxValueValidator(65535)])
    options = models.JSONField(default=dict, blank=True, help_text=_("Typed backend options (see the backend)."))
    extra_args = models.JSONField(default=list, blank=True, help_text=_("Further arguments, one token each."))
    # Multi-node vLLM: the same GPU indices on each worker host; TP within a node, PP across nodes,
    # joined by a Ray cluster the launch job starts over SSH (hosts/deployments/multinode.py).
    worker_hosts = models.ManyToManyField(
        Host, blank=True, related_name="worker_deployments", help_text=_("Further nodes (vLLM over Ray).")
    )
    network_interface = models.CharField(
        max_length=15,
        blank=True,
        validators=[RegexValidator(r"^[A-Za-z0-9_.:-]{1,15}$", "A network interface name, e.g. eth0 or ib0.")],
        help_text=_("The interface the nodes reach each other on (NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME)."),
    )
    ray_port = models.PositiveIntegerField(
        default=6379,
        validators=[MinValueValidator(1024), MaxValueValidator(65535)],
        help_text=_("The Ray head's port."),
    )
    fit_override = models.BooleanField(
        default=False, help_text=_("Launch even when the VRAM estimate says it does not fit.")
    )
    upstream_api_key = EncryptedTextField(blank=True)
    channel = models.ForeignKey(
        "channels.Channel", null=True, blank=True, on_delete=models.SET_NULL, related_name="deployments"
    )
    status = models.CharField(max_length=16, choices=DeploymentStatus, default=DeploymentStatus.STOPPED)
    status_message = models.CharField(max_length=500, blank=True)
    status_message_code = i18n.code_field()
    status_message_params = i18n.params_field()
    status_message_text = i18n.TranslatedText("status_message")
    pid = models.PositiveIntegerField(null=True, blank=True)
    context_window = models.PositiveIntegerField(
        null=True, blank=True, help_text=_("As the running server reports it.")
    )
    last_fit = models.JSONField(
        default=dict, blank=True, help_text=_("The last VRAM estimate, with what it was based on.")
    )
    last_allocation = models.JSONField(
        default=dict, blank=True, help_text=_("What the server reported allocating at its last start, vs the estimate.")
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Supervision (hosts/deployments/supervisor.py): restart a crashed server by itself, with
    # backoff, at most `max_restarts_per_hour` times an hour before giving up ("crash loop").
    auto_restart = models.BooleanField(
        default=True, verbose_name=_("restart automatically"), help_text=_("Restart the server when it crashes.")
    )
    max_restarts_per_hour = models.PositiveSmallIntegerField(
        default=3,
        validators=[MinValueValidator(1), MaxValueValidator(60)],
        verbose_name=_("restarts per hour"),
        help_text=_("After this many automatic restarts within an hour it stops retrying (crash loop)."),
    )
    next_restart_at = models.DateTimeField(null=True, blank=True)
    # The supervisor queued the running launch: its failure counts as one more crash.
    restarting = models.BooleanField(default=False)
    unhealthy_checks = models.PositiveSmallIntegerField(default=0)  # consecutive, process alive
    last_supervised = models.DateTimeField(null=True, blank=True)
    # Not a field: the worker hosts of an unsaved deployment (the form's live preview), since a
    # relation needs a saved row; read by `hosts.deployments.multinode.workers`.
    unsaved_workers: list[Host]
    # On demand (hosts/ondemand/): listed while stopped, started by the gateway on its first
    # request (placed by the fit on the host with room unless `pin_host`), stopped after `idle_ttl`.
    on_demand = models.BooleanField(
        default=False,
        verbose_name=_("on demand"),
        help_text=_("Start it on the first request and stop it when idle; its model is listed while stopped."),
    )
    idle_ttl = models.PositiveIntegerField(
        default=900,
        validators=[MinValueValidator(30), MaxValueValidator(7 * 86400)],
        verbose_name=_("idle time to live (s)"),
        help_text=_("Stop it after this many seconds without a request."),
    )
    pin_host = models.BooleanField(
        default=False,
        verbose_name=_("pin to its host"),
        help_text=_("Start it only on the host above; otherwise the fit chooses among the hosts."),
    )
    cold_start_budget = models.PositiveIntegerField(
        default=120,
        validators=[MinValueValidator(5), MaxValueValidator(3600)],
        verbose_name=_("cold-start budget (s)"),
        help_text=_("How long a request waits for it to start before it is answered 503 with Retry-After."),
    )

    class Meta:
        ordering = ["host__name", "port"]
        constraints = [models.UniqueConstraint(fields=["host", "port"], name="deployment_unique_host_port")]

    def __str__(self) -> str:
        return self.name

    @property
    def is_idle(self) -> bool:
        """No server should be up: the deployment may be edited, deleted or launched."""
        return self.status in IDLE_DEPLOYMENT_STATUSES

    @property
    def may_be_forgotten(self) -> bool:
        """Up, but SSH to its host failed at the last contact: its page offers "Forget this server"
        (`services.forget_deployment` tries SSH once more before it lets go)."""
        return not self.is_idle and self.host.status not in (HostStatus.ONLINE, HostStatus.NO_DRIVER)

    @property
    def is_cold(self) -> bool:
        """On demand and not running: its next request starts it."""
        return self.on_demand and self.status != DeploymentStatus.RUNNING

    @property
    def remote_dir(self) -> str:
        """The deployment's folder on the host, relative to the SSH user's home."""
        return f".gateway-portal/deployments/{self.name}"

    @property
    def base_url(self) -> str:
        address = f"[{self.host.address}]" if ":" in self.host.address else self.host.address
        return f"http://{address}:{self.port}/v1"


class DeploymentEvent(TimeStampedModel):
    """One change of a deployment's status, as the deployment page and the audit log show it: by a
    launch job, by the supervisor (`automatic`) or by an admin directly (`actor_name`: forgetting a
    server), with the crash's exit code and last log lines, and whether the alert targets were told
    (`alerted`: "name: ok" / "name: error" lines)."""

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="events")
    previous = models.CharField(max_length=16, choices=DeploymentStatus, blank=True)
    status = models.CharField(max_length=16, choices=DeploymentStatus)
    message = models.CharField(max_length=500, blank=True)
    message_code = i18n.code_field()
    message_params = i18n.params_field()
    message_text = i18n.TranslatedText("message")
    automatic = models.BooleanField(default=False)
    actor_name = models.CharField(max_length=150, blank=True)  # kept when the user is deleted, as in the audit log
    exit_code = models.IntegerField(null=True, blank=True)
    log_tail = models.TextField(blank=True)
    alerted = models.TextField(blank=True)

    class Meta:
        ordering = ["-created", "-id"]

    def __str__(self) -> str:
        return f"{self.deployment_id}: {self.previous} → {self.status}"


class DeploymentNode(TimeStampedModel):
    """One host of a multi-node deployment (the head included) and its Ray node: written by the
    launch job that starts it (`ray_pid`), moved by stop jobs and the supervisor (see `RayState`).
    Single-node deployments have none."""

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="nodes")
    host = models.ForeignKey(Host, on_delete=models.PROTECT, related_name="deployment_nodes")
    role = models.CharField(max_length=8, choices=NodeRole)
    ray_pid = models.PositiveIntegerField(null=True, blank=True)
    ray_state = models.CharField(max_length=16, choices=RayState, default=RayState.NOT_STARTED)
    message = models.CharField(max_length=300, blank=True)
    message_code = i18n.code_field()
    message_params = i18n.params_field()
    message_text = i18n.TranslatedText("message")
    last_checked = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["role", "host__name"]  # "head" sorts before "worker"
        constraints = [models.UniqueConstraint(fields=["deployment", "host"], name="deploymentnode_unique_host")]

    def __str__(self) -> str:
        return f"{self.deployment} ({self.get_role_display()}: {self.host})"


class LaunchJobQuerySet(models.QuerySet[Any]):
    def active(self) -> LaunchJobQuerySet:
        """Jobs not finished yet; at most one per deployment (named constraint)."""
        return self.filter(state__in=ACTIVE_JOB_STATES)


class LaunchJob(TimeStampedModel):
    """One launch/stop/restart/adopt of a deployment, run by a Celery task.

    `transitions` lists every state with its time and message; `heartbeat` is touched every few
    seconds by the worker holding it (`worker`), so a job whose worker died is found and handed to
    another worker, or failed after `HOSTS_JOB_MAX_ATTEMPTS` (`hosts.deployments.jobs.recover_stale_jobs`).
    At most one job per deployment is active at a time (named constraint).
    """

    objects = LaunchJobQuerySet.as_manager()

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="jobs")
    action = models.CharField(max_length=16, choices=JobAction, default=JobAction.LAUNCH)
    state = models.CharField(max_length=16, choices=JobState, default=JobState.QUEUED)
    message = models.CharField(max_length=1000, blank=True)  # why it failed / what it waits for
    message_code = i18n.code_field()
    message_params = i18n.params_field()
    message_text = i18n.TranslatedText("message")
    transitions = models.JSONField(default=list, blank=True)
    command = models.TextField(blank=True, help_text=_("The command run, API key masked."))
    log_tail = models.TextField(blank=True)
    pid = models.PositiveIntegerField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    heartbeat = models.DateTimeField(null=True, blank=True)
    # "host:pid" of the worker process holding the job ("" when none does); attempts counts claims.
    worker = models.CharField(max_length=255, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    finished = models.DateTimeField(null=True, blank=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-created", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["deployment"],
                condition=models.Q(state__in=ACTIVE_JOB_STATES),
                name="launchjob_one_active_per_deployment",
            )
        ]

    def __str__(self) -> str:
        return f"{self.get_action_display()} {self.deployment} #{self.pk}"

    @property
    def is_active(self) -> bool:
        return self.state in ACTIVE_JOB_STATES

    @property
    def history(self) -> list[dict[str, Any]]:
        """`transitions` with each state's label (`labelled`)."""
        return labelled(self.transitions, JobState)


class DeploymentRun(TimeStampedModel):
    """One stretch of a deployment serving: opened when a launch job moves it to running, closed
    when a job moves it to stopped or failed (`hosts.showback.services.record_status`). GPU-hours are
    `gpus` x the hours between `started` and `stopped` (open: now).

    Kept when the deployment is deleted (its name stays), because the showback reads past months.
    """

    deployment = models.ForeignKey(Deployment, null=True, blank=True, on_delete=models.SET_NULL, related_name="runs")
    deployment_name = models.CharField(max_length=63)
    host_name = models.CharField(max_length=100)
    gpus = models.PositiveSmallIntegerField(help_text=_("GPUs it held: its GPU indices on each of its nodes."))
    # The channel it served through, whose usage decides who the GPU-hours are attributed to.
    channel = models.ForeignKey("channels.Channel", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    started = models.DateTimeField(db_index=True)
    stopped = models.DateTimeField(null=True, blank=True, db_index=True)

    class Meta:
        ordering = ["-started"]
        constraints = [
            models.UniqueConstraint(
                fields=["deployment"],
                condition=models.Q(stopped__isnull=True),
                name="deploymentrun_one_open_per_deployment",
            )
        ]

    def __str__(self) -> str:
        return f"{self.deployment_name} {self.started:%Y-%m-%d %H:%M}–{self.stopped or 'now'}"


from .downloads.models import ModelDownload  # noqa: E402,F401  (weight downloads: hosts/downloads/)
from .ondemand.models import ColdStart  # noqa: E402,F401  (models on demand: hosts/ondemand/)
