"""The one-line installers: a POSIX sh wrapper around install.py, and a PowerShell twin.

Both are the same for every developer (no secrets inside): the download token on the command line
is what selects and authorises one bundle. The doctor's probes for every client are embedded, so
`--check` works without a token.
"""

from __future__ import annotations

import dataclasses
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

from django.utils import translation
from django.utils.translation import gettext

from ..clients import CLIENTS
from ..clients.base import PROVIDER_ID, ConfigFile, McpServerSpec, ModelSpec, RenderInput, windows_of
from . import install as inst
from .messages import table

HERE = Path(__file__).resolve().parent
# What uninstall looks for is read off one render with everything in it: a key, a model with
# limits, an MCP server. Names that vary (models, servers) sit under `replace`, `lists` or `owned`.
SAMPLE = RenderInput(
    gateway_url="http://gateway",
    api_key="gp-sample",
    models=(ModelSpec("sample-model", 8192, 1024, "Sample"),),
    version="0",
    mcp_servers=(McpServerSpec("sample", "Sample"),),
)


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


def leaf_paths(data: dict, cut: set[str], prefix: str = "") -> list[str]:
    """Dotted paths of every value in `data`, stopping at objects in `cut` (taken whole elsewhere)."""
    out = []
    for k, v in data.items():
        path = prefix + k
        if path in cut:
            continue
        if isinstance(v, dict) and v:
            out += leaf_paths(v, cut, path + ".")
        else:
            out.append(path)
    return out


def uninstall_spec(f: ConfigFile) -> dict:
    """Where one file lives, how it was merged, and what of it is ours."""
    spec: dict = {
        "path": f.path,
        "macos_path": f.macos_path or f.path,
        "windows_path": f.windows,
        "merge": f.merge,
        "secret": f.secret,
        "owned": list(f.owned),
    }
    owned_at = {o.rsplit(".", 1)[0] for o in f.owned}
    if f.merge == "json":
        lists = [entry.split(":")[0] for entry in f.lists]
        paths = leaf_paths(json.loads(f.content), {*f.replace, *lists, *owned_at}) + list(f.replace)
        # Keyed by model name outside any list we own (Aider's metadata): the user's own entries look
        # the same, so those stay; they only describe a model.
        spec["paths"] = [p for p in paths if SAMPLE.models[0].name not in p]
        spec["lists"] = list(f.lists)
    elif f.merge in ("toml", "toml-items"):
        top, tables = inst._toml_split(f.content)
        spec["keys"] = sorted({m.group(1).strip("\"'") for m in map(inst._ASSIGN.match, top) if m})
        spec["tables"] = [name for name, _ in tables if not any(name.startswith(o) for o in f.owned)]
    elif f.merge == "dotenv":
        spec["keys"] = sorted(re.findall(r"(?m)^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=", f.content))
    elif f.merge == "yaml-keys":
        spec["keys"] = sorted(inst.yaml_keys(f.content) - owned_at)  # an owned block is shared
    elif f.merge == "text":
        spec["prefix"] = PROVIDER_ID
    # What our own fresh install leaves once ours is taken out: a file back to this is deleted.
    fresh = inst.MERGES[f.merge](None, {"content": f.content, "owned": list(f.owned)})
    skeleton = inst.UNMERGES[f.merge](fresh, spec, SAMPLE.gateway_url)
    spec["skeleton"] = None if SAMPLE.models[0].name in skeleton else skeleton
    return spec


def family_spec(f: ConfigFile) -> dict[str, Any]:
    """A per-model file's spec under its family's glob (`~/.claude/teamgw-*.json`), which uninstall
    expands on the developer's machine, so the files of every model it ever installed go."""
    spec = uninstall_spec(f)
    return {**spec, "path": f.family, "macos_path": f.family, "windows_path": windows_of(f.family), "glob": True}


