"""vLLM: `vllm serve MODEL --served-model-name … --tensor-parallel-size … [--pipeline-parallel-size …] …`.

The API key reaches vLLM as `VLLM_API_KEY`, exported by the launcher from the key file.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import httpx
from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _

from .base import Backend, LaunchSpec, Option, validate_absolute_path

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise

# Options vLLM and SGLang spell the same way (sglang.py uses these too).
DTYPE = Option("dtype", str, "--dtype", _("Weights dtype"), "auto", choices=("auto", "bfloat16", "float16", "float32"))
QUANTIZATION = Option(
    "quantization",
    str,
    "--quantization",
    _("Quantisation"),
    "",
    choices=("", "awq", "awq_marlin", "gptq", "gptq_marlin", "fp8", "bitsandbytes", "compressed-tensors", "gguf"),
)

# A tool-call parser's name, as vLLM and SGLang register them (hermes, qwen3_coder, gpt-oss, glm-4.5).
PARSER_NAME = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}"

# Which parser a model's tool calls need, by a case-insensitive piece of its path or id, first match
# wins: (piece, vLLM's name, SGLang's name). From the servers' tool-calling guides; a model not
# here gets no suggestion (its model card says which format it writes).
TOOL_PARSERS = (
    ("qwen3-coder", "qwen3_coder", "qwen3_coder"),
    ("qwen3", "hermes", "qwen25"),
    ("qwen2.5", "hermes", "qwen25"),
    ("qwq", "hermes", "qwen25"),
    ("llama-4", "llama4_pythonic", "llama4"),
    ("llama4", "llama4_pythonic", "llama4"),
    ("llama-3", "llama3_json", "llama3"),
    ("llama3", "llama3_json", "llama3"),
    ("mistral", "mistral", "mistral"),
    ("devstral", "mistral", "mistral"),
    ("codestral", "mistral", "mistral"),
    ("deepseek-v3.2", "deepseek_v32", "deepseekv32"),
    ("deepseek-v3.1", "deepseek_v31", "deepseekv31"),
    ("deepseek-v3", "deepseek_v3", "deepseekv3"),
    ("gpt-oss", "openai", "gpt-oss"),
    ("glm-4.5", "glm45", "glm45"),
    ("glm-4.6", "glm45", "glm45"),
    ("kimi-k2", "kimi_k2", "kimi_k2"),
    ("hermes", "hermes", "qwen25"),
)


def tool_call_parser(help: StrOrPromise) -> Option:
    """The `tool_call_parser` option (vLLM and SGLang spell the flag alike, not the names)."""
    return Option(
        "tool_call_parser", str, "--tool-call-parser", _("Tool-call parser"), "", pattern=PARSER_NAME, help=help
    )


def suggested_tool_parser(backend: str, model_path: str) -> str:
    """The tool-call parser that model's format needs on `backend` (vllm, sglang), or ""."""
    path = model_path.lower()
    for piece, vllm, sglang in TOOL_PARSERS:
        if piece in path:
            return vllm if backend == "vllm" else sglang
    return ""


HF_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")


_EIGHT_BIT = re.compile(r"(?<![0-9])(8[-_]?bit|int8|bnb[-_]?8)(?![0-9])", re.I)


