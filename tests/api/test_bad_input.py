"""Bad input: each case gets a 400 naming the field, and changes nothing in the database."""

from __future__ import annotations

import datetime

import asyncssh
import pytest
from django.utils import timezone

from accounts.models import ApiToken, AuditLog, Team, User
from channels.models import Channel, Model, ModelRoute
from hosts.models import GPU, Host
from keys.models import Key

from .conftest import session_client

pytestmark = pytest.mark.django_db

PAST = (timezone.now() - datetime.timedelta(days=1)).isoformat()
HUGE = 10**30


def db_state() -> dict:
    tables = [User, User.allowed_models.through, Host, GPU, Channel, Model, ModelRoute, Key]
    tables += [Key.allowed_models.through, Team.allowed_models.through, ApiToken, AuditLog]
    return {t._meta.label: list(t.objects.order_by("pk").values()) for t in tables}


CHANNEL = {"name": "new-channel", "kind": "openai", "base_url": "https://api.example.com"}
HOST = {"name": "new-host", "address": "gpu-7.lan", "username": "ubuntu"}
USER = {"username": "newbie", "role": "developer"}

# (role, method, path, payload, field that must carry the error)
CASES = [
    # channels
    ("admin", "post", "/api/channels/", {**CHANNEL, "base_url": "ftp://files.example.com"}, "base_url"),
    ("admin", "post", "/api/channels/", {**CHANNEL, "base_url": "not a url"}, "base_url"),
    ("admin", "post", "/api/channels/", {**CHANNEL, "base_url": "api.example.com/v1"}, "base_url"),
    ("admin", "post", "/api/channels/", {**CHANNEL, "base_url": "https://u:p@api.example.com"}, "base_url"),
    ("admin", "post", "/api/channels/", {**CHANNEL, "base_url": "https://x.test:99999"}, "base_url"),
    ("admin", "post", "/api/channels/", {**CHANNEL, "base_url": "https://x.test/" + "a" * 3000}, "base_url"),
    ("admin", "post", "/api/channels/", {**CHANNEL, "name": "vllm-a"}, "name"),
    ("admin", "post", "/api/channels/", {**CHANNEL, "name": "x" * 101}, "name"),
    ("admin", "post", "/api/channels/", {**CHANNEL, "name": ""}, "name"),
    ("admin", "post", "/api/channels/", {**CHANNEL, "kind": "gemini"}, "kind"),
    ("admin", "post", "/api/channels/", {**CHANNEL, "priority": 99999}, "priority"),
    ("admin", "post", "/api/channels/", {**CHANNEL, "weight": -1}, "weight"),
    ("admin", "post", "/api/channels/", {**CHANNEL, "weight": "heavy"}, "weight"),
    ("admin", "post", "/api/channels/", {**CHANNEL, "enabled": "maybe"}, "enabled"),
    ("admin", "post", "/api/channels/", {**CHANNEL, "api_key": ["sk-1"]}, "api_key"),
    ("admin", "post", "/api/channels/", {**CHANNEL, "api_key": "sk 1\nsk 2"}, "api_key"),
    ("admin", "post", "/api/channels/", {**CHANNEL, "api_key": "ключ-секрет"}, "api_key"),  # no header carries it
    ("admin", "post", "/api/channels/", {**CHANNEL, "api_key": "sk-1\x07"}, "api_key"),
    ("admin", "post", "/api/channels/", {**CHANNEL, "notes": "n" * 6000}, "notes"),
    ("admin", "post", "/api/channels/", {"name": "only-a-name"}, "base_url"),
    ("admin", "patch", "/api/channels/{channel}/", {"base_url": ""}, "base_url"),
    ("admin", "patch", "/api/channels/{channel}/", {"name": "x" * 101}, "name"),
    # hosts
    ("admin", "post", "/api/hosts/", {**HOST, "private_key": "garbage"}, "private_key"),
    (
        "admin",
        "post",
        "/api/hosts/",
        {**HOST, "private_key": "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n"},
        "private_key",
    ),
    ("admin", "post", "/api/hosts/", {**HOST, "private_key": "k" * 20000}, "private_key"),
    ("admin", "post", "/api/hosts/", {**HOST, "address": "bad host!"}, "address"),
    ("admin", "post", "/api/hosts/", {**HOST, "ssh_port": 70000}, "ssh_port"),
    ("admin", "post", "/api/hosts/", {**HOST, "ssh_port": 0}, "ssh_port"),
    ("admin", "post", "/api/hosts/", {**HOST, "username": "Root User"}, "username"),
    ("admin", "post", "/api/hosts/", {**HOST, "labels": "notalist"}, "labels"),
    ("admin", "post", "/api/hosts/", {**HOST, "labels": ["x" * 51]}, "labels"),
    ("admin", "post", "/api/hosts/", {**HOST, "name": "gpu-1"}, "name"),
    ("admin", "patch", "/api/hosts/{host}/", {"address": ""}, "address"),
    # models
    ("admin", "post", "/api/models/", {"name": "bad name with spaces"}, "name"),
    ("admin", "post", "/api/models/", {"name": "qwen3-32b"}, "name"),
    ("admin", "post", "/api/models/", {"name": "m" * 129}, "name"),
    ("admin", "post", "/api/models/", {"name": "m1", "description": "d" * 2001}, "description"),
    ("admin", "post", "/api/models/", {"name": "m1", "routes": [{"channel": "nope"}]}, "routes"),
    ("admin", "post", "/api/models/", {"name": "m1", "routes": [{"channel": 9999}]}, "routes"),
    ("admin", "post", "/api/models/", {"name": "m1", "routes": [{"channel": {"id": 1}}]}, "routes"),
    ("admin", "post", "/api/models/", {"name": "m1", "routes": [{"channel": True}]}, "routes"),
    (
        "admin",
        "post",
        "/api/models/",
        {"name": "m1", "routes": [{"channel": "vllm-a"}, {"channel": "vllm-a"}]},
        "routes",
    ),
    (
        "admin",
        "post",
        "/api/models/",
        {"name": "m1", "routes": [{"channel": "vllm-a", "context_window": 10}]},
        "routes",
    ),
    (
        "admin",
        "post",
        "/api/models/",
        {"name": "m1", "routes": [{"channel": "vllm-a", "max_output_tokens": -5}]},
        "routes",
    ),
    ("admin", "post", "/api/models/", {"name": "m1", "routes": "vllm-a"}, "routes"),
    ("admin", "patch", "/api/models/{model}/", {"routes": [{"channel": "vllm-a", "context_window": HUGE}]}, "routes"),
    ("admin", "patch", "/api/models/{model}/", {"routes": [{"upstream_model": "zzz"}]}, "routes"),
    ("admin", "post", "/api/models/", {"name": "m1", "routes": [{"upstream_model": "zzz"}]}, "routes"),
    # upstream_id is what a GET shows: sent alone, it was dropped and the route asked for the public name
    ("admin", "post", "/api/models/", {"name": "m", "routes": [{"channel": "vllm-a", "upstream_id": "Q"}]}, "routes"),
    # keys
    ("alice", "post", "/api/keys/", {"name": "k", "expires_at": PAST}, "expires_at"),
    ("alice", "post", "/api/keys/", {"name": "k", "expires_at": "next tuesday"}, "expires_at"),
    ("alice", "post", "/api/keys/", {"name": "k", "allowed_models": ["no-such-model"]}, "allowed_models"),
    ("alice", "post", "/api/keys/", {"name": "k", "allowed_models": "qwen3-32b"}, "allowed_models"),
    ("alice", "post", "/api/keys/", {"name": "k", "allowed_models": {}}, "allowed_models"),
    ("alice", "patch", "/api/keys/{alice_key}/", {"allowed_models": {}}, "allowed_models"),
    ("alice", "patch", "/api/keys/{alice_key}/", {"allowed_models": {"qwen3-32b": 1}}, "allowed_models"),
    ("alice", "post", "/api/keys/", {"name": "k", "ip_allowlist": ["10.0.0.0/33"]}, "ip_allowlist"),
    ("alice", "post", "/api/keys/", {"name": "k", "ip_allowlist": ["10.0.0.300"]}, "ip_allowlist"),
    ("alice", "post", "/api/keys/", {"name": "k", "ip_allowlist": "10.0.0.0/8"}, "ip_allowlist"),
    (
        "alice",
        "post",
        "/api/keys/",
        {"name": "k", "ip_allowlist": [f"10.0.{i}.0/24" for i in range(60)]},
        "ip_allowlist",
    ),
    ("alice", "post", "/api/keys/", {"name": "k", "tokens_per_day": -1}, "tokens_per_day"),
    ("alice", "post", "/api/keys/", {"name": "k", "tokens_per_day": 0}, "tokens_per_day"),
    ("alice", "post", "/api/keys/", {"name": "k", "tokens_per_month": 10**13}, "tokens_per_month"),
    ("alice", "post", "/api/keys/", {"name": "k", "requests_per_minute": HUGE}, "requests_per_minute"),
    ("alice", "post", "/api/keys/", {"name": "k", "max_parallel_requests": "lots"}, "max_parallel_requests"),
    ("alice", "post", "/api/keys/", {"name": "k", "owner": "{mallory}"}, "owner"),
    ("alice", "post", "/api/keys/", {"name": "k", "owner": HUGE}, "owner"),
    ("alice", "post", "/api/keys/", {"name": "k", "owner": "abc"}, "owner"),
    ("alice", "post", "/api/keys/", {"name": ""}, "name"),
    ("alice", "post", "/api/keys/", {"name": "   "}, "name"),
    ("alice", "post", "/api/keys/", {"name": "k" * 101}, "name"),
    ("alice", "post", "/api/keys/", {"name": "alice laptop"}, "name"),
    ("alice", "post", "/api/keys/", {"name": "k", "client": "c" * 33}, "client"),
    ("alice", "post", "/api/keys/", {}, "name"),
    ("alice", "patch", "/api/keys/{alice_key}/", {"owner": "{mallory}"}, "owner"),
    ("admin", "patch", "/api/keys/{alice_key}/", {"owner": "{mallory}"}, "owner"),
    ("alice", "patch", "/api/keys/{alice_key}/", {"expires_at": PAST}, "expires_at"),
    ("alice", "post", "/api/keys/{alice_key}/rotate/", {"grace_seconds": -1}, "grace_seconds"),
    ("alice", "post", "/api/keys/{alice_key}/rotate/", {"grace_seconds": 31 * 86400}, "grace_seconds"),
    ("alice", "post", "/api/keys/{alice_key}/rotate/", {"grace_seconds": "soon"}, "grace_seconds"),
    # users
    ("admin", "post", "/api/users/", {**USER, "username": "alice"}, "username"),
    ("admin", "post", "/api/users/", {**USER, "username": "bad name!"}, "username"),
    ("admin", "post", "/api/users/", {**USER, "role": "root"}, "role"),
    ("admin", "post", "/api/users/", {**USER, "email": "not-an-email"}, "email"),
    ("admin", "post", "/api/users/", {**USER, "password": "123"}, "password"),
    ("admin", "post", "/api/users/", {**USER, "key_defaults": {"foo": 1}}, "key_defaults"),
    ("admin", "post", "/api/users/", {**USER, "key_defaults": {"tokens_per_day": -1}}, "key_defaults"),
    ("admin", "post", "/api/users/", {**USER, "key_defaults": "lots"}, "key_defaults"),
    (
        "admin",
        "post",
        "/api/users/",
        {**USER, "tokens_per_day": 100, "key_defaults": {"tokens_per_day": 200}},
        "key_defaults",
    ),
    ("admin", "post", "/api/users/", {**USER, "tokens_per_day": -5}, "tokens_per_day"),
    ("admin", "post", "/api/users/", {**USER, "allowed_models": ["nope"]}, "allowed_models"),
    ("admin", "patch", "/api/users/{alice}/", {"allowed_models": {}}, "allowed_models"),
    # teams
    ("admin", "patch", "/api/teams/{team}/", {"allowed_models": {}}, "allowed_models"),
    ("admin", "patch", "/api/users/{admin}/", {"role": "developer"}, "role"),
    ("admin", "patch", "/api/users/{alice}/", {"password": "a-new-password-1"}, "password"),
    ("admin", "patch", "/api/users/{alice}/", {"tokens_per_day": 10**13}, "tokens_per_day"),
    ("admin", "post", "/api/users/{admin}/deactivate/", None, "detail"),
    # deployments
    ("admin", "patch", "/api/deployments/{deployment}/", {"worker_hosts": {}}, "worker_hosts"),
    # personal API tokens
    ("alice", "post", "/api/tokens/", {"name": ""}, "name"),
    ("alice", "post", "/api/tokens/", {"name": "alice script"}, "name"),
    ("alice", "post", "/api/tokens/", {"name": "t" * 101}, "name"),
    ("alice", "post", "/api/tokens/", {"name": "t", "expires_at": PAST}, "expires_at"),
]


