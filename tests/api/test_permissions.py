"""Role matrix: every API endpoint and method, as anonymous, alice (developer and owner of the
alice_* objects, member of the team), mallory (another developer, in no team), lena (lead of
alice's team) and admin. Other people's objects are 404."""

from __future__ import annotations

import re

import pytest
from django.db import transaction

pytestmark = pytest.mark.django_db

ROLES = ("anon", "alice", "mallory", "lead", "admin")

HOST_PUT = {"name": "gpu-1", "address": "10.0.0.6", "username": "ubuntu"}
CHANNEL_PUT = {"name": "vllm-a", "kind": "vllm", "base_url": "http://10.0.0.5:8000"}
# "{name}" in a body is the world's value, as in the paths
DEPLOYMENT_PUT = {
    "name": "qwen",
    "host": "{keyless_host}",
    "backend": "vllm",
    "model_path": "Qwen/Qwen3-32B",
    "served_model_name": "qwen3-32b",
    "gpu_indices": [0],
    "port": 8000,
    "options": {"max_model_len": 16384},
}
FIT_SPEC = {
    "backend": "llamacpp",
    "model": "Qwen3-Coder-30B-A3B-Instruct-Q4_K_M.gguf",
    "options": {"n_gpu_layers": 25, "ctx_size": 32768, "flash_attn": "off"},
    "gpus": [{"index": 0, "total_mib": 12288, "free_mib": 12288}],
}
ALERT_TARGET_PUT = {"name": "oncall", "kind": "email", "email": "pager@example.com"}

