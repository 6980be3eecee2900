"""Basics of the blocking client against a real nats-server."""

from __future__ import annotations

import builtins
import os
import pickle
import threading
import time
import uuid
from collections.abc import Callable

import pytest

import jssync
from jssync import Client, Headers, Msg
from jscore.errors import (
    BadSubjectError,
    ClientForkedError,
    ConnectionClosedError,
    InvalidOptionError,
    MaxPayloadError,
    NatsError,
    NoRespondersError,
    TimeoutError,
)
from jssync.events import CallbackError, Closed, Connected, Disconnected, SlowConsumer
from jssync.server import NatsServer
from tests.integration import EventLog, clients, collect, wait_until

__all__ = ["clients"]

pytestmark = pytest.mark.timeout(60)


def _subj(prefix: str = "t") -> str:
    return f"{prefix}.{uuid.uuid4().hex[:12]}"


# --------------------------------------------------------------------------- publish / subscribe


def test_publish_subscribe_iterator(nats_url: str, clients: Callable[..., Client]) -> None:
    nc = clients(nats_url)
    subject = _subj()
    sub = nc.subscribe(subject)
    nc.flush(timeout=2)
    for i in range(5):
        nc.publish(subject, f"m{i}".encode())
    nc.flush(timeout=2)
    wait_until(lambda: sub.pending_msgs == 5, 2.0, what="5 pending messages")
    sub.unsubscribe()  # queued messages stay readable, then the iterator ends
    assert not sub.is_active
    got = [m.data for m in sub]
    assert got == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    assert sub.delivered == 5
    with pytest.raises(ConnectionClosedError):
        sub.next_msg(timeout=0.1)


def test_next_msg_timeout_is_a_builtin_timeout(nats_url: str, clients: Callable[..., Client]) -> None:
    nc = clients(nats_url)
    sub = nc.subscribe(_subj())
    t0 = time.monotonic()
    with pytest.raises(TimeoutError) as info:
        sub.next_msg(timeout=0.3)
    elapsed = time.monotonic() - t0
    assert 0.25 <= elapsed < 1.0
    assert isinstance(info.value, builtins.TimeoutError)
    assert isinstance(info.value, NatsError)
    # and ``except TimeoutError`` with the builtin name catches it
    try:
        sub.next_msg(timeout=0.05)
    except builtins.TimeoutError:
        pass
    else:  # pragma: no cover - the assertion is the point
        pytest.fail("builtin TimeoutError not raised")


def test_callback_subscription_never_runs_on_the_io_thread(nats_url: str, clients: Callable[..., Client]) -> None:
    events = EventLog()
    nc = clients(nats_url, on_event=events)
    subject = _subj()
    seen: list[tuple[bytes, str]] = []
    done = threading.Event()

    def cb(msg: Msg) -> None:
        seen.append((msg.data, threading.current_thread().name))
        if len(seen) == 20:
            done.set()

    sub = nc.subscribe(subject, callback=cb)
    with pytest.raises(InvalidOptionError):
        sub.next_msg(timeout=0.1)
    for i in range(20):
        nc.publish(subject, b"%d" % i)
    assert done.wait(5), f"callback saw {len(seen)} of 20"
    assert [d for d, _ in seen] == [b"%d" % i for i in range(20)]
    names = {name for _, name in seen}
    assert "jssync-io" not in names
    assert names and all(name.startswith("jssync-sub-") for name in names)
    # on_event callbacks do not run on the I/O thread either
    events.wait_for(Connected)
    assert "jssync-io" not in events.threads


def test_callback_that_raises_is_reported_and_the_subscription_goes_on(
    nats_url: str, clients: Callable[..., Client]
) -> None:
    events = EventLog()
    nc = clients(nats_url, on_event=events)
    subject = _subj()
    handled: list[bytes] = []

    def cb(msg: Msg) -> None:
        if msg.data == b"boom":
            raise ValueError("handler failed")
        handled.append(msg.data)

    sub = nc.subscribe(subject, callback=cb)
    nc.publish(subject, b"a")
    nc.publish(subject, b"boom")
    nc.publish(subject, b"b")
    wait_until(lambda: handled == [b"a", b"b"], 5.0, what="both good messages handled")
    errs = events.wait_for(CallbackError)
    assert len(errs) == 1
    assert errs[0].subject == subject
    assert isinstance(errs[0].error, ValueError)
    assert sub.is_active and nc.is_connected
    nc.publish(subject, b"c")
    wait_until(lambda: handled == [b"a", b"b", b"c"], 5.0, what="the subscription to go on")


