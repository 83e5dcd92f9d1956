"""The client registry: one module per client, each a pure `render(RenderInput) -> Rendered`.

Adding a client is adding a module here and its golden files under tests/clientconfigs/golden/.
"""

from __future__ import annotations

from types import ModuleType

from . import (
    aider,
    ccswitch,
    claude_code,
    cline,
    codex,
    continue_,
    copilot_cli,
    crush,
    droid,
    goose,
    junie,
    kilo,
    llm_cli,
    opencode,
    openhands,
    pi,
    qwen_code,
    roo,
    vibe,
    zed,
)
from .base import ConfigFile, ModelSpec, Rendered, RenderInput

CLIENTS: dict[str, ModuleType] = {
    m.SLUG: m
    for m in (
        cline,
        continue_,
        ccswitch,
        claude_code,
        codex,
        opencode,
        roo,
        qwen_code,
        kilo,
        aider,
        crush,
        zed,
        llm_cli,
        goose,
        copilot_cli,
        pi,
        droid,
        vibe,
        openhands,
        junie,
    )
}

__all__ = ["CLIENTS", "ConfigFile", "ModelSpec", "RenderInput", "Rendered", "get"]


def get(slug: str) -> ModuleType | None:
    return CLIENTS.get(slug)
