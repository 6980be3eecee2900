"""jscore.ordered: the ordered consumer's cursor, configurations, resets and backoff.

Virtual time only (``now`` is a float the test advances). Scenarios 46-49 of TESTPLAN.md at the
core level: recreate at last stream seq + 1 after a delete, gap detection from a dropped frame,
stale serials dropped, stream gone is terminal with bounded attempts.
"""

from __future__ import annotations

import pickle
import random
from datetime import datetime, timezone

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from jscore import errors, models
from jscore.errors import (
    ConnectionClosedError,
    InvalidOptionError,
    JetStreamNotEnabledError,
    JetStreamUnavailableError,
    LocalProtocolError,
    OrderedConsumerResetError,
    StreamNotFoundError,
)
from jscore.jsmsg import MsgMetadata, SequencePair, parse_ack_subject
from jscore.models import AckPolicy, DeliverPolicy
from jscore.ordered import (
    BACKOFF_MAX,
    FLAP_WINDOW,
    Delivery,
    OrderedConsumerOptions,
    OrderedConsumerState,
    OrderedState,
    ResetReason,
    backoff_delay,
    is_transient_create_error,
    new_name_prefix,
    serial_from_name,
)

T0 = datetime(2024, 5, 1, tzinfo=timezone.utc)


def meta(consumer: str, sseq: int, cseq: int) -> MsgMetadata:
    return parse_ack_subject(f"$JS.ACK.S.{consumer}.1.{sseq}.{cseq}.1700000000000000000.0")


def active(options: OrderedConsumerOptions | None = None, now: float = 0.0) -> OrderedConsumerState:
    st_ = OrderedConsumerState("S", options, name_prefix="P")
    cfg = st_.start_create(now)
    assert st_.created(now, cfg.name or "")
    return st_


def deliver(st_: OrderedConsumerState, *pairs: tuple[int, int]) -> list[Delivery]:
    return [st_.on_delivery(meta(st_.name, s, c)) for s, c in pairs]


def recreate(st_: OrderedConsumerState, now: float) -> None:
    assert st_.recreate_due(now)
    cfg = st_.start_create(now)
    assert st_.created(now, cfg.name or "")


# ----------------------------------------------------------------------------- configurations


def test_first_config_is_ephemeral_ack_none_memory() -> None:
    st_ = OrderedConsumerState("S", name_prefix="abc")
    assert st_.state is OrderedState.NEW and st_.needs_new_consumer and st_.recreate_due(0.0)
    cfg = st_.consumer_config()
    assert cfg.name == "abc_1" and cfg.durable_name is None
    assert cfg.ack_policy is AckPolicy.NONE
    assert cfg.num_replicas == 1 and cfg.mem_storage is True
    assert cfg.inactive_threshold == 300.0
    assert cfg.deliver_policy is DeliverPolicy.ALL and cfg.opt_start_seq is None and cfg.opt_start_time is None
    assert cfg.headers_only is None and cfg.filter_subject is None and cfg.filter_subjects is None
    wire = models.encode(cfg)
    assert b'"ack_policy":"none"' in wire and b'"inactive_threshold":300000000000' in wire
    assert b'"mem_storage":true' in wire and b'"num_replicas":1' in wire


def test_user_options_in_first_config() -> None:
    o = OrderedConsumerOptions(filter_subjects=("a.>", "b.*"), opt_start_time=T0, headers_only=True)
    cfg = OrderedConsumerState("S", o, name_prefix="p").consumer_config()
    assert cfg.deliver_policy is DeliverPolicy.BY_START_TIME and cfg.opt_start_time == T0
    assert cfg.filter_subjects == ["a.>", "b.*"] and cfg.filter_subject is None
    assert cfg.headers_only is True
    o = OrderedConsumerOptions(filter_subjects=("only.one",), opt_start_seq=7)
    cfg = OrderedConsumerState("S", o, name_prefix="p").consumer_config()
    assert cfg.filter_subject == "only.one" and cfg.filter_subjects is None
    assert cfg.deliver_policy is DeliverPolicy.BY_START_SEQUENCE and cfg.opt_start_seq == 7