def test_headers_multi_valued_round_trip(nats_url: str, clients: Callable[..., Client]) -> None:
    nc = clients(nats_url)
    subject = _subj()
    sub = nc.subscribe(subject)
    h = Headers()
    h.add("X-Multi", "one")
    h.add("X-Multi", "two")
    h.add("x-multi", "three")  # same key, other case: a third value, case kept on the wire
    h["Single"] = "value with spaces\tand tab"
    inputs: list[object] = [
        h,
        {"A": ["1", "2", "3"], "B": "b"},
        [("K", "v1"), ("Other", "o"), ("K", "v2")],
        {},  # an empty header block
    ]
    for hdrs in inputs:
        nc.publish(subject, b"payload", headers=hdrs)  # type: ignore[arg-type]
    msgs = collect(sub, len(inputs))
    assert msgs[0].headers is not None
    assert msgs[0].headers.items() == h.items()
    assert msgs[0].headers.get_all("X-MULTI") == ["one", "two", "three"]
    assert msgs[0].headers["single"] == "value with spaces\tand tab"
    assert msgs[1].headers is not None and msgs[1].headers.items() == [("A", "1"), ("A", "2"), ("A", "3"), ("B", "b")]
    assert msgs[2].headers is not None
    assert msgs[2].headers.items() == [("K", "v1"), ("Other", "o"), ("K", "v2")]
    assert msgs[2].headers.get_all("k") == ["v1", "v2"]
    assert msgs[3].headers is not None and msgs[3].headers.items() == []
    for m in msgs:
        assert m.data == b"payload"
        assert m.status is None


# --------------------------------------------------------------------------- request / reply


def test_request_reply(nats_url: str, clients: Callable[..., Client]) -> None:
    server_side = clients(nats_url)
    nc = clients(nats_url)
    subject = _subj("svc")

    def responder(msg: Msg) -> None:
        assert msg.reply
        hdr = msg.headers.get_all("Q") if msg.headers else []
        msg.respond(msg.data.upper(), headers={"Echo": hdr} if hdr else None)

    server_side.subscribe(subject, callback=responder)
    server_side.flush(timeout=2)
    reply = nc.request(subject, b"hello", timeout=2)
    assert reply.data == b"HELLO"
    assert reply.headers is None
    reply = nc.request(subject, b"x", headers={"Q": ["1", "2"]}, timeout=2)
    assert reply.data == b"X"
    assert reply.headers is not None and reply.headers.get_all("Echo") == ["1", "2"]
    for i in range(50):
        assert nc.request(subject, b"r%d" % i, timeout=2).data == b"R%d" % i


def test_no_responders(nats_url: str, clients: Callable[..., Client]) -> None:
    nc = clients(nats_url)
    t0 = time.monotonic()
    with pytest.raises(NoRespondersError):
        nc.request(_subj("nobody"), b"x", timeout=2)
    assert time.monotonic() - t0 < 1.0  # answered by the server, not by the timeout
    assert nc.is_connected


def test_request_timeout(nats_url: str, clients: Callable[..., Client]) -> None:
    nc = clients(nats_url)
    subject = _subj("slow")
    nc.subscribe(subject)  # listens, never answers
    t0 = time.monotonic()
    with pytest.raises(builtins.TimeoutError):
        nc.request(subject, b"x", timeout=0.3)
    assert 0.25 <= time.monotonic() - t0 < 1.0


# --------------------------------------------------------------------------- queues, unsubscribe, drain


