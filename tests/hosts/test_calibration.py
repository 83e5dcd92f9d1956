"""Reading what a server allocated from its own log (tests/fixtures/server_logs/README.md says
where each log comes from), and comparing it with the estimate."""

from __future__ import annotations

from pathlib import Path

import pytest

from hosts import calibration, fit
from hosts.fit import FitRequest, GPUMemory

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "server_logs"


def log(name: str) -> str:
    return (LOGS / name).read_text()


def test_llamacpp_cuda_buffers_are_read_per_device():
    found = calibration.parse_llamacpp_log(log("llamacpp_rtx4080_cuda.log"))
    assert found["devices"]["CUDA0"] == {"model": 7317.71, "kv": 180.0, "compute": 105.0}
    assert found["gpu"] == {"model": 7317.71, "kv": 180.0, "compute": 105.0}
    assert found["host"]["model"] == 297.0  # token_embd stays in RAM
    assert found["flash_attention"] == "off"  # flash_attn = 0


def test_llamacpp_layer_split_over_two_gpus_adds_up():
    found = calibration.parse_llamacpp_log(log("llamacpp_two_gpus.log"))
    assert found["gpu"]["model"] == pytest.approx(5434.38 + 13989.53)
    assert found["gpu"]["kv"] == 1536 + 3584
    assert set(found["devices"]) == {"CPU", "CUDA0", "CUDA1", "CUDA_Host"}


def test_current_llamacpp_log_says_what_fa_auto_did():
    found = calibration.parse_llamacpp_log(log("llamacpp_cpu_xllamacpp.log"))
    assert found["host"] == {"model": 0.41, "kv": 0.25, "compute": 2.14}
    assert found["gpu"] == {"model": 0.0, "kv": 0.0, "compute": 0.0}
    assert found["flash_attention"] == "on"  # "flash_attn = auto", then "Flash Attention enabled"


def test_vllm_v0_memory_report():
    found = calibration.parse_vllm_log(log("vllm_v0_rtx3090_llama31_8b_20k.log"))
    assert found == {
        "backend": "vllm",
        "weights_gib": 14.9888,
        "kv_pool_gib": 3.81,
        "context": 20000,
        "max_concurrency": 1.56,
    }


def test_vllm_v1_report_with_thousands_separators():
    found = calibration.parse_vllm_log(log("vllm_v1_concurrency.log"))
    assert found["kv_cache_tokens"] == 2042016 and found["max_concurrency"] == 997.08
    assert found["context"] == 2048 and found["weights_gib"] == 67.7229 and found["gpu_blocks"] == 1381


def test_sglang_memory_report():
    text = (
        "[2025-01-10 10:00:01 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, "
        "avail mem=63.60 GB, mem usage=15.06 GB.\n"
        "[2025-01-10 10:00:02 TP0] KV Cache is allocated. #tokens: 408153, K size: 24.91 GB, V size: 24.91 GB\n"
    )
    assert calibration.parse_sglang_log(text) == {
        "backend": "sglang",
        "weights_gib": 15.06,
        "kv_cache_tokens": 408153,
        "kv_pool_gib": 49.82,
    }


def test_nothing_to_read_gives_nothing():
    assert calibration.parse_llamacpp_log("main: server is listening") == {}
    assert calibration.parse_vllm_log("INFO: Uvicorn running") == {}


def test_vllm_estimate_against_its_own_report_is_within_ten_percent():
    """The estimate for the vllm#10517 run, compared by `compare` with that run's log."""
    arch = fit.preset_for("meta-llama/Llama-3.1-8B-Instruct")
    gpu = [GPUMemory(0, 24146, 24146)]
    est = fit.estimate(
        FitRequest(arch=arch, backend="vllm", context=20000, gpus=gpu, max_num_batched_tokens=20000)
    ).as_dict()
    result = calibration.compare(est, calibration.parse_vllm_log(log("vllm_v0_rtx3090_llama31_8b_20k.log")))
    rows = {r["what"]: r for r in result["rows"]}
    assert rows["Weights per GPU (GiB)"]["ratio"] == pytest.approx(1.0, abs=0.1)
    assert rows["KV cache memory per GPU (GiB)"]["ratio"] == pytest.approx(1.0, abs=0.1)
    assert rows["Maximum concurrency"]["actual"] == 1.56
    assert result["ratio"] == pytest.approx(1.0, abs=0.1)  # weights + activations + overhead


