"""schemathesis over the whole OpenAPI schema, as an admin, a developer and a team lead: no server
error and no response that disagrees with the schema, on every operation, for every role.

Bounded and repeatable: a fixed number of examples per operation, derandomized (the same cases on
every run), no example database. Each request runs in a savepoint that is rolled back, so one
example's side effects (a deactivated user, a revoked token) never change the next one's world;
path ids are drawn from the objects that exist, or anything else the fuzzer makes up.

An operation's cases are generated once and sent as each role: generating them cost about as
much CPU as serving them, and with one fixed seed every role drew the same cases anyway. The
operations are split into PARTS tests, each for all three roles, so xdist runs them side by side.
"""

from __future__ import annotations

import os
import traceback
from contextlib import contextmanager

import pytest
import schemathesis
from django.core.signals import got_request_exception, request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections, connection, transaction
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import response_schema_conformance

from accounts.services import issue_token
from portal.api.throttling import TokenRateThrottle

# The admin reaches every object and every operation's success path: 25 examples each. A developer
# and a team lead mostly meet the permission and scoping paths (403, 404, their own rows), which do
# not vary with the body: the first 10 of the same cases each, still on every operation.
# PORTAL_SCHEMATHESIS_EXAMPLES=N sets all three (more for a deeper run).
EXAMPLES = {"admin": 25, "alice": 10, "lena": 10}
if os.environ.get("PORTAL_SCHEMATHESIS_EXAMPLES"):
    EXAMPLES = dict.fromkeys(EXAMPLES, int(os.environ["PORTAL_SCHEMATHESIS_EXAMPLES"]))
# The operations are dealt round-robin into this many tests (balanced: neighbours in the schema
# are alike), each as long as a third of one role's run was.
PARTS = 3
# One role's run is a few thousand requests: pyproject's 300 s per test fired in the middle of an
# example on a loaded box, where hypothesis took the timeout for that example's failure and the
# interrupted query left the test's transaction broken for every later operation (500s).
TIMEOUT = int(os.environ.get("PORTAL_SCHEMATHESIS_TIMEOUT", "2400"))

pytestmark = [pytest.mark.django_db, pytest.mark.slow, pytest.mark.timeout(TIMEOUT)]


@schemathesis.check
def no_error_of_ours(ctx, response, case) -> bool | None:
    """`not_a_server_error`, but for a 502 the operation documents: a GPU host that did not answer
    over SSH (the world's host is loopback's port 1), which the detail says; the host's, not ours."""
    if response.status_code == 502 and "502" in case.operation.definition.raw.get("responses", {}):
        return None
    return not_a_server_error(ctx, response, case)


CHECKS = [no_error_of_ours, response_schema_conformance]


def fuzz(openapi_schema, world, users: dict, part: int) -> list[str]:
    """Run every operation of `part` as each of `users` (role: user); return one report per
    operation and role whose first failing example it holds (empty when all pass). Examples are
    not replayed: the first failure is reported as it happened, with the request as a curl command
    and, for a server error, the server's traceback."""
    schema = schemathesis.openapi.from_dict(openapi_schema)
    schema.app = get_wsgi_application()
    ids = sorted({v for v in world.values() if isinstance(v, int)} | {0, 10**9})
    names = [world["client"], "no-such-thing"]

    @schema.hook("map_path_parameters")
    def existing_ids(context, path_parameters):
        """Two generated ids in three become one that exists (a made-up id is mostly a 404)."""
        mapped = {}
        for name, value in (path_parameters or {}).items():
            if isinstance(value, int) and value % 3:
                value = ids[value % len(ids)]
            elif isinstance(value, str) and len(value) % 3:
                value = names[len(value) % len(names)]
            mapped[name] = value
        return mapped

    headers = {}
    for role, user in users.items():
        _token, plaintext = issue_token(user=user, name="schemathesis")
        headers[role] = {"Authorization": f"Token {plaintext}"}
    failures: list[str] = []
    operations = [result.ok() for result in schema.get_all_operations()]
    for operation in operations[part::PARTS]:
        try:
            cases = generate(operation, max(EXAMPLES[role] for role in users))
        except Exception as exc:  # the operation's cases cannot be made: its failure, for every role
            stop = outcome_inside(exc)
            if stop is not None:
                raise stop from None  # the test's timeout or an interrupt, not this operation's failure
            failures.append(f"{operation.label}:\n" + "".join(traceback.format_exception(exc)))
            continue
        for role in users:
            label = f"{operation.label} as {role}"
            try:
                failure = fuzz_operation(label, cases[: EXAMPLES[role]], headers[role])
            except BrokenTransaction as exc:  # every later example would fail for this one's fault
                failures.append(f"{label}:\n" + "".join(traceback.format_exception(exc)))
                return failures
            if failure:
                failures.append(failure)
    return failures


def generate(operation, examples: int) -> list:
    """The operation's cases: hypothesis draws them, derandomized (the same on every run), and
    nothing is sent while it does, so each role's requests can be made from the same list."""
    cases: list = []

    @given(case=operation.as_strategy())
    @settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate],  # no shrinking: the first failure is reported as is
    )
    def draw(case):
        cases.append(case)

    draw()
    return cases