def test_last_per_subject_gets_a_filter() -> None:
    o = OrderedConsumerOptions(deliver_policy=DeliverPolicy.LAST_PER_SUBJECT)
    assert o.filter_subjects == (">",)
    assert OrderedConsumerState("S", o, name_prefix="p").consumer_config().filter_subject == ">"


def test_reset_config_starts_after_last_stream_seq() -> None:
    # Scenario 46: recreated at last stream seq + 1, by_start_sequence, opt_start_time cleared.
    st_ = active(OrderedConsumerOptions(opt_start_time=T0, filter_subjects=("x",)))
    assert deliver(st_, (10, 1), (11, 2), (15, 3)) == [Delivery.ACCEPT] * 3
    assert st_.reset(1.0, ResetReason.CONSUMER_DELETED) == "P_1"
    cfg = st_.consumer_config()
    assert cfg.name == "P_2"
    assert cfg.deliver_policy is DeliverPolicy.BY_START_SEQUENCE
    assert cfg.opt_start_seq == 16
    assert cfg.opt_start_time is None
    assert cfg.filter_subject == "x" and cfg.ack_policy is AckPolicy.NONE
    assert b"opt_start_time" not in models.encode(cfg)


@pytest.mark.parametrize(
    "options",
    [
        OrderedConsumerOptions(),
        OrderedConsumerOptions(deliver_policy=DeliverPolicy.NEW),
        OrderedConsumerOptions(deliver_policy=DeliverPolicy.LAST),
        OrderedConsumerOptions(opt_start_seq=100),
        OrderedConsumerOptions(opt_start_time=T0),
    ],
)
def test_user_policy_holds_until_the_first_message(options: OrderedConsumerOptions) -> None:
    # nats.go switches to by_start_sequence after the first *serial*; the rule here is the first
    # *message*: a reset before any delivery recreates with the user's policy again.
    st_ = active(options)
    st_.reset(1.0, ResetReason.HEARTBEAT_MISSED)
    cfg = st_.consumer_config()
    assert cfg.name == "P_2"
    assert cfg.deliver_policy is options.deliver_policy
    assert cfg.opt_start_seq == options.opt_start_seq and cfg.opt_start_time == options.opt_start_time


def test_create_response_pins_the_cursor() -> None:
    # deliver_policy new: the create response says the stream was at 41; a reset before the first
    # message must resume at 42, not at "new" again (that would skip what arrived meanwhile).
    st_ = OrderedConsumerState("S", OrderedConsumerOptions(deliver_policy="new"), name_prefix="P")  # type: ignore[arg-type]
    cfg = st_.start_create(0.0)
    assert cfg.deliver_policy is DeliverPolicy.NEW
    assert st_.created(0.0, "P_1", delivered_stream_seq=41)
    st_.reset(100.0, ResetReason.CONSUMER_DELETED)
    cfg = st_.start_create(100.0)
    assert (cfg.deliver_policy, cfg.opt_start_seq) == (DeliverPolicy.BY_START_SEQUENCE, 42)
    # The first delivery of the new consumer continues the pinned cursor.
    assert st_.created(100.0, "P_2", delivered_stream_seq=41)
    assert deliver(st_, (42, 1)) == [Delivery.ACCEPT]


def test_last_per_subject_is_not_pinned() -> None:
    o = OrderedConsumerOptions(deliver_policy=DeliverPolicy.LAST_PER_SUBJECT, filter_subjects=("k.>",))
    st_ = OrderedConsumerState("S", o, name_prefix="P")
    st_.start_create(0.0)
    st_.created(0.0, "P_1", delivered_stream_seq=9)
    st_.reset(50.0, ResetReason.RECONNECT)
    assert st_.consumer_config().deliver_policy is DeliverPolicy.LAST_PER_SUBJECT


# ----------------------------------------------------------------------------- deliveries