def test_queue_groups(nats_url: str, clients: Callable[..., Client]) -> None:
    nc = clients(nats_url)
    pub = clients(nats_url)
    subject = _subj()
    q1 = nc.subscribe(subject, queue="workers")
    q2 = nc.subscribe(subject, queue="workers")
    third = clients(nats_url)
    q3 = third.subscribe(subject, queue="workers")
    plain = nc.subscribe(subject)
    nc.flush(timeout=2)
    third.flush(timeout=2)
    n = 300
    for i in range(n):
        pub.publish(subject, b"%d" % i)
    pub.flush(timeout=2)
    everything = collect(plain, n)
    assert [m.data for m in everything] == [b"%d" % i for i in range(n)]
    wait_until(lambda: q1.pending_msgs + q2.pending_msgs + q3.pending_msgs == n, 5.0, what="queue deliveries")
    time.sleep(0.1)
    assert q1.pending_msgs + q2.pending_msgs + q3.pending_msgs == n  # exactly once in the group
    got = sorted(
        int(m.data) for q in (q1, q2, q3) for m in collect(q, q.pending_msgs, 1.0)
    )
    assert got == list(range(n))
    assert q1.delivered > 0 and q2.delivered > 0 and q3.delivered > 0


def test_auto_unsubscribe(nats_url: str, clients: Callable[..., Client]) -> None:
    nc = clients(nats_url)
    subject = _subj()
    sub = nc.subscribe(subject)
    sub.unsubscribe(max_msgs=3)
    sub2 = nc.subscribe(subject, max_msgs=2)
    nc.flush(timeout=2)
    for i in range(10):
        nc.publish(subject, b"%d" % i)
    nc.flush(timeout=2)
    assert [m.data for m in collect(sub, 3)] == [b"0", b"1", b"2"]
    assert [m.data for m in collect(sub2, 2)] == [b"0", b"1"]
    for s in (sub, sub2):
        with pytest.raises(ConnectionClosedError):
            s.next_msg(timeout=0.5)
        assert not s.is_active
    # unsubscribe(max_msgs) at or below what was already delivered ends it at once
    sub3 = nc.subscribe(subject)
    nc.publish(subject, b"x")
    collect(sub3, 1)
    sub3.unsubscribe(max_msgs=1)
    assert not sub3.is_active


def test_subscription_drain(nats_url: str, clients: Callable[..., Client]) -> None:
    nc = clients(nats_url)
    pub = clients(nats_url)
    subject = _subj()
    handled: list[bytes] = []

    def slow(msg: Msg) -> None:
        time.sleep(0.005)
        handled.append(msg.data)

    sub = nc.subscribe(subject, callback=slow)
    nc.flush(timeout=2)
    for i in range(50):
        pub.publish(subject, b"%d" % i)
    pub.flush(timeout=2)
    wait_until(lambda: sub.pending_msgs + len(handled) >= 50, 5.0, what="all 50 at the client")
    sub.drain(timeout=5)
    assert handled == [b"%d" % i for i in range(50)]  # every queued message handled before return
    assert not sub.is_active
    pub.publish(subject, b"late")
    pub.flush(timeout=2)
    time.sleep(0.1)
    assert len(handled) == 50
    assert nc.is_connected


def test_client_drain_and_context_manager(nats_server: NatsServer, clients: Callable[..., Client]) -> None:
    pub = clients(nats_server.url)
    subject = _subj()
    handled: list[bytes] = []
    events = EventLog()

    def slow(msg: Msg) -> None:
        time.sleep(0.002)
        handled.append(msg.data)

    with jssync.connect(nats_server.url, on_event=events, connect_timeout=2) as nc:
        plain = nc.subscribe(subject + ".plain")
        nc.subscribe(subject, callback=slow)
        nc.flush(timeout=2)
        for i in range(100):
            pub.publish(subject, b"%d" % i)
        pub.publish(subject + ".plain", b"kept")
        pub.flush(timeout=2)
        wait_until(lambda: plain.pending_msgs == 1, 2.0, what="the plain message")
    assert nc.is_closed
    assert handled == [b"%d" % i for i in range(100)]
    events.wait_for(Closed)
    assert events.of(Closed)[-1].error is None
    # a drained plain subscription keeps what was queued, then ends
    assert plain.next_msg(timeout=0.5).data == b"kept"
    with pytest.raises(ConnectionClosedError):
        plain.next_msg(timeout=0.5)
    # explicit drain()
    nc2 = clients(nats_server.url)
    nc2.subscribe(subject)
    nc2.drain(timeout=5)
    assert nc2.is_closed
    with pytest.raises(ConnectionClosedError):
        nc2.publish(subject, b"x")


