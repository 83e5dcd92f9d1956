"""The one-line installers: a POSIX sh wrapper around install.py, and a PowerShell twin.

Both are the same for every developer (no secrets inside): the download token on the command line
is what selects and authorises one bundle. The doctor's probes for every client are embedded, so
`--check` works without a token.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from ..clients import CLIENTS
from ..clients.base import RenderInput
from .messages import table

HERE = Path(__file__).resolve().parent


@cache
def probes() -> dict[str, list[dict]]:
    """Every client's doctor probes; they depend on nothing but the client."""
    blank = RenderInput(gateway_url="http://gateway", api_key=None, models=(), version="")
    out = {}
    for slug, module in CLIENTS.items():
        found = module.render(blank).probes
        if found:
            out[slug] = [p.__dict__ for p in found]
    return out


def _sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def sh_script(portal: str, gateway: str, language: str = "en") -> str:
    python = (HERE / "install.py").read_text()
    return SH.format(
        messages=_sh_quote(json.dumps(table(language), ensure_ascii=False, separators=(",", ":"))),
        portal=_sh_quote(portal),
        portal_raw=portal.replace("\n", ""),
        gateway=_sh_quote(gateway),
        probes=_sh_quote(json.dumps(probes(), separators=(",", ":"))),
        python=python,
        clients=" ".join(sorted(probes())),
    )


def _ps_quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def ps1_script(portal: str, gateway: str, language: str = "en") -> str:
    return (
        (HERE / "install.ps1")
        .read_text()
        .replace("__PORTAL__", _ps_quote(portal))
        .replace("__GATEWAY__", _ps_quote(gateway))
        .replace("__PROBES__", _ps_quote(json.dumps(probes(), separators=(",", ":"))))
        .replace("__MESSAGES__", _ps_quote(json.dumps(table(language), ensure_ascii=False, separators=(",", ":"))))
    )


SH = """#!/bin/sh
# Team gateway: install this developer's client configs, or check them (the doctor).
#   curl -fsSL {portal_raw}/connect/install.sh | sh -s -- <download-token>
#   curl -fsSL {portal_raw}/connect/install.sh | sh -s -- --check <client>
# Existing files are merged, never replaced, after a timestamped backup; files holding a key get
# mode 0600. Needs python3 (preinstalled on Linux; on macOS: xcode-select --install).
set -eu
PORTAL={portal}
GATEWAY={gateway}
usage() {{
  echo "usage: sh install.sh <download-token>   (get one on $PORTAL/connect/)" >&2
  echo "       sh install.sh --check <client>   (one of: {clients})" >&2
  exit 2
}}
if ! command -v python3 >/dev/null 2>&1; then
  echo "✗ python3 is needed to merge files safely (macOS: xcode-select --install)." >&2
  echo "  Or copy the files from $PORTAL/connect/ by hand." >&2
  exit 1
fi
umask 077
tmp=$(mktemp -d 2>/dev/null || mktemp -d -t teamgw)
trap 'rm -rf "$tmp"' EXIT INT TERM
cat > "$tmp/install.py" <<'TEAMGW_PY'
{python}TEAMGW_PY
TEAM_GATEWAY_PROBES={probes}
TEAM_GATEWAY_MESSAGES={messages}
export TEAM_GATEWAY_PROBES TEAM_GATEWAY_MESSAGES
case "${{1:-}}" in
  --check) [ $# -ge 2 ] || usage; python3 "$tmp/install.py" check "$GATEWAY" "$2" ;;
  ''|-h|--help) usage ;;
  *) python3 "$tmp/install.py" install "$PORTAL" "$1" ;;
esac
"""
