"""Deduplication against a real nats-server: the Nats-Msg-Id window (the model deep dive) and the
infinite-deduplication walk-through of the blog, exactly (TESTPLAN 20 and 24)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pytest

import jssync
from jscore.errors import JetStreamAPIError, MaxMsgsPerSubjectError, StoreFailedError
from jscore.models import DiscardPolicy, PubAck
from jssync.client import Client
from jssync.server import NatsServer
from tests.integration._jspub import (
    PublishCounter,
    create_stream,
    delete_msg,
    delete_stream,
    get_msg,
    stream_state,
    unique,
    wait_until,
)

SECOND = 1_000_000_000

# `nats stream add dedup --discard-per-subject` with the answers of the blog: subjects foo.*,
# file storage, 1 replica, limits retention, discard new, no stream limits, per-subject limit 1,
# duplicate window left at its default (the CLI shows 2m0s), deletes and purges allowed.
BLOG_DEDUP_STREAM = {
    "subjects": ["foo.*"],
    "storage": "file",
    "num_replicas": 1,
    "retention": "limits",
    "discard": "new",
    "discard_new_per_subject": True,
    "max_msgs": -1,
    "max_msgs_per_subject": 1,
    "max_bytes": -1,
    "max_age": 0,
    "max_msg_size": -1,
    "allow_rollup_hdrs": False,
    "deny_delete": False,
    "deny_purge": False,
}


@pytest.fixture
def nc(nats_url: str) -> Iterator[Client]:
    client = jssync.connect(nats_url, name="test-js-dedup")
    yield client
    client.close()


# =============================================================================== Nats-Msg-Id window


def test_model_deep_dive_msg_id_dedup(nc: Client) -> None:
    """`nats req -H Nats-Msg-Id:1 ORDERS.new hello1` .. hello4: only the first is stored."""
    name = unique("ORDERS")
    create_stream(nc, name, subjects=[f"{name.lower()}.*"])
    try:
        js = nc.jetstream()
        acks = [js.publish(f"{name.lower()}.new", f"hello{i}".encode(), headers={"Nats-Msg-Id": "1"}) for i in range(1, 5)]
        assert [a.duplicate for a in acks] == [False, True, True, True]
        assert {a.seq for a in acks} == {1}
        state = stream_state(nc, name)
        assert state["messages"] == 1
        m = get_msg(nc, name, 1)
        assert m is not None and m["data"] == b"hello1"
        # the default window is 2 minutes
        info = json.loads(nc.request(f"$JS.API.STREAM.INFO.{name}", b"").data)
        assert info["config"]["duplicate_window"] == 120 * SECOND
    finally:
        delete_stream(nc, name)


def test_dedup_window_expires(nc: Client) -> None:
    """Outside the stream's duplicate window the same msg id is a new message."""
    name = unique("WIN")
    create_stream(nc, name, subjects=[f"{name.lower()}.*"], duplicate_window=1 * SECOND)
    try:
        js = nc.jetstream()
        first = js.publish(f"{name.lower()}.a", b"x", msg_id="same")
        assert js.publish(f"{name.lower()}.a", b"x", msg_id="same").duplicate
        acks: list[PubAck] = []

        def stored_again() -> bool:
            acks.append(js.publish(f"{name.lower()}.a", b"x", msg_id="same"))
            return not acks[-1].duplicate

        assert wait_until(stored_again, timeout=10, interval=0.25)
        assert acks[-1].seq == first.seq + 1
        assert stream_state(nc, name)["messages"] == 2
    finally:
        delete_stream(nc, name)


# =============================================================================== infinite dedup


def test_infinite_dedup_blog_walk_through(nats_server: NatsServer) -> None:
    """The blog's walk-through, step by step, on a fresh server."""
    with jssync.connect(nats_server.url) as nc:
        created = create_stream(nc, "dedup", **BLOG_DEDUP_STREAM)
        cfg = created.config
        assert cfg.discard == DiscardPolicy.NEW and cfg.discard_new_per_subject is True
        assert cfg.max_msgs_per_subject == 1 and cfg.duplicate_window == 120.0  # the 2m0s default
        assert created.state.messages == 0
        js = nc.jetstream()

        # nats req foo.1 one  ->  {"stream":"dedup", "seq":1}
        assert js.publish("foo.1", b"one") == PubAck(stream="dedup", seq=1)
        # nats req foo.2 one  ->  {"stream":"dedup", "seq":2}
        assert js.publish("foo.2", b"one") == PubAck(stream="dedup", seq=2)
        # nats req foo.1 two  ->  {"error":{"code":503,"err_code":10077,
        #                          "description":"maximum messages per subject exceeded"},...}
        with PublishCounter(nc, "foo.") as counter:
            with pytest.raises(MaxMsgsPerSubjectError) as ei:
                js.publish("foo.1", b"two")
            assert counter.count == 1, "the 'already published' answer is final, never retried"
        err = ei.value
        assert isinstance(err, StoreFailedError) and isinstance(err, JetStreamAPIError)
        assert (err.code, err.err_code, err.description) == (503, 10077, "maximum messages per subject exceeded")
        # the raw answer is the blog's, byte for byte in substance
        raw = json.loads(nc.request("foo.1", b"two").data)
        assert raw == {
            "error": {"code": 503, "err_code": 10077, "description": "maximum messages per subject exceeded"},
            "stream": "dedup",
            "seq": 0,
        }
        m = get_msg(nc, "dedup", 1)
        assert m is not None and m["subject"] == "foo.1" and m["data"] == b"one"

        # nats stream rmm dedup 2
        assert delete_msg(nc, "dedup", 2) == {"type": "io.nats.jetstream.api.v1.stream_msg_delete_response", "success": True}
        # nats req foo.2 two  ->  {"stream":"dedup", "seq":3}
        assert js.publish("foo.2", b"two") == PubAck(stream="dedup", seq=3)

        state = stream_state(nc, "dedup")
        assert state["messages"] == 2 and state["last_seq"] == 3


