"""jscore.publish: publish options -> headers, validation, and the async-publish window (virtual time)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from jscore.errors import (
    DuplicateMsgIdInProcessError,
    InvalidOptionError,
    JetStreamError,
    MaxMsgsError,
    MaxMsgsPerSubjectError,
    NoRespondersError,
    NoStreamResponseError,
    PubAckTimeoutError,
    WrongLastSequenceError,
)
from jscore.headers import Headers, encode_headers
from jscore.publish import (
    ACKED,
    DUPLICATE,
    FAILED,
    PENDING,
    UNKNOWN,
    PendingPublish,
    PublishWindow,
    decode_ack,
    publish_headers,
    ttl_value,
)


def ack(seq: int, *, duplicate: bool = False, stream: str = "S") -> bytes:
    body: dict[str, object] = {"stream": stream, "seq": seq}
    if duplicate:
        body["duplicate"] = True
    return json.dumps(body).encode()


def api_err(code: int, err_code: int, description: str) -> bytes:
    body = {"error": {"code": code, "err_code": err_code, "description": description}, "stream": "S", "seq": 0}
    return json.dumps(body).encode()


def entry(msg_id: str | None = None, subject: str = "s.1") -> PendingPublish:
    hdrs = [("Nats-Msg-Id", msg_id)] if msg_id else None
    return PendingPublish(subject, b"data", hdrs, msg_id)


# =============================================================================== headers


class TestPublishHeaders:
    def test_no_options_passes_headers_through_unchanged(self) -> None:
        h = {"A": "1"}
        assert publish_headers(None) == (None, None)
        out, mid = publish_headers(h)
        assert out is h and mid is None

    def test_each_option_maps_to_its_header(self) -> None:
        out, mid = publish_headers(
            None,
            msg_id="id-1",
            expected_stream="ORDERS",
            expected_last_seq=0,
            expected_last_subject_seq=7,
            expected_last_subject_seq_subject="orders.*",
            expected_last_msg_id="id-0",
            ttl=60,
        )
        assert mid == "id-1"
        assert out == [
            ("Nats-Msg-Id", "id-1"),
            ("Nats-Expected-Stream", "ORDERS"),
            ("Nats-Expected-Last-Sequence", "0"),
            ("Nats-Expected-Last-Subject-Sequence", "7"),
            ("Nats-Expected-Last-Subject-Sequence-Subject", "orders.*"),
            ("Nats-Expected-Last-Msg-Id", "id-0"),
            ("Nats-TTL", "60"),
        ]
        # the wire bytes (the block jscore sends)
        assert encode_headers(out) == (
            b"NATS/1.0\r\nNats-Msg-Id: id-1\r\nNats-Expected-Stream: ORDERS\r\n"
            b"Nats-Expected-Last-Sequence: 0\r\nNats-Expected-Last-Subject-Sequence: 7\r\n"
            b"Nats-Expected-Last-Subject-Sequence-Subject: orders.*\r\n"
            b"Nats-Expected-Last-Msg-Id: id-0\r\nNats-TTL: 60\r\n\r\n"
        )

    def test_options_are_appended_to_user_headers(self) -> None:
        out, mid = publish_headers(Headers([("X", "1"), ("X", "2")]), msg_id="m")
        assert out == [("X", "1"), ("X", "2"), ("Nats-Msg-Id", "m")]
        assert mid == "m"

    def test_msg_id_found_in_user_headers(self) -> None:
        _, mid = publish_headers({"nats-msg-id": "from-headers"})
        assert mid == "from-headers"
        _, mid = publish_headers({"Nats-Msg-Id": "h"}, ttl=5)
        assert mid == "h"

    @pytest.mark.parametrize("key", ["Nats-Msg-Id", "nats-msg-id", "NATS-TTL"])
    def test_option_given_twice_is_refused(self, key: str) -> None:
        with pytest.raises(InvalidOptionError, match="both"):
            publish_headers({key: "x"}, msg_id="m", ttl=5)

    @pytest.mark.parametrize(
        "kwargs",
        [
            {"msg_id": ""},
            {"msg_id": 5},
            {"msg_id": "a\r\nb"},
            {"msg_id": " padded"},
            {"expected_stream": ""},
            {"expected_last_msg_id": ""},
            {"expected_last_seq": -1},
            {"expected_last_seq": True},
            {"expected_last_seq": 1.0},
            {"expected_last_seq": 1 << 64},
            {"expected_last_subject_seq": -5},
            {"expected_last_subject_seq_subject": "a.b"},  # without expected_last_subject_seq
            {"expected_last_subject_seq": 1, "expected_last_subject_seq_subject": "a..b"},
            {"expected_last_subject_seq": 1, "expected_last_subject_seq_subject": "a b"},
            {"ttl": 0},
            {"ttl": -1},
            {"ttl": 0.5},
            {"ttl": 1.5},
            {"ttl": float("inf")},
            {"ttl": float("nan")},
            {"ttl": "soon"},
            {"ttl": True},
        ],
    )
    def test_invalid_options(self, kwargs: dict[str, object]) -> None:
        with pytest.raises(InvalidOptionError):
            publish_headers(None, **kwargs)  # type: ignore[arg-type]

    def test_invalid_option_is_a_value_error(self) -> None:
        with pytest.raises(ValueError):
            publish_headers(None, msg_id="")


class TestTtl:
    @pytest.mark.parametrize(
        ("ttl", "wire"), [(1, "1"), (60, "60"), (3600.0, "3600"), ("never", "never"), ("NEVER", "never")]
    )
    def test_values(self, ttl: object, wire: str) -> None:
        assert ttl_value(ttl) == wire


# =============================================================================== the window


class TestWindowBasics:
    def test_ack_settles_and_frees_room(self) -> None:
        w: PublishWindow[PendingPublish] = PublishWindow(max_pending=2, ack_timeout=5.0)
        a, b = entry(), entry()
        ta = w.add(a, 0.0, 0)
        tb = w.add(b, 0.0, 0)
        assert ta != tb and len(w) == 2 and not w.has_room
        got = w.receive_ack(ta, ack(1), None, 0.1)
        assert got is a and a.outcome is ACKED and a.ack is not None and a.ack.seq == 1 and a.error is None
        assert len(w) == 1 and w.has_room

    def test_duplicate_outcome(self) -> None:
        w: PublishWindow[PendingPublish] = PublishWindow()
        e = entry("m")
        t = w.add(e, 0.0, 0)
        w.receive_ack(t, ack(4, duplicate=True), None, 0.1)
        assert e.outcome is DUPLICATE and e.ack is not None and e.ack.duplicate and e.ack.seq == 4
        assert w.stats.duplicates == 1

    def test_api_error_is_a_definite_failure_never_retried(self) -> None:
        w: PublishWindow[PendingPublish] = PublishWindow(retry_attempts=5)
        e = entry()
        t = w.add(e, 0.0, 0)
        w.receive_ack(t, api_err(400, 10071, "wrong last sequence: 3"), None, 0.1)
        assert e.outcome is FAILED and isinstance(e.error, WrongLastSequenceError)
        assert not w.retrying and len(w) == 0

    def test_store_failed_maps_by_description(self) -> None:
        w: PublishWindow[PendingPublish] = PublishWindow()
        e = entry()
        t = w.add(e, 0.0, 0)
        w.receive_ack(t, api_err(503, 10077, "maximum messages per subject exceeded"), None, 0.0)
        assert isinstance(e.error, MaxMsgsPerSubjectError) and e.error.err_code == 10077

    def test_escaped_error_key_is_not_an_ack(self) -> None:
        # "\u0065rror" is the key "error": the fast path must not take the body for a PubAck.
        body = b'{"stream":"S","seq":1,"\\u0065rror":{"code":503,"err_code":10077,"description":"maximum messages exceeded"}}'
        w: PublishWindow[PendingPublish] = PublishWindow()
        e = entry()
        t = w.add(e, 0.0, 0)
        w.receive_ack(t, body, None, 0.0)
        assert e.outcome is FAILED and isinstance(e.error, MaxMsgsError)
        with pytest.raises(MaxMsgsError):
            decode_ack(body)

    def test_garbage_ack_fails_typed(self) -> None:
        w: PublishWindow[PendingPublish] = PublishWindow()
        e = entry()
        t = w.add(e, 0.0, 0)
        w.receive_ack(t, b"not json", None, 0.0)
        assert e.outcome is FAILED and isinstance(e.error, JetStreamError)

    def test_unexpected_status_fails(self) -> None:
        w: PublishWindow[PendingPublish] = PublishWindow()
        e = entry()
        t = w.add(e, 0.0, 0)
        w.receive_ack(t, b"", 408, 0.0)
        assert e.outcome is FAILED

    def test_late_and_unknown_acks_are_counted_and_ignored(self) -> None:
        w: PublishWindow[PendingPublish] = PublishWindow()
        e = entry()
        t = w.add(e, 0.0, 0)
        assert w.receive_ack(t, ack(1), None, 0.0) is e
        assert w.receive_ack(t, ack(1, duplicate=True), None, 0.0) is None  # second copy
        assert w.receive_ack("nope", ack(2), None, 0.0) is None
        assert w.stats.late == 2 and e.outcome is ACKED

    def test_remove_forgets_an_unsent_entry(self) -> None:
        w: PublishWindow[PendingPublish] = PublishWindow()
        e = entry()
        t = w.add(e, 0.0, 0)
        assert w.remove(t) is e and len(w) == 0 and w.stats.sent == 0 and w.stats.removed == 1
        assert w.remove(t) is None

    def test_resume_level(self) -> None:
        assert PublishWindow(max_pending=1).resume_level == 0
        assert PublishWindow(max_pending=10).resume_level == 7
        assert PublishWindow(max_pending=1000).resume_level == 750
        assert PublishWindow(max_pending=4000).resume_level == 3744

    @pytest.mark.parametrize(
        "kwargs",
        [
            {"max_pending": 0},
            {"max_pending": True},
            {"ack_timeout": 0},
            {"ack_timeout": float("nan")},
            {"retry_attempts": -1},
            {"retry_wait": -0.1},
        ],
    )
    def test_invalid_settings(self, kwargs: dict[str, object]) -> None:
        with pytest.raises(InvalidOptionError):
            PublishWindow(**kwargs)  # type: ignore[arg-type]


class TestRetries:
    """Transient answers, as PublishPolicy decides them: re-sent with backoff (retry_wait
    doubling) for ack_timeout * (retry_attempts + 1) seconds from the first one."""

    def test_no_responders_resent_with_backoff_then_fails_definite(self) -> None:
        w: PublishWindow[PendingPublish] = PublishWindow(ack_timeout=1.0, retry_attempts=1, retry_wait=0.25)
        assert w.policy.budget == 2.0
        e = entry()
        t = w.add(e, 0.0, 0)
        now = 0.0
        for attempt, wait in ((1, 0.25), (2, 0.5), (3, 1.0)):
            got = w.receive_ack(t, b"", 503, now)
            assert got is e and e.outcome is PENDING and e.attempts == attempt
            assert len(w) == 1 and w.next_deadline() == pytest.approx(now + wait)
            settled, resend = w.handle_timeout(now + wait - 0.01)
            assert settled == [] and resend == []  # not due yet
            settled, resend = w.handle_timeout(now + wait, gen=0)
            assert resend == [e] and e.sends == attempt + 1
            now += wait
        assert now == 1.75
        w.receive_ack(t, b"", 503, 2.0)  # 2 s after the first 503: the budget is spent
        assert e.outcome is FAILED and isinstance(e.error, NoStreamResponseError)
        assert isinstance(e.error, NoRespondersError) and isinstance(e.error, JetStreamError)
        assert w.stats.retried == 3 and len(w) == 0

    def test_backoff_is_capped(self) -> None:
        w: PublishWindow[PendingPublish] = PublishWindow(ack_timeout=100.0, retry_wait=1.0)
        e = entry()
        t = w.add(e, 0.0, 0)
        now = 0.0
        waits = []
        for _ in range(6):
            w.receive_ack(t, b"", 503, now)
            waits.append(e.retry_at - now)
            now = e.retry_at
            w.handle_timeout(now, 0)
        assert waits == [1.0, 2.0, 4.0, 5.0, 5.0, 5.0]

    def test_retry_that_succeeds(self) -> None:
        w: PublishWindow[PendingPublish] = PublishWindow()
        e = entry()
        t = w.add(e, 0.0, 0)
        w.receive_ack(t, b"", 503, 0.0)
        _, resend = w.handle_timeout(1.0)
        assert resend == [e]
        w.receive_ack(t, ack(1), None, 1.1)
        assert e.outcome is ACKED

    def test_in_process_10158_resent_then_ambiguous(self) -> None:
        w: PublishWindow[PendingPublish] = PublishWindow(transient_budget=1.0)
        e = entry("m")
        t = w.add(e, 0.0, 0)
        body = api_err(409, 10158, "duplicate message id is in process")
        w.receive_ack(t, body, None, 0.0)
        assert e.outcome is PENDING
        w.handle_timeout(1.0)
        w.receive_ack(t, body, None, 1.0)
        assert e.outcome is UNKNOWN and isinstance(e.error, DuplicateMsgIdInProcessError)

    def test_zero_budget_fails_at_once(self) -> None:
        w: PublishWindow[PendingPublish] = PublishWindow(transient_budget=0.0)
        e = entry()
        w.receive_ack(w.add(e, 0.0, 0), b"", 503, 0.0)
        assert e.outcome is FAILED

    def test_zero_retry_attempts_still_resend_for_one_ack_timeout(self) -> None:
        w: PublishWindow[PendingPublish] = PublishWindow(ack_timeout=2.0, retry_attempts=0)
        assert w.policy.budget == 2.0
        e = entry()
        t = w.add(e, 0.0, 0)
        w.receive_ack(t, b"", 503, 0.0)
        assert e.outcome is PENDING

    def test_temporarily_unavailable_resent_only_with_a_msg_id(self) -> None:
        body = api_err(503, 10008, "JetStream system temporarily unavailable")
        w: PublishWindow[PendingPublish] = PublishWindow()
        with_id, plain = entry("m"), entry()
        w.receive_ack(w.add(with_id, 0.0, 0), body, None, 0.0)
        w.receive_ack(w.add(plain, 0.0, 0), body, None, 0.0)
        assert with_id.outcome is PENDING
        assert plain.outcome is FAILED and type(plain.error).__name__ == "JetStreamUnavailableError"


class TestDeadlines:
    def test_expiry_in_order_is_ambiguous(self) -> None:
        w: PublishWindow[PendingPublish] = PublishWindow(ack_timeout=2.0)
        es = [entry() for _ in range(3)]
        for i, e in enumerate(es):
            w.add(e, float(i), 0)
        assert w.next_deadline() == 2.0
        settled, _ = w.handle_timeout(3.5)
        assert settled == es[:2]
        for e in es[:2]:
            assert e.outcome is UNKNOWN and isinstance(e.error, PubAckTimeoutError) and isinstance(e.error, TimeoutError)
        assert w.next_deadline() == 4.0 and len(w) == 1

    def test_spurious_timeout_is_a_no_op(self) -> None:
        w: PublishWindow[PendingPublish] = PublishWindow(ack_timeout=2.0)
        w.add(entry(), 0.0, 0)
        assert w.handle_timeout(1.0) == ([], [])
        assert len(w) == 1

    def test_no_expiry_while_disconnected(self) -> None:
        w: PublishWindow[PendingPublish] = PublishWindow(ack_timeout=1.0)
        e = entry("m")
        w.add(e, 0.0, 0)
        w.connection_lost(0)
        assert w.next_deadline() is None
        assert w.handle_timeout(100.0) == ([], [])
        assert e.outcome is PENDING

    def test_next_deadline_empty(self) -> None:
        assert PublishWindow().next_deadline() is None


class TestConnection:
    def test_loss_fails_only_entries_without_msg_id_written_to_the_lost_connection(self) -> None:
        w: PublishWindow[PendingPublish] = PublishWindow()
        plain, with_id = entry(), entry("m1")
        w.add(plain, 0.0, 0)
        w.add(with_id, 0.0, 0)
        settled = w.connection_lost(0)
        assert settled == [plain] and plain.outcome is UNKNOWN and isinstance(plain.error, PubAckTimeoutError)
        assert with_id.outcome is PENDING and not w.connected
        # published while disconnected: buffered for the next connection, not in doubt
        buffered = entry()
        w.add(buffered, 0.5, 1)
        settled, resend = w.reconnected(1, 1.0)
        assert settled == [] and resend == [with_id]
        assert with_id.gen == 1 and with_id.sends == 2 and w.stats.resent == 1
        assert buffered.outcome is PENDING and w.connected and w.gen == 1
        # every entry in flight got a fresh deadline
        assert {e.deadline for e in w.pending.values()} == {1.0 + w.ack_timeout}

    def test_reconnect_without_seen_loss(self) -> None:
        w: PublishWindow[PendingPublish] = PublishWindow()
        plain, with_id = entry(), entry("m")
        w.add(plain, 0.0, 0)
        w.add(with_id, 0.0, 0)
        settled, resend = w.reconnected(2, 1.0)  # two quick reconnects, none seen
        assert settled == [plain] and resend == [with_id]

    def test_resent_entry_acked_once_even_if_both_copies_answer(self) -> None:
        w: PublishWindow[PendingPublish] = PublishWindow()
        e = entry("m")
        t = w.add(e, 0.0, 0)
        w.reconnected(1, 1.0)
        assert w.receive_ack(t, ack(3), None, 1.1) is e
        assert w.receive_ack(t, ack(3, duplicate=True), None, 1.2) is None
        assert e.outcome is ACKED and e.ack is not None and not e.ack.duplicate

    def test_close_fails_everything_ambiguous_with_cause(self) -> None:
        w: PublishWindow[PendingPublish] = PublishWindow()
        a, b = entry(), entry("m")
        w.add(a, 0.0, 0)
        tb = w.add(b, 0.0, 0)
        w.receive_ack(tb, b"", 503, 0.0)  # b waits for a retry
        cause = ConnectionError("gone")
        settled = w.close(cause)
        assert set(settled) == {a, b} and len(w) == 0
        for e in (a, b):
            assert e.outcome is UNKNOWN and isinstance(e.error, PubAckTimeoutError) and e.error.__cause__ is cause

    def test_fail_settles_a_refused_resend(self) -> None:
        w: PublishWindow[PendingPublish] = PublishWindow()
        e = entry("m")
        w.add(e, 0.0, 0)
        _, resend = w.reconnected(1, 1.0)
        err = PubAckTimeoutError("x")
        w.fail(resend[0], err)
        assert e.outcome is UNKNOWN and e.error is err and len(w) == 0


class TestMaybeStored:
    """An entry that an earlier send may have stored is never settled as a definite failure,
    and a PubAck that arrives while the entry waits for its re-send settles it."""

    def test_resent_after_a_reconnect_then_no_responders_is_never_definite(self) -> None:
        """The measured R3 case: stored, its ack lost with the connection; the re-send meets 503
        while the stream's leader is elected."""
        w: PublishWindow[PendingPublish] = PublishWindow(ack_timeout=1.0, retry_attempts=1, retry_wait=0.1)
        e = entry("m1")
        t = w.add(e, 0.0, 0)
        assert w.connection_lost(0) == []
        _, resend = w.reconnected(1, 5.0)
        assert resend == [e]
        now = 5.0
        while True:
            got = w.receive_ack(t, b"", 503, now)
            assert got is e
            if e.outcome is not PENDING:
                break
            now = e.retry_at
            _, resend = w.handle_timeout(now, 1)
            assert resend == [e]
        assert now - 5.0 >= w.policy.budget - 1e-9
        assert e.outcome is UNKNOWN and isinstance(e.error, PubAckTimeoutError)
        assert isinstance(e.error.__cause__, NoStreamResponseError)
        assert w.stats.failed == 0 and w.stats.unknown == 1

    def test_resent_after_a_reconnect_then_stored_as_a_duplicate(self) -> None:
        w: PublishWindow[PendingPublish] = PublishWindow()
        e = entry("m1")
        t = w.add(e, 0.0, 0)
        w.connection_lost(0)
        w.reconnected(1, 1.0)
        for now in (1.0, 1.25, 1.75):  # three 503s during the election: still re-sent
            w.receive_ack(t, b"", 503, now)
            assert e.outcome is PENDING
            w.handle_timeout(now + 1.0, 1)
        w.receive_ack(t, ack(7, duplicate=True), None, 3.0)
        assert e.outcome is DUPLICATE and e.ack is not None and e.ack.seq == 7

    def test_refusal_after_a_deadline_resend_is_ambiguous(self) -> None:
        """Stored, its ack lost; the re-send's expected-last-sequence check fails because of the
        first copy: the refusal cannot prove that nothing was stored."""
        w: PublishWindow[PendingPublish] = PublishWindow(ack_timeout=1.0)
        e = entry("m1")
        t = w.add(e, 0.0, 0)
        settled, resend = w.handle_timeout(1.0, 0)
        assert settled == [] and resend == [e] and e.deadline == 2.0  # a msg id: sent again
        w.receive_ack(t, api_err(400, 10071, "wrong last sequence: 1"), None, 1.1)
        assert e.outcome is UNKNOWN and isinstance(e.error, PubAckTimeoutError)
        assert isinstance(e.error.__cause__, WrongLastSequenceError)

    def test_in_process_then_no_responders_is_ambiguous(self) -> None:
        w: PublishWindow[PendingPublish] = PublishWindow(transient_budget=0.5)
        e = entry("m1")
        t = w.add(e, 0.0, 0)
        w.receive_ack(t, api_err(409, 10158, "duplicate message id is in process"), None, 0.0)
        w.handle_timeout(0.25, 0)
        w.receive_ack(t, b"", 503, 0.6)
        assert e.outcome is UNKNOWN and isinstance(e.error, PubAckTimeoutError)

    def test_refusal_with_no_earlier_doubt_stays_definite(self) -> None:
        w: PublishWindow[PendingPublish] = PublishWindow()
        e = entry("m1")
        t = w.add(e, 0.0, 0)
        w.receive_ack(t, b"", 503, 0.0)  # not stored: no doubt
        w.handle_timeout(1.0, 0)
        w.receive_ack(t, api_err(400, 10071, "wrong last sequence: 3"), None, 1.1)
        assert e.outcome is FAILED and isinstance(e.error, WrongLastSequenceError)

    def test_missed_deadlines_resend_msg_id_entries_within_the_budget(self) -> None:
        w: PublishWindow[PendingPublish] = PublishWindow(ack_timeout=1.0, retry_attempts=2)
        e, plain = entry("m1"), entry()
        w.add(e, 0.0, 0)
        w.add(plain, 0.0, 0)
        settled, resend = w.handle_timeout(1.0, 0)
        assert settled == [plain] and plain.outcome is UNKNOWN  # no msg id: ambiguous at once
        assert resend == [e]
        assert w.handle_timeout(2.0, 0) == ([], [e])
        settled, resend = w.handle_timeout(3.0, 0)  # 3 s since the first send: budget spent
        assert settled == [e] and resend == [] and isinstance(e.error, PubAckTimeoutError)
        assert e.sends == 3 and w.stats.retried == 2

    def test_ack_while_waiting_for_the_resend_settles_it(self) -> None:
        w: PublishWindow[PendingPublish] = PublishWindow(retry_wait=1.0)
        e = entry("m1")
        t = w.add(e, 0.0, 0)
        w.receive_ack(t, b"", 503, 0.0)
        assert t in w.retrying
        assert w.receive_ack(t, b"", 503, 0.1) is None  # another copy's 503: already waiting
        got = w.receive_ack(t, ack(9), None, 0.2)  # an earlier copy was stored after all
        assert got is e and e.outcome is ACKED and e.ack is not None and e.ack.seq == 9
        assert len(w) == 0 and w.stats.acked == 1
        assert w.handle_timeout(5.0, 0) == ([], [])  # nothing is re-sent

    def test_error_answer_while_waiting_is_ignored(self) -> None:
        w: PublishWindow[PendingPublish] = PublishWindow(retry_wait=1.0)
        e = entry("m1")
        t = w.add(e, 0.0, 0)
        w.receive_ack(t, b"", 503, 0.0)
        assert w.receive_ack(t, api_err(400, 10071, "wrong last sequence: 3"), None, 0.1) is None
        assert e.outcome is PENDING and w.stats.late == 1


