"""The soak's ledger check finds what it is meant to find (tests.soak.ledger is pure)."""

from __future__ import annotations

import pytest

from jscore import errors as E
from tests.soak.ledger import (
    ACKED_NO_SEQ,
    AMBIGUOUS,
    ASYNC,
    BULK,
    FAILED,
    SYNC,
    CallTimes,
    ConsumerLog,
    Ledger,
    PublisherLedger,
    check,
    classify_error,
    code_of,
    parse_payload,
    text_of,
)


def _payload(code: int) -> bytes:
    return text_of(code).encode() + b"|pad"


def _world() -> tuple[Ledger, list[tuple[int, int]]]:
    """Three acked sync publishes at seqs 1..3, an ambiguous async one not stored, a bulk
    partition of two rows at 4..5; every consumer saw everything."""
    sync = PublisherLedger(SYNC)
    for seq in (1, 2, 3):
        sync.settle(sync.attempt(), seq)
    asy = PublisherLedger(ASYNC)
    asy.settle(asy.attempt(), AMBIGUOUS)
    bulk = PublisherLedger(BULK)
    bulk.settle_partition(0, 2, ACKED_NO_SEQ)
    stored = [(1, code_of(SYNC, 1)), (2, code_of(SYNC, 2)), (3, code_of(SYNC, 3)),
              (4, code_of(BULK, 0, 0)), (5, code_of(BULK, 0, 1))]
    logs = [ConsumerLog("consume"), ConsumerLog("ordered", ordered=True)]
    for log in logs:
        for seq, code in stored:
            log.saw(seq, code)
    return Ledger([sync, asy, bulk], logs, CallTimes(0.25)), stored


def test_a_clean_run_has_no_violation() -> None:
    ledger, stored = _world()
    assert check(ledger, stored) == {}
    sync, asy, bulk = ledger.publishers
    assert sync.summary()["acked"] == 3 and asy.summary()["ambiguous"] == 1 and bulk.summary()["acked"] == 2


def test_an_unresolved_publish_counts_as_ambiguous() -> None:
    ledger, stored = _world()
    sync = ledger.publishers[0]
    n = sync.attempt()  # in flight when the run stopped
    assert sync.summary()["ambiguous"] == 1
    stored.append((6, code_of(SYNC, n)))
    for log in ledger.consumers:
        log.saw(6, code_of(SYNC, n))
    assert check(ledger, stored) == {}


def test_ids_round_trip() -> None:
    for code in (code_of(SYNC, 1), code_of(ASYNC, 123456), code_of(BULK, 77, 199)):
        assert parse_payload(_payload(code)) == code
    assert parse_payload(b"garbage") == -1
    assert parse_payload(b"s12") == -1


@pytest.mark.parametrize(
    ("mutate", "kind"),
    [
        (lambda led, st: st.pop(1), "lost"),
        (lambda led, st: st.append((6, st[0][1])), "stored_twice"),
        (lambda led, st: st.append((6, code_of(SYNC, 99))), "unexpected"),
        (lambda led, st: st.append((6, code_of(BULK, 0, 2))), "unexpected"),
        (lambda led, st: st.append((6, -1)), "unexpected"),
        (lambda led, st: led.publishers[0].settle(2, 5), "acked_at_other_seq"),
        (lambda led, st: led.publishers[1].settle(1, FAILED) or st.append((6, code_of(ASYNC, 1))), "failed_but_stored"),
        (lambda led, st: led.publishers[2].settle_partition(1, 3, FAILED) or st.append((6, code_of(BULK, 1, 2))),
         "failed_but_stored"),
        (lambda led, st: led.publishers[2].settle_partition(0, 2, ACKED_NO_SEQ) or st.pop(), "lost"),
        (lambda led, st: led.times.record("js.publish", 5.3, 5.0, 1.0), "over_timeout"),
    ],
)
def test_each_violation_is_found(mutate, kind) -> None:  # type: ignore[no-untyped-def]
    ledger, stored = _world()
    mutate(ledger, stored)
    # (consumers saw the original stream: rebuild them so only the mutation is reported)
    for log in ledger.consumers:
        log.__init__(log.name, ordered=log.ordered)  # type: ignore[misc]
        for seq, code in stored:
            log.saw(seq, code)
    found = check(ledger, stored)
    assert kind in found, found
    assert found[kind]["count"] >= 1


def test_an_ambiguous_publish_may_be_stored_once_not_twice() -> None:
    ledger, stored = _world()
    stored.append((6, code_of(ASYNC, 1)))
    assert check(ledger, stored).keys() <= {"consumer_missed", "ordered_not_exactly_once_in_order"}
    stored.append((7, code_of(ASYNC, 1)))
    assert "stored_twice" in check(ledger, stored)


def test_an_overrun_within_a_measured_process_stall_is_excused() -> None:
    ledger, stored = _world()
    ledger.times.record("Consumer.fetch", 2.9, 2.25, 7.0)
    (over,) = ledger.times.over
    over["process_stalled_s"] = 0.5  # the process did not run for 0.5 s during the call
    assert check(ledger, stored) == {}
    over["process_stalled_s"] = 0.3
    assert check(ledger, stored)["over_timeout"]["count"] == 1


def test_consumers_are_checked() -> None:
    ledger, stored = _world()
    consume, ordered = ledger.consumers
    ordered.saw(3, stored[2][1])  # the ordered consumer saw seq 3 twice
    consume.saw(9, code_of(SYNC, 1))  # something that is not in the stream
    missing = ConsumerLog("fetch")
    for seq, code in stored[1:]:
        missing.saw(seq, code)
    ledger.consumers.append(missing)
    found = check(ledger, stored)
    assert found["ordered_not_exactly_once_in_order"]["count"] == 1
    assert found["consumer_saw_unstored"]["examples"][0]["seq"] == 9
    assert found["consumer_missed"]["examples"][0] == {"consumer": "fetch", "missing": 1, "first": [1]}


def test_error_classes() -> None:
    assert classify_error(E.PubAckTimeoutError("x")) == "ambiguous"
    assert classify_error(E.DuplicateMsgIdInProcessError(400, 10158, "in process")) == "ambiguous"
    assert classify_error(E.ConnectionLostError("x")) == "ambiguous"
    assert classify_error(E.NoStreamResponseError("x")) == "failed"
    assert classify_error(E.TooManyStalledMsgsError("x")) == "failed"
    assert classify_error(E.api_error(503, 10077, "maximum messages exceeded")) == "failed"
    assert classify_error(E.JetStreamError("unexpected status")) == "ambiguous"
