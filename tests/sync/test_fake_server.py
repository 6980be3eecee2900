"""The client against the scripted fake server: byte-exact injections.

TESTPLAN scenarios 6 (lame duck), 7 (connect_urls), 8 (-ERR handling), 10 (max_payload of the
new server), plus malformed frames, server PINGs, status messages and the CONNECT contents.
"""

from __future__ import annotations

import builtins
import json
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import jssync
from jscore.errors import (
    AuthorizationError,
    MaxPayloadError,
    NatsError,
    NoRespondersError,
    PermissionsViolationError,
    RemoteProtocolError,
    ServerError as ServerErrorExc,
    StaleConnectionError,
    TimeoutError,
)
from jscore.protocol import CONNECT_FIELDS
from jssync import Client
from jssync.events import (
    Closed,
    Disconnected,
    LameDuck,
    PublishesDropped,
    Reconnected,
    ServerError,
    ServerPoolWarning,
    ServersDiscovered,
)
from jssync.server import NatsServer
from tests.integration import EventLog, assert_no_more, clients, collect, wait_until
from tests.support.fakeserver import FakeConn, FakeServer

__all__ = ["clients"]

pytestmark = pytest.mark.timeout(60)

FakeFactory = Callable[..., FakeServer]


def _connected(fake: FakeServer, clients: Callable[..., Client], **options: Any) -> tuple[Client, FakeConn]:
    nc = clients(fake.url, **options)
    conn = fake.accept()
    conn.handshake()
    return nc, conn


def _sid_of(conn: FakeConn, subject: str, timeout: float = 2.0) -> int:
    frame = conn.expect(f"SUB {subject} ".encode(), timeout)
    return int(frame.split()[-1])


# --------------------------------------------------------------------------- CONNECT, PING


def test_connect_options_are_an_allow_list(fake_server: FakeServer, clients: Callable[..., Client]) -> None:
    nc = clients(fake_server.url, name="conn-test", user="alice", password="pw-123")
    conn = fake_server.accept()
    opts = conn.handshake()
    assert set(opts) <= CONNECT_FIELDS
    assert opts["verbose"] is False and opts["pedantic"] is False
    assert opts["headers"] is True and opts["no_responders"] is True
    assert opts["protocol"] == 1 and opts["echo"] is True
    assert opts["tls_required"] is False
    assert (opts["name"], opts["user"], opts["pass"]) == ("conn-test", "alice", "pw-123")
    assert "auth_token" not in opts
    assert nc.is_connected
    nc2 = clients(fake_server.url, token="tok-1")
    conn2 = fake_server.accept()
    opts2 = conn2.handshake()
    assert opts2["auth_token"] == "tok-1" and "user" not in opts2 and "pass" not in opts2
    assert nc2.is_connected


def test_server_ping_is_answered_with_pong(fake_server: FakeServer, clients: Callable[..., Client]) -> None:
    nc, conn = _connected(fake_server, clients, ping_interval=60)
    for _ in range(3):
        conn.send(b"PING\r\n")
        assert conn.expect(b"PONG", timeout=2) == b"PONG\r\n"
    assert nc.is_connected


def test_client_pings_and_stale_detection_without_pongs(
    fake_server_factory: FakeFactory, clients: Callable[..., Client]
) -> None:
    fake = fake_server_factory(auto_pong=False)
    events = EventLog()
    box: list[Client] = []
    t = threading.Thread(target=lambda: box.append(clients(fake.url, on_event=events)))
    t.start()
    conn = fake.accept()
    conn.handshake()  # answers the CONNECT's PING once
    t.join(3)
    assert box and box[0].is_connected
    t0 = time.monotonic()
    conn.expect(b"PING", timeout=1.0)  # keep-alive PINGs every 0.5 s, never answered
    conn.expect(b"PING", timeout=1.0)
    (disc,) = events.wait_for(Disconnected, timeout=2.0)
    assert isinstance(disc.error, StaleConnectionError)
    assert events.time_of(disc) - t0 <= 2.0
    assert conn.wait_closed(2.0)


# --------------------------------------------------------------------------- malformed frames

