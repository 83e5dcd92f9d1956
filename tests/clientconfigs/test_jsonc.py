"""The installer's JSONC scanner and in-place editor (install.py's jsonc_* and edit_json; install.ps1
mirrors them line by line): it reads JSON with // and /* */ comments and trailing commas exactly as
json.loads reads the same text without them, and it edits only the members whose value changed, so
adding members and taking them out again gives back the original bytes, whatever the layout.
The real installer's runs against a commented Zed settings.json are at the end."""

from __future__ import annotations

import json
import random
import re
import stat
from dataclasses import replace
from pathlib import Path

import pytest

from clientconfigs import installer, services
from clientconfigs.clients.base import McpServerSpec
from clientconfigs.installer import install as inst

from .conftest import SAMPLE_KEY, sample_input

# --- the scanner ------------------------------------------------------------------------------

TRICKY = [
    ('{"a": 1}', {"a": 1}),
    ("{}", {}),
    ("[]", []),
    ("  {\n}\n", {}),
    ('{"a": [1, 2, 3,],}', {"a": [1, 2, 3]}),
    ('{"a": {"b": {"c": [{"d": null,},],},},}', {"a": {"b": {"c": [{"d": None}]}}}),
    ('// lead\n{"a": 1} // tail', {"a": 1}),
    ('/* lead */{/* k */"a"/* c */:/* v */1/* , */}/* tail */', {"a": 1}),
    ('{"url": "http://x//not-a-comment"}', {"url": "http://x//not-a-comment"}),
    ('{"a": "/* not a comment */", "b": "// nor this"}', {"a": "/* not a comment */", "b": "// nor this"}),
    ('{"q": "say \\"hi\\" // there", "p": 2}', {"q": 'say "hi" // there', "p": 2}),
    ('{"path": "C:\\\\dir\\\\", "n": 1}', {"path": "C:\\dir\\", "n": 1}),
    ('{"a\\"b": 1, "c//d": 2, "e/*f": 3}', {'a"b': 1, "c//d": 2, "e/*f": 3}),
    ('{"u": "\\u00e9\\u2028", "é": "ü"}', {"u": "é\u2028", "é": "ü"}),
    ('{"a": 1, /* a, b */ "b": [/* ] */ 2,],}', {"a": 1, "b": [2]}),
    ('{\r\n  // crlf\r\n  "a": 1,\r\n}\r\n', {"a": 1}),
    ('\ufeff// bom\n{"a": true, "b": false, "c": null, "d": -1.5e3}', {"a": True, "b": False, "c": None, "d": -1500.0}),
    ('{"a": 1, "a": 2}', {"a": 2}),  # json.loads keeps the last
    ('{"a": "x",\n// "b": "commented out",\n/* "c": {\n  "d": 1\n} */\n}', {"a": "x"}),
    ('{"a": "trailing comma inside, a string: ,}"}', {"a": "trailing comma inside, a string: ,}"}),
]


@pytest.mark.parametrize(("text", "expected"), TRICKY)
def test_the_scanner_reads_jsonc_as_json_loads_reads_it_without_the_comments(text, expected):
    assert inst.same(inst.jsonc_loads(text), expected)


NOT_JSONC = [
    "",
    "{",
    '{"a": 1',
    '{"a" 1}',
    '{"a": 1 "b": 2}',
    "{a: 1}",
    "{'a': 1}",
    '{"a": 1,,}',
    "{,}",
    "[,]",
    '{"a": /* open comment 1}',
    '{"a": "open string}',
    '{"a": "line\nbreak"}',
    '{"a": tru}',
    '{"a": 01}',
    '{"a": 1} {"b": 2}',
    '{"a": 1},',
    '{"a": 1} / 2',
]


@pytest.mark.parametrize("text", NOT_JSONC)
def test_text_that_is_not_jsonc_is_refused_with_where_and_why(text):
    with pytest.raises(ValueError, match="not JSON, even with comments"):
        inst.jsonc_loads(text)


def test_the_refusal_names_the_line_and_column():
    with pytest.raises(ValueError, match="line 3 column 10: expected ',' or '}'"):
        inst.jsonc_loads('{\n  "a": 1,\n  "b": 2 "c": 3\n}')


# Values to build random documents from, strings with comment-like text and escapes among them.
STRINGS = ["", "x", "http://h/v1", "// no", "/* no */", 'q"uote', "back\\slash", "tab\there", "é ü 中", ",}]", "*/"]