# (method, path template, body, expected status for anon, alice, mallory, lead, admin)
MATRIX = [
    # users: admins only; deactivated, never deleted
    ("get", "/api/users/", None, (401, 403, 403, 403, 200)),
    ("post", "/api/users/", {"username": "newbie", "role": "developer"}, (401, 403, 403, 403, 201)),
    ("get", "/api/users/{alice}/", None, (401, 403, 403, 403, 200)),
    ("patch", "/api/users/{alice}/", {"tokens_per_day": 1000}, (401, 403, 403, 403, 200)),
    ("put", "/api/users/{alice}/", {"username": "alice", "role": "developer"}, (401, 403, 403, 403, 200)),
    ("delete", "/api/users/{alice}/", None, (401, 403, 403, 403, 405)),
    ("post", "/api/users/{alice}/deactivate/", None, (401, 403, 403, 403, 200)),
    ("post", "/api/users/{alice}/reactivate/", None, (401, 403, 403, 403, 200)),
    ("post", "/api/users/{alice}/unlock/", None, (401, 403, 403, 403, 200)),
    ("post", "/api/users/{alice}/reset-password/", None, (401, 403, 403, 403, 200)),
    # teams: admins manage them; members read their own team (another team is 404); its lead
    # also manages the members' limits (within the team's and below an admin's)
    ("get", "/api/teams/", None, (401, 200, 200, 200, 200)),
    ("post", "/api/teams/", {"name": "beta"}, (401, 403, 403, 403, 201)),
    ("get", "/api/teams/{team}/", None, (401, 200, 404, 200, 200)),
    ("patch", "/api/teams/{team}/", {"requests_per_minute": 10}, (401, 403, 403, 403, 200)),
    ("put", "/api/teams/{team}/", {"name": "alpha"}, (401, 403, 403, 403, 200)),
    ("delete", "/api/teams/{team}/", None, (401, 403, 403, 403, 405)),
    ("get", "/api/teams/{team}/members/", None, (401, 403, 404, 200, 200)),
    ("post", "/api/teams/{team}/members/", {}, (401, 405, 405, 405, 405)),
    ("get", "/api/teams/{team}/members/{alice}/", None, (401, 403, 404, 200, 200)),
    ("patch", "/api/teams/{team}/members/{alice}/", {"tokens_per_day": 1000}, (401, 403, 404, 200, 200)),
    ("patch", "/api/teams/{team}/members/{mallory}/", {"tokens_per_day": 1000}, (401, 403, 404, 404, 404)),
    ("delete", "/api/teams/{team}/members/{alice}/", None, (401, 405, 405, 405, 405)),
    # me: anyone logged in, read-only
    ("get", "/api/", None, (401, 200, 200, 200, 200)),
    ("post", "/api/", {}, (401, 405, 405, 405, 405)),
    ("get", "/api/me/", None, (401, 200, 200, 200, 200)),
    ("post", "/api/me/", {}, (401, 405, 405, 405, 405)),
    ("patch", "/api/me/", {}, (401, 405, 405, 405, 405)),
    # personal API tokens: own only, even for admins
    ("get", "/api/tokens/", None, (401, 200, 200, 200, 200)),
    ("post", "/api/tokens/", {"name": "ci"}, (401, 201, 201, 201, 201)),
    ("get", "/api/tokens/{alice_token}/", None, (401, 200, 404, 404, 404)),
    ("post", "/api/tokens/{alice_token}/revoke/", None, (401, 200, 404, 404, 404)),
    ("patch", "/api/tokens/{alice_token}/", {"name": "x"}, (401, 405, 405, 405, 405)),
    ("delete", "/api/tokens/{alice_token}/", None, (401, 405, 405, 405, 405)),
    # audit log: admins, read-only
    ("get", "/api/audit-log/", None, (401, 403, 403, 403, 200)),
    ("get", "/api/audit-log/{audit}/", None, (401, 403, 403, 403, 200)),
    ("post", "/api/audit-log/", {}, (401, 403, 403, 403, 405)),
    ("delete", "/api/audit-log/{audit}/", None, (401, 403, 403, 403, 405)),
    # hosts: admins only
    ("get", "/api/hosts/", None, (401, 403, 403, 403, 200)),
    ("post", "/api/hosts/", {"name": "gpu-2", "address": "gpu-2.lan", "username": "root"}, (401, 403, 403, 403, 201)),
    ("get", "/api/hosts/{host}/", None, (401, 403, 403, 403, 200)),
    ("patch", "/api/hosts/{host}/", {"notes": "rack 3"}, (401, 403, 403, 403, 200)),
    ("put", "/api/hosts/{host}/", HOST_PUT, (401, 403, 403, 403, 200)),
    ("post", "/api/hosts/{host}/refresh-inventory/", None, (401, 403, 403, 403, 202)),
    # nothing awaits confirmation on a fresh host, so even an admin gets a field error
    ("post", "/api/hosts/{host}/confirm-host-key/", {"fingerprint": "SHA256:x"}, (401, 403, 403, 403, 400)),
    # the world's download to the host still runs: cancel it first
    ("delete", "/api/hosts/{host}/", None, (401, 403, 403, 403, 409)),
    # the models on a host's disk are read over SSH: a host without a private key must get one first
    ("get", "/api/hosts/{keyless_host}/models/", None, (401, 403, 403, 403, 409)),
    ("delete", "/api/hosts/{keyless_host}/models/{model_folder}/", None, (401, 403, 403, 403, 409)),
    # channels: admins only
    ("get", "/api/channels/", None, (401, 403, 403, 403, 200)),
    (
        "post",
        "/api/channels/",
        {"name": "c2", "kind": "openai", "base_url": "https://x.test"},
        (401, 403, 403, 403, 201),
    ),
    ("get", "/api/channels/{channel}/", None, (401, 403, 403, 403, 200)),
    ("patch", "/api/channels/{channel}/", {"priority": 5}, (401, 403, 403, 403, 200)),
    ("put", "/api/channels/{channel}/", CHANNEL_PUT, (401, 403, 403, 403, 200)),
    # (the channel's route is priced: its delete asks for the confirmation)
    ("delete", "/api/channels/{channel}/?remove_priced_routes=true", None, (401, 403, 403, 403, 204)),
    # models: developers read the ones they may use, admins write
    ("get", "/api/models/", None, (401, 200, 200, 200, 200)),
    ("post", "/api/models/", {"name": "llama-3"}, (401, 403, 403, 403, 201)),
    ("get", "/api/models/{model}/", None, (401, 200, 200, 200, 200)),
    ("patch", "/api/models/{model}/", {"description": "fast"}, (401, 403, 403, 403, 200)),
    ("put", "/api/models/{model}/", {"name": "qwen3-32b"}, (401, 403, 403, 403, 200)),
    # The world's alias has this model as its only target: an admin passes the permission check
    # and meets the 409 that keeps the alias from being left with no target.
    ("delete", "/api/models/{model}/", None, (401, 403, 403, 403, 409)),
    # aliases (virtual models): developers read the ones they may use, admins write
    ("get", "/api/aliases/", None, (401, 200, 200, 200, 200)),
    ("post", "/api/aliases/", {"name": "fast", "targets": ["qwen3-32b"]}, (401, 403, 403, 403, 201)),
    ("get", "/api/aliases/{alias}/", None, (401, 200, 200, 200, 200)),
    ("patch", "/api/aliases/{alias}/", {"local_only": True}, (401, 403, 403, 403, 200)),
    ("put", "/api/aliases/{alias}/", {"name": "coder", "targets": ["qwen3-32b"]}, (401, 403, 403, 403, 200)),
    ("delete", "/api/aliases/{alias}/", None, (401, 403, 403, 403, 204)),
    # keys: own for developers, everyone's for admins; revoked, never deleted
    ("get", "/api/keys/", None, (401, 200, 200, 200, 200)),
    ("post", "/api/keys/", {"name": "laptop"}, (401, 201, 201, 201, 201)),
    ("get", "/api/keys/{alice_key}/", None, (401, 200, 404, 200, 200)),
    ("patch", "/api/keys/{alice_key}/", {"name": "renamed"}, (401, 200, 404, 200, 200)),
    ("put", "/api/keys/{alice_key}/", {"name": "renamed"}, (401, 200, 404, 200, 200)),
    ("delete", "/api/keys/{alice_key}/", None, (401, 405, 405, 405, 405)),
    ("post", "/api/keys/{alice_key}/revoke/", None, (401, 200, 404, 200, 200)),
    ("post", "/api/keys/{alice_key}/rotate/", {"grace_seconds": 60}, (401, 201, 404, 201, 201)),
    # deployments: admins only; jobs are queued (their task is sent on commit, never in a test),
    # the fit check reads nothing (the deployment's host has no key stored), nothing waits on SSH
    ("get", "/api/deployments/", None, (401, 403, 403, 403, 200)),
    ("post", "/api/deployments/", {**DEPLOYMENT_PUT, "name": "qwen-2", "port": 8001}, (401, 403, 403, 403, 201)),
    ("get", "/api/deployments/{deployment}/", None, (401, 403, 403, 403, 200)),
    ("patch", "/api/deployments/{deployment}/", {"extra_args": ["--enforce-eager"]}, (401, 403, 403, 403, 200)),
    ("put", "/api/deployments/{deployment}/", DEPLOYMENT_PUT, (401, 403, 403, 403, 200)),
    ("delete", "/api/deployments/{deployment}/", None, (401, 403, 403, 403, 204)),
    ("post", "/api/deployments/{deployment}/launch/", None, (401, 403, 403, 403, 202)),
    ("post", "/api/deployments/{deployment}/stop/", None, (401, 403, 403, 403, 202)),
    ("post", "/api/deployments/{deployment}/restart/", None, (401, 403, 403, 403, 202)),
    ("post", "/api/deployments/{deployment}/adopt/", None, (401, 403, 403, 403, 202)),
    ("post", "/api/deployments/{deployment}/fit/", None, (401, 403, 403, 403, 200)),
    # a stopped deployment has no server to forget (409), so nothing waits on SSH either
    ("post", "/api/deployments/{deployment}/forget/", None, (401, 403, 403, 403, 409)),
    # weight downloads: admins only; a POST to a host whose key is unconfirmed is refused (400),
    # cancel of a queued job with no remote process needs no SSH; its token is not forgotten
    # while it runs (409)
    ("get", "/api/downloads/", None, (401, 403, 403, 403, 200)),
    ("post", "/api/downloads/", {"host": "{host}", "repo_id": "acme/tiny"}, (401, 403, 403, 403, 400)),
    ("get", "/api/downloads/{download}/", None, (401, 403, 403, 403, 200)),
    ("post", "/api/downloads/{download}/cancel/", None, (401, 403, 403, 403, 200)),
    ("post", "/api/downloads/{download}/forget-token/", None, (401, 403, 403, 403, 409)),
    ("patch", "/api/downloads/{download}/", {"pattern": "*.gguf"}, (401, 403, 403, 403, 405)),
    ("delete", "/api/downloads/{download}/", None, (401, 403, 403, 403, 405)),
    # launch jobs: admins, read-only
    ("get", "/api/jobs/", None, (401, 403, 403, 403, 200)),
    ("get", "/api/jobs/{job}/", None, (401, 403, 403, 403, 200)),
    ("post", "/api/jobs/", {"deployment": "{deployment}"}, (401, 403, 403, 403, 405)),
    ("delete", "/api/jobs/{job}/", None, (401, 403, 403, 403, 405)),
    # the VRAM estimate: admins only, computed from the body (nothing stored, nothing read)
    ("post", "/api/fit-estimate/", FIT_SPEC, (401, 403, 403, 403, 200)),
    ("get", "/api/fit-estimate/", None, (401, 403, 403, 403, 405)),
    # channel health: admins only; only the probe settings are writable
    ("get", "/api/health/channels/", None, (401, 403, 403, 403, 200)),
    ("get", "/api/health/channels/summary/", None, (401, 403, 403, 403, 200)),
    ("get", "/api/health/channels/{channel}/", None, (401, 403, 403, 403, 200)),
    ("patch", "/api/health/channels/{channel}/", {"probe_max_tokens": 8}, (401, 403, 403, 403, 200)),
    ("put", "/api/health/channels/{channel}/", {"probe_max_tokens": 8}, (401, 403, 403, 403, 405)),
    ("delete", "/api/health/channels/{channel}/", None, (401, 403, 403, 403, 405)),
    ("get", "/api/health/channels/{channel}/probes/", None, (401, 403, 403, 403, 200)),
    ("get", "/api/health/channels/{channel}/series/", None, (401, 403, 403, 403, 200)),
    # a disabled channel is not probed, so even an admin's "check now" answers at once (409)
    ("post", "/api/health/channels/{channel_off}/check/", None, (401, 403, 403, 403, 409)),
    ("get", "/api/health/status-changes/", None, (401, 403, 403, 403, 200)),
    ("get", "/api/health/status-changes/{status_change}/", None, (401, 403, 403, 403, 200)),
    ("post", "/api/health/status-changes/", {}, (401, 403, 403, 403, 405)),
    ("delete", "/api/health/status-changes/{status_change}/", None, (401, 403, 403, 403, 405)),
    # alert targets: admins only; the test notification of an e-mail target goes to the test outbox
    ("get", "/api/health/alert-targets/", None, (401, 403, 403, 403, 200)),
    (
        "post",
        "/api/health/alert-targets/",
        {"name": "ops", "kind": "email", "email": "ops@example.com"},
        (401, 403, 403, 403, 201),
    ),
    ("get", "/api/health/alert-targets/deliveries/", None, (401, 403, 403, 403, 200)),
    ("get", "/api/health/alert-targets/{alert_target}/", None, (401, 403, 403, 403, 200)),
    ("patch", "/api/health/alert-targets/{alert_target}/", {"enabled": False}, (401, 403, 403, 403, 200)),
    ("put", "/api/health/alert-targets/{alert_target}/", ALERT_TARGET_PUT, (401, 403, 403, 403, 200)),
    ("delete", "/api/health/alert-targets/{alert_target}/", None, (401, 403, 403, 403, 204)),
    ("post", "/api/health/alert-targets/{alert_target}/test/", None, (401, 403, 403, 403, 200)),
    # the probe round's schedule: admins only
    ("get", "/api/health/schedule/", None, (401, 403, 403, 403, 200)),
    ("put", "/api/health/schedule/", {"interval_seconds": 300, "enabled": True}, (401, 403, 403, 403, 200)),
    ("patch", "/api/health/schedule/", {"enabled": False}, (401, 403, 403, 403, 200)),
    ("delete", "/api/health/schedule/", None, (401, 403, 403, 403, 405)),
    # usage: read-only; own rows for developers (another user's are 404), everyone's for admins
    ("get", "/api/usage/records/", None, (401, 200, 200, 200, 200)),
    ("get", "/api/usage/records/{alice_usage}/", None, (401, 200, 404, 200, 200)),
    ("post", "/api/usage/records/", {}, (401, 405, 405, 405, 405)),
    ("delete", "/api/usage/records/{alice_usage}/", None, (401, 405, 405, 405, 405)),
    ("get", "/api/usage/daily/", None, (401, 200, 200, 200, 200)),
    ("get", "/api/usage/daily/{alice_daily}/", None, (401, 200, 404, 200, 200)),
    ("patch", "/api/usage/daily/{alice_daily}/", {"requests": 0}, (401, 405, 405, 405, 405)),
    ("get", "/api/usage/summary/", None, (401, 200, 200, 200, 200)),
    ("get", "/api/usage/summary/?group_by=user&days=7", None, (401, 200, 200, 200, 200)),
    ("post", "/api/usage/summary/", {}, (401, 405, 405, 405, 405)),
    # request logs: admins only, both the switch and the stored bodies (each read audit-logged)
    ("get", "/api/payload-logging/", None, (401, 403, 403, 403, 200)),
    ("post", "/api/payload-logging/", {"user": "{mallory}", "retention_days": 3}, (401, 403, 403, 403, 201)),
    ("get", "/api/payload-logging/{alice_logging}/", None, (401, 403, 403, 403, 200)),
    ("patch", "/api/payload-logging/{alice_logging}/", {"retention_days": 30}, (401, 403, 403, 403, 200)),
    (
        "put",
        "/api/payload-logging/{alice_logging}/",
        {"key": "{alice_key}", "enabled": False},
        (401, 403, 403, 403, 200),
    ),
    ("delete", "/api/payload-logging/{alice_logging}/", None, (401, 403, 403, 403, 204)),
    ("get", "/api/request-logs/", None, (401, 403, 403, 403, 200)),
    ("get", "/api/request-logs/{alice_request_log}/", None, (401, 403, 403, 403, 200)),
    ("post", "/api/request-logs/", {}, (401, 403, 403, 403, 405)),
    ("delete", "/api/request-logs/{alice_request_log}/", None, (401, 403, 403, 403, 405)),
    # prices: admins only; added, never edited or deleted (the list is the history)
    ("get", "/api/prices/", None, (401, 403, 403, 403, 200)),
    ("post", "/api/prices/", {"route": "{route}", "input": "2", "output": "4"}, (401, 403, 403, 403, 201)),
    ("get", "/api/prices/{route_price}/", None, (401, 403, 403, 403, 200)),
    ("patch", "/api/prices/{route_price}/", {"input": "9"}, (401, 403, 403, 403, 405)),
    ("delete", "/api/prices/{route_price}/", None, (401, 403, 403, 403, 405)),
    ("post", "/api/prices/load-catalogue/", None, (401, 403, 403, 403, 200)),
    # budgets: everyone reads the ones that bound them; admins set any, a lead their members'
    # (within the team's); a top-up is an admin's
    ("get", "/api/budgets/", None, (401, 200, 200, 200, 200)),
    ("post", "/api/budgets/", {"user": "{alice}", "window": "day", "amount": "5"}, (401, 403, 403, 201, 201)),
    ("post", "/api/budgets/", {"team": "{team}", "window": "day", "amount": "5"}, (401, 403, 403, 403, 201)),
    ("get", "/api/budgets/{alice_budget}/", None, (401, 200, 404, 200, 200)),
    ("patch", "/api/budgets/{alice_budget}/", {"amount": "20"}, (401, 403, 404, 200, 200)),
    ("delete", "/api/budgets/{alice_budget}/", None, (401, 403, 404, 204, 204)),
    (
        "post",
        "/api/budgets/{alice_budget}/top-up/",
        {"amount": "5", "until": "2099-01-01T00:00:00Z"},
        (401, 403, 403, 403, 200),
    ),
    # client configs: for the caller only, with the caller's own keys (even for admins)
    ("get", "/api/client-configs/clients/", None, (401, 200, 200, 200, 200)),
    ("get", "/api/client-configs/clients/{client}/", None, (401, 200, 200, 200, 200)),
    ("get", "/api/client-configs/clients/{client}/files/", None, (401, 200, 200, 200, 200)),
    ("get", "/api/client-configs/clients/{client}/files/?key={alice_key}", None, (401, 200, 404, 404, 404)),
    ("post", "/api/client-configs/clients/{client}/mint/", {"machine": "ci"}, (401, 201, 201, 201, 201)),
    ("post", "/api/client-configs/clients/{client}/download-tokens/", {}, (401, 201, 201, 201, 201)),
    (
        "post",
        "/api/client-configs/clients/{client}/download-tokens/",
        {"key_mode": "placeholder", "key": "{alice_key}"},
        (401, 201, 404, 404, 404),
    ),
    ("delete", "/api/client-configs/clients/{client}/", None, (401, 405, 405, 405, 405)),
    # the installer bundle: public, the one-use token in the body is the credential
    ("post", "/api/client-configs/bundle/", {"token": "{bundle_token}"}, (200, 200, 200, 200, 200)),
    ("post", "/api/client-configs/bundle/", {"token": "gdt-unknown"}, (404, 404, 404, 404, 404)),
    ("get", "/api/client-configs/bundle/", None, (405, 405, 405, 405, 405)),
    # MCP servers, their tools, grants and call records: admins only
    ("get", "/api/mcp-servers/", None, (401, 403, 403, 403, 200)),
    (
        "post",
        "/api/mcp-servers/",
        {"name": "Docs", "slug": "docs", "url": "http://10.0.0.7/mcp"},
        (401, 403, 403, 403, 201),
    ),
    ("get", "/api/mcp-servers/{mcp_server}/", None, (401, 403, 403, 403, 200)),
    ("patch", "/api/mcp-servers/{mcp_server}/", {"description": "issues"}, (401, 403, 403, 403, 200)),
    (
        "put",
        "/api/mcp-servers/{mcp_server}/",
        {"name": "Tracker", "slug": "tracker", "url": "http://10.0.0.7/mcp"},
        (401, 403, 403, 403, 200),
    ),
    ("delete", "/api/mcp-servers/{mcp_server}/", None, (401, 403, 403, 403, 204)),
    ("post", "/api/mcp-servers/{mcp_server}/check/", None, (401, 403, 403, 403, 200)),
    ("get", "/api/mcp-tools/", None, (401, 403, 403, 403, 200)),
    ("get", "/api/mcp-tools/{mcp_tool}/", None, (401, 403, 403, 403, 200)),
    ("patch", "/api/mcp-tools/{mcp_tool}/", {"enabled": False}, (401, 403, 403, 403, 200)),
    ("put", "/api/mcp-tools/{mcp_tool}/", {"enabled": False}, (401, 403, 403, 403, 200)),
    ("post", "/api/mcp-tools/", {}, (401, 403, 403, 403, 405)),
    ("delete", "/api/mcp-tools/{mcp_tool}/", None, (401, 403, 403, 403, 405)),
    ("get", "/api/mcp-grants/", None, (401, 403, 403, 403, 200)),
    ("post", "/api/mcp-grants/", {"server": "{mcp_server}", "user": "{mallory}"}, (401, 403, 403, 403, 201)),
    ("get", "/api/mcp-grants/{mcp_grant}/", None, (401, 403, 403, 403, 200)),
    ("patch", "/api/mcp-grants/{mcp_grant}/", {"tool": None}, (401, 403, 403, 403, 405)),
    ("delete", "/api/mcp-grants/{mcp_grant}/", None, (401, 403, 403, 403, 204)),
    ("get", "/api/mcp-calls/", None, (401, 403, 403, 403, 200)),
    ("get", "/api/mcp-calls/{mcp_call}/", None, (401, 403, 403, 403, 200)),
    ("delete", "/api/mcp-calls/{mcp_call}/", None, (401, 403, 403, 403, 405)),
    # the API description needs a login too; its pages send a signed-out browser to the login page
    ("get", "/api/schema/", None, (401, 200, 200, 200, 200)),
    ("get", "/api/docs/", None, (302, 200, 200, 200, 200)),
    ("get", "/api/redoc/", None, (302, 200, 200, 200, 200)),
]


