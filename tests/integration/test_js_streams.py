"""Stream management against a real nats-server: create / update / create_or_update / get /
delete, listings with paging, stream_name_by_subject, account info, purge, get_msg (through
``STREAM.MSG.GET`` and direct get), delete_msg, single direct get, domain and api_prefix, and
every error path with its typed error.

Messages are stored with plain core requests (the PubAck is decoded with jscore), so these tests
do not depend on ``js.publish``.
"""

from __future__ import annotations

import builtins
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

import jssync
from jscore.errors import (
    BadSubjectError,
    InvalidOptionError,
    JetStreamAPIError,
    JetStreamError,
    JetStreamNotEnabledError,
    JetStreamNotEnabledForAccountError,
    MsgNotFoundError,
    StreamNameInUseError,
    StreamNotFoundError,
    StreamSubjectOverlapError,
    TimeoutError,
)
from jscore.models import (
    DiscardPolicy,
    PubAck,
    RetentionPolicy,
    StorageType,
    StreamConfig,
    StreamInfo,
    decode_pub_ack,
)
from jssync import Client, JetStream, Stream
from jssync.server import NatsCluster, NatsServer
from tests.integration import clients, collect, wait_until

__all__ = ["clients"]

pytestmark = pytest.mark.timeout(90)

UTC = timezone.utc


def _uid() -> str:
    return uuid.uuid4().hex[:10]


def store(nc: Client, subject: str, payload: bytes = b"", headers: dict[str, str] | None = None) -> PubAck:
    """Store one message with a core request and decode its PubAck."""
    return decode_pub_ack(nc.request(subject, payload, headers=headers, timeout=5).data)


class Env:
    """A client, its JetStream context, and unique stream names deleted at teardown."""

    def __init__(self, nc: Client) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self.created: list[str] = []

    def name(self) -> str:
        n = f"T{_uid()}"
        self.created.append(n)
        return n

    def stream(self, **fields: Any) -> tuple[Stream, str]:
        """A new memory stream on subjects ``<prefix>.>``; returns (stream, prefix)."""
        name = self.name()
        prefix = name.lower()
        fields.setdefault("subjects", [f"{prefix}.>"])
        fields.setdefault("storage", StorageType.MEMORY)
        return self.js.create_stream(name=name, **fields), prefix

    def cleanup(self) -> None:
        for name in self.created:
            try:
                self.js.delete_stream(name)
            except (StreamNotFoundError, JetStreamError, TimeoutError):
                pass


@pytest.fixture
def env(nats_url: str, clients: Callable[..., Client]) -> Iterator[Env]:
    e = Env(clients(nats_url))
    yield e
    e.cleanup()


# =========================================================================== create / update / get / delete


def test_create_stream_with_keywords(env: Env) -> None:
    name = env.name()
    stream = env.js.create_stream(
        name=name, subjects=[f"{name}.>"], max_msgs=100, max_age=3600, duplicate_window=30.0, description="d"
    )
    assert isinstance(stream, Stream) and stream.name == name
    cfg = stream.cached_info.config
    assert cfg.name == name and cfg.subjects == [f"{name}.>"]
    assert cfg.max_msgs == 100 and cfg.max_age == 3600.0 and cfg.duplicate_window == 30.0
    assert cfg.description == "d"
    assert cfg.retention is RetentionPolicy.LIMITS and cfg.storage is StorageType.FILE  # server defaults
    info = stream.cached_info
    assert info.created is not None and info.created.tzinfo is not None
    assert info.state.messages == 0 and info.state.first_ts is None


def test_create_stream_with_config_object_and_override(env: Env) -> None:
    name = env.name()
    base = StreamConfig(name=name, subjects=[f"{name}.a"], storage=StorageType.MEMORY)
    stream = env.js.create_stream(base, max_msgs_per_subject=3)
    cfg = stream.cached_info.config
    assert cfg.storage is StorageType.MEMORY and cfg.max_msgs_per_subject == 3
    assert base.max_msgs_per_subject is None  # the caller's config is not modified


