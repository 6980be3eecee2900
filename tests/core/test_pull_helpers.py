"""Builders shared by the tests of jscore.pull (no tests here).

Messages are built directly as the parser would deliver them: ``MsgReceived(subject, sid,
reply, data, headers, status, description, size)``; ``size`` is the server's message size.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, TypeVar

from jscore.headers import Headers
from jscore.protocol import MsgReceived
from jscore.pull import (
    NATS_PENDING_BYTES,
    NATS_PENDING_MESSAGES,
    NATS_PIN_ID,
    ConsumeMachine,
    FetchMachine,
    MessageDelivered,
    PullEvent,
    PullRequested,
)

T = TypeVar("T")

INBOX = "_INBOX.test.1"
ACK = "$JS.ACK.S.C.1.1.1.1700000000000000000.0"


def user(size: int = 100, *, pin: str | Iterable[str] | None = None, headers: Headers | None = None) -> MsgReceived:
    """A user message of ``size`` bytes (server accounting), optionally pinned."""
    if pin is not None:
        headers = headers.copy() if headers is not None else Headers()
        for p in [pin] if isinstance(pin, str) else pin:
            headers.add(NATS_PIN_ID, p)
    return MsgReceived("orders.1", 1, ACK, b"x", headers, None, None, size)


def status(
    code: int,
    description: str | None = None,
    *,
    pending: int | None = None,
    pending_bytes: int | None = None,
    reply: str | None = None,
    raw_pending: str | None = None,
) -> MsgReceived:
    """A status message; ``pending`` / ``pending_bytes`` add the Nats-Pending-* headers (as
    the server sends them: both or none), ``raw_pending`` a verbatim Nats-Pending-Messages."""
    h = Headers()
    if pending is not None or pending_bytes is not None:
        h.add(NATS_PENDING_MESSAGES, str(pending or 0))
        h.add(NATS_PENDING_BYTES, str(pending_bytes or 0))
    if raw_pending is not None:
        h.add(NATS_PENDING_MESSAGES, raw_pending)
    return MsgReceived(INBOX, 1, reply, b"", h, code, description, 0)


def heartbeat() -> MsgReceived:
    h = Headers([("Nats-Last-Consumer", "0"), ("Nats-Last-Stream", "0")])
    return MsgReceived(INBOX, 1, None, b"", h, 100, "Idle Heartbeat", 0)


def events(m: ConsumeMachine | FetchMachine) -> list[PullEvent]:
    return m.drain_events()


def pulls(evs: Iterable[PullEvent]) -> list[PullRequested]:
    return [e for e in evs if isinstance(e, PullRequested)]


def delivered(evs: Iterable[PullEvent]) -> list[MsgReceived]:
    return [e.msg for e in evs if isinstance(e, MessageDelivered)]


def of_type(evs: Iterable[PullEvent], cls: type[T]) -> list[T]:
    return [e for e in evs if isinstance(e, cls)]


def body(ev: PullRequested) -> dict[str, Any]:
    decoded = json.loads(ev.body)
    assert isinstance(decoded, dict)
    return decoded
