#!/usr/bin/env bash
# CI stage: the Kubernetes manifests (deploy/kubernetes), rendered by render.py with the optional
# PostgreSQL and Redis, run for real with `podman kube play` on the image the compose stage builds,
# then the compose stage's smoke suite through the portal-web Service (its stand-in: podman has no
# kube-proxy). What podman does not run as written is converted by deploy/ci/kube_play.py, which
# prints each conversion (README, "Kubernetes"). Tears everything down on any exit.
#
#   deploy/ci-kube.sh                  # root, Debian bookworm; installs podman & co. if missing
#   PORTAL_CI_KEEP=1 deploy/ci-kube.sh # leave the pods running for a look (the next run removes them)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
started=$(date +%s)
stamp() { printf '[ci-kube %4ss] %s\n' "$(($(date +%s) - started))" "$*"; }
export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1
NETWORK=${PORTAL_CI_KUBE_NETWORK:-portalkube}
SUBNET=${PORTAL_CI_KUBE_SUBNET:-10.89.77.0/24}
REPLICAS=2

# 1-4. podman, its configuration, the base images and the project image (shared with ci-compose.sh).
source deploy/ci/podman-images.sh

stage=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
secret() { python3 -c 'import secrets; print(secrets.token_urlsafe(24))'; }
admin_password=$(secret)
pg_password=$(secret)

cleanup() {  # every pod, volume and the network of this stage, even a killed run's
  pods=$(podman pod ls -q --filter "label=portal-ci=kube")
  [ -z "$pods" ] || podman pod rm -f -t 2 $pods >/dev/null 2>&1
  for f in "$stage"/[1-4]-*.yaml; do [ -f "$f" ] && podman kube down "$f" >/dev/null 2>&1; done
  for v in postgres-pgdata redis-redisdata; do podman volume rm -f "$v" >/dev/null 2>&1; done
  podman network rm -f "$NETWORK" >/dev/null 2>&1
  return 0
}
STAGE_FILTER="label=portal-ci=kube"  # teardown (deploy/ci/podman-images.sh) shows these containers' logs
trap teardown EXIT
trap 'exit 130' INT TERM
(set +e; cleanup)

# 5. Render as an operator would (render.py), then convert what podman cannot run as written.
stamp "render deploy/kubernetes and convert for podman kube play"
fernet=$(uv run --quiet python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())')
uv run --quiet python deploy/kubernetes/render.py --image localhost/gateway-portal:ci \
  --public-url "http://127.0.0.1:$port" --replicas "$REPLICAS" --worker-replicas 1 --pull-policy Never \
  --trusted-proxies "$SUBNET" --datastores \
  --postgres-image localhost/postgres:15-bookworm --redis-image localhost/redis:7-bookworm >"$stage/rendered.yaml"
uv run --quiet python deploy/ci/kube_play.py "$stage/rendered.yaml" "$stage" --port "$port" \
  --upstream deploy/ci/fake_upstream.py --python-image localhost/python:3.11-bookworm \
  --proxy-image localhost/caddy:2-bookworm \
  --secret "DJANGO_SECRET_KEY=$(secret)" --secret "PORTAL_ENCRYPTION_KEYS=$fernet" \
  --secret "PORTAL_KEY_HASH_SECRET=$(secret)" --secret "PORTAL_ADMIN_PASSWORD=$admin_password" \
  --secret "DATABASE_URL=postgres://portal:$pg_password@postgres:5432/portal" \
  --secret "REDIS_URL=redis://redis:6379/0" --secret "POSTGRES_PASSWORD=$pg_password"

podman network create --subnet "$SUBNET" "$NETWORK" >/dev/null
play() { podman kube play -q --network "$NETWORK" --configmap "$stage/configmap.yaml" "$stage/$1.yaml" >/dev/null; }
until_ok() {  # until_ok SECONDS WHAT COMMAND...: retry until the command succeeds
  local deadline=$(($(date +%s) + $1)) what=$2
  shift 2
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || { stamp "$what: not ready"; return 1; }
    sleep 2
  done
}
pod_ip() { podman inspect --format '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' \
  "$(podman pod inspect --format '{{.InfraContainerID}}' "$1")"; }
ready() { curl -fsS -o /dev/null --max-time 4 -H "Host: ${probe[1]}" "http://$(pod_ip "$1"):8000$2"; }

# 6. Up in the order a cluster converges to: datastores, the migrate Job, the portal, the Service.
stamp "kube play: postgres, redis (StatefulSets), the fake upstream"
play 1-datastores
until_ok 120 postgres podman exec postgres-postgres pg_isready -U portal -d portal
until_ok 60 redis podman exec redis-redis redis-cli ping
stamp "kube play: the migrate Job"
play 2-migrate
migrate=$(podman ps -a --filter "label=app.kubernetes.io/component=migrate" --format '{{.Names}}' | grep -- '-migrate$')
migrate_rc=$(podman wait "$migrate")
[ "$migrate_rc" = 0 ] || { podman logs "$migrate"; stamp "migrate exited $migrate_rc"; exit 1; }
stamp "init containers (wait-for-migrations) as podman kube play cannot run them"
while read -r line; do
  mapfile -t gate < <(python3 -c 'import json, sys; print("\n".join(json.loads(sys.argv[1])))' "$line")
  timeout 300 podman run --rm --network "$NETWORK" --env-file "${gate[1]}" "${gate[0]}" "${gate[@]:2}"
done <"$stage/init-containers"
stamp "kube play: portal-web x$REPLICAS, portal-worker, portal-beat"
play 3-portal
# The readiness probe as the manifest has it (path and Host header), asked the way the kubelet would.
mapfile -t probe < <(uv run --quiet python -c 'import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
web = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "portal-web")
get = web["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]
print(get["path"])
print(next(h["value"] for h in get["httpHeaders"] if h["name"] == "Host"))' "$stage/rendered.yaml")
readiness=${probe[0]}
for i in $(seq 0 $((REPLICAS - 1))); do
  until_ok 240 "portal-web-pod-$i $readiness" ready "portal-web-pod-$i" "$readiness"
done
until_ok 180 "worker" podman healthcheck run portal-worker-pod-0-worker
stamp "kube play: the portal-web Service (Caddy, round robin)"
play 4-service
until_ok 60 "service" curl -fsS -o /dev/null --max-time 4 "http://127.0.0.1:$port/healthz"

# 7. The compose stage's smoke suite, through the Service.
stamp "smoke suite via http://127.0.0.1:$port (the portal-web Service)"
python3 "$ROOT/deploy/ci/smoke.py" --platform kube --url "http://127.0.0.1:$port" \
  --admin-password="$admin_password" --replicas "$REPLICAS"
stamp "smoke suite passed"
