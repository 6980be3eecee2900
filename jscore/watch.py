"""A watcher over an ordered consumer, without I/O: the key-value store's and the object
store's watch (:mod:`jscore.kv`, :mod:`jscore.objstore`) are this one machine with their own
decoding of a delivered message.

:class:`WatchState` decides what the application gets from each delivery, in order: items
and, once, ``None`` when the initial values are all delivered (at once when there are none;
never with ``updates_only``). A subclass turns one stored message into an item
(:meth:`WatchState.item`), or into nothing (a delete left out by ``ignore_deletes``; a message
that is not an item, noted in :attr:`WatchState.skipped`).

:class:`WatchMachine` is the watcher as a session sub-machine: the ordered consumer's
:class:`~jscore.ordered.OrderedMachine` (creates, pulls, resets, reconnects, timers), whose
deliveries become :class:`WatchChanged` events on the I/O thread.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar, Final, Generic, TypeVar

import msgspec

from .errors import InvalidOptionError
from .headers import Headers
from .ordered import OrderedConsumerCreated, OrderedMachine, OrderedMessageDelivered, OrderedMessagesDelivered
from .protocol import MsgReceived, MsgsReceived
from .times import from_unix_ns
from .pull import ConsumeOptions, MessagesTaken, resolve_consume_options
from .validate import check_bool

__all__ = ["WatchOptions", "WatchState", "WatchChanged", "WatchSkipped", "WatchMachine", "WATCH_HEARTBEAT",
           "watch_consume_options"]

T = TypeVar("T")

WATCH_HEARTBEAT: Final = 5.0
"""The idle heartbeat of a watcher's pulls (nats.go's watchers use 5 s too): a watcher mostly
waits, and what it waits on can vanish without a word (its bucket deleted while its consumer
was being re-created): the missed heartbeats (2 x this) are then what ends the wait."""


def watch_consume_options() -> ConsumeOptions:
    """The pull options of a watcher's ordered consumer: the consume defaults with
    :data:`WATCH_HEARTBEAT`."""
    return resolve_consume_options(heartbeat=WATCH_HEARTBEAT)


class WatchOptions(msgspec.Struct, frozen=True, kw_only=True):
    """A watch's options: ``include_history`` (every stored message, not only the last per
    subject), ``ignore_deletes``, ``meta_only`` (headers only; the key-value store's) and
    ``updates_only`` (only what comes after the start)."""

    include_history: bool = False
    ignore_deletes: bool = False
    meta_only: bool = False
    updates_only: bool = False

    def __post_init__(self) -> None:
        for name in ("include_history", "ignore_deletes", "meta_only", "updates_only"):
            check_bool(getattr(self, name), name)
        if self.include_history and self.updates_only:
            raise InvalidOptionError("include_history and updates_only exclude each other")

    @property
    def deliver_policy(self) -> str:
        """The ordered consumer's deliver policy for these options."""
        if self.updates_only:
            return "new"
        return "all" if self.include_history else "last_per_subject"


class WatchState(Generic[T]):
    """The watcher's decisions over the ordered consumer's deliveries (pure).

    Feed it :meth:`created` with the ``num_pending`` of each server consumer the ordered
    consumer makes, and :meth:`delivered` with each message; each returns what the application
    gets, in order: items and, once, ``None`` when the initial values are all delivered. The
    ordered consumer already guarantees each message once and in order, across its resets and
    reconnects; a sequence at or below the last one seen is dropped here as a second guard.
    """

    __slots__ = ("options", "initialized", "last_revision", "skipped")

    def __init__(self, options: WatchOptions) -> None:
        self.options = options
        self.initialized = options.updates_only
        self.last_revision = 0
        # (subject, reason) of each delivery that was not an item, for the shell to report.
        self.skipped: list[tuple[str, str]] = []

    def item(
        self, subject: str, data: bytes, headers: Headers | None, stream_seq: int, timestamp: datetime,
        num_pending: int,
    ) -> T | None:
        """The item of one delivery, or None when the application does not get it."""
        raise NotImplementedError

    def created(self, num_pending: int) -> list[T | None]:
        """A server consumer was created with ``num_pending`` messages ahead of it."""
        if not self.initialized and num_pending == 0:
            self.initialized = True
            return [None]
        return []

    def delivered(
        self,
        subject: str,
        data: bytes,
        headers: Headers | None,
        stream_seq: int,
        timestamp: datetime,
        num_pending: int,
    ) -> list[T | None]:
        out: list[T | None] = []
        if stream_seq > self.last_revision:
            self.last_revision = stream_seq
            item = self.item(subject, data, headers, stream_seq, timestamp, num_pending)
            if item is not None:
                out.append(item)
        if not self.initialized and num_pending == 0:
            self.initialized = True
            out.append(None)
        return out


class WatchChanged(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """What a watcher hands to its application: an item (a ``KeyValueEntry``, an
    ``ObjectInfo``), or ``None`` once the initial values are all delivered. ``size`` is the
    delivered message's size, reported back with ``MessagesTaken`` once the application took
    it (0 for the marker)."""

    entry: Any
    size: int = 0


class WatchSkipped(msgspec.Struct, frozen=True, kw_only=True):
    """A notification: the message on ``subject`` is not an item (``reason``) and was left out."""

    subject: str
    reason: str


class WatchMachine(Generic[T]):
    """A watcher as a session sub-machine: the ordered consumer's machine, whose deliveries go
    through a :class:`WatchState` on the I/O thread.

    Everything but the events is the ordered machine's (creates, pulls, resets, reconnects,
    timers, runs of deliveries). Its ``OrderedMessageDelivered`` and
    ``OrderedMessagesDelivered`` become :class:`WatchChanged` (and the marker);
    its ``OrderedConsumerCreated`` may become the marker; every other event passes through.
    A delivery the application never sees (a delete left out by ``ignore_deletes``, a repeated
    sequence, a message that is not an item) is reported taken at once, so the consume's buffer
    accounting stays right; the application reports the others (``MessagesTaken``) as it takes
    them.
    """

    __slots__ = ("inner", "state", "_now")

    RUN_CURSORS: ClassVar[bool] = True
    """As the ordered machine's: the session arms the inbox for runs read by the delivery lane."""

    def __init__(self, inner: OrderedMachine, state: WatchState[T], now: float) -> None:
        self.inner = inner
        self.state = state
        self._now = now

    @property
    def finished(self) -> bool:
        return self.inner.finished

    def receive_msg(self, msg: MsgReceived, now: float) -> None:
        self._now = now
        self.inner.receive_msg(msg, now)

    def receive_msgs(self, run: MsgsReceived, now: float) -> None:
        self._now = now
        self.inner.receive_msgs(run, now)

    def handle(self, command: object, now: float) -> None:
        self._now = now
        self.inner.handle(command, now)

    def handle_timeout(self, now: float) -> None:
        self._now = now
        self.inner.handle_timeout(now)

    def next_deadline(self) -> float | None:
        return self.inner.next_deadline()

    def drain_events(self) -> list[object]:
        out: list[object] = []
        state = self.state
        while True:
            events = self.inner.drain_events()
            if not events:
                return out
            unseen = unseen_size = 0
            for e in events:
                cls = e.__class__
                if cls is OrderedMessageDelivered:
                    md = e.metadata
                    delivered: Any = ((e.msg, md.sequence.stream, md.timestamp, md.num_pending),)
                elif cls is OrderedMessagesDelivered:
                    # (each message's ack subject is a v1 one the run's check read: its last token
                    # is the pending count, its stamp gives the time MsgMetadata would)
                    delivered = [
                        (m, seq, from_unix_ns(stamp), int(m.reply[m.reply.rfind(".") + 1 :]))
                        for m, seq, stamp in zip(e.msgs, e.stream_seqs, e.stamps)
                    ]
                elif cls is OrderedConsumerCreated:
                    out.extend(WatchChanged(entry=None) for _ in state.created(e.num_pending))
                    continue
                else:
                    out.append(e)
                    continue
                for m, seq, timestamp, num_pending in delivered:
                    items = state.delivered(m.subject, m.data, m.headers, seq, timestamp, num_pending)
                    if state.skipped:
                        out.extend(WatchSkipped(subject=s, reason=r) for s, r in state.skipped)
                        state.skipped.clear()
                    if not items or items[0] is None:  # (no item: nothing, or only the marker)
                        unseen += 1
                        unseen_size += m.size
                    for i in items:
                        out.append(WatchChanged(entry=i, size=m.size if i is not None else 0))
            if not unseen or self.inner.finished or self.inner.broken:
                return out  # (broken: the session reports its error; what was decided goes first)
            self.inner.handle(MessagesTaken(count=unseen, size=unseen_size), self._now)
