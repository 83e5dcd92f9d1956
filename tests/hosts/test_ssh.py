"""SSH to a real OpenSSH server on 127.0.0.1: host-key pinning and human error messages."""

from __future__ import annotations

import logging
import re
import socket

import pytest
from django.utils import translation

from hosts.choices import HostStatus
from hosts.models import Host
from hosts.remote import inventory, ssh
from tests.services import free_port


def make_host(ssh_target, **overrides) -> Host:
    fields = {
        "name": "box",
        "address": "127.0.0.1",
        "ssh_port": ssh_target.port,
        "username": ssh_target.username,
        "private_key": ssh_target.client_private_key,
    }
    fields.update(overrides)
    return Host.objects.create(**fields)


def test_first_contact_records_the_offered_key_and_waits_for_confirmation(db, ssh_target):
    host = make_host(ssh_target)
    with pytest.raises(ssh.HostKeyUnconfirmed) as exc:
        with ssh.connect(host):
            pass
    host.refresh_from_db()
    assert host.seen_host_key_fingerprint == ssh_target.host_key_fingerprint
    assert host.host_key_fingerprint == ""
    assert ssh_target.host_key_fingerprint in exc.value.message


def test_confirmed_key_lets_commands_run_quoted(db, ssh_target):
    host = make_host(ssh_target, host_key_fingerprint=ssh_target.host_key_fingerprint)
    with ssh.connect(host) as remote:
        result = remote.run(["printf", "%s", "a b; echo pwned $(id)"])
    assert result.ok
    assert result.stdout == "a b; echo pwned $(id)"


def test_it_refuses_a_changed_host_key(db, ssh_target):
    host = make_host(ssh_target, host_key_fingerprint="SHA256:" + "A" * 43)
    with pytest.raises(ssh.HostKeyChanged) as exc:
        with ssh.connect(host):
            pass
    assert exc.value.message.startswith("Host key changed")
    assert ssh_target.host_key_fingerprint in exc.value.message
    assert inventory.refresh(host) == HostStatus.HOST_KEY_CHANGED


def test_auth_failure_says_which_key_to_install(db, ssh_target):
    host = make_host(
        ssh_target, private_key=ssh_target.other_private_key(), host_key_fingerprint=ssh_target.host_key_fingerprint
    )
    with pytest.raises(ssh.AuthFailed) as exc:
        with ssh.connect(host):
            pass
    assert "Authentication failed" in exc.value.message
    assert "authorized_keys" in exc.value.message


def test_unreadable_private_key_is_an_auth_problem_not_a_crash(db, ssh_target):
    host = make_host(ssh_target, private_key="not a key")
    with pytest.raises(ssh.AuthFailed, match="cannot be read"):
        with ssh.connect(host):
            pass


def test_a_failed_connection_is_logged_in_english_while_a_chinese_reader_waits(db, ssh_target, caplog):
    """The person who asked reads the failure in Chinese; the operator's log stays English."""
    host = make_host(ssh_target, ssh_port=free_port())
    with translation.override("zh-hans"), caplog.at_level(logging.INFO, logger="hosts.remote.ssh"):
        with pytest.raises(ssh.ConnectionRefused) as exc:
            with ssh.connect(host):
                pass
        assert re.search(r"[\u4e00-\u9fff]", exc.value.message)
    logged = [r.getMessage() for r in caplog.records if r.name == "hosts.remote.ssh"]
    assert logged and all("Connection refused" in m and not re.search(r"[\u4e00-\u9fff]", m) for m in logged), logged


def test_refused_connection_has_its_own_message(db, ssh_target):
    host = make_host(ssh_target, ssh_port=free_port())
    with pytest.raises(ssh.ConnectionRefused, match="Connection refused"):
        with ssh.connect(host):
            pass


def test_silent_server_times_out_with_its_own_message(db, ssh_target):
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        host = make_host(ssh_target, ssh_port=silent.getsockname()[1])
        with pytest.raises(ssh.ConnectTimeout, match="No answer"):
            with ssh.connect(host, timeout=0.5):
                pass


def test_unknown_host_has_its_own_message(db, ssh_target):
    host = make_host(ssh_target, address="no-such-host.invalid")
    with pytest.raises(ssh.UnknownHost, match="does not resolve"):
        with ssh.connect(host, timeout=5):
            pass
