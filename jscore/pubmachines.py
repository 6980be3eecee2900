"""The publish windows as session sub-machines.

:class:`AsyncPublishMachine` runs a context's :class:`~jscore.publish.PublishWindow` (the
``publish_async`` window) and a second window for synchronous publishes on one wildcard reply
inbox; :class:`BulkPublishMachine` runs a :class:`~jscore.publish.FrameWindow` (the bulk,
idempotent publisher of the Spark writers). Both speak the sub-machine protocol of
:mod:`jscore.machine`: the session feeds them their PubAcks, fires their timers (ack deadlines,
re-sends after backoff), tells them about the connection, and writes the frames they ask for.

The publishing threads add entries to the windows directly, under the shell's lock (that is the
hot path: one dict insert per publish), then tell the session to re-read the machine's deadline
(:meth:`jscore.session.Session.touch`) when it may have moved.

Events, besides the frames the session writes (:class:`PublishRequested`,
:class:`FramesRequested`):

- a settled entry of the async or sync window that someone waits for (``entry.watched``), as
  itself (an entry is its own event: no allocation per publish; an unwatched entry settles
  silently);
- :data:`PROGRESS` when the number in flight fell to the level a waiting thread asked for
  (:class:`WatchLevel`), when a bulk re-send was scheduled, or the bulk window failed;
- :class:`PublisherClosed` once, when the connection (or the reply inbox) is gone for good.
"""

from __future__ import annotations

from itertools import groupby
from operator import itemgetter
from typing import Any, Final

import msgspec

from .errors import ConnectionClosedError, LocalProtocolError, PubAckTimeoutError
from .machine import ConnectionClosed, ConnectionLost, ConnectionRestored, Stop
from .protocol import AcksReceived, MsgReceived
from .publish import PENDING, FrameWindow, PendingPublish, PublishWindow

__all__ = [
    "AsyncPublishMachine",
    "BulkPublishMachine",
    "FramesRequested",
    "PROGRESS",
    "Progress",
    "PublishRequested",
    "PublisherClosed",
    "SendFailed",
    "WatchLevel",
]


# ------------------------------------------------------------------------------ commands


class WatchLevel(msgspec.Struct, frozen=True, kw_only=True):
    """Emit :data:`PROGRESS` once the number in flight is at most ``level`` (-1: stop
    watching). A new level replaces the old one."""

    level: int


class SendFailed(msgspec.Struct, frozen=True, kw_only=True):
    """The session could not queue the frame of ``entry`` (see :class:`PublishRequested`)."""

    entry: Any
    error: BaseException


# ------------------------------------------------------------------------------ events


class PublishRequested(msgspec.Struct, frozen=True, kw_only=True):
    """Publish ``entry``'s message again to its subject with ``reply`` as the reply subject. When
    the session cannot queue it, it answers :class:`SendFailed`."""

    entry: Any
    reply: str


class FramesRequested(msgspec.Struct, frozen=True, kw_only=True):
    """Write ``count`` complete frames joined in ``data``, if connected. While disconnected they
    are not buffered: the machine writes everything again after the reconnect."""

    data: bytes
    count: int


class Progress(msgspec.Struct, frozen=True):
    """See the module docstring."""


PROGRESS: Final = Progress()


class PublisherClosed(msgspec.Struct, frozen=True, kw_only=True):
    """The machine ended: every entry in flight was settled (ambiguous); ``error`` says why."""

    error: BaseException | None


_NO_EVENTS: Final[list[Any]] = []
_first = itemgetter(0)
_fourth = itemgetter(3)


# ------------------------------------------------------------------------------ async + sync