def fill(value, world):
    if isinstance(value, str):
        return int(value.format(**world)) if value.startswith("{") and value.endswith("}") else value
    if isinstance(value, dict):
        return {k: fill(v, world) for k, v in value.items()}
    if isinstance(value, list):
        return [fill(v, world) for v in value]
    return value


@pytest.mark.parametrize(
    ("role", "method", "path", "payload", "field"),
    [pytest.param(*c, id=f"{c[1]} {c[2]} {c[4]} #{i}") for i, c in enumerate(CASES)],
)
def test_bad_input_is_a_field_error_and_changes_nothing(request, world, role, method, path, payload, field):
    user = request.getfixturevalue(role)
    client = session_client(user)
    before = db_state()
    response = getattr(client, method)(path.format(**world), fill(payload, world), format="json")
    assert response.status_code == 400, response.content[:300]
    assert field in response.json(), response.json()
    assert db_state() == before


POST_ENDPOINTS = ["/api/channels/", "/api/hosts/", "/api/models/", "/api/keys/", "/api/users/", "/api/tokens/"]


@pytest.mark.parametrize("path", POST_ENDPOINTS)
@pytest.mark.parametrize(
    "body",
    [b"{not json", b'{"name": "x",}', b"[1, 2, 3]", b'"just a string"', b"null", b"\xff\xfe garbage"],
    ids=["broken", "trailing-comma", "list", "string", "null", "binary"],
)
def test_garbage_json_is_a_400_not_a_500(world, admin_api, path, body):
    before = db_state()
    response = admin_api.generic("POST", path, body, content_type="application/json")
    assert response.status_code == 400, response.content[:300]
    assert db_state() == before


