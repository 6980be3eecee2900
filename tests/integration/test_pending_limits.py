"""Subscription buffers are bounded by messages and by bytes; overflow drops, counts, and is
reported once per episode."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from jscore.errors import InvalidOptionError
from jssync import Client
from jssync.events import SlowConsumer
from tests.integration import clients  # noqa: F401  (fixture)


def test_an_unread_subscription_is_bounded_by_bytes(nats_url: str, clients: Callable[..., Client]) -> None:
    events: list[Any] = []
    seen = threading.Event()

    def on_event(e: Any) -> None:
        events.append(e)
        if isinstance(e, SlowConsumer):
            seen.set()

    nc = clients(nats_url, on_event=on_event)
    pub = clients(nats_url)
    sub = nc.subscribe("t.bytes", pending_bytes_limit=1_000_000)
    nc.flush()
    payload = b"x" * 100_000
    for _ in range(30):  # 3 MB for a 1 MB buffer
        pub.publish("t.bytes", payload)
    pub.flush()
    nc.flush()
    assert seen.wait(5.0)
    assert sub.pending_bytes <= 1_000_000 and sub.pending_msgs == 10
    assert sub.dropped == 20
    assert len([e for e in events if isinstance(e, SlowConsumer)]) == 1, "one report per episode"
    for _ in range(10):
        assert sub.next_msg(timeout=1.0).data == payload
    assert sub.pending_bytes == 0
    # A new episode after the buffer had room again: reported again.
    for _ in range(12):
        pub.publish("t.bytes", payload)
    pub.flush()
    nc.flush()
    deadline = time.monotonic() + 5
    while len([e for e in events if isinstance(e, SlowConsumer)]) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    slow = [e for e in events if isinstance(e, SlowConsumer)]
    assert len(slow) == 2 and slow[-1].dropped == 21 and sub.dropped == 22  # (counted at its first drop)


def test_messages_limit_still_holds(nats_url: str, clients: Callable[..., Client]) -> None:
    nc = clients(nats_url)
    pub = clients(nats_url)
    sub = nc.subscribe("t.count", pending_msgs_limit=5)
    nc.flush()
    for i in range(8):
        pub.publish("t.count", b"%d" % i)
    pub.flush()
    nc.flush()
    assert sub.pending_msgs == 5 and sub.dropped == 3


@pytest.mark.parametrize("bad", [0, -1, 1.5, "10", True])
def test_bad_limits_are_refused(nats_url: str, clients: Callable[..., Client], bad: Any) -> None:
    nc = clients(nats_url)
    with pytest.raises(InvalidOptionError, match="pending_bytes_limit"):
        nc.subscribe("t.bad", pending_bytes_limit=bad)
    with pytest.raises(InvalidOptionError, match="pending_msgs_limit"):
        nc.subscribe("t.bad", pending_msgs_limit=bad)
