"""jscore.pull: the status table, and what consume and fetch do with every row.

Two sources check each other: the table itself (every row, with a description synthesized
from it, runs through both machines and must behave as its dispositions say) and an explicit
list of expectations written from REFERENCE.md's "Status lines" table and nats-server's exact
strings (a wrong table row fails there even if the machines follow it faithfully).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from jscore.errors import (
    ConsumerDeletedError,
    ConsumerIsPushBasedError,
    ConsumerNotFoundError,
    JetStreamError,
    MaxBytesExceededError,
    NatsError,
    NoRespondersError,
    PinIdMismatchError,
    PullBadRequestError,
    PullNoRespondersError,
    PullRequestLimitError,
    PullStatusError,
)
from jscore.pull import (
    CONSUME_DISPOSITIONS,
    DISPOSITION_TEXT,
    FETCH_DISPOSITIONS,
    STATUS_TABLE,
    UNKNOWN_STATUS,
    ConsumeMachine,
    ConsumeTerminated,
    Disposition,
    FetchFinished,
    FetchMachine,
    FlowControlReplyRequested,
    MessagesTaken,
    PinIdCleared,
    StatusRule,
    StatusWarning,
    classify_status,
    pending_from_headers,
    resolve_consume_options,
    resolve_fetch_options,
    status_error,
)

from .test_pull_helpers import body, delivered, events, of_type, pulls, status, user

D = Disposition

# ============================================================================ the table as data


def test_every_row_has_the_right_kind_of_disposition() -> None:
    for rule in STATUS_TABLE:
        assert rule.consume in CONSUME_DISPOSITIONS, rule
        assert rule.fetch in FETCH_DISPOSITIONS, rule
        assert rule.note, rule
    assert set(DISPOSITION_TEXT) == set(Disposition)
    # one enum for every context (jscore.status): the pull ones are these
    used = {r.consume for r in STATUS_TABLE} | {r.fetch for r in STATUS_TABLE}
    assert CONSUME_DISPOSITIONS | FETCH_DISPOSITIONS == used


def test_rows_are_unique_and_none_is_shadowed() -> None:
    keys = [(r.code, r.description_prefix) for r in STATUS_TABLE]
    assert len(keys) == len(set(keys))
    for i, rule in enumerate(STATUS_TABLE):
        # An earlier row of the same code whose prefix starts this row's prefix would hide it.
        for earlier in STATUS_TABLE[:i]:
            if earlier.code == rule.code:
                assert not rule.description_prefix.startswith(earlier.description_prefix), (earlier, rule)
        if rule.code is not None:
            assert classify_status(rule.code, rule.description_prefix) is rule
    assert UNKNOWN_STATUS.code is None and STATUS_TABLE[-1] is UNKNOWN_STATUS
    assert [r for r in STATUS_TABLE if r.code is None] == [UNKNOWN_STATUS]


def test_terminal_and_error_rows_name_an_error() -> None:
    for rule in STATUS_TABLE:
        if rule.consume in (
            D.TERMINAL, D.RETRY_BACKOFF, D.WARN_REFUSED_REPULL, D.WARN_BACKOFF_REPULL, D.WARN_NO_SPIN
        ) or rule.fetch in (
            D.END_ERROR,
            D.END_ERROR_IF_EMPTY,
            D.RESEND_PULL,
        ):
            assert rule.error is not None and issubclass(rule.error, JetStreamError), rule


def test_matching_is_by_exact_prefix_never_substring_nor_case() -> None:
    assert classify_status(409, "Consumer Deleted").error is ConsumerDeletedError
    assert classify_status(409, "consumer deleted").error is PullStatusError  # case as sent
    assert classify_status(409, "The Consumer Deleted").error is PullStatusError  # no substring
    assert classify_status(409, "Leadership change").consume is D.WARN_BACKOFF_REPULL  # unknown
    assert classify_status(409, "Exceeded MaxRequestBatch of 100").error is PullRequestLimitError
    assert classify_status(400, "Bad Request - Priority Group missing").error is PullBadRequestError
    assert classify_status(400, "Something").error is PullStatusError
    assert classify_status(503, None).error is PullNoRespondersError
    assert classify_status(503, "").error is PullNoRespondersError
    assert classify_status(409, None).consume is D.WARN_BACKOFF_REPULL
    assert classify_status(100, None).consume is D.HEARTBEAT
    assert classify_status(412, "Required Api Level") is UNKNOWN_STATUS
    assert classify_status(204, "EOB") is UNKNOWN_STATUS


def test_status_error_types() -> None:
    e = status_error(classify_status(409, "Consumer Deleted"), 409, "Consumer Deleted")
    assert type(e) is ConsumerDeletedError and "409 Consumer Deleted" in str(e)
    e = status_error(classify_status(409, "Exceeded MaxWaiting"), 409, "Exceeded MaxWaiting")
    assert isinstance(e, PullRequestLimitError) and (e.code, e.description) == (409, "Exceeded MaxWaiting")
    e = status_error(classify_status(503, None), 503, None)
    assert isinstance(e, PullNoRespondersError)
    assert isinstance(e, ConsumerNotFoundError) and isinstance(e, NoRespondersError)
    assert e.code == 503
    e = status_error(classify_status(400, "Bad Request - x"), 400, "Bad Request - x")
    assert isinstance(e, ValueError)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("5", 5), ("0", 0), ("-5", None), ("abc", None), ("1e309", None), ("", None), ("٣", None),
     ("18446744073709551616", 18446744073709551616), ("1" * 21, None)],
)
def test_pending_headers_are_parsed_leniently(raw: str, expected: int | None) -> None:
    assert pending_from_headers(status(408, "Request Timeout", raw_pending=raw).headers) == (expected, None)


def test_pending_headers_absent() -> None:
    assert pending_from_headers(None) == (None, None)
    assert pending_from_headers(status(408, "Request Timeout").headers) == (None, None)
    assert pending_from_headers(status(408, "x", pending=3, pending_bytes=70).headers) == (3, 70)


# ============================================================================ explicit expectations


@dataclass(frozen=True)
class Expect:
    code: int
    description: str | None
    consume: Disposition
    fetch: Disposition
    error: type[NatsError] | None
    has_pending_headers: bool  # whether the server sends Nats-Pending-* with it


# Written from REFERENCE.md "Status lines" and nats-server's strings, NOT from STATUS_TABLE.
EXPECTED: tuple[Expect, ...] = (
    Expect(100, "Idle Heartbeat", D.HEARTBEAT, D.HEARTBEAT, None, False),
    Expect(100, "FlowControl Request", D.FLOW_CONTROL, D.FLOW_CONTROL, None, False),
    Expect(100, "Something Else", D.HEARTBEAT, D.HEARTBEAT, None, False),
    Expect(404, "No Messages", D.REPULL, D.END, None, False),
    Expect(404, "Not Here", D.REPULL, D.END, None, False),
    Expect(408, "Request Timeout", D.REPULL, D.END, None, True),
    Expect(408, "Interest Expired", D.REPULL, D.END, None, True),
    Expect(408, "Requests Pending", D.REPULL, D.END, None, False),
    Expect(409, "Message Size Exceeds MaxBytes", D.WARN_NO_SPIN, D.END_ERROR_IF_EMPTY, MaxBytesExceededError, True),
    Expect(409, "Batch Completed", D.REPULL, D.END, None, True),
    Expect(409, "Leadership Change", D.RESET_REPULL, D.END, None, False),
    Expect(409, "Server Shutdown", D.WARN_REPULL, D.END, None, True),
    Expect(409, "Exceeded MaxWaiting", D.WARN_REFUSED_REPULL, D.END_ERROR, PullRequestLimitError, False),
    Expect(409, "Exceeded MaxRequestBatch of 100", D.WARN_REFUSED_REPULL, D.END_ERROR, PullRequestLimitError, False),
    Expect(409, "Exceeded MaxRequestExpires of 5s", D.WARN_REFUSED_REPULL, D.END_ERROR, PullRequestLimitError, False),
    Expect(409, "Exceeded MaxRequestMaxBytes of 1024", D.WARN_REFUSED_REPULL, D.END_ERROR, PullRequestLimitError, False),
    Expect(409, "Consumer Deleted", D.TERMINAL, D.END_ERROR, ConsumerDeletedError, False),
    Expect(409, "Consumer is push based", D.TERMINAL, D.END_ERROR, ConsumerIsPushBasedError, False),
    Expect(409, "Stream Deleted", D.WARN_BACKOFF_REPULL, D.END_ERROR, PullStatusError, False),
    Expect(409, "consumer deleted", D.WARN_BACKOFF_REPULL, D.END_ERROR, PullStatusError, False),
    Expect(400, "Bad Request", D.TERMINAL, D.END_ERROR, PullBadRequestError, False),
    Expect(400, "Bad Request - Invalid Priority Group", D.TERMINAL, D.END_ERROR, PullBadRequestError, False),
    Expect(423, "Nats-Wrong-Pin-Id", D.CLEAR_PIN_REPULL, D.END_ERROR, PinIdMismatchError, True),
    Expect(423, "Nats-Pin-Id mismatch", D.CLEAR_PIN_REPULL, D.END_ERROR, PinIdMismatchError, False),
    Expect(423, None, D.CLEAR_PIN_REPULL, D.END_ERROR, PinIdMismatchError, False),
    Expect(503, None, D.RETRY_BACKOFF, D.RESEND_PULL, PullNoRespondersError, False),
    Expect(412, "Required Api Level", D.WARN_BACKOFF_REPULL, D.END_ERROR, PullStatusError, False),
    Expect(500, "Internal", D.WARN_BACKOFF_REPULL, D.END_ERROR, PullStatusError, False),
)


def _id(e: Expect) -> str:
    return f"{e.code} {e.description}"


@pytest.mark.parametrize("exp", EXPECTED, ids=_id)
def test_table_matches_expectations(exp: Expect) -> None:
    rule = classify_status(exp.code, exp.description)
    assert (rule.consume, rule.fetch, rule.error) == (exp.consume, exp.fetch, exp.error)


def test_expectations_cover_every_row() -> None:
    hit = {id(classify_status(e.code, e.description)) for e in EXPECTED}
    missing = [r for r in STATUS_TABLE if id(r) not in hit]
    assert missing == []


# ============================================================================ behaviour per row


def _synthesized(rule: StatusRule) -> Expect:
    """A status line for a table row, with the row's own dispositions."""
    code = 599 if rule.code is None else rule.code
    desc = rule.description_prefix or "Unlisted Description"
    headers = code in (408, 423) or rule.description_prefix in ("Batch Completed", "Server Shutdown") or (
        rule.description_prefix == "Message Size Exceeds MaxBytes"
    )
    return Expect(code, desc, rule.consume, rule.fetch, rule.error, headers)


