"""The estimate's units, inputs and typed verdicts, shared by every backend's estimator."""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from portal.i18n import Message

if TYPE_CHECKING:
    from .architecture import Architecture

GiB = 1024**3
MiB = 1024**2
TIGHT = 0.90
UBATCH = 512  # llama.cpp's default -ub
CUDA_CONTEXT = 0.25 * GiB  # llama.cpp per GPU: CUDA context, cuBLAS workspace
VLLM_NON_TORCH = 0.4 * GiB  # vLLM per GPU: CUDA context and allocator slack outside PyTorch's pool
NCCL_BUFFERS = 0.25 * GiB  # per GPU once tensors are split over several

BYTES_PER_WEIGHT: dict[str, float] = {
    "fp32": 4,
    "bf16": 2,
    "fp16": 2,
    "fp8": 1,
    "int8": 1,
    "int4": 0.5,
    # GGUF file types: average bits per weight of the whole file / 8.
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "Q8_0": 8.5 / 8,
    "Q6_K": 6.56 / 8,
    "Q5_K_M": 5.69 / 8,
    "Q5_K_S": 5.52 / 8,
    "Q5_0": 5.5 / 8,
    "Q4_K_M": 4.85 / 8,
    "Q4_K_S": 4.58 / 8,
    "Q4_0": 4.5 / 8,
    "IQ4_XS": 4.25 / 8,
    "IQ4_NL": 4.5 / 8,
    "Q3_K_L": 4.27 / 8,
    "Q3_K_M": 3.91 / 8,
    "Q3_K_S": 3.5 / 8,
    "IQ3_XXS": 3.06 / 8,
    "Q2_K": 3.35 / 8,
    "IQ2_XXS": 2.06 / 8,
}
# Smaller GGUF files to suggest, largest first.
GGUF_LADDER = ["Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "IQ4_XS", "Q3_K_M", "Q2_K"]
KV_BYTES: dict[str, float] = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "q8_0": 8.5 / 8, "q4_0": 4.5 / 8}


class Verdict(enum.StrEnum):
    """How a GPU (or the host's RAM), and so the whole deployment, is judged."""

    FITS = "fits"
    TIGHT = "tight"  # within 10 % of the limit
    DOES_NOT_FIT = "does_not_fit"
    UNKNOWN = "unknown"  # what it is judged against is not known yet (the host's RAM)


@dataclass
class GPUMemory:
    index: int
    total_mib: int
    free_mib: int
    label: str = ""  # how the estimate names it; "GPU <index>" when blank (a multi-node one adds its host)


@dataclass
class FitRequest:
    arch: Architecture
    backend: str  # "vllm", "sglang" or "llamacpp"
    context: int
    gpus: list[GPUMemory]
    parallel: int = 1
    weights_dtype: str = "bf16"  # a BYTES_PER_WEIGHT key; GGUF files and quantised checkpoints use theirs
    kv_dtype: str = "fp16"
    n_gpu_layers: int | None = None  # llama.cpp -ngl; None: all
    gpu_memory_utilization: float = 0.9  # vLLM; SGLang's --mem-fraction-static
    flash_attention: str | bool = "auto"  # llama.cpp -fa: on / off / auto
    # What this host's build did with `-fa auto` at its last launch (its log), None when not seen yet:
    # then it is counted as llama.cpp decides it, by whether the device backend supports it.
    flash_attention_auto_on: bool | None = None
    device_backend: str = "cuda"  # llama.cpp's backend for the GPUs (hosts are inventoried with nvidia-smi)
    tensor_parallel: int = 0  # 0: GPUs / pipeline_parallel
    pipeline_parallel: int = 1
    max_num_batched_tokens: int | None = None  # vLLM; SGLang's --chunked-prefill-size
    ram_mib: int | None = None  # the host's available RAM, for layers llama.cpp keeps on the CPU
    spare_gpus: list[GPUMemory] = field(default_factory=list)  # the host's other GPUs, for advice
    correction: float = 1.0  # actual / estimate measured on this host for this backend
    correction_samples: int = 0