def test_create_stream_is_idempotent_and_refuses_a_different_config(env: Env) -> None:
    stream, prefix = env.stream()
    again = env.js.create_stream(name=stream.name, subjects=[f"{prefix}.>"], storage=StorageType.MEMORY)
    assert again.cached_info.created == stream.cached_info.created
    with pytest.raises(StreamNameInUseError) as exc:
        env.js.create_stream(name=stream.name, subjects=[f"{prefix}.>"], storage=StorageType.MEMORY, max_msgs=5)
    assert (exc.value.code, exc.value.err_code) == (400, 10058)


def test_create_stream_with_overlapping_subjects(env: Env) -> None:
    _, prefix = env.stream()
    with pytest.raises(StreamSubjectOverlapError):
        env.js.create_stream(name=env.name(), subjects=[f"{prefix}.x"])


def test_update_stream(env: Env) -> None:
    stream, prefix = env.stream(max_msgs=10)
    updated = env.js.update_stream(name=stream.name, subjects=[f"{prefix}.>"], storage=StorageType.MEMORY, max_msgs=20)
    assert updated.cached_info.config.max_msgs == 20
    cfg = updated.cached_info.config
    cfg.max_msgs = 30  # a config read back from the server can be edited and sent again
    assert env.js.update_stream(cfg).cached_info.config.max_msgs == 30
    assert stream.cached_info.config.max_msgs == 10  # handles are not refreshed behind your back
    assert stream.info().config.max_msgs == 30
    assert stream.cached_info.config.max_msgs == 30


def test_update_missing_stream(env: Env) -> None:
    with pytest.raises(StreamNotFoundError) as exc:
        env.js.update_stream(name=f"missing{_uid()}", subjects=[f"m{_uid()}"])
    assert (exc.value.code, exc.value.err_code) == (404, 10059)


def test_create_or_update_stream(env: Env) -> None:
    name = env.name()
    created = env.js.create_or_update_stream(name=name, subjects=[f"{name}.>"], storage=StorageType.MEMORY)
    assert created.cached_info.config.max_msgs == -1
    updated = env.js.create_or_update_stream(
        name=name, subjects=[f"{name}.>"], storage=StorageType.MEMORY, max_msgs=7
    )
    assert updated.cached_info.config.max_msgs == 7
    assert updated.cached_info.created == created.cached_info.created


def test_get_and_delete_stream(env: Env) -> None:
    stream, _ = env.stream()
    got = env.js.stream(stream.name)
    assert got.name == stream.name and got.cached_info.config == stream.cached_info.config
    env.js.delete_stream(stream.name)
    with pytest.raises(StreamNotFoundError):
        env.js.stream(stream.name)
    with pytest.raises(StreamNotFoundError):
        env.js.delete_stream(stream.name)
    with pytest.raises(StreamNotFoundError):
        stream.info()


def test_missing_name_and_unknown_field(env: Env) -> None:
    with pytest.raises(InvalidOptionError):
        env.js.create_stream(subjects=["x"])
    with pytest.raises(TypeError):
        env.js.create_stream(name="S", no_such_field=1)
    with pytest.raises(InvalidOptionError):
        env.js.create_stream("S")  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["", "a.b", "a b", "a*", "a>", "a/b", "a\\b", "a\tb", "x" * 256])
def test_invalid_names_rejected_before_any_request(nats_url: str, clients: Callable[..., Client], bad: str) -> None:
    nc = clients(nats_url)
    js = nc.jetstream()
    nc.close()  # a request would fail with ConnectionClosedError: validation must come first
    for call in (
        lambda: js.create_stream(name=bad),
        lambda: js.update_stream(name=bad),
        lambda: js.create_or_update_stream(name=bad),
        lambda: js.stream(bad),
        lambda: js.delete_stream(bad),
        lambda: js.create_consumer(bad, durable_name="C"),
        lambda: js.create_consumer("S", durable_name=bad),
        lambda: js.consumer("S", bad),
        lambda: js.delete_consumer(bad, "C"),
        lambda: list(js.consumers(bad)),
    ):
        with pytest.raises(InvalidOptionError):
            call()


