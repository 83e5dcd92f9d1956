"""The status rules, as one pure function so they can be read (and tested) in one place.

    unknown ──ok──▶ healthy ◀──M successes── degraded ◀──slow / partly failing── healthy
       │                │                        │
       └──N failures────┴──────N failures or error ratio ≥ R over the window──▶ down
    any ──401/403──▶ credentials_rejected   (left only when an admin edits the key or URL,
                                            or an admin's "Check now" succeeds)
    any ──settings that cannot work (error `config`, e.g. a key no header can carry)──▶ down

Hysteresis: `down` needs N consecutive failures (or a high error ratio over a window with a
minimum number of samples), and leaving `down` or `degraded` needs M consecutive successes, so
one lost probe or one lucky one does not flip the routing.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.utils.translation import gettext_noop

from channels.choices import ChannelStatus as S
from portal.i18n import Message


@dataclass(frozen=True, slots=True)
class Evidence:
    current: str
    consecutive_failures: int
    consecutive_successes: int
    window_samples: int
    window_failures: int
    last_ok: bool
    last_error: str = ""
    last_error_message: Message | None = None  # the probe's (`probe.Outcome.error_message`) or the gateway's
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


def decide(e: Evidence, r: Rules) -> tuple[str, Message | None]:
    """Return (status, message for the operator) for a channel given its latest evidence; None:
    keep the message it has."""
    ratio = e.window_failures / e.window_samples if e.window_samples else 0.0
    pct = Message(
        gettext_noop("%(percent)s of %(samples)s recent requests/probes failed"),
        percent=f"{ratio:.0%}",
        samples=e.window_samples,
    )
    if e.auth_rejected:
        return S.CREDENTIALS_REJECTED, Message(
            gettext_noop(
                "The upstream rejected the API key (HTTP 401/403). Fix the key on the channel (editing it "
                "resets the status), or fix it upstream and press Check now. Traffic is not routed here."
            )
        )
    if e.current == S.CREDENTIALS_REJECTED:
        return S.CREDENTIALS_REJECTED, None
    if not e.last_ok and e.last_error == "config":  # no retry can help, so no hysteresis either
        return S.DOWN, Message(
            gettext_noop(
                "Down: %(error)s. Edit the channel to fix it; until then the gateway skips it unless nothing "
                "else serves the model."
            ),
            error=e.last_error_message or e.last_error,
        )
    failing = e.consecutive_failures >= r.down_after
    # The ratio only pushes down on a failing check, so a recovering channel is not held down by
    # the failures still in its window.
    ratio_down = not e.last_ok and e.window_samples >= r.down_min_samples and ratio >= r.down_ratio
    if failing or ratio_down:
        why = (
            Message(gettext_noop("%(count)s checks in a row failed"), count=e.consecutive_failures) if failing else pct
        )
        if e.last_error_message:
            why = Message(gettext_noop("%(why)s; last error: %(error)s"), why=why, error=e.last_error_message)
        return S.DOWN, Message(
            gettext_noop(
                "Down: %(why)s. The gateway skips this channel unless nothing else serves the model. "
                "Check the server is running and reachable from the portal."
            ),
            why=why,
        )
    if e.current == S.DOWN and e.consecutive_successes < r.up_after:
        return S.DOWN, Message(
            gettext_noop("Recovering: %(count)s of %(needed)s successful checks needed to leave down."),
            count=e.consecutive_successes,
            needed=r.up_after,
        )
    slow = e.last_ttft_ms is not None and e.last_ttft_ms > e.ttft_threshold_ms
    # Old failures in the window stop counting once the channel has answered well M times in a row.
    recovered = e.consecutive_successes >= r.up_after
    partly = not e.last_ok or (
        not recovered and e.window_samples >= r.degraded_min_samples and ratio >= r.degraded_ratio
    )
    if slow or partly:
        reasons: list[Message] = []
        if slow:
            reasons.append(
                Message(
                    gettext_noop("time to first token %(ttft)s ms is over %(threshold)s ms"),
                    ttft=f"{e.last_ttft_ms:.0f}",
                    threshold=e.ttft_threshold_ms,
                )
            )
        if partly:
            failed = Message(
                gettext_noop("the last check failed (%(error)s)"),
                error=e.last_error_message or e.last_error,
            )
            reasons.append(pct if e.last_ok else failed)
        both = (
            reasons[0]
            if len(reasons) == 1
            else Message(gettext_noop("%(first)s; %(second)s"), first=reasons[0], second=reasons[1])
        )
        if e.current == S.UNKNOWN and not e.last_ok:
            return S.UNKNOWN, Message(gettext_noop("Not confirmed yet: %(reasons)s."), reasons=both)
        return S.DEGRADED, Message(
            gettext_noop("Degraded: %(reasons)s. Still routed, after healthy channels of the same priority."),
            reasons=both,
        )
    if e.current == S.DEGRADED and e.consecutive_successes < r.up_after:
        return S.DEGRADED, Message(
            gettext_noop("Improving: %(count)s of %(needed)s good checks needed to return to healthy."),
            count=e.consecutive_successes,
            needed=r.up_after,
        )
    return S.HEALTHY, Message(gettext_noop("Healthy: answering normally."))
