"""Render the Kubernetes manifests for one installation, without editing the files.

    uv run python deploy/kubernetes/render.py --image registry.example.com/gateway-portal:1.4 \\
        --public-url https://llm.example.com --replicas 3 --namespace llm > portal.yaml
    kubectl apply -f portal.yaml

The base (`deploy/kubernetes/base/`, also usable as `kubectl apply -k`) is read in its
kustomization's order; `--datastores` adds one PostgreSQL and one Redis pod for trying it out,
`--network-policy` the workers' egress policy. The Secret `portal-secrets` is never rendered: create
it first (README, "Kubernetes"). Only PyYAML is needed, so it runs wherever the project's venv does.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import ipaddress
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

HERE = Path(__file__).resolve().parent
PORTAL_IMAGE = "gateway-portal:latest"  # the placeholder every portal container carries in base/
DATASTORE_IMAGES = {"postgres": "postgres:16-alpine", "redis": "redis:7-alpine"}  # optional/datastores.yaml
Doc = dict[str, Any]


def load(path: Path) -> list[Doc]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def base_documents() -> list[Doc]:
    kustomization = yaml.safe_load((HERE / "base" / "kustomization.yaml").read_text())
    docs: list[Doc] = []
    for name in kustomization["resources"]:
        docs.extend(load(HERE / "base" / name))
    for entry in kustomization.get("labels", []):
        for doc in docs:
            doc.setdefault("metadata", {}).setdefault("labels", {}).update(entry["pairs"])
    return docs


def pod_specs(doc: Doc) -> list[Doc]:
    template = doc.get("spec", {}).get("template")
    return [template["spec"]] if template else []


def containers(doc: Doc) -> list[Doc]:
    return [c for spec in pod_specs(doc) for c in spec.get("initContainers", []) + spec.get("containers", [])]


def public_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"--public-url must be an http(s) URL with a host, not {value!r}")
    return value.rstrip("/")


def cidr(value: str) -> str:
    try:
        return str(ipaddress.ip_network(value, strict=False))
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return number


def render(args: argparse.Namespace) -> list[Doc]:
    docs = base_documents()
    if args.datastores:
        docs.extend(load(HERE / "optional" / "datastores.yaml"))
    if args.network_policy:
        policy = load(HERE / "optional" / "network-policy.yaml")[0]
        rules = policy["spec"]["egress"]
        rules[0] = {"to": [{"ipBlock": {"cidr": c}} for c in args.gpu_cidr]}
        if args.worker_egress:
            rules.append({"to": [{"ipBlock": {"cidr": c}} for c in args.worker_egress]})
        docs.append(policy)
    suffix = hashlib.sha256(args.image.encode()).hexdigest()[:8]
    for doc in docs:
        kind, meta = doc["kind"], doc["metadata"]
        if args.namespace:
            meta["namespace"] = args.namespace
        for container in containers(doc):
            if container["image"] == DATASTORE_IMAGES["postgres"] and args.postgres_image:
                container["image"] = args.postgres_image
            elif container["image"] == DATASTORE_IMAGES["redis"] and args.redis_image:
                container["image"] = args.redis_image
            elif container["image"] == PORTAL_IMAGE:
                container["image"] = args.image
                if args.pull_policy:
                    container["imagePullPolicy"] = args.pull_policy
        if kind == "ConfigMap" and meta["name"] == "portal-config":
            doc["data"]["PORTAL_PUBLIC_URL"] = args.public_url
            if args.trusted_proxies:
                doc["data"]["PORTAL_TRUSTED_PROXIES"] = ",".join(args.trusted_proxies)
        elif kind == "Job" and meta["name"] == "portal-migrate":
            meta["name"] = f"portal-migrate-{suffix}"  # Jobs are immutable: one per image
        elif kind == "Deployment" and meta["name"] == "portal-web":
            doc["spec"]["replicas"] = args.replicas
        elif kind == "Deployment" and meta["name"] == "portal-worker":
            doc["spec"]["replicas"] = args.worker_replicas
        elif kind == "HorizontalPodAutoscaler":
            doc["spec"]["minReplicas"] = args.replicas
            doc["spec"]["maxReplicas"] = max(doc["spec"]["maxReplicas"], args.max_replicas or args.replicas)
    return docs


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--image", required=True, help="the portal image, e.g. registry.example.com/gateway-portal:1.4")
    p.add_argument(
        "--public-url", type=public_url, required=True, help="PORTAL_PUBLIC_URL, e.g. https://llm.example.com"
    )
    p.add_argument("--replicas", type=positive, default=2, help="web pods (the autoscaler's minimum)")
    p.add_argument("--max-replicas", type=positive, default=None, help="the autoscaler's maximum (default 10)")
    p.add_argument("--worker-replicas", type=positive, default=2)
    p.add_argument("--namespace", default=None)
    p.add_argument("--pull-policy", choices=("Always", "IfNotPresent", "Never"), default=None)
    p.add_argument("--trusted-proxies", type=cidr, action="append", help="the Ingress controller's addresses")
    p.add_argument("--datastores", action="store_true", help="add one PostgreSQL and one Redis pod (trying it out)")
    p.add_argument("--postgres-image", default=None, help=f"with --datastores (default {DATASTORE_IMAGES['postgres']})")
    p.add_argument("--redis-image", default=None, help=f"with --datastores (default {DATASTORE_IMAGES['redis']})")
    p.add_argument(
        "--network-policy", action="store_true", help="workers reach only --gpu-cidr, DNS and the datastores"
    )
    p.add_argument("--gpu-cidr", type=cidr, action="append", default=[], help="the GPU hosts' network (repeatable)")
    p.add_argument(
        "--worker-egress",
        type=cidr,
        action="append",
        default=[],
        help="more networks workers may reach (cloud channels they probe)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.network_policy and not args.gpu_cidr:
        p.error("--network-policy needs at least one --gpu-cidr (the GPU hosts the workers SSH to)")
    if args.max_replicas is not None and args.max_replicas < args.replicas:
        p.error("--max-replicas must be at least --replicas")
    docs = render(args)
    yaml.safe_dump_all(copy.deepcopy(docs), sys.stdout, sort_keys=False, default_flow_style=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
