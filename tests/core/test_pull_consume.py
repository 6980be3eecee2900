"""jscore.pull.ConsumeMachine: ADR-37's consume algorithm in virtual time.

Accounting with the local buffer, thresholds, max_messages=1, the heartbeat watchdog
(TESTPLAN 35), disconnect and reconnect (5), 409 Leadership Change (34), no spin on 409
MaxBytes (30), 503 backoff and K (37), priority groups and pins (52), stop and drain (43),
poisoning, and a port of nats.go's TestPullConsumer_checkPending table.
"""

from __future__ import annotations

import json

import pytest

from jscore.errors import (
    ConnectionClosedError,
    ConnectionLostError,
    ConsumerDeletedError,
    ConsumerNotFoundError,
    InvalidOptionError,
    LocalProtocolError,
    MaxBytesExceededError,
    NoHeartbeatError,
    PullNoRespondersError,
)
from jscore.pull import (
    BYTES_MODE_BATCH,
    ConnectionClosed,
    ConnectionLost,
    ConnectionRestored,
    ConsumeMachine,
    ConsumeOptions,
    ConsumeTerminated,
    ConsumerCheckRequested,
    ConsumerGone,
    ConsumerPresent,
    Drain,
    InboxDrained,
    HeartbeatMissed,
    MessagesTaken,
    PinIdChanged,
    PinIdCleared,
    PullEvent,
    PullRequested,
    StatusWarning,
    Stop,
    heartbeat_check_after,
    resolve_consume_options,
)

from .test_pull_helpers import body, delivered, events, heartbeat, of_type, pulls, status, user


def machine(now: float = 0.0, **kwargs: object) -> tuple[ConsumeMachine, PullRequested]:
    m = ConsumeMachine(resolve_consume_options(**kwargs), now)  # type: ignore[arg-type]
    [p] = pulls(events(m))
    return m, p


def batches(m: ConsumeMachine) -> list[int]:
    return [body(p)["batch"] for p in pulls(events(m))]


# ============================================================================ accounting


def test_first_pull_fills_the_buffer() -> None:
    m, p = machine(max_messages=10, expires=4)
    assert body(p) == {"expires": 4_000_000_000, "batch": 10, "idle_heartbeat": 2_000_000_000}
    assert (p.batch, p.max_bytes) == (10, 0)
    assert (m.pending_messages, m.buffered_messages, m.pulls_sent) == (10, 0, 1)


def test_delivery_moves_pending_to_buffered_without_pulling() -> None:
    m, _ = machine(max_messages=10)
    for i in range(10):
        m.receive_msg(user(100), 0.1 * i)
    evs = events(m)
    assert len(delivered(evs)) == 10 and pulls(evs) == []
    assert (m.pending_messages, m.pending_bytes, m.buffered_messages, m.buffered_bytes) == (0, 0, 10, 1000)
    assert m.delivered == 10


def test_slow_handler_keeps_memory_flat() -> None:
    """Nothing taken: no pull however many pulls expire; the buffer never exceeds max."""
    m, _ = machine(max_messages=10, expires=2)
    for _ in range(7):
        m.receive_msg(user(), 0.5)
    m.receive_msg(status(408, "Request Timeout", pending=3, pending_bytes=0), 1.0)
    assert pulls(events(m)) == []  # 0 pending + 7 buffered > threshold 5
    m.handle(MessagesTaken(count=1, size=100), 1.1)
    assert pulls(events(m)) == []  # 6 buffered
    m.handle(MessagesTaken(count=1, size=100), 1.2)
    assert batches(m) == [5]  # 5 buffered <= 5: ask for the free room only
    assert m.pending_messages + m.buffered_messages == 10


def test_takes_trigger_pulls_at_the_threshold() -> None:
    m, _ = machine(max_messages=10)
    for _ in range(10):
        m.receive_msg(user(), 0.1)
    events(m)
    m.handle(MessagesTaken(count=4, size=400), 0.2)
    assert batches(m) == []  # 6 > 5
    m.handle(MessagesTaken(count=1, size=100), 0.3)
    assert batches(m) == [5]  # 5 <= 5: pull 10 - 5
    m.handle(MessagesTaken(count=5, size=500), 0.4)
    assert batches(m) == [5]  # pending 5 + buffered 0 <= 5: refill the 5 free
    assert (m.pending_messages, m.buffered_messages) == (10, 0)


def test_takes_never_make_the_counters_negative() -> None:
    m, _ = machine(max_messages=10)
    m.handle(MessagesTaken(count=5, size=500), 0.1)
    assert (m.buffered_messages, m.buffered_bytes) == (0, 0)
    m.receive_msg(status(408, "Request Timeout", pending=50, pending_bytes=999), 0.2)
    assert (m.pending_messages, m.pending_bytes) == (10, 0)  # re-pulled after the clamp to 0


