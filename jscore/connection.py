"""The NATS connection machine: handshake, keep-alive, subscriptions, request muxing, server
pool, reconnect and buffering, driven by events and an injected ``now``.

Contract (see docs/design.md): the transport calls ``start(now)`` once, then feeds
``receive_data``, ``handle_timeout`` at ``next_deadline()``, and the lifecycle calls
``connection_made`` / ``tls_established`` / ``connection_lost``; it acts on the directive events
(``ConnectRequested``, ``TlsUpgradeRequested``, ``CloseRequested``) and writes ``data_to_send()``.
Every state change of the machine lives in this module.
"""

from __future__ import annotations

import builtins

import enum
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import unquote, urlsplit

import msgspec

from . import events as ev
from .auth import Credentials, connect_auth_fields
from .errors import (
    ConnectTimeoutError,
    AuthorizationError,
    BadSubjectError,
    AuthorizationExpiredError,
    AuthorizationRevokedError,
    ConnectionClosedError,
    CredentialsError,
    InvalidOptionError,
    LocalProtocolError,
    MaxPayloadError,
    NoServersError,
    PermissionsViolationError,
    ReconnectBufferExceededError,
    RemoteProtocolError,
    SecureConnectionRequiredError,
    ServerError,
    StaleConnectionError,
    TimeoutError,
)
from .headers import HeadersInput, encode_headers
from .protocol import (
    DEFAULT_MAX_PAYLOAD,
    HPUB_FMT,
    HPUB_REPLY_FMT,
    MAX_MAX_PAYLOAD,
    PING,
    PONG,
    PUB_FMT,
    PUB_REPLY_FMT,
    AckLane,
    AcksReceived,
    DirectRepliesReceived,
    ErrReceived,
    InfoReceived,
    MsgReceived,
    MsgsReceived,
    OkReceived,
    Parser,
    PingReceived,
    PongReceived,
    cached_pub_tail,
    cached_size_line,
    check_publish_subject,
    check_queue_group,
    check_subscribe_subject,
    encode_connect,
    encode_sub,
    encode_unsub,
    pub_head,
    pub_tail,
    size_line,
    split_frames,
)

if TYPE_CHECKING:
    from random import Random  # the injected generator; the module-level one is never used

__all__ = ["ConnectOptions", "Connection", "State", "parse_server_url", "CLIENT_VERSION"]

CLIENT_VERSION: Final = "0.1.0"
DEFAULT_PORT: Final = 4222
MAX_DISCOVERED: Final = 1024
_NUID_ALPHABET: Final = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


class ConnectOptions(msgspec.Struct, frozen=True, kw_only=True):
    """Every connection setting, as a frozen, picklable value. Its repr hides secrets."""

    servers: tuple[str, ...] = ("nats://127.0.0.1:4222",)
    name: str | None = None
    user: str | None = None
    password: str | None = None
    token: str | None = None
    tls: bool = False  # the client requires TLS (a context was given or a tls:// URL)
    tls_first: bool = False
    connect_timeout: float = 2.0
    reconnect: bool = True
    max_reconnect_attempts: int = 60  # per server; negative means forever
    reconnect_wait: float = 2.0
    reconnect_jitter: float = 0.1
    reconnect_buffer_size: int = 8 * 1024 * 1024
    ping_interval: float = 120.0
    max_pings_out: int = 2
    ignore_discovered_servers: bool = False
    echo: bool = True
    inbox_prefix: str = "_INBOX"

    def __repr__(self) -> str:
        def shown(f: str) -> str:
            value = getattr(self, f)
            if f in ("password", "token") and value:
                return "'***'"
            if f == "servers":  # URLs may carry user:password@
                return repr(tuple(_redact(u) if isinstance(u, str) else u for u in value))
            return repr(value)

        return f"ConnectOptions({', '.join(f'{f}={shown(f)}' for f in self.__struct_fields__)})"

    def __reduce__(self) -> tuple[Any, ...]:
        """A pickle carries no secret: the password, the token and the credentials of URLs are
        left out (whoever unpickles the options brings its own)."""
        fields = {f: getattr(self, f) for f in self.__struct_fields__}
        fields["password"] = None
        fields["token"] = None
        fields["servers"] = tuple(_without_userinfo(u) for u in self.servers)
        return (_options_from_fields, (fields,))

    def validate(self) -> None:
        if not self.servers:
            raise InvalidOptionError("servers: at least one URL is needed")
        for url in self.servers:
            parse_server_url(url)
        for name in ("connect_timeout", "reconnect_wait", "ping_interval"):
            if not getattr(self, name) > 0:
                raise InvalidOptionError(f"{name} must be > 0")
        if self.reconnect_jitter < 0:
            raise InvalidOptionError("reconnect_jitter must be >= 0")
        if self.max_pings_out < 1:
            raise InvalidOptionError("max_pings_out must be >= 1")
        if self.reconnect_buffer_size < 0:
            raise InvalidOptionError("reconnect_buffer_size must be >= 0")
        if not self.inbox_prefix or "*" in self.inbox_prefix or ">" in self.inbox_prefix:
            raise InvalidOptionError("inbox_prefix must be a literal subject prefix")
        try:
            check_publish_subject(self.inbox_prefix, "inbox_prefix")
        except BadSubjectError as exc:
            raise InvalidOptionError(str(exc)) from exc


