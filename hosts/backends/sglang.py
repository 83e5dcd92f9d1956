"""SGLang: `python3 -m sglang.launch_server --model-path MODEL --served-model-name … --tp-size … --context-length …
--mem-fraction-static … --host … --port … --config sglang.yaml`.

The API key is in `sglang.yaml` (mode 0600), read through SGLang's documented `--config` file of
server arguments (`api-key: …`), so it is never on the command line. `--mem-fraction-static` is
the share of each GPU for weights and the KV pool; activations live in the rest.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
from django.utils.translation import gettext_lazy as _

from .base import Backend, LaunchSpec, Option
from .vllm import DTYPE, QUANTIZATION, VLLM, check_parallel, tool_call_parser


class SGLang(Backend):
    kind = "sglang"
    label = "SGLang"
    binary = "python3"
    module = "sglang.launch_server"
    channel_kind = "sglang"  # self-hosted OpenAI-compatible: /health, max_model_len in /v1/models
    key_file = "sglang.yaml"
    options = (
        Option(
            "tp_size",
            int,
            "--tp-size",
            _("Tensor parallel size"),
            None,
            1,
            64,
            help=_("GPUs / pipeline parallel size when blank."),
        ),
        Option("pp_size", int, "--pp-size", _("Pipeline parallel size"), 1, 1, 64),
        Option("context_length", int, "--context-length", _("Context length"), 8192, 256, 10_000_000),
        Option(
            "mem_fraction_static",
            float,
            "--mem-fraction-static",
            _("Static memory fraction"),
            0.85,
            0.1,
            0.98,
            help=_("Share of each GPU for weights + KV cache; the rest is for activations."),
        ),
        DTYPE,
        QUANTIZATION,
        Option(
            "kv_cache_dtype",
            str,
            "--kv-cache-dtype",
            _("KV cache dtype"),
            "auto",
            choices=("auto", "fp8_e4m3", "fp8_e5m2"),
        ),
        Option("chunked_prefill_size", int, "--chunked-prefill-size", _("Chunked prefill size"), None, 1, 10_000_000),
        Option("max_running_requests", int, "--max-running-requests", _("Max running requests"), None, 1, 100_000),
        tool_call_parser(
            _(
                "Coding agents send tools with every request; SGLang answers them with tool calls only when "
                "started with the parser for the model's tool-call format: qwen25 (Qwen2.5, Qwen3), qwen3_coder, "
                "llama3, mistral, deepseekv3, gpt-oss, glm45, kimi_k2. Blank: no tool calling."
            )
        ),
    )
    embedding_flags = frozenset({"--is-embedding"})
    reserved_flags = {
        "--model-path",
        "--model",
        "--served-model-name",
        "--host",
        "--port",
        "--api-key",
        "--config",
        "--tp",
        "--pp",
        "--tensor-parallel-size",
        "--pipeline-parallel-size",
    } | {o.flag for o in options}

    def validate_model_path(self, path: str) -> str:
        return VLLM().validate_model_path(path)

    def check(self, options: dict[str, Any], gpu_count: int) -> dict[str, Any]:
        from django.core.exceptions import ValidationError

        if gpu_count < 1:
            raise ValidationError({"gpu_indices": [_("SGLang needs at least one GPU.")]})
        return check_parallel(options, gpu_count, "tp_size", "pp_size")

    def key_file_text(self, key: str) -> str:
        return f"api-key: {json.dumps(key)}\n"  # a JSON string is a YAML string

    def key_args(self) -> list[str]:
        return ["--config", self.key_file]

    def argv(self, spec: LaunchSpec) -> list[str]:
        o = spec.options
        args = [self.binary, "-m", self.module, "--model-path", spec.model_path]
        args += ["--served-model-name", spec.served_model_name]
        for name in ("tp_size", "context_length", "mem_fraction_static", "dtype"):
            args += [self.option(name).flag, str(o[name])]
        if (o.get("pp_size") or 1) > 1:
            args += ["--pp-size", str(o["pp_size"])]
        if o.get("quantization"):
            args += ["--quantization", o["quantization"]]
        if o.get("kv_cache_dtype") and o["kv_cache_dtype"] != "auto":
            args += ["--kv-cache-dtype", o["kv_cache_dtype"]]
        for name in ("chunked_prefill_size", "max_running_requests"):
            if o.get(name) is not None:
                args += [self.option(name).flag, str(o[name])]
        if o.get("tool_call_parser"):
            args += ["--tool-call-parser", o["tool_call_parser"]]
        args += list(spec.extra_args)
        args += ["--host", spec.bind_host, "--port", str(spec.port)]
        if spec.api_key:
            args += self.key_args()
        return args

    def context_window(self, client: httpx.Client, root_url: str, api_key: str, served_name: str) -> int | None:
        """`max_model_len` of the model in /v1/models, else `context_length` in /get_server_info."""
        headers = {"Authorization": f"Bearer {api_key}"}
        r = client.get(f"{root_url}/v1/models", headers=headers)
        r.raise_for_status()
        for m in r.json().get("data", []):
            if m.get("id") == served_name and isinstance(m.get("max_model_len"), int):
                return int(m["max_model_len"])
        r = client.get(f"{root_url}/get_server_info", headers=headers)
        if r.status_code == 200:
            ctx = r.json().get("context_length")
            if isinstance(ctx, int) and ctx > 0:
                return ctx
        return None

    def configured_window(self, options: dict[str, Any], extra_args: list[str]) -> int | None:
        """`--context-length`, always on the command line (a reserved flag)."""
        return options.get("context_length")

    def fit_params(self, options: dict[str, Any], model_path: str = "") -> dict[str, Any]:
        vllm_like = VLLM().fit_params(
            {
                "max_model_len": options.get("context_length"),
                "dtype": options.get("dtype"),
                "quantization": options.get("quantization"),
                "kv_cache_dtype": options.get("kv_cache_dtype"),
            },
            model_path,
        )
        return {
            **vllm_like,
            "gpu_memory_utilization": options.get("mem_fraction_static") or 0.85,
            "tensor_parallel": options.get("tp_size") or 0,
            "pipeline_parallel": options.get("pp_size") or 1,
            "max_num_batched_tokens": options.get("chunked_prefill_size"),
        }

    def parse_allocation(self, log: str) -> dict[str, Any]:
        from ..calibration import parse_sglang_log

        return parse_sglang_log(log)
