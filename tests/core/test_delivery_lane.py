"""The delivery lane (:meth:`jscore.protocol.AckLane.arm_runs` with ``cursors``: an ordered
consumer's inbox): JetStream deliveries in the server's form read by one match each, a run of
them one :class:`MsgsReceived` with each message's ack cursor. It must change nothing but the
cost: for the same bytes, whole or split anywhere, the parser gives the same messages (subject,
sid, reply, payload, headers as parsed, size), in the same order, and the same error, as with
the lane not armed; the cursors are what :func:`jscore.jsmsg.ack_cursor` reads from each reply,
whatever the frames (statuses, other sids, v2 or malformed ack subjects, numbers too long for
the lane, headers the lane leaves to the general way, sizes that do not add up, control lines
too long)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from jscore.errors import RemoteProtocolError
from jscore.jsmsg import ack_cursor
from jscore.protocol import MAX_CONTROL_LINE, PAYLOAD_MARGIN, AckLane, MsgReceived, MsgsReceived, Parser

SID = 13
_STAMP = 1764662400123456789


def reply_of(kind: int, seq: int) -> str:
    consumer = "OC_x_1" if kind != 1 else "OC_x_2"
    if kind == 2:  # v2 (domain, account hash, token)
        return f"$JS.ACK._.HASH.S.{consumer}.1.{seq}.{seq}.{_STAMP}.0.tok"
    if kind == 3:  # a pending count of 20 digits, still below 2**64: the general way reads it
        return f"$JS.ACK.S.{consumer}.1.{seq}.{seq}.{_STAMP}.{2**64 - 1}"
    if kind == 4:  # above 2**64 - 1: not a cursor at all
        return f"$JS.ACK.S.{consumer}.1.{seq}.{seq}.{_STAMP}.{2**64}"
    if kind == 5:  # a leading zero
        return f"$JS.ACK.S.{consumer}.1.0{seq}.{seq}.{_STAMP}.0"
    if kind == 6:
        return f"$JS.ACK.S.{consumer}.1.{seq}.x.{_STAMP}.0"
    if kind == 7:  # a stream name outside ASCII
        return f"$JS.ACK.Ü.{consumer}.1.{seq}.{seq}.{_STAMP}.0"
    if kind == 8:
        return "_INBOX.not.an.ack"
    return f"$JS.ACK.S.{consumer}.{1 + seq % 3}.{seq}.{seq + 1}.{_STAMP + seq}.{max(0, 50 - seq)}"


_BLOCKS = [
    b"NATS/1.0\r\nNats-Msg-Id: w-0-1\r\n\r\n",
    b"NATS/1.0\r\nNats-Msg-Id: w-0-1\r\nOwn: a b\r\n\r\n",
    b"NATS/1.0\r\nK: a\tb\r\n\r\n",
    b"NATS/1.0\r\nKV-Operation: DEL\r\n\r\n",
    b"NATS/1.0\r\nNats-Stream: S\r\n\r\n",
    # (a direct get reply's layout: the general way reads its values too, the lane leaves it)
    b"NATS/1.0\r\nNats-Stream: S\r\nNats-Subject: s.x\r\nNats-Sequence: 1\r\n"
    b"Nats-Time-Stamp: 2026-11-22T06:54:08.8Z\r\n\r\n",
    b"NATS/1.0\r\n\r\n",
    b"NATS/1.0\r\nK:  two spaces\r\n\r\n",
    b"NATS/1.0\r\nK:v\r\n\r\n",
    b"NATS/1.0\r\nK: trailing \r\n\r\n",
    b"NATS/1.0\r\nK: \r\n\r\n",
    "NATS/1.0\r\nK: ü\r\n\r\n".encode(),
    b"NATS/1.0\r\nK: x\x01y\r\n\r\n",
    b"NATS/1.0\r\nBad Key: x\r\n\r\n",
    b"NATS/1.0 100 Idle Heartbeat\r\n\r\n",
    b"NATS/1.0 404 No Messages\r\n\r\n",
]


def hmsg(reply: str, hdr: bytes, payload: bytes, subject: bytes = b"s.x") -> bytes:
    return b"HMSG %s %d %s %d %d\r\n%s%s\r\n" % (subject, SID, reply.encode(), len(hdr), len(hdr) + len(payload), hdr, payload)


@st.composite
def frame(draw: st.DrawFn, seq: int) -> bytes:
    kind = draw(st.sampled_from([0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]))
    reply = reply_of(kind, seq).encode()
    sid = SID if draw(st.integers(min_value=0, max_value=7)) else draw(st.sampled_from([1, 130, 1300]))
    subject = draw(st.sampled_from([b"s.x", b"a.b.c", "ü.x".encode(), b"long." + b"x" * 300]))
    payload = draw(st.binary(max_size=24))
    which = draw(st.integers(min_value=-1, max_value=len(_BLOCKS) - 1))
    delta = draw(st.sampled_from([0] * 12 + [-1, 1, 2]))  # a size that does not add up
    spacing = b"  " if draw(st.integers(min_value=0, max_value=20)) == 0 else b" "
    if which < 0:  # no headers: MSG
        return b"MSG %s %d %s%s%d\r\n%s\r\n" % (subject, sid, reply, spacing, len(payload) + delta, payload)
    hdr = _BLOCKS[which]
    if hdr.startswith(b"NATS/1.0 "):  # a status: on the inbox, no ack subject
        return b"HMSG _INBOX.x.p1 %d %d %d\r\n%s\r\n" % (sid, len(hdr), len(hdr), hdr)
    return b"HMSG %s %d %s%s%d %d\r\n%s%s\r\n" % (
        subject, sid, reply, spacing, len(hdr) + max(0, delta), len(hdr) + len(payload) + min(0, delta), hdr, payload,
    )  # fmt: skip


@st.composite
def script(draw: st.DrawFn) -> list[bytes]:
    return [draw(frame(seq)) for seq in range(1, draw(st.integers(min_value=1, max_value=10)) + 1)]


def _key(m: MsgReceived) -> tuple[Any, ...]:
    h = m.headers
    headers = None if h is None else (h._block, h._layout, list(h.items()))
    return m.subject, m.sid, m.reply, m.data, headers, m.status, m.description, m.size


def feed_in_pieces(parser: Parser, data: bytes, cuts: list[int]) -> Iterator[Any]:
    """The parser's events for ``data`` fed in pieces, cut at ``cuts`` (each modulo its length)."""
    prev = 0
    for cut in sorted({c % (len(data) + 1) for c in cuts}) + [len(data)]:
        yield from parser.feed(data[prev:cut])
        prev = cut


