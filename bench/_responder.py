"""Raw-socket NATS peers for bench/bench_core.py, run as separate processes.

No NATS client library: a plain blocking socket speaking the text protocol, so the peer is the
same for every client under test and costs as little as a Python process can.

``respond URL SUBJECT``
    Subscribe to SUBJECT and answer every ``MSG``/``HMSG`` that has a reply subject with
    ``PUB <reply> <n>`` echoing its payload (headers are dropped). All answers produced by one
    ``recv`` leave in one ``sendall``.

``flood URL``
    Wait for commands on stdin. ``flood SUBJECT COUNT SIZE`` publishes COUNT messages of SIZE
    bytes to SUBJECT (one pre-built buffer, one ``sendall``), then a ``PING``; when the ``PONG``
    is back (the server has taken every message) it prints ``done``. ``exit`` quits.

Both print ``ready`` on stdout once the server has confirmed the connection (PING/PONG) and,
for ``respond``, the subscription.
"""

from __future__ import annotations

import json
import socket
import sys
from urllib.parse import urlsplit

_CONNECT = (
    b"CONNECT "
    + json.dumps(
        {
            "verbose": False,
            "pedantic": False,
            "lang": "python-raw",
            "version": "0",
            "protocol": 1,
            "headers": True,
            "no_responders": True,
        }
    ).encode()
    + b"\r\n"
)


def _dial(url: str) -> tuple[socket.socket, bytearray]:
    parts = urlsplit(url if "://" in url else "nats://" + url)
    sock = socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 4222), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = bytearray()
    while b"\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("server closed the connection before INFO")
        buf += chunk
    line, _, rest = bytes(buf).partition(b"\r\n")
    if not line.startswith(b"INFO "):
        raise ConnectionError(f"expected INFO, got {line[:80]!r}")
    sock.sendall(_CONNECT + b"PING\r\n")
    return sock, bytearray(rest)


def _await_pong(sock: socket.socket, buf: bytearray) -> None:
    """Read until a PONG; answer PINGs, fail on -ERR. Leaves what follows the PONG in buf."""
    while True:
        while b"\r\n" in buf:
            i = buf.index(b"\r\n")
            line = bytes(buf[:i])
            del buf[: i + 2]
            if line == b"PONG":
                return
            if line == b"PING":
                sock.sendall(b"PONG\r\n")
            elif line.startswith(b"-ERR"):
                raise ConnectionError(line.decode(errors="replace"))
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("server closed the connection")
        buf += chunk


def respond(url: str, subject: str) -> None:
    sock, buf = _dial(url)
    _await_pong(sock, buf)
    sock.sendall(b"SUB " + subject.encode() + b" 1\r\nPING\r\n")
    _await_pong(sock, buf)
    sock.settimeout(None)
    print("ready", flush=True)
    data = bytes(buf)
    recv = sock.recv
    sendall = sock.sendall
    while True:
        out: list[bytes] = []
        pos = 0
        n = len(data)
        while pos < n:
            eol = data.find(b"\r\n", pos)
            if eol < 0:
                break
            line = data[pos:eol]
            op = line[:4]
            if op == b"MSG " or op == b"HMSG":
                args = line.split()
                if op == b"MSG ":
                    size = int(args[-1])
                    hdr = 0
                else:
                    size = int(args[-1])
                    hdr = int(args[-2])
                end = eol + 2 + size
                if end + 2 > n:
                    break  # payload not complete yet
                # MSG subject sid [reply] size / HMSG subject sid [reply] hdr total
                has_reply = len(args) == (5 if op == b"MSG " else 6)
                if has_reply:
                    payload = data[eol + 2 + hdr : end]
                    out.append(b"PUB %s %d\r\n%s\r\n" % (args[3], len(payload), payload))
                pos = end + 2
            else:
                if line == b"PING":
                    out.append(b"PONG\r\n")
                elif line.startswith(b"-ERR"):
                    print(f"responder: {line.decode(errors='replace')}", file=sys.stderr, flush=True)
                pos = eol + 2
        if out:
            sendall(b"".join(out))
        data = data[pos:]
        chunk = recv(262144)
        if not chunk:
            return
        data = data + chunk if data else chunk


def flood(url: str) -> None:
    sock, buf = _dial(url)
    _await_pong(sock, buf)
    sock.settimeout(None)
    print("ready", flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "exit":
            return
        if words[0] != "flood" or len(words) != 4:
            print(f"error bad command {line.strip()!r}", flush=True)
            continue
        subject, count, size = words[1].encode(), int(words[2]), int(words[3])
        frame = b"PUB %s %d\r\n%s\r\n" % (subject, size, b"x" * size)
        sock.sendall(frame * count + b"PING\r\n")
        _await_pong(sock, buf)
        print("done", flush=True)


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "respond":
        respond(argv[1], argv[2])
        return 0
    if len(argv) == 2 and argv[0] == "flood":
        flood(argv[1])
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except (KeyboardInterrupt, BrokenPipeError, ConnectionError):
        sys.exit(0)
