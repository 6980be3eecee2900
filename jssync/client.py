"""The blocking NATS client: one socket, one I/O thread, one lock.

Application threads call into the core machine under the lock and, only if the I/O thread is
asleep, poke a wake-up socket. The I/O thread owns the socket: it waits (``epoll``, else
``select``) on the socket and the wake-up socket with the core's ``next_deadline``, feeds bytes
and timeouts to the core, writes ``data_to_send()`` in large coalesced writes, routes events to
whoever waits for them, and is the only thread that dials, upgrades or closes. User callbacks
never run on it.

Two shortcuts save thread hand-offs on a round trip: the caller writes its request itself
when the I/O thread is parked with nothing of its own to write (``_kick_locked``), and it reads
the socket itself until its answer is in unless the I/O thread is reading it (leading:
``_take_read_locked``, ``_lead``, ``_give_back``), doing under the lock exactly what the I/O
thread would have done with those bytes.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import queue
import random
import select
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final, ParamSpec, Union

from jscore import events as ev
from jscore import status
from jscore.connection import MAX_BACKLOG, PUBLISH_HIGH_WATER, ConnectOptions, State
from jscore.errors import (
    AuthorizationError,
    ClientForkedError,
    ConnectionClosedError,
    CredentialsError,
    InvalidOptionError,
    NatsError,
    TimeoutError,
)
from jscore.headers import HeadersInput
from jscore.protocol import MsgReceived
from jscore.session import Session, Sink
from jscore.spin import Callers, ReplySpin
from jscore.validate import check_optional_timeout, check_timeout

from .auth import Authenticator
from .events import CallbackError, SlowConsumer
from .msg import Msg

if TYPE_CHECKING:
    from .jetstream import JetStream

__all__ = ["Client", "Shell", "Subscription", "connect", "shell_of"]

EventCallback = Callable[[Any], None]

_READ_SIZE: Final = 256 * 1024
_READS_PER_TURN: Final = 4  # reads (of _READ_SIZE at most) per I/O-thread turn
_HIGH_WATER: Final = PUBLISH_HIGH_WATER  # queued output above which publishers wait
_LOW_WATER: Final = 8 * 1024 * 1024
# What Connection.submit (the publish without a lock) may queue: it relies on the GIL, so on a
# build without one (free-threaded Python) it declines everything and publishes take the lock.
_SUBMIT_CAP: Final = _HIGH_WATER if getattr(sys, "_is_gil_enabled", lambda: True)() else -(1 << 62)
_DEFAULT_PENDING_MSGS: Final = 512 * 1024
_DEFAULT_PENDING_BYTES: Final = 64 * 1024 * 1024
_INF: Final = float("inf")
_LEAD_SLICE: Final = 0.25  # a leading caller re-checks its socket at least this often (s)
_callers: Final = Callers()  # the threads of this process that wait for answers (see _lead)
_EPOLL: Final = getattr(select, "epoll", None)  # Linux: callers may read their own replies
_EPOLLIN: Final = getattr(select, "EPOLLIN", 0)
_EPOLLOUT: Final = getattr(select, "EPOLLOUT", 0)
_NOT_OUT: Final = ~_EPOLLOUT  # input, hang-up or error: read the socket
_monotonic = time.monotonic
_log = logging.getLogger("jssync")
# The session's events only the I/O thread acts on (it owns the socket's life).
_DIRECTIVES: Final = (ev.ConnectRequested, ev.TlsUpgradeRequested, ev.CloseRequested)

# --- fork safety -------------------------------------------------------------------------------

_fork_generation = 0


def _after_fork_in_child() -> None:
    global _fork_generation
    _fork_generation += 1


os.register_at_fork(after_in_child=_after_fork_in_child)


class _Stop:
    """Sentinel put on queues to wake a reader: the subscription (or client) ended."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException | None) -> None:
        self.error = error


_QueueItem = Union[MsgReceived, _Stop]


class Subscription:
    """A core NATS subscription: iterate it, call ``next_msg``, or give a callback."""

    def __init__(
        self,
        client: Client,
        subject: str,
        queue_group: str | None,
        callback: Callable[[Msg], None] | None,
        pending_msgs_limit: int,
        pending_bytes_limit: int = 1 << 62,
    ) -> None:
        self._client = client
        self.subject = subject
        self.queue = queue_group
        self.sid = 0
        self._callback = callback
        self._q: queue.SimpleQueue[_QueueItem] = queue.SimpleQueue()
        self._limit = pending_msgs_limit
        self._bytes_limit = pending_bytes_limit
        # Payload bytes queued = _bytes_in (counted by the I/O thread) - _bytes_out (counted by
        # the reader): each counter has one writer, so no lock is needed.
        self._bytes_in = 0
        self._bytes_out = 0
        self._slow = False  # in a slow-consumer episode (dropping since the last delivery)
        self._ended: BaseException | None | bool = False  # False: active; None/exc: ended
        self._dropped = 0
        self._delivered = 0
        self._thread: threading.Thread | None = None
        self._idle = threading.Event()
        self._idle.set()

    # -- fed by the I/O thread (under the client lock) -------------------------------------

    def _deliver(self, m: MsgReceived, now: float) -> None:
        q = self._q
        size = len(m.data)
        if q.qsize() >= self._limit or self._bytes_in - self._bytes_out + size > self._bytes_limit:
            # Full (by messages or by bytes): drop, count, and report once per episode.
            self._dropped += 1
            if not self._slow:
                self._slow = True
                self._client._emit(SlowConsumer(sid=self.sid, subject=self.subject, dropped=self._dropped))
            return
        self._slow = False
        self._bytes_in += size
        if self._callback is not None:
            self._idle.clear()
        q.put(m)

    def _end(self, error: BaseException | None) -> None:
        if self._ended is not False:
            return
        self._ended = error
        self._q.put(_Stop(error))

    # -- public ------------------------------------------------------------------------------

    @property
    def pending_msgs(self) -> int:
        return self._q.qsize()

    @property
    def pending_bytes(self) -> int:
        """Payload bytes queued and not yet read."""
        return self._bytes_in - self._bytes_out

    @property
    def delivered(self) -> int:
        return self._delivered

    @property
    def dropped(self) -> int:
        """Messages discarded because the pending queue was full (also reported as SlowConsumer)."""
        return self._dropped

    @property
    def is_active(self) -> bool:
        return self._ended is False

    def next_msg(self, timeout: float | None = 1.0) -> Msg:
        """The next message; raises :class:`TimeoutError` after ``timeout`` seconds (``None``:
        wait for ever), :class:`ConnectionClosedError` once the subscription has ended and
        nothing is left."""
        if self._callback is not None:
            raise InvalidOptionError("next_msg() is not available on a subscription with a callback")
        if timeout.__class__ is not float or not 0.0 <= timeout < _INF:  # (the common case first)
            timeout = check_optional_timeout(timeout)
        self._client._check_fork()
        try:
            item = self._q.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no message on {self.subject!r} within {timeout} s") from None
        if item.__class__ is _Stop:
            self._q.put(item)  # keep waking later readers
            assert isinstance(item, _Stop)
            if item.error is not None:
                raise item.error
            raise ConnectionClosedError(f"subscription to {self.subject!r} has ended")
        self._delivered += 1
        assert isinstance(item, MsgReceived)
        self._bytes_out += len(item.data)
        return Msg._from_event(item, self._client)

    def __iter__(self) -> Iterator[Msg]:
        while True:
            try:
                yield self.next_msg(timeout=None)
            except ConnectionClosedError:
                return

    def unsubscribe(self, max_msgs: int | None = None) -> None:
        """Stop at once (or after ``max_msgs`` in total). Messages already queued stay readable."""
        self._client._unsubscribe(self, max_msgs)

    def drain(self, timeout: float = 10.0) -> None:
        """Unsubscribe at the server, wait until it has no more in flight for us, then (with a
        callback) until the callback has handled every queued message."""
        self._client._drain_subscription(self, timeout)

    def _run_callback(self) -> None:
        cb = self._callback
        assert cb is not None
        client = self._client
        q = self._q
        while True:
            if q.empty():
                self._idle.set()
            item = q.get()
            if item.__class__ is _Stop:
                self._idle.set()
                return
            assert isinstance(item, MsgReceived)
            self._delivered += 1
            self._bytes_out += len(item.data)
            try:
                cb(Msg._from_event(item, client))
            except BaseException as exc:  # noqa: BLE001 - reported, the subscription goes on
                client._emit(CallbackError(subject=self.subject, error=exc))

    def __repr__(self) -> str:
        return f"<Subscription sid={self.sid} subject={self.subject!r} queue={self.queue!r}>"