@dataclass
class Device:
    """One GPU (or the host's RAM) and what the deployment needs of it."""

    name: str
    index: int | None
    need_gib: float
    have_gib: float
    verdict: Verdict | None = None  # None until judged (a backend's rule may decide it first)
    reason: Message | None = None  # why a backend's rule refused it when it is not plainly short of memory


@dataclass
class Estimate:
    weights_gib: float
    kv_cache_gib: float
    overhead_gib: float
    total_gib: float
    available_gib: float
    verdict: Verdict
    max_context: int | None
    context: int
    layers_on_gpu: int
    kv_bytes_per_token: int
    source: str
    # Notes and problems (settings the server would refuse) in English, and each as a `Message.as_item`
    # (its msgid and values) so that a page or the API shows it in the reader's language (issue 30).
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    note_items: list[dict[str, Any]] = field(default_factory=list)
    problem_items: list[dict[str, Any]] = field(default_factory=list)
    devices: list[Device] = field(default_factory=list)
    short: str = ""  # the device that does not fit, named
    flash_attention: str = ""  # llama.cpp: what the estimate assumed
    activation_gib: float = 0.0  # vLLM/SGLang: activation peak per GPU
    kv_pool_gib: float | None = None  # vLLM/SGLang: KV memory per GPU the server will allocate
    kv_cache_tokens: int | None = None  # tokens that pool holds ("GPU KV cache size")
    max_concurrency: float | None = None  # sequences of `context` it holds ("Maximum concurrency")
    tensor_parallel: int = 0
    pipeline_parallel: int = 0
    raw_total_gib: float = 0.0  # before the host's calibration
    compute_gib: float = 0.0  # llama.cpp compute buffers; vLLM/SGLang activations (part of overhead)
    model_gib: float = 0.0  # all the weights, wherever they are
    advice: list[dict[str, Any]] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return self.verdict != Verdict.DOES_NOT_FIT

    def as_dict(self) -> dict[str, Any]:
        def rounded(value: Any) -> Any:
            if isinstance(value, enum.Enum):  # stored as JSON: plain strings
                return value.value
            if isinstance(value, Message):  # a device's reason: its English text (the notes carry the message)
                return value.english
            if isinstance(value, float):  # 4 significant digits: a tiny model's MiB must not round to 0
                return float(f"{value:.4g}") if abs(value) < 100 else round(value, 1)
            if isinstance(value, list):
                return [rounded(v) for v in value]
            if isinstance(value, dict):
                return {k: rounded(v) for k, v in value.items()}
            return value

        out: dict[str, Any] = rounded(asdict(self))
        return out

    def set_messages(self, notes: list[Message], problems: list[Message]) -> None:
        """The notes and problems, in English and as stored messages."""
        self.notes, self.note_items = [m.english for m in notes], [m.as_item() for m in notes]
        self.problems, self.problem_items = [m.english for m in problems], [m.as_item() for m in problems]


def weights_bytes(arch: Architecture, dtype: str) -> float:
    """The weights' bytes: the files when known, else parameters x the checkpoint's (or `dtype`'s) size."""
    if arch.weights_bytes:
        return float(arch.weights_bytes)
    params = arch.params_b * 1e9
    if arch.quant_bits and not arch.quant.isupper():  # a quantised checkpoint, per its quantization_config
        if arch.quant_scope == "experts":
            experts = arch.expert_params_b * 1e9
            return experts * arch.quant_bits / 8 + (params - experts) * 2
        embeddings = arch.embed_params_b * 1e9
        return embeddings * 2 + (params - embeddings) * arch.quant_bits / 8
    per = BYTES_PER_WEIGHT.get(dtype) or BYTES_PER_WEIGHT.get(dtype.upper())
    if per is None:
        raise ValueError(f"unknown weight type {dtype!r}")
    return params * per


def judge(need: float, have: float) -> Verdict:
    if need <= TIGHT * have:
        return Verdict.FITS
    return Verdict.TIGHT if need <= have else Verdict.DOES_NOT_FIT


_ORDER = {Verdict.FITS: 0, Verdict.UNKNOWN: 1, Verdict.TIGHT: 2, Verdict.DOES_NOT_FIT: 3}


def worst(verdicts: list[Verdict]) -> Verdict:
    return max(verdicts, key=_ORDER.__getitem__) if verdicts else Verdict.DOES_NOT_FIT
