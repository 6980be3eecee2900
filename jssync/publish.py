"""JetStream publishing on the blocking client: ``js.publish``, ``js.publish_async`` and
:class:`PubAckFuture`.

Both run on one core machine per context (:class:`jscore.pubmachines.AsyncPublishMachine`),
attached to the client's session with ONE wildcard PubAck inbox ``<inbox>.*``: the I/O thread
settles every PubAck there under the client lock (a dict pop, a msgspec decode; no thread
hand-off and no syscall per publish), fires ack deadlines, re-sends what the policy re-sends
(no responders while a stream or leader is not there yet, 10158 "in process", and after a
reconnect the publishes that carry a ``Nats-Msg-Id``) and settles the rest. The window
bookkeeping is :class:`jscore.publish.PublishWindow`, one for async publishes and one for
synchronous ones (tokens ``s<n>``), so both follow the same outcome policy.

* ``publish`` adds its entry, writes the frame and waits, at most its timeout, for the I/O
  thread to settle it: a :class:`~jscore.models.PubAck` (stored, or ``duplicate=True``), a
  definite failure (the typed :class:`~jscore.errors.JetStreamAPIError`, or
  :class:`~jscore.errors.NoStreamResponseError`: nothing stored), or the ambiguous
  :class:`~jscore.errors.PubAckTimeoutError` (maybe stored).
* ``publish_async`` returns a :class:`PubAckFuture` (the window entry itself). Done-callbacks
  run on a callback thread of the context (never the I/O thread).

Locking: the publisher's state is guarded by the client's own lock (the acks are settled under
it), so a publish takes one lock, and a thread blocked on a full window waits on a condition of
that lock. Nothing here calls user code under it.
"""

from __future__ import annotations

import _thread
import itertools
import logging
import os
import queue
import select
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from jscore.errors import (
    ConnectionClosedError,
    PubAckTimeoutError,
    TimeoutError,
    TooManyStalledMsgsError,
)
from jscore.headers import Headers, HeadersInput, encode_headers
from jscore.machine import MachineFailed
from jscore.models import PubAck
from jscore.protocol import (
    HPUB_REPLY_FMT,
    MSG_ID_BLOCK_FMT,
    PUB_REPLY_FMT,
    encode_hpub,
    encode_pub,
    validated_subject,
)
from jscore.pubmachines import PROGRESS, AsyncPublishMachine, PublisherClosed, WatchLevel
from jscore.publish import (
    MSG_ID,
    PENDING,
    PendingPublish,
    PublishWindow,
    WindowStats,
    check_msg_id,
    publish_headers,
)
from jscore.validate import check_optional_flag, check_timeout

from .client import shell_of

if TYPE_CHECKING:
    from .jetstream import JetStream

__all__ = ["Publisher", "PubAckFuture"]

_log = logging.getLogger("jssync.publish")
_monotonic = time.monotonic
_CALLBACK_IDLE_EXIT: Final = 10.0  # seconds with no callback to run before the callback thread ends
_YIELD_EVERY: Final = 128  # publish_async calls between two brief GIL releases (see publish_async)


def _yield() -> None:
    """Let go of the GIL for a moment (a zero-timeout ``select`` releases it around the system
    call), so the I/O thread can take it now rather than at the end of the switch interval.
    Not a wait: it returns at once."""
    select.select((), (), (), 0)

_SYNC_MAX: Final = 1 << 30  # the sync window never blocks: one entry per waiting thread
_NUID_ALPHABET: Final = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

DoneCallback = Callable[["PubAckFuture"], object]


def _frame(subject: str, payload: bytes, headers: HeadersInput | None, reply: bytes) -> tuple[bytes | None, int]:
    """The PUB/HPUB frame for the connection's hot path (``publish_frame``) and its size as
    max_payload counts it, built outside the client lock; ``None`` when the subject has not been
    validated before (not in the subject cache) or the payload is not ``bytes``: the caller then
    goes through the machine's checked publish, which validates, buffers or raises."""
    subj = validated_subject(subject)
    if subj is None or payload.__class__ is not bytes:
        return None, 0
    if headers is None:
        return encode_pub(subj, reply, payload), len(payload)
    hdr = encode_headers(headers)  # validates: BadHeaderError before anything is queued
    return encode_hpub(subj, reply, hdr, payload), len(hdr) + len(payload)


