"""The ordered consumer on the blocking client: a stream read exactly once and in order.

Every decision is the core's: :class:`jscore.ordered.OrderedMachine` creates the throw-away
server consumers (its own create requests), pulls from the current one, checks each delivery
against the cursor, resets, backs off, keeps a fetch's deadline and says how an operation
ended. This module only runs one such machine per operation on the client's core session (the
I/O thread feeds it and fires its timers) and waits on a queue for what it emits:

- ``fetch()`` / ``next()`` wait for the machine's end, at most until its own deadline (plus a
  guard that only matters if the I/O thread died);
- ``messages()`` is read by the caller, ``next(timeout)`` waiting at most ``timeout``;
- ``consume(handler)`` is the same read by a dispatcher thread that runs the handler.

No thread of its own beyond that dispatcher, no sleep, no blocking API call.
"""

from __future__ import annotations

import logging
import os
import queue
import random
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

from jscore import pull as P
from jscore.validate import check_poll_timeout
from jscore.errors import InvalidOptionError, NoMessagesError, TimeoutError
from jscore.headers import Headers, bulk_headers
from jscore.jsmsg import parse_ack_subject
from jscore.machine import MachineFailed, Stop
from jscore.models import DeliverPolicy
from jscore import bulk
from jscore.ordered import (
    OrderedColumnsDelivered,
    OrderedConsumerOptions,
    OrderedConsumerReset,
    OrderedConsumerState,
    OrderedEnd,
    OrderedFinished,
    OrderedMachine,
    OrderedMessageDelivered,
    OrderedMessagesDelivered,
    new_name_prefix,
)

from .client import shell_of
from .events import CallbackError
from .msg import JsMsg
from .pull import EventHandler, Handler, _StreamEnded

if TYPE_CHECKING:
    from .jetstream import JetStream

__all__ = ["OrderedConsumer", "OrderedConsumeContext", "OrderedMessageStream", "OrderedConsumerReset"]

Record = tuple[str, bytes, "Headers | str | None", int, int]
"""A message as a bulk reader takes it (:meth:`OrderedConsumer._fetch_records`): subject,
payload, headers (the text of their lines while they are as the parser checked them, see
:func:`jscore.headers.bulk_headers`), stream sequence, time stored in nanoseconds since the
epoch."""

_log = logging.getLogger("jssync")
_monotonic: Final = time.monotonic

# How long past the machine's own deadline a fetch waits for its end: the I/O thread fires that
# deadline, so this only guards against a dead I/O thread.
_GUARD: Final = 2.0


class _End:
    """Queue marker: the operation is over."""

    __slots__ = ("kind", "error")

    def __init__(self, kind: OrderedEnd, error: BaseException | None) -> None:
        self.kind = kind
        self.error = error


