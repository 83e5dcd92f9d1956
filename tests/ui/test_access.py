"""Role matrix over every page: anonymous → login, developers → 403 on admin pages and 404 on
other people's things, admins → everything."""

import pytest
from django.urls import reverse

pytestmark = pytest.mark.django_db

ADMIN_PAGES = [
    ("host_list", None),
    ("host_create", None),
    ("host_detail", "host"),
    ("host_edit", "host"),
    ("host_delete", "host"),
    ("channel_list", None),
    ("channel_create", None),
    ("channel_detail", "channel"),
    ("channel_edit", "channel"),
    ("channel_delete", "channel"),
    ("model_list", None),
    ("model_create", None),
    ("model_detail", "model"),
    ("model_edit", "model"),
    ("model_delete", "model"),
    ("model_alias_list", None),
    ("model_alias_create", None),
    ("model_alias_detail", "alias"),
    ("model_alias_edit", "alias"),
    ("model_alias_delete", "alias"),
    ("usage_requests", None),
    ("mcp_server_list", None),
    ("mcp_server_create", None),
    ("mcp_call_list", None),
    ("user_list", None),
    ("user_create", None),
    ("user_detail", "alice"),
    ("user_edit", "alice"),
    ("user_activation", "alice"),
    ("user_reset_password", "alice"),
    ("team_list", None),
    ("team_create", None),
    ("team_detail", "team"),
    ("team_edit", "team"),
    ("key_all", None),
    ("audit_log", None),
    ("gpu_showback", None),
]
EVERYONE_PAGES = ["dashboard", "account", "password_change", "key_list", "key_create"]
ALICE_KEY_PAGES = ["key_detail", "key_edit", "key_revoke", "key_rotate"]


@pytest.fixture
def objects(host, channel, model, alice, alice_key, alice_token, team):
    """alice is a member of the team (not its lead): its pages are admin pages to her."""
    from channels.models import Model, ModelRoute
    from channels.services import save_alias

    spare = Model.objects.create(name="spare")  # the model is not the alias's only target: it may be deleted
    ModelRoute.objects.create(model=spare, channel=channel)
    alias = save_alias(name="coder", targets=[model, spare])
    return {
        "host": host,
        "channel": channel,
        "model": model,
        "alias": alias,
        "alice": alice,
        "alice_key": alice_key,
        "team": team,
    }


def url_for(name, arg, objects):
    return reverse(name, args=[objects[arg].pk]) if arg else reverse(name)


def every_url(objects):
    urls = [url_for(n, a, objects) for n, a in ADMIN_PAGES]
    urls += [reverse(n) for n in EVERYONE_PAGES]
    urls += [reverse(n, args=[objects["alice_key"].pk]) for n in ALICE_KEY_PAGES]
    return urls


def test_anonymous_is_sent_to_login_from_every_page(client, objects, alice_token):
    for url in [*every_url(objects), reverse("token_revoke", args=[alice_token.pk])]:
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("login") + "?next="), url


def test_anonymous_posts_change_nothing(client, objects):
    from keys.models import Key

    response = client.post(reverse("key_revoke", args=[objects["alice_key"].pk]))
    assert response.status_code == 302
    assert Key.objects.get(pk=objects["alice_key"].pk).revoked_at is None


def test_admin_sees_every_page(admin_client, objects):
    for url in every_url(objects):
        assert admin_client.get(url).status_code == 200, url


def test_developer_gets_403_on_admin_pages_and_changes_nothing(client, alice, objects):
    from accounts.models import AuditLog

    before = AuditLog.objects.count()
    client.force_login(alice)
    for name, arg in ADMIN_PAGES:
        url = url_for(name, arg, objects)
        assert client.get(url).status_code == 403, url
        assert client.post(url, {"name": "x", "username": "x", "role": "admin"}).status_code == 403, url
    assert AuditLog.objects.count() == before


def test_developer_sees_own_pages(client, alice, objects):
    client.force_login(alice)
    for name in EVERYONE_PAGES:
        assert client.get(reverse(name)).status_code == 200, name
    for name in ALICE_KEY_PAGES:
        assert client.get(reverse(name, args=[objects["alice_key"].pk])).status_code == 200, name


def test_other_developer_gets_404_on_alices_key_and_token(client, mallory, objects, alice_token):
    from keys.models import Key

    client.force_login(mallory)
    for name in ALICE_KEY_PAGES:
        url = reverse(name, args=[objects["alice_key"].pk])
        assert client.get(url).status_code == 404, name
        if name != "key_detail":
            assert client.post(url, {"grace": "0"}).status_code == 404, name
    assert Key.objects.get(pk=objects["alice_key"].pk).revoked_at is None
    assert Key.objects.filter(owner=objects["alice"]).count() == 1
    url = reverse("token_revoke", args=[alice_token.pk])
    assert client.get(url).status_code == 404
    assert client.post(url).status_code == 404
    alice_token.refresh_from_db()
    assert alice_token.revoked_at is None


def test_my_keys_lists_only_my_keys(client, mallory, alice_key, mallory_key):
    client.force_login(mallory)
    page = client.get(reverse("key_list")).content.decode()
    assert mallory_key.masked in page
    assert alice_key.masked not in page


def test_developer_nav_has_no_admin_links(client, alice):
    client.force_login(alice)
    page = client.get(reverse("dashboard")).content.decode()
    for name in (
        "host_list",
        "channel_list",
        "mcp_server_list",
        "mcp_call_list",
        "user_list",
        "team_list",
        "key_all",
        "audit_log",
        "gpu_showback",
    ):
        assert f'href="{reverse(name)}"' not in page
    assert f'href="{reverse("key_list")}"' in page


def test_admin_nav_has_every_section(admin_client):
    page = admin_client.get(reverse("dashboard")).content.decode()
    for name in (
        "dashboard",
        "host_list",
        "channel_list",
        "model_list",
        "mcp_server_list",
        "mcp_call_list",
        "user_list",
        "team_list",
        "key_all",
        "audit_log",
        "gpu_showback",
        "key_list",
        "account",
    ):
        assert f'href="{reverse(name)}"' in page, name


def test_deactivated_admin_loses_admin_pages(client, admin):
    client.force_login(admin)
    admin.is_active = False
    admin.save()
    response = client.get(reverse("user_list"))
    assert response.status_code in (302, 403)


def test_forbidden_and_not_found_pages_keep_the_layout(client, alice, mallory_key):
    client.force_login(alice)
    forbidden = client.get(reverse("user_list"))
    assert forbidden.status_code == 403
    assert "You do not have access" in forbidden.content.decode() and "My keys" in forbidden.content.decode()
    missing = client.get(reverse("key_detail", args=[mallory_key.pk]))
    assert missing.status_code == 404 and "not yours to see" in missing.content.decode()
    assert mallory_key.masked not in missing.content.decode()


def test_nav_links_to_the_other_apps_pages_by_role(client, admin, alice):
    client.force_login(admin)
    page = client.get(reverse("dashboard")).content.decode()
    for name in ("deployment_list", "channel-alert-targets", "usage_admin", "connect"):
        assert f'href="{reverse(name)}"' in page, name
    client.force_login(alice)
    page = client.get(reverse("dashboard")).content.decode()
    for name in ("usage", "connect", "account"):
        assert f'href="{reverse(name)}"' in page, name
    for name in ("deployment_list", "channel-alert-targets", "usage_admin"):
        assert f'href="{reverse(name)}"' not in page, name
