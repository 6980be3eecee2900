"""js.publish_async against a real nats-server: futures, the bounded window, ack deadlines,
retries, callbacks, and what a lost connection or a server restart does to publishes in flight
(re-sent when they carry a msg id, failed as ambiguous when not; never silently lost)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

import pytest

import jssync
from jscore.errors import (
    ConnectionClosedError,
    DuplicateMsgIdInProcessError,
    InvalidOptionError,
    JetStreamUnavailableError,
    MaxPayloadError,
    NoStreamResponseError,
    PubAckTimeoutError,
    TimeoutError,
    TooManyStalledMsgsError,
    WrongLastSequenceError,
)
from jscore.publish import ACKED, DUPLICATE, FAILED
from jssync.client import Client, shell_of
from jssync.publish import PubAckFuture
from jssync.server import NatsCluster, NatsServer
from tests.integration._jspub import (
    api,
    create_stream,
    delete_stream,
    is_pub_ack_frame,
    stored,
    stream_state,
    unique,
    wait_until,
)
from tests.support.proxy import FaultProxy

SECOND = 1_000_000_000


@pytest.fixture
def nc(nats_url: str) -> Iterator[Client]:
    client = jssync.connect(nats_url, name="test-js-publish-async")
    yield client
    client.close()


@pytest.fixture
def stream(nc: Client) -> Iterator[str]:
    name = unique("ASYNC")
    create_stream(nc, name, subjects=[f"{name.lower()}.>"], duplicate_window=120 * SECOND)
    yield name
    delete_stream(nc, name)


def subj(stream: str, tail: str = "a") -> str:
    return f"{stream.lower()}.{tail}"


@pytest.fixture
def proxied(nats_server: NatsServer, fault_proxy: Callable[..., FaultProxy]) -> Iterator[tuple[Client, FaultProxy, str]]:
    """A client connected through a fault proxy, and a stream with a 2 min duplicate window."""
    proxy = fault_proxy(nats_server)
    client = jssync.connect(proxy.url, name="test-js-async-proxied", reconnect_wait=0.1, reconnect_jitter=0.0)
    name = unique("PROX")
    create_stream(client, name, subjects=[f"{name.lower()}.>"], duplicate_window=120 * SECOND)
    yield client, proxy, name
    client.close()


# =============================================================================== futures


def test_futures_resolve_to_pub_acks_in_order(nc: Client, stream: str) -> None:
    js = nc.jetstream()
    futs = [js.publish_async(subj(stream), f"m{i}".encode()) for i in range(500)]
    js.publish_async_complete(timeout=10)
    assert js.publish_async_pending == 0
    seqs = [f.result(timeout=0).seq for f in futs]
    assert seqs == list(range(1, 501))
    f = futs[0]
    assert f.done() and f.exception() is None and f.outcome is ACKED and f.subject == subj(stream) and f.payload == b"m0"
    assert stream_state(nc, stream)["messages"] == 500


def test_the_servers_pubacks_are_read_in_the_ack_lane(nc: Client, stream: str) -> None:
    """nats-server's PubAcks (stored, duplicate, to async and sync publishes) have the form
    the connection's ack lane reads in one match; an error answer goes the general way."""
    js = nc.jetstream()
    lane = shell_of(nc).session.conn._lane
    before = lane.read
    futs = [js.publish_async(subj(stream), b"x", msg_id=f"m{i % 150}") for i in range(200)]
    js.publish_async_complete(timeout=10)
    assert [f.result(timeout=0).duplicate for f in futs] == [False] * 150 + [True] * 50
    assert js.publish(subj(stream), b"y").seq == 151
    with pytest.raises(WrongLastSequenceError):
        js.publish_async(subj(stream), b"z", expected_last_seq=5).result(timeout=5)
    assert lane.read - before == 201


