"""The soak's ledger check finds what it is meant to find (tests.soak.ledger is pure)."""

from __future__ import annotations

import pytest

from jscore import errors as E
from tests.soak.ledger import (
    ASYNC,
    BULK,
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


def _world() -> tuple[Ledger, list[tuple[int, bytes]]]:
    """Three acked sync publishes at seqs 1..3, an ambiguous async one not stored, a bulk
    partition of two rows at 4..5; every consumer saw everything."""
    sync = PublisherLedger(SYNC, attempted=3, acked={code_of(SYNC, n): n for n in (1, 2, 3)})
    asy = PublisherLedger(ASYNC, attempted=1, ambiguous={code_of(ASYNC, 1)})
    bulk = PublisherLedger(BULK, partitions={0: 2}, acked={code_of(BULK, 0, 0): 0, code_of(BULK, 0, 1): 0})
    stored = [(1, _payload(code_of(SYNC, 1))), (2, _payload(code_of(SYNC, 2))), (3, _payload(code_of(SYNC, 3))),
              (4, _payload(code_of(BULK, 0, 0))), (5, _payload(code_of(BULK, 0, 1)))]
    logs = [ConsumerLog("consume"), ConsumerLog("ordered", ordered=True)]
    for log in logs:
        for seq, payload in stored:
            log.saw(seq, parse_payload(payload))
    return Ledger([sync, asy, bulk], logs, CallTimes(0.25)), stored


def test_a_clean_run_has_no_violation() -> None:
    ledger, stored = _world()
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
        (lambda led, st: st.append((6, b"s99|pad")), "unexpected"),
        (lambda led, st: st.append((6, b"junk")), "unexpected"),
        (lambda led, st: led.publishers[0].acked.__setitem__(code_of(SYNC, 2), 5), "acked_at_other_seq"),
        (lambda led, st: led.publishers[1].failed.add(code_of(ASYNC, 1)) or st.append((6, _payload(code_of(ASYNC, 1)))),
         "failed_but_stored"),
        (lambda led, st: led.times.record("js.publish", 5.3, 5.0, 1.0), "over_timeout"),
    ],
)
def test_each_violation_is_found(mutate, kind) -> None:  # type: ignore[no-untyped-def]
    ledger, stored = _world()
    mutate(ledger, stored)
    # (consumers saw the original stream: rebuild them so only the mutation is reported)
    for log in ledger.consumers:
        log.__init__(log.name, ordered=log.ordered)  # type: ignore[misc]
        for seq, payload in stored:
            log.saw(seq, parse_payload(payload))
    found = check(ledger, stored)
    assert kind in found, found
    assert found[kind]["count"] >= 1


def test_an_ambiguous_publish_may_be_stored_once_not_twice() -> None:
    ledger, stored = _world()
    stored.append((6, _payload(code_of(ASYNC, 1))))
    assert check(ledger, stored).keys() <= {"consumer_missed", "ordered_not_exactly_once_in_order"}
    stored.append((7, _payload(code_of(ASYNC, 1))))
    assert "stored_twice" in check(ledger, stored)


def test_consumers_are_checked() -> None:
    ledger, stored = _world()
    consume, ordered = ledger.consumers
    ordered.saw(3, parse_payload(stored[2][1]))  # the ordered consumer saw seq 3 twice
    consume.saw(9, code_of(SYNC, 1))  # something that is not in the stream
    missing = ConsumerLog("fetch")
    for seq, payload in stored[1:]:
        missing.saw(seq, parse_payload(payload))
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
