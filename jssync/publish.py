"""JetStream publishing on the blocking client: ``js.publish``, ``js.publish_async`` and
:class:`PubAckFuture`.

* ``publish`` sends the message with a reply subject on the context's PubAck inbox and waits
  for the I/O thread to hand it the reply; it keeps the three outcomes apart: a
  :class:`~jscore.models.PubAck` (stored, or ``duplicate=True``), a definite failure (the typed
  :class:`~jscore.errors.JetStreamAPIError`, or :class:`~jscore.errors.NoStreamResponseError`
  after the no-responders retries: nothing stored), and the ambiguous
  :class:`~jscore.errors.PubAckTimeoutError` (no ack in time: maybe stored).
* ``publish_async`` writes the message with a reply subject ``<inbox>.<token>`` on ONE wildcard
  subscription per context, whose messages are settled right where the I/O thread routes them
  (under the client lock: a dict pop, a msgspec decode, no thread hand-off and no syscall per
  publish). The window bookkeeping is :class:`jscore.publish.PublishWindow`.
* A small worker thread per context (started on the first ``publish_async``, gone after 10 s with
  nothing in flight) fires ack deadlines and no-responders retries, runs done-callbacks, and
  handles the connection: after a reconnect it re-sends the unacknowledged publishes that carry a
  ``Nats-Msg-Id`` (the stream deduplicates them) and fails only those without one, with
  :class:`PubAckTimeoutError`. ``auto_msg_id=True`` gives every async publish a msg id.

Locking: the publisher's state is guarded by the client's own lock (the ack handler already runs
under it), so a publish takes one lock, and a thread blocked on a full window waits on a
condition of that lock. Nothing here calls user code under it.
"""

from __future__ import annotations

import _thread
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from jscore import events as ev
from jscore.connection import State
from jscore.errors import (
    ConnectionClosedError,
    DuplicateMsgIdInProcessError,
    InvalidOptionError,
    NatsError,
    NoRespondersError,
    NoStreamResponseError,
    PubAckTimeoutError,
    TimeoutError,
    TooManyStalledMsgsError,
)
from jscore.headers import Headers, HeadersInput, encode_headers
from jscore.models import PubAck
from jscore.protocol import (
    HPUB_REPLY_FMT,
    MSG_ID_BLOCK_FMT,
    PUB_REPLY_FMT,
    MsgReceived,
    encode_hpub,
    encode_pub,
    validated_subject,
)
from jscore.publish import (
    MSG_ID,
    PENDING,
    PendingPublish,
    PublishWindow,
    WindowStats,
    check_msg_id,
    decode_ack,
    publish_headers,
)

from . import client as _client
from .client import _HIGH_WATER, Subscription

if TYPE_CHECKING:
    from .client import Client
    from .jetstream import JetStream

__all__ = ["Publisher", "PubAckFuture"]