def parse(
    lane_on: bool, data: bytes, cuts: list[int], runs: bool = True
) -> tuple[list[Any], str | None, list[Any], int]:
    """(messages in order, the error, the lane's runs as (messages, cursors), deliveries read
    by the lane). With ``lane_on`` false, SID's messages come in runs without cursors (a fetch's
    or a consume's inbox), or with ``runs`` false one by one (a plain subscription)."""
    lane = AckLane("_INBOX.x")
    if lane_on or runs:
        lane.arm_runs(SID, cursors=lane_on)
    parser = Parser(max_payload=1 << 16, lane=lane)
    msgs: list[Any] = []
    runs: list[Any] = []
    error = None
    try:
        for e in feed_in_pieces(parser, data, cuts):
            if isinstance(e, MsgsReceived):
                msgs.extend(_key(m) for m in e.msgs)
                assert e.size == sum(m.size for m in e.msgs)
                if e.cursors is not None:
                    runs.append((e.msgs, e.cursors))
            elif isinstance(e, MsgReceived):
                msgs.append(_key(e))
    except RemoteProtocolError as exc:
        error = str(exc)
    return msgs, error, runs, lane.delivery_read


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(frames=[hmsg(reply_of(0, 1), b"NATS/1.0\r\nNats-Msg-Id: w-0-1\r\n\r\n", b"x")], cuts=[])
@example(frames=[b"MSG s.x 13 " + reply_of(0, 1).encode() + b" 1\r\nx\r\n"] * 3, cuts=[40])
@given(frames=script(), cuts=st.lists(st.integers(min_value=0), max_size=4))
def test_the_lane_changes_nothing_but_the_cost(frames: list[bytes], cuts: list[int]) -> None:
    data = b"".join(frames)
    msgs, error, runs, read = parse(True, data, cuts)
    msgs_off, error_off, runs_off, read_off = parse(False, data, cuts)
    assert msgs == msgs_off
    assert error == error_off
    assert runs_off == [] and read_off == 0
    if error is None:  # (a feed that raises returns none of its events)
        assert read == sum(len(r[0]) for r in runs)
    for run_msgs, cursors in runs:
        assert len(run_msgs) == len(cursors)
        assert {m.sid for m in run_msgs} == {SID}
        assert cursors == [ack_cursor(m.reply) for m in run_msgs]