MALFORMED = [
    pytest.param(b"MSG a 1 2\r\nabc\r\n", id="size-smaller-than-payload"),
    pytest.param(b"MSG a 1 3\r\nabc\rX", id="payload-not-crlf"),
    pytest.param(b"MSG a x 3\r\nabc\r\n", id="non-numeric-sid"),
    pytest.param(b"HMSG a 1 10 5\r\nNATS/1.0\r\n\r\n", id="hdr-bigger-than-total"),
    pytest.param(b"HMSG a 1 12 12\r\nNATS/2.0\r\n\r\n\r\n", id="bad-header-version"),
    pytest.param(b"ZOO\r\n", id="unknown-op"),
    pytest.param(b"INFO [1,2]\r\n", id="info-not-an-object"),
    pytest.param(b"X" * 5000, id="control-line-too-long"),
]


@pytest.mark.parametrize("garbage", MALFORMED)
def test_malformed_frame_reconnects_with_a_fresh_parser(
    garbage: bytes, fake_server: FakeServer, clients: Callable[..., Client]
) -> None:
    events = EventLog()
    nc, c1 = _connected(fake_server, clients, on_event=events)
    sub = nc.subscribe("a")
    assert _sid_of(c1, "a") == 1
    c1.send(garbage)
    (err,) = events.wait_for(ServerError, timeout=2)
    assert isinstance(err.error, RemoteProtocolError) and err.fatal
    assert c1.wait_closed(2), "the client kept the broken connection"
    c2 = fake_server.accept(timeout=3)
    c2.handshake()
    assert _sid_of(c2, "a") == 1  # subscription replayed
    (rec,) = events.wait_for(Reconnected, timeout=2)
    assert events.index(ServerError) < events.index(Disconnected) < events.index(Reconnected)
    c2.send_msg("a", 1, b"hello")
    c2.send_msg("a", 1, b"world", headers=b"NATS/1.0\r\nK: v\r\n\r\n")
    got = collect(sub, 2)
    assert [m.data for m in got] == [b"hello", b"world"]  # nothing partial from the bad frame
    assert got[1].headers is not None and got[1].headers["K"] == "v"
    assert_no_more(sub, 0.1)
    nc.flush(timeout=2)
    assert nc.is_connected and not nc.is_closed


def test_split_and_glued_frames(fake_server_factory: FakeFactory, clients: Callable[..., Client]) -> None:
    """INFO one byte at a time, then several frames glued in one write and one frame in pieces."""
    fake = fake_server_factory(greeting=b"")
    box: list[Client] = []
    t = threading.Thread(target=lambda: box.append(clients(fake.url)))
    t.start()
    conn = fake.accept()
    info = b"INFO " + json.dumps(fake.info_for(1)).encode() + b"\r\n"
    for i in range(len(info)):
        conn.send(info[i : i + 1])
    conn.handshake()
    t.join(3)
    assert box, "connect did not complete"
    nc = box[0]
    sub = nc.subscribe("g")
    sid = _sid_of(conn, "g")
    hdr = b"NATS/1.0\r\nA: b\r\nA: c\r\n\r\n"
    frames = (
        f"MSG g {sid} 1\r\na\r\n".encode()
        + b"PING\r\n"
        + f"HMSG g {sid} r.1 {len(hdr)} {len(hdr) + 3}\r\n".encode() + hdr + b"xyz\r\n"
        + f"MSG g {sid} 0\r\n\r\n".encode()
    )
    conn.send(frames)
    conn.expect(b"PONG")
    big = f"MSG g {sid} 10\r\n0123456789\r\n".encode()
    for piece in (big[:3], big[3:11], big[11:15], big[15:-1], big[-1:]):
        conn.send(piece)
        time.sleep(0.01)
    got = collect(sub, 4)
    assert [m.data for m in got] == [b"a", b"xyz", b"", b"0123456789"]
    assert got[1].reply == "r.1" and got[1].headers is not None
    assert got[1].headers.get_all("A") == ["b", "c"]
    # a message for an unknown sid is ignored, not an error
    conn.send(b"MSG g 999 1\r\nz\r\n")
    conn.send_msg("g", sid, b"after")
    assert collect(sub, 1)[0].data == b"after"
    assert nc.is_connected


