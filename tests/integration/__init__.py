"""Helpers shared by the integration and sync tests of the blocking client.

* ``FAST``: small knobs (ping 0.5 s × 2, reconnect_wait 0.1 s, connect_timeout 1.5 s).
* ``EventLog``: an ``on_event`` callback that records events and lets a test wait for them.
* ``wait_until``: poll a predicate with a deadline (fails the test on overrun).
* ``clients`` fixture: ``make(url, **options)`` connects with ``FAST`` defaults and closes every
  client at teardown (close is bounded, so a broken client cannot hang the suite).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

import jssync
from jssync import Client, Subscription

T = TypeVar("T")

# For the scripts memory tests run in a subprocess (prepended to them): a field of
# /proc/self/status in bytes (VmRSS, VmHWM ...).
PROC_STATUS = """
def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError(key)
"""

FAST: dict[str, Any] = {
    "ping_interval": 0.5,
    "max_pings_out": 2,
    "reconnect_wait": 0.1,
    "reconnect_jitter": 0.05,
    "connect_timeout": 1.5,
}


class EventLog:
    """Thread-safe recorder usable as ``on_event``."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.events: list[Any] = []
        self.threads: list[str] = []
        self.times: list[float] = []  # time.monotonic() when each event was received

    def __call__(self, event: Any) -> None:
        with self._cond:
            self.events.append(event)
            self.threads.append(threading.current_thread().name)
            self.times.append(time.monotonic())
            self._cond.notify_all()

    def time_of(self, event: Any) -> float:
        with self._cond:
            for e, t in zip(self.events, self.times):
                if e is event:
                    return t
        raise KeyError(event)

    def of(self, *classes: type[T]) -> list[T]:
        with self._cond:
            return [e for e in self.events if isinstance(e, classes)]

    def names(self) -> list[str]:
        with self._cond:
            return [type(e).__name__ for e in self.events]

    def count(self, cls: type) -> int:
        return len(self.of(cls))

    def wait_for(
        self,
        cls: type[T],
        n: int = 1,
        timeout: float = 5.0,
        pred: Callable[[T], bool] | None = None,
    ) -> list[T]:
        """Wait until at least ``n`` events of ``cls`` (matching ``pred``) were recorded."""

        def matching() -> list[T]:
            return [e for e in self.events if isinstance(e, cls) and (pred is None or pred(e))]

        with self._cond:
            if not self._cond.wait_for(lambda: len(matching()) >= n, timeout):
                raise AssertionError(
                    f"expected {n} {cls.__name__} event(s) within {timeout}s; got {self.names()}"
                )
            return matching()

    def index(self, cls: type, start: int = 0) -> int:
        with self._cond:
            for i in range(start, len(self.events)):
                if isinstance(self.events[i], cls):
                    return i
        raise AssertionError(f"no {cls.__name__} in {self.names()}")


def wait_until(pred: Callable[[], object], timeout: float = 5.0, interval: float = 0.01, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while True:
        if pred():
            return
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or pred}")
        time.sleep(interval)


def collect(sub: Subscription, n: int, timeout: float = 5.0) -> list[jssync.Msg]:
    """Read exactly ``n`` messages from ``sub`` within ``timeout`` seconds (in total)."""
    deadline = time.monotonic() + timeout
    out: list[jssync.Msg] = []
    while len(out) < n:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"got {len(out)} of {n} messages within {timeout}s")
        try:
            out.append(sub.next_msg(timeout=remaining))
        except TimeoutError:
            raise AssertionError(f"got {len(out)} of {n} messages within {timeout}s") from None
    return out


def assert_no_more(sub: Subscription, wait: float = 0.2) -> None:
    try:
        extra = sub.next_msg(timeout=wait)
    except TimeoutError:
        return
    raise AssertionError(f"unexpected extra message {extra!r}")


def await_interest(subscriber: Client, publishers: tuple[Client, ...], timeout: float = 5.0) -> None:
    """Return once the interest of ``subscriber``'s subscriptions so far has reached the servers
    of ``publishers``: other cluster nodes learn of a subscription over their routes, after the
    subscriber's own flush. A probe subscription made after them travels the same route behind
    them, so once each publisher's probe comes back, the earlier ones are known there."""
    probe = f"_interest_probe.{uuid.uuid4().hex}"
    sub = subscriber.subscribe(probe)
    subscriber.flush(timeout=2.0)
    try:
        for nc in publishers:
            deadline = time.monotonic() + timeout
            while True:
                nc.publish(probe, b"?")
                try:
                    sub.next_msg(timeout=0.1)
                    break
                except TimeoutError:
                    if time.monotonic() > deadline:
                        raise AssertionError(f"interest never reached {nc.connected_url}") from None
    finally:
        sub.unsubscribe()


@pytest.fixture
def clients() -> Iterator[Callable[..., Client]]:
    made: list[Client] = []

    def make(url: str | list[str], **options: Any) -> Client:
        opts = {**FAST, **options}
        nc = jssync.connect(url, **opts)
        made.append(nc)
        return nc

    yield make
    for nc in made:
        nc.close(timeout=2.0)