@cache
def uninstall_specs() -> dict[str, list[dict]]:
    """Every client's installed files and what of each is ours (uninstall; MCP clean-up)."""
    out: dict[str, list[dict]] = {}
    for slug, module in CLIENTS.items():
        specs: dict[str, dict] = {}
        for inp in (SAMPLE, dataclasses.replace(SAMPLE, api_key=None)):
            rendered = module.render(inp)
            for f in rendered.files:
                where = f.family or f.path
                if f.merge != "none" and where not in specs:
                    specs[where] = family_spec(f) if f.family else uninstall_spec(f)
            if rendered.db_providers:
                specs[inst.CCSWITCH_DB] = {
                    "path": inst.CCSWITCH_DB,
                    "macos_path": inst.CCSWITCH_DB,
                    "merge": "ccswitch",
                }
        if specs:
            out[slug] = list(specs.values())
    return out


def _sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def _sh_echo(lines: list[str]) -> str:
    return "\n".join(f"  echo {_sh_quote(line)} >&2" for line in lines)


def sh_script(portal: str, gateway: str, language: str = "en") -> str:
    python = (HERE / "install.py").read_text()
    clients = " ".join(sorted(probes()))
    with translation.override(language):  # the shell's own lines: printed before install.py runs
        usage = [
            gettext("usage: sh install.sh <download-token>   (get one on {portal}/connect/)").format(portal=portal),
            "       " + gettext("sh install.sh --check <client>   (one of: {clients})").format(clients=clients),
            "       "
            + gettext("sh install.sh --uninstall <client>... | all [--yes]   (removes what the installer wrote)"),
        ]
        no_python = [
            "✗ " + gettext("python3 is needed to merge files safely (macOS: xcode-select --install)."),
            "  " + gettext("Or copy the files from {portal}/connect/ by hand.").format(portal=portal),
        ]
    return SH.format(
        usage=_sh_echo(usage),
        no_python=_sh_echo(no_python),
        messages=_sh_quote(json.dumps(table(language), ensure_ascii=False, separators=(",", ":"))),
        portal=_sh_quote(portal),
        portal_raw=portal.replace("\n", ""),
        gateway=_sh_quote(gateway),
        probes=_sh_quote(json.dumps(probes(), separators=(",", ":"))),
        uninstall=_sh_quote(json.dumps(uninstall_specs(), separators=(",", ":"))),
        python=python,
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
        .replace("__UNINSTALL__", _ps_quote(json.dumps(uninstall_specs(), separators=(",", ":"))))
    )


SH = """#!/bin/sh
# Team gateway: install this developer's client configs, or check them (the doctor).
#   curl -fsSL {portal_raw}/connect/install.sh | sh -s -- <download-token>
#   curl -fsSL {portal_raw}/connect/install.sh | sh -s -- --check <client>
#   curl -fsSL {portal_raw}/connect/install.sh | sh -s -- --uninstall <client>|all [--yes]
# Existing files are merged, never replaced, after a timestamped backup; files holding a key get
# mode 0600. Needs python3 (preinstalled on Linux; on macOS: xcode-select --install).
set -eu
PORTAL={portal}
GATEWAY={gateway}
usage() {{
{usage}
  exit 2
}}
if ! command -v python3 >/dev/null 2>&1; then
{no_python}
  exit 1
fi
umask 077
tmp=$(mktemp -d 2>/dev/null || mktemp -d -t teamgw)
trap 'rm -rf "$tmp"' EXIT INT TERM
cat > "$tmp/install.py" <<'TEAMGW_PY'
{python}TEAMGW_PY
TEAM_GATEWAY_PROBES={probes}
TEAM_GATEWAY_MESSAGES={messages}
TEAM_GATEWAY_UNINSTALL={uninstall}
export TEAM_GATEWAY_PROBES TEAM_GATEWAY_MESSAGES TEAM_GATEWAY_UNINSTALL
case "${{1:-}}" in
  --check) [ $# -ge 2 ] || usage; python3 "$tmp/install.py" check "$GATEWAY" "$2" ;;
  --uninstall) [ $# -ge 2 ] || usage; shift; python3 "$tmp/install.py" uninstall "$GATEWAY" "$@" ;;
  ''|-h|--help) usage ;;
  *) python3 "$tmp/install.py" install "$PORTAL" "$1" ;;
esac
"""
