"""jscore.pull.FetchMachine: fetch / next in virtual time (TESTPLAN 27, 29, 30, 31)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jscore.errors import (
    PinIdMismatchError,
    ConnectionLostError,
    ConsumerDeletedError,
    FetchTimeoutError,
    LocalProtocolError,
    MaxBytesExceededError,
    NoHeartbeatError,
    PullNoRespondersError,
)
from jscore.pull import (
    BYTES_MODE_BATCH,
    ConnectionLost,
    ConnectionRestored,
    Drain,
    ConsumerGone,
    FetchEnd,
    FetchFinished,
    FetchMachine,
    MessagesTaken,
    PinIdChanged,
    PinIdCleared,
    PullRequested,
    FETCH_RESEND_BACKOFF,
    FETCH_RESENDS,
    MIN_LATER_EXPIRES,
    NO_WAIT_SILENCE,
    Stop,
    fetch_grace,
    resolve_fetch_options,
)

from .test_pull_helpers import body, delivered, events, heartbeat, of_type, pulls, status, user


def fetch(now: float = 0.0, **kwargs: object) -> tuple[FetchMachine, PullRequested]:
    m = FetchMachine(resolve_fetch_options(**kwargs), now)  # type: ignore[arg-type]
    [p] = pulls(events(m))
    return m, p


def finished(m: FetchMachine) -> FetchFinished:
    [end] = of_type(events(m), FetchFinished)
    return end


def test_three_available_of_ten_end_with_the_408() -> None:
    m, p = fetch(max_messages=10, expires=1)
    assert body(p) == {"expires": 1_000_000_000, "batch": 10}
    for i in range(3):
        m.receive_msg(user(), 0.1 * i)
    assert len(delivered(events(m))) == 3 and not m.finished
    m.receive_msg(status(408, "Request Timeout", pending=7, pending_bytes=0), 1.0)
    end = finished(m)
    assert (end.error, end.delivered, end.status) == (None, 3, 408)


def test_nothing_available_ends_empty_without_error() -> None:
    m, _ = fetch(max_messages=10, expires=1)
    m.receive_msg(status(408, "Request Timeout", pending=10, pending_bytes=0), 1.0)
    end = finished(m)
    assert (end.error, end.delivered) == (None, 0)


def test_ends_when_the_batch_is_complete() -> None:
    m, _ = fetch(max_messages=3)
    for _ in range(3):
        m.receive_msg(user(), 0.1)
    evs = events(m)
    assert len(delivered(evs)) == 3 and isinstance(evs[-1], FetchFinished)
    assert evs[-1].reason == "batch complete" and evs[-1].status is None
    m.receive_msg(user(), 0.2)
    assert events(m) == [] and m.ignored == 1


def test_by_bytes_ends_when_the_bytes_are_reached() -> None:
    m, p = fetch(max_bytes=1000, expires=5)
    assert (p.batch, p.max_bytes) == (BYTES_MODE_BATCH, 1000)
    m.receive_msg(user(600), 0.1)
    assert not m.finished
    m.receive_msg(user(400), 0.2)
    end = finished(m)
    assert (end.error, end.delivered) == (None, 2) and m.delivered_bytes == 1000


def test_max_bytes_exceeded_errors_only_if_nothing_fit() -> None:
    m, _ = fetch(max_bytes=1024, expires=5)
    m.receive_msg(status(409, "Message Size Exceeds MaxBytes", pending=BYTES_MODE_BATCH, pending_bytes=1024), 0.1)
    assert isinstance(finished(m).error, MaxBytesExceededError)
    m, _ = fetch(max_bytes=1024, expires=5)
    m.receive_msg(user(500), 0.1)
    m.receive_msg(status(409, "Message Size Exceeds MaxBytes", pending=BYTES_MODE_BATCH - 1, pending_bytes=524), 0.2)
    end = finished(m)
    assert end.error is None and end.delivered == 1


def test_consumer_deleted() -> None:
    m, _ = fetch(max_messages=5)
    m.receive_msg(status(409, "Consumer Deleted"), 0.5)
    end = finished(m)
    assert type(end.error) is ConsumerDeletedError and end.status == 409
    assert m.next_deadline() is None


def test_client_timer_is_longer_than_expires_and_ends_with_a_fetch_timeout() -> None:
    """The server ends every pull (408 at expires): a client timer that runs out means a
    silent server or a lost answer, and the result says so (the messages are kept)."""
    m, _ = fetch(max_messages=5, expires=2)
    deadline = m.next_deadline()
    assert deadline is not None and 2.0 < deadline <= 2.5
    m.receive_msg(user(), 1.0)
    m.handle_timeout(deadline - 0.001)
    assert not m.finished
    m.handle_timeout(deadline)
    end = finished(m)
    assert (end.delivered, end.reason, end.end) == (1, "client timer expired", FetchEnd.CLIENT_TIMER)
    assert type(end.error) is FetchTimeoutError and isinstance(end.error, TimeoutError)
    assert "1 message(s) arrived" in str(end.error)


def test_a_no_wait_fetch_without_answer_ends_after_a_second_of_silence() -> None:
    """A no_wait pull is answered at once and without pauses: a second without anything ends
    it with FetchTimeoutError (it used to wait out the 5 s client timer with no error)."""
    m, _ = fetch(max_messages=5, no_wait=True)
    assert m.next_deadline() == NO_WAIT_SILENCE
    m.handle_timeout(NO_WAIT_SILENCE - 0.001)
    assert not m.finished
    m.handle_timeout(NO_WAIT_SILENCE)
    end = finished(m)
    assert type(end.error) is FetchTimeoutError and end.end is FetchEnd.CLIENT_TIMER and end.delivered == 0
    # messages keep it alive: the silence counts from the last one, then the 404 ends it cleanly
    m, _ = fetch(max_messages=5, no_wait=True)
    for t in (0.5, 1.2, 1.9):
        m.receive_msg(user(), t)
    m.handle_timeout(2.5)
    assert not m.finished and m.next_deadline() == 1.9 + NO_WAIT_SILENCE
    m.receive_msg(status(404, "No Messages"), 2.6)
    end = finished(m)
    assert (end.error, end.delivered, end.end) == (None, 3, FetchEnd.STATUS)
    # with expires the server's own expiry applies (no silence rule)
    m, _ = fetch(max_messages=5, no_wait=True, expires=3)
    assert m.next_deadline() == 3 + fetch_grace(3)


def test_late_messages_after_the_client_timer_are_ignored() -> None:
    """TESTPLAN 29: delayed server bytes arrive after the client gave up: not delivered."""
    m, _ = fetch(max_messages=5, expires=2)
    m.handle_timeout(2.5)
    assert finished(m).delivered == 0
    m.receive_msg(user(), 2.6)
    m.receive_msg(status(408, "Request Timeout", pending=5, pending_bytes=0), 2.6)
    assert events(m) == [] and m.ignored == 2


def test_no_wait() -> None:
    m, p = fetch(max_messages=5, no_wait=True)
    assert p.body == b'{"batch":5,"no_wait":true}'
    assert m.next_deadline() == NO_WAIT_SILENCE  # (the 5 s client timer is the outer bound)
    m.receive_msg(user(), 0.01)
    m.receive_msg(status(404, "No Messages"), 0.02)
    end = finished(m)
    assert (end.error, end.delivered, end.status) == (None, 1, 404)


def test_missing_heartbeats_end_with_no_heartbeat_error() -> None:
    m, _ = fetch(max_messages=5, expires=30)  # heartbeat 5 by default
    assert m.next_deadline() == 10.0
    m.receive_msg(heartbeat(), 4.0)
    m.handle_timeout(10.0)
    assert not m.finished and m.next_deadline() == 14.0
    m.receive_msg(user(), 13.0)
    assert m.next_deadline() == 23.0
    m.handle_timeout(23.0)
    end = finished(m)
    assert isinstance(end.error, NoHeartbeatError) and isinstance(end.error, TimeoutError)
    assert end.delivered == 1


def test_connection_lost_ends_with_the_connection_error() -> None:
    m, _ = fetch(max_messages=5)
    cause = OSError("reset by peer")
    m.handle(ConnectionLost(error=cause), 1.0)
    end = finished(m)
    assert isinstance(end.error, ConnectionLostError) and end.error.__cause__ is cause
    m.handle(ConnectionRestored(), 2.0)
    m.handle(MessagesTaken(count=1), 2.0)
    assert events(m) == []


@pytest.mark.parametrize("cmd", [Stop(), Drain()])
def test_stop(cmd: Stop | Drain) -> None:
    m, _ = fetch(max_messages=5)
    m.handle(cmd, 1.0)
    assert finished(m).reason == "stopped"
    m.handle(cmd, 1.1)
    assert events(m) == []


def test_pin_id_is_sent_reported_and_a_423_ends_with_pin_id_mismatch() -> None:
    m, p = fetch(max_messages=5, group="G", pin_id="P1", priority=1)
    assert (body(p)["group"], body(p)["id"], body(p)["priority"]) == ("G", "P1", 1)
    m.receive_msg(user(pin="P2"), 0.1)
    assert of_type(events(m), PinIdChanged) == [PinIdChanged(pin_id="P2")]
    m.receive_msg(status(423, "Nats-Wrong-Pin-Id", pending=4, pending_bytes=0), 0.2)
    evs = events(m)
    # A fetch is one pull: the pin it held dies with it; the 423 is its end (as in nats.go).
    assert of_type(evs, PinIdCleared) == []
    assert isinstance(evs[-1], FetchFinished) and isinstance(evs[-1].error, PinIdMismatchError)


def test_heartbeat_and_flow_control_do_not_end_it() -> None:
    m, _ = fetch(max_messages=5, expires=30)
    m.receive_msg(heartbeat(), 1.0)
    m.receive_msg(status(100, "FlowControl Request", reply="fc"), 1.0)
    assert [type(e).__name__ for e in events(m)] == ["FlowControlReplyRequested"]
    assert not m.finished


def test_poisoned_after_an_exception() -> None:
    m, _ = fetch(max_messages=5)
    with pytest.raises(LocalProtocolError):
        m.handle(object(), 0.0)  # type: ignore[arg-type]
    with pytest.raises(LocalProtocolError):
        m.receive_msg(user(), 0.1)
    with pytest.raises(LocalProtocolError):
        m.next_event()
    # What was decided before the break is still handed over (the session delivers it before
    # it reports the failure), and nothing after it.
    assert m.drain_events() == []


def test_events_decided_before_a_break_are_handed_over() -> None:
    m, _ = fetch(max_messages=5)
    m.receive_msg(user(), 0.1)
    with pytest.raises(LocalProtocolError):
        m.handle(object(), 0.2)  # type: ignore[arg-type]
    assert [type(e).__name__ for e in m.drain_events()] == ["MessageDelivered"]
    with pytest.raises(LocalProtocolError):
        m.receive_msg(user(), 0.3)


def test_next_is_fetch_one() -> None:
    m, p = fetch(max_messages=1, expires=5)
    assert body(p) == {"expires": 5_000_000_000, "batch": 1}
    m.receive_msg(user(), 0.3)
    evs = events(m)
    assert len(delivered(evs)) == 1 and isinstance(evs[-1], FetchFinished)


def test_every_end_is_typed() -> None:
    """What ended a fetch is a FetchEnd, never to be read from the free-text reason: only the
    server's ends (batch reached, a status line) say that nothing more is coming."""
    m, _ = fetch(max_messages=1, expires=1)
    m.receive_msg(user(), 0.1)
    end = finished(m)
    assert end.end is FetchEnd.BATCH_COMPLETE and end.server_ended

    m, _ = fetch(max_bytes=100, expires=1)
    m.receive_msg(user(100), 0.1)
    assert finished(m).end is FetchEnd.BATCH_COMPLETE

    for st_ in (status(408, "Request Timeout"), status(404, "No Messages"), status(409, "Consumer Deleted"),
                status(423, "Nats-Pin-Id mismatch")):
        m, _ = fetch(max_messages=5, expires=1)
        m.receive_msg(st_, 0.5)
        end = finished(m)
        assert end.end is FetchEnd.STATUS and end.server_ended and end.status == st_.status
    m, _ = fetch(max_messages=5, expires=1)
    m.receive_msg(status(503), 0.5)  # (sent again first: see the no-responders tests)
    m.handle(Stop(), 0.51)
    assert finished(m).end is FetchEnd.STOPPED

    m, _ = fetch(max_messages=5, expires=1)
    m.handle_timeout(1.25)
    end = finished(m)
    assert end.end is FetchEnd.CLIENT_TIMER and not end.server_ended and type(end.error) is FetchTimeoutError

    m, _ = fetch(max_messages=5, expires=2, heartbeat=0.5)
    m.handle_timeout(1.0)
    end = finished(m)
    assert end.end is FetchEnd.HEARTBEAT_MISSED and not end.server_ended

    for cmd, kind in ((Stop(), FetchEnd.STOPPED), (Drain(), FetchEnd.STOPPED),
                      (ConnectionLost(), FetchEnd.CONNECTION_LOST),
                      (ConsumerGone(error=ConsumerDeletedError("gone")), FetchEnd.CONSUMER_GONE)):
        m, _ = fetch(max_messages=5, expires=1)
        m.handle(cmd, 0.1)  # type: ignore[arg-type]
        end = finished(m)
        assert end.end is kind and not end.server_ended


