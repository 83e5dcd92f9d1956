"""Deployment workflows: validate and save a spec, the command it runs, its VRAM fit.

Called by the deployment form, the API serializer and launch jobs alike.
"""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
from typing import TYPE_CHECKING, Any

from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from channels import services as channel_services
from channels.models import Model
from portal import audit, faults
from portal.choices import AuditAction
from portal.i18n import Message, as_message, listing

from .. import backends, calibration, fit, signals
from ..backends.vllm import suggested_tool_parser
from ..choices import DeploymentStatus
from ..models import GPU, Deployment, DeploymentEvent, Host
from ..remote import commands, ssh
from ..remote.ssh import Remote
from ..showback import services as showback
from . import multinode

if TYPE_CHECKING:
    from accounts.models import User

logger = logging.getLogger(__name__)
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
NETWORK_INTERFACE = re.compile(r"^[A-Za-z0-9_.:-]{1,15}$")  # what Linux accepts as a name (IFNAMSIZ)


def set_status(
    deployment: Deployment,
    status: str,
    message: Message | str = "",
    *,
    expect: str | None = None,
    automatic: bool = False,
    alert: bool = False,
    exit_code: int | None = None,
    log_tail: str = "",
    actor: User | None = None,
    **fields: Any,
) -> bool:
    """The one way a deployment's status changes (launch jobs, the supervisor): the row, the
    in-memory object, and the showback run its GPU-hours are counted by. A change of status is also
    a `DeploymentEvent` (the deployment page; it names `actor`, an admin who moved it directly) and
    an audit entry (by `actor`, else whoever the request is from), and with `alert` (the supervisor's
    moves, and how an automatic restart ends) it is sent to the alert targets after the commit.

    With `expect` the row moves only from that status (two supervisor rounds, or a job and the
    supervisor, race); returns whether it moved."""
    previous = expect or deployment.status
    if deployment.restarting and status in (DeploymentStatus.RUNNING, DeploymentStatus.FAILED):
        alert = True  # how the supervisor's restart ended is news; the supervisor reads FAILED next
        if status == DeploymentStatus.RUNNING:
            fields["restarting"] = False
    text = as_message(message)
    fields.update(status=status, **text.columns("status_message", 500))
    rows = Deployment.objects.filter(pk=deployment.pk)
    if expect is not None:
        rows = rows.filter(status=expect)
    if not rows.update(**fields):
        return False
    for key, value in fields.items():
        setattr(deployment, key, value)
    showback.record_status(deployment)  # opens or closes the run whose GPU-hours are shown back
    if status == previous:
        return True
    event = DeploymentEvent.objects.create(
        deployment=deployment,
        previous=previous,
        status=status,
        **text.columns("message", 500),
        automatic=automatic,
        actor_name=actor.get_username() if actor is not None else "",
        exit_code=exit_code,
        log_tail=log_tail[-20000:],
    )
    audit.record(
        AuditAction.ACTION,
        deployment,
        message=Message(
            gettext_noop("%(previous)s → %(status)s: %(message)s"),
            previous=Message.label(DeploymentStatus(previous).label),
            status=Message.label(DeploymentStatus(status).label),
            message=text,
        ),
        actor=actor,
    )
    if alert:
        transaction.on_commit(lambda: signals.deployment_event.send(sender=DeploymentEvent, event_id=event.pk))
    if deployment.on_demand:
        _announce_on_commit(deployment.pk)
    return True


def _announce_on_commit(pk: int) -> None:
    """The gateway's requests waiting for an on-demand deployment look again once this commits."""
    transaction.on_commit(lambda: signals.on_demand_status_changed.send(sender=Deployment, deployment_id=pk))


def generate_upstream_key() -> str:
    return "gpk-" + secrets.token_urlsafe(32)


