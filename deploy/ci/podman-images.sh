# Sourced by deploy/ci-compose.sh and deploy/ci-kube.sh (needs `stamp`): podman and its
# configuration for this host, the base images made without a registry, and the project's image
# localhost/gateway-portal:ci built from its own Dockerfile (cached under CI_HOME), and the stages'
# common exit, `teardown`.
# Everything podman keeps (storage, base rootfs, podman-compose venv) lives in CI_HOME; it is a
# cache: delete it for a cold run.
CI_HOME=${PORTAL_CI_HOME:-/var/tmp/portal-ci-podman}
mkdir -p "$CI_HOME"

# 1. podman & friends from Debian.
pkgs=(podman runc conmon slirp4netns fuse-overlayfs uidmap containernetworking-plugins
  golang-github-containernetworking-plugin-dnsname dnsmasq-base debootstrap iptables curl catatonit)
missing=()
for p in "${pkgs[@]}"; do dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  stamp "apt-get install ${missing[*]}"
  apt-get update -qq
  apt-get install -y -qq -o DPkg::Lock::Timeout=600 --no-install-recommends "${missing[@]}" >/dev/null
fi

# 2. podman configuration for this host: runc (crun refuses the hybrid cgroup layout), cgroupfs and
# file events (no systemd), ulimits the host can grant, storage in the cache folder.
cat >"$CI_HOME/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
[network]
network_backend = "cni"
CONF
cat >"$CI_HOME/storage.conf" <<CONF
[storage]
driver = "overlay"
graphroot = "$CI_HOME/storage"
runroot = "$CI_HOME/run"
CONF
export CONTAINERS_CONF="$CI_HOME/containers.conf" CONTAINERS_STORAGE_CONF="$CI_HOME/storage.conf"
export DISABLE_HC_SYSTEMD=true
# 3. Base images without a registry.
MIRROR=$( (cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null || true) \
  | grep -oE '^(URIs:|deb) +https?://[^ ]+/debian/?$' | head -1 | awk '{print $2}' || true)
MIRROR=${MIRROR:-http://deb.debian.org/debian}
if ! podman image exists localhost/debian:bookworm; then
  stamp "debootstrap bookworm from $MIRROR"
  rm -rf "$CI_HOME/rootfs"
  debootstrap --variant=minbase bookworm "$CI_HOME/rootfs" "$MIRROR" >"$CI_HOME/debootstrap.log" 2>&1 \
    || { tail -20 "$CI_HOME/debootstrap.log"; exit 1; }
  tar -C "$CI_HOME/rootfs" -c . | podman import -q - localhost/debian:bookworm >/dev/null
  rm -rf "$CI_HOME/rootfs"
fi
ctx="$CI_HOME/base-context"
rm -rf "$ctx" && mkdir -p "$ctx/ca" && cp deploy/ci/images/* "$ctx/"
# The build containers reach PyPI and Debian through this host's network: trust its extra CAs.
cp -r /usr/local/share/ca-certificates/. "$ctx/ca/" 2>/dev/null || true
base() {  # base NAME CONTAINERFILE
  if ! podman image exists "$1"; then
    stamp "base image $1"
    podman build -q --pull=never -t "$1" -f "$ctx/$2" "$ctx" >/dev/null
  fi
}
base localhost/python:3.11-bookworm python.Containerfile
base localhost/postgres:15-bookworm postgres.Containerfile
base localhost/redis:7-bookworm redis.Containerfile
base localhost/caddy:2-bookworm caddy.Containerfile

# 4. The project image from the project's Dockerfile (`--format docker` keeps its HEALTHCHECK).
stamp "podman build the project image"
podman build -q --format docker --pull=never --build-arg BASE_IMAGE=localhost/python:3.11-bookworm \
  -t localhost/gateway-portal:ci -f Dockerfile . >/dev/null

# The stage's exit: on failure the last log lines of its containers (those matching STAGE_FILTER),
# then `cleanup` (each script defines it) unless PORTAL_CI_KEEP is set. `trap teardown EXIT`.
teardown() {
  rc=$?
  set +e
  if [ "$rc" -ne 0 ]; then
    stamp "FAILED (exit $rc); last log lines of every container:"
    for c in $(podman ps -a --filter "$STAGE_FILTER" --format '{{.Names}}'); do
      echo "----- $c"; podman logs --tail 25 "$c" 2>&1
    done
  fi
  if [ -n "${PORTAL_CI_KEEP:-}" ]; then
    stamp "kept in $stage (podman: CONTAINERS_CONF=$CONTAINERS_CONF CONTAINERS_STORAGE_CONF=$CONTAINERS_STORAGE_CONF); the next run removes it"
    exit "$rc"
  fi
  stamp "teardown"
  cleanup
  rm -rf "$stage"
  stamp "done (exit $rc) in $(($(date +%s) - started)) s"
  exit "$rc"
}
