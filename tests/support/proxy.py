"""FaultProxy: an in-process TCP proxy that injects network faults between a client and a server.

One background thread runs a selector loop over the listening socket and every proxied connection
(client side and upstream side), so faults can be applied live and exactly: ``reset()`` closes the
sockets from the thread that owns them, which makes the kernel send an RST at once.

Directions: ``"up"`` is client -> server, ``"down"`` is server -> client, ``"both"`` means both.

Each direction's byte stream is split into NATS protocol frames by :class:`FrameSplitter` (written
here on purpose: the tests must not trust the parser under test). Without frame rules, bytes are
forwarded as they arrive (a partial frame is forwarded partially). With a ``drop_frames`` or
``rewrite_frames`` rule active on a direction, only whole frames are forwarded there.

Recorded per proxy: ``captured(direction)`` (every byte received from that side, forwarded or not),
``bytes_up`` / ``bytes_down`` (bytes actually written to the other side), ``dropped(direction)``
(frames removed by rules), ``connections`` (client connections proxied so far).
"""

from __future__ import annotations

import collections
import errno
import random
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Literal, Union
from urllib.parse import urlsplit

__all__ = [
    "FaultProxy",
    "FrameRule",
    "FrameSplitter",
    "ProxyCallbackError",
    "frame_verb",
    "is_verb",
    "split_frames",
]

Direction = Literal["up", "down"]
DirectionArg = Literal["up", "down", "both"]

_PAYLOAD_VERBS = {b"MSG": 0, b"PUB": 0, b"HMSG": 0, b"HPUB": 0}
_MAX_LINE = 1 << 20  # a "line" longer than this without LF is flushed as one opaque frame
_MAX_PAYLOAD = 64 << 20  # a declared size above this is not believed
_MAX_QUEUED = 16 << 20  # per direction: stop reading the source above this many queued bytes


# --------------------------------------------------------------------------- frame splitting


class FrameSplitter:
    """Incremental splitter of a NATS byte stream into whole frames.

    A frame is a control line ending in LF (CRLF on the wire), plus for ``MSG``/``HMSG``/``PUB``/
    ``HPUB`` the payload and its trailing CRLF, the size being the last argument of the line:
    ``MSG subj sid [reply] size``, ``HMSG subj sid [reply] hdr_size total_size``,
    ``PUB subj [reply] size``, ``HPUB subj [reply] hdr_size total_size``. A payload line whose size
    does not parse is treated as a plain control line. Works in both directions.
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self._need = 0  # total length of the current frame once known (control line + payload)

    @property
    def pending(self) -> bytes:
        """Bytes of the current incomplete frame."""
        return bytes(self._buf)

    @property
    def pending_len(self) -> int:
        return len(self._buf)

    def pending_from(self, offset: int) -> bytes:
        """The incomplete frame's bytes from ``offset`` on."""
        return bytes(self._buf[offset:])

    def feed(self, data: bytes) -> list[bytes]:
        """Add ``data``; return the frames it completes (possibly none)."""
        self._buf += data
        out: list[bytes] = []
        while self._buf:
            if self._need == 0:
                nl = self._buf.find(b"\n")
                if nl < 0:
                    if len(self._buf) > _MAX_LINE:
                        out.append(bytes(self._buf))
                        self._buf.clear()
                    break
                line_len = nl + 1
                self._need = line_len + self._payload_len(bytes(self._buf[:nl]))
            if len(self._buf) < self._need:
                break
            out.append(bytes(self._buf[: self._need]))
            del self._buf[: self._need]
            self._need = 0
        return out

    def flush(self) -> bytes:
        """Return and forget the incomplete remainder (e.g. at end of stream)."""
        rest = bytes(self._buf)
        self._buf.clear()
        self._need = 0
        return rest

    @staticmethod
    def _payload_len(line: bytes) -> int:
        parts = line.split()
        if not parts or parts[0].upper() not in _PAYLOAD_VERBS:
            return 0
        verb = parts[0].upper()
        minimum = {b"MSG": 4, b"HMSG": 5, b"PUB": 3, b"HPUB": 4}[verb]
        if len(parts) < minimum:
            return 0
        try:
            size = int(parts[-1])
        except ValueError:
            return 0
        if size < 0 or size > _MAX_PAYLOAD:
            return 0
        return size + 2