def clean_deployment(
    *,
    host: Host,
    backend: str,
    model_path: str,
    served_model_name: str,
    gpu_indices: Any,
    port: Any,
    options: dict[str, Any] | None,
    extra_args: Any,
    instance: Deployment | None = None,
    worker_hosts: list[Host] | None = None,
    network_interface: str = "",
    ray_port: Any = 6379,
) -> dict[str, Any]:
    """Validate a deployment spec; returns cleaned values or raises a ValidationError by field.

    With `worker_hosts` (vLLM only) the same GPU indices are used on every node, TP within a node
    and PP across nodes (pipeline parallel size = nodes unless given)."""
    errors: dict[str, list[str]] = {}
    try:
        impl = backends.get(backend)
    except KeyError as exc:
        raise ValidationError({"backend": [str(exc)]}) from None
    if not isinstance(gpu_indices, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in gpu_indices
    ):
        errors["gpu_indices"] = [_("A list of GPU indices, e.g. [0, 1].")]
        gpu_indices = []
    elif len(set(gpu_indices)) != len(gpu_indices):
        errors["gpu_indices"] = [_("Each GPU once.")]
    else:
        # GPUs kept as they were may be stale (the host's last inventory failed): an edit of
        # anything else (auto restart, while the host is down) is still allowed; a launch checks.
        kept = instance is not None and sorted(instance.gpu_indices or []) == sorted(gpu_indices)
        same_host = instance is not None and instance.host_id == host.pk
        if problem := _gpu_problem(host, gpu_indices, stale_ok=kept and same_host):
            errors["gpu_indices"] = [problem]
        for node in worker_hosts or []:  # a worker short of GPUs is the worker's fault, not the head's
            if node != host and (problem := _gpu_problem(node, gpu_indices, stale_ok=kept)):
                errors.setdefault("worker_hosts", []).append(
                    _("%(problem)s Every worker runs on the same GPU indices as the head.") % {"problem": problem}
                )
    workers = list(worker_hosts or [])
    nodes = 1 + len(workers)
    if workers:
        if backend != "vllm":
            errors["worker_hosts"] = [_("Only vLLM deployments span several hosts (over a Ray cluster).")]
        elif host in workers or len(set(workers)) != len(workers):
            errors["worker_hosts"] = [
                _("Each worker host once, and not the head host %(head)s itself.") % {"head": host.name}
            ]
        else:
            for node in workers:
                if not node.host_key_fingerprint:
                    errors.setdefault("worker_hosts", []).append(
                        _("Confirm the host key of %(host)s on its host page first.") % {"host": node.name}
                    )
        if not network_interface:
            errors["network_interface"] = [
                _("Name the interface the nodes reach each other on (e.g. eth0, ib0): NCCL and Gloo use it.")
            ]
        elif not NETWORK_INTERFACE.match(network_interface):
            errors["network_interface"] = [
                _("“%(name)s” is not a network interface name: letters, digits and . _ : - (at most 15).")
                % {"name": network_interface[:40]}
            ]
        options = dict(options or {})
        if options.get("pipeline_parallel_size") in (None, ""):
            options["pipeline_parallel_size"] = nodes  # PP across nodes, TP within one
    try:
        ray_port = int(ray_port)
        if not 1024 <= ray_port <= 65535:
            raise ValueError
    except (TypeError, ValueError):
        errors["ray_port"] = [_("A port between 1024 and 65535.")]
    try:
        port = int(port)
        if not 1024 <= port <= 65535:
            raise ValueError
    except (TypeError, ValueError):
        errors["port"] = [_("A port between 1024 and 65535.")]
    else:
        clash = Deployment.objects.filter(host=host, port=port)
        if instance is not None and instance.pk:
            clash = clash.exclude(pk=instance.pk)
        if clash.exists():
            errors["port"] = [
                _("Port %(port)s is already used by deployment %(deployment)s on this host.")
                % {"port": port, "deployment": clash.first()}
            ]
    try:
        options, extra = impl.clean(
            model_path=model_path,
            served_model_name=served_model_name,
            options=options,
            extra_args=extra_args,
            gpu_count=len(gpu_indices) * nodes,
        )
    except ValidationError as exc:
        for key, messages in exc.message_dict.items():
            errors.setdefault(key, []).extend(messages)
        options, extra = {}, []
    else:
        errors.update(_parallel_errors(backend, model_path, options, len(gpu_indices) * nodes))
    if served_model_name and Model.objects.filter(name=served_model_name, is_alias=True).exists():
        errors.setdefault("served_model_name", []).append(
            f"“{served_model_name}” is an alias (its targets are other models); serve the model under its "
            "own name and add that to the alias."
        )
    if errors:
        raise ValidationError(errors)
    return {
        "backend": backend,
        "model_path": model_path,
        "served_model_name": served_model_name,
        "gpu_indices": gpu_indices,
        "port": port,
        "options": options,
        "extra_args": extra,
        "worker_hosts": workers,
        "network_interface": network_interface if workers else "",
        "ray_port": ray_port,
    }