def test_pending_headers_of_any_status_are_subtracted() -> None:
    """Future-proof (ADR-37): even a heartbeat carrying them counts."""
    m, _ = machine(max_messages=10)
    m.receive_msg(status(100, "Idle Heartbeat", pending=2, pending_bytes=0), 0.1)
    assert m.pending_messages == 8


def test_garbage_pending_headers_are_ignored() -> None:
    m, _ = machine(max_messages=10)
    for raw in ("-5", "abc", "1e309", "", "0x10"):
        m.receive_msg(status(408, "Request Timeout", raw_pending=raw), 0.1)
    assert m.pending_messages == 10
    m.receive_msg(status(408, "Request Timeout", raw_pending="18446744073709551616"), 0.2)
    assert batches(m) == [10]


def test_max_messages_one_does_not_stall() -> None:
    m, p = machine(max_messages=1)
    assert body(p)["batch"] == 1
    for t in range(1, 50):
        m.receive_msg(user(), t)
        assert len(delivered(events(m))) == 1
        m.handle(MessagesTaken(count=1, size=100), t + 0.5)
        assert batches(m) == [1]
    m.receive_msg(status(408, "Request Timeout", pending=1, pending_bytes=0), 60)
    assert batches(m) == [1]


def test_threshold_zero_pulls_only_when_empty() -> None:
    m, _ = machine(max_messages=4, threshold_messages=0)
    for _ in range(4):
        m.receive_msg(user(), 0.1)
    m.handle(MessagesTaken(count=3, size=300), 0.2)
    assert batches(m) == []
    m.handle(MessagesTaken(count=1, size=100), 0.3)
    assert batches(m) == [4]


def test_bytes_mode() -> None:
    m, p = machine(max_bytes=1000, expires=2)
    assert body(p) == {"expires": 2_000_000_000, "batch": BYTES_MODE_BATCH, "max_bytes": 1000, "idle_heartbeat": 1_000_000_000}
    for size in (300, 300):
        m.receive_msg(user(size), 0.1)
    m.handle(MessagesTaken(count=2, size=600), 0.2)
    [p] = pulls(events(m))
    assert (p.batch, p.max_bytes) == (BYTES_MODE_BATCH, 600)  # pending 400 <= threshold 500
    assert m.pending_bytes == 1000
    assert m.pending_messages <= BYTES_MODE_BATCH


# ============================================================================ checkPending port

# nats.go jetstream/test/pull_test.go TestPullConsumer_checkPending, translated: nats.go decides
# from "pending" alone; here the local buffer counts too, so each case delivers messages and
# lets the user take them all (buffered 0) to reach the case's pending count. The cases about a
# fetch in progress and StopAfter have no counterpart (one inbox, no per-pull state, no StopAfter).
CHECK_PENDING = [
    # (name, options, sizes delivered then taken, expected (batch, max_bytes) or None)
    ("msgs threshold not reached, bytes not set, no pull request",
     {"max_messages": 10, "threshold_messages": 5}, [], None),
    ("pending msgs below threshold, send pull request",
     {"max_messages": 10, "threshold_messages": 5}, [100] * 6, (6, 0)),
    ("pending bytes below threshold, send pull request",
     {"max_bytes": 1000, "threshold_bytes": 500}, [300, 300], (BYTES_MODE_BATCH, 600)),
    ("pending bytes above threshold, no pull request",
     {"max_bytes": 1000, "threshold_bytes": 500}, [200, 200], None),
]


@pytest.mark.parametrize(("name", "opts", "sizes", "expected"), CHECK_PENDING, ids=[c[0] for c in CHECK_PENDING])
def test_check_pending(name: str, opts: dict[str, int], sizes: list[int], expected: tuple[int, int] | None) -> None:
    m, _ = machine(**opts)
    for size in sizes:
        m.receive_msg(user(size), 0.1)
    m.handle(MessagesTaken(count=len(sizes), size=sum(sizes)), 0.2)
    got = [(p.batch, p.max_bytes) for p in pulls(events(m))]
    assert got == ([] if expected is None else [expected])


# ============================================================================ heartbeats (TESTPLAN 35)


def test_watchdog_fires_at_twice_the_heartbeat_not_before() -> None:
    m, _ = machine(max_messages=10, expires=2)  # heartbeat 1
    assert m.next_deadline() == 2.0
    m.handle_timeout(1.999)
    assert events(m) == []
    m.handle_timeout(2.0)
    evs = events(m)
    [missed] = of_type(evs, HeartbeatMissed)
    assert missed.idle_for == 2.0 and isinstance(missed.error, NoHeartbeatError)
    assert [body(p)["batch"] for p in pulls(evs)] == [10]  # pending reset, fresh full pull
    assert not m.finished and m.pending_messages == 10
    assert m.next_deadline() == 4.0