def _nuid() -> str:
    raw = os.urandom(22)
    return "".join(_NUID_ALPHABET[b % 62] for b in raw)


class PubAckFuture(PendingPublish):
    """The outcome of one ``publish_async``: ``result()`` gives the :class:`PubAck` or raises.

    ``subject``, ``payload``, ``headers`` (as sent, with the option headers) and ``msg_id`` say
    what was published, so a failed publish can be sent again.
    """

    __slots__ = ("_publisher", "_event", "_callbacks")

    def __init__(
        self,
        publisher: Publisher,
        subject: str,
        payload: bytes,
        headers: HeadersInput | None,
        msg_id: str | None,
    ) -> None:
        # (PendingPublish.__init__ inlined: this runs once per publish; token, gen and deadline
        # are set by PublishWindow.add before the future is seen by anyone)
        self.subject = subject
        self.payload = payload
        self.headers = headers
        self.msg_id = msg_id
        self.outcome = PENDING
        self.ack = None
        self.error = None
        self._publisher = publisher
        self._event: threading.Event | None = None
        self._callbacks: list[DoneCallback] | None = None

    def done(self) -> bool:
        """True once the publish is settled (acked, duplicate, failed or ambiguous)."""
        return self.outcome is not PENDING

    def result(self, timeout: float | None = None) -> PubAck:
        """The PubAck; raises the publish's error (a typed :class:`JetStreamAPIError`,
        :class:`NoStreamResponseError`, or the ambiguous :class:`PubAckTimeoutError`), or
        :class:`TimeoutError` if it is not settled within ``timeout`` seconds (``None``: wait
        until it is; every publish is settled by its ack deadline or by the connection closing)."""
        if self.outcome is PENDING:
            self._wait(timeout)
        ack = self.ack
        if ack is not None:
            return ack
        assert self.error is not None
        raise self.error

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The publish's error, None if it was acknowledged; waits like :meth:`result`."""
        if self.outcome is PENDING:
            self._wait(timeout)
        return self.error

    def add_done_callback(self, fn: DoneCallback) -> None:
        """Call ``fn(future)`` once the publish is settled: at once in this thread if it already
        is, else on the context's callback thread (never the I/O thread). Keep it short;
        an exception it raises is logged."""
        with self._publisher._lock:
            if self.outcome is PENDING:
                if self._callbacks is None:
                    self._callbacks = []
                    self.watched = True  # (the machine hands it over once settled)
                self._callbacks.append(fn)
                return
        _run_callback(fn, self)

    def _wait(self, timeout: float | None) -> None:
        with self._publisher._lock:
            if self.outcome is not PENDING:
                return
            event = self._event
            if event is None:
                event = self._event = threading.Event()
                self.watched = True  # (the machine hands it over once settled)
        if not event.wait(timeout):
            raise TimeoutError(f"the publish to {self.subject!r} is not settled after {timeout} s (still in flight)")


def _run_callback(fn: DoneCallback, fut: PubAckFuture) -> None:
    try:
        fn(fut)
    except Exception:  # noqa: BLE001 - a broken callback must not stop the others
        _log.exception("jssync: a PubAckFuture done-callback raised")


class _SyncEntry(PendingPublish):
    """A synchronous publish in the sync window: a pre-acquired lock the I/O thread releases
    once the entry is settled (the cheapest cross-thread wake-up CPython has)."""

    __slots__ = ("lock",)
    watched = True

    def __init__(self, subject: str, payload: bytes, headers: HeadersInput | None, msg_id: str | None) -> None:
        super().__init__(subject, payload, headers, msg_id)
        self.lock = _thread.allocate_lock()
        self.lock.acquire()


