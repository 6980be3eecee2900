"""The JetStream model deep dive (shared/specs/jetstream-model-deep-dive.txt), step by step,
against a real nats-server: limits retention (max_msgs, max_bytes, max_age,
max_msgs_per_subject, max_consumers), discard old vs new, max_msg_size, the duplicate window,
work-queue retention (one consumer per subject), interest retention (dropped at once without
consumers, removed once every consumer acked), the consumer's delivered / ack-floor /
redelivery bookkeeping, and the starting positions of the deliver policies.

Pull consume arrives with a later issue, so these tests pull with raw
``$JS.API.CONSUMER.MSG.NEXT`` requests on a core subscription and acknowledge by answering the
``$JS.ACK`` reply subject (as a request: the server confirms the ack). Messages are stored with
core requests and their PubAck decoded with jscore.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import Any

import pytest

from tests.integration import wait_until
from jscore.errors import (
    JetStreamAPIError,
    JetStreamError,
    MaximumConsumersLimitError,
    MaxBytesError,
    MaxMsgsError,
    MaxMsgsPerSubjectError,
    MsgNotFoundError,
    MsgSizeExceededError,
    StoreFailedError,
    TimeoutError,
    WorkQueueConsumerConflictError,
)
from jscore.models import (
    AckPolicy,
    DeliverPolicy,
    DiscardPolicy,
    PubAck,
    RetentionPolicy,
    StorageType,
    decode_pub_ack,
)
from jssync import Client, Msg, Stream
from tests.integration import clients, wait_until

__all__ = ["clients"]

pytestmark = pytest.mark.timeout(120)

UTC = timezone.utc


def store(nc: Client, subject: str, payload: bytes = b"", headers: dict[str, str] | None = None) -> PubAck:
    return decode_pub_ack(nc.request(subject, payload, headers=headers, timeout=5).data)


def pull(nc: Client, stream: str, consumer: str, batch: int = 1, expires: float = 1.0) -> list[Msg]:
    """One raw pull request: up to ``batch`` messages within ``expires`` seconds."""
    inbox = nc.new_inbox()
    sub = nc.subscribe(inbox)
    body = json.dumps({"batch": batch, "expires": int(expires * 1e9)}).encode()
    nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}", body, reply=inbox)
    out: list[Msg] = []
    deadline = time.monotonic() + expires + 1.0
    try:
        while len(out) < batch:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                m = sub.next_msg(timeout=remaining)
            except TimeoutError:
                break
            if m.status is None:
                out.append(m)
            elif m.status != 100:  # 404 / 408 / 409 end the pull; 100 is a heartbeat
                break
    finally:
        sub.unsubscribe()
    return out


def ack(nc: Client, msg: Msg) -> None:
    """Acknowledge through the message's $JS.ACK reply subject and wait for the server's reply."""
    assert msg.reply is not None and msg.reply.startswith("$JS.ACK.")
    nc.request(msg.reply, b"+ACK", timeout=5)


class Env:
    def __init__(self, nc: Client) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self.created: list[str] = []

    def stream(self, **fields: Any) -> tuple[Stream, str]:
        name = f"W{uuid.uuid4().hex[:10]}"
        self.created.append(name)
        prefix = name.lower()
        fields.setdefault("subjects", [f"{prefix}.>"])
        fields.setdefault("storage", StorageType.MEMORY)
        return self.js.create_stream(name=name, **fields), prefix

    def cleanup(self) -> None:
        for name in self.created:
            try:
                self.js.delete_stream(name)
            except (JetStreamError, TimeoutError):
                pass


@pytest.fixture
def env(nats_url: str, clients: Callable[..., Client]) -> Iterator[Env]:
    e = Env(clients(nats_url))
    yield e
    e.cleanup()


# =========================================================================== limits retention


def test_limits_max_msgs_discard_old(env: Env) -> None:
    stream, p = env.stream(max_msgs=3)
    for i in range(5):
        store(env.nc, f"{p}.a", b"%d" % i)
    state = stream.info().state
    assert (state.messages, state.first_seq, state.last_seq) == (3, 3, 5)
    assert stream.get_msg(3).data == b"2"


def test_limits_max_bytes_discard_old(env: Env) -> None:
    stream, p = env.stream(max_bytes=1000)
    for _ in range(20):
        store(env.nc, f"{p}.a", b"x" * 100)
    state = stream.info().state
    assert 0 < state.bytes <= 1000
    assert state.last_seq == 20 and state.first_seq > 1


def test_limits_max_age(env: Env) -> None:
    stream, p = env.stream(max_age=0.5)
    assert stream.cached_info.config.max_age == 0.5
    assert stream.cached_info.config.duplicate_window == 0.5  # clamped by the server to max_age
    store(env.nc, f"{p}.a")
    store(env.nc, f"{p}.b")
    assert stream.info().state.messages == 2
    wait_until(lambda: stream.info().state.messages == 0, 5.0, interval=0.1, what="messages to age out")
    assert stream.info().state.last_seq == 2


def test_limits_max_msgs_per_subject(env: Env) -> None:
    stream, p = env.stream(max_msgs_per_subject=2)
    for i in range(3):
        store(env.nc, f"{p}.k1", b"%d" % i)
    store(env.nc, f"{p}.k2")
    info = stream.info(subjects_filter=">")
    assert info.state.messages == 3
    assert info.state.subjects == {f"{p}.k1": 2, f"{p}.k2": 1}
    assert stream.get_msg(last_by_subject=f"{p}.k1").data == b"2"


def test_limits_max_consumers(env: Env) -> None:
    stream, _ = env.stream(max_consumers=1)
    stream.create_consumer(durable_name="one")
    with pytest.raises(MaximumConsumersLimitError) as exc:
        stream.create_consumer(durable_name="two")
    assert exc.value.err_code == 10026


# =========================================================================== discard policies


def test_discard_new_max_msgs(env: Env) -> None:
    stream, p = env.stream(max_msgs=2, discard=DiscardPolicy.NEW)
    store(env.nc, f"{p}.a")
    store(env.nc, f"{p}.a")
    with pytest.raises(MaxMsgsError) as exc:
        store(env.nc, f"{p}.a")
    assert (exc.value.code, exc.value.err_code) == (503, 10077)
    assert isinstance(exc.value, StoreFailedError)
    state = stream.info().state
    assert (state.messages, state.last_seq) == (2, 2)  # the old messages were kept
    stream.purge()
    assert store(env.nc, f"{p}.a").seq == 3  # accepted again once there is room


def test_discard_new_max_bytes(env: Env) -> None:
    stream, p = env.stream(max_bytes=500, discard=DiscardPolicy.NEW)
    with pytest.raises(MaxBytesError):
        for _ in range(20):
            store(env.nc, f"{p}.a", b"x" * 100)
    assert 0 < stream.info().state.bytes <= 500


def test_discard_new_per_subject_limit_is_an_upsert(env: Env) -> None:
    """discard new + one message per subject, without discard_new_per_subject: a new message
    on a subject replaces the old one (the per-subject discard stays 'old')."""
    stream, p = env.stream(max_msgs_per_subject=1, discard=DiscardPolicy.NEW)
    store(env.nc, f"{p}.k", b"v1")
    store(env.nc, f"{p}.k", b"v2")
    assert stream.info().state.messages == 1
    assert stream.get_msg(last_by_subject=f"{p}.k").data == b"v2"


def test_discard_new_per_subject_is_an_insert(env: Env) -> None:
    """...and with discard_new_per_subject the second message is refused (infinite dedup)."""
    stream, p = env.stream(max_msgs_per_subject=1, discard=DiscardPolicy.NEW, discard_new_per_subject=True)
    assert stream.cached_info.config.discard_new_per_subject is True
    store(env.nc, f"{p}.k", b"v1")
    with pytest.raises(MaxMsgsPerSubjectError) as exc:
        store(env.nc, f"{p}.k", b"v2")
    assert exc.value.err_code == 10077
    assert stream.get_msg(last_by_subject=f"{p}.k").data == b"v1"


def test_max_msg_size(env: Env) -> None:
    stream, p = env.stream(max_msg_size=64)
    store(env.nc, f"{p}.a", b"x" * 64)
    with pytest.raises(MsgSizeExceededError) as exc:
        store(env.nc, f"{p}.a", b"x" * 65)
    assert exc.value.err_code == 10054
    assert stream.info().state.messages == 1


# =========================================================================== deduplication


def test_duplicate_window(env: Env) -> None:
    stream, p = env.stream(duplicate_window=0.5)
    assert stream.cached_info.config.duplicate_window == 0.5
    first = store(env.nc, f"{p}.new", b"hello1", {"Nats-Msg-Id": "1"})
    for body in (b"hello2", b"hello3", b"hello4"):
        dup = store(env.nc, f"{p}.new", body, {"Nats-Msg-Id": "1"})
        assert dup.duplicate is True and dup.seq == first.seq
    assert first.duplicate is False
    assert stream.info().state.messages == 1
    assert stream.get_msg(first.seq).data == b"hello1"  # only the message id counts, not the body

    def stored_again() -> bool:
        return not store(env.nc, f"{p}.new", b"later", {"Nats-Msg-Id": "1"}).duplicate

    wait_until(stored_again, 5.0, interval=0.2, what="the duplicate window to pass")
    assert stream.info().state.messages == 2


def test_default_duplicate_window_is_two_minutes(env: Env) -> None:
    stream, _ = env.stream()
    assert stream.cached_info.config.duplicate_window == 120.0


# =========================================================================== work queue


def test_workqueue_one_consumer_per_subject(env: Env) -> None:
    stream, p = env.stream(retention=RetentionPolicy.WORKQUEUE)
    stream.create_consumer(durable_name="all")
    with pytest.raises(WorkQueueConsumerConflictError) as exc:
        stream.create_consumer(durable_name="second")
    assert exc.value.err_code == 10099

    filtered, fp = env.stream(retention=RetentionPolicy.WORKQUEUE)
    filtered.create_consumer(durable_name="a", filter_subject=f"{fp}.a.*")
    with pytest.raises(WorkQueueConsumerConflictError) as exc:
        filtered.create_consumer(durable_name="a1", filter_subject=f"{fp}.a.1")  # overlaps a.*
    assert exc.value.err_code == 10100
    filtered.create_consumer(durable_name="b", filter_subject=f"{fp}.b.*")  # disjoint: allowed
    assert sorted(filtered.consumer_names()) == ["a", "b"]


def test_workqueue_requires_deliver_all(env: Env) -> None:
    stream, _ = env.stream(retention=RetentionPolicy.WORKQUEUE)
    with pytest.raises(JetStreamAPIError) as exc:
        stream.create_consumer(durable_name="last", deliver_policy=DeliverPolicy.LAST)
    assert exc.value.err_code == 10101


def test_workqueue_message_removed_once_acked(env: Env) -> None:
    stream, p = env.stream(retention=RetentionPolicy.WORKQUEUE)
    stream.create_consumer(durable_name="worker")
    for i in range(3):
        store(env.nc, f"{p}.job", b"job%d" % i)
    assert stream.info().state.messages == 3
    [msg] = pull(env.nc, stream.name, "worker")
    assert msg.data == b"job0"
    assert stream.info().state.messages == 3  # delivered but not acknowledged: still stored
    ack(env.nc, msg)
    wait_until(lambda: stream.info().state.messages == 2, 2.0, what="the acked job to be removed")
    with pytest.raises(MsgNotFoundError):  # the message is gone from the stream
        stream.get_msg(1)


# =========================================================================== interest


def test_interest_without_consumers_drops_at_once(env: Env) -> None:
    stream, p = env.stream(retention=RetentionPolicy.INTEREST)
    ack_ = store(env.nc, f"{p}.a", b"nobody listens")
    assert ack_.seq == 1
    state = stream.info().state
    assert (state.messages, state.last_seq) == (0, 1)


def test_interest_removed_when_every_consumer_acked(env: Env) -> None:
    stream, p = env.stream(retention=RetentionPolicy.INTEREST)
    stream.create_consumer(durable_name="billing")
    stream.create_consumer(durable_name="shipping")
    stream.create_consumer(durable_name="other", filter_subject=f"{p}.other")
    store(env.nc, f"{p}.order", b"o1")
    assert stream.info().state.messages == 1
    [m1] = pull(env.nc, stream.name, "billing")
    ack(env.nc, m1)
    time.sleep(0.1)
    assert stream.info().state.messages == 1  # shipping has not acked yet
    [m2] = pull(env.nc, stream.name, "shipping")
    ack(env.nc, m2)
    wait_until(lambda: stream.info().state.messages == 0, 2.0, what="removal after the last ack")
    # A subject only a filtered consumer wants stays until that one acks.
    store(env.nc, f"{p}.other", b"x")
    assert stream.info().state.messages == 1


# =========================================================================== consumer bookkeeping


def test_consumer_delivered_ack_floor_and_redelivery(env: Env) -> None:
    """The deep dive's ORDERS / DISPATCH walk-through of consumer state."""
    stream, p = env.stream()
    c = stream.create_consumer(durable_name="DISPATCH", ack_wait=0.5, ack_policy=AckPolicy.EXPLICIT)
    info = c.info()
    assert (info.delivered.consumer_seq, info.delivered.stream_seq) == (0, 0)
    assert (info.ack_floor.consumer_seq, info.ack_floor.stream_seq) == (0, 0)
    assert info.num_pending == 0 and stream.info().state.consumer_count == 1

    store(env.nc, f"{p}.processed", b"order 4")
    # (the consumer counts a stored message asynchronously: a loaded server may answer the info
    # before it has; wait a bounded while for the count)
    wait_until(lambda: c.info().num_pending == 1, 5.0, what="the consumer counting the stored message")
    assert c.info().num_pending == 1
    [m] = pull(env.nc, stream.name, "DISPATCH")
    assert m.data == b"order 4"
    ack(env.nc, m)
    info = c.info()
    assert (info.delivered.consumer_seq, info.delivered.stream_seq) == (1, 1)
    assert (info.ack_floor.consumer_seq, info.ack_floor.stream_seq) == (1, 1)
    assert (info.num_ack_pending, info.num_redelivered) == (0, 0)

    store(env.nc, f"{p}.processed", b"order 5")
    [m] = pull(env.nc, stream.name, "DISPATCH")  # fetched, not acknowledged
    info = c.info()
    assert (info.delivered.consumer_seq, info.delivered.stream_seq) == (2, 2)
    assert (info.ack_floor.consumer_seq, info.ack_floor.stream_seq) == (1, 1)
    assert (info.num_ack_pending, info.num_redelivered) == (1, 0)

    time.sleep(0.7)  # ack_wait passes: the message is due again
    [again] = pull(env.nc, stream.name, "DISPATCH", expires=2.0)
    assert again.data == b"order 5"
    info = c.info()
    assert (info.delivered.consumer_seq, info.delivered.stream_seq) == (3, 2)  # each delivery counts
    assert (info.num_ack_pending, info.num_redelivered) == (1, 1)

    ack(env.nc, again)
    info = c.info()
    assert (info.num_ack_pending, info.num_redelivered) == (0, 0)
    assert info.ack_floor.stream_seq == 2 and info.num_pending == 0