def test_typed_error_through_the_future(nc: Client, stream: str) -> None:
    js = nc.jetstream()
    js.publish(subj(stream), b"1")
    fut = js.publish_async(subj(stream), b"stale", expected_last_seq=5)
    with pytest.raises(WrongLastSequenceError) as ei:
        fut.result(timeout=5)
    assert ei.value.err_code == 10071
    assert isinstance(fut.exception(), WrongLastSequenceError) and fut.ack is None
    assert js._pub().stats.retried == 0


def test_async_dedup(nc: Client, stream: str) -> None:
    js = nc.jetstream()
    a = js.publish_async(subj(stream), b"x", msg_id="dup")
    b = js.publish_async(subj(stream), b"x", msg_id="dup")
    assert not a.result(timeout=5).duplicate
    assert b.result(timeout=5).duplicate and b.result().seq == a.result().seq and b.outcome is DUPLICATE
    assert stream_state(nc, stream)["messages"] == 1


def test_msg_id_only_frame_is_the_encoded_header_block(nc: Client, stream: str) -> None:
    """The msg-id-only fast path builds its header block itself: what a subscriber sees and
    what the stream stores must be exactly what encode_headers gives."""
    from jscore.headers import encode_headers

    watcher = nc.subscribe(subj(stream))
    nc.flush()
    js = nc.jetstream()
    # (the first publish to a subject goes the validated way; the second is the fast path)
    js.publish_async(subj(stream), b"warm", msg_id="m-0").result(timeout=5)
    fut = js.publish_async(subj(stream), b"payload", msg_id="m-1")
    assert fut.result(timeout=5).seq == 2 and list(fut.headers or []) == [("Nats-Msg-Id", "m-1")]
    watcher.next_msg(timeout=2)
    seen = watcher.next_msg(timeout=2)
    assert seen.data == b"payload" and seen.headers is not None and list(seen.headers.items()) == [("Nats-Msg-Id", "m-1")]
    assert seen.size - len(seen.subject) - len(seen.reply or "") - len(b"payload") == len(encode_headers({"Nats-Msg-Id": "m-1"}))
    assert js.publish_async(subj(stream), b"again", msg_id="m-1").result(timeout=5).duplicate
    for bad in ("a\r\nb", " lead", ""):
        with pytest.raises(InvalidOptionError):
            js.publish_async(subj(stream), b"x", msg_id=bad)


def test_options_and_headers_are_sent(nc: Client, stream: str) -> None:
    js = nc.jetstream()
    fut = js.publish_async(subj(stream), b"x", headers={"X-A": "1"}, msg_id="hdr", expected_stream=stream)
    assert fut.result(timeout=5).seq == 1
    assert fut.msg_id == "hdr"
    assert list(fut.headers or []) == [("X-A", "1"), ("Nats-Msg-Id", "hdr"), ("Nats-Expected-Stream", stream)]


def test_invalid_input_raises_at_the_call(nc: Client, stream: str) -> None:
    js = nc.jetstream()
    with pytest.raises(InvalidOptionError):
        js.publish_async(subj(stream), b"x", msg_id="")
    with pytest.raises(InvalidOptionError):
        js.publish_async(subj(stream), b"x", ttl=-1)
    with pytest.raises(MaxPayloadError):
        js.publish_async(subj(stream), b"x" * (nc.max_payload + 1))
    assert js.publish_async_pending == 0
    assert js._pub().stats.sent == 0


def test_result_timeout_leaves_the_future_pending(proxied: tuple[Client, FaultProxy, str]) -> None:
    c, proxy, name = proxied
    js = c.jetstream()
    js.configure_publish(ack_timeout=30)
    rule = proxy.drop_frames("down", is_pub_ack_frame, count=1)
    fut = js.publish_async(subj(name), b"x")
    with pytest.raises(TimeoutError):
        fut.result(timeout=0.3)
    assert not fut.done() and js.publish_async_pending == 1
    with pytest.raises(TimeoutError):
        js.publish_async_complete(timeout=0.2)
    assert rule.exhausted


# =============================================================================== the window