@pytest.mark.parametrize("msg", [user(), heartbeat(), status(408, "Request Timeout"), status(409, "Exceeded MaxWaiting")])
def test_any_message_resets_the_watchdog(msg: object) -> None:
    m, _ = machine(max_messages=10, expires=2)
    m.receive_msg(msg, 1.5)  # type: ignore[arg-type]
    events(m)
    assert m.next_deadline() == 3.5
    m.handle_timeout(3.4)
    assert of_type(events(m), HeartbeatMissed) == []


def test_heartbeats_keep_it_alive_forever() -> None:
    m, _ = machine(max_messages=10, expires=2)
    now = 0.0
    for _ in range(100):
        now += 0.9
        m.receive_msg(heartbeat(), now)
        m.handle_timeout(now)
    assert events(m) == []


def test_no_heartbeat_is_owed_when_nothing_is_outstanding() -> None:
    """A full buffer and a slow handler: no pull out, so no heartbeat can be missed."""
    m, _ = machine(max_messages=10, expires=2)
    for _ in range(10):
        m.receive_msg(user(), 0.1)
    events(m)
    assert m.next_deadline() is None
    m.handle_timeout(100.0)
    assert events(m) == []
    m.handle(MessagesTaken(count=10, size=1000), 100.0)
    assert batches(m) == [10]
    assert m.next_deadline() == 102.0  # armed with the new pull


def test_missed_heartbeats_repeat_at_the_same_pace() -> None:
    m, _ = machine(max_messages=10, expires=2)
    fired = []
    now = 0.0
    while now < 10.0:
        now = round(now + 0.1, 3)
        m.handle_timeout(now)
        if of_type(events(m), HeartbeatMissed):
            fired.append(now)
    assert fired == [2.0, 4.0, 6.0, 8.0, 10.0]


def test_watchdog_paused_while_disconnected_and_rearmed_on_reconnect() -> None:
    m, _ = machine(max_messages=10, expires=2)
    m.receive_msg(user(), 1.0)
    m.handle(ConnectionLost(error=OSError("reset")), 1.5)
    assert m.next_deadline() is None
    events(m)
    m.handle_timeout(50.0)
    evs = events(m)
    assert of_type(evs, HeartbeatMissed) == [] and pulls(evs) == []
    m.handle(ConnectionRestored(), 60.0)
    assert m.next_deadline() == 62.0


# ============================================================================ reconnect (TESTPLAN 5)


def test_no_pull_while_disconnected_and_a_fresh_full_pull_on_reconnect() -> None:
    m, _ = machine(max_messages=10, expires=2)
    for _ in range(8):
        m.receive_msg(user(), 0.1)
    events(m)
    m.handle(ConnectionLost(), 0.2)
    m.handle(MessagesTaken(count=6, size=600), 0.3)  # 2 pending + 2 buffered <= 5, but offline
    m.receive_msg(status(408, "Request Timeout", pending=2, pending_bytes=0), 0.3)
    m.handle_timeout(10.0)
    assert pulls(events(m)) == []
    m.handle(ConnectionRestored(), 11.0)
    [p] = pulls(events(m))
    assert body(p)["batch"] == 8  # pending reset to 0; 2 still buffered
    assert (m.pending_messages, m.buffered_messages) == (8, 2)


def test_reconnect_resets_pending_even_above_threshold() -> None:
    m, _ = machine(max_messages=10, expires=2)
    m.handle(ConnectionLost(), 0.1)
    m.handle(ConnectionRestored(), 0.2)
    assert batches(m) == [10]
    assert m.pending_messages == 10


def test_created_offline_pulls_on_connect() -> None:
    m = ConsumeMachine(resolve_consume_options(max_messages=5), 0.0, connected=False)
    assert events(m) == [] and m.next_deadline() is None
    m.handle(ConnectionRestored(), 1.0)
    assert batches(m) == [5]


def test_connection_closed_ends_the_consume() -> None:
    m, _ = machine(max_messages=10)
    cause = ConnectionClosedError("max reconnects")
    m.handle(ConnectionClosed(error=cause), 0.1)
    [end] = of_type(events(m), ConsumeTerminated)
    assert end.error is cause and m.finished
    m2, _ = machine(max_messages=10)
    m2.handle(ConnectionClosed(), 0.1)
    [end] = of_type(events(m2), ConsumeTerminated)
    assert isinstance(end.error, ConnectionLostError)


# ============================================================================ TESTPLAN 34, 30, 37, 38