# =========================================================================== starting positions


@pytest.fixture
def orders(env: Env) -> tuple[Stream, str, datetime]:
    """A stream with 20 'order N' messages on <p>.processed (and a few on <p>.other); the
    returned time lies between messages 10 and 11."""
    stream, p = env.stream()
    middle = datetime.now(UTC)
    for i in range(1, 21):
        if i == 11:
            time.sleep(0.05)
            middle = datetime.now(UTC)
            time.sleep(0.05)
        store(env.nc, f"{p}.processed", b"order %d" % i)
        if i % 5 == 0:
            store(env.nc, f"{p}.other", b"other %d" % i)
    return stream, p, middle


def _first(env: Env, stream: Stream, name: str) -> bytes:
    [m] = pull(env.nc, stream.name, name)
    return m.data


def test_deliver_policies(env: Env, orders: tuple[Stream, str, datetime]) -> None:
    stream, p, middle = orders
    f = f"{p}.processed"
    common: dict[str, Any] = {"filter_subject": f, "ack_policy": AckPolicy.NONE}
    stream.create_consumer(durable_name="ALL", deliver_policy=DeliverPolicy.ALL, **common)
    assert _first(env, stream, "ALL") == b"order 1"
    stream.create_consumer(durable_name="LAST", deliver_policy=DeliverPolicy.LAST, **common)
    assert _first(env, stream, "LAST") == b"order 20"
    seq_of_10 = stream.get_msg(1, next_by_subject=f).seq
    for _ in range(9):
        seq_of_10 = stream.get_msg(seq_of_10 + 1, next_by_subject=f).seq
    stream.create_consumer(
        durable_name="TEN", deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=seq_of_10, **common
    )
    assert _first(env, stream, "TEN") == b"order 10"
    stream.create_consumer(
        durable_name="SINCE", deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=middle, **common
    )
    assert _first(env, stream, "SINCE") == b"order 11"
    stream.create_consumer(durable_name="NEW", deliver_policy=DeliverPolicy.NEW, **common)
    assert pull(env.nc, stream.name, "NEW", expires=0.3) == []
    store(env.nc, f, b"order 21")
    assert _first(env, stream, "NEW") == b"order 21"


def test_deliver_last_per_subject(env: Env, orders: tuple[Stream, str, datetime]) -> None:
    stream, p, _ = orders
    stream.create_consumer(
        durable_name="LPS",
        deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
        filter_subject=f"{p}.*",
        ack_policy=AckPolicy.NONE,
    )
    got = sorted(m.data for m in pull(env.nc, stream.name, "LPS", batch=2))
    assert got == [b"order 20", b"other 20"]