def random_value(rng: random.Random, depth: int):
    kind = rng.random()
    if depth >= 3 or kind < 0.45:
        return rng.choice([0, 1, -7, 2.5, True, False, None, *STRINGS])
    if kind < 0.6:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(STRINGS) + str(i): random_value(rng, depth + 1) for i in range(rng.randint(0, 4))}


def trivia(rng: random.Random, nl: str) -> str:
    """Whitespace and comments, as a person leaves them between two tokens."""
    return rng.choice(["", " ", nl + "  ", f" // note {{,}} /* x{nl}  ", " /* a, b } */ ", f"{nl}  /* {nl} */{nl}  "])


def write_jsonc(rng: random.Random, value, nl: str, indent: str = "") -> str:
    """`value` in JSONC: comments between tokens and trailing commas at random, one member a line."""
    if isinstance(value, dict) or isinstance(value, list):
        items = list(value.items()) if isinstance(value, dict) else [(None, v) for v in value]
        open_, close = ("{", "}") if isinstance(value, dict) else ("[", "]")
        if not items:
            return open_ + rng.choice(["", nl + indent, " /* empty */ "]) + close
        inner = indent + "  "
        parts = []
        for k, v in items:
            head = json.dumps(k, ensure_ascii=False) + trivia(rng, nl) + ":" + " " if k is not None else ""
            parts.append(nl + inner + head + write_jsonc(rng, v, nl, inner) + trivia(rng, nl))
        text = open_ + ",".join(parts) + ("," if rng.random() < 0.5 else "") + trivia(rng, nl) + nl + indent + close
        return text
    return json.dumps(value, ensure_ascii=False)


@pytest.mark.parametrize("seed", range(60))
def test_random_jsonc_reads_as_the_value_it_was_written_from(seed):
    rng = random.Random(seed)
    value = {f"k{i}": random_value(rng, 1) for i in range(rng.randint(0, 5))}
    nl = rng.choice(["\n", "\r\n"])
    text = rng.choice(["", "\ufeff"]) + rng.choice(["", f"// header{nl}"]) + write_jsonc(rng, value, nl) + nl
    assert inst.same(inst.jsonc_loads(text), value), text


# --- the editor -------------------------------------------------------------------------------

ZED_DEFAULT = """// Zed settings
//
// For information on how to configure Zed, see the Zed
// documentation: https://zed.dev/docs/configuring-zed
//
// To see all of Zed's default settings without changing your
// custom settings, run `zed: open default settings` from the
// command palette (cmd-shift-p / ctrl-shift-p)
{
  "project_panel": {
    "dock": "left",
    "starts_open": true,
  },
  "agent": {
    "dock": "right",
  },
  "ui_font_size": 16,
  "buffer_font_size": 15,
  "theme": {
    "mode": "system",
    "light": "One Light",
    "dark": "One Dark",
  },
}
"""
ZED_HEADER = ZED_DEFAULT.split("{", 1)[0]
# Zed's user settings as earlier versions wrote them, and its folder settings' `{}` body.
ZED_OLDER = ZED_HEADER + (
    '{\n  "ui_font_size": 16,\n  "buffer_font_size": 16,\n  "theme": {\n    "mode": "system",\n'
    '    "light": "One Light",\n    "dark": "One Dark"\n  }\n}\n'
)
ZED_EMPTY = ZED_HEADER + "{}\n"
ZED_EMPTY_COMMENTED = ZED_HEADER + '{\n  // "theme": "One Dark",\n}\n'
ZED_MY_SERVERS = (
    ZED_HEADER
    + """{
  "theme": "One Dark", // my theme
  "context_servers": {
    // my own server, with "// and /* in its strings */"
    "my-own": {
      "command": "my-mcp", /* the binary */
      "args": ["--url", "http://x//y", "say \\"hi\\""],
    },
    // "my-old": { "url": "http://127.0.0.1:9/mcp" },
    "my-remote": {"url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "Bearer mine"}}
  }
}
"""
)
SHAPES = {
    "zed-default": ZED_DEFAULT,
    "zed-older": ZED_OLDER,
    "empty-body": ZED_EMPTY,
    "commented-body": ZED_EMPTY_COMMENTED,
    "my-servers": ZED_MY_SERVERS,
    "crlf-bom": "\ufeff" + ZED_MY_SERVERS.replace("\n", "\r\n"),
    "tabs": ZED_OLDER.replace("  ", "\t"),
    "one-line": '{"theme": "One Dark", "context_servers": {"my-own": {"command": "x"}}}',
    "one-line-trailing": '{"theme": "One Dark", "context_servers": {},}',
    "plain-json": json.dumps({"theme": "dark", "context_servers": {"my-own": {"url": "u"}}}, indent=2) + "\n",
}
ADDED = {
    "language_models": {"openai_compatible": {"teamgw": {"api_url": "http://g/v1", "available_models": []}}},
    "agent": {"default_model": {"provider": "teamgw", "model": "m"}},
    "context_servers": {"teamgw-docs": {"url": "http://g/mcp/docs"}, "teamgw-tracker": {"url": "http://g/mcp/t"}},
}


