"""Smoke suite for the compose stack (deploy/ci-compose.sh, through the proxy's port) and the
Kubernetes manifests run by podman kube play (deploy/ci-kube.sh, `--platform kube`, through the
portal-web Service's stand-in).

Standard library only (it runs on the CI host's python3). Everything goes through the proxy except
what must name one replica: per-replica access-log counts (`podman logs`), and the revocation
check, which asks each web replica directly (rootful CNI: container addresses route from the host).
Exits non-zero on the first failed check.
"""

from __future__ import annotations

import argparse
import http.cookiejar
import ipaddress
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor

PROJECT = os.environ.get("PORTAL_CI_PROJECT", "portalci")
PLATFORM = "compose"  # or "kube": how containers are found (compose labels or the pods' labels)
KUBE_COMPONENT = {"web": "web", "worker": "worker", "beat": "beat", "proxy": "service"}
MODEL = "fake-model"
checks: list[str] = []


def ok(message: str) -> None:
    checks.append(message)
    print(f"  ok  {message}", flush=True)


def fail(message: str) -> None:
    print(f"  FAIL {message}", flush=True)
    sys.exit(1)


def expect(condition: object, message: str) -> None:
    if not condition:
        fail(message)


def podman(*args: str) -> str:
    return subprocess.run(["podman", *args], check=True, capture_output=True, text=True, timeout=120).stdout


def containers(service: str) -> list[str]:
    if PLATFORM == "kube":
        # A pod's containers carry its template's labels; init containers have exited (not listed).
        component = KUBE_COMPONENT[service]
        out = podman("ps", "--filter", f"label=app.kubernetes.io/component={component}", "--format", "{{.Names}}")
        return sorted(name for name in out.split() if not name.endswith("-wait-for-migrations"))
    out = podman(
        "ps",
        "--filter",
        f"label=io.podman.compose.project={PROJECT}",
        "--filter",
        f"label=com.docker.compose.service={service}",
        "--format",
        "{{.Names}}",
    )
    return sorted(out.split())


def address(container: str) -> str:
    info = json.loads(podman("inspect", container))[0]
    networks = info["NetworkSettings"].get("Networks") or {}
    if not networks and info.get("Pod"):  # a pod's containers share its infra container's network
        infra = json.loads(podman("pod", "inspect", info["Pod"]))["InfraContainerID"]
        networks = json.loads(podman("inspect", infra))[0]["NetworkSettings"]["Networks"]
    return next(iter(networks.values()))["IPAddress"]


def request(
    url: str, method: str = "GET", body: object = None, headers: dict | None = None, opener=None, timeout: float = 60
) -> tuple[int, bytes, dict]:
    data = json.dumps(body).encode() if body is not None and not isinstance(body, bytes) else body
    req = urllib.request.Request(url, data=data, method=method, headers=dict(headers or {}))  # noqa: S310 (http only)
    if body is not None and not isinstance(body, bytes):
        req.add_header("Content-Type", "application/json")
    try:
        with (opener.open if opener else urllib.request.urlopen)(req, timeout=timeout) as response:
            return response.status, response.read(), dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, error.read(), dict(error.headers)


def access_lines(container: str) -> list[str]:
    logs = subprocess.run(["podman", "logs", container], capture_output=True, text=True, timeout=60)
    return [ln for ln in (logs.stdout + logs.stderr).splitlines() if "gateway.access" in ln]


def access_counts(webs: list[str]) -> dict[str, int]:
    return {c: len(access_lines(c)) for c in webs}


class Admin:
    """A browser-like admin session: cookies, CSRF token, the login form."""

    def __init__(self, base: str, password: str):
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))
        status, page, _ = request(f"{base}/login/", opener=self.opener)
        expect(status == 200, f"GET /login/ answered {status}")
        token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', page)
        expect(token, "the login page has a CSRF token")
        form = urllib.parse.urlencode(
            {"username": "admin", "password": password, "csrfmiddlewaretoken": token.group(1).decode(), "next": "/"}
        ).encode()
        status, page, _ = request(
            f"{base}/login/",
            "POST",
            form,
            {"Content-Type": "application/x-www-form-urlencoded", "Origin": base, "Referer": f"{base}/login/"},
            opener=self.opener,
        )
        expect(status == 200 and b'name="password"' not in page, f"admin login failed ({status})")

    def csrf(self) -> str:
        return next(c.value for c in self.jar if c.name == "csrftoken")

    def api(self, method: str, path: str, body: object = None) -> tuple[int, dict]:
        headers = {"X-CSRFToken": self.csrf(), "Origin": self.base, "Referer": f"{self.base}/"}
        status, raw, _ = request(f"{self.base}{path}", method, body, headers, opener=self.opener)
        try:
            return status, json.loads(raw or b"{}")
        except ValueError:
            return status, {"raw": raw[:300].decode(errors="replace")}


