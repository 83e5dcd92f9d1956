import pytest

from channels.baseurl import BaseURLError, normalize_base_url, root_url


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("https://x.example/api", "https://x.example/api/v1"),
        ("https://x.example/api/", "https://x.example/api/v1"),
        ("https://x.example/api/v1", "https://x.example/api/v1"),
        ("https://x.example/api/v1/", "https://x.example/api/v1"),
        ("  https://x.example/api/v1?utm_source=slack  ", "https://x.example/api/v1"),
        ("https://x.example/api/v1/\n", "https://x.example/api/v1"),
        ("https://X.Example:443/v1", "https://x.example/v1"),
        ("http://10.0.0.5:8000", "http://10.0.0.5:8000/v1"),
        ("http://10.0.0.5:8000/v1/chat/completions", "http://10.0.0.5:8000/v1"),
        ("http://10.0.0.5:8000/v1/v1", "http://10.0.0.5:8000/v1"),
        (
            "https://generativelanguage.googleapis.com/v1beta/openai/",
            "https://generativelanguage.googleapis.com/v1beta/openai",
        ),
        ("https://api.example.com//v1//", "https://api.example.com/v1"),
        ("http://[::1]:8080/v1", "http://[::1]:8080/v1"),
        ("https://api.anthropic.com", "https://api.anthropic.com/v1"),
    ],
)
def test_it_stores_one_canonical_form(raw, canonical):
    assert normalize_base_url(raw)[0] == canonical


def test_it_explains_what_it_changed():
    _, notes = normalize_base_url(" https://x.example/api/?utm_source=x ")
    assert "removed surrounding whitespace" in notes
    assert any("query string" in n for n in notes)
    assert "added /v1" in notes
    assert normalize_base_url("https://x.example/v1")[1] == []


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("", "Enter a base URL"),
        ("api.example.com/v1", "scheme"),
        ("ftp://x.example", "http"),
        ("https://user:pw@x.example/v1", "credentials"),
        ("https://x.example:99999/v1", "port"),
        ("https://exa mple.com", "spaces"),
        ("https:///v1", "host"),
        ("http://[::1/v1", "IPv6"),
        ("http://[::1]x/v1", "IPv6"),
    ],
)
def test_it_rejects_unusable_urls_with_a_reason(raw, message):
    with pytest.raises(BaseURLError, match=message):
        normalize_base_url(raw)


@pytest.mark.django_db
def test_an_unparseable_url_is_a_field_error_on_the_api_and_the_form(admin_client):
    from rest_framework.test import APIClient

    from accounts.models import User

    api = APIClient()
    api.force_authenticate(User.objects.get(username="admin"))
    answer = api.post("/api/channels/", {"name": "v6", "kind": "vllm", "base_url": "http://[::1/v1"}, format="json")
    assert answer.status_code == 400 and "IPv6" in answer.json()["base_url"][0]
    page = admin_client.post("/channels/new/", {"name": "v6", "kind": "vllm", "base_url": "http://[::1/v1"})
    assert page.status_code == 400 and b"IPv6" in page.content
    preview = admin_client.get("/channels/base-url-preview/", {"base_url": "http://[::1"})
    assert preview.status_code < 500


def test_it_speaks_the_admins_language():
    from django.utils import translation

    with translation.override("zh-hans"):
        with pytest.raises(BaseURLError) as raised:
            normalize_base_url("api.example.com/v1")
        assert "https://api.example.com/v1" in str(raised.value) and "scheme" not in str(raised.value)


def test_root_url_strips_v1_for_health_endpoints():
    assert root_url("http://h:8000/v1") == "http://h:8000"
