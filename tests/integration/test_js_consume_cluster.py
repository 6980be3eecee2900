"""consume against a 3-node loopback cluster (TESTPLAN 39, 41): an R3 durable consumer keeps
delivering while messages are published and its leader steps down again and again, or while
the node the client is connected to is frozen (SIGSTOP). Ledger: lost = acked - read = empty,
unexpected = read - attempted = empty, duplicates allowed (at-least-once)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from jscore import pull as P
from jscore.errors import NatsError
from jscore.models import StorageType
from jssync import Client
from jssync.server import NatsCluster
from tests.integration import EventLog, clients
from tests.integration._jspull import unique, wait_until
from tests.support.proxy import FaultProxy

__all__ = ["clients"]

EXPIRES = 2.0
HB = 0.5


class Ledger:
    """Attempted / acked by the publisher, read (with times) by the consumer."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.attempted: set[str] = set()
        self.acked: set[str] = set()
        self.read: list[tuple[float, str]] = []

    def read_ids(self) -> set[str]:
        with self.lock:
            return {i for _, i in self.read}

    def handler(self, msg: Any) -> None:
        msg.ack()
        with self.lock:
            self.read.append((time.monotonic(), msg.data.decode()))


def _publisher(nc: Client, subject: str, ledger: Ledger, n: int, rate: float, stop: threading.Event) -> None:
    js = nc.jetstream()
    for i in range(n):
        if stop.is_set():
            return
        mid = f"id-{i}"
        with ledger.lock:
            ledger.attempted.add(mid)
        deadline = time.monotonic() + 15.0
        while not stop.is_set():
            try:
                js.publish(subject, mid.encode(), msg_id=mid, timeout=2.0)
            except NatsError:
                if time.monotonic() > deadline:
                    break  # ambiguous: stays attempted, not acked
                time.sleep(0.1)
                continue
            with ledger.lock:
                ledger.acked.add(mid)
            break
        time.sleep(1.0 / rate)


def _setup(cluster: NatsCluster, clients: Callable[..., Client]) -> tuple[Client, Client, str, str]:
    nc = clients(cluster.urls)
    ctl = clients(cluster.urls)
    name = unique("CL")
    js = ctl.jetstream()
    for attempt in range(20):  # the meta leader may still be settling
        try:
            js.create_stream(name=name, subjects=[f"{name.lower()}.>"], storage=StorageType.FILE, num_replicas=3)
            js.create_consumer(name, durable_name="D", ack_wait=5.0, num_replicas=3)
            break
        except NatsError:
            if attempt == 19:
                raise
            time.sleep(0.25)
    return nc, ctl, name, f"{name.lower()}.a"


def _leader(ctl: Client, stream: str) -> str | None:
    try:
        info = ctl.jetstream().consumer_info(stream, "D", timeout=1.0)
    except NatsError:  # no answer while the consumer elects its leader
        return None
    return info.cluster.leader if info.cluster is not None else None


def _max_gap(times: list[float], start: float, end: float) -> float:
    ts = sorted(t for t in times if start <= t <= end)
    points = [start, *ts, end]
    return max(b - a for a, b in zip(points, points[1:]))


@pytest.mark.timeout(60)
def test_consume_survives_consumer_leader_stepdowns(
    nats_cluster: NatsCluster, clients: Callable[..., Client]
) -> None:
    """TESTPLAN 39: R3 durable consume while publishing; consumer leader step-down x5:
    zero lost, at-least-once, no delivery gap longer than expires + 2 x heartbeat (+ slack)."""
    nc, ctl, stream, subject = _setup(nats_cluster, clients)
    ledger = Ledger()
    log = EventLog()
    cc = nc.jetstream().consumer(stream, "D").consume(
        ledger.handler, max_messages=50, expires=EXPIRES, heartbeat=HB, on_event=log
    )
    stop = threading.Event()
    pub = threading.Thread(target=_publisher, args=(ctl, subject, ledger, 700, 100.0, stop))
    t_start = time.monotonic()
    pub.start()
    try:
        wait_until(lambda: len(ledger.read) >= 50, 10.0, what="the first deliveries")
        leaders = [_leader(ctl, stream)]
        for _ in range(5):
            reply = json.loads(ctl.request(f"$JS.API.CONSUMER.LEADER.STEPDOWN.{stream}.D", b"", timeout=5.0).data)
            assert reply.get("success"), reply
            new: list[str | None] = [None]

            def changed() -> bool:
                new[0] = _leader(ctl, stream)
                return new[0] not in (None, leaders[-1])

            wait_until(changed, 10.0, what="a new leader")
            leaders.append(new[0])
            n = len(ledger.read)
            wait_until(lambda: len(ledger.read) > n + 20, 10.0, what="deliveries after the step-down")
        pub.join(30.0)
        assert not pub.is_alive()
        t_pub_end = time.monotonic()
        with ledger.lock:
            acked = set(ledger.acked)
        wait_until(lambda: ledger.read_ids() >= acked, 15.0, what="every acked message read")
    finally:
        stop.set()
        pub.join(5.0)
        cc.stop()
    assert cc.wait(1.0)
    with ledger.lock:
        read = [i for _, i in ledger.read]
        times = [t for t, _ in ledger.read]
        attempted = set(ledger.attempted)
    assert len(leaders) == 6 and all(a != b for a, b in zip(leaders, leaders[1:])), leaders
    assert acked - set(read) == set(), "lost"
    assert set(read) - attempted == set(), "unexpected"
    assert len(acked) >= 650
    assert cc.error is None and not log.of(P.ConsumeTerminated)
    gap = _max_gap(times, t_start + 1.0, t_pub_end)
    assert gap <= EXPIRES + 2 * HB + 1.0, f"delivery stalled for {gap:.2f}s"


