"""The session feeds a machine every message of one read, then acts on what it decided (its
events, its end, its deadline) once: the order each sink sees, the end of a machine in the
middle of a read, and a machine that breaks after delivering some messages."""

from __future__ import annotations

import json
import random
from typing import Any

from jscore import pull as P
from jscore.connection import ConnectOptions
from jscore.machine import MachineFailed, SendRequested
from jscore.pull import AckNextRequested, PullRequested
from jscore.protocol import MsgReceived
from jscore.session import Session


def connected() -> Session:
    s = Session(ConnectOptions(servers=("nats://127.0.0.1:4222",), ping_interval=1000.0), rng=random.Random(7))
    s.start(0.0)
    while s.next_event() is not None:
        pass
    s.connection_made(0.0)
    s.receive_data(b"INFO " + json.dumps({"max_payload": 1 << 20, "headers": True}).encode() + b"\r\n", 0.0)
    s.data_to_send()
    s.receive_data(b"PONG\r\n", 0.0)
    while s.next_event() is not None:
        pass
    return s


def frames(inbox: str, sid: int, bodies: list[bytes]) -> bytes:
    return b"".join(
        b"MSG %s %d $JS.ACK.S.c.1.%d.%d.1764040102424187740.0 %d\r\n%s\r\n" % (inbox.encode(), sid, i, i, len(b), b)
        for i, b in enumerate(bodies, 1)
    )


class Recorder:
    """A machine that queues one event per message and breaks on the message ``breaks_on``."""

    def __init__(self, breaks_on: int = 0) -> None:
        self.seen = 0
        self.breaks_on = breaks_on
        self.events: list[Any] = []
        self.finished = False

    def receive_msg(self, msg: MsgReceived, now: float) -> None:
        self.seen += 1
        if self.seen == self.breaks_on:
            raise RuntimeError("broken on purpose")
        self.events.append(msg.data)

    def handle(self, command: Any, now: float) -> None:
        pass

    def handle_timeout(self, now: float) -> None:
        pass

    def next_deadline(self) -> float | None:
        return None

    def drain_events(self) -> list[Any]:
        events, self.events = self.events, []
        return events


def attach(s: Session, machine: Any, target: str | None = None) -> tuple[int, list[Any]]:
    got: list[Any] = []
    slot = s.attach(machine, got.append, 0.0, target=target)
    s.data_to_send()
    return slot, got


def test_a_machine_that_breaks_mid_read_first_hands_over_what_came_before() -> None:
    s = connected()
    m = Recorder(breaks_on=3)
    slot, got = attach(s, m)
    s.receive_data(frames(s.inbox_of(slot), s._slots[slot].sid, [b"a", b"b", b"c", b"d"]), 1.0)
    assert got[:2] == [b"a", b"b"]
    assert len(got) == 3 and isinstance(got[2], MachineFailed), got
    assert m.seen == 3  # the message after the break was not routed to it
    assert not s.running(slot)
    assert b"UNSUB" in s.data_to_send()


class Asker(Recorder):
    """A Recorder that also asks for frames per message: a request and a pull for the first, a
    best-effort clean-up and an application's ack for the second."""

    def receive_msg(self, msg: MsgReceived, now: float) -> None:
        super().receive_msg(msg, now)
        if self.seen == 1:
            self.events += [SendRequested(subject="ask.1"), PullRequested(body=b'{"batch":1}', batch=1, max_bytes=0)]
        else:
            self.events += [SendRequested(subject=f"ask.{self.seen}", best_effort=True),
                            AckNextRequested(reply=f"acked.{self.seen}", body=b"+ACK", pull=False)]


def test_a_machine_that_breaks_mid_read_sends_none_of_its_frames_but_its_clean_ups() -> None:
    s = connected()
    m = Asker(breaks_on=3)
    slot, got = attach(s, m, "$JS.API.CONSUMER.MSG.NEXT.S.c")
    s.receive_data(frames(s.inbox_of(slot), s._slots[slot].sid, [b"a", b"b", b"c"]), 1.0)
    assert got[:2] == [b"a", b"b"] and isinstance(got[2], MachineFailed), got
    out = s.data_to_send()
    assert b"PUB ask.2 " in out and b"PUB acked.2 " in out  # the clean-up, the application's ack
    assert b"ask.1" not in out and b"MSG.NEXT" not in out  # what carried the broken operation on
    # A machine that does not break has them all sent.
    ok, _ = attach(s, Asker(), "$JS.API.CONSUMER.MSG.NEXT.S.c")
    s.receive_data(frames(s.inbox_of(ok), s._slots[ok].sid, [b"a", b"b"]), 2.0)
    out = s.data_to_send()
    assert b"PUB ask.1 " in out and b"MSG.NEXT" in out and b"PUB ask.2 " in out and b"PUB acked.2 " in out


def test_two_machines_in_one_read_each_see_their_own_messages_in_order() -> None:
    s = connected()
    a, got_a = attach(s, Recorder())
    b, got_b = attach(s, Recorder())
    sa, sb = s._slots[a].sid, s._slots[b].sid
    data = b"".join(
        frames(s.inbox_of(x), sid, [body])
        for x, sid, body in [(a, sa, b"a1"), (b, sb, b"b1"), (a, sa, b"a2"), (b, sb, b"b2"), (a, sa, b"a3")]
    )
    s.receive_data(data, 1.0)
    assert got_a == [b"a1", b"a2", b"a3"]
    assert got_b == [b"b1", b"b2"]