def test_leadership_change_resets_pending_and_pulls_at_once() -> None:
    m, _ = machine(max_messages=10, expires=2)
    for _ in range(3):
        m.receive_msg(user(), 0.1)
    m.handle(MessagesTaken(count=3, size=300), 0.2)
    assert batches(m) == []  # 7 pending > 5
    m.receive_msg(status(409, "Leadership Change"), 0.3)
    evs = events(m)
    assert [body(p)["batch"] for p in pulls(evs)] == [10]
    assert of_type(evs, StatusWarning) == [] and m.pending_messages == 10


def serve_max_bytes_forever(opts: ConsumeOptions, until: float) -> tuple[int, int]:
    """A server whose next message never fits: every pull gets an immediate 409 MaxBytes."""
    m = ConsumeMachine(opts, 0.0)
    now, n_pulls, n_warnings = 0.0, 0, 0
    while now <= until:
        for ev in m.drain_events():
            if isinstance(ev, PullRequested):
                n_pulls += 1
                m.receive_msg(
                    status(409, "Message Size Exceeds MaxBytes", pending=ev.batch, pending_bytes=ev.max_bytes), now
                )
            elif isinstance(ev, StatusWarning):
                assert isinstance(ev.error, MaxBytesExceededError)
                n_warnings += 1
        deadline = m.next_deadline()
        now = round(now + 0.05, 3) if deadline is None else max(deadline, round(now + 0.05, 3))
        m.handle_timeout(now)
    return n_pulls, n_warnings


@pytest.mark.parametrize("kwargs", [{"max_bytes": 1024, "expires": 2}, {"max_messages": 10, "expires": 2}])
def test_message_larger_than_max_bytes_does_not_spin(kwargs: dict[str, int]) -> None:
    n_pulls, n_warnings = serve_max_bytes_forever(resolve_consume_options(**kwargs), until=20.0)  # type: ignore[arg-type]
    assert n_pulls <= 20.0 / 2 + 1  # at most one pull per expires
    assert n_pulls >= 5  # but it keeps trying
    assert n_warnings == 1  # reported once until a message gets through


def test_max_bytes_status_after_deliveries_is_the_normal_end_of_a_pull() -> None:
    """The server ends every byte-limited pull whose next message does not fit the rest of its
    max_bytes with 409 MaxBytes, also after delivering: that is no oversized message."""
    m, first = machine(max_bytes=1000, expires=2)
    assert first.max_bytes == 1000
    m.receive_msg(user(400), 0.1)
    m.receive_msg(status(409, "Message Size Exceeds MaxBytes", pending=BYTES_MODE_BATCH - 1, pending_bytes=600), 0.2)
    evs = events(m)
    # one message still buffered: no warning, and no pull until the user takes it (re-pulling
    # the same 600-byte remainder would only earn the same status again: a spin)
    assert of_type(evs, StatusWarning) == [] and pulls(evs) == []
    assert m.next_deadline() is None  # nothing outstanding, nothing held by time
    m.handle(MessagesTaken(count=1, size=400), 0.3)
    assert [p.max_bytes for p in pulls(events(m))] == [1000]
    # the buffer empty and the pull delivered: pull again at once, no warning
    m.receive_msg(user(300), 0.4)
    m.handle(MessagesTaken(count=1, size=300), 0.41)
    events(m)
    m.receive_msg(status(409, "Message Size Exceeds MaxBytes", pending=BYTES_MODE_BATCH, pending_bytes=700), 0.5)
    evs = events(m)
    assert of_type(evs, StatusWarning) == [] and len(pulls(evs)) == 1
    # nothing delivered by a pull of the whole budget: the oversized case, warned and held
    m.receive_msg(status(409, "Message Size Exceeds MaxBytes", pending=BYTES_MODE_BATCH, pending_bytes=1000), 0.6)
    evs = events(m)
    assert len(of_type(evs, StatusWarning)) == 1 and pulls(evs) == []
    assert m.next_deadline() == pytest.approx(2.6)


def test_no_responders_backoff_then_end_after_k() -> None:
    m, _ = machine(max_messages=10, expires=30)
    m.receive_msg(status(503), 0.0)
    evs = events(m)
    assert len(of_type(evs, StatusWarning)) == 1 and pulls(evs) == []
    assert m.next_deadline() == 1.0  # no watchdog: nothing outstanding after a 503
    m.handle_timeout(1.0)
    assert batches(m) == [10]
    m.receive_msg(status(503), 1.1)
    assert m.next_deadline() == pytest.approx(3.1)  # doubled
    m.handle_timeout(3.1)
    assert batches(m) == [10]
    m.receive_msg(status(503), 3.2)
    [end] = of_type(events(m), ConsumeTerminated)
    assert isinstance(end.error, PullNoRespondersError) and isinstance(end.error, ConsumerNotFoundError)
    assert m.finished and m.next_deadline() is None


