"""Team gateway installer and doctor, run on the developer's machine by install.sh.

Standard library only (Python 3.8+): it fetches one bundle with a single-use download token and
merges each file into what is already there (never dropping unrelated settings), after a
timestamped backup; files holding a key get mode 0600. `check` is the doctor: it reads the
installed files and asks the gateway whether key, models, base URL and context windows agree.
"""

import datetime
import glob
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

OPEN, CLOSE = "# >>> team-gateway ", "# <<< team-gateway "


def begin_marker(key):
    """The comment opening our block in the YAML list `key` (Continue's `models:`, `mcpServers:`)."""
    return f"{OPEN}{key} (managed by the portal installer; edits here are replaced)"


def end_marker(key):
    return CLOSE + key


BEGIN, END = begin_marker("models"), end_marker("models")
OURS_COMMENT = "# Team gateway"
CCSWITCH_DB = "~/.cc-switch/cc-switch.db"
CCSWITCH_ID = "teamgw"  # our provider's id in CC Switch's database, the same on every install
CCSWITCH_NAME = "Team Gateway"  # clients/base.py PROVIDER_NAME (this file runs alone on the developer's machine)
CCSWITCH_COLUMNS = {
    "id",
    "app_type",
    "name",
    "settings_config",
    "website_url",
    "meta",
    "is_current",
    "created_at",
}  # our version stamp and notes: replaced on every install, never piled up


def say(symbol, text):
    print(f"{symbol} {translate(text)}")


def message_patterns():
    """The portal's {English template: translation} table (TEAM_GATEWAY_MESSAGES, in the developer's
    language) as (regex, translation) pairs, the most specific template first."""
    table = json.loads(os.environ.get("TEAM_GATEWAY_MESSAGES") or "{}")
    out = []
    for template, translated in table.items():
        parts = re.split(r"\{(\w+)\}", template)
        regex = "".join(re.escape(p) if i % 2 == 0 else f"(?P<{p}>.+?)" for i, p in enumerate(parts))
        out.append((len("".join(parts[::2])), re.compile(regex + r"\Z", re.S), translated))
    return [(r, t) for _, r, t in sorted(out, key=lambda x: -x[0])]


def translate(text):
    """`text` in the developer's language when it is one of the portal's templates, else as it is."""
    global PATTERNS
    if PATTERNS is None:
        PATTERNS = message_patterns()
    for regex, translated in PATTERNS:
        m = regex.match(text)
        if m:
            try:
                return translated.format(**m.groupdict())
            except (KeyError, IndexError, ValueError):
                return text
    return text


PATTERNS = None


def expand(file):
    path = file.get("macos_path") if platform.system() == "Darwin" else file["path"]
    return os.path.expanduser(path or file["path"])


# --- JSONC: JSON with comments and trailing commas (Zed's and VS Code's settings.json) -----------
# Every JSON file is read as JSONC and edited in place: a merge computes the new data as for any JSON
# file, then edit_json rewrites only the members whose value changed (added at the end of their
# object, removed, or their value replaced); comments, formatting, the user's entries and trailing
# commas stay byte for byte, so uninstall after install gives the file back as it was. install.ps1
# mirrors these functions line by line (ConvertFrom-Jsonc, Edit-Jsonc).


def jsonc_error(text, at, what):
    line = text.count("\n", 0, at) + 1
    column = at - (text.rfind("\n", 0, at) + 1) + 1
    return ValueError(f"not JSON, even with comments: line {line} column {column}: {what}")


def jsonc_tokens(text):
    """[(kind, start, end)]: kind is one of `{}[]:,`, "s" (a string) or "v" (a number, true, false or
    null); whitespace, // and /* */ comments and a leading byte order mark are skipped."""
    tokens, i, n = [], 0, len(text)
    if text.startswith("\ufeff"):
        i = 1
    while i < n:
        c = text[i]
        if c in " \t\r\n":
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                raise jsonc_error(text, i, "a /* comment is not closed")
            i = j + 2
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"' and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            if j >= n or text[j] != '"':
                raise jsonc_error(text, i, "a string is not closed on its line")
            tokens.append(("s", i, j + 1))
            i = j + 1
        elif c in "{}[]:,":
            tokens.append((c, i, i + 1))
            i += 1
        else:
            j = i
            while j < n and (text[j].isalnum() or text[j] in "+-."):
                j += 1
            if j == i:
                raise jsonc_error(text, i, f"unexpected {c!r}")
            tokens.append(("v", i, j))
            i = j
    return tokens


def jsonc_value(text, tokens, i):
    """(node, index of the token after it) for the value at tokens[i]. A node is {"kind", "start",
    "end"}; an object's or array's has "members": [(key or None, start, value node, comma offset or -1)]."""
    if i >= len(tokens):
        raise jsonc_error(text, len(text), "the text ends where a value should be")
    kind, start, end = tokens[i]
    if kind in ("s", "v"):
        return {"kind": kind, "start": start, "end": end}, i + 1
    if kind not in ("{", "["):
        raise jsonc_error(text, start, f"expected a value, found {kind!r}")
    close = "}" if kind == "{" else "]"
    node = {"kind": kind, "start": start, "end": -1, "members": []}
    i += 1
    while True:
        if i >= len(tokens):
            raise jsonc_error(text, len(text), f"{close!r} is missing")
        if tokens[i][0] == close:
            node["end"] = tokens[i][2]
            return node, i + 1
        key, at = None, tokens[i][1]
        if kind == "{":
            if tokens[i][0] != "s":
                raise jsonc_error(text, at, "expected a property name in double quotes")
            key = json.loads(text[tokens[i][1] : tokens[i][2]])
            if i + 1 >= len(tokens) or tokens[i + 1][0] != ":":
                raise jsonc_error(text, tokens[i][2], "expected ':' after the property name")
            i += 2
        value, i = jsonc_value(text, tokens, i)
        comma = -1
        if i < len(tokens) and tokens[i][0] == ",":
            comma = tokens[i][1]
            i += 1
        elif i < len(tokens) and tokens[i][0] != close:
            raise jsonc_error(text, tokens[i][1], f"expected ',' or {close!r}")
        node["members"].append((key, at, value, comma))


def jsonc_parse(text):
    """(root node, the data): the structure of JSONC text, and what it holds, read by json.loads from
    the same text with its comments, trailing commas and byte order mark blanked out."""
    tokens = jsonc_tokens(text)
    root, i = jsonc_value(text, tokens, 0)
    if i < len(tokens):
        raise jsonc_error(text, tokens[i][1], "more text after the end of the JSON value")
    plain = [c if c == "\n" else " " for c in text]
    for k, (kind, start, end) in enumerate(tokens):
        if not (kind == "," and k + 1 < len(tokens) and tokens[k + 1][0] in ("}", "]")):
            plain[start:end] = text[start:end]
    try:
        return root, json.loads("".join(plain))
    except ValueError as exc:
        raise ValueError(f"not JSON, even with comments: {exc}") from None


def jsonc_loads(text):
    return jsonc_parse(text)[1]


def same(a, b):
    """Equal JSON values (key order aside; true is not 1)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(a[i], b[i]) for i in range(len(a)))
    return type(a) is type(b) and a == b


def line_start(text, i):
    return text.rfind("\n", 0, i) + 1


def line_end(text, i):
    j = text.find("\n", i)
    return len(text) if j < 0 else j


def indent_at(text, start):
    """The spaces and tabs that open the line starting at `start`."""
    j = start
    while j < len(text) and text[j] in " \t":
        j += 1
    return text[start:j]


def blank(s):
    return s.strip(" \t\r\n") == ""


def jsonc_layout(text, root):
    """(newline, indent unit) of a file: CRLF if it has one; the unit is what the first object
    written one member a line indents its members by more than its own line (else two spaces)."""
    newline = "\r\n" if "\r\n" in text else "\n"
    stack = [root]
    while stack:
        node = stack.pop(0)
        if node["kind"] not in ("{", "["):
            continue
        if node["kind"] == "{" and node["members"]:
            at = node["members"][0][1]
            ls = line_start(text, at)
            outer = indent_at(text, line_start(text, node["start"]))
            inner = text[ls:at]
            if blank(inner) and len(inner) > len(outer) and inner.startswith(outer):
                return newline, inner[len(outer) :]
        stack += [m[2] for m in node["members"]]
    return newline, "  "


def jsonc_dump(value, indent, unit, newline):
    """`value` as json.dumps writes it with `unit`, its lines after the first indented by `indent`;
    on one line when `unit` is None."""
    if unit is None:
        return json.dumps(value, ensure_ascii=False)
    return json.dumps(value, indent=unit, ensure_ascii=False).replace("\n", newline + indent)


def jsonc_find(root, path):
    """The node at a path of keys (the last member of a name, as json.loads keeps the last)."""
    node = root
    for key in path:
        node = [m for m in node["members"] if m[0] == key][-1][2]
    return node


def jsonc_remove(text, path, key):
    """Remove the last member `key` of the object at `path`: its whole lines when it has them to
    itself, else only its text; the comma before it when it was the last and had none, and the
    object's blank body when it is left empty (`{}`)."""
    root, _ = jsonc_parse(text)
    node = jsonc_find(root, path)
    members = node["members"]
    k = max(i for i, m in enumerate(members) if m[0] == key)
    _, at, value, comma = members[k]
    end = comma + 1 if comma >= 0 else value["end"]
    ls, le = line_start(text, at), line_end(text, end)
    rest = text[end:le].strip(" \t\r")
    last = k == len(members) - 1
    if blank(text[ls:at]) and (rest == "" or rest.startswith("//")):
        cut = (ls, min(le + 1, len(text)))
    elif last:
        s = at
        while s > 0 and text[s - 1] in " \t":
            s -= 1
        cut = (s, end)
    else:
        e = end
        while e < len(text) and text[e] in " \t":
            e += 1
        cut = (at, e)
    text = text[: cut[0]] + text[cut[1] :]
    if last and comma < 0 and k > 0 and members[k - 1][3] >= 0:
        before = members[k - 1][3]
        text = text[:before] + text[before + 1 :]
    if len(members) == 1:
        node = jsonc_find(jsonc_parse(text)[0], path)
        body = text[node["start"] + 1 : node["end"] - 1]
        if body and blank(body):
            text = text[: node["start"] + 1] + text[node["end"] - 1 :]
    return text


def jsonc_add(text, path, key, value):
    """Add the member `key` at the end of the object at `path`, in the file's style: on lines of its
    own at the members' indent (a trailing comma if the last member has one), else inline."""
    root, _ = jsonc_parse(text)
    newline, unit = jsonc_layout(text, root)
    node = jsonc_find(root, path)
    members = node["members"]
    close = node["end"] - 1
    cls = line_start(text, close)
    name = json.dumps(key, ensure_ascii=False) + ": "
    last = members[-1] if members else None
    if blank(text[cls:close]) and cls > node["start"]:
        first = members[0][1] if members else -1
        if members and blank(text[line_start(text, first) : first]):
            indent = text[line_start(text, first) : first]
        else:
            indent = indent_at(text, cls) + unit
        comma = "," if last is not None and last[3] >= 0 else ""
        line = indent + name + jsonc_dump(value, indent, unit, newline) + comma + newline
        text = text[:cls] + line + text[cls:]
        if last is not None and last[3] < 0:
            text = text[: last[2]["end"]] + "," + text[last[2]["end"] :]
    elif last is None and blank(text[node["start"] + 1 : close]):
        outer = indent_at(text, line_start(text, node["start"]))
        indent = outer + unit
        body = newline + indent + name + jsonc_dump(value, indent, unit, newline) + newline + outer
        text = text[: node["start"] + 1] + body + text[close:]
    elif last is None:
        at = node["start"] + 1
        text = text[:at] + name + jsonc_dump(value, "", None, newline) + text[at:]
    elif last[3] >= 0:
        at = last[3] + 1
        text = text[:at] + " " + name + jsonc_dump(value, "", None, newline) + "," + text[at:]
    else:
        at = last[2]["end"]
        text = text[:at] + ", " + name + jsonc_dump(value, "", None, newline) + text[at:]
    return text


def jsonc_set(text, path, key, value):
    """Replace the value of the last member `key` of the object at `path`."""
    root, _ = jsonc_parse(text)
    newline, unit = jsonc_layout(text, root)
    _, at, node, _ = [m for m in jsonc_find(root, path)["members"] if m[0] == key][-1]
    ls = line_start(text, at)
    own_line = blank(text[ls:at])
    new = jsonc_dump(value, text[ls:at], unit if own_line else None, newline)
    return text[: node["start"]] + new + text[node["end"] :]


def jsonc_edit_members(text, path, old, new):
    for key in [k for k in old if k not in new]:
        text = jsonc_remove(text, path, key)
    for key, value in new.items():
        if key not in old:
            text = jsonc_add(text, path, key, value)
        elif same(old[key], value):
            continue
        elif isinstance(old[key], dict) and isinstance(value, dict):
            text = jsonc_edit_members(text, [*path, key], old[key], value)
        else:
            text = jsonc_set(text, path, key, value)
    return text


