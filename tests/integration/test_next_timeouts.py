"""The blocking ``next(timeout)`` of the iterators (a key-value watcher, a consumer's
``messages()``, an ordered consumer's ``messages()``): ``0`` polls; ``None``, a negative, NaN,
infinite or non-number timeout is an InvalidOptionError naming ``timeout`` (every blocking call
has a timeout), and the iterator goes on working after it (real server)."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import Any

import pytest

import jssync
from jscore.errors import InvalidOptionError, NoMessagesError
from jscore.validate import check_poll_timeout
from jssync.jetstream import JetStream

pytestmark = pytest.mark.timeout(60)

BAD = [None, -1, -0.5, math.nan, math.inf, "1", True, [1]]


@pytest.mark.parametrize("bad", BAD, ids=repr)
def test_check_poll_timeout_refuses(bad: Any) -> None:
    with pytest.raises(InvalidOptionError, match="^timeout must be "):
        check_poll_timeout(bad)


def test_check_poll_timeout_takes_zero_and_seconds() -> None:
    assert check_poll_timeout(0) == 0.0 and type(check_poll_timeout(0)) is float
    assert check_poll_timeout(2) == 2.0 and check_poll_timeout(0.25, "wait") == 0.25
    with pytest.raises(InvalidOptionError, match="^wait must be "):
        check_poll_timeout(None, "wait")


@pytest.fixture
def js(nats_url: str) -> Iterator[JetStream]:
    with jssync.connect(nats_url) as nc:
        js = nc.jetstream()
        js.create_stream(name="NEXT_TO", subjects=["next.to"], storage="memory")
        try:
            yield js
        finally:
            js.delete_stream("NEXT_TO")


def _check(next_: Any, *expected: Any) -> None:
    """Every bad timeout refused at once; then ``next(0)`` polls: the items that are there
    (``expected``: one check each), and then NoMessagesError without waiting."""
    for bad in BAD:
        with pytest.raises(InvalidOptionError, match="^timeout must be "):
            next_(bad)
    for check in expected:
        deadline = time.monotonic() + 10.0
        while True:  # (an item may still be on its way: poll until it is there)
            try:
                item = next_(0)
                break
            except NoMessagesError:
                assert time.monotonic() < deadline, "the item never came"
                time.sleep(0.05)
        assert check(item)
    start = time.monotonic()
    with pytest.raises(NoMessagesError):
        next_(0)
    assert time.monotonic() - start < 5.0  # (not a speed check: it did not block for a default timeout)


def test_key_value_watcher_next(js: JetStream) -> None:
    kv = js.create_key_value("NEXT_TO_KV")
    try:
        kv.put("k", b"v")
        with kv.watch() as w:
            _check(w.next, lambda e: e is not None and e.key == "k", lambda e: e is None)
            kv.put("k", b"w")
            entry = w.next(5.0)  # the watcher still works
            assert entry is not None and entry.value == b"w"
    finally:
        js.delete_key_value("NEXT_TO_KV")


def test_consumer_messages_next(js: JetStream) -> None:
    js.publish("next.to", b"1")
    c = js.create_consumer("NEXT_TO", durable_name="nt")
    with c.messages(expires=2.0) as stream:
        _check(stream.next, lambda m: m.data == b"1")
        js.publish("next.to", b"2")
        assert stream.next(5.0).data == b"2"


def test_ordered_messages_next(js: JetStream) -> None:
    js.publish("next.to", b"1")
    oc = js.ordered_consumer("NEXT_TO")
    with oc.messages(expires=2.0) as stream:
        _check(stream.next, lambda m: m.data == b"1")
        js.publish("next.to", b"2")
        assert stream.next(5.0).data == b"2"
