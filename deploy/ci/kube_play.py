"""Turn the rendered Kubernetes manifests into what `podman kube play` (4.3) runs, for CI's kube stage.

podman kube play runs Pods, Deployments (one pod per replica, named <name>-pod-<i>), ConfigMaps
(given with --configmap) and PersistentVolumeClaims. Everything else a cluster does is emulated here,
and each emulation is printed so the log says what was not run as written:

- Job -> a Pod of the same name and template, not retried (podman has no Jobs; ci-kube.sh waits
  for its exit code).
- StatefulSet -> a Pod named after it (its Service's name: pod names resolve on podman's network),
  volumeClaimTemplates -> PersistentVolumeClaims (podman named volumes).
- Service portal-web -> a Caddy pod named portal-web on port 80 that round-robins over the web pods
  (podman has no kube-proxy); Services of single pods -> nothing (the pod's name is the Service's).
- Secret references (envFrom secretRef, env secretKeyRef) -> plain env values from --secret
  (podman 4.3 cannot read Kubernetes Secrets: containers/podman#17071).
- initContainers are run by ci-kube.sh (podman run, same image, command and env) before the
  Deployment's pods start: podman 4.3 fails to remove a finished init container ("cannot remove
  container … as it is running") and leaves the pod down.
- containerPorts are not declared (podman 4.3 would publish each on the host); probes name the number.
- readinessProbe is not run by podman: ci-kube.sh polls it itself. HorizontalPodAutoscaler,
  PodDisruptionBudget and NetworkPolicy have no podman equivalent and are left out.

    uv run python deploy/ci/kube_play.py rendered.yaml OUTDIR --secret KEY=VALUE ... --port 18080 \\
        --upstream deploy/ci/fake_upstream.py --python-image localhost/python:3.11-bookworm \\
        --proxy-image localhost/caddy:2-bookworm
writes OUTDIR/{configmap,1-datastores,2-migrate,3-portal,4-service}.yaml and OUTDIR/Caddyfile.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path
from typing import Any

import yaml

Doc = dict[str, Any]
DROPPED = ("HorizontalPodAutoscaler", "PodDisruptionBudget", "NetworkPolicy")


def note(message: str) -> None:
    print(f"  kube-play: {message}", flush=True)


def inline_secrets(spec: Doc, secrets: dict[str, str]) -> None:
    for container in spec.get("initContainers", []) + spec.get("containers", []):
        env = container.setdefault("env", [])
        sources = container.get("envFrom", [])
        for source in [s for s in sources if "secretRef" in s]:
            sources.remove(source)
            env.extend({"name": k, "value": v} for k, v in secrets.items())
        for var in env:
            ref = var.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                var.pop("valueFrom")
                var["value"] = secrets[ref["key"]]
        if not env:
            container.pop("env")
        if not sources:
            container.pop("envFrom", None)


def unpublish(spec: Doc) -> None:
    """podman 4.3 publishes every containerPort on the host (two web pods would both bind :8000);
    in-pod and pod-to-pod traffic needs no declaration, so ports go and probes name the number."""
    for container in spec.get("initContainers", []) + spec.get("containers", []):
        named = {p["name"]: p["containerPort"] for p in container.pop("ports", []) if "name" in p}
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            action = container.get(probe, {}).get("httpGet")
            if action and isinstance(action["port"], str):
                action["port"] = named[action["port"]]


def gate(deployment: str, init: Doc, configmaps: dict[str, dict[str, str]], outdir: str) -> str:
    """One init container as a line for ci-kube.sh: `IMAGE ENV_FILE COMMAND…` (JSON), env resolved
    from its ConfigMaps and the inlined secrets into a 0600 file (never on a command line)."""
    env: dict[str, str] = {}
    for source in init.get("envFrom", []):
        env.update(configmaps[source["configMapRef"]["name"]])
    env.update({v["name"]: v["value"] for v in init.get("env", [])})
    env_file = Path(outdir, f"{deployment}-{init['name']}.env")
    env_file.touch(mode=0o600)
    env_file.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    return json.dumps([init["image"], str(env_file), *init["command"]]) + "\n"


def pod(name: str, template: Doc, restart: str | None = None) -> Doc:
    spec = copy.deepcopy(template["spec"])
    if restart:
        spec["restartPolicy"] = restart
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": template["metadata"]["labels"]},
        "spec": spec,
    }


def convert(docs: list[Doc], secrets: dict[str, str], args: argparse.Namespace) -> dict[str, list[Doc]]:
    configmaps = {d["metadata"]["name"]: d["data"] for d in docs if d["kind"] == "ConfigMap"}
    gates: list[str] = []
    phases: dict[str, list[Doc]] = {
        "configmap": [],
        "1-datastores": [],
        "2-migrate": [],
        "3-portal": [],
        "4-service": [],
    }
    web_replicas = 0
    for doc in docs:
        kind, name = doc["kind"], doc["metadata"]["name"]
        for template in [doc["spec"]["template"]] if "template" in doc.get("spec", {}) else []:
            inline_secrets(template["spec"], secrets)
            unpublish(template["spec"])
        if kind in DROPPED:
            note(f"{kind} {name}: no podman equivalent, not run")
        elif kind == "ConfigMap":
            phases["configmap"].append(doc)
        elif kind == "Job":
            note(f"Job {name} -> Pod {name} (restartPolicy Never: CI fails on the first failed run)")
            phases["2-migrate"].append(pod(name, doc["spec"]["template"], "Never"))
        elif kind == "StatefulSet":
            note(f"StatefulSet {name} -> Pod {name}, volumeClaimTemplates -> PersistentVolumeClaims")
            p = pod(name, doc["spec"]["template"])
            for claim in doc["spec"].get("volumeClaimTemplates", []):
                claim_name = f"{name}-{claim['metadata']['name']}"
                phases["1-datastores"].append(
                    {
                        "apiVersion": "v1",
                        "kind": "PersistentVolumeClaim",
                        "metadata": {"name": claim_name},
                        "spec": claim["spec"],
                    }
                )
                p["spec"].setdefault("volumes", []).append(
                    {"name": claim["metadata"]["name"], "persistentVolumeClaim": {"claimName": claim_name}}
                )
            phases["1-datastores"].append(p)
        elif kind == "Deployment":
            for init in doc["spec"]["template"]["spec"].pop("initContainers", []):
                note(f"Deployment {name}: init container {init['name']} run by ci-kube.sh before the pods")
                gates.append(gate(name, init, configmaps, args.outdir))
            if name == "portal-web":
                web_replicas = doc["spec"]["replicas"]
            phases["3-portal"].append(doc)
        elif kind == "Service":
            if name != "portal-web":
                note(f"Service {name}: its pod is named {name} (podman's DNS resolves pod names)")
        else:
            raise SystemExit(f"kube_play.py: no conversion for {kind} {name}")
    Path(args.outdir, "init-containers").write_text("".join(gates))
    upstreams = " ".join(f"portal-web-pod-{i}:8000" for i in range(web_replicas))
    note(f"Service portal-web -> Caddy pod portal-web:80, round robin over {upstreams}")
    Path(args.outdir, "Caddyfile").write_text(
        "{\n\tadmin off\n\tauto_https off\n}\n\n:80 {\n\treverse_proxy "
        + upstreams
        + " {\n\t\tlb_policy round_robin\n\t\tlb_try_duration 5s\n\t\tlb_try_interval 250ms\n"
        "\t\tflush_interval -1\n\t\ttransport http {\n\t\t\tkeepalive 60s\n\t\t}\n\t}\n}\n"  # (< web's 75 s)
    )
    caddyfile = str(Path(args.outdir, "Caddyfile").resolve())
    phases["4-service"].append(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "portal-web", "labels": {"app.kubernetes.io/component": "service"}},
            "spec": {
                "containers": [
                    {
                        "name": "proxy",
                        "image": args.proxy_image,
                        "command": ["caddy", "run", "--config", "/etc/caddy/Caddyfile", "--adapter", "caddyfile"],
                        "ports": [{"containerPort": 80, "hostPort": args.port, "hostIP": "127.0.0.1"}],
                        "volumeMounts": [{"name": "caddyfile", "mountPath": "/etc/caddy/Caddyfile", "readOnly": True}],
                    }
                ],
                "volumes": [{"name": "caddyfile", "hostPath": {"path": caddyfile, "type": "File"}}],
            },
        }
    )
    # The fake upstream the smoke suite's channel points at (http://upstream:9000/v1).
    upstream = str(Path(args.upstream).resolve())
    phases["1-datastores"].append(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "upstream", "labels": {"app.kubernetes.io/component": "upstream"}},
            "spec": {
                "containers": [
                    {
                        "name": "fake",
                        "image": args.python_image,
                        "command": ["python3", "/srv/fake_upstream.py"],
                        "volumeMounts": [{"name": "code", "mountPath": "/srv/fake_upstream.py", "readOnly": True}],
                    }
                ],
                "volumes": [{"name": "code", "hostPath": {"path": upstream, "type": "File"}}],
            },
        }
    )
    for docs in phases.values():  # ci-kube.sh finds (and removes) everything it started by this label
        for doc in docs:
            meta = doc["spec"]["template"]["metadata"] if doc["kind"] == "Deployment" else doc["metadata"]
            meta.setdefault("labels", {})["portal-ci"] = "kube"
    return phases


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("rendered")
    p.add_argument("outdir")
    p.add_argument("--secret", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--port", type=int, required=True, help="host port of the portal-web Service emulation")
    p.add_argument("--upstream", required=True, help="deploy/ci/fake_upstream.py")
    p.add_argument("--python-image", required=True)
    p.add_argument("--proxy-image", required=True)
    args = p.parse_args(argv)
    secrets = dict(item.split("=", 1) for item in args.secret)
    docs = [d for d in yaml.safe_load_all(Path(args.rendered).read_text()) if d]
    Path(args.outdir).mkdir(parents=True, exist_ok=True)
    for phase, content in convert(docs, secrets, args).items():
        Path(args.outdir, f"{phase}.yaml").write_text(yaml.safe_dump_all(content, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