def edit_json(text, new):
    """`text` (JSON or JSONC) edited so that it reads as the object `new`: only the members whose
    value changed are rewritten; every other byte stays. Raises when the text is not JSONC."""
    old = jsonc_loads(text)
    if not isinstance(old, dict):
        raise ValueError("the existing file is not a JSON object")
    edited = jsonc_edit_members(text, [], old, new)
    if not same(jsonc_loads(edited), new):  # never write what would not read back as intended
        raise ValueError("the file could not be edited without disturbing it")
    return edited


# --- merges: each takes the existing text (or None) and our text, returns the new text ----------


def merge_json(existing, ours, remove=(), replace=(), lists=(), owned=()):
    """Deep-merge our object into theirs. `replace`: dotted keys whose value ours replaces whole (our
    model catalogues, so a removed model does not linger). `lists`: "path:id:base" lists shared with
    the user's entries; ours replace theirs with the same id or base URL, the rest stay after ours.
    `owned`: "path.prefix" — the entries of an object named with our prefix (our MCP servers) are
    dropped first, so one no longer sent disappears; the user's own entries stay. An existing file
    may be JSONC: edit_json writes only what changed into it."""
    new = json.loads(ours)
    if existing is None or not existing.strip():
        data = new
        old = {}
    else:
        data = jsonc_loads(existing)  # raises on a file that is not JSON even with comments
        if not isinstance(data, dict):
            raise ValueError("the existing file is not a JSON object")
        old = jsonc_loads(existing)
        drop_owned(data, owned)
        deep_merge(data, new)
    for dotted in replace:
        value = one(new, dotted)
        if value is not None:
            put(data, dotted.split("."), value)
    for spec in lists:
        dotted, id_key, base_key = spec.split(":")
        ours_list = one(new, dotted)
        theirs = one(old, dotted)
        if not isinstance(ours_list, list):
            continue
        ids = {i.get(id_key) for i in ours_list if isinstance(i, dict)}
        bases = {i.get(base_key) for i in ours_list if isinstance(i, dict) and i.get(base_key)}
        kept = [
            i
            for i in (theirs if isinstance(theirs, list) else [])
            if not (isinstance(i, dict) and (i.get(id_key) in ids or i.get(base_key) in bases))
        ]
        put(data, dotted.split("."), ours_list + kept)
    for dotted in remove:
        drop(data, dotted.split("."), keep=new)
    if existing is None or not existing.strip():
        return json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    return edit_json(existing, data)


def put(data, parts, value):
    for p in parts[:-1]:
        if not isinstance(data.get(p), dict):
            data[p] = {}
        data = data[p]
    data[parts[-1]] = value


def deep_merge(into, new):
    for k, v in new.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            deep_merge(into[k], v)
        else:
            into[k] = v


def owned_entries(data, owned):
    """(setting `path.name`, the object holding it, its name) for each entry named with our prefix in
    each owned object ("mcpServers.teamgw-")."""
    for spec in owned:
        dotted, prefix = spec.rsplit(".", 1) if "." in spec else ("", spec)
        node = one(data, dotted) if dotted else data
        if isinstance(node, dict):
            for name in [k for k in node if k.startswith(prefix)]:
                yield f"{dotted}.{name}".lstrip("."), node, name


def drop_owned(data, owned, kept=()):
    """Delete the entries named with our prefix from each owned object ("mcpServers.teamgw-"), but
    those in `kept` (ours the user changed since the install)."""
    for setting, node, name in list(owned_entries(data, owned)):
        if setting not in kept:
            del node[name]


def list_entries(data, lists, gateway):
    """(setting `path[id]`, entry) for each entry of ours (its base URL on `gateway`) in each shared
    list ("path:id:base")."""
    for spec in lists:
        dotted, id_key, base_key = spec.split(":")
        items = one(data, dotted)
        for item in items if isinstance(items, list) else ():
            if isinstance(item, dict) and str(item.get(base_key, "")).startswith(gateway):
                yield f"{dotted}[{item.get(id_key)}]", item


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


def _toml_top(our_top, their_top):
    """Our top-level lines, then theirs without the keys we set and without our old comments."""
    our_keys = {m.group(1).strip("\"'") for m in map(_ASSIGN.match, our_top) if m}
    kept = [
        ln
        for ln in their_top
        if not ((m := _ASSIGN.match(ln)) and m.group(1).strip("\"'") in our_keys) and not ln.startswith(OURS_COMMENT)
    ]
    return [ln for ln in our_top if ln.strip()] + [""] + kept


def _ours_or_below(name, names, owned):
    """A table we write (or one nested in it), or one named with an owned prefix (our MCP servers)."""
    return any(name == n or name.startswith(n + ".") for n in names) or any(name.startswith(p) for p in owned)


def _owned_table(name, owned):
    """The setting an owned table is, or is nested in (`[mcp_servers.teamgw-docs]`), or None."""
    prefix = next((p for p in owned if name.startswith(p)), None)
    return None if prefix is None else f"[{prefix}{name[len(prefix) :].split('.')[0]}]"


def merge_toml(existing, ours, owned=()):
    if existing is None or not existing.strip():
        return ours
    our_top, our_tables = _toml_split(ours)
    their_top, their_tables = _toml_split(existing)
    our_names = {name for name, _ in our_tables}

    def ours_or_below(name):
        return _ours_or_below(name, our_names, owned)

    out = _toml_top(our_top, their_top)
    for name, lines in their_tables:
        if not ours_or_below(name):
            out += lines
    for _, lines in our_tables:
        out += ["", *lines]
    text = "\n".join(out).strip("\n") + "\n"
    return _toml_checked(re.sub(r"\n{3,}", "\n\n", text))


def _toml_checked(text):
    """The merged text, after Python 3.11+ has parsed it (a merge that breaks the file raises)."""
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


STAMP = "# Team gateway config"
OUR_SUFFIX = "(team gateway)"
LLM_PREFIX = "teamgw/"  # llm's model ids we write (clients/llm_cli.py PREFIX)


def _unquote(value):
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value.split(" #", 1)[0].strip()


def _list_line(lines, key="models"):
    """The index of the line opening the top-level block list `key:`, or None."""
    return next((i for i, ln in enumerate(lines) if re.match(rf"^{key}:\s*(#.*)?$", ln)), None)


def yaml_items(lines, key="models"):
    """The items of the top-level block `key:` (Continue's `models:` and `mcpServers:` lists, Goose's
    `extensions:` mapping): [(start, end, indent, fields)], where `fields` holds the item's own scalar
    keys (name, model, apiBase, url, uri...) and `line` its 1-based first line; a mapping's child has
    its key as `name`. Enough YAML for the blocks users and the clients themselves write (block style,
    any indent); no PyYAML needed."""
    idx = _list_line(lines, key)
    if idx is None:
        return []
    items, indent, inner, mapping, i = [], None, None, False, idx + 1
    roles = None  # the column of an item's `roles:` block list while its entries are read
    while i < len(lines):
        ln = lines[i]
        body = ln.strip()
        if not body or body.startswith("#"):
            i += 1
            continue
        col = len(ln) - len(ln.lstrip(" "))
        if roles is not None and items and col >= roles and body.startswith("- ") and ":" not in body:
            items[-1][3].setdefault("roles", []).append(_unquote(body[2:].strip()))
            i += 1
            continue
        roles = None
        if indent is None:
            mapping = not body.startswith("-")
            if mapping and col == 0:
                break
            indent = col
        if col < indent or (col == indent and not mapping and not body.startswith("-")):
            break
        if col == indent:
            items.append([i, i + 1, indent, {"line": i + 1}])
            inner = None
            if mapping:
                m = re.match(r"""^(["']?)(.+?)\1:(\s|$)""", body)
                if not m:
                    break
                items[-1][3]["name"] = m.group(2)
                i += 1
                continue
        item = items[-1]
        item[1] = i + 1
        if mapping and inner is None:
            inner = col
        m = re.match(r"^(?:-\s+)?([A-Za-z_][A-Za-z0-9_]*):\s*(.*)$", body)
        own = col == inner if mapping else col == indent or col == indent + 2
        if m and m.group(1) == "roles" and own:  # Continue's roles: a block list, or a flow one
            flow = m.group(2).strip()
            if flow.startswith("["):
                item[3]["roles"] = [_unquote(r.strip()) for r in flow.strip("[]").split(",") if r.strip()]
            elif not flow:
                roles = col
        elif m and m.group(2) and own and m.group(1) not in item[3]:
            item[3][m.group(1)] = _unquote(m.group(2))
        elif m and m.group(1) in ("contextLength", "maxTokens") and m.group(2):
            item[3].setdefault(m.group(1), _unquote(m.group(2)))
            item[3].setdefault(m.group(1) + "_line", i + 1)
        i += 1
    # Trailing comments and blank lines after an item belong to what follows, not to the item.
    return [(a, b, ind, f) for a, b, ind, f in items]


def _same_base(a, b):
    return isinstance(a, str) and isinstance(b, str) and a.rstrip("/") == b.rstrip("/")


def _our_items(ours):
    """Our config.yaml's model items (at indent 0), their names and base URL."""
    lines = ours.splitlines()
    idx = _list_line(lines)
    found = yaml_items(lines)
    end = found[-1][1] if found else idx + 1
    names = {f.get("name") for _, _, _, f in found}
    base = next((f.get("apiBase") for _, _, _, f in found if f.get("apiBase")), None)
    return lines[idx + 1 : end], names, base


def marked_blocks(lines):
    """{list key: the indexes of the lines of our marked block in that list, its markers among them}."""
    out, block = {}, None  # the list whose marked block this line is in
    for i, ln in enumerate(lines):
        opening = block is None and ln.strip().startswith(OPEN)
        if opening:
            block = ln.strip()[len(OPEN) :].split(" ", 1)[0]
        if block is not None:
            out.setdefault(block, []).append(i)
            if not opening and ln.strip().startswith(CLOSE):
                block = None
    return out


def strip_marked(text, key="", stamps=True, keep=()):
    """The lines outside our marker blocks (the list `key`'s, else every list's), without our version
    lines (also those written before the markers existed) unless `stamps` is false; the lines at the
    indexes in `keep` stay (ours the user changed since the install)."""
    lines = text.splitlines()
    blocks = marked_blocks(lines)
    inside = {i for found in blocks.values() for i in found}
    gone = {i for name, found in blocks.items() if name == (key or name) for i in found} - set(keep)
    return [
        ln for i, ln in enumerate(lines) if i not in gone and not (stamps and i not in inside and ln.startswith(STAMP))
    ]


def cut_list(lines, key):
    """(`lines` without the top-level block list `key:`, that list's item lines)."""
    idx = _list_line(lines, key)
    if idx is None:
        return lines, []
    found = yaml_items(lines, key)
    end = found[-1][1] if found else idx + 1
    return lines[:idx] + lines[end:], lines[idx + 1 : end]


def merge_owned_list(text, key, prefix, items, kept=()):
    """The YAML block `key` (Continue's `mcpServers:` list, Goose's `extensions:` mapping) with our
    `items` first between its markers, at the indent of the user's own items; the items we wrote
    before go first: the marked block and any item whose name starts with `prefix` (we own those by
    name, also after the client rewrote the file without our comments). The user's own items stay; a
    header we left with no item (`mcpServers:` alone, which Continue would read as null) goes too.
    The version line is left to the merge of the rest of the file. Uninstall leaves the items named
    in `kept` (`key.name`: ours the user changed since the install) where they are, without markers."""
    lines = text.splitlines()
    keep = [i for a, b, _, f in yaml_items(lines, key) if f"{key}.{f.get('name')}" in kept for i in range(a, b)]
    lines = strip_marked(text, key, stamps=False, keep=keep)
    drop = set()
    for start, end, _, fields in yaml_items(lines, key):
        name = fields.get("name", "")
        if name.startswith(prefix) and f"{key}.{name}" not in kept:
            drop.update(range(start, end))
    lines = [ln for i, ln in enumerate(lines) if i not in drop]
    idx = _list_line(lines, key)
    empty = re.compile(rf"^{key}:\s*(\[\s*\]|\{{\s*\}})\s*(#.*)?$")
    inline = next((i for i, ln in enumerate(lines) if empty.match(ln)), None)
    if idx is None and inline is not None and items:
        lines[inline] = f"{key}:"  # an empty inline list or mapping becomes the block ours go in
        idx = inline
    if idx is None and any(re.match(rf"^{key}:", ln) for ln in lines) and items:
        raise ValueError(f"the top-level {key} list is written inline; add the team's entries by hand")
    if not items:
        if idx is not None and not yaml_items(lines, key):
            del lines[idx]
        return "\n".join(lines).rstrip("\n") + "\n"
    rest = yaml_items(lines, key)
    have = min(len(ln) - len(ln.lstrip(" ")) for ln in items if ln.strip())
    pad = " " * (rest[0][2] if rest else have)
    block = [pad + begin_marker(key), *((pad + ln[have:]) if ln.strip() else "" for ln in items), pad + end_marker(key)]
    if idx is None:
        lines = [*lines, f"{key}:"]
        idx = len(lines) - 1
    return "\n".join(lines[: idx + 1] + block + lines[idx + 1 :]).rstrip("\n") + "\n"


