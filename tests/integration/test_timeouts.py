"""Every blocking call's timeout is checked before anything is sent, an interrupted call leaves
nothing behind, and a synchronous JetStream publish caught by a disconnect does not wait out its
timeout."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import jssync
from jscore.errors import InvalidOptionError, PubAckTimeoutError
from jssync import Client
from tests.integration import clients  # noqa: F401  (fixture)
from tests.support.proxy import FaultProxy

BAD = [-1, 0, float("nan"), float("inf"), "1", True, None]


def pending(nc: Client) -> tuple[int, int, int]:
    return len(nc._requests), len(nc._conn._requests), len(nc._flushes)


@pytest.mark.parametrize("bad", BAD)
def test_bad_timeouts_are_refused_before_anything_is_sent(nats_url: str, clients: Callable[..., Client], bad: Any) -> None:
    nc = clients(nats_url)
    nc.flush()
    out = nc.stats["msgs_out"]
    calls: list[Callable[[], Any]] = [
        lambda: nc.request("t.svc", b"x", timeout=bad),
        lambda: nc.flush(timeout=bad),
        lambda: nc.jetstream(timeout=bad),
        lambda: nc.drain(timeout=bad),
        lambda: nc.close(timeout=bad),
    ]
    if bad is not None:  # (None: the context's timeout, for JetStream calls)
        calls.append(lambda: nc.jetstream().account_info(timeout=bad))
        calls.append(lambda: nc.jetstream().publish("t.js", b"x", timeout=bad))
    for call in calls:
        with pytest.raises(InvalidOptionError, match="timeout"):
            call()
    assert nc.stats["msgs_out"] == out, "a frame was queued before the timeout was checked"
    assert pending(nc) == (0, 0, 0)
    assert nc.is_connected


@pytest.mark.parametrize("bad", [-1, float("nan"), "1"])
def test_bad_next_msg_timeout(nats_url: str, clients: Callable[..., Client], bad: Any) -> None:
    nc = clients(nats_url)
    sub = nc.subscribe("t.next")
    with pytest.raises(InvalidOptionError, match="timeout"):
        sub.next_msg(timeout=bad)
    with pytest.raises(TimeoutError):
        sub.next_msg(timeout=0)  # (0: do not wait)


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="needs the main thread for signals")
def test_an_interrupted_request_or_flush_leaves_nothing_behind(nats_url: str, clients: Callable[..., Client]) -> None:
    nc = clients(nats_url)
    mute = clients(nats_url)
    mute.subscribe("t.mute")  # listens, never answers: the request waits
    mute.flush()

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            nc.request("t.mute", b"x", timeout=5.0)
        assert time.monotonic() - t0 < 2.0
        assert pending(nc) == (0, 0, 0), "the interrupted request left its entry"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    nc.flush(timeout=2.0)
    assert pending(nc) == (0, 0, 0)


@pytest.fixture
def js_env(nats_url: str, clients: Callable[..., Client], fault_proxy: Callable[..., FaultProxy]) -> Iterator[tuple[Client, FaultProxy, Client]]:
    proxy = fault_proxy(nats_url)
    nc = clients(proxy.url, reconnect_wait=0.1, max_reconnect_attempts=-1)
    admin = clients(nats_url)
    js = admin.jetstream()
    name = f"TO{time.monotonic_ns() % 10**9}"
    js.create_stream(name=name, subjects=[f"{name.lower()}.>"], duplicate_window=60.0)
    nc.name = name  # type: ignore[attr-defined]
    yield nc, proxy, admin
    js.delete_stream(name)


def test_a_sync_publish_in_flight_at_a_disconnect_does_not_wait_out_its_timeout(
    js_env: tuple[Client, FaultProxy, Client],
) -> None:
    """Without a msg id: ambiguous (PubAckTimeoutError) as soon as the connection is lost. With
    one: sent again after the reconnect and acknowledged (duplicate or stored once)."""
    nc, proxy, admin = js_env
    name = nc.name  # type: ignore[attr-defined]
    js = nc.jetstream(timeout=10.0)
    js.publish(f"{name.lower()}.a", b"warm")
    proxy.stall("down")  # the server stores it, its PubAck never arrives
    threading.Timer(0.3, proxy.cut).start()
    t0 = time.monotonic()
    with pytest.raises(PubAckTimeoutError):
        js.publish(f"{name.lower()}.a", b"no-id", timeout=10.0)
    assert time.monotonic() - t0 < 3.0, "the publish waited out its timeout"
    proxy.stall("down", on=False)
    proxy.stall("down")
    threading.Timer(0.3, proxy.cut).start()
    threading.Timer(0.5, lambda: proxy.stall("down", on=False)).start()
    t0 = time.monotonic()
    ack = js.publish(f"{name.lower()}.a", b"with-id", msg_id="m-1", timeout=10.0)
    assert time.monotonic() - t0 < 5.0
    assert ack.seq >= 2
    msgs = admin.jetstream().stream_info(name).state.messages
    assert msgs in (2, 3)  # warm, with-id, and no-id if the server stored it: never two with-id
    again = admin.jetstream().publish(f"{name.lower()}.a", b"with-id", msg_id="m-1")
    assert again.duplicate and again.seq == ack.seq


def test_close_returns_by_its_timeout_with_output_queued_to_a_server_that_does_not_read(
    nats_url: str, clients: Callable[..., Client], fault_proxy: Callable[..., FaultProxy]
) -> None:
    proxy = fault_proxy(nats_url)
    nc = clients(proxy.url, ping_interval=60.0)
    nc.flush()
    proxy.stall("both")  # the server side reads nothing more: our output piles up
    payload = b"x" * 60_000
    for _ in range(300):  # ~18 MB: more than the socket buffers take
        nc.publish("t.close", payload)
    t0 = time.monotonic()
    nc.close(timeout=1.0)
    took = time.monotonic() - t0
    assert took < 1.3, took
    assert nc.is_closed
    with pytest.raises(jssync.errors.ConnectionClosedError):
        nc.publish("t.close", b"x")


def test_connect_to_a_server_that_never_sends_info_is_a_timeout() -> None:
    import socket

    from jscore.errors import ConnectTimeoutError, NoServersError

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)  # accepts (the kernel does), never writes a byte
    try:
        url = f"nats://127.0.0.1:{listener.getsockname()[1]}"
        t0 = time.monotonic()
        with pytest.raises(TimeoutError) as info:
            jssync.connect(url, connect_timeout=0.3, reconnect=False)
        assert isinstance(info.value, ConnectTimeoutError) and isinstance(info.value, NoServersError)
        assert time.monotonic() - t0 < 3.0
    finally:
        listener.close()


def test_connect_has_the_signature_of_client() -> None:
    import inspect

    params = inspect.signature(jssync.connect).parameters
    assert {"servers", "connect_timeout", "reconnect_wait", "pending_bytes_limit"} <= set(params)
    assert params == inspect.signature(jssync.Client).parameters
    assert inspect.signature(jssync.connect).return_annotation is jssync.Client  # what help() shows
    with pytest.raises(TypeError, match="conect_timeout"):
        jssync.connect("nats://127.0.0.1:1", conect_timeout=1.0)  # type: ignore[call-arg]