def _gpu_problem(host: Host, gpu_indices: list[int], *, stale_ok: bool = False) -> str:
    rows = dict(GPU.objects.filter(host=host).values_list("index", "stale"))
    known = {i for i, stale in rows.items() if not stale}
    stale = sorted(set(gpu_indices) & (set(rows) - known))
    missing = sorted(set(gpu_indices) - set(rows))
    if stale and not stale_ok:
        return _("GPU %(gpus)s of %(host)s is stale: the last inventory failed (%(why)s). Refresh the inventory.") % {
            "gpus": listing(stale),
            "host": host,
            "why": host.status_message or host.get_status_display(),
        }
    if missing:
        return _("GPU %(gpus)s not on %(host)s (known: %(known)s).") % {
            "gpus": listing(missing),
            "host": host,
            "known": listing(sorted(known)) or _("none yet; refresh the inventory"),
        }
    return ""


def _parallel_errors(backend: str, model_path: str, options: dict[str, Any], gpus: int) -> dict[str, list[str]]:
    """TP against the attention heads when the model is known by name (the launch checks again with
    the model's own config.json, read on the host)."""
    names = {"vllm": ("tensor_parallel_size", "pipeline_parallel_size"), "sglang": ("tp_size", "pp_size")}
    arch = fit.preset_for(model_path) if backend in names else None
    if arch is None or not gpus:
        return {}
    tp_name, pp_name = names[backend]
    tp, pp = options.get(tp_name) or gpus, options.get(pp_name) or 1
    problems = [str(p) for p in fit.parallel_messages(arch, gpus, tp, pp) if "heads" in p.english]
    return {f"options.{tp_name}": problems} if problems else {}


def save_deployment(
    *,
    host: Host,
    name: str,
    fit_override: bool = False,
    auto_restart: bool = True,
    max_restarts_per_hour: int = 3,
    on_demand: bool = False,
    idle_ttl: int = 900,
    pin_host: bool = False,
    cold_start_budget: int = 120,
    user: User | None = None,
    instance: Deployment | None = None,
    **spec: Any,
) -> Deployment:
    """Create or update a deployment from a spec validated by `clean_deployment`."""
    cleaned = clean_deployment(host=host, instance=instance, **spec)
    deployment = instance or Deployment(host=host, created_by=user, upstream_api_key=generate_upstream_key())
    deployment.name = name
    deployment.host = host
    deployment.fit_override = fit_override
    deployment.auto_restart = auto_restart
    deployment.max_restarts_per_hour = max_restarts_per_hour
    deployment.on_demand, deployment.idle_ttl = on_demand, idle_ttl
    deployment.pin_host, deployment.cold_start_budget = pin_host, cold_start_budget
    workers = cleaned.pop("worker_hosts")
    for key, value in cleaned.items():
        setattr(deployment, key, value)
    deployment.full_clean(exclude=["upstream_api_key"])
    deployment.save()
    deployment.worker_hosts.set(workers)
    multinode.sync_nodes(deployment)
    if on_demand:
        list_on_demand_model(deployment)
    return deployment


def list_on_demand_model(deployment: Deployment) -> None:
    """An on-demand deployment's public model exists before its first launch: the gateway lists
    it while it is stopped and starts it on the first request (hosts/ondemand/)."""
    Model.objects.get_or_create(name=deployment.served_model_name)


def launch_spec(deployment: Deployment) -> backends.LaunchSpec:
    """The backend's input. A host registered by a loopback address only needs a loopback server;
    a multi-node deployment runs on the Ray cluster its launch job started."""
    cluster = multinode.head_env(deployment)
    return backends.LaunchSpec(
        extra_env=cluster,
        distributed_backend="ray" if cluster else "",
        bind_host="127.0.0.1" if deployment.host.address in LOOPBACK else "0.0.0.0",
        model_path=deployment.model_path,
        served_model_name=deployment.served_model_name,
        gpu_indices=list(deployment.gpu_indices),
        port=deployment.port,
        options=dict(deployment.options),
        extra_args=list(deployment.extra_args),
        api_key=deployment.upstream_api_key,
    )


