"""The PubAck lane (:class:`jscore.protocol.AckLane`): PubAcks on a publish window's inbox read
by one match each. It must change nothing but the cost: the same messages as the plain parser
(whole and split, errors included), the same settled entries, counters and statistics in the
windows, and only for the inboxes armed in it."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fuzz.fuzz_wire import check_lane
from jscore.publish import ACKED, DUPLICATE, FrameWindow, PendingPublish, PublishWindow
from jscore.machine import Stop
from jscore.pubmachines import PROGRESS, AsyncPublishMachine, BulkPublishMachine, WatchLevel
from jscore.protocol import PUBACK_DUPLICATE, AckLane, AcksReceived, MsgReceived, Parser
from tests.core.test_session_settle import connected

INBOX = b"_INBOX.AbCdEfGhIjKlMnOpQrStUv."


def msg(sid: int, token: bytes, body: bytes, size: int | None = None, inbox: bytes = INBOX) -> bytes:
    return b"MSG %s%s %d %d\r\n%s\r\n" % (inbox, token, sid, len(body) if size is None else size, body)


STATUS_503 = b"NATS/1.0 503 No Responders\r\n\r\n"


def status_503(sid: int, token: bytes, inbox: bytes = INBOX) -> bytes:
    return b"HMSG %s%s %d %d %d\r\n%s\r\n" % (inbox, token, sid, len(STATUS_503), len(STATUS_503), STATUS_503)


def puback(stream: bytes, seq: int, duplicate: bool = False) -> bytes:
    return b'{"stream":"%s","seq":%d%s}' % (stream, seq, PUBACK_DUPLICATE if duplicate else b"")


# -------------------------------------------------------------------------------- the parser

_names = st.one_of(
    st.sampled_from([b"ORDERS", b"KV_cfg", b"a-b_c~1", b"S"]),
    st.binary(min_size=0, max_size=6),  # quotes, backslashes, control bytes, invalid UTF-8
    st.text(min_size=1, max_size=4).map(str.encode),  # non-ASCII
)
_bodies = st.one_of(
    st.builds(puback, _names, st.integers(min_value=0, max_value=2**64 + 5), st.booleans()),
    st.sampled_from(
        [
            b'{"stream":"S","seq":07}',
            b'{"stream":"S","seq":1,"duplicate":false}',
            b'{"stream":"S","seq":2,"duplicate":true}',
            b'{"stream":"S","domain":"hub","seq":3}',
            b'{"stream":"S","seq":4,"domain":"hub"}',
            b'{"stream":"S", "seq":5}',
            b'{"error":{"code":503,"err_code":10077,"description":"no responders"}}',
            b'{"stream":"S","seq":6}x',
            b"",
        ]
    ),
)
_tokens = st.one_of(st.integers(min_value=1, max_value=10**6).map(lambda n: str(n).encode()),
                    st.sampled_from([b"s1", b"s42", b"", b"1.2", b"x" * 33, b"\xff1"]))
_inboxes = st.sampled_from([INBOX, b"_INBOX.AbCdEfGhIjKlMnOpQrStU.", b"_INBOX.x.", b"_OTHER.AbCdEfGhIjKlMnOpQrStUv."])


@st.composite
def frame(draw: st.DrawFn) -> bytes:
    kind = draw(st.integers(min_value=0, max_value=9))
    if kind == 6:  # a PubAck the lane would take, but for a size that does not match it
        body = puback(b"S", draw(st.integers(min_value=1, max_value=99)))
        delta = draw(st.sampled_from([-3, -2, -1, 1, 2, 3, 30]))
        return msg(1, b"1", body, len(body) + delta)
    if kind <= 5:
        body = draw(_bodies)
        inbox = INBOX if kind <= 3 else draw(_inboxes)
        return msg(draw(st.sampled_from([1, 1, 2, 3])), draw(_tokens), body, None, inbox)
    if kind == 7:
        return b"PING\r\n"
    if kind == 8:  # a 503 to a publish: a status, not a PubAck
        return status_503(1, b"1")
    return msg(1, b"1", puback(b"S", 1)).replace(b"MSG ", b"MSG  ", 1)  # a malformed control line


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(frames=st.lists(frame(), min_size=1, max_size=12), data=st.data())
@example(frames=[msg(1, b"1", puback(b"S", 1)), msg(1, b"2", puback(b"S", 2, True)), msg(2, b"3", puback(b"S", 3))],
         data=None)
@example(frames=[msg(1, b"1", puback(b"S", 1), 25), msg(1, b"2", puback(b"S", 2))], data=None)
@example(frames=[msg(1, b"1", puback(b"S", 1), 21), b"PING\r\n"], data=None)
def test_the_lane_gives_the_plain_parsers_messages(frames: list[bytes], data: Any) -> None:
    check_whole_and_cut(b"".join(frames), data)


def check_whole_and_cut(wire: bytes, data: Any) -> None:
    """check_lane on ``wire`` whole, then cut at up to six places drawn from ``data``."""
    cuts: list[int] = []
    if data is not None and len(wire) > 1:
        cuts = sorted(data.draw(st.lists(st.integers(min_value=1, max_value=len(wire) - 1), max_size=6)))
    check_lane(wire)
    check_lane(wire, cuts)


def test_a_run_is_one_event_per_inbox_in_order() -> None:
    lane = AckLane("_INBOX")
    lane.arm(1, INBOX.decode())
    lane.arm(2, INBOX.decode())
    wire = b"".join(
        [
            msg(1, b"1", puback(b"S", 1)),
            msg(1, b"s2", puback(b"S", 2, True)),
            msg(2, b"3", puback(b"T", 3)),
            msg(1, b"4", b'{"stream":"S","domain":"hub","seq":4}'),
            msg(1, b"5", puback(b"S", 5)),
        ]
    )
    events = Parser(lane=lane).feed(wire)
    assert [e.__class__ for e in events] == [AcksReceived, AcksReceived, MsgReceived, AcksReceived]
    assert events[0].acks == [("1", "S", 1, False), ("s2", "S", 2, True)]  # type: ignore[union-attr]
    assert events[1].acks == [("3", "T", 3, False)] and events[1].sid == 2  # type: ignore[union-attr]
    assert lane.read == 4


def test_an_inbox_not_armed_goes_the_general_way() -> None:
    lane = AckLane("_INBOX")
    lane.arm(1, INBOX.decode())
    events = Parser(lane=lane).feed(msg(2, b"1", puback(b"S", 1)))
    assert [e.__class__ for e in events] == [MsgReceived]
    other = b"_INBOX.ZyXwVuTsRqPoNmLkJiHgFe."  # (the request mux's shape, another inbox)
    assert [e.__class__ for e in Parser(lane=lane).feed(msg(1, b"1", puback(b"S", 1), inbox=other))] == [MsgReceived]
    lane.disarm(1)
    assert [e.__class__ for e in Parser(lane=lane).feed(msg(1, b"1", puback(b"S", 1)))] == [MsgReceived]
    assert lane.read == 0 and lane.heads == ()


def test_a_custom_inbox_prefix_is_matched_literally() -> None:
    lane = AckLane("my.app")
    lane.arm(1, "my.app.AbCdEfGhIjKlMnOpQrStUv.")
    assert Parser(lane=lane).feed(msg(1, b"1", puback(b"S", 1), inbox=b"my.app.AbCdEfGhIjKlMnOpQrStUv."))[0].__class__ \
        is AcksReceived
    assert Parser(lane=lane).feed(msg(1, b"1", puback(b"S", 1), inbox=b"myXapp.AbCdEfGhIjKlMnOpQrStUv."))[0].__class__ \
        is MsgReceived


# -------------------------------------------------------------------------------- the session


class Publisher:
    """A session with an AsyncPublishMachine attached as the client attaches it."""

    def __init__(self, lane: bool) -> None:
        self.s = s = connected()
        self.window: PublishWindow[PendingPublish] = PublishWindow(max_pending=1000)
        self.sync: PublishWindow[PendingPublish] = PublishWindow(max_pending=10)
        self.m = AsyncPublishMachine(self.window, self.sync, gen=0, connected=True)
        self.settled: list[Any] = []
        self.slot = s.attach(self.m, self.settled.append, 0.0, wildcard=True)
        self.inbox = s.inbox_of(self.slot).encode()
        self.m.set_prefix(self.inbox.decode())
        self.sid = s._slots[self.slot].sid
        if not lane:
            s.conn._lane.disarm(self.sid)
        s.data_to_send()

    def add(self, token: str, watched: bool = True, msg_id: str | None = None) -> PendingPublish:
        e = PendingPublish("orders.1", b"x", None, msg_id)
        e.watched = watched
        (self.sync if token.startswith("s") else self.window).add(e, 0.0, 0, token)
        return e

    def feed(self, wire: bytes) -> None:
        for i in range(0, len(wire), 97):  # reads that end in the middle of frames
            self.s.receive_data(wire[i : i + 97], 0.0)


_NO_RESPONDERS = b"503"  # (stands for a 503 status: a publish with a msg id waits for its re-send)
_ack_frames = st.lists(
    st.tuples(
        st.sampled_from(["1", "2", "3", "4", "s1", "s2", "9"]),  # "9" was never published: late
        st.sampled_from([puback(b"S", 7), puback(b"S", 8, True), b'{"stream":"S","domain":"d","seq":9}',
                         b'{"error":{"code":400,"err_code":10060,"description":"bad"}}', _NO_RESPONDERS]),
    ),
    max_size=12,
)
_MSG_IDS = {"1": "a", "3": "b", "s1": "c"}  # (the others have none: a 503 fails them)


@settings(max_examples=200, deadline=None)
@given(acks=_ack_frames, level=st.integers(min_value=-1, max_value=6))
@example(acks=[("1", _NO_RESPONDERS), ("s1", _NO_RESPONDERS), ("1", puback(b"S", 7, True)), ("s1", puback(b"S", 8))],
         level=-1)
@example(acks=[("9", puback(b"S", 7))], level=5)
def test_the_windows_settle_the_same_with_and_without_the_lane(acks: list[tuple[str, bytes]], level: int) -> None:
    results = []
    for lane in (True, False):
        p = Publisher(lane)
        entries = {t: p.add(t, watched=(t != "2"), msg_id=_MSG_IDS.get(t)) for t in ("1", "2", "3", "4", "s1", "s2")}
        if level >= 0:
            p.s.command(p.slot, WatchLevel(level=level), 0.0)
        p.feed(
            b"".join(
                status_503(p.sid, t.encode(), p.inbox) if body is _NO_RESPONDERS else msg(p.sid, t.encode(), body, inbox=p.inbox)
                for t, body in acks
            )
        )
        results.append(
            (
                {t: (e.outcome, e.ack, repr(e.error), e.token in p.window.retrying or e.token in p.sync.retrying)
                 for t, e in entries.items()},
                p.window.stats,
                p.sync.stats,
                [e.token for e in p.settled if isinstance(e, PendingPublish)],
                sum(e is PROGRESS for e in p.settled),  # (after the run's entries in the lane, so counted)
                p.m.wake_level,
                (p.s.conn.stats.msgs_in, p.s.conn.stats.bytes_in, p.s.conn._subs[p.sid].delivered),
            )
        )
        laned = any(b.startswith(b'{"stream"') and b"domain" not in b for _, b in acks)
        assert (p.s.conn._lane.read > 0) == (lane and laned)
    assert results[0] == results[1]


def test_a_puback_settles_an_entry_waiting_for_its_resend() -> None:
    p = Publisher(lane=True)
    e = p.add("1", msg_id="m1")
    p.feed(status_503(p.sid, b"1", p.inbox))
    assert "1" in p.window.retrying and e.outcome is not ACKED
    p.feed(msg(p.sid, b"1", puback(b"S", 5), inbox=p.inbox))
    assert e.outcome is ACKED and e.ack is not None and e.ack.seq == 5 and not p.window.retrying
    assert p.s.conn._lane.read == 1
    assert p.settled[-1] is e


def test_an_inbox_closed_is_disarmed() -> None:
    p = Publisher(lane=True)
    assert p.s.conn._lane.sids
    p.s.unsubscribe(p.sid)
    assert not p.s.conn._lane.sids and not p.s.conn._lane.heads and p.sid not in p.s._run_routes


def test_a_machine_that_stops_leaves_no_lane_and_no_route() -> None:
    p = Publisher(lane=True)
    p.s.command(p.slot, Stop(), 0.0)
    assert not p.s.conn._lane.sids and p.sid not in p.s._run_routes and p.sid not in p.s._routes


def test_an_inbox_refused_by_the_server_is_disarmed() -> None:
    p = Publisher(lane=True)
    subject = p.inbox.decode() + "*"
    p.s.receive_data(b"-ERR 'Permissions Violation for Subscription to \"%s\"'\r\n" % subject.encode(), 0.0)
    assert not p.s.conn.has_subscription(p.sid)
    assert not p.s.conn._lane.sids and p.sid not in p.s._run_routes


def test_the_lane_counts_towards_a_later_message_limit() -> None:
    """PubAcks read in the lane count as delivered; an unsubscribe with a limit disarms the lane,
    so the limit is counted message by message and the subscription ends at it."""
    p = Publisher(lane=True)
    entries = [p.add(t) for t in ("1", "2", "3", "4")]
    p.feed(b"".join(msg(p.sid, t, puback(b"S", n), inbox=p.inbox) for t, n in ((b"1", 1), (b"2", 2))))
    conn = p.s.conn
    assert conn._subs[p.sid].delivered == 2 and conn._lane.read == 2
    conn.unsubscribe(p.sid, max_msgs=3)
    assert not conn._lane.sids
    p.feed(b"".join(msg(p.sid, t, puback(b"S", n), inbox=p.inbox) for t, n in ((b"3", 3), (b"4", 4))))
    assert conn._lane.read == 2 and not conn.has_subscription(p.sid)
    # The third is the limit and settles its entry; the fourth, past it, is not routed (the
    # inbox ended, and the machine with it: its last entry is settled as ambiguous).
    assert [e.outcome for e in entries[:3]] == [ACKED] * 3 and entries[2].ack is not None and entries[2].ack.seq == 3
    assert entries[3].outcome is not ACKED and entries[3].ack is None


def test_a_subscription_with_a_limit_is_never_armed() -> None:
    s = connected()
    sid = s.conn.subscribe("_INBOX.AbCdEfGhIjKlMnOpQrStUv.*", None, 5)
    s.conn.arm_ack_lane(sid)
    assert not s.conn._lane.sids


def test_the_bulk_window_reads_its_pubacks_in_the_lane() -> None:
    for lane in (True, False):
        s = connected()
        w = FrameWindow(max_pending=100)
        m = BulkPublishMachine(w, stall_timeout=30.0, connected=True)
        events: list[Any] = []
        slot = s.attach(m, events.append, 0.0, wildcard=True)
        inbox = s.inbox_of(slot)
        m.set_prefix(inbox)
        sid = s._slots[slot].sid
        if not lane:
            s.conn._lane.disarm(sid)
        w.wake_level = 1
        w.sent([1, 2, 3], [b"a" * 10, b"b" * 10, b"c" * 10], 0.0)
        wire = b"".join(msg(sid, t, puback(b"S", n, dup), inbox=inbox.encode())
                        for t, n, dup in ((b"1", 1, False), (b"3", 2, True), (b"x", 3, False), (b"7", 4, False)))
        s.receive_data(wire, 0.0)
        assert (s.conn._lane.read == 4) == lane
        assert w.in_flight == 1 and w.written == 2 and w.duplicates == 1 and w.bytes_in_flight == 10
        assert len([e for e in events if e.__class__.__name__ == "Progress"]) == 1
        assert s.conn.stats.msgs_in == 4


def test_bulk_machine_counts_a_runs_pubacks_per_shared_token() -> None:
    """Shared replies: a run's acks are counted per batch token, a batch split across runs
    included, duplicates counted, late tokens ignored."""
    w = FrameWindow(shared_replies=True)
    w.sent(range(0, 3), [b"a", b"b", b"c"], 0.0)
    w.sent(range(3, 5), [b"d", b"e"], 0.0)
    m = BulkPublishMachine(w, stall_timeout=60.0, connected=True)
    m.receive_acks(AcksReceived(1, [("0", "S", 1, False), ("0", "S", 2, True), ("9", "S", 3, False)], 0), 0.0)
    assert (w.written, w.in_flight) == (0, 5)
    w.wake_level = 2
    m.receive_acks(AcksReceived(1, [("0", "S", 3, False), ("3", "S", 4, True), ("x", "S", 5, False)], 0), 0.0)
    assert (w.written, w.duplicates, w.in_flight) == (3, 1, 2)
    assert m.drain_events() == [PROGRESS]
    m.receive_acks(AcksReceived(1, [("3", "S", 5, False)], 0), 0.0)
    assert (w.written, w.duplicates, w.in_flight) == (5, 2, 0)


@st.composite
def shared_token_run(draw: st.DrawFn) -> bytes:
    """PubAcks on one token in a row (a batch with a shared reply token), with the changes a
    frame read by its likeness to the one before must not let through."""
    token = draw(st.sampled_from([b"0", b"64", b"4503599627370496"]))
    seq = draw(st.integers(min_value=1, max_value=10**19 - 40))
    out = []
    for i in range(draw(st.integers(min_value=1, max_value=12))):
        body = puback(b"S", seq + i)
        frame = msg(1, token, body)
        change = draw(st.integers(min_value=0, max_value=14))
        if change == 1:
            frame = msg(1, token, body.replace(b'"seq":', b'"seq":0', 1))  # a leading zero
        elif change == 2:
            frame = msg(1, token, body.replace(b"}", b"x}", 1), len(body))  # a letter, same size
        elif change == 3:
            frame = msg(1, token, puback(b"S", seq + i, True))  # a duplicate
        elif change == 4:
            frame = msg(1, token, body[:-2] + b"/}", len(body))  # a sign where a digit was
        elif change == 5:
            frame = frame[:-2] + b"\n\n"  # no CRLF after the payload
        elif change == 6:
            frame = msg(2, token, body)  # another sid
        elif change == 7:
            frame = msg(1, token, body.replace(b"}", b" }", 1), len(body))  # a blank, same size
        elif change == 8:
            frame = msg(1, token + b"1", body)  # another token
        elif change == 9:
            frame = msg(1, token, puback(b"T", seq + i))  # another stream
        elif change == 10:
            frame = msg(1, token, body.replace(b'"seq":', b'"seq":0', 1)[:-2] + b"}")  # a leading zero, same size
        out.append(frame)
    return b"".join(out)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(wire=shared_token_run(), data=st.data())
@example(wire=msg(1, b"0", puback(b"S", 9)) + msg(1, b"0", puback(b"S", 9)) + msg(1, b"0", puback(b"S", 10)), data=None)
@example(wire=msg(1, b"0", puback(b"S", 1)) * 2 + msg(1, b"0", b'{"stream":"S","seq":0}'), data=None)
@example(wire=msg(1, b"0", puback(b"S", 11)) + msg(1, b"0", puback(b"S", 12)) + msg(1, b"0", b'{"stream":"S","seq":05}'),
         data=None)
def test_acks_on_a_shared_token_give_the_plain_parsers_messages(wire: bytes, data: Any) -> None:
    check_whole_and_cut(wire, data)


def test_acks_on_a_shared_token_are_read_by_their_likeness() -> None:
    """After two frames on the same token the pattern is not run again while frames start alike."""
    lane = AckLane("_INBOX")
    lane.arm(1, INBOX.decode())
    calls = []
    pattern = lane.match

    def counted(buf: bytes, pos: int) -> Any:
        calls.append(pos)
        return pattern(buf, pos)

    lane.match = counted  # type: ignore[method-assign]
    wire = b"".join(msg(1, b"64", puback(b"S", s)) for s in range(1, 9))
    events = Parser(lane=lane).feed(wire)
    assert len(calls) == 3  # the first two frames, and the end of the run
    assert [e.__class__ for e in events] == [AcksReceived]
    assert events[0].acks == [("64", "S", s, False) for s in range(1, 9)]  # type: ignore[union-attr]
    assert events[0].size == sum(len(INBOX) + 2 + len(puback(b"S", s)) for s in range(1, 9))  # type: ignore[union-attr]
