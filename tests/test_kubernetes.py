"""deploy/kubernetes: every manifest valid against the Kubernetes schemas, strictly (an unknown or
misspelt field fails), in every variant render.py makes; and wired the way the README says.

The schemas are kubernetes-validate's bundled copies of the official OpenAPI schemas. CI also runs
the manifests for real with `podman kube play` (deploy/ci-kube.sh).
"""

from __future__ import annotations

import io
import sys
from contextlib import redirect_stdout
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
KUBE = ROOT / "deploy" / "kubernetes"
sys.path.insert(0, str(KUBE))
import render  # noqa: E402  (deploy/kubernetes is not a package)

# The newest release kubernetes-validate bundles: a current cluster.
VERSION = kubernetes_validate.latest_version()
DATASTORES = ("postgres", "redis")
SECRETS = ("DJANGO_SECRET_KEY", "PORTAL_ENCRYPTION_KEYS", "PORTAL_KEY_HASH_SECRET", "DATABASE_URL", "REDIS_URL")
VARIANTS = {
    "base": [],
    "datastores": ["--datastores"],
    "everything": [
        "--datastores",
        "--network-policy",
        "--gpu-cidr",
        "10.20.0.0/24",
        "--worker-egress",
        "203.0.113.0/24",
        "--namespace",
        "llm",
        "--replicas",
        "3",
        "--max-replicas",
        "6",
        "--pull-policy",
        "IfNotPresent",
        "--trusted-proxies",
        "10.42.0.0/16",
    ],
}


def rendered(*extra: str) -> list[dict]:
    out = io.StringIO()
    argv = ["--image", "registry.example.com/gateway-portal:1.4", "--public-url", "https://llm.example.com/", *extra]
    with redirect_stdout(out):
        assert render.main(argv) == 0
    return [doc for doc in yaml.safe_load_all(out.getvalue()) if doc]


