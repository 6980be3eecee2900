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
from jscore.errors import ConnectionLostError, FetchTimeoutError, InvalidOptionError, PubAckTimeoutError
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


# ---------------------------------------------------------------- pulls against a silent server


@pytest.fixture
def paused_pull_env(
    nats_server_factory: Callable[..., Any], clients: Callable[..., Client]
) -> Iterator[tuple[Any, Client, Any, Any]]:
    """A stream with 3 messages, a durable pull consumer and an ordered consumer, then the
    server is paused (SIGSTOP). The client's pings are slow (30 s), so the link is not found
    stale during the test: the server is simply silent."""
    srv = nats_server_factory()
    nc = clients(srv.url, ping_interval=30.0)
    js = nc.jetstream()
    js.create_stream(name="SIL", subjects=["sil.>"], storage="memory")
    for i in range(3):
        js.publish("sil.a", b"%d" % i)
    consumer = js.create_consumer("SIL", durable_name="D")
    oc = js.ordered_consumer("SIL")
    assert [m.data for m in oc.fetch(3, expires=1.0)] == [b"0", b"1", b"2"]  # (its consumer is ready)
    srv.pause()
    try:
        yield srv, nc, consumer, oc
    finally:
        srv.resume()


def test_a_fetch_from_a_silent_server_ends_by_its_deadline_and_says_so(
    paused_pull_env: tuple[Any, Client, Any, Any],
) -> None:
    """The server never ends the pull (no 408): the fetch ends by its client timer (expires +
    grace) with FetchTimeoutError, a TimeoutError, rather than looking like an empty stream;
    next() raises it."""
    _, _, consumer, _ = paused_pull_env
    t0 = time.monotonic()
    result = consumer.fetch(10, expires=1.0)
    assert result.messages() == []
    took = time.monotonic() - t0
    assert isinstance(result.error, FetchTimeoutError) and isinstance(result.error, TimeoutError), result.error
    assert 1.0 <= took < 2.5, f"the fetch took {took:.2f} s"
    t0 = time.monotonic()
    with pytest.raises(FetchTimeoutError):
        consumer.next(timeout=1.0)
    assert time.monotonic() - t0 < 2.5


def test_a_no_wait_fetch_from_a_silent_server_ends_within_a_second_or_so(
    paused_pull_env: tuple[Any, Client, Any, Any],
) -> None:
    """A no_wait pull is answered at once by a live server: one second without an answer ends
    it with FetchTimeoutError (it used to wait 5 s and end with no error at all)."""
    _, _, consumer, _ = paused_pull_env
    t0 = time.monotonic()
    result = consumer.fetch(10, no_wait=True)
    assert result.messages() == []
    took = time.monotonic() - t0
    assert isinstance(result.error, FetchTimeoutError), result.error
    assert took < 2.0, f"the no_wait fetch took {took:.2f} s"


def test_ordered_next_and_fetch_keep_the_caller_s_deadline_against_a_silent_server(
    paused_pull_env: tuple[Any, Client, Any, Any],
) -> None:
    """The ordered consumer's next(timeout) and fetch(expires) return by their own deadline
    (plus the grace) while the server is paused, whatever resets happen underneath."""
    _, _, _, oc = paused_pull_env
    for _ in range(2):
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            oc.next(timeout=1.0)
        assert time.monotonic() - t0 < 2.0
        t0 = time.monotonic()
        try:  # (a TimeoutError when no server consumer could even be made ready in its time)
            assert list(oc.fetch(10, expires=1.0)) == []
        except TimeoutError:
            pass
        assert time.monotonic() - t0 < 2.0
    assert oc.state.resets >= 1  # the pull the server never ended was given up


def test_a_fetch_cut_off_by_a_lost_connection_says_so(
    nats_server_factory: Callable[..., Any], clients: Callable[..., Client]
) -> None:
    """The connection drops while a fetch waits: it ends at once with ConnectionLostError."""
    srv = nats_server_factory()
    nc = clients(srv.url)
    js = nc.jetstream()
    js.create_stream(name="LOST", subjects=["lost.>"], storage="memory")
    consumer = js.create_consumer("LOST", durable_name="D")
    result = consumer.fetch(10, expires=10.0)
    threading.Timer(0.3, srv.kill).start()
    t0 = time.monotonic()
    assert result.messages() == []
    assert isinstance(result.error, ConnectionLostError), result.error
    assert time.monotonic() - t0 < 3.0


def test_a_no_wait_fetch_at_max_ack_pending_is_held_silent_by_a_live_server(
    nats_server_factory: Callable[..., Any], clients: Callable[..., Client]
) -> None:
    """A live server holds a no_wait pull without a word while the consumer is at
    max_ack_pending: the fetch ends by the silence rule (FetchTimeoutError, saying that this
    may be the cause, not only a dead server) and loses nothing: once the first message is
    acked the next no_wait fetch gets the second."""
    srv = nats_server_factory()
    js = clients(srv.url).jetstream()
    js.create_stream(name="MAP", subjects=["map.>"], storage="memory")
    for i in range(3):
        js.publish("map.a", b"%d" % i)
    consumer = js.create_consumer("MAP", durable_name="D", max_ack_pending=1)
    [first] = consumer.fetch(1, no_wait=True).messages()
    t0 = time.monotonic()
    held = consumer.fetch(1, no_wait=True)
    assert held.messages() == []
    assert time.monotonic() - t0 < 2.0
    assert isinstance(held.error, FetchTimeoutError), held.error
    assert "max_ack_pending" in str(held.error), held.error
    first.ack_sync()
    assert [m.data for m in consumer.fetch(1, no_wait=True).messages()] == [b"1"]
