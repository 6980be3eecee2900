"""Runs on an ordered consumer (:meth:`jscore.ordered.OrderedMachine.receive_msgs`): the
messages its wildcard inbox gets in a row, fed as one run, must change nothing but the cost.
The same deliveries in the same order, the same resets, stale counts, cursor, pulls, creates,
deletes and ends as the messages fed one by one, whatever the run holds: deliveries in order,
gaps, duplicates, an older consumer's, v2 or malformed ack subjects, create replies, a fetch
that completes in the middle of a run. The same holds for the runs the connection's delivery
lane makes of them (each stretch of v1 deliveries a run with its ack cursors)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from jscore.jsmsg import ack_cursor, parse_ack_subject
import numpy as np

from jscore.bulk import DeliveryColumns
from jscore.ordered import OrderedColumnsDelivered, OrderedMessageDelivered, OrderedMessagesDelivered, OrderedState
from jscore.protocol import MsgReceived, MsgsReceived
from jscore.pull import MessagesTaken
from jscore.machine import ConnectionLost, ConnectionRestored, Stop
from tests.core.test_ordered_machine import INBOX, H, consume_opts, fetch_opts, info

_STAMP = 1700000000000000000


def flat(events: list[Any]) -> list[str]:
    """Every OrderedMessagesDelivered (or OrderedColumnsDelivered) as one
    OrderedMessageDelivered per message, with the metadata its ack subject gives (as reprs:
    errors compare by type and text)."""
    out: list[Any] = []
    for e in events:
        if e.__class__ is OrderedColumnsDelivered:
            cols = e.columns
            msgs, _ = cols.messages(MsgReceived)
            e = OrderedMessagesDelivered(msgs=msgs, stream_seqs=cols.seqs, stamps=cols.stamps)
        if e.__class__ is OrderedMessagesDelivered:
            assert e.msgs and len(e.msgs) == len(e.stream_seqs) == len(e.stamps), "a malformed run"
            for m, seq, stamp in zip(e.msgs, e.stream_seqs, e.stamps):
                meta = parse_ack_subject(m.reply)
                assert (meta.sequence.stream, meta.timestamp_ns) == (seq, stamp)
                out.append(OrderedMessageDelivered(msg=m, metadata=meta))
        else:
            out.append(e)
    return [repr(e) for e in out]


def snapshot(h: H) -> tuple[Any, ...]:
    m, s = h.m, h.st
    return (
        m.finished, m.end, repr(m.error), m.delivered, m.stale, m._buffered_messages, m._buffered_bytes,
        m.next_deadline(), s.state, s.serial, s.name, s.stream_seq, s.consumer_seq, s.resets,
        [(x.subject, x.body, x.reply_token) for x in h.sent],
        _inner_counts(m._inner),
    )


def _inner_counts(inner: Any) -> tuple[Any, ...] | None:
    """The inner pull machine's accounting (a run's size counts there)."""
    if inner is None:
        return None
    names = ("delivered", "delivered_bytes", "pending_messages", "pending_bytes", "buffered_messages", "buffered_bytes")
    return tuple(getattr(inner, n, None) for n in names)


_kinds = st.sampled_from(
    ["next", "next", "next", "skip", "gap", "dup", "old", "v2", "bad", "big", "create", "create_cur", "newcons",
     "newcons", "plain", "on_pull"]
)  # fmt: skip
_run = st.lists(st.tuples(_kinds, st.integers(min_value=1, max_value=300)), min_size=1, max_size=10)
_step = st.one_of(
    st.tuples(st.just("run"), _run),
    st.tuples(st.just("created"), st.none()),
    st.tuples(st.just("status"), st.sampled_from([(408, "Request Timeout"), (404, "No Messages"), (100, "Idle Heartbeat")])),
    st.tuples(st.just("take"), st.integers(min_value=1, max_value=6)),
    st.tuples(st.just("time"), st.floats(min_value=0.0, max_value=3.0)),
    st.tuples(st.just("stop"), st.none()),
    st.tuples(st.just("lost"), st.none()),
    st.tuples(st.just("restored"), st.none()),
)


def _messages(h: H, specs: list[tuple[str, int]]) -> list[MsgReceived]:
    """The run's messages, made from the cursor before it (the same for both machines)."""
    s = h.st
    name, sseq, cseq = s.name, s.stream_seq, s.consumer_seq
    old = f"{name.rsplit('_', 1)[0]}_{max(1, s.serial - 1)}" if s.serial > 1 else "Q_9"
    following = f"{name.rsplit('_', 1)[0]}_{s.serial + 1}"  # the next consumer's, after a reset
    new_cseq = 0
    create = h.creates()[-1] if h.creates() else None
    pull_token = (h.pulls()[-1].reply_token or "") if h.pulls() else "p9"
    out = []
    for kind, size in specs:
        consumer = old if kind == "old" else name
        if kind in ("next", "v2", "old", "big"):
            sseq, cseq = sseq + 1, cseq + 1
        elif kind == "skip":  # a stream sequence skipped (a filter): still in order
            sseq, cseq = sseq + 3, cseq + 1
        elif kind == "gap":
            sseq, cseq = sseq + 2, cseq + 2
        elif kind == "dup":
            pass
        if kind == "create":  # the first create's reply (stale after it) in the middle of a run
            out.append(MsgReceived(INBOX + "c1", 1, None, info(name), None, size=size))
            continue
        if kind == "create_cur" and create is not None:  # the latest create's reply: a new consumer
            created = json.loads(create.body)["config"]["name"]
            out.append(MsgReceived(INBOX + (create.reply_token or ""), 1, None, info(created, sseq), None, size=size))
            continue
        if kind == "newcons":  # the next consumer's deliveries, from 1 (after its create reply)
            sseq, new_cseq = sseq + 1, new_cseq + 1
            reply = f"$JS.ACK.S.{following}.1.{sseq}.{new_cseq}.{_STAMP}.3"
            out.append(MsgReceived("s.x", 1, reply, b"n", None, size=size))
            continue
        if kind == "plain":  # a message with neither ack subject nor known token
            out.append(MsgReceived(INBOX + "zz", 1, "_INBOX.other", b"?", None, size=size))
            continue
        if kind == "on_pull":  # a message on the pull's token, no ack subject and no status
            out.append(MsgReceived(INBOX + pull_token, 1, "_INBOX.r", b"x", None, size=size))
            continue
        if kind == "v2":
            reply = f"$JS.ACK._.HASH.S.{consumer}.1.{sseq}.{cseq}.{_STAMP}.0.tok"
        elif kind == "bad":
            reply = f"$JS.ACK.S.{consumer}.1.{sseq}.x.{_STAMP}.0"
        elif kind == "big":  # a pending count above 2**64-1: not a JetStream delivery
            reply = f"$JS.ACK.S.{consumer}.1.{sseq}.{cseq}.{_STAMP}.{2**64}"
        else:
            reply = f"$JS.ACK.S.{consumer}.1.{sseq}.{cseq}.{_STAMP + sseq}.{max(0, 50 - sseq)}"
        out.append(MsgReceived("s.x", 1, reply, b"%d" % sseq, None, size=size))
    return out