def test_invalid_subjects_rejected_before_any_request(nats_url: str, clients: Callable[..., Client]) -> None:
    nc = clients(nats_url)
    js = nc.jetstream()
    nc.close()
    with pytest.raises(BadSubjectError):
        js.create_stream(name="S", subjects=["a b"])
    with pytest.raises(BadSubjectError):
        js.create_stream(name="S", subjects=["a.>.b"])
    with pytest.raises(BadSubjectError):
        list(js.stream_names(subject="a..b"))
    with pytest.raises(BadSubjectError):
        js.stream_name_by_subject("")
    with pytest.raises(BadSubjectError):
        js.create_consumer("S", durable_name="C", filter_subject="test A")


# =========================================================================== listings


def test_streams_and_names_on_shared_server(env: Env) -> None:
    a, pa = env.stream()
    b, _ = env.stream()
    names = set(env.js.stream_names())
    assert {a.name, b.name} <= names
    infos = {i.config.name: i for i in env.js.streams()}
    assert {a.name, b.name} <= set(infos)
    assert isinstance(infos[a.name], StreamInfo)
    assert list(env.js.stream_names(subject=f"{pa}.x")) == [a.name]
    assert [i.config.name for i in env.js.streams(subject=f"{pa}.>")] == [a.name]
    assert list(env.js.stream_names(subject=f"nothing{_uid()}.x")) == []


def test_stream_name_by_subject(env: Env) -> None:
    stream, prefix = env.stream()
    assert env.js.stream_name_by_subject(f"{prefix}.orders.1") == stream.name
    with pytest.raises(StreamNotFoundError):
        env.js.stream_name_by_subject(f"nobody{_uid()}.x")


@pytest.mark.slow
def test_listings_page_past_256(nats_server: NatsServer, clients: Callable[..., Client]) -> None:
    """STREAM.LIST answers 256 infos per page, STREAM.NAMES 1024 names: 300 streams need two
    LIST pages; the iterators must return each stream exactly once."""
    nc = clients(nats_server.url)
    js = nc.jetstream()
    want = {f"P{i:03d}" for i in range(300)}
    for name in sorted(want):
        js.create_stream(name=name, subjects=[f"p.{name}"], storage=StorageType.MEMORY)
    monitor = nc.subscribe("$JS.API.STREAM.>")
    nc.flush()
    infos = list(js.streams())
    assert [i.config.name for i in infos].count("P000") == 1
    assert {i.config.name for i in infos} == want and len(infos) == 300
    offsets = [m.data for m in collect(monitor, 2, timeout=2)]
    assert offsets == [b'{"offset":0}', b'{"offset":256}']
    names = list(js.stream_names())
    assert sorted(names) == sorted(want) and len(names) == 300
    assert list(js.stream_names(subject="p.P123")) == ["P123"]
    assert js.account_info().streams == 300


def test_account_info(nats_server: NatsServer, clients: Callable[..., Client]) -> None:
    nc = clients(nats_server.url)
    js = nc.jetstream()
    before = js.account_info()
    assert before.streams == 0 and before.limits.max_streams == -1 and before.api.level >= 1
    js.create_stream(name="A", subjects=["a.>"], storage=StorageType.MEMORY)
    js.create_consumer("A", durable_name="C")
    store(nc, "a.1", b"x" * 100)
    after = js.account_info()
    assert after.streams == 1 and after.consumers == 1
    assert after.memory > 0 and after.api.total > before.api.total


# =========================================================================== purge


def test_purge_all_subject_seq_keep(env: Env) -> None:
    stream, p = env.stream()
    for i in range(10):
        store(env.nc, f"{p}.{'a' if i % 2 else 'b'}", b"%d" % i)  # seq 1..10; a = even seqs
    assert stream.purge(subject=f"{p}.a") == 5
    assert stream.info().state.messages == 5
    assert stream.purge(seq=5) == 2  # b messages at seq 1 and 3
    assert stream.purge(keep=1) == 2  # of seq 5, 7, 9: keep 9
    state = stream.info().state
    assert (state.messages, state.first_seq, state.last_seq) == (1, 9, 10)
    assert stream.purge() == 1
    assert stream.info().state.messages == 0
    assert stream.purge() == 0
    with pytest.raises(InvalidOptionError):
        stream.purge(seq=1, keep=1)