def test_status_messages_and_no_responders(fake_server: FakeServer, clients: Callable[..., Client]) -> None:
    nc, conn = _connected(fake_server, clients)
    sub = nc.subscribe("st")
    sid = _sid_of(conn, "st")
    block = b"NATS/1.0 404 No Messages\r\n\r\n"
    conn.send_msg("st", sid, b"", headers=block)
    m = collect(sub, 1)[0]
    assert (m.status, m.description, m.data) == (404, "No Messages", b"")

    result: list[BaseException | None] = []

    def do_request() -> None:
        try:
            nc.request("svc", b"q", timeout=2)
            result.append(None)
        except BaseException as exc:  # noqa: BLE001
            result.append(exc)

    t = threading.Thread(target=do_request)
    t.start()
    sub_frame = conn.expect(b"SUB _INBOX.")
    mux_sid = int(sub_frame.split()[-1])
    pub = conn.expect(b"PUB svc ")
    reply = pub.split()[2].decode()
    conn.send_msg(reply, mux_sid, b"", headers=b"NATS/1.0 503\r\n\r\n")
    t.join(3)
    assert len(result) == 1 and isinstance(result[0], NoRespondersError)

    # a normal reply through the same mux subscription
    box: list[Any] = []

    def do_request2() -> None:
        box.append(nc.request("svc", b"q2", timeout=2))

    t = threading.Thread(target=do_request2)
    t.start()
    pub = conn.expect(b"PUB svc ")
    reply = pub.split()[2].decode()
    conn.send_msg("wrong.reply", mux_sid, b"ignored")  # not a pending token: dropped
    conn.send_msg(reply, mux_sid, b"answer")
    t.join(3)
    assert box and box[0].data == b"answer"


# --------------------------------------------------------------------------- scenario 6


def test_lame_duck_during_a_request_moves_to_another_server(
    fake_server: FakeServer, nats_server: NatsServer, clients: Callable[..., Client]
) -> None:
    events = EventLog()
    nc = clients([fake_server.url, nats_server.url], on_event=events)
    c1 = fake_server.accept()
    c1.handshake()
    assert nc.connected_url == fake_server.url
    responder = clients(nats_server.url)
    responder.subscribe("ld.svc", callback=lambda m: m.respond(b"from-real"))
    responder.flush(timeout=2)

    outcome: list[tuple[object, float]] = []

    def do_request() -> None:
        t0 = time.monotonic()
        try:
            res: object = nc.request("ld.svc", b"x", timeout=1.5)
        except BaseException as exc:  # noqa: BLE001
            res = exc
        outcome.append((res, time.monotonic() - t0))

    t = threading.Thread(target=do_request)
    t.start()
    c1.expect(b"PUB ld.svc ")  # in flight at the fake, which never answers
    c1.send_info(ldm=True)
    c1.send_info(ldm=True)  # repeated: still one notification
    events.wait_for(LameDuck, timeout=2)
    nc.flush(timeout=2)
    c1.close()
    events.wait_for(Reconnected, timeout=3, pred=lambda e: e.url == nats_server.url)
    t.join(3)
    assert not t.is_alive(), "the request hung"
    (res, took) = outcome[0]
    if isinstance(res, BaseException):
        assert isinstance(res, (TimeoutError, NatsError)), res
        assert took <= 1.5 + 0.5
    else:  # pragma: no cover - a completed request is acceptable too
        assert getattr(res, "data", None) == b"from-real"
    assert len(events.of(LameDuck)) == 1
    assert events.of(LameDuck)[0].url == fake_server.url
    assert nc.connected_url == nats_server.url
    assert nc.request("ld.svc", b"y", timeout=2).data == b"from-real"


# --------------------------------------------------------------------------- scenario 7

CONNECT_URLS: list[object] = [
    "127.0.0.1:5001",
    "",
    "127.0.0.1:5001",
    "bad host:1",
    "127.0.0.1:5002",
    "nats://127.0.0.1:99999",
    42,
    "[::1]:5003",
]