def lane_runs(msgs: list[MsgReceived]) -> list[MsgsReceived]:
    """The runs the connection's delivery lane makes of these messages: each stretch of v1
    deliveries one run with its cursors, each stretch of anything else one run without."""
    out: list[MsgsReceived] = []
    for m in msgs:
        cursor = ack_cursor(m.reply) if m.reply is not None else None
        last = out[-1] if out else None
        if last is not None and (last.cursors is not None) == (cursor is not None):
            last.msgs.append(m)
            last.size += m.size
            if cursor is not None:
                assert last.cursors is not None
                last.cursors.append(cursor)
        else:
            out.append(MsgsReceived(1, [m], m.size, None if cursor is None else [cursor]))
    return out


def columns_of(msgs: list[MsgReceived], cursors: list[tuple[str, int, int, int]]) -> DeliveryColumns:
    """The columns the bulk reader gives for these deliveries of one consumer (MSG frames,
    with the messages' own sizes)."""
    buf = b""
    at: dict[str, list[int]] = {k: [] for k in ("subject_at", "subject_end", "reply_at", "reply_end", "payload_at")}
    for m in msgs:
        assert m.reply is not None and m.headers is None
        head = b"MSG %s 1 " % m.subject.encode()
        at["subject_at"].append(len(buf) + 4)
        at["subject_end"].append(len(buf) + len(head) - 3)
        at["reply_at"].append(len(buf) + len(head))
        at["reply_end"].append(len(buf) + len(head) + len(m.reply))
        frame = head + b"%s %d\r\n" % (m.reply.encode(), len(m.data))
        at["payload_at"].append(len(buf) + len(frame))
        buf += frame + m.data + b"\r\n"
    arrays = {k: np.array(v, dtype=np.int64) for k, v in at.items()}
    arrays["block_at"] = arrays["payload_at"]
    arrays["payload_end"] = arrays["payload_at"] + np.array([len(m.data) for m in msgs], dtype=np.int64)
    arrays["sizes"] = np.array([m.size for m in msgs], dtype=np.int64)
    assert len({c[0] for c in cursors}) == 1
    return DeliveryColumns(
        buf=buf, end=len(buf), sid=1, headed=False, consumer=cursors[0][0], seqs=[c[1] for c in cursors],
        cseqs=[c[2] for c in cursors], stamps=[c[3] for c in cursors], size=sum(m.size for m in msgs), **arrays,
    )  # fmt: skip