def test_a_fetch_that_completes_mid_read_ends_there_and_ignores_the_rest() -> None:
    s = connected()
    m = P.FetchMachine(P.resolve_fetch_options(max_messages=2, expires=5.0), 0.0)
    got: list[Any] = []
    slot = s.attach(m, got.append, 0.0, target="$JS.API.CONSUMER.MSG.NEXT.S.c")
    s.data_to_send()
    s.receive_data(frames(s.inbox_of(slot), s._slots[slot].sid, [b"1", b"2", b"3"]), 1.0)
    kinds = [type(e).__name__ for e in got]
    # (a fetch's inbox comes in runs: the two messages it takes are one event)
    assert kinds == ["MessagesDelivered", "FetchFinished"], kinds
    assert [m.data for m in got[0].msgs] == [b"1", b"2"]
    assert m.ignored == 1
    assert not s.running(slot)
    assert s.next_deadline() == s.conn.next_deadline()  # its timers are gone (the ping timer is left)
    assert b"UNSUB" in s.data_to_send()


def test_messages_before_a_connection_loss_reach_the_sink_before_the_loss() -> None:
    s = connected()
    m = P.FetchMachine(P.resolve_fetch_options(max_messages=5, expires=5.0), 0.0)
    got: list[Any] = []
    slot = s.attach(m, got.append, 0.0, target="$JS.API.CONSUMER.MSG.NEXT.S.c")
    s.data_to_send()
    # Two messages, then the server's fatal error in the same read, then the transport closes.
    s.receive_data(frames(s.inbox_of(slot), s._slots[slot].sid, [b"1", b"2"]) + b"-ERR 'Stale Connection'\r\n", 1.0)
    s.connection_lost(1.1)
    kinds = [type(e).__name__ for e in got]
    assert kinds == ["MessagesDelivered", "FetchFinished"], kinds
    assert [m.data for m in got[0].msgs] == [b"1", b"2"]
    assert got[1].error is not None


class BreakingOrdered(Recorder):
    """An ordered machine as the watcher sees it, breaking on its third message: from then on
    every call but drain_events raises, as OrderedMachine's do."""

    def __init__(self) -> None:
        super().__init__()
        self.error: BaseException | None = None

    @property
    def broken(self) -> bool:
        return self.error is not None

    def receive_msg(self, msg: MsgReceived, now: float) -> None:
        from jscore.errors import LocalProtocolError
        from jscore.jsmsg import parse_ack_subject
        from jscore.ordered import OrderedMessageDelivered

        if self.error is not None:
            raise LocalProtocolError("broken by an earlier error")
        self.seen += 1
        if self.seen == 3:
            self.error = RuntimeError("broken on purpose")
            raise self.error
        assert msg.reply is not None
        self.events.append(OrderedMessageDelivered(msg=msg, metadata=parse_ack_subject(msg.reply)))

    def receive_msgs(self, run: Any, now: float) -> None:
        for msg in run.msgs:  # (a run means its messages one by one, as for OrderedMachine)
            self.receive_msg(msg, now)

    def handle(self, command: Any, now: float) -> None:
        from jscore.errors import LocalProtocolError

        if self.error is not None:
            raise LocalProtocolError(f"broken by an earlier error: {self.error!r}")


def test_a_watcher_that_breaks_mid_read_hands_over_the_earlier_changes_and_the_real_error() -> None:
    from jscore.watch import WatchChanged, WatchMachine, WatchOptions, WatchState

    class Items(WatchState[bytes]):
        def item(self, subject: str, data: bytes, headers: Any, stream_seq: int, timestamp: Any, num_pending: int) -> bytes | None:
            return None if data == b"del" else data  # a delivery the application does not get

    s = connected()
    got: list[Any] = []
    inner = BreakingOrdered()
    slot = s.attach(WatchMachine(inner, Items(WatchOptions()), 0.0), got.append, 0.0)  # type: ignore[arg-type]
    s.data_to_send()
    s.receive_data(frames(s.inbox_of(slot), s._slots[slot].sid, [b"put1", b"del", b"x"]), 1.0)
    changes = [e.entry for e in got if isinstance(e, WatchChanged)]
    assert changes[0] == b"put1"
    assert isinstance(got[-1], MachineFailed) and got[-1].error is inner.error, got


def test_a_machine_that_breaks_inside_a_run_is_ended_even_when_the_sink_raises() -> None:
    class RunRecorder(Recorder):
        def receive_msgs(self, run: Any, now: float) -> None:
            for msg in run.msgs:  # (a run means its messages one by one)
                self.receive_msg(msg, now)

    s = connected()
    calls: list[Any] = []

    def sink(e: Any) -> None:
        calls.append(e)
        if len(calls) == 1:
            raise ValueError("a broken sink")

    m = RunRecorder(breaks_on=3)
    slot = s.attach(m, sink, 0.0)
    s.data_to_send()
    sid = s._slots[slot].sid
    try:
        s.receive_data(frames(s.inbox_of(slot), sid, [b"a", b"b", b"c"]), 1.0)
    except ValueError:
        pass
    assert calls[0] == b"a"
    assert slot not in s._slots and sid not in s._routes  # (ended: no broken machine left attached)


def test_a_sink_that_raises_leaves_the_other_machines_to_the_next_read() -> None:
    s = connected()

    def bad(e: Any) -> None:
        raise ValueError("a broken sink")

    a = s.attach(Recorder(), bad, 0.0)
    b, got_b = attach(s, Recorder())
    s.data_to_send()
    data = frames(s.inbox_of(a), s._slots[a].sid, [b"a1"]) + frames(s.inbox_of(b), s._slots[b].sid, [b"b1"])
    try:
        s.receive_data(data, 1.0)
    except ValueError:
        pass
    s.receive_data(frames(s.inbox_of(b), s._slots[b].sid, [b"b2"]), 2.0)
    assert got_b == [b"b1", b"b2"]