def test_infinite_dedup_survives_a_restart(nats_server: NatsServer) -> None:
    """The per-subject limit is not a time window: after a server restart foo.1 is still taken."""
    with jssync.connect(nats_server.url, reconnect_wait=0.1) as nc:
        create_stream(nc, "dedup", **BLOG_DEDUP_STREAM)
        js = nc.jetstream()
        js.publish("foo.1", b"one")
        nats_server.kill()
        nats_server.restart()
        assert wait_until(lambda: nc.is_connected, timeout=10)
        with pytest.raises(MaxMsgsPerSubjectError):
            js.publish("foo.1", b"again", timeout=10)


def test_infinite_dedup_eight_threads_race_one_new_subject(nats_server: NatsServer) -> None:
    """8 threads (each with its own connection) publish to the same new subject at once:
    exactly one wins, the 7 others get MaxMsgsPerSubjectError; one message stored."""
    clients = [jssync.connect(nats_server.url, name=f"racer-{i}") for i in range(8)]
    try:
        create_stream(clients[0], "dedup", **BLOG_DEDUP_STREAM)
        for round_ in range(3):
            subject = f"foo.race{round_}"
            barrier = threading.Barrier(8)
            wins: list[PubAck] = []
            refusals: list[BaseException] = []
            others: list[BaseException] = []
            lock = threading.Lock()

            def racer(c: Client, i: int) -> None:
                js = c.jetstream()
                barrier.wait(5)
                try:
                    ack = js.publish(subject, f"racer {i}".encode())
                except MaxMsgsPerSubjectError as exc:
                    with lock:
                        refusals.append(exc)
                except BaseException as exc:  # noqa: BLE001 - reported below
                    with lock:
                        others.append(exc)
                else:
                    with lock:
                        wins.append(ack)

            threads = [threading.Thread(target=racer, args=(c, i)) for i, c in enumerate(clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(20)
            assert others == []
            assert len(wins) == 1 and len(refusals) == 7, (wins, refusals)
            assert all(e.err_code == 10077 for e in refusals if isinstance(e, JetStreamAPIError))
            m = get_msg(clients[0], "dedup", wins[0].seq)
            assert m is not None and m["subject"] == subject
        assert stream_state(clients[0], "dedup")["messages"] == 3
    finally:
        for c in clients:
            c.close()


def test_infinite_dedup_async(nats_server: NatsServer) -> None:
    """The same answers through publish_async: the refusal is final (not retried)."""
    with jssync.connect(nats_server.url) as nc:
        create_stream(nc, "dedup", **BLOG_DEDUP_STREAM)
        js = nc.jetstream()
        futs = [js.publish_async(f"foo.{i % 10}", f"{i}".encode()) for i in range(30)]
        js.publish_async_complete(timeout=10)
        ok = [f for f in futs if f.error is None]
        refused = [f for f in futs if isinstance(f.error, MaxMsgsPerSubjectError)]
        assert len(ok) == 10 and len(refused) == 20
        assert sorted(f.subject for f in ok) == [f"foo.{i}" for i in range(10)]
        assert [f.payload for f in ok] == [f"{i}".encode() for i in range(10)], "the first one per subject wins"
        assert js._pub().stats.retried == 0
        assert stream_state(nc, "dedup")["messages"] == 10


def test_refusal_is_final_for_every_racer_of_a_taken_id(nats_server: NatsServer) -> None:
    """An insert into a taken id fails on its single request (no window to wait for, no retry)."""
    with jssync.connect(nats_server.url) as nc:
        create_stream(nc, "dedup", **BLOG_DEDUP_STREAM)
        js = nc.jetstream()
        js.publish("foo.k", b"1")
        with PublishCounter(nc, "foo.") as counter:
            for _ in range(5):
                with pytest.raises(MaxMsgsPerSubjectError):
                    js.publish("foo.k", b"2")
            assert counter.count == 5


def test_per_message_ttl_releases_a_taken_id(nats_server: NatsServer) -> None:
    """The blog's closing idea: with allow_msg_ttl, an id (a lock) taken with a TTL is released
    when the message expires."""
    with jssync.connect(nats_server.url) as nc:
        create_stream(nc, "locks", **{**BLOG_DEDUP_STREAM, "subjects": ["lock.*"], "allow_msg_ttl": True})
        js = nc.jetstream()
        first = js.publish("lock.job-42", b"worker-a", ttl=1)
        with pytest.raises(MaxMsgsPerSubjectError):
            js.publish("lock.job-42", b"worker-b", ttl=1)
        acks: list[PubAck] = []

        def taken_by_b() -> bool:
            try:
                acks.append(js.publish("lock.job-42", b"worker-b", ttl=1))
            except MaxMsgsPerSubjectError:
                return False
            return True

        assert wait_until(taken_by_b, timeout=10, interval=0.2)
        assert acks[-1].seq > first.seq
