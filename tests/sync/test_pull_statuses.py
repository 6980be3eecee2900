"""A consume against the scripted fake server, byte for byte: what the client sends after each
status the server may answer a pull with.

The consumer is bound by name (``bind=True``), so the fake server sees no CONSUMER.INFO: only
the consume's SUB and its pulls. TESTPLAN 52 (a 423 with pending headers, a message with two
``Nats-Pin-Id`` headers) and ADR-37's recovery rules (an unknown 409 and an unknown code are
warnings followed by a re-pull with backoff; "Exceeded ..." re-pulls at once).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from jscore import pull as P
from jscore.errors import PullRequestLimitError, PullStatusError
from jssync import Client
from tests.integration import EventLog, clients, wait_until
from tests.support.fakeserver import FakeConn, FakeServer

__all__ = ["clients"]

pytestmark = pytest.mark.timeout(60)

NEXT = b"PUB $JS.API.CONSUMER.MSG.NEXT.S.C "


class Pulls:
    """The consume's inbox sid and its pull requests as the fake server reads them."""

    def __init__(self, conn: FakeConn) -> None:
        self.conn = conn
        sub = conn.expect(b"SUB _INBOX.")
        self.inbox = sub.split()[1].decode()
        self.sid = int(sub.split()[-1])

    def next(self, timeout: float = 5.0) -> dict[str, Any]:
        frame = self.conn.expect(NEXT, timeout)
        line, _, payload = frame.partition(b"\r\n")
        assert line.split()[2].decode() == self.inbox
        body: dict[str, Any] = json.loads(payload.rstrip(b"\r\n"))
        return body

    def none(self, wait: float) -> None:
        with pytest.raises(TimeoutError):
            self.conn.expect(NEXT, wait)

    def status(self, code: int, description: str, **headers: int) -> None:
        block = f"NATS/1.0 {code} {description}\r\n".encode()
        for k, v in headers.items():
            block += f"{k}: {v}\r\n".encode()
        self.conn.send_msg(self.inbox, self.sid, b"", headers=block + b"\r\n")

    def user(self, n: int, *pins: str) -> None:
        block = b"NATS/1.0\r\n" + b"".join(f"Nats-Pin-Id: {p}\r\n".encode() for p in pins) + b"\r\n"
        self.conn.send_msg(self.inbox, self.sid, b"m%d" % n, reply=f"$JS.ACK.S.C.1.{n}.{n}.1700000000000000000.0",
                           headers=block)


def _consume(fake: FakeServer, clients: Callable[..., Client], **options: Any) -> tuple[Any, Pulls, EventLog, list[bytes]]:
    nc = clients(fake.url)
    conn = fake.accept()
    conn.handshake()
    got: list[bytes] = []
    log = EventLog()
    c = nc.jetstream().consumer("S", "C", bind=True)
    cc = c.consume(lambda m: got.append(m.data), on_event=log, expires=5.0, heartbeat=1.0, **options)
    return cc, Pulls(conn), log, got


def test_423_with_pending_headers_and_two_pin_headers(fake_server: FakeServer, clients: Callable[..., Client]) -> None:
    """TESTPLAN 52: the last Nats-Pin-Id counts; a 423 clears it, subtracts its pending and
    re-pulls at once without ``id``."""
    cc, pulls, log, got = _consume(fake_server, clients, max_messages=10, group="jobs")
    first = pulls.next()
    assert first["batch"] == 10 and first["group"] == "jobs" and "id" not in first
    pulls.user(1, "A", "B")
    wait_until(lambda: got == [b"m1"], 2.0)
    pulls.status(408, "Request Timeout", **{"Nats-Pending-Messages": 9, "Nats-Pending-Bytes": 0})
    second = pulls.next()
    assert second["id"] == "B" and second["batch"] == 10
    t0 = time.monotonic()
    pulls.status(423, "Nats-Wrong-Pin-Id", **{"Nats-Pending-Messages": 10, "Nats-Pending-Bytes": 0})
    third = pulls.next(timeout=1.0)
    assert time.monotonic() - t0 < 0.5  # at once
    assert "id" not in third and third["batch"] == 10 and third["group"] == "jobs"
    # (notifications reach on_event on the consume's dispatcher thread: maybe after the pull)
    wait_until(lambda: len(log.events) >= 2, 2.0)
    assert [type(e).__name__ for e in log.events] == ["PinIdChanged", "PinIdCleared"]
    assert log.of(P.PinIdChanged)[0].pin_id == "B"
    assert not cc.closed
    cc.stop()


def test_unknown_statuses_are_recovered_from_with_backoff(
    fake_server: FakeServer, clients: Callable[..., Client]
) -> None:
    """ADR-37: only Consumer Deleted and push based end a consume; an unknown 409 or code is a
    warning, then a re-pull after 1 s, 2 s ... (no spin)."""
    cc, pulls, log, got = _consume(fake_server, clients, max_messages=4)
    assert pulls.next()["batch"] == 4
    t0 = time.monotonic()
    pulls.status(409, "Some Future Reason")
    assert pulls.next(timeout=3.0)["batch"] == 4
    t1 = time.monotonic()
    assert 0.8 <= t1 - t0 <= 2.0
    pulls.status(418, "Teapot")
    pulls.none(1.5)
    assert pulls.next(timeout=2.0)["batch"] == 4
    assert 1.8 <= time.monotonic() - t1 <= 3.5  # the second in a row waits 2 s
    warnings = log.of(P.StatusWarning)
    assert [(w.code, type(w.error)) for w in warnings] == [(409, PullStatusError), (418, PullStatusError)]
    # A message ends the streak; the consume is alive and delivers.
    pulls.user(1)
    wait_until(lambda: got == [b"m1"], 2.0)
    assert not cc.closed and cc.error is None
    cc.stop()


def test_exceeded_max_waiting_re_pulls_at_once(fake_server: FakeServer, clients: Callable[..., Client]) -> None:
    cc, pulls, log, got = _consume(fake_server, clients, max_messages=4)
    pulls.next()
    t0 = time.monotonic()
    pulls.status(409, "Exceeded MaxWaiting")
    assert pulls.next(timeout=1.0)["batch"] == 4
    assert time.monotonic() - t0 < 0.5
    pulls.status(409, "Exceeded MaxWaiting")  # again, before any message: backoff
    pulls.none(0.7)
    assert pulls.next(timeout=2.0)["batch"] == 4
    assert [type(w.error) for w in log.of(P.StatusWarning)] == [PullRequestLimitError, PullRequestLimitError]
    assert not cc.closed
    cc.stop()
