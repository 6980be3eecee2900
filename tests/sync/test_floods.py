"""A hostile server that floods PINGs and never reads: the client's memory stays bounded, calls
return within their timeouts, and the connection is dropped as stale once what the server does
not read passes the backlog limit."""

from __future__ import annotations

import socket
import threading
import time

import pytest

import jscore.connection as jscore_connection
import jssync
import jssync.client as jssync_client
from jscore.connection import MAX_BACKLOG


def _rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


class PingFlood:
    """Handshakes, then sends PINGs as fast as it can and reads nothing more."""

    def __init__(self, seconds: float) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(4)
        self.url = f"nats://127.0.0.1:{self.listener.getsockname()[1]}"
        self.seconds = seconds
        self.sent = 0
        self.connections = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        block = b"PING\r\n" * 100_000
        end = time.monotonic() + self.seconds
        while not self.stop.is_set() and time.monotonic() < end:
            self.listener.settimeout(0.2)
            try:
                conn, _ = self.listener.accept()
            except OSError:
                continue
            self.connections += 1
            conn.sendall(b'INFO {"server_id":"flood","max_payload":1048576,"headers":true}\r\n')
            conn.settimeout(2.0)
            got = b""
            while b"PING\r\n" not in got:
                got += conn.recv(4096)
            conn.sendall(b"PONG\r\n")
            conn.settimeout(0.5)
            try:
                while not self.stop.is_set() and time.monotonic() < end:
                    conn.sendall(block)
                    self.sent += len(block)
            except OSError:
                pass  # the client dropped us: accept its reconnect
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.listener.close()


@pytest.mark.parametrize("limit", [None, 256 * 1024])
def test_a_ping_flood_from_a_server_that_does_not_read_is_bounded(limit: int | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the real backlog limit the flood is held back by reading in bounded turns (memory
    flat, flushes within their timeout); with a small limit the client also drops the server as
    stale and reconnects, again and again."""
    if limit is not None:
        monkeypatch.setattr(jscore_connection, "MAX_BACKLOG", limit)
        monkeypatch.setattr(jssync_client, "MAX_BACKLOG", limit)
    server = PingFlood(seconds=6.0)
    nc = jssync.connect(server.url, reconnect_wait=0.2, max_reconnect_attempts=-1, ping_interval=60.0)
    try:
        base = _rss()
        peak = base
        t_end = time.monotonic() + 5.0
        flushes = 0
        while time.monotonic() < t_end:
            t0 = time.monotonic()
            try:
                nc.flush(timeout=0.5)
            except (TimeoutError, jssync.errors.NatsError):
                pass
            assert time.monotonic() - t0 < 0.5 + 0.3, "flush overran its timeout"
            flushes += 1
            peak = max(peak, _rss())
        assert server.sent > 10 * 1024 * 1024, server.sent
        # The bound: the backlog limit, the read buffers of a few turns, and slack for the
        # interpreter; the client that read without bound grew by gigabytes here.
        assert peak - base < MAX_BACKLOG + 96 * 1024 * 1024, (peak - base) / 2**20
        if limit is not None:
            assert server.connections >= 2, "the client never dropped the stale connection"
    finally:
        server.close()
        nc.close(timeout=2.0)
