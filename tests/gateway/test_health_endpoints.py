"""/healthz: the process answers. /readyz: the database and Redis answer within a deadline (the
outage test, `test_db_outage.py`, checks the degraded answer)."""

from __future__ import annotations

import httpx


def test_liveness_and_readiness(setup, gateway_url):
    live = httpx.get(gateway_url + "/healthz", timeout=30)
    assert live.status_code == 200 and live.json() == {"status": "ok"}
    ready = httpx.get(gateway_url + "/readyz", timeout=30)
    body = ready.json()
    assert ready.status_code == 200, body
    assert body["status"] == "ok" and body["degraded"] == []
    assert body["database"]["ok"] and body["redis"]["ok"]
    assert body["snapshot"]["serving_from_snapshot"] is False