class _Op:
    """One operation of an ordered consumer: its machine on the client's session, and the
    queue the machine's events go to. The sink runs under the client lock (usually on the I/O
    thread) and only queues."""

    def __init__(
        self,
        oc: OrderedConsumer,
        options: P.FetchOptions | P.ConsumeOptions,
        collect: bool = False,
        records: bool = False,
        columns: bool = False,
    ) -> None:
        js = oc._js
        self._oc = oc
        self._shell = shell = shell_of(js.client)
        self._client = js.client
        self.q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        # A fetch's messages are gathered here, not queued one by one: the caller is woken once,
        # by the end, instead of once per message.
        self.out: list[Any] | None = [] if collect else None
        # A records fetch (a bulk reader's) gathers (subject, data, headers, stream sequence,
        # time stored in ns) tuples instead of messages, and the last one's ack subject.
        self.records = records
        self.last_reply: str | None = None
        self.done = False
        self.kind: OrderedEnd | None = None
        self.error: BaseException | None = None
        self._released = False
        shell.check_fork()
        with shell.lock:
            self.machine = OrderedMachine(
                oc._state,
                options,
                _monotonic(),
                api_prefix=js.api_prefix,
                request_timeout=js.timeout,
                connected=shell.session.conn.is_connected,
                columns=columns,
            )
            self.slot = shell.attach_locked(self.machine, self._on_event, wildcard=True)

    # -- the sink (under the lock) -----------------------------------------------------------

    def _on_event(self, e: Any) -> None:
        cls = e.__class__
        if cls is OrderedMessageDelivered:
            if self.records:
                m, meta = e.msg, e.metadata
                assert self.out is not None
                self.out.append((m.subject, m.data, bulk_headers(m.headers), meta.sequence.stream, meta.timestamp_ns))
                self.last_reply = m.reply
                return
            msg = JsMsg._from_event(e.msg, self._client)
            msg._meta = e.metadata  # (checked by the machine: no second parse)
            out = self.out
            if out is not None:
                out.append(msg)
            else:
                self.q.put(msg)
        elif cls is OrderedMessagesDelivered:
            out = self.out
            msgs = e.msgs
            if self.records:
                assert out is not None
                out.extend(
                    [
                        (m.subject, m.data, bulk_headers(m.headers), seq, ts)
                        for m, seq, ts in zip(msgs, e.stream_seqs, e.stamps)
                    ]
                )
                self.last_reply = msgs[-1].reply
                return
            client = self._client
            make = JsMsg._from_event
            if out is not None:
                out.extend([make(m, client) for m in msgs])
            else:
                put = self.q.put
                for m in msgs:
                    put(make(m, client))
        elif cls is OrderedColumnsDelivered:
            # (a records fetch's run read in bulk: kept as it came, see _fetch_records)
            assert self.records and self.out is not None
            self.out.append(e.columns)
            self.last_reply = e.columns.last_reply()
        elif cls is OrderedFinished:
            self._end(e.end, e.error)
        elif cls is MachineFailed:
            _log.error("jssync: ordered consumer machine failed (%s)", e.reason, exc_info=e.error)
            self._end(OrderedEnd.ERROR, e.error)
        else:
            self.q.put(e)  # a notification

    def _end(self, kind: OrderedEnd, error: BaseException | None) -> None:
        if self.done:
            return
        self.done = True
        self.kind = kind
        self.error = error
        self.q.put(_End(kind, error))
        self._release_locked()

    def _release_locked(self) -> None:
        if not self._released:
            self._released = True
            self._oc._busy.release()

    # -- from the caller -----------------------------------------------------------------

    def command(self, cmd: Any, *, kick: bool = False) -> None:
        shell = self._shell
        if shell.forked:
            return
        with shell.lock:
            if not self.done:
                shell.command_locked(self.slot, cmd, kick=kick)

    def stop(self) -> None:
        """End now. The machine ends at once; should its slot be gone already, end here."""
        shell = self._shell
        if shell.forked:
            return
        with shell.lock:
            if not self.done:
                shell.command_locked(self.slot, Stop())
            self._end(OrderedEnd.STOPPED, None)  # (a no-op once the machine said it ended)

    def release(self) -> None:
        """Free the ordered consumer for its next operation (idempotent)."""
        with self._shell.lock:
            self._release_locked()