def test_in_order_deliveries_advance_the_cursor() -> None:
    st_ = active()
    assert deliver(st_, (1, 1), (2, 2), (5, 3)) == [Delivery.ACCEPT] * 3
    assert (st_.stream_seq, st_.consumer_seq) == (5, 3)
    assert not st_.needs_new_consumer  # a fetch reuses the consumer while contiguous


def test_consumer_seq_gap_is_detected() -> None:
    # Scenario 47: one MSG frame dropped -> consumer sequence jumps.
    st_ = active()
    assert deliver(st_, (1, 1), (2, 2)) == [Delivery.ACCEPT] * 2
    assert deliver(st_, (4, 4)) == [Delivery.GAP]
    assert (st_.stream_seq, st_.consumer_seq) == (2, 2)  # a gap changes nothing by itself
    assert st_.reset(0.5, ResetReason.GAP) == "P_1"
    assert st_.last_reason is ResetReason.GAP and st_.resets == 1
    recreate(st_, 0.5)
    assert st_.consumer_config().opt_start_seq == 3
    assert deliver(st_, (3, 1), (4, 2)) == [Delivery.ACCEPT] * 2


@pytest.mark.parametrize(("sseq", "cseq"), [(3, 2), (4, 4), (3, 1), (2, 3), (1, 3), (3, 0)])
def test_duplicates_and_going_back_are_gaps(sseq: int, cseq: int) -> None:
    st_ = active()
    deliver(st_, (1, 1), (2, 2))
    assert deliver(st_, (sseq, cseq)) == [Delivery.GAP]


def test_old_serial_is_dropped() -> None:
    st_ = active()
    deliver(st_, (1, 1))
    st_.reset(1.0, ResetReason.GAP)
    # In flight from P_1 while P_2 is created: stale, not a gap.
    assert st_.on_delivery(meta("P_1", 2, 2)) is Delivery.STALE
    recreate(st_, 1.0)
    assert not st_.is_current("P_1") and st_.is_current("P_2")
    assert st_.on_delivery(meta("P_1", 3, 3)) is Delivery.STALE
    assert st_.on_delivery(meta("P_2", 2, 1)) is Delivery.ACCEPT
    assert st_.on_delivery(meta("other", 3, 2)) is Delivery.STALE


def test_deliveries_without_active_consumer_are_stale() -> None:
    st_ = OrderedConsumerState("S", name_prefix="P")
    assert st_.on_delivery(meta("P_1", 1, 1)) is Delivery.STALE
    st_.start_create(0.0)
    assert st_.on_delivery(meta("P_1", 1, 1)) is Delivery.STALE
    with pytest.raises(LocalProtocolError):
        st_.on_message(1, 1)


def test_serial_names() -> None:
    assert serial_from_name("P_1") == 1
    assert serial_from_name("a_b_12") == 12  # nats.go reads only the last digit
    assert serial_from_name("nounderscore") is None
    assert serial_from_name("P_") is None and serial_from_name("P_x") is None
    st_ = active()
    for i in range(2, 13):
        st_.reset(float(i * 100), ResetReason.RECONNECT)
        recreate(st_, float(i * 100))
        assert serial_from_name(st_.name) == st_.serial == i


def test_name_prefix() -> None:
    prefix = new_name_prefix(random.Random(7))
    assert len(prefix) == 22 and prefix.isalnum()
    assert new_name_prefix(random.Random(7)) == prefix
    for bad in ("", "a.b", "a b", "a*", "a>", "é"):
        with pytest.raises(InvalidOptionError):
            OrderedConsumerState("S", name_prefix=bad)


# ----------------------------------------------------------------------------- backoff


def test_backoff_sequence() -> None:
    assert [backoff_delay(n) for n in range(9)] == [0.0, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0, 10.0]
    assert backoff_delay(10_000) == BACKOFF_MAX


