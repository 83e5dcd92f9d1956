"""One CRUD test mixin per API resource (NetBox style): list, retrieve, create, update, delete,
search and ordering, audit entries with the actor for session and token auth, bounded list queries."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounts.models import AuditLog, User
from channels.models import Channel, Model, ModelRoute
from hosts.models import GPU, Host
from keys.models import Key
from keys.services import issue_key

from .conftest import session_client, token_client

pytestmark = pytest.mark.django_db

# Session lookup, user, count, page, and one query per prefetched relation: never per row.
LIST_MAX_QUERIES = 10


class CRUDMixin:
    url: str
    model: type
    audit_type: str
    role: str = "admin"  # who performs the writes
    deletable: bool = True
    search_term: str = ""
    ordering: str = "name"
    update_field: str = ""
    update_value = None

    def create_payload(self, ctx: dict) -> dict:
        raise NotImplementedError

    def make(self, i: int, ctx: dict):
        raise NotImplementedError

    @pytest.fixture
    def ctx(self, world, admin, alice, ssh_private_key, channel) -> dict:
        return {**world, "users": {"admin": admin, "alice": alice}, "ssh_key": ssh_private_key, "channel_obj": channel}

    def actor(self, ctx: dict) -> User:
        return ctx["users"][self.role]

    def client(self, ctx: dict, auth: str = "session"):
        user = self.actor(ctx)
        return session_client(user) if auth == "session" else token_client(user)

    def detail(self, pk) -> str:
        return f"{self.url}{pk}/"

    def test_list_returns_a_page_with_count(self, ctx):
        self.make(1, ctx)
        response = self.client(ctx).get(self.url, {"page_size": 1})
        assert response.status_code == 200
        body = response.json()
        assert body["count"] >= 1 and len(body["results"]) == 1 and "next" in body

    def test_list_query_count_does_not_grow_with_rows(self, ctx, django_assert_max_num_queries):
        client = self.client(ctx)
        for i in range(2):
            self.make(i, ctx)
        with CaptureQueriesContext(connection) as few:
            assert client.get(self.url).status_code == 200
        for i in range(2, 14):
            self.make(i, ctx)
        with django_assert_max_num_queries(LIST_MAX_QUERIES):
            with CaptureQueriesContext(connection) as many:
                response = client.get(self.url)
        assert response.status_code == 200 and response.json()["count"] >= 14
        assert len(many) == len(few), [q["sql"][:120] for q in many.captured_queries]

    @pytest.mark.parametrize("auth", ["session", "token"])
    def test_create_persists_and_audits_the_actor(self, ctx, auth):
        before = self.model.objects.count()
        response = self.client(ctx, auth).post(self.url, self.create_payload(ctx), format="json")
        assert response.status_code == 201, response.json()
        pk = response.json()["id"]
        assert self.model.objects.count() == before + 1
        entry = AuditLog.objects.filter(object_type=self.audit_type, object_id=str(pk), action="create").get()
        assert entry.actor == self.actor(ctx) and entry.actor_name == self.actor(ctx).username

    def test_retrieve_returns_the_object(self, ctx):
        obj = self.make(99, ctx)
        response = self.client(ctx).get(self.detail(obj.pk))
        assert response.status_code == 200 and response.json()["id"] == obj.pk

    @pytest.mark.parametrize("auth", ["session", "token"])
    def test_update_changes_the_field_and_audits_the_actor(self, ctx, auth):
        obj = self.make(98, ctx)
        response = self.client(ctx, auth).patch(
            self.detail(obj.pk), {self.update_field: self.update_value}, format="json"
        )
        assert response.status_code == 200, response.json()
        obj.refresh_from_db()
        assert getattr(obj, self.update_field) == self.update_value
        entry = AuditLog.objects.filter(
            object_type=self.audit_type, object_id=str(obj.pk), action="update"
        ).first()  # newest
        assert entry is not None and entry.actor == self.actor(ctx)
        assert self.update_field in entry.changes

    def test_delete(self, ctx):
        obj = self.make(97, ctx)
        response = self.client(ctx).delete(self.detail(obj.pk))
        if self.deletable:
            assert response.status_code == 204
            assert not self.model.objects.filter(pk=obj.pk).exists()
            assert AuditLog.objects.filter(object_type=self.audit_type, object_id=str(obj.pk), action="delete").exists()
        else:
            assert response.status_code == 405
            assert self.model.objects.filter(pk=obj.pk).exists()

    def test_search_and_ordering(self, ctx):
        for i in range(3):
            self.make(i, ctx)
        client = self.client(ctx)
        found = client.get(self.url, {"search": self.search_term}).json()["results"]
        assert found and all(self.search_term in str(row).lower() for row in found)
        nothing = client.get(self.url, {"search": "zzz-no-such-thing"}).json()
        assert nothing["count"] == 0
        up = [r[self.ordering] for r in client.get(self.url, {"ordering": self.ordering}).json()["results"]]
        down = [r[self.ordering] for r in client.get(self.url, {"ordering": f"-{self.ordering}"}).json()["results"]]
        assert up == sorted(up) and down == sorted(down, reverse=True)


class TestUsers(CRUDMixin):
    url = "/api/users/"
    model = User
    audit_type = "user"
    deletable = False
    search_term = "member"
    ordering = "username"
    update_field = "tokens_per_day"
    update_value = 5000

    def create_payload(self, ctx):
        return {"username": "carol", "role": "developer", "email": "carol@example.com", "allowed_models": ["qwen3-32b"]}

    def make(self, i, ctx):
        user = User.objects.create(username=f"member{i}", email=f"m{i}@example.com")
        user.allowed_models.add(Model.objects.get(name="qwen3-32b"))
        return user


class TestHosts(CRUDMixin):
    url = "/api/hosts/"
    model = Host
    audit_type = "host"
    search_term = "rack"
    update_field = "notes"
    update_value = "moved to rack 4"

    def create_payload(self, ctx):
        return {
            "name": "gpu-9",
            "address": "gpu-9.lan",
            "username": "ubuntu",
            "private_key": ctx["ssh_key"],
            "labels": ["h100"],
        }

    def make(self, i, ctx):
        host = Host.objects.create(name=f"rack-host-{i:02}", address=f"10.1.0.{i + 1}", username="ubuntu")
        GPU.objects.create(host=host, index=0, name="NVIDIA L4")
        GPU.objects.create(host=host, index=1, name="NVIDIA L4")
        return host


class TestChannels(CRUDMixin):
    url = "/api/channels/"
    model = Channel
    audit_type = "channel"
    search_term = "cloud"
    update_field = "weight"
    update_value = 7

    def create_payload(self, ctx):
        return {"name": "openai-main", "kind": "openai", "base_url": "https://api.openai.com", "api_key": "sk-abc"}

    def make(self, i, ctx):
        channel = Channel.objects.create(name=f"cloud-{i:02}", base_url=f"https://cloud{i}.test/v1", api_key="sk-x")
        ModelRoute.objects.create(model=Model.objects.get(name="qwen3-32b"), channel=channel)
        return channel


class TestModels(CRUDMixin):
    url = "/api/models/"
    model = Model
    audit_type = "model"
    search_term = "llama"
    update_field = "display_name"
    update_value = "Llama (fast)"

    def create_payload(self, ctx):
        return {
            "name": "llama-3.1-8b",
            "display_name": "Llama 3.1 8B",
            "routes": [{"channel": "vllm-a", "upstream_model": "meta-llama/Llama-3.1-8B", "context_window": 131072}],
        }

    def make(self, i, ctx):
        model = Model.objects.create(name=f"llama-{i:02}")
        ModelRoute.objects.create(model=model, channel=ctx["channel_obj"], context_window=8192)
        return model


class TestKeysAsDeveloper(CRUDMixin):
    url = "/api/keys/"
    model = Key
    audit_type = "key"
    role = "alice"
    deletable = False
    search_term = "laptop"
    update_field = "tokens_per_day"
    update_value = 1234

    def create_payload(self, ctx):
        return {"name": "ci runner", "allowed_models": ["qwen3-32b"], "ip_allowlist": ["10.0.0.0/8"]}

    def make(self, i, ctx):
        key, _ = issue_key(owner=ctx["users"]["alice"], name=f"laptop {i:02}", allowed_models=Model.objects.all())
        return key


class TestKeysAsAdmin(TestKeysAsDeveloper):
    role = "admin"

    def create_payload(self, ctx):
        return {"name": "for alice", "owner": ctx["alice"], "tokens_per_minute": 10000}


def test_audit_log_list_query_count_is_bounded(world, admin_api, django_assert_max_num_queries):
    for i in range(20):
        Host.objects.create(name=f"h{i}", address=f"10.9.0.{i + 1}", username="root")
    with django_assert_max_num_queries(LIST_MAX_QUERIES):
        response = admin_api.get("/api/audit-log/")
    assert response.json()["count"] >= 20


def test_token_list_query_count_is_bounded(alice, alice_api, django_assert_max_num_queries):
    from accounts.services import issue_token

    for i in range(15):
        issue_token(user=alice, name=f"t{i}")
    with django_assert_max_num_queries(LIST_MAX_QUERIES):
        response = alice_api.get("/api/tokens/")
    assert response.json()["count"] == 15