def test_window_bounds_what_is_in_flight(nc: Client, stream: str) -> None:
    js = nc.jetstream()
    js.configure_publish(max_pending=16)
    peak = 0
    futs = []
    for i in range(2000):
        futs.append(js.publish_async(subj(stream), b"x"))
        peak = max(peak, js.publish_async_pending)
    js.publish_async_complete(timeout=20)
    assert peak <= 16
    assert all(f.result().seq > 0 for f in futs)
    assert stream_state(nc, stream)["messages"] == 2000


def test_full_window_blocks_then_raises_a_timeout(proxied: tuple[Client, FaultProxy, str]) -> None:
    c, proxy, name = proxied
    js = c.jetstream()
    js.configure_publish(max_pending=5, ack_timeout=30)
    proxy.drop_frames("down", is_pub_ack_frame)
    futs = [js.publish_async(subj(name), b"x") for _ in range(5)]
    t0 = time.monotonic()
    with pytest.raises(TooManyStalledMsgsError) as ei:
        js.publish_async(subj(name), b"blocked", timeout=0.3)
    assert 0.28 <= time.monotonic() - t0 < 1.5
    assert isinstance(ei.value, TimeoutError)
    assert js.publish_async_pending == 5 and not any(f.done() for f in futs)
    assert wait_until(lambda: stream_state(c, name)["messages"] == 5)
    time.sleep(0.2)
    assert stream_state(c, name)["messages"] == 5  # the refused message was not sent


def test_blocked_publisher_resumes_when_acks_arrive(proxied: tuple[Client, FaultProxy, str]) -> None:
    c, proxy, name = proxied
    js = c.jetstream()
    js.configure_publish(max_pending=4, ack_timeout=0.5)
    proxy.drop_frames("down", is_pub_ack_frame, count=4)
    first = [js.publish_async(subj(name), b"x", msg_id=f"id{i}") for i in range(4)]
    # The window is full until the four acks time out (0.5 s) and the re-sends (they have msg
    # ids) are answered; then there is room again.
    t0 = time.monotonic()
    later = js.publish_async(subj(name), b"y", timeout=5)
    assert 0.4 <= time.monotonic() - t0 < 2.5
    for i, f in enumerate(first):
        ack = f.result(timeout=2)
        assert ack.duplicate and ack.seq == i + 1 and f.outcome is DUPLICATE  # stored the first time
    assert later.result(timeout=5).seq == 5


def test_ack_deadline_is_ambiguous(proxied: tuple[Client, FaultProxy, str]) -> None:
    c, proxy, name = proxied
    js = c.jetstream()
    js.configure_publish(ack_timeout=0.5)
    proxy.drop_frames("down", is_pub_ack_frame, count=1)
    t0 = time.monotonic()
    fut = js.publish_async(subj(name), b"x")  # no msg id: it cannot be sent again safely
    with pytest.raises(PubAckTimeoutError):
        fut.result(timeout=5)
    assert 0.45 <= time.monotonic() - t0 < 2.0
    assert stream_state(c, name)["messages"] == 1  # ambiguous: it was in fact stored


def test_ack_deadline_resends_a_msg_id_publish(proxied: tuple[Client, FaultProxy, str]) -> None:
    """With a msg id a missed ack deadline sends the same publish again (within the re-send
    budget): the stream answers duplicate, and the future has the original sequence."""
    c, proxy, name = proxied
    js = c.jetstream()
    js.configure_publish(ack_timeout=0.5)
    proxy.drop_frames("down", is_pub_ack_frame, count=1)
    t0 = time.monotonic()
    ack = js.publish_async(subj(name), b"x", msg_id="late-1").result(timeout=5)
    assert 0.45 <= time.monotonic() - t0 < 2.0
    assert ack.duplicate and ack.seq == 1
    assert js._pub().stats.retried == 1
    assert stream_state(c, name)["messages"] == 1


# =============================================================================== retries