def test_flush(nats_url: str, clients: Callable[..., Client]) -> None:
    nc = clients(nats_url)
    other = clients(nats_url)
    subject = _subj()
    sub = other.subscribe(subject)
    other.flush(timeout=2)
    for i in range(1000):
        nc.publish(subject, b"x" * 100)
    nc.flush(timeout=5)  # the server has processed every publish: the subscriber gets them
    assert len(collect(sub, 1000, 5.0)) == 1000
    for _ in range(20):
        nc.flush(timeout=2)


def test_close_is_idempotent_and_use_after_close_raises(nats_url: str) -> None:
    events = EventLog()
    nc = jssync.connect(nats_url, on_event=events, connect_timeout=2)
    sub = nc.subscribe(_subj())
    assert nc.is_connected and not nc.is_closed
    nc.close()
    nc.close()
    nc.close(timeout=0.1)
    assert nc.is_closed and not nc.is_connected
    assert events.count(Closed) == 1
    with pytest.raises(ConnectionClosedError):
        nc.publish("a.b", b"x")
    with pytest.raises(ConnectionClosedError):
        nc.publish("a.b", b"x", headers={"A": "b"})
    with pytest.raises(ConnectionClosedError):
        nc.request("a.b", b"x", timeout=0.5)
    with pytest.raises(ConnectionClosedError):
        nc.subscribe("a.b")
    with pytest.raises(ConnectionClosedError):
        nc.flush(timeout=0.5)
    with pytest.raises(ConnectionClosedError):
        sub.next_msg(timeout=0.5)
    # invalid input still reports the input error first
    with pytest.raises(BadSubjectError):
        nc.publish("a b", b"x")
    assert nc._io_thread is not None and not nc._io_thread.is_alive()  # threads joined
    assert nc._events_thread is not None and not nc._events_thread.is_alive()


def test_on_event_connected_and_closed(nats_url: str) -> None:
    events = EventLog()
    nc = jssync.connect(nats_url, on_event=events, connect_timeout=2, name="evt-test")
    (connected,) = events.wait_for(Connected)
    assert connected.url == nc.connected_url
    assert connected.server_info.get("server_id")
    assert nc.server_info.get("server_id") == connected.server_info["server_id"]
    nc.close()
    events.wait_for(Closed)
    assert events.names() == ["Connected", "Closed"]


def test_stats(nats_url: str, clients: Callable[..., Client]) -> None:
    nc = clients(nats_url)
    subject = _subj("s")
    sub = nc.subscribe(subject)
    before = nc.stats
    for _ in range(5):
        nc.publish(subject, b"0123456789")
    collect(sub, 5)
    after = nc.stats
    assert set(after) == {"msgs_in", "bytes_in", "msgs_out", "bytes_out", "reconnects"}
    assert after["msgs_out"] - before["msgs_out"] == 5
    assert after["msgs_in"] - before["msgs_in"] == 5
    assert after["bytes_in"] - before["bytes_in"] >= 50
    assert after["bytes_out"] - before["bytes_out"] >= 5 * (len("PUB  10\r\n\r\n") + len(subject) + 10)
    assert after["reconnects"] == 0


def test_max_payload_comes_from_the_server(
    nats_server_factory: Callable[..., NatsServer], clients: Callable[..., Client]
) -> None:
    server = nats_server_factory(jetstream=False, config="max_payload: 4096")
    nc = clients(server.url)
    assert nc.max_payload == 4096
    assert nc.server_info["max_payload"] == 4096
    sub = nc.subscribe("mp")
    nc.publish("mp", b"x" * 4096)
    assert len(collect(sub, 1)[0].data) == 4096
    with pytest.raises(MaxPayloadError):
        nc.publish("mp", b"x" * 4097)
    assert isinstance(MaxPayloadError("x"), ValueError)
    nc.flush(timeout=2)
    assert nc.is_connected


# --------------------------------------------------------------------------- process safety


