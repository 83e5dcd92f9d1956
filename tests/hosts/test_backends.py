"""Golden command lines of every backend, and the rule they share: the API key is never in argv."""

from __future__ import annotations

import httpx
import pytest
from django.core.exceptions import ValidationError

from hosts import backends
from hosts.backends import LaunchSpec
from tests.fakes.llamacpp import LlamaServer

KEY = "gpk-secret-key-123"


def spec(kind: str, options: dict, gpus=(0, 1), model="Qwen/Qwen3-32B") -> LaunchSpec:
    impl = backends.get(kind)
    cleaned, extra = impl.clean(
        model_path=model, served_model_name="qwen3-32b", options=options, extra_args=[], gpu_count=len(gpus)
    )
    return LaunchSpec(
        model_path=model,
        served_model_name="qwen3-32b",
        gpu_indices=list(gpus),
        port=30000,
        options=cleaned,
        extra_args=extra,
        api_key=KEY,
    )


def test_sglang_golden_command():
    s = spec("sglang", {"context_length": 32768, "mem_fraction_static": 0.8, "kv_cache_dtype": "fp8_e4m3"})
    impl = backends.get("sglang")
    assert backends.preview(impl.argv(s), s.env, s.api_key) == (
        "CUDA_VISIBLE_DEVICES=0,1 python3 -m sglang.launch_server --model-path Qwen/Qwen3-32B "
        "--served-model-name qwen3-32b --tp-size 2 --context-length 32768 --mem-fraction-static 0.8 --dtype auto "
        "--kv-cache-dtype fp8_e4m3 --host 0.0.0.0 --port 30000 --config sglang.yaml"
    )
    secret = impl.secret(s)
    assert secret is not None and secret.file == "sglang.yaml" and secret.text == f'api-key: "{KEY}"\n'


def test_sglang_pipeline_parallel_and_batching():
    s = spec("sglang", {"pp_size": 2, "chunked_prefill_size": 4096, "max_running_requests": 64}, gpus=(0, 1, 2, 3))
    argv = backends.get("sglang").argv(s)
    assert argv[argv.index("--tp-size") + 1] == "2" and argv[argv.index("--pp-size") + 1] == "2"
    assert argv[argv.index("--chunked-prefill-size") + 1] == "4096"
    assert argv[argv.index("--max-running-requests") + 1] == "64"


def test_vllm_golden_command_with_pipeline_parallel():
    s = spec("vllm", {"pipeline_parallel_size": 2, "max_model_len": 16384}, gpus=(0, 1, 2, 3))
    impl = backends.get("vllm")
    assert backends.preview(impl.argv(s), s.env, s.api_key) == (
        "CUDA_VISIBLE_DEVICES=0,1,2,3 vllm serve Qwen/Qwen3-32B --served-model-name qwen3-32b "
        "--tensor-parallel-size 2 --max-model-len 16384 --gpu-memory-utilization 0.9 --dtype auto "
        "--pipeline-parallel-size 2 --host 0.0.0.0 --port 30000"
    )
    secret = impl.secret(s)
    assert secret is not None and secret.env == "VLLM_API_KEY" and secret.text == KEY + "\n"


def test_llamacpp_reads_its_key_from_a_file():
    s = spec("llamacpp", {"ctx_size": 4096}, gpus=(0,), model="/models/qwen3-8b-Q4_K_M.gguf")
    argv = backends.get("llamacpp").argv(s)
    assert argv[-2:] == ["--api-key-file", "api_key"]


@pytest.mark.parametrize("kind", ["vllm", "sglang", "llamacpp"])
def test_no_backend_puts_the_key_on_the_command_line(kind):
    model = "/models/m-Q4_K_M.gguf" if kind == "llamacpp" else "Qwen/Qwen3-32B"
    s = spec(kind, {}, gpus=(0,), model=model)
    assert not any(KEY in a for a in backends.get(kind).argv(s))


@pytest.mark.parametrize(
    ("kind", "options", "gpus", "field"),
    [
        ("vllm", {"tensor_parallel_size": 2, "pipeline_parallel_size": 2}, 3, "tensor_parallel_size"),
        ("vllm", {"pipeline_parallel_size": 2}, 3, "pipeline_parallel_size"),
        ("sglang", {"tp_size": 3}, 4, "tp_size"),
    ],
)
def test_tensor_times_pipeline_must_equal_the_gpus(kind, options, gpus, field):
    with pytest.raises(ValidationError) as err:
        backends.get(kind).clean(
            model_path="Qwen/Qwen3-32B", served_model_name="q", options=options, extra_args=[], gpu_count=gpus
        )
    assert f"options.{field}" in err.value.message_dict


@pytest.mark.parametrize("flag", ["--api-key", "--config", "--tp", "--context-length"])
def test_sglang_reserves_the_flags_it_sets(flag):
    with pytest.raises(ValidationError):
        backends.get("sglang").clean(
            model_path="Qwen/Qwen3-32B", served_model_name="q", options={}, extra_args=[flag], gpu_count=1
        )


