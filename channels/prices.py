"""Money arithmetic shared by the gateway, the usage pages and the budgets: prices per million
tokens (Decimal, three decimal places) become integer nano-units of the portal's currency per
token, so every cost is an exact integer (`cost_nanos`) in the database and in Redis alike.

A price of p per million tokens is p * 1000 nano-units per token: with at most three decimals
it is an integer, and a request's cost is a sum of integer products, never a rounded float.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings

NANOS = 10**9  # nano-units in one unit of the currency (one dollar, one yuan)
PRICE_PLACES = 3  # decimals of a price per million tokens
SYMBOLS = {"USD": "$", "CNY": "¥"}


@dataclass(slots=True, frozen=True)
class Rates:
    """A route's price in nano-units per token, in effect from `since` (epoch seconds)."""

    since: float
    input: int
    cached_input: int
    cache_write: int
    output: int

    def cost(self, prompt: int, completion: int, cached: int = 0, written: int = 0) -> int:
        """Nano-units for one call. `cached` and `written` are parts of `prompt`."""
        cached = max(0, min(cached, prompt))
        written = max(0, min(written, prompt - cached))
        plain = prompt - cached - written
        return plain * self.input + cached * self.cached_input + written * self.cache_write + completion * self.output

    def most(self, prompt: int, output: int) -> int:
        """The most a call with this prompt and output can cost (every prompt token at its dearest price)."""
        return prompt * max(self.input, self.cached_input, self.cache_write) + output * self.output


def per_token(price_per_million: Decimal | str | int | None) -> int:
    """Nano-units per token for a price per million tokens (exact for three decimals)."""
    if price_per_million is None:
        return 0
    return int((Decimal(str(price_per_million)) * 1000).to_integral_value())


def rates_of(
    *,
    since: float,
    input: Decimal,
    output: Decimal,
    cached_input: Decimal | None = None,
    cache_write: Decimal | None = None,
) -> Rates:
    """A blank cached-input or cache-write price is the input price."""
    i = per_token(input)
    return Rates(
        since=since,
        input=i,
        cached_input=i if cached_input is None else per_token(cached_input),
        cache_write=i if cache_write is None else per_token(cache_write),
        output=per_token(output),
    )


def fallback_rates() -> Rates:
    """PORTAL_UNPRICED_FALLBACK_PRICE for every token of an unpriced route (when the admin chose it)."""
    p = per_token(settings.PORTAL_UNPRICED_FALLBACK_PRICE)
    return Rates(since=0.0, input=p, cached_input=p, cache_write=p, output=p)


def in_effect(prices: tuple[Rates, ...], at: float) -> Rates | None:
    """The latest of `prices` (sorted by `since`) in effect at `at`; None when none is yet."""
    found = None
    for rates in prices:
        if rates.since > at:
            break
        found = rates
    return found


def currency() -> str:
    return str(settings.PORTAL_CURRENCY)


def to_amount(nanos: int | None) -> Decimal | None:
    """Nano-units as a Decimal amount of the currency (exact)."""
    if nanos is None:
        return None
    return Decimal(nanos) / NANOS


def amount_text(nanos: int) -> str:
    """Nano-units as a plain decimal string with nine places ("0.000012400"): exact, for CSV and JSON."""
    return f"{Decimal(nanos).scaleb(-9):f}"


def to_nanos(amount: Decimal | str | int) -> int:
    return int((Decimal(str(amount)) * NANOS).to_integral_value())


def format_money(nanos: int | None, places: int = 4) -> str:
    """`$0.0123` / `¥1.2000`; "" for no cost."""
    if nanos is None:
        return ""
    amount = (Decimal(nanos) / NANOS).quantize(Decimal(1).scaleb(-places))
    sign = "-" if amount < 0 else ""
    return f"{sign}{SYMBOLS.get(currency(), '')}{abs(amount)}"
