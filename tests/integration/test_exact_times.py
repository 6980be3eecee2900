"""Exact server timestamps against a real nats-server (single server and an R3 stream on the
3-node cluster): every message's time, as the client reports it, finds that same message again.

The server stamps each message with nanoseconds and answers "the first message at or after"
a time. A time rounded to microseconds is later than the stamp for about half the messages,
and a time truncated to microseconds may name an earlier message stored within the same
microsecond: only the exact time always names the message. 200 messages published as fast as
the async window goes (so neighbours share microseconds), each looked up by the time read from
a direct get, a ``STREAM.MSG.GET``, a batched direct get and the metadata of a fetched message.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from jscore.errors import NatsError
from jscore.models import DeliverPolicy, StorageType
from jscore.times import NatsTime
from jssync import Client, JetStream
from jssync.server import NatsCluster
from tests.integration import clients, wait_until
from tests.integration._jspull import unique

__all__ = ["clients"]

pytestmark = pytest.mark.timeout(120)

N = 200


def _stream(js: JetStream, replicas: int) -> tuple[Any, str]:
    name = unique("T")
    for attempt in range(40):  # a fresh cluster's meta leader may still be settling
        try:
            stream = js.create_stream(
                name=name, subjects=[f"{name.lower()}.>"], storage=StorageType.MEMORY,
                num_replicas=replicas, allow_direct=True,
            )
            return stream, f"{name.lower()}.x"
        except NatsError:
            if attempt == 39:
                raise
            time.sleep(0.25)
    raise AssertionError("unreachable")


def _check_every_time_finds_its_message(nc: Client, replicas: int) -> None:
    js = nc.jetstream()
    stream, subject = _stream(js, replicas)
    futures = [js.publish_async(subject, b"m%d" % i) for i in range(N)]
    seqs = [f.result(timeout=10.0).seq for f in futures]
    assert seqs == list(range(1, N + 1))
    # Direct get may be answered by a follower: wait until every replica has all of them.
    wait_until(lambda: len(list(stream.direct_get_batch(seq=1, batch=N))) == N, 10.0, 0.05, "replicas caught up")

    by_direct = {m.seq: m.time for m in stream.direct_get_batch(seq=1, batch=N)}
    by_get = {seq: stream.get_msg(seq, direct=False).time for seq in (1, N // 2, N)}
    consumer = js.create_consumer(stream.name, durable_name="D", ack_policy="none")
    batch = consumer.fetch(N, expires=5.0)
    by_meta = {m.metadata.sequence.stream: m.metadata.timestamp for m in batch}
    assert len(by_direct) == N and len(by_meta) == N, (len(by_direct), len(by_meta), batch.error)

    same_microsecond = 0
    for seq in range(1, N + 1):
        t = by_direct[seq]
        assert isinstance(t, NatsTime)
        assert by_meta[seq] == t and by_meta[seq].ns == t.ns, seq  # type: ignore[attr-defined]
        if seq in by_get:
            assert by_get[seq] == t, seq
        if seq > 1 and (by_direct[seq - 1].ns // 1000) == t.ns // 1000:  # type: ignore[union-attr]
            same_microsecond += 1
        assert stream.direct_get(start_time=t).seq == seq, seq
        assert stream.direct_get(start_time=by_meta[seq]).seq == seq, seq
        [first] = list(stream.direct_get_batch(start_time=t, batch=1))
        assert first.seq == seq, seq
    # A consumer starting at a message's time starts at that message.
    for seq in (1, 77, N):
        c = js.create_consumer(
            stream.name, ack_policy="none", deliver_policy=DeliverPolicy.BY_START_TIME,
            opt_start_time=by_direct[seq], inactive_threshold=10.0,
        )
        assert c.cached_info.config.opt_start_time == by_direct[seq]
        # (a fetch ends at its first message: the long expiry only covers a new R3 consumer's
        # leader settling on a loaded machine)
        started = time.monotonic()
        got = list(c.fetch(1, expires=15.0))
        if not got:  # (seen twice in CI on a 3-node cluster under load: say what the consumer saw)
            info = c.info()
            raise AssertionError(
                f"no message from a consumer starting at seq {seq}'s time {by_direct[seq]!r} after "
                f"{time.monotonic() - started:.1f} s: num_pending={info.num_pending}, "
                f"delivered={info.delivered}, num_waiting={info.num_waiting}, cluster={info.cluster}"
            )
        [m] = got
        assert m.metadata.sequence.stream == seq
    print(f"{same_microsecond} of {N} messages shared a microsecond with the one before")


def test_every_message_time_finds_the_message(nats_url: str, clients: Callable[..., Client]) -> None:
    _check_every_time_finds_its_message(clients(nats_url), 1)


def test_every_message_time_finds_the_message_r3(nats_cluster: NatsCluster, clients: Callable[..., Client]) -> None:
    _check_every_time_finds_its_message(clients(nats_cluster.urls), 3)
