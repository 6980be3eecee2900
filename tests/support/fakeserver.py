"""FakeServer: a scripted fake NATS server on loopback for byte-exact injections.

    with FakeServer() as fake:
        client = connect(fake.url)          # the code under test, in another thread if it blocks
        conn = fake.accept()                # INFO was already sent on accept
        conn.handshake()                    # CONNECT + PING in, PONG out (if not auto_pong)
        conn.send(b"HMSG x 1 28 28\\r\\nNATS/1.0 423 Wrong Pin\\r\\n\\r\\n\\r\\n")
        frame = conn.expect(b"PUB ")

Every frame a client sends is appended to ``FakeConn.received`` (in order) by a reader thread and
is also queued for ``read_frame`` / ``expect``. With ``auto_pong=True`` (default) a client ``PING``
is answered with ``PONG`` by the reader thread (and still recorded and queued).
Frames are split with the proxy's own splitter (independent of the code under test).
"""

from __future__ import annotations

import json
import queue
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

from tests.support.proxy import FrameSplitter, frame_verb

__all__ = ["FakeConn", "FakeServer"]

_EOF = b""  # queued when the client closed its side


class FakeConn:
    """The server side of one client connection."""

    def __init__(self, server: FakeServer, sock: socket.socket, index: int, auto_pong: bool) -> None:
        self.server = server
        self.sock = sock
        self.index = index
        self.auto_pong = auto_pong
        self.received: list[bytes] = []
        self.connect_options: dict[str, Any] | None = None
        self._frames: queue.Queue[bytes] = queue.Queue()
        self._send_lock = threading.Lock()
        self._closed = threading.Event()
        self._eof = threading.Event()
        self._reader = threading.Thread(target=self._read_loop, name=f"FakeConn-{index}", daemon=True)

    def _start(self) -> None:
        self._reader.start()

    # ----------------------------------------------------------------- reading

    def _read_loop(self) -> None:
        splitter = FrameSplitter()
        try:
            while True:
                try:
                    data = self.sock.recv(65536)
                except OSError:
                    break
                if not data:
                    break
                for frame in splitter.feed(data):
                    self.received.append(frame)
                    verb = frame_verb(frame)
                    if verb == b"CONNECT" and self.connect_options is None:
                        self.connect_options = _parse_connect(frame)
                    if verb == b"PING" and self.auto_pong:
                        try:
                            self.send(b"PONG\r\n")
                        except OSError:
                            pass
                    self._frames.put(frame)
        finally:
            rest = splitter.flush()
            if rest:
                self.received.append(rest)
                self._frames.put(rest)
            self._eof.set()
            self._frames.put(_EOF)

    def read_frame(self, timeout: float = 5.0) -> bytes:
        """The next whole frame from the client (control line + payload for PUB/HPUB).

        Raises ``TimeoutError`` when none arrives in time, ``ConnectionError`` when the client
        closed the connection and every frame was read.
        """
        try:
            frame = self._frames.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no frame from client #{self.index} within {timeout}s") from None
        if not frame:  # _EOF
            self._frames.put(_EOF)  # stay at EOF for later reads
            raise ConnectionError(f"client #{self.index} closed the connection")
        return frame

    def expect(self, prefix: bytes, timeout: float = 5.0) -> bytes:
        """Read frames until one starts with ``prefix`` (skipped frames stay in ``received``)."""
        deadline = time.monotonic() + timeout
        skipped: list[bytes] = []
        while True:
            remaining = deadline - time.monotonic()
            try:
                frame = self.read_frame(max(0.0, remaining))
            except TimeoutError:
                raise TimeoutError(
                    f"no frame starting with {prefix!r} within {timeout}s; skipped {skipped!r}"
                ) from None
            if frame.startswith(prefix):
                return frame
            skipped.append(frame)

    def expect_connect(self, timeout: float = 5.0) -> dict[str, Any]:
        """Wait for CONNECT and return its JSON options."""
        return _parse_connect(self.expect(b"CONNECT ", timeout))

    def handshake(self, timeout: float = 5.0) -> dict[str, Any]:
        """Expect CONNECT then PING; answer PONG (unless auto_pong already did). Returns CONNECT."""
        options = self.expect_connect(timeout)
        self.expect(b"PING", timeout)
        if not self.auto_pong:
            self.send(b"PONG\r\n")
        return options

    def wait_closed(self, timeout: float = 5.0) -> bool:
        """Wait until the client closed its side (EOF or reset)."""
        return self._eof.wait(timeout)

    @property
    def client_closed(self) -> bool:
        return self._eof.is_set()

    # ----------------------------------------------------------------- writing

    def send(self, data: bytes) -> None:
        """Send raw bytes to the client, exactly as given."""
        with self._send_lock:
            self.sock.sendall(data)

    def send_info(self, **fields: Any) -> dict[str, Any]:
        """Send ``INFO {...}`` built from the server defaults updated with ``fields``."""
        info = self.server.info_for(self.index)
        info.update(fields)
        self.send(b"INFO " + json.dumps(info, separators=(",", ":")).encode() + b"\r\n")
        return info

    def send_msg(
        self,
        subject: str,
        sid: int | str,
        payload: bytes = b"",
        reply: str | None = None,
        headers: bytes | None = None,
    ) -> None:
        """Send a well-formed MSG (or HMSG when ``headers`` is the raw header block)."""
        r = f" {reply}" if reply else ""
        if headers is None:
            self.send(f"MSG {subject} {sid}{r} {len(payload)}\r\n".encode() + payload + b"\r\n")
        else:
            total = len(headers) + len(payload)
            self.send(f"HMSG {subject} {sid}{r} {len(headers)} {total}\r\n".encode() + headers + payload + b"\r\n")

    # ----------------------------------------------------------------- closing

    def close(self) -> None:
        """Close the connection with FIN."""
        if self._closed.is_set():
            return
        self._closed.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self._reader.join(5.0)

    def reset(self) -> None:
        """Close the connection with RST (SO_LINGER 0)."""
        if self._closed.is_set():
            return
        self._closed.set()
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            # SHUT_RD wakes the reader thread without sending anything to the peer; once it has
            # left recv() the close below drops the last reference and the kernel sends the RST
            self.sock.shutdown(socket.SHUT_RD)
        except OSError:
            pass
        self._reader.join(5.0)
        self.sock.close()

    def __repr__(self) -> str:
        return f"<FakeConn #{self.index} frames={len(self.received)}>"