def fill(body, world: dict):
    """The body with each "{name}" string replaced by the world's value (an id stays an int)."""
    if isinstance(body, dict):
        return {k: fill(v, world) for k, v in body.items()}
    if isinstance(body, list):
        return [fill(v, world) for v in body]
    if isinstance(body, str) and (m := re.fullmatch(r"\{(\w+)\}", body)):
        return world[m[1]]
    return body


@pytest.mark.parametrize(
    ("method", "path", "body", "expected"),
    [pytest.param(*row, id=f"{row[0].upper()} {row[1]}") for row in MATRIX],
)
def test_role_matrix(request, world, method, path, body, expected):
    """Each role runs in a savepoint that is rolled back, so every role sees the same world
    (a delete by the admin cannot hide the object from the next role) at a quarter of the setup cost."""
    url = path.format(**world)
    body = fill(body, world)
    got = {}
    for role in ROLES:
        client = request.getfixturevalue(f"{role}_api")
        with transaction.atomic():
            call = getattr(client, method)
            response = call(url, body, format="json") if body is not None else call(url)
            got[role] = response.status_code
            transaction.set_rollback(True)
    assert got == dict(zip(ROLES, expected, strict=True))


# Lists answer 200 to every developer, so the matrix cannot tell whose rows are in them:
# (list URL, world id of alice's row, which roles see it)
OWN_ROWS = [
    ("/api/keys/", "alice_key", {"alice", "lead", "admin"}),
    ("/api/tokens/", "alice_token", {"alice"}),
    ("/api/usage/records/", "alice_usage", {"alice", "lead", "admin"}),
    ("/api/usage/daily/", "alice_daily", {"alice", "lead", "admin"}),
    ("/api/teams/", "team", {"alice", "lead", "admin"}),
]