class Publisher:
    """Publishing for one JetStream context. Created by the context on first use."""

    def __init__(self, js: JetStream) -> None:
        self._js = js
        nc = js.client
        self._nc = nc
        self._shell = shell = shell_of(nc)
        self._conn = shell.session.conn
        self._lock: threading.Lock = shell.lock
        self._cond = threading.Condition(shell.lock)
        self._window: PublishWindow[PubAckFuture] = PublishWindow(ack_timeout=js.timeout)
        self._sync_window: PublishWindow[_SyncEntry] = PublishWindow(ack_timeout=js.timeout, max_pending=_SYNC_MAX)
        self.auto_msg_id = False
        self._auto_prefix = _nuid() + "-"
        self._auto_ids = itertools.count(1)
        self._sync_ids = itertools.count(1)
        self._machine: AsyncPublishMachine | None = None
        self._slot = 0
        self._prefix_b = b""
        # Threads blocked on a full window / in complete(): they ask the machine to tell them
        # (PROGRESS) when the window is down to the level they wait for.
        self._room_waiters = 0
        self._complete_waiters = 0
        self._callbacks_q: queue.SimpleQueue[PubAckFuture | None] = queue.SimpleQueue()
        self._callback_thread: threading.Thread | None = None
        self._since_yield = 0
        self._yield_every = _YIELD_EVERY

    # ------------------------------------------------------------------ settings

    def configure(
        self,
        *,
        max_pending: int | None = None,
        ack_timeout: float | None = None,
        retry_attempts: int | None = None,
        retry_wait: float | None = None,
        auto_msg_id: bool | None = None,
    ) -> None:
        """Publishing settings of this context.

        ``max_pending`` (4000): async publishes in flight before ``publish_async`` blocks.
        ``ack_timeout`` (the context's timeout): how long an async publish waits for its PubAck,
        counted from when it was (re)sent and not while disconnected; then one with a msg id is
        sent again and one without fails with :class:`PubAckTimeoutError`. ``retry_attempts``
        (2): the re-send budget is ``ack_timeout * (retry_attempts + 1)`` seconds from a
        publish's first trouble (a transient answer such as "no responders", or a missed ack
        deadline); ``retry_wait`` (0.25 s): the first wait between re-sends, doubling up to 5 s.
        ``auto_msg_id`` (False): give every async publish a unique msg id, so all of them are
        re-sent after a reconnect or a missed ack deadline.
        """
        check_optional_flag(auto_msg_id, "auto_msg_id")
        with self._lock:
            self._window.configure(
                max_pending=max_pending, ack_timeout=ack_timeout, retry_attempts=retry_attempts, retry_wait=retry_wait
            )
            self._sync_window.configure(retry_attempts=retry_attempts, retry_wait=retry_wait)
            if auto_msg_id is not None:
                self.auto_msg_id = auto_msg_id
            if self._room_waiters:
                self._cond.notify_all()

    @property
    def max_pending(self) -> int:
        return self._window.max_pending

    @property
    def pending(self) -> int:
        """Async publishes in flight (sent and not settled)."""
        return len(self._window)

    @property
    def stats(self) -> WindowStats:
        return self._window.stats

    def new_msg_id(self) -> str:
        """A msg id unique to this context (a random prefix and a counter), as ``auto_msg_id``
        uses."""
        return f"{self._auto_prefix}{next(self._auto_ids)}"

    # ------------------------------------------------------------------ synchronous publish

    def publish(
        self,
        subject: str,
        payload: bytes = b"",
        *,
        headers: HeadersInput | None = None,
        timeout: float | None = None,
        msg_id: str | None = None,
        expected_stream: str | None = None,
        expected_last_seq: int | None = None,
        expected_last_subject_seq: int | None = None,
        expected_last_subject_seq_subject: str | None = None,
        expected_last_msg_id: str | None = None,
        ttl: float | str | None = None,
    ) -> PubAck:
        """Publish and wait for the PubAck (see the module docstring for the outcomes).

        What a reply means and whether the publish is sent again is the core's publish-outcome
        policy (:class:`jscore.publish.PublishPolicy`, shared with ``publish_async`` and the bulk
        writer): a "no responders" answer (no stream captures the subject yet, or its leader is
        being elected) is sent again, and so are 10158 "in process" and 10008 "temporarily
        unavailable" when the publish has a msg id, with backoff from ``retry_wait``, within
        ``timeout``. Any other error answer is final and raised at once.
        """
        mid: str | None = None
        if (
            msg_id is None
            and expected_stream is None
            and expected_last_seq is None
            and expected_last_subject_seq is None
            and expected_last_subject_seq_subject is None
            and expected_last_msg_id is None
            and ttl is None
        ):
            hdrs = headers
            if hdrs is not None:  # a Nats-Msg-Id given in the headers makes re-sends safe too
                mid = Headers(hdrs).get(MSG_ID) or None
        else:
            hdrs, mid = publish_headers(
                headers,
                msg_id=msg_id,
                expected_stream=expected_stream,
                expected_last_seq=expected_last_seq,
                expected_last_subject_seq=expected_last_subject_seq,
                expected_last_subject_seq_subject=expected_last_subject_seq_subject,
                expected_last_msg_id=expected_last_msg_id,
                ttl=ttl,
            )
        t = self._js.timeout if timeout is None else check_timeout(timeout)
        shell = self._shell
        shell.check_fork()
        if self._nc.is_closed:
            raise ConnectionClosedError("the connection is closed; nothing was published")
        conn = self._conn
        window = self._sync_window
        entry = _SyncEntry(subject, payload, hdrs, mid)
        token = f"s{next(self._sync_ids)}"
        prefix = self._prefix_b
        frame, size = _frame(subject, payload, hdrs, prefix + token.encode()) if prefix else (None, 0)
        sock = None
        try:
            with self._lock:
                machine = self._machine or self._start_locked()
                if self._prefix_b is not prefix:
                    frame = None  # a new PubAck inbox: the frame must name it
                now = _monotonic()
                window.add(entry, now, machine.gen if machine.connected else machine.gen + 1, token)
                # The caller's timeout rules: no re-send past it (the policy gives up instead),
                # and the window's ack deadline is the same moment, a backstop the session is
                # not even told about (the caller's own wait below enforces it; re-sends the
                # policy schedules are timers the I/O thread arms when the answer comes).
                entry.limit = entry.deadline = now + t
                try:
                    if frame is None or not conn.publish_frame(frame, size):
                        conn.publish_inbox(subject, payload, self._prefix_b + token.encode(), hdrs)
                except BaseException:
                    window.remove(token)
                    raise
                sock = shell.take_read_locked()  # (before the frame leaves; see Shell.take_read_locked)
                shell.kick_locked(waiting=True)
            if sock is not None:
                shell.lead(sock, entry.lock.locked, now + t)
            acked = entry.lock.acquire(True, max(0.0, now + t - _monotonic()))
        finally:
            if sock is not None:
                shell.give_back()
        if not acked:
            with self._lock:
                timed_out = entry.outcome is PENDING
                if timed_out:
                    window.remove(token)
            if timed_out:  # (else it was settled in the meantime: use that)
                raise PubAckTimeoutError(
                    f"no PubAck for the publish to {subject!r} within {t} s: it may or may not be stored"
                )
        ack = entry.ack
        if ack is not None:
            return ack
        assert entry.error is not None
        raise entry.error

    # ------------------------------------------------------------------ asynchronous publish

    def publish_async(
        self,
        subject: str,
        payload: bytes = b"",
        *,
        headers: HeadersInput | None = None,
        timeout: float | None = None,
        msg_id: str | None = None,
        expected_stream: str | None = None,
        expected_last_seq: int | None = None,
        expected_last_subject_seq: int | None = None,
        expected_last_subject_seq_subject: str | None = None,
        expected_last_msg_id: str | None = None,
        ttl: float | str | None = None,
        auto_msg_id: bool | None = None,
    ) -> PubAckFuture:
        """Publish without waiting for the PubAck; returns its :class:`PubAckFuture`.

        When ``max_pending`` publishes are in flight this blocks until some are settled, at most
        ``timeout`` seconds (default: the context's timeout), then raises
        :class:`TooManyStalledMsgsError` (nothing sent). Invalid input raises before anything
        is sent; so do :class:`MaxPayloadError`, :class:`ReconnectBufferExceededError` and
        :class:`ConnectionClosedError` (no future is returned then).
        """
        # Every option is checked before anything is sent, also those only used later
        # (``timeout`` when the window is full).
        auto = self.auto_msg_id if auto_msg_id is None else check_optional_flag(auto_msg_id, "auto_msg_id")
        if timeout is not None:
            check_timeout(timeout)
        plain = (
            headers is None
            and expected_stream is None
            and expected_last_seq is None
            and expected_last_subject_seq is None
            and expected_last_subject_seq_subject is None
            and expected_last_msg_id is None
            and ttl is None
        )
        if plain and msg_id is None and not auto:
            hdrs: HeadersInput | None = None
            mid: str | None = None
            hblock: bytes | None = None
        elif plain and msg_id is not None:
            # The common exactly-once case (only a msg id): its header block is built here
            # directly, the same bytes encode_headers would give (checked by a test).
            mid = check_msg_id(msg_id)
            hdrs = [(MSG_ID, mid)]
            hblock = MSG_ID_BLOCK_FMT % mid.encode()
        else:
            hblock = None
            if auto and msg_id is None and (headers is None or not Headers(headers).get(MSG_ID)):
                msg_id = self.new_msg_id()
            hdrs, mid = publish_headers(
                headers,
                msg_id=msg_id,
                expected_stream=expected_stream,
                expected_last_seq=expected_last_seq,
                expected_last_subject_seq=expected_last_subject_seq,
                expected_last_subject_seq_subject=expected_last_subject_seq_subject,
                expected_last_msg_id=expected_last_msg_id,
                ttl=ttl,
            )
        if self._shell.forked:
            self._shell.check_fork()
        fut = PubAckFuture(self, subject, payload, hdrs, mid)
        conn = self._conn
        window = self._window
        token = window.next_token()
        prefix = self._prefix_b
        # The frame is built outside the lock (see _frame; inlined for the common case).
        subj = validated_subject(subject)
        if hdrs is None and subj is not None and prefix and payload.__class__ is bytes:
            size = len(payload)
            frame: bytes | None = PUB_REPLY_FMT % (subj, prefix + token.encode(), size, payload)
        elif hblock is not None and subj is not None and prefix and payload.__class__ is bytes:
            size = len(hblock) + len(payload)
            frame = HPUB_REPLY_FMT % (subj, prefix + token.encode(), len(hblock), size, hblock, payload)
        elif prefix:
            frame, size = _frame(subject, payload, hdrs, prefix + token.encode())
        else:
            frame, size = None, 0
        lock = self._lock
        lock.acquire()  # (acquire/release rather than ``with``: less interpreter work per call)
        try:
            if len(window.pending) + len(window.retrying) >= window.max_pending:
                self._wait_for_room_locked(timeout)
            if self._shell.congested:
                self._shell.wait_for_room_locked()
            machine = self._machine  # (after the waits: they release the lock)
            if machine is None:
                machine = self._start_locked()
            if self._prefix_b is not prefix:  # a new PubAck inbox: the frame must name it
                frame = None
            first = not window.pending
            window.add(fut, _monotonic(), machine.gen if machine.connected else machine.gen + 1, token)
            try:
                if frame is None or not conn.publish_frame(frame, size):
                    conn.publish_inbox(subject, payload, self._prefix_b + token.encode(), hdrs)
            except BaseException:
                window.remove(token)
                raise
            if first:
                self._shell.touch_locked(self._slot)  # (the window's deadline moved)
            shell = self._shell
            if shell.io_idle:
                shell.wake_locked()
        finally:
            lock.release()
        n = self._since_yield + 1
        if n >= self._yield_every > 0:
            # A thread publishing in a tight loop keeps the GIL for the whole switch interval
            # (5 ms) while the I/O thread waits to write what it queued: the server gets the
            # messages in bursts and idles in between. Letting go of the GIL briefly every so
            # many publishes keeps the server fed (+8 % measured on a quiet machine; every 64 was worse).
            n = 0
            _yield()
        self._since_yield = n
        return fut

    def _wait_for_room_locked(self, timeout: float | None) -> None:
        t = self._js.timeout if timeout is None else check_timeout(timeout)
        window = self._window
        deadline = _monotonic() + t
        self._room_waiters += 1
        try:
            while len(window.pending) + len(window.retrying) >= window.max_pending:
                remaining = deadline - _monotonic()
                if remaining <= 0:
                    raise TooManyStalledMsgsError(
                        f"{len(window)} async publishes in flight (max_pending {window.max_pending}) "
                        f"for {t} s; the message was not sent"
                    )
                self._watch_locked()
                self._cond.wait(remaining)
                if self._nc.is_closed:
                    raise ConnectionClosedError("the connection closed while waiting for room to publish")
        finally:
            self._room_waiters -= 1

    def complete(self, timeout: float = 30.0) -> None:
        """Wait until every async publish is settled; :class:`TimeoutError` after ``timeout``."""
        deadline = _monotonic() + check_timeout(timeout)
        window = self._window
        with self._lock:
            self._complete_waiters += 1
            try:
                while len(window):
                    remaining = deadline - _monotonic()
                    if remaining <= 0:
                        raise TimeoutError(f"{len(window)} async publishes still in flight after {timeout} s")
                    self._watch_locked()
                    self._cond.wait(remaining)
            finally:
                self._complete_waiters -= 1

    def _watch_locked(self) -> None:
        """Ask the machine for PROGRESS at the level the waiting threads need."""
        if self._machine is not None:
            level = self._window.resume_level if self._room_waiters else 0
            self._shell.command_locked(self._slot, WatchLevel(level=level))

    # ------------------------------------------------------------------ under the client lock

    def _start_locked(self) -> AsyncPublishMachine:
        """Attach the machine (and subscribe its PubAck inbox) before the first publish."""
        conn = self._conn
        machine = AsyncPublishMachine(
            self._window, self._sync_window, gen=conn.stats.reconnects, connected=conn.is_connected
        )
        self._slot = self._shell.attach_locked(machine, self._on_event, wildcard=True)
        prefix = self._shell.session.inbox_of(self._slot)
        machine.set_prefix(prefix)
        self._prefix_b = prefix.encode()
        self._machine = machine
        return machine

    def _on_event(self, e: Any) -> None:
        """The machine's sink: under the client lock, mostly on the I/O thread. Never blocks."""
        cls = e.__class__
        if cls is PubAckFuture:
            if e._event is not None:
                e._event.set()
            if e._callbacks is not None:
                self._callbacks_q.put(e)
                if self._callback_thread is None:
                    self._start_callbacks_locked()
        elif cls is _SyncEntry:
            e.lock.release()
        elif e is PROGRESS:
            self._cond.notify_all()
        elif cls is MachineFailed:
            # The machine could not go on (a frame it asked for could not be queued, or it
            # broke): what is in flight is settled as ambiguous, as when the connection closes,
            # and a next publish starts afresh with a new machine.
            _log.error("jssync: the publish machine failed (%s)", e.reason, exc_info=e.error)
            for window in (self._window, self._sync_window):
                for entry in window.close(e.error):
                    if entry.watched:
                        self._on_event(entry)
            self._on_event(PublisherClosed(error=e.error))
        elif cls is PublisherClosed:
            # The connection closed, or the PubAck inbox ended: a next publish starts afresh.
            self._machine = None
            self._prefix_b = b""
            self._cond.notify_all()
            if self._callback_thread is not None:
                self._callbacks_q.put(None)  # (the callback thread ends after what is queued)
                self._callback_thread = None

    def _start_callbacks_locked(self) -> None:
        t = threading.Thread(target=self._run_callbacks, name="jssync-js-publish", daemon=True)
        self._callback_thread = t
        t.start()

    def _run_callbacks(self) -> None:
        """The callback thread: runs done-callbacks as the I/O thread hands settled futures
        over; ends when none came for a while."""
        q = self._callbacks_q
        while True:
            try:
                fut = q.get(timeout=_CALLBACK_IDLE_EXIT)
            except queue.Empty:
                with self._lock:
                    if q.empty():
                        if self._callback_thread is threading.current_thread():
                            self._callback_thread = None
                        return
                continue
            if fut is None:
                return
            with self._lock:
                callbacks = fut._callbacks or []
                fut._callbacks = None
            for fn in callbacks:
                _run_callback(fn, fut)