def by_kind(docs: list[dict], kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def every_file() -> list[Path]:
    return sorted(p for p in KUBE.rglob("*.yaml") if p.name != "kustomization.yaml")


@pytest.mark.parametrize("path", every_file(), ids=lambda p: str(p.relative_to(KUBE)))
def test_every_manifest_file_is_valid_strictly(path):
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert docs
    for doc in docs:
        kubernetes_validate.validate(doc, VERSION, strict=True)


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_rendered_variant_is_valid_strictly(variant):
    for doc in rendered(*VARIANTS[variant]):
        kubernetes_validate.validate(doc, VERSION, strict=True)


def test_strict_validation_catches_a_misspelt_field():
    """The check above can fail: a typo that a lenient apply would drop silently is refused."""
    web = by_kind(rendered(), "Deployment")["portal-web"]
    web["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = web["spec"]["template"]["spec"]["containers"][
        0
    ].pop("readinessProbe")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(web, VERSION, strict=True)


def test_the_kustomization_lists_every_base_file():
    kustomization = yaml.safe_load((KUBE / "base" / "kustomization.yaml").read_text())
    files = {p.name for p in (KUBE / "base").glob("*.yaml")} - {"kustomization.yaml"}
    assert sorted(kustomization["resources"]) == sorted(files)


def test_no_secret_values_are_in_the_repository():
    """The portal's secrets and the datastore URLs are referenced by name, never given a value."""
    for path in every_file():
        text = path.read_text()
        for doc in yaml.safe_load_all(text):
            if doc:
                assert doc["kind"] != "Secret", f"{path} holds a Secret"
                if doc["kind"] == "ConfigMap":
                    assert not set(doc["data"]) & set(SECRETS), f"{path} puts a secret in a ConfigMap"
        for name in SECRETS:
            assert f"{name}:" not in text and f"name: {name}\n          value" not in text, f"{path} sets {name}"


def test_render_sets_image_replicas_url_and_namespace_without_editing_files():
    docs = rendered(*VARIANTS["everything"])
    assert {d["metadata"].get("namespace") for d in docs} == {"llm"}
    images = {
        c["image"]
        for d in docs
        for c in render.containers(d)
        if d["metadata"]["labels"].get("app.kubernetes.io/component") not in ("postgres", "redis")
    }
    assert images == {"registry.example.com/gateway-portal:1.4"}
    deployments = by_kind(docs, "Deployment")
    assert deployments["portal-web"]["spec"]["replicas"] == 3
    hpa = by_kind(docs, "HorizontalPodAutoscaler")["portal-web"]["spec"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (3, 10)
    config = by_kind(docs, "ConfigMap")["portal-config"]["data"]
    assert config["PORTAL_PUBLIC_URL"] == "https://llm.example.com"
    assert config["PORTAL_TRUSTED_PROXIES"] == "10.42.0.0/16"
    policy = by_kind(docs, "NetworkPolicy")["portal-worker-egress"]["spec"]["egress"]
    assert policy[0] == {"to": [{"ipBlock": {"cidr": "10.20.0.0/24"}}]}
    assert policy[-1] == {"to": [{"ipBlock": {"cidr": "203.0.113.0/24"}}]}
    # The base files still carry their placeholders: nothing was edited in place.
    assert "gateway-portal:latest" in (KUBE / "base" / "web.yaml").read_text()


def test_the_migrate_job_is_named_after_the_image():
    """Jobs are immutable: a new image gets a new Job, which the new web pods wait for."""
    first = by_kind(rendered(), "Job")
    assert len(first) == 1 and next(iter(first)).startswith("portal-migrate-")
    out = io.StringIO()
    with redirect_stdout(out):
        render.main(["--image", "registry.example.com/gateway-portal:1.5", "--public-url", "https://llm.example.com"])
    second = by_kind([d for d in yaml.safe_load_all(out.getvalue()) if d], "Job")
    assert set(first) != set(second)


def test_web_pods_wait_for_migrations_and_probe_readiness_and_liveness_apart():
    web = by_kind(rendered(), "Deployment")["portal-web"]["spec"]["template"]["spec"]
    init = web["initContainers"][0]
    assert "migrate --check" in " ".join(init["command"])
    container = web["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    # The kubelet sends the pod IP as Host, which the portal's allowed hosts refuse.
    allowed = by_kind(rendered(), "ConfigMap")["portal-config"]["data"]["DJANGO_ALLOWED_HOSTS"].split(",")
    for probe in ("readinessProbe", "livenessProbe"):
        host = {h["name"]: h["value"] for h in container[probe]["httpGet"]["httpHeaders"]}["Host"]
        assert host in allowed
    assert container["resources"]["requests"]["cpu"] and container["resources"]["limits"]["memory"]
    assert {"configMapRef": {"name": "portal-config"}} in container["envFrom"]
    assert {"secretRef": {"name": "portal-secrets"}} in container["envFrom"]


def test_exactly_one_beat_replaced_by_recreate():
    beat = by_kind(rendered(), "Deployment")["portal-beat"]["spec"]
    assert beat["replicas"] == 1 and beat["strategy"] == {"type": "Recreate"}


def test_every_portal_container_runs_unprivileged_with_resources():
    for doc in rendered():
        for spec in render.pod_specs(doc):
            assert spec["securityContext"]["runAsNonRoot"] is True
            for c in spec.get("initContainers", []) + spec["containers"]:
                assert c["securityContext"]["allowPrivilegeEscalation"] is False
                assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]


def test_the_pdb_and_hpa_select_the_web_deployment():
    docs = rendered()
    web = by_kind(docs, "Deployment")["portal-web"]
    pdb = by_kind(docs, "PodDisruptionBudget")["portal-web"]
    assert pdb["spec"]["selector"]["matchLabels"] == web["spec"]["selector"]["matchLabels"]
    service = by_kind(docs, "Service")["portal-web"]
    assert service["spec"]["selector"] == web["spec"]["selector"]["matchLabels"]
    assert by_kind(docs, "HorizontalPodAutoscaler")["portal-web"]["spec"]["scaleTargetRef"]["name"] == "portal-web"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--public-url", "not-a-url"], "--public-url must be an http(s) URL"),
        (["--public-url", "https://x.example", "--network-policy"], "needs at least one --gpu-cidr"),
        (["--public-url", "https://x.example", "--replicas", "0"], "must be 1 or more"),
        (["--public-url", "https://x.example", "--gpu-cidr", "10.0.0.300/24"], "does not appear to be"),
    ],
)
def test_render_refuses_bad_values_naming_the_option(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        render.main(["--image", "x/portal:1", *argv])
    assert exit_.value.code == 2 and message in capsys.readouterr().err
