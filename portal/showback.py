"""Token shares for the GPU-hours showback, filled by the app that records usage.

The hosts app knows how long each deployment held its GPUs; the keys app knows who sent tokens
through its channel. They are independent siblings, so the keys app registers its reader here at
start-up (as `portal.dashboard` is composed) and the showback asks through this module.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Share:
    """Tokens one person sent through a channel in a window, and the team they were in then."""

    team: str | None
    user: str | None
    tokens: int


# (channel id, since, until): one deployment run's window on its channel
Window = tuple[int, dt.datetime, dt.datetime]
TokenSource = Callable[[list[Window]], list[list[Share]]]

_source: TokenSource | None = None


def register_token_source(source: TokenSource) -> None:
    """`source(windows)`: for each (channel_id, since, until), the shares of tokens on that channel
    in [since, until), read together (a month's runs cost one query, not one each)."""
    global _source
    _source = source


def token_shares(windows: list[Window]) -> list[list[Share]]:
    """Who sent tokens through each window's channel in it; empty when no app records usage."""
    return _source(windows) if _source is not None else [[] for _ in windows]


# (team at request time, user) -> spend in nano-units of PORTAL_CURRENCY
SpendSource = Callable[[dt.datetime, dt.datetime], dict[tuple[str | None, str | None], int]]

_spend: SpendSource | None = None


def register_spend_source(source: SpendSource) -> None:
    """`source(since, until)`: each person's priced spend (cloud and local routes) in [since, until)."""
    global _spend
    _spend = source


def spend(since: dt.datetime, until: dt.datetime) -> dict[tuple[str | None, str | None], int]:
    """Spend per (team, user) in [since, until); empty when no app records usage."""
    return _spend(since, until) if _spend is not None else {}