def chat(base: str, key: str, stream: bool = False) -> tuple[int, bytes]:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16}
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    status, raw, _ = request(f"{base}/v1/chat/completions", "POST", body, {"Authorization": f"Bearer {key}"})
    return status, raw


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--admin-password", required=True)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--bench", type=int, default=0, help="then SECONDS of wrk load through the proxy (req/s)")
    parser.add_argument("--platform", choices=("compose", "kube"), default="compose")
    args = parser.parse_args()
    global PLATFORM
    PLATFORM = args.platform
    base = args.url.rstrip("/")
    webs = containers("web")
    expect(len(webs) == args.replicas, f"{len(webs)} web containers running, expected {args.replicas}")
    ok(f"{len(webs)} web replicas: {', '.join(webs)}")

    if PLATFORM == "compose":
        # The proxy sits in the `edge` subnet the replicas trust for X-Forwarded-For (PORTAL_TRUSTED_PROXIES).
        trusted = podman("exec", webs[0], "printenv", "PORTAL_TRUSTED_PROXIES").strip()
        proxy_ip = next(
            iter(json.loads(podman("inspect", containers("proxy")[0]))[0]["NetworkSettings"]["Networks"].values())
        )
        network = ipaddress.ip_network(trusted)
        expect(
            ipaddress.ip_address(proxy_ip["IPAddress"]) in network, f"proxy {proxy_ip['IPAddress']} not in {trusted}"
        )
        ok(f"the proxy ({proxy_ip['IPAddress']}) is in the trusted edge subnet {trusted}")

    status, raw, _ = request(f"{base}/readyz")
    health = json.loads(raw)
    expect(status == 200 and health["database"]["ok"] and health["redis"]["ok"], f"/readyz: {status} {health}")
    ok("/readyz through the proxy: PostgreSQL and Redis ok")

    if PLATFORM == "compose":
        # .env reaches every app container (env_file), compose's own variables still win.
        for service in ("web", "worker", "beat"):
            for container in containers(service):
                env = podman("exec", container, "printenv")
                expect(
                    "DEFAULT_FROM_EMAIL=ci-compose@example.invalid" in env,
                    f"{container}: .env's DEFAULT_FROM_EMAIL missing",
                )
                expect("PORTAL_PROBE_TIMEOUT=17" in env, f"{container}: .env's PORTAL_PROBE_TIMEOUT missing")
                expect("DATABASE_URL=postgres://portal:" in env, f"{container}: DATABASE_URL is not compose's")
        seen = podman(
            "exec",
            webs[0],
            "python",
            "manage.py",
            "shell",
            "-c",
            "from django.conf import settings; print(settings.DEFAULT_FROM_EMAIL)",
        ).strip()
        expect(seen.endswith("ci-compose@example.invalid"), f"settings.DEFAULT_FROM_EMAIL is {seen!r}")
        ok(".env variables reach web, worker and beat, and the settings read them")
    else:
        # The ConfigMap and the Secret (inlined by kube_play.py) reach web, worker and beat.
        for service in ("web", "worker", "beat"):
            expect(containers(service), f"no {service} pod is running")
            for container in containers(service):
                env = podman("exec", container, "printenv")
                expect(f"PORTAL_PUBLIC_URL={base}" in env, f"{container}: the ConfigMap's PORTAL_PUBLIC_URL missing")
                expect("DATABASE_URL=postgres://portal:" in env, f"{container}: the Secret's DATABASE_URL missing")
        ok("the ConfigMap and the Secret reach web, worker and beat")

    admin = Admin(base, args.admin_password)
    for i in range(20):
        status, page, _ = request(f"{base}/", opener=admin.opener)
        expect(
            status == 200 and b'name="password"' not in page, f"request {i + 1} of the session: {status} / login page"
        )
    ok("admin login; the session survives 20 requests across the replicas")

    status, channel = admin.api(
        "POST",
        "/api/channels/",
        {"name": "fake", "kind": "openai", "base_url": "http://upstream:9000/v1", "api_key": "sk-fake"},
    )
    expect(status == 201, f"create channel: {status} {channel}")
    status, model = admin.api(
        "POST", "/api/models/", {"name": MODEL, "routes": [{"channel": "fake", "upstream_model": MODEL}]}
    )
    expect(status == 201, f"create model: {status} {model}")
    status, dev = admin.api(
        "POST", "/api/users/", {"username": "dev", "email": "dev@example.invalid", "role": "developer"}
    )
    expect(status == 201, f"create developer: {status} {dev}")
    status, key = admin.api("POST", "/api/keys/", {"name": "smoke", "owner": dev["id"]})
    expect(status == 201 and key.get("key"), f"create key: {status} {key}")
    secret = key["key"]
    ok("channel to the fake upstream, a model, a developer and their key (API, admin session)")

    # A new model reaches every replica's catalog when its cached generation is next checked
    # (GATEWAY_CACHE_TTL, 5 s): the replica that answers may not have seen it yet. The proxy takes
    # turns, so it is on every replica once it is listed 4 times in a row (one listing was not
    # enough: the next request, the chat, could go to the replica that had not seen it).
    deadline = time.monotonic() + 30
    in_a_row = 0
    while True:
        status, raw, _ = request(f"{base}/v1/models", headers={"Authorization": f"Bearer {secret}"})
        listed = status == 200 and MODEL in [m["id"] for m in json.loads(raw)["data"]]
        in_a_row = in_a_row + 1 if listed else 0
        if in_a_row >= 4 or time.monotonic() > deadline:
            break
        time.sleep(0.2 if listed else 0.5)
    expect(listed, f"/v1/models: {status} {raw[:300]!r}")
    ok("/v1/models lists the model")
    status, raw = chat(base, secret)
    answer = json.loads(raw) if status == 200 else {}
    expect(
        status == 200 and "fake upstream" in answer["choices"][0]["message"]["content"], f"chat: {status} {raw[:300]!r}"
    )
    ok("non-streaming chat completion from the fake upstream container")
    status, raw = chat(base, secret, stream=True)
    events = [ln[6:] for ln in raw.decode().splitlines() if ln.startswith("data: ")]
    text = "".join(
        (json.loads(e)["choices"][0]["delta"].get("content") or "") for e in events[:-1] if json.loads(e)["choices"]
    )
    expect(status == 200 and events[-1] == "[DONE]" and "fake upstream" in text, f"stream: {status} {raw[:300]!r}")
    ok(f"streaming chat completion: {len(events)} SSE events, ends with [DONE]")
    status, raw, _ = request(f"{base}/v1/models", headers={"Authorization": "Bearer sk-not-a-real-key"})
    expect(status == 401 and b"error" in raw, f"bad key: {status} {raw[:200]!r}")
    ok("a bad key gets 401 with an OpenAI-shaped error")

    # The proxy spreads sequential requests over every replica (round robin).
    mark = access_counts(webs)
    rounds = 10 * len(webs)
    for _ in range(rounds):
        status, _raw, _ = request(f"{base}/v1/models", headers={"Authorization": f"Bearer {secret}"})
        expect(status == 200, f"/v1/models: {status}")
    spread = {c: n - mark[c] for c, n in access_counts(webs).items()}
    expect(sum(spread.values()) == rounds, f"access log lines for {rounds} requests: {spread}")
    expect(
        max(spread.values()) - min(spread.values()) <= 1, f"{rounds} sequential requests are not round robin: {spread}"
    )
    ok(f"{rounds} sequential requests through the proxy, per replica: {spread}")

    # Limits are exact across replicas: 30 requests/min, 90 at once, exactly 30 pass.
    status, limited = admin.api(
        "POST", "/api/keys/", {"name": "limited", "owner": dev["id"], "requests_per_minute": 30}
    )
    expect(status == 201, f"create limited key: {status} {limited}")
    mark = access_counts(webs)
    with ThreadPoolExecutor(90) as pool:
        codes = list(pool.map(lambda _: chat(base, limited["key"])[0], range(90)))
    tally = {code: codes.count(code) for code in sorted(set(codes))}
    served = {c: n - mark[c] for c, n in access_counts(webs).items()}
    expect(tally == {200: 30, 429: 60}, f"90 concurrent requests on a 30/min key: {tally}")
    expect(all(served.values()), f"not every replica took part in the burst: {served}")
    ok(f"30/min key, 90 concurrent requests: {tally}; per replica {served}")

    # A revoked key is refused by every replica within 5 s: each asked directly (chat, the path that
    # admits through Redis and sees the key generation bump), with the key cached there first.
    status, doomed = admin.api("POST", "/api/keys/", {"name": "doomed", "owner": dev["id"]})
    expect(status == 201, f"create key: {status}")
    direct = {c: f"http://{address(c)}:8000" for c in webs}
    for c, url in direct.items():
        status, _raw = chat(url, doomed["key"])
        expect(status == 200, f"{c} directly: {status}")
    status, _body = admin.api("POST", f"/api/keys/{doomed['id']}/revoke/")
    expect(status == 200, f"revoke: {status}")
    revoked_at = time.monotonic()
    refused: dict[str, float] = {}
    while len(refused) < len(direct) and time.monotonic() - revoked_at < 5:
        for c, url in direct.items():
            if c not in refused and chat(url, doomed["key"])[0] == 401:
                refused[c] = round(time.monotonic() - revoked_at, 2)
        time.sleep(0.1)
    expect(len(refused) == len(direct), f"revoked key still accepted after 5 s by {set(direct) - set(refused)}")
    ok(f"revoked key refused by every replica, seconds after revoking: {refused}")

    # The worker ran a probe that beat scheduled (probe round every 10 s).
    status, sched = admin.api("PATCH", "/api/health/schedule/", {"interval_seconds": 10, "enabled": True})
    expect(status == 200, f"probe schedule: {status} {sched}")
    deadline = time.monotonic() + 90
    probed = None
    while time.monotonic() < deadline and not probed:
        _s, channels = admin.api("GET", "/api/health/channels/")
        rows = channels.get("results", []) if isinstance(channels, dict) else channels
        probed = next((r["last_checked"] for r in rows if r["name"] == "fake" and r["last_checked"]), None)
        time.sleep(2)
    expect(probed, "the fake channel was not probed within 90 s")

    def logs(service: str) -> str:
        runs = [subprocess.run(["podman", "logs", c], capture_output=True, text=True) for c in containers(service)]
        return "".join(r.stdout + r.stderr for r in runs)

    sent = re.findall(r"Sending due task .*\(channels\.tasks\.probe_all_channels\)", logs("beat"))
    done = re.findall(r"Task channels\.tasks\.probe_all_channels\[[^]]+\] succeeded", logs("worker"))
    expect(sent and done, f"beat sent {len(sent)} probe rounds, the worker finished {len(done)}")
    for worker in containers("worker"):
        check = subprocess.run(["podman", "healthcheck", "run", worker], capture_output=True, text=True)
        expect(check.returncode == 0, f"{worker}'s health check fails: {check.stdout}{check.stderr}")
    ok(f"beat sent {len(sent)} probe rounds, the worker ran {len(done)} (channel probed {probed}); worker healthy")

    totals = access_counts(webs)
    expect(all(totals.values()), f"a replica served no gateway traffic: {totals}")
    ok(f"every web replica served gateway traffic (gateway.access lines): {totals}")
    print(f"smoke: {len(checks)} checks passed; gateway requests per replica: {json.dumps(totals)}", flush=True)
    if args.bench:
        status, fast = admin.api("POST", "/api/keys/", {"name": "bench", "owner": dev["id"]})
        expect(status == 201, f"create bench key: {status}")
        bench(base, fast["key"], args.bench, webs)