def test_async_info_updates_the_server_pool(
    fake_server_factory: FakeFactory, clients: Callable[..., Client]
) -> None:
    a = fake_server_factory()
    b = fake_server_factory()
    events = EventLog()
    nc, c1 = _connected(a, clients, on_event=events)
    assert nc.servers == [a.url]
    urls = [*CONNECT_URLS, f"127.0.0.1:{a.port}", f"127.0.0.1:{b.port}"]
    c1.send_info(connect_urls=urls)
    nc.flush(timeout=2)
    expected = [a.url, "nats://127.0.0.1:5001", "nats://127.0.0.1:5002", "nats://[::1]:5003", b.url]
    assert nc.servers == expected

    def warning_text() -> str:
        return " | ".join(w.message for w in events.of(ServerPoolWarning))

    bad_ones = ("''", "bad host:1", "99999", "42")  # every malformed entry is named ...
    wait_until(lambda: all(x in warning_text() for x in bad_ones), 2.0, what="warnings for the malformed URLs")
    warnings = events.of(ServerPoolWarning)
    text = warning_text()
    for good in ("5001", "5002", "5003", str(b.port)):  # ... and no valid one
        assert good not in text, text
    (disc,) = events.wait_for(ServersDiscovered)
    assert list(disc.urls) == expected[1:]

    for same in ([], urls):  # empty and duplicate lists change nothing
        c1.send_info(connect_urls=same)
    c1.send_info(connect_urls="not-a-list")
    nc.flush(timeout=2)
    assert nc.servers == expected
    assert len(events.of(ServersDiscovered)) == 1
    events.wait_for(ServerPoolWarning, timeout=2, pred=lambda w: "not a list" in w.message)
    later = events.of(ServerPoolWarning)[len(warnings) :]
    assert len(later) >= 2, later  # the repeated malformed entries and the non-list

    # the discovered servers are used: after losing a, the client reconnects to the next in the
    # pool (5001 and 5002 refuse, ::1:5003 refuses), then b
    a.close()
    b1 = b.accept(timeout=5)
    b1.handshake()
    events.wait_for(Reconnected, timeout=3, pred=lambda e: e.url == b.url)


def test_ignore_discovered_servers(fake_server_factory: FakeFactory, clients: Callable[..., Client]) -> None:
    a = fake_server_factory()
    b = fake_server_factory()
    events = EventLog()
    nc, c1 = _connected(a, clients, on_event=events, ignore_discovered_servers=True)
    c1.send_info(connect_urls=["127.0.0.1:5001", f"127.0.0.1:{b.port}", ""])
    nc.flush(timeout=2)
    assert nc.servers == [a.url]
    assert not events.of(ServersDiscovered)
    c1.close()
    c2 = a.accept(timeout=3)  # back to the only configured server
    c2.handshake()
    events.wait_for(Reconnected, timeout=2)
    assert b.connection_count == 0


# --------------------------------------------------------------------------- scenario 8


def test_permissions_violation_is_not_fatal(fake_server: FakeServer, clients: Callable[..., Client]) -> None:
    events = EventLog()
    nc, conn = _connected(fake_server, clients, on_event=events)
    keep = nc.subscribe("ok")
    secret = nc.subscribe("secret")
    qsub = nc.subscribe("shared", queue="q")
    plain_shared = nc.subscribe("shared")
    nc.flush(timeout=2)
    nc.publish("x", b"1")
    conn.expect(b"PUB x ")
    conn.send(b"-ERR 'Permissions Violation for Publish to \"x\"'\r\n")
    (se,) = events.wait_for(ServerError, timeout=2)
    assert se.fatal is False
    assert isinstance(se.error, PermissionsViolationError)
    assert (se.error.operation, se.error.subject) == ("publish", "x")
    conn.send(b"-ERR 'Permissions Violation for Subscription to \"secret\"'\r\n")
    with pytest.raises(PermissionsViolationError):
        secret.next_msg(timeout=2)
    conn.send(b"-ERR 'Permissions Violation for Subscription to \"shared\" using queue \"q\"'\r\n")
    with pytest.raises(PermissionsViolationError) as info:
        qsub.next_msg(timeout=2)
    assert info.value.queue == "q"
    conn.send(b"-ERR 'Some Unknown Error'\r\n")
    errs = events.wait_for(ServerError, n=4, timeout=2)
    assert type(errs[3].error) is ServerErrorExc and not errs[3].fatal
    nc.flush(timeout=2)
    assert nc.is_connected and fake_server.connection_count == 1
    assert not events.of(Disconnected)
    assert keep.is_active and plain_shared.is_active
    conn.send_msg("shared", plain_shared.sid, b"still here")
    assert collect(plain_shared, 1)[0].data == b"still here"


