"""Simon Willison's `llm` CLI (PyPI `llm` 0.36): extra-openai-models.yaml, keys.json, default_model.txt.

All three live in llm's user directory (click's app dir for `io.datasette.llm`; `LLM_USER_PATH`
moves it). `extra-openai-models.yaml` is a top-level list read by
llm/default_plugins/openai_models.py: `model_id` (what `llm -m` takes), `model_name` (sent to the
API), `api_base`, `api_key_name` (an alias in keys.json, as `llm keys set NAME` stores it),
`headers`, and the flags `supports_tools`, `supports_schema`, `vision`, `can_stream`. The file has
no key field and no context window. Our entries are `teamgw/<model>` between marker comments: a
second install replaces them, the user's own entries stay (on Windows too).
"""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _

from .base import (
    PROVIDER_ID,
    VERSION_HEADER,
    Command,
    ConfigFile,
    Probe,
    Rendered,
    RenderInput,
    dump_json,
    dump_yaml,
)

SLUG = "llm"
LABEL = "llm (Simon Willison's CLI)"
ENV_INDIRECTION = False
DIR = "~/.config/io.datasette.llm"
MACOS_DIR = "~/Library/Application Support/io.datasette.llm"
WINDOWS_DIR = "%APPDATA%\\io.datasette.llm"
MODELS = DIR + "/extra-openai-models.yaml"
KEYS = DIR + "/keys.json"
DEFAULT = DIR + "/default_model.txt"
PREFIX = PROVIDER_ID + "/"


def _file(name: str, content: str, fmt: str, merge: str, **kw: Any) -> ConfigFile:
    return ConfigFile(
        name,
        f"{DIR}/{name}",
        content,
        fmt,
        merge=merge,
        macos_path=f"{MACOS_DIR}/{name}",
        windows_path=f"{WINDOWS_DIR}\\{name}",
        **kw,
    )


def render(inp: RenderInput) -> Rendered:
    entries = [
        {
            "model_id": PREFIX + m.name,
            "model_name": m.name,
            "api_base": inp.api_base,
            "api_key_name": PROVIDER_ID,
            "headers": {VERSION_HEADER: inp.version},
            "supports_tools": True,
        }
        for m in inp.ordered
    ]
    files = [
        _file(
            "extra-openai-models.yaml",
            f"# {inp.stamp}\n" + (dump_yaml(entries) if entries else ""),
            "yaml",
            "yaml-list",
            note=_("Your own entries stay; ours are the teamgw/ ones between the marker comments."),
        )
    ]
    commands = []
    if inp.api_key:
        files.append(_file("keys.json", dump_json({PROVIDER_ID: inp.api_key}), "json", "json", secret=True))
    else:
        commands.append(Command(_("Store your key"), f"llm keys set {PROVIDER_ID}"))
    primary = inp.primary
    if primary:
        files.append(
            _file(
                "default_model.txt",
                PREFIX + primary.name + "\n",
                "text",
                "text",
                note=_("Makes our default model llm's default (`llm models default` changes it)."),
            )
        )
        commands.append(Command(_("Try it"), 'llm "Reply with the word pong."'))
    return Rendered(
        files=files,
        commands=commands,
        notes=[_("Pick another model with `llm -m teamgw/<name>`; `llm models list` shows them.")],
        probes=[
            Probe(
                file=MODELS,
                format="yaml-list",
                base_url="*.api_base",
                base_shape="v1",
                models="*",
                model_name="model_id",
                model_base="api_base",
                name_prefix=PREFIX,
                client=LABEL,
            ),
            Probe(file=KEYS, format="json", base_url="", base_shape="v1", key=PROVIDER_ID),
        ],
    )