class AsyncPublishMachine:
    """The publish windows of one JetStream context on one wildcard reply inbox
    ``<inbox>.*``: tokens of the async window are decimal numbers, those of the sync window
    start with ``s``.

    ``gen`` is the connection generation (the client's reconnect count) when the machine is
    attached; every :class:`ConnectionRestored` is the next one. Entries must be added with
    :meth:`generation` as their ``gen``."""

    def __init__(self, window: PublishWindow[Any], sync: PublishWindow[Any], *, gen: int, connected: bool) -> None:
        self.window = window
        self.sync = sync
        self.gen = gen
        self.connected = connected
        window.gen = sync.gen = gen
        window.connected = sync.connected = connected
        self.prefix = ""  # the reply prefix "<inbox>." (set by the shell once attached)
        self._plen = 0
        self.wake_level = -1
        self._events: list[Any] = []
        self.finished = False  # (an attribute, not a property: read once per ack)

    def set_prefix(self, prefix: str) -> None:
        self.prefix = prefix
        self._plen = len(prefix)

    def generation(self) -> int:
        """The ``gen`` of an entry added now (the next connection's while disconnected)."""
        return self.gen if self.connected else self.gen + 1

    @property
    def in_flight(self) -> int:
        return len(self.window)

    # -- the protocol

    def drain_events(self) -> list[Any]:
        events = self._events
        if not events:
            return _NO_EVENTS
        self._events = []
        return events

    def next_deadline(self) -> float | None:
        a = self.window.next_deadline()
        b = self.sync.next_deadline()
        if a is None:
            return b
        if b is None or a < b:
            return a
        return b

    def receive_msg(self, msg: MsgReceived, now: float) -> None:
        token = msg.subject[self._plen :]
        window = self.sync if token[:1] == "s" else self.window
        entry = window.receive_ack(token, msg.data, msg.status, now)
        if entry is None or entry.outcome is PENDING:
            return  # late, or a re-send scheduled (the session re-reads the deadline)
        if entry.watched:
            self._events.append(entry)
        if self.wake_level >= 0:
            self._check_level()

    def receive_acks(self, run: AcksReceived, now: float) -> None:
        """A run of PubAcks read in the connection's ack lane: each settles its entry as
        :meth:`receive_msg` would with the same PubAck."""
        window = self.window
        sync = self.sync
        events = self._events
        settled = False
        for token, stream, seq, duplicate in run.acks:
            entry = (sync if token[:1] == "s" else window).receive_puback(token, stream, seq, duplicate)
            if entry is not None:
                settled = True
                if entry.watched:
                    events.append(entry)
        if settled and self.wake_level >= 0:
            self._check_level()  # (once for the run: a waiting thread re-checks in a loop anyway)

    def handle_timeout(self, now: float) -> None:
        gen = self.generation()
        for window in (self.window, self.sync):
            settled, resend = window.handle_timeout(now, gen)
            self._settled(settled)
            self._resend(resend)
        self._check_level()

    def handle(self, command: Any, now: float) -> None:
        cls = command.__class__
        if cls is WatchLevel:
            self.wake_level = command.level
            self._check_level()
        elif cls is SendFailed:
            entry = command.entry
            err = PubAckTimeoutError(
                f"could not send the publish to {entry.subject!r} again ({command.error}): "
                "it may or may not be stored"
            )
            err.__cause__ = command.error
            for window in (self.window, self.sync):
                window.fail(entry, err)
            if entry.outcome is not PENDING and entry.watched:
                self._events.append(entry)
            self._check_level()
        elif cls is ConnectionLost:
            self.connected = False
            for window in (self.window, self.sync):
                self._settled(window.connection_lost(self.gen))
            self._check_level()
        elif cls is ConnectionRestored:
            self.gen += 1
            self.connected = True
            for window in (self.window, self.sync):
                lost, resend = window.reconnected(self.gen, now)
                self._settled(lost)
                self._resend(resend)
            self._check_level()
        elif cls is ConnectionClosed or cls is Stop:
            if not self.finished:
                error = getattr(command, "error", None) or ConnectionClosedError("the publisher was closed")
                for window in (self.window, self.sync):
                    self._settled(window.close(error))
                self.finished = True
                self._events.append(PublisherClosed(error=error))
        else:
            raise LocalProtocolError(f"unknown command {command!r}")

    # -- internals

    def _settled(self, entries: list[PendingPublish]) -> None:
        for entry in entries:
            if entry.watched:
                self._events.append(entry)

    def _resend(self, entries: list[PendingPublish]) -> None:
        prefix = self.prefix
        for entry in entries:
            self._events.append(PublishRequested(entry=entry, reply=prefix + entry.token))

    def _check_level(self) -> None:
        level = self.wake_level
        if level >= 0 and len(self.window) <= level:
            self.wake_level = -1
            self._events.append(PROGRESS)


