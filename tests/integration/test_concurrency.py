"""One client shared by many threads against a real nats-server."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

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