@pytest.mark.parametrize(
    ("text", "exc_type"),
    [("Stale Connection", StaleConnectionError), ("Maximum Payload Violation", MaxPayloadError)],
)
def test_fatal_err_reconnects(
    text: str, exc_type: type, fake_server: FakeServer, clients: Callable[..., Client]
) -> None:
    events = EventLog()
    nc, c1 = _connected(fake_server, clients, on_event=events)
    sub = nc.subscribe("after")
    _sid_of(c1, "after")
    c1.send(f"-ERR '{text}'\r\n".encode())
    (se,) = events.wait_for(ServerError, timeout=2)
    assert se.fatal and isinstance(se.error, exc_type)
    (disc,) = events.wait_for(Disconnected, timeout=2)
    assert isinstance(disc.error, exc_type)
    c2 = fake_server.accept(timeout=3)
    c2.handshake()
    events.wait_for(Reconnected, timeout=2)
    c2.send_msg("after", _sid_of(c2, "after"), b"ok")
    assert collect(sub, 1)[0].data == b"ok"


def test_authorization_violation_twice_on_reconnect_closes_the_client(
    fake_server: FakeServer, clients: Callable[..., Client]
) -> None:
    events = EventLog()
    wait = 0.2
    nc, c1 = _connected(fake_server, clients, on_event=events, reconnect_wait=wait, reconnect_jitter=0.0)
    fake_server.auto_pong = False  # later connections: the test answers (with an -ERR)
    c1.close()
    accepted: list[float] = []
    for _ in range(2):
        conn = fake_server.accept(timeout=3)
        accepted.append(time.monotonic())
        conn.expect_connect()
        conn.send(b"-ERR 'Authorization Violation'\r\n")
    wait_until(lambda: nc.is_closed, 3.0, what="the client to give up")
    (closed,) = events.wait_for(Closed)
    assert isinstance(closed.error, AuthorizationError)
    assert isinstance(nc.last_error, AuthorizationError)
    assert accepted[1] - accepted[0] >= wait * 0.9, "more than one attempt per reconnect_wait"
    time.sleep(2 * wait)
    assert fake_server.connection_count == 3  # no further attempts
    with pytest.raises(NatsError):
        nc.publish("x", b"y")


def test_initial_authorization_violation_raises(fake_server_factory: FakeFactory) -> None:
    fake = fake_server_factory(
        on_connect=lambda c: (c.expect_connect(), c.send(b"-ERR 'Authorization Violation'\r\n")), auto_pong=False
    )
    t0 = time.monotonic()
    with pytest.raises(AuthorizationError):
        jssync.connect(fake.url, connect_timeout=1.0, reconnect_wait=0.1)
    assert time.monotonic() - t0 < 1.5
    assert fake.connection_count == 1


def test_invalid_info_fails_the_connect_typed(fake_server_factory: FakeFactory) -> None:
    fake = fake_server_factory(info={"max_payload": "1024"})
    t0 = time.monotonic()
    with pytest.raises(NatsError) as info:
        jssync.connect(fake.url, connect_timeout=1.0)
    assert time.monotonic() - t0 < 1.5
    assert isinstance(info.value.__cause__, RemoteProtocolError) or isinstance(info.value, RemoteProtocolError)


# --------------------------------------------------------------------------- scenario 10


def test_smaller_max_payload_after_reconnect_is_enforced_locally(
    fake_server_factory: FakeFactory, clients: Callable[..., Client]
) -> None:
    a = fake_server_factory(info={"max_payload": 64 * 1024})
    b = fake_server_factory(info={"max_payload": 1024}, greeting=b"")  # INFO sent by the test
    events = EventLog()
    nc = clients([a.url, b.url], on_event=events)
    a1 = a.accept()
    a1.handshake()
    assert nc.max_payload == 64 * 1024
    nc.publish("big", b"x" * 2048)
    assert a1.expect(b"PUB big ").startswith(b"PUB big 2048\r\n")
    a.close()
    b1 = b.accept(timeout=3)  # the client waits for b's INFO
    events.wait_for(Disconnected, timeout=2)
    nc.publish("big", b"y" * 2048)  # buffered under the old limit ...
    nc.publish("small", b"z" * 512)
    b1.send_info()
    b1.handshake()
    events.wait_for(Reconnected, timeout=2)
    (dropped,) = events.wait_for(PublishesDropped, timeout=2)
    assert dropped.count == 1  # ... and dropped, reported, when the new server's limit is known
    assert b1.expect(b"PUB small ").startswith(b"PUB small 512\r\n")
    assert nc.max_payload == 1024
    with pytest.raises(MaxPayloadError):
        nc.publish("big", b"q" * 2048)
    with pytest.raises(MaxPayloadError):
        nc.publish("big", b"q" * 1000, headers={"K": "v" * 30})
    nc.publish("fits", b"f" * 1024)
    nc.flush(timeout=2)
    assert not any(f.startswith(b"PUB big") for f in b1.received)
    assert any(f.startswith(b"PUB fits 1024\r\n") for f in b1.received)