def _consume_setup() -> tuple[ConsumeMachine, float]:
    """max 10, threshold 5, pinned to P1: pending 4 and buffered 3 (used 7, above threshold)."""
    m = ConsumeMachine(resolve_consume_options(max_messages=10, expires=2, group="G", pin_id="P1"), 0.0)
    [p] = pulls(events(m))
    assert body(p)["batch"] == 10 and body(p)["id"] == "P1"
    for _ in range(6):
        m.receive_msg(user(10), 0.1)
    m.handle(MessagesTaken(count=3, size=30), 0.2)
    assert len(delivered(events(m))) == 6
    assert (m.pending_messages, m.buffered_messages) == (4, 3)
    return m, 0.3


def check_consume(exp: Expect) -> None:
    m, now = _consume_setup()
    reply = "$JS.FC.S.C.x" if exp.consume is D.FLOW_CONTROL else None
    pending = 4 if exp.has_pending_headers else None
    m.receive_msg(status(exp.code, exp.description, pending=pending, pending_bytes=pending and 0, reply=reply), now)
    evs = events(m)
    ps = pulls(evs)
    warnings = of_type(evs, StatusWarning)
    d = exp.consume
    if d is D.HEARTBEAT:
        assert evs == [] and m.pending_messages == 4 and not m.finished
    elif d is D.FLOW_CONTROL:
        assert evs == [FlowControlReplyRequested(reply="$JS.FC.S.C.x")] and m.pending_messages == 4
    elif d in (D.REPULL, D.WARN_REPULL):
        assert len(warnings) == (d is D.WARN_REPULL)
        if exp.has_pending_headers:  # pending 0 + buffered 3 <= 5: a pull for the free room
            assert [body(p)["batch"] for p in ps] == [7] and m.pending_messages == 7
        else:  # nothing subtracted: still above the threshold
            assert ps == [] and m.pending_messages == 4
    elif d is D.RESET_REPULL:
        assert [body(p)["batch"] for p in ps] == [7] and warnings == []
    elif d is D.WARN_NO_SPIN:
        # 3 messages still buffered: the next one may fit once the user takes some; no
        # warning, no pull (the same remainder would earn the same status: a spin) until then.
        assert ps == [] and m.pending_messages == 0 and warnings == []
        m.handle_timeout(now + 5)
        assert pulls(events(m)) == []
        m.handle(MessagesTaken(count=1, size=10), now + 5)
        assert [body(p)["batch"] for p in pulls(events(m))] == [8]
        # with an empty buffer and nothing delivered by the pull: the oversized message
        m2 = ConsumeMachine(resolve_consume_options(max_messages=10, expires=2), 0.0)
        events(m2)
        m2.receive_msg(status(exp.code, exp.description, pending=10 if exp.has_pending_headers else None,
                              pending_bytes=0 if exp.has_pending_headers else None), now)
        evs2 = events(m2)
        assert pulls(evs2) == [] and len(of_type(evs2, StatusWarning)) == 1
        assert isinstance(of_type(evs2, StatusWarning)[0].error, MaxBytesExceededError)
        assert m2.pull_blocked_until == now + 2  # expires
        m2.handle_timeout(now + 1.99)
        assert pulls(events(m2)) == []
        m2.handle_timeout(now + 2)
        assert [body(p)["batch"] for p in pulls(events(m2))] == [10]
    elif d is D.WARN_REFUSED_REPULL:
        # The last pull (batch 10) was refused as it arrived: forgotten (pending 4 - 10 -> 0),
        # warned about, re-pulled at once for the free room (max 10 - buffered 3).
        assert len(warnings) == 1 and not m.finished
        assert exp.error is not None and isinstance(warnings[0].error, exp.error)
        assert [body(p)["batch"] for p in ps] == [7] and m.pending_messages == 7
        # Refused again before any message: the next re-pull waits 1 s, then 2 s (no spin).
        m.receive_msg(status(exp.code, exp.description), now)
        assert pulls(events(m)) == [] and m.next_deadline() == now + 1.0
        m.handle_timeout(now + 1.0)
        assert [body(p)["batch"] for p in pulls(events(m))] == [7]
        m.receive_msg(status(exp.code, exp.description), now + 1.0)
        assert pulls(events(m)) == [] and m.next_deadline() == now + 3.0
        # A message ends the streak: the next refusal re-pulls at once again.
        m.handle_timeout(now + 3.0)
        events(m)
        m.receive_msg(user(10), now + 3.1)
        m.handle(MessagesTaken(count=4, size=40), now + 3.1)
        events(m)
        m.receive_msg(status(exp.code, exp.description), now + 3.2)
        assert len(pulls(events(m))) == 1 and not m.finished
    elif d is D.WARN_BACKOFF_REPULL:
        # Unknown: warned about, never terminal; its pull forgotten; re-pulled after 1 s,
        # doubling up to 10 s while nothing arrives.
        assert len(warnings) == 1 and not m.finished and ps == []
        assert exp.error is not None and isinstance(warnings[0].error, exp.error)
        if not exp.has_pending_headers:
            assert m.pending_messages == 0
        t = now
        for delay in (1.0, 2.0, 4.0, 8.0, 10.0, 10.0):
            assert m.next_deadline() == t + delay
            t += delay
            m.handle_timeout(t)
            assert len(pulls(events(m))) == 1 and not m.finished
            m.receive_msg(status(exp.code, exp.description), t)
            again = events(m)
            assert pulls(again) == [] and len(of_type(again, StatusWarning)) == 1
    elif d is D.TERMINAL:
        [end] = of_type(evs, ConsumeTerminated)
        assert exp.error is not None and type(end.error) is exp.error
        assert m.finished and ps == []
        m.receive_msg(user(), now + 0.1)
        m.handle(MessagesTaken(count=3, size=30), now + 0.1)
        assert events(m) == [] and m.ignored == 1
    elif d is D.CLEAR_PIN_REPULL:
        assert of_type(evs, PinIdCleared) == [PinIdCleared(code=exp.code, description=exp.description or "")]
        assert m.pin_id is None
        [p] = ps  # at once
        assert body(p)["batch"] == 7 and "id" not in body(p) and body(p)["group"] == "G"
        # A 423 also cancels a backoff that was running: the re-pull goes at once.
        m2, t = _consume_setup()
        m2.receive_msg(status(409, "Exceeded MaxWaiting"), t)
        m2.receive_msg(status(409, "Exceeded MaxWaiting"), t)
        assert m2.next_deadline() == t + 1.0
        events(m2)
        m2.receive_msg(status(exp.code, exp.description, pending=m2.pending_messages if exp.has_pending_headers else None,
                              pending_bytes=0 if exp.has_pending_headers else None), t)
        assert len(pulls(events(m2))) == 1 and m2.pin_id is None
    elif d is D.RETRY_BACKOFF:
        assert ps == [] and m.pending_messages == 0 and len(warnings) == 1 and not m.finished
        assert exp.error is not None and isinstance(warnings[0].error, exp.error)
        assert m.next_deadline() == now + 1.0
        m.handle_timeout(now + 1.0)
        assert [body(p)["batch"] for p in pulls(events(m))] == [7]
    else:  # pragma: no cover
        pytest.fail(f"not a consume disposition: {d}")


