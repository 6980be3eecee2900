"""jscore.pull: the one pull-request builder (golden bytes) and the MSG.NEXT subject."""

from __future__ import annotations

import pytest

from jscore.errors import InvalidOptionError
from jscore.jsapi import api_prefix
from jscore.pull import (
    BYTES_MODE_BATCH,
    ConsumeMachine,
    FetchMachine,
    build_pull_request,
    pull_subject,
    resolve_consume_options,
    resolve_fetch_options,
)

from .test_pull_helpers import events, pulls


@pytest.mark.parametrize(
    ("kwargs", "golden"),
    [
        ({"batch": 1}, b'{"batch":1}'),
        (
            {"batch": 500, "expires": 30.0, "heartbeat": 15.0},
            b'{"expires":30000000000,"batch":500,"idle_heartbeat":15000000000}',
        ),
        ({"batch": 5, "no_wait": True}, b'{"batch":5,"no_wait":true}'),
        (
            {"batch": BYTES_MODE_BATCH, "max_bytes": 2048, "expires": 30, "heartbeat": 5},
            b'{"expires":30000000000,"batch":1000000,"max_bytes":2048,"idle_heartbeat":5000000000}',
        ),
        # every key, in the server's order
        (
            {
                "priority": 3,
                "pin_id": "PIN",
                "min_ack_pending": 7,
                "min_pending": 5,
                "group": "G1",
                "heartbeat": 0.5,
                "no_wait": True,
                "max_bytes": 1024,
                "batch": 10,
                "expires": 2.0,
            },
            b'{"expires":2000000000,"batch":10,"max_bytes":1024,"no_wait":true,"idle_heartbeat":500000000,'
            b'"group":"G1","min_pending":5,"min_ack_pending":7,"id":"PIN","priority":3}',
        ),
        # zero / None values are omitted (the server's defaults)
        (
            {
                "batch": 3,
                "max_bytes": 0,
                "expires": 0,
                "heartbeat": None,
                "no_wait": False,
                "group": None,
                "min_pending": None,
                "priority": 0,
            },
            b'{"batch":3}',
        ),
        ({"batch": 1, "group": "g", "priority": 0, "min_pending": 0}, b'{"batch":1,"group":"g"}'),
        # sub-second durations are exact integer nanoseconds
        ({"batch": 1, "expires": 0.1}, b'{"expires":100000000,"batch":1}'),
        ({"batch": 1, "expires": 1.5, "heartbeat": 0.75}, b'{"expires":1500000000,"batch":1,"idle_heartbeat":750000000}'),
    ],
)
def test_golden_bodies(kwargs: dict[str, object], golden: bytes) -> None:
    assert build_pull_request(**kwargs) == golden  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"batch": 0},
        {"batch": -1},
        {"batch": True},
        {"batch": 1.0},
        {"batch": 2**31},
        {"batch": 1, "max_bytes": -1},
        {"batch": 1, "expires": -1.0},
        {"batch": 1, "expires": float("nan")},
        {"batch": 1, "expires": float("inf")},
        {"batch": 1, "expires": 1.0, "heartbeat": 0.6},  # 2 * heartbeat > expires
        {"batch": 1, "heartbeat": 1.0},  # heartbeat without expires
        {"batch": 1, "group": ""},
        {"batch": 1, "group": "a" * 17},
        {"batch": 1, "group": "a b"},
        {"batch": 1, "group": "a.b"},
        {"batch": 1, "group": "é"},
        {"batch": 1, "group": "g", "priority": 10},
        {"batch": 1, "group": "g", "priority": -1},
        {"batch": 1, "group": "g", "min_pending": -1},
        {"batch": 1, "priority": 1},  # needs a group
        {"batch": 1, "pin_id": "x"},  # needs a group
        {"batch": 1, "group": "g", "pin_id": ""},
        {"batch": 1, "group": "g", "pin_id": "a\r\nb"},
    ],
)
def test_invalid_requests_raise(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidOptionError):
        build_pull_request(**kwargs)  # type: ignore[arg-type]


def test_invalid_option_is_value_error() -> None:
    with pytest.raises(ValueError):
        build_pull_request(batch=0)


def test_pull_subject() -> None:
    assert pull_subject(api_prefix(), "ORDERS", "worker") == "$JS.API.CONSUMER.MSG.NEXT.ORDERS.worker"
    assert pull_subject(api_prefix(domain="hub"), "S", "C") == "$JS.hub.API.CONSUMER.MSG.NEXT.S.C"
    assert pull_subject(api_prefix(api_prefix="JS.acc"), "S", "C") == "JS.acc.CONSUMER.MSG.NEXT.S.C"
    with pytest.raises(InvalidOptionError):
        pull_subject("$JS.API.", "a.b", "C")
    with pytest.raises(InvalidOptionError):
        pull_subject("$JS.API.", "S", "c*")


def test_machines_use_the_builder() -> None:
    """The bodies the machines emit are exactly build_pull_request's."""
    c = ConsumeMachine(resolve_consume_options(max_messages=10, expires=4, group="G", priority=2, min_pending=3), 0.0)
    [p] = pulls(events(c))
    assert p.body == build_pull_request(batch=10, expires=4, heartbeat=2, group="G", priority=2, min_pending=3)
    f = FetchMachine(resolve_fetch_options(max_bytes=2048), 0.0)
    [p] = pulls(events(f))
    assert p.body == b'{"expires":30000000000,"batch":1000000,"max_bytes":2048,"idle_heartbeat":5000000000}'
    f = FetchMachine(resolve_fetch_options(max_messages=5, no_wait=True), 0.0)
    [p] = pulls(events(f))
    assert p.body == b'{"batch":5,"no_wait":true}'