# ============================================================================ 503: nobody received the pull


def resend_due(m: FetchMachine) -> float:
    at = m.next_deadline()
    assert at is not None
    return at


def test_a_pull_nobody_received_is_sent_again_with_what_is_left_of_its_expiry() -> None:
    """On a cluster a consumer just created answers 503 until its leader's interest reaches the
    client's server: the fetch sends the same pull again (nobody received it, so nothing can be
    delivered twice), with the expiry it has left, and the client timer does not move."""
    m, first = fetch(max_messages=5, expires=2)
    deadline = 2 + fetch_grace(2)
    assert body(first) == {"batch": 5, "expires": 2_000_000_000}
    m.receive_msg(status(503), 0.1)
    assert events(m) == [] and not m.finished
    at = resend_due(m)
    assert at == pytest.approx(0.1 + FETCH_RESEND_BACKOFF)
    m.handle_timeout(at - 0.001)
    assert events(m) == []
    m.handle_timeout(at)
    [again] = pulls(events(m))
    assert body(again) == {"batch": 5, "expires": round((2 - at) * 1e9)}
    m.receive_msg(user(), 0.2)
    m.receive_msg(status(408, "Request Timeout"), 2.0)
    evs = events(m)
    assert len(delivered(evs)) == 1
    [end] = of_type(evs, FetchFinished)
    assert end.error is None and end.delivered == 1 and end.status == 408
    # (the client timer was never moved by the re-send)
    m2, _ = fetch(max_messages=5, expires=2)
    m2.receive_msg(status(503), 0.1)
    m2.handle_timeout(resend_due(m2))
    events(m2)
    assert m2.next_deadline() == pytest.approx(deadline)