def check_fetch(exp: Expect) -> None:
    for before in (2, 0):
        m = FetchMachine(resolve_fetch_options(max_messages=5, expires=2, group="G", pin_id="P1"), 0.0)
        assert body(pulls(events(m))[0])["id"] == "P1"
        for _ in range(before):
            m.receive_msg(user(10), 0.1)
        events(m)
        reply = "$JS.FC.S.C.x" if exp.fetch is D.FLOW_CONTROL else None
        pending = 3 if exp.has_pending_headers else None
        m.receive_msg(status(exp.code, exp.description, pending=pending, pending_bytes=pending and 0, reply=reply), 0.2)
        evs = events(m)
        d = exp.fetch
        if d in (D.HEARTBEAT, D.FLOW_CONTROL):
            assert not m.finished
            expected = [FlowControlReplyRequested(reply="$JS.FC.S.C.x")] if d is D.FLOW_CONTROL else []
            assert evs == expected
            continue
        if d is D.RESEND_PULL and not before:  # nobody received the pull: the same one again
            assert evs == [] and not m.finished
            m.handle_timeout(m.next_deadline() or 0.0)
            [again] = pulls(events(m))
            assert body(again)["id"] == "P1" and body(again)["batch"] == 5
            continue
        [end] = of_type(evs, FetchFinished)
        assert evs[-1] is end and m.finished and m.next_deadline() is None
        assert (end.delivered, end.status) == (before, exp.code)
        if d is D.END or (d is D.END_ERROR_IF_EMPTY and before):
            assert end.error is None
        elif d in (D.END_ERROR, D.END_ERROR_IF_EMPTY, D.RESEND_PULL):
            assert exp.error is not None and type(end.error) is exp.error
        else:  # pragma: no cover
            pytest.fail(f"not a fetch disposition: {d}")
        m.receive_msg(user(), 0.3)  # late: ignored
        assert events(m) == [] and m.ignored == 1


