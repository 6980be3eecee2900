"""jscore.ordered.OrderedMachine: one ordered fetch or consume as a session sub-machine.

Virtual time only. Every decision the ordered consumer makes is checked here, as the frames the
machine asks for and the events it emits: creating the server consumer, pulling from it,
resets on a gap, missed heartbeats, a deleted consumer, no responders and a reconnect, the
backoff schedule, a fetch's deadline, a stream that is gone, stop and drain.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from jscore.errors import (
    ConnectionClosedError,
    JetStreamNotEnabledError,
    LocalProtocolError,
    MaxBytesExceededError,
    NoHeartbeatError,
    OrderedConsumerResetError,
    StreamNotFoundError,
    TimeoutError,
)
from jscore.headers import Headers
from jscore.machine import ConnectionClosed, ConnectionLost, ConnectionRestored, SendRequested, Stop
from jscore.ordered import (
    FLAP_WINDOW,
    RECONNECT_RETRY,
    RECONNECT_WINDOW,
    OrderedConsumerOptions,
    OrderedConsumerReset,
    OrderedConsumerState,
    OrderedEnd,
    OrderedFinished,
    OrderedMachine,
    OrderedMessageDelivered,
    OrderedMessagesDelivered,
    OrderedState,
    ResetReason,
    reset_reason_for,
)
from jscore.errors import (
    ConnectionLostError,
    ConsumerDeletedError,
    ConsumerNotFoundError,
    NoRespondersError,
    PullBadRequestError,
    PullNoRespondersError,
)
from jscore.models import DeliverPolicy
from jscore.protocol import MsgReceived
from jscore.pull import (
    ConsumerReconnected,
    Drain,
    FlowControlReplyRequested,
    HeartbeatMissed,
    MessagesTaken,
    StatusWarning,
    resolve_consume_options,
    resolve_fetch_options,
)

INBOX = "_INBOX.test."


def info(name: str, stream_seq: int = 0) -> bytes:
    return json.dumps(
        {"stream_name": "S", "name": name, "config": {"ack_policy": "none"},
         "delivered": {"consumer_seq": 0, "stream_seq": stream_seq}}
    ).encode()


def api_error(code: int, err_code: int, description: str) -> bytes:
    return json.dumps({"error": {"code": code, "err_code": err_code, "description": description}}).encode()


class H:
    """Drives an OrderedMachine the way the session does, with virtual time."""

    def __init__(
        self,
        options: Any,
        *,
        state: OrderedConsumerState | None = None,
        connected: bool = True,
        now: float = 0.0,
        request_timeout: float = 5.0,
        ordered: OrderedConsumerOptions | None = None,
        columns: bool = False,
    ) -> None:
        self.st = state if state is not None else OrderedConsumerState("S", ordered, name_prefix="P")
        self.now = now
        self.sent: list[SendRequested] = []
        self.events: list[Any] = []
        self.m = OrderedMachine(
            self.st, options, now, request_timeout=request_timeout, connected=connected, columns=columns
        )
        self.pump()

    def pump(self) -> None:
        for e in self.m.drain_events():
            (self.sent if isinstance(e, SendRequested) else self.events).append(e)
        due = self.m.next_deadline()
        assert due is None or due > self.now or self.m.finished, "a deadline in the past would spin the I/O thread"

    # -- what went out ---------------------------------------------------------------

    def creates(self) -> list[SendRequested]:
        return [s for s in self.sent if ".CONSUMER.CREATE." in s.subject]

    def pulls(self) -> list[SendRequested]:
        return [s for s in self.sent if ".CONSUMER.MSG.NEXT." in s.subject]

    def deletes(self) -> list[str]:
        return [s.subject.rsplit(".", 1)[1] for s in self.sent if ".CONSUMER.DELETE." in s.subject]

    def create_config(self, i: int = -1) -> dict[str, Any]:
        return json.loads(self.creates()[i].body)  # type: ignore[no-any-return]

    def pull_body(self, i: int = -1) -> dict[str, Any]:
        return json.loads(self.pulls()[i].body)  # type: ignore[no-any-return]

    def of(self, cls: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, cls)]

    def accepted(self) -> list[int]:
        return [e.metadata.sequence.stream for e in self.of(OrderedMessageDelivered)]

    def end(self) -> OrderedFinished:
        ends = self.of(OrderedFinished)
        assert len(ends) == 1, self.events
        return ends[0]  # type: ignore[no-any-return]

    # -- what comes in ---------------------------------------------------------------

    def created(self, stream_seq: int = 0) -> None:
        c = self.creates()[-1]
        name = json.loads(c.body)["config"]["name"]
        self.recv(MsgReceived(INBOX + (c.reply_token or ""), 1, None, info(name, stream_seq), None))

    def create_answer(self, data: bytes = b"", status: int | None = None) -> None:
        c = self.creates()[-1]
        self.recv(MsgReceived(INBOX + (c.reply_token or ""), 1, None, data, None, status, None))

    def deliver(self, sseq: int, cseq: int, name: str | None = None, size: int = 100) -> None:
        reply = f"$JS.ACK.S.{name or self.st.name}.1.{sseq}.{cseq}.1700000000000000000.0"
        self.recv(MsgReceived("s.x", 1, reply, b"%d" % sseq, None, size=size))

    def status(self, code: int, desc: str, token: str | None = None, pending: tuple[int, int] | None = None) -> None:
        token = token if token is not None else (self.pulls()[-1].reply_token or "")
        headers = None
        if pending is not None:
            headers = Headers([("Nats-Pending-Messages", str(pending[0])), ("Nats-Pending-Bytes", str(pending[1]))])
        self.recv(MsgReceived(INBOX + token, 1, None, b"", headers, code, desc))

    def recv(self, msg: MsgReceived) -> None:
        self.m.receive_msg(msg, self.now)
        self.pump()

    def cmd(self, command: Any) -> None:
        self.m.handle(command, self.now)
        self.pump()

    def run_until(self, t: float) -> None:
        """Advance virtual time to ``t``, firing every deadline on the way, as the I/O thread does."""
        while True:
            due = self.m.next_deadline()
            if due is None or due > t:
                break
            self.now = max(self.now, due)
            self.m.handle_timeout(self.now)
            self.pump()
        self.now = max(self.now, t)

    def advance(self, dt: float) -> None:
        self.run_until(self.now + dt)


def fetch_opts(n: int = 10, expires: float | None = 2.0, **kw: Any) -> Any:
    return resolve_fetch_options(max_messages=n, expires=expires, **kw)


def consume_opts(**kw: Any) -> Any:
    kw.setdefault("max_messages", 10)
    kw.setdefault("expires", 2.0)
    kw.setdefault("heartbeat", 0.5)
    return resolve_consume_options(**kw)


def active_consume(**kw: Any) -> H:
    h = H(consume_opts(**kw))
    h.created()
    assert h.st.state is OrderedState.ACTIVE and len(h.pulls()) == 1
    return h


# ================================================================================= create


def test_first_use_creates_the_consumer_then_pulls_from_it() -> None:
    h = H(fetch_opts(5, expires=2.0))
    (c,) = h.creates()
    assert c.subject == "$JS.API.CONSUMER.CREATE.S.P_1" and c.reply_token == "c1" and not c.best_effort
    cfg = h.create_config()
    assert cfg["action"] == "create" and cfg["stream_name"] == "S"
    assert cfg["config"]["name"] == "P_1" and cfg["config"]["ack_policy"] == "none"
    assert cfg["config"]["deliver_policy"] == "all" and cfg["config"]["mem_storage"] is True
    assert h.pulls() == [] and h.st.state is OrderedState.CREATING
    assert h.m.next_deadline() == 2.25  # the fetch's deadline comes before the create's timeout (5 s)
    h.created()
    (p,) = h.pulls()
    assert p.subject == "$JS.API.CONSUMER.MSG.NEXT.S.P_1" and p.reply_token == "p1"
    assert h.pull_body() == {"expires": 2_000_000_000, "batch": 5}


def test_a_fetch_on_an_active_consumer_pulls_at_once_and_reuses_it() -> None:
    h = H(fetch_opts(3, expires=1.0))
    h.created()
    h.deliver(1, 1)
    h.deliver(2, 2)
    h.deliver(3, 3)
    assert h.accepted() == [1, 2, 3]
    assert h.end().end is OrderedEnd.DONE and h.m.finished
    assert h.st.state is OrderedState.ACTIVE and h.deletes() == []
    # the next fetch reuses P_1: no create, the pull goes out with the user's options unchanged
    h2 = H(fetch_opts(3, expires=1.0), state=h.st, now=1.0)
    assert h2.creates() == [] and h2.pull_body() == {"expires": 1_000_000_000, "batch": 3}
    h2.status(408, "Request Timeout")
    assert h2.end().end is OrderedEnd.DONE and h2.accepted() == []
    assert h2.st.state is OrderedState.ACTIVE and h2.st.serial == 1


def test_the_create_response_pins_the_cursor() -> None:
    h = H(fetch_opts(), ordered=OrderedConsumerOptions(deliver_policy=DeliverPolicy.NEW))
    assert h.create_config()["config"]["deliver_policy"] == "new"
    h.created(stream_seq=41)
    assert h.st.stream_seq == 41
    # Before any delivery a 503 is first taken for a new consumer not reachable yet: the pull
    # goes again (50, 100, 200 ms later); the fourth 503 resets; the next one starts at 42.
    for _ in range(3):
        pulls = len(h.pulls())
        h.status(503, "No Responders")
        h.advance(0.25)
        assert len(h.pulls()) == pulls + 1 and len(h.creates()) == 1
    h.status(503, "No Responders")
    h.run_until(h.now + 1.0)  # (it died before delivering: a flap, backed off 1 s)
    assert len(h.creates()) == 2
    assert h.create_config()["config"]["deliver_policy"] == "by_start_sequence"
    assert h.create_config()["config"]["opt_start_seq"] == 42


# ================================================================================= resets


def test_gap_resets_and_recreates_after_the_last_delivered_sequence() -> None:
    h = active_consume()
    h.deliver(10, 1)
    h.deliver(11, 2)
    h.deliver(13, 4)  # consumer seq 3 was lost
    h.deliver(14, 5, name="P_1")  # more of the old serial: dropped
    assert h.accepted() == [10, 11]
    (reset,) = h.of(OrderedConsumerReset)
    assert reset.reason is ResetReason.GAP and reset.serial == 2 and reset.stream_seq == 11
    assert h.deletes() == ["P_1"]
    cfg = h.create_config()["config"]
    assert cfg["name"] == "P_2" and cfg["deliver_policy"] == "by_start_sequence" and cfg["opt_start_seq"] == 12
    h.created()
    assert h.pulls()[-1].subject.endswith(".P_2") and h.pulls()[-1].reply_token == "p2"
    h.deliver(12, 1)
    h.deliver(13, 2)
    assert h.accepted() == [10, 11, 12, 13]
    assert h.m.stale >= 1 and not h.m.finished


def test_heartbeat_missed_resets() -> None:
    h = active_consume(heartbeat=0.5)
    h.deliver(1, 1)
    h.advance(0.99)
    assert h.of(HeartbeatMissed) == []
    h.advance(0.02)  # 2 x idle_heartbeat without a message
    (missed,) = h.of(HeartbeatMissed)
    assert isinstance(missed.error, NoHeartbeatError)
    (reset,) = h.of(OrderedConsumerReset)
    assert reset.reason is ResetReason.HEARTBEAT_MISSED and reset.error is missed.error
    assert h.deletes() == ["P_1"] and len(h.creates()) == 2


def test_consumer_deleted_resets() -> None:
    h = active_consume()
    h.deliver(1, 1)
    h.status(409, "Consumer Deleted")
    (reset,) = h.of(OrderedConsumerReset)
    assert reset.reason is ResetReason.CONSUMER_DELETED
    assert h.create_config()["config"]["opt_start_seq"] == 2 and not h.m.finished


def test_a_503_to_a_new_consumers_first_pull_is_sent_again_without_a_reset() -> None:
    """On a cluster a consumer just created can answer 503 until its leader's interest reaches
    the client's server: the pull goes again and the messages come, with no reset (which
    would back off a second before making another consumer)."""
    h = H(fetch_opts(3, expires=2.0))
    h.created(stream_seq=0)
    h.status(503, "No Responders")
    h.advance(0.06)
    assert len(h.pulls()) == 2 and h.of(OrderedConsumerReset) == []
    h.deliver(1, 1)
    h.deliver(2, 2)
    h.deliver(3, 3)
    assert h.accepted() == [1, 2, 3] and h.end().end is OrderedEnd.DONE
    assert len(h.creates()) == 1 and h.of(OrderedConsumerReset) == []


def test_no_responders_resets_on_the_first_503() -> None:
    h = active_consume()
    h.deliver(1, 1)
    h.status(503, "No Responders")
    (reset,) = h.of(OrderedConsumerReset)
    assert reset.reason is ResetReason.NO_RESPONDERS and isinstance(reset.error, PullNoRespondersError)
    assert len(h.creates()) == 2  # (it had delivered: not a flap, recreated at once)


def test_reconnect_resets_and_waits_for_the_connection() -> None:
    h = active_consume()
    h.deliver(1, 1)
    h.cmd(ConnectionLost())
    (reset,) = h.of(OrderedConsumerReset)
    assert reset.reason is ResetReason.RECONNECT and isinstance(reset.error, ConnectionLostError)
    assert len(h.creates()) == 1, "nothing is created while disconnected"
    assert h.m.next_deadline() is None  # no timer to spin on while the connection is down
    h.advance(30.0)
    assert len(h.creates()) == 1
    h.cmd(ConnectionRestored(url="nats://b:4222"))
    assert h.of(ConsumerReconnected) == [ConsumerReconnected("nats://b:4222")]
    assert len(h.creates()) == 2 and h.create_config()["config"]["opt_start_seq"] == 2
    assert len(h.of(OrderedConsumerReset)) == 1, "one reset for one outage"


def test_after_a_reconnect_a_not_ready_jetstream_is_retried_quickly() -> None:
    """A restarted server: the connection comes back before JetStream can serve. The consumer
    is created at once after the reconnect, and while the answer is 'not ready' (503 no
    responders, 10008 no leader, no answer) it is asked again every 0.25 s for 10 s, without
    strikes, instead of backing off 1, 2, 4 s (then the ordinary backoff takes over)."""
    h = active_consume()  # (no delivery yet: a reset would otherwise count as a flap)
    h.cmd(ConnectionLost())
    h.advance(3.0)
    h.cmd(ConnectionRestored(url="nats://a:4222"))
    restored = h.now
    sent_at = [h.now]
    answers: list[tuple[bytes, int | None]] = [
        (b"", 503),
        (api_error(503, 10008, "JetStream system temporarily unavailable"), None),
        (b"", 503),
    ]
    for data, code in answers:
        h.create_answer(data, status=code)
        assert h.st.strikes == 0
        h.run_until(h.m.next_deadline() or 0.0)
        sent_at.append(h.now)
    assert [round(b - a, 6) for a, b in zip(sent_at, sent_at[1:])] == [RECONNECT_RETRY] * 3
    h.created()
    assert h.st.state is OrderedState.ACTIVE and h.pulls()
    assert h.now - restored < 1.0


def test_the_quick_retries_end_with_their_window() -> None:
    h = H(consume_opts(), request_timeout=30.0)
    h.cmd(ConnectionLost())
    h.cmd(ConnectionRestored())
    h.advance(RECONNECT_WINDOW)
    h.create_answer(b"", status=503)  # (the first create was answered late: past the window)
    assert h.st.strikes == 1 and h.m.next_deadline() == pytest.approx(h.now + 1.0)


def test_reconnect_while_creating_retries_the_same_name() -> None:
    h = H(consume_opts())
    h.cmd(ConnectionLost())
    h.cmd(ConnectionRestored())
    names = [c.subject.rsplit(".", 1)[1] for c in h.creates()]
    assert names == ["P_1", "P_1"]
    assert [c.reply_token for c in h.creates()] == ["c1", "c2"]
    h.create_answer(info("P_1"), None)  # the answer to c2 ...
    assert h.st.state is OrderedState.ACTIVE


def test_stale_replies_are_ignored() -> None:
    h = H(consume_opts())
    h.cmd(ConnectionLost())
    h.cmd(ConnectionRestored())
    # the reply to the abandoned first create
    h.recv(MsgReceived(INBOX + "c1", 1, None, info("P_1"), None))
    assert h.st.state is OrderedState.CREATING and h.m.stale == 1
    h.created()
    h.deliver(1, 1)
    h.status(409, "Consumer Deleted")  # P_1 is dropped ...
    h.created()
    h.status(408, "Request Timeout", token="p1", pending=(10, 0))  # ... its late statuses too
    h.status(409, "Consumer Deleted", token="p1")
    assert [r.reason for r in h.of(OrderedConsumerReset)] == [ResetReason.RECONNECT, ResetReason.CONSUMER_DELETED]
    assert h.st.state is OrderedState.ACTIVE and h.st.name == "P_2" and h.m.stale == 3


def test_a_flapping_consumer_backs_off() -> None:
    h = active_consume()
    h.advance(0.5)
    h.status(409, "Consumer Deleted")  # dead within FLAP_WINDOW without a delivery: a strike
    assert h.st.strikes == 1 and len(h.creates()) == 1
    assert h.m.next_deadline() == pytest.approx(1.5)
    h.run_until(1.49)
    assert len(h.creates()) == 1
    h.run_until(1.5)
    assert len(h.creates()) == 2


# ================================================================================= backoff


def test_create_failures_back_off_1_2_4_8_10() -> None:
    h = H(consume_opts())
    sent_at = [h.now]
    for _ in range(6):
        h.create_answer(b"", status=503)  # no responders: JetStream is electing a leader
        h.run_until(h.m.next_deadline() or 0.0)
        sent_at.append(h.now)
    gaps = [round(b - a, 6) for a, b in zip(sent_at, sent_at[1:])]
    assert gaps == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert len(h.creates()) == 7 and h.st.strikes == 6 and not h.m.finished


def test_create_timeout_is_a_transient_failure() -> None:
    h = H(consume_opts(), request_timeout=3.0)
    h.run_until(3.0)
    assert h.st.strikes == 1 and h.st.state is OrderedState.BACKOFF
    assert len(h.creates()) == 1 and h.m.next_deadline() == pytest.approx(4.0)
    h.create_answer(info("P_1"))  # too late: a stale reply (the token was retired)
    assert h.st.state is OrderedState.BACKOFF
    h.run_until(4.0)
    assert [c.reply_token for c in h.creates()] == ["c1", "c2"]


def test_attempts_are_bounded() -> None:
    h = H(consume_opts(), ordered=OrderedConsumerOptions(max_reset_attempts=3))
    for _ in range(3):
        h.create_answer(b"", status=503)
        h.run_until(h.m.next_deadline() or h.now)
    end = h.end()
    assert end.end is OrderedEnd.FAILED and isinstance(end.error, OrderedConsumerResetError)
    assert isinstance(end.error.__cause__, JetStreamNotEnabledError) and len(h.creates()) == 3


def test_stream_gone_is_terminal_at_once() -> None:
    h = active_consume()
    h.deliver(1, 1)
    h.status(409, "Consumer Deleted")
    h.create_answer(api_error(404, 10059, "stream not found"))
    end = h.end()
    assert end.end is OrderedEnd.FAILED and isinstance(end.error, StreamNotFoundError)
    assert h.st.state is OrderedState.FAILED and len(h.creates()) == 2
    assert h.m.next_deadline() is None
    # a later operation on the same ordered consumer ends at once with the same error
    h2 = H(fetch_opts(), state=h.st, now=5.0)
    assert h2.end().end is OrderedEnd.FAILED and h2.end().error is end.error and h2.sent == []


# ================================================================================= fetch deadline


def test_a_fetch_during_a_backoff_ends_by_its_deadline() -> None:
    # A next(timeout=1) while the ordered consumer waits 10 s to recreate: it ends at 1.25 s
    # (expires + grace), not when the backoff is over.
    st = OrderedConsumerState("S", name_prefix="P")
    h0 = H(consume_opts(), state=st)
    for _ in range(5):
        h0.create_answer(b"", status=503)
        h0.run_until(h0.m.next_deadline() or 0.0)
    h0.create_answer(b"", status=503)  # 6 strikes: the next attempt is 10 s away
    h0.cmd(Stop())
    assert st.state is OrderedState.BACKOFF and st.next_deadline() == pytest.approx(h0.now + 10.0)
    h = H(fetch_opts(1, expires=1.0), state=st, now=h0.now)
    assert h.m.deadline == pytest.approx(h0.now + 1.25)
    assert h.m.next_deadline() == pytest.approx(h0.now + 1.25)
    h.advance(1.25)
    end = h.end()
    assert end.end is OrderedEnd.NOT_READY and h.now == pytest.approx(h0.now + 1.25)
    assert h.creates() == []


def test_a_fetch_waits_out_a_short_backoff_within_its_deadline() -> None:
    h = H(fetch_opts(1, expires=5.0))
    h.create_answer(b"", status=503)  # backoff 1 s
    h.run_until(1.0)
    assert len(h.creates()) == 2
    h.created()
    # the pull fits what is left: 5.5 - 1.0 = 4.5 s, less its grace 0.45 s
    assert h.pull_body()["expires"] == round((4.5 - 0.45) * 1e9)
    h.deliver(1, 1)
    assert h.end().end is OrderedEnd.DONE and h.accepted() == [1]


def test_a_fetch_that_got_nothing_heals_a_reset_within_its_time() -> None:
    h = H(fetch_opts(2, expires=10.0))  # client timer 11 s
    h.created()
    assert h.pull_body() == {"expires": 10_000_000_000, "batch": 2, "idle_heartbeat": 5_000_000_000}
    h.advance(4.0)
    h.status(409, "Consumer Deleted")  # (a flap: backs off 1 s)
    assert not h.m.finished and h.of(OrderedFinished) == []
    h.run_until(5.0)
    assert len(h.creates()) == 2
    h.created()
    # 6 s left: expires 5.4 s plus its grace 0.6 s; the heartbeat at most half of it
    body = h.pull_body()
    assert body["batch"] == 2
    assert body["expires"] == pytest.approx(5.4e9, abs=2)
    assert body["idle_heartbeat"] == pytest.approx(2.7e9, abs=2)
    h.deliver(1, 1)
    h.deliver(2, 2)
    assert h.end().end is OrderedEnd.DONE and h.accepted() == [1, 2]


def test_a_fetch_with_messages_ends_at_a_reset_and_keeps_them() -> None:
    h = H(fetch_opts(5))
    h.created()
    h.deliver(1, 1)
    h.deliver(2, 2)
    h.deliver(4, 4)  # a gap
    assert h.accepted() == [1, 2] and h.end().end is OrderedEnd.DONE
    assert h.st.state is not OrderedState.ACTIVE and h.st.last_reason is ResetReason.GAP
    h2 = H(fetch_opts(5), state=h.st, now=1.0)  # the next fetch recreates at 3
    assert h2.create_config()["config"]["opt_start_seq"] == 3


def test_a_fetch_the_client_gave_up_resets() -> None:
    # The 408 is lost: the client timer ends the fetch (typed: not ended by the server), so
    # messages may still be on their way to the dead inbox: the consumer is dropped.
    h = H(fetch_opts(5, expires=1.0))
    h.created()
    h.advance(1.25)
    assert h.end().end is OrderedEnd.DONE and h.accepted() == []
    (reset,) = h.of(OrderedConsumerReset)
    assert reset.reason is ResetReason.FETCH_INTERRUPTED and h.deletes() == ["P_1"]


def test_a_fetch_s_own_refusal_is_its_error() -> None:
    h = H(resolve_fetch_options(max_bytes=10, expires=1.0))
    h.created()
    h.status(409, "Message Size Exceeds MaxBytes")
    end = h.end()
    assert end.end is OrderedEnd.ERROR and isinstance(end.error, MaxBytesExceededError)
    assert h.st.state is OrderedState.ACTIVE, "the consumer itself is fine"


def test_no_wait_fetch_re_pulls_no_wait_after_a_reset() -> None:
    h = H(resolve_fetch_options(max_messages=5, no_wait=True))
    assert h.m.deadline == 5.0
    h.created()
    assert h.pull_body() == {"batch": 5, "no_wait": True}
    h.status(503, "No Responders")
    h.advance(1.0)  # the consumer died at once: a flap, 1 s
    h.created()
    assert h.pull_body() == {"batch": 5, "no_wait": True}
    h.status(404, "No Messages")
    assert h.end().end is OrderedEnd.DONE and h.accepted() == []


def test_the_deadline_is_never_later_than_the_fetch_s() -> None:
    h = H(fetch_opts(1, expires=1.0), request_timeout=5.0)
    assert h.m.next_deadline() == pytest.approx(1.25)  # not the create's 5 s
    h.advance(1.25)
    assert h.end().end is OrderedEnd.NOT_READY
    assert h.st.state is OrderedState.BACKOFF and h.st.recreate_due(h.now), "the abandoned create is retried next time"


# ================================================================================= consume


def test_takes_carry_over_a_reset_so_the_buffer_stays_bounded() -> None:
    h = active_consume(max_messages=10, threshold_messages=5)
    assert h.pull_body()["batch"] == 10
    for i in range(1, 9):
        h.deliver(i, i)
    h.cmd(MessagesTaken(count=2, size=200))  # 6 still in the application's queue
    h.status(409, "Consumer Deleted")
    h.created()
    assert len(h.pulls()) == 1, "6 still queued, above the threshold of 5: no pull yet"
    h.cmd(MessagesTaken(count=1, size=100))
    assert h.pulls()[-1].reply_token == "p2" and h.pull_body()["batch"] == 10 - 5


def test_stop_releases_the_consumer_without_a_reset() -> None:
    h = active_consume()
    h.deliver(1, 1)
    h.cmd(Stop())
    assert h.end().end is OrderedEnd.STOPPED and h.deletes() == ["P_1"]
    assert h.st.resets == 0 and h.st.strikes == 0 and h.st.recreate_due(h.now)
    h.deliver(2, 2)  # in flight: never delivered
    assert h.accepted() == [1]
    h2 = H(consume_opts(), state=h.st, now=1.0)  # the next operation continues at the cursor
    assert h2.create_config()["config"]["name"] == "P_2" and h2.create_config()["config"]["opt_start_seq"] == 2


def test_drain_ends_with_drained() -> None:
    h = active_consume()
    h.cmd(Drain())
    assert h.end().end is OrderedEnd.DRAINED and h.deletes() == ["P_1"]


def test_connection_closed_ends_the_operation() -> None:
    h = active_consume()
    err = ConnectionClosedError("closed")
    h.cmd(ConnectionClosed(error=err))
    assert h.end().end is OrderedEnd.ERROR and h.end().error is err
    assert h.m.next_deadline() is None


def test_notifications_pass_through() -> None:
    h = active_consume()
    h.recv(MsgReceived(INBOX + "p1", 1, "$JS.FC.x", b"", None, 100, "FlowControl Request"))
    h.status(409, "Server Shutdown", pending=(10, 0))
    assert [e.__class__ for e in h.events] == [FlowControlReplyRequested, StatusWarning]


def test_a_delivery_without_metadata_is_a_gap() -> None:
    h = active_consume()
    h.recv(MsgReceived("s.x", 1, "$JS.ACK.garbage", b"x", None))
    assert h.of(OrderedConsumerReset)[0].reason is ResetReason.GAP


def test_an_unknown_command_poisons_the_machine() -> None:
    h = active_consume()
    with pytest.raises(LocalProtocolError):
        h.m.handle(object(), h.now)
    with pytest.raises(LocalProtocolError):
        h.m.handle_timeout(h.now)


def test_reset_reasons_are_typed() -> None:
    assert reset_reason_for(NoHeartbeatError("x")) is ResetReason.HEARTBEAT_MISSED
    assert reset_reason_for(PullNoRespondersError()) is ResetReason.NO_RESPONDERS
    assert reset_reason_for(NoRespondersError("x")) is ResetReason.NO_RESPONDERS
    assert reset_reason_for(ConsumerDeletedError("x")) is ResetReason.CONSUMER_DELETED
    assert reset_reason_for(ConsumerNotFoundError(404, 10014, "consumer not found")) is ResetReason.CONSUMER_DELETED
    assert reset_reason_for(ConnectionLostError("x")) is ResetReason.RECONNECT
    assert reset_reason_for(PullBadRequestError(400, "Bad Request")) is None
    assert reset_reason_for(TimeoutError("x")) is None


def test_events_are_frozen_values() -> None:
    e = OrderedConsumerReset(reason=ResetReason.GAP, serial=2, stream_seq=5)
    with pytest.raises(AttributeError):
        e.serial = 3  # type: ignore[misc]
    assert msgspec.json.decode(msgspec.json.encode(e), type=OrderedConsumerReset) == e
    assert FLAP_WINDOW == 10.0


def test_a_terminal_status_fails_the_ordered_consumer() -> None:
    h = active_consume()
    h.deliver(1, 1)
    h.status(400, "Bad Request - something the server refuses")
    end = h.end()
    assert end.end is OrderedEnd.FAILED and isinstance(end.error, PullBadRequestError)
    assert h.st.state is OrderedState.FAILED and h.deletes() == ["P_1"]


def test_attached_while_disconnected_it_waits_for_the_connection() -> None:
    h = H(consume_opts(), connected=False)
    assert h.sent == [] and h.m.next_deadline() is None
    h.cmd(ConnectionRestored(url="nats://a:4222"))
    assert len(h.creates()) == 1 and h.of(ConsumerReconnected)


def test_nothing_is_delivered_after_the_end() -> None:
    h = active_consume()
    h.cmd(Stop())
    h.deliver(1, 1, name="P_1")
    h.status(408, "Request Timeout", token="p1")
    h.cmd(MessagesTaken(count=1, size=1))
    assert h.accepted() == [] and h.m.next_deadline() is None and h.m.stale == 2


# ================================================================================= simulated


class Server:
    """A small model of a stream of ``n`` messages and its pull consumers, answering what the
    machine sends. Faults are applied on request."""

    def __init__(self, h: H, n: int) -> None:
        self.h = h
        self.n = n
        self.consumers: dict[str, dict[str, int]] = {}
        self.waiting: dict[str, list[list[Any]]] = {}  # name -> [[token, remaining]]
        self.last: dict[str, MsgReceived] = {}
        self.connected = True
        self.fail_create = False
        self.done = 0

    def serve(self) -> None:
        """Answer everything sent so far (answers may make the machine send more)."""
        h = self.h
        while self.done < len(h.sent):
            s = h.sent[self.done]
            self.done += 1
            parts = s.subject.split(".")
            if ".CONSUMER.DELETE." in s.subject:
                name = parts[-1]
                self.consumers.pop(name, None)
                for token, _ in self.waiting.pop(name, []):
                    self.reply(token, status=(409, "Consumer Deleted"))
                continue
            if not self.connected:
                continue  # (the machine sends nothing else while disconnected; lost if it did)
            if ".CONSUMER.CREATE." in s.subject:
                if self.fail_create:
                    self.fail_create = False
                    self.reply(s.reply_token or "", status=(503, ""))
                    continue
                cfg = json.loads(s.body)["config"]
                name = cfg["name"]
                if name not in self.consumers:
                    start = cfg.get("opt_start_seq", 1) if cfg["deliver_policy"] == "by_start_sequence" else 1
                    self.consumers[name] = {"next": start, "cseq": 0}
                self.reply(s.reply_token or "", data=info(name, self.consumers[name]["next"] - 1))
            elif ".CONSUMER.MSG.NEXT." in s.subject:
                name = parts[-1]
                if name not in self.consumers:
                    self.reply(s.reply_token or "", status=(503, ""))
                else:
                    self.waiting.setdefault(name, []).append([s.reply_token, json.loads(s.body)["batch"]])

    def reply(self, token: str, data: bytes = b"", status: tuple[int, str] | None = None) -> None:
        code, desc = status if status is not None else (None, None)
        self.h.recv(MsgReceived(INBOX + token, 1, None, data, None, code, desc))
        self.serve()

    def push(self, mode: str = "deliver") -> bool:
        """One message for each consumer with a waiting pull; ``drop`` loses them on the way,
        ``dup`` sends each consumer's last message again."""
        progressed = False
        for name in list(self.waiting):
            pulls = self.waiting.get(name)
            c = self.consumers.get(name)
            if not pulls or c is None or not self.connected:
                continue
            if mode == "dup":
                if name in self.last:
                    self.h.recv(self.last[name])
                    self.serve()
                continue
            if c["next"] > self.n:
                continue
            sseq = c["next"]
            c["next"] += 1
            c["cseq"] += 1
            pulls[0][1] -= 1
            if pulls[0][1] == 0:
                pulls.pop(0)
            reply = f"$JS.ACK.S.{name}.1.{sseq}.{c['cseq']}.1700000000000000000.{self.n - sseq}"
            msg = MsgReceived("s.x", 1, reply, b"%d" % sseq, None, size=10)
            self.last[name] = msg
            progressed = True
            if mode != "drop":
                self.h.recv(msg)
                self.serve()
        return progressed

    def heartbeats(self) -> None:
        for pulls in list(self.waiting.values()):
            for token, _ in list(pulls):
                if self.connected:
                    self.h.status(100, "Idle Heartbeat", token=token)
                    self.serve()


