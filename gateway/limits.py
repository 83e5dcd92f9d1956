"""Exact limits per key, per user and per team: requests/min, tokens/min, tokens/day, tokens/month, in flight.

Admission reserves before forwarding and settling corrects after, so a limit is never exceeded by
concurrent requests, on one replica or many:

- requests/min and tokens/min are sliding 60-second logs (exact, no window-edge bursts);
- tokens/day and tokens/month are calendar (UTC) counters, always kept so a limit set mid-day
  counts what was already used;
- in-flight requests are short leases, renewed while the request runs, that expire on their own
  when a process dies or their release is lost;
- a settle that cannot reach Redis is queued and replayed when it answers again, so nobody is
  charged for tokens that were reserved but not produced.

A refused request reserves nothing. One Lua script does the whole check-and-reserve for every
scope (the key, its owner, the owner's team) in one round trip (it also returns the cache
generations, see `cache`); settles are pipelined off the request path. The embedded default
runs the same script on the embedded Redis (`portal.embedded_redis`): there is one limiter.
"""

from __future__ import annotations

import asyncio
import collections
import datetime as dt
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from django.conf import settings

from portal import faults
from portal.hot import hot

from .cache import BudgetInfo, admission_keys, generation_keys
from .http import GatewayError
from .resp import Encoded, RespClient, RespError

logger = logging.getLogger(__name__)

LIMIT_NAMES = (
    "requests_per_minute",
    "tokens_per_minute",
    "tokens_per_day",
    "tokens_per_month",
    "max_parallel_requests",
)
# Where each limit sits in `Scope.args` (LIMIT_NAMES' order, the admission script's too).
RPM, TPM, PARALLEL = (
    LIMIT_NAMES.index(name) for name in ("requests_per_minute", "tokens_per_minute", "max_parallel_requests")
)
TOKEN_LIMITS = tuple(LIMIT_NAMES.index(name) for name in LIMIT_NAMES if name.startswith("tokens_per"))
UNLIMITED = -1


def lease_seconds() -> float:
    """How long an in-flight slot lives unless renewed: the process renews the slots of its
    requests in flight every third of it, so a slot whose release was lost (Redis unreachable,
    a crashed process) frees itself within one lease."""
    return float(hot.GATEWAY_LEASE_SECONDS)


@dataclass(slots=True)
class Scope:
    """One set of limits to enforce: a key (`k:ID`), its owner (`u:ID`) or the owner's team (`t:ID`).
    Read-only once made: what the admission script is sent for it is encoded once."""

    prefix: str
    label: str  # "key", "user" or "team", for messages
    limits: dict[str, int | None]
    args: tuple[int, ...] = field(init=False)  # LIMIT_NAMES' values in order (UNLIMITED: none)
    encoded: Encoded = field(init=False)  # the prefix and `args`, as the admission script takes them
    encoded_prefix: Encoded = field(init=False)  # the prefix alone, as the settle script takes it
    parallel: bool = field(init=False)  # has a max_parallel_requests: holds a slot while in flight
    # x-ratelimit-limit-* for the key's per-minute limits (`rate_headers`), made once
    limit_headers: tuple[tuple[bytes, bytes] | None, tuple[bytes, bytes] | None] = field(init=False)

    def __post_init__(self) -> None:
        self.args = tuple(self.arg(name) for name in LIMIT_NAMES)
        self.encoded = Encoded.of([self.prefix, *self.args])
        self.encoded_prefix = Encoded.of([self.prefix])
        self.parallel = self.args[PARALLEL] >= 0
        rpm, tpm = self.args[RPM], self.args[TPM]
        self.limit_headers = (
            (b"x-ratelimit-limit-requests", str(rpm).encode()) if rpm >= 0 else None,
            (b"x-ratelimit-limit-tokens", str(tpm).encode()) if tpm >= 0 else None,
        )

    def arg(self, name: str) -> int:
        value = self.limits.get(name)
        return UNLIMITED if value is None else int(value)