def _leader_index(cluster: NatsCluster, ctl: Client, stream: str) -> int:
    leader: list[str | None] = [None]

    def known() -> bool:
        leader[0] = _leader(ctl, stream)
        return leader[0] is not None

    wait_until(known, 10.0, what="the consumer leader")
    return next(i for i, s in enumerate(cluster.servers) if s.name == leader[0])


def _step_down(ctl: Client, stream: str) -> None:
    reply = json.loads(ctl.request(f"$JS.API.CONSUMER.LEADER.STEPDOWN.{stream}.D", b"", timeout=5.0).data)
    assert reply.get("success"), reply


def _first_after(ledger: Ledger, mid: str, timeout: float) -> float:
    """When ``mid`` was read (monotonic), waiting up to ``timeout``."""
    wait_until(lambda: mid in ledger.read_ids(), timeout, what=f"the delivery of {mid}")
    with ledger.lock:
        return next(t for t, i in ledger.read if i == mid)


@pytest.mark.timeout(60)
def test_consume_with_default_options_resumes_within_5s_of_a_leader_step_down(
    nats_cluster: NatsCluster, clients: Callable[..., Client]
) -> None:
    """R3 durable consume with the default options (expires 30 s, heartbeat 15 s), the client
    connected to the consumer leader's node; the leader steps down: the new leader's 409
    Leadership Change makes the consume pull again at once, so a message published after the
    step-down arrives within 5 s, not after the 2 x 15 s watchdog."""
    _, ctl, stream, subject = _setup(nats_cluster, clients)
    nc = clients(nats_cluster.servers[_leader_index(nats_cluster, ctl, stream)].url)
    ledger = Ledger()
    log = EventLog()
    cc = nc.jetstream().consumer(stream, "D").consume(ledger.handler, on_event=log)
    js = ctl.jetstream()
    try:
        js.publish(subject, b"before", timeout=5.0)
        _first_after(ledger, "before", 10.0)
        for round_ in range(3):
            old = _leader(ctl, stream)
            stepped = time.monotonic()
            _step_down(ctl, stream)
            wait_until(lambda: _leader(ctl, stream) not in (None, old), 10.0, what="a new leader")
            mid = f"after-{round_}"
            js.publish(subject, mid.encode(), timeout=5.0)
            took = _first_after(ledger, mid, 40.0) - stepped
            assert took < 5.0, f"round {round_}: the consume resumed {took:.2f} s after the step-down"
    finally:
        cc.stop()
    assert cc.wait(1.0)
    assert cc.error is None and not log.of(P.ConsumeTerminated)


@pytest.mark.timeout(60)
def test_a_step_down_the_pulls_are_not_told_of_is_recovered_in_one_heartbeat(
    nats_cluster: NatsCluster, clients: Callable[..., Client], fault_proxy: Callable[..., FaultProxy]
) -> None:
    """The same step-down, but the 409 Leadership Change never reaches the client (the proxy
    drops it, as when the new leader did not know of our pull): the server says nothing. A
    heartbeat late by one interval makes the client ask for the consumer's info; it exists, so
    the consume pulls again at once: recovered after about 1.25 x heartbeat of silence, before
    the 2 x heartbeat watchdog would report the heartbeats missed."""
    hb = 2.0
    _, ctl, stream, subject = _setup(nats_cluster, clients)
    proxy = fault_proxy(nats_cluster.servers[_leader_index(nats_cluster, ctl, stream)].url)
    told = proxy.drop_frames("down", lambda f: b"409 Leadership Change" in f)
    nc = clients(proxy.url)
    ledger = Ledger()
    log = EventLog()
    cc = nc.jetstream().consumer(stream, "D").consume(ledger.handler, expires=30.0, heartbeat=hb, on_event=log)
    js = ctl.jetstream()
    try:
        js.publish(subject, b"before", timeout=5.0)
        _first_after(ledger, "before", 10.0)
        old = _leader(ctl, stream)
        _step_down(ctl, stream)
        wait_until(lambda: _leader(ctl, stream) not in (None, old), 10.0, what="a new leader")
        js.publish(subject, b"after", timeout=5.0)
        _first_after(ledger, "after", 20.0)
    finally:
        cc.stop()
    assert cc.wait(1.0)
    assert told.matched >= 1, "the proxy saw no 409 Leadership Change to drop"
    # recovered by the check (one interval late), not by the 2 x heartbeat watchdog
    missed = log.of(P.HeartbeatMissed)
    assert not missed, [m.idle_for for m in missed]
    assert cc.error is None and not log.of(P.ConsumeTerminated)