def tool_calling_note(deployment: Deployment, *, in_form: bool = False) -> str:
    """Why coding agents (which send tools with every request) will fail on this server, or "":
    a vLLM or SGLang chat server started without a tool-call parser (llama.cpp's `--jinja`, on by
    default, is its own). vLLM answers such a request 400; SGLang answers tool calls as text.
    `in_form`: said beside the deploy form's field rather than on the deployment's page."""
    impl = backends.get(deployment.backend)
    if not any(o.name == "tool_call_parser" for o in impl.options) or deployment.options.get("tool_call_parser"):
        return ""
    extra = [str(t) for t in deployment.extra_args or []]
    if impl.serves_embeddings(extra) or any(t.split("=", 1)[0] == "--tool-call-parser" for t in extra):
        return ""
    parser = suggested_tool_parser(deployment.backend, deployment.model_path)
    text = _(
        "No tool-call parser: coding agents (Claude Code, Cline, Codex…) send tools with every request "
        "and will fail on this server."
    )
    if in_form:
        if parser:
            return (
                text
                + " "
                + _("This model's format: %(parser)s (Tool-call parser, under the options).") % {"parser": parser}
            )
        return text + " " + _("Set the parser its model card names (Tool-call parser, under the options).")
    if parser:
        return text + " " + _("This model's format: %(parser)s (Edit → Tool-call parser).") % {"parser": parser}
    return text + " " + _("Set the parser its model card names (Edit → Tool-call parser).")


def command_preview(deployment: Deployment) -> str:
    """The exact command the job will run, with the API key masked."""
    impl = backends.get(deployment.backend)
    spec = launch_spec(deployment)
    return backends.preview(impl.argv(spec), spec.env, spec.api_key)


def fit_request(deployment: Deployment, arch: fit.Architecture, *, ram_mib: int | None = None) -> fit.FitRequest:
    """The estimate's input: the deployment's options, its GPUs as last seen, the host's other GPUs
    (for advice), its RAM when known, and the host's calibration for this backend."""
    impl = backends.get(deployment.backend)
    params = impl.fit_params(deployment.options, deployment.model_path)
    workers = multinode.workers(deployment)
    rows = list(GPU.objects.filter(host=deployment.host, stale=False))

    def label(host: Host, index: int) -> str:  # several nodes: say which one each GPU is on
        return f"{host.name} GPU {index}" if workers else ""

    memory = {
        g.index: fit.GPUMemory(
            g.index, g.memory_total_mib or 0, g.memory_free_mib or 0, label(deployment.host, g.index)
        )
        for g in rows
    }
    gpus = [memory[i] for i in deployment.gpu_indices if i in memory]
    # "Add GPU n" advice assumes one node; over several, a GPU more is one more on every node.
    spare = [] if workers else [m for i, m in memory.items() if i not in deployment.gpu_indices]
    for worker in workers:  # the same indices on every node, after the head's
        there = {g.index: g for g in GPU.objects.filter(host=worker, stale=False)}
        gpus += [
            fit.GPUMemory(
                there[i].index, there[i].memory_total_mib or 0, there[i].memory_free_mib or 0, label(worker, i)
            )
            for i in deployment.gpu_indices
            if i in there
        ]
    if deployment.backend == "llamacpp" and not arch.quant:
        arch.quant = fit.quant_from_name(deployment.model_path)
    return fit.FitRequest(
        arch=arch,
        backend=deployment.backend,
        gpus=gpus,
        spare_gpus=spare,
        ram_mib=ram_mib,
        **params,
        **calibration.correction_for(deployment.host, deployment.backend),
    )


def check_fit(
    deployment: Deployment,
    remote: Remote | None = None,
    *,
    arch: fit.Architecture | None = None,
    ram_mib: int | None = None,
) -> dict[str, Any]:
    """Estimate and store it on the deployment. Without `remote` or `arch` only presets are used (and
    the host's RAM is unknown unless given); `arch` is the model as already read from the host (the
    live preview, a launch job that asked for it with its other checks)."""
    if arch is None and remote is not None:
        arch = commands.read_architecture(remote, deployment.backend, deployment.model_path)
    arch = arch or fit.preset_for(deployment.model_path)
    ram = ram_mib
    if ram is None and remote is not None and deployment.backend == "llamacpp":
        ram = commands.memory_available_mib(remote)
    if arch is None:
        unknown = Message(
            gettext_noop("Unknown model: no config.json/GGUF readable on the host and no preset matches its name.")
        )
        result = {"verdict": "unknown", "notes": [unknown.english], "note_items": [unknown.as_item()]}
    else:
        result = fit.estimate(fit_request(deployment, arch, ram_mib=ram)).as_dict()
    result["checked"] = timezone.now().isoformat()
    if deployment.pk:
        Deployment.objects.filter(pk=deployment.pk).update(last_fit=result)
    deployment.last_fit = result
    return result


