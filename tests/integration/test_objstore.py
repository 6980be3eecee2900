"""The object store against a real nats-server: put/get round trips, links, meta, seal, watch,
the digest check against a corrupted chunk, and bad input refused before anything is sent."""

from __future__ import annotations

import hashlib
import io
import secrets
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from jscore import objstore as O
from jscore.errors import (
    BucketNotFoundError,
    BucketSealedError,
    ChunkOrderError,
    DigestMismatchError,
    InvalidBucketNameError,
    InvalidObjectNameError,
    InvalidOptionError,
    ObjectExistsError,
    ObjectNotFoundError,
)
from jssync import Client, JetStream, ObjectStore
from jssync.server import NatsServer
from tests.integration import clients, wait_until  # noqa: F401 - fixture


@pytest.fixture
def js(nats_url: str, clients: Callable[..., Client]) -> JetStream:  # noqa: F811
    return clients(nats_url).jetstream(timeout=5.0)


@pytest.fixture
def obs(js: JetStream) -> Iterator[ObjectStore]:
    bucket = "t" + secrets.token_hex(6)
    store = js.create_object_store(bucket, storage="memory")
    yield store
    try:
        js.delete_object_store(bucket)
    except Exception:
        pass


def test_put_get_roundtrip_sizes(obs: ObjectStore) -> None:
    for size, chunk in ((0, 16), (1, 16), (16, 16), (17, 16), (1000, 7), (300_000, O.DEFAULT_CHUNK_SIZE)):
        data = secrets.token_bytes(size)
        info = obs.put(f"o{size}", data, chunk_size=chunk)
        assert info.size == size and info.chunks == -(-size // chunk)
        assert info.digest == O.digest_string(hashlib.sha256(data).digest())
        assert obs.get_bytes(f"o{size}") == data
        got = obs.info(f"o{size}")
        assert (got.size, got.chunks, got.digest, got.nuid) == (info.size, info.chunks, info.digest, info.nuid)
        assert got.mtime is not None and got.mtime.tzinfo is not None
        with obs.get(f"o{size}") as r:  # read(n) across chunk boundaries
            parts = []
            while piece := r.read(5):
                parts.append(piece)
            assert b"".join(parts) == data
        with obs.get(f"o{size}") as r:
            assert b"".join(r) == data


def test_put_from_file_and_replace(obs: ObjectStore) -> None:
    data = secrets.token_bytes(50_000)
    first = obs.put("f", io.BytesIO(data), chunk_size=4096, description="d", metadata={"k": "v"},
                    headers={"X-A": ["1", "2"]})
    assert obs.info("f").headers == {"X-A": ["1", "2"]}
    assert obs.info("f").metadata == {"k": "v"} and obs.info("f").description == "d"
    second = obs.put("f", b"new")
    assert obs.get_bytes("f") == b"new"
    # the old chunks are purged
    st = obs._stream.info(subjects_filter=O.chunk_subject(obs.bucket, first.nuid))
    assert not (st.state.subjects or {})
    assert second.nuid != first.nuid


def test_missing_deleted_list(obs: ObjectStore) -> None:
    assert obs.list() == []
    with pytest.raises(ObjectNotFoundError):
        obs.info("nope")
    with pytest.raises(ObjectNotFoundError):
        obs.get("nope")
    obs.put("a", b"1")
    obs.put("b", b"22")
    assert sorted(i.name for i in obs.list()) == ["a", "b"]
    info = obs.info("a")
    obs.delete("a")
    with pytest.raises(ObjectNotFoundError):
        obs.get_bytes("a")
    marker = obs.info("a", show_deleted=True)
    assert marker.deleted and marker.size == 0 and marker.chunks == 0
    st = obs._stream.info(subjects_filter=O.chunk_subject(obs.bucket, info.nuid))
    assert not (st.state.subjects or {})
    assert [i.name for i in obs.list()] == ["b"]
    assert sorted((i.name, i.deleted) for i in obs.list(show_deleted=True)) == [("a", True), ("b", False)]


def test_update_meta_and_rename(obs: ObjectStore) -> None:
    obs.put("a", b"data", description="old")
    obs.put("c", b"other")
    obs.update_meta("a", description="new", metadata={"m": "1"})
    assert obs.info("a").description == "new" and obs.get_bytes("a") == b"data"
    with pytest.raises(ObjectExistsError):
        obs.update_meta("a", new_name="c")
    obs.update_meta("a", new_name="b")
    assert obs.get_bytes("b") == b"data" and obs.info("b").description == "new"
    with pytest.raises(ObjectNotFoundError):
        obs.info("a", show_deleted=True)


def test_links(js: JetStream, obs: ObjectStore) -> None:
    obs.put("target", b"payload")
    link = obs.add_link("ln", "target")
    assert link.is_link and link.link is not None and link.link.name == "target"
    assert obs.get_bytes("ln") == b"payload"
    other = js.create_object_store(obs.bucket + "x", storage="memory")
    try:
        other.add_link("far", obs.info("target"))
        assert other.get_bytes("far") == b"payload"
        other.add_bucket_link("all", obs)
        with pytest.raises(InvalidOptionError):
            other.get("all")
        with pytest.raises(InvalidOptionError):
            obs.add_link("ln2", obs.info("ln"))  # no link to a link
        with pytest.raises(ObjectExistsError):
            obs.add_link("target", "target")
    finally:
        js.delete_object_store(obs.bucket + "x")


def test_seal_status_names(js: JetStream, obs: ObjectStore) -> None:
    obs.put("a", b"x" * 10)
    st = obs.status()
    assert st.bucket == obs.bucket and not st.sealed and st.size > 0 and st.backing_store == "JetStream"
    assert obs.bucket in set(js.object_store_names())
    assert obs.bucket in {s.bucket for s in js.object_stores()}
    stale = js.object_store(obs.bucket)  # opened before the seal: the server refuses its writes
    obs.seal()
    assert obs.status().sealed
    with pytest.raises(BucketSealedError):
        stale.put("b", b"y")
    with pytest.raises(BucketSealedError):
        stale.delete("a")
    with pytest.raises(BucketSealedError):
        stale.update_meta("a", description="x")
    with pytest.raises(BucketSealedError):
        obs.put("b", b"y")
    with pytest.raises(BucketSealedError):
        obs.delete("a")
    again = js.object_store(obs.bucket)  # a fresh handle: the server refuses the write
    with pytest.raises(BucketSealedError):
        again._publish_meta(O.ObjectInfo(name="zz", bucket=obs.bucket, nuid="n"), 5.0)
    assert obs.get_bytes("a") == b"x" * 10


def test_update_and_create_or_update_object_store(js: JetStream) -> None:
    from jscore.errors import InvalidStreamConfigError, JetStreamAPIError
    from jscore.models import Compression, Placement

    bucket = "upd" + secrets.token_hex(4)
    with pytest.raises(BucketNotFoundError):
        js.update_object_store(bucket, description="nothing there")
    obs = js.create_or_update_object_store(bucket, description="first")  # created
    obs.put("kept", b"data")
    try:
        up = js.update_object_store(
            bucket, description="second", max_bytes=10_000_000, ttl=3600.0, metadata={"team": "ops"},
            compression=True, placement=Placement(tags=["any"]),
        )
        cfg = js.stream_info(f"OBJ_{bucket}").config
        assert cfg.description == "second" and cfg.max_bytes == 10_000_000 and cfg.max_age == 3600.0
        assert cfg.compression is Compression.S2 and cfg.placement == Placement(tags=["any"])
        assert (cfg.metadata or {}).get("team") == "ops"
        st = up.status()
        assert st.description == "second" and st.ttl == 3600.0 and st.is_compressed
        assert up.get_bytes("kept") == b"data"  # the objects stay
        # a short TTL: the duplicate window follows it (as at creation)
        js.update_object_store(bucket, ttl=30.0)
        assert js.stream_info(f"OBJ_{bucket}").config.max_age == 30.0
        # replaces the whole configuration: what is not given takes its default
        again = js.create_or_update_object_store(bucket)
        cfg = js.stream_info(f"OBJ_{bucket}").config
        assert cfg.description is None and cfg.max_bytes == -1 and not cfg.max_age
        assert again.get_bytes("kept") == b"data"
        # changes the server refuses: its typed errors
        with pytest.raises(InvalidStreamConfigError, match="storage type"):
            js.update_object_store(bucket, storage="memory")
        with pytest.raises(JetStreamAPIError, match="replicas"):
            js.update_object_store(bucket, replicas=3)
        with pytest.raises(InvalidOptionError):
            js.update_object_store(bucket, compression="s2")  # type: ignore[typeddict-item]
        with pytest.raises(TypeError):
            js.update_object_store(bucket, history=3)  # type: ignore[call-arg]
        again.seal()
        with pytest.raises(InvalidStreamConfigError, match="unseal"):
            js.update_object_store(bucket, description="after the seal")
    finally:
        js.delete_object_store(bucket)


def test_bad_input_before_sending(js: JetStream, obs: ObjectStore) -> None:
    with pytest.raises(InvalidBucketNameError):
        js.object_store("a.b")
    with pytest.raises(InvalidBucketNameError):
        js.create_object_store("bad bucket")
    with pytest.raises(BucketNotFoundError):
        js.object_store("nosuch" + secrets.token_hex(4))
    with pytest.raises(InvalidObjectNameError):
        obs.put("", b"x")
    with pytest.raises(InvalidOptionError):
        obs.put("x", b"x", chunk_size=0)
    with pytest.raises(InvalidOptionError):
        obs.put("x", b"x", chunk_size=js.client.max_payload + 1)
    with pytest.raises(InvalidOptionError):
        obs.put("x", "text")  # type: ignore[arg-type]
    assert obs.list() == []  # nothing was sent


def _corrupt(js: JetStream, obs: ObjectStore, name: str, fn: Callable[[list[bytes]], list[bytes]]) -> None:
    """Re-write the chunks of ``name`` directly (the metadata stays)."""
    info = obs.info(name)
    subject = O.chunk_subject(obs.bucket, info.nuid)
    chunks = []
    with obs.get(name) as r:
        chunks = list(r)
    obs._stream.purge(subject=subject)
    for c in fn(chunks):
        js.publish(subject, c)


def test_corrupted_chunk_raises_digest_mismatch(js: JetStream, obs: ObjectStore) -> None:
    data = secrets.token_bytes(1000)
    obs.put("o", data, chunk_size=100)

    def flip(chunks: list[bytes]) -> list[bytes]:
        bad = bytearray(chunks[4])
        bad[0] ^= 0xFF
        return chunks[:4] + [bytes(bad)] + chunks[5:]

    _corrupt(js, obs, "o", flip)
    with pytest.raises(DigestMismatchError):
        obs.get_bytes("o")
    # the reader hands out no data past the check: the last chunk is withheld
    with obs.get("o") as r:
        got = []
        with pytest.raises(DigestMismatchError):
            for c in r:
                got.append(c)
        assert len(got) == 9  # chunks 1..9 (the 5th is the corrupted one); the 10th withheld
        with pytest.raises(DigestMismatchError):
            r.read()


def test_missing_and_extra_chunks(js: JetStream, obs: ObjectStore) -> None:
    obs.put("m", secrets.token_bytes(500), chunk_size=100)
    _corrupt(js, obs, "m", lambda c: c[:-1])
    with pytest.raises(DigestMismatchError, match="missing"):
        obs.get_bytes("m")
    obs.put("e", secrets.token_bytes(500), chunk_size=100)
    _corrupt(js, obs, "e", lambda c: c + [b"extra"])
    with pytest.raises(DigestMismatchError):
        obs.get_bytes("e")


def test_watch(obs: ObjectStore) -> None:
    with obs.watch() as w:
        assert w.next(5.0) is None  # empty bucket: the marker at once
        obs.put("a", b"1")
        got = w.next(5.0)
        assert got is not None and got.name == "a" and not got.deleted
        obs.delete("a")
        got = w.next(5.0)
        assert got is not None and got.name == "a" and got.deleted
    obs.put("b", b"2")
    with obs.watch(ignore_deletes=True) as w:
        got = w.next(5.0)
        assert got is not None and got.name == "b"
        assert w.next(5.0) is None
    with obs.watch(updates_only=True) as w:
        obs.put("c", b"3")
        got = w.next(5.0)
        assert got is not None and got.name == "c"


def _callback_watch(obs: ObjectStore, **options: object) -> tuple[list[object], threading.Condition, object]:
    got: list[object] = []
    cond = threading.Condition()

    def cb(info: O.ObjectInfo | None) -> None:
        assert threading.current_thread() is not threading.main_thread()
        with cond:
            got.append(None if info is None else (info.name, info.deleted))
            cond.notify_all()

    w = obs.watch(callback=cb, **options)  # type: ignore[arg-type]
    return got, cond, w


def _wait_for(got: list[object], cond: threading.Condition, n: int, timeout: float = 10.0) -> list[object]:
    with cond:
        assert cond.wait_for(lambda: len(got) >= n, timeout), f"only {got} of {n} items"
        return list(got)


def test_watch_callback_form(obs: ObjectStore) -> None:
    got, cond, w = _callback_watch(obs)  # empty bucket: the marker at once
    assert _wait_for(got, cond, 1) == [None]
    obs.put("a", b"1")
    obs.delete("a")
    assert _wait_for(got, cond, 3) == [None, ("a", False), ("a", True)]
    w.stop()
    assert w.wait(5.0) and w.error is None

    obs.put("b", b"2")
    obs.put("b", b"3")
    got, cond, w = _callback_watch(obs)  # the latest of each object, then the marker
    assert _wait_for(got, cond, 3) == [("a", True), ("b", False), None]
    w.stop()
    got, cond, w = _callback_watch(obs, ignore_deletes=True)
    assert _wait_for(got, cond, 2) == [("b", False), None]
    w.stop()
    got, cond, w = _callback_watch(obs, include_history=True)  # (metadata is rolled up: one per object)
    assert _wait_for(got, cond, 3) == [("a", True), ("b", False), None]
    w.stop()
    got, cond, w = _callback_watch(obs, updates_only=True)
    obs.put("c", b"4")
    assert _wait_for(got, cond, 1) == [("c", False)]
    w.stop()
    assert w.wait(5.0)
    assert got == [("c", False)]  # never the marker with updates_only
    wait_until(lambda: list(obs._stream.consumer_names()) == [], 10, what="every stopped watch to delete its consumer")


@pytest.mark.parametrize("how", ["restart", "kill"])
def test_watch_callback_survives_a_server_restart(
    how: str, nats_server: NatsServer, clients: Callable[..., Client]  # noqa: F811
) -> None:
    """A graceful restart or a crash: every change written afterwards, by another client,
    reaches the callback once and in order."""
    js = clients(nats_server.url).jetstream(timeout=5.0)
    obs = js.create_object_store("restart_cb")
    obs.put("o0", b"0")
    got, cond, w = _callback_watch(obs)
    assert _wait_for(got, cond, 2) == [("o0", False), None]
    for i in range(1, 4):
        obs.put(f"o{i}", b"x")
    _wait_for(got, cond, 5)
    if how == "kill":
        nats_server.kill()
        nats_server.start()
    else:
        nats_server.restart()
    writer = clients(nats_server.url).jetstream(timeout=10.0).object_store("restart_cb", timeout=10.0)
    for i in range(4, 8):
        writer.put(f"o{i}", b"y", timeout=10.0)
    writer.delete("o1", timeout=10.0)
    expected = [("o0", False), None] + [(f"o{i}", False) for i in range(1, 8)] + [("o1", True)]
    assert _wait_for(got, cond, len(expected), 20.0) == expected
    w.stop()
    assert w.wait(5.0)
    assert got == expected  # nothing twice


def test_watch_of_a_deleted_bucket_ends_with_bucket_not_found(js: JetStream) -> None:
    """As the docs say: a deleted bucket ends the watch with BucketNotFoundError, raised by
    next() or kept in watcher.error with a callback."""
    bucket = "wdel" + secrets.token_hex(4)
    obs = js.create_object_store(bucket, storage="memory")
    obs.put("a", b"1")
    w = obs.watch()
    caught_up = threading.Event()
    cw = obs.watch(callback=lambda info: caught_up.set() if info is None else None)
    assert w.next(5.0) is not None and w.next(5.0) is None and caught_up.wait(5.0)
    js.delete_object_store(bucket)
    with pytest.raises(BucketNotFoundError):
        while True:
            w.next(10.0)
    w.stop()
    assert cw.wait(10.0), "the callback watch did not end when its bucket was deleted"
    assert isinstance(cw.error, BucketNotFoundError), cw.error


class _Failing:
    """A file object that fails after ``n`` bytes."""

    def __init__(self, n: int) -> None:
        self.left = n

    def read(self, k: int) -> bytes:
        if self.left <= 0:
            raise OSError("disk gone")
        out = b"z" * min(k, self.left)
        self.left -= len(out)
        return out


def _chunk_subjects(obs: ObjectStore) -> dict[str, int]:
    return dict(obs._stream.info(subjects_filter=O.all_chunks_subject(obs.bucket)).state.subjects or {})


def test_failed_put_purges_its_chunks_and_keeps_the_old_object(obs: ObjectStore) -> None:
    old = obs.put("o", b"old data")
    with pytest.raises(OSError, match="disk gone"):
        obs.put("o", _Failing(10_000), chunk_size=1000)
    assert _chunk_subjects(obs) == {O.chunk_subject(obs.bucket, old.nuid): 1}
    assert obs.get_bytes("o") == b"old data"


def test_put_over_the_bucket_limit_fails_typed_and_purges(js: JetStream) -> None:
    from jscore.errors import MaxBytesError

    bucket = "lim" + secrets.token_hex(4)
    obs = js.create_object_store(bucket, storage="memory", max_bytes=50_000)
    try:
        with pytest.raises(MaxBytesError):
            obs.put("big", secrets.token_bytes(200_000), chunk_size=10_000)
        assert _chunk_subjects(obs) == {}
        with pytest.raises(ObjectNotFoundError):
            obs.info("big")
        obs.put("fits", b"ok")
        assert obs.get_bytes("fits") == b"ok"
    finally:
        js.delete_object_store(bucket)


def test_deleted_with_show_deleted_reads_empty(obs: ObjectStore) -> None:
    obs.put("d", b"data")
    obs.delete("d")
    with obs.get("d", show_deleted=True) as r:
        assert r.info.deleted and r.read() == b""
    obs.put("empty", b"")
    assert obs.get_bytes("empty") == b"" and obs.info("empty").chunks == 0


def test_watch_skips_invalid_metadata(js: JetStream, obs: ObjectStore) -> None:
    obs.put("good", b"1")
    js.publish(f"$O.{obs.bucket}.M.junk", b"not json")
    with obs.watch() as w:
        got = w.next(5.0)
        assert got is not None and got.name == "good"
        assert w.next(5.0) is None


def test_a_dropped_reader_deletes_its_consumer(obs: ObjectStore) -> None:
    import gc
    import time

    obs.put("big", secrets.token_bytes(2_000_000), chunk_size=10_000)
    r = obs.get("big")
    assert len(r.read(10)) == 10
    assert len(list(obs._stream.consumer_names())) == 1
    del r
    gc.collect()
    deadline = time.monotonic() + 5.0
    while list(obs._stream.consumer_names()) and time.monotonic() < deadline:
        time.sleep(0.05)  # (the test waits for the server; the client never sleeps)
    assert list(obs._stream.consumer_names()) == []


def test_watch_survives_a_server_restart(nats_server: NatsServer, clients: Callable[..., Client]) -> None:  # noqa: F811
    js = clients(nats_server.url, reconnect_wait=0.1).jetstream(timeout=5.0)
    obs = js.create_object_store("restart")
    obs.put("before", b"1")
    with obs.watch() as w:
        assert (w.next(5.0) or O.ObjectInfo(name="")).name == "before"
        assert w.next(5.0) is None
        nats_server.restart()
        obs2 = js.object_store("restart", timeout=10.0)
        for _ in range(50):  # the first publish may meet JetStream still starting
            try:
                obs2.put("after", b"2", timeout=2.0)
                break
            except Exception:
                continue
        got = w.next(20.0)
        assert got is not None and got.name == "after"
    assert obs.get_bytes("after") == b"2"


def test_a_reader_waiting_for_lost_chunks_times_out(obs: ObjectStore) -> None:
    import time

    from jscore.errors import TimeoutError as JsTimeoutError

    info = obs.put("lost", secrets.token_bytes(1000), chunk_size=100)
    obs._stream.purge(subject=O.chunk_subject(obs.bucket, info.nuid))
    t0 = time.monotonic()
    with pytest.raises(JsTimeoutError):
        obs.get_bytes("lost", timeout=1.0)
    assert time.monotonic() - t0 < 3.0


def test_reads_of_any_sizes(obs: ObjectStore) -> None:
    import random
    import shutil

    data = secrets.token_bytes(700_001)
    obs.put("r", data, chunk_size=65_536)
    rng = random.Random(7)
    for _ in range(3):
        with obs.get("r") as r:
            parts = []
            while True:
                k = rng.choice([0, 1, 7, 1000, 65_535, 65_536, 65_537, 250_000])
                piece = r.read(k)
                if k and not piece:
                    break
                assert len(piece) <= k
                parts.append(piece)
            assert b"".join(parts) == data
    with obs.get("r") as r:
        buf = bytearray(100_000)
        n = r.readinto(buf)
        assert bytes(buf[:n]) == data[:n] and n == 100_000
        out = io.BytesIO()
        shutil.copyfileobj(r, out)  # the rest
        assert out.getvalue() == data[100_000:]


def test_create_again(js: JetStream, obs: ObjectStore) -> None:
    from jscore.errors import StreamNameInUseError

    same = js.create_object_store(obs.bucket, storage="memory")
    assert same.bucket == obs.bucket
    with pytest.raises(StreamNameInUseError):
        js.create_object_store(obs.bucket, storage="memory", description="different")


def test_a_put_whose_chunks_were_stored_out_of_order_is_undone(
    obs: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chunk re-sent after later ones (the client sends a publish again after a 503 no
    responders, as a restarting server gives) lands after them: the put fails with
    ChunkOrderError, its chunks are purged and the previous object stays."""
    old = secrets.token_bytes(50)
    obs.put("o", old, chunk_size=16)
    js = obs._js
    real = js.publish_async
    chunks: list[None] = []
    deferred: list[Any] = []

    class Later:
        def result(self, timeout: float | None = None) -> Any:
            return deferred[0].result(timeout)

    def reordered(subject: str, payload: bytes, **kw: Any) -> Any:
        if ".C." not in subject:
            return real(subject, payload, **kw)
        chunks.append(None)
        if len(chunks) == 2:  # the second chunk held back ...
            deferred.append((subject, payload, kw))
            return Later()
        fut = real(subject, payload, **kw)
        if len(chunks) == 3:  # ... and published after the third
            s, p, k = deferred.pop()
            deferred.append(real(s, p, **k))
        return fut

    monkeypatch.setattr(js, "publish_async", reordered)
    with pytest.raises(ChunkOrderError):
        obs.put("o", secrets.token_bytes(64), chunk_size=16)
    monkeypatch.setattr(js, "publish_async", real)
    assert obs.get_bytes("o") == old
    info = obs.info("o")
    subjects = js.stream_info(f"OBJ_{obs.bucket}", subjects_filter=">").state.subjects or {}
    assert [k for k in subjects if ".C." in k] == [f"$O.{obs.bucket}.C.{info.nuid}"]  # (the new chunks: purged)


def test_put_across_a_server_restart_ends_cleanly(nats_server: NatsServer, clients: Callable[..., Client]) -> None:  # noqa: F811
    """A server restart in the middle of a put: the put either completes (the object reads
    back whole) or fails with a typed error within its timeout; no partial object is visible."""
    import time

    from jscore.errors import NatsError

    js = clients(nats_server.url, reconnect_wait=0.1).jetstream(timeout=3.0)
    obs = js.create_object_store("midput")
    data = secrets.token_bytes(3_000_000)

    class Src:
        def __init__(self) -> None:
            self.pos = 0

        def read(self, k: int) -> bytes:
            if self.pos >= 1_000_000 and not hasattr(self, "restarted"):
                self.restarted = True
                nats_server.restart()
            out = data[self.pos:self.pos + k]
            self.pos += len(out)
            return out

    t0 = time.monotonic()
    try:
        info = obs.put("o", Src(), chunk_size=100_000, timeout=3.0)
    except NatsError as exc:
        outcome = f"failed ({type(exc).__name__}: {exc})"
    else:
        outcome = "stored"
        assert info.size == len(data)
    print("outcome:", outcome, round(time.monotonic() - t0, 2))
    assert time.monotonic() - t0 < 40.0
    again = js.object_store("midput", timeout=10.0)
    if outcome == "stored":
        assert again.get_bytes("o", timeout=10.0) == data
    else:
        with pytest.raises(ObjectNotFoundError):
            again.info("o", timeout=10.0)
        assert outcome.startswith("failed")


def test_a_deleted_bucket_is_reported_as_such(js: JetStream) -> None:
    bucket = "del" + secrets.token_hex(4)
    obs = js.create_object_store(bucket, storage="memory")
    obs.put("a", b"1")
    js.delete_object_store(bucket)
    for call in (lambda: obs.put("b", b"2"), lambda: obs.info("a"), lambda: obs.get("a"), obs.list,
                 lambda: obs.delete("a"), obs.status, obs.seal, lambda: js.delete_object_store(bucket),
                 lambda: js.object_store(bucket)):
        with pytest.raises(BucketNotFoundError):
            call()