def test_purge_wildcard_subject(env: Env) -> None:
    stream, p = env.stream()
    for s in ("x.1", "x.2", "y.1"):
        store(env.nc, f"{p}.{s}")
    assert stream.purge(subject=f"{p}.x.*") == 2
    assert stream.info().state.messages == 1
    for s in ("x.1", "x.1", "x.2", "x.2"):
        store(env.nc, f"{p}.{s}")
    # keep counts the messages matching the filter as a whole, not per subject
    assert stream.purge(subject=f"{p}.x.*", keep=1) == 3
    assert stream.info(subjects_filter=">").state.subjects == {f"{p}.x.2": 1, f"{p}.y.1": 1}


def test_purge_denied(env: Env) -> None:
    stream, p = env.stream(deny_purge=True)
    store(env.nc, f"{p}.a")
    with pytest.raises(JetStreamAPIError) as exc:
        stream.purge()
    assert exc.value.err_code != 0


def test_purge_missing_stream(env: Env) -> None:
    stream, _ = env.stream()
    env.js.delete_stream(stream.name)
    with pytest.raises(StreamNotFoundError):
        stream.purge()


# =========================================================================== get / delete messages


def _fill(env: Env, p: str) -> None:
    store(env.nc, f"{p}.a", b"a1", {"X-Id": "1"})  # seq 1
    store(env.nc, f"{p}.b", b"b1")  # seq 2
    store(env.nc, f"{p}.a", b"a2", {"X-Id": "3"})  # seq 3
    store(env.nc, f"{p}.c", b"c1")  # seq 4


@pytest.mark.parametrize("direct", [False, True])
def test_get_msg(env: Env, direct: bool) -> None:
    stream, p = env.stream(allow_direct=True)
    t0 = datetime.now(UTC) - timedelta(seconds=1)
    _fill(env, p)
    m = stream.get_msg(1, direct=direct)
    assert (m.subject, m.seq, m.data, m.stream) == (f"{p}.a", 1, b"a1", stream.name)
    assert m.headers is not None and m.headers["X-Id"] == "1" and "Nats-Stream" not in m.headers
    assert m.time is not None and t0 < m.time < datetime.now(UTC) + timedelta(seconds=1)
    assert stream.get_msg(2, direct=direct).headers is None
    last = stream.get_msg(last_by_subject=f"{p}.a", direct=direct)
    assert (last.seq, last.data) == (3, b"a2")
    nxt = stream.get_msg(2, next_by_subject=f"{p}.a", direct=direct)
    assert nxt.seq == 3
    assert stream.get_msg(next_by_subject=f"{p}.c", direct=direct).seq == 4
    assert stream.get_msg(last_by_subject=f"{p}.*", direct=direct).seq == 4  # wildcard: in the body
    with pytest.raises(MsgNotFoundError):
        stream.get_msg(99, direct=direct)
    with pytest.raises(MsgNotFoundError):
        stream.get_msg(last_by_subject=f"{p}.zzz", direct=direct)
    with pytest.raises(MsgNotFoundError):
        stream.get_msg(4, next_by_subject=f"{p}.a", direct=direct)


def test_get_msg_same_result_both_ways(env: Env) -> None:
    stream, p = env.stream(allow_direct=True)
    _fill(env, p)
    for seq in (1, 2, 3, 4):
        assert stream.get_msg(seq, direct=False) == stream.get_msg(seq, direct=True)


def test_get_msg_chooses_direct_get_from_the_stream_config(env: Env) -> None:
    direct_stream, dp = env.stream(allow_direct=True)
    plain_stream, pp = env.stream()
    store(env.nc, f"{dp}.a", b"d")
    store(env.nc, f"{pp}.a", b"p")
    monitor = env.nc.subscribe("$JS.API.>")
    env.nc.flush()
    assert direct_stream.get_msg(1).data == b"d"
    assert plain_stream.get_msg(1).data == b"p"
    subjects = [m.subject for m in collect(monitor, 2)]
    assert subjects == [f"$JS.API.DIRECT.GET.{direct_stream.name}", f"$JS.API.STREAM.MSG.GET.{plain_stream.name}"]


