"""Priority groups (ADR-42) in the core: the options checked against the consumer's
configuration before anything is sent (TESTPLAN 54), and the pin as the state of one pull
machine (TESTPLAN 52)."""

from __future__ import annotations

from typing import Any

import pytest

from jscore.errors import InvalidOptionError
from jscore.models import ConsumerConfig, PriorityPolicy
from jscore.pull import (
    ConsumeMachine,
    FetchMachine,
    PinIdChanged,
    PinIdCleared,
    check_priority,
    resolve_consume_options,
    resolve_fetch_options,
)

from .test_pull_helpers import body, events, of_type, pulls, status, user

OVERFLOW = ConsumerConfig(priority_groups=["jobs"], priority_policy=PriorityPolicy.OVERFLOW)
PINNED = ConsumerConfig(priority_groups=["jobs"], priority_policy=PriorityPolicy.PINNED_CLIENT)
PRIORITIZED = ConsumerConfig(priority_groups=["jobs"], priority_policy=PriorityPolicy.PRIORITIZED)
PLAIN = ConsumerConfig()


def _check(config: ConsumerConfig | None, operation: str = "consume", **options: Any) -> None:
    check_priority(config, "C", operation, **options)


# ------------------------------------------------------------------ accepted


@pytest.mark.parametrize(
    ("config", "options"),
    [
        (PLAIN, {}),
        (OVERFLOW, {"group": "jobs"}),
        (OVERFLOW, {"group": "jobs", "min_pending": 10}),
        (OVERFLOW, {"group": "jobs", "min_ack_pending": 0}),
        (OVERFLOW, {"group": "jobs", "min_pending": 1, "min_ack_pending": 2}),
        (PINNED, {"group": "jobs"}),
        (PRIORITIZED, {"group": "jobs", "priority": 0}),
        (PRIORITIZED, {"group": "jobs", "priority": 9}),
        (None, {"group": "anything", "min_pending": 5, "priority": 3}),  # bound without info: skipped
    ],
)
def test_accepted(config: ConsumerConfig | None, options: dict[str, Any]) -> None:
    for operation in ("consume", "messages"):
        _check(config, operation, **options)
    if config is not PINNED:
        _check(config, "fetch", **options)
        _check(config, "next", **options)


# ------------------------------------------------------------------ refused, naming the option and the consumer


@pytest.mark.parametrize(
    ("config", "operation", "options", "option"),
    [
        # a consumer with groups: every pull names one of them (2.15: 400 Priority Group missing / Invalid Priority Group)
        (OVERFLOW, "fetch", {}, "group"),
        (OVERFLOW, "consume", {}, "group"),
        (PINNED, "messages", {"group": "other"}, "group"),
        # a group on a consumer without groups (2.15 delivers, ignoring it; ADR-42 and nats.go refuse)
        (PLAIN, "fetch", {"group": "jobs"}, "group"),
        (PLAIN, "consume", {"group": "jobs"}, "group"),
        # thresholds only with overflow (2.15: 400 Not a Overflow Priority consumer)
        (PINNED, "consume", {"group": "jobs", "min_pending": 1}, "min_pending"),
        (PRIORITIZED, "fetch", {"group": "jobs", "min_ack_pending": 1}, "min_ack_pending"),
        (PLAIN, "fetch", {"min_pending": 1}, "min_pending"),
        # priority only with prioritized (2.15 ignores it elsewhere; ADR-42 ties it to the policy)
        (OVERFLOW, "consume", {"group": "jobs", "priority": 1}, "priority"),
        (PINNED, "consume", {"group": "jobs", "priority": 1}, "priority"),
        (PLAIN, "fetch", {"priority": 0}, "priority"),
        # fetch and next on a pinned_client consumer (ADR-42: not supported)
        (PINNED, "fetch", {"group": "jobs"}, "fetch"),
        (PINNED, "next", {"group": "jobs"}, "next"),
    ],
)
def test_refused(config: ConsumerConfig, operation: str, options: dict[str, Any], option: str) -> None:
    with pytest.raises(InvalidOptionError) as ei:
        _check(config, operation, **options)
    text = str(ei.value)
    assert text.startswith(f"{option}:") and "'C'" in text, text
    assert isinstance(ei.value, ValueError)


@pytest.mark.parametrize("group", ["", "x" * 17, "a b", "a.b", "é", "a*", ">"])
def test_invalid_group_names_are_refused_by_the_resolvers(group: str) -> None:
    """TESTPLAN 54: names the server would refuse (10162 / 400), refused before anything is sent."""
    with pytest.raises(InvalidOptionError):
        resolve_consume_options(group=group)
    with pytest.raises(InvalidOptionError):
        resolve_fetch_options(max_messages=1, group=group)


