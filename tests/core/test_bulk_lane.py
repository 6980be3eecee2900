"""Deliveries read in bulk, as columns (:mod:`jscore.bulk`, :meth:`AckLane.arm_runs` with
``columns``): it must change nothing but the cost. For the same bytes, whole or split anywhere,
the messages and cursors the column runs give (:meth:`DeliveryColumns.messages`), with the
frame-by-frame runs around them, are those the frame-by-frame delivery lane gives alone, in the
same order, with the same error; and the columns agree with those messages."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from jscore import bulk, protocol
from jscore.headers import bulk_headers, header_columns
from jscore.protocol import MAX_CONTROL_LINE, PAYLOAD_MARGIN, AckLane, MsgReceived, MsgsReceived, Parser, RemoteProtocolError

from .test_delivery_lane import SID, _key, feed_in_pieces, frame, hmsg

pytestmark = pytest.mark.skipif(not bulk.AVAILABLE, reason="NumPy and PyArrow are not installed")

_STAMP = 1764662400123456789
_FAKES = [b"", b"\r\nHMSG s.x 13 $JS.ACK.S.OC_x_1.1.1.1.1.0 5 5\r\n", b"\nMSG s.x 13 r 1\r\n", b"\r\n\r\n", b" . "]


def delivery(seq: int, *, headed: bool, payload: bytes, subject: bytes = b"s.x", consumer: str = "OC_x_1") -> bytes:
    reply = f"$JS.ACK.S.{consumer}.1.{seq}.{seq}.{_STAMP + seq}.{max(0, 900 - seq)}"
    if headed:
        return hmsg(reply, b"NATS/1.0\r\nNats-Msg-Id: w-%d\r\n\r\n" % seq, payload, subject)
    return b"MSG %s %d %s %d\r\n%s\r\n" % (subject, SID, reply.encode(), len(payload), payload)


@st.composite
def long_script(draw: st.DrawFn) -> bytes:
    """Mostly deliveries of one consumer that the bulk reader takes, of one kind or mixed, with
    payloads that hold lines looking like frames, and now and then anything the frame-by-frame
    lane meets (other sids, statuses, malformed frames: test_delivery_lane's frames)."""
    out = []
    headed = draw(st.booleans())
    mixed = draw(st.integers(0, 3)) == 0
    for seq in range(1, draw(st.integers(1, 60)) + 1):
        if draw(st.integers(0, 15)) == 0:
            out.append(draw(frame(seq)))
            continue
        payload = draw(st.sampled_from(_FAKES)) + draw(st.binary(max_size=20)) + draw(st.sampled_from(_FAKES))
        subject = draw(st.sampled_from([b"s.x", b"s.x", b"s.y", b"a.b.c"]))
        consumer = "OC_x_2" if draw(st.integers(0, 30)) == 0 else "OC_x_1"
        kind = draw(st.booleans()) if mixed else headed
        out.append(delivery(seq, headed=kind, payload=payload, subject=subject, consumer=consumer))
    return b"".join(out)


def parse(columns: bool, data: bytes, cuts: list[int]) -> tuple[list[Any], list[Any], str | None, int, int]:
    """(messages, cursors, the error, deliveries read in the lane, of them in bulk)."""
    lane = AckLane("_INBOX.x")
    lane.arm_runs(SID, cursors=True, columns=columns)
    lane.bulk_min = 0
    parser = Parser(max_payload=1 << 16, lane=lane)
    msgs: list[Any] = []
    cursors: list[Any] = []
    error = None
    try:
        for e in feed_in_pieces(parser, data, cuts):
            if isinstance(e, MsgsReceived):
                got, run_cursors = e.msgs, e.cursors
                if e.columns is not None:
                    assert not got and run_cursors is None
                    cols = e.columns
                    got, run_cursors = cols.messages(MsgReceived)
                    check_columns(cols, got, run_cursors)
                    assert e.size == cols.size and e.sid == cols.sid == SID
                msgs.extend(_key(m) for m in got)
                assert e.size == sum(m.size for m in got)
                cursors.extend(run_cursors or [None] * len(got))
            elif isinstance(e, MsgReceived):
                msgs.append(_key(e))
                cursors.append(None)
    except RemoteProtocolError as exc:
        error = str(exc)
    return msgs, cursors, error, lane.delivery_read, lane.bulk_read


def check_columns(cols: bulk.DeliveryColumns, msgs: list[MsgReceived], cursors: list[Any], *, part: bool = False) -> None:
    """The columns say what the messages and cursors say. (Of a ``part`` of a run, cut from it,
    the header values may be taken one by one: whether each block holds one line is known for
    the run, not for each part.)"""
    assert cols.count == len(msgs) >= 1
    assert cols.subjects() == [m.subject for m in msgs]
    assert cols.payloads() == [m.data for m in msgs]
    assert cols.replies() == [m.reply for m in msgs] and cols.last_reply() == msgs[-1].reply
    assert cols.header_lines() == (None if not cols.headed else [bulk_headers(m.headers) for m in msgs])
    assert [(cols.consumer, s, c, t) for s, c, t in zip(cols.seqs, cols.cseqs, cols.stamps)] == cursors
    one = cols.one_key_values()
    if one is not None:
        assert cols.headed
        lines = cols.header_lines()
        assert lines is not None
        assert header_columns(lines) == ([1] * cols.count, [one[0]] * cols.count, None, one[1].to_pylist())
    elif not part and cols.headed and all(
        m.headers is not None and m.headers._block.startswith("NATS/1.0\r\nNats-Msg-Id: w-") and m.headers._block.count("\r\n") == 3
        for m in msgs
    ):
        raise AssertionError("one Nats-Msg-Id line each: the values are taken at once")
    if cols.count > 1:
        head = cols.head(cols.count - 1)
        assert head.messages(MsgReceived)[1] == cursors[:-1] and head.size == sum(m.size for m in msgs[:-1])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@example(data=delivery(1, headed=True, payload=b"x") * 1, cuts=[])
@example(data=b"".join(delivery(s, headed=True, payload=_FAKES[1]) for s in range(1, 6)), cuts=[])
@given(data=long_script(), cuts=st.lists(st.integers(min_value=0, max_value=1 << 14), max_size=3))
def test_columns_give_what_the_frame_by_frame_lane_gives(data: bytes, cuts: list[int]) -> None:
    by_frame = parse(False, data, cuts)
    in_bulk = parse(True, data, cuts)
    assert in_bulk[:4] == by_frame[:4]
    assert by_frame[4] == 0


def column_runs(data: bytes, cuts: list[int]) -> list[tuple[bulk.DeliveryColumns, list[Any], list[Any]]]:
    """The runs read in bulk from ``data`` fed in pieces, each with its messages and cursors."""
    lane = AckLane("_INBOX.x")
    lane.arm_runs(SID, cursors=True, columns=True)
    lane.bulk_min = 0
    parser = Parser(max_payload=1 << 16, lane=lane)
    out = []
    try:
        for e in feed_in_pieces(parser, data, cuts):
            if isinstance(e, MsgsReceived) and e.columns is not None:
                out.append((e.columns, *e.columns.messages(MsgReceived)))
    except RemoteProtocolError:
        pass
    return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    scripts=st.lists(long_script(), min_size=1, max_size=4),
    cuts=st.lists(st.integers(min_value=0, max_value=1 << 14), max_size=2),
    split=st.integers(min_value=0, max_value=1 << 10),
)
def test_runs_joined_and_cut_say_what_their_messages_say(scripts: list[bytes], cuts: list[int], split: int) -> None:
    """Runs of one kind, from one buffer or several, joined (a reader makes its columns once
    for them) are one run of their messages in order; cut anywhere, its head and tail are the
    two parts."""
    runs = [run for data in scripts for run in column_runs(data, cuts)]
    for kind in ({True, False}, {"OC_x_1", "OC_x_2"}):
        if len({r[0].headed if True in kind else r[0].consumer for r in runs}) == 2:
            with pytest.raises(ValueError):
                bulk.joined([r[0] for r in runs])
    for headed, consumer in itertools.product((True, False), ("OC_x_1", "OC_x_2")):
        alike = [r for r in runs if r[0].headed is headed and r[0].consumer == consumer]
        if not alike:
            continue
        one = bulk.joined([r[0] for r in alike])
        msgs = [m for r in alike for m in r[1]]
        cursors = [c for r in alike for c in r[2]]
        check_columns(one, msgs, cursors)
        assert one.size == sum(m.size for m in msgs)
        assert one.end == len(one.buf) or len(alike) == 1
        k = split % one.count
        if k:
            head, tail = one.head(k), one.tail(k)
            check_columns(head, msgs[:k], cursors[:k], part=True)
            check_columns(tail, msgs[k:], cursors[k:], part=True)
            assert head.size + tail.size == one.size