def test_get_msg_deleted_seq(env: Env) -> None:
    stream, p = env.stream(allow_direct=True)
    _fill(env, p)
    stream.delete_msg(2)
    for direct in (False, True):
        with pytest.raises(MsgNotFoundError):
            stream.get_msg(2, direct=direct)


def test_get_msg_validation(env: Env) -> None:
    stream, _ = env.stream()
    with pytest.raises(InvalidOptionError):
        stream.get_msg()
    with pytest.raises(InvalidOptionError):
        stream.get_msg(1, last_by_subject="x")
    with pytest.raises(InvalidOptionError):
        stream.get_msg(0)


@pytest.mark.parametrize("erase", [False, True])
def test_delete_msg(env: Env, erase: bool) -> None:
    stream, p = env.stream()
    _fill(env, p)
    stream.delete_msg(2, erase=erase)
    info = stream.info(deleted_details=True)
    assert info.state.messages == 3 and info.state.num_deleted == 1 and info.state.deleted == [2]
    with pytest.raises(MsgNotFoundError):
        stream.delete_msg(2)
    with pytest.raises(MsgNotFoundError):
        stream.delete_msg(99)


def test_delete_msg_denied(env: Env) -> None:
    stream, p = env.stream(deny_delete=True)
    store(env.nc, f"{p}.a")
    with pytest.raises(JetStreamAPIError) as exc:
        stream.delete_msg(1)
    assert not isinstance(exc.value, MsgNotFoundError)
    assert "not permitted" in exc.value.description


def test_info_subjects_filter(env: Env) -> None:
    stream, p = env.stream()
    _fill(env, p)
    info = stream.info(subjects_filter=">")
    assert info.state.subjects == {f"{p}.a": 2, f"{p}.b": 1, f"{p}.c": 1}
    assert stream.info(subjects_filter=f"{p}.a").state.subjects == {f"{p}.a": 2}
    assert stream.info().state.subjects is None
    assert info.state.num_subjects == 3


# =========================================================================== direct get


def test_direct_get_forms_on_the_wire(env: Env) -> None:
    stream, p = env.stream(allow_direct=True)
    _fill(env, p)
    monitor = env.nc.subscribe(f"$JS.API.DIRECT.GET.{stream.name}.>")
    plain = env.nc.subscribe(f"$JS.API.DIRECT.GET.{stream.name}")
    env.nc.flush()
    m = stream.direct_get(last_by_subject=f"{p}.a")
    assert (m.seq, m.data, m.stream, m.subject) == (3, b"a2", stream.name, f"{p}.a")
    req = monitor.next_msg(timeout=2)
    assert req.subject == f"$JS.API.DIRECT.GET.{stream.name}.{p}.a" and req.data == b""
    assert stream.direct_get(2).data == b"b1"
    assert plain.next_msg(timeout=2).data == b'{"seq":2}'
    assert stream.direct_get(1, next_by_subject=f"{p}.c").seq == 4
    assert plain.next_msg(timeout=2).data == b'{"seq":1,"next_by_subj":"' + f"{p}.c".encode() + b'"}'


def test_direct_get_start_time(env: Env) -> None:
    stream, p = env.stream(allow_direct=True)
    store(env.nc, f"{p}.a", b"old")
    time.sleep(0.05)
    middle = datetime.now(UTC)
    time.sleep(0.05)
    store(env.nc, f"{p}.a", b"new")
    store(env.nc, f"{p}.b", b"newer")
    assert stream.direct_get(start_time=middle).data == b"new"
    assert stream.direct_get(start_time=middle, next_by_subject=f"{p}.b").data == b"newer"
    assert stream.direct_get(start_time=datetime(2000, 1, 1, tzinfo=UTC)).data == b"old"
    with pytest.raises(MsgNotFoundError):
        stream.direct_get(start_time=datetime.now(UTC) + timedelta(hours=1))