def test_no_responders_limit_is_configurable_and_counts_consecutive_only() -> None:
    m, _ = machine(max_messages=10, no_responders_limit=2)
    m.receive_msg(status(503), 0.0)
    m.handle_timeout(1.0)
    m.receive_msg(heartbeat(), 1.1)  # the consumer answered: the streak is broken
    m.receive_msg(status(503), 1.2)
    assert not m.finished
    m.handle_timeout(2.2)
    m.receive_msg(status(503), 2.3)
    assert m.finished


def test_no_responders_check_asks_the_transport_instead_of_ending() -> None:
    """With no_responders_check every K-th 503 in a row requests a check; the machine keeps
    retrying until the transport answers ConsumerGone, then ends with that error."""
    m, _ = machine(max_messages=10, no_responders_limit=2, no_responders_check=True)
    now, checks = 0.0, 0
    for i in range(6):
        m.receive_msg(status(503), now)
        evs = events(m)
        checks += len(of_type(evs, ConsumerCheckRequested))
        assert len(of_type(evs, StatusWarning)) == 1 and not m.finished
        assert checks == (i + 1) // 2  # at the 2nd, 4th and 6th 503
        deadline = m.next_deadline()
        assert deadline is not None
        now = deadline
        m.handle_timeout(now)
        assert pulls(events(m)), "a 503 is retried after its backoff"
    gone = ConsumerNotFoundError(404, 10014, "consumer not found")
    m.handle(ConsumerGone(error=gone), now)
    [end] = of_type(events(m), ConsumeTerminated)
    assert end.error is gone and "gone" in end.reason and m.finished
    m.handle(ConsumerGone(error=gone), now + 1)  # after the end: nothing more
    assert events(m) == []


# ============================================================================ heartbeat check


def test_a_late_heartbeat_asks_for_a_check_after_one_interval() -> None:
    """heartbeat_check: nothing for one heartbeat (plus a quarter, at most 1 s) while a pull
    is outstanding asks the transport about the consumer, once per silence; the consumer is
    there and still nothing came: pending reset and a fresh pull at once, long before the
    2 x heartbeat watchdog (a leader change the server did not announce to our pulls). The
    watchdog still counts from the last message."""
    m, _ = machine(max_messages=10, expires=30, heartbeat_check=True)  # heartbeat 15
    assert heartbeat_check_after(15.0) == 16.0 and heartbeat_check_after(2.0) == 2.5
    m.receive_msg(heartbeat(), 10.0)
    assert m.next_deadline() == 26.0
    m.handle_timeout(25.999)
    assert events(m) == []
    m.handle_timeout(26.0)
    [check] = of_type(events(m), ConsumerCheckRequested)
    assert isinstance(check.error, NoHeartbeatError)
    assert m.next_deadline() == 40.0  # asked once: the watchdog is next
    m.handle_timeout(27.0)
    assert events(m) == []
    m.handle(ConsumerPresent(), 26.2)
    evs = events(m)
    assert of_type(evs, HeartbeatMissed) == []
    assert batches_of(evs) == [10] and m.pending_messages == 10 and not m.finished
    assert m.next_deadline() == 40.0  # not asked again in this silence; the watchdog is next
    m.handle(ConsumerPresent(), 27.0)  # (a second answer changes nothing)
    assert events(m) == []
    m.receive_msg(heartbeat(), 27.5)  # the new pull is served: a new silence is checked again
    assert m.next_deadline() == 43.5


def test_a_check_answered_after_activity_changes_nothing() -> None:
    m, _ = machine(max_messages=10, expires=4, heartbeat_check=True)  # heartbeat 2: check at 2.5
    m.handle_timeout(2.5)
    assert of_type(events(m), ConsumerCheckRequested)
    m.receive_msg(heartbeat(), 2.6)  # the heartbeat was only late
    m.handle(ConsumerPresent(), 2.7)
    assert events(m) == [] and m.pending_messages == 10
    assert m.next_deadline() == pytest.approx(5.1)


def test_a_check_finding_the_consumer_gone_ends_the_consume() -> None:
    m, _ = machine(max_messages=10, expires=4, heartbeat_check=True)
    m.handle_timeout(2.5)
    events(m)
    gone = ConsumerNotFoundError(404, 10014, "consumer not found")
    m.handle(ConsumerGone(error=gone), 2.6)
    [end] = of_type(events(m), ConsumeTerminated)
    assert end.error is gone and m.finished