def column_runs(msgs: list[MsgReceived]) -> list[MsgsReceived]:
    """The runs of the delivery lane, each stretch of v1 deliveries of one consumer as the
    columns the bulk reader gives for it."""
    out: list[MsgsReceived] = []
    for run in lane_runs(msgs):
        if run.cursors is None:
            out.append(run)
            continue
        i = 0
        while i < len(run.msgs):
            j = i
            while j < len(run.msgs) and run.cursors[j][0] == run.cursors[i][0]:
                j += 1
            piece = run.msgs[i:j]
            out.append(MsgsReceived(1, [], sum(m.size for m in piece), None, columns_of(piece, run.cursors[i:j])))
            i = j
    return out


def _apply(h: H, step: tuple[str, Any], msgs: list[MsgReceived] | None, as_run: bool | str) -> None:
    kind, arg = step
    if kind == "run":
        assert msgs is not None
        if as_run in ("lane", "columns"):
            for run in lane_runs(msgs) if as_run == "lane" else column_runs(msgs):
                h.m.receive_msgs(run, h.now)
                h.pump()
        elif as_run:
            h.m.receive_msgs(MsgsReceived(1, msgs, sum(m.size for m in msgs)), h.now)
            h.pump()
        else:
            for m in msgs:
                h.recv(m)
    elif kind == "created":
        if h.st.state is OrderedState.CREATING and h.creates() and not h.m.finished:
            h.created(h.st.stream_seq)
    elif kind == "status":
        if h.pulls() and not h.m.finished:
            h.status(*arg)
    elif kind == "take":
        if not h.m.finished:
            h.cmd(MessagesTaken(count=arg, size=arg * 100))
    elif kind == "time":
        h.advance(arg)
    elif kind == "stop":
        if not h.m.finished:
            h.cmd(Stop())
    elif kind == "lost":
        if not h.m.finished:
            h.cmd(ConnectionLost(error=None))
    elif kind == "restored":
        if not h.m.finished:
            h.cmd(ConnectionRestored(url="nats://x"))


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(max_bytes=0, consume=False, batch=3, steps=[("created", None), ("run", [("next", 10)] * 5)])
@example(max_bytes=150, consume=False, batch=9, steps=[("created", None), ("run", [("next", 50)] * 3), ("run", [("next", 50)])])
@example(max_bytes=150, consume=False, batch=9, steps=[("created", None), ("run", [("next", 40)] * 3), ("run", [("next", 40)] * 2)])
@example(max_bytes=0, consume=False, batch=5, steps=[("created", None), ("run", [("next", 10), ("gap", 10), ("next", 10)])])
@example(max_bytes=0, consume=True, batch=5, steps=[("created", None), ("run", [("next", 10), ("dup", 10), ("next", 10)]),
                                       ("created", None), ("run", [("next", 10), ("old", 10)])])