@pytest.mark.parametrize("rule", STATUS_TABLE, ids=lambda r: f"{r.code} {r.description_prefix or '*'}")
def test_consume_follows_each_table_row(rule: StatusRule) -> None:
    check_consume(_synthesized(rule))


@pytest.mark.parametrize("rule", STATUS_TABLE, ids=lambda r: f"{r.code} {r.description_prefix or '*'}")
def test_fetch_follows_each_table_row(rule: StatusRule) -> None:
    check_fetch(_synthesized(rule))


@pytest.mark.parametrize("exp", EXPECTED, ids=_id)
def test_consume_expected_behaviour(exp: Expect) -> None:
    check_consume(exp)


@pytest.mark.parametrize("exp", EXPECTED, ids=_id)
def test_fetch_expected_behaviour(exp: Expect) -> None:
    check_fetch(exp)


def test_user_message_with_status_header_is_a_user_message() -> None:
    """Only the header block's first line makes a status; a 'Status: 404' header does not."""
    from jscore.headers import Headers

    m = ConsumeMachine(resolve_consume_options(max_messages=10), 0.0)
    events(m)
    m.receive_msg(user(50, headers=Headers([("Status", "404"), ("Description", "No Messages")])), 0.1)
    assert len(delivered(events(m))) == 1 and m.pending_messages == 9
