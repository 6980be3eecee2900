"""jscore.pull: consume and fetch option defaults and validation (TESTPLAN 32, 54)."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from jscore.errors import InvalidOptionError
from jscore.pull import (
    BYTES_MODE_BATCH,
    NO_WAIT_TIMEOUT,
    fetch_grace,
    resolve_consume_options,
    resolve_fetch_options,
)

# ============================================================================ consume defaults


def test_consume_defaults() -> None:
    o = resolve_consume_options()
    assert (o.max_messages, o.max_bytes, o.expires, o.heartbeat) == (500, 0, 30.0, 15.0)
    assert (o.threshold_messages, o.threshold_bytes) == (250, 0)
    assert not o.by_bytes
    assert o.group is None and o.pin_id is None
    assert (o.no_responders_limit, o.no_responders_backoff) == (3, 1.0)


@pytest.mark.parametrize(("max_messages", "threshold"), [(1, 1), (2, 1), (3, 2), (7, 4), (10, 5), (500, 250)])
def test_consume_threshold_is_ceil_half(max_messages: int, threshold: int) -> None:
    assert resolve_consume_options(max_messages=max_messages).threshold_messages == threshold


def test_consume_by_bytes() -> None:
    o = resolve_consume_options(max_bytes=1001)
    assert o.by_bytes
    assert (o.max_messages, o.max_bytes, o.threshold_bytes) == (BYTES_MODE_BATCH, 1001, 501)


@pytest.mark.parametrize(("expires", "heartbeat"), [(1, 0.5), (2, 1.0), (30, 15.0), (60, 30.0), (100, 30.0)])
def test_consume_heartbeat_default_is_half_expires_capped(expires: float, heartbeat: float) -> None:
    assert resolve_consume_options(expires=expires).heartbeat == heartbeat


def test_consume_explicit_values_kept() -> None:
    o = resolve_consume_options(max_messages=10, expires=2, heartbeat=0.5, threshold_messages=0)
    assert (o.max_messages, o.expires, o.heartbeat, o.threshold_messages) == (10, 2.0, 0.5, 0)
    o = resolve_consume_options(max_messages=10, threshold_messages=10)
    assert o.threshold_messages == 10
    o = resolve_consume_options(max_bytes=100, threshold_bytes=100)
    assert o.threshold_bytes == 100


def test_consume_priority_options() -> None:
    o = resolve_consume_options(group="A-b_c/d=9", min_pending=5, min_ack_pending=6, priority=9, pin_id="P")
    assert (o.group, o.min_pending, o.min_ack_pending, o.priority, o.pin_id) == ("A-b_c/d=9", 5, 6, 9, "P")


@pytest.mark.parametrize(
    "kwargs",
    [
        # TESTPLAN 32
        {"expires": 2, "heartbeat": 1.5},  # heartbeat > expires / 2
        {"max_messages": 0},  # batch <= 0
        {"max_messages": -1},
        {"max_bytes": 0},
        {"expires": -1},
        {"expires": 0},
        {"expires": 0.5},  # consume minimum 1 s
        {"max_messages": 10, "max_bytes": 100},  # exclusive
        {"max_messages": 10, "threshold_messages": 11},  # threshold > max
        {"max_bytes": 100, "threshold_bytes": 101},
        {"max_messages": 10, "threshold_bytes": 5},  # the other constraint's threshold
        {"max_bytes": 100, "threshold_messages": 5},
        {"threshold_messages": -1},
        {"heartbeat": 0.4},
        {"heartbeat": 31, "expires": 100},
        {"heartbeat": 0},
        {"heartbeat": float("nan")},
        {"expires": float("inf")},
        {"max_messages": True},
        {"max_messages": 2**31},
        {"max_messages": "10"},
        {"expires": "30"},
        # TESTPLAN 54
        {"group": ""},
        {"group": "a" * 17},
        {"group": "a b"},
        {"group": "a.b"},
        {"group": "é"},
        {"group": "g", "priority": -1},
        {"group": "g", "priority": 10},
        {"group": "g", "min_pending": -1},
        {"group": "g", "min_ack_pending": -1},
        {"priority": 1},
        {"min_pending": 1},
        {"pin_id": "P"},
        {"group": "g", "pin_id": ""},
        {"no_responders_limit": 0},
        {"no_responders_backoff": 0},
    ],
)
def test_consume_invalid_options(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidOptionError):
        resolve_consume_options(**kwargs)  # type: ignore[arg-type]


# ============================================================================ fetch


def test_fetch_defaults() -> None:
    o = resolve_fetch_options(max_messages=10)
    assert (o.batch, o.max_bytes, o.expires, o.heartbeat, o.no_wait) == (10, 0, 30.0, 5.0, False)
    assert o.client_timeout == 30.0 + fetch_grace(30.0) == 33.0


@pytest.mark.parametrize(("expires", "heartbeat"), [(0.1, 0.0), (5, 0.0), (9.99, 0.0), (10, 5.0), (120, 5.0)])
def test_fetch_heartbeat_default_only_from_10s(expires: float, heartbeat: float) -> None:
    assert resolve_fetch_options(max_messages=1, expires=expires).heartbeat == heartbeat


def test_fetch_by_bytes_sends_a_big_batch() -> None:
    o = resolve_fetch_options(max_bytes=2048)
    assert (o.batch, o.max_bytes) == (BYTES_MODE_BATCH, 2048)
    o = resolve_fetch_options(max_messages=3, max_bytes=2048)
    assert (o.batch, o.max_bytes) == (3, 2048)


def test_fetch_no_wait() -> None:
    o = resolve_fetch_options(max_messages=5, no_wait=True)
    assert (o.expires, o.heartbeat, o.client_timeout) == (0.0, 0.0, NO_WAIT_TIMEOUT)
    o = resolve_fetch_options(max_messages=5, no_wait=True, expires=2)
    assert (o.expires, o.client_timeout) == (2.0, 2.0 + fetch_grace(2.0))


def test_fetch_explicit_heartbeat() -> None:
    assert resolve_fetch_options(max_messages=1, expires=2, heartbeat=1).heartbeat == 1.0
    assert resolve_fetch_options(max_messages=1, expires=60, heartbeat=0).heartbeat == 0.0


@pytest.mark.parametrize(
    "kwargs",
    [
        {},  # neither max_messages nor max_bytes
        {"max_messages": 0},
        {"max_messages": -1},
        {"max_bytes": 0},
        {"max_bytes": -5},
        {"max_messages": 1, "expires": 0},
        {"max_messages": 1, "expires": -1},
        {"max_messages": 1, "expires": float("nan")},
        {"max_messages": 1, "expires": 5, "heartbeat": 3},  # expires < 2 * heartbeat
        {"max_messages": 1, "expires": 60, "heartbeat": 0.1},
        {"max_messages": 1, "expires": 90, "heartbeat": 40},
        {"max_messages": 1, "no_wait": True, "heartbeat": 1},
        {"max_messages": 1, "no_wait": 1},
        {"max_messages": 1, "group": "a.b"},
        {"max_messages": 1, "priority": 3},
        {"max_messages": 1, "group": "g", "priority": 10},
    ],
)
def test_fetch_invalid_options(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidOptionError):
        resolve_fetch_options(**kwargs)  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=1e-6, max_value=1e6, allow_nan=False))
@example(59.25183641457922)  # (found in CI: the subtraction's rounding)
def test_client_timer_always_outlives_the_server_expiry(expires: float) -> None:
    o = resolve_fetch_options(max_messages=1, expires=expires)
    assert o.client_timeout > expires
    # the grace is at most 5 s (compared without subtracting: 59.25... + 5.0 - 59.25... is
    # 5.000000000000007 in floating point)
    assert o.client_timeout <= expires + 5.0
    assert o.client_timeout == expires + fetch_grace(expires) and fetch_grace(expires) <= 5.0
