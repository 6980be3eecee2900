"""Consumers against a real nats-server: binding without CONSUMER.INFO (ADR-37's cross-account
case), pause / resume, ``JsMsg.ack_next`` (+NXT) and priority-group options checked before
anything is sent.

The bind test runs two accounts: account A owns the stream and the consumer and exports only
the consumer's ``MSG.NEXT`` subject (as a streamed service) and its ack subjects; account B
imports them and has no JetStream API at all. A client of B can pull and ack, but cannot read
the consumer's info.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone

import pytest

import jssync
from jscore.errors import (
    InvalidOptionError,
    MsgAlreadyAckedError,
    JetStreamNotEnabledError,
    NoConsumerInfoError,
    PullBadRequestError,
)
from jscore.models import PriorityPolicy
from jssync import Client, JsMsg
from jssync.server import NatsCluster, NatsServer
from tests.integration import EventLog, clients
from tests.integration._jspull import PullEnv, Recorder, Site, site_env, unique, wait_until

__all__ = ["clients"]

pytestmark = pytest.mark.timeout(90)

UTC = timezone.utc

ACCOUNTS = """
accounts {
  A: {
    jetstream: enabled
    users: [{user: a, password: a}]
    exports: [
      {service: "$JS.API.CONSUMER.MSG.NEXT.S.C", response_type: stream}
      {service: "$JS.ACK.S.C.>"}
    ]
  }
  B: {
    users: [{user: b, password: b}]
    imports: [
      {service: {account: A, subject: "$JS.API.CONSUMER.MSG.NEXT.S.C"}}
      {service: {account: A, subject: "$JS.ACK.S.C.>"}}
    ]
  }
}
"""


@pytest.fixture
def two_accounts(nats_server_factory: Callable[..., NatsServer]) -> NatsServer:
    return nats_server_factory(config=ACCOUNTS)


def _url(server: NatsServer, user: str) -> str:
    return f"nats://{user}:{user}@{server.host}:{server.port}"


def test_bind_pulls_and_acks_across_accounts_without_info(
    two_accounts: NatsServer, clients: Callable[..., Client]
) -> None:
    owner = clients(_url(two_accounts, "a"))
    ojs = owner.jetstream()
    ojs.create_stream(name="S", subjects=["s.>"], storage="memory")
    ojs.create_consumer("S", durable_name="C", ack_policy="explicit", ack_wait=30.0)
    for i in range(20):
        ojs.publish("s.x", b"m%d" % i)

    nc = clients(_url(two_accounts, "b"))
    js = nc.jetstream()
    with pytest.raises(JetStreamNotEnabledError):  # account B has no JetStream API at all
        js.consumer("S", "C")
    c = js.consumer("S", "C", bind=True)
    assert c.bound and not c.config_known and c.name == "C" and c.stream_name == "S"
    with pytest.raises(NoConsumerInfoError):
        c.cached_info
    with pytest.raises(JetStreamNotEnabledError):
        c.info()

    # fetch + ack
    got = list(c.fetch(5, expires=2.0))
    assert [m.data for m in got] == [b"m%d" % i for i in range(5)]
    for m in got:
        m.ack_sync(timeout=2.0)
    # next
    m = c.next(timeout=2.0)
    assert m.data == b"m5"
    m.ack()
    # consume
    rec = Recorder()
    with c.consume(rec, max_messages=4, expires=2.0) as cc:
        rec.wait_count(14, timeout=10.0)
        assert not cc.closed
    assert [x.data for x in rec.msgs()][:14] == [b"m%d" % i for i in range(6, 20)]
    # every ack reached account A's consumer
    wait_until(lambda: ojs.consumer_info("S", "C").num_ack_pending == 0, 5.0, 0.05, "acks applied")
    assert ojs.consumer_info("S", "C").ack_floor.stream_seq == 20

    # What needs the config is skipped while it is unknown: the server judges instead (it
    # ignores a group on a consumer without groups, but refuses thresholds: 400).
    stream_ = c.messages(group="nope", min_pending=1, expires=2.0)
    with pytest.raises(PullBadRequestError):
        stream_.next(timeout=5.0)
    # auto_progress needs ack_wait, which cannot be read here
    with pytest.raises(InvalidOptionError):
        c.consume(lambda msg: None, auto_progress=0.5)


def test_bind_on_the_same_account_learns_the_config_from_info(nats_url: str, clients: Callable[..., Client]) -> None:
    nc = clients(nats_url)
    env = PullEnv(nc, clients(nats_url))
    try:
        env.consumer("W", priority_groups=["jobs"], priority_policy=PriorityPolicy.OVERFLOW)
        env.publish(3)
        c = env.js.consumer(env.name, "W", bind=True)
        # unknown config: a fetch without the group goes out and the server refuses it (400)
        r = c.fetch(1, expires=1.0)
        r.messages()
        assert isinstance(r.error, PullBadRequestError) and "Priority Group missing" in str(r.error)
        c.info()
        assert c.config_known and c.cached_info.config.priority_groups == ["jobs"]
        with pytest.raises(InvalidOptionError, match="group"):
            c.fetch(1, expires=1.0)
        assert [m.data for m in c.fetch(3, expires=1.0, group="jobs")] == [b"m0", b"m1", b"m2"]
    finally:
        env.cleanup()


@pytest.fixture(params=["single", "cluster"])
def env(request: pytest.FixtureRequest, nats_url: str, clients: Callable[..., Client]) -> Iterator[PullEnv]:
    if request.param == "cluster":
        cluster: NatsCluster = request.getfixturevalue("nats_cluster")
        e = site_env(Site(cluster.urls, 3), clients)
    else:
        e = site_env(Site([nats_url], 1), clients)
    yield e
    e.cleanup()


def test_priority_options_are_refused_before_anything_is_sent(env: PullEnv) -> None:
    """ADR-42 / TESTPLAN 54 against the cached config; the monitor sees no pull at all."""
    plain = env.consumer("PLAIN")
    over = env.consumer("OVER", priority_groups=["jobs"], priority_policy=PriorityPolicy.OVERFLOW)
    pinned = env.consumer("PIN", priority_groups=["jobs"], priority_policy=PriorityPolicy.PINNED_CLIENT)
    prio = env.consumer("PRIO", priority_groups=["jobs"], priority_policy=PriorityPolicy.PRIORITIZED)
    wires = [env.pulls(c.name) for c in (plain, over, pinned, prio)]
    calls: list[Callable[[], object]] = [
        lambda: plain.fetch(1, group="jobs"),  # 2.15 would silently deliver
        lambda: plain.consume(lambda m: None, group="jobs"),
        lambda: over.fetch(1),  # 2.15: 400 Priority Group missing
        lambda: over.next(timeout=1.0, group="other"),  # 2.15: 400 Invalid Priority Group
        lambda: over.messages(group="jobs", priority=1),  # 2.15 ignores priority here
        lambda: pinned.consume(lambda m: None, group="jobs", min_pending=1),  # 2.15: 400
        lambda: pinned.fetch(1, group="jobs"),  # ADR-42: fetch not supported when pinned
        lambda: pinned.next(timeout=1.0, group="jobs"),
        lambda: prio.consume(lambda m: None, group="jobs", min_ack_pending=1),
        lambda: prio.fetch(1, group="x" * 17, priority=1),
        lambda: prio.fetch(1, group="jobs", priority=10),
    ]
    for call in calls:
        with pytest.raises(InvalidOptionError):
            call()
    env.mon.flush(timeout=2.0)
    env.nc.flush(timeout=2.0)
    time.sleep(0.1)  # (let the monitor's subscriptions see anything that was sent)
    assert [w.count for w in wires] == [0, 0, 0, 0]


def test_pause_and_resume(env: PullEnv) -> None:
    c = env.consumer("P")
    env.publish(2)
    until = datetime.now(UTC) + timedelta(minutes=10)
    r = c.pause(until)
    assert r.paused and r.pause_until is not None and abs((r.pause_until - until).total_seconds()) < 1e-3
    assert r.pause_remaining is not None and 500 < r.pause_remaining <= 600
    # (on a cluster the consumer's replicas apply the pause through its raft group: ask again)
    wait_until(lambda: c.info().paused, timeout=10, what="consumer info to show the pause")
    info = c.info()
    assert info.paused and info.config.pause_until == r.pause_until
    # Paused: a pull waits (heartbeats, no messages).
    assert c.fetch(2, expires=1.0).messages() == []
    log = EventLog()
    rec = Recorder()
    with c.consume(rec, expires=2.0, on_event=log):
        time.sleep(0.5)
        assert rec.count == 0
        r = c.resume()
        assert not r.paused and r.pause_until is None
        rec.wait_count(2, timeout=5.0)
    wait_until(lambda: not c.info().paused, timeout=10, what="consumer info to show the resume")
    # A time in the past resumes too; naive datetimes are refused before anything is sent.
    assert not c.pause(datetime(2000, 1, 1, tzinfo=UTC)).paused
    with pytest.raises(InvalidOptionError):
        c.pause(datetime(2099, 1, 1))
    with pytest.raises(InvalidOptionError):
        c.pause(None)  # type: ignore[arg-type]


def test_pinned_notifications_reach_the_iterator_and_on_event(env: PullEnv) -> None:
    """The pin belongs to the consume: its notifications come with it; the handle holds none."""
    c = env.consumer("N", priority_groups=["jobs"], priority_policy=PriorityPolicy.PINNED_CLIENT, priority_timeout=5.0)
    env.publish(3)
    seen: list[object] = []
    with c.messages(group="jobs", expires=2.0, on_event=seen.append) as it:
        msgs: list[JsMsg] = [it.next(timeout=5.0) for _ in range(3)]
        notes = it.notifications()
    pins = [n for n in notes if isinstance(n, jssync.PinIdChanged)]
    assert len(pins) == 1 and pins[0].pin_id == msgs[0].headers["Nats-Pin-Id"]  # type: ignore[index]
    assert seen == notes
    assert not hasattr(c, "_pins")


def test_ack_next_asks_for_the_next_message_on_the_consume_inbox(env: PullEnv) -> None:
    """A consume whose pulls never refill by themselves (threshold 0 of 3) gets the rest of the
    stream only through +NXT: every message arrives once, in order, every ack is applied."""
    c = env.consumer("NX", ack_wait=30.0)
    env.publish(12)
    acks = env.acks()
    pulls = env.pulls("NX")
    got: list[bytes] = []
    with c.messages(max_messages=3, threshold_messages=0, expires=5.0) as it:
        for _ in range(12):
            m = it.next(timeout=5.0)
            got.append(m.data)
            m.ack_next()
            with pytest.raises(MsgAlreadyAckedError):
                m.ack()
    assert got == [b"m%d" % i for i in range(12)]
    wait_until(lambda: _ack_floor(env, "NX") == 12, 5.0, 0.05, "every ack applied")
    # (the monitor's callback thread may still be behind the server on a loaded machine)
    wait_until(lambda: acks.count >= 12, 5.0, 0.05, "the monitor saw every ack")
    nxt = [d for d in acks.since(0.0) if d.startswith(b"+NXT")]
    assert nxt, "no +NXT was sent"
    assert all(json.loads(d[5:])["batch"] == 1 for d in nxt)
    # Fewer pulls than messages: +NXT did the refilling.
    assert pulls.count < 12


def test_ack_next_of_a_fetched_message_is_refused_before_anything_is_sent(env: PullEnv) -> None:
    c = env.consumer("NF")
    env.publish(1)
    [m] = list(c.fetch(1, expires=2.0))
    acks = env.acks()
    with pytest.raises(InvalidOptionError):
        m.ack_next()
    m.ack_sync(timeout=2.0)  # still acknowledgeable
    wait_until(lambda: acks.count >= 1, 2.0, 0.01, "the ack seen by the monitor")
    assert [d for d in acks.since(0.0)] == [b"+ACK"]


def _ack_floor(env: PullEnv, name: str) -> int:
    return int(env.js.consumer_info(env.name, name).ack_floor.stream_seq)
