"""jscore.publish.FrameWindow: the bulk publisher's bookkeeping, in virtual time."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jscore.errors import (
    InvalidOptionError,
    JetStreamError,
    MaxMsgsError,
    MaxMsgsPerSubjectError,
    NoStreamResponseError,
    PubAckTimeoutError,
)
from jscore.publish import FrameWindow


def ack(seq: int, *, duplicate: bool = False) -> bytes:
    body: dict[str, object] = {"stream": "S", "seq": seq}
    if duplicate:
        body["duplicate"] = True
    return json.dumps(body).encode()


def err(code: int, err_code: int, description: str) -> bytes:
    return json.dumps({"error": {"code": code, "err_code": err_code, "description": description}}).encode()


def frames(lo: int, hi: int) -> list[bytes]:
    return [b"F%d" % t for t in range(lo, hi)]


def test_acks_settle_and_count() -> None:
    w = FrameWindow(max_pending=10, ack_timeout=5.0)
    w.sent(range(0, 4), frames(0, 4), now=0.0)
    assert (w.in_flight, w.has_room) == (4, True)
    assert w.receive_ack(0, ack(1), None, 0.1) is False  # above wake_level (-1): nobody to wake
    assert w.receive_ack(1, ack(2, duplicate=True), None, 0.1) is False
    assert w.receive_ack(1, ack(2), None, 0.1) is False  # a late copy: ignored
    assert w.receive_ack(99, ack(3), None, 0.1) is False  # never sent
    assert (w.written, w.duplicates, w.in_flight) == (2, 1, 2)
    w.wake_level = 1
    assert w.receive_ack(2, ack(3), None, 0.2) is True  # down to the waiter's level
    assert w.failure is None and w.next_deadline() == 5.0


def test_window_fills() -> None:
    w = FrameWindow(max_pending=3)
    w.sent(range(3), frames(0, 3), 0.0)
    assert not w.has_room


def test_batch_deadline_resends_the_same_frames_then_fails_when_out_of_attempts() -> None:
    w = FrameWindow(ack_timeout=1.0, retries=2)
    w.sent(range(0, 3), frames(0, 3), 0.0)
    w.receive_ack(1, ack(1), None, 0.5)
    assert w.due(0.99) == []
    assert w.due(1.0) == [b"F0", b"F2"]  # the same bytes: same msg id and reply token
    assert w.resent == 2 and w.next_deadline() == 2.0
    w.receive_ack(0, ack(2, duplicate=True), None, 1.5)  # the first copy was stored after all
    assert w.due(2.0) == [b"F2"]
    assert w.failure is None
    assert w.due(3.0) == []  # F2 is out of attempts
    assert isinstance(w.failure, PubAckTimeoutError) and w.failed_token == 2
    assert (w.written, w.duplicates, w.in_flight) == (2, 1, 0)


def test_no_responders_and_in_process_are_resent_with_backoff() -> None:
    w = FrameWindow(ack_timeout=30.0, retries=3, retry_wait=0.1, transient_budget=0.7)
    w.sent(range(2), frames(0, 2), 0.0)
    assert w.receive_ack(0, b"", 503, 0.0) is True
    assert w.receive_ack(0, b"", 503, 0.0) is False  # the answer to a second copy: already scheduled
    assert w.receive_ack(1, err(400, 10158, "duplicate message id is in process"), None, 0.0) is True
    assert w.next_deadline() == pytest.approx(0.1)
    assert sorted(w.due(0.1)) == [b"F0", b"F1"]
    assert w.receive_ack(0, b"", 503, 0.1) is True
    assert w.next_deadline() == pytest.approx(0.3)  # doubled
    assert w.due(0.2) == []
    assert w.due(0.31) == [b"F0"]
    w.receive_ack(0, b"", 503, 0.3)
    assert w.due(0.7) == [b"F0"] and w.failure is None
    w.receive_ack(0, b"", 503, 0.7)  # 0.7 s after its first 503: the budget is spent
    assert isinstance(w.failure, NoStreamResponseError) and w.failed_token == 0
    assert "(after 3 re-sends of the same frame)" in "".join(getattr(w.failure, "__notes__", [""]))


def test_transient_answers_do_not_use_up_the_retries() -> None:
    """A msg id "in process" for longer than `retries` answers (a stream leader that lost its
    proposal keeps it until the duplicate window purges it) is re-sent within the time budget."""
    w = FrameWindow(ack_timeout=1.0, retries=1, retry_wait=0.1, transient_budget=60.0)
    w.sent([0], [b"F0"], 0.0)
    now = 0.0
    for _ in range(12):  # 12 answers, far more than retries=1
        assert w.receive_ack(0, err(409, 10158, "duplicate message id is in process"), None, now) is True
        out: list[bytes] = []
        while not out:
            now += 0.1
            out = w.due(now)
        assert out == [b"F0"] and w.failure is None
    assert 30.0 < now < 60.0
    w.receive_ack(0, ack(1), None, now)
    assert (w.written, w.failure) == (1, None)


def test_store_failures_coded_503_are_not_retried() -> None:
    """The server sends 10077 refusals with code 503: not a transient 503."""
    w = FrameWindow()
    w.sent([0], [b"F0"], 0.0)
    w.receive_ack(0, err(503, 10077, "maximum messages exceeded"), None, 0.0)
    assert isinstance(w.failure, MaxMsgsError)
    w = FrameWindow(per_subject_dedup=True)
    w.sent([0], [b"F0"], 0.0)
    w.receive_ack(0, err(503, 10077, "maximum messages per subject exceeded"), None, 0.0)
    assert (w.written, w.duplicates, w.failure) == (1, 1, None)


def test_temporarily_unavailable_is_resent() -> None:
    """10008 and any other API error with code 503 (no leader, no quorum) are transient."""
    w = FrameWindow(retries=2)
    w.sent(range(2), frames(0, 2), 0.0)
    assert w.receive_ack(0, err(503, 10008, "JetStream system temporarily unavailable"), None, 0.0) is True
    assert w.receive_ack(1, err(503, 10999, "stream has no quorum"), None, 0.0) is True
    assert w.failure is None and sorted(w.due(1.0)) == [b"F0", b"F1"]


def test_success_for_a_scheduled_token_settles_it() -> None:
    w = FrameWindow(retries=3)
    w.sent([7], [b"F7"], 0.0)
    w.receive_ack(7, b"", 503, 0.0)
    w.receive_ack(7, ack(1), None, 0.01)  # the original was stored after all
    assert (w.written, w.in_flight, w.next_deadline()) == (1, 0, 30.0)
    assert w.due(1.0) == []


def test_definite_refusals_fail_the_window_once() -> None:
    w = FrameWindow()
    w.sent(range(3), frames(0, 3), 0.0)
    assert w.receive_ack(0, err(400, 10077, "maximum messages exceeded"), None, 0.0) is True
    assert isinstance(w.failure, MaxMsgsError) and w.failed_token == 0
    w.receive_ack(1, b"", 408, 0.0)  # a second failure: the first is kept
    assert w.failed_token == 0 and w.in_flight == 1


def test_a_reply_with_an_error_is_never_counted_as_stored() -> None:
    """Replies can carry the stream (and even a sequence) next to the error: still a failure."""
    for body in (
        b'{"error":{"code":400,"err_code":10077,"description":"maximum messages exceeded"},"stream":"S","seq":0}',
        b'{"stream":"S","seq":9,"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 8"}}',
    ):
        w = FrameWindow()
        w.sent([0], [b"F0"], 0.0)
        w.receive_ack(0, body, None, 0.0)
        assert w.written == 0 and isinstance(w.failure, JetStreamError), body


def test_unexpected_status_fails() -> None:
    w = FrameWindow()
    w.sent([0], [b"F0"], 0.0)
    w.receive_ack(0, b"", 408, 0.0)
    assert isinstance(w.failure, JetStreamError)


def test_per_subject_refusal_is_already_written_only_in_subject_mode() -> None:
    body = err(400, 10077, "maximum messages per subject exceeded")
    w = FrameWindow(per_subject_dedup=True)
    w.sent([0], [b"F0"], 0.0)
    w.receive_ack(0, body, None, 0.0)
    assert (w.written, w.duplicates, w.failure) == (1, 1, None)
    w = FrameWindow()
    w.sent([0], [b"F0"], 0.0)
    w.receive_ack(0, body, None, 0.0)
    assert isinstance(w.failure, MaxMsgsPerSubjectError)


def test_everything_after_a_reconnect_in_token_order() -> None:
    w = FrameWindow(ack_timeout=1.0, retries=0, transient_budget=0.0)
    w.sent([5, 6], [b"F5", b"F6"], 0.0)
    w.sent([1, 2], [b"F1", b"F2"], 0.1)
    w.receive_ack(6, b"", 503, 0.2)  # retries=0: fails F6 at once
    assert w.failed_token == 6
    assert w.everything(3.0) == [b"F1", b"F2", b"F5"]
    assert w.next_deadline() == 4.0  # deadlines restart; not counted as attempts
    assert w.due(3.5) == []


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_pending": 0},
        {"max_pending": True},
        {"ack_timeout": 0},
        {"ack_timeout": float("nan")},
        {"retries": -1},
        {"retry_wait": -1.0},
        {"transient_budget": -1.0},
        {"transient_budget": float("inf")},
    ],
)
def test_bad_settings(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidOptionError):
        FrameWindow(**kwargs)  # type: ignore[arg-type]


@given(st.lists(st.tuples(st.integers(0, 19), st.sampled_from(["ok", "dup", "503", "late"])), max_size=80), st.integers(0, 3))
def test_every_token_ends_settled_or_failed(events: list[tuple[int, str]], retries: int) -> None:
    """Whatever the answers, driving the window to its deadlines settles every frame: stored
    (counted once) or failed; nothing stays in flight and nothing is counted twice."""
    w = FrameWindow(ack_timeout=1.0, retries=retries, retry_wait=0.1)
    w.sent(range(20), frames(0, 20), 0.0)
    now = 0.0
    stored: set[int] = set()
    for token, what in events:
        now += 0.05
        if what == "ok" or what == "dup":
            if token in w.frames:
                stored.add(token)
            w.receive_ack(token, ack(token + 1, duplicate=what == "dup"), None, now)
        elif what == "503":
            w.receive_ack(token, b"", 503, now)
        else:
            w.due(now)
    for _ in range(100):
        if not w.in_flight:
            break
        now += 1.0
        w.due(now)
    assert w.in_flight == 0
    assert w.written == len(stored)
    assert (w.failure is None) == (len(stored) == 20)


# ------------------------------------------------------------------ the publish-outcome policy


def test_a_frame_in_doubt_after_a_reconnect_never_fails_as_definite() -> None:
    """Its first copy may be stored (its ack was lost with the connection): 503s for the whole
    budget end the window with the ambiguous PubAckTimeoutError, not NoStreamResponseError."""
    w = FrameWindow(ack_timeout=1.0, retries=1, retry_wait=0.1)
    w.sent([0], [b"F0"], 0.0)
    assert w.everything(0.5) == [b"F0"]
    now = 0.5
    while w.failure is None:
        assert w.receive_ack(0, b"", 503, now) is True
        out: list[bytes] = []
        while w.failure is None and not out:
            now = w.next_deadline() or now
            out = w.due(now)  # (an old batch deadline passes while the re-send waits: nothing)
        assert w.failure is not None or out == [b"F0"]
    assert isinstance(w.failure, PubAckTimeoutError) and isinstance(w.failure.__cause__, NoStreamResponseError)
    assert now - 0.5 >= 2.0 - 1e-9  # the budget: ack_timeout * (retries + 1)


def test_refusal_of_a_frame_resent_after_its_deadline_is_ambiguous() -> None:
    w = FrameWindow(ack_timeout=1.0, retries=2)
    w.sent([0], [b"F0"], 0.0)
    assert w.due(1.0) == [b"F0"]
    w.receive_ack(0, err(400, 10071, "wrong last sequence: 4"), None, 1.2)
    assert isinstance(w.failure, PubAckTimeoutError) and "wrong last sequence" in str(w.failure)


def test_refusal_without_doubt_is_definite() -> None:
    w = FrameWindow()
    w.sent([0], [b"F0"], 0.0)
    w.receive_ack(0, b"", 503, 0.0)
    w.due(1.0)
    w.receive_ack(0, err(400, 10071, "wrong last sequence: 4"), None, 1.0)
    assert type(w.failure).__name__ == "WrongLastSequenceError"


def test_an_answer_to_an_earlier_copy_is_ignored_while_a_resend_waits() -> None:
    w = FrameWindow(retry_wait=1.0)
    w.sent([0], [b"F0"], 0.0)
    w.receive_ack(0, b"", 503, 0.0)
    assert w.receive_ack(0, err(400, 10071, "wrong last sequence: 4"), None, 0.1) is False
    assert w.failure is None and w.in_flight == 1


def test_missed_deadlines_and_transient_answers_share_one_budget() -> None:
    """The budget runs from the first trouble: here the send whose deadline passed at 1.0."""
    w = FrameWindow(ack_timeout=1.0, retries=2, retry_wait=0.1)  # budget 3 s
    w.sent([0], [b"F0"], 0.0)
    assert w.due(1.0) == [b"F0"]  # no answer: re-sent (trouble since 0.0)
    assert w.receive_ack(0, b"", 503, 1.1) is True  # re-sent with backoff
    assert w.next_deadline() == pytest.approx(1.3)  # the second re-send: 0.1 doubled
    assert w.due(1.3) == [b"F0"]
    w.receive_ack(0, b"", 503, 3.0)  # 3 s after the first send: spent
    assert isinstance(w.failure, PubAckTimeoutError)  # it may have been stored by the first copy


# --------------------------------------------------------------------------- the byte bound


def test_the_window_is_full_at_max_bytes_whatever_the_count() -> None:
    w = FrameWindow(max_pending=1000, max_bytes=100)
    big = [b"x" * 40, b"y" * 40]
    w.sent(range(2), big, 0.0)
    assert (w.in_flight, w.bytes_in_flight, w.has_room) == (2, 80, True)
    w.sent(range(2, 4), big, 0.0)  # a batch may go past the bound; then there is no room
    assert (w.bytes_in_flight, w.has_room) == (160, False)
    assert w.room_level() == 2  # wait for half of what is in flight
    w.receive_ack(0, ack(1), None, 0.1)
    w.receive_ack(1, ack(2, duplicate=True), None, 0.1)
    assert (w.in_flight, w.bytes_in_flight, w.has_room) == (2, 80, True)


def test_bytes_in_flight_follow_every_way_out_of_the_window() -> None:
    w = FrameWindow(max_pending=10, max_bytes=10_000, ack_timeout=1.0, retries=0)
    w.sent(range(4), [b"a" * 10, b"b" * 20, b"c" * 30, b"d" * 40], 0.0)
    assert w.bytes_in_flight == 100
    w.receive_ack(0, ack(1), None, 0.1)  # the fast path
    assert w.bytes_in_flight == 90
    w.receive_ack(1, b'{"stream":"S","seq":2,"domain":"x"}', None, 0.1)  # any PubAck
    assert w.bytes_in_flight == 70
    w.receive_ack(2, err(400, 10060, "expected stream does not match"), None, 0.1)  # a refusal: failed
    assert w.failure is not None and w.bytes_in_flight == 40
    w.due(5.0)  # the last one's deadline passed with no re-send left: failed too
    assert (w.in_flight, w.bytes_in_flight) == (0, 0)


def test_room_level_by_count_is_half_the_window() -> None:
    w = FrameWindow(max_pending=4)
    w.sent(range(4), frames(0, 4), 0.0)
    assert (w.has_room, w.room_level()) == (False, 2)


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "1"])
def test_max_bytes_is_checked(bad: object) -> None:
    with pytest.raises(InvalidOptionError):
        FrameWindow(max_bytes=bad)  # type: ignore[arg-type]


@given(st.lists(st.integers(min_value=1, max_value=500), min_size=1, max_size=60), st.integers(0, 2**16))
def test_bytes_in_flight_is_the_sum_of_the_frames_in_flight(sizes: list[int], seed: int) -> None:
    import random

    rng = random.Random(seed)
    w = FrameWindow(max_pending=1000, max_bytes=1 << 30)
    w.sent(range(len(sizes)), [b"z" * n for n in sizes], 0.0)
    for token in rng.sample(range(len(sizes)), k=rng.randint(0, len(sizes))):
        w.receive_ack(token, ack(token + 1), None, 0.1)
        assert w.bytes_in_flight == sum(len(f) for f in w.frames.values())


# ------------------------------------------------------------------ shared replies (a token per batch)

PREFIX = b"_INBOX.r."


def hpubs(lo: int, hi: int, reply: int | None = None) -> list[bytes]:
    """Frames as the Spark writer builds them: every frame of a batch replies to its first token."""
    token = lo if reply is None else reply
    return [b"HPUB s %s%d 10 %d\r\nF%d\r\n" % (PREFIX, token, 12 + len(b"%d" % t), t) for t in range(lo, hi)]


def shared(**kwargs: object) -> FrameWindow:
    w = FrameWindow(shared_replies=True, **kwargs)  # type: ignore[arg-type]
    w.reply_prefix = PREFIX
    return w


def reply_of(frame: bytes) -> int:
    return int(frame.split(b" ")[2][len(PREFIX) :])


def test_a_batch_is_stored_once_it_has_as_many_pubacks_as_frames() -> None:
    w = shared(max_pending=10, ack_timeout=5.0)
    w.sent(range(0, 3), hpubs(0, 3), 0.0)
    w.sent(range(3, 5), hpubs(3, 5), 0.0)
    w.wake_level = 2
    assert w.receive_ack(0, ack(1), None, 0.1) is False
    assert w.receive_puback(0, True) is False
    assert (w.written, w.in_flight) == (0, 5)  # two answers of three: nothing is known yet
    assert w.receive_ack(1, ack(9), None, 0.1) is False  # no batch has token 1: ignored
    assert w.receive_puback(0, False) is True  # the third: the batch is stored, down to wake_level
    assert (w.written, w.duplicates, w.in_flight) == (3, 1, 2)
    assert (w.written, w.in_flight, w.bytes_in_flight) == (3, 2, sum(map(len, hpubs(3, 5))))
    w.receive_puback(3, False)
    w.receive_ack(3, ack(5), None, 0.2)
    assert (w.written, w.in_flight, w.bytes_in_flight, w.failure) == (5, 0, 0, None)


def test_a_transient_answer_sends_the_whole_batch_again_under_a_new_token() -> None:
    w = shared(ack_timeout=30.0, retry_wait=0.1)
    w.sent(range(0, 3), hpubs(0, 3), 0.0)
    w.receive_puback(0, False)  # one frame stored
    assert w.receive_ack(0, b"", 503, 0.0) is True  # another: no responders
    assert w.receive_puback(0, False) is False  # the third: the batch is to be sent again, not counted
    again = w.due(0.1)
    assert len(again) == 3 and w.resent == 3
    token = reply_of(again[0])
    assert token != 0 and {reply_of(f) for f in again} == {token}
    assert [f.split(b"\r\n", 1)[1] for f in again] == [f.split(b"\r\n", 1)[1] for f in hpubs(0, 3)]  # same msg ids
    assert w.bytes_in_flight == sum(map(len, again))
    for _ in range(3):
        w.receive_puback(0, False)  # answers to the first sends: their token is retired
    assert w.written == 0
    w.receive_puback(token, True)
    w.receive_puback(token, False)
    w.receive_ack(token, ack(3, duplicate=True), None, 0.2)
    assert (w.written, w.duplicates, w.in_flight, w.bytes_in_flight) == (3, 2, 0, 0)


def test_a_missed_deadline_sends_the_batch_again_then_fails_it_whole() -> None:
    w = shared(ack_timeout=1.0, retries=1)
    w.sent(range(0, 2), hpubs(0, 2), 0.0)
    w.sent(range(2, 4), hpubs(2, 4), 0.5)
    w.receive_puback(0, False)
    w.receive_puback(2, False)
    w.receive_puback(2, False)  # batch 2 is stored
    again = w.due(1.0)
    assert [reply_of(f) for f in again] == [reply_of(again[0])] * 2
    assert w.due(1.5) == [] and w.next_deadline() == 2.0  # (batch 2's deadline: it is stored)
    assert w.due(2.0) == []  # out of attempts (budget: ack_timeout * (retries + 1))
    assert isinstance(w.failure, PubAckTimeoutError)
    assert (w.failed_token, list(w.failed_tokens)) == (0, [0, 1])
    assert "(after 1 re-sends of the same frames)" in "".join(getattr(w.failure, "__notes__", [""]))
    assert (w.written, w.in_flight, w.bytes_in_flight) == (2, 0, 0)


def test_a_definite_refusal_fails_the_window_with_the_whole_batch() -> None:
    w = shared()
    w.sent(range(7, 10), hpubs(7, 10), 0.0)
    w.receive_puback(7, False)
    assert w.receive_ack(7, err(503, 10077, "maximum messages per subject exceeded"), None, 0.0) is True
    assert isinstance(w.failure, MaxMsgsPerSubjectError) and list(w.failed_tokens) == [7, 8, 9]
    assert (w.in_flight, w.bytes_in_flight) == (0, 0)


def test_in_subject_mode_10077_counts_as_already_written() -> None:
    w = shared(per_subject_dedup=True)
    w.sent(range(0, 2), hpubs(0, 2), 0.0)
    w.receive_ack(0, err(400, 10077, "maximum messages per subject exceeded"), None, 0.0)
    w.receive_puback(0, False)
    assert (w.written, w.duplicates, w.failure, w.in_flight) == (2, 1, None, 0)


def test_everything_after_a_reconnect_sends_every_batch_under_new_tokens_in_row_order() -> None:
    w = shared(ack_timeout=1.0, retry_wait=0.1)
    w.sent(range(1, 3), hpubs(1, 3), 0.0)
    w.sent(range(5, 7), hpubs(5, 7), 0.1)
    w.receive_ack(1, b"", 503, 0.1)
    assert len(w.due(0.2)) == 2  # batch 1 again, under a token above batch 5's
    w.receive_puback(5, False)
    out = w.everything(3.0)
    assert [f.split(b"\r\n", 1)[1] for f in out] == [b"F1\r\n", b"F2\r\n", b"F5\r\n", b"F6\r\n"]
    t1, t5 = reply_of(out[0]), reply_of(out[2])
    assert t1 == reply_of(out[1]) and t5 == reply_of(out[3]) and len({t1, t5, 1, 5}) == 4
    assert w.next_deadline() == 4.0 and w.resent == 6
    w.receive_puback(5, False)  # the old token: ignored
    w.receive_puback(t5, False)
    assert w.written == 0  # one answer of two on the new token
    w.receive_puback(t5, True)
    assert (w.written, w.in_flight) == (2, 2)


def test_with_reply_rewrites_only_the_reply_subject() -> None:
    from jscore.publish import with_reply

    assert with_reply(b"HPUB a.b _INBOX.x.1 12 14\r\nNATS/1.0\r\n\r\nhi\r\n", b"_INBOX.x.77") == (
        b"HPUB a.b _INBOX.x.77 12 14\r\nNATS/1.0\r\n\r\nhi\r\n"
    )
    assert with_reply(b"PUB a r 2\r\nhi\r\n", b"q") == b"PUB a q 2\r\nhi\r\n"
    with pytest.raises(ValueError):
        with_reply(b"PUB a 2\r\nhi\r\n", b"q")  # no reply subject to replace
    with pytest.raises(ValueError):
        with_reply(b"HPUB a 12 14\r\nNATS/1.0\r\n\r\nhi\r\n", b"q")  # nor here (not the header size)


def test_a_batch_token_must_be_new_and_a_refused_batch_changes_nothing() -> None:
    w = shared()
    w.sent(range(0, 2), hpubs(0, 2), 0.0)
    before = (dict(w.frames), w.bytes_in_flight)
    with pytest.raises(ValueError):
        w.sent(range(0, 3), hpubs(0, 3), 0.0)  # the token of a batch in flight
    assert (dict(w.frames), w.bytes_in_flight) == before
    w.receive_puback(0, False)
    w.receive_puback(0, False)
    assert (w.written, w.in_flight) == (2, 0)
    with pytest.raises(ValueError):
        w.sent(range(0, 2), hpubs(0, 2), 0.0)  # settled, but late answers to it may still come
    with pytest.raises(ValueError):
        w.sent(range(1 << 52, (1 << 52) + 1), hpubs(1 << 52, (1 << 52) + 1), 0.0)  # a re-send's token
    assert (w.in_flight, w.bytes_in_flight) == (0, 0)
    w.sent(range(2, 3), hpubs(2, 3), 0.0)
    assert w.in_flight == 1


@given(
    st.lists(st.tuples(st.integers(0, 4), st.sampled_from(["ok", "dup", "503", "late", "stale"])), max_size=80),
    st.integers(0, 3),
)
def test_shared_replies_never_count_a_batch_stored_that_was_not(events: list[tuple[int, str]], retries: int) -> None:
    """A model of the server: each send of a frame is stored or answered 503 and answered at
    most once, on the token it was sent with; answers to earlier sends may come late. Whatever
    happens, a frame the window counts as written was stored, every frame ends settled or
    failed, and nothing is counted twice."""
    w = shared(ack_timeout=1.0, retries=retries, retry_wait=0.1)
    for b in range(5):
        w.sent(range(4 * b, 4 * b + 4), hpubs(4 * b, 4 * b + 4), 0.0)
    # per frame: the (token, stored?) of its sends not answered yet
    unanswered: dict[int, list[tuple[int, bool]]] = {t: [(4 * (t // 4), True)] for t in range(20)}
    stored: set[int] = set()
    now = 0.0

    def answer(frame: int, index: int, fail: bool) -> None:
        token, _ = unanswered[frame].pop(index)
        if fail:
            w.receive_ack(token, b"", 503, now)
        else:
            duplicate = frame in stored
            stored.add(frame)
            w.receive_ack(token, ack(frame + 1, duplicate=duplicate), None, now)

    def resent(out: list[bytes]) -> None:
        for f in out:
            frame = int(f.split(b"\r\n")[1][1:])
            unanswered[frame].append((reply_of(f), True))

    def check() -> None:
        if w.failure is None:  # every frame out of the window was counted written: it is stored
            assert set(range(20)) - set(w.frames) <= stored

    for batch, what in events:
        check()
        now += 0.05
        frames_of = [t for t in range(4 * batch, 4 * batch + 4) if unanswered[t]]
        if what in ("ok", "dup", "503") and frames_of:
            answer(frames_of[0], -1, what == "503")
        elif what == "stale" and frames_of and len(unanswered[frames_of[0]]) > 1:
            answer(frames_of[0], 0, False)  # an answer to an earlier send, late
        else:
            resent(w.due(now))
    for _ in range(200):
        if not w.in_flight:
            break
        now += 1.0
        for t in range(20):
            while unanswered[t]:
                answer(t, 0, False)
                check()
        resent(w.due(now))
    assert w.in_flight == 0 and w.bytes_in_flight == 0
    assert w.written <= len(stored)
    assert w.written == 20 or w.failure is not None


def test_more_answers_than_frames_fail_the_window_even_after_the_batch_was_settled() -> None:
    """A second responder (a core subscriber answering the writer's messages) shows as an
    answer too many on a batch's token: the window fails rather than trust the count."""
    w = shared(retry_wait=0.1)
    w.sent(range(0, 2), hpubs(0, 2), 0.0)
    w.receive_puback(0, False)
    w.receive_puback(0, False)
    assert (w.written, w.failure) == (2, None)
    assert w.receive_ack(0, b'{"ok":true}', None, 0.1) is True  # a third answer on a send of two
    assert isinstance(w.failure, PubAckTimeoutError) and list(w.failed_tokens) == [0, 1]
    assert "more answers than messages" in str(w.failure)
    w = shared(retry_wait=0.1)
    w.sent(range(0, 2), hpubs(0, 2), 0.0)
    assert w.receive_pubacks(0, 3, 0) is True  # three in one read
    assert isinstance(w.failure, PubAckTimeoutError) and w.written == 0
    w = shared(retry_wait=0.1)
    w.sent(range(0, 2), hpubs(0, 2), 0.0)
    w.receive_ack(0, b"", 503, 0.0)
    again = w.due(0.1)
    for _ in range(2):
        assert w.receive_puback(0, False) is False  # answers to the first send: retired, not too many
    token = reply_of(again[0])
    w.receive_puback(token, False)
    w.receive_puback(token, True)
    assert (w.written, w.failure) == (2, None)
