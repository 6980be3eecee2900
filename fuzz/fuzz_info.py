"""Fuzz target: the INFO/CONNECT handshake of the connection machine (:class:`jscore.connection.Connection`).

A hostile or broken server controls every byte of its ``INFO``. The input is the JSON body of
that INFO (and, spliced into typical INFO shapes, the value of one field: ``max_payload``,
``connect_urls``, ``ldm``, ``tls_required`` ...); what follows a NUL byte, if any, sets the
client's own handshake fields (name, user, password, token: split on ``\\x01``) and flags.

The machine is driven through three connections: dial, ``INFO`` (once; twice in a row; cut in
two reads), (TLS upgrade), ``CONNECT`` + ``PING``, ``PONG``, an asynchronous ``INFO`` with the
same body, a server ``PING``, publishes at ``max_payload``, then the connection is lost and the
reconnect timer fires.

Invariants, whatever the server sends:

* no call raises: ``receive_data``, ``tls_established``, ``connection_lost``, ``handle_timeout``
  turn a bad INFO into events (a fatal ``ServerError`` with a :class:`RemoteProtocolError`, a
  ``ServerPoolWarning`` ...) and the machine carries on; a publish raises only
  :class:`MaxPayloadError` (over ``max_payload``) or a :class:`NatsError`;
* only the event types of :mod:`jscore.events`; every ``ServerError`` carries a
  :class:`NatsError`; a handful of events per INFO, however large;
* bounded state: ``max_payload`` an int in 1..``MAX_MAX_PAYLOAD`` and the parser's cap the
  same; the server pool never above ``MAX_DISCOVERED`` entries; every server URL
  ``scheme://host:port`` with a port in 1..65535 and no whitespace, ``@`` or ``/`` in the host
  (it is logged and dialled); ``next_deadline()`` is pure;
* ``CONNECT`` is one line of JSON built from the allow-list (:data:`CONNECT_FIELDS`) and from
  the client's options only: nothing the server sent reaches it, credentials are exactly the
  configured ones; it is followed by ``PING``;
* a ``Connected``/``Reconnected`` event only after ``PONG``, carrying the INFO the machine holds;
  at most one ``LameDuck`` per connection.

Run it long with atheris (see fuzz/README.md)::

    pip install atheris
    python -m fuzz --minutes 10 info
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from random import Random
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import msgspec

from fuzz._runner import run
from jscore import events as ev
from jscore.connection import MAX_DISCOVERED, ConnectOptions, Connection, State
from jscore.errors import MaxPayloadError, NatsError, RemoteProtocolError
from jscore.protocol import CONNECT_FIELDS, MAX_MAX_PAYLOAD, MsgReceived

__all__ = ["TEMPLATES", "client_options", "check_handshake", "one_input"]

SERVERS = ("nats://127.0.0.1:4222", "nats://127.0.0.2:4223")
TEMPLATES: tuple[bytes, ...] = (
    b'{"server_id":"S","version":"2.15.0","proto":1,"headers":true,"max_payload":%s}',
    b'{"server_id":"S","connect_urls":%s}',
    b'{"server_id":"S","connect_urls":["%s"]}',
    b'{"server_id":"S","connect_urls":["10.0.0.1:4222","%s"],"ldm":true}',
    b'{"server_id":"S","ldm":%s}',
    b'{"server_id":"S","tls_required":%s,"tls_available":true}',
    b'{"server_id":"S","auth_required":true,"nonce":%s,"user":"mallory","auth_token":"x"}',
    b'{"server_id":"S","max_payload":1048576,"headers":%s,"proto":%s}',
)
"""INFO shapes with a hole (``%s``) for the fuzzer's bytes."""

EVENT_TYPES = (
    ev.ConnectRequested, ev.TlsUpgradeRequested, ev.CloseRequested, ev.Connected, ev.Reconnected,
    ev.Disconnected, ev.ConnectAttemptFailed, ev.LameDuck, ev.ServerError, ev.ServersDiscovered,
    ev.ServerPoolWarning, ev.Closed, ev.PublishesDropped, ev.FlushCompleted, ev.SubscriptionEnded,
    ev.ReplyReceived, MsgReceived,
)  # fmt: skip
MAX_EVENTS_PER_STEP = 8
_URL = re.compile(r"(nats|tls)://(\[[0-9A-Za-z:.%]+\]|[^\s/@\[\]]+):([0-9]{1,5})", re.ASCII)