def test_no_responders_ends_the_fetch_after_the_last_resend() -> None:
    m, _ = fetch(max_messages=5, expires=5)
    now, gaps = 0.1, []
    for _ in range(FETCH_RESENDS):
        m.receive_msg(status(503), now)
        at = resend_due(m)
        gaps.append(round(at - now, 6))
        m.handle_timeout(at)
        assert len(pulls(events(m))) == 1
        now = at + 0.001
    assert gaps == [FETCH_RESEND_BACKOFF * 2**i for i in range(FETCH_RESENDS)]
    m.receive_msg(status(503), now)
    end = finished(m)
    assert type(end.error) is PullNoRespondersError and end.end is FetchEnd.STATUS and end.status == 503
    assert m.finished and m.next_deadline() is None


def test_no_resend_once_a_message_arrived_or_without_room() -> None:
    m, _ = fetch(max_messages=5, expires=5)
    m.receive_msg(user(), 0.1)
    m.receive_msg(status(503), 0.2)
    end = finished(m)
    assert type(end.error) is PullNoRespondersError and end.delivered == 1
    # too little of the expiry left at the re-send: ends at once
    m, _ = fetch(max_messages=5, expires=1)
    m.receive_msg(status(503), 1 - FETCH_RESEND_BACKOFF - MIN_LATER_EXPIRES + 0.001)
    assert type(finished(m).error) is PullNoRespondersError
    # a timer that fires too late for the re-send ends it then
    m, _ = fetch(max_messages=5, expires=1)
    m.receive_msg(status(503), 0.1)
    m.handle_timeout(0.99)
    end = finished(m)
    assert type(end.error) is PullNoRespondersError and pulls([]) == []
    # the ordered consumer's inner fetch does not re-send (it recreates its consumer)
    inner = FetchMachine(resolve_fetch_options(max_messages=5, expires=5), 0.0, resend_on_no_responders=False)
    events(inner)
    inner.receive_msg(status(503), 0.1)
    assert type(finished(inner).error) is PullNoRespondersError