def with_ours(data: dict, ours: dict) -> dict:
    out = json.loads(json.dumps(data))
    inst.deep_merge(out, json.loads(json.dumps(ours)))
    return out


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_adding_members_then_removing_them_gives_back_the_original_bytes(shape):
    text = SHAPES[shape]
    mine = inst.jsonc_loads(text)
    both = with_ours(mine, ADDED)
    edited = inst.edit_json(text, both)
    assert inst.same(inst.jsonc_loads(edited), both)
    for comment in ("// Zed settings", "// my theme", "/* the binary */", '// "my-old"', '// "theme": "One Dark",'):
        assert (comment in edited) == (comment in text), comment
    one_server = with_ours(mine, {**ADDED, "context_servers": {"teamgw-docs": {"url": "http://g/mcp/docs", "v": 2}}})
    fewer = inst.edit_json(edited, one_server)
    assert inst.same(inst.jsonc_loads(fewer), one_server)
    assert inst.edit_json(fewer, mine) == text
    assert inst.edit_json(edited, mine) == text


def test_members_go_in_at_the_files_indent_with_its_trailing_commas_and_line_ends():
    edited = inst.edit_json(SHAPES["crlf-bom"], with_ours(inst.jsonc_loads(SHAPES["crlf-bom"]), ADDED))
    assert edited.startswith("\ufeff// Zed settings\r\n") and "\n" not in edited.replace("\r\n", "")
    mine = '    "my-remote": {"url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "Bearer mine"}},\r\n'
    assert mine in edited
    assert '    "teamgw-docs": {\r\n      "url": "http://g/mcp/docs"\r\n    },\r\n    "teamgw-tracker"' in edited
    tabs = inst.edit_json(SHAPES["tabs"], with_ours(inst.jsonc_loads(SHAPES["tabs"]), ADDED))
    assert '\n\t"context_servers": {\n\t\t"teamgw-docs": {\n\t\t\t"url"' in tabs
    zed = inst.edit_json(ZED_DEFAULT, with_ours(inst.jsonc_loads(ZED_DEFAULT), ADDED))
    assert '  "agent": {\n    "dock": "right",\n    "default_model": {\n' in zed
    assert zed.endswith("    }\n  },\n}\n")  # Zed's own style: the member we add keeps the trailing comma


@pytest.mark.parametrize("seed", range(80))
def test_random_additions_and_their_removal_give_back_the_original_bytes(seed):
    """Any JSONC object, any members added at any depth (into empty objects too): taking them out
    again restores every byte, and the edited text reads as the intended data."""
    rng = random.Random(1000 + seed)
    value = {f"k{i}": random_value(rng, 1) for i in range(rng.randint(0, 4))}
    nl = rng.choice(["\n", "\r\n"])
    text = rng.choice(["", f"// header{nl}"]) + write_jsonc(rng, value, nl) + nl
    objects = [[]]
    stack = [([], value)]
    while stack:
        path, node = stack.pop()
        for k, v in node.items():
            if isinstance(v, dict):
                objects.append([*path, k])
                stack.append(([*path, k], v))
    target = json.loads(json.dumps(value))
    for n in range(rng.randint(1, 3)):
        node = target
        for k in rng.choice(objects):
            node = node[k]
        node[f"teamgw-{seed}-{n}"] = random_value(rng, 1)
    edited = inst.edit_json(text, target)
    assert inst.same(inst.jsonc_loads(edited), target), edited
    # An empty object we added to and emptied again is written `{}`, also where it was `{` newline `}`.
    assert inst.edit_json(edited, value) in (text, EMPTY_BODY.sub("{}", text)), edited


EMPTY_BODY = re.compile(r"\{[ \t\r\n]*\}")


def test_an_empty_object_emptied_again_is_written_as_json_dumps_writes_it():
    """`{}` and `{` newline `}` both become the same multi-line object once a member is in them, so
    which one it was cannot be told afterwards: it goes back to `{}` (Zed's and json.dumps' form)."""
    for text in ("{}", "{\n}", '{"a": {\n  }}', '{"a": {}}', '{"a": {  }}'):
        data = inst.jsonc_loads(text)
        edited = inst.edit_json(text, with_ours(data, {"a": {"teamgw-x": 1}}))
        assert inst.edit_json(edited, data) == EMPTY_BODY.sub("{}", text)