def split_owned(ours, owned):
    """(our text without the blocks whose items we own by name, [(key, prefix, their item lines)]);
    `owned`: "key.prefix" (Continue's `mcpServers.teamgw-`, Goose's `extensions.teamgw-`)."""
    lines, blocks = ours.splitlines(), []
    for spec in owned:
        key, prefix = spec.rsplit(".", 1)
        lines, items = cut_list(lines, key)
        blocks.append((key, prefix, items))
    return "\n".join(lines) + "\n", blocks


def merge_with_owned(merge, existing, ours, owned=()):
    """`merge` for the rest of our file, then each owned block by merge_owned_list: one shape for every
    YAML file that shares a block of named items with the user (Continue's config.yaml, Goose's)."""
    rest, blocks = split_owned(ours, owned)
    text = merge(existing, rest)
    for key, prefix, items in blocks:
        text = merge_owned_list(text, key, prefix, items)
    return text


def strip_owned_blocks(text, owned, kept=()):
    """Uninstall: the items of each owned block named like ours out (but those in `kept`), the
    user's stay."""
    for spec in owned:
        key, prefix = spec.rsplit(".", 1)
        text = merge_owned_list(text, key, prefix, [], kept)
    return text


def merge_yaml_models(existing, ours, owned=()):
    """Our models first in the top-level `models:` list (Continue uses the first one), between
    marker comments; nothing else changes. Entries we wrote before are dropped first: the marked
    block, and also unmarked ones (a file written before the markers existed, or copied from the
    page) when both their name and their base URL are ours. The user's own entries stay.
    `owned`: the lists whose items we own by name (Continue's `mcpServers.teamgw-`)."""
    return merge_with_owned(merge_models, existing, ours, owned)


def merge_models(existing, ours):
    items, names, base = _our_items(ours)
    stamp = next((ln for ln in ours.splitlines() if ln.startswith(STAMP)), None)
    if existing is None or not existing.strip():
        lines = [ln for ln in ours.splitlines() if not ln.startswith(STAMP)]
        idx = _list_line(lines)
        head = lines[: idx + 1]
        tail = lines[idx + 1 + len(items) :]
        block = [BEGIN] + ([stamp] if stamp else []) + items + [END]
        return "\n".join(head + block + tail).rstrip("\n") + "\n"
    lines = strip_marked(existing, "models")
    drop = set()
    for start, end, _, fields in yaml_items(lines):
        name = fields.get("name", "")
        if _same_base(fields.get("apiBase"), base) and (name in names or name.endswith(OUR_SUFFIX)):
            drop.update(range(start, end))
    lines = [ln for i, ln in enumerate(lines) if i not in drop]
    idx = _list_line(lines)
    if idx is None:
        if any(re.match(r"^models:", ln) for ln in lines):
            raise ValueError("the top-level models list is written inline; add the models by hand")
        block = ["models:", BEGIN, *([stamp] if stamp else []), *items, END]
        return "\n".join([*lines, *block]).rstrip("\n") + "\n"
    # Indent of the existing list items (default: none, as PyYAML and Continue write it).
    rest = yaml_items(lines)
    pad = " " * (rest[0][2] if rest else 0)
    block = [pad + BEGIN] + ([pad + stamp] if stamp else []) + [(pad + ln) if ln else ln for ln in items] + [pad + END]
    new = lines[: idx + 1] + block + lines[idx + 1 :]
    return "\n".join(new).rstrip("\n") + "\n"


def merge_yaml_keys(existing, ours, owned=()):
    """Flat YAML (Aider's .aider.conf.yml, Goose's config.yaml): our top-level keys replace theirs,
    the rest stays; `owned` blocks (Goose's `extensions.teamgw-`) are shared with the user's items."""
    return merge_with_owned(merge_flat, existing, ours, owned)


def merge_flat(existing, ours):
    if existing is None or not existing.strip():
        return ours
    body = strip_yaml_keys(existing, yaml_keys(ours))
    return ours + ("\n" + body + "\n" if body else "")


def yaml_keys(text):
    return {m.group(1) for m in (re.match(r"^([A-Za-z0-9_-]+):", ln) for ln in text.splitlines()) if m}


def strip_yaml_keys(text, keys):
    """Flat YAML without the given top-level keys (and what is nested under them) and our comments."""
    kept, skipping = [], False
    for ln in text.splitlines():
        m = re.match(r"^([A-Za-z0-9_-]+):", ln)
        if m:
            skipping = m.group(1) in keys
        elif ln.startswith(OURS_COMMENT):
            continue
        elif ln and not ln.startswith((" ", "-", "\t")):
            skipping = False
        if not skipping:
            kept.append(ln)
    return "\n".join(kept).strip("\n")


def yaml_list_items(lines):
    """The items of a top-level YAML block list (llm's extra-openai-models.yaml):
    [(start, end, indent, fields)] with each item's own scalar keys and its 1-based `line`."""
    items, indent = [], None
    for i, ln in enumerate(lines):
        body = ln.strip()
        if not body or body.startswith("#"):
            continue
        col = len(ln) - len(ln.lstrip(" "))
        if indent is None:
            if not body.startswith("-"):
                raise ValueError("the file is not a block list of models")
            indent = col
        if col < indent or (col == indent and not body.startswith("-")):
            raise ValueError(f"line {i + 1} is not part of the list of models")
        if col == indent:
            items.append([i, i + 1, indent, {"line": i + 1}])
        item = items[-1]
        item[1] = i + 1
        m = re.match(r"^(?:-\s+)?([A-Za-z_][A-Za-z0-9_]*):\s*(.*)$", body)
        if m and m.group(2) and col in (indent, indent + 2) and m.group(1) not in item[3]:
            item[3][m.group(1)] = _unquote(m.group(2))
    return [(a, b, ind, f) for a, b, ind, f in items]


def merge_yaml_list(existing, ours):
    """A file that is one top-level list (llm's extra-openai-models.yaml): our items go between
    marker comments at its end; the block we wrote before, and unmarked items named like ours
    (`teamgw/...`, copied from the page), are dropped first. The user's own items stay."""
    ours_lines = ours.rstrip("\n").splitlines()
    if existing is None or not existing.strip():
        return "\n".join([BEGIN, *ours_lines, END]) + "\n"
    if re.match(r"^\s*\[", "\n".join(ln for ln in existing.splitlines() if not ln.lstrip().startswith("#"))):
        raise ValueError("the list is written inline; add the models by hand")
    lines = strip_marked(existing)
    names = {f.get("model_id") for _, _, _, f in yaml_list_items(ours_lines)}
    drop = set()
    items = yaml_list_items(lines)
    for start, end, _, fields in items:
        if fields.get("model_id") in names or fields.get("model_id", "").startswith(LLM_PREFIX):
            drop.update(range(start, end))
    lines = [ln for i, ln in enumerate(lines) if i not in drop]
    pad = " " * (items[0][2] if items else 0)
    block = [pad + BEGIN] + [(pad + ln) if ln else ln for ln in ours_lines] + [pad + END]
    return "\n".join([*lines, *block]).strip("\n") + "\n"


# clients/base.py PROVIDER_ID, and MCP_PREFIX for the items of our MCP servers ([[mcp_servers]]).
OUR_ITEM = re.compile(r'^\s*(name|provider)\s*=\s*"teamgw(-[^"]*)?"\s*$')
ITEM_NAME = re.compile(r'^\s*name\s*=\s*"([^"]*)"')


def _toml_items(tables):
    """Tables grouped into items: a `[[x]]` header with the `[x.y]` subtables after it."""
    items = []
    for name, lines in tables:
        head = lines[0].lstrip()
        if items and not head.startswith("[[") and name.startswith(items[-1][0] + "."):
            items[-1][1].extend(lines)
        else:
            items.append((name, list(lines)))
    return items


def _toml_item(header, lines):
    """The setting an item of a list of tables is: `list.name` (`mcp_servers.teamgw-docs`,
    `models.qwen3-32b`)."""
    name = next((m.group(1) for m in map(ITEM_NAME.match, lines) if m), "")
    return f"{header}.{name}"


def merge_toml_items(existing, ours):
    """A TOML file whose lists of tables ([[providers]], [[models]]: Mistral Vibe's config.toml) hold
    the user's entries beside ours: our top-level keys replace theirs, their items that are ours
    (`name` or `provider` = "teamgw", or `name` = "teamgw-…": our [[mcp_servers]]) are dropped,
    ours are appended; every other table stays."""
    if existing is None or not existing.strip():
        return ours
    our_top, our_tables = _toml_split(ours)
    their_top, their_tables = _toml_split(existing)
    out = _toml_top(our_top, their_top)
    for _, lines in _toml_items(their_tables):
        if not any(OUR_ITEM.match(ln) for ln in lines):
            out += ["", *lines]
    for _, lines in our_tables:
        out += ["", *lines]
    return _toml_checked(re.sub(r"\n{3,}", "\n\n", "\n".join(out).strip("\n") + "\n"))


# --- files the line-based merges cannot edit safely -------------------------------------------
# The dotenv and YAML merges edit lines, not a parsed tree: a file outside the subset they read
# would be written into wrongly. Such a file is left as it is, with the line and the reason.


class Unreadable(ValueError):
    """A file whose structure the installer's line-based edits cannot be trusted on."""


DOTENV_LINE = re.compile(r"^\s*(?:export\s+)?[A-Za-z_][A-Za-z0-9_]*=(.*)$")


def dotenv_problem(text):
    """Why `text` is not plain `NAME=value` lines (quotes closed on their line), or None."""
    for n, ln in enumerate(text.splitlines(), 1):
        if not ln.strip() or ln.lstrip().startswith("#"):
            continue
        m = DOTENV_LINE.match(ln)
        if not m:
            return f"line {n}: not a NAME=value line"
        try:
            shlex.split(m.group(1), comments=True)
        except ValueError:
            return f"line {n}: a quote in the value is not closed on its line"
    return None


YAML_KEY = re.compile(r"""^("(?:[^"\\]|\\.)*"|'(?:[^']|'')*'|[^\s"'#\[\]{},][^#]*?)\s*:(?=\s|$)""")
BLOCK_SCALAR = re.compile(r"[|>][-+0-9]*\s*(#.*)?$")


def _yaml_scan(ln, depth):
    """(problem or None, the depth of open [ ] and { } at the end of `ln`, whether a block scalar
    (`|`, `>`) starts): quotes count where a scalar starts, not inside a plain one (`it's`)."""
    prev = ""  # the last character that is not a space
    i = 0
    while i < len(ln):
        c = ln[i]
        start = prev == "" or (prev in ":-?" and ln[i - 1] == " ") or (depth > 0 and prev in "[{,")
        if c == "#" and (i == 0 or ln[i - 1] in " \t"):
            break
        if c in "'\"" and start:
            j = i + 1
            while j < len(ln) and not (ln[j] == c and not (c == "'" and ln[j + 1 : j + 2] == "'")):
                j += 2 if (c == '"' and ln[j] == "\\") or (c == "'" and ln[j] == "'") else 1
            if j >= len(ln):
                return "a quoted value is not closed on its line", depth, False
            i, prev = j + 1, "x"
            continue
        if c in "[{" and (start or depth > 0):
            depth += 1
        elif c in "]}" and depth > 0:
            depth -= 1
        elif c in "|>" and start and depth == 0 and BLOCK_SCALAR.match(ln[i:]):
            return None, 0, True
        if c != " ":
            prev = c
        i += 1
    return None, depth, False


def yaml_problem(text, keys=(), mapping=True, marker=True):
    """Why the line-based YAML merges cannot be trusted on `text`, or None. They edit the top-level
    `keys` of a block mapping (a block list when not `mapping`) one line at a time, so: no tab in
    an indent, no second document (no `---` at all unless `marker`), quotes closed on their line,
    no [ ] or { } running back to the left margin, each key in `keys` once and written plainly.
    PyYAML, when this Python has it, has the last word on the syntax."""
    seen, depth, opened, block, content = {}, 0, 0, None, False
    for n, ln in enumerate(text.splitlines(), 1):
        col = len(ln) - len(ln.lstrip(" "))
        if block is not None and (not ln.strip() or col > block):
            continue  # inside a block scalar: anything goes
        block = None
        if not ln.strip() or ln.lstrip().startswith("#"):
            continue
        if "\t" in ln[: len(ln) - len(ln.lstrip(" \t"))]:
            return f"line {n}: a tab in the indent (YAML indents with spaces only)"
        if depth > 0 and col == 0:
            return f"lines {opened}-{n}: a [ ] or {{ }} value runs back to the left margin"
        if depth == 0 and col == 0:
            mark = re.match(r"^(---|\.\.\.)(\s|$)", ln)
            if mark and not (marker and mark.group(1) == "---" and not content):
                return f"line {n}: a document marker ({mark.group(1)}); only a single YAML document can be edited"
            key = YAML_KEY.match(ln)
            if mapping and not mark and not ln.startswith("- ") and ln != "-" and not key:
                return f"line {n}: not a `key: value` line"
            name = key and key.group(1).strip("'\"")
            if name in keys:
                if not re.match(rf"{re.escape(name)}:(\s|$)", ln):
                    return f"line {n}: write {name} without quotes and with the colon right after it"
                if name in seen:
                    return f"line {n}: {name} is set a second time (first on line {seen[name]}); keep one"
            if name:
                seen.setdefault(name, n)
            content = content or not mark
        before = depth
        problem, depth, starts = _yaml_scan(ln[col:], depth)
        if problem:
            return f"line {n}: {problem}"
        if before == 0 and depth > 0:
            opened = n
        if starts:
            block = col
    if depth > 0:
        return f"line {opened}: a [ or {{ is not closed"
    return _pyyaml_problem(text, mapping)


