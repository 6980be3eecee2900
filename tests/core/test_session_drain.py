"""A consume's drain on the session: the inbox is unsubscribed at once, but what the server sent
before it saw the UNSUB still reaches the consume (the server counts those messages delivered,
pending an ack). The consume ends only after the PONG of the flush behind the UNSUB, or with
the connection."""

from __future__ import annotations

from typing import Any

from jscore import events as ev
from jscore import pull as P
from jscore.session import Session
from tests.core.test_connection import client_frames
from tests.core.test_session_settle import connected, frames


def consume(s: Session) -> tuple[int, list[Any], P.ConsumeMachine]:
    m = P.ConsumeMachine(P.resolve_consume_options(max_messages=10, expires=30.0, heartbeat=5.0), 0.0)
    got: list[Any] = []
    slot = s.attach(m, got.append, 0.0, target="$JS.API.CONSUMER.MSG.NEXT.S.C")
    s.data_to_send()
    return slot, got, m


def delivered(got: list[Any]) -> list[bytes]:
    out: list[bytes] = []
    for e in got:
        if isinstance(e, P.MessageDelivered):
            out.append(e.msg.data)
        elif isinstance(e, P.MessagesDelivered):
            out += [m.data for m in e.msgs]
    return out


def ended(got: list[Any]) -> bool:
    return any(isinstance(e, P.ConsumeTerminated) for e in got)


def test_a_drain_with_an_empty_buffer_delivers_what_was_in_flight_and_ends_at_its_fence() -> None:
    s = connected()
    slot, got, m = consume(s)
    inbox, sid = s.inbox_of(slot), s._slots[slot].sid
    s.command(slot, P.Drain(), 1.0)
    wire = client_frames(s.data_to_send())
    assert ("UNSUB", sid, None) in wire and wire[-1] == ("PING",), wire  # the UNSUB, then its fence
    assert not ended(got) and s.has_route(sid)
    # Sent by the server before it read the UNSUB: still the consume's.
    s.receive_data(frames(inbox, sid, [b"a", b"b"]), 1.1)
    assert delivered(got) == [b"a", b"b"] and not ended(got)
    s.command(slot, P.MessagesTaken(count=2, size=m.buffered_bytes), 1.2)
    assert not ended(got), "ended before the fence: more may be on its way"
    s.receive_data(b"PONG\r\n", 1.3)
    assert ended(got) and [e for e in got if isinstance(e, P.ConsumeTerminated)][0].reason == "drained"
    assert not s.has_route(sid) and not s.conn.has_subscription(sid)
    assert s.next_event() is None  # (the fence's FlushCompleted is the session's own)


def test_a_drain_with_messages_buffered_at_its_fence_ends_on_the_last_take() -> None:
    s = connected()
    slot, got, m = consume(s)
    inbox, sid = s.inbox_of(slot), s._slots[slot].sid
    s.receive_data(frames(inbox, sid, [b"a"]), 0.5)
    s.command(slot, P.Drain(), 1.0)
    s.data_to_send()
    s.receive_data(b"PONG\r\n", 1.1)
    assert not ended(got) and not s.has_route(sid)
    s.receive_data(frames(inbox, sid, [b"late"]), 1.2)  # (the server cannot send it: ignored)
    assert delivered(got) == [b"a"]
    s.command(slot, P.MessagesTaken(count=1, size=m.buffered_bytes), 1.3)
    assert ended(got)


def test_a_drain_ends_with_the_connection_its_inbox_died_with() -> None:
    s = connected()
    slot, got, _ = consume(s)
    sid = s._slots[slot].sid
    s.command(slot, P.Drain(), 1.0)
    s.data_to_send()
    s.connection_lost(1.1, ConnectionResetError("cut"))
    assert ended(got) and not s.has_route(sid) and not s.conn.has_subscription(sid)
    events = []
    while (e := s.next_event()) is not None:
        events.append(e)
    assert any(isinstance(e, ev.Disconnected) for e in events)


def test_a_drain_while_disconnected_ends_at_once_and_a_second_drain_changes_nothing() -> None:
    s = connected()
    slot, got, _ = consume(s)
    s.command(slot, P.Drain(), 1.0)
    s.command(slot, P.Drain(), 1.0)  # (one fence is enough)
    assert client_frames(s.data_to_send()).count(("PING",)) == 1
    s2 = connected()
    slot2, got2, _ = consume(s2)
    s2.connection_lost(0.5, ConnectionResetError("cut"))
    s2.command(slot2, P.Drain(), 1.0)
    assert ended(got2)


def test_a_drain_cut_short_by_the_close_still_ends_drained() -> None:
    s = connected()
    slot, got, _ = consume(s)
    s.command(slot, P.Drain(), 1.0)
    s.data_to_send()
    s.handle(ev.Close(), 1.1)
    s.data_to_send()
    s.connection_lost(1.2, None)
    [end] = [e for e in got if isinstance(e, P.ConsumeTerminated)]
    assert end.error is None and end.reason == "drained"