@pytest.mark.parametrize(
    "parallel, extra, window",
    [(None, [], 1024), (1, [], 1024), (2, [], 512), (2, ["--kv-unified"], 1024), (3, ["-kvu"], 1024)],
    ids=["auto-slots", "one-slot", "two-slots", "unified", "unified-short"],
)
def test_a_llamacpp_deployment_says_its_window_before_it_ever_ran(parallel, extra, window):
    """A slot's share of `-c`, which is what one request gets and what /props reports."""
    impl = backends.get("llamacpp")
    cleaned, extra = impl.clean(
        model_path="/m/tiny.gguf",
        served_model_name="tiny",
        options={"ctx_size": 1024, "parallel": parallel},
        extra_args=extra,
        gpu_count=1,
    )
    assert impl.configured_window(cleaned, extra) == window


@pytest.mark.parametrize("kind, option", [("vllm", "max_model_len"), ("sglang", "context_length")])
def test_vllm_and_sglang_deployments_say_the_window_they_always_pass(kind, option):
    s = spec(kind, {option: 32768, "tensor_parallel_size" if kind == "vllm" else "tp_size": 2})
    assert backends.get(kind).configured_window(s.options, s.extra_args) == 32768
    assert "32768" in backends.get(kind).argv(s)  # the window said is the one the server is started with


def test_the_window_said_before_a_start_is_the_one_real_llamacpp_serves():
    """The derivation against llama.cpp itself: `-c 1024 -np 2` gives each slot 512 (the window
    /props reports, which the launch job records after the start)."""
    impl = backends.get("llamacpp")
    with LlamaServer(ctx=1024, parallel=2, api_key="k") as server, httpx.Client(timeout=10) as client:
        served = impl.context_window(client, server.root_url, "k", server.model_id)
    assert served == impl.configured_window({"ctx_size": 1024, "parallel": 2}, []) == 512


def test_a_tool_call_parser_is_on_the_command_line_of_vllm_and_sglang():
    """vLLM needs `--enable-auto-tool-choice` with its parser; SGLang the parser alone."""
    vllm = backends.get("vllm").argv(spec("vllm", {"tool_call_parser": "qwen3_coder"}, gpus=(0,)))
    assert vllm[vllm.index("--tool-call-parser") - 1 : vllm.index("--tool-call-parser") + 2] == [
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "qwen3_coder",
    ]
    sglang = backends.get("sglang").argv(spec("sglang", {"tool_call_parser": "qwen25"}, gpus=(0,)))
    assert sglang[sglang.index("--tool-call-parser") + 1] == "qwen25" and "--enable-auto-tool-choice" not in sglang
    for kind in ("vllm", "sglang"):  # blank: no tool calling, as before
        assert "--tool-call-parser" not in backends.get(kind).argv(spec(kind, {}, gpus=(0,)))


@pytest.mark.parametrize(
    ("kind", "options", "extra", "field"),
    [
        ("vllm", {"tool_call_parser": "hermes; rm -rf /"}, [], "options.tool_call_parser"),
        ("vllm", {"tool_call_parser": "-x"}, [], "options.tool_call_parser"),
        ("vllm", {}, ["--tool-call-parser", "hermes"], "extra_args"),  # the form field says it once
        ("vllm", {}, ["--enable-auto-tool-choice"], "extra_args"),
        ("sglang", {}, ["--tool-call-parser=qwen25"], "extra_args"),
    ],
)
def test_a_tool_call_parser_is_a_name_set_in_its_field(kind, options, extra, field):
    with pytest.raises(ValidationError) as err:
        backends.get(kind).clean(
            model_path="Qwen/Qwen3-32B", served_model_name="q", options=options, extra_args=extra, gpu_count=1
        )
    assert field in err.value.message_dict, err.value.message_dict


@pytest.mark.parametrize(
    ("model", "vllm", "sglang"),
    [
        ("Qwen/Qwen3-Coder-30B-A3B-Instruct", "qwen3_coder", "qwen3_coder"),
        ("Qwen/Qwen2.5-7B-Instruct", "hermes", "qwen25"),
        ("/models/qwen3-8b", "hermes", "qwen25"),
        ("meta-llama/Llama-3.1-8B-Instruct", "llama3_json", "llama3"),
        ("mistralai/Devstral-Small-2507", "mistral", "mistral"),
        ("openai/gpt-oss-20b", "openai", "gpt-oss"),
        ("deepseek-ai/DeepSeek-V3.1", "deepseek_v31", "deepseekv31"),
        ("deepseek-ai/DeepSeek-V3.2-Exp", "deepseek_v32", "deepseekv32"),
        ("/models/llama3.1-8b-instruct", "llama3_json", "llama3"),
        ("BAAI/bge-m3", "", ""),
    ],
)
def test_the_parser_a_models_format_needs_is_suggested_by_its_name(model, vllm, sglang):
    from hosts.backends.vllm import suggested_tool_parser

    assert suggested_tool_parser("vllm", model) == vllm and suggested_tool_parser("sglang", model) == sglang