class OrderedConsumer:
    """An ordered view of a stream (``js.ordered_consumer(stream, ...)``): ephemeral, ack-less
    server consumers recreated behind the scenes so that every message (of the filter) comes
    once and in stream order. One fetch, consume or messages at a time; after one ends the
    next continues from the cursor."""

    def __init__(self, js: JetStream, stream: str, options: OrderedConsumerOptions) -> None:
        self._js = js
        self._stream = stream
        rng = random.Random(os.urandom(16))
        self._state = OrderedConsumerState(stream, options, name_prefix=new_name_prefix(rng))
        self._busy = threading.Lock()

    @property
    def stream_name(self) -> str:
        return self._stream

    @property
    def name(self) -> str:
        """The name of the current (or next) server consumer."""
        return self._state.name

    @property
    def state(self) -> OrderedConsumerState:
        """The cursor (``stream_seq``, ``consumer_seq``), serial, resets and state."""
        return self._state

    def __repr__(self) -> str:
        return f"<OrderedConsumer {self._stream!r} {self._state!r}>"

    def _acquire(self) -> None:
        if not self._busy.acquire(blocking=False):
            raise InvalidOptionError("an ordered consumer runs one fetch, consume or messages at a time")

    def _start(
        self, options: P.FetchOptions | P.ConsumeOptions, collect: bool = False, records: bool = False, columns: bool = False
    ) -> _Op:
        self._acquire()
        try:
            return _Op(self, options, collect, records, columns)
        except BaseException:
            self._busy.release()
            raise

    # ------------------------------------------------------------------ fetch / next

    def fetch(
        self,
        max_messages: int | None = None,
        *,
        max_bytes: int | None = None,
        expires: float | None = 30.0,
        heartbeat: float | None = None,
        no_wait: bool = False,
    ) -> list[JsMsg]:
        """Up to ``max_messages`` next messages in order (a list: the fetch is checked against
        the cursor as a whole). Reuses the server consumer while the cursor is contiguous; a
        reset before anything arrived is healed within the fetch's time. Returns by
        ``expires`` plus a small grace; :class:`NoMessagesError` if no server consumer could
        be made ready by then (a backoff, JetStream unavailable)."""
        opts = P.resolve_fetch_options(
            max_messages=max_messages, max_bytes=max_bytes, expires=expires, heartbeat=heartbeat, no_wait=no_wait
        )
        out, _ = self._fetch(opts, records=False)
        return out

    def _fetch_records(
        self,
        max_messages: int,
        *,
        no_wait: bool = False,
        expires: float | None = 30.0,
        columns: bool = False,
        max_bytes: int | None = None,
    ) -> tuple[list[Any], int | None]:
        """:meth:`fetch` for a bulk reader (the Spark source): the messages as :data:`Record`
        tuples, no :class:`JsMsg` each, and the last one's pending count (None: none came).
        With ``columns``, runs the connection read in bulk come as they are, a
        :class:`jscore.bulk.DeliveryColumns` each, among the tuples. With ``max_bytes`` too, the
        pull also stops at that many bytes (the server honours both)."""
        opts = P.resolve_fetch_options(max_messages=max_messages, max_bytes=max_bytes, expires=expires, no_wait=no_wait)
        return self._fetch(opts, records=True, columns=columns)

    def _fetch(self, opts: P.FetchOptions, *, records: bool, columns: bool = False) -> tuple[list[Any], int | None]:
        if columns:
            bulk.load()  # (here, not on the I/O thread under the client's lock: an import takes a while)
        op = self._start(opts, collect=True, records=records, columns=columns)
        try:
            deadline = op.machine.deadline
            assert deadline is not None
            deadline += _GUARD
            q = op.q
            while True:
                try:
                    item = q.get(timeout=max(0.0, deadline - _monotonic()))
                except queue.Empty:
                    op.stop()
                    raise TimeoutError("the ordered fetch did not end by its deadline") from None
                if item.__class__ is _End:
                    break
                # (notifications: a fetch has no on_event)
        finally:
            op.release()
        out = op.out
        assert out is not None
        kind = item.kind
        if out or kind is OrderedEnd.DONE or kind is OrderedEnd.STOPPED:
            last = op.last_reply
            return out, (parse_ack_subject(last).num_pending if records and last is not None else None)
        if kind is OrderedEnd.NOT_READY:
            raise NoMessagesError("the ordered consumer is waiting to recreate its server consumer")
        if kind is OrderedEnd.CLOSED or item.error is None:
            raise _StreamEnded("the ordered consumer was closed")
        raise item.error

    def next(self, *, timeout: float = 30.0, heartbeat: float | None = None) -> JsMsg:
        """The next message in order; :class:`NoMessagesError` (a TimeoutError) if none."""
        msgs = self.fetch(1, expires=timeout, heartbeat=heartbeat)
        if msgs:
            return msgs[0]
        raise NoMessagesError(f"no message from the ordered consumer on {self._stream!r} within {timeout} s")

    # ------------------------------------------------------------------ continuous

    def messages(
        self,
        *,
        max_messages: int | None = None,
        max_bytes: int | None = None,
        expires: float = 30.0,
        heartbeat: float | None = None,
        threshold_messages: int | None = None,
        threshold_bytes: int | None = None,
        on_event: EventHandler | None = None,
    ) -> OrderedMessageStream:
        """Read the stream in order with ``for msg in stream`` or ``stream.next(timeout)``."""
        given: dict[str, Any] = dict(
            max_messages=max_messages, max_bytes=max_bytes, expires=expires, heartbeat=heartbeat,
            threshold_messages=threshold_messages, threshold_bytes=threshold_bytes,
        )
        # Validated before anything is created (the same rules as a plain consume).
        opts = P.resolve_consume_options(**{k: v for k, v in given.items() if v is not None})
        return OrderedMessageStream(self._start(opts), opts, on_event)

    def consume(
        self,
        handler: Handler,
        *,
        max_messages: int | None = None,
        max_bytes: int | None = None,
        expires: float = 30.0,
        heartbeat: float | None = None,
        threshold_messages: int | None = None,
        threshold_bytes: int | None = None,
        on_event: EventHandler | None = None,
    ) -> OrderedConsumeContext:
        """Call ``handler(msg)`` for every message, in order, on a dispatcher thread."""
        if not callable(handler):
            raise InvalidOptionError("consume needs a callable handler")
        stream = self.messages(
            max_messages=max_messages, max_bytes=max_bytes, expires=expires, heartbeat=heartbeat,
            threshold_messages=threshold_messages, threshold_bytes=threshold_bytes, on_event=on_event,
        )
        return OrderedConsumeContext(stream, handler, on_event)