def test_a_resent_pull_lowers_its_heartbeat_to_fit() -> None:
    """The server refuses a heartbeat over half the expiry: the re-sent pull halves what is
    left, or goes without one under the minimum; the watchdog follows the pull it sent."""
    m, first = fetch(max_messages=5, expires=10)
    assert body(first)["idle_heartbeat"] == 5_000_000_000
    m.receive_msg(status(503), 0.1)
    m.handle_timeout(resend_due(m))
    [again] = pulls(events(m))
    b = body(again)
    assert b["idle_heartbeat"] * 2 <= b["expires"] and b["idle_heartbeat"] > 4_900_000_000
    m.receive_msg(heartbeat(), 0.2)
    m.handle_timeout(0.2 + 2 * b["idle_heartbeat"] / 1e9 + 0.001)
    assert finished(m).end is FetchEnd.HEARTBEAT_MISSED

    m, _ = fetch(max_messages=5, expires=1.05, heartbeat=0.5)
    m.receive_msg(status(503), 0.05)
    m.handle_timeout(resend_due(m))
    [again] = pulls(events(m))
    assert "idle_heartbeat" not in body(again)
    m.handle_timeout(0.9)  # (no watchdog now: nothing ends it before the server's 408)
    assert events(m) == [] and not m.finished