def client_options(data: bytes) -> ConnectOptions:
    """The client's options: fixed servers, and from ``data`` (the part after the first NUL)
    its name, user, password and token, and the tls / tls_first / echo flags."""
    flags = data[0] if data else 0
    fields = data[1:].decode("utf-8", "replace").split("\x01") if data else []
    fields += [""] * (4 - len(fields))
    name, user, password, token = (f or None for f in fields[:4])
    return ConnectOptions(
        servers=SERVERS,
        name=name,
        user=user,
        password=password,
        token=token,
        tls=bool(flags & 1),
        tls_first=bool(flags & 2),
        echo=not flags & 4,
        reconnect_wait=0.5,
        reconnect_jitter=0.1,
    )


class _Driver:
    """One machine, and the checks run after every call into it."""

    def __init__(self, options: ConnectOptions) -> None:
        self.options = options
        self.conn = Connection(options, rng=Random(7))
        self.now = 0.0
        self.closed = False
        self.lame_ducks = 0
        self.pongs_seen = False

    def step(self, what: str, *args: Any) -> list[Any]:
        """Call a method of the machine (it must not raise), check it, return the new events."""
        getattr(self.conn, what)(*args)
        return self.check()

    def check(self) -> list[Any]:
        conn = self.conn
        deadline = conn.next_deadline()
        assert conn.next_deadline() == deadline, "next_deadline is not pure"
        events = []
        while (e := conn.next_event()) is not None:
            events.append(e)
        assert len(events) <= MAX_EVENTS_PER_STEP, events
        for e in events:
            assert isinstance(e, EVENT_TYPES), e
            assert not self.closed, f"{e!r} after Closed"
            if isinstance(e, ev.ServerError):
                assert isinstance(e.error, NatsError), e
            elif isinstance(e, (ev.Connected, ev.Reconnected)):
                assert self.pongs_seen, "connected without a PONG"
                assert e.server_info is conn.server_info
            elif isinstance(e, ev.LameDuck):
                self.lame_ducks += 1
                assert self.lame_ducks == 1, "two LameDuck events on one connection"
            elif isinstance(e, ev.Closed):
                self.closed = True
            elif isinstance(e, ev.ConnectRequested):
                assert e.server.url in conn.servers, (e.server, conn.servers)
            elif isinstance(e, (ev.CloseRequested, ev.Disconnected, ev.ConnectAttemptFailed)):
                assert e.error is None or isinstance(e.error, (NatsError, OSError, TimeoutError)), e
        mp = conn.max_payload
        assert type(mp) is int and 0 < mp <= MAX_MAX_PAYLOAD, mp
        assert conn._parser.max_payload == mp
        assert isinstance(conn.server_info, dict)
        servers = conn.servers
        assert len(servers) <= max(MAX_DISCOVERED, len(SERVERS)), len(servers)
        for url in servers:
            m = _URL.fullmatch(url)
            assert m is not None, url
            assert 0 < int(m.group(3)) < 65536, url
        return events

    def check_connect(self, out: bytes) -> None:
        """``out`` (what the machine wrote after INFO) is exactly CONNECT {json} and PING."""
        assert out.startswith(b"CONNECT {") and out.endswith(b"}\r\nPING\r\n"), out[:80]
        line = out[len(b"CONNECT ") : -len(b"\r\nPING\r\n")]
        assert b"\r" not in line and b"\n" not in line, line[:80]
        fields = msgspec.json.decode(line)
        assert isinstance(fields, dict) and set(fields) <= CONNECT_FIELDS, fields
        opts = self.options
        assert fields["protocol"] == 1 and fields["headers"] is True and fields["echo"] is opts.echo
        assert fields.get("name") == opts.name
        assert fields.get("user") == opts.user
        assert fields.get("pass") == (opts.password if opts.user else None)
        assert fields.get("auth_token") == (None if opts.user else opts.token)

    def publish_at_max_payload(self) -> None:
        conn = self.conn
        mp = conn.max_payload
        sizes = (mp, mp + 1) if mp <= 65536 else (16,)
        for size in sizes:
            try:
                conn.publish("fuzz.info", bytes(size))
            except MaxPayloadError:
                assert size > mp, (size, mp)
            else:
                assert size <= mp, (size, mp)
        self.check()