def split_frames(data: bytes) -> list[bytes]:
    """Split a complete captured stream into frames (an incomplete tail is returned last)."""
    splitter = FrameSplitter()
    frames = splitter.feed(data)
    rest = splitter.flush()
    if rest:
        frames.append(rest)
    return frames


def frame_verb(frame: bytes) -> bytes:
    """The upper-cased first word of a frame: b"MSG", b"PING", b"+OK", b"-ERR" ..."""
    end = len(frame)
    for sep in (b" ", b"\t", b"\r", b"\n"):
        i = frame.find(sep)
        if 0 <= i < end:
            end = i
    return frame[:end].upper()


def is_verb(*verbs: str | bytes) -> Callable[[bytes], bool]:
    """Predicate for ``drop_frames``: the frame's verb is one of ``verbs``."""
    wanted = {(v.encode() if isinstance(v, str) else v).upper() for v in verbs}
    return lambda frame: frame_verb(frame) in wanted


# --------------------------------------------------------------------------- rules


class ProxyCallbackError(RuntimeError):
    """A predicate or rewrite function raised inside the proxy thread (raised by ``close()``)."""


class FrameRule:
    """A frame rule returned by ``drop_frames`` / ``rewrite_frames`` (counts what it did)."""

    def __init__(
        self,
        proxy: FaultProxy,
        direction: Direction,
        *,
        predicate: Callable[[bytes], bool] | None = None,
        rewrite: Callable[[bytes], bytes | None] | None = None,
        count: int | None = None,
        kill: tuple[int | None, bool] | None = None,
    ) -> None:
        self._proxy = proxy
        self.direction: Direction = direction
        self.predicate = predicate
        self.rewrite = rewrite
        self.count = count
        self.kill = kill  # (bytes of the frame to keep, rst) for break_at_frame
        self.matched = 0  # frames dropped / rewritten so far
        self.frames: list[bytes] = []  # the original frames that were dropped or rewritten

    @property
    def exhausted(self) -> bool:
        return self.count is not None and self.matched >= self.count

    def remove(self) -> None:
        self._proxy._remove_rule(self)

    def wait(self, n: int = 1, timeout: float = 5.0) -> bool:
        """Wait until the rule matched at least ``n`` frames."""
        return self._proxy._wait_until(lambda: self.matched >= n, timeout)

    def __repr__(self) -> str:
        kind = "break" if self.kill else ("drop" if self.predicate is not None else "rewrite")
        return f"<FrameRule {kind} {self.direction} matched={self.matched} count={self.count}>"


class _DirFaults:
    def __init__(self) -> None:
        self.stall = False
        self.delay = 0.0
        self.jitter = 0.0
        self.slice: tuple[int, int, float] | None = None
        self.rules: list[FrameRule] = []


# --------------------------------------------------------------------------- connection state


class _Pipe:
    """One direction of one connection: bytes read from ``src`` and written to ``dst``."""

    def __init__(self, direction: Direction, src: socket.socket, dst: socket.socket) -> None:
        self.direction: Direction = direction
        self.src = src
        self.dst = dst
        self.splitter = FrameSplitter()
        self.fwd = 0  # bytes of the splitter's incomplete frame already forwarded raw
        self.queue: collections.deque[tuple[float, bytes]] = collections.deque()
        self.queued = 0
        self.head_off = 0  # bytes of queue[0] already sent
        self.next_write = 0.0  # slicing: earliest time of the next piece
        self.blocked = False  # dst send would block; wait for writability
        self.eof = False  # src sent FIN
        self.shut = False  # FIN forwarded to dst
        self.close_after: bool | None = None  # break_at_frame hit: close (rst?) once flushed


class _Link:
    def __init__(self, ident: int, client: socket.socket, upstream: socket.socket) -> None:
        self.ident = ident
        self.client = client
        self.upstream = upstream
        self.connecting = True
        self.closed = False
        self.up = _Pipe("up", client, upstream)
        self.down = _Pipe("down", upstream, client)

    def pipes(self) -> tuple[_Pipe, _Pipe]:
        return self.up, self.down


_Upstream = Union[str, tuple[str, int]]


