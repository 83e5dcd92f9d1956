import pytest

from accounts.choices import Role


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """PBKDF2's million rounds cost about a second per test user on a busy 2-core box; password
    storage is Django's, not under test. Subprocess servers keep the real hashers."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def admin(django_user_model):
    return django_user_model.objects.create_user(
        username="admin", password="admin-pass-123", role=Role.ADMIN, is_staff=True, is_superuser=True
    )


@pytest.fixture
def alice(django_user_model):
    return django_user_model.objects.create_user(username="alice", password="alice-pass-123", role=Role.DEVELOPER)


@pytest.fixture
def mallory(django_user_model):
    return django_user_model.objects.create_user(username="mallory", password="mallory-pass-123", role=Role.DEVELOPER)


@pytest.fixture
def admin_client(client, admin):
    client.force_login(admin)
    return client


@pytest.fixture
def alice_client(client, alice):
    client.force_login(alice)
    return client