def test_an_encrypted_private_key_is_refused_without_echoing_it(admin_api):
    encrypted = asyncssh.generate_private_key("ssh-ed25519").export_private_key("pkcs8-pem", passphrase="pw").decode()
    response = admin_api.post("/api/hosts/", {**HOST, "private_key": encrypted}, format="json")
    assert response.status_code == 400 and "private_key" in response.json()
    assert encrypted.splitlines()[1] not in response.content.decode()
    assert not Host.objects.filter(name="new-host").exists()


def test_a_key_limit_above_the_owners_ceiling_is_refused(alice, alice_api):
    alice.tokens_per_day = 1000
    alice.save()
    before = db_state()
    response = alice_api.post("/api/keys/", {"name": "big", "tokens_per_day": 2000}, format="json")
    assert response.status_code == 400 and "1,000" in str(response.json()["tokens_per_day"])
    assert db_state() == before
    assert alice_api.post("/api/keys/", {"name": "ok", "tokens_per_day": 1000}, format="json").status_code == 201


def test_a_model_outside_the_owners_allowlist_is_refused(alice, alice_api, model):
    other = Model.objects.create(name="private-model")
    alice.allowed_models.set([model])
    before = db_state()
    response = alice_api.post("/api/keys/", {"name": "k", "allowed_models": ["private-model"]}, format="json")
    assert response.status_code == 400 and "private-model" in str(response.json()["allowed_models"])
    assert db_state() == before
    other.delete()