@example(max_bytes=0, consume=True, batch=5, steps=[("created", None), ("run", [("create", 10), ("next", 10), ("v2", 10)])])
@example(max_bytes=0, consume=False, batch=9, steps=[("created", None), ("run", [("next", 10), ("bad", 10), ("next", 10)])])
@example(max_bytes=0, consume=True, batch=9, steps=[("created", None), ("run", [("next", 10), ("big", 10), ("plain", 10)])])
@example(max_bytes=0, consume=False, batch=2, steps=[("run", [("next", 10)]), ("created", None), ("run", [("skip", 10)] * 3)])
@given(
    consume=st.booleans(), batch=st.integers(min_value=1, max_value=8), max_bytes=st.sampled_from([0, 0, 150, 400]),
    steps=st.lists(_step, max_size=14),
)
def test_a_run_is_the_same_as_its_messages_one_by_one(consume: bool, batch: int, max_bytes: int, steps: list[Any]) -> None:
    if consume:
        opts = consume_opts(max_messages=batch)
    else:
        opts = fetch_opts(batch, expires=2.0, max_bytes=max_bytes) if max_bytes else fetch_opts(batch, expires=2.0)
    one, run, lane, cols = H(opts), H(opts), H(opts), H(opts, columns=True)
    for step in steps:
        msgs = _messages(one, step[1]) if step[0] == "run" else None
        errors = []
        for h, as_run in ((one, False), (run, True), (lane, "lane"), (cols, "columns")):
            try:
                _apply(h, step, msgs, as_run=as_run)
                errors.append(None)
            except Exception as exc:  # noqa: BLE001 (all must raise the same)
                errors.append(repr(exc))
        assert errors[0] == errors[1] == errors[2] == errors[3]
        for other in (run, lane, cols):
            assert flat(other.events) == flat(one.events)
            assert snapshot(other) == snapshot(one)


def test_a_run_of_the_active_consumers_deliveries_is_one_event() -> None:
    h = H(consume_opts(max_messages=100))
    h.created()
    msgs = _messages(h, [("next", 10), ("skip", 20), ("next", 30)])
    h.m.receive_msgs(MsgsReceived(1, msgs, 60), h.now)
    h.pump()
    (e,) = h.events
    assert e.__class__ is OrderedMessagesDelivered and e.msgs == msgs
    assert e.stream_seqs == [1, 4, 5] and e.stamps == [_STAMP + 1, _STAMP + 4, _STAMP + 5]
    assert h.m.delivered == 3 and h.m._buffered_messages == 3 and h.m._buffered_bytes == 60
    assert (h.st.stream_seq, h.st.consumer_seq) == (5, 3)


def test_a_gap_inside_a_run_ends_the_run_resets_and_the_rest_is_stale() -> None:
    h = H(consume_opts(max_messages=100))
    h.created()
    msgs = _messages(h, [("next", 10), ("next", 10), ("gap", 10), ("next", 10), ("next", 10)])
    h.m.receive_msgs(MsgsReceived(1, msgs, 50), h.now)
    h.pump()
    runs = [e for e in h.events if e.__class__ is OrderedMessagesDelivered]
    assert [seq for e in runs for seq in e.stream_seqs] == [1, 2]
    assert h.st.serial == 2 and h.st.state is not OrderedState.ACTIVE and h.st.stream_seq == 2
    assert h.m.stale == 2  # the two after the gap: the dropped consumer's
    assert h.deletes() == ["P_1"]