def bench(base: str, key: str, seconds: int, webs: list[str]) -> None:
    """Non-streaming chat completions through the proxy with wrk (32 connections), for the
    1-vs-N-replica ratio; not a pass/fail check."""
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16})
    script = (
        'wrk.method = "POST"\n'
        f"wrk.body = {json.dumps(body)}\n"
        'wrk.headers["Content-Type"] = "application/json"\n'
        f'wrk.headers["Authorization"] = "Bearer {key}"\n'
    )
    fd, path = tempfile.mkstemp(suffix=".lua")  # 0600: it holds the (throwaway) key
    with os.fdopen(fd, "w") as f:
        f.write(script)

    def wrk(url: str) -> tuple[str, str]:
        run = subprocess.run(
            ["wrk", "-t2", "-c32", f"-d{seconds}s", "-s", path, url],
            capture_output=True,
            text=True,
            timeout=seconds + 60,
        )
        rate = re.search(r"Requests/sec:\s+([\d.]+)", run.stdout)
        errors = re.search(r"Non-2xx or 3xx responses: (\d+)", run.stdout)
        return (rate.group(1) if rate else "?"), (errors.group(1) if errors else "0")

    # The fake upstream alone first: a ceiling the gateway figures cannot pass.
    upstream = wrk(f"http://{address(containers('upstream')[0])}:9000/v1/chat/completions")
    print(f"bench: fake upstream directly, {upstream[0]} req/s", flush=True)
    mark = access_counts(webs)
    rate, errors = wrk(f"{base}/v1/chat/completions")
    os.unlink(path)
    served = {c: n - mark[c] for c, n in access_counts(webs).items()}
    print(
        f"bench: {len(webs)} replica(s) through the proxy, {rate} req/s, non-2xx {errors}, per replica {served}",
        flush=True,
    )


if __name__ == "__main__":
    main()
