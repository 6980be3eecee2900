"""Hypothesis stateful models of the pull machines (TESTPLAN 33).

Random interleavings of user messages, statuses with and without pending headers (including
headers larger than what is outstanding and garbage), heartbeats, time, takes, disconnects,
reconnects, stop and drain. Checked after every step:

* pending messages / bytes never negative, never above max; pending + buffered <= max as long
  as the server only sends what was asked (a "stray" message relaxes only that one);
* no pull while disconnected, after the end, or with an empty batch;
* whenever the consume runs, is connected and not holding (409 MaxBytes / 503 backoff), it is
  NOT at or under its threshold with room left: it would have pulled;
* nothing delivered after stop / the end; every terminal status ends it, with its error type;
* ``next_deadline()`` is never left in the past after ``handle_timeout`` (no busy loop).
"""

from __future__ import annotations

from collections import deque

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from jscore.errors import ConsumerNotFoundError
from jscore.pull import (
    FETCH_RESENDS,
    AckNext,
    AckNextRequested,
    ConnectionLost,
    ConnectionRestored,
    ConsumeMachine,
    ConsumeTerminated,
    ConsumerCheckRequested,
    ConsumerGone,
    Disposition,
    Drain,
    InboxDrained,
    FetchFinished,
    FetchMachine,
    MessageDelivered,
    MessagesTaken,
    PullEvent,
    PullRequested,
    PullState,
    Stop,
    classify_status,
    resolve_consume_options,
    resolve_fetch_options,
)

from .test_pull_helpers import heartbeat, status, user

RECOVERABLE = [
    (404, "No Messages"),
    (408, "Request Timeout"),
    (408, "Interest Expired"),
    (409, "Message Size Exceeds MaxBytes"),
    (409, "Batch Completed"),
    (409, "Leadership Change"),
    (409, "Server Shutdown"),
    (409, "Exceeded MaxWaiting"),
    (409, "Exceeded MaxRequestBatch of 5"),
    (423, "Nats-Wrong-Pin-Id"),
    (423, "Nats-Pin-Id mismatch"),
    (503, None),  # terminal only after K in a row
    (100, "FlowControl Request"),
    (409, "Something Unknown"),  # ADR-37: recovered from, with backoff
    (412, "Required Api Level"),
]
TERMINAL = [
    (409, "Consumer Deleted"),
    (409, "Consumer is push based"),
    (400, "Bad Request - nope"),
]
STATUSES = RECOVERABLE + TERMINAL