def test_a_changed_value_is_rewritten_in_place_and_nothing_else_moves():
    text = '{\n  // the model\n  "model": "old", /* keep */\n  "other": [1,2],\n}\n'
    assert inst.edit_json(text, {"model": {"name": "new"}, "other": [1, 2]}) == (
        '{\n  // the model\n  "model": {\n    "name": "new"\n  }, /* keep */\n  "other": [1,2],\n}\n'
    )
    assert inst.edit_json(text, inst.jsonc_loads(text)) == text  # nothing changed: not a byte


def test_a_file_that_is_not_jsonc_is_refused_by_the_merge_and_left_to_the_caller():
    with pytest.raises(ValueError, match="line 2 column 3"):
        inst.merge_json("{\n  oops\n}\n", json.dumps({"a": 1}))
    with pytest.raises(ValueError, match="not a JSON object"):
        inst.merge_json("// a list\n[1, 2,]\n", json.dumps({"a": 1}))


# --- the installer on a commented Zed settings.json ------------------------------------------

SPECS = installer.uninstall_specs()


def install_zed(inp, home: Path) -> int:
    bundle = services.bundle("zed", inp, services.render("zed", inp), None)
    return inst.install(bundle, stamp="1", specs=SPECS)


ZED_SHAPES = ["zed-default", "zed-older", "empty-body", "commented-body", "my-servers", "crlf-bom"]


@pytest.mark.parametrize("shape", ZED_SHAPES)
def test_install_reinstall_with_fewer_servers_and_uninstall_give_zeds_file_back_byte_for_byte(
    shape, tmp_path, monkeypatch
):
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    settings = home / ".config" / "zed" / "settings.json"
    settings.parent.mkdir(parents=True)
    original = SHAPES[shape].encode()
    settings.write_bytes(original)
    settings.chmod(0o644)
    mine = inst.jsonc_loads(SHAPES[shape])

    first = sample_input(SAMPLE_KEY)
    assert install_zed(first, home) == 0
    text = settings.read_bytes().decode()
    data = inst.jsonc_loads(text)
    ours = {k for k in data.get("context_servers", {}) if k.startswith("teamgw-")}
    assert ours == {"teamgw-docs", "teamgw-tracker"}
    assert data["context_servers"]["teamgw-docs"]["headers"]["Authorization"] == f"Bearer {SAMPLE_KEY}"
    assert data["language_models"]["openai_compatible"]["teamgw"]["api_url"] == first.api_base
    for name, entry in mine.get("context_servers", {}).items():
        assert data["context_servers"][name] == entry  # the user's own servers, as they were
    assert text.startswith(SHAPES[shape].split("{", 1)[0])  # the comments above the object
    assert stat.S_IMODE(settings.stat().st_mode) == 0o600  # it holds the key now
    assert (home / ".config" / "zed" / "settings.json.bak-1").read_bytes() == original

    fewer = replace(first, mcp_servers=(McpServerSpec("docs", "Team docs"),), version="second")
    assert install_zed(fewer, home) == 0
    data = inst.jsonc_loads(settings.read_bytes().decode())
    assert {k for k in data["context_servers"] if k.startswith("teamgw-")} == {"teamgw-docs"}
    assert data["context_servers"]["teamgw-docs"]["headers"]["X-Gateway-Config-Version"] == "second"

    assert inst.uninstall(SPECS, first.gateway_url, ["zed"], yes=True, stamp="2") == 0
    assert settings.read_bytes() == original


def test_a_file_without_the_key_keeps_its_mode_and_is_replaced_whole_never_half_written(tmp_path, monkeypatch):
    """VS Code's settings.json (Roo's one line): edited through a temporary file renamed over it, so
    a reader sees the old file or the new one; its mode stays the user's."""
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    inp = replace(sample_input(None), mcp_servers=())
    bundle = services.bundle("roo", inp, services.render("roo", inp), None)
    [vscode] = [f for f in bundle["files"] if f["path"].endswith("Code/User/settings.json")]
    target = home / vscode["path"].removeprefix("~/")
    target.parent.mkdir(parents=True)
    original = '{\r\n\t// mine\r\n\t"editor.fontSize": 14\r\n}\r\n'
    target.write_bytes(original.encode())
    target.chmod(0o640)
    inode = target.stat().st_ino
    assert inst.install(bundle, stamp="1", specs=SPECS) == 0
    edited = target.read_bytes().decode()
    assert edited.startswith('{\r\n\t// mine\r\n\t"editor.fontSize": 14,\r\n\t"roo-cline.autoImportSettingsPath": ')
    assert stat.S_IMODE(target.stat().st_mode) == 0o640 and target.stat().st_ino != inode
    assert not [p for p in target.parent.iterdir() if p.name.startswith(".team-gateway-")]
    assert inst.uninstall(SPECS, inp.gateway_url, ["roo"], yes=True, stamp="2") == 0
    assert target.read_bytes() == original.encode() and stat.S_IMODE(target.stat().st_mode) == 0o640