@st.composite
def consume_frame(draw: st.DrawFn, seq: int) -> bytes:
    """Mostly a consume's deliveries of one subject (MSG, v1 ack subjects), now and then one that
    starts otherwise (consumer, subject, sid, spacing, ack subject), a size that does not add
    up, headers or a status."""
    roll = draw(st.integers(min_value=0, max_value=19))
    if roll == 0:
        return draw(frame(seq))
    kind = draw(st.sampled_from([0] * 8 + [1, 2, 3, 5, 6, 8]))
    reply = reply_of(kind, seq).encode()
    subject = draw(st.sampled_from([b"s.x"] * 6 + [b"s.y", "ü.x".encode()]))
    sid = draw(st.sampled_from([SID] * 8 + [1, 130]))
    sep = draw(st.sampled_from([b" "] * 12 + [b"  ", b"\t"]))
    payload = draw(st.binary(max_size=12))
    delta = draw(st.sampled_from([0] * 16 + [-1, 1]))
    return b"MSG %s %d%s%s %d\r\n%s\r\n" % (subject, sid, sep, reply, len(payload) + delta, payload)


@st.composite
def consume_script(draw: st.DrawFn) -> list[bytes]:
    return [draw(consume_frame(seq)) for seq in range(1, draw(st.integers(min_value=1, max_value=12)) + 1)]


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(frames=[b"MSG s.x 13 " + reply_of(0, i).encode() + b" 1\r\nx\r\n" for i in range(1, 5)], cuts=[])
@example(frames=[b"MSG s.x 13 " + reply_of(0, 1).encode() + b" 1\r\nx\r\n",
                 b"MSG s.x 13 " + reply_of(1, 2).encode() + b" 1\r\nx\r\n"], cuts=[])
@given(frames=st.one_of(script(), consume_script()), cuts=st.lists(st.integers(min_value=0), max_size=4))
def test_runs_without_cursors_change_nothing_but_the_cost(frames: list[bytes], cuts: list[int]) -> None:
    """A fetch's or a consume's inbox: its messages in runs, where a frame that starts as the one
    before it did (up to its ack subject's numbers) is read from there on, are the messages,
    sizes and error of the same bytes read one by one."""
    data = b"".join(frames)
    msgs, error, _, _ = parse(False, data, cuts)
    plain, plain_error, runs, _ = parse(False, data, cuts, runs=False)
    assert runs == []
    assert msgs == plain
    assert error == plain_error


def test_a_runs_frames_that_start_alike_are_each_read_whole() -> None:
    """A consume's deliveries of one subject: each message as the general way reads it, also
    when one in the middle has another consumer, subject or spacing, or a payload still to come."""
    frames = [b"MSG s.x 13 %s 2\r\np%d\r\n" % (reply_of(0, i).encode(), i) for i in range(1, 6)]
    frames.insert(2, b"MSG s.x 13 %s 2\r\nq1\r\n" % reply_of(1, 9).encode())
    frames.insert(4, b"MSG s.x 13  %s 2\r\nq2\r\n" % reply_of(0, 10).encode())
    data = b"".join(frames)
    for cuts in ([], [len(frames[0]) + 7], [len(data) - 3]):
        msgs, error, _, _ = parse(False, data, cuts)
        assert error is None and len(msgs) == 7
        assert msgs == parse(False, data, cuts, runs=False)[0]
        assert [m[3] for m in msgs] == [b"p1", b"p2", b"q1", b"p3", b"q2", b"p4", b"p5"]


