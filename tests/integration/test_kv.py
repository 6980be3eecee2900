"""The key-value store against a real nats-server: the layout, every operation and its errors,
watchers (iterator and callback, across a server restart), get_many's snapshot, and a
hypothesis stateful model of the operations."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import msgspec
import pytest

from jscore.errors import (
    BucketNotFoundError,
    InvalidKeyError,
    JetStreamAPIError,
    KeyDeletedError,
    KeyExistsError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
    NoMessagesError,
    StreamNotFoundError,
)
from jscore.models import DiscardPolicy
from jssync import Client, KeyValueEntry, KeyValueOp
from jssync.server import NatsServer
from tests.integration import clients, wait_until

__all__ = ["clients"]

pytestmark = pytest.mark.timeout(90)

_n = 0


def _bucket(prefix: str = "T") -> str:
    global _n
    _n += 1
    return f"{prefix}{_n}_{time.monotonic_ns() % 10**9}"


def test_bucket_layout_and_lifecycle(nats_url: str, clients: Callable[..., Client]) -> None:
    js = clients(nats_url).jetstream()
    name = _bucket()
    kv = js.create_key_value(name, history=5, ttl=60.0, description="d")
    cfg = js.stream_info(f"KV_{name}").config
    assert cfg.subjects == [f"$KV.{name}.>"]
    assert cfg.max_msgs_per_subject == 5
    assert cfg.allow_direct and cfg.allow_rollup_hdrs and cfg.deny_delete
    assert cfg.discard is DiscardPolicy.NEW
    assert cfg.max_age == 60.0 and cfg.duplicate_window == 60.0
    assert name in list(js.key_value_names())
    st = kv.status()
    assert (st.bucket, st.history, st.ttl, st.values) == (name, 5, 60.0, 0)
    assert js.key_value(name).bucket == name
    js.update_key_value(name, history=7)
    assert js.key_value(name).status().history == 7
    from jscore.models import Placement

    js.create_or_update_key_value(name, history=7, compression=True, placement=Placement(tags=["any"]))
    cfg = js.stream_info(f"KV_{name}").config
    assert kv.status().is_compressed and cfg.placement == Placement(tags=["any"]) and not cfg.max_age
    js.delete_key_value(name)
    with pytest.raises(BucketNotFoundError):
        js.key_value(name)
    with pytest.raises(BucketNotFoundError):
        js.update_key_value(name, history=2)


def test_put_get_create_update_delete_purge(nats_url: str, clients: Callable[..., Client]) -> None:
    js = clients(nats_url).jetstream()
    kv = js.create_key_value(_bucket(), history=10)
    assert kv.keys() == []
    r1 = kv.put("a.b", b"1")
    e = kv.get("a.b")
    assert (e.key, e.value, e.revision, e.operation, e.bucket) == ("a.b", b"1", r1, KeyValueOp.PUT, kv.bucket)
    assert e.created.tzinfo is not None
    with pytest.raises(KeyExistsError):
        kv.create("a.b", b"x")
    r2 = kv.update("a.b", b"2", last=r1)
    with pytest.raises(KeyWrongLastSequenceError):
        kv.update("a.b", b"3", last=r1)
    assert kv.get("a.b", revision=r1).value == b"1"
    other = kv.put("zz", b"z")
    with pytest.raises(KeyNotFoundError):
        kv.get("a.b", revision=other)
    with pytest.raises(KeyWrongLastSequenceError):
        kv.delete("a.b", last=r1)
    kv.delete("a.b", last=r2)
    with pytest.raises(KeyDeletedError) as info:
        kv.get("a.b")
    assert isinstance(info.value, KeyNotFoundError)
    r3 = kv.create("a.b", b"again")  # allowed after a delete
    assert kv.get("a.b").revision == r3
    kv.purge("a.b")
    with pytest.raises(KeyDeletedError):
        kv.get("a.b")
    hist = kv.history("a.b")
    assert [h.operation for h in hist] == [KeyValueOp.PURGE]  # the rollup dropped the rest
    kv.create("a.b", b"after purge")
    assert kv.keys() == ["zz", "a.b"]
    assert kv.keys("a.*") == ["a.b"]
    with pytest.raises(KeyNotFoundError):
        kv.get("never")
    with pytest.raises(KeyNotFoundError):
        kv.history("never")


def test_invalid_keys_raise_before_anything_is_sent(nats_url: str, clients: Callable[..., Client]) -> None:
    js = clients(nats_url).jetstream()
    kv = js.create_key_value(_bucket())
    for bad in ["", ".a", "a.", "a..b", "a b", "a*", "a>", "ä", "a\r\n"]:
        for call in (
            lambda: kv.put(bad, b"x"),
            lambda: kv.get(bad),
            lambda: kv.create(bad, b"x"),
            lambda: kv.update(bad, b"x", last=1),
            lambda: kv.delete(bad),
            lambda: kv.purge(bad),
            lambda: kv.history(bad),
        ):
            with pytest.raises(InvalidKeyError):
                call()
    for bad_filter in ["a.>.b", "a*", "", "a..*"]:
        with pytest.raises(InvalidKeyError):
            kv.keys(bad_filter)
        with pytest.raises(InvalidKeyError):
            kv.watch(bad_filter)
    assert kv.status().values == 0


def test_create_with_ttl_needs_limit_markers(nats_url: str, clients: Callable[..., Client]) -> None:
    js = clients(nats_url).jetstream()
    plain = js.create_key_value(_bucket())
    with pytest.raises(JetStreamAPIError):
        plain.create("k", b"v", ttl=5.0)
    marked = js.create_key_value(_bucket(), limit_marker_ttl=5.0)
    rev = marked.create("k", b"v", ttl=1.0)
    assert marked.get("k").revision == rev
    assert marked.status().limit_marker_ttl == 5.0


def test_get_many_is_one_snapshot(nats_url: str, clients: Callable[..., Client]) -> None:
    js = clients(nats_url).jetstream()
    kv = js.create_key_value(_bucket(), history=3)
    for i in range(20):
        kv.put(f"u.{i}", str(i).encode())
    snap = kv.put("u.0", b"zero")
    kv.delete("u.1")
    kv.put("u.2", b"later")
    got = kv.get_many("u.>")
    assert set(got) == {f"u.{i}" for i in range(20)} - {"u.1"}
    assert got["u.2"].value == b"later"
    old = kv.get_many(["u.0", "u.1", "u.2", "missing"], revision=snap)
    assert {k: v.value for k, v in old.items()} == {"u.0": b"zero", "u.1": b"1", "u.2": b"2"}
    assert kv.get_many([]) == {}


def test_get_many_without_direct_get(nats_url: str, clients: Callable[..., Client]) -> None:
    js = clients(nats_url).jetstream()
    name = _bucket()
    js.create_key_value(name, history=5)
    cfg = js.stream_info(f"KV_{name}").config
    js.update_stream(msgspec.structs.replace(cfg, allow_direct=False))
    kv = js.key_value(name)
    kv.put("a", b"1")
    snap = kv.put("b", b"2")
    kv.put("a", b"3")
    kv.delete("b")
    assert {k: v.value for k, v in kv.get_many(">").items()} == {"a": b"3"}
    assert {k: v.value for k, v in kv.get_many(">", revision=snap).items()} == {"a": b"1", "b": b"2"}
    assert kv.get("a").value == b"3"


def test_watch_iterator_options(nats_url: str, clients: Callable[..., Client]) -> None:
    js = clients(nats_url).jetstream()
    kv = js.create_key_value(_bucket(), history=5)
    with kv.watch() as w:  # empty bucket: the marker at once
        assert w.next(5.0) is None
        kv.put("k", b"1")
        e = w.next(5.0)
        assert e is not None and (e.key, e.value, e.delta) == ("k", b"1", 0)
    kv.put("k", b"2")
    kv.put("j", b"j")
    kv.delete("j")
    with kv.watch() as w:
        got = [w.next(5.0) for _ in range(3)]
        assert [(g.key, g.value, g.operation) if g else None for g in got] == [
            ("k", b"2", KeyValueOp.PUT), ("j", b"", KeyValueOp.DEL), None,
        ]
        assert got[0] is not None and got[0].delta == 1
    with kv.watch(ignore_deletes=True, meta_only=True) as w:
        first = w.next(5.0)
        assert first is not None and (first.key, first.value) == ("k", b"")
        assert w.next(5.0) is None
    with kv.watch("k", include_history=True) as w:
        vals = [w.next(5.0) for _ in range(3)]
        assert [v.value if v else None for v in vals] == [b"1", b"2", None]
    with kv.watch(updates_only=True) as w:
        with pytest.raises(NoMessagesError):
            w.next(0.5)
        kv.put("k", b"3")
        e = w.next(5.0)
        assert e is not None and e.value == b"3"


def test_watch_callback_and_stop(nats_url: str, clients: Callable[..., Client]) -> None:
    js = clients(nats_url).jetstream()
    kv = js.create_key_value(_bucket())
    kv.put("a", b"1")
    got: list[KeyValueEntry | None] = []
    done = threading.Event()

    def cb(e: KeyValueEntry | None) -> None:
        got.append(e)
        if len(got) == 3:
            done.set()

    w = kv.watch(callback=cb)
    wait_until(lambda: len(got) >= 2, 10, what="initial value and marker")
    kv.put("b", b"2")
    assert done.wait(10)
    w.stop()
    assert w.wait(5)
    assert [(e.key, e.value) if e else None for e in got] == [("a", b"1"), None, ("b", b"2")]
    # the iterator ends quietly after stop
    w2 = kv.watch()
    threading.Timer(0.5, w2.stop).start()
    assert [(e.key if e else None) for e in w2] == ["a", "b", None]


@pytest.mark.parametrize("how", ["restart", "kill"])
def test_watch_survives_a_server_restart(
    how: str, nats_server_factory: Callable[..., NatsServer], clients: Callable[..., Client]
) -> None:
    """A graceful restart or a crash (SIGKILL, then a start on the same store): every change
    written afterwards, by another client, reaches the watcher once and in order."""
    srv = nats_server_factory()
    nc = clients(srv.url)
    kv = nc.jetstream().create_key_value("RST", history=10)
    kv.put("k", b"0")
    got: list[bytes] = []
    with kv.watch() as w:
        assert w.next(5.0) is not None
        assert w.next(5.0) is None
        for i in range(1, 6):
            kv.put("k", str(i).encode())
        for _ in range(5):
            e = w.next(5.0)
            assert e is not None
            got.append(e.value)
        if how == "kill":
            srv.kill()
            srv.start()
        else:
            srv.restart()
        writer = clients(srv.url).jetstream().key_value("RST", timeout=10)
        for i in range(6, 11):
            writer.put("k", str(i).encode(), timeout=10)
        writer.put("other", b"x", timeout=10)
        while len(got) < 11:
            e = w.next(15.0)
            assert e is not None
            got.append(e.value)
        with pytest.raises(NoMessagesError):
            w.next(1.0)
    assert got == [str(i).encode() for i in range(1, 11)] + [b"x"]


def test_watch_of_a_deleted_bucket_ends_with_a_typed_error(nats_url: str, clients: Callable[..., Client]) -> None:
    js = clients(nats_url).jetstream()
    kv = js.create_key_value(_bucket())
    kv.put("a", b"1")
    w = kv.watch()
    assert w.next(5.0) is not None and w.next(5.0) is None
    js.delete_key_value(kv.bucket)
    with pytest.raises(BucketNotFoundError) as ended:  # (a StreamNotFoundError too)
        while True:  # (at worst missed heartbeats end it: 2 x 5 s, and a re-create)
            w.next(30.0)
    assert isinstance(ended.value, StreamNotFoundError) and kv.bucket in str(ended.value)
    w.stop()


def test_callback_watch_of_a_deleted_bucket_keeps_the_typed_error(
    nats_url: str, clients: Callable[..., Client]
) -> None:
    js = clients(nats_url).jetstream()
    kv = js.create_key_value(_bucket())
    caught_up = threading.Event()
    w = kv.watch(callback=lambda e: caught_up.set() if e is None else None)
    assert caught_up.wait(5.0)
    js.delete_key_value(kv.bucket)
    assert w.wait(30.0), "the watch did not end when its bucket was deleted"
    assert isinstance(w.error, BucketNotFoundError), w.error


def test_purge_deletes(nats_url: str, clients: Callable[..., Client]) -> None:
    js = clients(nats_url).jetstream()
    kv = js.create_key_value(_bucket(), history=5)
    kv.put("a", b"1")
    kv.put("a", b"2")
    kv.delete("a")
    kv.put("b", b"1")
    kv.purge("c")
    assert kv.purge_deletes() == 2  # young markers stay
    assert [h.operation for h in kv.history("a")] == [KeyValueOp.DEL]
    assert kv.purge_deletes(older_than=0) == 2
    with pytest.raises(KeyNotFoundError):
        kv.history("a")
    assert kv.keys() == ["b"]


def test_many_ignored_deletes_do_not_stall_a_watcher(nats_url: str, clients: Callable[..., Client]) -> None:
    """More deletes than a consume's buffer (500 messages), all left out by ignore_deletes:
    they must not fill the buffer (nobody takes them from a queue)."""
    nc = clients(nats_url)
    js = nc.jetstream()
    kv = js.create_key_value(_bucket())
    for i in range(700):
        js.publish_async(f"$KV.{kv.bucket}.k{i}", b"", headers={"KV-Operation": "DEL"})
    js.publish_async_complete(20.0)
    kv.put("last", b"x")
    with kv.watch(ignore_deletes=True) as w:
        e = w.next(10.0)
        assert e is not None and e.key == "last"
        assert w.next(10.0) is None
    assert kv.keys() == ["last"]


def test_get_many_over_more_keys_than_one_multi_last_may_match(nats_url: str, clients: Callable[..., Client]) -> None:
    js = clients(nats_url).jetstream()
    kv = js.create_key_value(_bucket(), history=2)
    for i in range(1100):
        js.publish_async(f"$KV.{kv.bucket}.k.{i}", str(i).encode())
    js.publish_async_complete(20.0)
    snap = kv.put("k.0", b"zero")
    kv.put("k.1", b"one")
    kv.delete("k.2")
    got = kv.get_many("k.>", timeout=20)
    assert len(got) == 1099 and got["k.1"].value == b"one" and "k.2" not in got
    old = kv.get_many("k.>", revision=snap, timeout=20)
    assert len(old) == 1100 and old["k.0"].value == b"zero" and old["k.1"].value == b"1"


def test_per_key_ttl_and_the_server_s_limit_marker(nats_url: str, clients: Callable[..., Client]) -> None:
    """A key created with a TTL expires; the server's marker (Nats-Marker-Reason: MaxAge)
    reaches a watcher as a purge, and get says the key is gone."""
    js = clients(nats_url).jetstream()
    kv = js.create_key_value(_bucket(), limit_marker_ttl=60.0)
    with kv.watch() as w:
        assert w.next(5.0) is None
        kv.create("short", b"lived", ttl=1.0)
        e = w.next(5.0)
        assert e is not None and e.operation is KeyValueOp.PUT
        gone = w.next(10.0)
        assert gone is not None and (gone.key, gone.operation) == ("short", KeyValueOp.PURGE)
    with pytest.raises(KeyNotFoundError):
        kv.get("short")
    assert kv.keys() == []
    kv.create("short", b"again")  # a create after the marker
    kv.purge("short", ttl=1.0)    # a purge marker that expires itself
    wait_until(lambda: kv.status().values == 0, 10, what="the purge marker to expire")
