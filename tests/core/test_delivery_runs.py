"""Delivery runs (:meth:`jscore.protocol.AckLane.arm_runs`): the messages a fetch's or a
consume's inbox gets in a row come as one :class:`MsgsReceived`, fed to the machine's
``receive_msgs``, which gives one :class:`MessagesDelivered`. They must change nothing but the
cost: the same messages in the same order, the same counters, pulls, ends and deadlines as the
messages fed one by one, and only for the inboxes of machines that read runs.

(The parser's side, runs against the plain parser whole and split, is the wire fuzz target's
lane invariant: see fuzz/fuzz_wire.py and tests/core/test_fuzz_smoke.py.)"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from jscore import pull as P
from jscore.ordered import OrderedConsumerState, OrderedMachine
from jscore.protocol import MsgReceived, MsgsReceived
from tests.core.test_pull_helpers import heartbeat, status, user
from tests.core.test_session_settle import connected, frames

# ---------------------------------------------------------------------- the machines alone


def flat(events: list[Any]) -> list[str]:
    """The events with every MessagesDelivered as one MessageDelivered per message (as reprs:
    an error compares by its type and text)."""
    out: list[Any] = []
    for e in events:
        if e.__class__ is P.MessagesDelivered:
            assert e.msgs, "an empty run"
            out.extend(P.MessageDelivered(msg=m) for m in e.msgs)
        else:
            out.append(e)
    return [repr(e) for e in out]


_COUNTERS = (
    "state", "finished", "delivered", "delivered_bytes", "ignored", "pending_messages", "pending_bytes",
    "buffered_messages", "buffered_bytes", "pin_id",
)


def snapshot(m: Any) -> tuple[Any, ...]:
    return (*(getattr(m, name, None) for name in _COUNTERS), m.next_deadline())


_sizes = st.integers(min_value=1, max_value=400)
_pins = st.one_of(st.none(), st.sampled_from(["p1", "p2"]))
_run = st.lists(st.tuples(_sizes, _pins), min_size=1, max_size=8)
_step = st.one_of(
    st.tuples(st.just("run"), _run),
    st.tuples(st.just("status"), st.sampled_from([heartbeat(), status(404, "No Messages"),
                                                   status(408, "Request Timeout", pending=3, pending_bytes=300),
                                                   status(409, "Leadership Change"), status(503)])),
    st.tuples(st.just("take"), st.integers(min_value=1, max_value=5)),
    st.tuples(st.just("time"), st.floats(min_value=0.0, max_value=20.0)),
    st.tuples(st.just("stop"), st.none()),
)


def _machines(kind: str, limit: int, by_bytes: bool, group: bool) -> list[Any]:
    g = "G" if group else None
    if kind == "fetch":
        opts = (P.resolve_fetch_options(max_bytes=limit * 150, expires=5.0, group=g) if by_bytes
                else P.resolve_fetch_options(max_messages=limit, expires=5.0, group=g))
        return [P.FetchMachine(opts, 0.0) for _ in range(2)]
    copts = (P.resolve_consume_options(max_bytes=limit * 150, expires=5.0, group=g) if by_bytes
             else P.resolve_consume_options(max_messages=limit, expires=5.0, group=g))
    return [P.ConsumeMachine(copts, 0.0) for _ in range(2)]


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(kind="fetch", limit=3, by_bytes=False, group=False,
         steps=[("status", status(503)), ("run", [(10, None)]), ("time", 1.0), ("run", [(10, None)])])
@example(kind="fetch", limit=2, by_bytes=False, group=False, steps=[("run", [(10, None), (10, None)])])
@example(kind="fetch", limit=2, by_bytes=False, group=False, steps=[("run", [(10, None)] * 4)])
@example(kind="fetch", limit=2, by_bytes=True, group=False, steps=[("run", [(100, None), (150, None), (9, None)])])
@example(kind="consume", limit=4, by_bytes=True, group=False, steps=[("run", [(100, None), (50, None)])])
@example(kind="consume", limit=4, by_bytes=False, group=True, steps=[("run", [(9, None), (9, "p1"), (9, "p1")])])
@example(kind="fetch", limit=4, by_bytes=False, group=True, steps=[("run", [(9, "p2"), (9, None), (9, "p1")])])
@given(
    kind=st.sampled_from(["fetch", "consume"]),
    limit=st.integers(min_value=1, max_value=12),
    by_bytes=st.booleans(),
    group=st.booleans(),
    steps=st.lists(_step, max_size=14),
)
def test_a_run_is_the_same_as_its_messages_one_by_one(
    kind: str, limit: int, by_bytes: bool, group: bool, steps: list[tuple[str, Any]]
) -> None:
    runs, single = _machines(kind, limit, by_bytes, group)
    now = 0.0
    assert flat(runs.drain_events()) == flat(single.drain_events())
    for what, arg in steps:
        if what == "run":
            msgs = [user(size, pin=pin) for size, pin in arg]
            runs.receive_msgs(MsgsReceived(1, msgs, sum(m.size for m in msgs)), now)
            for m in msgs:
                single.receive_msg(m, now)
        elif what == "status":
            runs.receive_msg(arg, now)
            single.receive_msg(arg, now)
        elif what == "take":
            if kind == "consume":
                take = min(arg, runs.buffered_messages)
                cmd = P.MessagesTaken(count=take, size=min(runs.buffered_bytes, 100 * take))
                runs.handle(cmd, now)
                single.handle(cmd, now)
        elif what == "time":
            now += arg
            runs.handle_timeout(now)
            single.handle_timeout(now)
        else:
            runs.handle(P.Stop(), now)
            single.handle(P.Stop(), now)
        assert flat(runs.drain_events()) == flat(single.drain_events())
        assert snapshot(runs) == snapshot(single)


def test_a_fetch_takes_what_its_batch_has_room_for_and_ignores_the_rest() -> None:
    m = P.FetchMachine(P.resolve_fetch_options(max_messages=3, expires=5.0), 0.0)
    m.drain_events()
    msgs = [user(10) for _ in range(5)]
    m.receive_msgs(MsgsReceived(1, msgs, 50), 1.0)
    evs = m.drain_events()
    assert [type(e) for e in evs] == [P.MessagesDelivered, P.FetchFinished]
    assert evs[0].msgs == msgs[:3] and evs[1].reason == "batch complete"
    assert (m.delivered, m.ignored, m.finished) == (3, 2, True)


def test_a_pin_change_inside_a_run_comes_between_its_messages() -> None:
    m = P.ConsumeMachine(P.resolve_consume_options(max_messages=10, expires=5.0, group="G"), 0.0)
    m.drain_events()
    a, b, c = user(10), user(10, pin="p1"), user(10)
    m.receive_msgs(MsgsReceived(1, [a, b, c], 30), 1.0)
    evs = m.drain_events()
    assert [type(e) for e in evs] == [P.MessagesDelivered, P.PinIdChanged, P.MessagesDelivered]
    assert evs[0].msgs == [a] and evs[1].pin_id == "p1" and evs[2].msgs == [b, c]


# ---------------------------------------------------------------------- on the session


def consume_on_session(max_messages: int = 100) -> tuple[Any, Any, int, list[Any]]:
    s = connected()
    m = P.ConsumeMachine(P.resolve_consume_options(max_messages=max_messages, expires=5.0), 0.0)
    got: list[Any] = []
    slot = s.attach(m, got.append, 0.0, target="$JS.API.CONSUMER.MSG.NEXT.S.c")
    s.data_to_send()
    return s, m, slot, got


def test_a_consume_gets_the_messages_of_a_read_in_runs_around_its_statuses() -> None:
    s, m, slot, got = consume_on_session()
    sid = s._slots[slot].sid
    inbox = s.inbox_of(slot)
    hb = b"NATS/1.0 100 Idle Heartbeat\r\n\r\n"
    data = (
        frames(inbox, sid, [b"a", b"b", b"c"])
        + b"HMSG %s %d %d %d\r\n%s\r\n" % (inbox.encode(), sid, len(hb), len(hb), hb)
        + frames(inbox, sid, [b"d", b"e"])
    )
    before = (s.conn.stats.msgs_in, s.conn.stats.bytes_in)
    s.receive_data(data, 1.0)
    runs = [e for e in got if e.__class__ is P.MessagesDelivered]
    assert [[msg.data for msg in e.msgs] for e in runs] == [[b"a", b"b", b"c"], [b"d", b"e"]]
    assert not any(e.__class__ is P.MessageDelivered for e in got)
    assert m.delivered == 5 and m.buffered_messages == 5
    size = sum(msg.size for e in runs for msg in e.msgs)
    assert m.buffered_bytes == size
    # The connection counts every message, the heartbeat too, as it does without runs.
    assert s.conn.stats.msgs_in - before[0] == 6
    assert s.conn.stats.bytes_in - before[1] == size + len(inbox) + len(hb)
    assert s.conn._subs[sid].delivered == 6


def test_the_connection_counts_a_run_as_it_counts_its_messages() -> None:
    counts = []
    for armed in (True, False):
        s, m, slot, _ = consume_on_session()
        sid = s._slots[slot].sid
        if not armed:
            s.conn._lane.runs.discard(sid)
        s.receive_data(frames(s.inbox_of(slot), sid, [b"x" * n for n in range(1, 9)]), 1.0)
        counts.append((s.conn.stats.msgs_in, s.conn.stats.bytes_in, s.conn._subs[sid].delivered, snapshot(m)))
    assert counts[0] == counts[1]


def test_an_ended_consume_leaves_no_armed_inbox_and_no_route() -> None:
    s, m, slot, _ = consume_on_session()
    sid = s._slots[slot].sid
    assert s.conn._lane.runs == {sid} and sid in s._run_routes
    s.command(slot, P.Stop(), 1.0)
    assert not s.running(slot)
    assert not s.conn._lane.runs and sid not in s._run_routes and sid not in s._routes


def test_a_fetch_inbox_is_armed_and_so_is_an_ordered_consumers() -> None:
    s = connected()
    f = P.FetchMachine(P.resolve_fetch_options(max_messages=5, expires=5.0), 0.0)
    slot = s.attach(f, lambda e: None, 0.0, target="$JS.API.CONSUMER.MSG.NEXT.S.c")
    assert s.conn._lane.runs == {s._slots[slot].sid}
    # The ordered consumer's wildcard inbox reads runs too (tests/core/test_ordered_runs.py).
    o = OrderedMachine(OrderedConsumerState("S", name_prefix="P"), P.resolve_fetch_options(max_messages=5), 0.0)
    other = s.attach(o, lambda e: None, 0.0, wildcard=True)
    assert s.conn._lane.runs == {s._slots[slot].sid, s._slots[other].sid}
    # Only the ordered consumer's deliveries take the delivery lane (tests/core/test_delivery_lane.py).
    assert s.conn._lane.deliveries == {s._slots[other].sid}
    s.command(other, P.Stop(), 0.0)
    assert not s.conn._lane.deliveries and not s.conn._lane.delivery_sids


def test_a_subscription_with_a_message_limit_is_not_armed() -> None:
    s = connected()
    sid = s.conn.subscribe("_INBOX.limited", max_msgs=3)
    s.conn.arm_runs(sid)
    assert sid not in s.conn._lane.runs
    plain = s.conn.subscribe("_INBOX.plain")
    s.conn.arm_runs(plain)
    assert plain in s.conn._lane.runs
    s.conn.unsubscribe(plain, max_msgs=5)  # (a later limit disarms it: runs do not count towards one)
    assert plain not in s.conn._lane.runs


def test_an_inbox_refused_by_the_server_is_disarmed() -> None:
    s, m, slot, _ = consume_on_session()
    sid = s._slots[slot].sid
    inbox = s.inbox_of(slot)
    s.receive_data(b"-ERR 'Permissions Violation for Subscription to \"%s\"'\r\n" % inbox.encode(), 1.0)
    assert not s.conn.has_subscription(sid)
    assert sid not in s.conn._lane.runs and sid not in s._run_routes


def test_the_request_inbox_is_never_armed() -> None:
    s = connected()
    s.conn.request("svc.a", b"q")
    resp = s.conn._resp_sid
    assert resp is not None
    s.conn.arm_runs(resp)
    s.conn.arm_direct(resp)
    assert not s.conn._lane.runs and not s.conn._lane.direct_sids


def test_a_late_run_after_the_end_is_ignored() -> None:
    s, m, slot, got = consume_on_session()
    sid = s._slots[slot].sid
    inbox = s.inbox_of(slot)
    m.handle(P.Stop(), 1.0)  # (ended behind the session's back: what still comes is ignored)
    m.receive_msgs(MsgsReceived(sid, [MsgReceived(inbox, sid, None, b"x", None, None, None, 10)], 10), 1.0)
    assert m.ignored == 1 and m.delivered == 0