def _pyyaml_problem(text, mapping):
    try:
        import yaml  # not in the standard library: used when this Python happens to have it
    except ImportError:
        return None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)  # the structure only: custom tags stay fine
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        what = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        return f"line {mark.line + 1}: {what}" if mark else what
    want = yaml.MappingNode if mapping else yaml.SequenceNode
    if node is not None and not isinstance(node, want):
        return "the file is not a YAML mapping of keys" if mapping else "the file is not a YAML list"
    return None


def toml_problem(text):
    """Where and why `text` is not TOML, in the user's own file's lines, or None (and None on a
    Python without tomllib: the merge's own check is skipped there too). Checked before the merge,
    as an error in the merged text would name a line of that text, not of the user's file."""
    try:
        import tomllib  # Python 3.11+
    except ImportError:
        return None
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.match(r"(.*) \(at (?:line (\d+), column (\d+)|end of document)\)$", str(exc))
        if not m:
            return str(exc)
        why, line = m.group(1), int(m.group(2) or 0)
        # tomllib names an unclosed string by the newline or the end it ran into ("Illegal
        # character '\n'", "Unterminated string", 'Expected "\'"'): name the string's own line.
        if why.startswith(("Illegal character '\\n'", "Unterminated string", 'Expected "\'"', "Expected '\"'")):
            for number, column in _unclosed_strings(text):
                if not line or number == line:
                    return f"line {number} column {column}: a quoted string is not closed on its line"
        return f"line {line} column {m.group(3)}: {why}" if line else why
    return None


def _unclosed_strings(text):
    """(line, column) of each one-line TOML string that opens and is not closed on its line;
    multi-line strings (three quotes) and comments are skipped."""
    inside = None  # the delimiter of the multi-line string the line is in
    for number, line in enumerate(text.splitlines(), 1):
        i = 0
        while i < len(line):
            if inside:
                end = line.find(inside, i)
                i, inside = (len(line), inside) if end < 0 else (end + 3, None)
                continue
            c = line[i]
            if c == "#":
                break
            if c in "\"'":
                if line.startswith(c * 3, i):
                    inside, i = c * 3, i + 3
                    continue
                j = i + 1
                while j < len(line) and line[j] != c:
                    j += 2 if c == '"' and line[j] == "\\" else 1
                if j >= len(line):
                    yield number, i + 1
                    break
                i = j
            i += 1


def managed_keys(f):
    """The top-level YAML keys the merge of a bundle file or uninstall spec `f` rewrites: ours
    (yaml-keys), `models` (yaml-models), and the blocks shared by name (`owned`)."""
    keys = set(f.get("keys") or (yaml_keys(f["content"]) if f["merge"] == "yaml-keys" and "content" in f else ()))
    return keys | {o.split(".")[0] for o in f.get("owned", ())} | ({"models"} if f["merge"] == "yaml-models" else set())


def check_editable(f, text):
    """Raise Unreadable when the merge of `f` (a bundle file or uninstall spec) cannot edit `text`
    safely."""
    problem, merge = None, f["merge"]
    if merge == "json" and text.strip():
        try:
            jsonc_loads(text)
        except ValueError as exc:
            problem = str(exc)
    elif merge in ("toml", "toml-items") and text.strip():
        problem = toml_problem(text)
    elif merge == "dotenv":
        problem = dotenv_problem(text)
    elif merge in ("yaml-keys", "yaml-models", "yaml-list"):
        problem = yaml_problem(text, managed_keys(f), mapping=merge != "yaml-list", marker=merge != "yaml-keys")
    if problem:
        raise Unreadable(problem)


MERGES = {
    "json": lambda old, f: merge_json(
        old, f["content"], f.get("remove", ()), f.get("replace", ()), f.get("lists", ()), f.get("owned", ())
    ),
    "toml": lambda old, f: merge_toml(old, f["content"], f.get("owned", ())),
    "toml-items": lambda old, f: merge_toml_items(old, f["content"]),
    "dotenv": lambda old, f: merge_dotenv(old, f["content"]),
    "yaml-models": lambda old, f: merge_yaml_models(old, f["content"], f.get("owned", ())),
    "yaml-keys": lambda old, f: merge_yaml_keys(old, f["content"], f.get("owned", ())),
    "yaml-list": lambda old, f: merge_yaml_list(old, f["content"]),
    "text": lambda old, f: f["content"],  # a one-value file (llm's default_model.txt): ours
}


def read_text(path, merge):
    """A file's text: a JSON file's as it is on disk (CRLF line ends and all, so the edit keeps
    them); the others' with universal newlines, as their line-based merges expect."""
    with open(path, encoding="utf-8", newline="" if merge == "json" else None) as fh:
        return fh.read()


def write_file(path, text, secret):
    """Atomically: a temporary file beside it, then a rename; mode 0600 when it holds a key, else
    the file's own mode."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".team-gateway-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
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


def ccswitch_upsert(path, bundle, stamp):
    """Write our provider into CC Switch's database: one row per app under CCSWITCH_ID, updated in
    place on a second run (its is_current and failover flags kept), the user's providers untouched.
    Mirrors CC Switch's own save_provider (src-tauri/src/database/dao/providers.rs)."""
    conn = sqlite3.connect(path, timeout=10)
    try:
        columns = {row[1] for row in conn.execute("PRAGMA table_info(providers)")}
        missing = CCSWITCH_COLUMNS - columns
        if missing:
            raise ValueError(f"no providers table with {', '.join(sorted(missing))}: not a CC Switch 3.8+ database")
        saved = ccswitch_backup(conn, path, stamp)
        now = int(datetime.datetime.now().timestamp() * 1000)
        current = []
        with conn:
            conn.execute("BEGIN IMMEDIATE")
            for row in bundle["db_providers"]:
                app, settings = row["app_type"], json.dumps(row["settings_config"], ensure_ascii=False)
                found = conn.execute(
                    "SELECT is_current FROM providers WHERE id = ? AND app_type = ?", (CCSWITCH_ID, app)
                ).fetchone()
                if found:
                    conn.execute(
                        "UPDATE providers SET name = ?, settings_config = ?, website_url = ?"
                        " WHERE id = ? AND app_type = ?",
                        (CCSWITCH_NAME, settings, bundle["gateway"], CCSWITCH_ID, app),
                    )
                    if found[0]:
                        current.append(app)
                else:
                    conn.execute(
                        "INSERT INTO providers (id, app_type, name, settings_config, website_url, created_at, meta,"
                        " is_current) VALUES (?, ?, ?, ?, ?, ?, '{}', 0)",
                        (CCSWITCH_ID, app, CCSWITCH_NAME, settings, bundle["gateway"], now),
                    )
    finally:
        conn.close()
    return current, saved


def ccswitch_backup(conn, path, stamp):
    """Copy CC Switch's database `conn` beside `path` (mode 0600), consistent even while CC Switch
    has it open, under a name no earlier backup has (`backup_path`); returns the backup's file name."""
    name = backup_path(path, stamp)
    with open(name, "x"):  # the name is ours before sqlite writes into it
        pass
    os.chmod(name, 0o600)
    copy = sqlite3.connect(name)
    try:
        with copy:
            conn.backup(copy)
    finally:
        copy.close()
    return os.path.basename(name)


def open_links(links):
    """Hand each import link to the desktop (CC Switch registers ccswitch://); a link that could not
    be opened is printed (it carries the key: one that opened is not, so no terminal keeps it)."""
    opener = {"Darwin": ["open"], "Windows": ["cmd", "/c", "start", ""]}.get(platform.system(), ["xdg-open"])
    desktop = platform.system() != "Linux" or os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    for link in links:
        opened = False
        if shutil.which(opener[0]) and desktop:
            opened = subprocess.run([*opener, link["url"]], capture_output=True, timeout=30).returncode == 0
        if opened:
            say("✓", f"{link['label']}: import link opened in CC Switch; confirm it there")
        else:
            say("→", f"{link['label']}: open this link on this machine (it holds your key): {link['url']}")


def install_db_providers(bundle, stamp, written):
    """CC Switch: its database when it has one, else its import links; what of ours it holds then
    goes into the record `written`. Returns 1 on a failure."""
    path = os.path.expanduser(CCSWITCH_DB)
    if not os.path.exists(path):
        say("·", f"no CC Switch database at {CCSWITCH_DB} (CC Switch not installed or never started here)")
        open_links(bundle.get("links", []))
        return 0
    try:
        current, saved = ccswitch_upsert(path, bundle, stamp)
    except (sqlite3.Error, ValueError) as exc:
        say("!", f"{path}: left unchanged ({exc}); import with the links instead:")
        open_links(bundle.get("links", []))
        return 1
    written[path] = ccswitch_ours(path)
    apps = ", ".join(row["app_type"] for row in bundle["db_providers"])
    say("✓", f"{path}: provider {CCSWITCH_NAME} for {apps} (backup: {saved})")
    if current:
        say(
            "·",
            f"it is CC Switch's current provider for {', '.join(current)}: switch away and back in CC Switch to apply",
        )
    else:
        say("·", f"switch to {CCSWITCH_NAME} in CC Switch (restart CC Switch first if it is open)")
    return 0


def drop_stale_family(bundle, stamp, specs, replaced, written):
    """The per-model files (`~/.claude/teamgw-*.json`) of models this bundle no longer lists (an
    admin removed or renamed them): taken out after a backup, as uninstall would. Returns how many
    could not be read."""
    sent = {expand(f) for f in bundle["files"]}
    families = [spec for spec in (specs or {}).get(bundle.get("client"), []) if spec.get("glob")]
    failures = 0
    for spec in concrete(families):
        path = spec["path"]
        if path in sent:
            continue
        try:
            found = unmerged(spec, bundle["gateway"], replaced, written)
        except Exception as exc:  # never clobber a file we cannot read
            failures += 1
            say("!", f"{path}: left unchanged ({exc}); remove the team gateway entries by hand")
            continue
        if found:
            remove_ours(path, found, spec, stamp)
            replaced.pop(path, None)
            written.pop(path, None)
    return failures


def install(bundle, stamp=None, specs=None):
    stamp = stamp or datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    failures = 0
    sent = {f["path"] for f in bundle["files"]}
    replaced, written = load_replaced(), load_state(WRITTEN)
    for spec in (specs or {}).get(bundle.get("client"), []):
        if spec.get("owned") and spec["path"] not in sent:
            try:
                strip_owned(spec, bundle["gateway"], stamp, written)
            except Exception as exc:
                failures += 1
                say("!", f"{expand(spec)}: left unchanged ({exc}); remove the teamgw-… MCP servers by hand")
    by_path = {spec["path"]: spec for spec in (specs or {}).get(bundle.get("client"), [])}
    for f in bundle["files"]:
        path = expand(f)
        old = read_text(path, f["merge"]) if os.path.exists(path) else None
        try:
            if old is not None:
                check_editable(f, old)
            text = MERGES[f["merge"]](old, f)
        except Unreadable as exc:
            failures += 1
            say(
                "!",
                f"{path}: left unchanged, the installer cannot edit it safely ({exc}). Fix that and run a new "
                f"install command from the Connect page, or copy the {f['name']} shown there by hand.",
            )
            continue
        except Exception as exc:  # never clobber a file we cannot read
            failures += 1
            say("!", f"{path}: left unchanged ({exc}). Copy the {f['name']} shown on the portal page by hand.")
            continue
        # A file that already reads as the merge would write it (a re-install) gets no backup: every
        # run would otherwise leave one more copy of the same bytes beside it.
        bak = backup(path, old, stamp) if old is not None and text != old else None
        if bak:
            if f["path"] in by_path and not holds_ours(old, bundle["gateway"]):
                remember_replaced(replaced, path, old, by_path[f["path"]], bak, text)
        write_file(path, text, f.get("secret", False))
        if f["path"] in by_path:
            remember_written(written, path, text, by_path[f["path"]], bundle["gateway"])
        say("✓", f"{path} (backup: {bak})" if bak else path)
    failures += drop_stale_family(bundle, stamp, specs, replaced, written)
    if bundle.get("db_providers"):
        failures += install_db_providers(bundle, stamp, written)
    elif bundle.get("links") and not bundle["files"]:
        open_links(bundle["links"])
    key = bundle.get("key")
    if key:
        say("✓", f"key {key['name']} ({key['masked']}) minted for this machine; revoke it on the portal if lost")
        if key.get("replaced"):
            old = key["replaced"]
            say(
                "·",
                f"it replaces the key minted before for this client ({old['masked']}), which stops at {old['stops']}",
            )
    for c in bundle.get("commands", []):
        say("→", f"{c['label']}: {c['text']}")
    for n in bundle.get("notes", []):
        say("·", n)
    for w in bundle.get("warnings", []):
        say("!", w)
    save_replaced(replaced)
    save_state(WRITTEN, written)
    say("·", f"config version {bundle['version']}")
    return 1 if failures else 0