def test_a_delivery_the_lane_left_does_not_take_the_next_ones_from_it() -> None:
    """On an ordered consumer's inbox, a delivery the lane leaves to the general way (other
    spacing, a pending count past the lane's digits) does not make the frames after it skip the
    lane: they come with their cursors."""
    for odd in (
        b"MSG s.x 13 %s  1\r\na\r\n" % reply_of(0, 1).encode(),
        b"MSG s.x 13 %s 1\r\na\r\n" % reply_of(3, 1).encode(),
    ):
        good = [b"MSG s.x 13 %s 1\r\n%d\r\n" % (reply_of(0, i).encode(), i) for i in range(2, 5)]
        msgs, error, runs, read = parse(True, odd + b"".join(good), [])
        assert error is None and len(msgs) == 4 and read == 3
        assert [len(r[0]) for r in runs] == [3]


def test_a_long_control_line_in_a_run_is_the_general_ways_error() -> None:
    start = b"MSG " + b"L" * (MAX_CONTROL_LINE - 40) + b" 13 $JS.ACK.S.C."
    first = start + b"1.1.1.1.1 1\r\nx\r\n"  # (a line just below the limit)
    long = start + b"1." * 20 + b"1 1\r\nx\r\n"  # (the same start, numbers past the line's limit)
    assert len(first) - 5 <= MAX_CONTROL_LINE + 2 < len(long) - 5
    results = [parse(False, first + long, [], runs=runs) for runs in (True, False)]
    assert results[0][:2] == results[1][:2] == ([], "control line too long")


def test_a_runs_frame_over_the_payload_limit_is_the_general_ways_error() -> None:
    big = b"y" * ((1 << 16) + PAYLOAD_MARGIN + 1)
    frames = [b"MSG s.x 13 %s %d\r\n%s\r\n" % (reply_of(0, i).encode(), len(p), p) for i, p in ((1, b"a"), (2, big))]
    results = [parse(False, b"".join(frames), [], runs=runs) for runs in (True, False)]
    assert results[0][:2] == results[1][:2]
    assert results[0][1] is not None and "exceeds max_payload" in results[0][1]


def test_the_servers_form_takes_the_lane_in_one_run() -> None:
    frames = [hmsg(reply_of(0, i), b"NATS/1.0\r\nNats-Msg-Id: w-0-%d\r\n\r\n" % i, b"p%d" % i) for i in range(1, 8)]
    frames.insert(3, b"MSG s.y 13 %s 2\r\nxy\r\n" % reply_of(0, 99).encode())
    msgs, error, runs, read = parse(True, b"".join(frames), [])
    assert error is None and read == 8 and len(runs) == 1
    run_msgs, cursors = runs[0]
    assert [m.data for m in run_msgs] == [b"p1", b"p2", b"p3", b"xy", b"p4", b"p5", b"p6", b"p7"]
    assert cursors[0] == ("OC_x_1", 1, 2, _STAMP + 1) and cursors[3] == ("OC_x_1", 99, 100, _STAMP + 99)
    assert run_msgs[0].headers is not None and run_msgs[0].headers["Nats-Msg-Id"] == "w-0-1"
    assert run_msgs[3].headers is None


def test_a_frame_that_starts_otherwise_is_read_in_full() -> None:
    """The lane matches a frame from its ack numbers on when it starts as the one before it did;
    one with another subject, consumer or kind (each of the same length) is read in full."""
    block = b"NATS/1.0\r\nNats-Msg-Id: w-0-1\r\n\r\n"
    frames = [
        hmsg(reply_of(0, 1), block, b"a"),
        hmsg(reply_of(0, 2), block, b"b", subject=b"s.y"),  # (another subject)
        hmsg(reply_of(1, 3), block, b"c", subject=b"s.y"),  # (another consumer)
        b"MSG s.y 13 %s 1\r\nd\r\n" % reply_of(1, 4).encode(),  # (no headers)
        hmsg(reply_of(1, 5), block, b"e", subject=b"s.y"),
        hmsg(reply_of(1, 6), block, b"f", subject=b"s.y"),
    ]
    msgs, error, runs, read = parse(True, b"".join(frames), [])
    assert error is None and read == 6 and len(runs) == 1
    run_msgs, cursors = runs[0]
    assert [m.subject for m in run_msgs] == ["s.x", "s.y", "s.y", "s.y", "s.y", "s.y"]
    assert [c[0] for c in cursors] == ["OC_x_1", "OC_x_1", "OC_x_2", "OC_x_2", "OC_x_2", "OC_x_2"]
    assert cursors == [ack_cursor(m.reply) for m in run_msgs]
    assert [m.headers is None for m in run_msgs] == [False, False, False, True, False, False]
    assert msgs == parse(False, b"".join(frames), [])[0]