# --------------------------------------------------------------------------- transport edge cases


def test_fatal_err_and_eof_in_the_same_read_reconnects(
    fake_server: FakeServer, clients: Callable[..., Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server sends a fatal -ERR and closes: when the client reads both in one go, the loss
    must be reported once (it used to be reported twice: the client died with
    LocalProtocolError('connection_made in state waiting'))."""
    import jssync.client as client_module

    events = EventLog()
    nc, c1 = _connected(fake_server, clients, on_event=events)
    sub = nc.subscribe("z")
    _sid_of(c1, "z")
    time.sleep(0.3)  # the last dial is old enough: the reconnect is immediate
    # 1-byte reads: the read loop only stops at EAGAIN or EOF, so it sees the -ERR and the EOF
    monkeypatch.setattr(client_module, "_READ_SIZE", 1)
    with nc._lock:  # hold the I/O thread until both the -ERR and the FIN are in its socket
        nc._poke()
        time.sleep(0.05)
        c1.send(b"-ERR 'Stale Connection'\r\n")
        c1.sock.shutdown(socket.SHUT_WR)
        time.sleep(0.05)
    c2 = fake_server.accept(timeout=3)
    c2.handshake()
    (rec,) = events.wait_for(Reconnected, timeout=3)
    monkeypatch.setattr(client_module, "_READ_SIZE", 256 * 1024)
    c2.send_msg("z", _sid_of(c2, "z"), b"ok")
    assert collect(sub, 1)[0].data == b"ok"
    assert not nc.is_closed, nc.last_error
    assert isinstance(events.of(Disconnected)[0].error, StaleConnectionError)
    assert events.count(Disconnected) == 1 and events.count(Reconnected) == 1


def test_io_thread_failure_closes_the_client_loudly(
    fake_server: FakeServer, clients: Callable[..., Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    events = EventLog()
    nc, conn = _connected(fake_server, clients, on_event=events)
    sub = nc.subscribe("f")
    _sid_of(conn, "f")
    failures: list[BaseException] = []

    def request() -> None:
        try:
            nc.request("svc", b"x", timeout=5)
        except BaseException as exc:  # noqa: BLE001
            failures.append(exc)

    t = threading.Thread(target=request)
    t.start()
    conn.expect(b"PUB svc ")

    def boom(data: bytes, now: float) -> None:
        raise RuntimeError("injected failure in the core")

    monkeypatch.setattr(nc._conn, "receive_data", boom)
    conn.send_msg("f", 1, b"trigger")
    (closed,) = events.wait_for(Closed, timeout=2)
    assert isinstance(closed.error, NatsError)
    assert isinstance(closed.error.__cause__, RuntimeError)
    t.join(2)
    assert not t.is_alive(), "a request hung on a dead client"
    assert len(failures) == 1 and isinstance(failures[0], NatsError)
    with pytest.raises(NatsError):
        sub.next_msg(timeout=1)
    assert nc.is_closed
    with pytest.raises(NatsError):
        nc.publish("x", b"y")


@pytest.mark.parametrize("stuck_at", ["no-info", "no-pong"])
def test_connect_times_out_when_the_server_stalls_the_handshake(
    stuck_at: str, fake_server_factory: FakeFactory
) -> None:
    fake = fake_server_factory(greeting=b"" if stuck_at == "no-info" else None, auto_pong=False)
    t0 = time.monotonic()
    with pytest.raises(NatsError) as info:
        jssync.connect(fake.url, connect_timeout=0.5)
    took = time.monotonic() - t0
    assert 0.4 <= took < 1.0, took
    assert isinstance(info.value, builtins.TimeoutError) or isinstance(info.value.__cause__, builtins.TimeoutError)


def test_tls_handshake_that_never_completes_fails_in_time(fake_server_factory: FakeFactory) -> None:
    """The server offers TLS, then never answers the ClientHello: no hang."""
    fake = fake_server_factory(info={"tls_required": True})
    t0 = time.monotonic()
    with pytest.raises(NatsError):
        jssync.connect(fake.url, tls=True, connect_timeout=0.5)
    assert time.monotonic() - t0 < 1.2
    conn = fake.conns[0]
    assert not any(f.startswith(b"CONNECT") for f in conn.received)  # nothing sent in clear
