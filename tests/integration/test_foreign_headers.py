"""Messages other clients can store that jssync would not send itself, against a real
nats-server: header values with control characters, and a subject with one (a raw,
non-pedantic publish). The server passes header blocks through unread, so such a message
reaches every subscriber and consumer; it is delivered as it is, and the connection stays up
(it used to be taken for a protocol error: the connection was dropped, and a redelivered
message dropped it again and again).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from urllib.parse import urlparse

import pytest

import jssync
from jscore.errors import BadHeaderError
from jscore.models import StorageType
from jssync import Client
from tests.integration._jspull import unique

pytestmark = pytest.mark.timeout(60)


class RawPublisher:
    """A plain socket speaking the protocol by hand, as a client that checks nothing would."""

    def __init__(self, url: str) -> None:
        u = urlparse(url)
        self.sock = socket.create_connection((u.hostname or "127.0.0.1", u.port or 4222), timeout=5)
        self.buf = b""
        self._line()  # INFO
        self.sock.sendall(b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"protocol":1}\r\nPING\r\n')
        assert self._line() == b"PONG"

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            assert chunk, "the server closed the connection"
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line

    def hpub(self, subject: bytes, block: bytes, payload: bytes) -> None:
        self.sock.sendall(b"HPUB %s %d %d\r\n%s%s\r\n" % (subject, len(block), len(block) + len(payload), block, payload))

    def pub(self, subject: bytes, payload: bytes) -> None:
        self.sock.sendall(b"PUB %s %d\r\n%s\r\n" % (subject, len(payload), payload))

    def flush(self) -> None:
        self.sock.sendall(b"PING\r\n")
        while (line := self._line()) != b"PONG":
            assert not line.startswith(b"-ERR"), line

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def raw(nats_url: str) -> Iterator[RawPublisher]:
    p = RawPublisher(nats_url)
    yield p
    p.close()


@pytest.fixture
def nc(nats_url: str) -> Iterator[Client]:
    with jssync.connect(nats_url) as c:
        yield c


def test_a_subscriber_gets_a_header_value_with_control_characters(nc: Client, raw: RawPublisher) -> None:
    subject = unique("ctl").lower()
    sub = nc.subscribe(subject)
    nc.flush()
    raw.hpub(subject.encode(), b"NATS/1.0\r\nX-Odd: a\x01b\x7f\r\nX-Fine: yes\r\n\r\n", b"one")
    raw.pub(subject.encode(), b"two")
    raw.flush()
    first = sub.next_msg(timeout=5)
    assert first.data == b"one"
    assert first.headers is not None
    assert first.headers["X-Odd"] == "a\x01b\x7f"
    assert first.headers["X-Fine"] == "yes"
    assert sub.next_msg(timeout=5).data == b"two"  # the same connection, still up
    assert nc.stats["reconnects"] == 0
    # Sending such a value is still refused, before anything is sent.
    with pytest.raises(BadHeaderError):
        nc.publish(subject, b"x", headers=first.headers)


def test_consumers_and_direct_gets_read_what_other_clients_stored(nc: Client, raw: RawPublisher) -> None:
    js = nc.jetstream()
    name = unique("CTL")
    prefix = name.lower()
    stream = js.create_stream(name=name, subjects=[f"{prefix}.>"], storage=StorageType.MEMORY, allow_direct=True)
    odd_subject = f"{prefix}.b\x01c"
    raw.hpub(f"{prefix}.a".encode(), b"NATS/1.0\r\nX-Odd: \x1b[0m\r\n\r\n", b"with header")
    raw.pub(odd_subject.encode(), b"odd subject")
    raw.flush()
    deadline = time.monotonic() + 5
    while stream.info().state.messages < 2:
        assert time.monotonic() < deadline, "the stream did not store both messages"
        time.sleep(0.05)

    # A batched direct get carries the stored subject in a header (Nats-Subject).
    got = {m.subject: m for m in stream.direct_get_last_for([f"{prefix}.*"])}
    assert set(got) == {f"{prefix}.a", odd_subject}
    assert got[odd_subject].data == b"odd subject"
    assert got[f"{prefix}.a"].headers is not None and got[f"{prefix}.a"].headers["X-Odd"] == "\x1b[0m"
    assert [m.subject for m in stream.direct_get_batch(seq=1, batch=10)] == [f"{prefix}.a", odd_subject]

    # A consumer gets both, acks them, and the connection never dropped.
    consumer = js.create_consumer(name, durable_name="c", ack_policy="explicit")
    msgs = list(consumer.fetch(2, expires=5))
    assert [m.data for m in msgs] == [b"with header", b"odd subject"]
    assert msgs[0].headers is not None and msgs[0].headers["X-Odd"] == "\x1b[0m"
    assert msgs[1].subject == odd_subject
    for m in msgs:
        m.ack_sync()
    assert consumer.info().num_ack_pending == 0
    assert nc.stats["reconnects"] == 0