def test_failed_creates_back_off_1_2_4_8_10() -> None:
    st_ = OrderedConsumerState("S", OrderedConsumerOptions(max_reset_attempts=None), name_prefix="P")
    now = 0.0
    waits = []
    for _ in range(8):
        assert st_.recreate_due(now)
        cfg = st_.start_create(now)
        assert st_.next_deadline() is None  # a request in flight: no timer here
        assert st_.create_failed(now, errors.TimeoutError("no reply"), cfg.name or "")
        deadline = st_.next_deadline()
        assert deadline is not None
        assert not st_.recreate_due(deadline - 0.001)
        waits.append(deadline - now)
        now = deadline
    assert waits == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0, 10.0]
    # Success resets the schedule once the consumer delivers.
    recreate(st_, now)
    deliver(st_, (1, 1))
    assert st_.strikes == 0
    st_.reset(now + 1, ResetReason.GAP)
    assert st_.next_deadline() == now + 1  # immediate


def test_first_recreate_after_a_reset_is_immediate() -> None:
    st_ = active()
    deliver(st_, (1, 1))
    st_.reset(7.0, ResetReason.HEARTBEAT_MISSED)
    assert st_.state is OrderedState.BACKOFF and st_.next_deadline() == 7.0 and st_.recreate_due(7.0)


def test_flapping_consumer_backs_off() -> None:
    # Created, then reset before delivering anything, again and again: 1, 2, 4 ... not a storm.
    st_ = OrderedConsumerState("S", OrderedConsumerOptions(max_reset_attempts=None), name_prefix="P")
    now = 0.0
    recreate(st_, now)
    waits = []
    for _ in range(6):
        st_.reset(now + 0.1, ResetReason.CONSUMER_DELETED)
        deadline = st_.next_deadline()
        assert deadline is not None
        waits.append(round(deadline - (now + 0.1), 6))
        now = deadline
        recreate(st_, now)
    assert waits == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_a_long_lived_idle_consumer_is_not_a_flap() -> None:
    st_ = active()
    st_.reset(FLAP_WINDOW + 1, ResetReason.RECONNECT)
    assert st_.strikes == 0 and st_.next_deadline() == FLAP_WINDOW + 1


def test_reset_while_creating_abandons_the_request() -> None:
    st_ = active()
    deliver(st_, (1, 1))
    st_.reset(20.0, ResetReason.GAP)
    cfg = st_.start_create(20.0)
    st_.reset(20.5, ResetReason.RECONNECT)  # the create's reply may be lost
    assert st_.state is OrderedState.BACKOFF and st_.next_deadline() == 20.5
    assert st_.name == cfg.name  # same config, same name: idempotent on the server
    assert not st_.created(20.6, cfg.name or "")  # the late reply of the abandoned request
    assert not st_.create_failed(20.6, errors.TimeoutError(), cfg.name or "")
    recreate(st_, 20.6)
    assert st_.consumer_config().opt_start_seq == 2


def test_reconnect_cuts_a_backoff_short() -> None:
    st_ = OrderedConsumerState("S", name_prefix="P")
    st_.start_create(0.0)
    st_.create_failed(0.0, errors.TimeoutError(), "P_1")
    st_.start_create(1.0)
    st_.create_failed(1.0, errors.TimeoutError(), "P_1")
    assert st_.next_deadline() == 3.0
    st_.reset(1.5, ResetReason.HEARTBEAT_MISSED)
    assert st_.next_deadline() == 3.0
    st_.reset(1.5, ResetReason.RECONNECT)
    assert st_.next_deadline() == 1.5 and st_.strikes == 2


def test_stale_replies_are_ignored() -> None:
    st_ = OrderedConsumerState("S", name_prefix="P")
    st_.start_create(0.0)
    assert not st_.created(0.0, "P_0")
    assert not st_.create_failed(0.0, errors.TimeoutError(), "Q_1")
    assert st_.created(0.0, "P_1")
    assert not st_.created(0.0, "P_1")  # a duplicate reply


def test_start_create_only_when_due() -> None:
    st_ = active()
    with pytest.raises(LocalProtocolError):
        st_.start_create(0.0)
    st_.reset(0.1, ResetReason.GAP)  # flap: backoff 1 s
    with pytest.raises(LocalProtocolError):
        st_.start_create(0.5)
    st_.start_create(1.1)


# ----------------------------------------------------------------------------- terminal