def test_a_run_cut_where_it_cannot_be_is_refused() -> None:
    runs = column_runs(b"".join(delivery(s, headed=True, payload=b"p%d" % s) for s in range(1, 6)), [])
    assert len(runs) == 1 and runs[0][0].count == 5
    run = runs[0][0]
    for k in (-1, 5, 6):
        with pytest.raises(ValueError):
            run.tail(k)
    assert run.tail(0) is run and run.tail(4).payloads() == [b"p5"]


def _two_in_one() -> bytes:
    """A frame whose header size takes in, after its block, the head of a whole frame: its
    block and that head joined still match as two frames' heads."""
    inner = b"HMSG s.x 13 $JS.ACK.S.OC_x_1.1.9.9.9.0 32 32\r\nNATS/1.0\r\nNats-Msg-Id: w-9\r\n\r\n"
    block = b"NATS/1.0\r\nNats-Msg-Id: w-2\r\n\r\n" + inner
    reply = f"$JS.ACK.S.OC_x_1.1.2.2.{_STAMP}.0".encode()
    two = b"HMSG s.x 13 %s %d %d\r\n%s\r\n" % (reply, len(block), len(block), block)
    return delivery(1, headed=True, payload=b"a") + two + delivery(3, headed=True, payload=b"c")


def _rest_in_block() -> bytes:
    """A frame whose header size takes in, after its block, what follows a delivery count and
    another block: joined with the others, it still matches as two of those."""
    block = b"NATS/1.0\r\nNats-Msg-Id: w-2\r\n\r\n" + b"1.9.9.9.0 32 32\r\nNATS/1.0\r\nNats-Msg-Id: w-9\r\n\r\n"
    reply = f"$JS.ACK.S.OC_x_1.1.2.2.{_STAMP}.0".encode()
    two = b"HMSG s.x 13 %s %d %d\r\n%s\r\n" % (reply, len(block), len(block), block)
    return delivery(1, headed=True, payload=b"a") + two + delivery(3, headed=True, payload=b"c")