def _parse_upstream(upstream: _Upstream) -> tuple[str, int]:
    if isinstance(upstream, tuple):
        return upstream[0], int(upstream[1])
    text = upstream.split(",")[0].strip()
    if "://" not in text:
        text = "nats://" + text
    parts = urlsplit(text)
    return parts.hostname or "127.0.0.1", parts.port or 4222


_DIRECTIONS: tuple[Direction, Direction] = ("up", "down")


def _active_rules(faults: _DirFaults) -> list[FrameRule]:
    return [r for r in faults.rules if not r.exhausted]


def _dirs(direction: DirectionArg) -> tuple[Direction, ...]:
    if direction == "both":
        return ("up", "down")
    if direction in ("up", "down"):
        return (direction,)
    raise ValueError(f"direction must be 'up', 'down' or 'both', not {direction!r}")


# --------------------------------------------------------------------------- the proxy


class FaultProxy:
    """TCP proxy on a free loopback port in front of ``upstream`` (``"nats://h:p"`` or ``(h, p)``).

    All controls are thread-safe, take effect immediately on current and future connections, and
    return once applied (``cut()`` returns after the sockets are closed).
    """

    def __init__(
        self,
        upstream: _Upstream,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        seed: int | None = 0,
        capture: bool = True,
    ) -> None:
        self._upstream = _parse_upstream(upstream)
        self._rng = random.Random(seed)
        self._capture = capture
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._faults: dict[Direction, _DirFaults] = {"up": _DirFaults(), "down": _DirFaults()}
        self._refuse = False
        self._captured: dict[Direction, bytearray] = {"up": bytearray(), "down": bytearray()}
        self._dropped: dict[Direction, list[bytes]] = {"up": [], "down": []}
        self._bytes: dict[Direction, int] = {"up": 0, "down": 0}
        self._connections = 0
        self._refused = 0
        self._upstream_failures = 0
        self._errors: list[BaseException] = []
        self._links: dict[int, _Link] = {}
        self._commands: collections.deque[tuple[Callable[[], None], threading.Event]] = collections.deque()
        self._stopping = False
        self._closed = False

        self._listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((host, port))
        self._listener.listen(128)
        self._listener.setblocking(False)
        self._host = host
        self._port = int(self._listener.getsockname()[1])
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._listener, selectors.EVENT_READ, "listener")
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._registered: dict[socket.socket, int] = {}
        self._thread = threading.Thread(target=self._run, name=f"FaultProxy:{self._port}", daemon=True)
        self._thread.start()

    # ----------------------------------------------------------------- info

    @property
    def host(self) -> str:
        return self._host

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        return f"nats://{self._host}:{self._port}"

    @property
    def upstream(self) -> tuple[str, int]:
        return self._upstream

    @property
    def connections(self) -> int:
        """Client connections accepted and proxied so far (refused ones not included)."""
        with self._lock:
            return self._connections

    @property
    def active_connections(self) -> int:
        with self._lock:
            return sum(1 for link in self._links.values() if not link.closed)

    @property
    def refused(self) -> int:
        with self._lock:
            return self._refused

    @property
    def upstream_failures(self) -> int:
        """Client connections closed because the upstream could not be reached."""
        with self._lock:
            return self._upstream_failures

    @property
    def bytes_up(self) -> int:
        """Bytes written to the server (after drops/rewrites)."""
        with self._lock:
            return self._bytes["up"]

    @property
    def bytes_down(self) -> int:
        """Bytes written to the client (after drops/rewrites)."""
        with self._lock:
            return self._bytes["down"]

    @property
    def errors(self) -> list[BaseException]:
        with self._lock:
            return list(self._errors)

    def captured(self, direction: Direction) -> bytes:
        """Every byte received from that side so far (all connections, forwarded or not)."""
        with self._lock:
            return bytes(self._captured[direction])

    def captured_frames(self, direction: Direction) -> list[bytes]:
        return split_frames(self.captured(direction))

    def dropped(self, direction: Direction) -> list[bytes]:
        """Frames removed by drop rules (or rewritten to b"") in that direction."""
        with self._lock:
            return list(self._dropped[direction])

    def reset_capture(self) -> None:
        with self._lock:
            for d in _DIRECTIONS:
                self._captured[d].clear()
                self._dropped[d].clear()

    def wait_for_connections(self, n: int, timeout: float = 5.0) -> bool:
        """Wait until at least ``n`` client connections were proxied in total."""
        return self._wait_until(lambda: self._connections >= n, timeout)

    def wait_for_captured(self, direction: Direction, needle: bytes, timeout: float = 5.0) -> bool:
        """Wait until ``needle`` appears in ``captured(direction)``."""
        return self._wait_until(lambda: needle in self._captured[direction], timeout)

    def _wait_until(self, cond: Callable[[], bool], timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(cond, timeout)

    # ----------------------------------------------------------------- controls

    def _call(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the proxy thread and wait until it ran."""
        if threading.current_thread() is self._thread or not self._thread.is_alive():
            fn()
            return
        done = threading.Event()
        with self._lock:
            if self._closed:
                fn()
                return
            self._commands.append((fn, done))
        self._wake()
        if not done.wait(10.0):
            raise RuntimeError("FaultProxy thread did not answer")

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    def _set(self, fn: Callable[[], None]) -> None:
        # fault settings are only changed on the proxy thread: no half-applied state
        self._call(fn)

    def cut(self) -> None:
        """Close every current connection on both sides with FIN."""
        self._call(lambda: self._close_all(rst=False))

    def reset(self) -> None:
        """Close every current connection on both sides with RST (SO_LINGER 0)."""
        self._call(lambda: self._close_all(rst=True))

    def stall(self, direction: DirectionArg = "both", on: bool = True) -> None:
        """Black hole: stop reading and forwarding in ``direction``; sockets stay open.

        Bytes already sent by the source stay in kernel buffers and flow again on ``stall(on=False)``.
        """

        def apply() -> None:
            for d in _dirs(direction):
                self._faults[d].stall = on

        self._set(apply)

    def delay(self, seconds: float, direction: DirectionArg = "both", *, jitter: float = 0.0) -> None:
        """Forward each chunk ``seconds`` (+ uniform(0, jitter)) after it arrived, preserving order."""
        if seconds < 0 or jitter < 0:
            raise ValueError("delay and jitter must be >= 0")

        def apply() -> None:
            for d in _dirs(direction):
                self._faults[d].delay = seconds
                self._faults[d].jitter = jitter

        self._set(apply)

    def slice(
        self,
        min_size: int = 1,
        max_size: int = 7,
        delay: float = 0.001,
        direction: DirectionArg = "both",
    ) -> None:
        """Forward in pieces of ``min_size``..``max_size`` bytes, ``delay`` seconds apart."""
        if not 1 <= min_size <= max_size:
            raise ValueError("need 1 <= min_size <= max_size")

        def apply() -> None:
            for d in _dirs(direction):
                self._faults[d].slice = (min_size, max_size, delay)

        self._set(apply)

    def unslice(self, direction: DirectionArg = "both") -> None:
        def apply() -> None:
            for d in _dirs(direction):
                self._faults[d].slice = None

        self._set(apply)

    def refuse(self, on: bool = True) -> None:
        """Accept new connections and close them at once (existing ones are untouched)."""

        def apply() -> None:
            self._refuse = on

        self._set(apply)

    def set_upstream(self, upstream: _Upstream) -> None:
        """Send future connections to another server."""
        target = _parse_upstream(upstream)

        def apply() -> None:
            self._upstream = target

        self._set(apply)

    def drop_frames(
        self,
        direction: DirectionArg,
        predicate: Callable[[bytes], bool],
        count: int | None = None,
    ) -> FrameRule:
        """Drop whole frames for which ``predicate(frame)`` is true; at most ``count`` (None: all).

        ``frame`` is the complete frame, e.g. ``b"PONG\\r\\n"`` or
        ``b"HMSG _INBOX.x 1 16 16\\r\\nNATS/1.0 408\\r\\n\\r\\n\\r\\n"``. See :func:`is_verb`.
        """
        dirs = _dirs(direction)
        if len(dirs) != 1:
            raise ValueError("drop_frames needs direction 'up' or 'down'")
        rule = FrameRule(self, dirs[0], predicate=predicate, count=count)
        self._set(lambda: self._faults[dirs[0]].rules.append(rule))
        return rule

    def rewrite_frames(self, direction: DirectionArg, fn: Callable[[bytes], bytes | None]) -> FrameRule:
        """Pass every whole frame through ``fn``.

        ``fn`` returns the bytes to forward instead (any bytes: several frames, or ``b""`` to drop
        the frame), or ``None`` to forward the frame unchanged.
        """
        dirs = _dirs(direction)
        if len(dirs) != 1:
            raise ValueError("rewrite_frames needs direction 'up' or 'down'")
        rule = FrameRule(self, dirs[0], rewrite=fn)
        self._set(lambda: self._faults[dirs[0]].rules.append(rule))
        return rule

    def break_at_frame(
        self,
        direction: DirectionArg,
        predicate: Callable[[bytes], bool],
        *,
        keep: int | None = None,
        rst: bool = True,
    ) -> FrameRule:
        """At the first frame matching ``predicate``, forward only its first ``keep`` bytes (default:
        half of it), nothing after it, then close the connection on both sides (RST, or FIN if
        ``rst=False``). E.g. "reset mid-MSG payload". One-shot: later connections are untouched.
        """
        dirs = _dirs(direction)
        if len(dirs) != 1:
            raise ValueError("break_at_frame needs direction 'up' or 'down'")
        rule = FrameRule(self, dirs[0], predicate=predicate, count=1, kill=(keep, rst))
        self._set(lambda: self._faults[dirs[0]].rules.append(rule))
        return rule

    def _remove_rule(self, rule: FrameRule) -> None:
        def apply() -> None:
            rules = self._faults[rule.direction].rules
            if rule in rules:
                rules.remove(rule)

        self._set(apply)

    def clear(self) -> None:
        """Remove every fault (stall, delay, slice, refuse, frame rules). Connections stay."""

        def apply() -> None:
            self._faults = {"up": _DirFaults(), "down": _DirFaults()}
            self._refuse = False

        self._set(apply)

    def close(self) -> None:
        """Stop the proxy: close all connections (FIN) and the listener, join the thread.

        Raises :class:`ProxyCallbackError` if a frame predicate/rewrite function raised.
        """
        with self._lock:
            already = self._stopping
            self._stopping = True
        if not already:
            self._wake()
            self._thread.join(10.0)
            with self._lock:
                self._closed = True
            for link in list(self._links.values()):
                self._close_link(link, rst=False)
            for s in (self._listener, self._wake_r, self._wake_w):
                try:
                    s.close()
                except OSError:
                    pass
            try:
                self._sel.close()
            except (OSError, ValueError, KeyError):
                pass
        errors = self.errors
        if errors and not already:
            raise ProxyCallbackError(f"{len(errors)} frame callback(s) raised; first: {errors[0]!r}") from errors[0]

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<FaultProxy {self.url} -> {self._upstream[0]}:{self._upstream[1]}>"

    # ----------------------------------------------------------------- event loop (proxy thread)

    def _run(self) -> None:
        try:
            while not self._stopping:
                timeout = self._next_timeout()
                for key, mask in self._sel.select(timeout):
                    data = key.data
                    if data == "listener":
                        self._accept()
                    elif data == "wake":
                        try:
                            while self._wake_r.recv(4096):
                                pass
                        except (BlockingIOError, InterruptedError):
                            pass
                    else:
                        assert isinstance(data, _Link)
                        self._on_event(data, key.fileobj, mask)  # type: ignore[arg-type]
                self._run_commands()
                now = time.monotonic()
                for link in list(self._links.values()):
                    if not link.closed and not link.connecting:
                        for pipe in link.pipes():
                            self._pump(link, pipe, now)
                self._update_interest()
        except Exception as exc:  # noqa: BLE001 - keep the failure visible
            with self._lock:
                self._errors.append(exc)
        finally:
            self._run_commands()

    def _run_commands(self) -> None:
        while True:
            with self._lock:
                if not self._commands:
                    return
                fn, done = self._commands.popleft()
            try:
                fn()
            finally:
                done.set()

    def _next_timeout(self) -> float:
        now = time.monotonic()
        best = 0.25
        for link in self._links.values():
            if link.closed or link.connecting:
                continue
            for pipe in link.pipes():
                f = self._faults[pipe.direction]
                if f.stall or pipe.blocked or not pipe.queue:
                    continue
                due = pipe.queue[0][0]
                if f.slice is not None:
                    due = max(due, pipe.next_write)
                best = min(best, max(0.0, due - now))
        return best

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            if self._refuse:
                with self._lock:
                    self._refused += 1
                try:
                    client.close()
                except OSError:
                    pass
                continue
            client.setblocking(False)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            host, port = self._upstream
            upstream = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
            upstream.setblocking(False)
            upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            rc = upstream.connect_ex((host, port))
            with self._cond:
                self._connections += 1
                ident = self._connections
                link = _Link(ident, client, upstream)
                self._links[ident] = link
                self._cond.notify_all()
            if rc not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EAGAIN):
                self._upstream_failed(link)

    def _upstream_failed(self, link: _Link) -> None:
        with self._lock:
            self._upstream_failures += 1
        self._close_link(link, rst=False)

    def _on_event(self, link: _Link, sock: socket.socket, mask: int) -> None:
        if link.closed:
            return
        if link.connecting:
            if sock is link.upstream and mask & selectors.EVENT_WRITE:
                err = link.upstream.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    self._upstream_failed(link)
                else:
                    link.connecting = False
            return
        if mask & selectors.EVENT_WRITE:
            for pipe in link.pipes():
                if pipe.dst is sock:
                    pipe.blocked = False
        if mask & selectors.EVENT_READ:
            pipe = link.up if sock is link.client else link.down
            self._read(link, pipe)

    def _read(self, link: _Link, pipe: _Pipe) -> None:
        faults = self._faults[pipe.direction]
        if faults.stall or pipe.eof or pipe.close_after is not None:
            return
        try:
            data = pipe.src.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            # the peer reset (or similar): reset the other side too
            self._close_link(link, rst=True)
            return
        if not data:
            pipe.eof = True
            tail = pipe.splitter.flush()
            if len(tail) > pipe.fwd:
                self._enqueue(pipe, tail[pipe.fwd :])
            pipe.fwd = 0
            return
        with self._cond:
            if self._capture:
                self._captured[pipe.direction] += data
            self._cond.notify_all()
        self._enqueue(pipe, b"".join(self._filter(pipe, data, faults)))

    def _filter(self, pipe: _Pipe, data: bytes, faults: _DirFaults) -> list[bytes]:
        frames = pipe.splitter.feed(data)
        rules = _active_rules(faults)
        out: list[bytes] = []
        for frame in frames:
            if pipe.fwd:
                out.append(frame[pipe.fwd :])  # its start went out raw before a rule was added
                pipe.fwd = 0
                continue
            if not rules:
                out.append(frame)
                continue
            result = self._apply_rules(pipe, frame, rules)
            if result:
                out.append(result)
            if pipe.close_after is not None:
                return out  # break_at_frame: nothing after the broken frame
        if not rules:
            pending = pipe.splitter.pending_len
            if pending > pipe.fwd:
                out.append(pipe.splitter.pending_from(pipe.fwd))
                pipe.fwd = pending
        return out

    def _apply_rules(self, pipe: _Pipe, frame: bytes, rules: list[FrameRule]) -> bytes:
        direction = pipe.direction
        current = frame
        for rule in rules:
            if rule.exhausted:
                continue
            try:
                if rule.predicate is not None:
                    if rule.predicate(current):
                        with self._cond:
                            rule.matched += 1
                            rule.frames.append(current)
                            if rule.kill is None:
                                self._dropped[direction].append(current)
                            self._cond.notify_all()
                        if rule.kill is not None:
                            keep, rst = rule.kill
                            pipe.close_after = rst
                            return current[: len(current) // 2 if keep is None else keep]
                        return b""
                elif rule.rewrite is not None:
                    new = rule.rewrite(current)
                    if new is not None and new != current:
                        with self._cond:
                            rule.matched += 1
                            rule.frames.append(current)
                            if not new:
                                self._dropped[direction].append(current)
                            self._cond.notify_all()
                        current = new
                        if not current:
                            return b""
            except Exception as exc:  # noqa: BLE001 - reported by close()
                with self._lock:
                    self._errors.append(exc)
        return current

    def _enqueue(self, pipe: _Pipe, chunk: bytes) -> None:
        if not chunk:
            return
        faults = self._faults[pipe.direction]
        due = time.monotonic() + faults.delay
        if faults.jitter:
            due += self._rng.uniform(0.0, faults.jitter)
        if pipe.queue and pipe.queue[-1][0] > due:
            due = pipe.queue[-1][0]  # keep order when the delay shrinks
        pipe.queue.append((due, chunk))
        pipe.queued += len(chunk)

    def _pump(self, link: _Link, pipe: _Pipe, now: float) -> None:
        faults = self._faults[pipe.direction]
        if pipe.close_after is None and pipe.splitter.pending_len > pipe.fwd and not _active_rules(faults):
            # rules were removed while a partial frame was held: release it
            self._enqueue(pipe, pipe.splitter.pending_from(pipe.fwd))
            pipe.fwd = pipe.splitter.pending_len
        sliced = faults.slice
        total = 0
        while pipe.queue and not faults.stall and not pipe.blocked and not link.closed:
            due, data = pipe.queue[0]
            if due > now:
                break
            if sliced is not None and now < pipe.next_write:
                break
            off = pipe.head_off
            if sliced is not None:
                end = min(len(data), off + self._rng.randint(sliced[0], sliced[1]))
            else:
                end = len(data)
            try:
                sent = pipe.dst.send(memoryview(data)[off:end])
            except (BlockingIOError, InterruptedError):
                pipe.blocked = True
                break
            except OSError:
                self._close_link(link, rst=True)
                break
            total += sent
            pipe.queued -= sent
            pipe.head_off = off + sent
            if pipe.head_off >= len(data):
                pipe.queue.popleft()
                pipe.head_off = 0
            if off + sent < end:
                pipe.blocked = True
                break
            if sliced is not None:
                pipe.next_write = now + sliced[2]
                if sliced[2] > 0:
                    break
        if total:
            with self._lock:
                self._bytes[pipe.direction] += total
        if link.closed:
            return
        if pipe.close_after is not None and not pipe.queue and not link.closed:
            self._close_link(link, rst=pipe.close_after)
            return
        if pipe.eof and not pipe.queue and not pipe.shut and not link.closed:
            pipe.shut = True
            try:
                pipe.dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            if link.up.shut and link.down.shut:
                self._close_link(link, rst=False)

    def _update_interest(self) -> None:
        wanted: dict[socket.socket, tuple[int, _Link]] = {}
        for link in self._links.values():
            if link.closed:
                continue
            if link.connecting:
                wanted[link.upstream] = (selectors.EVENT_WRITE, link)
                continue
            masks = {link.client: 0, link.upstream: 0}
            for pipe in link.pipes():
                f = self._faults[pipe.direction]
                if not f.stall and not pipe.eof and pipe.queued < _MAX_QUEUED:
                    masks[pipe.src] |= selectors.EVENT_READ
                if pipe.blocked and pipe.queue and not f.stall:
                    masks[pipe.dst] |= selectors.EVENT_WRITE
            for s, m in masks.items():
                if m:
                    wanted[s] = (m, link)
        for s in list(self._registered):
            if s not in wanted:
                try:
                    self._sel.unregister(s)
                except (KeyError, ValueError, OSError):
                    pass
                del self._registered[s]
        for s, (m, link) in wanted.items():
            old = self._registered.get(s)
            if old == m:
                continue
            try:
                if old is None:
                    self._sel.register(s, m, link)
                else:
                    self._sel.modify(s, m, link)
                self._registered[s] = m
            except (KeyError, ValueError, OSError):
                self._close_link(link, rst=True)

    def _close_all(self, *, rst: bool) -> None:
        for link in list(self._links.values()):
            self._close_link(link, rst=rst)

    def _close_link(self, link: _Link, *, rst: bool) -> None:
        if link.closed:
            return
        link.closed = True
        for s in (link.client, link.upstream):
            if s in self._registered:
                try:
                    self._sel.unregister(s)
                except (KeyError, ValueError, OSError):
                    pass
                del self._registered[s]
            try:
                if rst:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                else:
                    try:
                        s.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                    # unread input would turn close() into an RST: drain it first
                    try:
                        while s.recv(65536):
                            pass
                    except OSError:
                        pass
            except OSError:
                pass
            try:
                s.close()
            except OSError:
                pass
        with self._cond:
            self._links.pop(link.ident, None)
            self._cond.notify_all()
