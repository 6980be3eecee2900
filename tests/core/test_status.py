"""jscore.status: the one table of status lines and API errors, one expectation per row.

The expectations below are written from the protocol (ADR-37, ADR-31, nats-server's
errors.json and status strings), NOT from the table: a wrong row fails here even if every
machine follows it faithfully. ``test_every_row_has_an_expectation`` makes sure no row goes
untested. Adding a row to jscore/status.py means adding its line here.

The behaviour of each row in its machines is tested where the machines are: pull rows in
tests/core/test_pull_status.py (consume and fetch, every row), direct-get rows in
tests/core/test_directget.py, publish and request rows at the end of this file.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from jscore import errors
from jscore.errors import (
    BadRequestError,
    ConsumerDeletedError,
    ConsumerIsPushBasedError,
    DirectGetNoRespondersError,
    DuplicateMsgIdInProcessError,
    JetStreamAPIError,
    JetStreamError,
    JetStreamNotEnabledError,
    JetStreamUnavailableError,
    MaxBytesError,
    MaxBytesExceededError,
    MaxMsgsError,
    MaxMsgsPerSubjectError,
    MsgNotFoundError,
    NatsError,
    NoRespondersError,
    NoStreamResponseError,
    PinIdMismatchError,
    PubAckTimeoutError,
    PullBadRequestError,
    PullNoRespondersError,
    PullRequestLimitError,
    PullStatusError,
    StoreFailedError,
    TooManySubjectsError,
    WrongLastSequenceError,
)
from jscore.publish import (
    DUPLICATE,
    FAILED,
    PENDING,
    UNKNOWN,
    FrameWindow,
    PendingPublish,
    PublishWindow,
    classify_reply,
)
from jscore.status import (
    ALLOWED,
    DISPOSITION_TEXT,
    FAMILY_CONTEXTS,
    STATUS_TABLE,
    Context,
    Disposition,
    Family,
    Line,
    StatusRule,
    check_table,
    classify,
    classify_api_error,
    request_error,
    rules,
)

D = Disposition
PULL, DIRECT, PUBLISH, REQUEST, API = (
    Family.PULL,
    Family.DIRECT_GET,
    Family.PUBLISH,
    Family.REQUEST,
    Family.API_REQUEST,
)


@dataclasses.dataclass(frozen=True)
class Expect:
    family: Family
    code: int  # the status code; for an API error its HTTP-like code
    description: str | None
    dispositions: tuple[Disposition, ...]  # one per context of the family, in FAMILY_CONTEXTS order
    error: type[NatsError] | None
    err_code: int | None = None  # an API error (publish replies)


def _api(err_code: int, code: int, description: str, d: Disposition, error: type[NatsError] | None) -> Expect:
    return Expect(PUBLISH, code, description, (d,), error, err_code)


EXPECTED: tuple[Expect, ...] = (
    # ---- pull: (consume, fetch)
    Expect(PULL, 100, "Idle Heartbeat", (D.HEARTBEAT, D.HEARTBEAT), None),
    Expect(PULL, 100, "FlowControl Request", (D.FLOW_CONTROL, D.FLOW_CONTROL), None),
    Expect(PULL, 100, "Something New", (D.HEARTBEAT, D.HEARTBEAT), None),
    Expect(PULL, 404, "No Messages", (D.REPULL, D.END), None),
    Expect(PULL, 404, "Nothing", (D.REPULL, D.END), None),
    Expect(PULL, 408, "Request Timeout", (D.REPULL, D.END), None),
    Expect(PULL, 408, "Interest Expired", (D.REPULL, D.END), None),
    Expect(PULL, 408, "Requests Pending", (D.REPULL, D.END), None),
    Expect(PULL, 409, "Message Size Exceeds MaxBytes", (D.WARN_NO_SPIN, D.END_ERROR_IF_EMPTY), MaxBytesExceededError),
    Expect(PULL, 409, "Batch Completed", (D.REPULL, D.END), None),
    Expect(PULL, 409, "Leadership Change", (D.RESET_REPULL, D.END), None),
    Expect(PULL, 409, "Server Shutdown", (D.WARN_REPULL, D.END), None),
    Expect(PULL, 409, "Exceeded MaxWaiting", (D.WARN_REFUSED_REPULL, D.END_ERROR), PullRequestLimitError),
    Expect(PULL, 409, "Exceeded MaxRequestBatch of 10", (D.WARN_REFUSED_REPULL, D.END_ERROR), PullRequestLimitError),
    Expect(PULL, 409, "Exceeded MaxRequestExpires of 1s", (D.WARN_REFUSED_REPULL, D.END_ERROR), PullRequestLimitError),
    Expect(PULL, 409, "Exceeded MaxRequestMaxBytes of 5", (D.WARN_REFUSED_REPULL, D.END_ERROR), PullRequestLimitError),
    Expect(PULL, 409, "Consumer Deleted", (D.TERMINAL, D.END_ERROR), ConsumerDeletedError),
    Expect(PULL, 409, "Consumer is push based", (D.TERMINAL, D.END_ERROR), ConsumerIsPushBasedError),
    Expect(PULL, 409, "Something Else", (D.WARN_BACKOFF_REPULL, D.END_ERROR), PullStatusError),
    Expect(PULL, 400, "Bad Request - Invalid Priority Group", (D.TERMINAL, D.END_ERROR), PullBadRequestError),
    Expect(PULL, 423, "Nats-Wrong-Pin-Id", (D.CLEAR_PIN_REPULL, D.END_ERROR), PinIdMismatchError),
    Expect(PULL, 423, "Nats-Pin-Id mismatch", (D.CLEAR_PIN_REPULL, D.END_ERROR), PinIdMismatchError),
    Expect(PULL, 423, None, (D.CLEAR_PIN_REPULL, D.END_ERROR), PinIdMismatchError),
    Expect(PULL, 503, None, (D.RETRY_BACKOFF, D.RESEND_PULL), PullNoRespondersError),
    Expect(PULL, 412, "Required Api Level", (D.WARN_BACKOFF_REPULL, D.END_ERROR), PullStatusError),
    # ---- direct get: (single, batch)
    Expect(DIRECT, 204, "EOB", (D.ERROR, D.END_OF_BATCH), None),
    Expect(DIRECT, 204, None, (D.ERROR, D.END_OF_BATCH), None),
    Expect(DIRECT, 404, "Message Not Found", (D.ERROR, D.EMPTY), MsgNotFoundError),
    Expect(DIRECT, 408, "Bad Request", (D.ERROR, D.ERROR), BadRequestError),
    Expect(DIRECT, 413, "Too Many Results", (D.ERROR, D.ERROR), TooManySubjectsError),
    Expect(DIRECT, 503, None, (D.ERROR, D.ERROR), DirectGetNoRespondersError),
    Expect(DIRECT, 500, "store closed", (D.ERROR, D.ERROR), None),
    # ---- publish: status lines
    Expect(PUBLISH, 503, None, (D.RESEND,), NoStreamResponseError),
    Expect(PUBLISH, 408, "Request Timeout", (D.REFUSED,), JetStreamError),
    # ---- publish: API errors (err_code, code, description as nats-server sends them)
    _api(10158, 409, "duplicate message id is in process", D.IN_PROCESS, DuplicateMsgIdInProcessError),
    _api(10008, 503, "JetStream system temporarily unavailable", D.RESEND_WITH_MSG_ID, JetStreamUnavailableError),
    _api(10077, 503, "maximum messages per subject exceeded", D.PER_SUBJECT_LIMIT, MaxMsgsPerSubjectError),
    _api(10077, 503, "maximum messages exceeded", D.REFUSED, MaxMsgsError),
    _api(10077, 503, "maximum bytes exceeded", D.REFUSED, MaxBytesError),
    _api(10077, 503, "store is closed", D.REFUSED, StoreFailedError),
    _api(10063, 503, "expected stream sequence does not match", D.RESEND_WITH_MSG_ID, None),
    _api(0, 503, "raft: not leader", D.RESEND_WITH_MSG_ID, None),
    _api(10071, 400, "wrong last sequence: 5", D.REFUSED, None),
    # ---- requests
    Expect(REQUEST, 503, None, (D.ERROR,), NoRespondersError),
    Expect(REQUEST, 404, "Not Found", (D.DELIVER,), None),
    Expect(API, 503, None, (D.ERROR,), JetStreamNotEnabledError),
    Expect(API, 408, "Request Timeout", (D.DELIVER,), None),
)


def _lookup(exp: Expect) -> tuple[StatusRule, ...]:
    """The row each context of the expectation's family picks."""
    if exp.err_code is not None:
        assert exp.description is not None
        return (classify_api_error(Context.PUBLISH, exp.err_code, exp.code, exp.description),)
    return tuple(classify(ctx, exp.code, exp.description) for ctx in FAMILY_CONTEXTS[exp.family])