def test_a_gpu_estimate_against_a_cpu_only_build_says_so():
    est = {"verdict": "fits", "total_gib": 1.0, "layers_on_gpu": 2, "weights_gib": 0.0004, "kv_cache_gib": 0.0002}
    result = calibration.compare(est, calibration.parse_llamacpp_log(log("llamacpp_cpu_xllamacpp.log")))
    assert "is this build CPU-only" in result["notes"][0]
    assert result["rows"][0]["actual"] == 0.41  # compared with what it put in RAM


def test_a_launch_feeds_the_hosts_correction_which_the_next_estimate_applies(db):
    from hosts.models import Deployment, Host

    host = Host.objects.create(name="gpu-a", address="10.0.0.5", username="u")
    arch = fit.preset_for("meta-llama/Llama-3.1-8B-Instruct")
    gpu = [GPUMemory(0, 24146, 24146)]
    request = FitRequest(arch=arch, backend="vllm", context=20000, gpus=gpu, max_num_batched_tokens=20000)
    deployment = Deployment.objects.create(
        host=host, name="d", backend="vllm", model_path="meta-llama/Llama-3.1-8B-Instruct", served_model_name="m",
        port=8000, last_fit=fit.estimate(request).as_dict(),
    )  # fmt: skip
    result = calibration.record(deployment, calibration.parse_vllm_log(log("vllm_v0_rtx3090_llama31_8b_20k.log")))
    host.refresh_from_db()
    entry = host.fit_calibration["vllm"]
    assert entry["samples"] == [result["ratio"]] and entry["ratio"] == result["ratio"]
    assert Deployment.objects.get(pk=deployment.pk).last_allocation["rows"] == result["rows"]

    fields = calibration.correction_for(host, "vllm")
    assert fields == {"correction": result["ratio"], "correction_samples": 1}
    raw, corrected = fit.estimate(request), fit.estimate(FitRequest(**{**request.__dict__, **fields}))
    assert corrected.devices[0].need_gib == pytest.approx(raw.devices[0].need_gib * result["ratio"])
    assert any("Corrected by" in n and "1 launch(es)" in n for n in corrected.notes)


def test_a_ratio_out_of_range_is_shown_but_not_applied():
    arch = fit.preset_for("meta-llama/Llama-3.1-8B-Instruct")
    request = FitRequest(arch=arch, backend="vllm", context=8192, gpus=[GPUMemory(0, 81559, 81559)])
    wild = fit.estimate(FitRequest(**{**request.__dict__, "correction": 3.0, "correction_samples": 2}))
    assert wild.devices[0].need_gib == pytest.approx(fit.estimate(request).devices[0].need_gib)


def test_a_rejected_reading_is_kept_apart_and_never_averaged_into_later_ones(db):
    from hosts.models import Deployment, Host

    host = Host.objects.create(
        name="gpu-b",
        address="10.0.0.6",
        username="u",
        fit_calibration={"vllm": {"samples": [1.1], "ratio": 1.1}},
    )
    # The estimate left 2 GiB of a 20 GiB share for weights + activations (18 GiB of KV cache);
    # the ratio is what the server left for them over that.
    estimate = {"verdict": "fits", "total_gib": 20.0, "devices": [{"have_gib": 20.0}], "kv_pool_gib": 18.0}
    deployment = Deployment.objects.create(
        host=host, name="d2", backend="vllm", model_path="m", served_model_name="m", port=8001, last_fit=estimate
    )
    for kv_pool in (12.0, 19.6, 17.4):  # ratios 4.0 and 0.2 (misreads), then 1.3
        calibration.record(deployment, {"backend": "vllm", "kv_pool_gib": kv_pool})
    entry = Host.objects.get(pk=host.pk).fit_calibration["vllm"]
    assert entry["samples"] == [1.1, 1.3] and entry["ratio"] == 1.2  # not (1.1 + 4.0 + 0.2 + 1.3) / 4
    assert entry["rejected"] == [4.0, 0.2]
    assert calibration.correction_for(Host.objects.get(pk=host.pk), "vllm") == {
        "correction": 1.2,
        "correction_samples": 2,
    }


def test_what_fa_auto_did_on_the_host_decides_the_next_estimate(db):
    from hosts.models import Host

    off = Host(name="x", fit_calibration={"llamacpp": {"flash_attention_auto": "off"}})
    on = Host(name="y", fit_calibration={"llamacpp": {"flash_attention_auto": "on"}})
    assert calibration.correction_for(off, "llamacpp") == {"flash_attention_auto_on": False}
    assert calibration.correction_for(on, "llamacpp") == {"flash_attention_auto_on": True}
    assert calibration.correction_for(Host(name="z"), "llamacpp") == {}  # not seen: llama.cpp's own rule