def outcome_inside(exc: BaseException) -> BaseException | None:
    """pytest-timeout's `Failed`, a KeyboardInterrupt… that hypothesis caught inside an example and
    wrapped ("Failed on the first call but did not on a subsequent one": the timeout fired once,
    the replay had none). Such an exception ends the test as itself."""
    if not isinstance(exc, Exception):
        return exc
    for inner in getattr(exc, "exceptions", ()):
        found = outcome_inside(inner)
        if found is not None:
            return found
    cause = exc.__cause__ or exc.__context__
    return outcome_inside(cause) if cause is not None and cause is not exc else None


class BrokenTransaction(AssertionError):
    """An example left the test's transaction unusable (its savepoint could not be rolled back)."""


def fuzz_operation(label: str, cases: list, headers: dict[str, str]) -> str | None:
    """The report of the first of `cases` that fails, or None. Anything a request raises (the
    server's exception, a broken transaction) is that example's failure, in full."""
    for case in cases:
        with isolated_example() as server_errors:
            try:
                response = case.call(headers=headers)
            except Exception as exc:
                return f"{label}:\n" + "".join(traceback.format_exception(exc))
        try:
            case.validate_response(response, checks=CHECKS, headers=headers)
        except (Exception, FailureGroup) as exc:
            return report(label, case, response, exc, server_errors)
    return None


@contextmanager
def isolated_example():
    """One example's request in a savepoint of the test's transaction, rolled back whatever
    happened, so its side effects (a deactivated user, a revoked token) and its database errors
    never reach the next example; yields the tracebacks of the exceptions the request raised."""
    server_errors: list[str] = []

    def record(sender, request=None, **kwargs):
        server_errors.append(traceback.format_exc())

    got_request_exception.connect(record)
    try:
        with transaction.atomic():
            try:
                yield server_errors
            finally:
                transaction.set_rollback(True)
    finally:
        got_request_exception.disconnect(record)
    if not connection.in_atomic_block or connection.needs_rollback:
        raise BrokenTransaction("an example broke the test's transaction:\n" + "\n".join(server_errors))


def report(label: str, case, response, exc: BaseException, server_errors: list[str]) -> str:
    """The failing example in full: the check that failed, the request as curl (against a local
    `portal up`, with a token of the same user in $TOKEN), the answer, the server's traceback."""
    if isinstance(exc, BaseExceptionGroup):
        checks = "\n".join(f"- {type(e).__name__}: {e}" for e in exc.exceptions)
    else:
        checks = f"- {type(exc).__name__}: {exc}"
    curl = case.as_curl_command(headers={"Authorization": "Token $TOKEN"}, base_url="http://127.0.0.1:8000")
    body = response.text if len(response.text) <= 2000 else response.text[:2000] + "…"
    parts = [
        f"{label}: {response.status_code}",
        f"checks that failed:\n{checks}",
        f"reproduce: {curl}",
        f"response body: {body}",
    ]
    parts += [f"server traceback:\n{tb}" for tb in server_errors]
    return "\n".join(parts)


@pytest.fixture
def in_test_transaction():
    """Calls into the WSGI app run inside the test's transaction: keep Django from closing the
    connection at the end of each request, as its own test client does."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@pytest.fixture
def unthrottled(monkeypatch):
    """Hundreds of calls a minute from one token are the point here, not abuse."""
    monkeypatch.setattr(TokenRateThrottle, "rate", "1000000/minute", raising=False)


@pytest.mark.parametrize("part", range(PARTS))
def test_the_whole_api_under_schemathesis_has_no_server_error_and_matches_its_schema(
    request, openapi_schema, world, unthrottled, in_test_transaction, part
):
    users = {role: request.getfixturevalue(role) for role in EXAMPLES}
    failures = fuzz(openapi_schema, world, users, part)
    labels = [f.split(":", 1)[0] for f in failures]
    assert not failures, f"{len(failures)} operation(s) failed: {labels}\n\n" + "\n\n".join(failures)


def test_a_timeout_inside_an_example_ends_the_fuzzing_as_a_timeout_not_as_a_flaky_example():
    """pytest-timeout raises `Failed` wherever the test is: inside an example, hypothesis catches
    it, replays the example without the alarm and reports "Failed on the first call but did not
    on a subsequent one"; fuzz() must find the timeout in that report and re-raise it."""
    calls = []

    @given(case=st.integers())
    @settings(max_examples=5, derandomize=True, database=None, phases=[Phase.explicit, Phase.generate])
    def check(case):
        calls.append(case)
        if len(calls) == 3:
            pytest.fail("Timeout (>300.0s) from pytest-timeout.")

    with pytest.raises(Exception) as caught:  # hypothesis's FlakyFailure
        check()
    assert "Failed on the first call but did not on a subsequent one" in str(caught.value)
    found = outcome_inside(caught.value)
    assert isinstance(found, pytest.fail.Exception) and "Timeout" in str(found)
    assert outcome_inside(ValueError("a real failing example")) is None