# --- the user's own values our install replaced, put back by uninstall -----------------------
# A merge replaces some of the user's settings with ours (llm's default model, Codex's `model` and
# `[analytics]` table, Claude Code's env.ANTHROPIC_MODEL, Crush's `models.large` object, OpenHands'
# `tools` list...). The first install that finds the file without anything of ours remembers those
# values, of any type and as they were written, in REPLACED (ours, mode 0600), keyed by the file's
# path; a re-install finds ours in the file and keeps what the first one remembered. Values that
# look like credentials, or hold one, are never written there: they stay in the install's backup.
REPLACED = "~/.config/team-gateway/replaced.json"
SECRET_NAME = re.compile(r"key|token|secret|passw|auth|header|cookie", re.I)
# A limit on tokens is a number, no credential (max_tokens, maxOutputTokens, CLAUDE_CODE_MAX_OUTPUT_TOKENS);
# access_tokens or auth_tokens stay credentials.
COUNT_NAME = re.compile(r"max.*tokens$", re.I)


def _secret_name(name):
    return bool(SECRET_NAME.search(name)) and not COUNT_NAME.search(name)


def holds_ours(text, gateway):
    """Whether a file already has something of ours in it (an earlier install, or a copy from the
    portal page): then its values are not the user's own."""
    lowered = text.lower()
    return any(mark in lowered for mark in ("teamgw", "team gateway", "team-gateway", gateway.rstrip("/").lower()))


def load_state(name):
    path = os.path.expanduser(name)
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def save_state(name, state):
    path = os.path.expanduser(name)
    if state:
        write_file(path, json.dumps(state, indent=2, ensure_ascii=False) + "\n", True)
    elif os.path.exists(path):
        os.unlink(path)


def load_replaced():
    return load_state(REPLACED)


def save_replaced(replaced):
    save_state(REPLACED, replaced)


def _holds_secret(value):
    """Whether a value has a member named like a credential anywhere inside it."""
    if isinstance(value, dict):
        return any(_secret_name(k) or _holds_secret(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_holds_secret(v) for v in value)
    return False


def _json_replaced(old, paths):
    """[{path, value, raw}] of the user's values at our dotted `paths` in the JSON text `old`: the
    value there, or the one on its way there that is not an object (ours puts an object in its
    place); `raw` is its text as the user wrote it, to put back byte for byte."""
    root, data = jsonc_parse(old)
    if not isinstance(data, dict):
        return []
    found = []
    for dotted in paths:
        parts = [dotted] if dotted in data else dotted.split(".")
        node = data
        for depth, p in enumerate(parts):
            node = node.get(p, KeyError)
            if node is KeyError:
                break
            if depth < len(parts) - 1 and not isinstance(node, dict):
                parts = parts[: depth + 1]  # a string or list where ours has an object: it goes whole
                break
        if node is not KeyError and all(item["path"] != parts for item in found):
            at = jsonc_find(root, parts)
            found.append({"path": parts, "value": node, "raw": old[at["start"] : at["end"]]})
    return found


def _list_entries_replaced(old, new, lists):
    """[{path, entries: [{at, value}], raw}] for each shared list ("path:id:base") whose user's
    entries the merged `new` text no longer has (ours took their id): where each stood, and the
    whole list as the user wrote it."""
    root, data = jsonc_parse(old)
    merged = jsonc_loads(new)
    out = []
    for spec in lists:
        parts = spec.split(":")[0].split(".")
        theirs, ours = one(data, ".".join(parts)), one(merged, ".".join(parts))
        if not isinstance(theirs, list):
            continue
        ours = ours if isinstance(ours, list) else []
        gone = [{"at": i, "value": v} for i, v in enumerate(theirs) if not any(same(v, o) for o in ours)]
        if gone:
            at = jsonc_find(root, parts)
            out.append({"path": parts, "entries": gone, "raw": old[at["start"] : at["end"]]})
    return out


def _entry_name(listed, entry):
    return f"{'.'.join(listed['path'])}[{entry['at']}]"


def _yaml_block(lines, i):
    """The lines after a top-level key's line at `i` that strip_yaml_keys takes out with it (its
    nested lines and the blank lines after them)."""
    j = i + 1
    while j < len(lines) and not re.match(r"^([A-Za-z0-9_-]+):", lines[j]):
        ln = lines[j]
        if ln.startswith(OURS_COMMENT) or (ln and not ln.startswith((" ", "-", "\t"))):
            break
        j += 1
    return lines[i + 1 : j]


def _trailing_blanks(lines):
    """How many blank lines end `lines` (none when that is all of them)."""
    n = 0
    while n < len(lines) and not lines[-1 - n].strip():
        n += 1
    return n if n < len(lines) else 0


def _line_key(merge, line):
    """The key a line of a line-based file sets (TOML top-level, dotenv, flat YAML), or None."""
    if merge in ("toml", "toml-items"):
        m = _ASSIGN.match(line)
        return m.group(1).strip("\"'") if m else None
    if merge == "dotenv":
        m = re.match(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=", line)
        return m.group(1) if m else None
    m = re.match(r"^([A-Za-z0-9_-]+):", line)  # flat YAML: the key's value may be a nested block
    return m.group(1) if m else None


def replaced_values(old, spec, new=None):
    """What of the user's `old` text our merge replaces and uninstall puts back, or None: a one-value
    file's text, a JSON file's values at our paths (objects and lists too), a line-based file's
    entries setting our keys (with the lines nested under them and where they stood), a TOML file's
    tables ours replaces, the entries of a shared list ours takes the place of (the `new` text has
    them no more); `kept_out` names the user's credentials among them, never stored."""
    merge = spec["merge"]
    if merge == "text":
        return {"text": old} if old.strip() and not old.startswith(spec.get("prefix") or "\0") else None
    if merge == "json":
        found = _json_replaced(old, spec.get("paths", ()))
        secret = [item for item in found if _secret_name(item["path"][-1]) or _holds_secret(item["value"])]
        kept_out = [".".join(item["path"]) for item in secret]
        found = [item for item in found if item not in secret]
        entries = _list_entries_replaced(old, new, spec.get("lists", ())) if new is not None else []
        for listed in entries:
            kept_out += [_entry_name(listed, e) for e in listed["entries"] if _holds_secret(e["value"])]
            listed["entries"] = [e for e in listed["entries"] if not _holds_secret(e["value"])]
        entries = [listed for listed in entries if listed["entries"]]
        record = {"json": found, "kept_out": kept_out}
        if entries:
            record["entries"] = entries
        return record if found or kept_out or entries else None
    if merge in ("toml", "toml-items", "dotenv", "yaml-keys"):
        keys, lines, tables = set(spec.get("keys", ())), old.splitlines(), []
        if merge in ("toml", "toml-items"):
            lines, split = _toml_split(old)  # the top-level keys, then the tables
            if merge == "toml":  # toml-items keeps the user's own items instead
                tables = [
                    {"at": i, "name": name, "lines": body, "gap": _trailing_blanks(split[i - 1][1] if i else lines)}
                    for i, (name, body) in enumerate(split)
                    if _ours_or_below(name, spec.get("tables", ()), ())
                ]
        found = []
        for i, ln in enumerate(lines):
            if (key := _line_key(merge, ln)) in keys:
                nested = _yaml_block(lines, i) if merge == "yaml-keys" else []
                found.append({"at": i, "line": "\n".join([ln, *nested]), "key": key})
        kept_out = [item["key"] for item in found if _secret_name(item["key"])]
        kept_out += [t["name"] for t in tables if any(_secret_name(_line_key(merge, ln) or "") for ln in t["lines"])]
        found = [item for item in found if not _secret_name(item["key"])]
        tables = [t for t in tables if t["name"] not in kept_out]
        record = {"lines": found, "kept_out": kept_out}
        if tables:
            record["tables"] = tables
        if merge == "toml" and found:  # the blank lines between the top-level keys and the tables
            record["gap"] = _trailing_blanks(lines)
        return record if found or kept_out or tables else None
    return None


def remember_replaced(replaced, path, old, spec, backup_name, new=None):
    """At an install over a file with nothing of ours: remember the user's values our merge replaces
    and the backup holding the file as it was (or forget a stale record, when the user took ours out
    by hand since)."""
    try:
        record = replaced_values(old, spec, new)
    except ValueError:  # not readable: the merge has said so already
        return
    if record:
        replaced[path] = {**record, "backup": backup_name}
    else:
        replaced.pop(path, None)


def put_back(installed, text, record):
    """`text` (the `installed` file with ours taken out) with the user's remembered values back in
    place: a JSON value goes where ours stood (edited into the installed text, so the member keeps
    its place) and then reads as the user wrote it; an entry's lines at the index they had, a TOML
    table among the tables where it stood."""
    if "text" in record:
        return record["text"]
    if record.get("json") or record.get("entries"):
        data = jsonc_loads(text) if text.strip() else {}
        for item in record.get("json", ()):
            put(data, item["path"], item["value"])
        for listed in record.get("entries", ()):
            items = one(data, ".".join(listed["path"]))
            if not isinstance(items, list):
                items = []
                put(data, listed["path"], items)
            for entry in listed["entries"]:
                items.insert(min(entry["at"], len(items)), entry["value"])
        edited = edit_json(installed, data)
        for item in [*record.get("json", ()), *record.get("entries", ())]:
            edited = _json_raw(edited, item)
        return edited
    lines = text.splitlines()
    for item in record.get("lines", ()):
        at = min(item["at"], len(lines))
        lines[at:at] = item["line"].split("\n")
    if not record.get("tables") and not record.get("gap"):
        return "\n".join(lines) + "\n"
    top, tables = _toml_split("\n".join(lines))
    if tables or record.get("tables"):
        top += [""] * max(record.get("gap", 0) - _trailing_blanks(top), 0)
    for table in record.get("tables", ()):
        tables.insert(min(table["at"], len(tables)), (table["name"], table))
    out = list(top)
    for _, body in tables:
        if isinstance(body, dict):  # a table put back: the blank lines it had before it, then its own
            out += [""] * max(body["gap"] - _trailing_blanks(out), 0)
            body = body["lines"]
        out += body
    return "\n".join(out).strip("\n") + "\n"


def _json_raw(text, item):
    """`text` with the value at the item's path written as the user wrote it (their layout, their
    comments), when that text reads as the same value."""
    raw = item.get("raw")
    if raw is None:
        return text
    try:
        at = jsonc_find(jsonc_parse(text)[0], item["path"])
        edited = text[: at["start"]] + raw + text[at["end"] :]
        return edited if same(jsonc_loads(edited), jsonc_loads(text)) else text
    except (ValueError, IndexError, KeyError):  # not there, or not as written: the value as dumped
        return text


def puts_back(record):
    """Whether a record holds values to put back (not only the names of credentials kept out)."""
    return bool(record and any(record.get(k) for k in ("text", "json", "lines", "tables", "entries")))


def replaced_names(record):
    """The keys a record puts back, for the uninstall's line about it."""
    if record.get("json") or record.get("entries"):
        entries = [_entry_name(listed, e) for listed in record.get("entries", ()) for e in listed["entries"]]
        return ", ".join([".".join(item["path"]) for item in record.get("json", ())] + entries)
    names = [item["key"] for item in record.get("lines", ())]
    return ", ".join(names + [f"[{t['name']}]" for t in record.get("tables", ())])


# --- what our install wrote, so that uninstall takes out only what is still ours -------------
# The user may change a setting of ours after the install (another model in Claude Code's
# env.ANTHROPIC_MODEL, their own [analytics] table back in Codex's config.toml, another URL in one of
# our MCP entries, a window in our marked block of Continue's models). Each install keeps,
# in WRITTEN (ours, mode 0600, keyed by the file's path), a SHA-256 of each setting it wrote there: a
# key among them only as its hash, never in plain text. Uninstall takes out (or puts the user's old
# value back over) only the settings that still hold what we wrote; one the user changed or took out
# since stays as it is, and uninstall says so. An install by an older installer left no such record:
# all of ours goes, as before.
WRITTEN = "~/.config/team-gateway/written.json"


def _digest(text):
    """A setting's hash, salted with our name so that a key's never equals the portal's own hash of it."""
    return hashlib.sha256(b"team-gateway written\0" + text.encode("utf-8")).hexdigest()


def ours_now(text, spec, gateway):
    """{setting: digest} of our settings as a file holds them now: a JSON file's values at our paths
    (whatever their layout), its entries of shared lists (`path[id]`) and of owned objects
    (`path.name`, our MCP servers); a line-based file's lines setting our keys (with the lines nested
    under them), a TOML file's tables ours writes as `[name]` (with the tables nested in them) and
    its items of ours (`list.name`); a YAML file's marked blocks (by their list's key) and its owned
    items (`key.name`); a one-value file's text as "". A setting not in the file is left out."""
    merge, found = spec["merge"], {}
    if merge == "text":
        return {"": _digest(text)}
    if merge == "json":
        data = jsonc_loads(text) if text.strip() else {}
        if not isinstance(data, dict):
            return {}
        for dotted in spec.get("paths", ()):
            node = data
            for p in [dotted] if dotted in data else dotted.split("."):
                node = node.get(p, KeyError) if isinstance(node, dict) else KeyError
            if node is not KeyError:
                found[dotted] = [node]
        for name, item in list_entries(data, spec.get("lists", ()), gateway.rstrip("/")):
            found.setdefault(name, []).append(item)
        for name, node, key in owned_entries(data, spec.get("owned", ())):
            found[name] = [node[key]]
        dumps = {name: [json.dumps(v, sort_keys=True, ensure_ascii=False) for v in vs] for name, vs in found.items()}
        return {name: _digest("\n".join(texts)) for name, texts in dumps.items()}
    lines, tables = text.splitlines(), []
    if merge in ("toml", "toml-items"):
        lines, tables = _toml_split(text)
    for i, ln in enumerate(lines) if merge in ("toml", "toml-items", "dotenv", "yaml-keys") else ():
        if (key := _line_key(merge, ln)) in spec.get("keys", ()):
            nested = _yaml_block(lines, i) if merge == "yaml-keys" else []
            found.setdefault(key, []).append("\n".join([ln, *nested]).rstrip())
    for table in spec.get("tables", ()) if merge == "toml" else ():
        for name, body in tables:
            if _ours_or_below(name, [table], ()):
                found.setdefault(f"[{table}]", []).append("\n".join(body).rstrip())
    for name, body in tables if merge == "toml" else ():
        if owned := _owned_table(name, spec.get("owned", ())):
            found.setdefault(owned, []).append("\n".join(body).rstrip())
    for header, body in _toml_items(tables) if merge == "toml-items" else ():
        if any(OUR_ITEM.match(ln) for ln in body):
            found.setdefault(_toml_item(header, body), []).append("\n".join(body).rstrip())
    if merge in ("yaml-models", "yaml-list", "yaml-keys"):
        owned = [entry.rsplit(".", 1) for entry in spec.get("owned", ())]
        for key, prefix in owned:
            for start, end, _, fields in yaml_items(lines, key):
                if fields.get("name", "").startswith(prefix):
                    found.setdefault(f"{key}.{fields['name']}", []).append("\n".join(lines[start:end]).rstrip())
        for key, block in marked_blocks(lines).items():
            if key not in {k for k, _ in owned}:  # an owned list's block: by its items, above
                found[key] = ["\n".join(lines[i] for i in block)]
    return {key: _digest("\n".join(texts)) for key, texts in found.items()}


def remember_written(written, path, text, spec, gateway):
    """At each install: remember what of ours the file now holds (a re-install's values replace the
    last one's: a rotated key, another model)."""
    try:
        ours = ours_now(text, spec, gateway)
    except ValueError:  # not readable: nothing to compare with at uninstall
        ours = {}
    if ours:
        written[path] = ours
    else:
        written.pop(path, None)


def changed_since(now, wrote):
    """The settings of ours, as named in WRITTEN (`wrote`), that the user changed or took out since
    the install wrote them; `now`: ours as the file holds them now."""
    return [name for name, digest in wrote.items() if now.get(name) != digest]


def _overlaps(a, b):
    """Whether two dotted names are one setting or one holds the other."""
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def without_changed(spec, record, changed):
    """The spec and REPLACED record of a file, without the settings the user `changed` since the
    install: neither taken out nor put back over by their old value."""
    if "" in changed:  # a one-value file the user rewrote: theirs now, whole
        return {**spec, "prefix": "\0"}, None
    names = [n.strip("[]") for n in changed]
    tables = [n[1:-1] for n in changed if n.startswith("[")]
    spec = {
        **spec,
        "paths": [p for p in spec.get("paths", ()) if p not in changed],
        "keys": [k for k in spec.get("keys", ()) if k not in changed],
        "tables": [t for t in spec.get("tables", ()) if f"[{t}]" not in changed],
        "kept": changed,  # the entries of ours found by name or marker that stay (unmerge_*)
    }
    if record:
        record = {
            **record,
            "json": [i for i in record.get("json", ()) if not any(_overlaps(".".join(i["path"]), n) for n in names)],
            "lines": [i for i in record.get("lines", ()) if i["key"] not in changed],
            "tables": [t for t in record.get("tables", ()) if not any(_overlaps(t["name"], n) for n in tables)],
            "kept_out": [k for k in record.get("kept_out", ()) if not any(_overlaps(k, n) for n in names)],
        }
        # The user's own entry with the id of one of ours they changed: it does not come back beside it.
        ids = dict(entry.split(":")[:2] for entry in spec.get("lists", ()))
        entries = [
            {**listed, "entries": [e for e in listed["entries"] if _entry_of(listed, e, ids) not in changed]}
            for listed in record.get("entries", ())
        ]
        record["entries"] = [listed for listed in entries if listed["entries"]]
        if not record["lines"]:
            record["gap"] = 0
    return spec, record


def _entry_of(listed, entry, ids):
    """The setting (`path[id]`) a remembered entry of the user's shares with ours."""
    dotted = ".".join(listed["path"])
    return f"{dotted}[{entry['value'].get(ids.get(dotted))}]" if isinstance(entry["value"], dict) else None


# --- uninstall: what a client's files hold of ours, taken out again --------------------------
# Each spec (installer/__init__.py `uninstall_specs`, from a sample render of the client) names a
# file, its merge kind and what of it is ours: JSON leaf paths, shared lists and owned prefixes;
# TOML keys and tables; dotenv variables; flat YAML keys; our marker blocks. Everything else stays.


def prune(data, parts):
    """Delete a dotted key, then the objects on its path that it left empty."""
    chain = [data]
    for p in parts[:-1]:
        node = chain[-1].get(p) if isinstance(chain[-1], dict) else None
        if not isinstance(node, dict):
            return
        chain.append(node)
    if parts[-1] not in chain[-1]:
        return
    del chain[-1][parts[-1]]
    for i in range(len(chain) - 1, 0, -1):
        if chain[i]:
            break
        del chain[i - 1][parts[i - 1]]


def unmerge_json(text, spec, gateway):
    data = jsonc_loads(text)
    if not isinstance(data, dict):
        raise ValueError("the file is not a JSON object")
    for dotted in spec.get("paths", ()):
        if dotted in data:  # a key with dots in its name (VS Code's "roo-cline.autoImportSettingsPath")
            del data[dotted]
        else:
            prune(data, dotted.split("."))
    changed = spec.get("kept", ())
    for entry in spec.get("lists", ()):
        dotted = entry.split(":")[0]
        items = one(data, dotted)
        if isinstance(items, list):
            gone = [item for name, item in list_entries(data, [entry], gateway) if name not in changed]
            kept = [i for i in items if not any(i is g for g in gone)]
            put(data, dotted.split("."), kept)
            if not kept:
                prune(data, dotted.split("."))
    for entry in spec.get("owned", ()):
        drop_owned(data, [entry], changed)
        dotted = entry.rsplit(".", 1)[0]
        if one(data, dotted) == {}:
            prune(data, dotted.split("."))
    return edit_json(text, data)


def unmerge_toml(text, spec, gateway):
    top, tables = _toml_split(text)
    keys, names, owned = set(spec.get("keys", ())), spec.get("tables", ()), spec.get("owned", ())
    out = [
        ln
        for ln in top
        if not ((m := _ASSIGN.match(ln)) and m.group(1).strip("\"'") in keys) and not ln.startswith(OURS_COMMENT)
    ]
    for name, lines in tables:
        if not _ours_or_below(name, names, owned) or _owned_table(name, owned) in spec.get("kept", ()):
            out += lines
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out).strip("\n") + "\n").lstrip("\n")