@pytest.mark.parametrize(("path", "row", "seen_by"), OWN_ROWS)
def test_lists_hold_only_the_rows_the_caller_may_see(request, world, path, row, seen_by):
    got = set()
    for role in ROLES[1:]:
        response = request.getfixturevalue(f"{role}_api").get(path)
        assert response.status_code == 200
        if world[row] in {r["id"] for r in response.json()["results"]}:
            got.add(role)
    assert got == seen_by


def test_usage_totals_count_only_the_callers_rows(world, alice_api, mallory_api, lead_api, admin_api):
    def users(client) -> list[str]:
        return [r["group"] for r in client.get("/api/usage/summary/?group_by=user").json()["results"]]

    assert (users(alice_api), users(mallory_api), users(lead_api), users(admin_api)) == (
        ["alice"],
        [],
        ["alice"],
        ["alice"],
    )


MY_VIEW_MODULES = {
    "accounts.api.views",
    "hosts.api.views",
    "channels.api.views",
    "keys.api.views",
    "hosts.deployments.api.views",
    "hosts.downloads.api.views",
    "channels.health.api.views",
    "keys.usage.api.views",
    "clientconfigs.api.views",
    "mcpservers.api.views",
    "drf_spectacular.views",
    "portal.api.views",
}


def api_routes() -> list[tuple[str, object]]:
    """(route with {} placeholders, view callback) for every URL under /api/, whoever owns it."""
    from django.urls import get_resolver

    def walk(patterns, prefix=""):
        for p in patterns:
            if hasattr(p, "url_patterns"):
                yield from walk(p.url_patterns, prefix + str(p.pattern))
            else:
                yield prefix + str(p.pattern), p.callback

    found = []
    for route, callback in walk(get_resolver().url_patterns):
        route = re.sub(r"\(\?P<[^>]+>[^)]*\)", "{}", route).replace("^", "").replace("$", "")
        route = re.sub(r"<[^>]+>|\{[^}]+\}", "{}", route).replace("\\.", ".")
        if route.startswith("api/") and "{}.{}" not in route and "format" not in route:
            found.append((route, callback))
    return found