def _id(exp: Expect) -> str:
    key = f"{exp.err_code}/{exp.code}" if exp.err_code is not None else str(exp.code)
    return f"{exp.family.name}-{key}-{exp.description or '*'}"


@pytest.mark.parametrize("exp", EXPECTED, ids=_id)
def test_each_answer_has_its_expected_row(exp: Expect) -> None:
    found = _lookup(exp)
    assert len(set(map(id, found))) == 1, "every context of a family reads the same row"
    rule = found[0]
    assert rule.family is exp.family
    got = tuple(rule.disposition(ctx) for ctx in FAMILY_CONTEXTS[exp.family])
    assert got == exp.dispositions
    assert rule.error is exp.error


def test_every_row_has_an_expectation() -> None:
    hit = {id(_lookup(e)[0]) for e in EXPECTED}
    missing = [r for r in STATUS_TABLE if id(r) not in hit]
    assert missing == []


# ------------------------------------------------------------------ the table as data


def test_the_table_is_well_formed() -> None:
    check_table()
    assert set(DISPOSITION_TEXT) == set(Disposition)
    for rule in STATUS_TABLE:
        for ctx in rule.contexts:
            assert rule.disposition(ctx) in ALLOWED[ctx]
    assert {ctx for rule in STATUS_TABLE for ctx in rule.contexts} == set(Context)


