"""The status rules, as one pure function so they can be read (and tested) in one place.

    unknown ──ok──▶ healthy ◀──M successes── degraded ◀──slow / partly failing── healthy
       │                │                        │
       └──N failures────┴──────N failures or error ratio ≥ R over the window──▶ down
    any ──401/403──▶ credentials_rejected   (left only when an admin edits the key or URL,
                                            or an admin's "Check now" succeeds)

Hysteresis: `down` needs N consecutive failures (or a high error ratio over a window with a
minimum number of samples), and leaving `down` or `degraded` needs M consecutive successes, so
one lost probe or one lucky one does not flip the routing.
"""

from __future__ import annotations

from dataclasses import dataclass

from channels.choices import ChannelStatus as S


@dataclass(frozen=True, slots=True)
class Evidence:
    current: str
    consecutive_failures: int
    consecutive_successes: int
    window_samples: int
    window_failures: int
    last_ok: bool
    last_error: str = ""
    last_error_message: str = ""
    last_ttft_ms: float | None = None
    ttft_threshold_ms: int = 5000
    auth_rejected: bool = False


@dataclass(frozen=True, slots=True)
class Rules:
    down_after: int = 3
    up_after: int = 2
    down_ratio: float = 0.5
    down_min_samples: int = 10
    degraded_ratio: float = 0.2
    degraded_min_samples: int = 5


def decide(e: Evidence, r: Rules) -> tuple[str, str]:
    """Return (status, message for the operator) for a channel given its latest evidence."""
    ratio = e.window_failures / e.window_samples if e.window_samples else 0.0
    pct = f"{ratio:.0%} of {e.window_samples} recent requests/probes failed"
    if e.auth_rejected:
        return S.CREDENTIALS_REJECTED, (
            "The upstream rejected the API key (HTTP 401/403). Fix the key on the channel (editing it "
            "resets the status), or fix it upstream and press Check now. Traffic is not routed here."
        )
    if e.current == S.CREDENTIALS_REJECTED:
        return S.CREDENTIALS_REJECTED, ""
    failing = e.consecutive_failures >= r.down_after
    # The ratio only pushes down on a failing check, so a recovering channel is not held down by
    # the failures still in its window.
    ratio_down = not e.last_ok and e.window_samples >= r.down_min_samples and ratio >= r.down_ratio
    if failing or ratio_down:
        why = (f"{e.consecutive_failures} checks in a row failed" if failing else pct) + (
            f"; last error: {e.last_error_message}" if e.last_error_message else ""
        )
        return S.DOWN, _cut(
            f"Down: {why}. The gateway skips this channel unless nothing else serves the model. "
            "Check the server is running and reachable from the portal."
        )
    if e.current == S.DOWN and e.consecutive_successes < r.up_after:
        return S.DOWN, _cut(
            f"Recovering: {e.consecutive_successes} of {r.up_after} successful checks needed to leave down."
        )
    slow = e.last_ttft_ms is not None and e.last_ttft_ms > e.ttft_threshold_ms
    # Old failures in the window stop counting once the channel has answered well M times in a row.
    recovered = e.consecutive_successes >= r.up_after
    partly = not e.last_ok or (
        not recovered and e.window_samples >= r.degraded_min_samples and ratio >= r.degraded_ratio
    )
    if slow or partly:
        reasons = []
        if slow:
            reasons.append(f"time to first token {e.last_ttft_ms:.0f} ms is over {e.ttft_threshold_ms} ms")
        if partly:
            reasons.append(pct if e.last_ok else f"the last check failed ({e.last_error_message or e.last_error})")
        if e.current == S.UNKNOWN and not e.last_ok:
            return S.UNKNOWN, _cut(f"Not confirmed yet: {'; '.join(reasons)}.")
        return S.DEGRADED, _cut(
            f"Degraded: {'; '.join(reasons)}. Still routed, after healthy channels of the same priority."
        )
    if e.current == S.DEGRADED and e.consecutive_successes < r.up_after:
        return S.DEGRADED, _cut(
            f"Improving: {e.consecutive_successes} of {r.up_after} good checks needed to return to healthy."
        )
    return S.HEALTHY, "Healthy: answering normally."


def _cut(text: str) -> str:
    return text if len(text) <= 300 else text[:299] + "…"