def test_an_unanswered_check_leaves_the_watchdog_in_charge() -> None:
    m, _ = machine(max_messages=10, expires=4, heartbeat_check=True)
    m.handle_timeout(2.5)
    assert of_type(events(m), ConsumerCheckRequested)
    m.handle_timeout(4.0)
    evs = events(m)
    assert of_type(evs, HeartbeatMissed) and batches_of(evs) == [10]
    m.handle(ConsumerPresent(), 4.1)  # (a late answer: the watchdog already re-pulled)
    assert events(m) == []


def test_without_heartbeat_check_nothing_is_asked() -> None:
    m, _ = machine(max_messages=10, expires=4)
    assert m.next_deadline() == 4.0
    m.handle_timeout(3.0)
    assert events(m) == []
    m.handle(ConsumerPresent(), 3.0)
    assert events(m) == []


def test_heartbeat_check_must_be_a_bool() -> None:
    with pytest.raises(InvalidOptionError):
        resolve_consume_options(heartbeat_check=1)  # type: ignore[arg-type]


def batches_of(evs: list[PullEvent]) -> list[int]:
    return [body(p)["batch"] for p in pulls(evs)]


def test_no_responders_check_must_be_a_bool() -> None:
    with pytest.raises(InvalidOptionError):
        resolve_consume_options(no_responders_check="yes")  # type: ignore[arg-type]


def _no_responder_delays(backoff: float, n: int = 5) -> list[float]:
    m, _ = machine(max_messages=10, no_responders_limit=100, no_responders_backoff=backoff)
    now = 0.0
    delays = []
    for _ in range(n):
        m.receive_msg(status(503), now)
        deadline = m.next_deadline()
        assert deadline is not None
        delays.append(deadline - now)
        now = deadline
        m.handle_timeout(now)
    return delays


def test_backoff_is_capped() -> None:
    """503s (no consumer leader yet) are retried at least every 2 s: a consume resumes within
    2 s of a consumer leader election, however long it took."""
    assert _no_responder_delays(0.5) == [0.5, 1.0, 2.0, 2.0, 2.0]
    assert _no_responder_delays(1.0) == [1.0, 2.0, 2.0, 2.0, 2.0]
    # a first delay chosen longer than the cap is kept, not doubled
    assert _no_responder_delays(4.0) == [4.0, 4.0, 4.0, 4.0, 4.0]


def test_consumer_deleted_is_terminal() -> None:
    m, _ = machine(max_messages=10)
    m.receive_msg(status(409, "Consumer Deleted"), 0.5)
    [end] = of_type(events(m), ConsumeTerminated)
    assert type(end.error) is ConsumerDeletedError
    m.receive_msg(user(), 0.6)
    m.handle(MessagesTaken(count=1, size=100), 0.6)
    m.handle(ConnectionRestored(), 0.7)
    m.handle_timeout(1000.0)
    assert events(m) == [] and m.next_deadline() is None


# ============================================================================ stop and drain (43)


def test_stop_delivers_nothing_after() -> None:
    m, _ = machine(max_messages=10)
    m.receive_msg(user(), 0.1)
    m.handle(Stop(), 0.2)
    evs = events(m)
    assert of_type(evs, ConsumeTerminated) == [ConsumeTerminated(error=None, reason="stopped")]
    m.receive_msg(user(), 0.3)
    m.receive_msg(status(408, "Request Timeout", pending=9, pending_bytes=0), 0.3)
    m.handle(MessagesTaken(count=1, size=100), 0.4)
    m.handle(Stop(), 0.5)
    assert events(m) == [] and m.ignored == 2


def test_drain_sends_no_pull_delivers_in_flight_and_ends_when_empty() -> None:
    m, _ = machine(max_messages=10)
    for _ in range(4):
        m.receive_msg(user(), 0.1)
    events(m)
    m.handle(Drain(), 0.2)
    assert events(m) == [] and not m.finished and m.next_deadline() is None
    m.receive_msg(user(), 0.3)  # already in flight: delivered
    m.receive_msg(status(408, "Request Timeout", pending=5, pending_bytes=0), 0.3)
    assert len(delivered(events(m))) == 1
    m.handle(InboxDrained(), 0.35)  # the server has seen the UNSUB: nothing more comes
    assert events(m) == [] and not m.finished
    m.handle(MessagesTaken(count=4, size=400), 0.4)
    assert events(m) == []  # one left
    m.handle(MessagesTaken(count=1, size=100), 0.5)
    assert events(m) == [ConsumeTerminated(error=None, reason="drained")]
    m.receive_msg(user(), 0.6)
    assert events(m) == []