def fit_messages(estimate: dict[str, Any], key: str) -> list[Message]:
    """An estimate's `notes` or `problems` as messages: its stored items (`<key>_items`, msgid and
    values), else (an estimate stored before) its English lines shown as written."""
    items = estimate.get(f"{key[:-1]}_items")
    lines = estimate.get(key) or []
    if not isinstance(items, list) or len(items) != len(lines):
        return [Message.verbatim(str(line)) for line in lines]
    return [Message.from_stored(str(i.get("text", "")), str(i.get("code", "")), i.get("params")) for i in items]


def add_fit_note(estimate: dict[str, Any], note: Message) -> None:
    """Add a note to an estimate: its English line and its stored message."""
    estimate.setdefault("notes", []).append(note.english)
    estimate.setdefault("note_items", []).append(note.as_item())


def fit_refusal(estimate: dict[str, Any]) -> Message | None:
    """Why a launch is refused on the estimate, with what would make it fit (None when it is not)."""
    if estimate.get("verdict") != "does_not_fit":
        return None
    if problems := fit_messages(estimate, "problems"):
        joined = problems[0]
        for problem in problems[1:]:
            joined += problem  # "a b": the English text is the problems joined by spaces, as it always was
        return Message(gettext_noop("Refused before launch: %(problems)s"), problems=joined)
    sizes = {"need": estimate.get("total_gib"), "available": estimate.get("available_gib")}
    if estimate.get("short"):
        why = Message(
            gettext_noop("Does not fit (%(short)s is short): needs about %(need)s GiB, %(available)s GiB available"),
            short=estimate["short"],
            **sizes,
        )
    else:
        why = Message(gettext_noop("Does not fit: needs about %(need)s GiB, %(available)s GiB available"), **sizes)
    if estimate.get("max_context"):
        why = Message(
            gettext_noop("%(why)s; the largest context that fits is %(context)s"),
            why=why,
            context=estimate["max_context"],
        )
    if estimate.get("advice"):
        first = estimate["advice"][0]
        why = Message(
            gettext_noop("%(why)s; smallest change that fits: %(change)s"),
            why=why,
            change=Message.from_stored(first["change"], first.get("change_code", ""), first.get("change_params")),
        )
    return Message(gettext_noop("%(why)s. Change the deployment, or tick “launch even if it does not fit”."), why=why)


def record_allocation(deployment: Deployment, remote: Remote) -> dict[str, Any]:
    """Parse what the healthy server reported allocating and compare it with the estimate. A log
    without a memory report the backend's parser knows is recorded as such (`no_report`), so the
    page says so instead of "not launched"."""
    impl = backends.get(deployment.backend)
    try:
        log = commands.log_head(remote, commands.deployment_dir(deployment.remote_dir), deployment.upstream_api_key)
        actual = impl.parse_allocation(log)
        if actual:
            return calibration.record(deployment, actual)
        result = {"no_report": True, "checked": timezone.now().isoformat()}
        Deployment.objects.filter(pk=deployment.pk).update(last_allocation=result)
        deployment.last_allocation = result
        return result
    except Exception:  # a calibration must never fail a launch that worked
        logger.exception("could not read the allocation of deployment %s", deployment.pk)
        return {}


CONFIG_PROBLEMS = {
    "not_json": gettext_noop("config.json is not JSON (%(detail)s)."),
    "not_object": gettext_noop("config.json is not a JSON object."),
    "incomplete": gettext_noop("config.json lacks what the estimate needs (%(detail)s)."),
    "impossible_size": gettext_noop("config.json's %(name)s (%(value)s) is not a size a model has."),
}


def config_problem(reason: str, params: dict[str, Any]) -> str:
    """Why the estimate cannot use a config.json (`fit.ConfigError`), in the reader's language."""
    return _(CONFIG_PROBLEMS[reason]) % params


