"""The VRAM estimate's notes and problems are messages (issue 30): stored and answered in English
with their msgid and values, shown in the reader's language on the deployment's page, and nested
in the launch job's "Refused before launch" message, which renders fully translated."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.urls import reverse
from django.utils import translation
from django.utils.html import escape

from hosts import backends, calibration, fit
from hosts.deployments import jobs
from hosts.deployments.services import fit_refusal
from hosts.fit import FitRequest, GPUMemory
from hosts.models import Deployment, Host
from portal.i18n import set_message

REFUSED = "Refused before launch: %(problems)s"
TP_HEADS = "Tensor parallel size %(tp)s does not divide the model's %(heads)s attention heads; use one of %(sizes)s."
BUSY = (
    "GPU %(gpu)s has %(free).1f GiB free, but vLLM reserves %(reserved).1f GiB "
    "(%(share)g of its memory) when it starts: another process holds the rest."
)


def zh(msgid: str, params: dict[str, object]) -> str:
    with translation.override("zh-hans"):
        return translation.gettext(msgid) % params


@pytest.fixture
def deployment(db):
    host = Host.objects.create(name="box", address="10.0.0.9", username="gpu", host_key_fingerprint="SHA256:x")
    options = backends.get("vllm").clean_options({}, 1)
    return Deployment.objects.create(
        name="llama", host=host, backend="vllm", model_path="a/b", served_model_name="llama", port=8000, options=options
    )


def test_a_fit_problem_is_answered_in_english_with_its_code_and_nested_in_the_refusal(admin_client, admin, deployment):
    body = {
        "backend": "vllm",
        "model": "meta-llama/Llama-3.3-70B-Instruct",
        "gpus": [{"index": i, "total_mib": 81559, "free_mib": 81559} for i in range(3)],
    }
    est = admin_client.post(
        "/api/fit-estimate/", body, content_type="application/json", HTTP_ACCEPT_LANGUAGE="zh-hans"
    ).json()
    english = "Tensor parallel size 3 does not divide the model's 64 attention heads; use one of 1, 2, 4, 8."
    params = {"tp": 3, "heads": 64, "sizes": "1, 2, 4, 8"}
    assert est["problems"] == [english]  # the English field, byte for byte as before
    assert est["problem_items"] == [{"text": english, "code": TP_HEADS, "params": params}]

    refusal = fit_refusal(est)
    assert refusal is not None and refusal.english == f"Refused before launch: {english}"
    job = jobs.request_job(deployment, "launch", user=admin, queue=False)
    set_message(job, "message", refusal)
    job.save(update_fields=["message", "message_code", "message_params"])
    job.refresh_from_db()  # through PostgreSQL's JSON: the nested message comes back whole
    assert job.message == f"Refused before launch: {english}"
    assert (job.message_code, job.message_params) == (REFUSED, {"problems": {"code": TP_HEADS, "params": params}})
    expected = zh(REFUSED, {"problems": zh(TP_HEADS, params)})
    assert expected.startswith("启动前被拒绝")  # the outer sentence is in the catalog; the problem is looked up too
    with translation.override("zh-hans"):
        assert job.message_text == expected
    html = admin_client.get(reverse("job_progress", args=[job.pk]), HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert escape(expected) in html


def test_several_problems_are_joined_as_before_each_translated():
    """Each problem in the reader's language, side by side as sentences (no space after a Chinese
    full stop: `portal.i18n.sentences`)."""
    arch = fit.preset_for("meta-llama/Llama-3.3-70B-Instruct")
    assert arch is not None
    gpus = [GPUMemory(index=i, total_mib=81559, free_mib=81559) for i in range(4)]
    est = fit.estimate(FitRequest(arch=arch, backend="vllm", context=8192, gpus=gpus, tensor_parallel=3)).as_dict()
    assert len(est["problems"]) == 2
    refusal = fit_refusal(est)
    assert refusal is not None and refusal.english == "Refused before launch: " + " ".join(est["problems"])
    parts = [zh(i["code"], i["params"]) for i in est["problem_items"]]
    with translation.override("zh-hans"):
        rendered = refusal.render()
        assert rendered == zh(REFUSED, {"problems": "".join(parts)})
        assert "。 " not in rendered


def test_the_deployments_page_shows_the_fit_notes_in_the_readers_language(admin_client, deployment):
    arch = fit.preset_for("meta-llama/Llama-3.1-8B-Instruct")
    assert arch is not None
    busy = GPUMemory(index=2, total_mib=81559, free_mib=20000)
    est = fit.estimate(FitRequest(arch=arch, backend="vllm", context=8192, gpus=[busy])).as_dict()
    note = est["note_items"][0]
    assert note["code"] == BUSY and note["params"] == {"gpu": 2, "free": 19.53, "reserved": 71.68, "share": 0.9}
    assert (
        est["notes"][0]
        == note["text"]
        == (
            "GPU 2 has 19.5 GiB free, but vLLM reserves 71.7 GiB (0.9 of its memory) when it starts: "
            "another process holds the rest."
        )
    )
    assert est["devices"][0]["reason"] == est["notes"][0]
    Deployment.objects.filter(pk=deployment.pk).update(last_fit=est)

    url = reverse("deployment_detail", args=[deployment.pk])
    html = admin_client.get(url, HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert escape(zh(BUSY, note["params"])) in html
    assert escape(est["notes"][0]) in admin_client.get(url, HTTP_ACCEPT_LANGUAGE="en").content.decode()

    # An estimate stored before (English lines only) shows them as stored.
    Deployment.objects.filter(pk=deployment.pk).update(last_fit={"verdict": "unknown", "notes": ["written before"]})
    assert "written before" in admin_client.get(url, HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()


def test_an_advised_change_is_a_message_in_the_note_the_advice_and_the_refusal():
    arch = fit.preset_for("meta-llama/Llama-3.1-8B-Instruct")
    assert arch is not None
    small = GPUMemory(index=0, total_mib=24564, free_mib=24000)
    est = fit.estimate(FitRequest(arch=arch, backend="vllm", context=131072, gpus=[small])).as_dict()
    first = est["advice"][0]
    assert first["change_code"] and first["change"] == first["change_code"] % first["change_params"]
    smallest = next(i for i in est["note_items"] if i["code"] == "Smallest change that fits: %(change)s.")
    assert smallest["text"] == f"Smallest change that fits: {first['change']}."
    assert smallest["params"] == {"change": {"code": first["change_code"], "params": first["change_params"]}}
    refusal = fit_refusal(est)
    assert refusal is not None and first["change"] in refusal.english
    with translation.override("zh-hans"):
        assert zh(first["change_code"], first["change_params"]) in refusal.render()


def test_the_allocation_comparison_is_shown_in_the_readers_language(admin_client, deployment):
    """The comparison with what the server allocated: its rows' labels and its notes are stored in
    English (the calibration reads them) and shown translated."""
    est = {"verdict": "fits", "total_gib": 1.0, "layers_on_gpu": 2, "weights_gib": 0.0004, "kv_cache_gib": 0.0002}
    cpu_only = (
        Path(__file__).resolve().parents[1] / "fixtures" / "server_logs" / "llamacpp_cpu_xllamacpp.log"
    ).read_text()
    result = calibration.compare(est, calibration.parse_llamacpp_log(cpu_only))
    note = result["note_items"][0]
    assert result["notes"] == [note["text"]] and note["text"] == note["code"]
    assert note["text"].startswith("The estimate put layers on a GPU but llama.cpp allocated nothing there")
    assert result["rows"][0]["what"] == "Weights (MiB)"
    Deployment.objects.filter(pk=deployment.pk).update(last_allocation={"actual": {"backend": "llamacpp"}, **result})

    html = admin_client.get(
        reverse("deployment_detail", args=[deployment.pk]), HTTP_ACCEPT_LANGUAGE="zh-hans"
    ).content.decode()
    assert escape(zh(note["code"], {})) in html
    assert f"<th>{escape(zh('Weights (MiB)', {}))}</th>" in html


def test_the_gpu_headings_are_in_the_readers_language(admin_client, deployment):
    zh = {"HTTP_ACCEPT_LANGUAGE": "zh-hans"}
    host = admin_client.get(reverse("host_detail", args=[deployment.host.pk]), **zh).content.decode()
    assert "<h2>GPU</h2>" in host and "GPUs" not in host
    page = admin_client.get(reverse("deployment_detail", args=[deployment.pk]), **zh).content.decode()
    assert "<th>GPU</th>" in page and "GPUs" not in page