@dataclass(slots=True)
class Refusal:
    scope: str  # "key", "user" or "team"
    limit: str  # one of LIMIT_NAMES, or "budget"
    value: int  # a budget's cap in nano-units
    retry_after: float  # seconds (a one-off budget: -1, it never resets)
    generations: tuple[str | None, str | None] | None = None
    budget: BudgetInfo | None = None


@dataclass(slots=True)
class Stale:
    """Admission did not run: the caller's cached keys or routes are older than Redis says.

    Nothing was reserved, so refreshing and asking again cannot distort the counters (undoing a
    reservation afterwards would, because requests refused meanwhile for its sake never retry)."""

    generations: tuple[str | None, str | None]


@dataclass(slots=True)
class Admission:
    """What admission reserved; `settle()` releases the slot and corrects the token reservation."""

    request_id: str
    scopes: list[Scope]
    reserved: int
    day: str
    month: str
    period: Encoded | None = None  # day and month, encoded for the settle script (None: from `day`, `month`)
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    generations: tuple[str | None, str | None] | None = None
    settled: bool = False
    budget_keys: list[str] = field(default_factory=list)  # the counters the cost was reserved on
    cost: int = 0  # nano-units reserved on each
    alerts: list[BudgetInfo] = field(default_factory=list)  # budgets this reservation took past their alert
    epoch: object = b""  # Redis's epoch at the admission (`ADMIT_LUA`): a settle after a restart corrects nothing
    busy: Sequence[tuple[str, int]] = ()  # the on-demand in-flight sets it is counted in, and for how long


_windows_cache: tuple[int, tuple[str, str, float, float]] = (-1, ("", "", 0.0, 0.0))


def _windows(now: float) -> tuple[str, str, float, float]:
    """(day tag, month tag, seconds to next UTC day, seconds to next UTC month), computed once a
    second: date arithmetic is a visible share of a request's CPU otherwise."""
    global _windows_cache
    second = int(now)
    if _windows_cache[0] == second:
        return _windows_cache[1]
    value = _compute_windows(float(second))
    _windows_cache = (second, value)
    return value


# (second, lease ms) -> the admission script's day, month, lease, ms to day end, ms to month end,
# and the settle script's day and month, encoded once a second
_window_args_cache: tuple[tuple[int, int], Encoded, Encoded] = ((-1, -1), Encoded(b"", 0), Encoded(b"", 0))


def _window_args(now: float, lease_ms: int) -> tuple[Encoded, Encoded]:
    """`_windows(now)` with the lease as the admission script takes them (day, month, lease, ms to
    the day's end, ms to the month's end), and the day and month as the settle script does."""
    global _window_args_cache
    at = (int(now), lease_ms)
    cached = _window_args_cache
    if cached[0] == at:
        return cached[1], cached[2]
    day, month, to_day, to_month = _windows(now)
    admit = Encoded.of([day, month, lease_ms, int(to_day * 1000), int(to_month * 1000)])
    settle = Encoded.of([day, month])
    _window_args_cache = (at, admit, settle)
    return admit, settle


_NOT_CHECKED = Encoded.of(["*", ""])
# (the last expected generations, their encoding): the same on every request between changes
_expected_cache: tuple[tuple[str | None, str | None] | None, Encoded] = (None, _NOT_CHECKED)


def _expected_args(expected: tuple[str | None, str | None] | None) -> Encoded:
    """The admission script's expected generations ('*': do not check), encoded once per value."""
    global _expected_cache
    if expected is None:
        return _NOT_CHECKED
    if _expected_cache[0] == expected:
        return _expected_cache[1]
    encoded = Encoded.of([expected[0] or "", expected[1] or ""])
    _expected_cache = (expected, encoded)
    return encoded


