"""A skewed wall clock for a process the tests start (PYTHONPATH=tests/fakes/skewed_clock):
`time.time()` and `time.time_ns()` run PORTAL_TEST_CLOCK_SKEW seconds ahead (or behind), as on a
replica whose NTP is off. Monotonic clocks are untouched."""

import os
import time

_skew = float(os.environ.get("PORTAL_TEST_CLOCK_SKEW") or 0)
if _skew:
    _time, _time_ns = time.time, time.time_ns
    time.time = lambda: _time() + _skew
    time.time_ns = lambda: _time_ns() + int(_skew * 1e9)