@pytest.mark.parametrize(
    "bad",
    [
        # a row filling columns of two families
        (StatusRule(418, "", "x", consume=D.REPULL, fetch=D.END, publish=D.REFUSED),),
        # a family's column missing
        (StatusRule(418, "", "x", consume=D.REPULL),),
        # a disposition the context does not know
        (StatusRule(418, "", "x", consume=D.END, fetch=D.END),),
        # a row hidden by an earlier, shorter prefix of the same code
        (
            StatusRule(418, "Tea", "x", consume=D.REPULL, fetch=D.END),
            StatusRule(418, "Teapot", "y", consume=D.REPULL, fetch=D.END),
        ),
        # no catch-all for most contexts
        (StatusRule(418, "", "x", consume=D.REPULL, fetch=D.END),),
    ],
)
def test_malformed_tables_are_refused(bad: tuple[StatusRule, ...]) -> None:
    with pytest.raises(ValueError):
        check_table(bad)


def test_views_keep_table_order() -> None:
    for ctx in Context:
        view = rules(ctx)
        assert list(view) == [r for r in STATUS_TABLE if r.disposition(ctx) is not None]


def test_matching_is_by_exact_prefix_never_substring_nor_case() -> None:
    pub = Context.PUBLISH
    assert classify_api_error(pub, 10077, 503, "Maximum Messages Exceeded").error is StoreFailedError
    assert classify_api_error(pub, 10077, 503, "the maximum messages exceeded").error is StoreFailedError
    assert classify_api_error(pub, 10077, 503, "maximum messages per subject exceeded").publish is D.PER_SUBJECT_LIMIT
    assert classify_api_error(pub, 10077, 400, "maximum messages exceeded").error is MaxMsgsError  # err_code first
    assert classify(Context.CONSUME, 409, "consumer deleted").error is PullStatusError


def test_api_error_rows_agree_with_the_error_types() -> None:
    """The publish rows name the class jscore.errors.api_error gives for the same answer."""
    for rule in rules(Context.PUBLISH):
        if rule.line is Line.API_ERROR and rule.err_code is not None and rule.error is not None:
            err = errors.api_error(503, rule.err_code, rule.description_prefix or "x")
            assert type(err) is rule.error, rule


# ------------------------------------------------------------------ publish rows, in the publishers


def _reply(exp: Expect) -> tuple[bytes, int | None]:
    if exp.err_code is None:
        return b"", exp.code
    body = {"error": {"code": exp.code, "err_code": exp.err_code, "description": exp.description}}
    return json.dumps(body).encode(), None


PUBLISH_EXPECTED = [e for e in EXPECTED if e.family is PUBLISH]

# What a publish with (and without) a msg id, with no earlier doubt, becomes after each answer.
OUTCOME = {
    D.RESEND: (PENDING, PENDING),
    D.RESEND_WITH_MSG_ID: (PENDING, FAILED),
    D.IN_PROCESS: (PENDING, UNKNOWN),  # (without a msg id: ambiguous at once; it never happens)
    D.REFUSED: (FAILED, FAILED),
    D.PER_SUBJECT_LIMIT: (FAILED, FAILED),
}