@pytest.mark.parametrize("priority", [-1, 10, True, 1.5])
def test_priority_out_of_range(priority: Any) -> None:
    with pytest.raises(InvalidOptionError):
        resolve_consume_options(group="g", priority=priority)


# ------------------------------------------------------------------ the pin is the machine's


def test_each_consume_keeps_its_own_pin() -> None:
    a = ConsumeMachine(resolve_consume_options(max_messages=4, group="jobs"), 0.0)
    b = ConsumeMachine(resolve_consume_options(max_messages=4, group="jobs"), 0.0)
    events(a), events(b)
    a.receive_msg(user(pin="PA"), 0.1)
    assert of_type(events(a), PinIdChanged) == [PinIdChanged(pin_id="PA")]
    assert (a.pin_id, b.pin_id) == ("PA", None)
    # b's pulls never carry a's pin
    b.receive_msg(status(408, "Request Timeout", pending=4, pending_bytes=0), 0.2)
    [p] = pulls(events(b))
    assert "id" not in body(p)
    # a's next pull carries it
    a.handle_timeout(0.3)
    a.receive_msg(status(408, "Request Timeout", pending=3, pending_bytes=0), 0.3)
    [p] = pulls(events(a))
    assert body(p)["id"] == "PA"


def test_a_fetch_starts_without_a_pin_whatever_came_before() -> None:
    first = FetchMachine(resolve_fetch_options(max_messages=1, group="jobs"), 0.0)
    events(first)
    first.receive_msg(user(pin="P1"), 0.1)
    assert first.pin_id == "P1"
    second = FetchMachine(resolve_fetch_options(max_messages=1, group="jobs"), 0.2)
    [p] = pulls(events(second))
    assert "id" not in body(p)


def test_423_then_a_new_pin_is_reported_in_order() -> None:
    """TESTPLAN 52: pinned, a 423 with pending headers clears the pin and re-pulls at once
    without ``id``; the next pinned message (two Nats-Pin-Id headers: the last counts) pins
    again and the following pull carries the new id."""
    m = ConsumeMachine(resolve_consume_options(max_messages=10, group="jobs"), 0.0)
    events(m)
    m.receive_msg(user(pin="OLD"), 0.1)
    events(m)
    m.receive_msg(status(423, "Nats-Wrong-Pin-Id", pending=9, pending_bytes=0), 0.2)
    evs = events(m)
    assert of_type(evs, PinIdCleared) == [PinIdCleared(code=423, description="Nats-Wrong-Pin-Id")]
    [p] = pulls(evs)
    assert "id" not in body(p) and body(p)["batch"] == 9  # 10 minus the one still buffered
    m.receive_msg(user(pin=["X", "NEW"]), 0.3)
    assert of_type(events(m), PinIdChanged) == [PinIdChanged(pin_id="NEW")]
    m.receive_msg(status(408, "Request Timeout", pending=8, pending_bytes=0), 0.4)
    [p] = pulls(events(m))
    assert body(p)["id"] == "NEW"


# ------------------------------------------------------------------ a pinned consume pulls often enough to keep its pin


def test_consume_expires_on_a_pinned_consumer() -> None:
    from jscore.pull import DEFAULT_EXPIRES, consume_expires

    pinned = ConsumerConfig(priority_groups=["jobs"], priority_policy=PriorityPolicy.PINNED_CLIENT, priority_timeout=10.0)
    assert consume_expires(pinned, "C", None) == 5.0  # half the timeout
    assert consume_expires(pinned, "C", 9.5) == 9.5
    with pytest.raises(InvalidOptionError, match="expires: .*priority_timeout.*'C'"):
        consume_expires(pinned, "C", 10.0)
    long = ConsumerConfig(priority_groups=["g"], priority_policy=PriorityPolicy.PINNED_CLIENT, priority_timeout=600.0)
    assert consume_expires(long, "C", None) == DEFAULT_EXPIRES
    short = ConsumerConfig(priority_groups=["g"], priority_policy=PriorityPolicy.PINNED_CLIENT, priority_timeout=1.5)
    assert consume_expires(short, "C", None) == 1.0  # the consume minimum
    for other in (PLAIN, OVERFLOW, PRIORITIZED, None):
        assert consume_expires(other, "C", None) == DEFAULT_EXPIRES
        assert consume_expires(other, "C", 120.0) == 120.0
