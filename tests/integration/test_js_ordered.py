"""The ordered consumer against a real nats-server (TESTPLAN scenarios 46-49, fetch reuse)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from jssync import Client
from jscore.ordered import OrderedConsumerReset, ResetReason
from jssync.errors import InvalidOptionError, NoMessagesError, OrderedConsumerResetError, StreamNotFoundError
from jssync.server import NatsServer
from tests.integration import clients, wait_until
from tests.support.proxy import FaultProxy

__all__ = ["clients"]

pytestmark = pytest.mark.timeout(60)


def _fill(nc: Client, stream: str, subject: str, n: int, start: int = 0) -> None:
    js = nc.jetstream()
    for i in range(start, start + n):
        js.publish_async(subject, b"%d" % i)
    js.publish_async_complete(timeout=20)


def _stream(nc: Client, name: str, subjects: list[str]) -> None:
    nc.jetstream().create_stream(name=name, subjects=subjects, storage="memory")


def test_fetch_reuses_the_server_consumer_while_contiguous(
    nats_server: NatsServer, clients: Callable[..., Client]
) -> None:
    nc = clients(nats_server.url)
    _stream(nc, "OF", ["of.>"])
    _fill(nc, "OF", "of.a", 250)
    js = nc.jetstream()
    oc = js.ordered_consumer("OF")
    seen: list[int] = []
    for _ in range(3):
        seen += [int(m.data) for m in oc.fetch(100, expires=1.0)]
    assert seen == list(range(250))
    # one server consumer served every fetch (the reference clients create one per fetch)
    assert oc.state.serial == 1
    assert list(js.stream("OF").consumer_names()) == [oc.name]
    with pytest.raises(NoMessagesError):
        oc.next(timeout=0.5)
    _fill(nc, "OF", "of.a", 1, start=250)
    assert int(oc.next(timeout=2.0).data) == 250


def test_deleted_consumer_is_recreated_after_the_last_sequence(
    nats_server: NatsServer, clients: Callable[..., Client]
) -> None:
    """Scenario 46: delete the underlying consumer mid-consume: no gap, no duplicate."""
    nc = clients(nats_server.url)
    _stream(nc, "OD", ["od.>"])
    _fill(nc, "OD", "od.x", 200)
    js = nc.jetstream()
    oc = js.ordered_consumer("OD")
    got: list[int] = []
    with oc.messages(max_messages=20, expires=2.0, heartbeat=0.5) as stream:
        for msg in stream:
            got.append(int(msg.data))
            if len(got) == 60:
                first = oc.name
                js.delete_consumer("OD", first)
                _fill(nc, "OD", "od.x", 100, start=200)
            if len(got) == 300:
                break
        notes = stream.notifications()
    assert got == list(range(300)), "gap or duplicate across the recreation"
    assert oc.state.serial >= 2 and oc.name != first
    assert oc.state.last_reason is not None
    resets = [n for n in notes if isinstance(n, OrderedConsumerReset)]
    # (409 Consumer Deleted to a waiting pull, or 503 to the next one, or heartbeats missed)
    assert resets and resets[0].reason in (
        ResetReason.CONSUMER_DELETED, ResetReason.NO_RESPONDERS, ResetReason.HEARTBEAT_MISSED
    )
    # a stopped stream deleted its server consumer; the ordered consumer goes on from its cursor
    wait_until(lambda: oc.name not in list(js.stream("OD").consumer_names()), 5, what="consumer deleted")
    _fill(nc, "OD", "od.x", 1, start=300)
    assert int(oc.next(timeout=2.0).data) == 300


def test_dropped_frame_is_detected_as_a_gap_and_healed(
    nats_server: NatsServer, clients: Callable[..., Client], fault_proxy: Callable[..., FaultProxy]
) -> None:
    """Scenario 47: the proxy drops one delivered message; the consumer-sequence gap resets
    the consumer and the sequence the user sees stays complete and strictly increasing."""
    proxy = fault_proxy(nats_server)
    setup = clients(nats_server.url)
    _stream(setup, "OG", ["og.>"])
    _fill(setup, "OG", "og.x", 120)
    nc = clients(proxy.url)
    rule = proxy.drop_frames("down", lambda f: f.startswith(b"MSG og.x ") and b" $JS.ACK." in f and b".50." in f, count=1)
    oc = nc.jetstream().ordered_consumer("OG")
    got: list[int] = []
    with oc.messages(max_messages=10, expires=2.0, heartbeat=0.5) as stream:
        for msg in stream:
            got.append(int(msg.data))
            if len(got) == 120:
                break
    assert rule.matched == 1, "the proxy did not drop a delivery"
    assert got == list(range(120))
    assert oc.state.resets >= 1 and str(oc.state.last_reason) == "gap"


def test_slow_handler_with_a_small_buffer_loses_nothing(
    nats_server: NatsServer, clients: Callable[..., Client]
) -> None:
    """Scenario 48: a handler that stalls while the buffer is full: backpressure, no drop."""
    nc = clients(nats_server.url)
    _stream(nc, "OB", ["ob.>"])
    _fill(nc, "OB", "ob.x", 300)
    oc = nc.jetstream().ordered_consumer("OB")
    got: list[int] = []
    release = threading.Event()
    done = threading.Event()

    def handler(msg: object) -> None:
        if len(got) == 5:
            release.wait(3.0)  # stall with a full buffer
        got.append(int(msg.data))  # type: ignore[attr-defined]
        if len(got) == 300:
            done.set()

    with oc.consume(handler, max_messages=10, expires=2.0, heartbeat=0.5) as cc:
        time.sleep(1.5)
        # while stalled the client holds at most max_messages: the server still owes the rest
        info = nc.jetstream().consumer("OB", oc.name).info()
        assert info.num_pending >= 300 - 5 - 10 - 1
        release.set()
        assert done.wait(20), f"only {len(got)} delivered"
        assert not cc.closed
    assert got == list(range(300))


def test_deleted_stream_ends_it_without_a_reset_storm(
    nats_server: NatsServer, clients: Callable[..., Client]
) -> None:
    """Scenario 49: the stream goes away: a terminal StreamNotFoundError, few create attempts."""
    nc = clients(nats_server.url)
    _stream(nc, "OS", ["os.>"])
    _fill(nc, "OS", "os.x", 10)
    js = nc.jetstream()
    oc = js.ordered_consumer("OS")
    events: list[object] = []
    with oc.messages(max_messages=5, expires=1.0, heartbeat=0.5, on_event=events.append) as stream:
        assert [int(stream.next(timeout=2.0).data) for _ in range(10)] == list(range(10))
        js.delete_stream("OS")
        started = time.monotonic()
        with pytest.raises(StreamNotFoundError):
            while True:
                stream.next(timeout=5.0)
        assert time.monotonic() - started < 5.0
    assert oc.state.terminated and isinstance(oc.state.error, StreamNotFoundError)
    assert oc.state.resets <= 3, f"reset storm: {oc.state.resets} resets"
    with pytest.raises(StreamNotFoundError):
        oc.fetch(1, expires=0.5)


def test_one_operation_at_a_time_and_ordered_options(
    nats_server: NatsServer, clients: Callable[..., Client]
) -> None:
    nc = clients(nats_server.url)
    _stream(nc, "OO", ["oo.a", "oo.b"])
    js = nc.jetstream()
    for i in range(6):
        js.publish("oo.a" if i % 2 else "oo.b", b"%d" % i)
    oc = js.ordered_consumer("OO", filter_subjects=["oo.a"])
    stream = oc.messages(expires=1.0)
    with pytest.raises(InvalidOptionError):
        oc.fetch(1, expires=0.5)
    assert [int(stream.next(timeout=2).data) for _ in range(3)] == [1, 3, 5]
    stream.stop()
    # after stop the consumer is free again, and the cursor continues
    js.publish("oo.a", b"7")
    late = js.ordered_consumer("OO", deliver_policy="last")
    assert int(late.next(timeout=2).data) == 7
    by_seq = js.ordered_consumer("OO", opt_start_seq=5)
    assert [int(m.data) for m in by_seq.fetch(10, expires=0.5)] == [4, 5, 7]
    with pytest.raises(InvalidOptionError):
        js.ordered_consumer("OO", opt_start_seq=0)
    with pytest.raises(InvalidOptionError):
        oc.messages(max_messages=10, max_bytes=1000)
    assert issubclass(OrderedConsumerResetError, Exception)


def test_ordered_consume_survives_a_server_restart(
    nats_server_factory: Callable[..., NatsServer], clients: Callable[..., Client]
) -> None:
    """A reconnect resets the ordered consumer; with a file stream nothing is lost or repeated."""
    srv = nats_server_factory()
    nc = clients(srv.url)
    nc.jetstream().create_stream(name="OR", subjects=["or.>"])
    _fill(nc, "OR", "or.x", 100)
    oc = nc.jetstream().ordered_consumer("OR")
    got: list[int] = []
    with oc.messages(max_messages=20, expires=2.0, heartbeat=0.5) as stream:
        for msg in stream:
            got.append(int(msg.data))
            if len(got) == 50:
                srv.restart()
                wait_until(lambda: nc.is_connected, 15, what="reconnect")
                _fill(nc, "OR", "or.x", 50, start=100)
            if len(got) == 150:
                break
    assert got == list(range(150))
    assert oc.state.resets >= 1


def test_no_call_overshoots_its_timeout_during_a_backoff(
    nats_server_factory: Callable[..., NatsServer], clients: Callable[..., Client]
) -> None:
    """Without JetStream every create fails (no responders), so the ordered consumer backs off
    1, 2, 4, 8 s. A ``next(timeout=1)`` returns by its own deadline (expires + 0.25 s grace)
    whatever the backoff, and so does a ``messages().next(timeout=1)``."""
    srv = nats_server_factory(jetstream=False)
    nc = clients(srv.url)
    oc = nc.jetstream(timeout=2.0).ordered_consumer("NOJS")
    for i in range(6):
        started = time.monotonic()
        with pytest.raises(NoMessagesError):
            oc.next(timeout=1.0)
        took = time.monotonic() - started
        assert took < 1.6, f"next(timeout=1) number {i} took {took:.2f} s"
    assert oc.state.strikes >= 3 and str(oc.state.state) == "backoff"
    with oc.messages(expires=2.0) as stream:
        started = time.monotonic()
        with pytest.raises(NoMessagesError):
            stream.next(timeout=1.0)
        assert time.monotonic() - started < 1.3
    started = time.monotonic()
    with pytest.raises(NoMessagesError):  # (a no_wait fetch: the client's 5 s at most)
        oc.fetch(10, no_wait=True, expires=None)
    assert time.monotonic() - started < 5.6


@pytest.mark.timeout(60)
def test_ordered_consume_resumes_promptly_after_a_kill_and_restart(
    nats_server_factory: Callable[..., NatsServer], clients: Callable[..., Client]
) -> None:
    """SIGKILL and restart of the server (same port, same file store) under an ordered consume
    with its default options: after the reconnect the next server consumer is created at once
    and retried quickly while JetStream is not ready again, so the first message published
    after the restart arrives within 5 s of the restart (about as soon as a durable consume
    resumes), every message exactly once and in order."""
    srv = nats_server_factory()
    nc = clients(srv.url)
    nc.jetstream().create_stream(name="OK9", subjects=["ok9.>"], storage="file")
    _fill(nc, "OK9", "ok9.x", 100)
    oc = nc.jetstream().ordered_consumer("OK9")
    got: list[int] = []
    arrived: dict[int, float] = {}
    lock = threading.Lock()

    def handler(msg: Any) -> None:
        with lock:
            got.append(int(msg.data))
            arrived.setdefault(int(msg.data), time.monotonic())

    cc = oc.consume(handler)
    try:
        wait_until(lambda: len(got) >= 100, 10, what="the first 100 messages")
        srv.kill()
        restarted = time.monotonic()
        srv.start()
        wait_until(lambda: nc.is_connected, 10, what="the reconnect")
        publisher = clients(srv.url)
        _fill(publisher, "OK9", "ok9.x", 50, start=100)
        wait_until(lambda: len(got) >= 150, 20, what="the messages published after the restart")
    finally:
        cc.stop()
    with lock:
        assert got == list(range(150)), "gap, duplicate or reorder across the restart"
        resumed = arrived[100] - restarted
    assert resumed < 5.0, f"the first message after the restart came {resumed:.2f} s after it"
    assert oc.state.resets >= 1 and cc.error is None
