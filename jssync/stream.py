"""The Stream handle (ADR-37): stream info, purge, single-message get / delete, direct get
(single and batched), and the stream's consumers.

A :class:`Stream` is what ``js.create_stream(...)`` and ``js.stream(name)`` return. It keeps the
info it was made with (``cached_info``); :meth:`Stream.info` fetches a fresh one. Messages are
read with ``STREAM.MSG.GET`` (through the stream leader: read-after-write consistent) or, when
the stream allows it, with direct get (ADR-31: any replica or mirror may answer, so a message
just written may not be visible yet).

Batched direct gets (:meth:`Stream.direct_get_batch`, :meth:`Stream.direct_get_last_for`) return
a :class:`DirectGetIterator`: the sans-IO machine :class:`jscore.directget.DirectGetBatch` runs on
the client's core session (one inbox per call, its replies fed to it on the I/O thread), and
decides what is delivered, when the call ends and when it times out; the iterator only hands
its messages to the caller.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, TypeVar

from jscore import directget as DG
from jscore import jsapi
from jscore.errors import JetStreamError, NatsError, NoRespondersError, TimeoutError
from jscore.machine import MachineFailed, Stop
from jscore.models import (
    ConsumerConfig,
    ConsumerConfigFields,
    DeliverPolicy,
    ConsumerInfo,
    MsgGetResponse,
    PurgeResponse,
    StoredMsg,
    StreamInfo,
    SuccessResponse,
    spell_out_fields,
)

from .client import shell_of

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .client import Client
    from .ordered import OrderedConsumer
    from .consumer import Consumer
    from .jetstream import JetStream

__all__ = ["Stream", "DirectGetIterator"]

_monotonic: Final = time.monotonic
_GUARD: Final = 5.0  # seconds past a direct get's own timeout before its caller gives up
_DELIVERED: Final = DG.StoredMsgsDelivered
_T = TypeVar("_T")
_Self = TypeVar("_Self", bound="_DirectIterator[Any]")


class Stream:
    """A handle on one stream. Cheap; holds no server resources."""

    __slots__ = ("_js", "_name", "_info")

    def __init__(self, js: JetStream, info: StreamInfo) -> None:
        self._js = js
        self._name = info.config.name
        self._info = info

    @property
    def name(self) -> str:
        return self._name

    @property
    def cached_info(self) -> StreamInfo:
        """The info from the last fetch (creation, lookup or :meth:`info`), without a request."""
        return self._info

    @property
    def jetstream(self) -> JetStream:
        return self._js

    def __repr__(self) -> str:
        return f"<Stream {self._name!r}>"

    def info(
        self, *, subjects_filter: str | None = None, deleted_details: bool = False, timeout: float | None = None
    ) -> StreamInfo:
        """Fetch the stream's info (and refresh ``cached_info``). See
        :meth:`JetStream.stream_info` for the options."""
        info = self._js.stream_info(
            self._name, subjects_filter=subjects_filter, deleted_details=deleted_details, timeout=timeout
        )
        self._info = info
        return info

    # ------------------------------------------------------------------ contents

    def purge(
        self,
        *,
        subject: str | None = None,
        seq: int | None = None,
        keep: int | None = None,
        timeout: float | None = None,
    ) -> int:
        """Remove messages; returns how many were purged. Without options: all of them.
        ``subject`` (wildcards allowed) limits the purge to that subject; ``seq`` purges every
        message below that sequence; ``keep`` keeps the last ``keep`` messages (``seq`` and
        ``keep`` exclude each other)."""
        body = jsapi.purge_request(subject=subject, seq=seq, keep=keep)
        r = self._js._call(self._js._subjects.stream_purge(self._name), body, PurgeResponse, timeout)
        if not r.success:
            raise JetStreamError(f"purge of stream {self._name!r} did not succeed")
        return r.purged

    def get_msg(
        self,
        seq: int | None = None,
        *,
        last_by_subject: str | None = None,
        next_by_subject: str | None = None,
        direct: bool | None = None,
        timeout: float | None = None,
    ) -> StoredMsg:
        """One stored message: by ``seq``, the last one on ``last_by_subject``, or the first one
        on ``next_by_subject`` (at or after ``seq`` when both are given).

        ``direct=None`` uses direct get when the stream's (cached) config has ``allow_direct``
        and ``STREAM.MSG.GET`` otherwise; ``True`` / ``False`` force one or the other.
        :class:`MsgNotFoundError` when there is no such message."""
        if direct is None:
            direct = bool(self._info.config.allow_direct)
        if direct:
            return self.direct_get(
                seq, last_by_subject=last_by_subject, next_by_subject=next_by_subject, timeout=timeout
            )
        body = jsapi.msg_get_request(seq, last_by_subject=last_by_subject, next_by_subject=next_by_subject)
        r = self._js._call(self._js._subjects.msg_get(self._name), body, MsgGetResponse, timeout)
        return jsapi.stored_msg_from_get(r.message, self._name)

    def direct_get(
        self,
        seq: int | None = None,
        *,
        last_by_subject: str | None = None,
        next_by_subject: str | None = None,
        start_time: datetime | None = None,
        timeout: float | None = None,
    ) -> StoredMsg:
        """One message through direct get (ADR-31; the stream needs ``allow_direct``): by
        ``seq``; the last one on ``last_by_subject`` (a literal subject uses the subject-appended
        form ``DIRECT.GET.<stream>.<subject>``); the first one on ``next_by_subject`` at or
        after ``seq`` or ``start_time``; or the first one at or after ``start_time``.
        :class:`MsgNotFoundError` (a 404) when there is none. No read-after-write guarantee."""
        subject, body = jsapi.direct_get_request(
            self._js._subjects,
            self._name,
            seq,
            last_by_subject=last_by_subject,
            next_by_subject=next_by_subject,
            start_time=start_time,
        )
        t = timeout if timeout is not None else self._js.timeout
        try:
            reply = self._js.client.request(subject, body, timeout=t)
        except NoRespondersError as exc:
            raise DG.direct_status_error(DG.classify_direct_status(503, None), 503, None) from exc
        return jsapi.stored_msg_from_direct(reply.headers, reply.data, reply.status, reply.description)

    def direct_get_batch(
        self,
        *,
        seq: int | None = None,
        next_by_subject: str | None = None,
        start_time: datetime | None = None,
        batch: int,
        max_bytes: int | None = None,
        timeout: float | None = None,
    ) -> DirectGetIterator:
        """Up to ``batch`` stored messages in one direct get request (ADR-31 batch), yielded as
        they arrive: from ``seq`` (default 1) or from ``start_time``, only those on
        ``next_by_subject`` (wildcards allowed) if given, at most about ``max_bytes`` bytes.

        The iteration ends at the server's ``204 EOB``; then the iterator's ``num_pending`` says
        how many matching messages are left and ``next_seq`` where the next batch starts (the
        EOB's Nats-Last-Sequence + 1). No messages at all is an empty iteration (not
        :class:`MsgNotFoundError`). The request must end within ``timeout`` seconds (default:
        the context's) or the iterator raises :class:`~jssync.errors.TimeoutError` after the
        messages that came. Options are validated before anything is sent
        (:class:`InvalidOptionError`, :class:`BadSubjectError`). Leaving the loop early (or
        ``close()``) unsubscribes. No read-after-write guarantee."""
        options = DG.resolve_batch(
            seq, next_by_subject=next_by_subject, start_time=start_time, batch=batch, max_bytes=max_bytes
        )
        return self._direct_batch(options, timeout)

    def direct_get_last_for(
        self,
        subjects: str | Sequence[str],
        *,
        up_to_seq: int | None = None,
        up_to_time: datetime | None = None,
        batch: int | None = None,
        timeout: float | None = None,
    ) -> DirectGetIterator:
        """The last message of every subject matching ``subjects`` (ADR-31 multi_last; wildcards
        allowed), in stream order, as of ``up_to_seq`` / ``up_to_time`` if given.

        ``batch`` limits the messages per request; the iterator pages on by itself, each later
        page asking from the last sequence + 1 with ``up_to_seq`` set to the first page's
        Nats-UpTo-Sequence, so all pages together are ONE snapshot (``up_to_seq`` of the iterator)
        whatever is written meanwhile. More than 1024 matching subjects raise
        :class:`TooManySubjectsError` (the server's 413); none is an empty iteration. Each page
        must end within ``timeout`` seconds (default: the context's). No read-after-write
        guarantee."""
        options = DG.resolve_last_for(subjects, up_to_seq=up_to_seq, up_to_time=up_to_time, batch=batch)
        return self._direct_batch(options, timeout)

    def _direct_rows(
        self, seq: int, *, next_by_subject: str | None, batch: int, max_bytes: int | None, timeout: float | None
    ) -> DirectRowIterator:
        """:meth:`direct_get_batch` from ``seq``, as a :class:`DirectRowIterator`."""
        options = DG.resolve_batch(seq, next_by_subject=next_by_subject, batch=batch, max_bytes=max_bytes)
        return DirectRowIterator(self._js.client, self._direct_machine(options, timeout, rows=True))

    def _direct_batch(self, options: DG.BatchOptions | DG.LastForOptions, timeout: float | None) -> DirectGetIterator:
        return DirectGetIterator(self._js.client, self._direct_machine(options, timeout))

    def _direct_machine(
        self, options: DG.BatchOptions | DG.LastForOptions, timeout: float | None, rows: bool = False
    ) -> DG.DirectGetBatch:
        subject = self._js._subjects.direct_get(self._name)
        t = timeout if timeout is not None else self._js.timeout
        return DG.DirectGetBatch(subject, options, timeout=t, now=_monotonic(), rows=rows)

    def delete_msg(self, seq: int, *, erase: bool = False, timeout: float | None = None) -> None:
        """Delete the message at ``seq`` (:class:`MsgNotFoundError` if there is none). With
        ``erase`` its bytes are overwritten on disk too (slower)."""
        body = jsapi.msg_delete_request(seq, erase=erase)
        r = self._js._call(self._js._subjects.msg_delete(self._name), body, SuccessResponse, timeout)
        if not r.success:
            raise JetStreamError(f"message {seq} of stream {self._name!r} was not deleted")

    # ------------------------------------------------------------------ consumers

    @spell_out_fields(ConsumerConfigFields)
    def create_consumer(
        self, config: ConsumerConfig | None = None, *, timeout: float | None = None, **fields: Unpack[ConsumerConfigFields]
    ) -> Consumer:
        """:meth:`JetStream.create_consumer` on this stream."""
        return self._js.create_consumer(self._name, config, timeout=timeout, **fields)

    @spell_out_fields(ConsumerConfigFields)
    def update_consumer(
        self, config: ConsumerConfig | None = None, *, timeout: float | None = None, **fields: Unpack[ConsumerConfigFields]
    ) -> Consumer:
        """:meth:`JetStream.update_consumer` on this stream."""
        return self._js.update_consumer(self._name, config, timeout=timeout, **fields)

    @spell_out_fields(ConsumerConfigFields)
    def create_or_update_consumer(
        self, config: ConsumerConfig | None = None, *, timeout: float | None = None, **fields: Unpack[ConsumerConfigFields]
    ) -> Consumer:
        """:meth:`JetStream.create_or_update_consumer` on this stream."""
        return self._js.create_or_update_consumer(self._name, config, timeout=timeout, **fields)

    def consumer(self, name: str, *, bind: bool = False, timeout: float | None = None) -> Consumer:
        """A handle on consumer ``name`` of this stream (see :meth:`JetStream.consumer`)."""
        return self._js.consumer(self._name, name, bind=bind, timeout=timeout)

    def delete_consumer(self, name: str, *, timeout: float | None = None) -> None:
        self._js.delete_consumer(self._name, name, timeout=timeout)

    def consumers(self, *, timeout: float | None = None) -> Iterator[ConsumerInfo]:
        return self._js.consumers(self._name, timeout=timeout)

    def consumer_names(self, *, timeout: float | None = None) -> Iterator[str]:
        return self._js.consumer_names(self._name, timeout=timeout)

    def ordered_consumer(
        self,
        *,
        filter_subjects: str | Sequence[str] | None = None,
        deliver_policy: DeliverPolicy | str | None = None,
        opt_start_seq: int | None = None,
        opt_start_time: datetime | None = None,
        headers_only: bool = False,
    ) -> OrderedConsumer:
        """An ordered consumer of this stream (see :meth:`JetStream.ordered_consumer`)."""
        return self._js.ordered_consumer(
            self._name, filter_subjects=filter_subjects, deliver_policy=deliver_policy,
            opt_start_seq=opt_start_seq, opt_start_time=opt_start_time, headers_only=headers_only,
        )


class _DirectIterator(Iterator[_T]):
    """The messages of one batched direct get call, yielded as they arrive (see
    :meth:`Stream.direct_get_batch` and :meth:`Stream.direct_get_last_for`).

    The request is sent when the iterator is created; each ``next()`` waits at most until the
    current request's deadline. Once the iteration is over:

    * ``num_pending``: matching messages left after this batch (0: nothing left);
    * ``next_seq``: where a following :meth:`Stream.direct_get_batch` should start;
    * ``last_seq``: the sequence of the last message received (None: none);
    * ``up_to_seq``: the snapshot a multi_last was read at (its first Nats-UpTo-Sequence);
    * ``error`` / ``reason``: why it ended (``error`` None for a normal end).

    ``close()`` (or leaving a ``with`` block, or dropping the iterator) ends the call early and
    unsubscribes its inbox; replies still in flight are discarded.
    """

    def __init__(self, client: Client, machine: DG.DirectGetBatch) -> None:
        self._shell = shell = shell_of(client)
        self._machine = machine
        # The messages delivered and not yet read, then None (the end). The I/O thread appends
        # under the client lock; the reader takes from the left without it (deque operations
        # are atomic). A reader that finds it empty says so (``_waiting``, under the lock) and
        # waits on ``_wake``, which the sink fills once: one thread hand-off per arrival of
        # replies, not one per message.
        self._items: deque[_T | None] = deque()
        self._waiting = False
        self._wake: queue.SimpleQueue[bool] = queue.SimpleQueue()
        self._failure: BaseException | None = None
        self._raised = False
        self._ended = False
        self._slot = 0
        shell.check_fork()
        machine.check_request_size(client.max_payload)  # (before anything, even the SUB, is sent)
        with shell.lock:
            # (the I/O thread is not woken for the call's deadline: the first next() reads the
            # replies itself and watches it, or arms the I/O thread if it cannot)
            self._slot = shell.attach_locked(machine, self._on_event, wake=False)

    def _on_event(self, e: Any) -> None:
        """The sink of the machine's events (under the client lock)."""
        cls = e.__class__
        if cls is _DELIVERED:
            self._items.extend(e.msgs)
        elif cls is MachineFailed:
            self._failure = e.error
            self._items.append(None)
        elif cls is DG.DirectGetFinished:
            self._items.append(None)
        else:
            return
        if self._waiting:
            self._waiting = False
            self._wake.put(True)

    # -- results --------------------------------------------------------------------------------

    @property
    def done(self) -> bool:
        """True once the call is over (every message may not have been read yet)."""
        return self._machine.done

    @property
    def error(self) -> NatsError | None:
        return self._machine.error

    @property
    def reason(self) -> str | None:
        """``"eob"``, ``"empty"``, ``"stopped"``, ``"status"``, ``"timeout"``, ``"gap"``,
        ``"unsupported"``, ``"malformed"``; None while in progress."""
        return self._machine.reason

    @property
    def num_pending(self) -> int | None:
        return self._machine.num_pending

    @property
    def last_seq(self) -> int | None:
        return self._machine.last_seq

    @property
    def next_seq(self) -> int | None:
        return self._machine.next_seq

    @property
    def up_to_seq(self) -> int | None:
        return self._machine.up_to_seq

    @property
    def pages(self) -> int:
        """Requests sent so far (multi_last pages)."""
        return self._machine.pages

    # -- iteration ------------------------------------------------------------------------------

    def __iter__(self: _Self) -> _Self:
        return self

    def __next__(self) -> _T:
        if not self._ended:
            try:
                item = self._items.popleft()
            except IndexError:
                item = self._wait()
            if item is not None:
                return item
            self._ended = True
        error = self._failure or self._machine.error
        if error is not None and not self._raised:
            self._raised = True
            raise error
        raise StopIteration

    def _wait(self) -> _T | None:
        """The next item once it arrives. The machine times the call out by itself (the I/O
        thread fires its deadline); the guard only covers an I/O thread that died."""
        items = self._items
        shell = self._shell
        limit = self._machine.timeout + _GUARD
        end = _monotonic() + limit
        may_lead = True
        while True:
            sock = None
            try:
                with shell.lock:
                    if items:
                        return items.popleft()
                    # Read the replies on this thread unless the I/O thread is reading (leading),
                    # once per wait: a lead that ends without a message gave the socket back.
                    # It reads until the call is over (its end queued) or dropped by close().
                    sock = shell.take_read_locked() if may_lead else None
                    if sock is None:
                        self._waiting = True
                        shell.arm_locked()  # (the machine's deadline is the I/O thread's to fire)
                if sock is not None:
                    shell.lead(sock, lambda: not self._ended and (not items or items[-1] is not None), end)
                    may_lead = False
                    continue
            finally:
                if sock is not None:
                    shell.give_back()
            if self._take_wake(end):
                continue
            with shell.lock:
                self._waiting = False
            if items:
                continue
            self.close()
            raise TimeoutError(f"direct get: no progress within {limit:g} s") from None

    def _take_wake(self, end: float) -> bool:
        """Wait for the sink's wake-up until ``end``; False if none came."""
        try:
            return self._wake.get(timeout=max(0.0, end - _monotonic()))
        except queue.Empty:
            return False

    # -- ending early ---------------------------------------------------------------------------

    def close(self) -> None:
        """End the call now (if it is still going) and unsubscribe; later ``next()`` stops."""
        if self._shell.forked:
            return
        with self._shell.lock:
            self._shell.command_locked(self._slot, Stop())
        self._drop()

    def _drop(self) -> None:
        self._ended = True
        self._items.clear()

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # An iterator dropped mid-way (``for m in it: break``). The garbage collector may run
        # this on any thread, even one holding the client lock (the I/O thread): never block on
        # the lock here; when it is taken, stop the call from a short-lived thread instead.
        shell = getattr(self, "_shell", None)
        if shell is None or self._ended or self._machine.done or shell.forked:
            return
        lock = shell.lock
        if lock.acquire(blocking=False):
            try:
                shell.command_locked(self._slot, Stop())
            finally:
                lock.release()
        else:
            closer = threading.Thread(target=self.close, name="jssync-directget-close", daemon=True)
            try:
                closer.start()
            except RuntimeError:  # interpreter shutdown: the connection goes away anyway
                pass

    def __repr__(self) -> str:
        m = self._machine
        state = f"done ({m.reason})" if m.done else "in progress"
        return f"<{type(self).__name__} {m.delivered} received, {state}>"


class DirectGetIterator(_DirectIterator[StoredMsg]):
    __doc__ = _DirectIterator.__doc__


class DirectRowIterator(_DirectIterator[jsapi.StoredRow]):
    """:class:`DirectGetIterator` yielding :data:`jscore.jsapi.StoredRow` tuples (plain values:
    the time stamp and the message's own headers as text) instead of :class:`StoredMsg`: for bulk
    readers that build columns (the Spark source). Made by ``Stream._direct_rows``."""
