"""The connection machine, driven with virtual time (``now`` is a float we advance by hand).

``Harness`` and ``client_frames`` are reused by test_malformed.py and the stateful test.
"""

from __future__ import annotations

import json
import pickle
import random
from typing import Any, TypeVar

import pytest

from jscore import events as ev
from jscore.connection import ConnectOptions, Connection, State, parse_server_url
from jscore.errors import (
    AuthorizationError,
    BadHeaderError,
    BadSubjectError,
    ConnectionClosedError,
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
from jscore.headers import Headers, parse_header_block
from jscore.protocol import CONNECT_FIELDS, MsgReceived

NUID_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
E = TypeVar("E")


# --------------------------------------------------------------------------- helpers


def client_frames(data: bytes) -> list[tuple[Any, ...]]:
    """Split what the client wrote into frames: ("PUB", subject, reply, payload),
    ("HPUB", subject, reply, Headers, payload), ("SUB", subject, queue, sid),
    ("UNSUB", sid, max), ("CONNECT", dict), ("PING",), ("PONG",). Fails on anything else."""
    frames: list[tuple[Any, ...]] = []
    pos = 0
    while pos < len(data):
        end = data.index(b"\r\n", pos)
        line = data[pos:end]
        pos = end + 2
        op, _, rest = line.partition(b" ")
        args = rest.split(b" ") if rest else []
        if op == b"PUB":
            assert len(args) in (2, 3), line
            n = int(args[-1])
            payload = data[pos : pos + n]
            assert data[pos + n : pos + n + 2] == b"\r\n", "PUB payload not followed by CRLF"
            pos += n + 2
            frames.append(("PUB", args[0].decode(), args[1].decode() if len(args) == 3 else None, payload))
        elif op == b"HPUB":
            assert len(args) in (3, 4), line
            hdr, total = int(args[-2]), int(args[-1])
            block = data[pos : pos + hdr]
            payload = data[pos + hdr : pos + total]
            assert data[pos + total : pos + total + 2] == b"\r\n", "HPUB payload not followed by CRLF"
            pos += total + 2
            headers, status, _ = parse_header_block(block)
            assert status is None
            frames.append(("HPUB", args[0].decode(), args[1].decode() if len(args) == 4 else None, headers, payload))
        elif op == b"SUB":
            assert len(args) in (2, 3), line
            frames.append(("SUB", args[0].decode(), args[1].decode() if len(args) == 3 else None, int(args[-1])))
        elif op == b"UNSUB":
            assert len(args) in (1, 2), line
            frames.append(("UNSUB", int(args[0]), int(args[1]) if len(args) == 2 else None))
        elif op == b"CONNECT":
            fields = json.loads(rest)
            assert isinstance(fields, dict)
            frames.append(("CONNECT", fields))
        elif line in (b"PING", b"PONG"):
            frames.append((line.decode(),))
        else:
            raise AssertionError(f"unexpected client frame {line[:80]!r}")
    return frames


def of(events: list[Any], cls: type[E]) -> list[E]:
    return [e for e in events if isinstance(e, cls)]


def hmsg(subject: str, sid: int, block: bytes, payload: bytes = b"") -> bytes:
    return b"HMSG %s %d %d %d\r\n%s%s\r\n" % (subject.encode(), sid, len(block), len(block) + len(payload), block, payload)


class Harness:
    """A transport stand-in: drives a Connection with virtual time."""

    def __init__(self, servers: tuple[str, ...] = ("nats://a:4222",), seed: int = 1, **options: Any) -> None:
        self.seed = seed
        self.options = ConnectOptions(servers=tuple(servers), **options)
        self.conn = Connection(self.options, rng=random.Random(seed))
        self.now = 0.0
        self.started = False

    def pump(self) -> list[ev.Event]:
        out: list[ev.Event] = []
        while (e := self.conn.next_event()) is not None:
            out.append(e)
        return out

    def start(self) -> list[ev.Event]:
        self.conn.start(self.now)
        self.started = True
        return self.pump()

    def dial(self) -> list[ev.Event]:
        """Start if needed, then report the TCP connection as made (state AWAIT_INFO)."""
        events = self.start() if not self.started else self.pump()
        if self.conn.state is State.WAITING:  # let the reconnect wait pass
            deadline = self.conn.next_deadline()
            assert deadline is not None
            events += self.run_until(deadline)
        assert self.conn.state is State.DIALING, self.conn.state
        self.conn.connection_made(self.now)
        assert self.conn.data_to_send() == b"", "nothing may be written before INFO"
        return events

    def send(self, data: bytes) -> list[ev.Event]:
        self.conn.receive_data(data, self.now)
        return self.pump()

    def info(self, info: dict[str, Any]) -> None:
        self.conn.receive_data(b"INFO " + json.dumps(info).encode() + b"\r\n", self.now)

    def handshake(self, info: dict[str, Any] | None = None) -> list[ev.Event]:
        events = self.dial()
        self.info(info if info is not None else {})
        frames = client_frames(self.conn.data_to_send())
        assert [f[0] for f in frames] == ["CONNECT", "PING"], frames
        self.last_connect: dict[str, Any] = frames[0][1]
        self.conn.receive_data(b"PONG\r\n", self.now)
        return events + self.pump()

    def connect(self, info: dict[str, Any] | None = None) -> list[ev.Event]:
        events = self.handshake(info)
        assert of(events, ev.Connected) or of(events, ev.Reconnected), events
        assert self.conn.is_connected
        return events

    def written(self) -> list[tuple[Any, ...]]:
        return client_frames(self.conn.data_to_send())

    def lose(self, exc: Exception | None = None) -> list[ev.Event]:
        self.conn.connection_lost(self.now, exc)
        return self.pump()

    def at(self, t: float) -> list[ev.Event]:
        """Advance the clock to ``t`` and fire timers once."""
        self.now = t
        self.conn.handle_timeout(t)
        return self.pump()

    def run_until(self, t: float) -> list[ev.Event]:
        """Fire every timer due up to ``t``, each at its own deadline."""
        events: list[ev.Event] = []
        while (d := self.conn.next_deadline()) is not None and d <= t:
            events += self.at(max(d, self.now))
        self.now = t
        return events

    def msg(self, subject: str, sid: int, payload: bytes = b"x", reply: str | None = None) -> list[ev.Event]:
        r = f" {reply}" if reply else ""
        return self.send(b"MSG %s %d%s %d\r\n%s\r\n" % (subject.encode(), sid, r.encode(), len(payload), payload))


def reference_rng(seed: int) -> random.Random:
    """A Random in the state the Connection's is in after drawing its 22-character inbox id."""
    r = random.Random(seed)
    for _ in range(22):
        r.choice(NUID_ALPHABET)
    return r


# --------------------------------------------------------------------------- handshake


def test_handshake_info_connect_ping_pong_connected() -> None:
    h = Harness(name="svc")
    events = h.start()
    assert events == [
        ev.ConnectRequested(
            server=h.conn._pool[0].address, tls_hostname="a", tls_first=False, timeout=h.options.connect_timeout
        )
    ]
    assert h.conn.state is State.DIALING and h.conn.data_to_send() == b""
    h.conn.connection_made(h.now)
    assert h.conn.data_to_send() == b"" and h.pump() == []
    h.info({"server_id": "S1", "max_payload": 4096, "headers": True})
    frames = h.written()
    assert [f[0] for f in frames] == ["CONNECT", "PING"]
    fields = frames[0][1]
    assert set(fields) <= CONNECT_FIELDS
    assert fields["headers"] is True and fields["no_responders"] is True
    assert fields["verbose"] is False and fields["pedantic"] is False
    assert fields["name"] == "svc" and fields["protocol"] == 1
    assert not {"user", "pass", "auth_token"} & set(fields)
    assert not h.conn.is_connected and h.pump() == []
    events = h.send(b"PONG\r\n")
    assert events == [ev.Connected(url="nats://a:4222", server_info={"server_id": "S1", "max_payload": 4096, "headers": True})]
    assert h.conn.is_connected and h.conn.connected_url == "nats://a:4222"
    assert h.conn.max_payload == 4096
    assert h.conn.next_deadline() == h.now + h.options.ping_interval


def test_connect_user_and_password_from_options() -> None:
    h = Harness(user="bob", password="s3cret", token="ignored")
    h.connect()
    assert h.last_connect["user"] == "bob" and h.last_connect["pass"] == "s3cret"
    assert "auth_token" not in h.last_connect
    assert "s3cret" not in repr(h.options)
    assert b"s3cret" not in pickle.dumps(h.options) and pickle.loads(pickle.dumps(h.options)).password is None


def test_connect_user_and_password_from_url_win_over_options() -> None:
    h = Harness(servers=("nats://alice:p%40ss@a:4222",), user="bob", password="other")
    h.connect()
    assert h.last_connect["user"] == "alice" and h.last_connect["pass"] == "p@ss"
    assert "p@ss" not in repr(h.conn._pool[0].address) and "p%40ss" not in h.conn.servers[0]
    back = pickle.loads(pickle.dumps(h.options))
    assert back.servers == ("nats://a:4222",) and b"p%40ss" not in pickle.dumps(h.options)


def test_connect_token() -> None:
    h = Harness(token="s3cr3t-t0k")
    h.connect()
    assert h.last_connect["auth_token"] == "s3cr3t-t0k"
    assert "user" not in h.last_connect and "pass" not in h.last_connect
    assert "s3cr3t-t0k" not in repr(h.options)
    assert b"s3cr3t-t0k" not in pickle.dumps(h.options) and pickle.loads(pickle.dumps(h.options)).token is None


def test_connect_echo_false_and_version_fields() -> None:
    h = Harness(echo=False)
    h.connect()
    assert h.last_connect["echo"] is False
    assert isinstance(h.last_connect["version"], str) and isinstance(h.last_connect["lang"], str)


@pytest.mark.parametrize(
    ("servers", "opts"),
    [(("tls://bob:pw@a:4222",), {}), (("nats://bob:pw@a:4222",), {"tls": True}), (("tls://a:4222",), {"token": "pw"})],
)
@pytest.mark.parametrize("info", [{}, {"tls_required": False}, {"tls_available": False, "tls_required": False}])
def test_tls_required_by_client_but_not_offered(servers: tuple[str, ...], opts: dict[str, Any], info: dict[str, Any]) -> None:
    # TESTPLAN scenario 11 at the core level: no CONNECT (no credentials) in clear.
    h = Harness(servers=servers, **opts)
    h.dial()
    h.info(info)
    events = h.pump()
    closes = of(events, ev.CloseRequested)
    assert len(closes) == 1 and isinstance(closes[0].error, SecureConnectionRequiredError)
    wire = h.conn.data_to_send()
    assert b"CONNECT" not in wire and b"pw" not in wire and wire == b""
    assert not of(events, ev.TlsUpgradeRequested)
    events = h.lose()
    assert of(events, ev.ConnectAttemptFailed)
    (closed,) = of(events, ev.Closed)
    assert isinstance(closed.error, SecureConnectionRequiredError)
    assert h.conn.data_to_send() == b""


def test_tls_upgrade_then_connect() -> None:
    h = Harness(servers=("tls://u:pw@a.example:4222",))
    h.dial()
    h.info({"tls_required": True})
    assert h.pump() == [ev.TlsUpgradeRequested(hostname="a.example")]
    assert h.conn.data_to_send() == b"", "nothing before the TLS handshake"
    assert h.conn.state is State.TLS_HANDSHAKE
    h.conn.tls_established(h.now)
    frames = h.written()
    assert [f[0] for f in frames] == ["CONNECT", "PING"]
    assert frames[0][1]["tls_required"] is True and frames[0][1]["pass"] == "pw"
    assert of(h.send(b"PONG\r\n"), ev.Connected)


def test_tls_available_is_enough() -> None:
    h = Harness(tls=True)
    h.dial()
    h.info({"tls_available": True})
    assert h.pump() == [ev.TlsUpgradeRequested(hostname="a")]


def test_server_requiring_tls_upgrades_a_plain_client() -> None:
    h = Harness()
    h.dial()
    h.info({"tls_required": True})
    assert h.pump() == [ev.TlsUpgradeRequested(hostname="a")]
    assert h.conn.data_to_send() == b""


def test_tls_first_sends_connect_right_after_info() -> None:
    h = Harness(servers=("tls://a:4222",), tls_first=True)
    (req,) = h.start()
    assert isinstance(req, ev.ConnectRequested) and req.tls_first
    h.conn.connection_made(h.now)
    h.info({"tls_required": True})
    assert [f[0] for f in h.written()] == ["CONNECT", "PING"]
    assert not of(h.pump(), ev.TlsUpgradeRequested)


def test_discovered_servers_verify_against_the_original_host_name() -> None:
    # TESTPLAN scenario 12 at the core level: a gossiped IP is verified against the first host.
    h = Harness(servers=("tls://nats.example:4222",))
    h.dial()
    h.info({"tls_required": True, "connect_urls": ["10.0.0.2:4222"]})
    events = h.pump()
    assert of(events, ev.TlsUpgradeRequested) == [ev.TlsUpgradeRequested(hostname="nats.example")]
    h.conn.tls_established(h.now)
    h.conn.data_to_send()
    assert of(h.send(b"PONG\r\n"), ev.Connected)
    assert h.conn.servers == ["tls://nats.example:4222", "tls://10.0.0.2:4222"]
    h.now = 100.0
    events = h.lose(OSError("reset"))
    (req,) = of(events, ev.ConnectRequested)
    assert req.server.host == "10.0.0.2" and req.server.discovered and req.server.tls
    assert req.tls_hostname == "nats.example"
    h.conn.connection_made(h.now)
    h.info({"tls_required": True})
    assert h.pump() == [ev.TlsUpgradeRequested(hostname="nats.example")]


# --------------------------------------------------------------------------- keep-alive


def test_pings_every_interval_and_pong_resets() -> None:
    h = Harness(ping_interval=0.5, max_pings_out=2)
    h.connect()
    for k in range(1, 21):
        events = h.run_until(0.5 * k)
        assert not of(events, ev.CloseRequested), f"stale at {h.now} although every PING got its PONG"
        assert h.written() == [("PING",)]
        h.send(b"PONG\r\n")
    assert h.conn.is_connected


def test_stale_detected_exactly_at_interval_times_max_pings_out_plus_one() -> None:
    h = Harness(ping_interval=0.5, max_pings_out=2)
    h.connect()
    assert h.at(0.5) == [] and h.written() == [("PING",)]
    assert h.at(1.0) == [] and h.written() == [("PING",)]
    assert h.at(1.4999) == [] and h.written() == []
    events = h.at(1.5)
    (close,) = of(events, ev.CloseRequested)
    assert isinstance(close.error, StaleConnectionError)
    assert h.conn.data_to_send() == b""
    events = h.lose()
    (disc,) = events
    assert isinstance(disc, ev.Disconnected) and isinstance(disc.error, StaleConnectionError)
    # stale → reconnect: the only server was dialed at t=0, so it waits out reconnect_wait first
    assert h.conn.state is State.WAITING
    deadline = h.conn.next_deadline()
    assert deadline is not None and 0.0 + 2.0 <= deadline <= 0.0 + 2.0 + 0.1
    assert of(h.at(deadline), ev.ConnectRequested)


def test_pong_after_one_missed_ping_prevents_stale() -> None:
    h = Harness(ping_interval=1.0, max_pings_out=2)
    h.connect()
    h.run_until(2.0)  # two PINGs out
    h.conn.data_to_send()
    h.send(b"PONG\r\n")  # answers the first; resets the count
    assert not of(h.run_until(3.0), ev.CloseRequested)
    assert not of(h.run_until(4.0), ev.CloseRequested)
    assert of(h.run_until(5.0), ev.CloseRequested)


def test_server_ping_is_answered_with_pong() -> None:
    h = Harness()
    h.connect()
    h.send(b"PING\r\nPING\r\n")
    assert h.written() == [("PONG",), ("PONG",)]


# --------------------------------------------------------------------------- reconnect


def test_reconnect_immediately_to_the_next_server() -> None:
    h = Harness(servers=("nats://a:4222", "nats://b:4222"))
    h.connect()
    h.now = 5.0
    events = h.lose(OSError("reset"))
    assert [type(e) for e in events] == [ev.Disconnected, ev.ConnectRequested]
    assert events[0] == ev.Disconnected(url="nats://a:4222", error=events[0].error)
    assert isinstance(events[1], ev.ConnectRequested) and events[1].server.url == "nats://b:4222"
    events = h.connect()
    assert of(events, ev.Reconnected) and not of(events, ev.Connected)
    assert h.conn.stats.reconnects == 1


def test_reconnect_waits_use_the_injected_random() -> None:
    seed = 7
    wait, jitter = 1.0, 0.5
    h = Harness(seed=seed, reconnect_wait=wait, reconnect_jitter=jitter, max_reconnect_attempts=3)
    ref = reference_rng(seed)
    h.connect()  # attempt at t=0
    h.now = 10.0
    events = h.lose(OSError("reset"))
    # The last attempt (t=0) is older than reconnect_wait: retry at once (the draw is unused).
    ref.uniform(0, jitter)
    assert [type(e) for e in events] == [ev.Disconnected, ev.ConnectRequested]
    events = h.lose(ConnectionRefusedError())
    assert [type(e) for e in events] == [ev.ConnectAttemptFailed]
    expected = 10.0 + wait + ref.uniform(0, jitter)
    assert h.conn.next_deadline() == expected
    assert h.conn.next_deadline() == expected, "next_deadline is pure"
    assert h.at(expected - 1e-6) == [] and h.conn.state is State.WAITING  # spurious wake-up: no-op
    (req,) = h.at(expected)
    assert isinstance(req, ev.ConnectRequested)
    events = h.lose(ConnectionRefusedError())
    expected2 = expected + wait + ref.uniform(0, jitter)
    assert h.conn.next_deadline() == expected2
    (req,) = h.at(expected2)
    assert isinstance(req, ev.ConnectRequested)
    events = h.lose(ConnectionRefusedError())
    assert [type(e) for e in events] == [ev.ConnectAttemptFailed, ev.Closed]
    closed = events[1]
    assert isinstance(closed, ev.Closed) and isinstance(closed.error, NoServersError)
    assert h.conn.is_closed and h.conn.next_deadline() is None


@pytest.mark.parametrize("seed", range(12))
def test_reconnect_timer_fires_once_per_wait(seed: int) -> None:
    # The jitter is drawn once per wait: the reconnect timer firing must dial, not re-arm.
    h = Harness(seed=seed, reconnect_wait=1.0, reconnect_jitter=0.5)
    h.connect()
    h.now = 10.0
    h.lose(OSError())
    h.lose(ConnectionRefusedError())
    deadline = h.conn.next_deadline()
    assert deadline is not None and 11.0 <= deadline <= 11.5
    events = h.at(deadline)
    assert of(events, ev.ConnectRequested), f"timer at {deadline} re-armed to {h.conn.next_deadline()}"


def test_at_most_one_attempt_per_reconnect_wait() -> None:
    h = Harness(reconnect_wait=2.0, reconnect_jitter=0.3, max_reconnect_attempts=-1)
    h.connect()
    h.now = 50.0
    h.lose(OSError())
    attempts = [h.now]
    for _ in range(30):
        h.lose(ConnectionRefusedError())
        d = h.conn.next_deadline()
        assert d is not None
        assert of(h.at(d), ev.ConnectRequested)
        attempts.append(d)
    gaps = [b - a for a, b in zip(attempts, attempts[1:])]
    assert all(2.0 <= g <= 2.3 for g in gaps), gaps
    assert not h.conn.is_closed, "negative max_reconnect_attempts means forever"


def test_max_reconnect_attempts_per_server_then_no_servers() -> None:
    h = Harness(servers=("nats://a:4222", "nats://b:4222"), reconnect_wait=1.0, reconnect_jitter=0.0, max_reconnect_attempts=2)
    h.connect()
    h.now = 100.0
    events = h.lose(OSError())
    dialed = [e.server.url for e in of(events, ev.ConnectRequested)]
    for _ in range(20):
        events = h.lose(ConnectionRefusedError())
        if of(events, ev.Closed):
            break
        dialed += [e.server.url for e in of(events, ev.ConnectRequested)]
        if h.conn.state is State.WAITING:
            dialed += [e.server.url for e in of(h.run_until(h.conn.next_deadline() or 0), ev.ConnectRequested)]
    (closed,) = of(events, ev.Closed)
    assert isinstance(closed.error, NoServersError)
    assert sorted(dialed) == ["nats://a:4222", "nats://a:4222", "nats://b:4222", "nats://b:4222"]
    assert dialed[0] == "nats://b:4222"


def test_initial_connect_failing_on_every_server() -> None:
    h = Harness(servers=("nats://a:4222", "nats://b:4222", "nats://c:4222"))
    events = h.start()
    urls = [e.server.url for e in of(events, ev.ConnectRequested)]
    for _ in range(3):
        events = h.lose(ConnectionRefusedError("refused"))
        urls += [e.server.url for e in of(events, ev.ConnectRequested)]
    assert urls == ["nats://a:4222", "nats://b:4222", "nats://c:4222"], "each server once, at once"
    (closed,) = of(events, ev.Closed)
    assert isinstance(closed.error, NoServersError)
    assert isinstance(closed.error.__cause__, ConnectionRefusedError)
    assert h.conn.is_closed
    with pytest.raises(ConnectionClosedError):
        h.conn.publish("x", b"")


def test_initial_connect_timeout() -> None:
    h = Harness(connect_timeout=2.0)
    h.start()
    assert h.conn.next_deadline() == 2.0
    h.conn.connection_made(h.now)  # TCP up, but no INFO ever comes
    (close,) = of(h.at(2.0), ev.CloseRequested)
    assert isinstance(close.error, TimeoutError)
    events = h.lose()
    (failed,) = of(events, ev.ConnectAttemptFailed)
    assert isinstance(failed.error, TimeoutError)
    (closed,) = of(events, ev.Closed)
    assert isinstance(closed.error, NoServersError)


def test_reconnect_off_closes_on_loss() -> None:
    h = Harness(reconnect=False)
    h.connect()
    events = h.lose(OSError("reset"))
    (closed,) = of(events, ev.Closed)
    assert isinstance(closed.error, OSError)
    assert not of(events, ev.ConnectRequested)


def test_subscriptions_replayed_before_buffered_publishes() -> None:
    h = Harness(servers=("nats://a:4222", "nats://b:4222"))
    h.connect()
    s1 = h.conn.subscribe("foo")
    s2 = h.conn.subscribe("bar", queue="q", max_msgs=5)
    assert h.written() == [("SUB", "foo", None, s1), ("SUB", "bar", "q", s2), ("UNSUB", s2, 5)]
    h.msg("bar", s2)
    h.msg("bar", s2)
    h.lose(OSError())
    h.conn.publish("x", b"buffered")
    token = h.conn.flush()
    assert h.conn.data_to_send() == b""
    h.dial()
    h.info({})
    assert [f[0] for f in h.written()] == ["CONNECT", "PING"]
    events = h.send(b"PONG\r\n")
    assert of(events, ev.Reconnected)
    assert h.written() == [
        ("SUB", "foo", None, s1),
        ("SUB", "bar", "q", s2),
        ("UNSUB", s2, 3),  # 5 minus the 2 already delivered
        ("PUB", "x", None, b"buffered"),
        ("PING",),
    ]
    assert h.send(b"PONG\r\n") == [ev.FlushCompleted(token=token)]


def test_reconnect_buffer_limit() -> None:
    h = Harness(reconnect_buffer_size=100)
    h.connect()
    h.lose(OSError())
    frame_len = len(b"PUB x 10\r\n" + b"0123456789" + b"\r\n")  # 22
    for _ in range(100 // frame_len):
        h.conn.publish("x", b"0123456789")
    assert h.conn.pending_out == 4 * frame_len
    with pytest.raises(ReconnectBufferExceededError):
        h.conn.publish("x", b"0123456789")
    assert h.conn.pending_out == 4 * frame_len, "nothing queued by a refused publish"
    h.conn.publish("x", b"A")  # "PUB x 1\r\nA\r\n": exactly the 12 bytes left
    assert h.conn.pending_out == 100
    with pytest.raises(ReconnectBufferExceededError):
        h.conn.publish("x", b"")
    events = h.connect()
    assert not of(events, ev.PublishesDropped)
    assert [f[3] for f in h.written() if f[0] == "PUB"] == [b"0123456789"] * 4 + [b"A"]


def test_reconnect_buffer_zero_refuses_every_publish_while_disconnected() -> None:
    h = Harness(reconnect_buffer_size=0)
    h.connect()
    h.lose(OSError())
    with pytest.raises(ReconnectBufferExceededError):
        h.conn.publish("x", b"")


def test_publishes_not_taken_by_the_transport_are_resent_after_reconnect() -> None:
    h = Harness(servers=("nats://a:4222", "nats://b:4222"))
    h.connect()
    sid = h.conn.subscribe("s")
    h.conn.publish("a", b"1")
    h.conn.publish("a", b"2", headers={"K": "v"})
    events = h.lose(OSError("reset"))  # the transport never wrote them
    assert not of(events, ev.PublishesDropped)
    h.conn.publish("a", b"3")
    h.connect()
    frames = h.written()
    assert frames == [
        ("SUB", "s", None, sid),  # replayed once: the unsent SUB frame is not duplicated
        ("PUB", "a", None, b"1"),
        ("HPUB", "a", None, Headers({"K": "v"}), b"2"),
        ("PUB", "a", None, b"3"),
    ]


def test_only_the_unsent_publishes_are_salvaged_from_the_wire_buffer() -> None:
    """The wire buffer is one run of bytes: the publishes in it are told from the control
    frames between them by their sizes, even when a payload looks like frames of its own."""
    h = Harness()
    h.connect()
    tricky = b"\r\nPING\r\nPUB a 1\r\nX\r\n"
    h.conn.publish("a", tricky)
    t = h.conn.flush()  # a PING between the publishes
    sid = h.conn.subscribe("s")
    h.conn.publish("a", b"2", reply="r", headers={"K": "v\r\nPUB"[:1]})
    h.conn.unsubscribe(sid)
    h.conn.publish("a", b"")
    assert h.conn.pending_out > 0
    events = h.lose(OSError("reset"))
    assert not of(events, ev.PublishesDropped)
    h.connect()
    assert h.written() == [
        ("PUB", "a", None, tricky),
        ("HPUB", "a", "r", Headers({"K": "v"}), b"2"),
        ("PUB", "a", None, b""),
        ("PING",),  # the flush's PING, re-sent after the publishes it covers
    ]
    assert h.send(b"PONG\r\n") == [ev.FlushCompleted(token=t)]


def test_flush_pending_at_disconnect_completes_after_reconnect() -> None:
    h = Harness()
    h.connect()
    t1 = h.conn.flush()
    assert h.written() == [("PING",)]
    h.now = 10.0
    h.lose(OSError())
    t2 = h.conn.flush()
    h.connect()
    assert h.written() == [("PING",), ("PING",)]
    assert h.send(b"PONG\r\n") == [ev.FlushCompleted(token=t1)]
    assert h.send(b"PONG\r\n") == [ev.FlushCompleted(token=t2)]


def test_keepalive_ping_and_flush_pongs_are_matched_in_order() -> None:
    h = Harness(ping_interval=1.0)
    h.connect()
    h.run_until(1.0)  # keep-alive PING
    t = h.conn.flush()
    assert h.written() == [("PING",), ("PING",)]
    assert h.send(b"PONG\r\n") == [], "the first PONG answers the keep-alive"
    assert h.send(b"PONG\r\n") == [ev.FlushCompleted(token=t)]


def test_partial_frame_at_disconnect_is_discarded_and_fresh_parser_used() -> None:
    # TESTPLAN scenario 1 at the core level: reset mid-MSG payload.
    h = Harness(servers=("nats://a:4222", "nats://b:4222"))
    h.connect()
    sid = h.conn.subscribe("foo")
    assert h.send(b"MSG foo %d 10\r\nabc" % sid) == []
    h.lose(ConnectionResetError())
    events = h.connect()
    assert not of(events, MsgReceived)
    (m,) = h.msg("foo", sid, b"fresh")
    assert isinstance(m, MsgReceived) and m.data == b"fresh"


def test_protocol_error_closes_transport_and_reconnect_uses_fresh_parser() -> None:
    h = Harness(servers=("nats://a:4222", "nats://b:4222"))
    h.connect()
    events = h.send(b"PING\r\nZOO\r\nPING\r\n")
    (err,) = of(events, ev.ServerError)
    assert err.fatal and isinstance(err.error, RemoteProtocolError)
    (close,) = of(events, ev.CloseRequested)
    assert isinstance(close.error, RemoteProtocolError)
    assert h.send(b"more garbage\r\n") == [], "bytes after CloseRequested are ignored, not raised"
    events = h.lose()
    (disc,) = of(events, ev.Disconnected)
    assert isinstance(disc.error, RemoteProtocolError)
    assert of(h.connect(), ev.Reconnected)
    assert h.send(b"PING\r\n") == []
    assert h.written() == [("PONG",)], "the new connection parses again"


# --------------------------------------------------------------------------- subscriptions


def test_auto_unsubscribe_ends_the_subscription() -> None:
    h = Harness()
    h.connect()
    sid = h.conn.subscribe("foo", max_msgs=2)
    assert h.written() == [("SUB", "foo", None, sid), ("UNSUB", sid, 2)]
    (m1,) = h.msg("foo", sid, b"1")
    assert isinstance(m1, MsgReceived)
    events = h.msg("foo", sid, b"2")
    assert [type(e) for e in events] == [MsgReceived, ev.SubscriptionEnded]
    assert events[1] == ev.SubscriptionEnded(sid=sid, error=None)
    assert h.msg("foo", sid, b"3") == [], "MSGs after the limit are dropped"
    assert not h.conn.has_subscription(sid)


def test_unsubscribe_now_and_later() -> None:
    h = Harness()
    h.connect()
    a = h.conn.subscribe("a")
    b = h.conn.subscribe("b")
    h.conn.data_to_send()
    h.conn.unsubscribe(a)
    h.conn.unsubscribe(b, 2)
    assert h.written() == [("UNSUB", a, None), ("UNSUB", b, 2)]
    assert h.msg("a", a) == []
    assert len(h.msg("b", b)) == 1
    assert [type(e) for e in h.msg("b", b)] == [MsgReceived, ev.SubscriptionEnded]
    h.conn.unsubscribe(12345)  # unknown sid: nothing
    assert h.conn.data_to_send() == b""


def test_unsubscribe_with_max_already_reached_unsubscribes_now() -> None:
    h = Harness()
    h.connect()
    sid = h.conn.subscribe("a")
    h.msg("a", sid)
    h.msg("a", sid)
    h.conn.data_to_send()
    h.conn.unsubscribe(sid, 2)
    assert h.written() == [("UNSUB", sid, None)]
    assert not h.conn.has_subscription(sid)


def test_subscribe_validation() -> None:
    h = Harness()
    h.connect()
    with pytest.raises(BadSubjectError):
        h.conn.subscribe(">.a")
    with pytest.raises(BadSubjectError):
        h.conn.subscribe("a", queue="a b")
    with pytest.raises(InvalidOptionError):
        h.conn.subscribe("a", max_msgs=0)
    assert h.conn.data_to_send() == b""


def test_message_for_unknown_sid_is_dropped() -> None:
    h = Harness()
    h.connect()
    assert h.msg("foo", 99) == []
    assert h.conn.stats.msgs_in == 1


# --------------------------------------------------------------------------- requests


def _mux_prefix(frames: list[tuple[Any, ...]]) -> tuple[str, int]:
    (sub,) = [f for f in frames if f[0] == "SUB"]
    assert sub[1].endswith(".*")
    return sub[1][:-1], sub[3]


def test_request_reply_muxing() -> None:
    h = Harness()
    h.connect()
    t1 = h.conn.request("svc", b"q1")
    frames = h.written()
    prefix, mux = _mux_prefix(frames)
    assert prefix.startswith("_INBOX.")
    assert frames[1] == ("PUB", "svc", prefix + t1, b"q1")
    t2 = h.conn.request("svc", b"q2", headers={"H": "1"})
    frames = h.written()
    assert frames == [("HPUB", "svc", prefix + t2, Headers({"H": "1"}), b"q2")], "one mux SUB only"
    assert t1 != t2
    (reply,) = h.msg(prefix + t1, mux, b"answer")
    assert isinstance(reply, ev.ReplyReceived) and reply.token == t1 and reply.msg.data == b"answer"
    assert h.msg(prefix + t1, mux, b"again") == [], "a second reply to a finished request is dropped"
    h.conn.cancel_request(t2)
    assert h.msg(prefix + t2, mux, b"late") == [], "a late reply to a cancelled request is dropped"
    assert h.msg(prefix + "unknown", mux) == []


def test_no_responders_503_is_a_reply_with_status() -> None:
    h = Harness()
    h.connect()
    token = h.conn.request("nobody", b"")
    prefix, mux = _mux_prefix(h.written())
    (reply,) = h.send(hmsg(prefix + token, mux, b"NATS/1.0 503\r\n\r\n"))
    assert isinstance(reply, ev.ReplyReceived) and reply.token == token
    assert reply.msg.status == 503 and reply.msg.data == b""


def test_request_while_disconnected_replays_mux_before_the_request() -> None:
    h = Harness()
    h.connect()
    h.lose(OSError())
    token = h.conn.request("svc", b"q")
    h.connect()
    frames = h.written()
    prefix, _ = _mux_prefix(frames)
    assert frames[0][0] == "SUB" and frames[1] == ("PUB", "svc", prefix + token, b"q")


def test_mux_subscription_survives_reconnect() -> None:
    h = Harness()
    h.connect()
    h.conn.request("svc", b"")
    prefix, mux = _mux_prefix(h.written())
    h.lose(OSError())
    h.connect()
    assert ("SUB", prefix + "*", None, mux) in h.written()
    token = h.conn.request("svc", b"")
    (reply,) = h.msg(prefix + token, mux)
    assert isinstance(reply, ev.ReplyReceived)


# --------------------------------------------------------------------------- -ERR


def test_err_publish_permission_is_not_fatal() -> None:
    h = Harness()
    h.connect()
    events = h.send(b"-ERR 'Permissions Violation for Publish to \"x\"'\r\n")
    (err,) = events
    assert isinstance(err, ev.ServerError) and not err.fatal
    assert isinstance(err.error, PermissionsViolationError)
    assert err.error.operation == "publish" and err.error.subject == "x"
    assert h.conn.is_connected
    h.conn.publish("y", b"still works")
    assert h.written() == [("PUB", "y", None, b"still works")]


def test_err_subscription_permission_ends_that_subscription() -> None:
    h = Harness()
    h.connect()
    plain = h.conn.subscribe("a")
    queued = h.conn.subscribe("a", queue="q")
    other = h.conn.subscribe("b")
    h.conn.data_to_send()
    events = h.send(b"-ERR 'Permissions Violation for Subscription to \"a\" using queue \"q\"'\r\n")
    assert [type(e) for e in events] == [ev.ServerError, ev.SubscriptionEnded]
    ended = events[1]
    assert isinstance(ended, ev.SubscriptionEnded) and ended.sid == queued
    assert isinstance(ended.error, PermissionsViolationError) and ended.error.queue == "q"
    events = h.send(b"-ERR 'Permissions Violation for Subscription to \"a\"'\r\n")
    assert [e.sid for e in of(events, ev.SubscriptionEnded)] == [plain]
    assert h.conn.has_subscription(other) and not h.conn.has_subscription(plain)
    assert h.conn.is_connected and h.conn.data_to_send() == b""


def test_err_stale_connection_closes_and_reconnects() -> None:
    h = Harness()
    h.connect()
    events = h.send(b"-ERR 'Stale Connection'\r\n")
    (err,) = of(events, ev.ServerError)
    assert err.fatal and isinstance(err.error, StaleConnectionError)
    (close,) = of(events, ev.CloseRequested)
    assert isinstance(close.error, StaleConnectionError)
    h.now = 10.0
    events = h.lose()
    assert of(events, ev.Disconnected) and of(events, ev.ConnectRequested)


def test_err_maximum_payload_violation_is_fatal() -> None:
    h = Harness()
    h.connect()
    events = h.send(b"-ERR 'Maximum Payload Violation'\r\n")
    (err,) = of(events, ev.ServerError)
    assert err.fatal and isinstance(err.error, MaxPayloadError)
    assert of(events, ev.CloseRequested)


def test_err_unknown_is_reported_not_fatal() -> None:
    h = Harness()
    h.connect()
    (err,) = h.send(b"-ERR 'Unknown Protocol Operation'\r\n")
    assert isinstance(err, ev.ServerError) and not err.fatal and type(err.error) is ServerError
    assert h.conn.is_connected


def test_authorization_violation_on_first_connect_closes() -> None:
    h = Harness()
    h.dial()
    h.info({})
    h.conn.data_to_send()
    events = h.send(b"-ERR 'Authorization Violation'\r\n")
    (err,) = of(events, ev.ServerError)
    assert err.fatal and isinstance(err.error, AuthorizationError)
    (close,) = of(events, ev.CloseRequested)
    assert isinstance(close.error, AuthorizationError)
    events = h.lose()
    (closed,) = of(events, ev.Closed)
    assert isinstance(closed.error, AuthorizationError)
    assert not of(events, ev.ConnectRequested)


def test_authorization_violation_twice_while_reconnecting_closes() -> None:
    h = Harness(reconnect_wait=1.0, reconnect_jitter=0.0, max_reconnect_attempts=10)
    h.connect()
    h.now = 5.0
    assert of(h.lose(OSError()), ev.ConnectRequested)
    h.dial()
    h.info({})
    h.conn.data_to_send()
    assert of(h.send(b"-ERR 'Authorization Violation'\r\n"), ev.CloseRequested)
    events = h.lose()
    (failed,) = of(events, ev.ConnectAttemptFailed)
    assert isinstance(failed.error, AuthorizationError)
    assert not of(events, ev.Closed) and h.conn.next_deadline() == 6.0, "at most one attempt per reconnect_wait"
    assert of(h.at(6.0), ev.ConnectRequested)
    h.dial()
    h.info({})
    h.conn.data_to_send()
    h.send(b"-ERR 'Authorization Violation'\r\n")
    events = h.lose()
    (closed,) = of(events, ev.Closed)
    assert isinstance(closed.error, AuthorizationError)


def test_lame_duck_event_once_and_next_reconnect_prefers_another_server() -> None:
    h = Harness(servers=("nats://a:4222", "nats://b:4222", "nats://c:4222"), reconnect_wait=1.0, reconnect_jitter=0.0)
    h.connect()
    h.info({"ldm": True})
    assert h.pump() == [ev.LameDuck(url="nats://a:4222")]
    h.info({"ldm": True})
    assert h.pump() == [], "one LameDuck per connection"
    assert h.conn.is_connected
    h.now = 10.0
    (req,) = of(h.lose(OSError()), ev.ConnectRequested)
    assert req.server.url == "nats://b:4222"
    (req,) = of(h.lose(ConnectionRefusedError()), ev.ConnectRequested)
    assert req.server.url == "nats://c:4222"
    events = h.lose(ConnectionRefusedError())
    # The lame-duck server was skipped for one dial; now b and c both failed, a (which may have
    # restarted, as in a rolling upgrade) is an ordinary candidate again: first in the rotated
    # pool and tried long ago, it is dialed at once rather than waiting for b.
    (req,) = of(events, ev.ConnectRequested)
    assert req.server.url == "nats://a:4222"


def test_lame_duck_info_keeps_max_payload() -> None:
    # An async INFO that only carries {"ldm": true} must not reset max_payload to the default.
    h = Harness()
    h.connect(info={"max_payload": 1024, "server_id": "S"})
    h.info({"ldm": True})
    assert h.conn.max_payload == 1024
    assert h.conn.server_info["server_id"] == "S" and h.conn.server_info["ldm"] is True
    with pytest.raises(MaxPayloadError):
        h.conn.publish("x", b"y" * 1025)


# --------------------------------------------------------------------------- max_payload


def test_max_payload_enforced_by_publish() -> None:
    # TESTPLAN scenario 9 at the core level.
    h = Harness()
    h.connect(info={"max_payload": 1024})
    h.conn.publish("x", b"a" * 1024)
    assert h.written() == [("PUB", "x", None, b"a" * 1024)]
    before = h.conn.pending_out
    with pytest.raises(MaxPayloadError):
        h.conn.publish("x", b"a" * 1025)
    assert h.conn.pending_out == before and h.conn.data_to_send() == b""
    block_len = len(b"NATS/1.0\r\nA: b\r\n\r\n")  # 18
    h.conn.publish("x", b"a" * (1024 - block_len), headers={"A": "b"})
    assert len(h.written()) == 1
    with pytest.raises(MaxPayloadError):
        h.conn.publish("x", b"a" * (1025 - block_len), headers={"A": "b"})
    with pytest.raises(MaxPayloadError):
        h.conn.request("x", b"a" * 1025)
    assert h.conn.data_to_send() == b"", "not even the request mux SUB"
    assert h.conn.is_connected


def test_max_payload_updated_after_reconnect_to_a_smaller_server() -> None:
    # TESTPLAN scenario 10 at the core level.
    h = Harness(servers=("nats://big:4222", "nats://small:4222"))
    h.connect(info={"max_payload": 64 * 1024})
    h.conn.publish("x", b"b" * 2048)
    h.conn.data_to_send()
    h.lose(OSError())
    h.conn.publish("x", b"b" * 2048)  # buffered against the old limit
    h.conn.publish("x", b"ok")
    events = h.connect(info={"max_payload": 1024})
    (dropped,) = of(events, ev.PublishesDropped)
    assert dropped.count == 1
    assert h.written() == [("PUB", "x", None, b"ok")]
    assert h.conn.max_payload == 1024
    with pytest.raises(MaxPayloadError):
        h.conn.publish("x", b"b" * 2048)


# --------------------------------------------------------------------------- bad input: scenarios 17, 18

BAD_SUBJECTS = ["", " ", "a b", "a\tb", "a\r\nPUB x 1", "a..b", "a.*", ">", "\x00"]


@pytest.mark.parametrize("connected", [True, False])
@pytest.mark.parametrize("subject", BAD_SUBJECTS, ids=repr)
def test_bad_subjects_raise_before_anything_is_queued(subject: str, connected: bool) -> None:
    h = Harness()
    h.connect()
    if not connected:
        h.lose(OSError())
    h.conn.data_to_send()
    before = h.conn.pending_out
    with pytest.raises(BadSubjectError):
        h.conn.publish(subject, b"p")
    with pytest.raises(BadSubjectError):
        h.conn.publish("ok", b"p", reply=subject)
    with pytest.raises(BadSubjectError):
        h.conn.request(subject, b"p")
    with pytest.raises(BadSubjectError):
        h.conn.handle(ev.Publish(subject=subject, payload=b"p"), h.now)
    assert h.conn.pending_out == before
    assert h.conn.data_to_send() == b"", "the wire buffer must be unchanged (no injection)"


def test_reply_with_space_rejected() -> None:
    h = Harness()
    h.connect()
    with pytest.raises(BadSubjectError):
        h.conn.publish("a", b"", reply="x y")
    assert h.conn.data_to_send() == b""


BAD_HEADERS: list[Any] = [
    {"": "v"},
    {":": "v"},
    {"a b": "v"},
    {"\x00": "v"},
    {"→": "v"},
    {"K": "a\rb"},
    {"K": "a\nb"},
    {"K": "v\r\nInjected: 1"},
    [("K", "ok"), ("K", "\r\n")],
]


@pytest.mark.parametrize("connected", [True, False])
@pytest.mark.parametrize("headers", BAD_HEADERS, ids=repr)
def test_bad_headers_raise_before_anything_is_queued(headers: Any, connected: bool) -> None:
    h = Harness()
    h.connect()
    if not connected:
        h.lose(OSError())
    h.conn.data_to_send()
    before = h.conn.pending_out
    with pytest.raises(BadHeaderError):
        h.conn.publish("a", b"p", headers=headers)
    with pytest.raises(BadHeaderError):
        h.conn.request("a", b"p", headers=headers)
    assert h.conn.pending_out == before
    assert h.conn.data_to_send() == b""


def test_payload_must_be_bytes() -> None:
    h = Harness()
    h.connect()
    with pytest.raises(TypeError):
        h.conn.publish("a", "text")  # type: ignore[arg-type]
    assert h.conn.data_to_send() == b""
    h.conn.publish("a", bytearray(b"ba"))
    h.conn.publish("a", memoryview(b"mv"))
    assert [f[3] for f in h.written()] == [b"ba", b"mv"]
    # len() of a memoryview counts items: the frame must carry the byte count.
    h.conn.publish("a", memoryview(b"abcdefgh").cast("i"))
    h.conn.publish("a", memoryview(b"abcdefgh").cast("i"), headers={"K": "v"})
    assert h.conn.data_to_send() == (
        b"PUB a 8\r\nabcdefgh\r\n" + b"HPUB a 18 26\r\nNATS/1.0\r\nK: v\r\n\r\nabcdefgh\r\n"
    )


# --------------------------------------------------------------------------- close


def test_close_while_connected() -> None:
    h = Harness()
    h.connect()
    h.conn.publish("a", b"last")
    h.conn.close(h.now)
    events = h.pump()
    assert events == [ev.CloseRequested(error=None)]
    assert h.written() == [("PUB", "a", None, b"last")], "queued output is still handed over"
    with pytest.raises(ConnectionClosedError):
        h.conn.publish("a", b"after")
    with pytest.raises(ConnectionClosedError):
        h.conn.subscribe("a")
    with pytest.raises(ConnectionClosedError):
        h.conn.flush()
    events = h.lose()
    assert events == [ev.Closed(error=None)]
    assert h.conn.is_closed and h.conn.next_deadline() is None
    h.conn.close(h.now)
    assert h.pump() == [], "close is idempotent"


def test_close_while_connected_unsent_output_is_reported() -> None:
    h = Harness()
    h.connect()
    h.conn.publish("a", b"1")
    h.conn.publish("a", b"2")
    h.conn.close(h.now)
    h.pump()
    events = h.lose(OSError("the transport could not write"))
    assert events == [ev.PublishesDropped(count=2, reason=events[0].reason), ev.Closed(error=None)]  # type: ignore[union-attr]


def test_close_while_disconnected_reports_dropped_publishes() -> None:
    h = Harness(reconnect_wait=5.0)
    h.connect()
    h.now = 1.0
    h.lose(OSError())
    h.lose(ConnectionRefusedError())
    assert h.conn.state is State.WAITING
    for i in range(3):
        h.conn.publish("a", b"%d" % i)
    h.conn.close(h.now)
    events = h.pump()
    assert [type(e) for e in events] == [ev.PublishesDropped, ev.Closed]
    assert events[0].count == 3  # type: ignore[union-attr]
    assert events[1] == ev.Closed(error=None)
    assert h.conn.data_to_send() == b"" and h.conn.next_deadline() is None


def test_close_while_dialing() -> None:
    h = Harness()
    h.start()
    h.conn.publish("a", b"x")
    h.conn.close(h.now)
    events = h.pump()
    assert [type(e) for e in events] == [ev.PublishesDropped, ev.CloseRequested]
    h.conn.connection_made(h.now)  # the dial completed anyway: ignored
    assert h.lose() == [ev.Closed(error=None)]


def test_commands_after_closed() -> None:
    h = Harness()
    h.connect()
    sid = h.conn.subscribe("a")
    token = h.conn.request("svc", b"")
    h.conn.close(h.now)
    h.lose()
    assert h.conn.is_closed
    for call in (
        lambda: h.conn.publish("a", b""),
        lambda: h.conn.subscribe("a"),
        lambda: h.conn.request("a", b""),
        lambda: h.conn.flush(),
        lambda: h.conn.handle(ev.Publish(subject="a"), h.now),
        lambda: h.conn.handle(ev.Flush(), h.now),
    ):
        with pytest.raises(ConnectionClosedError):
            call()
    # Cleanup calls stay harmless after close (jssync calls them from timed-out waiters).
    h.conn.unsubscribe(sid)
    h.conn.cancel_request(token)
    h.conn.handle_timeout(h.now + 1000)
    h.conn.receive_data(b"PING\r\n", h.now)
    h.conn.connection_lost(h.now, None)
    assert h.conn.data_to_send() == b"" and h.pump() == []


# --------------------------------------------------------------------------- the contract


def test_next_deadline_is_pure_and_spurious_timeouts_are_no_ops() -> None:
    h = Harness(ping_interval=3.0)
    h.connect()
    d1 = h.conn.next_deadline()
    d2 = h.conn.next_deadline()
    assert d1 == d2 == 3.0
    for t in (0.0, 1.0, 2.999):
        assert h.at(t) == []
        assert h.conn.data_to_send() == b""
        assert h.conn.next_deadline() == 3.0
    assert h.at(3.0) == [] and h.written() == [("PING",)]
    assert h.conn.next_deadline() == 6.0


def test_next_deadline_none_when_idle_and_closed() -> None:
    h = Harness()
    assert h.conn.next_deadline() is None
    h.conn.handle_timeout(100.0)
    assert h.pump() == []
    h.conn.close(0.0)
    assert h.conn.next_deadline() is None


def test_handle_dispatches_commands() -> None:
    h = Harness()
    h.connect()
    sid = h.conn.handle(ev.Subscribe(subject="s", queue="q", max_msgs=3), h.now)
    assert isinstance(sid, int)
    assert h.conn.handle(ev.Publish(subject="p", payload=b"x", reply="r", headers={"A": "1"}), h.now) is None
    token = h.conn.handle(ev.Request(subject="svc", payload=b"q"), h.now)
    assert isinstance(token, str)
    flush = h.conn.handle(ev.Flush(), h.now)
    assert isinstance(flush, int)
    h.conn.handle(ev.Unsubscribe(sid=sid), h.now)
    h.conn.handle(ev.CancelRequest(token=token), h.now)
    frames = h.written()
    assert [f[0] for f in frames] == ["SUB", "UNSUB", "HPUB", "SUB", "PUB", "PING", "UNSUB"]
    h.conn.handle(ev.Close(), h.now)
    assert of(h.pump(), ev.CloseRequested)
    with pytest.raises(LocalProtocolError):
        h.conn.handle("not a command", h.now)  # type: ignore[arg-type]


def test_lifecycle_misuse_is_a_local_protocol_error() -> None:
    h = Harness()
    with pytest.raises(LocalProtocolError):
        h.conn.connection_made(0.0)
    h.start()
    with pytest.raises(LocalProtocolError):
        h.conn.start(0.0)
    with pytest.raises(LocalProtocolError):
        h.conn.tls_established(0.0)


def test_invalid_options() -> None:
    for kwargs in (
        {"servers": ()},
        {"servers": ("ftp://a",)},
        {"ping_interval": 0},
        {"max_pings_out": 0},
        {"reconnect_jitter": -1},
        {"reconnect_buffer_size": -1},
        {"inbox_prefix": "a.*"},
        {"inbox_prefix": "a b"},
    ):
        with pytest.raises(InvalidOptionError):
            Connection(ConnectOptions(**kwargs), rng=random.Random(0))


def test_inbox_ids_come_from_the_injected_random() -> None:
    a = Harness(seed=42).conn
    b = Harness(seed=42).conn
    c = Harness(seed=43).conn
    assert a.new_inbox() == b.new_inbox() != c.new_inbox()
    assert a._resp_prefix == b._resp_prefix != c._resp_prefix


# --- follow-ups: request inbox lifetime, lame-duck recovery, first connect over a pool ------------


def test_request_inbox_is_resubscribed_after_the_server_refuses_it() -> None:
    h = Harness()
    h.connect()
    h.conn.request("svc", b"1")
    frames = h.written()
    assert [f[0] for f in frames] == ["SUB", "PUB"]
    inbox = frames[0][1]
    # The server refuses the reply inbox: the mux subscription is gone...
    events = h.send(b"-ERR 'Permissions Violation for Subscription to \"" + inbox.encode() + b"\"'\r\n")
    assert of(events, ev.SubscriptionEnded)
    # ...so the next request must subscribe a new one instead of publishing into the void.
    h.conn.request("svc", b"2")
    assert [f[0] for f in h.written()] == ["SUB", "PUB"]


def test_lame_duck_server_is_a_normal_candidate_again_after_it_served_us() -> None:
    h = Harness(servers=("nats://a:4222", "nats://b:4222"), reconnect_wait=0.5, reconnect_jitter=0.0)
    h.connect()
    assert of(h.send(b'INFO {"ldm":true}\r\n'), ev.LameDuck)
    h.lose(ConnectionResetError())
    h.connect()  # to b, since a is in lame duck
    assert h.conn.connected_url == "nats://b:4222"
    # b fails and a comes back: a serves us, so it is no longer marked lame duck...
    h.lose(ConnectionResetError())
    h.connect()
    assert h.conn.connected_url == "nats://a:4222"
    h.lose(ConnectionResetError())
    h.connect()
    assert h.conn.connected_url == "nats://b:4222"
    # ...and after b drops again, a is preferred in plain pool order, not pushed last.
    h.lose(ConnectionResetError())
    h.connect()
    assert h.conn.connected_url == "nats://a:4222"


def test_first_connect_tries_every_server_and_reports_the_refusal() -> None:
    from jscore.errors import AuthorizationError

    h = Harness(servers=("nats://a:4222", "nats://b:4222", "nats://c:4222"))
    h.dial()
    h.info({})
    h.written()
    events = h.send(b"-ERR 'Authorization Violation'\r\n")
    assert of(events, ev.CloseRequested)
    events = h.lose()  # a refused our credentials: b is dialed next, not a close
    requested = of(events, ev.ConnectRequested)
    assert requested and requested[0].server.url == "nats://b:4222"
    events = h.lose(ConnectionRefusedError())  # b is down
    requested = of(events, ev.ConnectRequested)
    assert requested and requested[0].server.url == "nats://c:4222"
    events = h.lose(ConnectionRefusedError())  # c is down too
    closed = of(events, ev.Closed)
    assert closed and isinstance(closed[0].error, AuthorizationError), closed


def test_permission_violation_ends_only_the_subscription_it_names() -> None:
    h = Harness()
    h.connect()
    plain = h.conn.subscribe("orders")
    grouped = h.conn.subscribe("orders", queue="workers")
    other_group = h.conn.subscribe("orders", queue="audit")
    h.written()
    events = h.send(b"-ERR 'Permissions Violation for Subscription to \"orders\"'\r\n")
    assert [e.sid for e in of(events, ev.SubscriptionEnded)] == [plain]
    events = h.send(b"-ERR 'Permissions Violation for Subscription to \"orders\" using queue \"workers\"'\r\n")
    assert [e.sid for e in of(events, ev.SubscriptionEnded)] == [grouped]
    assert h.conn.has_subscription(other_group) and h.conn.is_connected


@pytest.mark.parametrize("url", ["0\x0c0", "nats://a\x00b:4222", "a b:4222", "a\x7fb:4222"])
def test_a_host_with_control_or_space_characters_is_refused(url: str) -> None:
    """(found by the INFO fuzz target's hypothesis test: a gossiped '0\\x0c0' entered the pool)"""
    with pytest.raises(InvalidOptionError):
        parse_server_url(url, discovered=True)


# --------------------------------------------------------------------------- submit (no lock)


def _preempt_submit_with(monkeypatch: pytest.MonkeyPatch, other_thread: Any) -> None:
    """Make the next submit run ``other_thread()`` between its checks and its append, as a
    thread switch there would (submit looks the subject up right after its state check)."""
    import jscore.connection as connection_module

    real = connection_module.pub_head
    done = [False]

    def switch(subject: str) -> bytes | None:
        if not done[0]:
            done[0] = True
            other_thread()
        return real(subject)

    monkeypatch.setattr(connection_module, "pub_head", switch)


def test_submit_keeps_its_place_before_a_request_that_fails() -> None:
    h = Harness()
    h.connect()
    h.conn.publish("sub.a", b"first")  # (the subject is validated, so submit takes the next)
    assert h.conn.submit("sub.a", b"second")
    with pytest.raises(MaxPayloadError):
        h.conn.request("svc", b"x" * (h.conn.max_payload + 1))
    assert h.conn.submit("sub.a", b"third")
    h.conn.request("svc", b"q")
    assert [f[3] if f[0] == "PUB" else f[0] for f in h.written()] == [b"first", b"second", b"third", "SUB", b"q"]
    assert h.conn.msgs_out == 4


def test_a_submit_that_appends_after_the_close_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    h = Harness()
    h.connect()
    h.conn.publish("sub.a", b"x")
    h.written()

    def close_for_good() -> None:
        h.conn.close(0.0)
        h.conn.data_to_send()
        h.conn.connection_lost(0.0, None)

    _preempt_submit_with(monkeypatch, close_for_good)
    with pytest.raises(ConnectionClosedError):
        h.conn.submit("sub.a", b"late")
    events = h.pump()
    assert isinstance(events[-1], ev.Closed), "nothing may follow Closed"
    assert h.conn.data_to_send() == b"" and h.conn.next_event() is None


def test_a_submit_that_appends_while_closing_raises_and_is_not_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    h = Harness()
    h.connect()
    h.conn.publish("sub.a", b"x")
    h.written()
    _preempt_submit_with(monkeypatch, lambda: h.conn.close(0.0))
    with pytest.raises(ConnectionClosedError):
        h.conn.submit("sub.a", b"late")
    assert b"late" not in bytes(h.conn.data_to_send())
    h.conn.connection_lost(0.0, None)
    events = h.pump()
    assert sum(e.count for e in events if isinstance(e, ev.PublishesDropped)) == 1
    assert isinstance(events[-1], ev.Closed)


def test_a_submit_that_appends_after_a_disconnect_waits_for_the_next_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h = Harness()
    h.connect()
    h.conn.publish("sub.a", b"x")
    h.written()
    _preempt_submit_with(monkeypatch, lambda: h.lose(OSError("reset")))
    assert h.conn.submit("sub.a", b"late")  # (accepted: it was connected when it checked)
    h.conn.publish("sub.a", b"after")  # buffered behind it
    h.connect()
    assert [f[3] for f in h.written() if f[0] == "PUB"] == [b"late", b"after"]
