"""The client's byte-exact paths through the fault proxy in front of a real nats-server.

TESTPLAN scenarios 4 (slicing), 9 (max_payload, nothing written), 17/18 (bad subjects and headers
never reach the wire), plus a slow (delayed) link and swallowed PONGs.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

import pytest

from jscore.errors import (
    BadHeaderError,
    BadSubjectError,
    MaxPayloadError,
    StaleConnectionError,
    TimeoutError,
)
from jssync import Client, Msg
from jssync.events import Disconnected, Reconnected, ServerError
from jssync.server import NatsServer
from tests.integration import EventLog, clients, collect, wait_until
from tests.support.proxy import FaultProxy, is_verb, split_frames

__all__ = ["clients"]

pytestmark = pytest.mark.timeout(90)

ProxyFactory = Callable[..., FaultProxy]


def _snapshot(m: Msg) -> tuple[object, ...]:
    return (m.subject, m.reply, m.data, None if m.headers is None else tuple(m.headers.items()), m.status)


# --------------------------------------------------------------------------- scenario 4


def test_sliced_stream_is_identical_to_the_unsliced_one(
    nats_server: NatsServer, fault_proxy: ProxyFactory, clients: Callable[..., Client]
) -> None:
    n = 10_000
    rng = random.Random(4)
    sliced_proxy = fault_proxy(nats_server)
    sliced_proxy.slice(1, 7, 0.0, direction="down")
    events = EventLog()
    # Keep-alive off for this one: megabytes queue up in the slicing proxy and a PONG waits
    # behind them, which (correctly) looks like a stale link at ping_interval 0.5 s.
    sliced = clients(sliced_proxy.url, on_event=events, ping_interval=60)
    plain = clients(nats_server.url)
    pub = clients(nats_server.url)
    s_sub = sliced.subscribe("s4.>")
    p_sub = plain.subscribe("s4.>")
    sliced.flush(timeout=5)
    plain.flush(timeout=5)

    sent: list[tuple[object, ...]] = []
    for i in range(n):
        size = rng.choice((0, 1, 2, 7, 64, 200, rng.randrange(0, 1500)))
        data = rng.randbytes(size)
        subject = f"s4.{i % 7}.x{rng.randrange(100)}"
        reply = f"r.{i}" if i % 11 == 0 else None
        headers: list[tuple[str, str]] | None = None
        if i % 3 == 0:
            headers = [(f"K{j % 2}", f"v{rng.randrange(10**6)}") for j in range(rng.randrange(0, 4))]
            if i % 9 == 0:
                headers.append(("Crlf-Like", "a:b\tc"))
        pub.publish(subject, data, reply=reply, headers=headers)
        sent.append((subject, reply, data, None if headers is None else tuple(headers), None))
        if i % 500 == 499:
            time.sleep(0.001)  # small pauses: the slices interleave with partial frames
    pub.flush(timeout=10)

    plain_msgs = [_snapshot(m) for m in collect(p_sub, n, 30)]
    sliced_msgs = [_snapshot(m) for m in collect(s_sub, n, 45)]
    assert plain_msgs == sent
    assert sliced_msgs == plain_msgs

    # a short tail with 1 ms between the 1-7 byte pieces
    sliced_proxy.slice(1, 7, 0.001, direction="down")
    tail: list[tuple[object, ...]] = []
    for i in range(25):
        data = rng.randbytes(rng.randrange(0, 24))
        headers = [("T", str(i))] if i % 2 else None
        pub.publish("s4.tail", data, headers=headers)
        tail.append(("s4.tail", None, data, None if headers is None else tuple(headers), None))
    pub.flush(timeout=5)
    assert [_snapshot(m) for m in collect(p_sub, len(tail), 10)] == tail
    assert [_snapshot(m) for m in collect(s_sub, len(tail), 20)] == tail
    assert not events.of(ServerError)
    assert not events.of(Disconnected)
    assert sliced.stats["reconnects"] == 0


def test_slow_server_still_delivers_everything(
    nats_server: NatsServer, fault_proxy: ProxyFactory, clients: Callable[..., Client]
) -> None:
    proxy = fault_proxy(nats_server)
    proxy.delay(0.05, "both", jitter=0.02)
    events = EventLog()
    nc = clients(proxy.url, on_event=events)
    sub = nc.subscribe("slow.>")
    responder = clients(nats_server.url)
    responder.subscribe("slow.svc", callback=lambda m: m.respond(m.data[::-1]))
    responder.flush(timeout=2)
    nc.flush(timeout=2)
    for i in range(500):
        nc.publish(f"slow.{i % 5}", b"%d" % i)
    assert nc.request("slow.svc", b"abc", timeout=2).data == b"cba"
    got = collect(sub, 501, 10)
    assert [m.data for m in got if m.subject != "slow.svc"] == [b"%d" % i for i in range(500)]
    # slower pieces as well: delay + slicing both ways
    proxy.slice(50, 500, 0.0005, direction="both")
    for i in range(200):
        nc.publish("slow.x", bytes([i]) * i)
    got = collect(sub, 200, 15)
    assert [m.data for m in got] == [bytes([i]) * i for i in range(200)]
    assert not events.of(Disconnected)


def test_swallowed_pongs_make_the_client_reconnect(
    nats_server: NatsServer, fault_proxy: ProxyFactory, clients: Callable[..., Client]
) -> None:
    proxy = fault_proxy(nats_server)
    events = EventLog()
    nc = clients(proxy.url, on_event=events)
    sub = nc.subscribe("pong")
    rule = proxy.drop_frames("down", is_verb("PONG"))
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        nc.flush(timeout=0.5)  # its PONG never comes
    (disc,) = events.wait_for(Disconnected, timeout=3)
    assert isinstance(disc.error, StaleConnectionError)
    assert events.time_of(disc) - t0 <= 2.0
    assert rule.matched >= 1
    rule.remove()
    events.wait_for(Reconnected, timeout=3)
    nc.publish("pong", b"back")
    assert collect(sub, 1)[0].data == b"back"


# --------------------------------------------------------------------------- scenario 9


def test_max_payload_checked_before_anything_is_written(
    nats_server_factory: Callable[..., NatsServer], fault_proxy: ProxyFactory, clients: Callable[..., Client]
) -> None:
    server = nats_server_factory(jetstream=False, config="max_payload: 1024")
    proxy = fault_proxy(server)
    events = EventLog()
    nc = clients(proxy.url, on_event=events)
    assert nc.max_payload == 1024
    sub = nc.subscribe("mp.>")
    nc.flush(timeout=2)
    hdrs = {"H": "v" * 10}
    hdr_len = len(b"NATS/1.0\r\nH: vvvvvvvvvv\r\n\r\n")

    nc.publish("mp.hdr", b"p" * (1024 - hdr_len), headers=hdrs)  # exactly 1024 header + payload
    nc.publish("mp.raw", b"r" * 1024)
    nc.flush(timeout=2)
    before = proxy.captured("up")
    with pytest.raises(MaxPayloadError):
        nc.publish("mp.hdr2", b"p" * (1025 - hdr_len), headers=hdrs)
    with pytest.raises(MaxPayloadError):
        nc.publish("mp.raw2", b"r" * 1025)
    with pytest.raises(MaxPayloadError):
        nc.request("mp.req", b"q" * 1025, timeout=1)
    nc.flush(timeout=2)
    assert proxy.captured("up")[len(before) :] == b"PING\r\n"  # only the flush left the client
    got = collect(sub, 2)
    assert [(m.subject, len(m.data)) for m in got] == [("mp.hdr", 1024 - hdr_len), ("mp.raw", 1024)]
    assert nc.is_connected
    assert not events.of(Disconnected) and not events.of(ServerError)
    frames = split_frames(proxy.captured("up"))
    assert not any(b"mp.hdr2" in f or b"mp.raw2" in f or b"mp.req" in f for f in frames)


# --------------------------------------------------------------------------- scenarios 17 / 18

BAD_SUBJECTS = ["", " ", "a b", "a\tb", "a\r\nPUB x 1", "a\nb", "a..b", ".a", "a.", "a.*", "a.>", ">", "*", "\x00", "a\x7fb"]
BAD_SUB_SUBJECTS = ["", "a b", "a\tb", "a\r\nPUB x 1", "a..b", ".a", "a.", "a.>.b", ">.a"]
BAD_KEYS = ["", ":", "a b", "a:b", "\x00", "→", "a\r\nb"]
BAD_VALUES = ["a\rb", "a\nb", "\r\n", "x\r\nInjected: 1", "\x00"]


def test_bad_subjects_and_headers_never_reach_the_wire(
    nats_server: NatsServer, fault_proxy: ProxyFactory, clients: Callable[..., Client]
) -> None:
    proxy = fault_proxy(nats_server)
    nc = clients(proxy.url)
    nc.flush(timeout=2)
    before = proxy.captured("up")

    # the very first request must not leave the request-mux SUB behind when it fails
    with pytest.raises(BadSubjectError):
        nc.request("a b", b"x", timeout=1)
    with pytest.raises(BadHeaderError):
        nc.request("ok.subject", b"x", headers={"bad key": "v"}, timeout=1)
    for subject in BAD_SUBJECTS:
        with pytest.raises(BadSubjectError):
            nc.publish(subject, b"x")
        with pytest.raises(BadSubjectError):
            nc.publish(subject, b"x", headers={"A": "b"})
        with pytest.raises(BadSubjectError):
            nc.request(subject, b"x", timeout=1)
    for reply in ["x y", "", "a\r\nb", "a.*"]:
        with pytest.raises(BadSubjectError):
            nc.publish("ok", b"x", reply=reply)
    for subject in BAD_SUB_SUBJECTS:
        with pytest.raises(BadSubjectError):
            nc.subscribe(subject)
    for queue in ["", "q q", "q\r\nPUB x 1", "q\t"]:
        with pytest.raises(BadSubjectError):
            nc.subscribe("ok", queue=queue)
    for key in BAD_KEYS:
        with pytest.raises(BadHeaderError):
            nc.publish("ok", b"x", headers={key: "v"})
        with pytest.raises(BadHeaderError):
            nc.publish("ok", b"x", headers=[("Good", "v"), (key, "v")])
    for value in BAD_VALUES:
        with pytest.raises(BadHeaderError):
            nc.publish("ok", b"x", headers={"Key": value})
        with pytest.raises(BadHeaderError):
            nc.publish("ok", b"x", headers={"Key": ["fine", value]})
    assert isinstance(BadSubjectError("x"), ValueError) and isinstance(BadHeaderError("x"), ValueError)

    nc.flush(timeout=2)
    assert proxy.captured("up")[len(before) :] == b"PING\r\n", "bytes left the client for invalid input"
    assert nc.is_connected

    # valid input still works, including the request mux that the failed requests did not set up
    responder = clients(nats_server.url)
    responder.subscribe("ok.svc", callback=lambda m: m.respond(b"pong"))
    responder.flush(timeout=2)
    assert nc.request("ok.svc", b"ping", timeout=2).data == b"pong"
    sub = nc.subscribe("ok.hdr")
    nc.publish("ok.hdr", b"x", headers={"Key": ["tab\tok", "colon: ok"]})
    m = collect(sub, 1)[0]
    assert m.headers is not None and m.headers.get_all("Key") == ["tab\tok", "colon: ok"]
    hpubs = [f for f in split_frames(proxy.captured("up")) if f.startswith(b"HPUB ok.hdr ")]
    assert len(hpubs) == 1
    line, rest = hpubs[0].split(b"\r\n", 1)
    hdr_len = int(line.split()[-2])
    block = rest[:hdr_len]
    assert block.endswith(b"\r\n\r\n") and not block.endswith(b"\r\n\r\n\r\n")
    assert block.count(b"\r\n\r\n") == 1


def test_publish_from_many_threads_with_bad_input_mixed_in(
    nats_server: NatsServer, fault_proxy: ProxyFactory, clients: Callable[..., Client]
) -> None:
    """Rejected input in one thread never corrupts the frames of another."""
    proxy = fault_proxy(nats_server)
    nc = clients(proxy.url)
    reader = clients(nats_server.url)
    sub = reader.subscribe("mix.>")
    reader.flush(timeout=2)
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        for i in range(300):
            try:
                nc.publish("mix.%d" % t, b"%d" % i, headers={"N": str(i)})
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)
            for bad in ("a b", "a\r\nPUB x 1"):
                try:
                    nc.publish(bad, b"x")
                except BadSubjectError:
                    pass
            try:
                nc.publish("mix.bad", b"x", headers={"K": "a\r\nb"})
            except BadHeaderError:
                pass

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(20)
    assert not errors
    nc.flush(timeout=5)
    got = collect(sub, 1200, 10)
    per: dict[str, list[int]] = {}
    for m in got:
        assert m.headers is not None and m.headers["N"] == m.data.decode()
        per.setdefault(m.subject, []).append(int(m.data))
    assert per == {"mix.%d" % t: list(range(300)) for t in range(4)}
    frames = split_frames(proxy.captured("up"))
    assert not any(f.startswith(b"PUB x") or b"mix.bad" in f for f in frames)
    wait_until(lambda: nc.is_connected, 1.0)