def test_a_no_wait_pull_is_sent_again_as_it_was() -> None:
    m, first = fetch(max_messages=5, no_wait=True)
    m.receive_msg(status(503), 0.01)
    m.handle_timeout(resend_due(m))
    [again] = pulls(events(m))
    assert again.body == first.body


def test_a_message_while_a_resend_waits_calls_it_off() -> None:
    for arrived in (user(), heartbeat()):
        m, _ = fetch(max_messages=5, expires=5, heartbeat=1)
        m.receive_msg(status(503), 0.1)
        m.receive_msg(arrived, 0.12)  # (not expected after a 503, but then the pull is served)
        m.handle_timeout(0.5)
        assert pulls(events(m)) == [] and not m.finished


def test_the_connection_lost_while_a_resend_waits_ends_the_fetch() -> None:
    m, _ = fetch(max_messages=5, expires=5)
    m.receive_msg(status(503), 0.1)
    m.handle(ConnectionLost(), 0.12)
    end = finished(m)
    assert end.end is FetchEnd.CONNECTION_LOST and type(end.error) is ConnectionLostError
    assert m.next_deadline() is None


@given(
    st.floats(0.0, 1e6, allow_nan=False), st.floats(0.0, 0.5, allow_nan=False),
    st.sampled_from([1.0, 2.0, 9.5, 10.0, 30.0, 61.3]), st.sampled_from([None, 0.5, 1.0, 4.9]),
)
def test_a_resent_pull_never_asks_for_a_heartbeat_over_half_its_expiry(
    t0: float, after: float, expires: float, hb: float | None
) -> None:
    """The server compares 2 x idle_heartbeat with expires in whole nanoseconds: each is
    rounded on its own, so half of an odd expiry must not round up past it."""
    if hb is not None and 2 * hb > expires:
        hb = expires / 2
    m, first = fetch(t0, max_messages=5, expires=expires, heartbeat=hb)
    for p in [first]:
        b = body(p)
        assert 2 * b.get("idle_heartbeat", 0) <= b["expires"]
    m.receive_msg(status(503), t0 + after)
    if m.finished:
        return
    m.handle_timeout(resend_due(m))
    for p in pulls(events(m)):
        b = body(p)
        assert 2 * b.get("idle_heartbeat", 0) <= b["expires"], b


@given(st.floats(0.001, 1e5, allow_nan=False), st.floats(0.0, 1.0))
def test_a_heartbeat_of_half_the_expiry_fits_in_nanoseconds(expires: float, share: float) -> None:
    from jscore.pull import build_pull_request
    import json

    hb = expires / 2 * share
    b = json.loads(build_pull_request(batch=1, expires=expires, heartbeat=hb or None))
    assert 2 * b.get("idle_heartbeat", 0) <= b["expires"]
