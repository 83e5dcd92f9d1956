"""llama.cpp: `llama-server -m MODEL.gguf -ngl … -c … [--jinja] [-fa on] [-np …] --host … --port … --api-key-file …`.

The key file is read by llama-server itself (one key per line); the key is never in argv.
"""

from __future__ import annotations

from typing import Any

import httpx
from django.utils.translation import gettext_lazy as _

from .base import Backend, LaunchSpec, Option, validate_absolute_path


class LlamaCpp(Backend):
    kind = "llamacpp"
    label = "llama.cpp (llama-server)"
    binary = "llama-server"
    channel_kind = "llamacpp"
    options = (
        Option("n_gpu_layers", int, "-ngl", _("GPU layers"), 999, 0, 999, help=_("999 offloads every layer.")),
        Option("ctx_size", int, "-c", _("Context size (all slots together)"), 8192, 256, 10_000_000),
        Option(
            "parallel", int, "-np", _("Parallel slots"), None, 1, 256, help=_("Each slot gets context size / slots.")
        ),
        Option("jinja", bool, "--jinja", _("Use the model's Jinja chat template"), True),
        Option("flash_attn", str, "-fa", _("Flash attention"), "auto", choices=("auto", "on", "off")),
        Option("cache_type", str, "--cache-type-k", _("KV cache type"), "f16", choices=("f16", "q8_0", "q4_0")),
        Option("threads", int, "-t", _("CPU threads"), None, 1, 1024),
    )
    embedding_flags = frozenset({"--embedding", "--embeddings"})
    reserved_flags = {
        "-m",
        "--model",
        "--host",
        "--port",
        "--api-key",
        "--api-key-file",
        "-a",
        "--alias",
        "-c",
        "--ctx-size",
        "-ngl",
        "--n-gpu-layers",
        "--gpu-layers",
        "-np",
        "--parallel",
        "-fa",
        "--flash-attn",
        "-t",
        "--threads",
        "--cache-type-k",
        "--cache-type-v",
        "-ctk",
        "-ctv",
    }

    def validate_model_path(self, path: str) -> str:
        return validate_absolute_path(path, suffix=".gguf")

    def argv(self, spec: LaunchSpec) -> list[str]:
        o = spec.options
        args = [self.binary, "-m", spec.model_path, "-a", spec.served_model_name]
        args += ["-ngl", str(o["n_gpu_layers"]), "-c", str(o["ctx_size"])]
        if o.get("parallel") is not None:
            args += ["-np", str(o["parallel"])]
        if o.get("jinja"):
            args.append("--jinja")
        if o.get("flash_attn") in ("on", "off"):
            args += ["-fa", o["flash_attn"]]
        if o.get("cache_type") and o["cache_type"] != "f16":
            args += ["--cache-type-k", o["cache_type"], "--cache-type-v", o["cache_type"]]
        if o.get("threads") is not None:
            args += ["-t", str(o["threads"])]
        args += list(spec.extra_args)
        args += ["--host", spec.bind_host, "--port", str(spec.port)]
        if spec.api_key:
            args += self.key_args()
        return args

    def key_args(self) -> list[str]:
        return ["--api-key-file", self.key_file]

    def context_window(self, client: httpx.Client, root_url: str, api_key: str, served_name: str) -> int | None:
        """The per-slot context from /props (what one request can use), else /v1/models meta."""
        headers = {"Authorization": f"Bearer {api_key}"}
        r = client.get(f"{root_url}/props", headers=headers)
        if r.status_code == 200:
            n_ctx = (r.json().get("default_generation_settings") or {}).get("n_ctx")
            if isinstance(n_ctx, int) and n_ctx > 0:
                return n_ctx
        r = client.get(f"{root_url}/v1/models", headers=headers)
        r.raise_for_status()
        for m in r.json().get("data", []):
            n_ctx = (m.get("meta") or {}).get("n_ctx")
            if isinstance(n_ctx, int) and n_ctx > 0:
                return n_ctx
        return None

    def configured_window(self, options: dict[str, Any], extra_args: list[str]) -> int | None:
        """A slot's share of `-c`: llama-server splits it among `-np` slots unless their cache is
        unified (`--kv-unified`, which it turns on itself when `-np` is left to it)."""
        ctx, slots = int(options.get("ctx_size") or 0), int(options.get("parallel") or 1)
        if not ctx:
            return None
        if {"-kvu", "--kv-unified"} & set(extra_args):
            return ctx
        return max(1, ctx // slots)

    def fit_params(self, options: dict[str, Any], model_path: str = "") -> dict[str, Any]:
        return {
            "context": options.get("ctx_size") or 8192,
            "parallel": 1,  # -c is the total over all slots already
            "n_gpu_layers": options.get("n_gpu_layers", 999),
            "kv_dtype": {"q8_0": "q8_0", "q4_0": "q4_0"}.get(options.get("cache_type") or "f16", "fp16"),
            "flash_attention": options.get("flash_attn") or "auto",
        }

    def parse_allocation(self, log: str) -> dict[str, Any]:
        from ..calibration import parse_llamacpp_log

        return parse_llamacpp_log(log)