def parse_server_url(url: str, *, discovered: bool = False, default_scheme: str = "nats") -> ev.ServerAddress:
    """Parse ``nats://[user[:pass]@]host[:port]`` (also ``tls://``, ``[::1]:4222``, bare
    ``host:port``). Raises :class:`InvalidOptionError` with the URL redacted."""
    if not isinstance(url, str) or not url.strip():
        raise InvalidOptionError("server URL must be a non-empty string")
    raw = url.strip()
    if "://" not in raw:
        raw = f"{default_scheme}://{raw}"
    try:
        parts = urlsplit(raw)
        port = parts.port
    except ValueError as exc:
        raise InvalidOptionError(f"invalid server URL {_redact(url)!r}: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in ("nats", "tls"):
        raise InvalidOptionError(f"unsupported URL scheme {scheme!r} in {_redact(url)!r} (nats:// or tls://)")
    host = parts.hostname
    if not host:
        raise InvalidOptionError(f"server URL {_redact(url)!r} has no host")
    if not host.isprintable() or any(c.isspace() for c in host):
        raise InvalidOptionError(f"server URL {_redact(url)!r}: the host has control or space characters")
    if host.endswith(".") and len(host) > 1:
        host = host[:-1]
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise InvalidOptionError(f"server URL {_redact(url)!r} must not have a path, query or fragment")
    port = port if port is not None else DEFAULT_PORT
    if not 0 < port < 65536:
        raise InvalidOptionError(f"server URL {_redact(url)!r}: port out of range")
    user = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password else None
    shown_host = f"[{host}]" if ":" in host else host
    return ev.ServerAddress(
        url=f"{scheme}://{shown_host}:{port}",
        scheme=scheme,
        host=host,
        port=port,
        user=user,
        password=password,
        discovered=discovered,
    )


def _options_from_fields(fields: dict[str, Any]) -> ConnectOptions:
    return ConnectOptions(**fields)


def _without_userinfo(url: str) -> str:
    if "@" not in url:
        return url
    head, _, tail = url.rpartition("@")
    scheme, sep, _cred = head.partition("://")
    return f"{scheme}{sep}{tail}" if sep else tail


def _redact(url: str) -> str:
    if "@" not in url:
        return url
    head, _, tail = url.rpartition("@")
    scheme, sep, _cred = head.partition("://")
    return f"{scheme}{sep}***@{tail}" if sep else f"***@{tail}"


MAX_BACKLOG: Final = 64 * 1024 * 1024
"""Bytes queued for a server that does not read them, past which it is stale (see
:meth:`Connection.check_backlog`): twice the level at which publishers are made to wait."""
PUBLISH_HIGH_WATER: Final = 32 * 1024 * 1024
"""Queued output above which a transport makes publishers wait (half of :data:`MAX_BACKLOG`);
also what :meth:`Connection.submit` queues before it declines, until the transport sets
:attr:`Connection.submit_room` from its own backlog."""


class State(enum.Enum):
    IDLE = "idle"  # start() not called yet
    WAITING = "waiting"  # reconnect timer armed
    DIALING = "dialing"  # ConnectRequested emitted, waiting for connection_made
    AWAIT_INFO = "await_info"
    TLS_HANDSHAKE = "tls_handshake"
    AWAIT_PONG = "await_pong"  # CONNECT + PING sent
    CONNECTED = "connected"
    CLOSING = "closing"  # CloseRequested emitted, waiting for connection_lost
    CLOSED = "closed"


_CONNECTED: Final = State.CONNECTED
_CRLF: Final = b"\r\n"
_join: Final = b"".join
# Why a connect attempt failed that says more than "unreachable": reported as such when no
# server could be connected to (credentials refused or unusable, TLS required but not offered).
_REFUSALS: Final = (AuthorizationError, SecureConnectionRequiredError, CredentialsError)
_TRANSPORT_UP: Final = frozenset({State.AWAIT_INFO, State.TLS_HANDSHAKE, State.AWAIT_PONG, State.CONNECTED})


class _Entry:
    __slots__ = ("address", "attempts", "last_attempt", "auth_failures", "lame_duck")

    def __init__(self, address: ev.ServerAddress) -> None:
        self.address = address
        self.attempts = 0
        self.last_attempt: float | None = None
        self.auth_failures = 0
        self.lame_duck = False


class _Sub:
    __slots__ = ("subject", "queue", "max_msgs", "delivered")

    def __init__(self, subject: bytes, queue: bytes | None, max_msgs: int | None) -> None:
        self.subject = subject
        self.queue = queue
        self.max_msgs = max_msgs
        self.delivered = 0


class Stats(msgspec.Struct, kw_only=True):
    msgs_in: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    reconnects: int = 0


class Connection:
    """The sans-IO connection machine. Not thread-safe: the transport serializes calls."""

    def __init__(self, options: ConnectOptions, *, rng: Random, credentials: Credentials | None = None) -> None:
        options.validate()
        self.options = options
        self._rng = rng
        # nkey / JWT authentication: callables of the shell (signing, the JWT), called at each
        # handshake; the core itself holds no key and reads no file.
        self._credentials = credentials
        self.state = State.IDLE
        self._pool = [_Entry(parse_server_url(u)) for u in dict.fromkeys(options.servers)]
        first = self._pool[0].address
        self._tls_hostname = first.host
        # Gossiped URLs carry no credentials: they use those of the first configured URL that has
        # some (else the user/password/token options), as the configured URLs would.
        self._url_auth = next((e.address for e in self._pool if e.address.user), None)
        # Servers given up on after authorization failures: a later INFO must not re-add them
        # (every server's INFO gossips the whole cluster, which made an endless retry loop).
        self._removed: set[tuple[str, int]] = set()
        self._wants_tls = options.tls or any(e.address.tls for e in self._pool)
        self._current: _Entry | None = None
        # PubAcks on the publish windows' inboxes are read by one match each (see AckLane).
        self._lane = AckLane(options.inbox_prefix)
        self._parser = Parser(lane=self._lane)
        self.server_info: dict[str, Any] = {}
        self.max_payload = DEFAULT_MAX_PAYLOAD
        # The wire buffer: frames are appended as bytes, so a queued publish is no object of
        # its own (each kept frame cost a fresh allocation and a free by the writer).
        self._out = bytearray()
        self.out_bytes = 0  # publish bytes in _out, for the transport's high-water check
        # Publishes queued by :meth:`submit` without the transport's lock, in order; moved into
        # the wire buffer (or the reconnect buffer) by the next call that queues anything.
        self._submitted = bytearray()
        self._submitted_n: list[int] = []  # one entry per submitted frame, for msgs_out
        self.submit_room = PUBLISH_HIGH_WATER
        self._pending: list[bytes] = []  # publishes held while not connected
        self._pending_size = 0
        self._subs: dict[int, _Sub] = {}
        self._next_sid = 1
        self._pings: deque[int | None] = deque()  # outstanding PINGs: flush token or None
        self._unsent_flushes: list[int] = []
        # flush token -> sid of a subscription being drained (UNSUB sent; its messages still
        # come until that token's PONG)
        self._drains: dict[int, int] = {}
        self._next_flush = 1
        self._pings_out = 0
        self._timers: dict[str, float] = {}
        self._events: deque[ev.Event] = deque()
        # The same queue, for the session's hot path (it pops messages without a call each);
        # next_event() is the contract for everyone else.
        self.event_queue: Final[deque[ev.Event]] = self._events
        self._ever_connected = False
        self._initial_failures = 0
        self._last_error: Exception | None = None
        self._pending_error: Exception | None = None
        self._lame_duck_seen = False
        self._broken: BaseException | None = None
        nuid = "".join(rng.choice(_NUID_ALPHABET) for _ in range(22))
        self._resp_prefix = f"{options.inbox_prefix}.{nuid}."
        self._resp_prefix_b = self._resp_prefix.encode()
        self._resp_sid: int | None = None
        self._requests: set[str] = set()
        self._next_token = 0
        self.stats = Stats()
        self._msgs_out = 0  # kept outside Stats: updated on the publish hot path

    # ---------------------------------------------------------------- core contract

    def next_deadline(self) -> float | None:
        timers = self._timers
        return min(timers.values()) if timers else None

    def next_event(self) -> ev.Event | None:
        return self._events.popleft() if self._events else None

    def data_to_send(self) -> bytes | bytearray:
        """The bytes to write, in order; the caller owns what it gets (it is not reused)."""
        if self._submitted:
            self._take_submitted()
        out = self._out
        if not out:
            return b""
        data = out
        self._out = bytearray()  # (the caller owns ``data`` now: no copy)
        self.out_bytes = 0
        self.stats.bytes_out += len(data)
        return data

    @property
    def has_work(self) -> bool:
        """Output or events are waiting for the transport."""
        return bool(self._out) or bool(self._events) or bool(self._submitted)

    @property
    def queued_bytes(self) -> int:
        """Publish bytes waiting for the transport (in the wire buffer or submitted), for its
        high-water check."""
        return self.out_bytes + len(self._submitted)

    @property
    def msgs_out(self) -> int:
        """Messages queued for the wire so far (all of them, sent or not yet)."""
        return self._msgs_out + len(self._submitted_n)

    @property
    def is_connected(self) -> bool:
        return self.state is State.CONNECTED

    @property
    def is_closed(self) -> bool:
        return self.state is State.CLOSED

    @property
    def connected_url(self) -> str | None:
        if self.state is State.CONNECTED and self._current is not None:
            return self._current.address.url
        return None

    @property
    def servers(self) -> list[str]:
        return [e.address.url for e in self._pool]

    @property
    def pending_out(self) -> int:
        """Bytes waiting: queued for the socket plus buffered while disconnected."""
        return len(self._out) + len(self._submitted) + self._pending_size

    def _check(self) -> None:
        if self._broken is not None:
            raise LocalProtocolError(f"connection machine is broken by an earlier error: {self._broken!r}")

    def start(self, now: float) -> None:
        self._check()
        if self.state is not State.IDLE:
            raise LocalProtocolError("start() called twice")
        self._dial_next(now)

    def handle_timeout(self, now: float) -> None:
        self._check()
        if self._submitted:
            self._take_submitted()
        timers = self._timers
        t = timers.get("connect")
        if t is not None and now >= t:
            del timers["connect"]
            if self.state in (State.DIALING, State.AWAIT_INFO, State.TLS_HANDSHAKE, State.AWAIT_PONG):
                self._close_transport(TimeoutError("timed out connecting to the server"))
        t = timers.get("ping")
        if t is not None and now >= t:
            del timers["ping"]
            if self.state is State.CONNECTED:
                if self._pings_out >= self.options.max_pings_out:
                    self._close_transport(StaleConnectionError("Stale Connection (no PONG to keep-alive PINGs)"))
                else:
                    self._pings_out += 1
                    self._pings.append(None)
                    self._out += PING
                    timers["ping"] = now + self.options.ping_interval
        t = timers.get("reconnect")
        if t is not None and now >= t:
            del timers["reconnect"]
            if self.state is State.WAITING:
                self._dial_next(now, waited=True)

    def connection_made(self, now: float) -> None:
        self._check()
        if self.state is State.CLOSING:
            return  # closed while dialing: the transport handles the CloseRequested next
        if self.state is not State.DIALING:
            raise LocalProtocolError(f"connection_made in state {self.state.value}")
        self.state = State.AWAIT_INFO
        self._parser = Parser(self.max_payload, self._lane)

    def tls_established(self, now: float) -> None:
        self._check()
        if self.state is State.CLOSING:
            return
        if self.state is not State.TLS_HANDSHAKE:
            raise LocalProtocolError(f"tls_established in state {self.state.value}")
        self._send_connect()

    def connection_lost(self, now: float, exc: Exception | None = None) -> None:
        self._check()
        if self._submitted:
            self._take_submitted()
        if self.state in (State.IDLE, State.WAITING, State.CLOSED):
            return
        error = self._pending_error or exc
        self._pending_error = None
        was_connected = self._current_connected
        entry = self._current
        url = entry.address.url if entry else ""
        self._timers.pop("ping", None)
        self._timers.pop("connect", None)
        self._salvage_output()
        self._current_connected = False
        if self._closing_for_good:
            self._finish_close()
            return
        if was_connected:
            self._events.append(ev.Disconnected(url=url, error=error))
        else:
            self._events.append(ev.ConnectAttemptFailed(url=url, error=error))
        if entry is not None and isinstance(error, AuthorizationError):
            entry.auth_failures += 1
            if entry.auth_failures >= 2 or not self._ever_connected:
                self._pool.remove(entry)
                self._removed.add((entry.address.host, entry.address.port))
        self._last_error = error
        if not self._ever_connected:
            self._initial_failures += 1
            if isinstance(error, _REFUSALS):
                self._initial_refusal = error
            if not self._untried():
                # Like nats.go, the first connect tries every configured server before giving
                # up; a refusal (credentials, TLS) wins over "unreachable" as the reason.
                self._close_for_good(self._no_servers_error(self._initial_refusal or error))
                return
            self._dial_next(now)
            return
        if not self.options.reconnect:
            self._close_for_good(error or ConnectionClosedError("connection lost and reconnect is off"))
            return
        if entry is not None and entry in self._pool:
            # Rotate: the server we just lost goes to the back of the pool.
            self._pool.remove(entry)
            self._pool.append(entry)
        self._dial_next(now)

    def receive_data(self, data: bytes, now: float) -> None:
        self._check()
        if self._submitted:
            self._take_submitted()
        if self.state not in _TRANSPORT_UP:
            return  # bytes after CloseRequested or from a dead transport: ignore
        try:
            self._process(self._parser.feed(data), now)
        except RemoteProtocolError as exc:
            # The server broke the protocol: this connection's parser is poisoned and dropped;
            # the machine itself carries on (reconnect with a fresh parser).
            self._events.append(ev.ServerError(error=exc, fatal=True))
            self._close_transport(exc)
        except BaseException as exc:
            self._broken = exc
            raise

    def handle(self, command: ev.Command, now: float) -> int | str | None:
        """Dispatch a command; returns the sid of a Subscribe, the token of a Request or Flush."""
        match command:
            case ev.Publish(subject=s, payload=p, reply=r, headers=h):
                self.publish(s, p, r, h)
                return None
            case ev.Subscribe(subject=s, queue=q, max_msgs=m):
                return self.subscribe(s, q, m)
            case ev.Unsubscribe(sid=sid, max_msgs=m):
                self.unsubscribe(sid, m)
                return None
            case ev.Request(subject=s, payload=p, headers=h):
                return self.request(s, p, h)
            case ev.CancelRequest(token=t):
                self.cancel_request(t)
                return None
            case ev.Flush():
                return self.flush()
            case ev.Close():
                self.close(now)
                return None
        raise LocalProtocolError(f"unknown command {command!r}")

    # ---------------------------------------------------------------- application API

    def publish(
        self,
        subject: str,
        payload: bytes = b"",
        reply: str | None = None,
        headers: HeadersInput | None = None,
    ) -> None:
        """Queue a publish. Validates everything and raises before a byte is queued."""
        if self._submitted:
            self._take_submitted()
        # Fast path: connected, a subject validated before, bytes payload, no reply/headers.
        if reply is None and headers is None and self.state is _CONNECTED and payload.__class__ is bytes:
            head = pub_head(subject)
            if head is not None:
                n = len(payload)
                if n <= self.max_payload:
                    frame = _join((head, cached_size_line(n) or size_line(n), payload, _CRLF))
                    self._out += frame
                    self.out_bytes += len(frame)
                    self._msgs_out += 1
                    return
        self._publish_checked(subject, payload, reply, headers)

    def submit(self, subject: str, payload: bytes) -> bool:
        """The transport's lock-free publish, the one call a transport may make WITHOUT the
        lock that serializes every other call, from any thread (it relies on the GIL: its one
        shared write is a single append to a bytearray).

        Queues ``PUB subject payload`` and returns True when connected, the subject passed
        :func:`check_publish_subject` before (its cache hit), the payload is bytes within
        :attr:`max_payload` and at most :attr:`submit_room` publish bytes wait
        (:attr:`queued_bytes`). Otherwise
        returns False having queued nothing: then call :meth:`publish` under the lock, which
        validates, buffers or raises. The frame joins the wire buffer at the next call that
        queues anything (or :meth:`data_to_send`), before what that call queues, so the order
        of one thread's calls is kept.

        A connection closed (by another thread) between the check and the append raises
        :class:`ConnectionClosedError`: the message may not have been sent."""
        if self.state is _CONNECTED and payload.__class__ is bytes:
            head = pub_head(subject)
            if head is not None:
                n = len(payload)
                queued = self._submitted
                if n <= self.max_payload and len(queued) + self.out_bytes <= self.submit_room:
                    # (one join of bytes already made: about a quarter cheaper than PUB_FMT)
                    queued += _join((head, cached_size_line(n) or size_line(n), payload, _CRLF))
                    self._submitted_n.append(n)
                    if self.state is not _CONNECTED and self._closed_for_submit():  # (re-read: another thread)
                        raise ConnectionClosedError(
                            "the connection closed during the publish; the message may not have been sent"
                        )
                    return True
        return False

    def submit_ack(self, subject: str, payload: bytes) -> bool:
        """:meth:`submit` for a reply subject the SERVER gave (an ack subject, see
        :meth:`publish_ack`): the same contract, without the lock; False (nothing queued) when
        not connected, too large or past :attr:`submit_room`: then publish it under the lock."""
        if self.state is _CONNECTED:
            n = len(payload)
            queued = self._submitted
            if n <= self.max_payload and len(queued) + self.out_bytes <= self.submit_room:
                queued += b"PUB " + subject.encode() + (cached_pub_tail(payload) or pub_tail(payload))
                self._submitted_n.append(n)
                if self.state is not _CONNECTED and self._closed_for_submit():  # (as in submit)
                    raise ConnectionClosedError("the connection closed during the ack; it may not have been sent")
                return True
        return False

    def _closed_for_submit(self) -> bool:
        """A submit that appended just now, after another thread began closing for good: its
        frame is reported dropped or never taken (closed); either way it is not sent."""
        return self.state is State.CLOSED or self._closing_for_good

    def _take_submitted(self) -> None:
        """Move what :meth:`submit` queued to where a publish queued now would go. Every call
        that queues output or leaves the connected state calls this first. Safe against a
        concurrent :meth:`submit`: the bytes taken are copied, then deleted from the front (each
        step atomic), so an append in between stays queued; ``_submitted_n`` may lag the bytes
        by the frames in flight, which the next call counts."""
        queued = self._submitted
        size = len(queued)
        chunk = queued[:size]
        del queued[:size]
        counts = self._submitted_n
        n = len(counts)
        self._msgs_out += n  # (counted when submitted: before the del, so msgs_out never dips)
        del counts[:n]
        if self._closing_for_good:
            # Where a publish now would raise (close() took what came before it, while still
            # connected): the frames are reported dropped, never written after the close began.
            # (One that raced the close may also have raised in its submit: it is not sent
            # either way.) Once closed, what is left was appended after the last take: its
            # submit raised, and nothing may follow Closed.
            if self.state is not State.CLOSED:
                self._events.append(
                    ev.PublishesDropped(count=len(split_frames(chunk)), reason="the connection closed")
                )
        elif self.state is _CONNECTED:
            self._out += chunk
            self.out_bytes += size
        else:
            # Queued while connected, taken after the connection was lost: they wait for the
            # next connection, after the publishes buffered before them.
            self._pending += split_frames(chunk)
            self._pending_size += size

    def publish_frame(self, frame: bytes, payload_len: int) -> bool:
        """The transport's hot path: queue a ``PUB`` frame the caller built from a subject that
        :func:`check_publish_subject` validated before (its cache hit) and a bytes payload.
        Returns False, queueing nothing, when not connected or too large: then use
        :meth:`publish`, which validates, buffers or raises."""
        if self._submitted:
            self._take_submitted()
        if self.state is _CONNECTED and payload_len <= self.max_payload:
            self._out += frame
            self.out_bytes += len(frame)
            self._msgs_out += 1
            return True
        return False

    def publish_frames(self, data: bytes, count: int) -> bool:
        """Queue ``count`` complete ``PUB``/``HPUB`` frames joined into ``data``, each built by
        the caller from a validated subject with a payload within :attr:`max_payload` (the bulk
        publisher checks both). False, queueing nothing, when not connected."""
        if self._submitted:
            self._take_submitted()
        if self.state is _CONNECTED:
            self._out += data
            self.out_bytes += len(data)
            self._msgs_out += count
            return True
        return False

    def check_backlog(self, queued: int) -> bool:
        """The transport reports how many bytes it holds unwritten (the server is not reading
        them). Past :data:`MAX_BACKLOG` the server is treated as stale: the connection is closed
        (and re-established), so a server that sends without reading (a PING flood, say)
        cannot grow the client without bound. True when that happened."""
        if queued <= MAX_BACKLOG or self.state is not State.CONNECTED:
            return False
        err = StaleConnectionError(
            f"the server does not read what we send ({queued} bytes queued, the limit is {MAX_BACKLOG})"
        )
        self._events.append(ev.ServerError(error=err, fatal=True))
        self._close_transport(err)
        return True

    def publish_ack(self, subject: str, payload: bytes) -> None:
        """Publish to a reply subject the SERVER gave (an ack subject): it came out of the
        parser as one whitespace-free token, so it is not validated again nor remembered in the
        subject cache (every ack subject is new)."""
        if self._submitted:
            self._take_submitted()
        if len(payload) > self.max_payload:
            raise MaxPayloadError(f"payload of {len(payload)} bytes > max_payload {self.max_payload}")
        frame = b"PUB " + subject.encode() + (cached_pub_tail(payload) or pub_tail(payload))
        if self.state is _CONNECTED:
            self._out += frame
            self.out_bytes += len(frame)
        else:
            self._buffer(frame)
        self._msgs_out += 1

    def publish_inbox(self, subject: str, payload: bytes, reply: bytes, headers: HeadersInput | None = None) -> None:
        """:meth:`publish` with a reply subject built from an inbox prefix this machine gave
        out (bytes): it is not validated again nor remembered in the subject cache."""
        self._publish_checked(subject, payload, None, headers, reply)

    def _publish_checked(
        self,
        subject: str,
        payload: bytes,
        reply: str | None,
        headers: HeadersInput | None,
        reply_b: bytes | None = None,
    ) -> None:
        if self._submitted:
            self._take_submitted()
        self._queue_frame(self._checked_frame(subject, payload, reply, headers, reply_b))

    def _checked_frame(
        self,
        subject: str,
        payload: bytes,
        reply: str | None,
        headers: HeadersInput | None,
        reply_b: bytes | None,
    ) -> bytes:
        """The frame of a publish, checked: raises on bad input, changes nothing."""
        subj = check_publish_subject(subject)
        rep = check_publish_subject(reply, "reply subject") if reply is not None else reply_b
        if not isinstance(payload, (bytes, bytearray, memoryview)):
            raise TypeError(f"payload must be bytes, got {type(payload).__name__}")
        if payload.__class__ is not bytes:
            # len() of a memoryview counts items, not bytes (array('i') ...): the frame's size
            # must be the byte count, so take the bytes once here.
            payload = bytes(payload)
        if headers is not None:
            hdr = encode_headers(headers)
            size = len(hdr) + len(payload)
            if size > self.max_payload:
                raise MaxPayloadError(f"headers + payload = {size} bytes > max_payload {self.max_payload}")
            if rep:
                frame = HPUB_REPLY_FMT % (subj, rep, len(hdr), size, hdr, payload)
            else:
                frame = HPUB_FMT % (subj, len(hdr), size, hdr, payload)
        else:
            if len(payload) > self.max_payload:
                raise MaxPayloadError(f"payload of {len(payload)} bytes > max_payload {self.max_payload}")
            if rep:
                frame = PUB_REPLY_FMT % (subj, rep, len(payload), payload)
            else:
                frame = PUB_FMT % (subj, len(payload), payload)
        return frame

    def _queue_frame(self, frame: bytes) -> None:
        """Queue a checked publish frame: on the wire when connected, else in the reconnect
        buffer (which raises when full or closed, queueing nothing)."""
        if self.state is State.CONNECTED:
            self._out += frame
            self.out_bytes += len(frame)
        else:
            self._buffer(frame)
        self._msgs_out += 1

    def _buffer(self, frame: bytes) -> None:
        if self.state is State.CLOSED or self._closing_for_good:
            raise ConnectionClosedError("the connection is closed")
        if self._pending_size + len(frame) > self.options.reconnect_buffer_size:
            raise ReconnectBufferExceededError(
                f"reconnect buffer full ({self._pending_size} of {self.options.reconnect_buffer_size} bytes); "
                "nothing was queued"
            )
        self._pending.append(frame)
        self._pending_size += len(frame)

    def subscribe(self, subject: str, queue: str | None = None, max_msgs: int | None = None) -> int:
        self._check_open()
        if self._submitted:
            self._take_submitted()
        subj = check_subscribe_subject(subject)
        q = check_queue_group(queue) if queue is not None else None
        if max_msgs is not None and max_msgs <= 0:
            raise InvalidOptionError("max_msgs must be > 0")
        sid = self._next_sid
        self._next_sid += 1
        self._subs[sid] = _Sub(subj, q, max_msgs)
        if self.state is State.CONNECTED:
            self._out += encode_sub(subj, q, sid)
            if max_msgs is not None:
                self._out += encode_unsub(sid, max_msgs)
        return sid

    def arm_ack_lane(self, sid: int) -> None:
        """Read the PubAcks arriving on subscription ``sid`` (a publish window's reply inbox) in
        the parser's :class:`AckLane`: they come as :class:`AcksReceived` runs. Only for a
        subscription without a message limit (the lane does not count towards one)."""
        sub = self._subs.get(sid)
        if sub is not None and sub.max_msgs is None and sub.subject.endswith(b".*"):
            self._lane.arm(sid, sub.subject[:-1].decode())

    def arm_runs(self, sid: int, cursors: bool = False, columns: bool = False) -> None:
        """Deliver the messages of subscription ``sid`` (a pull's inbox) in runs: see
        :class:`AckLane`; with ``cursors``, deliveries in the server's form read by the
        delivery lane, each run with its ack cursors; with ``columns`` too, long runs of them
        may come as columns. Only for a subscription without a message limit (a run does not
        count towards one)."""
        sub = self._subs.get(sid)
        if sub is not None and sub.max_msgs is None and sid != self._resp_sid:
            self._lane.arm_runs(sid, cursors, columns)

    def arm_direct(self, sid: int) -> None:
        """Read the direct get replies arriving on subscription ``sid`` (a batched direct get's
        inbox) in the parser's :class:`AckLane`: they come as :class:`DirectRepliesReceived`
        runs. Only for a subscription to one inbox without a message limit."""
        sub = self._subs.get(sid)
        if sub is not None and sub.max_msgs is None and sid != self._resp_sid and not any(c in sub.subject for c in (b"*", b">")):
            self._lane.arm_direct(sid, sub.subject.decode())

    def unsubscribe(self, sid: int, max_msgs: int | None = None) -> None:
        sub = self._subs.get(sid)
        if sub is None:
            return
        if self._drains and sid in self._drains.values():
            self._forget_sub(sid)  # (its UNSUB went out already)
            return
        self._lane.disarm(sid)
        if self._submitted:
            self._take_submitted()
        if max_msgs is not None and max_msgs > sub.delivered:
            sub.max_msgs = max_msgs
        else:
            self._forget_sub(sid)
            max_msgs = None
        if self.state is State.CONNECTED:
            self._out += encode_unsub(sid, max_msgs)

    def drain_subscription(self, sid: int) -> int | None:
        """UNSUB ``sid`` now, but keep delivering its messages until the server has seen the
        UNSUB: what it sent before arrives ahead of the PONG of the flush whose token this
        returns, and the subscription is forgotten with that ``FlushCompleted``. None when
        nothing can still arrive (unknown sid, or not connected: the subscription is forgotten
        at once and not renewed by a reconnect)."""
        if sid not in self._subs or sid in self._drains.values():
            return None
        if self.state is not State.CONNECTED:
            self._forget_sub(sid)
            return None
        self._lane.disarm(sid)
        if self._submitted:
            self._take_submitted()
        self._out += encode_unsub(sid, None)
        token = self.flush()
        self._drains[token] = sid
        return token

    def _forget_sub(self, sid: int) -> None:
        del self._subs[sid]
        self._lane.disarm(sid)
        if sid == self._resp_sid:
            self._resp_sid = None  # the next request subscribes a new reply inbox

    def has_subscription(self, sid: int) -> bool:
        return sid in self._subs

    def request(self, subject: str, payload: bytes = b"", headers: HeadersInput | None = None) -> str:
        """Publish a request whose reply comes back as ``ReplyReceived(token)``."""
        self._check_open()
        if self._submitted:
            self._take_submitted()
        self._next_token += 1
        token = _b36(self._next_token)
        if self._resp_sid is None:
            # The mux SUB must precede the first request's PUB, and a request that fails must
            # leave the wire buffer untouched: the frame is checked before the SUB is queued.
            # Queueing it fails only in the reconnect buffer, and then no SUB was written.
            frame = self._checked_frame(subject, payload, None, headers, self._resp_prefix_b + token.encode())
            sid = self.subscribe(self._resp_prefix + "*")
            try:
                self._queue_frame(frame)
            except BaseException:
                del self._subs[sid]
                raise
            self._resp_sid = sid
        else:
            # The reply subject is built here from a validated prefix: encode it directly rather
            # than validating (and caching) a subject that is used only once.
            self._publish_checked(subject, payload, None, headers, self._resp_prefix_b + token.encode())
        self._requests.add(token)
        return token

    def new_inbox(self) -> str:
        """A unique inbox subject (not routed through the request mux)."""
        return f"{self.options.inbox_prefix}.{''.join(self._rng.choices(_NUID_ALPHABET, k=22))}"

    def cancel_request(self, token: str) -> None:
        self._requests.discard(token)

    def flush(self) -> int:
        """Ask for a PONG after everything queued so far; ``FlushCompleted(token)`` follows."""
        self._check_open()
        if self._submitted:
            self._take_submitted()
        token = self._next_flush
        self._next_flush += 1
        if self.state is State.CONNECTED:
            self._pings.append(token)
            self._out += PING
        else:
            self._unsent_flushes.append(token)
        return token

    def close(self, now: float) -> None:
        """Close for good. Queued output is still handed to the transport before it closes."""
        if self.state is State.CLOSED or self._closing_for_good:
            return
        if self._submitted:
            self._take_submitted()
        self._closing_for_good = True
        self._close_error = None
        if self.state in _TRANSPORT_UP or self.state is State.DIALING:
            if self.state is not State.CONNECTED and self._pending:
                self._drop_pending("closed before the connection was established")
            self.state = State.CLOSING
            self._timers.clear()
            self._events.append(ev.CloseRequested(error=None))
        elif self.state is State.CLOSING:
            pass
        else:
            self._finish_close()

    # ---------------------------------------------------------------- internals

    _closing_for_good = False
    _initial_refusal: Exception | None = None
    _close_error: Exception | None = None
    _current_connected = False

    def _check_open(self) -> None:
        if self.state is State.CLOSED or self._closing_for_good:
            raise ConnectionClosedError("the connection is closed")

    def _untried(self) -> bool:
        return any(e.last_attempt is None for e in self._pool)

    def _no_servers_error(self, error: Exception | None) -> Exception:
        if isinstance(error, _REFUSALS):
            return error
        what = f"could not connect to any server ({', '.join(self.servers) or 'pool empty'}): {error}"
        # (the builtin TimeoutError: the machine's connect timer and the socket's own timeout)
        err = ConnectTimeoutError(what) if isinstance(error, builtins.TimeoutError) else NoServersError(what)
        err.__cause__ = error
        return err

    def _dial_next(self, now: float, *, waited: bool = False) -> None:
        self.state = State.WAITING
        opts = self.options
        max_attempts = opts.max_reconnect_attempts
        candidates = [
            e
            for e in self._pool
            if (max_attempts < 0 or e.attempts < max_attempts or not self._ever_connected) and
            (self._ever_connected or e.last_attempt is None)
        ]
        if not candidates:
            self._close_for_good(self._no_servers_error(self._last_error))
            return
        fresh = [e for e in candidates if not e.lame_duck]
        entry = (fresh or candidates)[0]
        if entry.last_attempt is not None and not waited:
            # The jitter is drawn once per wait: when the reconnect timer fires, dial (drawing
            # again here would push the deadline out again about half of the time).
            ready = entry.last_attempt + opts.reconnect_wait + self._rng.uniform(0, opts.reconnect_jitter)
            if ready > now:
                self._timers["reconnect"] = ready
                return
        if not entry.lame_duck:
            # A lame-duck server is skipped for one dial; after that it is an ordinary candidate
            # (it may have restarted), so a failing alternative cannot starve it.
            for e in self._pool:
                e.lame_duck = False
        entry.attempts += 1
        entry.last_attempt = now
        self._current = entry
        self._current_connected = False
        self.state = State.DIALING
        self._lame_duck_seen = False
        self._timers["connect"] = now + opts.connect_timeout
        hostname = self._tls_hostname if entry.address.discovered else entry.address.host
        self._events.append(
            ev.ConnectRequested(
                server=entry.address, tls_hostname=hostname, tls_first=opts.tls_first, timeout=opts.connect_timeout
            )
        )

    def _close_transport(self, error: Exception | None) -> None:
        """Ask the transport to close; ``connection_lost`` continues from there."""
        if self.state in (State.CLOSING, State.CLOSED, State.WAITING, State.IDLE):
            return
        if self._submitted:
            self._take_submitted()
        self._pending_error = error
        self.state = State.CLOSING
        self._timers.pop("ping", None)
        self._events.append(ev.CloseRequested(error=error))

    def _close_for_good(self, error: Exception | None) -> None:
        self._closing_for_good = True
        self._close_error = error
        self._finish_close()

    def _finish_close(self) -> None:
        # (closing for good: what submit appended is reported dropped; a submit that appends
        # after this take sees it and raises, and its frame is never taken)
        if self._submitted:
            self._take_submitted()
        self.state = State.CLOSED
        if self._pending:
            self._drop_pending("the connection closed")
        self._out.clear()
        self.out_bytes = 0
        self._timers.clear()
        self._requests.clear()
        self._drains.clear()
        self._events.append(ev.Closed(error=self._close_error))

    def _drop_pending(self, reason: str) -> None:
        self._events.append(ev.PublishesDropped(count=len(self._pending), reason=reason))
        self._pending.clear()
        self._pending_size = 0

    def _salvage_output(self) -> None:
        """Publishes still queued for a dead transport go back to the reconnect buffer."""
        if self._out:
            kept = [f for f in split_frames(self._out) if f.startswith((b"PUB ", b"HPUB "))]
            self._out.clear()
            self.out_bytes = 0
            if kept:
                self._pending[:0] = kept
                self._pending_size += sum(map(len, kept))
        # Flush tokens waiting for a PONG are re-sent after the reconnect. A subscription
        # being drained ends with this transport (no SUB renews it): nothing more can come.
        for sid in self._drains.values():
            if sid in self._subs:
                self._forget_sub(sid)
        self._unsent_flushes[:0] = [t for t in self._pings if t is not None]
        self._pings.clear()
        self._pings_out = 0

    def _send_connect(self) -> None:
        entry = self._current
        assert entry is not None
        opts = self.options
        fields: dict[str, Any] = {
            "verbose": False,
            "pedantic": False,
            "tls_required": self._wants_tls,
            "lang": "python3-jssync",
            "version": CLIENT_VERSION,
            "protocol": 1,
            "echo": opts.echo,
            "headers": True,
            "no_responders": True,
        }
        if opts.name:
            fields["name"] = opts.name
        addr = entry.address
        if addr.discovered and addr.user is None and self._url_auth is not None:
            addr = self._url_auth
        user = addr.user or opts.user
        password = addr.password if addr.user else opts.password
        if user:
            fields["user"] = user
            if password is not None:
                fields["pass"] = password
        elif opts.token:
            fields["auth_token"] = opts.token
        if self._credentials is not None:
            try:
                fields.update(connect_auth_fields(self._credentials, self.server_info.get("nonce")))
            except CredentialsError as exc:
                # Unusable credentials end this attempt before a byte of CONNECT is sent.
                self._close_transport(exc)
                return
        self._out += encode_connect(fields)
        self._out += PING
        self.state = State.AWAIT_PONG

    def _process(self, frames: Sequence[Any], now: float) -> None:
        events = self._events
        stats = self.stats
        subs = self._subs
        resp_sid = self._resp_sid
        for frame in frames:
            if frame.__class__ is MsgReceived:
                stats.msgs_in += 1
                stats.bytes_in += frame.size
                sid = frame.sid
                sub = subs.get(sid)
                if sub is None:
                    continue  # late message for a subscription already gone
                if sid == resp_sid:
                    token = frame.subject[len(self._resp_prefix) :]
                    if token in self._requests:
                        self._requests.discard(token)
                        events.append(ev.ReplyReceived(token=token, msg=frame))
                    continue
                sub.delivered += 1
                if sub.max_msgs is not None and sub.delivered >= sub.max_msgs:
                    del subs[sid]
                    events.append(frame)
                    events.append(ev.SubscriptionEnded(sid=sid, error=None))
                    continue
                events.append(frame)
                continue  # (a message changes no state: the check below is for the other frames)
            elif frame.__class__ is MsgsReceived or frame.__class__ is AcksReceived or frame.__class__ is DirectRepliesReceived:
                if isinstance(frame, MsgsReceived):  # (a run read in bulk has its messages as columns)
                    count = len(frame.msgs) if frame.columns is None else frame.columns.count
                else:
                    count = len(frame.acks) if isinstance(frame, AcksReceived) else len(frame.replies)
                stats.msgs_in += count
                stats.bytes_in += frame.size
                sub = subs.get(frame.sid)
                if sub is not None:  # (else late: the inbox is gone)
                    sub.delivered += count
                    events.append(frame)
                continue
            elif frame.__class__ is PingReceived:
                self._out += PONG
            elif frame.__class__ is PongReceived:
                self._on_pong(now)
            elif frame.__class__ is InfoReceived:
                self._on_info(frame.info, now)
            elif frame.__class__ is ErrReceived:
                self._on_err(frame.text, now)
            elif frame.__class__ is OkReceived:
                pass
            if self.state not in _TRANSPORT_UP:
                return  # the connection is being closed: drop what followed

    def _on_pong(self, now: float) -> None:
        if self.state is State.AWAIT_PONG:
            self._handshake_done(now)
            return
        self._pings_out = 0
        if self._pings:
            token = self._pings.popleft()
            if token is not None:
                if self._drains:
                    sid = self._drains.pop(token, None)
                    if sid is not None and sid in self._subs:
                        self._forget_sub(sid)  # the server has seen its UNSUB: nothing more comes
                self._events.append(ev.FlushCompleted(token=token))

    def _handshake_done(self, now: float) -> None:
        entry = self._current
        assert entry is not None
        self.state = State.CONNECTED
        self._current_connected = True
        self._timers.pop("connect", None)
        entry.attempts = 0
        entry.auth_failures = 0
        entry.lame_duck = False  # a server that came back is a normal candidate again
        out = self._out
        for sid, sub in self._subs.items():
            out += encode_sub(sub.subject, sub.queue, sid)
            if sub.max_msgs is not None:
                out += encode_unsub(sid, sub.max_msgs - sub.delivered)
        if self._pending:
            kept = [f for f in self._pending if _frame_payload_size(f) <= self.max_payload]
            if len(kept) != len(self._pending):
                self._events.append(
                    ev.PublishesDropped(
                        count=len(self._pending) - len(kept),
                        reason=f"larger than the new server's max_payload {self.max_payload}",
                    )
                )
            out += b"".join(kept)
            self._pending.clear()
            self._pending_size = 0
        for token in self._unsent_flushes:
            self._pings.append(token)
            out += PING
        self._unsent_flushes.clear()
        self._pings_out = 0
        self._timers["ping"] = now + self.options.ping_interval
        url = entry.address.url
        if self._ever_connected:
            self.stats.reconnects += 1
            self._events.append(ev.Reconnected(url=url, server_info=self.server_info))
        else:
            self._ever_connected = True
            self._events.append(ev.Connected(url=url, server_info=self.server_info))

    def _on_info(self, info: dict[str, Any], now: float) -> None:
        first = self.state is State.AWAIT_INFO
        # An async INFO (e.g. the lame-duck {"ldm":true}) may carry only the fields that changed:
        # what it omits keeps its value from this connection's first INFO.
        mp = info.get("max_payload", DEFAULT_MAX_PAYLOAD if first else self.max_payload)
        if type(mp) is not int or not 0 < mp <= MAX_MAX_PAYLOAD:
            raise RemoteProtocolError(f"INFO has an invalid max_payload {mp!r}")
        nonce = info.get("nonce")
        if nonce is not None and type(nonce) is not str:
            raise RemoteProtocolError("INFO has a nonce that is not a string")
        self.server_info = info if first else {**self.server_info, **info}
        self.max_payload = mp
        self._parser.max_payload = mp
        self._discover(info.get("connect_urls"), "connect_urls")
        ldm = info.get("ldm")
        if ldm is not None and type(ldm) is not bool:
            self._events.append(ev.ServerPoolWarning(message=f"ignored a non-boolean ldm {ldm!r} in INFO"))
        elif ldm is True and not self._lame_duck_seen and self._current is not None:
            self._lame_duck_seen = True
            self._current.lame_duck = True
            self._events.append(ev.LameDuck(url=self._current.address.url))
        if not first:
            return
        tls_offered = info.get("tls_required") is True or info.get("tls_available") is True
        if self.options.tls_first:
            self._send_connect()
        elif self._wants_tls or info.get("tls_required") is True:
            if not tls_offered:
                self._close_transport(
                    SecureConnectionRequiredError("TLS is required by the client but the server does not offer it")
                )
                return
            self.state = State.TLS_HANDSHAKE
            self._events.append(ev.TlsUpgradeRequested(hostname=self._tls_hostname_for_current()))
        else:
            self._send_connect()

    def _tls_hostname_for_current(self) -> str:
        entry = self._current
        assert entry is not None
        return self._tls_hostname if entry.address.discovered else entry.address.host

    def _discover(self, urls: object, field: str) -> None:
        if urls is None:
            return
        if not isinstance(urls, list):
            self._events.append(ev.ServerPoolWarning(message=f"ignored INFO {field}: not a list"))
            return
        if self.options.ignore_discovered_servers:
            return
        known = {(e.address.host, e.address.port) for e in self._pool} | self._removed
        added: list[str] = []
        scheme = "tls" if self._wants_tls else "nats"
        malformed: list[str] = []
        for raw in urls:
            if len(self._pool) >= MAX_DISCOVERED:
                self._events.append(ev.ServerPoolWarning(message=f"server pool is full ({MAX_DISCOVERED}); ignored the rest"))
                break
            if not isinstance(raw, str) or not raw or any(c in raw for c in "\x00\r\n\t /@"):
                malformed.append(repr(str(raw)[:64]))
                continue
            try:
                addr = parse_server_url(raw, discovered=True, default_scheme=scheme)
            except InvalidOptionError:
                malformed.append(repr(raw[:64]))
                continue
            if (addr.host, addr.port) in known:
                continue
            known.add((addr.host, addr.port))
            self._pool.append(_Entry(addr))
            added.append(addr.url)
        if malformed:
            # One warning per INFO, however many entries were bad (a huge INFO must not flood).
            shown = ", ".join(malformed[:5]) + (f" and {len(malformed) - 5} more" if len(malformed) > 5 else "")
            self._events.append(
                ev.ServerPoolWarning(message=f"ignored {len(malformed)} malformed connect_urls: {shown}")
            )
        if added:
            self._events.append(ev.ServersDiscovered(urls=tuple(added)))

    def _on_err(self, text: str, now: float) -> None:
        low = text.lower()
        if low.startswith("permissions violation"):
            err = _permissions_error(text)
            self._events.append(ev.ServerError(error=err, fatal=False))
            if err.operation == "subscription":
                for sid, sub in list(self._subs.items()):
                    if sub.subject.decode() == err.subject and sub.queue == (err.queue.encode() if err.queue else None):
                        self._forget_sub(sid)
                        self._events.append(ev.SubscriptionEnded(sid=sid, error=err))
            return
        fatal_err: Exception
        if low.startswith("authorization violation"):
            fatal_err = AuthorizationError(text)
        elif low.startswith(("user authentication expired", "account authentication expired", "authentication expired")):
            fatal_err = AuthorizationExpiredError(text)
        elif low.startswith(("user authentication revoked", "authentication revoked")):
            fatal_err = AuthorizationRevokedError(text)
        elif low.startswith("stale connection"):
            fatal_err = StaleConnectionError(text)
        elif low.startswith("maximum payload violation"):
            fatal_err = MaxPayloadError(text)
        else:
            # Unknown errors: report; the server closes the connection if it is fatal.
            self._events.append(ev.ServerError(error=ServerError(text), fatal=False))
            return
        self._events.append(ev.ServerError(error=fatal_err, fatal=True))
        self._close_transport(fatal_err)


def _permissions_error(text: str) -> PermissionsViolationError:
    # 'Permissions Violation for Publish to "x"' / 'for Subscription to "a" using queue "q"'
    low = text.lower()
    operation = "publish" if " for publish" in low else "subscription" if " for subscription" in low else ""
    quoted = text.split('"')
    subject = quoted[1] if len(quoted) >= 3 else ""
    queue = quoted[3] if len(quoted) >= 5 and "using queue" in low else None
    return PermissionsViolationError(text, operation=operation, subject=subject, queue=queue)


def _frame_payload_size(frame: bytes) -> int:
    line_end = frame.index(b"\r\n")
    return int(frame[:line_end].rsplit(b" ", 1)[1])


def _b36(n: int) -> str:
    digits = []
    while True:
        n, r = divmod(n, 36)
        digits.append(_NUID_ALPHABET[r])
        if not n:
            return "".join(reversed(digits))