def _subjects(*subjects: bytes) -> bytes:
    return b"".join(delivery(s, headed=True, payload=b"p", subject=subj) for s, subj in enumerate(subjects, 1))


@pytest.mark.parametrize(
    "data",
    [
        _two_in_one(),
        _rest_in_block(),
        _subjects(b"s.x", b"s.y", b"", b"s.z"),
        _subjects(b"s.x", b"s\x01y", b"s.z"),
        _subjects(b"s.x", "ü.y".encode(), b"s.z"),
        # (the last block shorter than the first one's key: the one-key headers column declines)
        b"".join(delivery(s, headed=True, payload=b"p") for s in (1, 2))
        + hmsg(f"$JS.ACK.S.OC_x_1.1.3.3.{_STAMP}.0", b"NATS/1.0\r\nK:v\r\n\r\n", b""),
        # (a payload over the limit, then one at it: the frame-by-frame reading's error)
        delivery(1, headed=True, payload=b"a") + delivery(2, headed=True, payload=b"x" * ((1 << 16) + PAYLOAD_MARGIN)),
        delivery(1, headed=False, payload=b"a") + delivery(2, headed=False, payload=b"x" * ((1 << 16) + PAYLOAD_MARGIN + 1)),
        delivery(1, headed=True, payload=b"a") + b"HMSG s.x 13 " + b"x" * MAX_CONTROL_LINE + b" 5 5\r\nNATS/\r\n",
    ],
    ids=[
        "two-heads-in-one-block", "rest-in-block", "empty-subject", "control-char-subject", "non-ascii-subject",
        "short-last-block",
        "hmsg-over-max", "msg-over-max", "control-line-too-long",
    ],
)
def test_what_the_frame_by_frame_lane_refuses(data: bytes) -> None:
    assert parse(True, data, [])[:4] == parse(False, data, [])[:4]


def test_a_long_run_is_read_in_bulk() -> None:
    data = b"".join(delivery(s, headed=s != 200, payload=b"p%d" % s) for s in range(1, 400))
    msgs, cursors, error, read, in_bulk = parse(True, data, [])
    assert error is None and read == 399 and len(msgs) == 399
    assert in_bulk == 399  # (three runs: HMSG, one MSG, HMSG)
    assert parse(False, data, [])[:4] == (msgs, cursors, error, read)