def test_an_admin_cannot_create_a_key_for_a_deactivated_user(admin_api, alice, world):
    alice.is_active = False
    alice.save()
    before = db_state()
    response = admin_api.post("/api/keys/", {"name": "k", "owner": alice.pk}, format="json")
    assert response.status_code == 400 and "owner" in response.json()
    assert db_state() == before


def test_a_revoked_key_cannot_be_rotated_or_edited(alice_api, alice_key):
    alice_api.post(f"/api/keys/{alice_key.pk}/revoke/")
    before = db_state()
    assert alice_api.post(f"/api/keys/{alice_key.pk}/rotate/", {}, format="json").status_code == 400
    assert alice_api.patch(f"/api/keys/{alice_key.pk}/", {"name": "back"}, format="json").status_code == 400
    assert db_state() == before


def test_deleting_a_host_with_a_deployment_is_a_409_that_names_it(admin_api):
    from hosts.models import Deployment, Host

    host = Host.objects.create(name="gpu-del", address="10.0.0.9", username="ubuntu")
    Deployment.objects.create(
        name="qwen-live", host=host, backend="vllm", model_path="Qwen/Qwen3-8B", served_model_name="q", port=8001
    )
    response = admin_api.delete(f"/api/hosts/{host.pk}/")
    assert response.status_code == 409
    assert "qwen-live" in response.json()["detail"]
    assert Host.objects.filter(pk=host.pk).exists()


