from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

from channels.models import Channel, Model, ModelRoute
from clientconfigs.clients.base import McpServerSpec, ModelSpec, RenderInput
from keys.services import issue_key
from tests.fakes.upstream import FakeUpstream
from tests.services import unavailable

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "golden"
VALIDATORS = HERE / "validators"
SAMPLE_KEY = "gp-SAMPLEKEYforGoldenFiles0123456789abcdefgh"

SAMPLE_MODELS = (
    ModelSpec("qwen3-32b", 32768, 8192, "Qwen3 32B"),
    ModelSpec("llama-3.1-8b", 131072, 4096, ""),
    ModelSpec("mystery-model", None, None, ""),
)


SAMPLE_MCP = (McpServerSpec("docs", "Team docs"), McpServerSpec("tracker", "Issue tracker"))


def sample_input(api_key: str | None) -> RenderInput:
    return RenderInput(
        gateway_url="https://llm.example.com",
        api_key=api_key,
        models=SAMPLE_MODELS,
        mcp_servers=SAMPLE_MCP,
        version="0123456789ab",
        default_model="qwen3-32b",
        generated_at="2026-08-01T00:00:00.000Z",
    )


@pytest.fixture(params=["minted", "placeholder"])
def variant(request) -> tuple[str, RenderInput]:
    return request.param, sample_input(SAMPLE_KEY if request.param == "minted" else None)


def node_validators() -> Path:
    """The folder .ci/run installs validators/package.json's npm deps into."""
    folder = os.environ.get("PORTAL_NODE_VALIDATORS", "")
    if not folder or not (Path(folder) / "node_modules").is_dir():
        unavailable("PORTAL_NODE_VALIDATORS is not set to a folder with the npm validators installed")
    return Path(folder)


def run_node(script: str, files: list[Path]) -> dict[str, dict]:
    """Validate several files in one node process (loading the packages takes seconds)."""
    folder = node_validators()
    done = subprocess.run(
        ["node", str(VALIDATORS / script), *map(str, files)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PORTAL_NODE_VALIDATORS": str(folder)},
    )
    assert done.returncode == 0, done.stderr
    return {Path(r["file"]).name: r for r in json.loads(done.stdout)}


@pytest.fixture
def catalog(db):
    """Two channels serving `qwen3-32b` with different windows, one more model, one disabled model."""
    a = Channel.objects.create(name="gpu-a", base_url="http://10.0.0.1:8000/v1")
    b = Channel.objects.create(name="gpu-b", base_url="http://10.0.0.2:8000/v1")
    off = Channel.objects.create(name="off", base_url="http://10.0.0.3:8000/v1", enabled=False)
    qwen = Model.objects.create(name="qwen3-32b", display_name="Qwen3 32B")
    llama = Model.objects.create(name="llama-3.1-8b")
    hidden = Model.objects.create(name="disabled-model", enabled=False)
    orphan = Model.objects.create(name="no-live-route")
    ModelRoute.objects.create(
        model=qwen, channel=a, context_window=40960, discovered_context_window=32768, max_output_tokens=8192
    )
    ModelRoute.objects.create(model=qwen, channel=b, context_window=65536, max_output_tokens=16384)
    ModelRoute.objects.create(model=llama, channel=a, context_window=8192, max_output_tokens=8192)
    ModelRoute.objects.create(model=hidden, channel=a, context_window=4096)
    ModelRoute.objects.create(model=orphan, channel=off, context_window=4096)
    return {"qwen": qwen, "llama": llama, "hidden": hidden, "orphan": orphan, "a": a, "b": b}


@pytest.fixture
def home(tmp_path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    return home


@pytest.fixture
def gateway_stub(alice, catalog):
    """A real HTTP server answering /v1/models for alice's key, vLLM-shaped (max_model_len)."""
    key, plaintext = issue_key(owner=alice, name="doctor")
    up = FakeUpstream(models=["qwen3-32b", "llama-3.1-8b"], max_model_len=32768, api_key=plaintext).start()
    yield up, key, plaintext
    up.stop()


# CC Switch's tables as its schema.rs creates them (farion1231/cc-switch, schema version 17): the
# installer must work against this, not against a table of our own making.
CCSWITCH_SCHEMA = """
CREATE TABLE providers (
    id TEXT NOT NULL,
    app_type TEXT NOT NULL,
    name TEXT NOT NULL,
    settings_config TEXT NOT NULL,
    website_url TEXT,
    category TEXT,
    created_at INTEGER,
    sort_index INTEGER,
    notes TEXT,
    icon TEXT,
    icon_color TEXT,
    meta TEXT NOT NULL DEFAULT '{}',
    is_current BOOLEAN NOT NULL DEFAULT 0,
    in_failover_queue BOOLEAN NOT NULL DEFAULT 0,
    PRIMARY KEY (id, app_type)
);
CREATE TABLE provider_endpoints (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    provider_id TEXT NOT NULL,
    app_type TEXT NOT NULL,
    url TEXT NOT NULL,
    added_at INTEGER,
    FOREIGN KEY (provider_id, app_type) REFERENCES providers(id, app_type) ON DELETE CASCADE
);
PRAGMA user_version = 17;
"""


def make_ccswitch_db(home: Path) -> Path:
    """An empty CC Switch database where CC Switch keeps it, as its first start leaves it."""
    path = home / ".cc-switch" / "cc-switch.db"
    path.parent.mkdir(parents=True)
    conn = sqlite3.connect(path)
    conn.executescript(CCSWITCH_SCHEMA)
    conn.close()
    return path