def test_lines_in_payloads_that_look_like_frames_do_not_end_a_bulk_read() -> None:
    data = b"".join(delivery(s, headed=True, payload=_FAKES[1 + s % 2] if s % 10 == 0 else b"p") for s in range(1, 401))
    msgs, cursors, error, read, in_bulk = parse(True, data, [])
    assert error is None and read == in_bulk == 400
    assert parse(False, data, [])[:4] == (msgs, cursors, error, read)


def test_a_run_read_in_bulk_counts_in_the_connections_stats() -> None:
    """The connection counts a run read in bulk as its messages (``stats.msgs_in``, the
    subscription's delivered count), as it counts the same run read frame by frame."""
    from tests.core.test_session_settle import connected

    data = b"".join(delivery(s, headed=True, payload=b"p%d" % s) for s in range(1, 300))
    counted = []
    for columns in (False, True):
        s = connected()
        conn = s.conn
        sid = conn.subscribe("_INBOX.bulk.*")
        conn.arm_runs(sid, cursors=True, columns=columns)
        conn._lane.bulk_min = 0
        before = (conn.stats.msgs_in, conn.stats.bytes_in)
        conn.receive_data(data.replace(b" 13 ", b" %d " % sid), 1.0)
        runs = []
        while (e := conn.next_event()) is not None:
            if isinstance(e, MsgsReceived):
                runs.append(e)
        assert runs and (runs[0].columns is not None) is columns
        counted.append((conn.stats.msgs_in - before[0], conn.stats.bytes_in - before[1], conn._subs[sid].delivered))
    assert counted[0] == counted[1] and counted[0][0] == 299


