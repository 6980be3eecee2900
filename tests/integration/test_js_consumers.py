"""Consumer management against a real nats-server: create / update / create_or_update / get /
delete (``CONSUMER.CREATE.<stream>.<name>[.<filter>]`` with the ``action`` field), ephemeral
consumers, listings with paging, the Consumer handle, priority-group config and unpin, and the
typed errors of each path."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone

import pytest

from jscore.errors import (
    ConsumerDoesNotExistError,
    ConsumerExistsError,
    ConsumerNotFoundError,
    InvalidOptionError,
    JetStreamAPIError,
    JetStreamError,
    PriorityGroupNotFoundError,
    StreamNotFoundError,
    TimeoutError,
)
from jscore.models import (
    AckPolicy,
    ConsumerConfig,
    ConsumerInfo,
    DeliverPolicy,
    PriorityPolicy,
    ReplayPolicy,
    StorageType,
)
from jssync import Client, Consumer, Stream
from tests.integration import clients, collect

__all__ = ["clients"]

pytestmark = pytest.mark.timeout(90)

UTC = timezone.utc


class Env:
    def __init__(self, nc: Client) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        name = f"C{uuid.uuid4().hex[:10]}"
        self.prefix = name.lower()
        self.stream: Stream = self.js.create_stream(name=name, subjects=[f"{self.prefix}.>"], storage=StorageType.MEMORY)
        self.name = name

    def cleanup(self) -> None:
        try:
            self.js.delete_stream(self.name)
        except (JetStreamError, TimeoutError):
            pass


@pytest.fixture
def env(nats_url: str, clients: Callable[..., Client]) -> Iterator[Env]:
    e = Env(clients(nats_url))
    yield e
    e.cleanup()


def test_create_durable_consumer(env: Env) -> None:
    c = env.js.create_consumer(
        env.name,
        durable_name="D",
        ack_wait=10,
        max_deliver=5,
        backoff=[1, 2.5],
        description="dispatch",
        metadata={"team": "x"},
    )
    assert isinstance(c, Consumer) and c.name == "D" and c.stream_name == env.name
    cfg = c.cached_info.config
    assert cfg.durable_name == "D" and cfg.name == "D"
    assert cfg.ack_policy is AckPolicy.EXPLICIT  # the client's default
    assert cfg.deliver_policy is DeliverPolicy.ALL and cfg.replay_policy is ReplayPolicy.INSTANT
    assert cfg.ack_wait == 1.0  # the server takes ack_wait from the first backoff step
    assert cfg.backoff == [1.0, 2.5] and cfg.max_deliver == 5
    assert cfg.metadata is not None and cfg.metadata["team"] == "x"
    assert c.cached_info.created is not None and c.cached_info.created.tzinfo is not None
    assert c.cached_info.num_pending == 0


def test_create_with_config_object(env: Env) -> None:
    cfg = ConsumerConfig(name="N", ack_policy=AckPolicy.NONE, inactive_threshold=60)
    c = env.stream.create_consumer(cfg)
    assert c.cached_info.config.ack_policy is AckPolicy.NONE
    assert c.cached_info.config.inactive_threshold == 60.0
    assert c.cached_info.config.durable_name is None  # a named ephemeral consumer
    assert cfg.name == "N" and cfg.durable_name is None


def test_create_is_idempotent_and_refuses_a_different_config(env: Env) -> None:
    first = env.js.create_consumer(env.name, durable_name="D", filter_subject=f"{env.prefix}.a")
    again = env.js.create_consumer(env.name, durable_name="D", filter_subject=f"{env.prefix}.a")
    assert again.cached_info.created == first.cached_info.created
    with pytest.raises(ConsumerExistsError) as exc:
        env.js.create_consumer(env.name, durable_name="D", filter_subject=f"{env.prefix}.b")
    assert exc.value.err_code == 10148


def test_update_consumer(env: Env) -> None:
    env.js.create_consumer(env.name, durable_name="D", max_ack_pending=10)
    updated = env.js.update_consumer(env.name, durable_name="D", max_ack_pending=20, description="new")
    assert updated.cached_info.config.max_ack_pending == 20
    assert updated.cached_info.config.description == "new"
    info = env.js.consumer(env.name, "D").cached_info
    cfg = info.config
    cfg.max_ack_pending = 30  # edit the config read back and send it again
    assert env.stream.update_consumer(cfg).cached_info.config.max_ack_pending == 30


def test_update_missing_consumer(env: Env) -> None:
    with pytest.raises(ConsumerDoesNotExistError) as exc:
        env.js.update_consumer(env.name, durable_name="missing")
    assert isinstance(exc.value, ConsumerNotFoundError) and exc.value.err_code == 10149
    with pytest.raises(InvalidOptionError):
        env.js.update_consumer(env.name)  # no name: nothing to update


def test_create_or_update_consumer(env: Env) -> None:
    created = env.js.create_or_update_consumer(env.name, durable_name="D", max_ack_pending=5)
    updated = env.js.create_or_update_consumer(env.name, durable_name="D", max_ack_pending=6)
    assert updated.cached_info.config.max_ack_pending == 6
    assert updated.cached_info.created == created.cached_info.created


def test_ephemeral_consumer(env: Env) -> None:
    c = env.js.create_consumer(env.name)
    assert len(c.name) == 22 and c.cached_info.config.durable_name is None
    assert c.cached_info.config.inactive_threshold == 5.0  # the server's ephemeral default
    other = env.stream.create_consumer()
    assert other.name != c.name
    assert set(env.stream.consumer_names()) == {c.name, other.name}


def test_action_field_and_filter_in_subject(env: Env) -> None:
    monitor = env.nc.subscribe("$JS.API.CONSUMER.CREATE.>")
    env.nc.flush()
    env.js.create_consumer(env.name, durable_name="A", filter_subject=f"{env.prefix}.orders")
    env.js.create_or_update_consumer(env.name, durable_name="B", filter_subject=f"{env.prefix}.*")
    env.js.update_consumer(env.name, durable_name="A", filter_subject=f"{env.prefix}.orders", description="x")
    env.js.create_consumer(env.name, durable_name="C", filter_subjects=[f"{env.prefix}.x", f"{env.prefix}.y"])
    reqs = collect(monitor, 4)
    assert [m.subject for m in reqs] == [
        f"$JS.API.CONSUMER.CREATE.{env.name}.A.{env.prefix}.orders",
        f"$JS.API.CONSUMER.CREATE.{env.name}.B",
        f"$JS.API.CONSUMER.CREATE.{env.name}.A.{env.prefix}.orders",
        f"$JS.API.CONSUMER.CREATE.{env.name}.C",
    ]
    assert [m.data.rsplit(b'"action":', 1)[1] for m in reqs] == [b'"create"}', b'""}', b'"update"}', b'"create"}']
    assert reqs[0].data.startswith(b'{"stream_name":"%s","config":{"durable_name":"A"' % env.name.encode())


def test_get_and_delete_consumer(env: Env) -> None:
    env.js.create_consumer(env.name, durable_name="D")
    c = env.js.consumer(env.name, "D")
    assert isinstance(c.cached_info, ConsumerInfo) and c.name == "D"
    assert env.stream.consumer("D").name == "D"
    assert c.info().name == "D"
    c.delete()
    with pytest.raises(ConsumerNotFoundError) as exc:
        c.info()
    assert (exc.value.code, exc.value.err_code) == (404, 10014)
    with pytest.raises(ConsumerNotFoundError):
        env.js.consumer(env.name, "D")
    with pytest.raises(ConsumerNotFoundError):
        env.js.delete_consumer(env.name, "D")
    env.js.create_consumer(env.name, durable_name="E")
    env.stream.delete_consumer("E")
    assert list(env.stream.consumer_names()) == []


def test_consumer_on_missing_stream(env: Env) -> None:
    missing = f"missing{uuid.uuid4().hex[:8]}"
    with pytest.raises(StreamNotFoundError):
        env.js.create_consumer(missing, durable_name="D")
    with pytest.raises(StreamNotFoundError):
        env.js.consumer(missing, "D")
    with pytest.raises(StreamNotFoundError):
        list(env.js.consumer_names(missing))


def test_consumer_listing(env: Env) -> None:
    for n in ("A", "B", "C"):
        env.js.create_consumer(env.name, durable_name=n)
    assert sorted(env.stream.consumer_names()) == ["A", "B", "C"]
    infos = list(env.stream.consumers())
    assert sorted(i.name for i in infos) == ["A", "B", "C"]
    assert all(i.stream_name == env.name for i in infos)
    assert env.stream.info().state.consumer_count == 3


@pytest.mark.slow
def test_consumer_listings_page_past_256(env: Env) -> None:
    want = {f"c{i:03d}" for i in range(300)}
    for n in sorted(want):
        env.js.create_consumer(env.name, durable_name=n, mem_storage=True)
    monitor = env.nc.subscribe(f"$JS.API.CONSUMER.LIST.{env.name}")
    env.nc.flush()
    infos = list(env.stream.consumers())
    assert len(infos) == 300 and {i.name for i in infos} == want
    assert [m.data for m in collect(monitor, 2)] == [b'{"offset":0}', b'{"offset":256}']
    names = list(env.stream.consumer_names())
    assert len(names) == 300 and set(names) == want


def test_consumer_config_options_round_trip(env: Env) -> None:
    start = datetime.now(UTC) - timedelta(minutes=5)
    pause = datetime.now(UTC) + timedelta(hours=1)
    c = env.js.create_consumer(
        env.name,
        durable_name="O",
        deliver_policy=DeliverPolicy.BY_START_TIME,
        opt_start_time=start,
        filter_subjects=[f"{env.prefix}.a", f"{env.prefix}.b"],
        max_batch=10,
        max_expires=30,
        max_bytes=1024,
        max_waiting=64,
        headers_only=True,
        pause_until=pause,
    )
    info = c.cached_info
    cfg = info.config
    assert cfg.deliver_policy is DeliverPolicy.BY_START_TIME
    assert cfg.opt_start_time is not None and abs(cfg.opt_start_time - start) < timedelta(milliseconds=1)
    assert cfg.filter_subjects == [f"{env.prefix}.a", f"{env.prefix}.b"]
    assert (cfg.max_batch, cfg.max_expires, cfg.max_bytes, cfg.max_waiting) == (10, 30.0, 1024, 64)
    assert cfg.headers_only is True
    assert info.paused is True and info.pause_remaining is not None and info.pause_remaining > 3000
    assert cfg.pause_until is not None and abs(cfg.pause_until - pause) < timedelta(milliseconds=1)


def test_deliver_by_start_sequence_needs_opt_start_seq(env: Env) -> None:
    with pytest.raises(JetStreamAPIError):
        env.js.create_consumer(env.name, durable_name="X", deliver_policy=DeliverPolicy.BY_START_SEQUENCE)
    c = env.js.create_consumer(env.name, durable_name="X", deliver_policy="by_start_sequence", opt_start_seq=3)
    assert c.cached_info.config.opt_start_seq == 3


def test_priority_groups_and_unpin(env: Env) -> None:
    c = env.js.create_consumer(
        env.name,
        durable_name="P",
        priority_groups=["jobs"],
        priority_policy=PriorityPolicy.PINNED_CLIENT,
        priority_timeout=30,
    )
    cfg = c.cached_info.config
    assert cfg.priority_groups == ["jobs"]
    assert cfg.priority_policy is PriorityPolicy.PINNED_CLIENT and cfg.priority_timeout == 30.0
    groups = c.cached_info.priority_groups
    assert groups is not None and groups[0].group == "jobs" and groups[0].pinned_ts is None
    c.unpin("jobs")
    with pytest.raises(PriorityGroupNotFoundError):
        c.unpin("other")
    with pytest.raises(InvalidOptionError):
        c.unpin("not valid")
    with pytest.raises(InvalidOptionError):
        env.js.create_consumer(env.name, durable_name="Q", priority_groups=["x" * 17], priority_policy="overflow")


def test_overflow_priority_policy(env: Env) -> None:
    c = env.js.create_consumer(env.name, durable_name="O", priority_groups=["g"], priority_policy="overflow")
    assert c.cached_info.config.priority_policy is PriorityPolicy.OVERFLOW


def test_consumer_handle_repr(env: Env) -> None:
    c = env.js.create_consumer(env.name, durable_name="R")
    assert repr(c) == f"<Consumer 'R' of stream {env.name!r}>"
    assert c.jetstream is env.js
    assert callable(c.fetch) and callable(c.consume)


def test_name_and_durable_must_match(env: Env) -> None:
    with pytest.raises(InvalidOptionError):
        env.js.create_consumer(env.name, durable_name="A", name="B")
    c = env.js.create_consumer(env.name, durable_name="A", name="A")
    assert c.cached_info.config.durable_name == "A"
