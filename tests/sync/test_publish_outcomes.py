"""The publish-outcome policy through the blocking client, against the scripted fake server.

The fake server plays the stream: it reads the client's HPUB frames and answers each one on
its reply subject, byte for byte as nats-server would (a PubAck, an API error, the empty
``NATS/1.0 503`` of no responders), or not at all, or drops the connection. Two defects the
core policy fixes, each reproduced here as it was measured on an R3 cluster:

* a publish whose first copy was stored (its ack lost with the connection) and whose re-send
  met 503 during the leader election was settled as ``NoStreamResponseError`` ("definitely
  not stored");
* a PubAck arriving while the publish waited for its re-send was dropped as late.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from jscore.errors import NoStreamResponseError, PubAckTimeoutError
from jssync import Client
from tests.integration import clients
from tests.support.fakeserver import FakeConn, FakeServer

__all__ = ["clients"]

pytestmark = pytest.mark.timeout(60)

NO_RESPONDERS = b"NATS/1.0 503\r\n\r\n"
IN_PROCESS = b'{"error":{"code":409,"err_code":10158,"description":"duplicate message id is in process"}}'


def _connected(fake: FakeServer, clients: Callable[..., Client], **options: Any) -> tuple[Client, FakeConn]:
    nc = clients(fake.url, **options)
    conn = fake.accept()
    conn.handshake()
    return nc, conn


def _ack_inbox(conn: FakeConn) -> int:
    """The sid of the context's PubAck inbox subscription (``SUB _INBOX.<x>.* <sid>``)."""
    frame = conn.expect(b"SUB _INBOX.")
    return int(frame.split()[-1])


def _published(conn: FakeConn, subject: str, timeout: float = 5.0) -> str:
    """The reply subject of the next HPUB to ``subject``."""
    frame = conn.expect(b"HPUB " + subject.encode() + b" ", timeout)
    return frame.split()[2].decode()


def test_publish_async_stored_before_a_disconnect_then_503_is_not_a_definite_failure(
    fake_server: FakeServer, clients: Callable[..., Client]
) -> None:
    """Stored, ack lost with the connection; after the reconnect the re-send meets 503 four
    times (the stream's leader is being elected), then the new leader answers duplicate."""
    nc, conn = _connected(fake_server, clients)
    js = nc.jetstream(timeout=5.0)
    js.configure_publish(retry_wait=0.05)  # budget: 5 s * (2 + 1)
    fut = js.publish_async("orders.new", b"1", msg_id="m1")
    sid = _ack_inbox(conn)
    reply = _published(conn, "orders.new")
    assert sid > 0
    conn.close()  # the first copy was stored; its PubAck is lost with the connection

    conn2 = fake_server.accept()
    conn2.handshake()
    sid2 = _ack_inbox(conn2)  # the inbox is replayed
    for _ in range(4):
        assert _published(conn2, "orders.new") == reply  # the same frame, the same reply token
        conn2.send_msg(reply, sid2, b"", headers=NO_RESPONDERS)
    assert _published(conn2, "orders.new") == reply
    conn2.send_msg(reply, sid2, b'{"stream":"ORDERS","seq":1,"duplicate":true}')
    ack = fut.result(timeout=5)
    assert (ack.stream, ack.seq, ack.duplicate) == ("ORDERS", 1, True)
    assert js._pub().stats.failed == 0


