"""The test ports' walk (`tests.services.free_port`): every port of a share once before any again,
and two sessions whose walks meet on a port part at the next."""

from __future__ import annotations

from tests import services

SIZE = 5692  # a share of four xdist workers below 32768


def _walk(start: int, step: int, n: int) -> list[int]:
    stride = services._stride(SIZE, step)
    return [(start + k) * stride % SIZE for k in range(n)]


def test_a_walk_hands_out_every_port_of_its_share_once_before_any_again():
    for step in (1, 2, 4, 1423, SIZE, SIZE + 3, 65535):
        assert sorted(_walk(7, step, SIZE)) == list(range(SIZE))


def test_two_sessions_that_meet_on_a_port_do_not_stay_in_step():
    """With steps of one, a meeting was followed by meetings on every later port (CI beside a second
    session: three tests in a row got the other session's server on their port)."""
    a, b = _walk(0, 3, SIZE), _walk(0, 10, SIZE)
    met = next(i for i in range(1, SIZE) if a[i] in b)
    j = b.index(a[met])
    later = sum(a[met + k] == b[j + k] for k in range(1, 50) if met + k < SIZE and j + k < SIZE)
    assert later == 0