def test_stream_gone_is_terminal_at_once() -> None:
    # Scenario 49: the stream was deleted; the consumer-deleted reset tries once, then stops.
    st_ = active()
    deliver(st_, (1, 1), (2, 2))
    st_.reset(50.0, ResetReason.CONSUMER_DELETED)
    cfg = st_.start_create(50.0)
    gone = StreamNotFoundError(404, 10059, "stream not found")
    assert st_.create_failed(50.0, gone, cfg.name or "")
    assert st_.state is OrderedState.FAILED and st_.terminated
    assert st_.error is gone
    assert not st_.recreate_due(1e9) and st_.next_deadline() is None
    assert st_.reset(60.0, ResetReason.HEARTBEAT_MISSED) is None  # no reset storm
    assert st_.state is OrderedState.FAILED


def test_attempts_are_bounded() -> None:
    st_ = OrderedConsumerState("S", OrderedConsumerOptions(max_reset_attempts=4), name_prefix="P")
    now = 0.0
    cause = JetStreamUnavailableError(503, 10008, "JetStream system temporarily unavailable")
    for i in range(4):
        cfg = st_.start_create(now)
        st_.create_failed(now, cause, cfg.name or "")
        if i < 3:
            deadline = st_.next_deadline()
            assert deadline is not None
            now = deadline
    assert st_.state is OrderedState.FAILED
    assert isinstance(st_.error, OrderedConsumerResetError)
    assert st_.error.__cause__ is cause
    assert now == 1 + 2 + 4


def test_flaps_are_bounded_too() -> None:
    st_ = OrderedConsumerState("S", OrderedConsumerOptions(max_reset_attempts=3), name_prefix="P")
    now = 0.0
    while not st_.terminated:
        recreate(st_, now)
        st_.reset(now, ResetReason.CONSUMER_DELETED)
        now = st_.next_deadline() or now
    assert isinstance(st_.error, OrderedConsumerResetError) and st_.strikes == 3


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (errors.TimeoutError("t"), True),
        (TimeoutError("builtin"), True),
        (errors.NoRespondersError("x"), True),
        (errors.ConnectionLostError("x"), True),
        (JetStreamUnavailableError(503, 10008, "x"), True),
        (errors.MaximumConsumersLimitError(400, 10026, "x"), True),
        (errors.MemoryResourcesExceededError(500, 10028, "x"), True),
        (JetStreamNotEnabledError(503, 0, "no responders"), True),
        (JetStreamNotEnabledError(503, 10076, "not enabled"), False),
        (errors.JetStreamNotEnabledForAccountError(503, 10039, "x"), False),
        (StreamNotFoundError(404, 10059, "stream not found"), False),
        (errors.BadRequestError(400, 10003, "x"), False),
        (errors.JetStreamAPIError(500, 99999, "new"), False),
        (ConnectionClosedError("closed"), False),
        (errors.AuthorizationError("x"), False),
    ],
)
def test_transient_create_errors(error: BaseException, transient: bool) -> None:
    assert is_transient_create_error(error) is transient
    st_ = OrderedConsumerState("S", name_prefix="P")
    st_.start_create(0.0)
    st_.create_failed(0.0, error, "P_1")
    assert (st_.state is OrderedState.BACKOFF) is transient
    if not transient:
        assert st_.error is error


def test_fail_and_close() -> None:
    st_ = active()
    assert st_.close() == "P_1"
    assert st_.state is OrderedState.CLOSED and st_.terminated
    assert st_.close() is None
    st_.fail(RuntimeError("late"))
    assert st_.state is OrderedState.CLOSED and st_.error is None
    st2 = active()
    err = errors.ConsumerDeletedError("deleted")
    st2.fail(err)
    st2.fail(RuntimeError("second"))
    assert st2.error is err and st2.close() is None


# ----------------------------------------------------------------------------- fetch reuse


