"""A drain against the scripted fake server: the messages the server sent before it read the
UNSUB (the server counts a consume's as delivered, pending an ack) reach the handler, however
empty the client's buffer was when the drain began. The fake server holds its PONGs back, sends
those messages after the UNSUB, then answers."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from jssync import Client
from tests.integration import clients, wait_until
from tests.support.fakeserver import FakeConn, FakeServer

__all__ = ["clients"]

pytestmark = pytest.mark.timeout(60)

FakeFactory = Callable[..., FakeServer]


def _connected(fake_server_factory: FakeFactory, clients: Callable[..., Client]) -> tuple[Client, FakeConn]:
    fake = fake_server_factory(auto_pong=False)
    box: list[Client] = []
    t = threading.Thread(target=lambda: box.append(clients(fake.url)), daemon=True)
    t.start()
    conn = fake.accept()
    conn.handshake()  # (answers the CONNECT's PING)
    t.join(5.0)
    assert box and box[0].is_connected
    return box[0], conn


def test_a_consume_drained_with_an_empty_buffer_still_hands_over_what_was_in_flight(
    fake_server_factory: FakeFactory, clients: Callable[..., Client]
) -> None:
    nc, conn = _connected(fake_server_factory, clients)
    got: list[bytes] = []
    c = nc.jetstream().consumer("S", "C", bind=True)
    cc = c.consume(lambda m: got.append(m.data), expires=5.0, heartbeat=1.0, max_messages=10)
    sub = conn.expect(b"SUB _INBOX.")
    inbox, sid = sub.split()[1].decode(), int(sub.split()[-1])
    conn.expect(b"PUB $JS.API.CONSUMER.MSG.NEXT.S.C ")
    cc.drain()
    assert conn.expect(b"UNSUB ") == b"UNSUB %d\r\n" % sid
    conn.expect(b"PING")
    assert not cc.wait(0.3), "the drain ended before the server had seen its UNSUB"
    for n in (1, 2):
        conn.send_msg(inbox, sid, b"m%d" % n, reply=f"$JS.ACK.S.C.1.{n}.{n}.1700000000000000000.0")
    conn.send(b"PONG\r\n")
    assert cc.wait(5.0) and cc.error is None
    assert got == [b"m1", b"m2"]


def test_a_core_subscription_drain_delivers_what_was_in_flight(
    fake_server_factory: FakeFactory, clients: Callable[..., Client]
) -> None:
    nc, conn = _connected(fake_server_factory, clients)
    got: list[bytes] = []
    sub = nc.subscribe("work", callback=lambda m: got.append(m.data))
    sid = int(conn.expect(b"SUB work ").split()[-1])
    result: list[Any] = []
    t = threading.Thread(target=lambda: result.append(sub.drain(timeout=5.0)), daemon=True)
    t.start()
    assert conn.expect(b"UNSUB ") == b"UNSUB %d\r\n" % sid
    conn.expect(b"PING")
    conn.send_msg("work", sid, b"in flight")
    conn.send(b"PONG\r\nPONG\r\n")  # (the drain's fence, then the flush it waits for)
    t.join(5.0)
    assert result == [None]
    wait_until(lambda: got == [b"in flight"], 2.0, what="the message sent before the UNSUB")


def test_a_client_drain_delivers_what_was_in_flight_to_every_subscription(
    fake_server_factory: FakeFactory, clients: Callable[..., Client]
) -> None:
    nc, conn = _connected(fake_server_factory, clients)
    got: list[bytes] = []
    nc.subscribe("a", callback=lambda m: got.append(m.data))
    nc.subscribe("b", callback=lambda m: got.append(m.data))
    sids = [int(conn.expect(b"SUB %s " % s).split()[-1]) for s in (b"a", b"b")]
    t = threading.Thread(target=lambda: nc.drain(timeout=5.0), daemon=True)
    t.start()
    assert sorted([conn.expect(b"UNSUB "), conn.expect(b"UNSUB ")]) == [b"UNSUB %d\r\n" % sid for sid in sids]
    conn.expect(b"PING")
    conn.send_msg("a", sids[0], b"to a")
    conn.send_msg("b", sids[1], b"to b")
    conn.send(b"PONG\r\n" * 3)  # (both fences, then the drain's flush)
    t.join(5.0)
    assert not t.is_alive() and nc.is_closed
    assert sorted(got) == [b"to a", b"to b"]