def test_direct_get_not_found(env: Env) -> None:
    stream, p = env.stream(allow_direct=True)
    store(env.nc, f"{p}.a")
    with pytest.raises(MsgNotFoundError) as exc:
        stream.direct_get(5)
    assert exc.value.code == 404
    with pytest.raises(MsgNotFoundError):
        stream.direct_get(last_by_subject=f"{p}.none")
    with pytest.raises(MsgNotFoundError):
        stream.direct_get(next_by_subject=f"{p}.none")


def test_direct_get_without_allow_direct(env: Env) -> None:
    stream, p = env.stream()
    store(env.nc, f"{p}.a")
    with pytest.raises(JetStreamError, match="allow_direct"):
        stream.direct_get(1)
    with pytest.raises(JetStreamError):
        stream.get_msg(1, direct=True)
    assert stream.get_msg(1).seq == 1  # the stream's config picks STREAM.MSG.GET


def test_direct_get_max_msgs_per_subject_does_not_enable_direct(env: Env) -> None:
    """REFERENCE.md: on 2.15.1 allow_direct is NOT switched on by max_msgs_per_subject > 0."""
    stream, _ = env.stream(max_msgs_per_subject=1)
    assert stream.cached_info.config.allow_direct is False


# =========================================================================== domain, prefix, availability


def test_domain(nats_server_factory: Callable[..., NatsServer], clients: Callable[..., Client]) -> None:
    # (The server maps $JS.<domain>.API.> onto $JS.API.> internally, so a subscriber cannot
    # observe the domain subjects; a wrong domain having no responders shows they are used.)
    server = nats_server_factory(jetstream_config="domain: hub")
    nc = clients(server.url)
    js = nc.jetstream(domain="hub")
    assert js.api_prefix == "$JS.hub.API."
    stream = js.create_stream(name="D", subjects=["d.>"], allow_direct=True)
    ack = store(nc, "d.1", b"x")
    assert ack.domain == "hub"
    assert js.account_info().domain == "hub"
    assert stream.cached_info.config.name == "D"
    assert stream.get_msg(1).data == b"x"
    assert stream.direct_get(last_by_subject="d.1").data == b"x"
    assert stream.get_msg(1, direct=False).data == b"x"
    assert list(js.stream_names()) == ["D"]
    consumer = js.create_consumer("D", durable_name="C")
    assert js.consumer("D", "C").name == consumer.name
    with pytest.raises(JetStreamNotEnabledError) as exc:
        nc.jetstream(domain="elsewhere").account_info()
    assert exc.value.err_code == 0 and "no responders" in exc.value.description


def test_api_prefix_through_an_account_import(
    nats_server_factory: Callable[..., NatsServer], clients: Callable[..., Client]
) -> None:
    server = nats_server_factory(
        config="""
accounts {
  JS: { jetstream: enabled, users: [{user: js, password: js}], exports: [{service: "$JS.API.>"}] }
  APP: { users: [{user: app, password: app}],
         imports: [{service: {account: JS, subject: "$JS.API.>"}, to: "imported.js.>"}] }
}
"""
    )
    owner = clients(server.url, user="js", password="js")
    app = clients(server.url, user="app", password="app")
    js = app.jetstream(api_prefix="imported.js")
    assert js.api_prefix == "imported.js."
    stream = js.create_stream(name="ORDERS", subjects=["orders.>"], allow_direct=True)
    store(owner, "orders.1", b"hello")
    assert js.stream("ORDERS").cached_info.state.messages == 1
    assert stream.get_msg(1, direct=False).data == b"hello"
    assert stream.direct_get(last_by_subject="orders.1").data == b"hello"
    assert list(js.stream_names()) == ["ORDERS"]
    js.create_consumer("ORDERS", durable_name="C")
    assert [c.name for c in js.consumers("ORDERS")] == ["C"]
    # The APP account itself has no JetStream.
    with pytest.raises(JetStreamNotEnabledForAccountError):
        app.jetstream().account_info()