def test_a_frame_that_differs_right_after_the_first_is_told_apart() -> None:
    """While the lane still looks for the first frame's start, the next frame may differ from it
    in its consumer, its subject (both of the same length) or its kind: each is read in full."""
    block = b"NATS/1.0\r\nNats-Msg-Id: w-0-1\r\n\r\n"
    first = hmsg(reply_of(0, 1), block, b"a")
    for second in (
        hmsg(reply_of(1, 2), block, b"b"),  # (another consumer: OC_x_2)
        hmsg(reply_of(0, 2), block, b"b", subject=b"s.y"),
        b"MSG s.x 13 %s 1\r\nb\r\n" % reply_of(0, 2).encode(),
    ):
        data = first + second + first.replace(b"a\r\n", b"c\r\n")
        msgs, error, runs, read = parse(True, data, [])
        assert error is None and read == 3 and len(runs) == 1
        run_msgs, cursors = runs[0]
        assert cursors == [ack_cursor(m.reply) for m in run_msgs]
        assert msgs == parse(False, data, [])[0]


def test_a_frame_the_lane_leaves_ends_its_run_and_the_next_starts_another() -> None:
    good = b"MSG s.x 13 %s 1\r\nx\r\n" % reply_of(0, 1).encode()
    v2 = b"MSG s.x 13 %s 1\r\nx\r\n" % reply_of(2, 2).encode()
    other_sid = b"MSG s.x 1 %s 1\r\nx\r\n" % reply_of(0, 3).encode()
    msgs, error, runs, read = parse(True, good + good + v2 + good + other_sid + good, [])
    assert error is None and len(msgs) == 6
    assert [len(r[0]) for r in runs] == [2, 1, 1] and read == 4


def test_a_control_line_too_long_is_the_general_ways_error() -> None:
    good = b"MSG s.x 13 %s 1\r\nx\r\n" % reply_of(0, 1).encode()
    long_subject = b"MSG " + b"s" * MAX_CONTROL_LINE + b" 13 %s 1\r\nx\r\n" % reply_of(0, 2).encode()
    for lane_on in (True, False):
        msgs, error, runs, _ = parse(lane_on, good + good + long_subject, [2 * len(good)])
        assert error == "control line too long" and len(msgs) == 2
        # (in one read with a delivery the lane took before it: the same error for the read)
        assert parse(lane_on, good + long_subject, [])[:2] == ([], "control line too long")
    for lane_on in (True, False):
        long_hmsg = hmsg(reply_of(0, 2), b"NATS/1.0\r\nK: v\r\n\r\n", b"x", subject=b"s" * MAX_CONTROL_LINE)
        assert parse(lane_on, good + long_hmsg, [])[:2] == ([], "control line too long")


def test_a_size_that_does_not_add_up_is_the_general_ways_error() -> None:
    block = b"NATS/1.0\r\nNats-Msg-Id: w-0-1\r\n\r\n"
    good = hmsg(reply_of(0, 1), block, b"x")
    short = hmsg(reply_of(0, 2), block, b"x").replace(b" %d\r\n" % (len(block) + 1), b" %d\r\n" % (len(block) - 1), 1)
    assert short != good.replace(reply_of(0, 1).encode(), reply_of(0, 2).encode())
    results = [parse(lane_on, good + short, [len(good)]) for lane_on in (True, False)]
    assert results[0][:2] == results[1][:2]
    assert results[0][1] is not None and len(results[0][0]) == 1


def test_the_fuzz_invariant_holds_on_its_delivery_seed() -> None:
    from pathlib import Path

    from fuzz.fuzz_wire import DELIVERY_SIDS, check_lane, check_wire

    seed = Path(__file__).resolve().parents[2] / "fuzz" / "corpus" / "wire" / "deliveries_ordered"
    data = seed.read_bytes()
    assert DELIVERY_SIDS == (5,)
    check_wire(data)
    result = check_lane(data)  # (raises unless the lane gives the plain parser's messages)
    runs = [e for e in result.events if isinstance(e, MsgsReceived) and e.cursors is not None]
    assert result.error is None and [len(r.msgs) for r in runs] == [4]
    for cut in range(1, len(data), 7):
        check_lane(data, [cut])
