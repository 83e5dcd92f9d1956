"""Deployment and job pages, and the host GPU partial: admins only, previews mask the key."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from hosts.models import GPU, Deployment, Host, LaunchJob


@pytest.fixture
def host(db):
    # The 12 GB card of the measured cases; its llama.cpp build ran `-fa auto` as off (its calibration).
    host = Host.objects.create(
        name="rtx-box",
        address="10.0.0.9",
        username="gpu",
        private_key="x",
        fit_calibration={"llamacpp": {"flash_attention_auto": "off"}},
    )
    GPU.objects.create(
        host=host,
        index=0,
        name="NVIDIA GeForce RTX 3080 Ti",
        memory_total_mib=12288,
        memory_used_mib=287,
        processes=[{"pid": 2231, "name": "/usr/lib/xorg/Xorg", "used_mib": 287}],
    )
    return host


def form_data(**overrides):
    data = {
        "name": "qwen-coder",
        "backend": "llamacpp",
        "model_path": "/models/Qwen3-Coder-30B-A3B-Instruct-Q4_K_M.gguf",
        "served_model_name": "qwen3-coder",
        "gpu_indices": ["0"],
        "port": "8080",
        "extra_args": "",
        "llamacpp__n_gpu_layers": "25",
        "llamacpp__ctx_size": "24576",
        "llamacpp__flash_attn": "off",
        "llamacpp__cache_type": "f16",
        "llamacpp__jinja": "on",
        "vllm__dtype": "auto",
        "vllm__kv_cache_dtype": "auto",
        "vllm__quantization": "",
    }
    data.update(overrides)
    return data


def test_pages_are_for_admins_only(alice_client, host):
    anonymous = Client()
    deployment = Deployment.objects.create(
        name="d", host=host, backend="vllm", model_path="a/b", served_model_name="b", port=8000, gpu_indices=[0]
    )
    job = LaunchJob.objects.create(deployment=deployment)
    urls = [
        reverse("deployment_list"),
        reverse("deployment_create", args=[host.pk]),
        reverse("deployment_detail", args=[deployment.pk]),
        reverse("deployment_action", args=[deployment.pk, "launch"]),
        reverse("job_detail", args=[job.pk]),
        reverse("job_progress", args=[job.pk]),
        reverse("host_gpus", args=[host.pk]),
    ]
    for url in urls:
        assert alice_client.get(url).status_code == 403, url
        assert anonymous.get(url).status_code == 302, url  # to the login page
    assert alice_client.post(reverse("host_refresh", args=[host.pk])).status_code == 403
    assert alice_client.post(reverse("deployment_action", args=[deployment.pk, "stop"])).status_code == 403
    assert not LaunchJob.objects.exclude(pk=job.pk).exists()


def test_preview_shows_the_command_with_the_key_masked_and_the_fit(admin_client, host):
    r = admin_client.post(reverse("deployment_create", args=[host.pk]), {**form_data(), "preview": "1"})
    assert r.status_code == 200
    html = r.content.decode()
    assert "CUDA_VISIBLE_DEVICES=0 llama-server -m /models/Qwen3-Coder-30B-A3B-Instruct-Q4_K_M.gguf" in html
    assert "--api-key-file api_key" in html and "preview-key" not in html
    # 24576 tokens needed ~11.8 GiB on an idle 12 GB card; with Xorg's 287 MiB it is within 10 %.
    assert "<strong>Tight</strong>" in html and "24576 tokens" in html
    assert "<td>GPU 0</td><td>11.72 GiB</td><td>11.72 GiB</td><td>tight</td>" in html
    assert not Deployment.objects.exists()


def test_injection_in_extra_args_is_a_form_error(admin_client, host):
    r = admin_client.post(reverse("deployment_create", args=[host.pk]), form_data(extra_args="--verbose\n$(reboot)"))
    assert r.status_code == 200
    assert "is not allowed" in r.content.decode()
    assert not Deployment.objects.exists()


def test_an_alias_name_cannot_be_a_deployments_public_model(admin_client, host):
    from channels.models import Model
    from channels.services import register_served_model

    Model.objects.create(name="coder", is_alias=True)
    r = admin_client.post(reverse("deployment_create", args=[host.pk]), form_data(served_model_name="coder"))
    assert r.status_code == 200 and "is an alias" in r.content.decode()
    assert not Deployment.objects.exists()
    with pytest.raises(ValueError, match="alias"):  # an alias made after the deployment was saved
        register_served_model(
            channel=None,
            name="d",
            kind="llamacpp",
            base_url="http://127.0.0.1:9/v1",
            api_key="",
            model_name="coder",
            upstream_model="coder",
            context_window=None,
            status_message="",
        )
    assert not Model.objects.get(name="coder").routes.exists()


def test_create_then_launch_goes_to_the_job_page(admin_client, host):
    r = admin_client.post(reverse("deployment_create", args=[host.pk]), form_data())
    deployment = Deployment.objects.get()
    assert r.status_code == 302 and r.url == reverse("deployment_detail", args=[deployment.pk])
    assert deployment.options["ctx_size"] == 24576 and deployment.upstream_api_key.startswith("gpk-")
    detail = admin_client.get(r.url).content.decode()
    assert "--api-key-file api_key" in detail and deployment.upstream_api_key not in detail

    confirm = admin_client.get(reverse("deployment_action", args=[deployment.pk, "launch"]))
    assert b"Launch qwen-coder?" in confirm.content
    r = admin_client.post(reverse("deployment_action", args=[deployment.pk, "launch"]))
    job = LaunchJob.objects.get()
    assert r.url == reverse("job_detail", args=[job.pk])
    page = admin_client.get(r.url).content.decode()
    assert 'hx-trigger="every 2s"' in page  # polls while queued
    r = admin_client.post(reverse("deployment_action", args=[deployment.pk, "stop"]))
    assert r.url == reverse("deployment_detail", args=[deployment.pk])  # refused: a job is active
    assert LaunchJob.objects.count() == 1


def test_finished_job_page_stops_polling_and_shows_the_log(admin_client, host):
    deployment = Deployment.objects.create(
        name="d", host=host, backend="vllm", model_path="a/b", served_model_name="b", port=8000, gpu_indices=[0]
    )
    job = LaunchJob.objects.create(
        deployment=deployment, state="failed", message="Out of memory (exit code 1)", log_tail="CUDA out of memory"
    )
    html = admin_client.get(reverse("job_progress", args=[job.pk])).content.decode()
    assert "hx-trigger" not in html and "CUDA out of memory" in html and "Out of memory" in html


def test_host_gpus_partial_shows_memory_bars_and_the_key_to_confirm(admin_client, host):
    Host.objects.filter(pk=host.pk).update(seen_host_key_fingerprint="SHA256:abc")
    html = admin_client.get(reverse("host_gpus", args=[host.pk])).content.decode()
    assert '<progress value="287" max="12288"' in html
    assert "/usr/lib/xorg/Xorg" in html and "SHA256:abc" in html and "Confirm host key" in html
    r = admin_client.post(
        reverse("host_confirm_key", args=[host.pk]), {"fingerprint": "SHA256:abc"}, HTTP_HX_REQUEST="true"
    )
    assert r.status_code == 200 and "Confirm host key" not in r.content.decode()
    host.refresh_from_db()
    assert host.host_key_fingerprint == "SHA256:abc"


def test_deleting_a_host_with_deployments_is_refused_with_a_reason(admin_client, host):
    """A deployment may still have a server running there: the host is kept, and the page says why."""
    Deployment.objects.create(
        name="d", host=host, backend="vllm", model_path="a/b", served_model_name="b", port=8000, gpu_indices=[0]
    )
    r = admin_client.post(reverse("host_delete", args=[host.pk]), follow=True)
    assert r.status_code == 200 and "is still used by d" in r.content.decode()
    assert Deployment.objects.filter(host=host).exists()


def test_confirm_pages_post_to_their_own_url(admin_client, host):
    """includes/confirm.html once took the views' `action` ("launch") as the form's URL: a 404."""
    import re

    deployment = Deployment.objects.create(
        name="d", host=host, backend="vllm", model_path="a/b", served_model_name="b", port=8000, gpu_indices=[0]
    )
    for url in [
        *(reverse("deployment_action", args=[deployment.pk, a]) for a in ("launch", "stop", "restart", "adopt")),
        reverse("deployment_delete", args=[deployment.pk]),
    ]:
        html = admin_client.get(url).content.decode().split('<article class="confirm">', 1)[1]
        form = re.search(r'<form method="post"([^>]*)>', html)
        assert form is not None, url
        assert "action=" not in form.group(1), (url, form.group(1))  # posts back to `url`


def test_the_live_fit_names_the_change_that_makes_it_fit(admin_client, host):
    url = reverse("deployment_fit_preview", args=[host.pk])
    too_big = form_data(llamacpp__ctx_size="32768")  # ~13 GiB on a 12 GB card
    html = admin_client.post(url, too_big).content.decode()
    assert "Does not fit" in html
    from hosts.deployments import services

    # The advice names the largest context the estimate itself says fits.
    d = Deployment(host=host, backend="llamacpp", model_path=form_data()["model_path"], gpu_indices=[0])
    d.options = {"ctx_size": 32768, "n_gpu_layers": 25, "flash_attn": "off", "cache_type": "f16"}
    max_context = services.check_fit(d)["max_context"]
    assert f"lower the context to {max_context}" in html
    assert "KV cache type q" in html  # a smaller KV cache type, as the estimate found it
    assert "add GPU" not in html  # the host has one

    GPU.objects.create(host=host, index=1, name="NVIDIA GeForce RTX 3080 Ti", memory_total_mib=12288, memory_used_mib=0)
    html = admin_client.post(url, too_big).content.decode()
    assert "add GPU 1 (2 in all)" in html

    fits = admin_client.post(url, form_data(llamacpp__ctx_size="4096")).content.decode()
    assert "<strong>Fits</strong>" in fits and "To make it fit" not in fits
    incomplete = admin_client.post(url, form_data(model_path="")).content.decode()
    assert "No estimate yet" in incomplete and "This field is required." in incomplete
    assert not Deployment.objects.exists()


def test_a_saved_deployment_shows_its_estimate(admin_client, host):
    admin_client.post(reverse("deployment_create", args=[host.pk]), form_data(llamacpp__ctx_size="32768"))
    deployment = Deployment.objects.get()
    assert deployment.last_fit["verdict"] == "does_not_fit" and deployment.last_fit["advice"]
    page = admin_client.get(reverse("deployment_detail", args=[deployment.pk])).content.decode()
    assert "No estimate yet" not in page and "Does not fit" in page and "To make it fit" in page


def test_without_gpus_the_deploy_form_says_how_to_get_them(admin_client):
    bare = Host.objects.create(name="bare", address="10.0.0.8", username="u", host_key_fingerprint="SHA256:x")
    page = admin_client.get(reverse("deployment_create", args=[bare.pk])).content.decode()
    assert "No GPUs known for bare yet" in page
    assert f'action="{reverse("host_refresh", args=[bare.pk])}"' in page and "Refresh inventory" in page


def test_the_deployment_list_filters_and_sorts(admin_client, host):
    from hosts.deployments import services as deploy_services
    from tests.services import free_port

    for name in ("zeta", "alpha"):
        deploy_services.save_deployment(
            host=host,
            name=name,
            backend="llamacpp",
            model_path="/models/tiny.gguf",
            served_model_name=f"{name}-chat",
            gpu_indices=[0],
            port=free_port(),
            options={"ctx_size": 1024},
            extra_args=[],
        )
    page = admin_client.get("/deployments/?sort=name").content.decode()
    assert page.index("alpha-chat") < page.index("zeta-chat")
    page = admin_client.get("/deployments/?sort=-name").content.decode()
    assert page.index("zeta-chat") < page.index("alpha-chat")
    assert 'aria-sort="descending"' in page
    assert "No deployment matches" in admin_client.get("/deployments/?status=running").content.decode()
    assert admin_client.get("/deployments/?sort=nonsense&status=bogus").status_code == 200  # not a 500
    # An unknown column is said on the page, in the reader's language (it was silently ignored).
    page = admin_client.get("/deployments/?sort=-nmae", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert (
        "无法按 -nmae 排序，表格按默认顺序显示。请从以下选项中选择：backend、host、name、port、served、status。" in page
    )
    assert 'aria-sort="descending"' not in page


def test_a_launch_whose_log_had_no_memory_report_does_not_say_not_launched(admin_client, host):
    admin_client.post(reverse("deployment_create", args=[host.pk]), form_data())
    deployment = Deployment.objects.get()
    page = admin_client.get(reverse("deployment_detail", args=[deployment.pk])).content.decode()
    assert "Not launched by the portal yet" in page  # never launched
    Deployment.objects.filter(pk=deployment.pk).update(last_allocation={"no_report": True})
    page = admin_client.get(reverse("deployment_detail", args=[deployment.pk])).content.decode()
    assert "Not launched by the portal yet" not in page
    assert "had no memory report this portal can read" in page


def test_the_deployment_page_shows_supervision_and_events(admin_client, host):
    from hosts.choices import DeploymentStatus
    from hosts.deployments.services import set_status

    admin_client.post(reverse("deployment_create", args=[host.pk]), {**form_data(), "auto_restart": "on"})
    deployment = Deployment.objects.get()
    assert deployment.auto_restart and deployment.max_restarts_per_hour == 3
    set_status(deployment, DeploymentStatus.RUNNING, "Serving")
    set_status(
        deployment,
        DeploymentStatus.CRASHED,
        "Crashed: The server exited.",
        automatic=True,
        exit_code=137,
        log_tail="boom",
    )
    page = admin_client.get(reverse("deployment_detail", args=[deployment.pk])).content.decode()
    assert "Restarted automatically when it crashes, at most 3 times an hour." in page
    assert 'id="deployment-events"' in page and "Crashed: The server exited." in page and "(exit code 137)" in page
    assert "boom" in page and "supervisor" in page


def test_a_running_deployment_is_neither_changed_nor_deleted_on_the_page_or_through_the_api(admin_client, admin, host):
    """One rule in the service (`check_changeable` / `delete_deployment`): the page and the API
    refuse alike, with the same words."""
    from rest_framework.test import APIClient

    deployment = Deployment.objects.create(
        name="d", host=host, backend="vllm", model_path="a/b", served_model_name="b", port=8000, gpu_indices=[0],
        status="running",
    )  # fmt: skip
    shown = reverse("deployment_list")  # any page shows the flash
    for method, url, text in [
        ("get", reverse("deployment_edit", args=[deployment.pk]), "Stop the deployment before changing it."),
        ("get", reverse("deployment_delete", args=[deployment.pk]), "Stop the deployment before deleting it."),
        ("post", reverse("deployment_delete", args=[deployment.pk]), "Stop the deployment before deleting it."),
    ]:
        answer = getattr(admin_client, method)(url)
        assert answer.status_code == 302 and answer.url == reverse("deployment_detail", args=[deployment.pk])
        assert text in admin_client.get(shown).content.decode(), url
    api = APIClient()
    api.force_authenticate(admin)
    deleted = api.delete(f"/api/deployments/{deployment.pk}/")
    assert deleted.status_code == 400 and deleted.json()["status"] == ["Stop the deployment before deleting it."]
    changed = api.patch(f"/api/deployments/{deployment.pk}/", {"port": 8001}, format="json")
    assert changed.status_code == 400 and changed.json()["status"] == ["Stop the deployment before changing it."]
    assert Deployment.objects.filter(pk=deployment.pk, port=8000).exists()


@pytest.mark.parametrize(
    ("backend", "model", "options", "extra", "note"),
    [
        ("vllm", "meta-llama/Llama-3.1-8B-Instruct", {}, [], "This model's format: llama3_json"),
        ("sglang", "Qwen/Qwen3-8B", {}, [], "This model's format: qwen25"),
        ("vllm", "acme/house-model", {}, [], "Set the parser its model card names"),
        ("vllm", "Qwen/Qwen3-8B", {"tool_call_parser": "hermes"}, [], ""),
        ("vllm", "Qwen/Qwen3-8B", {}, ["--tool-call-parser", "hermes"], ""),  # set by hand before the field
        ("vllm", "BAAI/bge-m3", {}, ["--task", "embed"], ""),  # an embedding server gets no tools
        ("llamacpp", "/models/qwen3-8b.gguf", {}, [], ""),  # --jinja is llama.cpp's, on by default
    ],
)
def test_the_deployment_page_says_when_coding_agents_will_fail_for_want_of_a_tool_call_parser(
    admin_client, host, backend, model, options, extra, note
):
    from hosts.deployments import services

    deployment = services.save_deployment(
        name="d",
        host=host,
        backend=backend,
        model_path=model,
        served_model_name="m",
        port=8000,
        gpu_indices=[0],
        options=options,
        extra_args=[],
        fit_override=True,
    )
    # As saved before the form had the field (now refused: `test_a_tool_call_parser_is_a_name_set_in_its_field`).
    Deployment.objects.filter(pk=deployment.pk).update(extra_args=extra)
    html = admin_client.get(reverse("deployment_detail", args=[deployment.pk])).content.decode()
    assert ('id="tool-calling-note"' in html) == bool(note)
    assert note.replace("'", "&#x27;") in html


def test_the_launch_form_takes_a_tool_call_parser_and_shows_it_in_the_command(admin_client, host):
    data = form_data(backend="vllm", model_path="Qwen/Qwen3-8B", served_model_name="qwen3-8b", port="8000")
    data.update({"vllm__max_model_len": "8192", "vllm__gpu_memory_utilization": "0.9", "fit_override": "on"})
    r = admin_client.post(reverse("deployment_create", args=[host.pk]), {**data, "vllm__tool_call_parser": "hermes"})
    assert r.status_code == 302, r.content.decode()[:3000]
    deployment = Deployment.objects.get()
    assert deployment.options["tool_call_parser"] == "hermes"
    detail = admin_client.get(r.url).content.decode()
    assert "--enable-auto-tool-choice --tool-call-parser hermes" in detail and "tool-calling-note" not in detail
    r = admin_client.post(
        reverse("deployment_edit", args=[deployment.pk]), {**data, "name": "x", "vllm__tool_call_parser": "a b"}
    )
    assert r.status_code == 200 and "A name of letters, digits" in r.content.decode()


def test_the_live_estimate_names_the_tool_call_parser_a_model_needs_while_it_is_blank(admin_client, host):
    """The deploy form's live estimate says, as the model is typed, that coding agents will fail
    without a parser and which one the model's format needs; filled in, it says nothing."""
    url = reverse("deployment_fit_preview", args=[host.pk])
    data = form_data(backend="vllm", model_path="Qwen/Qwen3-Coder-30B-A3B-Instruct", port="8000")
    data.update({"vllm__max_model_len": "8192", "vllm__gpu_memory_utilization": "0.9"})
    html = admin_client.post(url, data).content.decode()
    assert 'id="tool-calling-preview"' in html, html[:2000]
    assert "This model&#x27;s format: qwen3_coder (Tool-call parser, under the options)." in html
    zh = admin_client.post(url, data, HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "此模型的格式：qwen3_coder" in zh
    filled = admin_client.post(url, {**data, "vllm__tool_call_parser": "qwen3_coder"}).content.decode()
    assert "tool-calling-preview" not in filled and "--tool-call-parser qwen3_coder" in filled
    llama = admin_client.post(url, form_data()).content.decode()  # llama.cpp: --jinja is on
    assert "tool-calling-preview" not in llama and "<strong>" in llama