def test_fetch_reuses_the_consumer_while_contiguous() -> None:
    st_ = active()
    deliver(st_, (1, 1), (2, 2))
    assert st_.fetch_ended(1.0, clean=True) is None
    assert not st_.needs_new_consumer and st_.name == "P_1"
    deliver(st_, (3, 3))
    # A fetch the client gave up on: messages may still go to its inbox -> start afresh.
    assert st_.fetch_ended(2.0, clean=False) == "P_1"
    assert st_.needs_new_consumer and st_.last_reason is ResetReason.FETCH_INTERRUPTED
    recreate(st_, 2.0)
    assert st_.consumer_config().opt_start_seq == 4
    assert OrderedConsumerState("S", name_prefix="P").fetch_ended(0.0, clean=False) is None


# ----------------------------------------------------------------------------- options


@pytest.mark.parametrize(
    "kwargs",
    [
        {"opt_start_seq": 0},
        {"opt_start_seq": True},
        {"opt_start_seq": 5, "opt_start_time": T0},
        {"deliver_policy": DeliverPolicy.BY_START_SEQUENCE},
        {"deliver_policy": DeliverPolicy.BY_START_TIME},
        {"deliver_policy": DeliverPolicy.ALL, "opt_start_seq": 3},
        {"deliver_policy": DeliverPolicy.NEW, "opt_start_time": T0},
        {"deliver_policy": "bogus"},
        {"deliver_policy": 3},
        {"opt_start_time": datetime(2024, 1, 1)},  # naive
        {"filter_subjects": ("a", "a")},
        {"filter_subjects": ("",)},
        {"filter_subjects": ("a b",)},
        {"filter_subjects": 5},
        {"inactive_threshold": 0},
        {"inactive_threshold": -1.0},
        {"max_reset_attempts": 0},
        {"max_reset_attempts": 1.5},
        {"headers_only": "yes"},
    ],
)
def test_invalid_options(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidOptionError):
        OrderedConsumerOptions(**kwargs)  # type: ignore[arg-type]


def test_options_normalise_and_pickle() -> None:
    o = OrderedConsumerOptions(filter_subjects=["a", "b"], deliver_policy="last", inactive_threshold=60)  # type: ignore[arg-type]
    assert o.filter_subjects == ("a", "b") and o.deliver_policy is DeliverPolicy.LAST
    assert o.inactive_threshold == 60.0 and type(o.inactive_threshold) is float
    assert OrderedConsumerOptions(filter_subjects="one").filter_subjects == ("one",)  # type: ignore[arg-type]
    assert pickle.loads(pickle.dumps(o)) == o
    st_ = OrderedConsumerState("S", o, name_prefix="P")
    assert st_.consumer_config().inactive_threshold == 60.0


# ----------------------------------------------------------------------------- property


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["ok", "drop", "dup", "reset", "fail"]), max_size=60))
def test_delivered_sequence_is_complete_and_strictly_increasing(ops: list[str]) -> None:
    """A simulated server delivers stream seqs 1..N from where each consumer was created; the
    network drops or duplicates deliveries, resets happen: what the user gets is exactly
    1..k in order, whatever the interleaving (scenarios 46-47)."""
    st_ = OrderedConsumerState("S", OrderedConsumerOptions(max_reset_attempts=None), name_prefix="P")
    now = 0.0
    got: list[int] = []
    server_next = 0  # next stream seq the current server consumer delivers
    server_cseq = 0

    def ensure_consumer() -> None:
        nonlocal now, server_next, server_cseq
        while st_.needs_new_consumer:
            now = max(now, st_.next_deadline() or now)
            cfg = st_.start_create(now)
            server_next = cfg.opt_start_seq or 1
            server_cseq = 0
            st_.created(now, cfg.name or "")

    for op in ops:
        ensure_consumer()
        now += 0.01
        if op == "reset":
            st_.reset(now, ResetReason.HEARTBEAT_MISSED)
            continue
        if op == "fail":
            cfg = st_.start_create(now) if st_.recreate_due(now) else None
            if cfg is not None:
                st_.create_failed(now, errors.TimeoutError(), cfg.name or "")
            continue
        server_cseq += 1
        m = MsgMetadata("S", st_.name, None, 1, 0, T0, sequence=SequencePair(server_next, server_cseq))
        server_next += 1
        if op == "drop":
            continue
        for _ in range(2 if op == "dup" else 1):
            verdict = st_.on_delivery(m)
            if verdict is Delivery.ACCEPT:
                got.append(m.sequence.stream)
            elif verdict is Delivery.GAP:
                st_.reset(now, ResetReason.GAP)
                break
    assert got == list(range(1, len(got) + 1))