def test_someone_elses_object_is_a_404_in_the_readers_language(alice_api, mallory):
    """Not Django's "No Key matches the given query." (English in every language, and it names the
    model): the same translated answer as for an unknown path."""
    from keys.services import issue_key

    key, _ = issue_key(owner=mallory, name="other")
    english = alice_api.get(f"/api/keys/{key.pk}/", HTTP_ACCEPT_LANGUAGE="en")
    assert english.status_code == 404 and english.json()["detail"] == "Not found."
    chinese = alice_api.get(f"/api/keys/{key.pk}/", HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert chinese.status_code == 404 and chinese.json()["detail"] == "未找到。"


@pytest.mark.parametrize(
    "method, path",
    [("post", "/api/hosts/1/refresh/"), ("get", "/api/no-such-resource/"), ("delete", "/api/keys/1/nothing/")],
)
def test_an_unknown_api_path_is_a_json_404_and_a_page_stays_a_page(admin_api, method, path):
    response = getattr(admin_api, method)(path)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"detail": "Not found.", "code": "not_found"}

    page = admin_api.get("/no-such-page/")
    assert page.status_code == 404 and page["Content-Type"].startswith("text/html")


def test_a_model_read_and_sent_back_whole_keeps_its_routes(world, admin_api):
    """A GET's body (read-only fields and `upstream_id` included) sent back with PUT is accepted, and
    `upstream_model` is the id that counts."""
    url = f"/api/models/{world['model']}/"
    body = admin_api.get(url).json()
    assert body["routes"], body
    body["routes"][0]["upstream_model"] = "Qwen/Qwen3-32B-AWQ"
    response = admin_api.put(url, body, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["routes"][0]["upstream_id"] == "Qwen/Qwen3-32B-AWQ"
    assert ModelRoute.objects.get(pk=body["routes"][0]["id"]).upstream_model == "Qwen/Qwen3-32B-AWQ"


def test_a_bug_under_the_api_is_a_logged_json_500_and_a_page_stays_a_page(admin, monkeypatch, caplog):
    from portal import dashboard
    from portal.api import views

    def boom(*args):
        raise ValueError("a bug: secret-detail")

    monkeypatch.setattr(views, "endpoints", boom)
    monkeypatch.setattr(dashboard, "context_for", boom)
    client = session_client(admin)
    client.raise_request_exception = False
    response = client.get("/api/", headers={"accept-language": "zh-hans"})
    assert response.status_code == 500 and response["Content-Type"] == "application/json"
    assert response.json() == {"detail": "服务器出现了错误。", "code": "server_error"}
    assert b"secret-detail" not in response.content
    logged = [r for r in caplog.records if r.name == "django.request" and r.levelname == "ERROR" and r.exc_info]
    assert [str(r.exc_info[1]) for r in logged] == ["a bug: secret-detail"]  # with its traceback
    page = client.get("/")
    assert page.status_code == 500 and page["Content-Type"].startswith("text/html")


def test_a_value_the_database_refuses_is_a_400_in_the_readers_language(alice, admin):
    """The safety net under the serializers: a value PostgreSQL cannot store (here, after a schema
    drift shortens a column the serializer still allows longer) is a 400, said in the reader's
    language; it was English whatever the language."""
    from django.db import connection

    with connection.cursor() as cursor:  # rolled back with the test's transaction
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # the users' rows are checked now, so the table may change
        cursor.execute("ALTER TABLE accounts_user ALTER COLUMN first_name TYPE varchar(3)")
    client = session_client(admin)
    response = client.patch(
        f"/api/users/{alice.pk}/", {"first_name": "Alexandra"}, format="json", headers={"accept-language": "zh-hans"}
    )
    assert response.status_code == 400
    refused = "有个值无法按原样存储（是否含有空字符（NUL），或数字超出范围？）。"
    assert response.json() == {"non_field_errors": [refused]}