def test_a_fetch_completing_inside_a_run_counts_the_rest_as_stale() -> None:
    h = H(fetch_opts(2, expires=2.0))
    h.created()
    msgs = _messages(h, [("next", 10)] * 4)
    h.m.receive_msgs(MsgsReceived(1, msgs, 40), h.now)
    h.pump()
    assert [seq for e in h.of(OrderedMessagesDelivered) for seq in e.stream_seqs] == [1, 2]
    assert h.m.finished and h.m.stale == 2 and h.st.stream_seq == 2


def test_ack_cursor_reads_what_parse_ack_subject_reads_or_declines() -> None:
    reply = f"$JS.ACK.S.C.3.10.7.{_STAMP}.5"
    meta = parse_ack_subject(reply)
    assert ack_cursor(reply) == (meta.consumer, meta.sequence.stream, meta.sequence.consumer, meta.timestamp_ns)
    # what it declines, parse_ack_subject reads (v2) or refuses (past 2**64-1, not a number)
    assert ack_cursor(f"$JS.ACK._.H.S.C.3.10.7.{_STAMP}.5.t") is None
    assert parse_ack_subject(f"$JS.ACK._.H.S.C.3.10.7.{_STAMP}.5.t").sequence.stream == 10
    for bad in (f"$JS.ACK.S.C.{2**64}.10.7.{_STAMP}.5", f"$JS.ACK.S.C.3.10.7.{_STAMP}.{2**64}",
                f"$JS.ACK.S.C.3.+10.7.{_STAMP}.5", f"$JS.ACK.S.C.3.010.7.{_STAMP}.5", "_INBOX.x"):
        assert ack_cursor(bad) is None


def test_a_create_reply_then_the_new_consumers_deliveries_in_one_run() -> None:
    h = H(consume_opts(max_messages=100))
    h.created()
    first = _messages(h, [("next", 10), ("gap", 10)])  # the gap resets: P_2 is being created
    h.m.receive_msgs(MsgsReceived(1, first, 20), h.now)
    h.pump()
    assert h.st.serial == 2 and h.st.state is OrderedState.CREATING
    # its create reply and its first deliveries arrive in one read
    second = _messages(h, [("create_cur", 10), ("next", 10), ("next", 10)])
    h.m.receive_msgs(MsgsReceived(1, second, 30), h.now)
    h.pump()
    assert h.st.state is OrderedState.ACTIVE and h.st.name == "P_2" and h.st.consumer_seq == 2
    # (the create reply goes alone; the new consumer's deliveries after it are a run again)
    assert [[m.data for m in e.msgs] for e in h.of(OrderedMessagesDelivered)] == [[b"1"], [b"2", b"3"]]
    assert not h.of(OrderedMessageDelivered)


def test_a_run_read_in_bulk_is_one_columns_event_while_the_fetch_takes_it() -> None:
    """In order and within the fetch's batch: one OrderedColumnsDelivered, counted by the fetch
    (which ends when the run completes its batch); past the batch or with a gap, message by
    message, as test_a_run_is_the_same_as_its_messages_one_by_one holds."""
    for batch, count, whole in ((5, 5, True), (8, 5, True), (4, 5, False)):
        h = H(fetch_opts(batch, expires=2.0), columns=True)
        h.created(0)
        msgs = _messages(h, [("next", 10)] * count)
        (run,) = column_runs(msgs)
        h.m.receive_msgs(run, h.now)
        h.pump()
        got = [e for e in h.events if e.__class__ is OrderedColumnsDelivered]
        assert (len(got) == 1) is whole
        assert h.m.delivered == min(batch, count) and h.st.consumer_seq == min(batch, count)
        assert h.m.finished is (batch <= count)
        if not h.m.finished:  # (the fetch counts the run's bytes too)
            assert _inner_counts(h.m._inner)[:2] == (count, sum(m.size for m in msgs))
