"""Team gateway installer and doctor, run on the developer's machine by install.sh.

Standard library only (Python 3.8+): it fetches one bundle with a single-use download token and
merges each file into what is already there (never dropping unrelated settings), after a
timestamped backup; files holding a key get mode 0600. `check` is the doctor: it reads the
installed files and asks the gateway whether key, models, base URL and context windows agree.
"""

import datetime
import json
import os
import platform
import re
import sys
import tempfile
import urllib.error
import urllib.request

BEGIN = "# >>> team-gateway models (managed by the portal installer; edits here are replaced)"
END = "# <<< team-gateway models"


def say(symbol, text):
    print(f"{symbol} {text}")


def expand(file):
    path = file.get("macos_path") if platform.system() == "Darwin" else file["path"]
    return os.path.expanduser(path or file["path"])


# --- merges: each takes the existing text (or None) and our text, returns the new text ----------


def merge_json(existing, ours, remove=()):
    new = json.loads(ours)
    if existing is None or not existing.strip():
        data = new
    else:
        data = json.loads(existing)  # raises on JSONC: the caller leaves such a file alone
        if not isinstance(data, dict):
            raise ValueError("the existing file is not a JSON object")
        deep_merge(data, new)
    for dotted in remove:
        drop(data, dotted.split("."), keep=new)
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def deep_merge(into, new):
    for k, v in new.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            deep_merge(into[k], v)
        else:
            into[k] = v


def drop(data, parts, keep):
    """Delete a dotted key unless our own file sets it."""
    for p in parts[:-1]:
        if not isinstance(data, dict) or p not in data:
            return
        data, keep = data[p], keep.get(p, {}) if isinstance(keep, dict) else {}
    if isinstance(data, dict) and parts[-1] in data and not (isinstance(keep, dict) and parts[-1] in keep):
        del data[parts[-1]]


_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_ASSIGN = re.compile(r"^\s*([A-Za-z0-9_\-\"'.]+)\s*=")


def _toml_split(text):
    """(top-level lines, [(table name, lines)]) — enough structure to replace keys and tables."""
    top, tables, current = [], [], None
    for line in text.splitlines():
        m = _HEADER.match(line)
        if m and not line.lstrip().startswith("#"):
            current = (m.group(1).replace('"', "").replace("'", "").replace(" ", ""), [line])
            tables.append(current)
        elif current is None:
            top.append(line)
        else:
            current[1].append(line)
    return top, tables


def merge_toml(existing, ours):
    if existing is None or not existing.strip():
        return ours
    our_top, our_tables = _toml_split(ours)
    their_top, their_tables = _toml_split(existing)
    our_keys = {m.group(1).strip("\"'") for m in map(_ASSIGN.match, our_top) if m}
    our_names = {name for name, _ in our_tables}

    def ours_or_below(name):
        return any(name == n or name.startswith(n + ".") for n in our_names)

    kept_top = [ln for ln in their_top if not ((m := _ASSIGN.match(ln)) and m.group(1).strip("\"'") in our_keys)]
    out = [ln for ln in our_top if ln.strip()] + [""] + kept_top
    for name, lines in their_tables:
        if not ours_or_below(name):
            out += lines
    for _, lines in our_tables:
        out += ["", *lines]
    text = "\n".join(out).strip("\n") + "\n"
    text = re.sub(r"\n{3,}", "\n\n", text)
    try:
        import tomllib  # Python 3.11+

        tomllib.loads(text)
    except ImportError:
        pass
    return text


