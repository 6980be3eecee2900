"""A hypothesis state machine driving the Connection with random interleavings of server bytes,
application commands, virtual time, transport failures, reconnect handshakes and close.

Invariants checked after every step:

* no exception escapes except the documented typed errors of each call;
* nothing is written while not connected except handshake bytes (CONNECT, PING, PONG);
* a publish accepted while disconnected keeps the reconnect buffer within its limit;
* the publish ledger: every accepted publish (by ``publish`` or the lock-free ``submit``) ends
  up written to the wire exactly once, in the order accepted, or counted in a
  ``PublishesDropped`` event (checked after a final close);
* messages only for live subscriptions, never beyond ``max_msgs``; replies only for live
  requests; flushes complete in order, once;
* ``next_deadline()`` is None or finite;
* after ``Closed``: no data, no events, and every sending command raises ConnectionClosedError.
"""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from jscore import events as ev
from jscore.connection import State
from jscore.errors import (
    BadHeaderError,
    BadSubjectError,
    ConnectionClosedError,
    MaxPayloadError,
    ReconnectBufferExceededError,
)
from jscore.protocol import MsgReceived
from tests.core.test_connection import Harness, client_frames

UP = (State.AWAIT_INFO, State.TLS_HANDSHAKE, State.AWAIT_PONG, State.CONNECTED)
HANDSHAKING = (State.AWAIT_INFO, State.TLS_HANDSHAKE, State.AWAIT_PONG)
QUIET = (State.IDLE, State.WAITING, State.DIALING, State.CLOSED)
HANDSHAKE_FRAMES = {"CONNECT", "PING", "PONG"}

ERR_TEXTS = [
    b"-ERR 'Stale Connection'\r\n",
    b"-ERR 'Permissions Violation for Publish to \"p\"'\r\n",
    b"-ERR 'Permissions Violation for Subscription to \"s\"'\r\n",
    b"-ERR 'Permissions Violation for Subscription to \"t\" using queue \"q\"'\r\n",
    b"-ERR 'Unknown Protocol Operation'\r\n",
    b"-ERR 'Authorization Violation'\r\n",
    b"-ERR 'User Authentication Expired'\r\n",
    b"-ERR 'Maximum Payload Violation'\r\n",
    b"-ERR\r\n",
]
GARBAGE = [
    b"ZOO\r\n",
    b"MSG a 1 2\r\nabc\r\n",
    b"HMSG a 1 10 5\r\n",
    b"INFO []\r\n",
    b'INFO {"max_payload":-1}\r\n',
    b"\x00\xff\r\n",
    b"X" * 5000,
]
PARTIALS = [b"PI", b"MSG s 1 10\r\nabc", b"HMSG s 1 12 14\r\nNATS/1.0\r\n", b"INFO {"]


