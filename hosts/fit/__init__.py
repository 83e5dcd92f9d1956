"""Will it fit? A memory estimate for a deployment, before anything is launched.

The model's own description comes first: its Hugging Face `config.json` (read over SSH from the
model folder, or pasted into `/api/fit-estimate/`) or its GGUF metadata; `PRESETS` (partial
config.json files of public models, read by the same code) only when neither is available.
From it `Architecture` keeps what memory depends on: parameters split into embeddings, routed
experts and the rest (MoE layers counted only where they are: `first_k_dense_replace`,
`interleave_moe_layer_step`, `mlp_only_layers`), the KV layout (grouped-query heads, or MLA's
compressed `kv_lora_rank + qk_rope_head_dim` per layer), sliding-window and KV-free (linear
attention / Mamba) layers, and the checkpoint's own quantisation (`quantization_config`).

Per backend (`estimate`):

- llama.cpp: weights of the offloaded layers (`-ngl`; the output layer only with every layer),
  the KV cache of those layers for `-c` tokens (all slots together; sliding layers keep their
  window), a CUDA context, and the compute buffer. Without flash attention that buffer holds the
  f32 attention scores of one 512-token micro-batch against the whole context (heads x ctx x 512
  x 4 B), which is what makes a long context cost more than its KV cache. `-fa auto` is counted as
  off unless the host's calibration saw this build turn it on. Layers are split over GPUs in
  proportion to their free memory, as llama.cpp does; with no GPU layer the budget is the host's
  RAM.
- vLLM: it pre-allocates `gpu-memory-utilization` x total on every GPU; weights (split over TP x PP)
  and the activation peak of the profiling run (max-num-batched-tokens) come out of that and the KV
  cache gets the rest, so the estimate says how many sequences of max-model-len fit ("Maximum
  concurrency", the figure vLLM prints). TP must divide the attention heads, and the KV heads
  unless TP is a multiple of them (then they are replicated); TP x PP must equal the GPUs.
- SGLang: `--mem-fraction-static` x total holds weights and the KV pool; activations live in the
  rest.

Verdicts are per GPU and the GPU that is short is named; "tight" means within 10 % of the limit.
When something does not fit, `advice` lists the smallest changes (context, KV dtype, -ngl, GPU
count, quantisation) that make it fit. Memory figures read off nvidia-smi are MiB, so sizes here
are GiB. The published figures this is checked against are in tests/hosts/test_fit.py.

The package: `architecture` (what a model is), `types` (units, `FitRequest`, `Device`, `Estimate`
and the typed `Verdict`), one estimator per backend (`llamacpp`, `vllm`, `sglang`; the last two
share `preallocating`) behind `estimate.ESTIMATORS`, and `estimate` (the verdict, notes, largest
context and advice). Callers import from `hosts.fit` only.
"""

from __future__ import annotations

from .architecture import (
    GGUF_FILE_TYPES,
    PRESET_CONFIGS,
    PRESETS,
    Architecture,
    ConfigError,
    estimate_params_b,
    from_config,
    from_config_json,
    from_gguf_metadata,
    parse_gguf_metadata,
    preset_for,
    quant_from_name,
    text_config,
)
from .estimate import ESTIMATORS, advice, estimate
from .llamacpp import flash_attention_of
from .preallocating import default_batched_tokens, parallel_messages, parallel_problems
from .types import (
    BYTES_PER_WEIGHT,
    GGUF_LADDER,
    KV_BYTES,
    Device,
    Estimate,
    FitRequest,
    GiB,
    GPUMemory,
    MiB,
    Verdict,
    weights_bytes,
)

__all__ = [
    "BYTES_PER_WEIGHT",
    "ESTIMATORS",
    "GGUF_FILE_TYPES",
    "GGUF_LADDER",
    "KV_BYTES",
    "PRESETS",
    "PRESET_CONFIGS",
    "Architecture",
    "ConfigError",
    "Device",
    "Estimate",
    "FitRequest",
    "GPUMemory",
    "GiB",
    "MiB",
    "Verdict",
    "advice",
    "default_batched_tokens",
    "estimate",
    "estimate_params_b",
    "flash_attention_of",
    "from_config",
    "from_config_json",
    "from_gguf_metadata",
    "parallel_messages",
    "parallel_problems",
    "parse_gguf_metadata",
    "preset_for",
    "quant_from_name",
    "text_config",
    "weights_bytes",
]