def merge_dotenv(existing, ours):
    if existing is None:
        return ours
    names = set()
    for ln in ours.splitlines():
        m = re.match(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=", ln)
        if m:
            names.add(m.group(1))
    kept = []
    for ln in existing.splitlines():
        m = re.match(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=", ln)
        if not (m and m.group(1) in names) and not ln.startswith("# Team gateway config"):
            kept.append(ln)
    body = "\n".join(kept).rstrip("\n")
    return (body + "\n" if body else "") + ours


def _our_items(ours):
    """The model items of our config.yaml, at indent 0."""
    lines = ours.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.rstrip() == "models:") + 1
    items = []
    for ln in lines[start:]:
        if ln and not ln.startswith((" ", "-", "#")):
            break
        items.append(ln)
    return items


def merge_yaml_models(existing, ours):
    """Put our models between marker comments in the top-level `models:` list; nothing else changes."""
    if existing is None or not existing.strip():
        return ours
    lines = [ln for ln in existing.splitlines()]
    # Drop our previous block.
    if any(ln.strip() == BEGIN for ln in lines):
        out, skipping = [], False
        for ln in lines:
            if ln.strip() == BEGIN:
                skipping = True
                continue
            if skipping and ln.strip() == END:
                skipping = False
                continue
            if not skipping:
                out.append(ln)
        lines = out
    items = _our_items(ours)
    idx = next((i for i, ln in enumerate(lines) if re.match(r"^models:\s*(#.*)?$", ln)), None)
    if idx is None:
        if any(re.match(r"^models:", ln) for ln in lines):
            raise ValueError("the top-level models list is written inline; add the models by hand")
        block = ["models:", BEGIN, *items, END]
        return "\n".join([*lines, *block]).rstrip("\n") + "\n"
    # Indent of the existing list items (default two spaces).
    indent = 2
    for ln in lines[idx + 1 :]:
        if ln.strip() and not ln.lstrip().startswith("#"):
            m = re.match(r"^(\s*)-", ln)
            if m:
                indent = len(m.group(1))
            break
    pad = " " * indent
    block = [pad + BEGIN] + [(pad + ln) if ln else ln for ln in items] + [pad + END]
    new = lines[: idx + 1] + block + lines[idx + 1 :]
    return "\n".join(new).rstrip("\n") + "\n"


MERGES = {
    "json": lambda old, f: merge_json(old, f["content"], f.get("remove", ())),
    "toml": lambda old, f: merge_toml(old, f["content"]),
    "dotenv": lambda old, f: merge_dotenv(old, f["content"]),
    "yaml-models": lambda old, f: merge_yaml_models(old, f["content"]),
}


def write_file(path, text, secret):
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".team-gateway-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        if secret:
            os.chmod(tmp, 0o600)
        elif os.path.exists(path):
            os.chmod(tmp, os.stat(path).st_mode & 0o777)
        else:
            os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def install(bundle, stamp=None):
    stamp = stamp or datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    failures = 0
    for f in bundle["files"]:
        path = expand(f)
        old = None
        if os.path.exists(path):
            with open(path, encoding="utf-8") as fh:
                old = fh.read()
        try:
            text = MERGES[f["merge"]](old, f)
        except Exception as exc:  # never clobber a file we cannot read
            failures += 1
            say("!", f"{path}: left unchanged ({exc}). Copy the {f['name']} shown on the portal page by hand.")
            continue
        if old is not None:
            backup = f"{path}.bak-{stamp}"
            with open(backup, "w", encoding="utf-8") as fh:
                fh.write(old)
            os.chmod(backup, 0o600)
        write_file(path, text, f.get("secret", False))
        say("✓", f"{path}" + (f" (backup: {os.path.basename(path)}.bak-{stamp})" if old is not None else ""))
    key = bundle.get("key")
    if key:
        say("✓", f"key {key['name']} ({key['masked']}) minted for this machine; revoke it on the portal if lost")
    for c in bundle.get("commands", []):
        say("→", f"{c['label']}: {c['text']}")
    for n in bundle.get("notes", []):
        say("·", n)
    say("·", f"config version {bundle['version']}")
    return 1 if failures else 0


def fetch_bundle(portal, token):
    req = urllib.request.Request(  # noqa: S310 - the portal's own URL
        portal.rstrip("/") + "/api/client-configs/bundle/",
        data=json.dumps({"token": token}).encode(),
        headers={"Content-Type": "application/json", "Accept": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310 - the portal's own URL
            return json.loads(resp.read().decode())
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:300]
        raise SystemExit(
            f"✗ the portal refused the download token ({exc.code}): {detail}\n"
            "  Download tokens work once and for 10 minutes: get a new command from the portal."
        ) from None


# --- doctor ------------------------------------------------------------------------------------


def walk(data, path):
    """Values at a dotted path; `*` iterates; `.` is the root. Yields (key, value) pairs."""
    if path in ("", "."):
        yield "", data
        return
    current = [("", data)]
    for part in path.split("."):
        nxt = []
        for _, node in current:
            if part == "*":
                if isinstance(node, dict):
                    nxt += list(node.items())
                elif isinstance(node, list):
                    nxt += [(str(i), v) for i, v in enumerate(node)]
            elif isinstance(node, dict) and part in node:
                nxt.append((part, node[part]))
        current = nxt
    yield from current


def one(data, path):
    return next((v for _, v in walk(data, path)), None) if path else None


def parse_yaml_block(text):
    """Our marker block (or whole generated file) as a list of model dicts, without PyYAML."""
    lines = text.splitlines()
    if any(ln.strip() == BEGIN for ln in lines):
        start = next(i for i, ln in enumerate(lines) if ln.strip() == BEGIN)
        end = next((i for i, ln in enumerate(lines) if ln.strip() == END), len(lines))
        lines = lines[start + 1 : end]
    models, current = [], None
    for ln in lines:
        m = re.match(r"^\s*-\s+name:\s*(.*)$", ln)
        if m:
            current = {"name": m.group(1).strip(), "defaultCompletionOptions": {}}
            models.append(current)
            continue
        m = re.match(r"^\s+(model|apiBase|apiKey|contextLength):\s*(.*)$", ln)
        if m and current is not None:
            value = m.group(2).strip().strip("'\"")
            if m.group(1) == "contextLength":
                current["defaultCompletionOptions"]["contextLength"] = int(value)
            else:
                current[m.group(1)] = value
    return {"models": models}


def parse_toml_simple(text):
    """Tables and `key = "string" | int | bool` lines: enough for the file we wrote, on Python < 3.11."""
    data, node = {}, None
    node = data
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _HEADER.match(line)
        if m:
            node = data
            for part in m.group(1).replace('"', "").split("."):
                node = node.setdefault(part.strip(), {})
            continue
        m = re.match(r'^([A-Za-z0-9_\-"]+)\s*=\s*(.+?)\s*$', line)
        if m:
            key, raw = m.group(1).strip('"'), m.group(2)
            if raw.startswith('"'):
                value = raw[1:].split('"', 1)[0]
            elif raw in ("true", "false"):
                value = raw == "true"
            else:
                try:
                    value = int(raw)
                except ValueError:
                    value = raw
            node[key] = value
    return data


def load(path, fmt):
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    if fmt == "json":
        return json.loads(text)
    if fmt == "toml":
        try:
            import tomllib  # Python 3.11+
        except ImportError:
            return parse_toml_simple(text)
        return tomllib.loads(text)
    if fmt == "yaml":
        return parse_yaml_block(text)
    raise ValueError(fmt)


def dotenv_value(path, name):
    try:
        with open(os.path.expanduser(path), encoding="utf-8") as fh:
            for ln in fh:
                m = re.match(r"^\s*(?:export\s+)?" + re.escape(name) + r"=(.*)$", ln.strip())
                if m:
                    return m.group(1).strip().strip("'\"")
    except OSError:
        return None
    return None


def env_key(name):
    return (
        os.environ.get(name)
        or dotenv_value("~/.config/team-gateway/env", name)
        or dotenv_value("~/.continue/.env", name)
    )


def resolve_key(value):
    if not isinstance(value, str) or not value:
        return None
    m = re.match(r"^\$\{\{\s*secrets\.([A-Za-z0-9_]+)\s*\}\}$", value) or re.match(r"^\{env:([A-Za-z0-9_]+)\}$", value)
    if m:
        return env_key(m.group(1))
    if value.startswith("PASTE-"):
        return None
    return value


def server_models(gateway, key):
    req = urllib.request.Request(  # noqa: S310 - the team gateway
        gateway + "/v1/models", headers={"Authorization": "Bearer " + key, "Accept": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=20) as resp:  # noqa: S310 - the team gateway
            return resp.status, json.loads(resp.read().decode())
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except (urllib.error.URLError, OSError) as exc:
        return 0, str(exc)


def context_of(item):
    for field in ("context_window", "max_model_len", "context_length", "max_context_length"):
        if isinstance(item.get(field), int):
            return item[field]
    return None


def check(gateway, probes, key_override=None):
    gateway = gateway.rstrip("/")
    problems, key, configured = 0, key_override, {}
    host = re.sub(r"^https?://", "", gateway).split("/")[0].lower()
    for p in probes:
        path = os.path.expanduser(p["file"])
        if not os.path.exists(path):
            say("✗", f"{p['file']}: not found (run the installer first)")
            problems += 1
            continue
        try:
            data = load(path, p["format"])
        except Exception as exc:
            say("✗", f"{p['file']}: cannot be read ({exc.__class__.__name__}: {exc})")
            problems += 1
            continue
        bases = [v for _, v in walk(data, p["base_url"]) if isinstance(v, str)]
        ours = [b for b in bases if re.sub(r"^https?://", "", b).split("/")[0].lower() == host]
        if not ours:
            say("✗", f"{p['file']}: no base URL points at {gateway} (found: {', '.join(bases) or 'none'})")
            problems += 1
        for b in ours:
            b = b.rstrip("/")
            right = b.endswith("/v1") if p["base_shape"] == "v1" else not b.endswith("/v1")
            want = "ending in /v1" if p["base_shape"] == "v1" else "without /v1 (the client adds /v1/messages)"
            if right:
                say("✓", f"{p['file']}: base URL {b} has the right shape")
            else:
                say("✗", f"{p['file']}: base URL {b} should be {want}")
                problems += 1
            break
        if key is None and p.get("key"):
            key = next((k for k in map(resolve_key, (v for _, v in walk(data, p["key"]))) if k), None)
        if key is None and p.get("key_env"):
            name = one(data, p["key_env"])
            key = env_key(name) if isinstance(name, str) else None
        if p.get("models"):
            for name_key, item in walk(data, p["models"]):
                if not isinstance(item, dict):
                    continue
                name = name_key if p["model_name"] == "$key" else one(item, p["model_name"])
                if not isinstance(name, str) or not name:
                    continue
                ctx = one(item, p["model_context"]) if p.get("model_context") else None
                try:
                    configured[name] = int(ctx) if ctx is not None else None
                except (TypeError, ValueError):
                    configured[name] = None
    if key is None:
        key = env_key("TEAM_GATEWAY_API_KEY") or os.environ.get("ANTHROPIC_AUTH_TOKEN")
    if not key:
        say("✗", "no key found in the files or in TEAM_GATEWAY_API_KEY")
        return 1
    status, body = server_models(gateway, key)
    if status == 0:
        say("✗", f"cannot reach {gateway}: {body}")
        return 1
    if status in (401, 403):
        say("✗", f"the gateway rejected the key ({status}): it is wrong, revoked or expired")
        return 1
    if status != 200 or not isinstance(body, dict):
        say("✗", f"GET {gateway}/v1/models answered {status}")
        return 1
    say("✓", "key valid")
    served = {item.get("id"): item for item in body.get("data", []) if isinstance(item, dict)}
    for name, ctx in sorted(configured.items()):
        if name not in served:
            say("✗", f"model {name}: not available to this key (available: {', '.join(sorted(served)) or 'none'})")
            problems += 1
            continue
        real = context_of(served[name])
        if ctx is None or real is None:
            say("✓", f"model {name}: reachable")
        elif ctx == real:
            say("✓", f"model {name}: reachable, context window {ctx} agrees with the server")
        else:
            say("✗", f"model {name}: context window {ctx} in the file, {real} on the server: download again")
            problems += 1
    if not configured:
        say("·", f"models on the server for this key: {', '.join(sorted(served)) or 'none'}")
    say("✓" if not problems else "✗", "all checks passed" if not problems else f"{problems} problem(s)")
    return 1 if problems else 0


def main(argv):
    if len(argv) >= 3 and argv[0] == "install":
        bundle = fetch_bundle(argv[1], argv[2])
        return install(bundle)
    if len(argv) >= 3 and argv[0] == "check":
        probes = json.loads(os.environ["TEAM_GATEWAY_PROBES"])
        client = argv[2]
        if client not in probes:
            print(f"unknown client {client!r}; one of: {', '.join(sorted(probes))}", file=sys.stderr)
            return 2
        return check(argv[1], probes[client], os.environ.get("TEAM_GATEWAY_CHECK_KEY") or None)
    print("usage: install.py install <portal> <token> | check <gateway> <client>", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