_log = logging.getLogger("jssync.publish")
_monotonic = time.monotonic
_CONNECTED: Final = State.CONNECTED
_WORKER_IDLE_EXIT: Final = 10.0  # seconds with nothing in flight before the worker thread ends
_WORKER_TICK: Final = 1.0  # while publishes are in flight, look at the connection at least this often
_YIELD_EVERY: Final = 128  # publish_async calls between two brief GIL releases (see publish_async)
_sleep = time.sleep
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
        is, else on the context's publish worker thread (never the I/O thread). Keep it short;
        an exception it raises is logged."""
        with self._publisher._lock:
            if self.outcome is PENDING:
                if self._callbacks is None:
                    self._callbacks = []
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
        if not event.wait(timeout):
            raise TimeoutError(f"the publish to {self.subject!r} is not settled after {timeout} s (still in flight)")


def _run_callback(fn: DoneCallback, fut: PubAckFuture) -> None:
    try:
        fn(fut)
    except Exception:  # noqa: BLE001 - a broken callback must not stop the others
        _log.exception("jssync: a PubAckFuture done-callback raised")


class _SyncWaiter:
    """A synchronous publish waiting for its PubAck: a pre-acquired lock the I/O thread
    releases (the cheapest cross-thread wake-up CPython has), and the reply."""

    __slots__ = ("lock", "msg", "error")

    def __init__(self) -> None:
        self.lock = _thread.allocate_lock()
        self.lock.acquire()
        self.msg: MsgReceived | None = None
        self.error: BaseException | None = None


class _AckSubscription(Subscription):
    """The wildcard PubAck inbox: messages are settled on the I/O thread, under the client lock,
    as they are routed (no queue, no callback thread)."""

    def __init__(self, client: Client, subject: str, publisher: Publisher) -> None:
        super().__init__(client, subject, None, None, 1)
        self._publisher = publisher
        self._deliver = publisher._on_ack  # type: ignore[method-assign]  # (one call less per ack)

    def _deliver(self, m: MsgReceived) -> None:
        self._publisher._on_ack(m)

    def _end(self, error: BaseException | None) -> None:
        super()._end(error)
        self._publisher._ack_sub_ended(self, error)


class Publisher:
    """Publishing for one JetStream context. Created by the context on first use."""

    def __init__(self, js: JetStream) -> None:
        self._js = js
        nc = js.client
        self._nc = nc
        self._conn = nc._conn
        self._lock: threading.Lock = nc._lock
        self._cond = threading.Condition(nc._lock)
        self._window: PublishWindow[PubAckFuture] = PublishWindow(ack_timeout=js.timeout)
        self.auto_msg_id = False
        self._auto_prefix = _nuid() + "-"
        self._auto_ids = itertools.count(1)
        self._sub: _AckSubscription | None = None
        self._sync: dict[str, _SyncWaiter] = {}  # synchronous publishes in flight, by token
        self._sync_ids = itertools.count(1)
        self._prefix_b = b""
        self._plen = 0
        self._listening = False
        self._worker: threading.Thread | None = None
        self._wake = threading.Event()
        self._worker_wake_at = float("inf")
        self._callbacks_due: list[PubAckFuture] = []
        # Threads blocked on a full window / in complete(). A waiter sets its flag before
        # waiting; the ack path notifies once and clears it (no notify per ack).
        self._room_armed = False
        self._complete_armed = False
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
        counted from when it was (re)sent and not while disconnected; then it fails with
        :class:`PubAckTimeoutError`. ``retry_attempts`` (2) and ``retry_wait`` (0.25 s): how
        often and how long apart a publish answered by "no responders" (no stream yet, leader
        election) or 10158 (same msg id in process) is sent again. ``auto_msg_id`` (False): give
        every async publish a unique msg id, so all of them are re-sent after a reconnect.
        """
        if auto_msg_id is not None and not isinstance(auto_msg_id, bool):
            raise InvalidOptionError("auto_msg_id must be a bool")
        with self._lock:
            self._window.configure(
                max_pending=max_pending, ack_timeout=ack_timeout, retry_attempts=retry_attempts, retry_wait=retry_wait
            )
            if auto_msg_id is not None:
                self.auto_msg_id = auto_msg_id
            if self._room_armed and self._window.has_room:
                self._room_armed = False
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

        A "no responders" answer (no stream captures the subject yet, or its leader is being
        elected) and a 10158 "duplicate message id is in process" are sent again
        ``retry_attempts`` times, ``retry_wait`` apart, within ``timeout``. Everything else is
        final: an API error is raised at once, never retried.
        """
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
        else:
            hdrs, _ = publish_headers(
                headers,
                msg_id=msg_id,
                expected_stream=expected_stream,
                expected_last_seq=expected_last_seq,
                expected_last_subject_seq=expected_last_subject_seq,
                expected_last_subject_seq_subject=expected_last_subject_seq_subject,
                expected_last_msg_id=expected_last_msg_id,
                ttl=ttl,
            )
        t = self._js.timeout if timeout is None else _check_timeout(timeout)
        nc = self._nc
        nc._check_fork()
        conn = self._conn
        window = self._window
        deadline = _monotonic() + t
        attempts = 0
        while True:
            if nc.is_closed:
                raise ConnectionClosedError("the connection is closed; nothing was published")
            # The PubAck comes back on the context's PubAck inbox (the same wildcard subscription
            # as the async acks, tokens "s<n>"), where the I/O thread releases our lock.
            waiter = _SyncWaiter()
            token = f"s{next(self._sync_ids)}"
            prefix = self._prefix_b
            frame, size = _frame(subject, payload, hdrs, prefix + token.encode()) if prefix else (None, 0)
            with self._lock:
                if self._sub is None:
                    self._subscribe_locked()
                    frame = None
                self._sync[token] = waiter
                try:
                    if frame is None or self._prefix_b is not prefix or not conn.publish_frame(frame, size):
                        conn._publish_checked(subject, payload, None, hdrs, self._prefix_b + token.encode())
                except BaseException:
                    del self._sync[token]
                    raise
                nc._kick_locked()
            if not waiter.lock.acquire(True, max(0.0, deadline - _monotonic())):
                with self._lock:
                    timed_out = self._sync.pop(token, None) is not None
                if timed_out:  # (else the ack came in the meantime: use it)
                    raise PubAckTimeoutError(
                        f"no PubAck for the publish to {subject!r} within {t} s: it may or may not be stored"
                    )
            m = waiter.msg
            if m is None:
                raise PubAckTimeoutError(
                    f"the connection closed before the PubAck for {subject!r} arrived: it may or may not be stored"
                ) from waiter.error
            if m.status == 503 and not m.data:
                error: NatsError = NoStreamResponseError(
                    f"no stream answered the publish to {subject!r} (503 no responders): nothing was stored"
                )
            else:
                try:
                    return decode_ack(m.data)
                except DuplicateMsgIdInProcessError as exc:
                    error = exc
            # retryable: no responders, or the same msg id in process
            wait = window.retry_wait
            if attempts >= window.retry_attempts or _monotonic() + wait >= deadline:
                raise error
            attempts += 1
            time.sleep(wait)

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
        auto = self.auto_msg_id if auto_msg_id is None else auto_msg_id
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
        nc = self._nc
        if nc._fork_gen != _client._fork_generation:
            nc._check_fork()
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
            if conn.out_bytes + nc._wbuf_len > _HIGH_WATER:
                nc._wait_for_room()
            if self._sub is None or self._worker is None:  # (after the waits: they release the lock)
                self._start_locked()
            if self._prefix_b is not prefix:  # a new PubAck inbox: the frame must name it
                frame = None
            stats = conn.stats
            window.add(fut, _monotonic(), stats.reconnects if conn.state is _CONNECTED else stats.reconnects + 1, token)
            try:
                if frame is None or not conn.publish_frame(frame, size):
                    conn._publish_checked(subject, payload, None, hdrs, self._prefix_b + token.encode())
            except BaseException:
                window.remove(token)
                raise
            if nc._io_idle:
                nc._io_idle = False
                nc._poke()
            if fut.deadline < self._worker_wake_at:
                self._worker_wake_at = fut.deadline
                self._wake.set()
        finally:
            lock.release()
        n = self._since_yield + 1
        if n >= self._yield_every > 0:
            # A thread publishing in a tight loop keeps the GIL for the whole switch interval
            # (5 ms) while the I/O thread waits to write what it queued: the server gets the
            # messages in bursts and idles in between. Letting go of the GIL briefly every so
            # many publishes keeps the server fed (+8 % measured on a quiet machine; every 64 was worse).
            n = 0
            _sleep(0)
        self._since_yield = n
        return fut

    def _wait_for_room_locked(self, timeout: float | None) -> None:
        t = self._js.timeout if timeout is None else _check_timeout(timeout)
        window = self._window
        deadline = _monotonic() + t
        while len(window.pending) + len(window.retrying) >= window.max_pending:
            remaining = deadline - _monotonic()
            if remaining <= 0:
                raise TooManyStalledMsgsError(
                    f"{len(window)} async publishes in flight (max_pending {window.max_pending}) "
                    f"for {t} s; the message was not sent"
                )
            self._room_armed = True
            self._cond.wait(remaining)
            if self._nc.is_closed:
                raise ConnectionClosedError("the connection closed while waiting for room to publish")

    def complete(self, timeout: float = 30.0) -> None:
        """Wait until every async publish is settled; :class:`TimeoutError` after ``timeout``."""
        deadline = _monotonic() + _check_timeout(timeout)
        window = self._window
        with self._lock:
            while len(window):
                remaining = deadline - _monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"{len(window)} async publishes still in flight after {timeout} s")
                self._complete_armed = True
                self._cond.wait(remaining)

    # ------------------------------------------------------------------ under the client lock

    def _start_locked(self) -> None:
        """Subscribe the PubAck inbox (before the first publish that uses it) and make sure
        the worker runs."""
        if self._sub is None:
            self._subscribe_locked()
        self._ensure_worker_locked()

    def _subscribe_locked(self) -> None:
        nc = self._nc
        conn = self._conn
        prefix = conn.new_inbox() + "."
        sub = _AckSubscription(nc, prefix + "*", self)
        sub.sid = conn.subscribe(prefix + "*")
        nc._subs[sub.sid] = sub
        self._sub = sub
        self._prefix_b = prefix.encode()
        self._plen = len(prefix)
        if not self._listening:
            self._listening = True
            nc._listeners.append(self._on_client_event)

    def _ensure_worker_locked(self) -> None:
        if self._worker is not None:
            return
        window = self._window
        if not len(window):
            # Nothing in flight: start from the connection as it is now.
            window.gen = self._conn.stats.reconnects
            window.connected = self._conn.is_connected
        self._worker_wake_at = float("inf")
        self._wake.clear()
        t = threading.Thread(target=self._run_worker, name="jssync-js-publish", daemon=True)
        self._worker = t
        t.start()

    def _on_ack(self, m: MsgReceived) -> None:
        """I/O thread, client lock held: one message on the PubAck inbox."""
        token = m.subject[self._plen :]
        if token[0] == "s":  # a synchronous publish (a "*" token is never empty)
            waiter = self._sync.pop(token, None)
            if waiter is not None:
                waiter.msg = m
                waiter.lock.release()
            return
        window = self._window
        fut = window.receive_ack(token, m.data, m.status, _monotonic())
        if fut is None:
            return
        if fut.outcome is PENDING:  # a retry was scheduled
            if fut.retry_at < self._worker_wake_at:
                self._worker_wake_at = fut.retry_at
                self._wake.set()
            return
        if fut._event is not None or fut._callbacks is not None:
            self._settled_locked(fut)
        if self._room_armed:
            if len(window.pending) + len(window.retrying) <= window.resume_level:
                self._room_armed = False
                self._cond.notify_all()
        elif self._complete_armed and not window.pending and not window.retrying:
            self._complete_armed = False
            self._cond.notify_all()

    def _settled_locked(self, fut: PubAckFuture) -> None:
        event = fut._event
        if event is not None:
            event.set()
        if fut._callbacks is not None:
            self._callbacks_due.append(fut)
            self._wake.set()

    def _settle_all_locked(self, futures: list[PubAckFuture]) -> None:
        for fut in futures:
            if fut._event is not None or fut._callbacks is not None:
                self._settled_locked(fut)
        if futures:
            self._notify_waiters_locked()

    def _notify_waiters_locked(self) -> None:
        if self._room_armed or self._complete_armed:
            self._room_armed = self._complete_armed = False
            self._cond.notify_all()

    def _ack_sub_ended(self, sub: _AckSubscription, error: BaseException | None) -> None:
        """The PubAck subscription ended (client closing or draining, or the server refused
        it): the acks of what is in flight cannot arrive any more."""
        if self._sub is not sub:
            return
        self._sub = None
        cause = error or ConnectionClosedError("the PubAck subscription ended")
        for waiter in self._sync.values():
            waiter.error = cause
            waiter.lock.release()
        self._sync.clear()
        settled = self._window.close(cause)
        self._settle_all_locked(settled)
        self._notify_waiters_locked()
        self._wake.set()

    def _send_locked(self, futures: list[PubAckFuture]) -> list[PubAckFuture]:
        """Write the frames of re-armed entries again; returns those the transport refused
        (settled as ambiguous)."""
        conn = self._conn
        nc = self._nc
        failed: list[PubAckFuture] = []
        for fut in futures:
            try:
                conn._publish_checked(fut.subject, fut.payload, None, fut.headers, self._prefix_b + fut.token.encode())
            except NatsError as exc:
                err = PubAckTimeoutError(
                    f"could not send the publish to {fut.subject!r} again ({exc}): it may or may not be stored"
                )
                err.__cause__ = exc
                self._window.fail(fut, err)
                failed.append(fut)
        if futures and nc._io_idle:
            nc._io_idle = False
            nc._poke()
        return failed

    # ------------------------------------------------------------------ the worker thread

    def _on_client_event(self, event: Any) -> None:
        """Internal listener (see ``Client._listeners``): never blocks, takes no lock."""
        if isinstance(event, (ev.Disconnected, ev.Reconnected, ev.Closed)):
            self._wake.set()

    def _run_worker(self) -> None:
        wake = self._wake
        me = threading.current_thread()
        idle_since = _monotonic()
        timeout: float | None = 0.0
        while True:
            if timeout is None or timeout > 0:
                wake.wait(timeout)
            wake.clear()
            with self._lock:
                now = _monotonic()
                stop = self._tick_locked(now)
                due = self._callbacks_due
                self._callbacks_due = []
                window = self._window
                if len(window) or due:
                    idle_since = now
                elif not stop and now - idle_since >= _WORKER_IDLE_EXIT:
                    stop = True
                if stop:
                    if self._worker is me:
                        self._worker = None
                else:
                    wake_at = window.next_deadline()
                    if len(window):
                        tick = now + _WORKER_TICK
                        wake_at = tick if wake_at is None or tick < wake_at else wake_at
                    else:
                        idle_at = idle_since + _WORKER_IDLE_EXIT
                        wake_at = idle_at if wake_at is None or idle_at < wake_at else wake_at
                    self._worker_wake_at = wake_at
                    timeout = max(0.0, wake_at - now)
            for fut in due:
                callbacks = fut._callbacks or []
                fut._callbacks = None
                for fn in callbacks:
                    _run_callback(fn, fut)
            if stop:
                return

    def _tick_locked(self, now: float) -> bool:
        """The worker's turn: the connection, deadlines, retries. True: the worker should end."""
        window = self._window
        conn = self._conn
        settled: list[PubAckFuture] = []
        if conn.is_closed:
            settled = window.close(self._nc.last_error)
            self._settle_all_locked(settled)
            self._notify_waiters_locked()
            return True
        gen = conn.stats.reconnects
        connected = conn.state is _CONNECTED
        if connected:
            if gen > window.gen or not window.connected:
                lost, resend = window.reconnected(gen, now)
                settled.extend(lost)
                settled.extend(self._send_locked(resend))
        elif window.connected:
            settled.extend(window.connection_lost(gen))
        expired, resend = window.handle_timeout(now, gen if connected else gen + 1)
        settled.extend(expired)
        settled.extend(self._send_locked(resend))
        self._settle_all_locked(settled)
        if self._room_armed and window.has_room:
            self._notify_waiters_locked()
        return False


def _check_timeout(timeout: float) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise InvalidOptionError(f"timeout must be > 0 seconds, got {timeout!r}")
    return float(timeout)