def test_a_buffer_of_short_runs_is_soon_read_frame_by_frame(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bulk read has a fixed cost: a first one (or, after a long one, two in a row) that reads
    fewer than 128 deliveries, and the rest of the buffer is read frame by frame (with the same
    result)."""
    from jscore import protocol

    calls = []
    real = bulk.read_deliveries

    def counted(*args: Any) -> Any:
        got = real(*args)
        calls.append(0 if got is None else got.count)
        return got

    data = b"".join(delivery(s, headed=(s - 1) // 20 % 2 == 0, payload=b"p") for s in range(1, 12 * 20 + 1))
    monkeypatch.setattr(protocol.bulk, "read_deliveries", counted)
    got = parse(True, data, [])
    assert calls == [20] and got[4] == 20
    monkeypatch.undo()
    assert parse(False, data, [])[:4] == got[:4]


def test_deliveries_of_a_subscription_not_armed_for_columns_cost_no_bulk_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """With another subscription armed for columns, a run of one that is not is matched once,
    its sid looked up, and read frame by frame: no array is made, nothing is imported."""
    lane = AckLane("_INBOX.x")
    lane.arm_runs(SID, cursors=True)
    lane.arm_runs(SID + 1, cursors=True, columns=True)
    lane.bulk_min = 0
    monkeypatch.setattr(bulk, "_np", None)
    monkeypatch.setattr(bulk, "load", lambda: pytest.fail("imported for a subscription without columns"))
    events = Parser(max_payload=1 << 16, lane=lane).feed(b"".join(delivery(s, headed=True, payload=b"p") for s in range(1, 50)))
    assert [len(e.msgs) for e in events] == [49] and lane.bulk_read == 0


def test_runs_of_large_deliveries_are_read_frame_by_frame() -> None:
    """A bulk read scans every byte of the buffer: for a run whose first delivery is larger than
    bulk.MAX_FRAME it costs more than it saves, and the lane reads it frame by frame."""
    data = b"".join(delivery(s, headed=True, payload=b"x" * bulk.MAX_FRAME) for s in range(1, 60))
    got = parse(True, data, [])
    assert got[3] == 59 and got[4] == 0
    small = b"".join(delivery(s, headed=True, payload=b"x" * (bulk.MAX_FRAME - 60)) for s in range(1, 60))
    assert parse(True, small, [])[4] == 59


def test_after_two_short_bulk_reads_a_parser_rests(monkeypatch: pytest.MonkeyPatch) -> None:
    """A first bulk read of fewer than 128 deliveries: the next 64 buffers are read frame by
    frame, then one bulk read is tried again."""
    from jscore import protocol

    per_feed: list[int] = []
    real = bulk.read_deliveries

    def counted(*args: Any) -> Any:
        per_feed[-1] += 1
        return real(*args)

    monkeypatch.setattr(protocol.bulk, "read_deliveries", counted)
    lane = AckLane("_INBOX.x")
    lane.arm_runs(SID, cursors=True, columns=True)
    lane.bulk_min = 0
    parser = Parser(max_payload=1 << 16, lane=lane)
    for feed in range(70):
        base = feed * 12 * 20
        data = b"".join(
            delivery(base + s, headed=(s - 1) // 20 % 2 == 0, payload=b"p") for s in range(1, 12 * 20 + 1)
        )
        per_feed.append(0)
        assert sum(len(e.msgs) or e.columns.count for e in parser.feed(data)) == 12 * 20
    assert per_feed == [1] + [0] * 63 + [1] + [0] * 5


# ====================================================================== rests as a matrix
# Rests of one length in a row are checked column by column against the first (which the
# pattern matches): each kind of column must refuse exactly what the pattern refuses.

_VALID_VALUE = b"aZ09-_:.\t ~"
# One change to a row like the first, each of the same length: what the pattern refuses, then
# what it takes.
_REFUSED = ["lead zero", "letter in number", "key char", "value char", "trailing blank", "stream key"]
_TAKEN = ["other key", "dcount", "pending", "value tab"]


@st.composite
def alike_rests_run(draw: st.DrawFn) -> bytes:
    """A run of deliveries whose rests have one length and layout, like the first one's, some
    rows with one change each of the same length: one the pattern refuses (a leading zero or a
    letter in an ack number, a key or value character outside its class, a value's trailing
    blank, a first line ``Nats-Stream: ``) or one it takes; now and then a row of another
    length, or an MSG frame."""
    headed = draw(st.integers(0, 7)) != 0
    width = draw(st.integers(1, 6))
    sep = draw(st.sampled_from([b": ", b":"]))  # (without the blank, a first key Nats-Stream is taken)
    first_key = draw(st.sampled_from([b"Nats-Msg-Id", b"Nats-Msg-Id", b"Nats-Stream"]))
    out = []
    for i in range(draw(st.integers(2, 40))):
        change = draw(st.sampled_from(_REFUSED + _TAKEN + [None] * 8)) if i else None
        seq = b"%d" % draw(st.integers(100000, 999999))
        if change == "lead zero":
            seq = b"0" + seq[1:]
        elif change == "letter in number":
            seq = seq[:3] + b"a" + seq[4:]
        dcount = b"2" if change == "dcount" else b"1"
        pending = b"7" if change == "pending" else b"0"
        reply = b"$JS.ACK.S.OC_x_1.%s.%s.%s.%d.%s" % (dcount, seq, seq, _STAMP, pending)
        if not headed or (i and draw(st.integers(0, 19)) == 0):
            out.append(b"MSG s.x %d %s 1\r\np\r\n" % (SID, reply))
            continue
        key = {"key char": b"Nats(Msg-Id", "other key": b"Nats-Msg-Iq", "stream key": b"Nats-Stream"}.get(change or "", first_key)
        value = bytes(draw(st.lists(st.sampled_from(_VALID_VALUE), min_size=width, max_size=width)))
        if value.endswith((b" ", b"\t")):
            value = value[:-1] + b"v"
        row_sep = sep
        if change == "value char":
            value = value[:-1] + draw(st.sampled_from([b"\x7f", b"\x80", b"\x1f", b"\xff", b"\r"]))
        elif change == "trailing blank":
            value = value[:-1] + draw(st.sampled_from([b" ", b"\t"]))
        elif change == "value tab":
            value = b"\t" + value[1:]
        elif change == "stream key" and sep == b":":
            row_sep, value = b": ", value[1:]  # (same length, now refused by the look-ahead)
        block = b"NATS/1.0\r\n%s%s%s\r\n\r\n" % (key, row_sep, value)
        if i and draw(st.integers(0, 19)) == 0:
            block = block[:-2] + b"X: y\r\n\r\n"  # (another length)
        out.append(b"HMSG s.x %d %s %d %d\r\n%sp\r\n" % (SID, reply, len(block), len(block) + 1, block))
    return b"".join(out)


def _alike(*lines: bytes, seqs: tuple[bytes, ...] = ()) -> bytes:
    """HMSG deliveries with one header line each (``lines``), the ack numbers ``seqs``."""
    out = []
    for i, line in enumerate(lines):
        seq = seqs[i] if seqs else b"%d" % (111111 * (i + 1))
        block = b"NATS/1.0\r\n%s\r\n\r\n" % line
        reply = b"$JS.ACK.S.OC_x_1.1.%s.%s.%d.0" % (seq, seq, _STAMP)
        out.append(b"HMSG s.x %d %s %d %d\r\n%sp\r\n" % (SID, reply, len(block), len(block) + 1, block))
    return b"".join(out)


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@example(data=b"".join(delivery(s, headed=True, payload=b"p") for s in range(100, 140)))
@example(data=_alike(b"Nats-Stream:vvv", b"Nats-Stream:vvv", b"Nats-Stream: vv", b"Nats-Stream:vvv"))
@example(data=_alike(b"K: v", b"K: v", b"K: v", seqs=(b"111", b"222", b"033", b"444")))
@given(data=alike_rests_run())
def test_rests_checked_as_a_matrix_refuse_what_the_pattern_refuses(data: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bulk, "_TEMPLATE_ROWS", 2)  # (every group of two or more as a matrix; the same for each input)
    assert parse(True, data, [])[:4] == parse(False, data, [])[:4]


def _counted_rest_matches(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Where the HMSG rests pattern is called from now on: ``(start, end)`` of each call (and
    groups of 32 rows or more are matrices)."""
    monkeypatch.setattr(bulk, "_TEMPLATE_ROWS", 32)
    calls: list[tuple[int, int]] = []
    patterns = protocol._BULK_PATTERNS
    full = patterns.hmsg_rests

    def counted(rests: bytes, start: int, end: int) -> object:
        calls.append((start, end))
        return full(rests, start, end)

    monkeypatch.setattr(protocol, "_BULK_PATTERNS", patterns._replace(hmsg_rests=counted))
    return calls


def test_rests_of_one_length_are_checked_as_a_matrix(monkeypatch: pytest.MonkeyPatch) -> None:
    """A long run of alike rests is matched by the pattern for its first row only; a row
    the matrix refuses makes its group matched whole (and the run end before that row)."""
    calls = _counted_rest_matches(monkeypatch)
    data = b"".join(delivery(s, headed=True, payload=b"p") for s in range(100, 200))
    msgs, _, error, _, in_bulk = parse(True, data, [])
    assert error is None and in_bulk == 100 and len(msgs) == 100
    [(start, end)] = calls
    assert end - start == len(b"1.100.100.1764662400123456889.800 30 31\r\nNATS/1.0\r\nNats-Msg-Id: w-100\r\n\r\n")
    calls.clear()
    bad = data.replace(b"Nats-Msg-Id: w-150", b"Nats-Msg-Id: w-15 ")  # (a trailing blank: refused)
    assert parse(True, bad, [])[:4] == parse(False, bad, [])[:4]
    assert len(calls) == 2 and calls[1][0] == 0  # (the first row, then the group whole)


def test_rests_between_matrices_are_matched_in_one_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows of changing lengths (no matrix) cost one match for all of them, not one each."""
    calls = _counted_rest_matches(monkeypatch)
    ids = [b"a" * 5] * 40 + [b"b" * (1 + i % 2) for i in range(6)] + [b"c" * 5] * 40
    data = _alike(*(b"Nats-Msg-Id: " + i for i in ids), seqs=tuple(b"%d" % (100 + n) for n in range(len(ids))))
    msgs, _, error, _, in_bulk = parse(True, data, [])
    assert error is None and in_bulk == len(ids) and parse(False, data, [])[:4] == parse(True, data, [])[:4]
    first, second, between = calls[:3]
    assert first[0] == 0 and between == (first[0] + 40 * (first[1] - first[0]), second[0])  # (the six in one match)
    alternating = _alike(*(b"K: " + b"v" * (1 + n % 2) for n in range(50)))
    calls.clear()
    assert parse(True, alternating, [])[4] == 50
    assert len(calls) == 1  # (no group of 32: the whole run in one match)


def test_a_socket_read_of_alike_rests_is_one_matrix_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = bulk._TEMPLATE_ROWS
    calls = _counted_rest_matches(monkeypatch)
    monkeypatch.setattr(bulk, "_TEMPLATE_ROWS", shipped)
    data = b"".join(delivery(s, headed=True, payload=b"p" * 100) for s in range(1000, 1300))
    msgs, cursors, error, _, in_bulk = parse(True, data, [])
    assert error is None and in_bulk == 300 and (msgs, cursors) == parse(False, data, [])[:2]
    # The lane's first bulk read looks at 256 frames: one matrix (its first row matched), then
    # a read of the 44 left: fewer than a matrix takes, one match.
    width = calls[0][1]
    assert calls == [(0, width), (0, 44 * width)]