def test_no_stream_async_retried_then_definite(nc: Client) -> None:
    """503 is sent again with backoff (0.25 s doubling) for ack_timeout * (retry_attempts + 1)
    seconds from the first one, then settles as the definite NoStreamResponseError."""
    js = nc.jetstream()
    js.configure_publish(ack_timeout=0.5, retry_attempts=1)  # budget 1 s
    t0 = time.monotonic()
    fut = js.publish_async(f"{unique('none').lower()}.x", b"x")
    with pytest.raises(NoStreamResponseError):
        fut.result(timeout=5)
    assert 1.7 <= time.monotonic() - t0 < 2.5  # 503s at 0, 0.25, 0.75, 1.75 s (past the budget)
    assert js._pub().stats.retried == 3


def test_stream_appearing_during_async_retries(nc: Client) -> None:
    name = unique("LATEA")
    js = nc.jetstream()
    js.configure_publish(retry_attempts=40, retry_wait=0.1)
    fut = js.publish_async(f"{name.lower()}.x", b"x")
    time.sleep(0.15)
    create_stream(nc, name, subjects=[f"{name.lower()}.>"])
    try:
        assert fut.result(timeout=5).stream == name
    finally:
        delete_stream(nc, name)


# =============================================================================== callbacks


def test_done_callbacks(nc: Client, stream: str, caplog: pytest.LogCaptureFixture) -> None:
    js = nc.jetstream()
    seen: list[tuple[int, str]] = []
    done = threading.Event()

    def cb(f: PubAckFuture) -> None:
        seen.append((f.result().seq, threading.current_thread().name))
        if len(seen) == 20:
            done.set()

    def broken(f: PubAckFuture) -> None:
        raise RuntimeError("boom")

    futs = [js.publish_async(subj(stream), b"x") for _ in range(20)]
    for f in futs:
        f.add_done_callback(broken)
        f.add_done_callback(cb)
    with caplog.at_level(logging.ERROR, logger="jssync.publish"):
        assert done.wait(10)
    assert sorted(s for s, _ in seen) == list(range(1, 21))
    assert all(name != "jssync-io" for _, name in seen), "callbacks never run on the I/O thread"
    # added after the fact: runs at once, in this thread
    late: list[str] = []
    futs[0].add_done_callback(lambda f: late.append(threading.current_thread().name))
    assert late == [threading.current_thread().name]
    assert wait_until(lambda: sum("done-callback raised" in r.message for r in caplog.records) == 20, timeout=5)


# =============================================================================== concurrency


def test_threads_share_one_context(nc: Client, stream: str) -> None:
    js = nc.jetstream()
    js.configure_publish(max_pending=64)
    results: list[list[PubAckFuture]] = [[] for _ in range(4)]

    def worker(k: int) -> None:
        for i in range(1000):
            results[k].append(js.publish_async(subj(stream, f"t{k}"), f"{k}-{i}".encode()))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    js.publish_async_complete(timeout=20)
    seqs = [f.result().seq for fs in results for f in fs]
    assert len(seqs) == 4000 and len(set(seqs)) == 4000
    assert stream_state(nc, stream)["messages"] == 4000


# =============================================================================== connection loss


def test_reconnect_resends_msg_id_publishes_and_fails_the_others(proxied: tuple[Client, FaultProxy, str]) -> None:
    """Acks withheld, then the connection is reset: after the reconnect the publishes with a
    msg id are re-sent and deduplicated (duplicate=True, stored once); those without one fail
    with PubAckTimeoutError (they were in fact stored: ambiguous, never silently lost)."""
    c, proxy, name = proxied
    js = c.jetstream()
    js.configure_publish(ack_timeout=30)
    rule = proxy.drop_frames("down", is_pub_ack_frame)
    with_id = [js.publish_async(subj(name), f"id{i}".encode(), msg_id=f"id-{i}") for i in range(10)]
    without = [js.publish_async(subj(name), f"plain{i}".encode()) for i in range(10)]
    assert wait_until(lambda: stream_state(c, name)["messages"] == 20)
    rule.remove()
    proxy.reset()
    for f in with_id:
        ack = f.result(timeout=10)
        assert ack.duplicate, "re-sent after the reconnect and deduplicated by the stream"
    for f in without:
        with pytest.raises(PubAckTimeoutError):
            f.result(timeout=10)
    assert stream_state(c, name)["messages"] == 20
    assert js._pub().stats.resent >= 10
    assert js.publish_async_pending == 0