OPS = ["deliver", "deliver", "deliver", "take", "drop", "dup", "delete", "503", "disconnect", "reconnect",
       "tick", "stall", "create_fail"]


def _take(h: H, taken: list[int]) -> None:
    n = len(h.accepted()) - taken[0]
    if n:
        taken[0] += n
        h.cmd(MessagesTaken(count=n, size=10 * n))


def test_simulated_faults_never_break_the_order() -> None:
    """Random faults against the server model: what is delivered is always 1, 2, 3 ... with
    nothing skipped or repeated, and once the faults stop the consumer reads to the end."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=300, deadline=None, derandomize=True, database=None)
    @given(st.lists(st.sampled_from(OPS), max_size=80), st.integers(0, 1))
    def run(ops: list[str], mode: int) -> None:
        n = 40
        options = consume_opts(max_messages=8, threshold_messages=4) if mode == 0 else fetch_opts(5, expires=3.0)
        state = OrderedConsumerState("S", OrderedConsumerOptions(max_reset_attempts=None), name_prefix="P")
        h = H(options, state=state)
        srv = Server(h, n)
        srv.serve()
        taken = [0]
        seen: list[int] = []

        def check() -> None:
            assert h.m.delivered == len(h.accepted())
            got = seen + h.accepted()
            assert got == list(range(1, len(got) + 1)), got

        def next_op() -> None:
            nonlocal h
            if h.m.finished:  # a fetch ended: the next one, on the same ordered consumer
                seen.extend(h.accepted())
                h = H(fetch_opts(5, expires=3.0), state=state, now=h.now, connected=srv.connected)
                # (the new machine continues where the old one stopped)
                srv.h = h
                srv.done = 0
                srv.serve()

        for op in ops:
            if op == "deliver" or op == "drop" or op == "dup":
                srv.push(op)
            elif op == "take":
                _take(h, taken) if mode == 0 else None
            elif op == "delete":
                for name in list(srv.consumers):
                    srv.h.sent.append(SendRequested(subject=f"$JS.API.CONSUMER.DELETE.S.{name}"))
                srv.serve()
            elif op == "503":
                for name, pulls in list(srv.waiting.items()):
                    srv.consumers.pop(name, None)
                    for token, _ in pulls:
                        srv.reply(token, status=(503, ""))
                    srv.waiting.pop(name, None)
            elif op == "disconnect" and srv.connected:
                srv.connected = False
                srv.waiting.clear()
                h.cmd(ConnectionLost())
                srv.serve()
            elif op == "reconnect" and not srv.connected:
                srv.connected = True
                h.cmd(ConnectionRestored())
                srv.serve()
            elif op == "tick":
                srv.heartbeats()
                h.advance(0.3)
                srv.serve()
            elif op == "stall":
                h.advance(1.5)
                srv.serve()
            elif op == "create_fail":
                srv.fail_create = True
            check()
            if mode == 1:
                next_op()
                taken = [0]
        # the faults stop: it must read to the end
        srv.fail_create = False
        if not srv.connected:
            srv.connected = True
            h.cmd(ConnectionRestored())
            srv.serve()
        for _ in range(2000):
            check()
            if len(seen) + len(h.accepted()) == n:
                break
            if mode == 0:
                _take(h, taken)
            if not srv.push():
                srv.heartbeats()
                due = h.m.next_deadline()
                if due is not None:
                    h.run_until(due)
                    srv.serve()
            if mode == 1:
                next_op()
        total = seen + h.accepted()
        assert total == list(range(1, n + 1)), total

    run()


# ================================================================================= on a session


def test_on_a_session_every_frame_goes_through_the_wildcard_inbox() -> None:
    import random

    from jscore.connection import ConnectOptions
    from jscore.session import Session
    from tests.core.test_connection import client_frames

    session = Session(ConnectOptions(servers=("nats://a:4222",)), rng=random.Random(7))
    now = 0.0
    session.start(now)
    session.connection_made(now)
    session.receive_data(b'INFO {"max_payload": 1048576, "headers": true}\r\n', now)
    session.data_to_send()
    session.receive_data(b"PONG\r\n", now)
    assert session.conn.is_connected
    events: list[Any] = []
    st = OrderedConsumerState("S", name_prefix="P")
    m = OrderedMachine(st, consume_opts(), now)
    session.attach(m, events.append, now, wildcard=True)
    (sub, create) = client_frames(session.data_to_send())
    assert sub[0] == "SUB" and sub[1].endswith(".*")
    inbox = sub[1][:-1]
    sid = sub[3]
    assert create[:3] == ("PUB", "$JS.API.CONSUMER.CREATE.S.P_1", inbox + "c1")

    def msg(subject: str, payload: bytes, reply: str | None = None) -> bytes:
        r = f" {reply}" if reply else ""
        return b"MSG %s %d%s %d\r\n%s\r\n" % (subject.encode(), sid, r.encode(), len(payload), payload)

    session.receive_data(msg(inbox + "c1", info("P_1")), now)
    (pull,) = client_frames(session.data_to_send())
    assert pull[:3] == ("PUB", "$JS.API.CONSUMER.MSG.NEXT.S.P_1", inbox + "p1")
    assert session.next_deadline() == m.next_deadline() == pytest.approx(1.0)  # the heartbeat watchdog
    ack = "$JS.ACK.S.P_1.1.{}.{}.1700000000000000000.0"
    session.receive_data(msg("s.x", b"1", ack.format(1, 1)) + msg("s.x", b"3", ack.format(3, 3)), now)
    # (the two deliveries came in one read: a run, checked as one; the first is in order)
    runs = [e for e in events if isinstance(e, OrderedMessagesDelivered)]
    assert [seq for e in runs for seq in e.stream_seqs] == [1] and [m.data for e in runs for m in e.msgs] == [b"1"]
    assert not [e for e in events if isinstance(e, OrderedMessageDelivered)]
    assert [e.reason for e in events if isinstance(e, OrderedConsumerReset)] == [ResetReason.GAP]
    frames = client_frames(session.data_to_send())
    assert [f[:3] for f in frames] == [
        ("PUB", "$JS.API.CONSUMER.DELETE.S.P_1", inbox + "d"),
        ("PUB", "$JS.API.CONSUMER.CREATE.S.P_2", inbox + "c2"),
    ]
    session.handle_timeout(now + 0.5)  # nothing due: a no-op
    session.connection_lost(now + 1.0, None)  # the session tells the machine
    assert [e.reason for e in events if isinstance(e, OrderedConsumerReset)][-1] is ResetReason.RECONNECT
    assert m.next_deadline() is None
