"""One client shared by many threads against a real nats-server."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable

import pytest

from jscore.session import Session
from jssync import Client, Msg
from jssync.server import NatsServer
from tests.integration import clients, wait_until

__all__ = ["clients"]

pytestmark = pytest.mark.timeout(90)


def _run_threads(target: Callable[[int], None], n: int, timeout: float) -> list[BaseException]:
    errors: list[BaseException] = []

    def wrapped(i: int) -> None:
        try:
            target(i)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=wrapped, args=(i,), name=f"worker-{i}") for i in range(n)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, start + timeout - time.monotonic()))
    alive = [t.name for t in threads if t.is_alive()]
    if alive:
        raise AssertionError(f"threads still running after {timeout}s: {alive}")
    return errors


def test_eight_threads_publishing_lose_and_reorder_nothing(
    nats_server: NatsServer, clients: Callable[..., Client]
) -> None:
    n_threads, per_thread = 8, 5000
    nc = clients(nats_server.url)
    reader = clients(nats_server.url)
    received: dict[int, list[int]] = {t: [] for t in range(n_threads)}
    count = [0]
    lock = threading.Lock()

    def on_msg(msg: Msg) -> None:
        t, _, seq = msg.data.partition(b":")
        with lock:
            received[int(t)].append(int(seq))
            count[0] += 1

    reader.subscribe("conc.>", callback=on_msg)
    reader.flush(timeout=2)

    def publisher(t: int) -> None:
        subject = f"conc.{t}"
        for seq in range(per_thread):
            if seq % 3 == 0:
                nc.publish(subject, b"%d:%d" % (t, seq), headers={"T": str(t)})
            else:
                nc.publish(subject, b"%d:%d" % (t, seq))

    errors = _run_threads(publisher, n_threads, 60)
    assert not errors, errors
    nc.flush(timeout=10)
    total = n_threads * per_thread
    wait_until(lambda: count[0] >= total, 30.0, what=f"{total} messages")
    time.sleep(0.05)
    assert count[0] == total
    for t in range(n_threads):
        assert received[t] == list(range(per_thread)), f"thread {t}: lost or reordered"
    assert nc.stats["msgs_out"] == total


def test_many_threads_requesting_concurrently(
    nats_server: NatsServer, clients: Callable[..., Client]
) -> None:
    n_threads, per_thread = 16, 150
    responder = clients(nats_server.url)
    responder.subscribe("rq.svc", queue="svc", callback=lambda m: m.respond(b"re:" + m.data))
    responder.subscribe(
        "rq.svc",
        queue="svc",
        callback=lambda m: m.respond(b"re:" + m.data, headers={"By": "second"}),
    )
    responder.flush(timeout=2)
    nc = clients(nats_server.url)
    mismatches: list[tuple[bytes, bytes]] = []

    def requester(t: int) -> None:
        for i in range(per_thread):
            payload = b"%d-%d" % (t, i)
            reply = nc.request("rq.svc", payload, timeout=5)
            if reply.data != b"re:" + payload:
                mismatches.append((payload, reply.data))

    errors = _run_threads(requester, n_threads, 60)
    assert not errors, errors[:3]
    assert not mismatches, mismatches[:5]
    assert not nc._requests, "request waiters leaked"
    assert not nc._conn._requests, "request tokens leaked"


def test_concurrent_subscribe_unsubscribe_and_publish(
    nats_server: NatsServer, clients: Callable[..., Client]
) -> None:
    nc = clients(nats_server.url)
    pub = clients(nats_server.url)

    def churn(t: int) -> None:
        for i in range(100):
            subject = f"churn.{t}.{i}"
            sub = nc.subscribe(subject)
            nc.flush(timeout=5)
            pub.publish(subject, b"x")
            pub.flush(timeout=5)
            assert sub.next_msg(timeout=5).data == b"x"
            sub.unsubscribe()
            assert not sub.is_active

    errors = _run_threads(churn, 6, 60)
    assert not errors, errors[:3]
    assert not nc._subs, "subscriptions leaked"
    assert nc.is_connected


def test_requests_keep_their_place_among_publishes(
    nats_server: NatsServer, clients: Callable[..., Client]
) -> None:
    """A waiting caller may write its own request (when the I/O thread is idle); the order of
    everything sent on the connection must still be the order of the calls, also when the
    socket takes only part of a large request."""
    n_threads, per_thread = 6, 60
    responder = clients(nats_server.url)
    last_seen: dict[str, int] = {}

    def on_pub(msg: Msg) -> None:
        last_seen[msg.subject.rsplit(".", 1)[1]] = int(msg.data[:12])

    def on_req(msg: Msg) -> None:
        msg.respond(b"%d" % last_seen.get(msg.subject.rsplit(".", 1)[1], -1))

    # One subscription thread for both subjects keeps the responder's view in wire order.
    def on_any(msg: Msg) -> None:
        (on_req if msg.reply else on_pub)(msg)

    responder.subscribe("mix.*.*", callback=on_any)
    responder.flush(timeout=2)
    nc = clients(nats_server.url)
    # A small send buffer makes the socket take only part of a large request: the rest is
    # handed to the I/O thread, which must write it before anything newer.
    assert nc._sock is not None
    nc._sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)
    spills = [0]
    kick = nc._kick_locked

    def counting_kick(waiting: bool = False) -> None:
        kick(waiting)
        spills[0] += bool(nc._spill)

    nc._kick_locked = counting_kick  # type: ignore[method-assign]
    bad: list[tuple[int, int, bytes]] = []
    big = b" " * (256 * 1024)
    # Alone, a large request is written by its caller, and the socket takes only part of it.
    for _ in range(3):
        assert nc.request("mix.req.solo", b" " * (900 * 1024), timeout=10).data == b"-1"
    assert spills[0] > 0, "the partial-write path was not exercised"

    def worker(t: int) -> None:
        for i in range(per_thread):
            body = b"%012d" % i + (big if i % 10 == 0 else b"")
            nc.publish(f"mix.pub.{t}", body)
            reply = nc.request(f"mix.req.{t}", big if i % 7 == 0 else b"", timeout=10)
            if int(reply.data) != i:
                bad.append((t, i, reply.data))

    errors = _run_threads(worker, n_threads, 80)
    assert not errors, errors[:3]
    assert not bad, f"a request overtook the publish before it: {bad[:5]}"


@pytest.mark.parametrize("slow_look", [False, True], ids=["plain", "switch-after-the-look"])
def test_every_publish_leaves_without_a_flush(
    nats_server: NatsServer, clients: Callable[..., Client], monkeypatch: pytest.MonkeyPatch, slow_look: bool
) -> None:
    """A publish takes no lock: it appends to the core's queue and wakes the I/O thread only
    if that thread is idle. A wake-up lost between the I/O thread's last look for work and its
    sleep would leave a message queued until something else woke it (the next keep-alive PING,
    minutes later). Single messages from several threads, with pauses that let the I/O thread
    park in between, must each arrive promptly without any flush. The second run makes every
    look for work end with a thread switch, right where a lost wake-up would happen."""
    if slow_look:
        look = Session.has_work.fget
        assert look is not None

        def look_then_switch(session: Session) -> bool:
            work = look(session)
            time.sleep(0.0002)
            return work

        monkeypatch.setattr(Session, "has_work", property(look_then_switch))
    nc = clients(nats_server.url)
    reader = clients(nats_server.url)
    arrived: dict[str, threading.Event] = {}
    guard = threading.Lock()

    def on_msg(msg: Msg) -> None:
        with guard:
            arrived[msg.data.decode()].set()

    reader.subscribe("park.>", callback=on_msg)
    reader.flush(timeout=2)

    took: list[float] = []

    def publisher(t: int) -> None:
        for i in range(150):
            key = f"{t}-{i}"
            with guard:
                arrived[key] = threading.Event()
            start = time.monotonic()
            nc.publish(f"park.{t}", key.encode())
            if not arrived[key].wait(10.0):
                raise AssertionError(f"message {key} did not leave within 10 s without a flush")
            took.append(time.monotonic() - start)
            time.sleep((i % 4) * 0.0005)

    # (One publisher when every look switches threads: another one's publish would wake the
    # I/O thread and hide a lost wake-up.)
    errors = _run_threads(publisher, 1 if slow_look else 3, 100)
    assert not errors, errors[:3]
    # A lost wake-up waits for the I/O thread's next timer (about half a second here); a
    # loaded machine may delay a message or two as much.
    slow = [t for t in took if t > 0.25]
    assert len(slow) <= 3, f"{len(slow)} of {len(took)} messages took over 0.25 s to leave: {slow[:10]}"


def test_without_a_gil_publishes_take_the_lock(
    nats_server: NatsServer, clients: Callable[..., Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a Python without a GIL the lock-free path must decline every publish (its one append
    is atomic only under the GIL): everything then goes the locked way, and still arrives."""
    import jssync.client as client_module

    monkeypatch.setattr(client_module, "_SUBMIT_CAP", -(1 << 62))
    nc = clients(nats_server.url)
    reader = clients(nats_server.url)
    sub = reader.subscribe("nogil.x")
    reader.flush(timeout=2)
    submit = nc._conn.submit
    taken: list[bool] = []

    def spy(subject: str, payload: bytes) -> bool:
        taken.append(submit(subject, payload))
        return taken[-1]

    monkeypatch.setattr(nc._conn, "submit", spy)
    for i in range(200):
        nc.publish("nogil.x", b"%d" % i)
    nc.flush(timeout=5)
    assert [int(sub.next_msg(timeout=5).data) for _ in range(200)] == list(range(200))
    assert taken and not any(taken), "the lock-free path took a publish"
    assert nc.stats["msgs_out"] == 200