def test_a_zed_file_that_is_not_jsonc_is_left_alone_and_said_so(tmp_path, monkeypatch, capsys):
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    settings = home / ".config" / "zed" / "settings.json"
    settings.parent.mkdir(parents=True)
    broken = ZED_HEADER + '{\n  "theme": "One Dark"\n  "ui_font_size": 16\n}\n'
    settings.write_text(broken)
    assert install_zed(sample_input(SAMPLE_KEY), home) == 1
    assert settings.read_text() == broken
    assert not list(settings.parent.glob("settings.json.bak-*"))
    out = capsys.readouterr().out
    assert (
        "settings.json: left unchanged, the installer cannot edit it safely (not JSON, even with comments: "
        "line 11 column 3: expected ','"
    ) in out
    assert inst.uninstall(SPECS, "https://llm.example.com", ["zed"], yes=True, stamp="2") == 1
    assert settings.read_text() == broken


def test_the_doctor_reads_zeds_commented_file_with_the_same_scanner(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    settings = home / ".config" / "zed" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(ZED_MY_SERVERS)
    assert install_zed(sample_input(SAMPLE_KEY), home) == 0
    [probe] = installer.probes()["zed"]
    data, _ = inst.load(str(settings), probe["format"])
    assert inst.mcp_entries(probe, data) == [
        ("teamgw-docs", "https://llm.example.com/mcp/docs"),
        ("teamgw-tracker", "https://llm.example.com/mcp/tracker"),
    ]
    assert inst.mcp_key(probe, data) == SAMPLE_KEY


# --- install.ps1's mirror ---------------------------------------------------------------------

# Every function of install.py's JSONC section and its twin in install.ps1 (which cannot run here:
# no PowerShell on this machine), so neither grows a step the other lacks.
PS_TWINS = {
    "jsonc_error": "New-JsoncError",
    "jsonc_tokens": "Get-JsoncTokens",
    "jsonc_value": "Get-JsoncValue",
    "jsonc_parse": "ConvertFrom-JsoncText",
    "jsonc_loads": "ConvertFrom-Jsonc",
    "same": "Test-JsonSame",
    "line_start": "Get-LineStart",
    "line_end": "Get-LineEnd",
    "indent_at": "Get-IndentAt",
    "blank": "Test-Blank",
    "jsonc_layout": "Get-JsoncLayout",
    "jsonc_dump": "ConvertTo-JsoncValue",
    "jsonc_find": "Find-JsoncNode",
    "jsonc_remove": "Remove-JsoncMember",
    "jsonc_add": "Add-JsoncMember",
    "jsonc_set": "Set-JsoncMember",
    "jsonc_edit_members": "Edit-JsoncMembers",
    "edit_json": "Edit-Jsonc",
}


def test_every_jsonc_step_of_install_py_has_its_twin_in_install_ps1():
    here = Path(inst.__file__).resolve().parent
    python = (here / "install.py").read_text()
    section = python.split("# --- JSONC:", 1)[1].split("# --- merges:", 1)[0]
    assert set(re.findall(r"(?m)^def (\w+)\(", section)) == set(PS_TWINS)
    powershell = (here / "install.ps1").read_text()
    defined = set(re.findall(r"(?m)^function ([\w-]+)", powershell))
    assert set(PS_TWINS.values()) <= defined
    # The readers and the writer of every installed JSON file go through them on both sides.
    for ps in ("ConvertFrom-PlainJson", "ConvertTo-Json -Depth"):
        assert ps not in powershell
    for step in ("Edit-Jsonc $old $data", "Edit-Jsonc $text $data", "$data = ConvertFrom-Jsonc $text"):
        assert step in powershell
    for step in ("return edit_json(existing, data)", "return edit_json(text, data)", "return jsonc_loads(text), text"):
        assert step in python