class Client:
    """A blocking NATS client. Create with :func:`connect`. Thread-safe."""

    def __init__(
        self,
        servers: str | Sequence[str] = "nats://127.0.0.1:4222",
        *,
        name: str | None = None,
        user: str | None = None,
        password: str | None = None,
        token: str | None = None,
        creds: str | os.PathLike[str] | None = None,
        nkey_seed: str | bytes | os.PathLike[str] | None = None,
        user_jwt_cb: Callable[[], str] | None = None,
        signature_cb: Callable[[bytes], bytes] | None = None,
        tls: ssl.SSLContext | bool | None = None,
        tls_first: bool = False,
        connect_timeout: float = 2.0,
        reconnect: bool = True,
        max_reconnect_attempts: int = 60,
        reconnect_wait: float = 2.0,
        reconnect_jitter: float = 0.1,
        reconnect_buffer_size: int = 8 * 1024 * 1024,
        ping_interval: float = 120.0,
        max_pings_out: int = 2,
        ignore_discovered_servers: bool = False,
        on_event: EventCallback | None = None,
        pending_msgs_limit: int = _DEFAULT_PENDING_MSGS,
        pending_bytes_limit: int = _DEFAULT_PENDING_BYTES,
        inbox_prefix: str = "_INBOX",
        rng: random.Random | None = None,
    ) -> None:
        if isinstance(servers, str):
            servers = [s.strip() for s in servers.split(",") if s.strip()]
        if tls is not None and not isinstance(tls, (ssl.SSLContext, bool)):
            raise InvalidOptionError("tls must be an ssl.SSLContext, True or None")
        _check_limit("pending_msgs_limit", pending_msgs_limit)
        _check_limit("pending_bytes_limit", pending_bytes_limit)
        self._ssl_ctx: ssl.SSLContext | None = tls if isinstance(tls, ssl.SSLContext) else None
        if tls is True or tls_first:
            self._ssl_ctx = self._ssl_ctx or ssl.create_default_context()
        self.options = ConnectOptions(
            servers=tuple(servers),
            name=name,
            user=user,
            password=password,
            token=token,
            tls=self._ssl_ctx is not None,
            tls_first=tls_first,
            connect_timeout=connect_timeout,
            reconnect=reconnect,
            max_reconnect_attempts=max_reconnect_attempts,
            reconnect_wait=reconnect_wait,
            reconnect_jitter=reconnect_jitter,
            reconnect_buffer_size=reconnect_buffer_size,
            ping_interval=ping_interval,
            max_pings_out=max_pings_out,
            ignore_discovered_servers=ignore_discovered_servers,
            inbox_prefix=inbox_prefix,
        )
        # nkey / JWT credentials: loaded by the I/O thread before each dial (a rotated creds
        # file is read again), the nonce signed by the core's call during the handshake.
        self._auth: Authenticator | None = None
        if creds is not None or nkey_seed is not None or user_jwt_cb is not None or signature_cb is not None:
            self._auth = Authenticator(
                creds=creds,
                nkey_seed=nkey_seed,
                user_jwt_cb=user_jwt_cb,
                signature_cb=signature_cb,
                timeout=connect_timeout,
            )
        self._session = Session(
            self.options,
            rng=rng or random.Random(os.urandom(16)),
            credentials=self._auth.credentials if self._auth is not None else None,
        )
        self._conn = self._session.conn
        self._conn.submit_room = _SUBMIT_CAP
        self._pending_limit = pending_msgs_limit
        self._pending_bytes_limit = pending_bytes_limit
        self._on_event = on_event
        # Internal observers of the same events (jssync.publish re-sends async publishes after a
        # Reconnected). Called where the event is emitted, mostly the I/O thread: they must be
        # quick, never block and never take the client lock.
        self._listeners: list[EventCallback] = []
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)
        self._room_waiters = 0
        self._fork_gen = _fork_generation
        self._pid = os.getpid()
        self._subs: dict[int, Subscription] = {}
        self._requests: dict[str, queue.SimpleQueue[ev.ReplyReceived | _Stop]] = {}
        self._flushes: dict[int, queue.SimpleQueue[bool | _Stop]] = {}
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._io_idle = False
        # The I/O thread is at work (from the start of its turn, or a read, until it parks):
        # it may hold output it took. Poked but not yet at work, it holds none (_kick_locked).
        self._io_busy = False
        self._sock: socket.socket | None = None
        self._first = threading.Event()
        self._first_error: BaseException | None = None
        self._closed = threading.Event()
        self._close_error: BaseException | None = None
        self._events_q: queue.SimpleQueue[Any] | None = None
        self._events_thread: threading.Thread | None = None
        self._io_thread: threading.Thread | None = None
        self._wbuf_len = 0
        self._spill = bytearray()  # output a caller could not write itself (see _kick_locked)
        self._close_by = float("inf")  # close(timeout): queued output must leave by then
        self._deferred = False  # acks queued without waking the I/O thread (_publish_to_reply)
        self._rbuf = bytearray(_READ_SIZE)  # the I/O thread's read buffer (see _read)
        self._rview = memoryview(self._rbuf)
        # Leading (see _lead): the I/O thread waits in epoll, and a caller waiting for a reply
        # takes the socket's read side by removing it from that wait, without waking it.
        self._ep: Any = None
        if _EPOLL is not None:
            self._ep = _EPOLL()
            self._ep.register(self._wake_r.fileno(), _EPOLLIN)
        self._ep_fd = -1  # the socket's fd in the epoll set (-1: none)
        self._ep_mask = 0  # what the epoll set waits for on it
        self._want_out = False  # the I/O thread parked with output the socket did not take
        self._reader = False  # a caller reads the socket (the I/O thread does not)
        self._reader_owner = 0  # the thread ident of that caller
        self._io_reading = False  # the I/O thread reads it (no caller may take it)
        self._io_due: float | None = None  # the deadline the I/O thread last parked with
        self._handover: list[Any] = []  # events a leading caller left for the I/O thread
        self._broken: BaseException | None = None  # what a leading caller's core call raised
        self._lead_buf: bytearray | None = None  # the leading caller's read buffer
        self._spin = ReplySpin()  # whether a leading caller spins before it sleeps (only it uses it)
        self._lead_poll: tuple[socket.socket, Any] | None = None  # its poll object, per socket
        # The I/O thread pokes a leading caller after each turn (a timer fired, a close): what
        # it waits for may be in without a byte from the socket.
        self._lead_r, self._lead_w = socket.socketpair()
        self._lead_r.setblocking(False)
        self._lead_w.setblocking(False)
        self._shell = Shell(self)

    # ------------------------------------------------------------------ lifecycle

    def _start(self) -> None:
        if self._on_event is not None:
            self._events_q = queue.SimpleQueue()
            self._events_thread = threading.Thread(target=self._run_events, name="jssync-events", daemon=True)
            self._events_thread.start()
        with self._lock:
            self._session.start(_monotonic())
        self._io_thread = threading.Thread(target=self._io_main, name="jssync-io", daemon=True)
        self._io_thread.start()
        attempts = len(self.options.servers)
        budget = self.options.connect_timeout * (attempts + 1) + 5.0
        if not self._first.wait(budget):
            self.close()
            raise TimeoutError(f"could not connect within {budget:.1f} s")
        if self._first_error is not None:
            self._join_threads(2.0)
            raise self._first_error

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._closed.is_set():
            return
        try:
            self.drain()
        except NatsError:
            self.close()

    def __reduce__(self) -> Any:
        raise TypeError("a jssync Client cannot be pickled: pickle its options and connect in each process")

    def _check_fork(self) -> None:
        if self._fork_gen != _fork_generation:
            raise ClientForkedError(
                f"this client was created in process {self._pid}; after os.fork() create a new client in the child"
            )

    def close(self, timeout: float = 5.0) -> None:
        """Write what is queued, close the connection and stop every thread. Idempotent."""
        timeout = check_timeout(timeout)
        if self._fork_gen != _fork_generation:
            return  # the threads and socket belong to the parent process
        deadline = _monotonic() + timeout
        with self._lock:
            # Queued output gets until 3/4 of the timeout to leave (2 s at most), so the close
            # itself is done within the timeout.
            self._close_by = min(self._close_by, _monotonic() + timeout * 0.75)
            if not self._conn.is_closed:
                self._conn.close(_monotonic())
            self._wake_locked()
        if not self._closed.wait(timeout * 0.9):
            # The I/O thread did not finish in time (a server that does not read): close now.
            self._fail_everything(ConnectionClosedError(f"closed after {timeout:g} s with output still queued"))
        self._join_threads(max(0.0, deadline - _monotonic()))

    def _join_threads(self, timeout: float) -> None:
        me = threading.current_thread()
        deadline = _monotonic() + timeout
        if self._io_thread is not None and self._io_thread is not me:
            self._io_thread.join(max(0.0, deadline - _monotonic()))
        for sub in list(self._subs.values()):
            if sub._thread is not None and sub._thread is not me:
                sub._thread.join(max(0.0, deadline - _monotonic()))
        if self._events_q is not None:
            self._events_q.put(_Stop(None))
            if self._events_thread is not None and self._events_thread is not me:
                self._events_thread.join(max(0.0, deadline - _monotonic()))
        with contextlib.suppress(OSError):
            self._wake_r.close()
            self._wake_w.close()
            self._lead_r.close()
            self._lead_w.close()

    def drain(self, timeout: float = 10.0) -> None:
        """Unsubscribe everything, let callbacks finish what is queued, flush, then close."""
        timeout = check_timeout(timeout)
        self._check_fork()
        deadline = _monotonic() + timeout
        subs = list(self._subs.values())
        with self._lock:
            for sub in subs:
                # (what the server sent before it read the UNSUB still comes, until the flush)
                self._conn.drain_subscription(sub.sid)
        try:
            self.flush(timeout=max(0.01, deadline - _monotonic()))
        except (TimeoutError, ConnectionClosedError):
            pass
        me = threading.current_thread()
        for sub in subs:
            if sub._callback is not None and sub._thread is not me:
                # (from inside a callback, its own subscription cannot go idle until we return)
                sub._idle.wait(max(0.0, deadline - _monotonic()))
            with self._lock:
                self._subs.pop(sub.sid, None)
                self._session.forget(sub.sid)
                sub._end(None)
            # _idle can be set for a moment while a last message is being handed over; the
            # callback thread ends only after everything queued before the stop was handled.
            t = sub._thread
            if t is not None and t is not me:
                t.join(max(0.0, deadline - _monotonic()))
        self.close(max(0.1, deadline - _monotonic()))

    # ------------------------------------------------------------------ properties

    @property
    def is_connected(self) -> bool:
        return self._conn.is_connected

    @property
    def is_closed(self) -> bool:
        return self._closed.is_set()

    @property
    def connected_url(self) -> str | None:
        return self._conn.connected_url

    @property
    def server_info(self) -> dict[str, Any]:
        return self._conn.server_info

    @property
    def max_payload(self) -> int:
        return self._conn.max_payload

    @property
    def servers(self) -> list[str]:
        return self._conn.servers

    @property
    def stats(self) -> dict[str, int]:
        # Under the lock (the core moves submitted publishes between two counters under it);
        # after a fork the parent's lock may be held for good, and nothing moves any more.
        with self._lock if self._fork_gen == _fork_generation else contextlib.nullcontext():
            s = self._conn.stats
            return {
                "msgs_in": s.msgs_in,
                "bytes_in": s.bytes_in,
                "msgs_out": self._conn.msgs_out,
                "bytes_out": s.bytes_out,
                "reconnects": s.reconnects,
            }

    @property
    def last_error(self) -> BaseException | None:
        return self._close_error

    def jetstream(
        self, *, domain: str | None = None, api_prefix: str | None = None, timeout: float = 5.0
    ) -> JetStream:
        """A JetStream context on this connection (ADR-37)."""
        timeout = check_timeout(timeout)
        from .jetstream import JetStream

        return JetStream(self, domain=domain, api_prefix=api_prefix, timeout=timeout)

    def new_inbox(self) -> str:
        with self._lock:
            return self._conn.new_inbox()

    # ------------------------------------------------------------------ publishing

    def publish(
        self,
        subject: str,
        payload: bytes = b"",
        *,
        reply: str | None = None,
        headers: HeadersInput | None = None,
    ) -> None:
        """Queue a message; returns at once. Invalid input raises before anything is queued.

        When more than 32 MiB wait for a slow socket, the call first waits (up to
        ``max(connect_timeout, 10)`` s) for the backlog to drain; a ``TimeoutError`` then means
        the message was NOT queued."""
        if reply is None and headers is None and self._fork_gen == _fork_generation and self._conn.submit(subject, payload):
            # The hot path takes no lock: the core queues the frame with one atomic append (see
            # Connection.submit) and we wake the I/O thread if it sleeps. (The fork check comes
            # first: after fork() no I/O thread runs in the child.)
            if self._io_idle:
                self._io_idle = False
                self._poke()
            return
        self._publish(subject, payload, reply, headers)

    def _publish_to_reply(self, subject: str, payload: bytes, defer: bool = False) -> None:
        """Publish to a reply subject the SERVER gave us (an ack subject): it came out of the
        parser as one whitespace-free token, so it is not validated again nor remembered in
        the subject cache (every ack subject is new; caching them would evict the subjects of
        real publishers)."""
        if self._fork_gen == _fork_generation and self._conn.submit_ack(subject, payload):
            # No lock, as in publish. (Clearing ``_deferred`` under the lock cannot lose this
            # ack: a flush that clears it after we set it first took the output, this ack too.)
            if defer:
                # A consume's dispatcher acks: it writes the acks of a whole batch at
                # once when it reports what it took (see jssync.pull), not one by one.
                self._deferred = True
            elif self._io_idle:
                self._io_idle = False
                self._poke()
            return
        self._publish(subject, payload, None, None)

    def _flush_deferred_locked(self) -> None:
        """Under the lock: get deferred acks onto the wire (the caller writes them itself when
        the I/O thread is idle)."""
        if self._deferred:
            self._deferred = False
            self._kick_locked()

    def _publish(self, subject: str, payload: bytes, reply: str | None, headers: HeadersInput | None) -> None:
        self._check_fork()
        conn = self._conn
        with self._lock:
            if conn.queued_bytes + self._wbuf_len > _HIGH_WATER:
                self._wait_for_room()
            conn.publish(subject, payload, reply, headers)
            if self._io_idle:
                self._io_idle = False
                self._poke()

    def _wait_for_room(self) -> None:
        """Called under the lock: block while too much output is queued (the socket is slow)."""
        deadline = _monotonic() + max(self.options.connect_timeout, 10.0)
        self._room_waiters += 1
        try:
            while self._conn.queued_bytes + self._wbuf_len > _LOW_WATER and self._conn.is_connected:
                remaining = deadline - _monotonic()
                if remaining <= 0:
                    raise TimeoutError("the connection is not draining its output (slow network or server)")
                self._room.wait(remaining)
        finally:
            self._room_waiters -= 1

    def request(
        self,
        subject: str,
        payload: bytes = b"",
        *,
        headers: HeadersInput | None = None,
        timeout: float = 2.0,
    ) -> Msg:
        """Send a request and wait for the first reply. :class:`NoRespondersError` when no one
        listens, :class:`TimeoutError` after ``timeout`` seconds."""
        timeout = check_timeout(timeout)
        self._check_fork()
        deadline = _monotonic() + timeout
        waiter: queue.SimpleQueue[ev.ReplyReceived | _Stop] = queue.SimpleQueue()
        item: ev.ReplyReceived | _Stop | None = None
        token: str | None = None
        sock: socket.socket | None = None
        try:
            with self._lock:
                token = self._conn.request(subject, payload, headers)
                self._requests[token] = waiter
                # The read side first: once the request is on the wire the reply may come
                # before this thread runs again (a send lets another thread take the GIL).
                sock = self._take_read_locked()
                self._kick_locked(waiting=True)
            if sock is not None:
                self._lead(sock, waiter.empty, deadline)
            item = waiter.get(timeout=max(0.0, deadline - _monotonic()))
        except queue.Empty:
            pass
        finally:
            if sock is not None:
                self._give_back()  # (the lead gave it back, unless interrupted before it began)
            if item is None and token is not None:
                # Timed out, or interrupted (KeyboardInterrupt): leave nothing behind.
                with self._lock:
                    self._requests.pop(token, None)
                    self._conn.cancel_request(token)
        if item is None:
            raise TimeoutError(f"no reply on {subject!r} within {timeout} s")
        if isinstance(item, _Stop):
            raise item.error or ConnectionClosedError("the connection closed")
        m = item.msg
        if m.status is not None and not m.data:  # a status reply: the status table decides
            error = status.request_error(status.Context.REQUEST, m.status, m.description, subject)
            if error is not None:
                raise error
        return Msg._from_event(m, self)

    def flush(self, timeout: float = 2.0) -> None:
        """Wait until the server has processed everything sent so far (a PING/PONG round trip)."""
        timeout = check_timeout(timeout)
        self._check_fork()
        deadline = _monotonic() + timeout
        waiter: queue.SimpleQueue[bool | _Stop] = queue.SimpleQueue()
        item: bool | _Stop | None = None
        token: int | None = None
        sock: socket.socket | None = None
        try:
            with self._lock:
                token = self._conn.flush()
                self._flushes[token] = waiter
                sock = self._take_read_locked()  # (before the PING leaves: see request)
                self._kick_locked(waiting=True)
            if sock is not None:
                self._lead(sock, waiter.empty, deadline)
            item = waiter.get(timeout=max(0.0, deadline - _monotonic()))
        except queue.Empty:
            pass
        finally:
            if sock is not None:
                self._give_back()  # (see request)
            if item is None and token is not None:  # timed out, or interrupted: leave nothing behind
                # Without the lock (a dict pop is atomic): the I/O thread may hold it for a
                # whole turn of a flood, and the caller's timeout must not wait for that.
                self._flushes.pop(token, None)
        if item is None:
            raise TimeoutError(f"flush did not complete within {timeout} s")
        if isinstance(item, _Stop):
            raise item.error or ConnectionClosedError("the connection closed")

    # ------------------------------------------------------------------ subscribing

    def subscribe(
        self,
        subject: str,
        *,
        queue: str | None = None,
        callback: Callable[[Msg], None] | None = None,
        max_msgs: int | None = None,
        pending_msgs_limit: int | None = None,
        pending_bytes_limit: int | None = None,
    ) -> Subscription:
        """Subscribe. With ``callback``, messages are handed to it on a thread of this
        subscription (never the I/O thread); without, read them with ``next_msg`` or iterate."""
        self._check_fork()
        if pending_msgs_limit is not None:
            _check_limit("pending_msgs_limit", pending_msgs_limit)
        if pending_bytes_limit is not None:
            _check_limit("pending_bytes_limit", pending_bytes_limit)
        sub = Subscription(
            self, subject, queue, callback,
            pending_msgs_limit or self._pending_limit,
            pending_bytes_limit or self._pending_bytes_limit,
        )
        with self._lock:
            sid = self._session.subscribe(subject, queue, max_msgs, sub._deliver, self._ender(sub))
            sub.sid = sid
            self._subs[sid] = sub
            self._wake_locked()
        if callback is not None:
            sub._thread = threading.Thread(target=sub._run_callback, name=f"jssync-sub-{sid}", daemon=True)
            sub._thread.start()
        return sub

    def _ender(self, sub: Subscription) -> Callable[[BaseException | None], None]:
        """What the session calls when ``sub`` ends (under the lock)."""

        def ended(error: BaseException | None) -> None:
            self._subs.pop(sub.sid, None)
            sub._end(error)

        return ended

    def _unsubscribe(self, sub: Subscription, max_msgs: int | None) -> None:
        self._check_fork()
        with self._lock:
            self._session.unsubscribe(sub.sid, max_msgs)
            self._wake_locked()

    def _drain_subscription(self, sub: Subscription, timeout: float) -> None:
        timeout = check_timeout(timeout)
        self._check_fork()
        deadline = _monotonic() + timeout
        with self._lock:
            # (its messages still come until the server has seen the UNSUB: the flush below
            # waits for a PONG behind the drain's own)
            self._conn.drain_subscription(sub.sid)
            self._wake_locked()
        try:
            self.flush(timeout=timeout)
        finally:
            # (ended even when the flush failed: nothing more is routed to it either way)
            with self._lock:
                self._subs.pop(sub.sid, None)
                self._session.forget(sub.sid)
                sub._end(None)
        if sub._thread is not None and sub._thread is not threading.current_thread():
            sub._thread.join(max(0.0, deadline - _monotonic()))
            if sub._thread.is_alive():
                raise TimeoutError(f"subscription callback still busy after {timeout} s")

    # ------------------------------------------------------------------ events to the user

    def _emit(self, event: Any) -> None:
        for listener in self._listeners:
            try:
                listener(event)
            except Exception:  # noqa: BLE001 - an internal observer must not break the client
                _log.exception("jssync: internal listener raised on %s", type(event).__name__)
        if self._events_q is not None:
            self._events_q.put(event)

    def _run_events(self) -> None:
        q = self._events_q
        cb = self._on_event
        assert q is not None and cb is not None
        while True:
            item = q.get()
            if isinstance(item, _Stop):
                return
            try:
                cb(item)
            except Exception:  # noqa: BLE001 - a broken handler must not kill notifications
                _log.exception("jssync: on_event handler raised on %s", type(item).__name__)

    # ------------------------------------------------------------------ the I/O thread

    def _kick_locked(self, waiting: bool = False) -> None:
        """Under the lock, for a caller about to wait for a reply: get what the core queued onto
        the wire with the fewest thread hand-offs.

        When the I/O thread is idle in ``select`` with nothing of its own left to write, the
        caller writes the core's output itself (one non-blocking ``send``), saving the wake-up
        round trip through the I/O thread. A caller ``waiting`` for the answer to this output
        (a request, a flush, a synchronous publish, the first pull of a fetch) does so too when
        the I/O thread was poked (an ack, a publish) and has not begun its turn yet: on a
        virtual machine a poked thread may take tens of microseconds to run, and the request
        would wait for it. (Others, such as a consume's acks and pulls, leave it to the I/O
        thread, which batches them.) Order is kept: the I/O thread only takes output under
        this lock, in a turn that sets ``_io_busy`` until it parks again (and what it holds
        unwritten counts in ``_wbuf_len``), so no older bytes can be in flight. Whatever the
        socket does not take goes to ``_spill`` for the I/O thread, which writes it before
        anything newer. TLS sockets are never shared between threads.
        """
        if not self._io_idle and (self._io_busy or not waiting):
            return
        sock = self._sock
        if (
            sock is None
            or self._wbuf_len
            or self._spill
            or sock.__class__ is not socket.socket
            or self._conn.state is not State.CONNECTED
        ):
            self._io_idle = False
            self._poke()
            return
        data = self._conn.data_to_send()
        if not data:
            return
        try:
            n = sock.send(data)
        except BlockingIOError:
            n = 0
        except OSError:
            n = 0  # the I/O thread finds the broken socket on its own and reconnects
        if n < len(data):
            self._spill += memoryview(data)[n:]
            self._io_idle = False
            self._poke()

    def _poke(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except (BlockingIOError, OSError):
            pass

    def _wake_locked(self) -> None:
        if self._io_idle:
            self._io_idle = False
            self._poke()

    def _arm_locked(self) -> None:
        """Under the lock: wake the I/O thread if the session's next deadline is earlier than
        the one it sleeps to. Compared with that one, not with the session's deadline before
        a change: a timer may have been set without waking it (``Shell.attach_locked``)."""
        if self._io_idle:
            due = self._session.next_deadline()
            if due is not None and (self._io_due is None or due < self._io_due):
                self._io_idle = False
                self._poke()

    # -- leading: a caller that waits for a reply reads the socket itself -------------------------

    def _take_read_locked(self, round_trip: bool = True) -> socket.socket | None:
        """Under the lock, for a caller about to wait for a reply: take the socket's read side
        unless the I/O thread is reading it (see :meth:`_lead`). The socket, or None (then wait
        for the I/O thread as usual). ``round_trip=False``: a wait that may last (a fetch's
        long poll), not counted among the round trips of the spin's rules."""
        if round_trip:
            _callers.note(threading.get_ident(), _monotonic())  # (every caller about to wait: see _lead)
        if self._ep is None or self._reader or self._io_reading or self._fork_gen != _fork_generation:
            return None
        sock = self._sock
        if sock is None or sock.__class__ is not socket.socket or self._conn.state is not State.CONNECTED:
            return None
        self._reader = True
        self._reader_owner = threading.get_ident()
        self._set_mask_locked()
        return sock

    def _give_back(self) -> None:
        """Give the read side back if this thread holds it (idempotent: every taker calls it
        in a ``finally``, so an exception between the take and the lead cannot keep it)."""
        if self._reader and self._reader_owner == threading.get_ident():
            with self._lock:
                self._give_back_locked()

    def _give_back_locked(self) -> None:
        if self._reader and self._reader_owner == threading.get_ident():
            self._reader = False
            if self._io_idle:
                self._set_mask_locked()  # (else the I/O thread sets it when it parks)
                self._arm_locked()  # (a timer the reader saw set and did not see come due)

    def _set_mask_locked(self) -> None:
        """Under the lock: make the I/O thread's epoll set wait for what it should on the socket:
        input unless a caller reads it, output when the I/O thread has some the socket did not
        take. Takes effect in a wait already in progress, without waking it."""
        ep = self._ep
        if ep.closed:
            return
        sock = self._sock
        fd = sock.fileno() if sock is not None else -1
        mask = 0 if fd < 0 else (0 if self._reader else _EPOLLIN) | (_EPOLLOUT if self._want_out else 0)
        if self._ep_fd >= 0 and (self._ep_fd != fd or not mask):
            # Out of the set rather than waiting for nothing: epoll reports a hang-up or an
            # error whatever the mask, and the I/O thread would spin on it while a caller reads.
            self._forget_fd_locked()
        if not mask:
            return
        if self._ep_fd < 0:
            try:
                ep.register(fd, mask)
            except FileExistsError:  # (a socket closed without _close_socket: its fd reused)
                ep.modify(fd, mask)
            self._ep_fd = fd
            self._ep_mask = mask
        elif mask != self._ep_mask:
            ep.modify(fd, mask)
            self._ep_mask = mask

    def _forget_fd_locked(self) -> None:
        if self._ep_fd >= 0:
            with contextlib.suppress(OSError, ValueError):
                self._ep.unregister(self._ep_fd)
        self._ep_fd = -1
        self._ep_mask = 0

    def _watch_timers_locked(self) -> float | None:
        """For a reader (under the lock): the session's next deadline, after waking the I/O
        thread if it has come due. Timers are the I/O thread's to fire; a reader watches them
        rather than have it woken for each new one (a request's timeout rarely fires), and
        the I/O thread pokes the reader after its turn."""
        due = self._session.next_deadline()
        if due is not None and due <= _monotonic():
            self._arm_locked()
        return due

    def _lead(self, sock: socket.socket, pending: Callable[[], bool], deadline: float, round_trip: bool = True) -> None:
        """Read ``sock`` on this thread until ``pending()`` is false (what the caller waits for
        was routed), the deadline passes, or the socket changes or fails; then give the read
        side back to the I/O thread.

        A round trip then wakes one thread, not two: the I/O thread stays parked (the socket is
        out of its epoll set) and the caller does what it would have done, under the lock:
        feeds the bytes to the session, routes every event (other callers' replies included),
        writes the output the session queued. What only the I/O thread does (directives such as
        a reconnect, and the notices for ``on_event``) is handed over to it, and so are the
        session's timers: the caller waits in ``poll`` no later than the next one and wakes the
        I/O thread when it comes due (``_watch_timers_locked``). An EOF is left unread, for the
        I/O thread to find once it waits on the socket again; after a socket error the I/O
        thread finds the connection broken the same way.
        """
        lock = self._lock
        session = self._session
        buf = self._lead_buf
        if buf is None:
            buf = self._lead_buf = bytearray(_READ_SIZE)
        view = memoryview(buf)
        lead_r = self._lead_r
        lead_fd = lead_r.fileno()
        try:
            # One poll object per socket, kept for the next lead (only the reader uses it).
            cached = self._lead_poll
            if cached is not None and cached[0] is sock:
                poller = cached[1]
            else:
                poller = select.poll()
                try:
                    poller.register(sock, select.POLLIN)
                    poller.register(lead_fd, select.POLLIN)
                except (OSError, ValueError):
                    return  # (closed meanwhile by the I/O thread)
                self._lead_poll = (sock, poller)
            with lock:
                due = self._watch_timers_locked()
            # The first wait polls without sleeping for as long as the core's rules allow (see
            # jscore.spin: a sleeping thread is woken late on a virtual machine, and so is the
            # server's when this one comes back late), then sleeps. A poke of the I/O thread
            # does not end the spin; the time to the first bytes on the socket is measured.
            started = _monotonic()
            spin = self._spin if _callers.alone(started) else None
            spin_until = started + spin.budget(round_trip) if spin is not None else 0.0
            measuring = round_trip and spin_until > started  # (a long poll teaches the rule nothing)
            while pending():
                now = _monotonic()
                remaining = deadline - now
                if remaining <= 0:
                    return
                wait = min(remaining, _LEAD_SLICE)
                if due is not None and now < due < now + wait:
                    wait = due - now  # (to wake the I/O thread for it when it comes due)
                readable = False
                ready = None
                if spin_until > now:
                    top = now
                    stop = min(spin_until, now + wait)
                    poll = poller.poll
                    while not ready and now < stop:
                        ready = poll(0)
                        now = _monotonic()
                    if not ready:
                        spin_until = 0.0
                        wait = max(0.0, wait - (now - top))  # (the sleep ends where it would have)
                if not ready:
                    ready = poller.poll(wait * 1000.0)
                for fd, _ in ready:
                    if fd != lead_fd:
                        readable = True
                        if measuring:
                            measuring = False
                            spin_until = 0.0
                            assert spin is not None
                            spin.observe(_monotonic() - started)
                    else:
                        with contextlib.suppress(OSError):
                            while lead_r.recv(4096):
                                pass
                with lock:
                    if self._sock is not sock:
                        return
                    due = self._watch_timers_locked()
                    if not readable:
                        continue
                    try:
                        try:
                            n = sock.recv_into(buf)
                        except BlockingIOError:
                            continue
                        except OSError:
                            return  # (the I/O thread finds the connection broken)
                        if not n:
                            return  # (the EOF stays for the I/O thread)
                        session.receive_data(view[:n].tobytes(), _monotonic())
                        directives: list[Any] = []
                        notices: list[Any] = []
                        self._route_events(directives, notices)
                    except BaseException as exc:
                        # The core failed, or an interrupt (Ctrl-C) came, between the read and
                        # the end of the feed: bytes may be lost and the core's state is
                        # unknown. The I/O thread fails the client as if it had hit this
                        # itself; the caller then finds the stop in its waiter.
                        self._broken = exc
                        self._io_idle = False
                        self._poke()
                        if isinstance(exc, Exception):
                            return
                        raise
                    if directives or notices:
                        self._handover += directives
                        self._handover += notices
                        self._io_idle = False
                        self._poke()
                    self._kick_locked()
                    if session.has_work:
                        self._wake_locked()
                    due = self._watch_timers_locked()  # (one the bytes armed: a re-send's backoff)
        finally:
            with lock:
                self._give_back_locked()

    def _io_main(self) -> None:
        try:
            self._io_loop()
        except BaseException as exc:  # noqa: BLE001 - the client must fail loudly, not hang
            self._fail_everything(exc)
        finally:
            if self._auth is not None:
                self._auth.forget()
            if self._ep is not None:
                with self._lock:
                    self._ep.close()

    def _fail_everything(self, exc: BaseException) -> None:
        with self._lock:
            err = exc if isinstance(exc, NatsError) else ConnectionClosedError(f"I/O thread failed: {exc!r}")
            if err is not exc:
                err.__cause__ = exc
            already = self._closed.is_set()
            self._finish(err)
            # Nobody drives the core any more: close it so publish/subscribe/request raise
            # ConnectionClosedError instead of queueing into the void.
            with contextlib.suppress(Exception):
                self._conn.close(_monotonic())
        self._close_socket()
        if not already:
            self._emit(ev.Closed(error=err))  # on_event learns that the client is dead

    def _finish(self, error: BaseException | None) -> None:
        """Under the lock: the client is closed; wake every waiter."""
        if self._closed.is_set():
            return
        self._close_error = error
        stop = _Stop(error)
        # Snapshots: a caller that timed out removes its entry without the lock.
        for w in list(self._requests.values()):
            w.put(stop)
        self._requests.clear()
        for f in list(self._flushes.values()):
            f.put(stop)
        self._flushes.clear()
        for sub in self._subs.values():
            sub._end(None)
        if not self._first.is_set():
            self._first_error = error or ConnectionClosedError("closed before connecting")
            self._first.set()
        self._room.notify_all()
        self._closed.set()

    def _close_socket(self) -> None:
        # Under the lock: a caller writing its own request (``_kick_locked``) holds the lock for
        # its send, so the socket is never closed (and its fd reused) under that send.
        with self._lock:
            sock, self._sock = self._sock, None
            if self._ep is not None:
                self._forget_fd_locked()
            if sock is not None and self._reader:
                # A leading caller polls this socket: wake it (it then finds the socket gone).
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()

    def _io_loop(self) -> None:
        conn = self._conn
        session = self._session
        lock = self._lock
        wake_r = self._wake_r
        wake_fd = wake_r.fileno()
        ep = self._ep
        wbuf = bytearray()
        while True:
            directives: list[Any] = []
            notices: list[Any] = []
            with lock:
                self._io_idle = False  # (see _kick_locked: no caller writes while we work)
                self._io_busy = True
                if self._broken is not None:
                    raise self._broken  # (a leading caller's core call failed; see _lead)
                if self._handover:
                    # What a leading caller routed for us (older than what follows).
                    for e in self._handover:
                        (directives if e.__class__ in _DIRECTIVES else notices).append(e)
                    self._handover.clear()
                if self._spill:
                    wbuf += self._spill  # a caller's unwritten request: older than what follows
                    self._spill.clear()
                session.handle_timeout(_monotonic())
                self._route_events(directives, notices)
                # Publishers that take no lock keep appending while we take the output: the
                # room they see must already count what we are about to hold, or they could
                # queue a second room's worth before we set it again below.
                conn.submit_room = _SUBMIT_CAP - len(wbuf) - conn.queued_bytes
                data = conn.data_to_send()
                if data and (wbuf or directives):
                    wbuf += data  # older unsent bytes go first
                    data = b""
                self._wbuf_len = len(wbuf) + len(data)
                conn.submit_room = _SUBMIT_CAP - self._wbuf_len
                if self._wbuf_len > MAX_BACKLOG and session.check_backlog(self._wbuf_len, _monotonic()):
                    self._route_events(directives, notices)  # (the close it asked for)
                closed = conn.state is State.CLOSED
            for n in notices:
                self._emit(n)
            if directives:
                for d in directives:
                    self._do_directive(d, wbuf)
                continue
            if closed:
                self._close_socket()
                return
            sock = self._sock
            if data:
                # Fresh output goes to the socket as is; only what it does not take is copied.
                if sock is None:
                    wbuf += data
                elif not self._send_fresh(sock, data, wbuf):
                    continue
            elif wbuf and sock is not None and not self._write(sock, wbuf):
                continue
            with lock:
                # Idle first, then the last look for work: a publisher that appends without the
                # lock (Client.publish) and then finds us not idle appended before this look.
                self._io_idle = True
                if session.has_work:
                    self._io_idle = False
                    continue  # more output or events arrived while we were writing
                self._io_busy = False
                self._wbuf_len = len(wbuf)
                conn.submit_room = _SUBMIT_CAP - self._wbuf_len
                if self._room_waiters and conn.queued_bytes + len(wbuf) <= _LOW_WATER:
                    self._room.notify_all()
                # From here on, a thread that queues output must wake us (unless we are
                # only waiting for the socket to take what is already buffered).
                if self._reader:
                    # This turn may have settled what a leading caller waits for (see _lead).
                    with contextlib.suppress(OSError):
                        self._lead_w.send(b"\0")
                if ep is not None:
                    self._want_out = bool(wbuf) and sock is not None
                    self._set_mask_locked()
                deadline = self._io_due = session.next_deadline()
            timeout = None if deadline is None else max(0.0, deadline - _monotonic())
            if ep is not None:
                try:
                    ready = ep.poll(-1.0 if timeout is None else timeout)
                except OSError as exc:
                    self._lost(exc, wbuf)
                    continue
                woken = readable = False
                for fd, mask in ready:
                    if fd == wake_fd:
                        woken = True
                    elif mask & _NOT_OUT:
                        readable = True
            else:
                rlist: list[Any] = [wake_r]
                if sock is not None:
                    rlist.append(sock)
                wlist = [sock] if (wbuf and sock is not None) else []
                try:
                    rs, _, _ = select.select(rlist, wlist, [], timeout)
                except (OSError, ValueError) as exc:
                    self._lost(exc, wbuf)
                    continue
                woken = wake_r in rs
                readable = sock is not None and sock in rs
            if woken:
                with contextlib.suppress(OSError):
                    while wake_r.recv(4096):
                        pass
            if readable and sock is not None:
                self._read(sock, wbuf)

    def _route_events(self, directives: list[Any], notices: list[Any]) -> None:
        """Under the lock: pop every session event and hand it to its consumer. (Messages and
        subscription ends were routed by the session already, as were the sub-machines'
        events.)"""
        session = self._session
        while True:
            e = session.next_event()
            if e is None:
                return
            cls = e.__class__
            if cls is ev.ReplyReceived:
                assert isinstance(e, ev.ReplyReceived)
                w = self._requests.pop(e.token, None)
                if w is not None:
                    w.put(e)
            elif cls is ev.FlushCompleted:
                assert isinstance(e, ev.FlushCompleted)
                f = self._flushes.pop(e.token, None)
                if f is not None:
                    f.put(True)
            elif cls in _DIRECTIVES:
                directives.append(e)
            else:
                if cls is ev.Connected:
                    self._first.set()
                elif cls is ev.Closed:
                    assert isinstance(e, ev.Closed)
                    self._finish(e.error)
                notices.append(e)

    def _do_directive(self, d: Any, wbuf: bytearray) -> None:
        conn = self._conn
        if isinstance(d, ev.ConnectRequested):
            if self._auth is not None:
                # Read the creds again (rotation) before dialing, outside the lock; bounded by
                # the connect timeout. Unusable credentials fail this attempt like a refused dial.
                try:
                    self._auth.load(d.timeout)
                except CredentialsError as exc:
                    with self._lock:
                        self._session.connection_lost(_monotonic(), exc)
                    return
            try:
                new_sock = self._dial(d)
            except Exception as exc:  # noqa: BLE001 - reported to the core, typed there
                with self._lock:
                    self._session.connection_lost(_monotonic(), _as_error(exc))
                return
            self._sock = new_sock
            wbuf.clear()
            with self._lock:
                self._spill.clear()
                self._session.connection_made(_monotonic())
        elif isinstance(d, ev.TlsUpgradeRequested):
            plain = self._sock
            try:
                assert plain is not None
                ctx = self._ssl_ctx or ssl.create_default_context()
                plain.setblocking(True)
                plain.settimeout(self.options.connect_timeout)
                tls_sock = ctx.wrap_socket(plain, server_hostname=d.hostname)
                tls_sock.setblocking(False)
            except Exception as exc:  # noqa: BLE001
                self._close_socket()
                with self._lock:
                    self._session.connection_lost(_monotonic(), _as_error(exc))
                return
            self._sock = tls_sock
            with self._lock:
                self._session.tls_established(_monotonic())
        elif isinstance(d, ev.CloseRequested):
            with self._lock:
                data = conn.data_to_send()
            if data:
                wbuf += data
            cur = self._sock
            if cur is not None and wbuf and d.error is None:
                # A user close: give queued output a short chance to leave.
                deadline = min(_monotonic() + 2.0, self._close_by)
                while wbuf and _monotonic() < deadline:
                    try:
                        _, w, _ = select.select([], [cur], [], max(0.0, deadline - _monotonic()))
                        if w and not self._write(cur, wbuf):
                            break
                    except (OSError, ValueError):
                        break
            wbuf.clear()
            self._close_socket()
            with self._lock:
                if conn.state is State.CLOSING:  # else the loss was already reported
                    self._session.connection_lost(_monotonic(), d.error)

    def _dial(self, d: ev.ConnectRequested) -> socket.socket:
        addr = d.server
        sock = socket.create_connection((addr.host, addr.port), timeout=d.timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if d.tls_first:
                ctx = self._ssl_ctx or ssl.create_default_context()
                sock = ctx.wrap_socket(sock, server_hostname=d.tls_hostname)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        return sock

    def _send_fresh(self, sock: socket.socket, data: bytes | bytearray, wbuf: bytearray) -> bool:
        """One send of ``data`` (``wbuf`` is empty); the rest is kept in ``wbuf``."""
        try:
            n = sock.send(data)
        except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
            n = 0
        except OSError as exc:
            wbuf += data
            self._lost(exc, wbuf)
            return False
        if n < len(data):
            wbuf += memoryview(data)[n:]
        return True

    def _write(self, sock: socket.socket, wbuf: bytearray) -> bool:
        """Write as much of ``wbuf`` as the socket takes. False if the connection was lost."""
        try:
            while wbuf:
                n = sock.send(wbuf)
                if n <= 0:
                    break
                del wbuf[:n]
        except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
            pass
        except OSError as exc:
            self._lost(exc, wbuf)
            return False
        return True

    def _read(self, sock: socket.socket, wbuf: bytearray) -> None:
        with self._lock:
            # Until our last chunk is fed no caller takes the read side (see _lead); one that
            # took it before we got here keeps it, and reads what woke us.
            self._io_idle = False
            self._io_busy = True
            if self._reader:
                return
            self._io_reading = True
        chunks: list[bytes] = []
        eof = False
        error: Exception | None = None
        # recv_into one long-lived buffer, then copy out what came: recv(256 KiB) would
        # allocate (mmap) a fresh 256 KiB object per call and shrink it (mremap) afterwards,
        # three syscalls and page faults per read, which dominates a request's round trip.
        buf = self._rbuf
        view = self._rview
        # At most _READS_PER_TURN reads before they are processed (and the output written, and
        # timers fired): a flooding server cannot make one turn, or one hold of the lock, grow
        # without bound. What is left stays in the kernel and is read on the next turn.
        try:
            for _ in range(_READS_PER_TURN):
                n = sock.recv_into(buf)
                if not n:
                    eof = True
                    break
                chunks.append(view[:n].tobytes())
                if n < _READ_SIZE and not (isinstance(sock, ssl.SSLSocket) and sock.pending()):
                    break
        except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            pass
        except OSError as exc:
            error = exc
        # One hold of the lock per chunk (at most _READ_SIZE of work), so a caller waiting for
        # the lock during a flood waits for one chunk, not a whole turn.
        session = self._session
        lock = self._lock
        now = _monotonic()
        last = len(chunks) - 1
        if last < 0:
            with lock:
                self._io_reading = False
        for i, c in enumerate(chunks):
            with lock:
                if i == last:
                    self._io_reading = False
                session.receive_data(c, now)
        if eof or error is not None:
            self._lost(error or ConnectionResetError("the server closed the connection"), wbuf)

    def _lost(self, exc: BaseException, wbuf: bytearray) -> None:
        wbuf.clear()
        self._close_socket()
        with self._lock:
            self._spill.clear()  # written for the lost transport, like wbuf
            if self._conn.state is State.CLOSING:
                # A CloseRequested is queued for this transport (e.g. a fatal -ERR and the EOF
                # came in one read): its handler reports the loss, exactly once.
                return
            self._session.connection_lost(_monotonic(), _as_error(exc))

    def __repr__(self) -> str:
        return f"<jssync.Client {self._conn.state.value} {self.connected_url or ''}>"


class Shell:
    """The internal interface between jssync's modules and a client: its core session, its
    lock and the I/O thread. Not public API. Methods ending in ``_locked`` need the lock held
    (``with shell.lock:``); the others take it themselves.

    Operations that run a core sub-machine (fetch, consume, direct get, publish windows)
    attach it to the session with :meth:`attach_locked` and give it commands with
    :meth:`command_locked`; the I/O thread drives its timers and feeds it its messages.
    """

    __slots__ = ("_client", "lock", "session", "publish_to_reply")

    def __init__(self, client: Client) -> None:
        self._client = client
        self.lock = client._lock
        self.session = client._session
        # Publish to a reply subject the server gave us (an ack subject); see
        # ``Client._publish_to_reply``. (A bound method kept here: acks are a hot path.)
        self.publish_to_reply: Callable[[str, bytes, bool], None] = client._publish_to_reply

    @property
    def client(self) -> Client:
        return self._client

    def check_fork(self) -> None:
        self._client._check_fork()

    @property
    def forked(self) -> bool:
        return self._client._fork_gen != _fork_generation

    # -- sub-machines ---------------------------------------------------------------------

    def attach_locked(self, machine: Any, sink: Sink, *, inbox: bool = True, wildcard: bool = False,
                      target: str | None = None, wake: bool = True) -> int:
        """Run ``machine`` on the session (its events go to ``sink``, on the I/O thread or the
        calling thread, under the lock) and get what it queued onto the wire. With
        ``wake=False`` the I/O thread is not woken for the machine's deadline: the caller is
        about to wait for the machine's answer, leading (a lead watches the session's timers
        and gives them to the I/O thread when they come due or when it ends), or else it calls
        :meth:`arm_locked` before it waits."""
        slot = self.session.attach(machine, sink, _monotonic(), inbox=inbox, wildcard=wildcard, target=target)
        self._client._kick_locked(waiting=True)  # (its first request: the caller waits for the answer)
        if wake:
            self._client._arm_locked()
        return slot

    def arm_locked(self) -> None:
        """Wake the I/O thread if the session's next deadline is earlier than the one it sleeps
        to (after ``attach_locked(..., wake=False)``, for a caller that waits without leading)."""
        self._client._arm_locked()

    def command_locked(self, slot: int, command: Any, *, kick: bool = False) -> None:
        """Give a running sub-machine ``command``; wake the I/O thread (or, with ``kick``,
        write what it queued from this thread when the I/O thread is idle)."""
        self.session.command(slot, command, _monotonic())
        if kick:
            self._client._kick_locked()
            self._client._arm_locked()
        else:
            self._client._wake_locked()

    def touch_locked(self, slot: int, *, wake: bool = True) -> None:
        """A publishing thread changed a machine's window directly: let the session re-read
        its deadline, and wake the I/O thread if it is earlier than the one it sleeps to (not
        with ``wake=False``: for a deadline that is only a backstop of the caller's own wait,
        the I/O thread picks it up when it next wakes)."""
        self.session.touch(slot)
        if wake:
            self._client._arm_locked()

    # -- output -----------------------------------------------------------------------------

    def kick_locked(self, waiting: bool = False) -> None:
        """Get what the session queued onto the wire now (see ``Client._kick_locked``;
        ``waiting``: the caller is about to wait for the answer to it)."""
        self._client._kick_locked(waiting)

    def wake_locked(self) -> None:
        """Make the I/O thread look at the session (new output, an earlier deadline)."""
        self._client._wake_locked()

    # -- leading ----------------------------------------------------------------------------

    def take_read_locked(self, round_trip: bool = True) -> socket.socket | None:
        """For a caller about to wait for an answer (before :meth:`kick_locked` sends what it
        waits on: the answer may come before this thread runs again): the socket, if this
        thread may read it itself until the answer is in (see ``Client._lead``; ``round_trip=False``
        for a wait that may last, such as a fetch's long poll)."""
        return self._client._take_read_locked(round_trip)

    def lead(self, sock: socket.socket, pending: Callable[[], bool], deadline: float, round_trip: bool = True) -> None:
        """Outside the lock, with the socket :meth:`take_read_locked` gave: read it until
        ``pending()`` is false or ``deadline`` passes, then give it back to the I/O thread."""
        self._client._lead(sock, pending, deadline, round_trip)

    def give_back(self) -> None:
        """Give the read side back if this thread still holds it. Call it in a ``finally``
        after :meth:`take_read_locked`: an exception before :meth:`lead` began must not keep
        the socket from the I/O thread (idempotent)."""
        self._client._give_back()

    @property
    def has_deferred(self) -> bool:
        """Acks were queued without waking the I/O thread (see :meth:`publish_to_reply`)."""
        return self._client._deferred

    def clear_deferred_locked(self) -> None:
        self._client._deferred = False

    def flush_deferred_locked(self) -> None:
        self._client._flush_deferred_locked()

    @property
    def backlog(self) -> int:
        """Bytes queued for the socket and not yet written."""
        return self._client._conn.queued_bytes + self._client._wbuf_len

    @property
    def congested(self) -> bool:
        """More than the high-water mark waits for the socket: publishers should wait."""
        return self._client._conn.queued_bytes + self._client._wbuf_len > _HIGH_WATER

    def wait_for_room_locked(self) -> None:
        """Block (with a timeout) while the socket is not draining the output."""
        self._client._wait_for_room()

    @property
    def io_idle(self) -> bool:
        return self._client._io_idle

    def emit(self, event: Any) -> None:
        """Hand a notification to the client's ``on_event`` handler."""
        self._client._emit(event)


def shell_of(client: Client) -> Shell:
    """The internal interface of ``client`` for jssync's modules."""
    return client._shell


# TLS alerts a server sends when it refuses the client's certificate (mutual TLS): a refused
# credential, reported as AuthorizationError. (A server may also just close the connection;
# that stays a connection error.)
_CERTIFICATE_REFUSALS: Final = frozenset(
    {
        "TLSV13_ALERT_CERTIFICATE_REQUIRED",
        "SSLV3_ALERT_BAD_CERTIFICATE",
        "SSLV3_ALERT_CERTIFICATE_UNKNOWN",
        "SSLV3_ALERT_CERTIFICATE_REVOKED",
        "SSLV3_ALERT_CERTIFICATE_EXPIRED",
        "SSLV3_ALERT_UNSUPPORTED_CERTIFICATE",
        "TLSV1_ALERT_UNKNOWN_CA",
        "TLSV1_ALERT_ACCESS_DENIED",
    }
)


def _check_limit(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidOptionError(f"{name} must be an int >= 1, got {value!r}")


def _as_error(exc: BaseException) -> Exception:
    if isinstance(exc, ssl.SSLError) and getattr(exc, "reason", None) in _CERTIFICATE_REFUSALS:
        err = AuthorizationError(f"the server refused the TLS client certificate ({exc.reason})")
        err.__cause__ = exc
        return err
    return exc if isinstance(exc, Exception) else ConnectionClosedError(repr(exc))


_P = ParamSpec("_P")


def _takes_the_options_of(cls: Callable[_P, Client]) -> Callable[[Callable[..., Client]], Callable[_P, Client]]:
    """Give ``connect`` the exact signature of :class:`Client` (for mypy and for ``help()``),
    from the one definition of the options: a misspelled option is a ``TypeError``."""

    def give(f: Callable[..., Client]) -> Callable[_P, Client]:
        # (the class's signature is its __init__'s, which returns None: connect returns a Client)
        f.__signature__ = inspect.signature(cls).replace(return_annotation=cls)  # type: ignore[attr-defined]
        return f

    return give


@_takes_the_options_of(Client)
def connect(*args: Any, **options: Any) -> Client:
    """Connect and return a :class:`Client` (also a context manager: drain and close on exit).
    Takes the options of :class:`Client` (see its signature).

    Raises :class:`NoServersError` (:class:`ConnectTimeoutError` when the last attempt ran out
    of time), :class:`AuthorizationError`, :class:`SecureConnectionRequiredError` or
    :class:`TimeoutError` when it cannot connect.
    """
    client = Client(*args, **options)
    client._start()
    return client