def _state(conn: Connection) -> State:
    """The machine's state, read afresh (every call into the machine may change it)."""
    return conn.state


def check_handshake(body: bytes, options: ConnectOptions) -> _Driver:
    """Drive a machine through three connections whose server sends ``body`` as its INFO.
    CR and LF in ``body`` become spaces: the INFO stays one frame (how frames are cut is the
    wire target's business), so what the machine writes back is its answer to this INFO."""
    body = body.replace(b"\r", b" ").replace(b"\n", b" ")
    d = _Driver(options)
    conn = d.conn
    d.step("start", d.now)
    frame = b"INFO " + body + b"\r\n"
    for attempt in range(3):
        if _state(conn) is not State.DIALING:
            break
        d.lame_ducks = 0
        d.pongs_seen = False
        d.step("connection_made", d.now)
        if attempt == 0:
            d.step("receive_data", frame, d.now)
        elif attempt == 1:  # two INFOs before the client has answered the first
            d.step("receive_data", frame + frame, d.now)
        else:  # the INFO in two reads, cut where the body says
            cut = 1 + (body[-1] if body else 0) % len(frame)
            d.step("receive_data", frame[:cut], d.now)
            d.step("receive_data", frame[cut:], d.now)
        if _state(conn) is State.TLS_HANDSHAKE:
            assert options.tls or conn.server_info.get("tls_required") is True, "a TLS upgrade nobody asked for"
            d.step("tls_established", d.now)
        if _state(conn) is State.AWAIT_PONG:
            d.check_connect(conn.data_to_send())
            d.pongs_seen = True
            events = d.step("receive_data", b"PONG\r\n", d.now)
            assert _state(conn) is State.CONNECTED
            assert any(isinstance(e, (ev.Connected, ev.Reconnected)) for e in events), events
        if _state(conn) is State.CONNECTED:
            conn.data_to_send()
            d.step("receive_data", b"INFO " + body + b"\r\nPING\r\n", d.now)
            out = conn.data_to_send()
            if _state(conn) is State.CONNECTED:
                assert out.endswith(b"PONG\r\n"), out[-16:]
                d.publish_at_max_payload()
        else:
            # Refused (a bad INFO, TLS the server does not offer): the transport is being closed.
            assert _state(conn) in (State.CLOSING, State.AWAIT_INFO, State.CLOSED), conn.state
        if _state(conn) is State.CLOSED:
            break
        d.now += 0.25
        d.step("connection_lost", d.now, ConnectionResetError("fuzz: connection lost"))
        for _ in range(4):  # the reconnect timer (and the connect timeout) fire
            deadline = conn.next_deadline()
            if _state(conn) is not State.WAITING or deadline is None:
                break
            d.now = max(d.now, deadline)
            d.step("handle_timeout", d.now)
    d.step("close", d.now)
    if _state(conn) is State.CLOSING:
        d.step("connection_lost", d.now, None)
    assert _state(conn) is State.CLOSED, conn.state
    assert d.closed
    return d


def one_input(data: bytes) -> None:
    """The fuzz entry point: raises only when an invariant is broken."""
    body, sep, client = data.partition(b"\x00")
    options = client_options(client) if sep else client_options(b"")
    check_handshake(body, options)
    if body and len(body) <= 4096:
        template = TEMPLATES[body[0] % len(TEMPLATES)]
        hole = body[1:]
        check_handshake(template % ((hole,) * template.count(b"%s")), options)


def main(argv: list[str]) -> None:
    run(argv, one_input)


if __name__ == "__main__":
    main(sys.argv)