class VLLM(Backend):
    kind = "vllm"
    label = "vLLM"
    binary = "vllm"
    channel_kind = "vllm"
    options = (
        Option(
            "tensor_parallel_size",
            int,
            "--tensor-parallel-size",
            _("Tensor parallel size"),
            None,
            1,
            64,
            help=_("GPUs / pipeline parallel size (filled in when blank); must divide the attention heads."),
        ),
        Option(
            "pipeline_parallel_size",
            int,
            "--pipeline-parallel-size",
            _("Pipeline parallel size"),
            1,
            1,
            64,
            help=_("Stages the layers are split into; tensor x pipeline parallel = GPUs."),
        ),
        Option("max_model_len", int, "--max-model-len", _("Context length"), 8192, 256, 10_000_000),
        Option(
            "gpu_memory_utilization", float, "--gpu-memory-utilization", _("GPU memory utilisation"), 0.9, 0.1, 0.99
        ),
        DTYPE,
        QUANTIZATION,
        Option(
            "kv_cache_dtype",
            str,
            "--kv-cache-dtype",
            _("KV cache dtype"),
            "auto",
            choices=("auto", "fp8", "fp8_e4m3", "fp8_e5m2"),
        ),
        Option("enable_prefix_caching", bool, "--enable-prefix-caching", _("Prefix caching"), False),
        Option("enable_chunked_prefill", bool, "--enable-chunked-prefill", _("Chunked prefill"), False),
        Option("max_num_batched_tokens", int, "--max-num-batched-tokens", _("Max batched tokens"), None, 1, 10_000_000),
        Option("max_num_seqs", int, "--max-num-seqs", _("Max sequences"), None, 1, 4096),
        tool_call_parser(
            _(
                "Coding agents send tools with every request; vLLM refuses them (400) unless it was started "
                "with the parser for the model's tool-call format (also sets --enable-auto-tool-choice): "
                "hermes (Qwen2.5, Qwen3), qwen3_coder, llama3_json, mistral, deepseek_v3, openai (gpt-oss), "
                "glm45, kimi_k2. Blank: no tool calling."
            )
        ),
    )
    # `--task embed` (older releases), `--runner pooling` and `--convert embed` (newer ones).
    embedding_values = {
        "--task": frozenset({"embed", "embedding"}),
        "--runner": frozenset({"pooling"}),
        "--convert": frozenset({"embed"}),
    }
    reserved_flags = {
        "--host",
        "--port",
        "--api-key",
        "--served-model-name",
        "--model",
        "--config",
        "-tp",
        "-pp",
        "--distributed-executor-backend",
        "--enable-auto-tool-choice",
    } | {o.flag for o in options}
    key_env = "VLLM_API_KEY"

    def validate_model_path(self, path: str) -> str:
        if isinstance(path, str) and HF_ID.fullmatch(path) and ".." not in path:
            return path
        try:
            return validate_absolute_path(path)
        except ValidationError:
            raise ValidationError(
                _("A Hugging Face id (org/name) or an absolute folder on the host, without spaces or shell characters.")
            ) from None

    def check(self, options: dict[str, Any], gpu_count: int) -> dict[str, Any]:
        if gpu_count < 1:
            raise ValidationError({"gpu_indices": [_("vLLM needs at least one GPU.")]})
        return check_parallel(options, gpu_count)

    def argv(self, spec: LaunchSpec) -> list[str]:
        o = spec.options
        args = [self.binary, "serve", spec.model_path, "--served-model-name", spec.served_model_name]
        for name in ("tensor_parallel_size", "max_model_len", "gpu_memory_utilization", "dtype"):
            args += [self.option(name).flag, str(o[name])]
        if (o.get("pipeline_parallel_size") or 1) > 1:
            args += ["--pipeline-parallel-size", str(o["pipeline_parallel_size"])]
        if spec.distributed_backend:
            args += ["--distributed-executor-backend", spec.distributed_backend]
        for name in ("quantization",):
            if o.get(name):
                args += [self.option(name).flag, o[name]]
        if o.get("kv_cache_dtype") and o["kv_cache_dtype"] != "auto":
            args += ["--kv-cache-dtype", o["kv_cache_dtype"]]
        for name in ("enable_prefix_caching", "enable_chunked_prefill"):
            if o.get(name):
                args.append(self.option(name).flag)
        for name in ("max_num_batched_tokens", "max_num_seqs"):
            if o.get(name) is not None:
                args += [self.option(name).flag, str(o[name])]
        if o.get("tool_call_parser"):
            args += ["--enable-auto-tool-choice", "--tool-call-parser", o["tool_call_parser"]]
        args += list(spec.extra_args)
        args += ["--host", spec.bind_host, "--port", str(spec.port)]
        return args

    def context_window(self, client: httpx.Client, root_url: str, api_key: str, served_name: str) -> int | None:
        """vLLM lists `max_model_len` per model in /v1/models."""
        r = client.get(f"{root_url}/v1/models", headers={"Authorization": f"Bearer {api_key}"})
        r.raise_for_status()
        for m in r.json().get("data", []):
            if m.get("id") == served_name and isinstance(m.get("max_model_len"), int):
                return int(m["max_model_len"])
        return None

    def configured_window(self, options: dict[str, Any], extra_args: list[str]) -> int | None:
        """`--max-model-len`, always on the command line (a reserved flag): vLLM serves exactly it or
        refuses to start."""
        return options.get("max_model_len")

    def fit_params(self, options: dict[str, Any], model_path: str = "") -> dict[str, Any]:
        """A pre-quantised checkpoint's own `quantization_config` wins over these (the estimate reads
        it); without one (a preset), a bitsandbytes checkpoint named 8-bit is sized as 8-bit."""
        dtype = options.get("dtype") or "auto"
        quant = options.get("quantization") or ""
        weights = {
            "fp8": "fp8",
            "awq": "int4",
            "awq_marlin": "int4",
            "gptq": "int4",
            "gptq_marlin": "int4",
            "bitsandbytes": "int4",  # in-flight quantisation is 4-bit; an 8-bit checkpoint says so (below)
        }.get(quant) or {"float32": "fp32"}.get(dtype, "bf16")
        if quant == "bitsandbytes" and model_path and _EIGHT_BIT.search(model_path.rsplit("/", 1)[-1]):
            weights = "int8"
        return {
            "context": options.get("max_model_len") or 8192,
            "parallel": 1,
            "weights_dtype": weights,
            "kv_dtype": "fp8" if str(options.get("kv_cache_dtype", "auto")).startswith("fp8") else "fp16",
            "gpu_memory_utilization": options.get("gpu_memory_utilization") or 0.9,
            "tensor_parallel": options.get("tensor_parallel_size") or 0,
            "pipeline_parallel": options.get("pipeline_parallel_size") or 1,
            "max_num_batched_tokens": options.get("max_num_batched_tokens"),
        }

    def parse_allocation(self, log: str) -> dict[str, Any]:
        from ..calibration import parse_vllm_log

        return parse_vllm_log(log)


def check_parallel(
    options: dict[str, Any],
    gpu_count: int,
    tp_name: str = "tensor_parallel_size",
    pp_name: str = "pipeline_parallel_size",
) -> dict[str, Any]:
    """Tensor x pipeline parallel must use exactly the GPUs chosen (TP filled in when blank)."""
    pp = options.get(pp_name) or 1
    tp = options.get(tp_name)
    if tp is None:
        if gpu_count % pp:
            raise ValidationError(
                {
                    pp_name: [
                        _("Pipeline parallel size %(pp)s does not divide the %(gpu_count)s GPUs chosen.")
                        % {"pp": pp, "gpu_count": gpu_count}
                    ]
                }
            )
        options[tp_name] = gpu_count // pp
    elif tp * pp != gpu_count:
        raise ValidationError(
            {
                tp_name: [
                    _("Tensor parallel %(tp)d x pipeline parallel %(pp)d = %(product)d, but %(gpus)d GPUs are chosen.")
                    % {"tp": tp, "pp": pp, "product": tp * pp, "gpus": gpu_count}
                ]
            }
        )
    return options