def test_jetstream_disabled(nats_server_factory: Callable[..., NatsServer], clients: Callable[..., Client]) -> None:
    server = nats_server_factory(jetstream=False)
    js = clients(server.url).jetstream(timeout=2)
    with pytest.raises(JetStreamNotEnabledError):
        js.account_info()
    with pytest.raises(JetStreamNotEnabledError):
        js.create_stream(name="S")


def test_api_timeout_is_a_timeout_error(nats_url: str, clients: Callable[..., Client]) -> None:
    """A responder that never answers: the call ends with a TimeoutError subclass by its deadline."""
    nc = clients(nats_url)
    prefix = f"silent{_uid()}"
    sink = nc.subscribe(f"{prefix}.>")  # swallows the requests, never replies
    nc.flush()
    js = nc.jetstream(api_prefix=prefix, timeout=0.3)
    start = time.monotonic()
    with pytest.raises(TimeoutError) as exc:
        js.account_info()
    assert isinstance(exc.value, builtins.TimeoutError)
    with pytest.raises(TimeoutError):
        js.stream("S", timeout=0.2)
    assert time.monotonic() - start < 2.0
    assert sink.next_msg(timeout=1).subject == f"{prefix}.INFO"


def test_stream_handle_repr_and_context(env: Env) -> None:
    stream, _ = env.stream()
    assert repr(stream) == f"<Stream {stream.name!r}>"
    assert stream.jetstream is env.js
    assert isinstance(env.js, JetStream)
    assert stream.cached_info.config.discard is DiscardPolicy.OLD


def test_reexports() -> None:
    for name in ("StreamConfig", "StreamInfo", "StreamState", "ConsumerConfig", "ConsumerInfo", "PubAck",
                 "AccountInfo", "StoredMsg", "RetentionPolicy", "DiscardPolicy", "StorageType", "AckPolicy",
                 "DeliverPolicy", "ReplayPolicy", "PriorityPolicy", "JetStream", "Stream", "Consumer"):
        assert hasattr(jssync, name), name
    assert jssync.errors.StreamNotFoundError is StreamNotFoundError


# =========================================================================== cluster (TESTPLAN 58)


def test_replicated_stream_info_and_direct_get_from_a_follower(
    nats_cluster_factory: Callable[..., NatsCluster], clients: Callable[..., Client]
) -> None:
    """R3 stream: cluster info decodes (leader, replicas); a write is visible at once through
    STREAM.MSG.GET (leader, read-after-write) and, eventually, through direct get from a client
    connected to a follower (no read-after-write promise there)."""
    cluster = nats_cluster_factory(3)
    nc = clients(cluster.urls)
    js = nc.jetstream()
    deadline = time.monotonic() + 20.0
    while True:
        try:
            stream = js.create_stream(name="R3", subjects=["r3.>"], num_replicas=3, allow_direct=True)
            break
        except JetStreamAPIError as exc:  # 10008 and friends while the meta leader settles
            if exc.code not in (500, 503) or time.monotonic() > deadline:
                raise
            time.sleep(0.2)

    def info_ready() -> bool:
        c = stream.info().cluster
        return c is not None and c.leader is not None and c.replicas is not None and len(c.replicas) == 2

    wait_until(info_ready, 20.0, interval=0.1, what="the R3 stream's leader and replicas")
    cl = stream.cached_info.cluster
    assert cl is not None and cl.leader is not None and cl.replicas is not None
    assert cl.name and all(r.name and r.name != cl.leader for r in cl.replicas)

    follower_url = next(s.url for s in cluster.servers if s.name != cl.leader)
    follower = clients(follower_url, ignore_discovered_servers=True)
    fstream = follower.jetstream().stream("R3")
    for i in range(5):
        seq = store(nc, f"r3.k{i}", b"v%d" % i).seq
        assert fstream.get_msg(seq, direct=False).data == b"v%d" % i  # the leader answers: always visible

        def direct_sees(seq: int = seq, i: int = i) -> bool:
            try:
                return fstream.direct_get(seq).data == b"v%d" % i
            except MsgNotFoundError:
                return False

        wait_until(direct_sees, 5.0, interval=0.05, what=f"direct get of seq {seq}")
    assert fstream.direct_get(last_by_subject="r3.k4").seq == 5
