"""The key-value store against a dict model on a real server (hypothesis stateful), and a basic
put / get / watch on an R3 bucket of the 3-node cluster."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

import jssync
from jscore.errors import KeyDeletedError, KeyExistsError, KeyNotFoundError, KeyWrongLastSequenceError
from jssync import Client, KeyValue, KeyValueOp
from jssync.server import NatsCluster
from tests.integration import clients, wait_until

__all__ = ["clients"]

pytestmark = pytest.mark.timeout(180)

KEYS = st.sampled_from(["a", "b.c", "b.d", "x/y=z"])
VALUES = st.binary(max_size=16)


def test_kv_matches_a_dict_model(nats_url: str) -> None:
    nc = jssync.connect(nats_url)
    counter = [0]

    class KvModel(RuleBasedStateMachine):
        kv: KeyValue

        @initialize()
        def make(self) -> None:
            counter[0] += 1
            name = f"MODEL{counter[0]}_{time.monotonic_ns() % 10**9}"
            self.kv = nc.jetstream().create_key_value(name, history=3)
            self.values: dict[str, bytes] = {}
            self.rev: dict[str, int] = {}  # the latest revision of a key, markers included
            self.hist: dict[str, list[Any]] = {}

        def _stored(self, key: str, rev: int, op: KeyValueOp, value: bytes) -> None:
            self.rev[key] = rev
            if op is KeyValueOp.PURGE:
                self.hist[key] = []
            self.hist.setdefault(key, []).append((op, value))
            self.hist[key] = self.hist[key][-3:]

        @rule(key=KEYS, value=VALUES)
        def put(self, key: str, value: bytes) -> None:
            self._stored(key, self.kv.put(key, value), KeyValueOp.PUT, value)
            self.values[key] = value

        @rule(key=KEYS, value=VALUES)
        def create(self, key: str, value: bytes) -> None:
            if key in self.values:
                with pytest.raises(KeyExistsError):
                    self.kv.create(key, value)
            else:
                self._stored(key, self.kv.create(key, value), KeyValueOp.PUT, value)
                self.values[key] = value

        @rule(key=KEYS, value=VALUES, stale=st.booleans())
        def update(self, key: str, value: bytes, stale: bool) -> None:
            last = self.rev.get(key, 0)
            if stale:
                with pytest.raises(KeyWrongLastSequenceError):
                    self.kv.update(key, value, last=last + 1000)
            else:
                self._stored(key, self.kv.update(key, value, last=last), KeyValueOp.PUT, value)
                self.values[key] = value

        @rule(key=KEYS)
        def delete(self, key: str) -> None:
            self.kv.delete(key)
            self._stored(key, self.kv.stream.info().state.last_seq, KeyValueOp.DEL, b"")
            self.values.pop(key, None)

        @rule(key=KEYS)
        def purge(self, key: str) -> None:
            self.kv.purge(key)
            self._stored(key, self.kv.stream.info().state.last_seq, KeyValueOp.PURGE, b"")
            self.values.pop(key, None)

        @rule(key=KEYS)
        def get(self, key: str) -> None:
            if key in self.values:
                e = self.kv.get(key)
                assert (e.value, e.revision) == (self.values[key], self.rev[key])
            elif key in self.rev:
                with pytest.raises(KeyDeletedError):
                    self.kv.get(key)
            else:
                with pytest.raises(KeyNotFoundError):
                    self.kv.get(key)

        @rule(key=KEYS)
        def history(self, key: str) -> None:
            if key not in self.hist:
                with pytest.raises(KeyNotFoundError):
                    self.kv.history(key)
                return
            assert [(e.operation, e.value) for e in self.kv.history(key)] == self.hist[key]

        @invariant()
        def keys_and_snapshot(self) -> None:
            if not hasattr(self, "kv"):
                return
            assert sorted(self.kv.keys()) == sorted(self.values)
            assert {k: e.value for k, e in self.kv.get_many(">").items()} == self.values

    try:
        run_state_machine_as_test(
            KvModel,
            settings=settings(max_examples=30, stateful_step_count=12, deadline=None,
                              suppress_health_check=list(HealthCheck)),
        )
    finally:
        nc.close(timeout=2.0)


def test_r3_bucket_put_get_watch(nats_cluster: NatsCluster, clients: Callable[..., Client]) -> None:
    nc = clients(nats_cluster.urls)
    js = nc.jetstream()
    kv = js.create_key_value("R3KV", replicas=3, history=2)
    assert js.stream_info("KV_R3KV").config.num_replicas == 3
    r = kv.put("k", b"1")
    # (a direct get may be answered by a replica that has not applied the put yet)
    wait_until(lambda: _rev(kv, "k") == r, 10, what="the put on the replica that answers")
    with kv.watch() as w:
        first = w.next(10.0)
        assert first is not None and first.value == b"1"
        assert w.next(10.0) is None
        kv.put("k", b"2")
        e = w.next(10.0)
        assert e is not None and e.value == b"2"
    other = clients(nats_cluster.urls[2]).jetstream().key_value("R3KV")
    wait_until(lambda: other.get_many(["k"]).get("k") is not None and other.get_many(["k"])["k"].value == b"2",
               10, what="the snapshot on another node")


def _rev(kv: KeyValue, key: str) -> int:
    try:
        return kv.get(key).revision
    except KeyNotFoundError:
        return 0
