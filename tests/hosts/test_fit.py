"""The VRAM estimate against the published figures the issue quotes (calibration)."""

from __future__ import annotations

import pytest

from hosts import fit
from hosts.fit import Architecture, FitRequest, GPUMemory
from tests.fakes.tinygguf import write_tiny_gguf

RTX_3080_TI = [GPUMemory(index=0, total_mib=12288, free_mib=12288)]
RTX_4090 = [GPUMemory(index=0, total_mib=24564, free_mib=24564)]
H100 = GPUMemory(index=0, total_mib=81559, free_mib=81559)
SEVEN_B = Architecture(params_b=7.0, layers=32, heads=32, kv_heads=32, head_dim=128)


@pytest.mark.parametrize(("dtype", "gb"), [("fp16", 14.0), ("bf16", 14.0), ("int8", 7.0), ("fp8", 7.0), ("int4", 3.5)])
def test_7b_weights_take_two_bytes_per_parameter_in_fp16_and_one_in_int8(dtype, gb):
    assert fit.weights_bytes(SEVEN_B, dtype) / 1e9 == pytest.approx(gb, rel=0.01)


def qwen3_coder(context: int) -> fit.Estimate:
    arch = fit.preset_for("/models/Qwen3-Coder-30B-A3B-Instruct-Q4_K_M.gguf")
    arch.quant = fit.quant_from_name("Qwen3-Coder-30B-A3B-Instruct-Q4_K_M.gguf")
    return fit.estimate(
        FitRequest(
            arch=arch,
            backend="llamacpp",
            context=context,
            gpus=RTX_3080_TI,
            n_gpu_layers=25,
            flash_attention=False,
        )
    )


def test_qwen3_coder_30b_q4_k_m_with_25_of_48_layers_fits_at_24k_on_12gb():
    est = qwen3_coder(24576)
    assert est.source == "preset qwen3-coder-30b-a3b" and est.layers_on_gpu == 25
    assert est.total_gib == pytest.approx(11.8, abs=0.3)  # measured: about 11.8 GB
    assert est.verdict == "tight"


def test_qwen3_coder_30b_q4_k_m_does_not_fit_at_32k_on_12gb():
    est = qwen3_coder(32768)
    assert est.total_gib == pytest.approx(12.6, abs=0.3)  # measured: 12.6 GB, and it failed
    assert est.verdict == "does_not_fit"
    assert 24576 <= est.max_context < 32768


def test_llama_31_8b_q4_at_128k_needs_about_22_gb():
    arch = fit.preset_for("bartowski/Meta-Llama-3.1-8B-Instruct-GGUF/Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf")
    arch.quant = "Q4_K_M"
    est = fit.estimate(FitRequest(arch=arch, backend="llamacpp", context=131072, gpus=RTX_4090))
    assert est.kv_cache_gib == pytest.approx(16.0)
    assert est.total_gib * fit.GiB / 1e9 == pytest.approx(22, abs=1.5)
    assert est.verdict == "fits"  # 21 GiB of a 24 GiB card
    small = fit.estimate(FitRequest(arch=arch, backend="llamacpp", context=131072, gpus=RTX_3080_TI))
    assert small.verdict == "does_not_fit"
    assert 32768 <= small.max_context < 65536


def test_vllm_uses_total_times_utilisation_and_reports_the_largest_context():
    arch = fit.preset_for("meta-llama/Llama-3.1-8B-Instruct")
    est = fit.estimate(FitRequest(arch=arch, backend="vllm", context=32768, gpus=[H100], gpu_memory_utilization=0.9))
    assert est.available_gib == pytest.approx(81559 * 0.9 / 1024)
    assert est.weights_gib == pytest.approx(8.03e9 * 2 / fit.GiB)
    assert est.verdict == "fits"
    assert est.max_context == 131072  # capped at what the model was trained for


def test_vllm_refuses_when_another_process_holds_the_memory_it_wants():
    busy = GPUMemory(index=3, total_mib=81559, free_mib=3128)
    est = fit.estimate(FitRequest(arch=fit.preset_for("Qwen/Qwen3-8B"), backend="vllm", context=8192, gpus=[busy]))
    assert est.verdict == "does_not_fit"
    assert "GPU 3" in est.notes[0] and "gpu-memory-utilization" in est.notes[0]


def test_seventy_b_in_bf16_is_tight_on_two_h100s_and_fits_on_four():
    arch = fit.preset_for("meta-llama/Llama-3.3-70B-Instruct")
    one = fit.estimate(FitRequest(arch=arch, backend="vllm", context=8192, gpus=[H100]))
    two = fit.estimate(FitRequest(arch=arch, backend="vllm", context=8192, gpus=[H100, H100]))
    assert (one.verdict, two.verdict) == ("does_not_fit", "tight")
    four = fit.estimate(FitRequest(arch=arch, backend="vllm", context=8192, gpus=[H100] * 4))
    assert four.verdict == "fits"


def test_fp8_kv_cache_halves_the_kv_bytes():
    arch = fit.preset_for("Qwen/Qwen3-32B")
    a = fit.estimate(FitRequest(arch=arch, backend="vllm", context=32768, gpus=[H100]))
    b = fit.estimate(FitRequest(arch=arch, backend="vllm", context=32768, gpus=[H100], kv_dtype="fp8"))
    assert b.kv_bytes_per_token * 2 == a.kv_bytes_per_token


def test_config_json_gives_the_architecture():
    cfg = """{"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 2048, "num_attention_heads": 32,
    "num_key_value_heads": 4, "head_dim": 128, "num_hidden_layers": 48, "num_experts": 128,
    "moe_intermediate_size": 768, "intermediate_size": 6144, "vocab_size": 151936,
    "max_position_embeddings": 262144, "tie_word_embeddings": false}"""
    arch = fit.from_config_json(cfg)
    assert (arch.layers, arch.kv_heads, arch.head_dim, arch.max_context) == (48, 4, 128, 262144)
    assert arch.params_b == pytest.approx(30.5, rel=0.03)


def test_gguf_metadata_gives_the_architecture(tmp_path):
    path = write_tiny_gguf(tmp_path / "tiny.gguf")
    data = path.read_bytes()
    meta = fit.parse_gguf_metadata(data[:4096])  # the header alone is enough
    arch = fit.from_gguf_metadata(meta, file_size=len(data))
    assert (arch.layers, arch.heads, arch.kv_heads, arch.head_dim, arch.max_context) == (2, 4, 2, 16, 4096)
    assert arch.quant == "F32" and arch.weights_bytes == len(data)


def test_unknown_model_has_no_preset():
    assert fit.preset_for("/models/my-own-finetune") is None