def test_auto_msg_id_makes_every_publish_safe(proxied: tuple[Client, FaultProxy, str]) -> None:
    c, proxy, name = proxied
    js = c.jetstream()
    js.configure_publish(auto_msg_id=True, ack_timeout=30)
    rule = proxy.drop_frames("down", is_pub_ack_frame)
    futs = [js.publish_async(subj(name), f"m{i}".encode()) for i in range(25)]
    assert all(f.msg_id for f in futs) and len({f.msg_id for f in futs}) == 25
    assert wait_until(lambda: stream_state(c, name)["messages"] == 25)
    rule.remove()
    proxy.reset()
    assert all(f.result(timeout=10).duplicate for f in futs)
    assert stream_state(c, name)["messages"] == 25
    # per call too
    js.configure_publish(auto_msg_id=False)
    assert js.publish_async(subj(name), b"x").msg_id is None
    assert js.publish_async(subj(name), b"x", auto_msg_id=True).msg_id is not None


def test_publishes_made_while_disconnected_are_not_in_doubt(proxied: tuple[Client, FaultProxy, str]) -> None:
    c, proxy, name = proxied
    js = c.jetstream()
    js.publish_async(subj(name), b"warm").result(timeout=5)
    proxy.refuse(True)
    proxy.reset()
    assert wait_until(lambda: not c.is_connected, timeout=5)
    futs = [js.publish_async(subj(name), f"offline{i}".encode()) for i in range(10)]  # buffered by the client
    proxy.refuse(False)
    for f in futs:
        assert f.result(timeout=10).seq > 1, "sent after the reconnect, acked normally"
    assert stream_state(c, name)["messages"] == 11


def _restart_run(
    server: NatsServer, *, with_ids: bool, total: int = 3000, kill_after: int = 800
) -> tuple[list[PubAckFuture], Client, str]:
    c = jssync.connect(server.url, name="restart", reconnect_wait=0.1, reconnect_jitter=0.0, max_reconnect_attempts=200)
    name = unique("RST")
    create_stream(c, name, subjects=[f"{name.lower()}.>"], duplicate_window=120 * SECOND)
    js = c.jetstream(timeout=10)
    js.configure_publish(max_pending=200, auto_msg_id=with_ids)
    futs: list[PubAckFuture] = []
    killed = threading.Event()

    def killer() -> None:
        wait_until(lambda: sum(1 for f in list(futs) if f.done()) >= kill_after, timeout=30, interval=0.005)
        server.kill()
        killed.set()
        time.sleep(0.3)
        server.restart()

    t = threading.Thread(target=killer)
    t.start()
    try:
        for i in range(total):
            futs.append(js.publish_async(f"{name.lower()}.x", f"{i}".encode(), timeout=30))
        js.publish_async_complete(timeout=60)
    finally:
        t.join(30)
    assert killed.is_set()
    return futs, c, name


def test_server_restart_with_msg_ids_loses_and_duplicates_nothing(nats_server_factory: Callable[..., NatsServer]) -> None:
    """Async publishes in flight across a SIGKILL + restart (sync_interval always): with msg ids
    nothing is lost and nothing duplicated."""
    server = nats_server_factory(jetstream_config="sync_interval: always")
    futs, c, name = _restart_run(server, with_ids=True)
    try:
        acks = [f.result(timeout=0) for f in futs]  # every one acknowledged, none failed
        seqs = [a.seq for a in acks]
        assert len(set(seqs)) == len(futs), "two publishes acknowledged with the same seq"
        msgs = list(stored(c, name))
        ids = [m["headers"]["Nats-Msg-Id"] for m in msgs]
        assert len(msgs) == len(futs) and len(set(ids)) == len(ids), "a message was stored twice"
        assert sorted(m["data"] for m in msgs) == sorted(f.payload for f in futs), "a message was lost"
        assert stream_state(c, name)["messages"] == len(futs)
        assert c.stats["reconnects"] >= 1
    finally:
        c.close()


