"""The core session: one connection machine and every sub-machine riding on it.

As in h2, where one connection owns its streams, a :class:`Session` owns the connection
machine (:class:`~jscore.connection.Connection`: handshake, keep-alive, reconnect, requests,
flushes, subscriptions) and the sub-machines of the operations running on it (fetch, consume,
batched direct get, publish windows ...; see :mod:`jscore.machine` for the protocol they
speak). The session

- routes each incoming message to its consumer by subscription id: a sub-machine's inbox, or
  the delivery function of a plain subscription;
- tells every sub-machine about disconnects, reconnects and the close (the same commands for
  all; each decides what that means for it);
- takes application input through :meth:`handle` (and named methods for the hot paths);
- answers one pure :meth:`next_deadline` (the connection's timers and a heap of the
  sub-machines' deadlines) and fires them through one :meth:`handle_timeout`;
- writes every frame a sub-machine asks for (pull requests, flow-control replies, direct-get
  requests, publish frames), so that all bytes leave through one :meth:`data_to_send`;
- emits the connection's events through one :meth:`next_event`, and each sub-machine's
  events to the sink it was attached with, in order: a machine is fed every message of a read,
  and what it decided is acted on once for the read, before any other event of the connection.

The shell (jssync) carries bytes, keeps time and runs user code; it decides nothing.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from random import Random
from typing import Any, Final

import msgspec

from . import events as ev
from .auth import Credentials
from .connection import ConnectOptions, Connection, State
from .directget import DirectGetRequested
from .errors import ConnectionClosedError, LocalProtocolError, NatsError
from .machine import ConnectionClosed, ConnectionLost, ConnectionRestored, MachineFailed, SendRequested, SubMachine
from .protocol import AcksReceived, DirectRepliesReceived, MsgReceived, MsgsReceived
from .jsmsg import WPI, ProgressRequested
from .pubmachines import FramesRequested, PublishRequested, SendFailed
from .pull import AckNextRequested, Drain, FlowControlReplyRequested, InboxDrained, PullRequested

INBOX_DRAINED: Final = InboxDrained()

__all__ = [
    "Attach",
    "MachineCommand",
    "Session",
    "Sink",
]

Sink = Callable[[Any], None]
Deliver = Callable[[MsgReceived, float], None]
Ended = Callable[[BaseException | None], None]

_CONNECTION_CHANGES: Final = (ev.Disconnected, ev.Reconnected, ev.Closed)


class Attach(msgspec.Struct, frozen=True, kw_only=True):
    """Run ``machine`` on this session; its events go to ``sink``. With ``inbox`` the session
    subscribes a fresh inbox whose messages go to the machine; ``target`` is the subject its
    requests (pull requests) are published to. :meth:`Session.handle` returns the slot id."""

    machine: Any
    sink: Any
    inbox: bool = True
    wildcard: bool = False
    target: str | None = None


class MachineCommand(msgspec.Struct, frozen=True, kw_only=True):
    """Hand ``command`` to the sub-machine of slot ``slot``."""

    slot: int
    command: Any


class _Slot:
    """A running sub-machine and how to reach it."""

    __slots__ = ("id", "machine", "sink", "sid", "inbox", "target", "deadline", "dirty", "touched")

    def __init__(self, slot_id: int, machine: SubMachine, sink: Sink, target: str | None) -> None:
        self.id = slot_id
        self.machine = machine
        self.sink = sink
        self.sid = 0
        self.inbox = ""
        self.target = target
        self.deadline: float | None = None
        self.dirty = False
        self.touched = False  # fed messages whose events are not acted on yet (see _settle)


_OPERATION_FRAMES: Final = frozenset({PullRequested, DirectGetRequested, FlowControlReplyRequested, SendRequested})
"""Frames that carry a machine's operation on (a pull, a direct get, a flow control reply, a
request such as a consumer create): not sent for a machine that broke in the read that asked for
them (a best-effort ``SendRequested``, a clean-up, still is)."""


def _sent_when_broken(e: Any) -> bool:
    cls = e.__class__
    return cls not in _OPERATION_FRAMES or (cls is SendRequested and bool(e.best_effort))


class Session:
    """The connection machine plus its sub-machines. Not thread-safe: the shell serializes
    every call (one lock)."""

    def __init__(self, options: ConnectOptions, *, rng: Random, credentials: Credentials | None = None) -> None:
        self.conn = Connection(options, rng=rng, credentials=credentials)
        self._slots: dict[int, _Slot] = {}
        self._routes: dict[int, Deliver] = {}  # sid -> delivery (a slot's or a subscription's)
        # sid -> a slot's delivery of runs: PubAcks (machines with ``receive_acks``), messages
        # (``receive_msgs``) or direct get replies (``receive_direct``); see AckLane
        self._run_routes: dict[int, Callable[[Any, float], None]] = {}
        self._ends: dict[int, Ended] = {}  # sid -> what to call when the subscription ends
        self._fences: dict[int, int] = {}  # flush token -> slot whose inbox is being drained
        self._heap: list[tuple[float, int]] = []  # (deadline, slot id); stale entries skipped
        self._dirty: list[_Slot] = []  # slots whose deadline may have changed
        self._touched: list[_Slot] = []  # slots fed messages in this pump, events not yet acted on
        self._conn_events = self.conn.event_queue  # (popped directly on the hot path, see _pump)
        self._stale = False  # a slot ended: its heap entry may be at the top
        self._events: deque[ev.Event] = deque()
        self._next_slot = 1
        # Frames sub-machines ask for, written by the session: event class -> writer.
        self._writers: dict[type, Callable[[_Slot, Any], None]] = {
            PullRequested: self._write_pull,
            FlowControlReplyRequested: self._write_flow_control,
            DirectGetRequested: self._write_direct_get,
            PublishRequested: self._write_publish,
            FramesRequested: self._write_frames,
            ProgressRequested: self._write_progress,
            AckNextRequested: self._write_ack_next,
            SendRequested: self._write_send,
        }

    # ================================================================== the core contract

    def start(self, now: float) -> None:
        self.conn.start(now)
        self._pump(now)

    def connection_made(self, now: float) -> None:
        self.conn.connection_made(now)
        self._pump(now)

    def tls_established(self, now: float) -> None:
        self.conn.tls_established(now)
        self._pump(now)

    def connection_lost(self, now: float, exc: Exception | None = None) -> None:
        self.conn.connection_lost(now, exc)
        self._pump(now)

    def check_backlog(self, queued: int, now: float) -> bool:
        """The transport holds ``queued`` bytes the server has not read: see
        :meth:`Connection.check_backlog` (past the limit the connection is closed as stale)."""
        closed = self.conn.check_backlog(queued)
        if closed:
            self._pump(now)
        return closed

    def receive_data(self, data: bytes, now: float) -> None:
        self.conn.receive_data(data, now)
        self._pump(now)

    def handle_timeout(self, now: float) -> None:
        """Fire the connection's timers and every sub-machine's that are due."""
        self.conn.handle_timeout(now)
        self._pump(now)
        heap = self._heap
        slots = self._slots
        while heap and heap[0][0] <= now:
            due, slot_id = heapq.heappop(heap)
            slot = slots.get(slot_id)
            if slot is None or slot.deadline != due:
                continue  # stale: the machine moved its deadline or ended
            slot.deadline = None
            self._mark(slot)
            try:
                slot.machine.handle_timeout(now)
            except Exception as exc:  # noqa: BLE001 - a broken machine ends its operation only
                self._fail(slot, exc, "internal error")
                continue
            self._after(slot)
        self._refresh()

    def next_deadline(self) -> float | None:
        """The earliest timer of the connection and of every sub-machine. Pure."""
        due = self.conn.next_deadline()
        heap = self._heap
        if heap:
            top = heap[0][0]
            if due is None or top < due:
                return top
        return due

    def next_event(self) -> ev.Event | None:
        return self._events.popleft() if self._events else None

    def data_to_send(self) -> bytes | bytearray:
        return self.conn.data_to_send()

    @property
    def has_work(self) -> bool:
        """Output or events are waiting for the shell."""
        return self.conn.has_work or bool(self._events)

    def handle(self, command: Any, now: float) -> Any:
        """Dispatch an application command. Returns the slot id of an :class:`Attach`, the sid
        of a ``Subscribe``, the token of a ``Request`` or ``Flush``, else None."""
        match command:
            case Attach(machine=m, sink=sink, inbox=inbox, wildcard=wildcard, target=target):
                return self.attach(m, sink, now, inbox=inbox, wildcard=wildcard, target=target)
            case MachineCommand(slot=slot, command=cmd):
                self.command(slot, cmd, now)
                return None
            case _:
                result = self.conn.handle(command, now)
                self._pump(now)
                return result

    # ================================================================== sub-machines

    def attach(self, machine: SubMachine, sink: Sink, now: float, *, inbox: bool = True,
               wildcard: bool = False, target: str | None = None) -> int:
        """Run ``machine`` on the session (see :class:`Attach`); returns its slot id. Events the
        machine queued on creation (its first request) are acted on at once. With ``wildcard``
        the inbox is ``<inbox>.*`` and :meth:`inbox_of` gives the prefix ``<inbox>.``."""
        slot = _Slot(self._next_slot, machine, sink, target)
        self._next_slot += 1
        if inbox:
            conn = self.conn
            slot.inbox = conn.new_inbox()
            if wildcard:
                slot.inbox += "."
                slot.sid = conn.subscribe(slot.inbox + "*")
            else:
                slot.sid = conn.subscribe(slot.inbox)
            self._routes[slot.sid] = self._receiver(slot)
            # A machine that reads runs gets them (one kind per machine, see AckLane).
            receive_acks = getattr(machine, "receive_acks", None)
            receive_msgs = getattr(machine, "receive_msgs", None)
            receive_direct = getattr(machine, "receive_direct", None)
            if wildcard and receive_acks is not None:
                self._run_routes[slot.sid] = self._receiver(slot, receive_acks)
                conn.arm_ack_lane(slot.sid)
            elif receive_msgs is not None:
                self._run_routes[slot.sid] = self._receiver(slot, receive_msgs)
                conn.arm_runs(
                    slot.sid, getattr(machine, "RUN_CURSORS", False), getattr(machine, "run_columns", False)
                )
            elif receive_direct is not None and not wildcard:
                self._run_routes[slot.sid] = self._receiver(slot, receive_direct)
                conn.arm_direct(slot.sid)
            self._ends[slot.sid] = self._inbox_ender(slot)
        self._slots[slot.id] = slot
        self._after(slot)
        self._refresh()
        self._pump(now)
        return slot.id

    def command(self, slot_id: int, command: Any, now: float) -> None:
        """Hand ``command`` to a sub-machine; a machine that has ended ignores it."""
        slot = self._slots.get(slot_id)
        if slot is None:
            return
        if not self._tell(slot, command, now):
            self._refresh()
            return
        if command.__class__ is Drain and slot.id in self._slots:
            self._drain_inbox(slot, now)
        self._refresh()
        self._pump(now)

    def touch(self, slot_id: int) -> None:
        """A machine's state was changed outside the session (a publishing thread added to its
        window under the shell's lock): re-read its deadline."""
        slot = self._slots.get(slot_id)
        if slot is not None:
            self._mark(slot)
            self._refresh()

    def running(self, slot_id: int) -> bool:
        return slot_id in self._slots

    def inbox_of(self, slot_id: int) -> str:
        slot = self._slots.get(slot_id)
        return "" if slot is None else slot.inbox

    def _receiver(self, slot: _Slot, receive: Callable[[Any, float], None] | None = None) -> Callable[
        [Any, float], None
    ]:
        """The delivery of ``slot``'s inbox: each message (or, with ``receive``, each run of
        PubAcks, messages or direct get replies read in the connection's AckLane) to its
        machine."""
        receive_msg = slot.machine.receive_msg if receive is None else receive
        touched = self._touched

        def deliver(msg: Any, now: float) -> None:
            # Once per message, so only the machine is called here: what it decided (its
            # events, its end, its new deadline) is acted on once per pump, for all the
            # messages of one read together (see _settle).
            try:
                receive_msg(msg, now)
            except Exception as exc:  # noqa: BLE001
                # What the messages before this one produced, a run's earlier messages included
                # (a run is the first call of its read: the slot may not be touched yet).
                # The frames that carry its operation on are not sent (a create or a pull for
                # an operation that is over), but for best-effort clean-ups (deleting its
                # throw-away consumer): see _OPERATION_FRAMES.
                slot.touched = True
                try:
                    self._settle_slot(slot, broken=True)
                finally:  # (a sink that raises there must not leave the broken machine attached)
                    self._fail(slot, exc, "internal error")
                return
            if not slot.touched:
                slot.touched = True
                touched.append(slot)

        return deliver

    def _settle(self) -> None:
        """Act on the events of every machine fed messages since the last call, in the order
        the machines were first fed (each machine's own events stay in its order). A machine
        that finished is ended here: messages for it that arrived after its end, in the same
        read, reached it first and were ignored by it (every machine ignores input once done)."""
        touched = self._touched
        while touched:
            slots = touched[:] if len(touched) > 1 else (touched[0],)
            touched.clear()
            for i, slot in enumerate(slots):
                try:
                    self._settle_slot(slot)
                except BaseException:
                    # (a sink raised: the slots not settled yet stay touched for the next pump)
                    touched[:0] = [rest for rest in slots[i + 1 :] if rest.touched]
                    raise

    def _settle_slot(self, slot: _Slot, broken: bool = False) -> None:
        if not slot.touched:
            return
        slot.touched = False
        if slot.id in self._slots:
            try:
                events = slot.machine.drain_events()
            except Exception as exc:  # noqa: BLE001
                self._fail(slot, exc, "internal error")
                return
            if broken:
                events = [e for e in events if _sent_when_broken(e)]
            self._after_events(slot, events)

    def _inbox_ender(self, slot: _Slot) -> Ended:
        def ended(error: BaseException | None) -> None:
            if slot.id in self._slots:
                err = error if isinstance(error, Exception) else ConnectionClosedError("the connection was closed")
                self._mark(slot)
                try:
                    slot.machine.handle(ConnectionClosed(error=err), 0.0)
                except Exception as exc:  # noqa: BLE001
                    self._fail(slot, exc, "internal error")
                    return
                self._after(slot)

        return ended

    def _after(self, slot: _Slot) -> None:
        """Act on every event the machine queued; forget it once it has finished."""
        self._after_events(slot, slot.machine.drain_events())

    def _after_events(self, slot: _Slot, events: list[Any]) -> None:
        machine = slot.machine
        if events:
            writers = self._writers
            sink = slot.sink
            for e in events:
                write = writers.get(e.__class__)
                if write is None:
                    sink(e)
                else:
                    write(slot, e)
                    if slot.id not in self._slots:
                        return  # the write failed and ended the machine
        if machine.finished:
            self._end(slot)
        elif not slot.dirty:
            slot.dirty = True
            self._dirty.append(slot)

    def _mark(self, slot: _Slot) -> None:
        if not slot.dirty:
            slot.dirty = True
            self._dirty.append(slot)

    def _refresh(self) -> None:
        """Re-read the deadline of every machine touched since the last refresh."""
        dirty = self._dirty
        heap = self._heap
        slots = self._slots
        self._stale = False
        for slot in dirty:
            slot.dirty = False
            if slot.id not in slots:
                continue
            due = slot.machine.next_deadline()
            if due != slot.deadline:
                slot.deadline = due
                if due is not None:
                    heapq.heappush(heap, (due, slot.id))
        dirty.clear()
        # Drop stale entries from the top, so next_deadline() can peek; rebuild when most are.
        while heap:
            top, top_id = heap[0]
            owner = slots.get(top_id)
            if owner is not None and owner.deadline == top:
                break
            heapq.heappop(heap)
        if len(heap) > 64 + 4 * len(slots):
            self._heap = [(s.deadline, s.id) for s in slots.values() if s.deadline is not None]
            heapq.heapify(self._heap)

    def _fail(self, slot: _Slot, error: BaseException, reason: str) -> None:
        if slot.id not in self._slots:
            return
        self._end(slot)
        slot.sink(MachineFailed(error=error, reason=reason))

    def _end(self, slot: _Slot) -> None:
        self._slots.pop(slot.id, None)
        slot.deadline = None
        self._stale = True
        self._close_inbox(slot)

    def _drain_inbox(self, slot: _Slot, now: float) -> None:
        """Draining: UNSUB the inbox, and route what the server sent before it saw the UNSUB
        until the PONG of a flush behind it; then the machine hears :class:`InboxDrained`.
        (Closed at once, nothing in flight counts, when the connection is down.)"""
        if slot.id in self._fences.values():
            return  # (drained already: its fence is on its way)
        token = self.conn.drain_subscription(slot.sid) if slot.sid else None
        if token is not None:
            self._fences[token] = slot.id
            return
        self._close_inbox(slot)
        self._tell(slot, INBOX_DRAINED, now)

    def _fenced(self, token: int, now: float) -> None:
        slot = self._slots.get(self._fences.pop(token))
        if slot is not None:
            self._close_inbox(slot)
            self._tell(slot, INBOX_DRAINED, now)

    def _tell(self, slot: _Slot, command: Any, now: float) -> bool:
        """Hand ``command`` to the machine and act on what it queued; False if it raised (it
        is ended as failed)."""
        self._mark(slot)
        try:
            slot.machine.handle(command, now)
        except Exception as exc:  # noqa: BLE001
            self._fail(slot, exc, "internal error")
            return False
        self._after(slot)
        return True

    def _close_inbox(self, slot: _Slot) -> None:
        sid = slot.sid
        if not sid:
            return
        slot.sid = 0
        self._routes.pop(sid, None)
        self._run_routes.pop(sid, None)
        self._ends.pop(sid, None)
        conn = self.conn
        if conn.state is not State.CLOSED and conn.has_subscription(sid):
            try:
                conn.unsubscribe(sid)
            except NatsError:
                pass

    # -- frames sub-machines ask for

    def _publish_for(self, slot: _Slot, subject: str, body: bytes, reply: str | None) -> None:
        try:
            self.conn.publish(subject, body, reply)
        except NatsError as exc:  # the reconnect buffer is full, the connection closed ...
            self._fail(slot, exc, "could not send")

    def _write_pull(self, slot: _Slot, e: PullRequested) -> None:
        if slot.target is None:
            raise LocalProtocolError("a pull machine was attached without a target subject")
        self._publish_for(slot, slot.target, e.body, slot.inbox)

    def _write_flow_control(self, slot: _Slot, e: FlowControlReplyRequested) -> None:
        try:
            self.conn.publish(e.reply, b"")
        except NatsError:
            pass  # the server asks again

    def _write_direct_get(self, slot: _Slot, e: DirectGetRequested) -> None:
        self._publish_for(slot, e.subject, e.body, slot.inbox)

    def _write_publish(self, slot: _Slot, e: PublishRequested) -> None:
        entry = e.entry
        try:
            self.conn.publish_inbox(entry.subject, entry.payload, e.reply.encode(), entry.headers)
        except NatsError as exc:
            self._mark(slot)
            slot.machine.handle(SendFailed(entry=entry, error=exc), 0.0)
            self._after(slot)

    def _write_progress(self, slot: _Slot, e: ProgressRequested) -> None:
        try:
            self.conn.publish_ack(e.reply, WPI)
        except NatsError:
            pass  # the connection is gone for good: nothing to extend

    def _write_ack_next(self, slot: _Slot, e: AckNextRequested) -> None:
        # (a failure is the application's ack failing, not the machine's: it goes on)
        if e.pull and slot.inbox:
            self.conn.publish(e.reply, e.body, slot.inbox)
        else:
            self.conn.publish_ack(e.reply, e.body)

    def _write_frames(self, slot: _Slot, e: FramesRequested) -> None:
        self.conn.publish_frames(e.data, e.count)  # (not connected: the machine re-sends later)

    def _write_send(self, slot: _Slot, e: SendRequested) -> None:
        # (reply tokens need a wildcard inbox: slot.inbox is then the prefix "<inbox>.")
        reply = None if e.reply_token is None else slot.inbox + e.reply_token
        if not e.best_effort:
            self._publish_for(slot, e.subject, e.body, reply)
            return
        try:
            self.conn.publish(e.subject, e.body, reply)
        except NatsError:
            pass  # best effort (a delete of a throw-away consumer): not worth ending the machine

    # ================================================================== plain subscriptions

    def subscribe(self, subject: str, queue: str | None, max_msgs: int | None, deliver: Deliver,
                  ended: Ended) -> int:
        """Subscribe; every message goes to ``deliver(msg, now)`` and the end (auto-unsubscribe
        reached, permission refused, connection closed) to ``ended(error)``."""
        sid = self.conn.subscribe(subject, queue, max_msgs)
        self._routes[sid] = deliver
        self._ends[sid] = ended
        return sid

    def unsubscribe(self, sid: int, max_msgs: int | None = None) -> None:
        """Unsubscribe now (or after ``max_msgs`` in total); an immediate end is reported to
        the subscription's ``ended`` at once."""
        conn = self.conn
        if conn.state is State.CLOSED:
            return
        conn.unsubscribe(sid, max_msgs)
        if not conn.has_subscription(sid):
            self._routes.pop(sid, None)
            self._run_routes.pop(sid, None)
            end = self._ends.pop(sid, None)
            if end is not None:
                end(None)

    def forget(self, sid: int) -> None:
        """Stop routing ``sid`` (the shell has ended it itself)."""
        self._routes.pop(sid, None)
        self._run_routes.pop(sid, None)
        self._ends.pop(sid, None)

    def has_route(self, sid: int) -> bool:
        return sid in self._routes

    # ================================================================== routing

    def _pump(self, now: float) -> None:
        """Route every event the connection queued: messages by sid, connection changes to
        every sub-machine; the rest goes to the shell's stream."""
        routes = self._routes
        out = self._events
        queued = self._conn_events
        pop = queued.popleft
        while queued:
            e = pop()
            cls = e.__class__
            if cls is MsgReceived:
                deliver = routes.get(e.sid)  # type: ignore[union-attr]
                if deliver is not None:
                    deliver(e, now)  # type: ignore[arg-type]
                continue
            if cls is MsgsReceived or cls is AcksReceived or cls is DirectRepliesReceived:
                deliver_run = self._run_routes.get(e.sid)  # type: ignore[union-attr]
                if deliver_run is not None:
                    deliver_run(e, now)
                continue
            if self._touched:
                self._settle()  # what the messages before this event produced comes first
            if cls is ev.FlushCompleted and self._fences:
                assert isinstance(e, ev.FlushCompleted)
                if e.token in self._fences:
                    self._fenced(e.token, now)
                    continue
            if cls is ev.SubscriptionEnded:
                assert isinstance(e, ev.SubscriptionEnded)
                routes.pop(e.sid, None)
                self._run_routes.pop(e.sid, None)
                end = self._ends.pop(e.sid, None)
                if end is not None:
                    end(e.error)
                continue
            if self._fences and (cls is ev.Disconnected or cls is ev.Closed):
                # A drained inbox's subscription died with the transport (no SUB renews it):
                # nothing more can come for it, whatever its fence's PONG does later. (Told
                # first: a drained consume with an empty buffer ends drained, not closed.)
                for token in tuple(self._fences):
                    self._fenced(token, now)
            if cls in _CONNECTION_CHANGES and self._slots:
                self._tell_all(e, now)
            out.append(e)
        if self._touched:
            self._settle()
        if self._dirty or self._stale:
            self._refresh()

    def _tell_all(self, e: Any, now: float) -> None:
        cls = e.__class__
        if cls is ev.Disconnected:
            cmd: Any = ConnectionLost(error=e.error)
        elif cls is ev.Reconnected:
            cmd = ConnectionRestored(url=e.url)
        else:
            # Always a ConnectionClosedError; why it closed (no servers left, auth ...) is
            # its cause.
            err = ConnectionClosedError(
                "the connection was closed" + (f": {e.error}" if e.error is not None else "")
            )
            err.__cause__ = e.error
            cmd = ConnectionClosed(error=err)
        for slot in tuple(self._slots.values()):
            if slot.id in self._slots:
                self._tell(slot, cmd, now)