def test_publish_async_in_doubt_ends_ambiguous_when_503_outlasts_the_budget(
    fake_server: FakeServer, clients: Callable[..., Client]
) -> None:
    nc, conn = _connected(fake_server, clients)
    js = nc.jetstream(timeout=5.0)
    js.configure_publish(ack_timeout=0.5, retry_attempts=1, retry_wait=0.05)  # budget 1 s
    fut = js.publish_async("orders.new", b"1", msg_id="m1")
    _ack_inbox(conn)
    _published(conn, "orders.new")
    conn.close()

    conn2 = fake_server.accept()
    conn2.handshake()
    sid2 = _ack_inbox(conn2)
    answered = 0
    while not fut.done():
        try:
            reply = _published(conn2, "orders.new", timeout=0.5)
        except TimeoutError:
            continue
        conn2.send_msg(reply, sid2, b"", headers=NO_RESPONDERS)
        answered += 1
    err = fut.exception(timeout=1)
    assert isinstance(err, PubAckTimeoutError), repr(err)  # ambiguous: maybe stored
    assert not isinstance(err, NoStreamResponseError)
    assert isinstance(err.__cause__, NoStreamResponseError)
    assert answered >= 3


def test_publish_async_ack_while_waiting_for_the_resend_settles_it(
    fake_server: FakeServer, clients: Callable[..., Client]
) -> None:
    """A 503 puts the publish in backoff; the PubAck of an earlier copy arrives meanwhile."""
    nc, conn = _connected(fake_server, clients)
    js = nc.jetstream(timeout=5.0)
    js.configure_publish(retry_wait=2.0)
    fut = js.publish_async("orders.new", b"1", msg_id="m1")
    sid = _ack_inbox(conn)
    reply = _published(conn, "orders.new")
    conn.send_msg(reply, sid, b"", headers=NO_RESPONDERS)
    conn.send_msg(reply, sid, b'{"stream":"ORDERS","seq":5}')
    ack = fut.result(timeout=1.0)  # not 2 s later after a re-send: now
    assert (ack.seq, ack.duplicate) == (5, False)
    with pytest.raises(TimeoutError):
        conn.expect(b"HPUB orders.new ", timeout=2.5)  # and nothing is sent again
    assert js.publish_async_pending == 0


def test_sync_publish_in_process_then_503_is_ambiguous(fake_server: FakeServer, clients: Callable[..., Client]) -> None:
    """js.publish follows the same policy: after "in process" (maybe stored) the publish may
    not end as "definitely not stored", whatever comes next."""
    nc, conn = _connected(fake_server, clients)
    js = nc.jetstream(timeout=5.0)
    js.configure_publish(retry_wait=0.05)
    box: list[BaseException | None] = []

    def publish() -> None:
        try:
            js.publish("orders.new", b"1", msg_id="m1", timeout=1.5)
            box.append(None)
        except BaseException as exc:  # noqa: BLE001
            box.append(exc)

    t = threading.Thread(target=publish)
    t.start()
    sid = _ack_inbox(conn)
    reply = _published(conn, "orders.new")
    conn.send_msg(reply, sid, IN_PROCESS)
    while t.is_alive():
        try:
            reply = _published(conn, "orders.new", timeout=0.3)
        except TimeoutError:
            continue
        conn.send_msg(reply, sid, b"", headers=NO_RESPONDERS)
    t.join(5)
    [err] = box
    assert isinstance(err, PubAckTimeoutError) and not isinstance(err, NoStreamResponseError), repr(err)


def test_sync_publish_resent_after_503_until_stored(fake_server: FakeServer, clients: Callable[..., Client]) -> None:
    nc, conn = _connected(fake_server, clients)
    js = nc.jetstream(timeout=5.0)
    js.configure_publish(retry_wait=0.05)
    box: list[Any] = []
    t = threading.Thread(target=lambda: box.append(js.publish("orders.new", b"1", timeout=5)))
    t.start()
    sid = _ack_inbox(conn)
    for _ in range(3):  # no msg id: 503 proves nobody took it, so it is sent again all the same
        frame = conn.expect(b"PUB orders.new ")
        conn.send_msg(frame.split()[2].decode(), sid, b"", headers=NO_RESPONDERS)
    frame = conn.expect(b"PUB orders.new ")
    conn.send_msg(frame.split()[2].decode(), sid, b'{"stream":"ORDERS","seq":3}')
    t.join(5)
    assert box and box[0].seq == 3