def test_server_restart_without_msg_ids_never_loses_silently(nats_server_factory: Callable[..., NatsServer]) -> None:
    """Without msg ids the publishes in doubt fail with PubAckTimeoutError; every acknowledged
    one is stored, nothing is stored twice, and no future is left unsettled."""
    server = nats_server_factory(jetstream_config="sync_interval: always")
    futs, c, name = _restart_run(server, with_ids=False)
    try:
        assert all(f.done() for f in futs)
        acked = [f for f in futs if f.error is None]
        failed = [f for f in futs if f.error is not None]
        for f in failed:
            assert isinstance(f.error, PubAckTimeoutError), f.error
        msgs = list(stored(c, name))
        payloads = [m["data"] for m in msgs]
        assert len(set(payloads)) == len(payloads), "a message was stored twice"
        by_seq = {m["seq"]: m["data"] for m in msgs}
        for f in acked:
            assert f.ack is not None and by_seq.get(f.ack.seq) == f.payload, "an acknowledged message was lost"
        assert len(acked) <= len(msgs) <= len(futs)
    finally:
        c.close()


def test_close_fails_what_is_in_flight_as_ambiguous(proxied: tuple[Client, FaultProxy, str]) -> None:
    c, proxy, name = proxied
    js = c.jetstream()
    js.configure_publish(ack_timeout=30)
    proxy.drop_frames("down", is_pub_ack_frame)
    futs = [js.publish_async(subj(name), b"x", msg_id=f"c{i}") for i in range(5)]
    c.close()
    for f in futs:
        with pytest.raises(PubAckTimeoutError):
            f.result(timeout=5)
    with pytest.raises(ConnectionClosedError):
        js.publish_async(subj(name), b"x")


# =============================================================================== cluster (23)


def test_cluster_stream_leader_killed_ledger(nats_cluster_factory: Callable[..., NatsCluster]) -> None:
    """TESTPLAN 23: R3 stream, sync_interval always, async publishes with msg ids; the stream
    leader's node is SIGKILLed mid-run and restarted. Ledger: whatever ends ambiguous or
    without a leader is published again with its msg id (typed errors only); then every id is
    stored exactly once (lost = {}, duplicates = {})."""
    cluster = nats_cluster_factory(3, jetstream_config="sync_interval: always")
    c = jssync.connect(cluster.urls, name="ledger", reconnect_wait=0.1, max_reconnect_attempts=-1)
    try:
        name = unique("R3A")
        create_stream(c, name, subjects=[f"{name.lower()}.>"], num_replicas=3, duplicate_window=120 * SECOND)
        leader = api(c, f"$JS.API.STREAM.INFO.{name}")["cluster"]["leader"]
        victim = int(leader.lstrip("n")) - 1
        js = c.jetstream(timeout=3.0)
        js.configure_publish(max_pending=256, auto_msg_id=True)
        total = 2000
        futs: list[PubAckFuture] = []
        for i in range(total):
            if i == 600:
                cluster.kill(victim)
            if i == 1400:
                cluster.restart(victim, wait_healthy=False)
            futs.append(js.publish_async(f"{name.lower()}.x", b"%d" % i, timeout=30))
        js.publish_async_complete(timeout=60)
        typed = (PubAckTimeoutError, NoStreamResponseError, DuplicateMsgIdInProcessError, JetStreamUnavailableError)
        redo = [f for f in futs if f.error is not None]
        for f in redo:
            assert isinstance(f.error, typed), repr(f.error)
            for attempt in range(30):
                try:
                    js.publish(f.subject, f.payload, msg_id=f.msg_id, timeout=3.0)
                    break
                except typed:
                    time.sleep(0.2)
            else:
                pytest.fail(f"{f.msg_id} never acknowledged")
        assert wait_until(lambda: stream_state(c, name)["messages"] == total, timeout=20), stream_state(c, name)
        state = stream_state(c, name)
        assert state["last_seq"] == total, "a message was stored twice"
    finally:
        c.close()