@pytest.mark.timeout(60)
def test_consume_survives_frozen_node(nats_cluster: NatsCluster, clients: Callable[..., Client]) -> None:
    """TESTPLAN 41 (shortened): the node the consuming client is connected to is frozen
    (SIGSTOP) for 4 s: the client detects the stale link, moves to another node, the consume
    goes on; acks sent around the pause are applied or the messages redelivered: lost = {}."""
    nc, ctl, stream, subject = _setup(nats_cluster, clients)
    conn_log = EventLog()
    nc.close()
    nc = clients(nats_cluster.urls, on_event=conn_log)
    ledger = Ledger()
    log = EventLog()
    cc = nc.jetstream().consumer(stream, "D").consume(
        ledger.handler, max_messages=50, expires=EXPIRES, heartbeat=HB, on_event=log
    )
    frozen = next(i for i, s in enumerate(nats_cluster.servers) if s.url.rsplit(":", 1)[1] == nc.connected_url.rsplit(":", 1)[1])  # type: ignore[union-attr]
    others = [s.url for i, s in enumerate(nats_cluster.servers) if i != frozen]
    ctl.close()
    ctl = clients(others)
    stop = threading.Event()
    pub = threading.Thread(target=_publisher, args=(ctl, subject, ledger, 400, 80.0, stop))
    pub.start()
    try:
        wait_until(lambda: len(ledger.read) >= 30, 10.0, what="the first deliveries")
        t_pause = time.monotonic()
        nats_cluster.pause(frozen)
        try:
            conn_log.wait_for(object, 1, timeout=5.0, pred=lambda e: type(e).__name__ == "Reconnected")
            n = len(ledger.read)
            wait_until(lambda: len(ledger.read) > n + 20, 15.0, what="deliveries while the node is frozen")
            time.sleep(max(0.0, t_pause + 4.0 - time.monotonic()))  # frozen for 4 s in all
        finally:
            nats_cluster.resume(frozen)
        pub.join(30.0)
        assert not pub.is_alive()
        with ledger.lock:
            acked = set(ledger.acked)
        wait_until(lambda: ledger.read_ids() >= acked, 20.0, what="every acked message read")
    finally:
        stop.set()
        pub.join(5.0)
        cc.stop()
    assert cc.wait(1.0)
    with ledger.lock:
        read = {i for _, i in ledger.read}
        attempted = set(ledger.attempted)
    assert acked - read == set(), "lost"
    assert read - attempted == set(), "unexpected"
    assert cc.error is None and not log.of(P.ConsumeTerminated)
    assert nc.connected_url is not None and nc.connected_url.rsplit(":", 1)[1] != nats_cluster.servers[frozen].url.rsplit(":", 1)[1]


@pytest.mark.timeout(90)
def test_consume_resumes_after_two_of_three_nodes_restart(
    nats_cluster: NatsCluster, clients: Callable[..., Client]
) -> None:
    """TESTPLAN 40 (nats.go TestPullConsumerConsume_WithCluster): stop 2 of the 3 nodes (the
    cluster loses its quorum), start both again: the consume resumes on its own, lost = {}."""
    nc, ctl, stream, subject = _setup(nats_cluster, clients)
    ledger = Ledger()
    log = EventLog()
    cc = nc.jetstream().consumer(stream, "D").consume(
        ledger.handler, max_messages=50, expires=EXPIRES, heartbeat=HB, on_event=log
    )
    js = ctl.jetstream()
    for i in range(100):
        mid = f"id-{i}"
        ledger.attempted.add(mid)
        js.publish(subject, mid.encode(), msg_id=mid, timeout=5.0)
        ledger.acked.add(mid)
    wait_until(lambda: ledger.read_ids() >= ledger.acked, 15.0, what="the first 100")
    down = [1, 2]
    for i in down:
        nats_cluster.stop(i)
    time.sleep(1.0)
    for i in down:
        nats_cluster.restart(i, wait_healthy=False)
    nats_cluster.wait_healthy(60.0)
    # after the quorum is back, publish again (retrying while leaders are elected)
    for i in range(100, 200):
        mid = f"id-{i}"
        ledger.attempted.add(mid)
        deadline = time.monotonic() + 30.0
        while True:
            try:
                js.publish(subject, mid.encode(), msg_id=mid, timeout=2.0)
                ledger.acked.add(mid)
                break
            except NatsError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.25)
    try:
        wait_until(lambda: ledger.read_ids() >= ledger.acked, 30.0, what="every acked message read after the restart")
    finally:
        cc.stop()
    assert cc.wait(1.0)
    assert ledger.acked - ledger.read_ids() == set(), "lost"
    assert ledger.read_ids() - ledger.attempted == set(), "unexpected"
    assert cc.error is None and not log.of(P.ConsumeTerminated), log.of(P.ConsumeTerminated)