def estimate_for_spec(
    *,
    backend: str,
    options: dict[str, Any] | None = None,
    model: str = "",
    config: dict[str, Any] | str | None = None,
    architecture: dict[str, Any] | None = None,
    host: Host | None = None,
    gpu_indices: list[int] | None = None,
    gpus: list[dict[str, int]] | None = None,
    ram_mib: int | None = None,
    read_from_host: bool = False,
) -> dict[str, Any]:
    """The estimate for a spec nothing is saved for (the deploy form's live preview, `/api/fit-estimate/`).

    The model is described, best first, by a pasted/uploaded `config` (config.json), by its own
    files on `host` when `read_from_host` (config.json or GGUF header over SSH, and the host's RAM),
    by an explicit `architecture`, or by a preset matched on `model`. GPUs are `gpus` as given, or
    `gpu_indices` of `host` as last seen (stale ones refused). Raises a ValidationError by field."""
    try:
        impl = backends.get(backend)
    except KeyError as exc:
        raise ValidationError({"backend": [str(exc)]}) from None
    n_gpus = len(gpus if gpus is not None else gpu_indices or [])
    cleaned = impl.clean_options(options or {}, max(n_gpus, 1) if backend != "llamacpp" else n_gpus)
    arch: fit.Architecture | None = None
    if config not in (None, "", {}):
        try:
            arch = fit.from_config_json(config) if isinstance(config, str) else fit.from_config(config)
        except fit.ConfigError as exc:
            raise ValidationError({"config_json": [config_problem(exc.reason, exc.params)]}) from None
        except (TypeError, ValueError) as exc:  # a field the checks do not know, of the wrong kind
            raise ValidationError({"config_json": [config_problem("incomplete", {"detail": str(exc)})]}) from None
        arch.source = "config.json (given)"
    elif read_from_host and host is not None and model:
        from ..remote import ssh

        try:
            with ssh.connect(host) as remote:
                arch = commands.read_architecture(remote, backend, model)
                if backend == "llamacpp" and ram_mib is None:
                    ram_mib = commands.memory_available_mib(remote)
        except ssh.SSHError as exc:
            raise ValidationError({"host": [exc.message]}) from None
    if arch is None and architecture:
        arch = fit.Architecture(**architecture, source="given")
    if arch is None and model:
        arch = fit.preset_for(model)
    if arch is None:
        raise ValidationError(
            {
                "model": [
                    _("No config.json, readable model files or preset for “%(model)s”; paste its config.json.")
                    % {"model": model}
                ]
            }
        )
    if backend == "llamacpp" and model and not arch.quant:
        arch.quant = fit.quant_from_name(model)
    spare: list[fit.GPUMemory] = []
    if gpus is not None:
        memory = [fit.GPUMemory(g.get("index", i), g["total_mib"], g["free_mib"]) for i, g in enumerate(gpus)]
    elif host is not None:
        rows = {g.index: g for g in GPU.objects.filter(host=host)}
        wanted = list(gpu_indices or [])
        unknown = [i for i in wanted if i not in rows]
        stale = [i for i in wanted if i in rows and rows[i].stale]
        if unknown or stale:
            listed = listing(unknown + stale)
            what = (
                _("GPU %(gpus)s is stale; refresh the host's inventory.")
                if stale
                else _("GPU %(gpus)s is not on %(host)s; refresh the host's inventory.")
            )
            raise ValidationError({"gpu_indices": [what % {"gpus": listed, "host": host.name}]})

        def mem(g: GPU) -> fit.GPUMemory:
            return fit.GPUMemory(g.index, g.memory_total_mib or 0, g.memory_free_mib or 0)

        memory = [mem(rows[i]) for i in wanted]
        spare = [mem(g) for i, g in rows.items() if i not in wanted and not g.stale]
    else:
        raise ValidationError({"gpus": [_("Give the GPUs, or a host and its GPU indices.")]})
    request = fit.FitRequest(
        arch=arch,
        backend=backend,
        gpus=memory,
        spare_gpus=spare,
        ram_mib=ram_mib,
        **impl.fit_params(cleaned, model),
        **(calibration.correction_for(host, backend) if host is not None else {}),
    )
    return fit.estimate(request).as_dict()


ARCHITECTURE_CACHE_SECONDS = 600
_architecture_cache = faults.FailOpen("host architecture cache")