def test_drain_with_empty_buffer_waits_for_what_is_in_flight() -> None:
    """The server counts a message delivered (pending its ack) before it reaches us: an empty
    buffer ends a drain only once the inbox is drained (the UNSUB's fence came back)."""
    m, _ = machine(max_messages=10)
    m.handle(Drain(), 0.1)
    assert events(m) == [] and not m.finished and m.next_deadline() is None
    m.receive_msg(user(), 0.2)  # was on its way
    assert len(delivered(events(m))) == 1
    m.handle(MessagesTaken(count=1, size=100), 0.3)
    assert events(m) == []
    m.handle(InboxDrained(), 0.4)
    assert events(m) == [ConsumeTerminated(error=None, reason="drained")]


def test_drain_ends_when_the_inbox_is_drained_and_the_buffer_empty_in_either_order() -> None:
    m, _ = machine(max_messages=10)
    m.handle(Drain(), 0.1)
    m.handle(InboxDrained(), 0.2)
    assert events(m) == [ConsumeTerminated(error=None, reason="drained")]
    m2, _ = machine(max_messages=10)
    m2.receive_msg(user(), 0.1)
    events(m2)
    m2.handle(Drain(), 0.2)
    m2.handle(InboxDrained(), 0.3)
    assert events(m2) == [] and not m2.finished
    m2.handle(MessagesTaken(count=1, size=100), 0.4)
    assert events(m2) == [ConsumeTerminated(error=None, reason="drained")]


# ============================================================================ priority groups (52)


def test_every_pull_carries_the_group_options() -> None:
    m, p = machine(max_messages=4, group="G", min_pending=10, min_ack_pending=3, priority=2)
    assert body(p) == {
        "expires": 30_000_000_000, "batch": 4, "idle_heartbeat": 15_000_000_000,
        "group": "G", "min_pending": 10, "min_ack_pending": 3, "priority": 2,
    }
    m.receive_msg(status(408, "Request Timeout", pending=4, pending_bytes=0), 1)
    [p] = pulls(events(m))
    assert (body(p)["group"], body(p)["min_pending"], body(p)["priority"]) == ("G", 10, 2)


def test_pin_id_from_the_first_pinned_message_is_sent_on_later_pulls() -> None:
    m, p = machine(max_messages=2, group="G")
    assert "id" not in body(p)
    m.receive_msg(user(pin="PIN-1"), 0.1)
    evs = events(m)
    assert of_type(evs, PinIdChanged) == [PinIdChanged(pin_id="PIN-1")]
    m.receive_msg(user(pin="PIN-1"), 0.2)
    assert of_type(events(m), PinIdChanged) == []  # unchanged: no event
    m.handle(MessagesTaken(count=2, size=200), 0.3)
    [p] = pulls(events(m))
    assert body(p)["id"] == "PIN-1"


def test_two_pin_headers_keep_the_last() -> None:
    m, _ = machine(max_messages=2, group="G")
    m.receive_msg(user(pin=["A", "B"]), 0.1)
    assert m.pin_id == "B"


def test_pins_are_ignored_without_a_group() -> None:
    m, _ = machine(max_messages=2)
    m.receive_msg(user(pin="PIN"), 0.1)
    assert m.pin_id is None and of_type(events(m), PinIdChanged) == []


def test_423_with_pending_headers_clears_pin_subtracts_and_repulls_without_id() -> None:
    m, _ = machine(max_messages=10, group="G")
    m.receive_msg(user(pin="OLD"), 0.1)
    events(m)
    m.receive_msg(status(423, "Nats-Wrong-Pin-Id", pending=9, pending_bytes=0), 0.2)
    evs = events(m)
    assert of_type(evs, PinIdCleared) == [PinIdCleared(code=423, description="Nats-Wrong-Pin-Id")]
    [p] = pulls(evs)
    assert body(p)["batch"] == 9 and "id" not in body(p)  # 1 buffered
    assert of_type(evs, ConsumeTerminated) == [] and not m.finished


def test_423_without_headers_resets_pending() -> None:
    m, _ = machine(max_messages=10, group="G", pin_id="STALE")
    m.receive_msg(status(423, "Nats-Pin-Id mismatch"), 0.1)
    evs = events(m)
    [p] = pulls(evs)
    assert body(p)["batch"] == 10 and "id" not in body(p)
    assert m.pin_id is None


# ============================================================================ flow control, poisoning


def test_flow_control_request_is_answered() -> None:
    m, _ = machine(max_messages=10)
    m.receive_msg(status(100, "FlowControl Request", reply="$JS.FC.x.y"), 0.1)
    assert [type(e).__name__ for e in events(m)] == ["FlowControlReplyRequested"]
    m.receive_msg(status(100, "FlowControl Request"), 0.2)  # no reply: nothing to answer
    assert events(m) == []


