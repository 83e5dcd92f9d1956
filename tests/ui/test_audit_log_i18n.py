"""The audit log in the reader's language: an entry stores its English sentence with the msgid and
named values (`portal.i18n.Message`), so the page shows it in the admin's language whatever language
its writer used; a row from before (no code) shows its stored text, and the REST API keeps the
English `message` next to its `message_code` and `message_params`."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import translation

from accounts import services
from accounts.models import ApiToken, AuditLog
from channels.models import Model
from hosts import backends
from hosts.deployments import jobs
from hosts.downloads import services as downloads
from hosts.models import Deployment, Host
from keys.models import Budget
from keys.services import issue_key
from portal.choices import AuditAction
from tests.portal.test_i18n_pages import english_words

pytestmark = pytest.mark.django_db

CJK = re.compile(r"[\u4e00-\u9fff]")
OLD_ROW = "imported from the old portal"


@pytest.fixture
def entries(admin, alice):
    """One entry of each kind an admin reads: a token made and revoked on the account page (by alice,
    who reads the portal in Chinese: what is stored does not follow the writer's language), a password
    reset, a download and a launch requested, a login unlocked, a model added to a key, and a row
    written before messages had codes."""
    alice.language = "zh-hans"
    alice.save(update_fields=["language"])
    writer = Client()
    writer.force_login(alice)
    assert writer.post(reverse("token_create"), {"name": "deploy"}).status_code == 302
    token = ApiToken.objects.get(user=alice)
    assert writer.post(reverse("token_revoke", args=[token.pk])).status_code == 302
    services.reset_password(alice, actor=admin)
    services.unlock_login(alice, actor=admin)
    host = Host.objects.create(name="box", address="10.0.0.9", username="gpu", host_key_fingerprint="SHA256:x")
    download, _ = downloads.request_download(host=host, repo_id="Qwen/Qwen3-0.6B", user=admin)
    deployment = Deployment.objects.create(
        name="qwen",
        host=host,
        backend="vllm",
        model_path="a/b",
        served_model_name="qwen",
        port=8000,
        options=backends.get("vllm").clean_options({}, 1),
    )
    job = jobs.request_job(deployment, "launch", user=admin, queue=False)
    key, _ = issue_key(owner=alice, name="laptop")
    key.allowed_models.add(Model.objects.create(name="qwen3-8b"))
    AuditLog.objects.create(action=AuditAction.ACTION, object_type="user", object_repr="alice", message=OLD_ROW)
    return {"download": download, "job": job}


def test_the_audit_log_shows_each_entry_in_the_admins_language(client, admin, entries):
    stored = {e.message_code: e for e in AuditLog.objects.exclude(message_code="")}
    # What is stored stays English (the writer read Chinese), with its msgid and values.
    assert stored["API token created"].message == "API token created"
    reset = stored["password reset; %(access)s"]
    assert reset.message == "password reset; 1 session(s) ended, 0 API token(s) revoked"
    assert reset.message_params == {
        "access": {
            "code": "%(sessions)s session(s) ended, %(tokens)s API token(s) revoked",
            "params": {"sessions": 1, "tokens": 0},
        }
    }
    launch = stored["%(action)s requested (job #%(id)s)"]
    assert launch.message == f"Launch requested (job #{entries['job'].pk})"
    assert AuditLog.objects.get(changes__has_key="models").changes == {"models": {"added": ["qwen3-8b"]}}

    admin.language = "zh-hans"
    admin.save(update_fields=["language"])
    client.force_login(admin)
    html = client.get(reverse("audit_log")).content.decode()
    download = entries["download"].pk
    for chinese in (
        "已创建 API 令牌",
        "已吊销 API 令牌",
        "密码已重置；已结束 1 个会话，已吊销 0 个 API 令牌",
        "登录已解锁（清除了 0 次失败尝试）",
        f"已请求下载（下载 #{download}）",
        f"已请求启动（任务 #{entries['job'].pk}）",
        "已添加 <code>qwen3-8b</code>",  # a many-to-many change: its verb and the related model's name
        "<dt>模型</dt>",
    ):
        assert chinese in html, chinese
    for english in ("API token created", "password reset", "Download requested", "Launch requested", "added"):
        assert english not in html, english
    assert OLD_ROW in html  # no code: shown as stored
    # The crawl's check: no English left but the names and the old row's own words.
    assert english_words(html) == sorted({"box", "deploy", *OLD_ROW.split()})  # names, and the old row

    admin.language = "en"
    admin.save(update_fields=["language"])
    html = client.get(reverse("audit_log")).content.decode()
    assert f"Download requested (download #{download})" in html and "API token revoked" in html


def test_the_dashboards_recent_changes_are_in_the_admins_language(client, admin, alice):
    services.unlock_login(alice, actor=admin)
    admin.language = "zh-hans"
    admin.save(update_fields=["language"])
    client.force_login(admin)
    html = client.get("/").content.decode()
    assert "登录已解锁（清除了 0 次失败尝试）" in html and "login unlocked" not in html


def test_the_api_keeps_the_english_message_and_adds_its_code_and_values(client, admin, entries):
    client.force_login(admin)
    rows = client.get("/api/audit-log/?page_size=100", HTTP_ACCEPT_LANGUAGE="zh-hans").json()["results"]
    by_message = {r["message"]: r for r in rows}
    download = entries["download"].pk
    row = by_message[f"Download requested (download #{download})"]
    assert (row["message_code"], row["message_params"]) == ("Download requested (download #%(id)s)", {"id": download})
    assert by_message["API token revoked"]["message_code"] == "API token revoked"
    old = by_message[OLD_ROW]
    assert (old["message_code"], old["message_params"]) == ("", {})
    assert not any(CJK.search(r["message"]) for r in rows)


def test_a_lockout_entry_is_read_in_the_admins_language(client, admin, alice):
    """django-axes locks a username out: the entry names it and the address, in the reader's language."""
    for _ in range(10):
        client.post(reverse("login"), {"username": "alice", "password": "wrong"}, REMOTE_ADDR="10.1.2.3")
        if AuditLog.objects.filter(message_code__startswith="login locked out").exists():
            break
    entry = AuditLog.objects.get(message_code__startswith="login locked out")
    assert entry.message.startswith("login locked out after") and "username 'alice', from 10.1.2.3" in entry.message
    with translation.override("zh-hans"):
        assert "用户名 'alice'，来自 10.1.2.3" in entry.message_text and CJK.search(entry.message_text)


def test_the_search_box_finds_entries_by_the_words_the_admin_reads(client, admin, entries):
    """Regression (probe): the search matched the stored English only, so an admin reading 中文 who
    typed a word of the page (吊销, "revoked") found nothing. Now the words of the admin's language
    match too, with the stored English and the names as before."""
    admin.language = "zh-hans"
    admin.save(update_fields=["language"])
    client.force_login(admin)

    def found(q: str) -> set[str]:
        html = client.get(reverse("audit_log"), {"q": q}).content.decode()
        return {code for code in AuditLog.objects.values_list("message_code", flat=True) if code and _shown(html, code)}

    def _shown(html: str, code: str) -> bool:
        with translation.override("zh-hans"):
            return any(e.message_text in html for e in AuditLog.objects.filter(message_code=code))

    assert found("已吊销") == {"API token revoked"}
    assert found("令牌") == {
        "API token created",
        "API token revoked",
    }  # (not a nested part's words: the reset's counts)
    assert found("密码已重置") == {"password reset; %(access)s"}
    assert found("revoked") == {"API token revoked", "password reset; %(access)s"}  # the stored English still
    assert "已请求下载" not in client.get(reverse("audit_log"), {"q": "已吊销"}).content.decode()
    rows = client.get("/api/audit-log/", {"q": "已请求下载"}, HTTP_ACCEPT_LANGUAGE="zh-hans").json()["results"]
    assert [r["message_code"] for r in rows] == ["Download requested (download #%(id)s)"]


def test_the_search_box_finds_entries_by_their_action_and_kind_as_shown(client, admin, alice):
    """Regression (journey): a row shows its action and its kind of object by their names in the
    reader's language ("修改 · 密钥 laptop"); the search matched the stored codes ("update", "key")
    only, so an admin reading 中文 who typed 密钥 or 修改 found nothing, and one reading English who
    typed "API token" missed the tokens (stored "apitoken")."""
    key, _ = issue_key(owner=alice, name="laptop")
    key.revoke()
    Model.objects.create(name="qwen3-8b")
    client.force_login(admin)

    def found(q: str, language: str) -> set[tuple[str, str]]:
        rows = client.get("/api/audit-log/", {"q": q, "page_size": 100}, HTTP_ACCEPT_LANGUAGE=language).json()
        return {(r["action"], r["object_type"]) for r in rows["results"]}

    assert found("密钥", "zh-hans") == {("create", "key"), ("update", "key")}
    assert found("修改", "zh-hans") == {("update", "key")}
    assert found("模型", "zh-hans") == {("create", "model")}
    assert found("密钥", "en") == set()
    assert found("changed", "en") == {("update", "key")}
    assert ApiToken.objects.create(user=alice, name="ci", **ApiToken.mint()[0])
    assert found("API token", "en") == {("create", "apitoken")}


def test_a_budget_is_named_in_one_language(admin, alice):
    """Regression: a budget's name mixed English words with its translated window ("user budget 200
    每月 of alice"). Its name is one sentence, stored as the writer read it."""
    with translation.override("zh-hans"):
        budget = Budget.objects.create(user=alice, window="month", amount=200)
        assert str(budget) == "用户 alice 的预算：200（每月）"
    entry = AuditLog.objects.get(object_type="budget", object_id=str(budget.pk), action=AuditAction.CREATE)
    assert entry.object_repr == "用户 alice 的预算：200（每月）"
    assert str(budget) == "Budget of 200 per month on the user alice"