def host_architecture(deployment: Deployment) -> fit.Architecture | None:
    """The model's architecture read from its files on the host, remembered for a while per host
    and path, so the deploy form's live estimate connects once per model, not once per keystroke.
    None when the host cannot be reached or the files say nothing (the estimate then uses presets)."""
    host = deployment.host
    if not host.host_key_fingerprint:
        return None
    digest = hashlib.sha256(f"{deployment.backend}\0{deployment.model_path}".encode()).hexdigest()[:32]
    key = f"hosts:architecture:{host.pk}:{digest}"
    cached = _architecture_cache.call(lambda: cache.get(key), None)  # Redis away: a miss
    if cached is not None:
        found: fit.Architecture | None = cached[0]
        return found
    try:
        with ssh.connect(host) as remote:
            arch = commands.read_architecture(remote, deployment.backend, deployment.model_path)
    except ssh.SSHError:
        return None
    _architecture_cache.call(lambda: cache.set(key, (arch,), ARCHITECTURE_CACHE_SECONDS), None)
    return arch


def check_changeable(deployment: Deployment, *, deleting: bool = False) -> None:
    """A deployment is changed or deleted only while stopped (its server would no longer match its
    settings, or run on unowned): raises ValidationError otherwise. The page and the API ask here."""
    if not deployment.is_idle:
        text = (
            _("Stop the deployment before deleting it.") if deleting else _("Stop the deployment before changing it.")
        )
        raise ValidationError({"status": text}, code="running")


def delete_deployment(deployment: Deployment) -> None:
    """Delete a stopped deployment and its job history (its channel stays until deleted). An
    on-demand one may be starting for waiting requests (still stopped while it is placed): they
    are told at once, not at the end of their cold-start budget."""
    check_changeable(deployment, deleting=True)
    pk = deployment.pk
    with transaction.atomic():  # announced once the row is gone, not before
        deployment.delete()
        if deployment.on_demand:
            _announce_on_commit(pk)


def check_forgettable(deployment: Deployment) -> None:
    """Only a deployment that says its server is up, with no job about to move it, is forgotten:
    a stopped one is deleted as it is. Raises ValidationError; the page and the API ask here."""
    if deployment.is_idle:
        raise ValidationError(
            _("%(name)s has no server up to forget: delete it instead.") % {"name": deployment.name}, code="idle"
        )
    if deployment.jobs.active().exists():
        raise ValidationError(
            _("A job is still running for %(name)s; wait for it to finish.") % {"name": deployment.name}, code="busy"
        )


def forget_deployment(deployment: Deployment, *, user: User | None) -> None:
    """Let go of a server whose host no longer answers over SSH (gone for good, reinstalled): the
    deployment fails without SSH, leaves supervision (the status) and routing (its channel is
    disabled), and may then be deleted, its host too. Refused while SSH to the host works, since
    a stop is the way then: a forgotten server may still be running and holding its GPUs."""
    check_forgettable(deployment)
    try:
        with ssh.connect(deployment.host):
            pass
    except ssh.SSHError as exc:
        ssh.mark_contact(deployment.host, status=exc.status, message=exc.text)
        why = exc.text
    else:
        raise ValidationError(
            _("SSH to %(host)s works: stop the deployment instead, which stops its server.")
            % {"host": deployment.host.name},
            code="reachable",
        )
    message = Message(
        gettext_noop(
            "Forgotten without stopping its server: SSH to %(host)s failed (%(why)s). The server may still be "
            "running there and using its GPUs; its channel is disabled."
        ),
        host=deployment.host.name,
        why=why,
    )
    with transaction.atomic():
        check_forgettable(deployment)  # a job may have been asked for while SSH was tried
        moved = set_status(
            deployment,
            DeploymentStatus.FAILED,
            message,
            expect=deployment.status,
            actor=user,
            restarting=False,
            next_restart_at=None,
            unhealthy_checks=0,
        )
        if not moved:
            raise ValidationError(
                _("%(name)s changed meanwhile; look at it again.") % {"name": deployment.name}, code="changed"
            )
        if deployment.channel_id:
            channel_services.disable_served_channel(
                deployment.channel_id,
                status_message=Message(
                    gettext_noop("Deployment %(name)s was forgotten (its host did not answer over SSH)."),
                    name=deployment.name,
                ),
            )