def test_client_used_after_fork_raises_in_the_child(nats_url: str, clients: Callable[..., Client]) -> None:
    nc = clients(nats_url)
    sub = nc.subscribe(_subj())
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child, reports through the exit code
        code = 0
        try:
            checks: list[Callable[[], object]] = [
                lambda: nc.publish("a", b"x"),
                lambda: nc.request("a", b"x", timeout=0.5),
                lambda: nc.subscribe("a"),
                lambda: nc.flush(timeout=0.5),
                lambda: sub.next_msg(timeout=0.5),
            ]
            for i, check in enumerate(checks):
                try:
                    check()
                except ClientForkedError:
                    continue
                except BaseException:  # noqa: BLE001
                    code = 10 + i
                    break
                else:
                    code = 30 + i
                    break
            if code == 0:
                nc.close(timeout=0.5)  # the parent's threads and socket: a no-op in the child
        except BaseException:  # noqa: BLE001
            code = 99
        os._exit(code)
    deadline = time.monotonic() + 10
    status = None
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.02)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the forked child hung")
    assert status is not None
    assert os.WIFEXITED(status), status
    assert os.WEXITSTATUS(status) == 0, f"child exit code {os.WEXITSTATUS(status)}"
    # the parent's client is untouched
    nc.flush(timeout=2)
    assert nc.is_connected


def test_client_cannot_be_pickled_but_its_options_can(nats_url: str, clients: Callable[..., Client]) -> None:
    nc = clients(nats_url)
    with pytest.raises(TypeError):
        pickle.dumps(nc)
    opts = pickle.loads(pickle.dumps(nc.options))
    assert opts == nc.options


# --------------------------------------------------------------------------- more edges


def test_buffer_payload_types(nats_url: str, clients: Callable[..., Client]) -> None:
    import array

    nc = clients(nats_url)
    subject = _subj()
    sub = nc.subscribe(subject)
    ints = array.array("i", [1, 2, 3])
    nc.publish(subject, bytearray(b"ba"))  # type: ignore[arg-type]
    nc.publish(subject, memoryview(b"mv"))  # type: ignore[arg-type]
    # a memoryview's len() counts items: the frame must still declare the byte count
    nc.publish(subject, memoryview(ints))  # type: ignore[arg-type]
    nc.publish(subject, memoryview(ints), headers={"K": "v"})  # type: ignore[arg-type]
    nc.publish(subject, memoryview(b"0123456789")[2:5])  # type: ignore[arg-type]
    got = [m.data for m in collect(sub, 5)]
    assert got == [b"ba", b"mv", ints.tobytes(), ints.tobytes(), b"234"]
    with pytest.raises(TypeError):
        nc.publish(subject, "text")  # type: ignore[arg-type]
    nc.flush(timeout=2)
    assert nc.is_connected and nc.stats["reconnects"] == 0


def test_utf8_subjects_and_header_values(nats_url: str, clients: Callable[..., Client]) -> None:
    nc = clients(nats_url)
    subject = _subj("ünï") + ".ß"
    sub = nc.subscribe(subject)
    nc.publish(subject, "→ payload".encode(), headers={"Note": ["héllo →", "日本"]})
    m = collect(sub, 1)[0]
    assert m.subject == subject
    assert m.headers is not None and m.headers.get_all("Note") == ["héllo →", "日本"]


def test_slow_consumer_drops_are_counted_and_reported(nats_url: str, clients: Callable[..., Client]) -> None:
    events = EventLog()
    nc = clients(nats_url, on_event=events)
    subject = _subj()
    sub = nc.subscribe(subject, pending_msgs_limit=10)
    for i in range(50):
        nc.publish(subject, b"%d" % i)
    nc.flush(timeout=2)
    assert sub.pending_msgs == 10
    assert sub.dropped == 40
    slow = events.wait_for(SlowConsumer)
    assert slow[0].subject == subject and slow[0].dropped >= 1
    assert [m.data for m in collect(sub, 10)] == [b"%d" % i for i in range(10)]  # the first ones kept
    assert nc.is_connected


def test_close_from_a_callback_and_from_on_event(nats_server: NatsServer, clients: Callable[..., Client]) -> None:
    nc = clients(nats_server.url)
    done = threading.Event()

    def closer(msg: Msg) -> None:
        nc.close()
        done.set()

    nc.subscribe("cb.close", callback=closer)
    nc.publish("cb.close", b"x")
    assert done.wait(5), "close() from a callback deadlocked"
    assert nc.is_closed

    holder: list[Client] = []
    closed_in_handler = threading.Event()

    def on_event(e: object) -> None:
        if isinstance(e, Disconnected):
            holder[0].close()
            closed_in_handler.set()

    nc2 = clients(nats_server.url, on_event=on_event)
    holder.append(nc2)
    nats_server.kill()
    assert closed_in_handler.wait(5), "close() from on_event deadlocked"
    wait_until(lambda: nc2.is_closed, 2.0, what="the client to close")


