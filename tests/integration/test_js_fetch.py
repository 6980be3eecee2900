"""fetch / next and JetStream acks against a real nats-server (TESTPLAN 27-32 and REFERENCE
"Fetch / next", "Acks"): what a fetch returns and when, typed ends (MaxBytesExceeded,
ConsumerDeleted, NoMessages), no lingering pulls after many short fetches (nats.py#933), late
messages after the client deadline (nats.js#149), options refused before anything is sent, and
every acknowledgement kind with its observable effect on the server."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone

import pytest

from jscore.errors import (
    ConsumerDeletedError,
    InvalidOptionError,
    MaxBytesExceededError,
    MsgAlreadyAckedError,
    NoMessagesError,
    PullNoRespondersError,
)
from jscore.models import StorageType
from jssync import Client
from jssync.server import NatsServer
from tests.integration import clients
from tests.integration._jspull import PullEnv, seqs_of, wait_until
from tests.support.proxy import FaultProxy

__all__ = ["clients"]

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def env(nats_url: str, clients: Callable[..., Client]) -> Iterator[PullEnv]:
    e = PullEnv(clients(nats_url), clients(nats_url))
    yield e
    e.cleanup()


def _timed(fn: Callable[[], object]) -> tuple[object, float]:
    t = time.monotonic()
    out = fn()
    return out, time.monotonic() - t


# =============================================================================== 27: fetch / next


@pytest.mark.timeout(20)
def test_fetch_returns_what_is_available_by_expires(env: PullEnv) -> None:
    """TESTPLAN 27: 3 msgs, fetch(batch=10, expires=1 s) -> those 3, within expires + 1 s."""
    sent = env.publish(3)
    c = env.consumer("D")
    result = c.fetch(10, expires=1.0)
    msgs, took = _timed(result.messages)
    assert [m.data for m in msgs] == sent  # type: ignore[attr-defined]
    assert result.error is None and result.done
    # The server keeps the pull open for the other 7 until it expires (408), then it ends.
    assert 0.8 <= took <= 2.0, took
    assert seqs_of(msgs) == [1, 2, 3]  # type: ignore[arg-type]


@pytest.mark.timeout(20)
def test_fetch_empty_ends_without_error_by_expires(env: PullEnv) -> None:
    """TESTPLAN 27: no msgs -> empty result (no error) within expires + 1 s; next() raises
    NoMessagesError, a builtin TimeoutError, within its timeout + 1 s."""
    c = env.consumer("D")
    result = c.fetch(10, expires=1.0)
    msgs, took = _timed(result.messages)
    assert msgs == [] and result.error is None
    assert 0.8 <= took <= 2.0, took
    t = time.monotonic()
    with pytest.raises(NoMessagesError) as ei:
        c.next(timeout=1.0)
    assert isinstance(ei.value, TimeoutError)
    assert 0.8 <= time.monotonic() - t <= 2.0


@pytest.mark.timeout(20)
def test_fetch_full_batch_returns_at_once(env: PullEnv) -> None:
    env.publish(5)
    c = env.consumer("D")
    msgs, took = _timed(lambda: c.fetch(5, expires=5.0).messages())
    assert len(msgs) == 5  # type: ignore[arg-type]
    assert took < 1.0, "a complete batch must not wait for expires"


@pytest.mark.timeout(20)
def test_fetch_no_wait(env: PullEnv) -> None:
    c = env.consumer("D")
    msgs, took = _timed(lambda: c.fetch(10, no_wait=True).messages())
    assert msgs == [] and took < 1.0
    sent = env.publish(3)
    # (no_wait answers with what the consumer has now: the server counts stored messages into
    # the consumer asynchronously, which a loaded machine makes visible)
    wait_until(lambda: c.info().num_pending == 3, timeout=5, what="the consumer to see the 3 messages")
    result = c.fetch(10, no_wait=True)
    msgs, took = _timed(result.messages)
    assert [m.data for m in msgs] == sent and took < 1.0  # type: ignore[attr-defined]
    assert result.error is None


@pytest.mark.timeout(20)
def test_fetch_is_iterable_as_messages_arrive(env: PullEnv) -> None:
    """Messages are handed out as they come, not when the fetch ends."""
    c = env.consumer("D")
    env.publish(1)
    result = c.fetch(10, expires=2.0)
    t = time.monotonic()
    it = iter(result)
    first = next(it)
    assert first.data == b"m0" and time.monotonic() - t < 1.0
    assert not result.done
    env.publish(1, start=1)
    assert next(it).data == b"m1"
    assert list(it) == [] and result.done and result.error is None


@pytest.mark.timeout(20)
def test_next_returns_one_message_in_order(env: PullEnv) -> None:
    sent = env.publish(3)
    c = env.consumer("D")
    got = []
    for _ in range(3):
        m, took = _timed(lambda: c.next(timeout=2.0))
        assert took < 1.0
        got.append(m.data)  # type: ignore[attr-defined]
        m.ack()  # type: ignore[attr-defined]
    assert got == sent


@pytest.mark.timeout(20)
def test_fetch_by_bytes(env: PullEnv) -> None:
    """fetch(max_bytes=...) sends batch 1,000,000 + max_bytes and stops at the byte limit."""
    env.publish(10, size=100)
    c = env.consumer("D")
    pulls = env.pulls("D")
    result = c.fetch(max_bytes=450, expires=1.0)
    msgs = result.messages()
    # Each message counts subject + payload (+ headers) against max_bytes: 100-byte payloads
    # fit at most 4 in 450 bytes, at least 1.
    assert 1 <= len(msgs) <= 4 and result.error is None
    assert sum(m.size for m in msgs) <= 450
    assert [m.data for m in msgs] == [f"m{i}".encode().ljust(100, b".") for i in range(len(msgs))]
    wait_until(lambda: pulls.count >= 1, 2.0)
    body = pulls.bodies()[0]
    assert body["batch"] == 1_000_000 and body["max_bytes"] == 450


# =============================================================================== 28: many short fetches


@pytest.mark.timeout(60)
def test_500_short_fetches_leave_no_lingering_pulls(env: PullEnv) -> None:
    """TESTPLAN 28 (nats.py#933/#986): 500 back-to-back fetch(batch=5, expires=0.1 s) with
    random publishes: no call exceeds expires + 0.5 s; num_waiting <= 1 after each call; every
    published message is delivered exactly once."""
    rng = random.Random(933)
    c = env.consumer("D")
    published: list[bytes] = []
    delivered: list[bytes] = []
    backlog = 0
    worst = 0.0
    short = 0
    for i in range(500):
        # Mostly full batches (fast), sometimes a short one that waits for the 408.
        if rng.random() < 0.15:
            n = 0 if backlog >= 5 else rng.randint(0, 4 - backlog)
        else:
            n = rng.randint(max(0, 5 - backlog), 7)
        published += env.publish(n, start=len(published))
        backlog += n
        t = time.monotonic()
        msgs = c.fetch(5, expires=0.1).messages()
        took = time.monotonic() - t
        worst = max(worst, took)
        assert took <= 0.6, f"fetch #{i} took {took:.3f}s"
        if len(msgs) < 5:
            short += 1
        for m in msgs:
            m.ack()
        delivered += [m.data for m in msgs]
        backlog -= len(msgs)
        info = c.info()
        assert info.num_waiting <= 1, f"after fetch #{i}: {info.num_waiting} pulls still waiting"
    delivered += [m.data for m in c.fetch(1000, no_wait=True).messages()]
    assert delivered == published, "every message once, in order"
    assert short >= 30, "the run must exercise the expiry path too"


# =============================================================================== 29: late messages


@pytest.mark.timeout(30)
def test_late_messages_after_client_deadline_go_nowhere_then_redeliver(
    nats_url: str, clients: Callable[..., Client], fault_proxy: Callable[..., FaultProxy]
) -> None:
    """TESTPLAN 29 (nats.js#149): the proxy delays server->client bytes by expires + 0.5 s.
    The fetch returns at its own deadline; the late messages are neither delivered to a later
    fetch nor acked; the server redelivers them after ack_wait (num_delivered 2)."""
    proxy = fault_proxy(nats_url)
    # Slow pings: the delay must not look like a stale connection.
    nc = clients(proxy.url, ping_interval=30.0)
    env = PullEnv(nc, clients(nats_url))
    try:
        c = env.consumer("D", ack_wait=3.0)
        sent = env.publish(3)
        nc.flush(timeout=2.0)
        proxy.delay(1.5, "down")
        before = proxy.bytes_down
        t0 = time.monotonic()
        first = c.fetch(10, expires=1.0)
        assert first.messages() == []
        took = time.monotonic() - t0
        # Client timer: expires + grace (>= 0.25 s), before the delayed bytes arrive.
        assert 1.0 <= took <= 1.5, took
        assert proxy.bytes_down == before, "the proxy let the messages through early"
        # A second fetch at once: the first one's messages reach the client (t0 + 1.5 s) while
        # it waits; they must not be handed to it. Its own pull expires at t0 + ~2.3 s, before
        # the server's redelivery (ack_wait 3 s), so it must end empty.
        second = c.fetch(10, expires=1.0)
        assert second.messages() == [], "late messages of an abandoned fetch leaked into the next"
        assert proxy.bytes_down - before >= 3 * 40, "the late messages did arrive meanwhile"
        assert time.monotonic() - t0 < 3.0, "the second fetch must end before ack_wait passed"
        proxy.clear()
        info = c.info()
        assert info.delivered.consumer_seq >= 3
        assert info.ack_floor.stream_seq == 0 and info.num_ack_pending == 3, "late messages must not be acked"
        # After ack_wait the server redelivers them.
        third = c.fetch(3, expires=4.0)
        redelivered = third.messages()
        assert [m.data for m in redelivered] == sent
        assert all(m.metadata.num_delivered == 2 for m in redelivered)
        for m in redelivered:
            m.ack()
    finally:
        env.cleanup()


# =============================================================================== 30: max_bytes


@pytest.mark.timeout(20)
def test_fetch_message_larger_than_max_bytes_raises_typed_error(env: PullEnv) -> None:
    """TESTPLAN 30: a single 2 KiB message vs fetch(max_bytes=1 KiB) -> MaxBytesExceededError
    promptly (not after expires), nothing delivered."""
    env.publish(1, size=2048)
    c = env.consumer("D")
    result = c.fetch(max_bytes=1024, expires=2.0)
    msgs, took = _timed(result.messages)
    assert msgs == []
    assert isinstance(result.error, MaxBytesExceededError)
    assert result.error.code == 409
    assert took < 1.0, took
    # A pull big enough gets it.
    ok = c.fetch(max_bytes=4096, expires=1.0).messages()
    assert len(ok) == 1 and len(ok[0].data) == 2048


# =============================================================================== 31: deleted consumer


@pytest.mark.timeout(20)
def test_fetch_in_flight_consumer_deleted(env: PullEnv) -> None:
    """TESTPLAN 31: delete the consumer while a fetch waits -> ConsumerDeletedError <= 1 s;
    no further pull is sent."""
    c = env.consumer("D")
    pulls = env.pulls("D")
    result = c.fetch(10, expires=5.0)
    wait_until(lambda: pulls.count == 1, 2.0, what="the pull")
    t = time.monotonic()
    env.js.delete_consumer(env.name, "D")
    msgs = result.messages()
    took = time.monotonic() - t
    assert msgs == []
    assert isinstance(result.error, ConsumerDeletedError)
    assert took <= 1.0, took
    env.nc.flush(timeout=2.0)
    env.mon.flush(timeout=2.0)
    assert pulls.count == 1


@pytest.mark.timeout(20)
def test_next_in_flight_consumer_deleted(env: PullEnv) -> None:
    c = env.consumer("D")
    pulls = env.pulls("D")
    out: dict[str, object] = {}

    def run() -> None:
        try:
            out["msg"] = c.next(timeout=5.0)
        except BaseException as exc:  # noqa: BLE001
            out["error"] = exc
            out["at"] = time.monotonic()

    th = threading.Thread(target=run)
    th.start()
    wait_until(lambda: pulls.count == 1, 2.0, what="the pull")
    t = time.monotonic()
    env.js.delete_consumer(env.name, "D")
    th.join(3.0)
    assert not th.is_alive()
    assert isinstance(out.get("error"), ConsumerDeletedError), out
    assert out["at"] - t <= 1.0  # type: ignore[operator]
    assert pulls.count == 1


@pytest.mark.timeout(20)
def test_fetch_sends_a_pull_nobody_received_again_then_ends_typed(env: PullEnv) -> None:
    """A 503 (no responders) means nobody received the pull: on a cluster a consumer just
    created answers so until its leader's interest reaches this server, so a fetch sends the
    same pull again three times (50, 100, 200 ms apart) before it ends with
    PullNoRespondersError. Here the consumer is gone, so every one of them is answered 503."""
    c = env.consumer("D")
    env.js.delete_consumer(env.name, "D")
    before = env.nc.stats
    result = c.fetch(10, expires=5.0)
    msgs, took = _timed(result.messages)
    after = env.nc.stats
    assert msgs == [] and isinstance(result.error, PullNoRespondersError)  # type: ignore[attr-defined]
    assert after["msgs_out"] - before["msgs_out"] == 4  # the pull and three re-sends
    assert after["msgs_in"] - before["msgs_in"] == 4  # each answered 503 by the server
    assert 0.3 <= took < 3.0, took  # (the three waits between them: 0.35 s)
    with pytest.raises(PullNoRespondersError):
        c.next(timeout=5.0)


# =============================================================================== 32: invalid options


@pytest.mark.timeout(20)
def test_invalid_fetch_and_consume_options_refused_before_sending(env: PullEnv) -> None:
    """TESTPLAN 32 at the API: InvalidOptionError at call time, and no pull leaves."""
    c = env.consumer("D")
    pulls = env.pulls("D")
    bad_fetches: list[Callable[[], object]] = [
        lambda: c.fetch(5, expires=2.0, heartbeat=1.5),  # heartbeat > expires / 2
        lambda: c.fetch(0),
        lambda: c.fetch(-1),
        lambda: c.fetch(5, expires=-1.0),
        lambda: c.fetch(),  # neither max_messages nor max_bytes
        lambda: c.next(timeout=2.0, heartbeat=1.5),
    ]
    for call in bad_fetches:
        with pytest.raises(InvalidOptionError):
            call()
    bad_consumes = [
        dict(max_messages=10, max_bytes=1000),
        dict(max_messages=10, threshold_messages=11),
        dict(max_bytes=1000, threshold_bytes=1001),
        dict(expires=2.0, heartbeat=1.5),
        dict(expires=0.5),
        dict(max_messages=0),
    ]
    for opts in bad_consumes:
        with pytest.raises(InvalidOptionError):
            c.consume(lambda m: None, **opts)  # type: ignore[arg-type]
        with pytest.raises(InvalidOptionError):
            c.messages(**opts)  # type: ignore[arg-type]
    env.nc.flush(timeout=2.0)
    env.mon.flush(timeout=2.0)
    assert pulls.count == 0


# =============================================================================== acks


@pytest.mark.timeout(20)
def test_ack_is_recorded_and_not_redelivered(env: PullEnv) -> None:
    c = env.consumer("D", ack_wait=1.0)
    env.publish(2)
    m1, m2 = c.fetch(2, expires=1.0).messages()
    m1.ack()
    assert m1.acked and not m2.acked
    wait_until(lambda: c.info().ack_floor.stream_seq == 1, 2.0, what="ack floor 1")
    # After ack_wait only the unacked one comes back (acked as it arrives, so only once).
    again = []
    for m in c.fetch(5, expires=2.0):
        m.ack()
        again.append(m)
    assert [m.data for m in again] == [b"m1"] and again[0].metadata.num_delivered == 2


@pytest.mark.timeout(20)
def test_ack_sync_confirmed_on_return(env: PullEnv) -> None:
    c = env.consumer("D")
    env.publish(1)
    (m,) = c.fetch(1, expires=1.0).messages()
    assert m.ack_sync(timeout=2.0) is None
    info = c.info()  # no waiting: ack_sync returned, so the server has it
    assert info.ack_floor.stream_seq == 1 and info.num_ack_pending == 0
    with pytest.raises(MsgAlreadyAckedError):
        m.ack_sync(timeout=2.0)


@pytest.mark.timeout(20)
def test_nak_redelivers_at_once(env: PullEnv) -> None:
    c = env.consumer("D")
    env.publish(1)
    m = c.next(timeout=2.0)
    m.nak()
    again, took = _timed(lambda: c.next(timeout=2.0))
    assert took < 1.0
    assert again.data == m.data and again.metadata.num_delivered == 2  # type: ignore[attr-defined]
    assert again.metadata.sequence.stream == m.metadata.sequence.stream  # type: ignore[attr-defined]
    again.ack()  # type: ignore[attr-defined]


@pytest.mark.timeout(20)
def test_nak_with_delay_redelivers_later(env: PullEnv) -> None:
    c = env.consumer("D")
    env.publish(1)
    m = c.next(timeout=2.0)
    t = time.monotonic()
    m.nak(delay=1.0)
    assert c.fetch(1, expires=0.5).messages() == [], "redelivered before the nak delay"
    again = c.next(timeout=3.0)
    assert time.monotonic() - t >= 0.9
    assert again.data == m.data and again.metadata.num_delivered == 2
    again.ack()


@pytest.mark.timeout(20)
def test_in_progress_extends_ack_wait(env: PullEnv) -> None:
    """+WPI every 0.3 s keeps a message with ack_wait 1 s from being redelivered for 2 s;
    once the WPIs stop, it is redelivered (the control: this test can fail)."""
    c = env.consumer("D", ack_wait=1.0)
    env.publish(1)
    m = c.next(timeout=2.0)
    got: list[object] = []
    th = threading.Thread(target=lambda: got.extend(c.fetch(1, expires=2.2).messages()))
    th.start()
    end = time.monotonic() + 2.0
    while time.monotonic() < end:
        m.in_progress()
        time.sleep(0.3)
    th.join(3.0)
    assert not th.is_alive()
    assert got == [], "redelivered although in_progress() kept extending ack_wait"
    assert not m.acked
    # Stop sending WPI: after ack_wait it comes back.
    again = c.next(timeout=3.0)
    assert again.data == m.data and again.metadata.num_delivered == 2
    again.ack()
    m.ack()  # the first delivery was never terminally acked: allowed (the server ignores it)


@pytest.mark.timeout(20)
def test_term_stops_redelivery(env: PullEnv) -> None:
    c = env.consumer("D", ack_wait=1.0)
    env.publish(1)
    m = c.next(timeout=2.0)
    m.term(reason="bad payload")
    assert m.acked
    assert c.fetch(1, expires=2.0).messages() == [], "a terminated message was redelivered"
    info = c.info()
    assert info.num_ack_pending == 0 and info.num_redelivered == 0


@pytest.mark.timeout(20)
def test_second_terminal_ack_raises_before_sending(env: PullEnv) -> None:
    c = env.consumer("D")
    acks = env.acks()
    env.publish(2)
    m, w = c.fetch(2, expires=1.0).messages()
    m.ack()
    for again in (m.ack, m.nak, m.term, m.in_progress, lambda: m.ack_sync(timeout=1.0)):
        with pytest.raises(MsgAlreadyAckedError):
            again()
    # +WPI may repeat before the terminal ack.
    w.in_progress()
    w.in_progress()
    w.nak(delay=30.0)
    with pytest.raises(MsgAlreadyAckedError):
        w.ack()
    env.nc.flush(timeout=2.0)
    wait_until(lambda: acks.count >= 4, 2.0, what="4 acks")
    env.mon.flush(timeout=2.0)
    bodies = [d for (_, d) in acks.items]
    assert bodies[0] == b"+ACK"
    assert bodies[1:3] == [b"+WPI", b"+WPI"] and bodies[3].startswith(b"-NAK")
    assert len(bodies) == 4, f"a refused ack reached the wire: {bodies}"


@pytest.mark.timeout(20)
def test_metadata_matches_consumer_info(env: PullEnv) -> None:
    c = env.consumer("D")
    acks = [env.js.publish(env.subject(), f"m{i}".encode()) for i in range(5)]
    msgs = c.fetch(3, expires=1.0).messages()
    now = datetime.now(timezone.utc)
    info = c.info()
    for i, m in enumerate(msgs):
        md = m.metadata
        assert md.stream == env.name and md.consumer == "D" and md.domain is None
        assert md.num_delivered == 1
        assert md.sequence.stream == acks[i].seq and md.sequence.consumer == i + 1
        assert md.num_pending == 5 - (i + 1)
        assert md.timestamp.tzinfo is not None and abs(now - md.timestamp) < timedelta(seconds=10)
    last = msgs[-1].metadata
    assert info.delivered.consumer_seq == last.sequence.consumer
    assert info.delivered.stream_seq == last.sequence.stream
    assert info.num_pending == last.num_pending == 2
    assert info.num_ack_pending == 3
    # Redelivery bumps num_delivered, keeps the stream sequence, takes a new consumer sequence.
    msgs[0].nak()
    rest = c.fetch(3, expires=1.0).messages()  # the nak'd one and m3, m4, in either order
    (r,) = [m for m in rest if m.metadata.sequence.stream == msgs[0].metadata.sequence.stream]
    assert r.metadata.num_delivered == 2 and r.metadata.sequence.consumer in (4, 5, 6)
    assert sorted(m.metadata.sequence.consumer for m in rest) == [4, 5, 6]


# =============================================================================== durable file store


@pytest.mark.timeout(30)
def test_fetch_from_file_stream_after_restart(
    nats_server_factory: Callable[..., NatsServer], clients: Callable[..., Client]
) -> None:
    """A durable consumer on a file stream keeps its ack state across a server restart: the
    next fetch resumes after the acked messages."""
    server = nats_server_factory(jetstream_config="sync_interval: always")
    nc = clients(server.url)
    env = PullEnv(nc, clients(server.url), storage=StorageType.FILE)
    c = env.consumer("D")
    env.publish(4)
    for m in c.fetch(2, expires=1.0).messages():
        m.ack_sync(timeout=2.0)
    # A graceful restart: nats-server 2.15 does not write a durable's ack floor at each ack,
    # so after a SIGKILL acked messages may come back (see test_js_consume, scenario 36).
    server.restart()
    wait_until(lambda: nc.is_connected, 10.0, what="reconnect")
    msgs: list[object] = []

    def fetch_rest() -> bool:
        try:
            msgs.extend(c.fetch(10, expires=1.0).messages())
        except Exception:  # noqa: BLE001 - JetStream may still be recovering
            return False
        return len(msgs) >= 2

    wait_until(fetch_rest, 10.0, what="the remaining messages")
    assert [m.data for m in msgs] == [b"m2", b"m3"]  # type: ignore[attr-defined]
