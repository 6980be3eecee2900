"""jscore.directget: batched direct get (ADR-31) without I/O.

Golden request bodies, client-side validation, the status table (and that the single get and
the generated docs follow it), reply parsing, and the machine driven by scripted replies in
virtual time: normal ends, paging, every status, malformed and lost replies, old servers,
timeouts. Ends with the fuzz target's seeds and a short hypothesis run.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz import fuzz_directget
from jscore import directget as DG
from jscore import errors, jsapi
from jscore.headers import Headers

UTC = timezone.utc
T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
SUBJECT = "$JS.API.DIRECT.GET.S"
ROOT = Path(__file__).resolve().parents[2]


# =========================================================================== request bodies


def test_batch_bodies_golden() -> None:
    assert DG.batch_request(batch=50) == b'{"seq":1,"batch":50}'
    assert DG.batch_request(7, batch=50, max_bytes=4096) == b'{"seq":7,"batch":50,"max_bytes":4096}'
    assert DG.batch_request(3, next_by_subject="a.*", batch=2) == b'{"seq":3,"next_by_subj":"a.*","batch":2}'
    assert DG.batch_request(start_time=T0, batch=2) == b'{"start_time":"2026-01-02T03:04:05Z","batch":2}'
    assert DG.batch_request(start_time=T0, next_by_subject="a.>", batch=1) == (
        b'{"next_by_subj":"a.>","start_time":"2026-01-02T03:04:05Z","batch":1}'
    )


def test_last_for_bodies_golden() -> None:
    assert DG.last_for_request("kv.>") == b'{"multi_last":["kv.>"]}'
    assert DG.last_for_request(["a.1", "a.2", "a.1"], batch=10) == b'{"batch":10,"multi_last":["a.1","a.2"]}'
    assert DG.last_for_request(["a.>"], up_to_seq=42) == b'{"multi_last":["a.>"],"up_to_seq":42}'
    assert DG.last_for_request(("a.>",), up_to_time=T0, batch=3) == (
        b'{"batch":3,"multi_last":["a.>"],"up_to_time":"2026-01-02T03:04:05Z"}'
    )


def test_later_pages_ask_from_the_cursor_up_to_the_snapshot() -> None:
    opts = DG.resolve_last_for(["a.>"], up_to_time=T0, batch=3)
    # The first page's up_to_time is replaced by the snapshot sequence it produced.
    assert json.loads(opts.body(11, 40)) == {"seq": 11, "batch": 3, "multi_last": ["a.>"], "up_to_seq": 40}
    assert json.loads(opts.body()) == {"batch": 3, "multi_last": ["a.>"], "up_to_time": "2026-01-02T03:04:05Z"}


def test_single_get_bodies_unchanged() -> None:
    """The request model is shared with the single get: its bodies must not change."""
    s = jsapi.ApiSubjects()
    assert jsapi.direct_get_request(s, "S", 7) == (SUBJECT, b'{"seq":7}')
    assert jsapi.direct_get_request(s, "S", start_time=T0)[1] == b'{"start_time":"2026-01-02T03:04:05Z"}'


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"batch": 0}, errors.InvalidOptionError),
        ({"batch": -1}, errors.InvalidOptionError),
        ({"batch": 2**31}, errors.InvalidOptionError),
        ({"batch": True}, errors.InvalidOptionError),
        ({"batch": 1.0}, errors.InvalidOptionError),
        ({"batch": "5"}, errors.InvalidOptionError),
        ({"batch": 5, "max_bytes": 0}, errors.InvalidOptionError),
        ({"batch": 5, "max_bytes": -1}, errors.InvalidOptionError),
        ({"batch": 5, "seq": 0}, errors.InvalidOptionError),
        ({"batch": 5, "seq": -3}, errors.InvalidOptionError),
        ({"batch": 5, "seq": 1, "start_time": T0}, errors.InvalidOptionError),
        ({"batch": 5, "start_time": datetime(2026, 1, 1)}, errors.InvalidOptionError),  # naive
        ({"batch": 5, "start_time": "2026-01-01T00:00:00Z"}, errors.InvalidOptionError),
        ({"batch": 5, "next_by_subject": "a b"}, errors.BadSubjectError),
        ({"batch": 5, "next_by_subject": ""}, errors.BadSubjectError),
        ({"batch": 5, "next_by_subject": "a.>.b"}, errors.BadSubjectError),
    ],
)
def test_batch_validation(kwargs: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        DG.resolve_batch(**kwargs)
    assert issubclass(error, ValueError)


@pytest.mark.parametrize(
    ("subjects", "kwargs", "error"),
    [
        ([], {}, errors.InvalidOptionError),
        ((), {}, errors.InvalidOptionError),
        ("", {}, errors.BadSubjectError),
        (["a", "b c"], {}, errors.BadSubjectError),
        (["a.>.b"], {}, errors.BadSubjectError),
        ([1], {}, errors.BadSubjectError),
        (b"a.b", {}, errors.InvalidOptionError),
        (None, {}, errors.InvalidOptionError),
        (["a"], {"up_to_seq": 3, "up_to_time": T0}, errors.InvalidOptionError),
        (["a"], {"up_to_seq": 0}, errors.InvalidOptionError),
        (["a"], {"up_to_time": datetime(2026, 1, 1)}, errors.InvalidOptionError),
        (["a"], {"up_to_time": "2026-01-01"}, errors.InvalidOptionError),  # not RFC 3339 data: a str
        (["a"], {"batch": 0}, errors.InvalidOptionError),
    ],
)
def test_last_for_validation(subjects: Any, kwargs: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        DG.resolve_last_for(subjects, **kwargs)


def test_many_filters_are_the_servers_business() -> None:
    """The 1024 limit counts MATCHING subjects (413 from the server), not filters: 1025 literal
    filters of which few exist are a valid request, so they are not refused here."""
    body = DG.last_for_request([f"k.{i}" for i in range(DG.MAX_MULTI_LAST_SUBJECTS + 1)])
    assert len(json.loads(body)["multi_last"]) == 1025


@pytest.mark.parametrize("timeout", [0, -1.0, math.nan, math.inf, True, "1"])
def test_machine_refuses_a_bad_timeout(timeout: Any) -> None:
    with pytest.raises(errors.InvalidOptionError):
        DG.DirectGetBatch(SUBJECT, DG.resolve_batch(batch=1), timeout=timeout, now=0.0)


# =========================================================================== the status table


@pytest.mark.parametrize(
    ("code", "description", "row"),
    [
        (204, "EOB", 0),
        (204, "Something", 1),
        (204, None, 1),
        (204, "eob", 1),  # case-sensitive prefix: an unknown 204, read as an end of batch all the same
        (404, "Message Not Found", 2),
        (404, "No Results", 2),
        (408, "Bad Request", 3),
        (408, "Empty Request", 3),
        (413, "Too Many Results", 4),
        (503, None, 5),
        (500, "store closed", 6),
        (200, "OK", 6),
    ],
)
def test_classify(code: int, description: str | None, row: int) -> None:
    assert DG.classify_direct_status(code, description) is DG.DIRECT_GET_STATUS_TABLE[row]


@pytest.mark.parametrize(
    ("code", "cls", "err_code"),
    [
        (404, errors.MsgNotFoundError, 10037),
        (408, errors.BadRequestError, 10003),
        (413, errors.TooManySubjectsError, 0),
        (500, errors.JetStreamAPIError, 0),
        (204, errors.JetStreamAPIError, 0),
    ],
)
def test_single_get_follows_the_table(code: int, cls: type[errors.JetStreamAPIError], err_code: int) -> None:
    with pytest.raises(cls) as exc:
        jsapi.stored_msg_from_direct(None, b"", code, "Desc")
    assert type(exc.value) is cls
    assert (exc.value.code, exc.value.err_code, exc.value.description) == (code, err_code, "Desc")


def test_bare_status_lines_get_a_description() -> None:
    with pytest.raises(errors.MsgNotFoundError, match="no message found"):
        jsapi.stored_msg_from_direct(None, b"", 404, None)
    with pytest.raises(errors.BadRequestError, match="bad request"):
        jsapi.stored_msg_from_direct(None, b"", 408, "")
    with pytest.raises(errors.JetStreamAPIError, match="status 599"):
        jsapi.stored_msg_from_direct(None, b"", 599, None)


def test_no_responders_error_is_both_kinds() -> None:
    err = DG.direct_status_error(DG.classify_direct_status(503, None), 503, None)
    assert isinstance(err, errors.DirectGetNoRespondersError)
    assert isinstance(err, errors.JetStreamError) and isinstance(err, errors.NoRespondersError)
    assert "allow_direct" in str(err)


def test_too_many_subjects_is_an_api_error() -> None:
    assert issubclass(errors.TooManySubjectsError, errors.JetStreamAPIError)
    for name in ("TooManySubjectsError", "DirectGetNoRespondersError", "BatchGetUnsupportedError", "BatchGapError"):
        assert name in errors.__all__


def test_every_row_is_in_the_generated_doc() -> None:
    text = (ROOT / "docs" / "conformance.md").read_text(encoding="utf-8")
    start = text.index("## Direct get (ADR-31)")
    section = text[start : text.index("\n## ", start + 1)]  # up to the next part of the page
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| Code")]
    assert len(rows) == len(DG.DIRECT_GET_STATUS_TABLE)
    for rule, row in zip(DG.DIRECT_GET_STATUS_TABLE, rows):
        assert row.startswith("| any other |" if rule.code is None else f"| {rule.code} |")
        assert rule.note in row
        assert DG.DISPOSITION_TEXT[rule.batch] in row


# =========================================================================== reply parsing


def reply_headers(seq: int, last: int | None, pending: int | None, subject: str = "a.1", **extra: str) -> Headers:
    h = Headers(
        [
            ("Nats-Stream", "S"),
            ("Nats-Subject", subject),
            ("Nats-Sequence", str(seq)),
            ("Nats-Time-Stamp", "2026-11-22T06:54:08.822887922Z"),
        ]
    )
    if pending is not None:
        h.add("Nats-Num-Pending", str(pending))
    if last is not None:
        h.add("Nats-Last-Sequence", str(last))
    for k, v in extra.items():
        h.add(k, v)
    return h


def eob_headers(pending: str | int | None, last: str | int | None, upto: str | int | None = None) -> Headers:
    h = Headers()
    if pending is not None:
        h.add("Nats-Num-Pending", str(pending))
    if last is not None:
        h.add("Nats-Last-Sequence", str(last))
    if upto is not None:
        h.add("Nats-UpTo-Sequence", str(upto))
    return h


def test_parse_batch_reply() -> None:
    r = DG.parse_batch_reply(reply_headers(5, 3, 4, Own="x"), b"data")
    assert r.msg is not None
    assert (r.msg.seq, r.msg.subject, r.msg.stream, r.msg.data) == (5, "a.1", "S", b"data")
    assert r.msg.time == datetime(2026, 11, 22, 6, 54, 8, 822887, tzinfo=UTC)  # truncated
    assert r.msg.time.nanosecond == 922  # type: ignore[attr-defined]
    assert r.msg.headers == Headers([("Own", "x")])  # the cursor headers are not the message's
    assert (r.num_pending, r.last_seq, r.up_to_seq) == (4, 3, None)


@pytest.mark.parametrize("value", ["-1", "abc", "1e3", "1.0", " 1", "\u0663", "18446744073709551616", "9" * 21, ""])
def test_parse_batch_reply_refuses_garbage_counts(value: str) -> None:
    h = reply_headers(5, 3, None)
    h.add("Nats-Num-Pending", value)
    with pytest.raises(errors.JetStreamError, match="Nats-Num-Pending"):
        DG.parse_batch_reply(h, b"")


def test_parse_batch_reply_needs_the_message_headers() -> None:
    with pytest.raises(errors.JetStreamError):
        DG.parse_batch_reply(None, b"")
    with pytest.raises(errors.JetStreamError):
        DG.parse_batch_reply(eob_headers(1, 2), b"")


# =========================================================================== the machine


class Run:
    """A machine and virtual time; ``events`` collects everything it reported."""

    def __init__(self, options: DG.BatchOptions | DG.LastForOptions, timeout: float = 2.0) -> None:
        self.now = 10.0
        self.m = DG.DirectGetBatch(SUBJECT, options, timeout=timeout, now=self.now)
        self.events: list[DG.DirectGetEvent] = self.m.drain_events()

    def msg(self, seq: int, last: int | None, pending: int | None = 0, subject: str = "a.1", data: bytes = b"") -> None:
        self.feed(reply_headers(seq, last, pending, subject), data, None, None)

    def eob(self, pending: str | int | None, last: str | int | None, upto: str | int | None = None) -> None:
        self.feed(eob_headers(pending, last, upto), b"", 204, "EOB")

    def status(self, code: int, description: str | None = None) -> None:
        self.feed(None, b"", code, description)

    def feed(self, headers: Headers | None, data: bytes, status: int | None, desc: str | None) -> None:
        self.now += 0.01
        self.m.receive(headers, data, status, desc, self.now)
        self.events += self.m.drain_events()

    def tick(self, dt: float) -> None:
        self.now += dt
        self.m.handle_timeout(self.now)
        self.events += self.m.drain_events()

    @property
    def seqs(self) -> list[int]:
        return [m.seq for e in self.events if isinstance(e, DG.StoredMsgsDelivered) for m in e.msgs]

    @property
    def requests(self) -> list[dict[str, Any]]:
        return [json.loads(e.body) for e in self.events if isinstance(e, DG.DirectGetRequested)]

    @property
    def finished(self) -> DG.DirectGetFinished:
        ends = [e for e in self.events if isinstance(e, DG.DirectGetFinished)]
        assert len(ends) == 1, self.events
        assert self.events[-1] is ends[0], "nothing may follow the end"
        return ends[0]


def batch(**kwargs: Any) -> Run:
    kwargs.setdefault("batch", 5)
    return Run(DG.resolve_batch(**kwargs))


def multi(subjects: list[str] | None = None, **kwargs: Any) -> Run:
    return Run(DG.resolve_last_for(subjects or ["a.>"], **kwargs))


def test_the_request_is_queued_at_once_with_its_deadline() -> None:
    r = batch(seq=3, batch=2)
    assert r.events == [DG.DirectGetRequested(SUBJECT, b'{"seq":3,"batch":2}', 1)]
    assert r.m.next_deadline() == 12.0
    assert r.m.next_deadline() == 12.0  # pure
    assert not r.m.done and r.m.next_event() is None


def test_a_run_of_replies_is_one_event_and_a_handed_out_event_is_never_added_to() -> None:
    """Replies fed between two drains are one event, in order; the end is its own event
    after them; an event taken by next_event() is not changed by later replies."""
    m = DG.DirectGetBatch(SUBJECT, DG.resolve_last_for(["a.>"], batch=3), timeout=2.0, now=0.0)
    assert [type(e) for e in m.drain_events()] == [DG.DirectGetRequested]
    m.receive(reply_headers(1, 0, 2, "a.1"), b"1", None, None, 0.1)
    first = m.next_event()
    assert isinstance(first, DG.StoredMsgsDelivered) and [x.seq for x in first.msgs] == [1]
    m.receive(reply_headers(2, 1, 1, "a.2"), b"2", None, None, 0.2)
    m.receive(reply_headers(3, 2, 0, "a.3"), b"3", None, None, 0.3)
    m.receive(eob_headers(0, 3, 3), b"", 204, "EOB", 0.4)
    events = m.drain_events()
    assert [type(e) for e in events] == [DG.StoredMsgsDelivered, DG.DirectGetFinished]
    run = events[0]
    assert isinstance(run, DG.StoredMsgsDelivered)
    assert [(x.seq, x.data) for x in run.msgs] == [(2, b"2"), (3, b"3")]
    assert [x.seq for x in first.msgs] == [1]  # (handed out before: untouched)


def test_batch_ends_exactly_at_eob_with_its_cursor() -> None:
    r = batch(batch=3)
    r.msg(1, 0, 8, data=b"x")
    r.msg(2, 1, 7)
    r.msg(3, 2, 6)
    assert not r.m.done and r.m.num_pending == 6
    r.eob(6, 3)
    assert r.seqs == [1, 2, 3]
    assert r.finished == DG.DirectGetFinished(None, "eob")
    assert (r.m.num_pending, r.m.last_seq, r.m.next_seq, r.m.delivered, r.m.pages) == (6, 3, 4, 3, 1)
    assert r.m.next_deadline() is None
    # Anything late is ignored.
    r.msg(4, 3, 5)
    r.eob(0, 4)
    assert r.seqs == [1, 2, 3] and r.finished.reason == "eob"


def test_deleted_sequences_are_skipped_without_a_gap() -> None:
    r = batch(seq=3)
    r.msg(3, 0, 2)
    r.msg(5, 3, 1)  # 4 was deleted: the server's chain names 3 as the one before
    r.msg(9, 5, 0)
    r.eob(0, 9)
    assert r.seqs == [3, 5, 9] and r.finished.error is None and r.m.next_seq == 10


def test_next_seq_without_messages() -> None:
    r = batch(seq=7)
    r.eob(0, 0)
    assert r.seqs == [] and r.finished.reason == "eob" and r.m.next_seq == 7
    r = batch(start_time=T0)
    r.status(404, "Message Not Found")
    assert r.m.next_seq is None and r.m.num_pending == 0


@pytest.mark.parametrize("description", ["Message Not Found", "No Results", None])
def test_404_is_an_empty_result(description: str | None) -> None:
    r = batch(seq=100)
    r.status(404, description)
    assert r.seqs == [] and r.finished == DG.DirectGetFinished(None, "empty") and r.m.num_pending == 0
    r = multi()
    r.status(404, description)
    assert r.finished.error is None


@pytest.mark.parametrize(
    ("code", "description", "cls"),
    [
        (408, "Bad Request", errors.BadRequestError),
        (408, "Empty Request", errors.BadRequestError),
        (413, "Too Many Results", errors.TooManySubjectsError),
        (503, None, errors.DirectGetNoRespondersError),
        (500, "store closed", errors.JetStreamAPIError),
    ],
)
def test_error_statuses(code: int, description: str | None, cls: type[Exception]) -> None:
    for r in (batch(), multi()):
        r.status(code, description)
        err = r.finished.error
        assert type(err) is cls and r.finished.reason == "status"
        if isinstance(err, errors.JetStreamAPIError):
            assert err.code == code


def test_an_error_after_messages_keeps_them() -> None:
    r = batch()
    r.msg(1, 0, 3)
    r.status(500, "boom")
    assert r.seqs == [1] and isinstance(r.finished.error, errors.JetStreamAPIError)


@pytest.mark.parametrize("rule", DG.DIRECT_GET_STATUS_TABLE, ids=lambda r: f"{r.code}-{r.description_prefix or 'any'}")
def test_every_row_drives_the_machine(rule: DG.DirectStatusRule) -> None:
    code = rule.code if rule.code is not None else 599
    r = batch()
    r.feed(eob_headers(0, 0), b"", code, rule.description_prefix or "Whatever")
    end = r.finished
    if rule.batch is DG.Disposition.END_OF_BATCH:
        assert end == DG.DirectGetFinished(None, "eob")
    elif rule.batch is DG.Disposition.EMPTY:
        assert end == DG.DirectGetFinished(None, "empty")
    else:
        assert end.reason == "status" and isinstance(end.error, rule.error or errors.JetStreamAPIError)


# -- lost replies


def test_gap_in_the_middle() -> None:
    r = batch()
    r.msg(1, 0)
    r.msg(3, 2)  # 2 was lost
    assert r.seqs == [1]
    assert isinstance(r.finished.error, errors.BatchGapError) and r.finished.reason == "gap"
    assert r.m.next_seq == 2  # resume right after what was received


def test_lost_first_message() -> None:
    r = batch()
    r.msg(2, 1)
    assert r.seqs == [] and isinstance(r.finished.error, errors.BatchGapError)


def test_lost_last_message() -> None:
    r = batch()
    r.msg(1, 0)
    r.eob(0, 2)
    assert r.seqs == [1] and isinstance(r.finished.error, errors.BatchGapError)


def test_lost_eob_times_out_by_the_deadline() -> None:
    r = batch(batch=2)
    r.msg(1, 0, 5)
    r.msg(2, 1, 4)
    deadline = r.m.next_deadline()
    assert deadline == 12.0
    r.tick(deadline - r.now - 0.001)  # just before: nothing
    assert not r.m.done
    r.tick(0.001)
    err = r.finished.error
    assert isinstance(err, errors.TimeoutError) and isinstance(err, TimeoutError)
    assert r.finished.reason == "timeout" and "resume at seq 3" in str(err)
    assert r.seqs == [1, 2] and r.m.next_deadline() is None
    r.eob(4, 2)  # the EOB after all: too late
    assert r.finished.reason == "timeout"


def test_spurious_timeouts_are_no_ops() -> None:
    r = batch()
    r.tick(0.5)
    r.tick(1.0)
    assert not r.m.done and r.events[1:] == []


def test_stop() -> None:
    r = batch()
    r.msg(1, 0)
    r.m.stop(r.now)
    r.events += r.m.drain_events()
    assert r.finished == DG.DirectGetFinished(None, "stopped")
    r.m.stop(r.now)
    assert r.m.drain_events() == []


# -- malformed replies and old servers


def test_old_server_without_batch_support() -> None:
    r = batch()
    r.msg(1, None, None)
    assert r.seqs == []  # nothing delivered: a batch of one would look complete
    assert isinstance(r.finished.error, errors.BatchGetUnsupportedError) and r.finished.reason == "unsupported"


def test_missing_pending_later_is_malformed() -> None:
    r = batch()
    r.msg(1, 0, 3)
    r.msg(2, 1, None)
    assert r.seqs == [1] and r.finished.reason == "malformed"
    assert type(r.finished.error) is errors.JetStreamError


@pytest.mark.parametrize(
    "headers",
    [
        reply_headers(1, None, 3),  # no Last-Sequence
        reply_headers(1, 0, 3, **{"Nats-Last-Sequence": "x"}),
        Headers([("Nats-Stream", "S"), ("Nats-Num-Pending", "1"), ("Nats-Last-Sequence", "0")]),  # no seq/subject/time
        reply_headers(1, 0, 3).copy(),
    ],
)
def test_malformed_messages(headers: Headers) -> None:
    if headers.get("Nats-Time-Stamp"):
        headers["Nats-Time-Stamp"] = "yesterday"
    r = batch()
    r.feed(headers, b"", None, None)
    assert r.seqs == [] and r.finished.reason == "malformed"
    assert isinstance(r.finished.error, errors.JetStreamError)


def test_sequences_must_increase() -> None:
    r = batch()
    r.msg(5, 0)
    r.msg(4, 5)
    assert r.seqs == [5] and r.finished.reason == "malformed"


@pytest.mark.parametrize(
    ("pending", "last"),
    [(None, 0), (0, None), ("x", 0), (0, "-1"), (None, None), ("18446744073709551616", 0)],
)
def test_malformed_eob(pending: Any, last: Any) -> None:
    r = batch()
    r.eob(pending, last)
    assert r.finished.reason == "malformed" and isinstance(r.finished.error, errors.JetStreamError)


def test_eob_without_headers() -> None:
    r = batch()
    r.status(204, "EOB")
    assert r.finished.reason == "malformed"


# -- multi_last paging


def test_multi_last_pages_over_one_snapshot() -> None:
    r = multi(["a.>", "b.1"], batch=2)
    assert r.requests == [{"batch": 2, "multi_last": ["a.>", "b.1"]}]
    r.msg(8, 0, 2, "a.1")
    r.msg(9, 8, 1, "a.2")
    assert r.m.num_pending is None  # multi_last: only the EOBs say what is left
    r.eob(1, 9, 10)
    # The next page: from the cursor, up to the first page's snapshot; a fresh deadline.
    assert r.requests[1] == {"seq": 10, "batch": 2, "multi_last": ["a.>", "b.1"], "up_to_seq": 10}
    assert r.m.next_deadline() == pytest.approx(r.now + 2.0)
    assert not r.m.done and r.m.pages == 2
    r.msg(10, 0, 0, "b.1")  # the chain restarts at 0 on every page
    r.eob(0, 10, 99)  # a later UpTo (new writes) does not move the snapshot
    assert r.seqs == [8, 9, 10] and r.finished == DG.DirectGetFinished(None, "eob")
    assert r.m.up_to_seq == 10 and r.m.num_pending == 0


def test_multi_last_with_up_to_time_pages_by_sequence() -> None:
    r = multi(up_to_time=T0, batch=1)
    r.msg(3, 0, 1)
    r.eob(1, 3, 5)
    assert r.requests[1] == {"seq": 4, "batch": 1, "multi_last": ["a.>"], "up_to_seq": 5}


def test_multi_last_user_up_to_seq() -> None:
    r = multi(up_to_seq=5)
    r.msg(3, 0, 0)
    r.eob(0, 3, 5)
    assert r.requests == [{"multi_last": ["a.>"], "up_to_seq": 5}] and r.m.up_to_seq == 5


def test_multi_last_timeout_is_per_page() -> None:
    r = multi(batch=1)
    r.tick(1.5)
    r.msg(3, 0, 1)
    r.eob(1, 3, 5)
    r.tick(1.5)  # 3 s after the first request, 1.5 s after the second
    assert not r.m.done
    r.tick(0.6)
    assert isinstance(r.finished.error, errors.TimeoutError) and "page 2" in str(r.finished.error)


def test_multi_last_cannot_page_without_upto() -> None:
    r = multi(batch=1)
    r.msg(3, 0, 1)
    r.eob(1, 3)
    assert r.finished.reason == "malformed" and len(r.requests) == 1


def test_multi_last_does_not_loop_on_an_empty_page() -> None:
    r = multi(batch=1)
    r.eob(3, 0, 10)
    assert r.finished.reason == "malformed" and "no progress" in str(r.finished.error)


def test_multi_last_without_upto_when_nothing_is_pending_is_fine() -> None:
    r = multi()
    r.msg(3, 0, 0)
    r.eob(0, 3)
    assert r.finished.error is None and r.m.up_to_seq is None


# -- a model of the server, with or without a lost reply


def server_replies(seqs: list[int], batch_size: int, total_after: int) -> list[tuple[Headers | None, int | None]]:
    """What nats-server sends for a batch over stored ``seqs``: messages and the EOB."""
    sent = seqs[:batch_size]
    out: list[tuple[Headers | None, int | None]] = []
    prev = 0
    for i, seq in enumerate(sent):
        out.append((reply_headers(seq, prev, len(seqs) - i - 1 + total_after), None))
        prev = seq
    out.append((eob_headers(len(seqs) - len(sent) + total_after, prev), 204))
    return out


@settings(max_examples=200, deadline=None)
@given(
    seqs=st.lists(st.integers(1, 500), min_size=1, max_size=30, unique=True).map(sorted),
    batch_size=st.integers(1, 40),
    drop=st.none() | st.integers(0, 40),
)
def test_model_server_with_a_dropped_reply(seqs: list[int], batch_size: int, drop: int | None) -> None:
    replies = server_replies(seqs, batch_size, 0)
    if drop is not None:
        drop %= len(replies)
        del replies[drop]
    r = batch(seq=1, batch=batch_size)
    for headers, status in replies:
        r.feed(headers, b"", status, "EOB" if status else None)
    expected = seqs[:batch_size]
    if drop is None:
        assert r.seqs == expected and r.finished == DG.DirectGetFinished(None, "eob")
        assert r.m.num_pending == len(seqs) - len(expected)
        assert r.m.next_seq == expected[-1] + 1
    elif drop == len(replies):  # the EOB was dropped: the deadline ends it
        assert r.seqs == expected and not r.m.done
        r.tick(5.0)
        assert r.finished.reason == "timeout"
    else:  # a message was dropped: detected, what came before it was delivered
        assert r.seqs == expected[:drop] and r.finished.reason == "gap"
        assert r.m.next_seq == (expected[drop - 1] + 1 if drop else 1)


# =========================================================================== the fuzz target

FUZZ_CORPUS = ROOT / "fuzz" / "corpus" / "directget"
SEEDS = sorted(p for p in FUZZ_CORPUS.iterdir() if p.is_file())
FRAGMENTS = [
    b"NATS/1.0", b" 204 EOB", b" 404 No Results", b" 408 Bad Request", b" 413 Too Many Results", b" 503",
    b"\r\n", b"\x00", b"Nats-Stream: S", b"Nats-Subject: a.b", b"Nats-Sequence: ", b"Nats-Num-Pending: ",
    b"Nats-Last-Sequence: ", b"Nats-UpTo-Sequence: ", b"Nats-Time-Stamp: 2026-11-22T06:54:08Z", b"0", b"1", b"2",
    b"9", b"18446744073709551616", b"-1", b"x", b": ",
]  # fmt: skip


def test_fuzz_corpus_is_seeded() -> None:
    assert len(SEEDS) >= 20


@pytest.mark.parametrize("path", SEEDS, ids=lambda p: p.name)
def test_fuzz_seed(path: Path) -> None:
    fuzz_directget.one_input(path.read_bytes())


def test_fuzz_seeds_reach_every_end() -> None:
    reasons = set()
    for path in SEEDS:
        replies = fuzz_directget.parse_script(path.read_bytes())
        for options in (DG.resolve_batch(batch=10), DG.resolve_last_for(["a.>"], batch=2)):
            reasons.add(fuzz_directget.check_script(replies, options).reason)
    assert reasons >= {"eob", "empty", "status", "timeout", "gap", "unsupported", "malformed"}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(FRAGMENTS) | st.binary(max_size=4), max_size=30).map(b"".join))
def test_fuzz_fragments(data: bytes) -> None:
    fuzz_directget.one_input(data)


def test_fuzz_harness_catches_a_machine_that_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(self: DG.DirectGetBatch, *args: object) -> None:
        raise KeyError("not allowed")

    monkeypatch.setattr(DG.DirectGetBatch, "receive", boom)
    with pytest.raises(KeyError):
        fuzz_directget.one_input((FUZZ_CORPUS / "batch_three_then_eob").read_bytes())


def test_fuzz_harness_catches_delivery_after_the_end(monkeypatch: pytest.MonkeyPatch) -> None:
    real = DG.DirectGetBatch.receive

    def leaky(self: DG.DirectGetBatch, headers: Headers | None, data: bytes, status: int | None,
              description: str | None, now: float) -> None:  # fmt: skip
        done = self.done
        real(self, headers, data, status, description, now)
        if done and headers is not None and status is None:
            late = DG.parse_batch_reply(headers, data).msg
            assert late is not None
            self._events.append(DG.StoredMsgsDelivered([late]))

    monkeypatch.setattr(DG.DirectGetBatch, "receive", leaky)
    with pytest.raises(AssertionError):
        fuzz_directget.one_input((FUZZ_CORPUS / "late_after_eob").read_bytes())


# ---------------------------------------------------------------------------- DirectRange


def _read(plan: DG.DirectRange, responder: Any) -> list[int]:
    """Drive a plan against ``responder(seq, count) -> (replies, num_pending)``, replies as
    ``(stream, seq)``; returns the sequences taken."""
    taken: list[int] = []
    while (ask := plan.request()) is not None:
        replies, pending = responder(*ask)
        got = 0
        for stream, seq in replies:
            if not plan.take(stream, seq):
                break
            got += 1
            taken.append(seq)
        else:
            plan.batch_ended(got, pending)
    return taken


def _store(seqs: list[int], stream: str = "S") -> Any:
    def responder(seq: int, count: int) -> tuple[list[tuple[str, int]], int]:
        after = [s for s in seqs if s >= seq]
        return [(stream, s) for s in after[:count]], len(after[count:])

    return responder


def test_range_is_read_in_batches_to_its_end() -> None:
    asked: list[tuple[int, int]] = []
    store = _store(list(range(1, 101)))

    def responder(seq: int, count: int) -> Any:
        asked.append((seq, count))
        return store(seq, count)

    plan = DG.DirectRange("S", 11, 60, 20)
    assert _read(plan, responder) == list(range(11, 61))
    assert asked == [(11, 20), (31, 20), (51, 10)]
    assert plan.done and not plan.fallback and plan.cursor == 60


def test_range_with_gaps_and_a_filter_stops_at_its_end() -> None:
    plan = DG.DirectRange("S", 1, 50, 7)
    assert _read(plan, _store([3, 9, 10, 30, 49, 51, 70])) == [3, 9, 10, 30, 49]
    assert plan.done and not plan.fallback, "a reply past the end ends the plan"


@pytest.mark.parametrize(
    ("seqs", "why"),
    [
        ([1, 2, 3], "the responder has nothing after 3: a replica behind, or the end was deleted"),
        ([], "an empty batch before the end"),
    ],
)
def test_range_ending_early_falls_back_to_the_leader(seqs: list[int], why: str) -> None:
    plan = DG.DirectRange("S", 1, 10, 100)
    assert _read(plan, _store(seqs)) == seqs, why
    assert plan.fallback and not plan.done and plan.cursor == (seqs[-1] if seqs else 0)
    assert plan.request() is None


def test_a_reply_from_another_stream_or_out_of_order_is_not_taken() -> None:
    mirror = DG.DirectRange("S", 1, 10, 100)
    assert _read(mirror, _store([1, 2], stream="MIRROR")) == []
    assert mirror.fallback and mirror.cursor == 0, "a mirror's reply (mirror_direct) is not the stream's"

    def backwards(seq: int, count: int) -> Any:
        return [("S", 4), ("S", 5), ("S", 5)], 3

    again = DG.DirectRange("S", 4, 10, 100)
    assert _read(again, backwards) == [4, 5]
    assert again.fallback and again.cursor == 5


def test_range_that_is_empty_asks_nothing() -> None:
    plan = DG.DirectRange("S", 5, 4, 10)
    assert plan.request() is None and plan.done and not plan.fallback
    with pytest.raises(errors.InvalidOptionError):
        DG.DirectRange("S", 1, 10, 0)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(1, 60), unique=True).map(sorted),
    st.integers(1, 40),
    st.integers(0, 60),
    st.integers(1, 9),
    st.integers(0, 60),
)
def test_range_plus_the_fallback_reads_every_message_once(
    seqs: list[int], start: int, end: int, batch: int, lag: int
) -> None:
    """Whatever the responder holds (a replica that has only the messages up to ``lag``), the
    direct gets and then the leader from ``cursor + 1`` read every message of the range once,
    in order."""
    plan = DG.DirectRange("S", start, end, batch)
    got = _read(plan, _store([s for s in seqs if s <= lag]))
    if plan.fallback:
        got += [s for s in seqs if plan.cursor < s <= end]
    assert got == [s for s in seqs if start <= s <= end]