def test_spurious_timeouts_are_no_ops() -> None:
    m, _ = machine(max_messages=10, expires=2)
    for t in (0.0, 0.5, 1.0, 1.999):
        m.handle_timeout(t)
    assert events(m) == []


def test_deadline_never_stays_in_the_past() -> None:
    m, _ = machine(max_messages=10, expires=2)
    m.receive_msg(status(409, "Message Size Exceeds MaxBytes", pending=10, pending_bytes=0), 0.1)
    m.handle(ConnectionLost(), 0.2)
    deadline = m.next_deadline()
    assert deadline is not None
    m.handle_timeout(deadline)
    next_deadline = m.next_deadline()
    assert next_deadline is None or next_deadline > deadline


def test_an_exception_poisons_the_machine() -> None:
    m, _ = machine(max_messages=10)
    with pytest.raises(LocalProtocolError):
        m.handle(MessagesTaken(count=-1), 0.1)
    with pytest.raises(LocalProtocolError):
        m.receive_msg(user(), 0.2)
    with pytest.raises(LocalProtocolError):
        m.handle_timeout(0.3)
    with pytest.raises(LocalProtocolError):
        m.next_event()


def test_unknown_command_raises() -> None:
    m, _ = machine(max_messages=10)
    with pytest.raises(LocalProtocolError):
        m.handle("stop", 0.1)  # type: ignore[arg-type]


def test_seeded_with_what_the_transport_already_holds() -> None:
    """An ordered consumer's next consume starts with the messages its predecessor delivered
    that the application has not taken yet: they count against the buffer."""
    opts = resolve_consume_options(max_messages=10, threshold_messages=5)
    m = ConsumeMachine(opts, 0.0, buffered_messages=7, buffered_bytes=700)
    assert pulls(events(m)) == [], "7 queued: above the threshold, no pull"
    m.handle(MessagesTaken(count=2, size=200), 0.1)
    [p] = pulls(events(m))
    assert body(p)["batch"] == 10 - 5
    assert (m.buffered_messages, m.pending_messages) == (5, 5)


# ---------------------------------------------------------------- ack_next (+NXT)


def test_ack_next_is_a_counted_pull_of_one_when_there_is_room() -> None:
    from jscore.pull import AckNext, AckNextRequested

    m, _ = machine(max_messages=10, expires=5, group="G")
    for _ in range(3):
        m.receive_msg(user(10, pin="P"), 0.1)
    m.handle(MessagesTaken(count=3, size=30), 0.2)
    events(m)
    assert (m.pending_messages, m.buffered_messages) == (7, 0)
    m.handle(AckNext(reply="$JS.ACK.S.C.1.1.1.1.0"), 0.3)
    [e] = events(m)
    assert isinstance(e, AckNextRequested) and e.pull and e.reply == "$JS.ACK.S.C.1.1.1.1.0"
    assert e.body.startswith(b"+NXT {")
    req = json.loads(e.body[5:])
    assert req["batch"] == 1 and req["expires"] == 5_000_000_000 and req["group"] == "G" and req["id"] == "P"
    assert m.pending_messages == 8  # counted like any pull


def test_ack_next_is_a_plain_ack_without_room_or_while_stopping_or_disconnected() -> None:
    from jscore.pull import AckNext, AckNextRequested

    m, _ = machine(max_messages=2)
    assert m.pending_messages == 2
    m.handle(AckNext(reply="r1"), 0.1)
    assert events(m) == [AckNextRequested(reply="r1", body=b"+ACK", pull=False)]
    assert m.pending_messages == 2
    m.handle(ConnectionLost(), 0.2)
    m.handle(AckNext(reply="r2"), 0.2)
    assert events(m) == [AckNextRequested(reply="r2", body=b"+ACK", pull=False)]
    m2, _ = machine(max_messages=10)
    m2.receive_msg(user(), 0.1)
    m2.handle(Drain(), 0.2)
    events(m2)
    m2.handle(AckNext(reply="r3"), 0.3)
    assert events(m2) == [AckNextRequested(reply="r3", body=b"+ACK", pull=False)]


def test_ack_next_in_bytes_mode_asks_for_the_room_left() -> None:
    from jscore.pull import AckNext

    m, _ = machine(max_bytes=1000)
    m.receive_msg(user(300), 0.1)
    m.handle(MessagesTaken(count=1, size=300), 0.2)
    events(m)
    assert (m.pending_bytes, m.buffered_bytes) == (700, 0)  # above the threshold: no pull yet
    m.handle(AckNext(reply="r"), 0.3)
    [e] = events(m)
    assert e.pull and json.loads(e.body[5:])["max_bytes"] == 300 and m.pending_bytes == 1000