class _Taker:
    """Reports taken messages to the machine in small batches, always before the queue runs
    dry (the machine counts what waits in the queue against max_messages / max_bytes)."""

    __slots__ = ("_op", "_batch", "count", "size")

    def __init__(self, op: _Op, opts: P.ConsumeOptions) -> None:
        self._op = op
        if opts.max_bytes:
            self._batch = 16
        else:
            self._batch = max(1, min(64, (opts.max_messages - opts.threshold_messages) // 4 or 1))
        self.count = 0
        self.size = 0

    def took(self, msg: JsMsg) -> None:
        self.count += 1
        self.size += msg.size
        if self.count >= self._batch or self._op.q.empty():
            self.flush()

    def flush(self) -> None:
        if self.count:
            count, size = self.count, self.size
            self.count = self.size = 0
            self._op.command(P.MessagesTaken(count=count, size=size), kick=True)


class OrderedMessageStream:
    """An ordered consume read by the caller: ``for msg in stream`` or ``stream.next(timeout)``.

    Notifications (resets, heartbeats missed, status warnings, reconnects) go to ``on_event``
    if given and are kept in :meth:`notifications`. The iteration ends after ``stop()`` or a
    ``drain()``; a terminal error (e.g. ``StreamNotFoundError``) is raised by ``next()``.
    """

    def __init__(self, op: _Op, opts: P.ConsumeOptions, on_event: EventHandler | None) -> None:
        self._op = op
        self._on_event = on_event
        self._taker = _Taker(op, opts)
        self._notes: list[Any] = []
        self._ended: _End | None = None
        self._stopped = False

    def next(self, timeout: float = 30.0) -> JsMsg:
        """The next message in order: :class:`NoMessagesError` (a TimeoutError) if none came
        within ``timeout``; the terminal error (e.g. ``StreamNotFoundError``) once it failed.
        ``timeout=0`` polls; it must be a finite number >= 0 (not None)."""
        timeout = check_poll_timeout(timeout)
        return self._next(_monotonic() + timeout, timeout)

    def _next(self, deadline: float | None, timeout: float | None) -> JsMsg:
        if self._ended is not None or self._stopped:
            raise self._end_error()
        q = self._op.q
        while True:
            try:
                item = q.get_nowait()
            except queue.Empty:
                self._taker.flush()  # before blocking
                try:
                    item = q.get() if deadline is None else q.get(timeout=max(0.0, deadline - _monotonic()))
                except queue.Empty:
                    raise NoMessagesError(f"no message from the ordered consumer within {timeout} s") from None
            cls = item.__class__
            if cls is JsMsg:
                if self._stopped:
                    raise self._end_error()
                self._taker.took(item)
                return item  # type: ignore[no-any-return]
            if cls is _End:
                self._ended = item
                self._taker.flush()
                raise self._end_error()
            self._note(item)

    def _note(self, event: Any) -> None:
        self._notes.append(event)
        if self._on_event is not None:
            try:
                self._on_event(event)
            except Exception:  # noqa: BLE001
                _log.exception("jssync: on_event handler raised on %s", type(event).__name__)

    def _end_error(self) -> BaseException:
        end = self._ended
        if end is not None and end.error is not None:
            return end.error
        if end is not None and end.kind is OrderedEnd.CLOSED:
            return _StreamEnded("the ordered consumer was closed")
        return _StreamEnded("the ordered message stream was stopped")

    def __iter__(self) -> Iterator[JsMsg]:
        while True:
            try:
                yield self._next(None, None)
            except _StreamEnded:
                return

    def notifications(self) -> list[Any]:
        """The notifications seen so far (and clears them)."""
        notes, self._notes = self._notes, []
        return notes

    def stop(self) -> None:
        """End now (any thread); the server consumer is deleted, the cursor kept."""
        self._stopped = True
        self._op.stop()

    def drain(self) -> None:
        """No more pulls; what is already queued is still delivered, then the iteration ends."""
        self._op.command(P.Drain())

    @property
    def closed(self) -> bool:
        return self._op.done

    @property
    def error(self) -> BaseException | None:
        """The terminal error, once it ended with one (None after a stop or a drain)."""
        return self._op.error if self._op.done else None

    def __enter__(self) -> OrderedMessageStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<OrderedMessageStream {self._op._oc.stream_name!r} {'closed' if self.closed else 'running'}>"


class OrderedConsumeContext:
    """A running ordered consume (the same controls as :class:`~jssync.pull.ConsumeContext`)."""

    def __init__(self, stream: OrderedMessageStream, handler: Handler, on_event: EventHandler | None) -> None:
        self._stream = stream
        self._handler = handler
        self._on_event = on_event
        self._hlock = threading.Lock()
        self._done = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="jssync-ordered-consume", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        stream = self._stream
        try:
            while True:
                try:
                    msg = stream._next(None, None)
                except _StreamEnded:
                    return
                except BaseException as exc:  # noqa: BLE001 - the terminal error
                    self.error = exc
                    self._report(P.ConsumeTerminated(error=exc if isinstance(exc, Exception) else None,
                                                     reason="ordered consumer failed"))
                    return
                with self._hlock:
                    if stream._stopped:
                        return
                    try:
                        self._handler(msg)
                    except Exception as exc:  # noqa: BLE001 - reported, the consume goes on
                        if self._on_event is not None:
                            self._report(CallbackError(subject=msg.subject, error=exc))
                        else:
                            _log.error("jssync: ordered consume handler raised", exc_info=exc)
        finally:
            self._done.set()

    def _report(self, event: Any) -> None:
        if self._on_event is None:
            return
        try:
            self._on_event(event)
        except Exception:  # noqa: BLE001
            _log.exception("jssync: on_event handler raised on %s", type(event).__name__)

    def stop(self) -> None:
        """End now; no handler call starts after this returns (unless called by the handler)."""
        self._stream.stop()
        if threading.current_thread() is not self._thread and self._hlock.acquire(timeout=30.0):
            self._hlock.release()

    def drain(self) -> None:
        self._stream.drain()

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    @property
    def closed(self) -> bool:
        return self._done.is_set()

    def __enter__(self) -> OrderedConsumeContext:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        if threading.current_thread() is not self._thread:
            self.wait(5.0)


def ordered_options(
    filter_subjects: str | Sequence[str] | None,
    deliver_policy: DeliverPolicy | str | None,
    opt_start_seq: int | None,
    opt_start_time: datetime | None,
    headers_only: bool,
) -> OrderedConsumerOptions:
    filters: tuple[str, ...]
    if filter_subjects is None:
        filters = ()
    elif isinstance(filter_subjects, str):
        filters = (filter_subjects,)
    else:
        filters = tuple(filter_subjects)
    return OrderedConsumerOptions(
        filter_subjects=filters,
        deliver_policy=deliver_policy,  # type: ignore[arg-type]  # (validated and converted there)
        opt_start_seq=opt_start_seq,
        opt_start_time=opt_start_time,
        headers_only=headers_only,
    )
