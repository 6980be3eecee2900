"""A hypothesis state machine driving one core Session with many sub-machines at once: fetches,
consumes, ordered consumers, batched direct gets, requests and a publish window, through server
messages and statuses, consumer creates, PubAcks, virtual time, disconnects, reconnects and the
final close.

Invariants checked after every step:

* ``next_deadline()`` is exactly the earliest of the connection's and every running machine's
  own deadline (never later than any of them);
* every message a machine delivered was sent to its own inbox (routing by sid);
* nothing reaches a sink after that machine's last event, and a machine that has ended is
  gone from the session (no slot, no route);
* no machine failed (``MachineFailed``), no machine broke its own invariants (pending never
  negative, a fetch never beyond its batch);
* nothing is written to the wire while disconnected, and no pull request leaves for a machine
  that has ended;
* the publish ledger: every publish added to the window is settled exactly once, or still in
  flight; after the close every one is settled and every machine has ended;
* an ordered consumer hands its application stream sequences 1, 2, 3 ... with none skipped or
  repeated, whatever gaps, resets and reconnects happened.
"""

from __future__ import annotations

import json
import random
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from jscore import directget as DG
from jscore import events as ev
from jscore import pull as P
from jscore.connection import ConnectOptions, State
from jscore.machine import MachineFailed, Stop
from jscore.ordered import OrderedConsumerState, OrderedFinished, OrderedMachine, OrderedMessageDelivered
from jscore.pubmachines import PROGRESS, AsyncPublishMachine, PublisherClosed, WatchLevel
from jscore.publish import PENDING, PendingPublish, PublishWindow
from jscore.session import Session
from tests.core.test_connection import client_frames

TARGET = "$JS.API.CONSUMER.MSG.NEXT.S.C"
ACK = "$JS.ACK.S.C.1.{seq}.{seq}.1700000000000000000.0"
TERMINAL = (P.FetchFinished, P.ConsumeTerminated, DG.DirectGetFinished, PublisherClosed, MachineFailed, OrderedFinished)


class Op:
    """One sub-machine on the session, as the test sees it."""

    def __init__(self, kind: str, machine: Any) -> None:
        self.kind = kind
        self.machine = machine
        self.slot = 0
        self.events: list[Any] = []
        self.ended = False
        self.delivered = 0
        self.draining = False  # a consume the test drained
        self.sent = 0  # user messages the server sent to its inbox while it was on the session
        # statuses sent in a burst: one that follows the machine's end in the same read reaches
        # it and is counted in its ``ignored`` (a status on its own after the end is not routed)
        self.burst_statuses = 0
        # ordered: the server consumer the test created for it last, and where it stands
        self.consumer: str | None = None
        self.next_sseq = 1
        self.next_cseq = 1
        self.seqs: list[int] = []  # stream sequences handed to the application

    def sink(self, e: Any) -> None:
        assert not self.ended, f"{self.kind}: event {e!r} after its end"
        self.events.append(e)
        if isinstance(e, TERMINAL):
            self.ended = True
        if e.__class__ is P.MessageDelivered:
            self.delivered += 1
        if e.__class__ is P.MessagesDelivered:
            assert e.msgs, "an empty run"
            self.delivered += len(e.msgs)
        if e.__class__ is OrderedMessageDelivered:
            self.seqs.append(e.metadata.sequence.stream)