# ------------------------------------------------------------------------------ bulk


class BulkPublishMachine:
    """A :class:`~jscore.publish.FrameWindow` on a wildcard reply inbox ``<inbox>.*`` whose
    tokens are ints. Nothing expires while disconnected; after ``stall_timeout`` seconds
    without a connection and with messages in flight, the window fails with
    :class:`PubAckTimeoutError`. After a reconnect everything in flight is written again."""

    def __init__(self, window: FrameWindow, *, stall_timeout: float, connected: bool) -> None:
        self.window = window
        self.stall_timeout = stall_timeout
        self.connected = connected
        self._plen = 0
        self._stall_at: float | None = None
        self._events: list[Any] = []
        self.finished = False  # (an attribute, not a property: read once per ack)
        self.closed_error: BaseException | None = None

    def set_prefix(self, prefix: str) -> None:
        self._plen = len(prefix)
        self.window.reply_prefix = prefix.encode()

    def drain_events(self) -> list[Any]:
        events = self._events
        if not events:
            return _NO_EVENTS
        self._events = []
        return events

    def next_deadline(self) -> float | None:
        if self.finished:
            return None
        if self.connected:
            return self.window.next_deadline()
        return self._stall_at if self.window.in_flight else None

    def receive_msg(self, msg: MsgReceived, now: float) -> None:
        try:
            token = int(msg.subject[self._plen :])
        except ValueError:
            return
        if self.window.receive_ack(token, msg.data, msg.status, now):
            self._events.append(PROGRESS)

    def receive_acks(self, run: AcksReceived, now: float) -> None:
        """A run of PubAcks read in the connection's ack lane (see :meth:`receive_msg`); one
        :data:`PROGRESS` for the run when any of them asks for it."""
        window = self.window
        wake = False
        if window.groups is not None:
            # Shared replies: the acks of a batch come in a row on its token; one call each.
            for token, acks in groupby(run.acks, _first):
                try:
                    number = int(token)
                except ValueError:
                    continue
                answers = list(acks)
                if window.receive_pubacks(number, len(answers), sum(map(_fourth, answers))):
                    wake = True
        else:
            for token, _stream, _seq, duplicate in run.acks:
                try:
                    number = int(token)
                except ValueError:
                    continue
                if window.receive_puback(number, duplicate):
                    wake = True
        if wake:
            self._events.append(PROGRESS)

    def handle_timeout(self, now: float) -> None:
        window = self.window
        if not self.connected:
            if self._stall_at is not None and now >= self._stall_at and window.in_flight and window.failure is None:
                window.failure = PubAckTimeoutError(
                    f"{window.in_flight} publishes unconfirmed and no connection for {self.stall_timeout:g} s: "
                    "they may or may not be stored"
                )
                self._events.append(PROGRESS)
            return
        due = window.next_deadline()
        if due is None or due > now:
            return
        frames = window.due(now)
        if frames:
            self._events.append(FramesRequested(data=b"".join(frames), count=len(frames)))
        if window.failure is not None or frames:
            self._events.append(PROGRESS)

    def handle(self, command: Any, now: float) -> None:
        cls = command.__class__
        if cls is ConnectionLost:
            self.connected = False
            self._stall_at = now + self.stall_timeout
        elif cls is ConnectionRestored:
            self.connected = True
            self._stall_at = None
            frames = self.window.everything(now)
            if frames:
                self._events.append(FramesRequested(data=b"".join(frames), count=len(frames)))
        elif cls is ConnectionClosed or cls is Stop:
            if not self.finished:
                self.finished = True
                self.closed_error = getattr(command, "error", None)
                self._events.append(PublisherClosed(error=self.closed_error))
        elif cls is WatchLevel:
            self.window.wake_level = command.level
            if command.level >= 0 and self.window.in_flight <= command.level:
                self._events.append(PROGRESS)
        else:
            raise LocalProtocolError(f"unknown command {command!r}")
