"""Reconnect behaviour against real servers, with the fault proxy in front where the plan says [P].

TESTPLAN scenarios 1 (reset mid-payload), 2 (black-hole stall), 3 (reconnect buffer), 5 (SIGKILL
and restart on the same port and store dir), plus replay of several kinds of subscriptions.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from jscore.errors import (
    ConnectionClosedError,
    NoServersError,
    ReconnectBufferExceededError,
    StaleConnectionError,
    TimeoutError,
)
from jssync import Client
from jssync.events import (
    Closed,
    ConnectAttemptFailed,
    Disconnected,
    LameDuck,
    PublishesDropped,
    Reconnected,
    ServerError,
)
from jssync.server import NatsServer
from tests.integration import FAST, EventLog, assert_no_more, clients, collect, wait_until
from tests.support.proxy import FaultProxy, split_frames

__all__ = ["clients"]

pytestmark = pytest.mark.timeout(60)

ProxyFactory = Callable[..., FaultProxy]


def _frames_after_last_connect(proxy: FaultProxy) -> list[bytes]:
    frames = split_frames(proxy.captured("up"))
    last = max(i for i, f in enumerate(frames) if f.startswith(b"CONNECT "))
    return frames[last + 1 :]


# --------------------------------------------------------------------------- scenario 1


def test_reset_mid_msg_payload_discards_the_partial_message(
    nats_server: NatsServer, fault_proxy: ProxyFactory, clients: Callable[..., Client]
) -> None:
    proxy = fault_proxy(nats_server)
    events = EventLog()
    nc = clients(proxy.url, on_event=events)
    pub = clients(nats_server.url)
    big = bytes(range(256)) * 1024  # 256 KiB with a recognisable pattern
    sub_big = nc.subscribe("s1.big")
    sub_after = nc.subscribe("s1.after")
    nc.flush(timeout=2)

    # The proxy forwards only the first half of the big MSG frame: the client has read the
    # control line and part of the payload when the connection is reset.
    def truncate(frame: bytes) -> bytes | None:
        return frame[: len(frame) // 2] if frame.startswith(b"MSG s1.big ") else None

    rule = proxy.rewrite_frames("down", truncate)
    pub.publish("s1.big", big)
    pub.flush(timeout=2)
    assert rule.wait(1, timeout=5)
    wait_until(lambda: nc._conn._parser.buffered > 1000, 5.0, what="the client to hold a partial MSG")
    proxy.refuse(True)  # keep the client disconnected for a moment: publishes get buffered
    t_reset = time.monotonic()
    proxy.reset()
    rule.remove()
    events.wait_for(Disconnected, timeout=2)
    assert not nc.is_connected
    for i in range(5):
        nc.publish("s1.after", b"%d" % i)
    time.sleep(0.2)
    proxy.refuse(False)
    (rec,) = events.wait_for(Reconnected, timeout=3)
    assert events.time_of(rec) - t_reset <= 1.0, "reconnect took more than 1 s"

    # after the reconnect: the SUBs were replayed before the buffered PUBs
    nc.flush(timeout=2)
    after = _frames_after_last_connect(proxy)
    kinds = [f.split(b" ", 1)[0] for f in after]
    assert kinds.count(b"SUB") == 2
    assert kinds.count(b"PUB") == 5
    assert max(i for i, k in enumerate(kinds) if k == b"SUB") < min(i for i, k in enumerate(kinds) if k == b"PUB")
    assert {f.split()[1] for f in after if f.startswith(b"SUB ")} == {b"s1.big", b"s1.after"}

    assert [m.data for m in collect(sub_after, 5)] == [b"%d" % i for i in range(5)]
    assert_no_more(sub_big, 0.2)  # the truncated message is gone, nothing partial was delivered
    assert not events.of(ServerError), events.of(ServerError)  # no protocol error: a fresh parser
    # the fresh connection parses a whole big message again
    pub.publish("s1.big", big)
    assert collect(sub_big, 1)[0].data == big
    assert nc.stats["reconnects"] == 1


# --------------------------------------------------------------------------- scenario 2


def test_stall_both_directions_is_detected_as_stale(
    nats_server: NatsServer, fault_proxy: ProxyFactory, clients: Callable[..., Client]
) -> None:
    proxy = fault_proxy(nats_server)
    events = EventLog()
    nc = clients(proxy.url, on_event=events)
    responder = clients(nats_server.url)
    responder.subscribe("s2.svc", callback=lambda m: m.respond(b"ok"))
    responder.flush(timeout=2)
    assert nc.request("s2.svc", b"x", timeout=2).data == b"ok"

    outcomes: dict[float, tuple[BaseException | None, float]] = {}

    def do_request(timeout: float) -> None:
        t0 = time.monotonic()
        try:
            nc.request("s2.svc", b"x", timeout=timeout)
            err: BaseException | None = None
        except BaseException as exc:  # noqa: BLE001 - recorded and asserted below
            err = exc
        outcomes[timeout] = (err, time.monotonic() - t0)

    proxy.stall("both")
    t_stall = time.monotonic()
    threads = [threading.Thread(target=do_request, args=(t,)) for t in (1.0, 2.5)]
    for t in threads:
        t.start()
    (disc,) = events.wait_for(Disconnected, timeout=4)
    detected = events.time_of(disc) - t_stall
    limit = FAST["ping_interval"] * (FAST["max_pings_out"] + 1) + 0.5
    assert 0.9 <= detected <= limit, f"stale detected after {detected:.2f}s (limit {limit}s)"
    assert isinstance(disc.error, StaleConnectionError)
    for t in threads:
        t.join(5)
        assert not t.is_alive()
    for timeout, (err, took) in outcomes.items():
        # each in-flight request fails by its own deadline with a typed timeout
        assert isinstance(err, TimeoutError), (timeout, err)
        assert timeout - 0.05 <= took <= timeout + 0.5, (timeout, took)

    proxy.clear()
    events.wait_for(Reconnected, timeout=FAST["connect_timeout"] + 2)
    assert nc.request("s2.svc", b"x", timeout=2).data == b"ok"


# --------------------------------------------------------------------------- scenario 3


def test_stall_then_publish_until_the_reconnect_buffer_is_full(
    nats_server: NatsServer, fault_proxy: ProxyFactory, clients: Callable[..., Client]
) -> None:
    proxy = fault_proxy(nats_server)
    events = EventLog()
    limit = 64 * 1024
    nc = clients(proxy.url, on_event=events, reconnect_buffer_size=limit)
    watcher = clients(nats_server.url)
    sub = watcher.subscribe("s3")
    watcher.flush(timeout=2)

    proxy.stall("down")  # PONGs never come back: the client declares the link stale
    filler = b"." * 1000
    published: list[int] = []
    buffered: list[int] = []  # published while the client was known to be disconnected
    slowest = 0.0
    deadline = time.monotonic() + 10
    i = 0
    while True:
        assert time.monotonic() < deadline, "the reconnect buffer never filled"
        offline = not nc.is_connected
        t0 = time.monotonic()
        try:
            nc.publish("s3", b"%06d" % i + filler)
        except ReconnectBufferExceededError:
            slowest = max(slowest, time.monotonic() - t0)
            break
        slowest = max(slowest, time.monotonic() - t0)
        published.append(i)
        if offline:
            buffered.append(i)
        else:
            time.sleep(0.002)
        i += 1
    events.wait_for(Disconnected, timeout=1)  # (delivered by the events thread, maybe later)
    assert len(buffered) >= limit // 1100
    pending = nc._conn._pending_size
    assert 0 < pending <= limit  # memory bounded by reconnect_buffer_size
    with pytest.raises(ReconnectBufferExceededError):  # still full, nothing queued
        nc.publish("s3", b"%06d" % i + filler)
    assert nc._conn._pending_size == pending
    nc.publish("s3", b"")  # ... but a message that fits is still accepted
    assert slowest < 0.5, f"a publish blocked for {slowest:.2f}s"

    proxy.clear()
    events.wait_for(Reconnected, timeout=FAST["connect_timeout"] + 2)
    nc.flush(timeout=2)
    received: list[int] = []
    while True:
        try:
            m = sub.next_msg(timeout=0.5)
        except TimeoutError:
            break
        if m.data:
            received.append(int(m.data[:6]))
    assert received == sorted(set(received)), "duplicates or reordering"
    assert set(received) <= set(published)
    missing = set(buffered) - set(received)
    assert not missing, f"{len(missing)} buffered messages lost"
    assert not events.of(PublishesDropped)


# --------------------------------------------------------------------------- scenario 5 + replay


def test_sigkill_and_restart_replays_every_subscription(
    nats_server: NatsServer, clients: Callable[..., Client]
) -> None:
    events = EventLog()
    nc = clients(nats_server.url, on_event=events, max_reconnect_attempts=-1)
    plain = nc.subscribe("k.plain")
    wild = nc.subscribe("k.wild.*")
    q1 = nc.subscribe("k.q", queue="grp")
    q2 = nc.subscribe("k.q", queue="grp")
    auto = nc.subscribe("k.auto")
    auto.unsubscribe(max_msgs=5)
    cb_got: list[bytes] = []
    nc.subscribe("k.cb", callback=lambda m: cb_got.append(m.data))
    gone = nc.subscribe("k.gone")
    gone.unsubscribe()
    nc.flush(timeout=2)
    with clients(nats_server.url) as pub:
        pub.publish("k.auto", b"a0")
        pub.publish("k.auto", b"a1")
        pub.flush(timeout=2)
    assert [m.data for m in collect(auto, 2)] == [b"a0", b"a1"]

    nats_server.kill()
    events.wait_for(Disconnected, timeout=2)
    events.wait_for(ConnectAttemptFailed, n=2, timeout=3)  # refused while the server is down
    nats_server.start()  # same port, same store dir
    events.wait_for(Reconnected, timeout=5)
    nc.flush(timeout=2)  # the replayed SUBs are processed by the server
    assert events.index(Disconnected) < events.index(Reconnected)
    assert nc.stats["reconnects"] == 1

    pub = clients(nats_server.url)
    for i in range(10):
        pub.publish("k.plain", b"p%d" % i)
        pub.publish("k.wild.%d" % i, b"w%d" % i)
        pub.publish("k.auto", b"a%d" % (i + 2))
        pub.publish("k.cb", b"c%d" % i)
        pub.publish("k.gone", b"g")
    for i in range(100):
        pub.publish("k.q", b"%d" % i)
    pub.flush(timeout=2)

    assert [m.data for m in collect(plain, 10)] == [b"p%d" % i for i in range(10)]
    assert [(m.subject, m.data) for m in collect(wild, 10)] == [("k.wild.%d" % i, b"w%d" % i) for i in range(10)]
    # auto-unsubscribe replayed with the remaining count: 5 - 2 = 3 more
    assert [m.data for m in collect(auto, 3)] == [b"a2", b"a3", b"a4"]
    with pytest.raises(ConnectionClosedError):
        auto.next_msg(timeout=0.5)
    wait_until(lambda: len(cb_got) == 10, 3.0, what="callback subscription replayed")
    assert cb_got == [b"c%d" % i for i in range(10)]
    wait_until(lambda: q1.pending_msgs + q2.pending_msgs == 100, 3.0, what="queue group replayed")
    time.sleep(0.1)
    assert q1.pending_msgs + q2.pending_msgs == 100  # still one delivery per message in the group
    with pytest.raises(ConnectionClosedError):
        gone.next_msg(timeout=0.2)  # ended before the restart, not resubscribed
    connz: Any = nats_server.monitor_json("connz?subs=1")
    subjects = sorted(
        s for c in connz["connections"] for s in c.get("subscriptions_list", []) if s.startswith("k.")
    )
    assert "k.gone" not in subjects and "k.auto" not in subjects


def test_flush_pending_across_a_disconnect_completes_after_reconnect(
    nats_server: NatsServer, fault_proxy: ProxyFactory, clients: Callable[..., Client]
) -> None:
    proxy = fault_proxy(nats_server)
    events = EventLog()
    nc = clients(proxy.url, on_event=events)
    sub = nc.subscribe("fl")
    proxy.refuse(True)
    proxy.cut()  # FIN, not RST
    events.wait_for(Disconnected, timeout=2)
    nc.publish("fl", b"while-down")
    result: list[BaseException | None] = []

    def flusher() -> None:
        try:
            nc.flush(timeout=3)
            result.append(None)
        except BaseException as exc:  # noqa: BLE001
            result.append(exc)

    t = threading.Thread(target=flusher)
    t.start()
    time.sleep(0.3)
    assert not result, "flush returned while disconnected"
    proxy.refuse(False)
    t.join(4)
    assert result == [None]
    assert collect(sub, 1)[0].data == b"while-down"
    events.wait_for(Reconnected, timeout=2)
    assert len(events.of(Reconnected)) == 1


def test_reconnect_gives_up_after_max_attempts(
    nats_server: NatsServer, clients: Callable[..., Client]
) -> None:
    events = EventLog()
    nc = clients(nats_server.url, on_event=events, max_reconnect_attempts=3)
    nats_server.kill()
    wait_until(lambda: nc.is_closed, 5.0, what="the client to give up")
    events.wait_for(Closed, timeout=2)  # events arrive in order: every attempt is recorded
    assert len(events.of(ConnectAttemptFailed)) == 3
    with pytest.raises(ConnectionClosedError):
        nc.publish("x", b"y")
    assert nc.last_error is not None



def test_request_issued_while_disconnected_completes_after_reconnect(
    nats_server: NatsServer, fault_proxy: ProxyFactory, clients: Callable[..., Client]
) -> None:
    proxy = fault_proxy(nats_server)
    events = EventLog()
    nc = clients(proxy.url, on_event=events)
    proxy.refuse(True)
    proxy.cut()
    events.wait_for(Disconnected, timeout=2)
    result: list[object] = []

    def do_request() -> None:
        try:
            result.append(nc.request("wd.svc", b"q", timeout=4).data)
        except BaseException as exc:  # noqa: BLE001
            result.append(exc)

    t = threading.Thread(target=do_request)
    t.start()
    responder = clients(nats_server.url)
    responder.subscribe("wd.svc", callback=lambda m: m.respond(b"answered:" + m.data))
    responder.flush(timeout=2)
    time.sleep(0.2)
    proxy.refuse(False)
    t.join(5)
    assert result == [b"answered:q"]
    frames = _frames_after_last_connect(proxy)
    kinds = [f.split(b" ", 1)[0] for f in frames]
    assert kinds.index(b"SUB") < kinds.index(b"PUB")  # the mux SUB precedes the buffered request


def test_pool_skips_a_dead_server_at_connect(nats_server: NatsServer, clients: Callable[..., Client]) -> None:
    from jssync.server import free_port

    dead = f"nats://127.0.0.1:{free_port()}"
    events = EventLog()
    nc = clients([dead, nats_server.url], on_event=events)
    assert nc.connected_url == nats_server.url
    (failed,) = events.wait_for(ConnectAttemptFailed)
    assert failed.url == dead
    t0 = time.monotonic()
    with pytest.raises(NoServersError):
        clients([dead, f"nats://127.0.0.1:{free_port()}"])
    assert time.monotonic() - t0 < 1.0


def test_reconnect_off_closes_on_the_first_loss(nats_server: NatsServer, clients: Callable[..., Client]) -> None:
    events = EventLog()
    nc = clients(nats_server.url, on_event=events, reconnect=False)
    sub = nc.subscribe("ro")
    nats_server.kill()
    (closed,) = events.wait_for(Closed, timeout=3)
    assert closed.error is not None
    assert nc.is_closed
    with pytest.raises(ConnectionClosedError):
        sub.next_msg(timeout=1)
    nats_server.start()
    time.sleep(0.3)
    assert nc.is_closed and not events.of(Reconnected)


def test_real_server_lame_duck_is_reported_once_then_failover(
    nats_server_factory: Callable[..., NatsServer], clients: Callable[..., Client]
) -> None:
    ldm = nats_server_factory(jetstream=False, config="lame_duck_duration: 30s\nlame_duck_grace_period: 10s")
    spare = nats_server_factory(jetstream=False)
    events = EventLog()
    nc = clients([ldm.url, spare.url], on_event=events)
    sub = nc.subscribe("ldm.x")
    assert nc.connected_url == ldm.url
    t0 = time.monotonic()
    ldm.lame_duck()  # SIGUSR2: INFO {"ldm":true} at once, clients closed after the grace period
    (ev,) = events.wait_for(LameDuck, timeout=2)
    assert ev.url == ldm.url and events.time_of(ev) - t0 < 1.0
    nc.flush(timeout=2)
    assert nc.is_connected and len(events.of(LameDuck)) == 1
    ldm.kill()  # do not wait 10 s for the server to close us
    (rec,) = events.wait_for(Reconnected, timeout=3)
    assert rec.url == spare.url
    nc.flush(timeout=2)  # the replayed SUB is in place before the other client publishes
    other = clients(spare.url)
    other.publish("ldm.x", b"moved")
    assert collect(sub, 1)[0].data == b"moved"
    assert len(events.of(LameDuck)) == 1