@pytest.mark.timeout(300)
def test_cluster_clients_node_killed_no_stored_message_is_refused(
    nats_cluster_factory: Callable[..., NatsCluster],
) -> None:
    """R3 stream; the publishing client is connected to the stream leader's node, which is
    SIGKILLed mid-run. Publishes in flight on it may be stored with their acks lost; their
    re-sends meet 503 and 10008 while a new leader is elected. No future may be settled as a
    definite failure (FAILED: "nothing stored") for a message that is in the stream."""
    cluster = nats_cluster_factory(3, jetstream_config="sync_interval: always")
    name = unique("R3K")
    admin_urls = cluster.urls
    admin = jssync.connect(admin_urls, name="admin", reconnect_wait=0.1, max_reconnect_attempts=-1)
    c: Client | None = None
    try:
        create_stream(admin, name, subjects=[f"{name.lower()}.>"], num_replicas=3, duplicate_window=120 * SECOND)
        leader = api(admin, f"$JS.API.STREAM.INFO.{name}")["cluster"]["leader"]
        victim = int(leader.lstrip("n")) - 1
        others = [u for i, u in enumerate(cluster.urls) if i != victim]
        admin.close()
        admin = jssync.connect(others, name="admin", reconnect_wait=0.1, max_reconnect_attempts=-1)
        c = jssync.connect([cluster.urls[victim], *others], name="pub", reconnect_wait=0.1, max_reconnect_attempts=-1)
        assert c.connected_url == cluster.urls[victim]
        js = c.jetstream(timeout=2.0)
        js.configure_publish(auto_msg_id=True)  # max_pending 4000
        total, kill_at = 30_000, 10_000  # (before the fix: 22,000 refused, one of them stored)
        futs: list[PubAckFuture] = []
        for i in range(total):
            if i == kill_at:
                cluster.kill(victim)
            futs.append(js.publish_async(f"{name.lower()}.x", b"%d" % i, timeout=60))
        js.publish_async_complete(timeout=120)
        in_stream: set[bytes] = set()
        for _ in range(30):  # the cluster may still be electing a meta leader: ask again
            try:
                in_stream = {m["data"] for m in stored(admin, name)}
                break
            except TimeoutError:
                time.sleep(1.0)
        else:
            pytest.fail("the stream could not be read back")
        refused = [f for f in futs if f.outcome == FAILED]
        wrongly = [f for f in refused if f.payload in in_stream]
        assert wrongly == [], f"{len(wrongly)} stored messages settled as refused, e.g. {wrongly[0].error!r}"
        for f in futs:
            if f.outcome in (ACKED, DUPLICATE):
                assert f.payload in in_stream, f"acknowledged but not stored: {f.payload!r}"
        assert len(in_stream) == stream_state(admin, name)["messages"], "a message was stored twice"
    finally:
        if c is not None:
            c.close()
        admin.close()


def test_no_publish_thread_and_the_callback_thread_ends_with_the_client(nats_url: str) -> None:
    """Acks, deadlines and re-sends run on the I/O thread: publishing starts no thread of its
    own. Done-callbacks run on one callback thread, which ends when the client closes."""

    def workers() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "jssync-js-publish"]

    before = len(workers())
    c = jssync.connect(nats_url)
    name = unique("THR")
    create_stream(c, name, subjects=[f"{name.lower()}.>"])
    js = c.jetstream()
    js.publish_async(f"{name.lower()}.a", b"x").result(timeout=5)
    assert len(workers()) == before
    ran: list[int] = []
    futures = [js.publish_async(f"{name.lower()}.a", b"%d" % i) for i in range(200)]
    for i, f in enumerate(futures):
        f.add_done_callback(lambda _f, i=i: ran.append(i))
    js.publish_async_complete(timeout=10)
    assert wait_until(lambda: len(ran) == 200, timeout=5), len(ran)
    assert sorted(ran) == list(range(200))
    assert len(workers()) <= before + 1
    delete_stream(c, name)
    c.close()
    assert wait_until(lambda: len(workers()) == before, timeout=3)