@pytest.mark.parametrize("exp", PUBLISH_EXPECTED, ids=_id)
def test_publish_row_in_classify_reply(exp: Expect) -> None:
    data, status = _reply(exp)
    reply = classify_reply(data, status, exp.description if status is not None else None, "orders.x")
    assert reply.ack is None and reply.disposition is exp.dispositions[0]
    expected_error = exp.error or errors.API_ERRORS.get(exp.err_code or -1, JetStreamAPIError)
    assert type(reply.error) is expected_error


@pytest.mark.parametrize("exp", PUBLISH_EXPECTED, ids=_id)
def test_publish_row_in_publish_async(exp: Expect) -> None:
    data, status = _reply(exp)
    for msg_id, expected in zip(("m1", None), OUTCOME[exp.dispositions[0]]):
        w: PublishWindow[PendingPublish] = PublishWindow()
        e = PendingPublish("orders.x", b"x", None, msg_id)
        got = w.receive_ack(w.add(e, 0.0, 0), data, status, 0.0)
        assert got is e and e.outcome is expected, (msg_id, e.error)
        if expected is FAILED:
            assert type(e.error) is type(classify_reply(data, status).error)


@pytest.mark.parametrize("exp", PUBLISH_EXPECTED, ids=_id)
def test_publish_row_in_the_bulk_writer(exp: Expect) -> None:
    data, status = _reply(exp)
    d = exp.dispositions[0]
    for dedup in (False, True):
        w = FrameWindow(per_subject_dedup=dedup)
        w.sent([0], [b"F0"], 0.0)
        w.receive_ack(0, data, status, 0.0)
        if d is D.PER_SUBJECT_LIMIT and dedup:
            assert (w.written, w.duplicates, w.failure) == (1, 1, None)
        elif OUTCOME[d][0] is PENDING:
            assert w.failure is None and w.next_deadline() == pytest.approx(0.1)  # re-sent after backoff
        else:
            assert w.failure is not None and w.written == 0


def test_publish_rows_settle_as_ambiguous_when_maybe_stored() -> None:
    """After a lost connection every answer that is not a PubAck ends ambiguous or re-sent,
    never FAILED (the first copy may be the stored one)."""
    for exp in PUBLISH_EXPECTED:
        data, status = _reply(exp)
        w: PublishWindow[PendingPublish] = PublishWindow(transient_budget=0.0)
        e = PendingPublish("orders.x", b"x", None, "m1")
        t = w.add(e, 0.0, 0)
        w.connection_lost(0)
        w.reconnected(1, 1.0)
        w.receive_ack(t, data, status, 1.0)
        assert e.outcome is not FAILED, exp
        if exp.dispositions[0] is not D.IN_PROCESS:
            assert isinstance(e.error, PubAckTimeoutError), exp


def test_plain_pub_acks_are_stored_or_duplicate() -> None:
    assert classify_reply(b'{"stream":"S","seq":3}', None).ack is not None
    dup = classify_reply(b'{"stream":"S","seq":3,"duplicate":true}', None).ack
    assert dup is not None and dup.duplicate
    w: PublishWindow[PendingPublish] = PublishWindow()
    e = PendingPublish("orders.x", b"x", None, "m1")
    w.receive_ack(w.add(e, 0.0, 0), b'{"stream":"S","seq":3,"duplicate":true}', None, 0.0)
    assert e.outcome is DUPLICATE


def test_a_malformed_reply_is_a_refusal() -> None:
    reply = classify_reply(b"not json", None)
    assert reply.disposition is D.REFUSED and type(reply.error) is JetStreamError
    reply = classify_reply(b'{"stream":"S"}', None)  # no sequence
    assert reply.disposition is D.REFUSED


def test_an_expected_last_sequence_refusal_is_typed() -> None:
    data = json.dumps({"error": {"code": 400, "err_code": 10071, "description": "wrong last sequence: 5"}}).encode()
    assert type(classify_reply(data, None).error) is WrongLastSequenceError


# ------------------------------------------------------------------ request rows


@pytest.mark.parametrize("exp", [e for e in EXPECTED if e.family in (REQUEST, API)], ids=_id)
def test_request_row(exp: Expect) -> None:
    ctx = FAMILY_CONTEXTS[exp.family][0]
    err = request_error(ctx, exp.code, exp.description, "svc.x")
    if exp.dispositions[0] is D.DELIVER:
        assert err is None
    else:
        assert exp.error is not None and type(err) is exp.error and "svc.x" in str(err)
        if isinstance(err, JetStreamAPIError):
            assert (err.code, err.err_code) == (503, 0)