class ConnectionMachine(RuleBasedStateMachine):
    h: Harness

    @initialize(
        seed=st.integers(0, 2**16),
        attempts=st.sampled_from([-1, 2, 5]),
        ignore_discovered=st.booleans(),
        limit=st.sampled_from([0, 120, 600, 4000]),
        connect_first=st.sampled_from([True, True, True, False]),
    )
    def setup(self, seed: int, attempts: int, ignore_discovered: bool, limit: int, connect_first: bool) -> None:
        self.limit = limit
        self.h = Harness(
            servers=("nats://a:4222", "nats://b:4222"),
            seed=seed,
            reconnect_wait=0.5,
            reconnect_jitter=0.2,
            max_reconnect_attempts=attempts,
            reconnect_buffer_size=limit,
            ping_interval=1.0,
            max_pings_out=2,
            connect_timeout=1.0,
            ignore_discovered_servers=ignore_discovered,
        )
        self.next_id = 0
        self.accepted: set[int] = set()
        self.written: list[int] = []
        self.dropped = 0
        self.subs: dict[int, list[Any]] = {}  # sid -> [max_msgs | None, delivered]
        self.tokens: set[str] = set()
        self.all_tokens: list[str] = []
        self.flushes: list[int] = []
        self.closing = False  # close() called, or Closed seen
        self.closed = False
        self.ever_connected = False
        self.h.start()
        self.after()
        if connect_first:
            self.server_handshake(1024, None)
            assert self.conn.is_connected

    # ------------------------------------------------------------------ plumbing

    @property
    def conn(self) -> Any:
        return self.h.conn

    def after(self) -> None:
        """Route the events the machine produced and check what they say."""
        while (e := self.conn.next_event()) is not None:
            assert not self.closed, f"event {e!r} after Closed"
            if isinstance(e, ev.PublishesDropped):
                assert e.count > 0
                self.dropped += e.count
            elif isinstance(e, MsgReceived):
                sub = self.subs.get(e.sid)
                assert sub is not None, f"message for sid {e.sid} which is not subscribed"
                sub[1] += 1
                assert sub[0] is None or sub[1] <= sub[0], "delivered beyond max_msgs"
            elif isinstance(e, ev.SubscriptionEnded):
                sub = self.subs.pop(e.sid, None)
                assert sub is not None, f"SubscriptionEnded for unknown sid {e.sid}"
                if e.error is None:
                    assert sub[0] is not None and sub[1] == sub[0]
            elif isinstance(e, ev.ReplyReceived):
                assert e.token in self.tokens, f"reply for {e.token!r} which is not outstanding"
                self.tokens.discard(e.token)
            elif isinstance(e, ev.FlushCompleted):
                assert self.flushes and self.flushes[0] == e.token, (e.token, self.flushes)
                self.flushes.pop(0)
            elif isinstance(e, ev.Connected):
                assert not self.ever_connected, "Connected twice"
                self.ever_connected = True
            elif isinstance(e, ev.Reconnected):
                assert self.ever_connected, "Reconnected before Connected"
            elif isinstance(e, ev.Closed):
                self.closed = self.closing = True
                assert self.conn.is_closed
            elif isinstance(
                e,
                (
                    ev.ConnectRequested,
                    ev.CloseRequested,
                    ev.TlsUpgradeRequested,
                    ev.Disconnected,
                    ev.ConnectAttemptFailed,
                    ev.LameDuck,
                    ev.ServerError,
                    ev.ServersDiscovered,
                    ev.ServerPoolWarning,
                ),
            ):
                pass
            else:
                raise AssertionError(f"unexpected event {e!r}")

    def write(self) -> None:
        """The transport takes everything queued and puts it on the wire."""
        for frame in client_frames(self.conn.data_to_send()):
            if frame[0] in ("PUB", "HPUB"):
                payload = frame[-1]
                ident = int(payload.split(b":", 1)[0])
                assert ident in self.accepted, f"publish {ident} written but never accepted"
                assert ident not in self.written, f"publish {ident} written twice"
                assert not self.written or ident > self.written[-1], f"publish {ident} written after a later one"
                self.written.append(ident)

    def server(self, data: bytes) -> None:
        self.conn.receive_data(data, self.h.now)  # must never raise
        self.after()

    # ------------------------------------------------------------------ transport

    def _progress(self, choice: int) -> None:
        """What a live transport and server usually do next in this state."""
        state = self.conn.state
        if state is State.DIALING:
            if choice < 7:
                self.server_handshake(1024 if choice % 2 else 65536, None)
            else:
                self.dial_fail()
        elif state is State.CLOSING:
            self.transport_lost(choice % 2 == 0)
        elif state is State.WAITING:
            self.advance_to_deadline()
        elif state is State.AWAIT_INFO:
            self.server(b'INFO {"max_payload":1024}\r\n')
        elif state is State.AWAIT_PONG:
            self.server(b"PONG\r\n")
        elif state is State.CONNECTED:
            self.write()

    # The same rule under three names: hypothesis picks rules uniformly, and moving the
    # connection forward should be more likely than breaking it.
    @precondition(lambda self: not self.closed)
    @rule(choice=st.integers(0, 9))
    def progress(self, choice: int) -> None:
        self._progress(choice)

    @precondition(lambda self: not self.closed)
    @rule(choice=st.integers(0, 9))
    def progress_more(self, choice: int) -> None:
        self._progress(choice)

    @precondition(lambda self: not self.closed)
    @rule(choice=st.integers(0, 9))
    def progress_again(self, choice: int) -> None:
        self._progress(choice)

    @precondition(lambda self: self.conn.state is State.DIALING)
    @rule()
    def dial_ok(self) -> None:
        self.conn.connection_made(self.h.now)
        self.after()

    @precondition(lambda self: self.conn.state is State.DIALING)
    @rule()
    def dial_fail(self) -> None:
        self.conn.connection_lost(self.h.now, ConnectionRefusedError("refused"))
        self.after()

    @precondition(lambda self: self.conn.state is State.DIALING)
    @rule(max_payload=st.sampled_from([200, 1024, 65536]), urls=st.sampled_from([None, [], ["b:4222"], ["c:4222", "bad url"]]))
    def server_handshake(self, max_payload: int, urls: list[str] | None) -> None:
        self.conn.connection_made(self.h.now)
        info: dict[str, Any] = {"max_payload": max_payload}
        if urls is not None:
            info["connect_urls"] = urls
        self.server(b"INFO " + json.dumps(info).encode() + b"\r\n")
        self.server(b"PONG\r\n")

    @precondition(lambda self: self.conn.state in (State.CONNECTED, State.CLOSING) or self.conn.state in HANDSHAKING)
    @rule()
    def transport_write(self) -> None:
        self.write()

    @precondition(lambda self: self.conn.state in UP or self.conn.state in (State.CLOSING, State.DIALING))
    @rule(write_first=st.booleans())
    def transport_lost(self, write_first: bool) -> None:
        if write_first:
            self.write()
        self.conn.connection_lost(self.h.now, OSError("reset"))
        self.after()
        assert self.conn.data_to_send() == b"", "a dead transport has nothing left to write"

    @rule(dt=st.sampled_from([0.0, 0.05, 0.3, 0.5, 1.0, 2.5]))
    def advance(self, dt: float) -> None:
        self.h.now += dt
        self.conn.handle_timeout(self.h.now)
        self.after()

    @precondition(lambda self: self.conn.next_deadline() is not None)
    @rule()
    def advance_to_deadline(self) -> None:
        d = self.conn.next_deadline()
        assert d is not None
        self.h.now = max(self.h.now, d)
        self.conn.handle_timeout(self.h.now)
        self.after()

    # ------------------------------------------------------------------ server bytes

    @precondition(lambda self: self.conn.state in UP)
    @rule(max_payload=st.sampled_from([None, 200, 1024, 65536]), urls=st.sampled_from([None, ["b:4222", "d:4222"], "x"]), ldm=st.sampled_from([None, True, False, "yes"]))
    def server_info(self, max_payload: int | None, urls: Any, ldm: Any) -> None:
        info: dict[str, Any] = {}
        if max_payload is not None:
            info["max_payload"] = max_payload
        if urls is not None:
            info["connect_urls"] = urls
        if ldm is not None:
            info["ldm"] = ldm
        self.server(b"INFO " + json.dumps(info).encode() + b"\r\n")

    @precondition(lambda self: self.conn.state in UP)
    @rule()
    def server_pong(self) -> None:
        self.server(b"PONG\r\n")

    @precondition(lambda self: self.conn.state in UP)
    @rule()
    def server_ping(self) -> None:
        self.server(b"PING\r\n")

    @precondition(lambda self: self.conn.state in UP)
    @rule(data=st.data(), size=st.integers(0, 40), headers=st.booleans(), split=st.integers(0, 60))
    def server_msg(self, data: st.DataObject, size: int, headers: bool, split: int) -> None:
        sid = data.draw(st.sampled_from(sorted(self.subs) + [9999]))
        payload = b"m" * size
        if headers:
            block = b"NATS/1.0\r\nK: v\r\n\r\n"
            frame = b"HMSG s %d %d %d\r\n%s%s\r\n" % (sid, len(block), len(block) + size, block, payload)
        else:
            frame = b"MSG s %d %d\r\n%s\r\n" % (sid, size, payload)
        split = min(split, len(frame))
        self.server(frame[:split])
        if self.conn.state in UP:
            self.server(frame[split:])

    @precondition(lambda self: self.conn.state in UP and self.all_tokens)
    @rule(data=st.data(), status=st.booleans())
    def server_reply(self, data: st.DataObject, status: bool) -> None:
        token = data.draw(st.sampled_from(self.all_tokens))
        subject = (self.conn._resp_prefix + token).encode()
        sid = self.conn._resp_sid
        if status:
            self.server(b"HMSG %s %d 16 16\r\nNATS/1.0 503\r\n\r\n\r\n" % (subject, sid))
        else:
            self.server(b"MSG %s %d 2\r\nok\r\n" % (subject, sid))

    @precondition(lambda self: self.conn.state in UP)
    @rule(text=st.sampled_from(ERR_TEXTS))
    def server_err(self, text: bytes) -> None:
        self.server(text)

    @precondition(lambda self: self.conn.state in UP)
    @rule(data=st.sampled_from(GARBAGE + PARTIALS))
    def server_garbage(self, data: bytes) -> None:
        self.server(data)

    @rule(data=st.sampled_from([b"PING\r\n", b"PONG\r\n", b"MSG s 1 1\r\nx\r\n", b"ZOO\r\n"]))
    def stray_bytes(self, data: bytes) -> None:
        """Bytes in any state: ignored unless a transport is up, and never an exception."""
        self.server(data)

    # ------------------------------------------------------------------ application

    def _take_submitted(self) -> None:
        """What every queueing call does first (moving frames ``submit`` queued), done before a
        rule's snapshot so that the snapshot compares only what the call itself queues."""
        if self.conn._submitted:
            self.conn._take_submitted()
            self.after()

    def _payload(self, size: int) -> tuple[int, bytes]:
        ident = self.next_id
        self.next_id += 1
        head = b"%d:" % ident
        return ident, head + b"p" * max(0, size - len(head))

    @rule(size=st.sampled_from([0, 10, 150, 500, 1100, 3000]), headers=st.booleans(), reply=st.booleans())
    def publish(self, size: int, headers: bool, reply: bool) -> None:
        ident, payload = self._payload(size)
        state = self.conn.state
        self._take_submitted()
        pending_before = self.conn._pending_size
        try:
            self.conn.publish("p", payload, "r.x" if reply else None, {"K": "v"} if headers else None)
        except ConnectionClosedError:
            assert self.closing
        except MaxPayloadError:
            assert len(payload) + (18 if headers else 0) > self.conn.max_payload
        except ReconnectBufferExceededError:
            assert state is not State.CONNECTED
            assert self.conn._pending_size == pending_before, "a refused publish queued something"
        else:
            assert not self.closing, "publish accepted after close"
            self.accepted.add(ident)
            if state is not State.CONNECTED:
                assert self.conn._pending_size <= self.limit, "the reconnect buffer went over its limit"
        self.after()

    @rule(
        size=st.sampled_from([0, 10, 150, 1100, 3000]),
        room=st.sampled_from([None, None, 0, 200]),
        ack=st.booleans(),
    )
    def submit(self, size: int, room: int | None, ack: bool) -> None:
        """The lock-free publish (and ack): accepted only while connected, then exactly like
        publish."""
        ident, payload = self._payload(size)
        if room is not None:
            self.conn.submit_room = room
        state = self.conn.state
        queued_before = bytes(self.conn._submitted)
        accepted = self.conn.submit_ack("$JS.ACK.s.c.1.1.1.1.0", payload) if ack else self.conn.submit("p", payload)
        if accepted:
            assert state is State.CONNECTED and len(payload) <= self.conn.max_payload
            assert not self.closing, "submit accepted after close"
            self.accepted.add(ident)
        else:
            assert bytes(self.conn._submitted) == queued_before, "a declined submit queued something"
        self.after()

    @precondition(
        lambda self: hasattr(self, "h")
        and not self.closed
        and self.conn.state is not State.CONNECTED
        and not self.conn._closing_for_good
    )
    @rule(size=st.sampled_from([0, 10, 150, 1100]))
    def submit_raced(self, size: int) -> None:
        """A submit on another thread that found the connection up and appended just after it
        went down (not closing for good: then it raises, tested in test_connection.py): the
        frame is taken into the reconnect buffer (or reported dropped)."""
        ident, payload = self._payload(size)
        self.conn._submitted += b"PUB p %d\r\n%s\r\n" % (len(payload), payload)
        self.conn._submitted_n.append(len(payload))
        self.accepted.add(ident)
        self.after()

    @precondition(lambda self: not self.closed)
    @rule(subject=st.sampled_from(["", "a b", "a\r\nPUB x 1", "a.>"]))
    def publish_bad_subject(self, subject: str) -> None:
        self._take_submitted()
        out_before = bytes(self.conn._out)
        pending_before = list(self.conn._pending)
        try:
            self.conn.publish(subject, b"x")
        except BadSubjectError:
            pass
        else:
            raise AssertionError("a bad subject was accepted")
        try:
            self.conn.publish("ok", b"x", headers={"K": "a\r\nInjected: 1"})
        except BadHeaderError:
            pass
        else:
            raise AssertionError("a bad header was accepted")
        assert self.conn._out == out_before and self.conn._pending == pending_before

    @precondition(lambda self: not self.closed)
    @rule(subject=st.sampled_from(["s", "t"]), queue=st.sampled_from([None, "q"]), max_msgs=st.sampled_from([None, 1, 3]))
    def subscribe(self, subject: str, queue: str | None, max_msgs: int | None) -> None:
        try:
            sid = self.conn.subscribe(subject, queue, max_msgs)
        except ConnectionClosedError:
            assert self.closing
        else:
            assert not self.closing
            assert sid not in self.subs
            self.subs[sid] = [max_msgs, 0]
        self.after()

    @precondition(lambda self: self.subs)
    @rule(data=st.data(), max_msgs=st.sampled_from([None, 1, 2, 5]))
    def unsubscribe(self, data: st.DataObject, max_msgs: int | None) -> None:
        sid = data.draw(st.sampled_from(sorted(self.subs)))
        self.conn.unsubscribe(sid, max_msgs)
        sub = self.subs[sid]
        if max_msgs is not None and max_msgs > sub[1]:
            sub[0] = max_msgs
        else:
            del self.subs[sid]
        assert self.conn.has_subscription(sid) == (sid in self.subs)
        self.after()

    @precondition(lambda self: not self.closed)
    @rule(size=st.sampled_from([0, 20, 1500]))
    def request(self, size: int) -> None:
        ident, payload = self._payload(size)
        self._take_submitted()
        state = self.conn.state
        out_before = bytes(self.conn._out)
        try:
            token = self.conn.request("svc", payload)
        except ConnectionClosedError:
            assert self.closing
        except (MaxPayloadError, ReconnectBufferExceededError):
            assert self.conn._out == out_before, "a refused request changed the wire buffer"
        else:
            assert not self.closing
            self.accepted.add(ident)
            self.tokens.add(token)
            self.all_tokens.append(token)
            if state is not State.CONNECTED:
                assert self.conn._pending_size <= self.limit
        self.after()

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        token = data.draw(st.sampled_from(sorted(self.tokens)))
        self.conn.cancel_request(token)
        self.tokens.discard(token)
        self.after()

    @precondition(lambda self: not self.closed)
    @rule()
    def flush(self) -> None:
        try:
            token = self.conn.flush()
        except ConnectionClosedError:
            assert self.closing
        else:
            assert not self.closing
            assert not self.flushes or token > self.flushes[-1]
            self.flushes.append(token)
        self.after()

    @rule(dice=st.integers(0, 7))
    def close(self, dice: int) -> None:
        if dice:
            return  # closing for good ends the interesting part: do it rarely
        self.conn.close(self.h.now)
        self.closing = True
        self.after()

    # ------------------------------------------------------------------ invariants

    @invariant()
    def deadline_is_none_or_finite(self) -> None:
        if not hasattr(self, "h"):
            return
        d = self.conn.next_deadline()
        assert d is None or math.isfinite(d)
        assert self.conn.next_deadline() == d, "next_deadline must be pure"

    @invariant()
    def nothing_written_while_not_connected(self) -> None:
        if not hasattr(self, "h"):
            return
        state = self.conn.state
        if state in QUIET:
            assert self.conn.data_to_send() == b"", f"bytes queued in state {state}"
        elif state in HANDSHAKING:
            frames = client_frames(self.conn.data_to_send())
            assert {f[0] for f in frames} <= HANDSHAKE_FRAMES, frames

    @invariant()
    def buffers_are_consistent(self) -> None:
        if not hasattr(self, "h"):
            return
        conn = self.conn
        assert conn._pending_size == sum(map(len, conn._pending))
        assert conn.pending_out >= 0
        written = set(self.written)
        assert len(written) == len(self.written) and written <= self.accepted
        assert len(self.written) + self.dropped <= len(self.accepted)

    @invariant()
    def closed_means_closed(self) -> None:
        if not hasattr(self, "h") or not self.closed:
            return
        conn = self.conn
        assert conn.is_closed and conn.next_deadline() is None
        assert conn.data_to_send() == b""
        for call in (lambda: conn.publish("p", b""), lambda: conn.subscribe("s"), lambda: conn.request("svc"), conn.flush):
            try:
                call()
            except ConnectionClosedError:
                pass
            else:
                raise AssertionError("a command succeeded after Closed")
        assert conn.next_event() is None and conn.data_to_send() == b""

    def teardown(self) -> None:
        if not hasattr(self, "h"):
            return
        conn = self.conn
        if not conn.is_closed:
            conn.close(self.h.now)
            self.closing = True
            self.after()
            if not conn.is_closed:
                assert conn.state is State.CLOSING
                self.write()
                conn.connection_lost(self.h.now, None)
                self.after()
        assert conn.is_closed and self.closed
        assert conn.data_to_send() == b""
        # The ledger: every accepted publish was written exactly once or reported dropped.
        assert len(self.written) + self.dropped == len(self.accepted), (
            f"accepted={len(self.accepted)} written={len(self.written)} dropped={self.dropped}"
        )


ConnectionMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestConnectionMachine = ConnectionMachine.TestCase