def _parse_connect(frame: bytes) -> dict[str, Any]:
    line = frame.split(b"\n", 1)[0].rstrip(b"\r")
    if not line.upper().startswith(b"CONNECT "):
        raise ValueError(f"not a CONNECT frame: {frame[:80]!r}")
    parsed = json.loads(line[len(b"CONNECT ") :])
    if not isinstance(parsed, dict):
        raise ValueError(f"CONNECT options are not a JSON object: {line[:80]!r}")
    return parsed


class FakeServer:
    """A fake NATS server: accepts connections, sends INFO, records and scripts the rest.

    ``info`` updates the default INFO fields. ``greeting`` replaces the INFO line with raw bytes
    (``b""`` sends nothing), e.g. a malformed INFO. ``on_connect(conn)`` runs in its own thread for
    each new connection (after the greeting). ``accept()`` returns connections in order.
    """

    def __init__(
        self,
        info: dict[str, Any] | None = None,
        auto_pong: bool = True,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        greeting: bytes | None = None,
        on_connect: Callable[[FakeConn], None] | None = None,
    ) -> None:
        self.info = dict(info or {})
        self.auto_pong = auto_pong
        self.greeting = greeting
        self.on_connect = on_connect
        self.host = host
        self._requested_port = port
        self._port = port
        self._sock: socket.socket | None = None
        self._accepted: queue.Queue[FakeConn] = queue.Queue()
        self.conns: list[FakeConn] = []
        self.errors: list[BaseException] = []
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._acceptor: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self._port}"

    def info_for(self, index: int) -> dict[str, Any]:
        info: dict[str, Any] = {
            "server_id": "NFAKESERVER0000000000000000000000000000000000000000000",
            "server_name": "fake",
            "version": "2.15.1",
            "proto": 1,
            "go": "go1.0",
            "host": self.host,
            "port": self._port,
            "headers": True,
            "max_payload": 1048576,
            "jetstream": False,
            "client_id": index,
            "client_ip": "127.0.0.1",
        }
        info.update(self.info)
        return info

    def start(self) -> FakeServer:
        if self._sock is not None:
            return self
        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self._requested_port))
        sock.listen(64)
        sock.settimeout(0.1)
        self._port = int(sock.getsockname()[1])
        self._sock = sock
        self._stopping.clear()
        self._acceptor = threading.Thread(target=self._accept_loop, name=f"FakeServer:{self._port}", daemon=True)
        self._acceptor.start()
        return self

    def _accept_loop(self) -> None:
        assert self._sock is not None
        index = 0
        while not self._stopping.is_set():
            try:
                client, _ = self._sock.accept()
            except socket.timeout:
                continue
            except OSError:
                break
            client.settimeout(None)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            index += 1
            conn = FakeConn(self, client, index, self.auto_pong)
            with self._lock:
                self.conns.append(conn)
            try:
                if self.greeting is None:
                    conn.send_info()
                elif self.greeting:
                    conn.send(self.greeting)
            except OSError as exc:
                self.errors.append(exc)
            conn._start()
            self._accepted.put(conn)
            if self.on_connect is not None:
                t = threading.Thread(target=self._run_on_connect, args=(conn,), daemon=True)
                with self._lock:
                    self._threads.append(t)
                t.start()

    def _run_on_connect(self, conn: FakeConn) -> None:
        assert self.on_connect is not None
        try:
            self.on_connect(conn)
        except Exception as exc:  # noqa: BLE001 - surfaced by close()
            self.errors.append(exc)

    def accept(self, timeout: float = 5.0) -> FakeConn:
        """The next client connection (INFO already sent). Raises ``TimeoutError``."""
        try:
            return self._accepted.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no client connected to {self.url} within {timeout}s") from None

    @property
    def connection_count(self) -> int:
        with self._lock:
            return len(self.conns)

    def close(self) -> None:
        """Stop accepting, close every connection, join the threads.

        Raises ``RuntimeError`` if an ``on_connect`` script raised (so test bugs are not silent).
        """
        self._stopping.set()
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)  # wakes accept() at once on Linux
            except OSError:
                pass
            try:
                self._sock.close()
            except OSError:
                pass
        if self._acceptor is not None:
            self._acceptor.join(5.0)
        with self._lock:
            conns = list(self.conns)
            threads = list(self._threads)
        for conn in conns:
            conn.close()
        for t in threads:
            t.join(5.0)
        self._sock = None
        errors = [e for e in self.errors if not isinstance(e, ConnectionError)]
        if errors:
            self.errors.clear()
            raise RuntimeError(f"on_connect script raised: {errors[0]!r}") from errors[0]

    def __enter__(self) -> FakeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<FakeServer {self.url} conns={len(self.conns)}>"