def _compute_windows(now: float) -> tuple[str, str, float, float]:
    t = dt.datetime.fromtimestamp(now, dt.UTC)
    day = t.strftime("%Y%m%d")
    month = t.strftime("%Y%m")
    next_day = (t + dt.timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    first = t.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    next_month = (first + dt.timedelta(days=32)).replace(day=1)
    return day, month, (next_day - t).total_seconds(), (next_month - t).total_seconds()


def budget_window(window: str, now: float) -> tuple[str, int]:
    """A budget window's tag and the milliseconds to its end (-1: a one-off never ends), by
    Redis's clock (`now`), in UTC: days, ISO weeks from Monday, calendar months."""
    t = dt.datetime.fromtimestamp(now, dt.UTC)
    start = t.replace(hour=0, minute=0, second=0, microsecond=0)
    if window == "day":
        tag, end = t.strftime("%Y%m%d"), start + dt.timedelta(days=1)
    elif window == "week":
        year, week, _ = t.isocalendar()
        tag, end = f"{year}w{week:02d}", start + dt.timedelta(days=7 - t.weekday())
    elif window == "month":
        first = start.replace(day=1)
        tag, end = t.strftime("%Y%m"), (first + dt.timedelta(days=32)).replace(day=1)
    else:
        return "once", -1
    return tag, max(int((end - t).total_seconds() * 1000), 1)


def budget_key(ns: str, budget: BudgetInfo, tag: str) -> str:
    """A budget's spend counter for one window: by the budget's id, so a rotated key (whose
    budgets move to its successor) keeps counting in the same window."""
    return f"{ns}:b:{budget.id}:{tag}"


def rate_headers(scopes: list[Scope], counts: list[int] | None = None) -> list[tuple[bytes, bytes]]:
    """x-ratelimit-* for the key's per-minute limits (what OpenAI's clients read)."""
    if not scopes:
        return []
    key = scopes[0]
    out: list[tuple[bytes, bytes]] = []
    requests, tokens = key.limit_headers
    if requests is not None:
        out.append(requests)
        if counts is not None:
            out.append((b"x-ratelimit-remaining-requests", b"%d" % max(key.args[RPM] - counts[0], 0)))
    if tokens is not None:
        out.append(tokens)
        if counts is not None:
            out.append((b"x-ratelimit-remaining-tokens", b"%d" % max(key.args[TPM] - counts[1], 0)))
    return out


# --------------------------------------------------------------------------------------- Redis

# The clock is Redis's (TIME), so replicas whose clocks differ share the same minute windows;
# ARGV[1] is the caller's estimate of it, unused by the script.
# ARGV: now_ms, request id, scope count, reserve tokens (or "tokens/floor": an output the client did
#       not ask for, which shrinks to what every token limit has left, down to `floor`), day,
#       month, lease_ms, ms to day end, ms to month end, expected keys generation ('*': do not
#       check), expected routes generation,
#       then per scope: prefix, rpm, tpm, tpd, tpmo, par;
#       then the budget count, the cost reserved (nano-units), and per budget: its window's counter,
#       cap, ms to the window's end (-1: never), alert threshold (-1: none);
#       then, for a request that may be sent to on-demand deployments, per deployment: its in-flight
#       set and lease (seconds): an admitted request is added there atomically with the generations'
#       check (see `admit`).
# KEYS: the keys and routes generations, the epoch (`cache.admission_keys`).
# Returns {1, gen_keys, gen_routes, key_rpm_used, key_tpm_used, budgets that crossed their alert,
#         tokens reserved, epoch},
#         {0, gen_keys, gen_routes, scope index, limit name, limit value, retry_ms} ('budget': the
#         budget's index, its cap, ms to its window's end or -1), or
#         {2, gen_keys, gen_routes} when the caller's caches are stale (nothing reserved).
ADMIT_LUA = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local rid = ARGV[2]
local n = tonumber(ARGV[3])
local tok, floor = string.match(ARGV[4], '^(%d+)/?(%d*)$')
tok = tonumber(tok)
floor = tonumber(floor) or tok
local function fits(used_now, cap)  -- whether tok fits under cap, shrinking a default output to fit
  if used_now + tok <= cap then return true end
  if cap - used_now >= floor then tok = cap - used_now; return true end
  return false
end
local day = ARGV[5]
local mon = ARGV[6]
local lease = tonumber(ARGV[7])
local msday = tonumber(ARGV[8])
local msmon = tonumber(ARGV[9])
local gens = redis.call('MGET', KEYS[1], KEYS[2])
if ARGV[10] ~= '*' and ((gens[1] or '') ~= ARGV[10] or (gens[2] or '') ~= ARGV[11]) then
  return {2, gens[1], gens[2]}
end
local edge = now - 60000
local function retry_after(window, default)  -- ms until the oldest entry leaves a minute window
  local first = redis.call('ZRANGE', window, 0, 0, 'WITHSCORES')
  if first[2] then return tonumber(first[2]) + 60000 - now end
  return default
end
local used = {}
for i = 0, n - 1 do
  local o = 12 + i * 6
  local p = ARGV[o]
  local rpm = tonumber(ARGV[o + 1]); local tpm = tonumber(ARGV[o + 2])
  local tpd = tonumber(ARGV[o + 3]); local tpmo = tonumber(ARGV[o + 4]); local par = tonumber(ARGV[o + 5])
  local r_used, t_used = 0, 0
  if rpm >= 0 then
    redis.call('ZREMRANGEBYSCORE', p .. ':r', '-inf', edge)
    r_used = redis.call('ZCARD', p .. ':r')
    if r_used + 1 > rpm then
      return {0, gens[1], gens[2], i, 'requests_per_minute', rpm, retry_after(p .. ':r', 1000)}
    end
  end
  if tpm >= 0 then
    local old = redis.call('ZRANGEBYSCORE', p .. ':t', '-inf', edge)
    if #old > 0 then
      local sub = 0
      for _, m in ipairs(old) do sub = sub + tonumber(string.match(m, '|(%d+)$')) end
      redis.call('ZREMRANGEBYSCORE', p .. ':t', '-inf', edge)
      redis.call('DECRBY', p .. ':ts', sub)
    end
    t_used = tonumber(redis.call('GET', p .. ':ts') or '0')
    if not fits(t_used, tpm) then
      return {0, gens[1], gens[2], i, 'tokens_per_minute', tpm, retry_after(p .. ':t', 60000)}
    end
  end
  if tpd >= 0 then
    local u = tonumber(redis.call('GET', p .. ':d:' .. day) or '0')
    if not fits(u, tpd) then return {0, gens[1], gens[2], i, 'tokens_per_day', tpd, msday} end
  end
  if tpmo >= 0 then
    local u = tonumber(redis.call('GET', p .. ':m:' .. mon) or '0')
    if not fits(u, tpmo) then return {0, gens[1], gens[2], i, 'tokens_per_month', tpmo, msmon} end
  end
  if par >= 0 then
    redis.call('ZREMRANGEBYSCORE', p .. ':p', '-inf', now)
    if redis.call('ZCARD', p .. ':p') + 1 > par then
      return {0, gens[1], gens[2], i, 'max_parallel_requests', par, 1000}
    end
  end
  if i == 0 then used = {r_used + 1, t_used} end
end
if used[2] then used[2] = used[2] + tok end  -- the key's, with what is reserved after every shrink
local bo = 12 + n * 6
local nb = tonumber(ARGV[bo] or '0')
local cost = tonumber(ARGV[bo + 1] or '0')
for j = 0, nb - 1 do
  local o = bo + 2 + j * 4
  local cap = tonumber(ARGV[o + 1])
  local spent = tonumber(redis.call('GET', ARGV[o]) or '0')
  if spent + cost > cap then
    local ttl = tonumber(ARGV[o + 2])
    return {0, gens[1], gens[2], j, 'budget', cap, ttl}
  end
end
for i = 0, n - 1 do
  local o = 12 + i * 6
  local p = ARGV[o]
  if tonumber(ARGV[o + 1]) >= 0 then
    redis.call('ZADD', p .. ':r', now, rid)
    redis.call('PEXPIRE', p .. ':r', 61000)
  end
  if tonumber(ARGV[o + 2]) >= 0 then
    redis.call('ZADD', p .. ':t', now, rid .. '|' .. tok)
    redis.call('INCRBY', p .. ':ts', tok)
    redis.call('PEXPIRE', p .. ':t', 61000)
    redis.call('PEXPIRE', p .. ':ts', 61000)
  end
  redis.call('INCRBY', p .. ':d:' .. day, tok)
  redis.call('EXPIRE', p .. ':d:' .. day, 172800)
  redis.call('INCRBY', p .. ':m:' .. mon, tok)
  redis.call('EXPIRE', p .. ':m:' .. mon, 2764800)
  if tonumber(ARGV[o + 5]) >= 0 then
    redis.call('ZADD', p .. ':p', now + lease, rid)
    redis.call('PEXPIRE', p .. ':p', lease)
  end
end
local alerts = {}
for j = 0, nb - 1 do
  local o = bo + 2 + j * 4
  local b = ARGV[o]
  local ttl = tonumber(ARGV[o + 2])
  local spent = redis.call('INCRBY', b, cost)
  -- a day past the window's end, so a settle arriving late still finds it
  if ttl >= 0 then redis.call('PEXPIRE', b, ttl + 86400000) end
  local alert = tonumber(ARGV[o + 3])
  if alert >= 0 and spent >= alert and spent - cost < alert then
    -- once per threshold and window, whichever replica crosses it (a new cap or share: a new flag)
    local keep = ttl >= 0 and ttl + 86400000 or 31622400000
    local flag = redis.call('SET', b .. ':alerted:' .. alert, '1', 'NX', 'PX', keep)
    if flag then alerts[#alerts + 1] = tostring(j) end
  end
end
local od = bo + 2 + nb * 4
while ARGV[od] do  -- a request to on-demand deployments: in flight from now on, in this same step
  redis.call('ZADD', ARGV[od], now / 1000 + tonumber(ARGV[od + 1]), rid)
  od = od + 2
end
-- this Redis's epoch: set by the first admission after it started empty (a restart without
-- persistence), so a settle can tell whether the reservations it corrects are still here
local epoch = redis.call('GET', KEYS[3])
if not epoch then
  epoch = rid
  redis.call('SET', KEYS[3], rid)
end
return {1, gens[1], gens[2], used[1] or 0, used[2] or 0, table.concat(alerts, ','), tok, epoch}
"""

# ARGV: request id, reserved, actual, day, month, scope count, cost reserved, cost actual (nano-units),
# then the scope prefixes, then the budgets' counters, then the epoch key and the admission's epoch.
SETTLE_LUA = """
local rid = ARGV[1]
local reserved = tonumber(ARGV[2])
local actual = tonumber(ARGV[3])
local delta = actual - reserved
local n = tonumber(ARGV[6])
if redis.call('GET', ARGV[#ARGV - 1]) ~= ARGV[#ARGV] then
  -- Redis lost its data since the admission (a restart without persistence): the reservation is
  -- not in the day's and month's counters (requests admitted since may have started them again),
  -- so what the request used is added, not corrected
  for i = 9, 8 + n do
    local p = ARGV[i]
    if actual > 0 then
      redis.call('INCRBY', p .. ':d:' .. ARGV[4], actual)
      redis.call('EXPIRE', p .. ':d:' .. ARGV[4], 172800)
      redis.call('INCRBY', p .. ':m:' .. ARGV[5], actual)
      redis.call('EXPIRE', p .. ':m:' .. ARGV[5], 2764800)
    end
    redis.call('ZREM', p .. ':p', rid)
  end
  return 0
end
local cost_delta = tonumber(ARGV[8]) - tonumber(ARGV[7])
if cost_delta ~= 0 then
  for i = 9 + n, #ARGV - 2 do
    -- a counter gone (its window ended long ago) is not brought back without an expiry
    if redis.call('EXISTS', ARGV[i]) == 1 then redis.call('INCRBY', ARGV[i], cost_delta) end
  end
end
for i = 9, 8 + n do
  local p = ARGV[i]
  if delta ~= 0 then
    local score = redis.call('ZSCORE', p .. ':t', rid .. '|' .. reserved)
    if score then
      redis.call('ZREM', p .. ':t', rid .. '|' .. reserved)
      redis.call('ZADD', p .. ':t', score, rid .. '|' .. actual)
      redis.call('INCRBY', p .. ':ts', delta)
    end
    -- a counter gone (its window ended) holds no reservation to correct: a correction would
    -- start it below zero and without an expiry
    for _, c in ipairs({p .. ':d:' .. ARGV[4], p .. ':m:' .. ARGV[5]}) do
      if redis.call('EXISTS', c) == 1 then redis.call('INCRBY', c, delta) end
    end
  end
  redis.call('ZREM', p .. ':p', rid)
end
return 1
"""


# KEYS: the epoch key. ARGV: lease end (ms; unused: Redis's TIME + the lease is), lease length (ms),
# the number of slot triples, the triples (scope prefix, request id, the admission's epoch), then
# triples for on-demand deployments' in-flight sets (set, request id, the admission's epoch).
# Extends the slots that still exist (a released one is not brought back); after a restart of Redis
# without its data (the epoch is not the admission's), puts back the slots of the requests still
# running here, which the restart took away: else requests admitted since would run beside them
# past the parallel limit; and puts them back in their deployments' in-flight sets: else the idle
# sweep would find a busy model idle and stop it under them (`hosts.ondemand.services.take_out`).
# An entry put back lives one lease, not the admission's hour: each renewal puts it back again while
# the request runs, and one that ended as this renewal was on its way (its removal sent first, on
# a connection made again after the restart) is gone a lease later, not an hour.
RENEW_LUA = """
local lease = tonumber(ARGV[2])
local clock = redis.call('TIME')
local until_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000) + lease
local epoch = redis.call('GET', KEYS[1])
local busy = 4 + tonumber(ARGV[3]) * 3
for i = 4, busy - 1, 3 do
  local p = ARGV[i] .. ':p'
  if epoch ~= ARGV[i + 2] then
    redis.call('ZADD', p, until_ms, ARGV[i + 1])
    redis.call('PEXPIRE', p, lease)
  elseif redis.call('ZSCORE', p, ARGV[i + 1]) then
    redis.call('ZADD', p, 'XX', until_ms, ARGV[i + 1])
    redis.call('PEXPIRE', p, lease)
  end
end
for i = busy, #ARGV, 3 do
  if epoch ~= ARGV[i + 2] then
    redis.call('ZADD', ARGV[i], until_ms / 1000, ARGV[i + 1])
  end
end
return 1
"""

MAX_PENDING_SETTLES = 100_000


def _s(value: object) -> str | None:
    if value is None or value is False:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisLimiter:
    """Admission in one EVALSHA round trip; settles written without waiting (same connection),
    queued for a replay when Redis does not take them; the in-flight slots renewed in the
    background (`start`)."""

    def __init__(self, url: str) -> None:
        self.redis = RespClient(url, timeout=float(settings.GATEWAY_REDIS_TIMEOUT))
        self.in_flight: dict[str, Admission] = {}  # admissions holding a parallel slot or counted on demand
        self.pending: collections.deque[list[object]] = collections.deque(maxlen=MAX_PENDING_SETTLES)
        self._renewer: asyncio.Task[None] | None = None
        # Redis's clock minus ours (seconds), measured with TIME at start and with every renewal:
        # the day and month a reservation counts in are Redis's too (the minute windows are
        # computed by the script itself), so replicas with skewed clocks agree.
        self.clock_offset = 0.0

    def now(self) -> float:
        """Redis's clock, as far as this process knows it."""
        return time.time() + self.clock_offset

    async def sync_clock(self) -> None:
        sent = time.time()
        secs, micros = await self.redis.call("TIME")
        received = time.time()
        self.clock_offset = int(secs) + int(micros) / 1e6 - (sent + received) / 2

    async def generations(self) -> tuple[str | None, str | None]:
        """The cache generations now (`cache.generation_keys`), as the admission script reports them."""
        gen_keys, gen_routes = await self.redis.call("MGET", *generation_keys())
        return _s(gen_keys), _s(gen_routes)

    def start(self) -> None:
        if self._renewer is None or self._renewer.done():
            self._renewer = asyncio.get_running_loop().create_task(self._renew_forever())

    async def _renew_forever(self) -> None:
        try:
            await self.sync_clock()
        except (OSError, RespError) as exc:
            logger.warning("reading Redis's clock failed: %r", exc)
        while True:
            await asyncio.sleep(lease_seconds() / 3)
            try:
                await self.sync_clock()
                await self.replay()
                await self.renew()
            except (OSError, RespError) as exc:  # Redis away: the next round tries again
                logger.warning("renewing leases / replaying settles failed: %r", exc)

    async def renew(self) -> None:
        slots: list[object] = []
        busy: list[object] = []
        for adm in self.in_flight.values():
            for s in adm.scopes:
                if s.parallel:
                    slots += [s.prefix, adm.request_id, adm.epoch]
            for key, _lease in adm.busy:
                busy += [key, adm.request_id, adm.epoch]
        if slots or busy:
            lease = int(lease_seconds() * 1000)
            args = [int(self.now() * 1000) + lease, lease, len(slots) // 3, *slots, *busy]
            await self.redis.evalsha(RENEW_LUA, [admission_keys()[2]], args)

    async def replay(self) -> None:
        """Settles queued while Redis was unreachable, oldest first, until one fails again."""
        while self.pending:
            args = self.pending[0]
            await self.redis.evalsha(SETTLE_LUA, [], args)
            self.pending.popleft()

    async def admit(
        self,
        request_id: str,
        scopes: list[Scope],
        tokens: int,
        expected: tuple[str | None, str | None] | None = None,
        *,
        budgets: tuple[BudgetInfo, ...] = (),
        cost: int = 0,
        namespace: str = "gw",
        floor: int | None = None,
        busy: Sequence[tuple[str, int]] = (),
    ) -> Admission | Refusal | Stale:
        """Reserve for every scope at once, and `cost` (nano-units, the most the request can cost)
        on every one of `budgets`. With `floor`, `tokens` holds an output the client did not ask
        for: it shrinks to what the token limits have left, down to `floor`
        (`Admission.reserved` says how far). With `expected` (the generations the caller's caches
        were built from), a newer generation in Redis returns Stale and reserves nothing.

        With `busy` (on-demand deployments' in-flight sets and leases, `hosts.ondemand.activity`:
        the model's own, or an alias's targets') an admitted request is counted on each in the
        same step: a stop of one of them, which first takes it out of routing and bumps the routes
        generation, then reads its set, either sees the request or made it Stale
        (`hosts.ondemand.services.take_out`)."""
        now = self.now()
        windows, period = _window_args(now, int(lease_seconds() * 1000))
        args: list[object] = [
            int(now * 1000),
            request_id,
            len(scopes),
            tokens if floor is None else f"{tokens}/{floor}",
            windows,  # day, month, lease, ms to the day's end, ms to the month's end
            _expected_args(expected),
        ]
        for s in scopes:  # a loop, not a comprehension: no frame of its own
            args.append(s.encoded)
        budget_keys: list[str] = []
        if budgets:
            args += [len(budgets), cost]
            for b in budgets:
                tag, ttl = budget_window(b.window, now)
                cap = b.cap(now)
                budget_keys.append(budget_key(namespace, b, tag))
                alert = cap * b.alert_percent // 100 if b.alert_percent else -1
                args += [budget_keys[-1], cap, ttl, alert]
        if busy:
            if not budgets:
                args += [0, 0]
            for pair in busy:
                args += pair
        try:
            res = await self.redis.evalsha(ADMIT_LUA, admission_keys(), args)
        except (OSError, RespError) as exc:  # ConnectionError is an OSError
            full = faults.is_disk_full(exc)  # Redis refuses writes it cannot append to its file
            logger.error("Redis admission failed: %r%s", exc, f" ({faults.disk_full_message()})" if full else "")
            raise GatewayError(
                503,
                f"The gateway cannot check rate limits right now: {faults.disk_full_message()}"
                if full
                else "The gateway cannot check rate limits right now (Redis unreachable); retry shortly.",
                code="limiter_unavailable",
                headers=[(b"retry-after", b"2")],
            ) from None
        gen_keys, gen_routes = res[1], res[2]
        gens = (
            gen_keys.decode() if type(gen_keys) is bytes else _s(gen_keys),
            gen_routes.decode() if type(gen_routes) is bytes else _s(gen_routes),
        )
        if int(res[0]) == 2:
            return Stale(gens)
        if int(res[0]) == 1:
            day, month, _to_day, _to_month = _windows(now)
            reserved = int(res[6]) if len(res) > 6 else tokens
            adm = Admission(request_id, scopes, reserved, day, month, period, generations=gens, epoch=res[7])
            adm.headers = rate_headers(scopes, [int(res[3]), int(res[4])])
            if budgets:
                adm.budget_keys, adm.cost = budget_keys, cost
                crossed = _s(res[5]) if len(res) > 5 else None
                adm.alerts = [budgets[int(j)] for j in crossed.split(",")] if crossed else []
            if busy:
                adm.busy = busy
                self.in_flight[request_id] = adm
            for s in scopes:
                if s.parallel:
                    self.in_flight[request_id] = adm
                    break
            return adm
        limit = _s(res[4]) or ""
        if limit == "budget":
            budget = budgets[int(res[3])]
            ms = int(res[6])
            return Refusal(
                scope=budget.label,
                limit=limit,
                value=int(res[5]),
                retry_after=-1.0 if ms < 0 else ms / 1000.0,
                generations=gens,
                budget=budget,
            )
        return Refusal(
            scope=scopes[int(res[3])].label,
            limit=limit,
            value=int(res[5]),
            retry_after=max(int(res[6]), 0) / 1000.0,
            generations=gens,
        )

    def settle(self, adm: Admission, actual: int, cost: int | None = None) -> None:
        """Correct the reservation (tokens, and the budgets' reserved cost to `cost`, nano-units);
        off the request path (nothing waits for the reply)."""
        if adm.settled:
            return
        adm.settled = True
        self.in_flight.pop(adm.request_id, None)
        args: list[object] = [
            adm.request_id,
            adm.reserved,
            max(int(actual), 0),
            *((adm.day, adm.month) if adm.period is None else (adm.period,)),
            len(adm.scopes),
            adm.cost,
            adm.cost if cost is None else max(int(cost), 0),
        ]
        for s in adm.scopes:
            args.append(s.encoded_prefix)
        args += adm.budget_keys
        args += (admission_keys()[2], adm.epoch)

        def queue(exc: BaseException) -> None:
            logger.warning("settle of %s queued for a replay (Redis: %r)", adm.request_id, exc)
            self.pending.append(args)

        self.redis.evalsha_nowait(SETTLE_LUA, [], args, on_error=queue)

    async def drain(self) -> None:
        try:
            await self.redis.call("PING")
            await self.replay()
        except Exception as exc:
            logger.error("Redis unreachable while draining settles (%d left): %r", len(self.pending), exc)

    async def close(self) -> None:
        if self._renewer is not None:
            self._renewer.cancel()
            self._renewer = None
        await self.drain()
        await self.redis.close()


def make_limiter() -> RedisLimiter:
    return RedisLimiter(settings.REDIS_URL)