def unmerge_toml_items(text, spec, gateway):
    """Our top-level keys and our items ([[providers]]/[[models]] naming teamgw) out; theirs stay."""
    top, tables = _toml_split(text)
    keys = set(spec.get("keys", ()))
    out = [
        ln
        for ln in top
        if not ((m := _ASSIGN.match(ln)) and m.group(1).strip("\"'") in keys) and not ln.startswith(OURS_COMMENT)
    ]
    for header, lines in _toml_items(tables):
        if not any(OUR_ITEM.match(ln) for ln in lines) or _toml_item(header, lines) in spec.get("kept", ()):
            out += ["", *lines]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out).strip("\n") + "\n").lstrip("\n")


def unmerge_dotenv(text, spec, gateway):
    names = set(spec.get("keys", ()))
    kept = [
        ln
        for ln in text.splitlines()
        if not ((m := re.match(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=", ln)) and m.group(1) in names)
        and not ln.startswith(STAMP)
    ]
    body = "\n".join(kept).rstrip("\n")
    return body + "\n" if body else ""


def unmerge_marked(text, spec, gateway):
    """Our marked blocks out, but those the user changed since the install (`kept`: by their key)."""
    blocks = marked_blocks(text.splitlines())
    keep = [i for key in spec.get("kept", ()) for i in blocks.get(key, ())]
    body = "\n".join(strip_marked(text, keep=keep)).rstrip("\n")
    return body + "\n" if body else ""


def unmerge_yaml_models(text, spec, gateway):
    """Our marked blocks out, and the items of owned lists named like ours (Continue's MCP servers);
    a `models:` header left with no item goes too (Continue would read it as null: a file kept for
    an entry the user changed must still load)."""
    stripped = strip_owned_blocks(text, spec.get("owned", ()), spec.get("kept", ()))
    lines = unmerge_marked(stripped, spec, gateway).splitlines()
    idx = _list_line(lines)
    if idx is not None and not yaml_items(lines):
        del lines[idx]
    body = "\n".join(lines).rstrip("\n")
    return body + "\n" if body else ""


def unmerge_yaml_keys(text, spec, gateway):
    """Our top-level keys out, and the items of owned blocks named like ours (Goose's extensions)."""
    stripped = strip_owned_blocks(text, spec.get("owned", ()), spec.get("kept", ()))
    body = strip_yaml_keys(stripped, set(spec.get("keys", ())))
    return body + "\n" if body else ""


def unmerge_text(text, spec, gateway):
    return "" if text.startswith(spec.get("prefix") or "\0") else text


UNMERGES = {
    "json": unmerge_json,
    "toml": unmerge_toml,
    "toml-items": unmerge_toml_items,
    "dotenv": unmerge_dotenv,
    "yaml-models": unmerge_yaml_models,
    "yaml-list": unmerge_marked,
    "yaml-keys": unmerge_yaml_keys,
    "text": unmerge_text,
}


def unmerged(spec, gateway, replaced=None, written=None):
    """(path, old text, new text or None to delete the file, the user's values put back or None, the
    settings of ours the user changed since and that stay) for one installed file, or None when it
    holds nothing of ours. A file that is left as our own fresh install would be is deleted; the
    user's own values our install replaced (`replaced`, from REPLACED) go back in, except over a
    setting they changed since the install (`written`, from WRITTEN, tells)."""
    path = expand(spec)
    if not os.path.exists(path):
        return None
    old = read_text(path, spec["merge"])
    check_editable(spec, old)
    record, wrote = (replaced or {}).get(path), (written or {}).get(path)
    kept = changed_since(ours_now(old, spec, gateway), wrote) if wrote else []
    if kept:
        spec, record = without_changed(spec, record, kept)
    new = UNMERGES[spec["merge"]](old, spec, gateway.rstrip("/"))
    if new == old:
        return (path, old, old, None, kept) if kept else None
    if puts_back(record):
        return path, old, put_back(old, "" if new == spec.get("skeleton") else new, record), record, kept
    return path, old, (None if not new.strip() or new == spec.get("skeleton") else new), record, kept


def strip_owned(spec, gateway, stamp, written):
    """Drop our MCP entries from a file this bundle does not write (no server allowed any more), and
    from the record of what the last install wrote there."""
    found = unmerged({**spec, "paths": (), "lists": (), "keys": (), "tables": (), "skeleton": None}, gateway)
    if found:
        path, old, new, _, _ = found
        backup(path, old, stamp)
        write_file(path, new if new is not None else "{}\n", spec.get("secret", False))
        if path in written:
            remember_written(written, path, new if new is not None else "{}\n", spec, gateway)
        say("✓", f"{path}: the team MCP servers no longer allowed are removed")


def backup_path(path, stamp):
    """`path.bak-STAMP`, or `path.bak-STAMP-2`, -3... when that is taken: the stamp has one-second
    resolution, and a second run within it (two clients sharing ~/.config/team-gateway/env in one
    setup script) must not write over the first's backup, the only copy of the user's own file."""
    name, n = f"{path}.bak-{stamp}", 1
    while os.path.lexists(name):
        n += 1
        name = f"{path}.bak-{stamp}-{n}"
    return name


def backup(path, old, stamp):
    """Write `old` beside `path` (mode 0600) and return the backup's file name."""
    name = backup_path(path, stamp)
    with open(name, "x", encoding="utf-8", newline="") as fh:
        fh.write(old)
    os.chmod(name, 0o600)
    return os.path.basename(name)


def ccswitch_ours(path):
    """{setting: digest} of our provider rows as CC Switch's database holds them now, one per app
    (`Team Gateway (claude)`): their name, settings (whatever their layout) and website."""
    conn = sqlite3.connect(path, timeout=10)
    try:
        rows = conn.execute(
            "SELECT app_type, name, settings_config, website_url FROM providers WHERE id = ?", (CCSWITCH_ID,)
        ).fetchall()
    finally:
        conn.close()
    out = {}
    for app, name, settings, website in rows:
        try:
            settings = json.loads(settings)
        except (TypeError, ValueError):
            pass  # not JSON: compared as it is
        out[f"{CCSWITCH_NAME} ({app})"] = _digest(json.dumps([name, settings, website], sort_keys=True))
    return out


def ccswitch_unmerged(spec, written):
    """`unmerged` for CC Switch's database: (path, our rows in it, those of them that stay, None,
    our rows the user changed since the install), or None when it holds nothing of ours."""
    path = os.path.expanduser(spec["path"])
    if not os.path.exists(path):
        return None
    now, wrote = ccswitch_ours(path), written.get(path)
    kept = changed_since(now, wrote) if wrote else []
    if not now and not kept:
        return None
    return path, list(now), [name for name in now if name in kept], None, kept


def ccswitch_remove(path, stamp, kept=()):
    """Delete our provider rows from CC Switch's database (after a backup), but those in `kept` (the
    user changed them since the install). Returns how many, and the backup's file name."""
    conn = sqlite3.connect(path, timeout=10)
    try:
        rows = conn.execute("SELECT app_type FROM providers WHERE id = ?", (CCSWITCH_ID,)).fetchall()
        gone = [app for (app,) in rows if f"{CCSWITCH_NAME} ({app})" not in kept]
        if not gone:
            return 0, None
        saved = ccswitch_backup(conn, path, stamp)
        with conn:
            for app in gone:
                conn.execute("DELETE FROM providers WHERE id = ? AND app_type = ?", (CCSWITCH_ID, app))
        return len(gone), saved
    finally:
        conn.close()


def confirm(question):
    """Ask on the terminal (stdin is the script itself under `curl | sh`); no terminal: no."""
    try:
        with open("/dev/tty", "r+", encoding="utf-8") as tty:
            tty.write(translate(question) + " [y/N] ")
            tty.flush()
            return tty.readline().strip().lower() in ("y", "yes")
    except OSError:
        return False


def concrete(specs):
    """Specs with a `glob` path (one file per model: `teamgw-*`) become one spec per matching file."""
    for spec in specs:
        if not spec.get("glob"):
            yield spec
            continue
        for path in sorted(glob.glob(expand(spec))):
            yield {**spec, "path": path, "macos_path": path, "glob": False}


def remove_ours(path, found, spec, stamp):
    """Carry out one file's part of the plan (`unmerged`), after a backup: the file deleted, or ours
    taken out and the user's own values put back."""
    _, old, new, record, _ = found
    # else all of ours there the user changed since: nothing to remove
    bak = backup(path, old, stamp) if new != old else None
    if new is None:
        os.unlink(path)
        say("✓", f"{path}: deleted (backup: {bak})")
    elif new != old:
        write_file(path, new, spec.get("secret", False))
        if record and "text" in record:
            say("✓", f"{path}: your own value put back (backup: {bak})")
        elif puts_back(record):
            names = replaced_names(record)
            say("✓", f"{path}: our entries removed and your own {names} put back (backup: {bak})")
        else:
            say("✓", f"{path}: our entries removed (backup: {bak})")
    if record and record.get("kept_out"):  # the user's own credentials: never stored by us
        names, first = ", ".join(record["kept_out"]), record.get("backup") or "?"
        say(
            "!",
            f"{path}: your own {names} from before the install is not put back (we never store a credential); "
            f"it is in {first}",
        )


def uninstall(specs, gateway, clients, yes=False, stamp=None):
    """Remove what the installer wrote for `clients` (model/provider entries, MCP entries, our
    files), after a backup of each file; the user's own entries, the settings of ours they changed
    since the install (WRITTEN) and the rest of each file stay."""
    stamp = stamp or datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    plan, failures, replaced, written = [], 0, load_replaced(), load_state(WRITTEN)
    for client in clients:
        for spec in concrete(specs.get(client, [])):
            try:
                if spec["merge"] == "ccswitch":
                    found = ccswitch_unmerged(spec, written)
                else:
                    found = unmerged(spec, gateway, replaced, written)
            except Exception as exc:  # never clobber a file we cannot read
                failures += 1
                say("!", f"{expand(spec)}: left unchanged ({exc}); remove the team gateway entries by hand")
                continue
            if found:
                plan.append((found[0], found, spec))
    if not plan:
        say("·", "nothing of the team gateway's is installed here for: " + ", ".join(clients))
        return 1 if failures else 0
    for path, found, _ in plan:
        if found[2] is None:
            say("·", f"delete (only ours in it): {path}")
        elif found[2] != found[1]:
            say("·", f"remove our entries from: {path}")
        else:
            say("·", f"leave as it is (you changed our settings in it since the install): {path}")
    if not yes and not confirm("Remove the team gateway's entries listed above?"):
        say("✗", "nothing removed (pass --yes to remove without asking)")
        return 1
    for path, found, spec in plan:
        kept = found[4]
        if spec["merge"] != "ccswitch":
            remove_ours(path, found, spec, stamp)
        elif found[2] != found[1]:  # else all of ours there the user changed since
            removed, saved = ccswitch_remove(path, stamp, kept)
            say("✓", f"{path}: {removed} provider row(s) of {CCSWITCH_NAME} removed (backup: {saved})")
        if kept == [""]:
            say("·", f"{path}: kept your later change to it as it is")
        elif kept:
            say("·", f"{path}: kept your later change to {', '.join(kept)} as it is")
        replaced.pop(path, None)
        written.pop(path, None)
    save_replaced(replaced)
    save_state(WRITTEN, written)
    say("·", "the keys minted for these clients still work until you revoke them on the portal")
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
        if exc.code in (400, 404):  # the portal's answer for a used, expired or mistyped token
            problem = translate(
                "the portal refused the download token: download tokens work once and for 10 minutes; get a new "
                "command from the portal."
            )
        else:
            status = f"HTTP {exc.code}"  # a technical id, the same in every language
            problem = translate(f"cannot reach {portal}: {status}")
    except (OSError, ValueError) as exc:  # unreachable, timed out, or not the portal's JSON
        problem = translate(f"cannot reach {portal}: {getattr(exc, 'reason', exc)}")
    print(f"✗ {problem}", file=sys.stderr)
    raise SystemExit(1)


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
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                nxt.append((part, node[int(part)]))
        current = nxt
    yield from current


def one(data, path):
    return next((v for _, v in walk(data, path)), None) if path else None


def parse_yaml_models(text):
    """Every item of the top-level models list (ours and the user's) as a dict, with its line; and
    the MCP servers' items (their name and url)."""
    models = []
    for _, _, _, fields in yaml_items(text.splitlines()):
        item = dict(fields)
        for k in ("contextLength", "maxTokens"):
            if k in item:
                try:
                    item[k] = int(item[k])
                except ValueError:
                    pass
        item["defaultCompletionOptions"] = {k: item[k] for k in ("contextLength", "maxTokens") if k in item}
        models.append(item)
    servers = [dict(fields) for _, _, _, fields in yaml_items(text.splitlines(), "mcpServers")]
    return {"models": models, "mcpServers": servers}


def parse_yaml_flat(text):
    """Top-level `key: value` lines, and each block mapping as {child: its own scalar keys} (Goose's
    `extensions:`, where the doctor finds our MCP entries)."""
    data, lines = {}, text.splitlines()
    for ln in lines:
        m = re.match(r"^([A-Za-z0-9_-]+):\s*(.*)$", ln)
        if m and m.group(2):
            data[m.group(1)] = _unquote(m.group(2))
        elif m:
            items = yaml_items(lines, m.group(1))
            if items and not lines[items[0][0]].lstrip().startswith("-"):
                data[m.group(1)] = {f["name"]: dict(f) for _, _, _, f in items}
    return data


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


def load_ccswitch(path):
    """Our rows of CC Switch's database as {app_type: settings_config}, Codex's TOML parsed."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        rows = conn.execute("SELECT app_type, settings_config FROM providers WHERE id = ?", (CCSWITCH_ID,)).fetchall()
    finally:
        conn.close()
    data = {app: json.loads(settings) for app, settings in rows}
    if isinstance(data.get("codex", {}).get("config"), str):
        data["codex"]["config"] = load_toml_text(data["codex"]["config"])
    return data, json.dumps(data, indent=2)


def load_toml_text(text):
    try:
        import tomllib  # Python 3.11+
    except ImportError:
        return parse_toml_simple(text)
    return tomllib.loads(text)


PROBE_MERGES = {"dotenv": "dotenv", "yaml": "yaml-models", "yaml-flat": "yaml-keys", "yaml-list": "yaml-list"}


def load(path, fmt, keys=()):
    """(parsed data, text) of an installed file; raises Unreadable on one the installer would leave
    alone (`keys`: the top-level ones the doctor reads), as the doctor's reading of it may not be
    the client's."""
    if fmt == "ccswitch":
        return load_ccswitch(path)
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    if fmt in PROBE_MERGES:
        check_editable({"merge": PROBE_MERGES[fmt], "keys": keys}, text)
    if fmt == "json":  # JSONC too (Zed's, VS Code's settings.json)
        return jsonc_loads(text), text
    if fmt == "toml":
        return load_toml_text(text), text
    if fmt == "yaml":
        return parse_yaml_models(text), text
    if fmt == "yaml-list":
        return [dict(f) for _, _, _, f in yaml_list_items(text.splitlines())], text
    if fmt == "dotenv":  # Copilot CLI's variables in the shared environment file
        return {n: dotenv_value(path, n) for n in re.findall(r"(?m)^\s*(?:export\s+)?([A-Za-z_]\w*)=", text)}, text
    if fmt == "yaml-flat":
        return parse_yaml_flat(text), text
    raise ValueError(fmt)


def line_of(text, needle, after=0):
    """1-based number of the first line at or after line `after` that contains `needle`."""
    for i, ln in enumerate(text.splitlines()[after:], start=after):
        if needle in ln:
            return i + 1
    return after or None


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


def env_key(name, extra=""):
    return (
        os.environ.get(name)
        or (dotenv_value(extra, name) if extra else None)
        or dotenv_value("~/.config/team-gateway/env", name)
        or dotenv_value("~/.continue/.env", name)
    )


def resolve_key(value):
    if not isinstance(value, str) or not value:
        return None
    m = re.match(r"^\$\{\{\s*secrets\.([A-Za-z0-9_]+)\s*\}\}$", value) or re.match(r"^\{env:([A-Za-z0-9_]+)\}$", value)
    m = m or re.match(r"^\$\{([A-Za-z0-9_]+)\}$", value)  # Droid's and Junie's `${VAR}`
    if m:
        return env_key(m.group(1))
    if re.match(r"^[A-Z][A-Z0-9_]*$", value):  # pi: a variable's name (a key is not upper-case)
        return env_key(value)
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


MCP_PREFIX = "teamgw-"  # clients/base.py MCP_PREFIX: our entries in a client's MCP servers


def mcp_entries(p, data):
    """Our MCP entries in one file: [(name, url)], from an object keyed by name or a list of
    named items (Continue's `mcpServers:`)."""
    found = []
    for key, entry in walk(data, p["mcp"] + ".*"):
        if not isinstance(entry, dict):
            continue
        name = entry.get("name", "") if isinstance(one(data, p["mcp"]), list) else key
        if name.startswith(MCP_PREFIX):
            found.append((name, entry.get(p.get("mcp_url") or "url")))
    return found


def mcp_key(p, data):
    """The key in the Authorization header of our MCP entries, for clients whose only copy of it may
    be there (Roo with no model listed): a `${VAR}` reference is looked up, a placeholder is none."""
    for name, entry in walk(data, p["mcp"] + ".*"):
        headers = entry.get("headers") if isinstance(entry, dict) else None
        auth = headers.get("Authorization") if isinstance(headers, dict) else None
        if str(name).startswith(MCP_PREFIX) and isinstance(auth, str) and auth.startswith("Bearer "):
            key = resolve_key(auth[len("Bearer ") :])
            if key:
                return key
    return None


def rpc(url, key, message, session=None):
    """One JSON-RPC message to a Streamable HTTP MCP endpoint: (status, parsed answer, session id).
    The answer may come as JSON or as an SSE stream carrying it."""
    headers = {
        "Authorization": "Bearer " + key,
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-06-18",
    }
    if session:
        headers["Mcp-Session-Id"] = session
    req = urllib.request.Request(url, data=json.dumps(message).encode(), headers=headers, method="POST")  # noqa: S310
    try:
        with urllib.request.urlopen(req, timeout=20) as resp:  # noqa: S310 - the team gateway
            body = resp.read().decode()
            session = resp.headers.get("Mcp-Session-Id") or session
            status = resp.status
    except urllib.error.HTTPError as exc:
        return exc.code, None, session
    if not body.strip():
        return status, None, session
    if body.lstrip().startswith("{"):
        return status, json.loads(body), session
    answers = [json.loads(ln[5:]) for ln in body.splitlines() if ln.startswith("data:") and ln[5:].strip()]
    return status, next((a for a in answers if a.get("id") == message.get("id")), None), session


def refusal(step, status, answer):
    """Why the gateway's MCP endpoint said no, in words a developer can act on."""
    error = answer.get("error", {}).get("message") if isinstance(answer, dict) else None
    detail = f" ({error})" if error else ""
    if status in (401, 403):
        return f"the gateway refused the key ({status}){detail}: it is wrong, revoked or expired"
    if status == 404:
        return f"the gateway refused: this key may call nothing on this server any more{detail}; install again"
    return f"{step} answered {status}{detail}"


STORED_CATALOG = "gateway-portal/stored-catalog"  # gateway/surfaces/mcp.py: the server is down


def mcp_tools(url, key):
    """(tool names, None, stored) this key may call on one gateway MCP endpoint, or (None, why not,
    None); `stored` is the gateway's marker when the server is down and the names are from its last
    check ({"reason", "checked"}), else None."""
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "team-gateway-doctor", "version": "1"},
        },
    }
    try:
        status, answer, session = rpc(url, key, hello)
        if status != 200 or not answer or "result" not in answer:
            return None, refusal("initialize", status, answer), None
        rpc(url, key, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
        status, answer, _ = rpc(url, key, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, session)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return None, f"cannot reach it ({exc})", None
    if status != 200 or not answer or "result" not in answer:
        return None, refusal("tools/list", status, answer), None
    result = answer["result"]
    stored = (result.get("_meta") or {}).get(STORED_CATALOG)
    return sorted(t.get("name", "?") for t in result.get("tools", [])), None, stored


def check_mcp(servers, key):
    """Print what this developer may call on each of our MCP entries. Returns the problem count."""
    problems = 0
    for file, name, url in servers:
        if not isinstance(url, str) or not url:
            say("✗", f"{file}: MCP server {name} has no URL")
            problems += 1
            continue
        tools, why, stored = mcp_tools(url, key)
        if tools is None:
            say("✗", f"{file}: MCP server {name} ({url}): {why}")
            problems += 1
        elif stored is not None:
            # Not this machine's problem: the team's server is down; the entry itself is right.
            say(
                "!",
                f"MCP server {name}: the team's server is down ({stored.get('reason') or translate('unknown')}); as "
                f"of its last check ({stored.get('checked') or translate('never')}) you may call "
                f"{', '.join(tools) or translate('nothing')}",
            )
        elif tools:
            say("✓", f"MCP server {name}: you may call {', '.join(tools)}")
        else:
            say("!", f"MCP server {name}: reachable, but this key may call none of its tools")
    return problems


def context_of(item):
    for field in ("context_window", "max_model_len", "context_length", "max_context_length"):
        if isinstance(item.get(field), int):
            return item[field]
    return None


def as_int(value):
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def entries_of(p, data, text, host):
    """The model entries a probe finds in one file, each with the line to fix."""
    found = []
    for name_key, item in walk(data, p["models"]):
        if not isinstance(item, dict):
            continue
        if p.get("model_base"):
            base = one(item, p["model_base"])
            if not isinstance(base, str) or re.sub(r"^https?://", "", base).split("/")[0].lower() != host:
                continue  # the user's own model on another server
        name = name_key if p["model_name"] == "$key" else one(item, p["model_name"])
        if not isinstance(name, str) or not name:
            continue
        prefix = p.get("name_prefix", "")
        if prefix:
            if not name.startswith(prefix):
                continue
            name = name[len(prefix) :]
        needle = prefix + name if prefix else json.dumps(name)
        # A quoted JSON/TOML value first; else the bare name (an env file's 'single-quoted' value).
        if p["format"] in ("yaml", "yaml-list"):
            line = item.get("line")
        else:
            line = line_of(text, needle) or line_of(text, name)
        start = (line or 1) - 1
        ctx_key = (p.get("model_context") or "").split(".")[-1]
        out_key = (p.get("model_output") or "").split(".")[-1]
        ctx_line = item.get("contextLength_line") or (line_of(text, ctx_key, start) if ctx_key else line)
        out_line = item.get("maxTokens_line") or (line_of(text, out_key, start) if out_key else line)
        found.append(
            {
                "name": name,
                "ctx": as_int(one(item, p["model_context"])) if p.get("model_context") else None,
                "roles": one(item, p["model_roles"]) if p.get("model_roles") else None,
                "out": as_int(one(item, p["model_output"])) if p.get("model_output") else None,
                "line": line,
                "ctx_line": ctx_line,
                "out_line": out_line,
            }
        )
    return found


def check(gateway, probes, key_override=None):
    """Read the installed files, then compare every model they list with the gateway's /v1/models:
    presence, duplicates, context window and output limit. Each problem names the file and line."""
    gateway = gateway.rstrip("/")
    problems, key, entries, servers = 0, key_override, [], []
    host = re.sub(r"^https?://", "", gateway).split("/")[0].lower()
    for slot, p in enumerate(probes):
        path = os.path.expanduser((p.get("macos_file") if platform.system() == "Darwin" else "") or p["file"])
        if not os.path.exists(path):
            if p.get("mcp") and not p["base_url"] and not p.get("models"):
                say("·", f"{p['file']}: no team MCP servers installed")
                continue
            say("✗", f"{p['file']}: not found (run the installer first)")
            problems += 1
            continue
        try:
            read = [str(p.get(k) or "").split(".")[0] for k in ("base_url", "key", "mcp")]
            data, text = load(path, p["format"], [k for k in read if k])
        except Unreadable as exc:
            say("✗", f"{p['file']}: the installer cannot edit it safely ({exc}); fix that and install again")
            problems += 1
            continue
        except Exception as exc:
            say("✗", f"{p['file']}: cannot be read ({exc.__class__.__name__}: {exc})")
            problems += 1
            continue
        bases = [v for _, v in walk(data, p["base_url"]) if isinstance(v, str)] if p["base_url"] else []
        ours = [b for b in bases if re.sub(r"^https?://", "", b).split("/")[0].lower() == host]
        if p["base_url"] and not ours:
            if bases:
                say("✗", f"{p['file']}: no base URL points at {gateway} (found: {', '.join(bases)})")
            else:
                say("✗", f"{p['file']}: no base URL points at {gateway} (found: none)")
            problems += 1
        for b in ours:
            b = b.rstrip("/")
            right, want = {
                "v1": (b.endswith("/v1"), "ending in /v1"),
                "chat": (b.endswith("/v1/chat/completions"), "ending in /v1/chat/completions"),
            }.get(p["base_shape"], (not b.endswith("/v1"), "without /v1 (the client adds /v1/messages)"))
            if right:
                say("✓", f"{p['file']}: base URL {b} has the right shape")
            else:
                say("✗", f"{p['file']} line {line_of(text, b)}: base URL {b} should be {want}")
                problems += 1
            break
        if key is None and p.get("key"):
            key = next((k for k in map(resolve_key, (v for _, v in walk(data, p["key"]))) if k), None)
        if key is None and p.get("key_env"):
            name = one(data, p["key_env"])
            key = env_key(name, p.get("key_file", "")) if isinstance(name, str) else None
        if key is None and p.get("key_var"):
            key = env_key(p["key_var"], p.get("key_file", ""))
        if p.get("mcp"):
            servers += [(p["file"], name, url) for name, url in mcp_entries(p, data)]
            key = key or mcp_key(p, data)
        if p.get("models"):
            for e in entries_of(p, data, text, host):
                e["file"], e["probe"], e["slot"] = p["file"], p, slot
                entries.append(e)
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
        say(
            "✗",
            f"the gateway rejected the key ({status}): it is wrong, revoked or expired; "
            "run a new install command from the Connect page",
        )
        return 1
    if status != 200 or not isinstance(body, dict):
        say("✗", f"GET {gateway}/v1/models answered {status}")
        return 1
    say("✓", "key valid")
    served = {item.get("id"): item for item in body.get("data", []) if isinstance(item, dict)}
    seen = {}  # per probe: one file may hold several apps' lists (CC Switch's database)
    for e in entries:
        seen.setdefault((e["slot"], e["file"], e["name"]), []).append(e["line"])
    for (_, file, name), lines in sorted(seen.items()):
        if len(lines) > 1:
            where = ", ".join(str(n) for n in lines)
            say("✗", f"{file} lines {where}: model {name} is listed {len(lines)} times; keep one (download again)")
            problems += 1
    for e in entries:
        name, file, p = e["name"], e["file"], e["probe"]
        if name not in served:
            say(
                "✗",
                f"{file} line {e['line']}: model {name} is not available to this key (available: "
                f"{', '.join(sorted(served))}); download again"
                if served
                else f"{file} line {e['line']}: model {name} is not available to this key (available: none); "
                "download again",
            )
            problems += 1
            continue
        real, real_out = context_of(served[name]), as_int(served[name].get("max_output_tokens"))
        bad = False
        if p.get("model_context") and real is not None and e["ctx"] != real:
            at = e["ctx_line"]
            if e["ctx"] is None:
                say(
                    "✗",
                    f"{file} line {at}: model {name} has no context window in the file, {real} on the server: "
                    "download again",
                )
            else:
                say(
                    "✗",
                    f"{file} line {at}: model {name} has context window {e['ctx']} in the file, {real} on the "
                    "server: download again",
                )
            bad = True
        if e["out"] is not None and ((real_out and e["out"] > real_out) or (real and e["out"] >= real)):
            at, out = e["out_line"], e["out"]
            if real_out and out > real_out:
                say(
                    "✗",
                    f"{file} line {at}: model {name} output limit {out} in the file, the server allows {real_out}: "
                    "download again",
                )
            else:
                say(
                    "✗",
                    f"{file} line {at}: model {name} output limit {out} in the file, the server allows below the "
                    f"window {real}: download again",
                )
            bad = True
        if bad:
            problems += 1
        elif real is not None and p.get("model_context"):
            say("✓", f"model {name}: reachable, context window {real} agrees with the server")
        else:
            say("✓", f"model {name}: reachable")
        need = p.get("needs")
        if isinstance(e["roles"], list) and "chat" not in e["roles"]:
            need = 0  # an embeddings model: the client's prompt never goes to it
        if need and real is not None and real < need:
            client = p.get("client") or translate("this client")
            say(
                "!",
                f"model {name}: its window ({real} tokens) cannot hold {client}'s own "
                f"prompt and an answer (about {need} tokens): it will fail even on a one-line request; use a "
                "model with a larger window",
            )
    if not entries:
        say(
            "·",
            f"models on the server for this key: {', '.join(sorted(served))}"
            if served
            else "no models on the server for this key",
        )
    problems += check_mcp(servers, key)
    say("✓" if not problems else "✗", "all checks passed" if not problems else f"{problems} problem(s)")
    return 1 if problems else 0


def specs_from_env():
    return json.loads(os.environ.get("TEAM_GATEWAY_UNINSTALL") or "{}")


def main(argv):
    if len(argv) >= 3 and argv[0] == "install":
        bundle = fetch_bundle(argv[1], argv[2])
        return install(bundle, specs=specs_from_env())
    if len(argv) >= 3 and argv[0] == "uninstall":
        specs, yes = specs_from_env(), "--yes" in argv[2:]
        clients = [a for a in argv[2:] if a != "--yes"]
        clients = sorted(specs) if clients == ["all"] else clients
        unknown = [c for c in clients if c not in specs]
        if unknown or not clients:
            print(
                translate(f"unknown client {', '.join(unknown)!r}; one of: all, {', '.join(sorted(specs))}"),
                file=sys.stderr,
            )
            return 2
        return uninstall(specs, argv[1], clients, yes=yes)
    if len(argv) >= 3 and argv[0] == "check":
        probes = json.loads(os.environ["TEAM_GATEWAY_PROBES"])
        client = argv[2]
        if client not in probes:
            print(translate(f"unknown client {client!r}; one of: {', '.join(sorted(probes))}"), file=sys.stderr)
            return 2
        return check(argv[1], probes[client], os.environ.get("TEAM_GATEWAY_CHECK_KEY") or None)
    print(
        "usage: install.py install <portal> <token> | check <gateway> <client>"
        " | uninstall <gateway> <client>... | all [--yes]",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