def test_the_matrix_covers_every_route_of_this_api():
    """A new endpoint in our modules must be added to the matrix."""
    covered = {re.sub(r"\{[^}]+\}", "{}", p.lstrip("/").split("?")[0]) for _m, p, _b, _e in MATRIX}
    ours = {
        route
        for route, callback in api_routes()
        if getattr(callback, "cls", None) is not None and callback.cls.__module__ in MY_VIEW_MODULES
    }
    assert ours and ours <= covered, sorted(ours - covered)


# Endpoints whose credential is in the body, on purpose (a one-use download token for installers).
PUBLIC_BY_DESIGN = {"api/client-configs/bundle/"}


@pytest.mark.parametrize("method", ["get", "post", "put", "patch", "delete"])
def test_every_api_route_refuses_anonymous_callers(db, anon_api, method):
    """A guard over the whole API, other engineers' endpoints included: no anonymous access."""
    opened = []
    for route, _callback in api_routes():
        if route in PUBLIC_BY_DESIGN:
            continue
        response = getattr(anon_api, method)("/" + route.replace("{}", "1"))
        to_login = response.status_code == 302 and response["Location"].startswith("/login/")  # the docs pages
        if response.status_code not in (401, 403, 404, 405) and not to_login:
            opened.append((route, response.status_code))
    assert not opened