class SessionMachine(RuleBasedStateMachine):
    @initialize(seed=st.integers(0, 2**16))
    def setup(self, seed: int) -> None:
        self.now = 0.0
        self.seed = seed
        opts = ConnectOptions(
            servers=("nats://a:4222",),
            reconnect_wait=0.5,
            reconnect_jitter=0.0,
            max_reconnect_attempts=-1,
            ping_interval=1000.0,
            connect_timeout=1.0,
            reconnect_buffer_size=1 << 20,
        )
        self.s = Session(opts, rng=random.Random(seed))
        self.ops: list[Op] = []
        self.entries: list[PendingPublish] = []
        self.settled: dict[int, int] = {}  # id(entry) -> times seen settled
        self.publisher: Op | None = None
        self.requests: list[str] = []
        self.creates: list[tuple[Op, str, str]] = []  # (ordered op, consumer name, reply subject)
        self.ordered_n = 0
        self.replies = 0
        self.seq = 0
        self.closed = False
        self.pings_owed = 0  # PINGs written on this connection and not answered yet
        self.s.start(self.now)
        self.handshake()

    # ------------------------------------------------------------------ plumbing

    @property
    def conn(self) -> Any:
        return self.s.conn

    def events(self) -> list[Any]:
        out = []
        while (e := self.s.next_event()) is not None:
            out.append(e)
            if e.__class__ is ev.ReplyReceived:
                self.replies += 1
        return out

    def wire(self) -> list[tuple[Any, ...]]:
        data = self.s.data_to_send()
        if data:
            assert self.conn.state in (State.AWAIT_INFO, State.AWAIT_PONG, State.CONNECTED, State.CLOSING), (
                f"wrote {data[:60]!r} in state {self.conn.state}"
            )
        frames = client_frames(data)
        self.pings_owed += sum(1 for f in frames if f[0] == "PING")
        for f in frames:
            if f[0] == "PUB" and ".CONSUMER.CREATE." in f[1] and f[2]:
                for o in self.ops:
                    if o.kind == "ordered" and f[2].startswith(self.s.inbox_of(o.slot)):
                        self.creates.append((o, f[1].rsplit(".", 1)[1], f[2]))
        ended_inboxes = {self.s.inbox_of(o.slot) for o in self.ops if o.ended}
        for f in frames:
            if f[0] == "PUB" and f[1] == TARGET:
                assert f[2] not in ended_inboxes or not f[2], "a pull for a machine that ended"
        return frames

    def handshake(self) -> None:
        self.events()
        if self.conn.state is State.WAITING:
            due = self.conn.next_deadline()
            assert due is not None
            self.advance_to(due)
        assert self.conn.state is State.DIALING, self.conn.state
        self.s.connection_made(self.now)
        self.s.receive_data(b"INFO " + json.dumps({"max_payload": 1 << 20, "headers": True}).encode() + b"\r\n", self.now)
        self.wire()
        self.pings_owed = 0  # (the handshake's PING, answered here)
        self.s.receive_data(b"PONG\r\n", self.now)
        assert self.conn.is_connected
        self.events()
        self.wire()

    def advance_to(self, t: float) -> None:
        while (d := self.s.next_deadline()) is not None and d <= t:
            self.now = max(self.now, d)
            self.s.handle_timeout(self.now)
            self.events()
            self.wire()
        self.now = max(self.now, t)

    def attach(self, op: Op, **kw: Any) -> None:
        op.slot = self.s.attach(op.machine, op.sink, self.now, **kw)
        self.ops.append(op)
        self.events()
        self.wire()

    def running(self, kinds: tuple[str, ...]) -> list[Op]:
        return [o for o in self.ops if o.kind in kinds and not o.ended]

    def feed(self, data: bytes) -> None:
        self.s.receive_data(data, self.now)
        self.events()
        self.wire()

    def sid_of(self, op: Op) -> int:
        return self.s._slots[op.slot].sid

    # ------------------------------------------------------------------ operations

    @precondition(lambda self: not self.closed)
    @rule(batch=st.integers(1, 5), expires=st.sampled_from([1.0, 2.0, 5.0]), hb=st.sampled_from([None, 0.5]))
    def start_fetch(self, batch: int, expires: float, hb: float | None) -> None:
        opts = P.resolve_fetch_options(max_messages=batch, expires=expires, heartbeat=hb)
        self.attach(Op("fetch", P.FetchMachine(opts, self.now)), target=TARGET)

    @precondition(lambda self: not self.closed)
    @rule(batch=st.integers(2, 8), hb=st.sampled_from([None, 1.0]))
    def start_consume(self, batch: int, hb: float | None) -> None:
        opts = P.resolve_consume_options(max_messages=batch, expires=5.0, heartbeat=hb)
        self.attach(Op("consume", P.ConsumeMachine(opts, self.now, connected=self.conn.is_connected)), target=TARGET)

    @precondition(lambda self: not self.closed)
    @rule(batch=st.integers(1, 4))
    def start_direct_get(self, batch: int) -> None:
        options = DG.resolve_batch(1, batch=batch)
        self.attach(Op("direct", DG.DirectGetBatch("$JS.API.DIRECT.GET.S", options, timeout=2.0, now=self.now)))

    @precondition(lambda self: not self.closed)
    @rule(fetch=st.booleans(), hb=st.sampled_from([None, 1.0]))
    def start_ordered(self, fetch: bool, hb: float | None) -> None:
        self.ordered_n += 1
        state = OrderedConsumerState("S", None, name_prefix=f"O{self.ordered_n}")
        opts: Any = (
            P.resolve_fetch_options(max_messages=5, expires=3.0, heartbeat=hb)
            if fetch
            else P.resolve_consume_options(max_messages=5, expires=5.0, heartbeat=hb)
        )
        m = OrderedMachine(state, opts, self.now, request_timeout=2.0, connected=self.conn.is_connected)
        self.attach(Op("ordered", m), wildcard=True)

    @precondition(lambda self: self.conn.is_connected and any(not o.ended for o, _, _ in self.creates))
    @rule(data=st.data(), fail=st.sampled_from([False, False, False, True]))
    def ordered_create_reply(self, data: st.DataObject, fail: bool) -> None:
        pending = [c for c in self.creates if not c[0].ended]
        op, name, reply = data.draw(st.sampled_from(pending))
        self.creates.remove((op, name, reply))
        if fail:
            body = json.dumps({"error": {"code": 503, "err_code": 10008, "description": "JetStream system temporarily unavailable"}}).encode()
        else:
            op.consumer = name
            op.next_sseq = (op.seqs[-1] + 1) if op.seqs else 1
            op.next_cseq = 1
            body = json.dumps({"stream_name": "S", "name": name, "config": {"ack_policy": "none"},
                               "delivered": {"consumer_seq": 0, "stream_seq": op.next_sseq - 1}}).encode()
        self.feed(b"MSG %s %d %d\r\n%s\r\n" % (reply.encode(), self.sid_of(op), len(body), body))

    @precondition(lambda self: self.conn.is_connected and any(o.consumer for o in self.running(("ordered",))))
    @rule(data=st.data(), gap=st.sampled_from([0, 0, 0, 0, 1]))
    def ordered_message(self, data: st.DataObject, gap: int) -> None:
        op = data.draw(st.sampled_from([o for o in self.running(("ordered",)) if o.consumer]))
        # (a gap: the server lost a delivery, so the consumer sequence skips one; a stream
        # sequence that skips alone is not a gap: a filter or a deleted message)
        sseq, cseq = op.next_sseq + gap, op.next_cseq + gap
        op.next_sseq, op.next_cseq = sseq + 1, cseq + 1
        reply = f"$JS.ACK.S.{op.consumer}.1.{sseq}.{cseq}.1700000000000000000.0"
        self.feed(b"MSG s.a %d %s 1\r\nx\r\n" % (self.sid_of(op), reply.encode()))

    @precondition(lambda self: not self.closed)
    @rule(n=st.integers(1, 5), msg_id=st.booleans())
    def publish_async(self, n: int, msg_id: bool) -> None:
        if self.publisher is None or self.publisher.ended:
            m = AsyncPublishMachine(
                PublishWindow(ack_timeout=2.0, retry_attempts=1, retry_wait=0.3),
                PublishWindow(ack_timeout=2.0, max_pending=1 << 20),
                gen=self.conn.stats.reconnects,
                connected=self.conn.is_connected,
            )
            op = Op("publish", m)
            self.attach(op, wildcard=True)
            m.set_prefix(self.s.inbox_of(op.slot))
            self.publisher = op
        m = self.publisher.machine
        window = m.window
        for _ in range(n):
            entry = PendingPublish("orders.new", b"x", None, f"id{len(self.entries)}" if msg_id else None)
            entry.watched = True  # (the ledger counts the settled entries the machine hands over)
            first = not window.pending
            token = window.next_token()
            window.add(entry, self.now, m.gen if m.connected else m.gen + 1, token)
            self.conn.publish_inbox("orders.new", b"x", (m.prefix + token).encode())
            self.entries.append(entry)
            if first:
                self.s.touch(self.publisher.slot)
        self.events()
        self.wire()

    @precondition(lambda self: not self.closed)
    @rule()
    def request(self) -> None:
        token = self.s.handle(ev.Request(subject="svc.echo", payload=b"ping"), self.now)
        self.requests.append(token)
        self.events()
        self.wire()

    # ------------------------------------------------------------------ the server

    @precondition(lambda self: self.conn.is_connected and self.running(("fetch", "consume")))
    @rule(data=st.data(), size=st.integers(0, 20))
    def server_message(self, data: st.DataObject, size: int) -> None:
        op = data.draw(st.sampled_from(self.running(("fetch", "consume"))))
        self.seq += 1
        inbox = self.s.inbox_of(op.slot)
        reply = ACK.format(seq=self.seq)
        payload = b"m" * size
        if op.slot in self.s._slots and self.sid_of(op):  # (a drained inbox is gone)
            op.sent += 1
        self.feed(b"MSG %s %d %s %d\r\n%s\r\n" % (inbox.encode(), self.sid_of(op), reply.encode(), size, payload))

    @precondition(lambda self: self.conn.is_connected and self.running(("fetch", "consume")))
    @rule(data=st.data(), n=st.integers(2, 8))
    def server_burst(self, data: st.DataObject, n: int) -> None:
        """Several messages and statuses for the running pulls in one read: the session feeds
        them all, then acts on what each machine decided (a fetch may end in the middle)."""
        ops = self.running(("fetch", "consume"))
        chunks = []
        for _ in range(n):
            op = data.draw(st.sampled_from(ops))
            inbox = self.s.inbox_of(op.slot).encode()
            if data.draw(st.integers(0, 4)) == 0:
                hdr = data.draw(st.sampled_from([b"NATS/1.0 100 Idle Heartbeat\r\n\r\n", b"NATS/1.0 408 Request Timeout\r\n\r\n"]))
                chunks.append(b"HMSG %s %d %d %d\r\n%s\r\n" % (inbox, self.sid_of(op), len(hdr), len(hdr), hdr))
                op.burst_statuses += 1
                continue
            self.seq += 1
            if op.slot in self.s._slots and self.sid_of(op):  # (a drained inbox is gone)
                op.sent += 1
            reply = ACK.format(seq=self.seq).encode()
            chunks.append(b"MSG %s %d %s 1\r\nm\r\n" % (inbox, self.sid_of(op), reply))
        self.feed(b"".join(chunks))

    @precondition(lambda self: self.conn.is_connected and self.running(("fetch", "consume")))
    @rule(
        data=st.data(),
        status=st.sampled_from([
            b"100 Idle Heartbeat",
            b"404 No Messages",
            b"408 Request Timeout",
            b"409 Leadership Change",
            b"409 Batch Completed",
            b"503",
        ]),
        pending=st.booleans(),
    )
    def server_status(self, data: st.DataObject, status: bytes, pending: bool) -> None:
        op = data.draw(st.sampled_from(self.running(("fetch", "consume"))))
        hdr = b"NATS/1.0 " + status + b"\r\n"
        if pending:
            hdr += b"Nats-Pending-Messages: 1\r\nNats-Pending-Bytes: 0\r\n"
        hdr += b"\r\n"
        inbox = self.s.inbox_of(op.slot)
        self.feed(b"HMSG %s %d %d %d\r\n%s\r\n" % (inbox.encode(), self.sid_of(op), len(hdr), len(hdr), hdr))

    @precondition(lambda self: self.conn.is_connected and self.running(("direct",)))
    @rule(data=st.data(), end=st.booleans())
    def direct_get_reply(self, data: st.DataObject, end: bool) -> None:
        op = data.draw(st.sampled_from(self.running(("direct",))))
        inbox = self.s.inbox_of(op.slot)
        m = op.machine
        if end:
            last = m.last_seq or 0
            hdr = b"NATS/1.0 204 EOB\r\nNats-Num-Pending: 0\r\nNats-Last-Sequence: %d\r\n\r\n" % last
            self.feed(b"HMSG %s %d %d %d\r\n%s\r\n" % (inbox.encode(), self.sid_of(op), len(hdr), len(hdr), hdr))
            return
        seq = (m.last_seq or 0) + 1
        hdr = (
            b"NATS/1.0\r\nNats-Stream: S\r\nNats-Subject: s.a\r\nNats-Sequence: %d\r\n"
            b"Nats-Time-Stamp: 2024-01-01T00:00:00Z\r\nNats-Num-Pending: 1\r\nNats-Last-Sequence: %d\r\n\r\n"
        ) % (seq, m.last_seq or 0)
        self.feed(b"HMSG %s %d %d %d\r\n%sv\r\n" % (inbox.encode(), self.sid_of(op), len(hdr), len(hdr) + 1, hdr))

    @precondition(lambda self: self.conn.is_connected and self.publisher is not None and not self.publisher.ended
                  and bool(self.publisher.machine.window.pending or self.publisher.machine.window.retrying))
    @rule(data=st.data(), kind=st.sampled_from(["ok", "ok", "dup", "503", "10158", "garbage"]))
    def pub_ack(self, data: st.DataObject, kind: str) -> None:
        assert self.publisher is not None
        m = self.publisher.machine
        tokens = sorted(set(m.window.pending) | set(m.window.retrying))
        token = data.draw(st.sampled_from(tokens))
        subject = (m.prefix + token).encode()
        sid = self.sid_of(self.publisher)
        entry = m.window.pending.get(token)
        if kind == "503":
            hdr = b"NATS/1.0 503\r\n\r\n"
            self.feed(b"HMSG %s %d %d %d\r\n%s\r\n" % (subject, sid, len(hdr), len(hdr), hdr))
            return
        body = {
            "ok": b'{"stream":"S","seq":%d}' % (int(token) + 1),
            "dup": b'{"stream":"S","seq":%d,"duplicate":true}' % (int(token) + 1),
            "10158": b'{"error":{"code":503,"err_code":10158,"description":"duplicate message id is in process"}}',
            "garbage": b"not json",
        }[kind]
        self.feed(b"MSG %s %d %d\r\n%s\r\n" % (subject, sid, len(body), body))
        if kind in ("ok", "dup") and entry is not None:
            assert entry.outcome in ("acked", "duplicate"), entry

    @precondition(lambda self: self.conn.is_connected and bool(self.requests))
    @rule(data=st.data())
    def request_reply(self, data: st.DataObject) -> None:
        token = data.draw(st.sampled_from(self.requests))
        self.requests.remove(token)
        prefix = self.conn._resp_prefix
        sid = self.conn._resp_sid
        assert sid is not None
        self.feed(b"MSG %s%s %d 4\r\npong\r\n" % (prefix.encode(), token.encode(), sid))

    # ------------------------------------------------------------------ the application

    @precondition(lambda self: not self.closed and bool(self.running(("fetch", "consume", "direct", "ordered"))))
    @rule(data=st.data())
    def stop(self, data: st.DataObject) -> None:
        op = data.draw(st.sampled_from(self.running(("fetch", "consume", "direct", "ordered"))))
        self.s.command(op.slot, Stop(), self.now)
        self.events()
        self.wire()

    @precondition(lambda self: not self.closed and bool(self.running(("consume",))))
    @rule(data=st.data(), drain=st.booleans())
    def take_or_drain(self, data: st.DataObject, drain: bool) -> None:
        op = data.draw(st.sampled_from(self.running(("consume",))))
        m = op.machine
        if m.buffered_messages:
            self.s.command(op.slot, P.MessagesTaken(count=m.buffered_messages, size=m.buffered_bytes), self.now)
        if drain and not op.ended:
            was_connected = self.conn.is_connected
            self.s.command(op.slot, P.Drain(), self.now)
            op.draining = True
            if was_connected:
                # What the server sent before it sees the UNSUB may still come, even to an
                # empty buffer: the consume and its route stay until the fence.
                assert op.slot in self.s._slots and not op.ended, "a drain ended before its fence"
                assert self.s.has_route(self.sid_of(op)), "a drain's inbox closed before its fence"
        self.events()
        self.wire()

    @precondition(lambda self: self.conn.is_connected and self.pings_owed > 0)
    @rule()
    def pong(self) -> None:
        """The server answers the oldest PING (a flush, a drain's fence)."""
        self.pings_owed -= 1
        self.feed(b"PONG\r\n")

    @precondition(lambda self: not self.closed and self.publisher is not None and not self.publisher.ended)
    @rule(level=st.integers(0, 5))
    def watch(self, level: int) -> None:
        assert self.publisher is not None
        self.s.command(self.publisher.slot, WatchLevel(level=level), self.now)
        if len(self.publisher.machine.window) <= level:
            assert self.publisher.events[-1] is PROGRESS
        self.events()
        self.wire()

    @rule(dt=st.sampled_from([0.01, 0.1, 0.3, 0.6, 1.0, 2.5]))
    def advance(self, dt: float) -> None:
        self.advance_to(self.now + dt)

    # ------------------------------------------------------------------ the transport

    @precondition(lambda self: self.conn.is_connected)
    @rule()
    def lose_connection(self) -> None:
        self.pings_owed = 0
        self.s.connection_lost(self.now, ConnectionResetError("cut"))
        self.events()
        self.wire()

    @precondition(lambda self: self.conn.state in (State.WAITING, State.DIALING))
    @rule()
    def reconnect(self) -> None:
        self.handshake()

    @precondition(lambda self: not self.closed)
    @rule()
    def close(self) -> None:
        self.s.handle(ev.Close(), self.now)
        self.events()
        self.wire()
        if self.conn.state is State.CLOSING:
            self.s.connection_lost(self.now, None)
        self.events()
        assert self.conn.state is State.CLOSED
        self.closed = True
        for op in self.ops:
            assert op.ended, f"{op.kind} still running after the close"
        for entry in self.entries:
            assert entry.outcome is not PENDING, f"{entry!r} not settled after the close"

    # ------------------------------------------------------------------ invariants

    @invariant()
    def deadline_is_the_earliest(self) -> None:
        if not hasattr(self, "s"):
            return
        own = [o.machine.next_deadline() for o in self.ops if o.slot in self.s._slots]
        own.append(self.conn.next_deadline())
        due = [d for d in own if d is not None]
        expected = min(due) if due else None
        assert self.s.next_deadline() == expected, (self.s.next_deadline(), expected)

    @invariant()
    def machines_are_sound(self) -> None:
        if not hasattr(self, "s"):
            return
        for op in self.ops:
            m = op.machine
            assert not any(e.__class__ is MachineFailed for e in op.events), op.events
            if op.machine.finished:
                assert op.slot not in self.s._slots, f"{op.kind} ended but still on the session"
            if op.ended:
                assert op.slot not in self.s._slots
            for e in op.events:
                msgs = [e.msg] if e.__class__ is P.MessageDelivered else e.msgs if e.__class__ is P.MessagesDelivered else []
                for msg in msgs:
                    assert msg.subject == self.s.inbox_of(op.slot) or op.slot not in self.s._slots
            if op.kind in ("fetch", "consume"):
                seen = m.delivered + m.ignored  # every user message reached the machine
                assert op.sent <= seen <= op.sent + op.burst_statuses, (op.kind, m.delivered, m.ignored, op.sent)
                assert op.delivered == m.delivered
            if op.kind == "fetch":
                assert m.delivered <= m.options.batch
            if op.kind == "consume":
                assert m.pending_messages >= 0 and m.pending_bytes >= 0 and m.buffered_messages >= 0
            if op.kind == "ordered":
                assert op.seqs == list(range(1, len(op.seqs) + 1)), op.seqs

    @invariant()
    def drains_end_after_their_fence(self) -> None:
        """A drained consume still gets what the server sent before it saw the UNSUB (its
        route stays); once every PING is answered (its fence among them) it holds no route,
        and it has ended unless messages wait in its buffer."""
        if not hasattr(self, "s") or not self.conn.is_connected:
            return
        for op in self.ops:
            if op.kind != "consume" or not op.draining or op.ended:
                continue
            sid = self.s._slots[op.slot].sid
            if self.pings_owed == 0:
                assert op.machine.buffered_messages > 0, "a drain with an empty buffer did not end at its fence"
                assert sid == 0 and not self.s.has_route(sid)

    @invariant()
    def publish_ledger(self) -> None:
        if not hasattr(self, "s") or self.publisher is None:
            return
        seen: dict[int, int] = {}
        for op in self.ops:
            if op.kind != "publish":
                continue
            for e in op.events:
                if isinstance(e, PendingPublish):
                    seen[id(e)] = seen.get(id(e), 0) + 1
        for entry in self.entries:
            n = seen.get(id(entry), 0)
            if entry.outcome is PENDING:
                assert n == 0
            else:
                assert n == 1, f"{entry!r} settled {n} times"


SessionMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestSession = SessionMachine.TestCase