# =============================================================================== stateful


class WindowModel(RuleBasedStateMachine):
    """Random interleavings of publishes, acks, 503s, time, disconnects and reconnects.

    Invariants: every entry is pending or settled exactly once (never both, never twice); the
    window never holds more than max_pending new publishes; an entry with a msg id is never
    settled by a connection loss; entries are settled only with the outcome their answers allow;
    an entry that an earlier send may have stored (the model's own account: in flight when the
    connection dropped, past its ack deadline, or answered "in process") is never FAILED.
    """

    def __init__(self) -> None:
        super().__init__()
        self.w: PublishWindow[PendingPublish] = PublishWindow(
            max_pending=8, ack_timeout=2.0, retry_attempts=1, retry_wait=0.25
        )
        self.now = 0.0
        self.gen = 0
        self.connected = True
        self.entries: list[PendingPublish] = []
        self.settled_count: dict[int, int] = {}
        self.seq = 0
        self.maybe_stored: set[int] = set()

    def _record(self, settled: list[PendingPublish]) -> None:
        for e in settled:
            assert e.outcome is not PENDING
            self.settled_count[id(e)] = self.settled_count.get(id(e), 0) + 1

    @precondition(lambda self: self.w.has_room)
    @rule(with_id=st.booleans())
    def publish(self, with_id: bool) -> None:
        e = entry(f"id{len(self.entries)}" if with_id else None)
        self.w.add(e, self.now, self.gen if self.connected else self.gen + 1)
        self.entries.append(e)

    @precondition(lambda self: bool(self.w.pending or self.w.retrying) and self.connected)
    @rule(data=st.data(), kind=st.sampled_from(["ok", "dup", "err", "503", "10008", "inproc", "late"]))
    def answer(self, data: st.DataObject, kind: str) -> None:
        token = data.draw(st.sampled_from(sorted(self.w.pending) + sorted(self.w.retrying)))
        waiting = token in self.w.retrying
        target = self.w.pending.get(token) or self.w.retrying.get(token)
        if kind == "late":
            token = "999999"
        self.seq += 1
        body, status = {
            "ok": (ack(self.seq), None),
            "dup": (ack(self.seq, duplicate=True), None),
            "err": (api_err(400, 10071, "wrong last sequence"), None),
            "503": (b"", 503),
            "10008": (api_err(503, 10008, "JetStream system temporarily unavailable"), None),
            "inproc": (api_err(409, 10158, "duplicate message id is in process"), None),
            "late": (ack(self.seq), None),
        }[kind]
        got = self.w.receive_ack(token, body, status, self.now)
        if kind in ("ok", "dup"):
            assert got is target and got is not None and got.outcome in (ACKED, DUPLICATE)  # also while waiting
        elif waiting or kind == "late":
            assert got is None
        if kind == "inproc" and target is not None and not waiting:
            self.maybe_stored.add(id(target))
        if got is not None and got.outcome is not PENDING:
            self._record([got])

    @rule(dt=st.floats(min_value=0.0, max_value=1.5))
    def time_passes(self, dt: float) -> None:
        self.now += dt
        if self.connected:  # past their ack deadline: maybe stored
            self.maybe_stored.update(id(e) for e in self.w.pending.values() if e.deadline <= self.now)
        settled, resend = self.w.handle_timeout(self.now, self.gen if self.connected else self.gen + 1)
        self._record(settled)
        for e in resend:
            assert e.outcome is PENDING

    @precondition(lambda self: self.connected)
    @rule()
    def disconnect(self) -> None:
        self.maybe_stored.update(id(e) for e in self.w.pending.values() if e.gen <= self.gen)
        self.connected = False
        settled = self.w.connection_lost(self.gen)
        for e in settled:
            assert e.msg_id is None, "an entry with a msg id must wait for the reconnect"
        self._record(settled)

    @precondition(lambda self: not self.connected)
    @rule()
    def reconnect(self) -> None:
        self.connected = True
        self.gen += 1
        settled, resend = self.w.reconnected(self.gen, self.now)
        for e in settled:
            assert e.msg_id is None
        for e in resend:
            assert e.msg_id is not None and e.outcome is PENDING
        self._record(settled)

    @invariant()
    def each_entry_pending_xor_settled_once(self) -> None:
        pending = set(map(id, self.w.pending.values())) | set(map(id, self.w.retrying.values()))
        for e in self.entries:
            n = self.settled_count.get(id(e), 0)
            if id(e) in pending:
                assert e.outcome is PENDING and n == 0
            else:
                assert e.outcome is not PENDING and n == 1, (e, n)

    @invariant()
    def maybe_stored_is_never_a_definite_failure(self) -> None:
        for e in self.entries:
            if id(e) in self.maybe_stored:
                assert e.outcome is not FAILED, (e, e.error)

    @invariant()
    def window_bounded(self) -> None:
        assert len(self.w) <= self.w.max_pending

    @invariant()
    def stats_add_up(self) -> None:
        s = self.w.stats
        done = s.acked + s.duplicates + s.failed + s.unknown
        assert done + len(self.w) == s.sent == len(self.entries)

    @invariant()
    def outcomes_consistent(self) -> None:
        for e in self.entries:
            if e.outcome in (ACKED, DUPLICATE):
                assert e.ack is not None and e.error is None
            elif e.outcome is not PENDING:
                assert e.ack is None and e.error is not None
            if e.outcome is UNKNOWN:
                assert isinstance(e.error, (PubAckTimeoutError, DuplicateMsgIdInProcessError))


TestWindowModel = WindowModel.TestCase
TestWindowModel.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
