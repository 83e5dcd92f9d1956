#!/usr/bin/env bash
# CI stage: build the project's image from its own Dockerfile and run its own docker-compose.yml
# (2 web replicas, worker, beat, PostgreSQL, Redis, Caddy) on podman, then a smoke suite through
# the proxy (deploy/ci/smoke.py). No container registry is needed: the base images are made here
# with debootstrap from the Debian mirror apt already uses. Tears everything down on any exit.
#
#   deploy/ci-compose.sh              # root, Debian bookworm; installs podman & co. if missing
#   PORTAL_CI_KEEP=1 deploy/ci-compose.sh   # leave the stack running for a look (the next run removes it)
#   PORTAL_CI_REPLICAS=1 PORTAL_CI_BENCH=20 deploy/ci-compose.sh   # + 20 s of wrk load (req/s)
#
# Docker users run the same file with `docker compose` (see README, "Production with Docker Compose").
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
started=$(date +%s)
stamp() { printf '[ci-compose %4ss] %s\n' "$(($(date +%s) - started))" "$*"; }
export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1

PROJECT=${PORTAL_CI_PROJECT:-portalci}
REPLICAS=${PORTAL_CI_REPLICAS:-2}
# 1-4. podman, its configuration, the base images and the project image (shared with ci-kube.sh).
source deploy/ci/podman-images.sh
# podman-compose from PyPI into a throwaway venv.
if [ ! -x "$CI_HOME/venv/bin/podman-compose" ]; then
  stamp "podman-compose into $CI_HOME/venv"
  python3 -m venv "$CI_HOME/venv"
  "$CI_HOME/venv/bin/pip" install -q "podman-compose>=1.5,<2"
fi
# A clean environment: compose interpolates the shell's variables over .env's (CI exports
# DATABASE_URL, PORTAL_*...), and this stack must see only its own .env.
PC=(env -i PATH="$PATH" HOME="$HOME" CONTAINERS_CONF="$CONTAINERS_CONF" CONTAINERS_STORAGE_CONF="$CONTAINERS_STORAGE_CONF"
  DISABLE_HC_SYSTEMD=true "$CI_HOME/venv/bin/podman-compose" -p "$PROJECT" -f docker-compose.yml -f compose.ci.yml)

# 5. The compose project in a scratch folder: the project's docker-compose.yml and deploy/, the CI
# override, and a .env (never the developer's own .env).
stage=$(mktemp -d)
cp docker-compose.yml "$stage/" && cp -r deploy "$stage/deploy" && cp deploy/ci/compose.ci.yml "$stage/"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
admin_password=$(python3 -c 'import secrets; print(secrets.token_urlsafe(18))')
cat >"$stage/.env" <<ENV
PORTAL_IMAGE=localhost/gateway-portal:ci
PYTHON_IMAGE=localhost/python:3.11-bookworm
POSTGRES_IMAGE=localhost/postgres:15-bookworm
REDIS_IMAGE=localhost/redis:7-bookworm
PROXY_IMAGE=localhost/caddy:2-bookworm
WEB_REPLICAS=$REPLICAS
PORTAL_PORT=$port
POSTGRES_PASSWORD=$(python3 -c 'import secrets; print(secrets.token_urlsafe(18))')
PORTAL_ADMIN_PASSWORD=$admin_password
WORKER_CONCURRENCY=2
# Not listed under the compose file's environment: reaches the containers through env_file only.
DEFAULT_FROM_EMAIL=ci-compose@example.invalid
PORTAL_PROBE_TIMEOUT=17
ENV
cd "$stage"

names() {  # names SERVICE: the running containers of one service
  podman ps --filter "label=io.podman.compose.project=$PROJECT" --filter "label=com.docker.compose.service=$1" \
    --format '{{.Names}}' | sort
}
cleanup() {  # every container, volume and network of the project, even a killed run's
  "${PC[@]}" down -v -t 5 >/dev/null 2>&1
  ids=$(podman ps -aq --filter "label=io.podman.compose.project=$PROJECT")
  [ -z "$ids" ] || podman rm -f -t 2 $ids >/dev/null 2>&1
  vols=$(podman volume ls -q --filter "label=io.podman.compose.project=$PROJECT")
  [ -z "$vols" ] || podman volume rm -f $vols >/dev/null 2>&1
  nets=$(podman network ls -q --filter "label=io.podman.compose.project=$PROJECT")
  [ -z "$nets" ] || podman network rm -f $nets >/dev/null 2>&1
  podman network rm -f "${PROJECT}_default" "${PROJECT}_edge" >/dev/null 2>&1
  return 0
}
STAGE_FILTER="label=io.podman.compose.project=$PROJECT"  # teardown (deploy/ci/podman-images.sh) shows these containers' logs
trap teardown EXIT
trap 'exit 130' INT TERM
if [ -n "$(podman ps -aq --filter "label=io.podman.compose.project=$PROJECT")$(podman volume ls -q --filter "label=io.podman.compose.project=$PROJECT")" ]; then
  stamp "removing what a previous run of project $PROJECT left behind"
  (set +e; cleanup)
fi

healthy() {  # healthy CONTAINER TIMEOUT: run its health check (no systemd timers here) until it passes
  local deadline=$(($(date +%s) + $2))
  until podman healthcheck run "$1" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || { stamp "$1 not healthy after $2 s"; return 1; }
    sleep 2
  done
}

# 6. Up in phases (podman-compose ignores `condition:` and trips over chained depends_on).
stamp "up: postgres redis"
"${PC[@]}" up -d --no-deps postgres redis >/dev/null
for c in $(names postgres) $(names redis); do healthy "$c" 120; done
stamp "up: migrate"
"${PC[@]}" up -d --no-deps migrate >/dev/null
migrate=$(podman ps -a --filter "label=io.podman.compose.project=$PROJECT" \
  --filter "label=com.docker.compose.service=migrate" --format '{{.Names}}')
migrate_rc=$(podman wait "$migrate")
[ "$migrate_rc" = 0 ] || { podman logs "$migrate"; stamp "migrate exited $migrate_rc"; exit 1; }
stamp "up: web x$REPLICAS, worker, beat, upstream"
"${PC[@]}" up -d --no-deps web worker beat upstream >/dev/null
for c in $(names web); do healthy "$c" 180; done
for c in $(names worker); do healthy "$c" 180; done
stamp "up: proxy"
"${PC[@]}" up -d --no-deps proxy >/dev/null
for c in $(names proxy); do healthy "$c" 60; done

# 7. The smoke suite, through the proxy's published port.
stamp "smoke suite via http://127.0.0.1:$port"
PORTAL_CI_PROJECT=$PROJECT python3 "$ROOT/deploy/ci/smoke.py" --url "http://127.0.0.1:$port" \
  --admin-password="$admin_password" --replicas "$REPLICAS" --bench "${PORTAL_CI_BENCH:-0}"
stamp "smoke suite passed"