SETTINGS = settings(
    max_examples=120, stateful_step_count=50, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


class ConsumeModel(RuleBasedStateMachine):
    m: ConsumeMachine

    @initialize(
        by_bytes=st.booleans(),
        max_messages=st.integers(1, 12),
        max_bytes=st.integers(50, 1500),
        threshold_pct=st.none() | st.integers(0, 100),
        heartbeat=st.sampled_from([0.5, 1.0]),
        expires_factor=st.sampled_from([2, 3, 4]),
        limit=st.integers(1, 4),
        terminal_after=st.integers(0, 80),
        check=st.booleans(),
    )
    def setup(
        self,
        by_bytes: bool,
        max_messages: int,
        max_bytes: int,
        threshold_pct: int | None,
        heartbeat: float,
        expires_factor: int,
        limit: int,
        terminal_after: int,
        check: bool,
    ) -> None:
        self.steps = 0
        self.check_requested = False
        self.terminal_after = terminal_after
        expires = max(1.0, heartbeat * expires_factor)
        if by_bytes:
            threshold = None if threshold_pct is None else max_bytes * threshold_pct // 100
            self.opts = resolve_consume_options(
                max_bytes=max_bytes, threshold_bytes=threshold, expires=expires, heartbeat=heartbeat,
                group="G", no_responders_limit=limit, no_responders_check=check,
            )
        else:
            threshold = None if threshold_pct is None else max_messages * threshold_pct // 100
            self.opts = resolve_consume_options(
                max_messages=max_messages, threshold_messages=threshold, expires=expires, heartbeat=heartbeat,
                group="G", no_responders_limit=limit, no_responders_check=check,
            )
        self.now = 0.0
        self.connected = True
        self.ended = False
        self.fenced = False  # InboxDrained was handed over
        self.strict = True
        self.sizes: deque[int] = deque()  # sizes of the delivered, not yet taken messages
        self.m = ConsumeMachine(self.opts, self.now)
        self.absorb()

    # ------------------------------------------------------------ event checks

    def absorb(self) -> list[PullEvent]:
        evs = self.m.drain_events()
        for ev in evs:
            if isinstance(ev, PullRequested):
                assert self.connected, "pull while disconnected"
                assert not self.ended, "pull after the end"
                assert ev.batch >= 1
                if self.opts.by_bytes:
                    assert 1 <= ev.max_bytes <= self.opts.max_bytes
                else:
                    assert ev.batch <= self.opts.max_messages and ev.max_bytes == 0
                assert b'"group":"G"' in ev.body
            elif isinstance(ev, MessageDelivered):
                assert not self.ended, "delivered after the end"
                self.sizes.append(ev.msg.size)
            elif isinstance(ev, ConsumeTerminated):
                assert not self.ended, "ended twice"
                self.ended = True
            elif isinstance(ev, ConsumerCheckRequested):
                assert self.opts.no_responders_check and not self.ended
                self.check_requested = True
        return evs

    # ------------------------------------------------------------ rules

    @rule(size=st.integers(1, 400))
    def user_message(self, size: int) -> None:
        """What an honest server sends: only while it owes something, and what fits."""
        m = self.m
        if not self.ended:
            if not self.connected or not m.outstanding:
                return
            if self.opts.by_bytes:
                size = min(size, m.pending_bytes)
        ignored = m.ignored
        m.receive_msg(user(size), self.now)
        self.absorb()
        if self.ended and m.state is PullState.FINISHED:
            assert m.ignored == ignored + 1

    @precondition(lambda self: self.connected)
    @rule(size=st.integers(1, 400))
    def stray_message(self, size: int) -> None:
        """A message nothing asked for (e.g. of a pull the accounting already wrote off)."""
        self.strict = False
        self.m.receive_msg(user(size), self.now)
        self.absorb()

    @rule(
        which=st.sampled_from(RECOVERABLE),
        headers=st.booleans(),
        n=st.integers(0, 30),
        b=st.integers(0, 3000),
        garbage=st.booleans(),
    )
    def status_message(self, which: tuple[int, str | None], headers: bool, n: int, b: int, garbage: bool) -> None:
        self._status(which, headers, n, b, garbage)

    @precondition(lambda self: self.steps >= self.terminal_after)
    @rule(which=st.sampled_from(TERMINAL), headers=st.booleans())
    def terminal_status(self, which: tuple[int, str | None], headers: bool) -> None:
        self._status(which, headers, 1, 1, False)

    def _status(self, which: tuple[int, str | None], headers: bool, n: int, b: int, garbage: bool) -> None:
        code, desc = which
        running = self.m.state is PullState.RUNNING
        before = self.m.pending_messages, self.m.pending_bytes
        if garbage:
            msg = status(code, desc, raw_pending="-3")
        elif headers:
            msg = status(code, desc, pending=n, pending_bytes=b, reply="fc")
        else:
            msg = status(code, desc, reply="fc")
        self.m.receive_msg(msg, self.now)
        evs = self.absorb()
        rule_ = classify_status(code, desc)
        if running and rule_.consume is Disposition.TERMINAL:
            assert self.m.finished
            [end] = [e for e in evs if isinstance(e, ConsumeTerminated)]
            assert rule_.error is not None and type(end.error) is rule_.error
        if running and rule_.consume in (Disposition.WARN_REFUSED_REPULL, Disposition.WARN_BACKOFF_REPULL):
            assert not self.m.finished  # ADR-37: recovered from, never terminal

    @rule()
    def consumer_found_gone(self) -> None:
        """The transport's answer to a check: the consumer no longer exists."""
        if not self.check_requested:
            return
        self.check_requested = False
        ended = self.ended
        gone = ConsumerNotFoundError(404, 10014, "consumer not found")
        self.m.handle(ConsumerGone(error=gone), self.now)
        evs = self.absorb()
        assert self.m.finished
        if not ended:
            [end] = [e for e in evs if isinstance(e, ConsumeTerminated)]
            assert end.error is gone

    @rule()
    def idle_heartbeat(self) -> None:
        self.m.receive_msg(heartbeat(), self.now)
        assert self.absorb() == []

    @rule(dt=st.floats(0.0, 3.0, allow_nan=False))
    def advance(self, dt: float) -> None:
        self.now += dt
        self.m.handle_timeout(self.now)
        self.absorb()

    @rule()
    def fire_next_deadline(self) -> None:
        deadline = self.m.next_deadline()
        if deadline is not None:
            self.now = max(self.now, deadline)
        self.m.handle_timeout(self.now)
        self.absorb()

    @rule(k=st.integers(0, 15))
    def take(self, k: int) -> None:
        k = min(k, len(self.sizes))
        size = sum(self.sizes.popleft() for _ in range(k))
        draining = self.m.state is PullState.DRAINING
        self.m.handle(MessagesTaken(count=k, size=size), self.now)
        self.absorb()
        if draining:
            # A drain ends on the take that empties the buffer once nothing more can come.
            assert self.ended == (self.fenced and self.m.buffered_messages == 0)

    @rule()
    def ack_next(self) -> None:
        """The application acks a message with +NXT: a counted pull of one, or a plain ack."""
        before = self.m.pending_messages, self.m.pending_bytes
        self.m.handle(AckNext(reply="$JS.ACK.x"), self.now)
        evs = self.absorb()
        [e] = [ev for ev in evs if isinstance(ev, AckNextRequested)]
        if e.pull:
            assert self.connected and not self.ended and self.m.state is PullState.RUNNING
            assert self.m.pending_messages > before[0] or self.opts.by_bytes
        else:
            assert e.body == b"+ACK" and (self.m.pending_messages, self.m.pending_bytes) == before

    @rule()
    def disconnect(self) -> None:
        self.connected = False
        self.m.handle(ConnectionLost(), self.now)
        self.absorb()

    @rule()
    def reconnect(self) -> None:
        self.connected = True
        self.m.handle(ConnectionRestored(), self.now)
        self.absorb()

    @rule()
    def stop(self) -> None:
        was_ended = self.ended
        self.m.handle(Stop(), self.now)
        self.absorb()
        assert self.ended and self.m.finished
        self.sizes.clear()  # the transport drops its queue
        if was_ended:
            assert self.m.drain_events() == []

    @rule()
    def drain(self) -> None:
        self.m.handle(Drain(), self.now)
        self.absorb()
        if not self.ended:
            assert self.m.state is PullState.DRAINING
            assert self.m.next_deadline() is None

    @precondition(lambda self: self.m.state is PullState.DRAINING)
    @rule()
    def inbox_drained(self) -> None:
        """The transport's fence after a drain's UNSUB: an empty buffer ends the consume now,
        a non-empty one once it is taken."""
        empty = self.m.buffered_messages == 0
        self.m.handle(InboxDrained(), self.now)
        self.absorb()
        self.fenced = True
        assert self.ended == empty

    # ------------------------------------------------------------ invariants

    @invariant()
    def counters_in_range(self) -> None:
        self.steps += 1
        m, o = self.m, self.opts
        assert m.pending_messages >= 0 and m.pending_bytes >= 0
        assert m.buffered_messages >= 0 and m.buffered_bytes >= 0
        if o.by_bytes:
            assert m.pending_bytes <= o.max_bytes
            if self.strict:
                assert m.pending_bytes + m.buffered_bytes <= o.max_bytes
        else:
            assert m.pending_messages <= o.max_messages
            if self.strict:
                assert m.pending_messages + m.buffered_messages <= o.max_messages
        assert m.buffered_messages == len(self.sizes) or not self.strict or self.ended

    @invariant()
    def pulls_whenever_at_or_under_threshold(self) -> None:
        m, o = self.m, self.opts
        if m.state is not PullState.RUNNING or not m.connected or m.pull_blocked_until is not None:
            return
        if m.waiting_for_take:
            # (409 MaxBytes with messages buffered: the next take brings the pull)
            assert m.buffered_messages > 0, "waiting for a take with nothing to take"
            return
        if o.by_bytes:
            used, threshold, limit = m.pending_bytes + m.buffered_bytes, o.threshold_bytes, o.max_bytes
        else:
            used, threshold, limit = m.pending_messages + m.buffered_messages, o.threshold_messages, o.max_messages
        assert not (used <= threshold and used < limit), "should have pulled"

    @invariant()
    def deadline_not_in_the_past(self) -> None:
        deadline = self.m.next_deadline()
        if self.m.finished:
            assert deadline is None
        assert deadline is None or deadline > self.now

    @invariant()
    def ended_iff_finished(self) -> None:
        assert self.ended == self.m.finished


class FetchModel(RuleBasedStateMachine):
    m: FetchMachine

    @initialize(
        max_messages=st.none() | st.integers(1, 8),
        max_bytes=st.none() | st.integers(50, 1000),
        expires=st.sampled_from([0.5, 2.0, 12.0]),
        no_wait=st.booleans(),
    )
    def setup(self, max_messages: int | None, max_bytes: int | None, expires: float, no_wait: bool) -> None:
        if max_messages is None and max_bytes is None:
            max_messages = 1
        self.opts = resolve_fetch_options(max_messages=max_messages, max_bytes=max_bytes, expires=expires, no_wait=no_wait)
        self.now = 0.0
        self.m = FetchMachine(self.opts, self.now)
        self.n_delivered = 0
        self.ended = False
        self.resend_due = False  # a 503 came before any message: the pull may go again
        self.pulls = 1
        evs = self.m.drain_events()
        assert len(evs) == 1 and isinstance(evs[0], PullRequested)

    def absorb(self) -> None:
        for ev in self.m.drain_events():
            if isinstance(ev, PullRequested):
                assert self.resend_due and not self.ended, "a fetch pulls again only after a 503"
                self.resend_due = False
                self.pulls += 1
                assert self.pulls <= 1 + FETCH_RESENDS
            elif isinstance(ev, MessageDelivered):
                assert not self.ended
                self.n_delivered += 1
            elif isinstance(ev, FetchFinished):
                assert not self.ended
                assert ev.delivered == self.n_delivered
                self.ended = True

    @rule(size=st.integers(1, 300))
    def user_message(self, size: int) -> None:
        self.m.receive_msg(user(size), self.now)
        self.resend_due = False  # (a message: the pull is served, a pending re-send is off)
        self.absorb()

    @rule(which=st.sampled_from(STATUSES + [(100, "Idle Heartbeat")]), n=st.integers(0, 10))
    def status_message(self, which: tuple[int, str | None], n: int) -> None:
        was_running = not self.m.finished
        self.m.receive_msg(status(which[0], which[1], pending=n, pending_bytes=n), self.now)
        self.absorb()
        if which[0] == 100:
            self.resend_due = False  # (a heartbeat: the pull is served, a pending re-send is off)
        if was_running and which[0] != 100:
            if which[0] == 503 and not self.n_delivered and not self.m.finished:
                self.resend_due = True  # (nobody received the pull: it is sent again)
            else:
                assert self.m.finished

    @rule(dt=st.floats(0.0, 5.0, allow_nan=False))
    def advance(self, dt: float) -> None:
        self.now += dt
        self.m.handle_timeout(self.now)
        self.absorb()

    @rule()
    def connection_lost(self) -> None:
        self.m.handle(ConnectionLost(), self.now)
        self.absorb()
        assert self.m.finished

    @invariant()
    def bounded(self) -> None:
        assert self.n_delivered <= self.opts.batch
        assert self.ended == self.m.finished
        deadline = self.m.next_deadline()
        assert deadline is None or deadline > self.now
        if not self.m.finished:
            assert self.now < self.opts.client_timeout


TestConsumeStateful = ConsumeModel.TestCase
TestConsumeStateful.settings = SETTINGS
TestFetchStateful = FetchModel.TestCase
TestFetchStateful.settings = SETTINGS
