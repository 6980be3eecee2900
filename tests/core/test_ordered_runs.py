"""Runs on an ordered consumer (:meth:`jscore.ordered.OrderedMachine.receive_msgs`): the
messages its wildcard inbox gets in a row, fed as one run, must change nothing but the cost.
The same deliveries in the same order, the same resets, stale counts, cursor, pulls, creates,
deletes and ends as the messages fed one by one, whatever the run holds: deliveries in order,
gaps, duplicates, an older consumer's, v2 or malformed ack subjects, create replies, a fetch
that completes in the middle of a run."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from jscore.jsmsg import ack_cursor, parse_ack_subject
from jscore.ordered import OrderedMessageDelivered, OrderedMessagesDelivered, OrderedState
from jscore.protocol import MsgReceived, MsgsReceived
from jscore.pull import MessagesTaken
from jscore.machine import Stop
from tests.core.test_ordered_machine import INBOX, H, consume_opts, fetch_opts, info

_STAMP = 1700000000000000000


def flat(events: list[Any]) -> list[str]:
    """Every OrderedMessagesDelivered as one OrderedMessageDelivered per message, with the
    metadata its ack subject gives (as reprs: errors compare by type and text)."""
    out: list[Any] = []
    for e in events:
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
    )


_kinds = st.sampled_from(["next", "next", "next", "skip", "gap", "dup", "old", "v2", "bad", "big", "create", "plain"])
_run = st.lists(st.tuples(_kinds, st.integers(min_value=1, max_value=300)), min_size=1, max_size=10)
_step = st.one_of(
    st.tuples(st.just("run"), _run),
    st.tuples(st.just("created"), st.none()),
    st.tuples(st.just("status"), st.sampled_from([(408, "Request Timeout"), (404, "No Messages"), (100, "Idle Heartbeat")])),
    st.tuples(st.just("take"), st.integers(min_value=1, max_value=6)),
    st.tuples(st.just("time"), st.floats(min_value=0.0, max_value=3.0)),
    st.tuples(st.just("stop"), st.none()),
)


def _messages(h: H, specs: list[tuple[str, int]]) -> list[MsgReceived]:
    """The run's messages, made from the cursor before it (the same for both machines)."""
    s = h.st
    name, sseq, cseq = s.name, s.stream_seq, s.consumer_seq
    old = f"{name.rsplit('_', 1)[0]}_{max(1, s.serial - 1)}" if s.serial > 1 else "Q_9"
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
        if kind == "create":  # a create reply (no ack subject) in the middle of a run
            out.append(MsgReceived(INBOX + "c1", 1, None, info(name), None, size=size))
            continue
        if kind == "plain":  # a message with neither ack subject nor known token
            out.append(MsgReceived(INBOX + "zz", 1, "_INBOX.other", b"?", None, size=size))
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


def _apply(h: H, step: tuple[str, Any], msgs: list[MsgReceived] | None, as_run: bool) -> None:
    kind, arg = step
    if kind == "run":
        assert msgs is not None
        if as_run:
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


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(consume=False, batch=3, steps=[("created", None), ("run", [("next", 10)] * 5)])
@example(consume=False, batch=5, steps=[("created", None), ("run", [("next", 10), ("gap", 10), ("next", 10)])])
@example(consume=True, batch=5, steps=[("created", None), ("run", [("next", 10), ("dup", 10), ("next", 10)]),
                                       ("created", None), ("run", [("next", 10), ("old", 10)])])
@example(consume=True, batch=5, steps=[("created", None), ("run", [("create", 10), ("next", 10), ("v2", 10)])])
@example(consume=False, batch=9, steps=[("created", None), ("run", [("next", 10), ("bad", 10), ("next", 10)])])
@example(consume=True, batch=9, steps=[("created", None), ("run", [("next", 10), ("big", 10), ("plain", 10)])])
@example(consume=False, batch=2, steps=[("run", [("next", 10)]), ("created", None), ("run", [("skip", 10)] * 3)])
@given(consume=st.booleans(), batch=st.integers(min_value=1, max_value=8), steps=st.lists(_step, max_size=12))
def test_a_run_is_the_same_as_its_messages_one_by_one(consume: bool, batch: int, steps: list[Any]) -> None:
    opts = consume_opts(max_messages=batch) if consume else fetch_opts(batch, expires=2.0)
    one, run = H(opts), H(opts)
    for step in steps:
        msgs = _messages(one, step[1]) if step[0] == "run" else None
        _apply(one, step, msgs, as_run=False)
        _apply(run, step, msgs, as_run=True)
        assert flat(run.events) == flat(one.events)
        assert snapshot(run) == snapshot(one)


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


def test_create_replies_between_deliveries_go_one_by_one() -> None:
    h = H(fetch_opts(5, expires=2.0))
    # a run that starts with the create reply: nothing to take as a run yet
    c = h.creates()[-1]
    name = json.loads(c.body)["config"]["name"]
    created = MsgReceived(INBOX + (c.reply_token or ""), 1, None, info(name), None, size=10)
    h.m.receive_msgs(MsgsReceived(1, [created], 10), h.now)
    h.pump()
    assert h.st.state is OrderedState.ACTIVE and len(h.pulls()) == 1
