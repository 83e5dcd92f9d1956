import pytest
from cryptography.fernet import Fernet
from django.core.management import call_command
from django.db import connection

from channels.models import Channel
from hosts.models import Host
from portal import secrets

pytestmark = pytest.mark.django_db

UPSTREAM_KEY = "sk-upstream-THIS-MUST-NOT-LEAK-1234"
SSH_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA-NOT-LEAK\n-----END OPENSSH PRIVATE KEY-----"


def _raw_rows():
    with connection.cursor() as cur:
        cur.execute("SELECT api_key FROM channels_channel")
        channel_rows = [r[0] for r in cur.fetchall()]
        cur.execute("SELECT private_key FROM hosts_host")
        host_rows = [r[0] for r in cur.fetchall()]
    return channel_rows, host_rows


def test_secrets_are_encrypted_at_rest_and_absent_from_a_dump(tmp_path):
    Channel.objects.create(name="c1", base_url="https://api.example.com/v1", api_key=UPSTREAM_KEY)
    Host.objects.create(name="gpu1", address="10.0.0.5", username="ubuntu", private_key=SSH_KEY)

    channel_rows, host_rows = _raw_rows()
    assert channel_rows[0].startswith("fernet:") and UPSTREAM_KEY not in channel_rows[0]
    assert host_rows[0].startswith("fernet:") and "NOT-LEAK" not in host_rows[0]

    out = tmp_path / "dump.json"
    call_command("dumpdata", "channels", "hosts", output=str(out))
    dump = out.read_text()
    assert "NOT-LEAK" not in dump and UPSTREAM_KEY not in dump
    assert Channel.objects.get().api_key == UPSTREAM_KEY
    assert Host.objects.get().private_key == SSH_KEY


def test_rotation_re_encrypts_with_newest_key(settings):
    Channel.objects.create(name="c1", base_url="https://api.example.com/v1", api_key=UPSTREAM_KEY)
    old_cipher = _raw_rows()[0][0]
    new_key = Fernet.generate_key().decode()
    settings.PORTAL_ENCRYPTION_KEYS = [new_key, *settings.PORTAL_ENCRYPTION_KEYS]
    secrets.reset_cache()
    try:
        call_command("rotate_encryption_keys")
        new_cipher = _raw_rows()[0][0]
        assert new_cipher != old_cipher
        # Only the newest key is needed now.
        settings.PORTAL_ENCRYPTION_KEYS = [new_key]
        secrets.reset_cache()
        assert Channel.objects.get().api_key == UPSTREAM_KEY
    finally:
        secrets.reset_cache()


def test_decrypt_with_unknown_key_says_why(settings):
    token = secrets.encrypt("x")
    settings.PORTAL_ENCRYPTION_KEYS = [Fernet.generate_key().decode()]
    secrets.reset_cache()
    try:
        with pytest.raises(ValueError, match="PORTAL_ENCRYPTION_KEYS"):
            secrets.decrypt(token)
    finally:
        secrets.reset_cache()


def test_keyed_hash_is_the_hmac_of_the_current_secret(settings):
    """`keyed_hash` copies a keyed HMAC kept per secret: the same digests as a new HMAC each time,
    and a changed secret is used at once."""
    import hashlib
    import hmac

    from portal.secrets import keyed_hash

    for secret in ("first-secret-" + "x" * 40, "second-secret-" + "y" * 40):
        settings.PORTAL_KEY_HASH_SECRET = secret
        for value in ("gp-abc", "gp-" + "z" * 60, "é-non-ascii"):
            expected = hmac.new(secret.encode(), value.encode(), hashlib.sha256).hexdigest()
            assert keyed_hash(value) == expected
            assert keyed_hash(value) == expected  # the kept HMAC is copied, never fed
