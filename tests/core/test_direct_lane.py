"""The direct get lane (:meth:`jscore.protocol.AckLane.arm_direct`): a batched direct get's
replies in the server's exact form read by one match each and fed to the machine's
``receive_direct`` as one run. It must change nothing but the cost: for the same bytes, whole
or split anywhere, a session with the lane gives the same messages (or rows), the same end,
cursor, counters and connection statistics as one without it, whatever the replies (other
header layouts, own headers, dates that do not exist, numbers too long for the lane, sizes
that do not add up, statuses)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from jscore import directget as DG
from jscore.machine import Stop
from jscore.session import Session
from tests.core.test_session_settle import connected

_STAMP = "2026-11-22T06:54:08.822887922Z"


def block(lines: list[tuple[str, str]], sep: str = ": ") -> bytes:
    return ("NATS/1.0\r\n" + "".join(f"{k}{sep}{v}\r\n" for k, v in lines) + "\r\n").encode()


def hmsg(inbox: str, sid: int, hdr: bytes, payload: bytes, delta: int = 0) -> bytes:
    """The frame; ``delta`` > 0 misstates the header size by that much, < 0 makes the total
    size smaller than the header block by ``-delta``."""
    total = len(hdr) + len(payload) if delta >= 0 else len(hdr) + delta
    return b"HMSG %s %d %d %d\r\n%s%s\r\n" % (inbox.encode(), sid, len(hdr) + delta if delta > 0 else len(hdr), total, hdr, payload)


@st.composite
def reply(draw: st.DrawFn, seq: int, last: int) -> tuple[bytes, bytes, int]:
    """(header block, payload, size delta: see :func:`hmsg`) of one reply: mostly the server's
    exact form."""
    kind = draw(st.integers(min_value=0, max_value=12))
    stamp = _STAMP
    if kind == 1:
        stamp = draw(st.sampled_from(["2026-02-30T06:54:08.8Z", "2026-11-22T06:54:08Z", "2026-11-22T06:54:08.1234567890Z",
                                      "2026-11-22T24:00:00.5Z", "2026-11-22 06:54:08.822887922 +0000 UTC"]))
    lines = [("Nats-Stream", draw(st.sampled_from(["S", "KV_b", "ÄÖ"]))),
             ("Nats-Subject", draw(st.sampled_from(["a.1", "a.2", "$KV.b.k", "ü.x", "long." + "x" * 900]))),
             ("Nats-Sequence", str(seq) if kind != 2 else "0" + str(seq)),
             ("Nats-Time-Stamp", stamp),
             ("Nats-Num-Pending", draw(st.sampled_from(["0", "7", "9" * 20, "x"])) if kind == 3 else str(draw(st.integers(0, 50)))),
             ("Nats-Last-Sequence", str(last))]
    if draw(st.booleans()):
        lines.append(("Nats-UpTo-Sequence", str(draw(st.integers(0, 99)))))
    if kind == 4:  # the message's own headers first (the lane reads printable ASCII ones)
        own = draw(st.lists(st.sampled_from([("Nats-Msg-Id", "m-1"), ("Own", "x y"), ("Own", "a\tb"), ("Own", ""),
                                             ("X-Ü", "1"), ("Own", "ü"), ("Own", "x\x01"), ("nats-sequence", "9"),
                                             ("Nats-Stream-X", "y"), ("K", "trailing ")]), min_size=1, max_size=3))
        lines[:0] = own
    if kind == 5:
        lines[2] = ("nats-sequence", str(seq))
    if kind == 6:
        del lines[5]  # no Nats-Last-Sequence
    payload = draw(st.binary(max_size=40))
    delta = draw(st.sampled_from([-1, -2, 1, 2])) if kind == 7 else 0
    sep = ":  " if kind == 8 else ": "  # (two spaces: the general way)
    return block(lines, sep), payload, delta


@st.composite
def script(draw: st.DrawFn) -> list[tuple[bytes, bytes, int]]:
    out = []
    seq = last = 0
    for _ in range(draw(st.integers(min_value=1, max_value=8))):
        step = draw(st.integers(min_value=0, max_value=9))
        if step == 0:  # an end of batch (a status: the general way)
            out.append((block([("Nats-Num-Pending", "0"), ("Nats-Last-Sequence", str(last))]).replace(
                b"NATS/1.0\r\n", b"NATS/1.0 204 EOB\r\n", 1), b"", 0))
            continue
        seq += 1 if step > 1 else 2  # (a deleted message skipped now and then)
        out.append(draw(reply(seq, last if step != 9 else last + 5)))
        last = seq
    return out


def _session(lane: bool, rows: bool, multi: bool) -> tuple[Session, Any, int, list[Any]]:
    s = connected()
    for i in range(11):  # (a sid of two digits, as in a client with a few subscriptions)
        s.conn.subscribe(f"other.{i}")
    options = DG.resolve_last_for(["a.>"]) if multi else DG.resolve_batch(seq=1, batch=50)
    m = DG.DirectGetBatch("$JS.API.DIRECT.GET.S", options, timeout=5.0, now=0.0, rows=rows)
    got: list[Any] = []
    slot = s.attach(m, got.append, 0.0)
    s.data_to_send()
    sid = s._slots[slot].sid
    assert (sid in s.conn._lane.direct_sids.values()) is True
    if not lane:
        s.conn._lane.disarm(sid)
    return s, m, slot, got


def outcome(lane: bool, rows: bool, multi: bool, replies: list[tuple[bytes, bytes, int]], cuts: list[int]) -> Any:
    s, m, slot, got = _session(lane, rows, multi)
    inbox, sid = s.inbox_of(slot), s._slots[slot].sid
    data = b"".join(hmsg(inbox, sid, hdr, payload, delta) for hdr, payload, delta in replies)
    prev = 0
    for cut in sorted({c % (len(data) + 1) for c in cuts}) + [len(data)]:
        s.receive_data(data[prev:cut], 1.0)
        prev = cut
    events = []
    while (e := s.next_event()) is not None:
        events.append(repr(e))
    delivered = [repr(x) for e in got if isinstance(e, DG.StoredMsgsDelivered) for x in e.msgs]
    ends = [repr(e) for e in got if not isinstance(e, DG.StoredMsgsDelivered)]
    stats = (s.conn.stats.msgs_in, s.conn.stats.bytes_in)
    state = (m.delivered, m.last_seq, m.num_pending, m.next_seq, m.up_to_seq, m.done)
    return delivered, ends, events, stats, state, s.conn._lane.direct_read


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(rows=False, multi=True, replies=[(block([("Nats-Stream", "S"), ("Nats-Subject", "a.1"), ("Nats-Sequence", "1"),
                                                  ("Nats-Time-Stamp", _STAMP), ("Nats-Num-Pending", "0"),
                                                  ("Nats-Last-Sequence", "0")]), b"x", 0)], cuts=[])
@example(rows=False, multi=False, replies=[(block([("Nats-Msg-Id", "m-1"), ("Own", "a\tb"), ("Nats-Stream", "S"),
                                                   ("Nats-Subject", "a.1"), ("Nats-Sequence", "1"), ("Nats-Time-Stamp", _STAMP),
                                                   ("Nats-Num-Pending", "0"), ("Nats-Last-Sequence", "0")]), b"x", 0)], cuts=[])
@example(rows=True, multi=False, replies=[(block([("Nats-Msg-Id", "m-1"), ("Nats-Stream", "S"), ("Nats-Subject", "a.1"),
                                                  ("Nats-Sequence", "1"), ("Nats-Time-Stamp", _STAMP),
                                                  ("Nats-Num-Pending", "0"), ("Nats-Last-Sequence", "0")]), b"x", 0)], cuts=[])
@given(rows=st.booleans(), multi=st.booleans(), replies=script(), cuts=st.lists(st.integers(min_value=0), max_size=4))
def test_the_lane_changes_nothing_but_the_cost(
    rows: bool, multi: bool, replies: list[tuple[bytes, bytes, int]], cuts: list[int]
) -> None:
    with_lane = outcome(True, rows, multi, replies, cuts)
    without = outcome(False, rows, multi, replies, cuts)
    assert with_lane[:-1] == without[:-1]
    assert without[-1] == 0


def test_the_servers_form_takes_the_lane_in_one_run() -> None:
    replies = [
        (block([("Nats-Stream", "S"), ("Nats-Subject", f"a.{i}"), ("Nats-Sequence", str(i)), ("Nats-Time-Stamp", _STAMP),
                ("Nats-Num-Pending", str(3 - i)), ("Nats-Last-Sequence", str(i - 1))]), b"p%d" % i, 0)
        for i in (1, 2, 3)
    ]
    delivered, ends, _, stats, state, read = outcome(True, False, False, replies, [])
    assert read == 3 and len(delivered) == 3 and state[:3] == (3, 3, 0)
    assert "subject='a.3'" in delivered[2] and "data=b'p3'" in delivered[2]
    assert outcome(False, False, False, replies, [])[:-1] == (delivered, ends, _, stats, state)


def test_two_gets_at_once_each_get_their_own_replies() -> None:
    """Two batched gets in flight on one connection, their replies interleaved in one read: each
    machine gets its own, with and without the lane alike."""
    results = []
    for lane in (True, False):
        s = connected()
        machines, sinks, addresses = [], [], []
        for _ in range(2):
            m = DG.DirectGetBatch("$JS.API.DIRECT.GET.S", DG.resolve_batch(seq=1, batch=9), timeout=5.0, now=0.0)
            got: list[Any] = []
            slot = s.attach(m, got.append, 0.0)
            if not lane:
                s.conn._lane.disarm(s._slots[slot].sid)
            machines.append(m)
            sinks.append(got)
            addresses.append((s.inbox_of(slot), s._slots[slot].sid))
        frames = b""
        for i in (1, 2, 3):
            for k, (inbox, sid) in enumerate(addresses):
                hdr = block([("Nats-Stream", "S"), ("Nats-Subject", f"g{k}.{i}"), ("Nats-Sequence", str(i)),
                             ("Nats-Time-Stamp", _STAMP), ("Nats-Num-Pending", str(9 - i)), ("Nats-Last-Sequence", str(i - 1))])
                frames += hmsg(inbox, sid, hdr, b"%d-%d" % (k, i))
        s.receive_data(frames, 1.0)
        results.append([[repr(x) for e in got if isinstance(e, DG.StoredMsgsDelivered) for x in e.msgs] for got in sinks])
        assert [m.delivered for m in machines] == [3, 3]
        assert s.conn._lane.direct_read == (6 if lane else 0)
    assert results[0] == results[1]
    assert "subject='g1.2'" in results[0][1][1]


def test_an_ended_get_leaves_no_armed_inbox() -> None:
    s, m, slot, got = _session(True, False, False)
    sid = s._slots[slot].sid
    s.command(slot, Stop(), 1.0)
    assert not s.running(slot)
    assert sid not in s.conn._lane.direct_sids.values() and not s.conn._lane.direct_heads
    assert sid not in s._run_routes


def test_a_reply_over_the_size_limit_is_refused_as_the_general_way_refuses_it() -> None:
    from fuzz.fuzz_wire import DIRECT_INBOX, check_lane

    hdr = block([("Nats-Stream", "S"), ("Nats-Subject", "a.1"), ("Nats-Sequence", "1"), ("Nats-Time-Stamp", _STAMP),
                 ("Nats-Num-Pending", "0"), ("Nats-Last-Sequence", "0")])
    big = hmsg(DIRECT_INBOX, 4, hdr, b"x" * 70_000)
    result = check_lane(big, max_payload=1024)  # (raises unless both ways agree)
    assert result.error is not None and "exceeds max_payload" in str(result.error)
    assert check_lane(big, max_payload=1 << 20).error is None


def test_only_a_batched_get_arms_the_lane() -> None:
    s = connected()
    sid = s.conn.subscribe("_INBOX.limited", max_msgs=1)
    s.conn.arm_direct(sid)
    wild = s.conn.subscribe("_INBOX.w.*")
    s.conn.arm_direct(wild)
    assert not s.conn._lane.direct_sids and not s.conn._lane.direct_heads