# ----------------------------------------------------------------------------- a run at once


def _one_by_one(st_: OrderedConsumerState, sseqs: list[int], cseqs: list[int]) -> int:
    ok = 0
    while ok < len(sseqs) and st_.on_message(sseqs[ok], cseqs[ok]):
        ok += 1
    return ok


_STEPS = ([1, 1, 1, 1, 2, 0, -1], [1, 1, 1, 3, 0, -2])  # (the consumer and stream sequences' steps)


@settings(max_examples=400, deadline=None)
@example(start=(0, 0), steps=[(1, 1), (2, 1), (0, 1), (1, 1)])  # (first and last right, not between)
@example(start=(5, 5), steps=[(0, 0), (1, 1)])  # (the first one's stream sequence is the cursor's)
@given(
    start=st.tuples(st.integers(0, 50), st.integers(0, 50)),
    steps=st.lists(
        st.tuples(st.sampled_from(_STEPS[0]), st.sampled_from(_STEPS[1])),
        min_size=0,
        max_size=30,
    ),
)
def test_on_messages_is_on_message_in_turn(start: tuple[int, int], steps: list[tuple[int, int]]) -> None:
    """A run checked at once takes as many deliveries, and leaves the cursor where checking
    them one by one does: in order, with a consumer sequence skipped or repeated, or a stream
    sequence standing still or going back anywhere in the run."""
    sseqs: list[int] = []
    cseqs: list[int] = []
    s, c = start  # (the first step goes from the cursor: it may be out of order too)
    for dc, ds in steps:
        s, c = s + ds, c + dc
        sseqs.append(s)
        cseqs.append(c)
    runs, one = active(), active()
    for st_ in (runs, one):  # (a cursor already moved, as after earlier runs)
        st_.consumer_seq, st_.stream_seq = start[1], start[0]
    assert runs.on_messages(sseqs, cseqs) == _one_by_one(one, sseqs, cseqs)
    assert (runs.stream_seq, runs.consumer_seq, runs.strikes) == (one.stream_seq, one.consumer_seq, one.strikes)
    assert runs.consumer_config() == one.consumer_config()


def test_on_messages_refuses_a_run_out_of_place() -> None:
    st_ = active()
    assert st_.on_messages([], []) == 0
    with pytest.raises(LocalProtocolError):
        st_.on_messages([1, 2], [1])
    st_.reset(0.0, ResetReason.GAP)
    with pytest.raises(LocalProtocolError):
        st_.on_messages([1], [1])
    assert (st_.stream_seq, st_.consumer_seq) == (0, 0)


def test_range_pulls_size_the_pulls_and_say_what_follows_an_empty_or_refused_one() -> None:
    from jscore.ordered import RangePulls

    p = RangePulls(16384, 8 << 20, 4096)
    assert p.ask(100_000) == (16384, 8 << 20) and p.ask(10) == (10, 8 << 20) and p.ask(0) == (1, 8 << 20)
    assert p.nothing() is True, "an empty pull with the byte limit: asked again"
    assert p.ask(100_000) == (1, None), "for one message, without the limit"
    assert p.nothing() is False, "that empty too: nothing more"
    p.brought()
    assert p.ask(100_000) == (16384, 8 << 20), "the limit again after messages"
    assert p.refused("Exceeded MaxWaiting of 512") is False
    assert p.refused("Exceeded MaxRequestBatch of 4096") is True
    assert p.ask(100_000) == (4096, None) and p.nothing() is False
    assert p.refused("Exceeded MaxRequestBatch of 100") is False, "4096 refused too: the reader's error"
    plain = RangePulls(500)
    assert plain.ask(10_000) == (500, None) and plain.nothing() is False and plain.refused("Exceeded MaxRequestBatch of 1") is False