def test_everything_published_before_close_is_delivered(nats_url: str, clients: Callable[..., Client]) -> None:
    reader = clients(nats_url)
    subject = _subj()
    sub = reader.subscribe(subject)
    reader.flush(timeout=2)
    nc = jssync.connect(nats_url, connect_timeout=2)
    for i in range(20_000):
        nc.publish(subject, b"%d" % i)
    nc.close()  # no flush: close itself writes what is queued
    got = collect(sub, 20_000, 10)
    assert [int(m.data) for m in got] == list(range(20_000))


def test_a_new_client_works_in_a_forked_child(nats_url: str, clients: Callable[..., Client]) -> None:
    nc = clients(nats_url)
    subject = _subj("fork")
    sub = nc.subscribe(subject)
    nc.flush(timeout=2)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        code = 1
        try:
            child = jssync.connect(nats_url, connect_timeout=2)
            child.publish(subject, b"from-child-%d" % os.getpid())
            child.flush(timeout=2)
            child.close(timeout=2)
            code = 0
        except BaseException:  # noqa: BLE001
            code = 2
        os._exit(code)
    deadline = time.monotonic() + 10
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        time.sleep(0.02)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert collect(sub, 1)[0].data == b"from-child-%d" % pid


def test_drain_from_inside_a_callback_does_not_wait_for_itself(
    nats_url: str, clients: Callable[..., Client]
) -> None:
    nc = clients(nats_url)
    subject = _subj()
    took: list[float] = []
    handled: list[bytes] = []
    done = threading.Event()
    go = threading.Event()

    def cb(msg: Msg) -> None:
        if msg.data == b"stop":
            go.wait(5)  # until the 20 others are queued behind this one
            t0 = time.monotonic()
            nc.drain(timeout=3)
            took.append(time.monotonic() - t0)
            done.set()
        else:
            handled.append(msg.data)

    sub = nc.subscribe(subject, callback=cb)
    nc.publish(subject, b"stop")
    for i in range(20):
        nc.publish(subject, b"%d" % i)
    nc.flush(timeout=2)
    wait_until(lambda: sub.pending_msgs == 20, 2.0, what="20 messages queued behind the callback")
    go.set()
    assert done.wait(5)
    assert took[0] < 1.0, f"drain() in a callback waited {took[0]:.2f}s for its own subscription"
    assert nc.is_closed
    wait_until(lambda: len(handled) == 20, 2.0, what="the queued messages after the callback returned")


def test_close_wakes_every_blocked_call(nats_url: str) -> None:
    nc = jssync.connect(nats_url, connect_timeout=2)
    responderless = _subj()
    nc.subscribe(responderless)  # someone listens but never answers: the request blocks
    sub = nc.subscribe(_subj())
    outcomes: dict[str, tuple[BaseException | None, float]] = {}

    def run(name: str, fn: Callable[[], object]) -> None:
        t0 = time.monotonic()
        try:
            fn()
            err: BaseException | None = None
        except BaseException as exc:  # noqa: BLE001
            err = exc
        outcomes[name] = (err, time.monotonic() - t0)

    threads = [
        threading.Thread(target=run, args=("request", lambda: nc.request(responderless, b"x", timeout=10))),
        threading.Thread(target=run, args=("next_msg", lambda: sub.next_msg(timeout=None))),
        threading.Thread(target=run, args=("iter", lambda: list(sub))),
    ]
    for t in threads:
        t.start()
    time.sleep(0.2)
    nc.close()
    for t in threads:
        t.join(3)
        assert not t.is_alive(), "a blocked call was not woken by close()"
    assert isinstance(outcomes["request"][0], ConnectionClosedError)
    assert isinstance(outcomes["next_msg"][0], ConnectionClosedError)
    assert outcomes["iter"][0] is None  # iteration just ends
    assert all(took < 2.0 for _, took in outcomes.values())
