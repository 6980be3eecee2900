"""The ``kvBucket`` read of the ``jetstream`` data source in a local Spark against a real
nats-server: a bucket's current values (overwrites, deletes, purges), partitions of keys, a
bucket without direct get, one snapshot while writes race the read, a bucket written by
nats-py, and option errors that name the option."""

from __future__ import annotations

import threading
import uuid
from datetime import datetime
from typing import Any

import pytest

from jscore.errors import InvalidOptionError
from jssync.spark.datasource import JetStreamDataSource
from jssync.spark.kvread import KV_SCHEMA, KvReadOptions, split_keys


@pytest.fixture(scope="module")
def ds_spark(spark: Any) -> Any:
    spark.dataSource.register(JetStreamDataSource)
    return spark


def _bucket() -> str:
    return f"SPARKKV_{uuid.uuid4().hex[:10]}"


def _load(spark: Any, url: str, bucket: str, **options: str) -> Any:
    r = spark.read.format("jetstream").option("servers", url).option("kvBucket", bucket)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def _rows(df: Any) -> dict[str, tuple[bytes, int, datetime]]:
    out: dict[str, tuple[bytes, int, datetime]] = {}
    for row in df.collect():
        assert row.key not in out, f"key {row.key} read twice"
        out[row.key] = (bytes(row.value), row.revision, row.created)
    return out


def test_values_overwrites_deletes_and_purges(ds_spark: Any, nats_url: str, js: Any) -> None:
    bucket = _bucket()
    kv = js.create_key_value(bucket, history=5)
    try:
        kv.put("a", b"1")
        kv.put("a", b"2")                # overwritten: the latest value only
        kv.put("b.x", b"bx")
        kv.put("gone", b"x")
        kv.delete("gone")                # deleted: left out
        kv.put("purged", b"x")
        kv.purge("purged")               # purged: left out
        kv.put("back", b"x")
        kv.delete("back")
        kv.put("back", b"again")         # deleted, then written again: there
        df = _load(ds_spark, nats_url, bucket)
        assert df.schema.simpleString() == "struct<key:string,value:binary,revision:bigint,created:timestamp>"
        rows = _rows(df)
        expected = {k: kv.get(k) for k in ("a", "b.x", "back")}
        assert {k: (v, r) for k, (v, r, _) in rows.items()} == {
            k: (e.value, e.revision) for k, e in expected.items()
        }
        assert rows["a"][0] == b"2"
        for k, (_, _, created) in rows.items():  # the server's time of the value
            assert abs((created.astimezone() - expected[k].created).total_seconds()) < 1e-3
    finally:
        js.delete_key_value(bucket)


def test_an_empty_bucket_and_a_missing_one(ds_spark: Any, nats_url: str, js: Any) -> None:
    bucket = _bucket()
    js.create_key_value(bucket)
    try:
        assert _load(ds_spark, nats_url, bucket).collect() == []
        kv = js.key_value(bucket)
        kv.put("only", b"v")
        kv.delete("only")
        assert _load(ds_spark, nats_url, bucket).collect() == []
    finally:
        js.delete_key_value(bucket)
    with pytest.raises(Exception, match="BucketNotFoundError"):  # (Spark wraps the driver's error)
        _load(ds_spark, nats_url, bucket).collect()


def test_many_keys_in_partitions_and_without_direct_get(ds_spark: Any, nats_url: str, js: Any) -> None:
    bucket = _bucket()
    kv = js.create_key_value(bucket)
    try:
        for i in range(2500):  # more than one batched direct get per partition
            kv.put(f"k.{i:05d}", str(i).encode())
        for i in range(0, 2500, 7):
            kv.delete(f"k.{i:05d}")
        want = {f"k.{i:05d}": str(i).encode() for i in range(2500) if i % 7}
        df = _load(ds_spark, nats_url, bucket, maxRecordsPerPartition="1100")
        assert df.rdd.getNumPartitions() == 3
        assert {k: v for k, (v, _, _) in _rows(df).items()} == want
        # The same bucket without direct get: one task, an ordered consumer, the same rows.
        cfg = js.stream_info(f"KV_{bucket}").config
        js.update_stream(cfg, allow_direct=False)
        df = _load(ds_spark, nats_url, bucket)
        assert df.rdd.getNumPartitions() == 1
        assert {k: v for k, (v, _, _) in _rows(df).items()} == want
    finally:
        js.delete_key_value(bucket)


def test_writes_racing_the_read_do_not_tear_the_snapshot(ds_spark: Any, nats_url: str, js: Any) -> None:
    """Writers keep overwriting every key while Spark reads the bucket in several tasks. The
    rows must be the bucket exactly as of one revision: the latest value of every key at the
    highest revision read (a task reading later than another would return newer values for
    its keys than the snapshot holds)."""
    bucket = _bucket()
    kv = js.create_key_value(bucket, history=64)
    keys = [f"k{i:04d}" for i in range(1500)]
    for k in keys:
        kv.put(k, b"0")
    stop = threading.Event()
    puts = [0]

    def write() -> None:
        r = 0
        while not stop.is_set():
            r += 1
            for k in keys:
                kv.put(k, str(r).encode())
                puts[0] += 1
                if stop.is_set():
                    break

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        wait = threading.Event()
        while puts[0] < len(keys) and writer.is_alive():  # at least one full round first
            wait.wait(0.05)
        before = puts[0]
        rows = _rows(_load(ds_spark, nats_url, bucket, maxRecordsPerPartition="300", minPartitions="5"))
        during = puts[0] - before
    finally:
        stop.set()
        writer.join(30)
    # a quarter of the keys rewritten during the read is plenty for a torn read to show (the
    # writer does more than a round on a quiet machine; a loaded one slows it down)
    assert during > len(keys) // 4, f"the writes did not race the read ({during} puts)"
    assert set(rows) == set(keys)
    top = max(r for _, r, _ in rows.values())
    snapshot = {**kv.get_many(keys[:750], revision=top), **kv.get_many(keys[750:], revision=top)}
    assert {k: (v, r) for k, (v, r, _) in rows.items()} == {k: (e.value, e.revision) for k, e in snapshot.items()}
    assert len({v for v, _, _ in rows.values()}) <= 2  # (a snapshot mid-round holds two rounds)
    js.delete_key_value(bucket)


def test_keys_purged_while_the_driver_lists_them(ds_spark: Any, nats_url: str, js: Any, fault_proxy: Any) -> None:
    """More keys than kvListPageSize (5): the driver lists them with an ordered consumer. When
    its create request reaches the server, after the snapshot, ten keys are deleted and purged
    (purge_deletes), one is overwritten and one added. The rows are exactly the snapshot's values
    of the keys still stored (listing by stream-info pages at an offset skipped keys here), keys
    the client's key rules refuse included; a stored subject no get can address is left out."""
    from tests.sync.test_spark_units import _raw_publish

    bucket = _bucket()
    kv = js.create_key_value(bucket, history=3)
    try:
        for i in range(40):
            kv.put(f"k{i:02d}", f"v{i}".encode())
        kv.delete("k15")
        _raw_publish(nats_url, [f"$KV.{bucket}.caf\u00e9", f"$KV.{bucket}.a@b", f"$KV.{bucket}.*"])
        proxy = fault_proxy(nats_url)
        fired: list[bytes] = []

        def on_frame(frame: bytes) -> None:
            if not fired and f"$JS.API.CONSUMER.CREATE.KV_{bucket}".encode() in frame[:200]:
                fired.append(frame)
                for i in range(10):
                    kv.delete(f"k{i:02d}")
                kv.purge_deletes(older_than=0)
                kv.put("k20", b"new")
                kv.put("late", b"x")
            return None

        proxy.rewrite_frames("up", on_frame)
        df = _load(ds_spark, proxy.url, bucket, kvListPageSize="5", maxRecordsPerPartition="10")
        rows = _rows(df)
        assert fired, "the driver did not list the keys with a consumer"
        want = {f"k{i:02d}": f"v{i}".encode() for i in range(10, 40) if i != 15}
        want |= {"caf\u00e9": b"v", "a@b": b"v"}
        assert {k: v for k, (v, _, _) in rows.items()} == want  # k20: its value at the snapshot
        assert df.rdd.getNumPartitions() == 4
    finally:
        js.delete_key_value(bucket)


def test_a_bucket_written_by_natspy(ds_spark: Any, nats_url: str) -> None:
    pytest.importorskip("nats", reason="nats-py is the interop peer")
    from nats.js.api import KeyValueConfig

    from tests.integration.test_interop_natspy import NatsPyPeer

    plain, direct = _bucket(), _bucket()
    peer = NatsPyPeer(nats_url)
    try:
        async def write() -> None:
            pjs = peer.nc.jetstream()
            for bucket, is_direct in ((plain, None), (direct, True)):
                pkv = await pjs.create_key_value(KeyValueConfig(bucket=bucket, history=3, direct=is_direct))
                await pkv.put("cfg.a", b"1")
                await pkv.put("cfg.a", b"2")
                await pkv.put("cfg.b", b"b")
                await pkv.put("gone", b"x")
                await pkv.delete("gone")
                await pkv.put("purged", b"x")
                await pkv.purge("purged")

        peer.run(write(), timeout=20)
        for bucket in (plain, direct):
            rows = _rows(_load(ds_spark, nats_url, bucket))
            assert {k: v for k, (v, _, _) in rows.items()} == {"cfg.a": b"2", "cfg.b": b"b"}, bucket

        async def drop() -> None:
            for bucket in (plain, direct):
                await peer.nc.jetstream().delete_key_value(bucket)

        peer.run(drop(), timeout=10)
    finally:
        peer.close()


def test_options_are_checked_and_name_the_option(ds_spark: Any, nats_url: str) -> None:
    with pytest.raises(InvalidOptionError, match="^kvBucket: not a valid bucket name"):
        KvReadOptions.from_options({"kvBucket": "a.b"})
    with pytest.raises(InvalidOptionError, match="^stream: not an option of a kvBucket read"):
        KvReadOptions.from_options({"kvBucket": "B", "stream": "S"})
    with pytest.raises(InvalidOptionError, match="^kvBucket: only a batch read"):
        KvReadOptions.from_options({"kvbucket": "B"}, streaming=True)
    assert KvReadOptions.from_options({"KVBUCKET": "B", "minPartitions": "3"}) == KvReadOptions("B", 3, None)
    assert KvReadOptions.from_options({"kvBucket": "B", "kvListPageSize": "10"}).list_page_size == 10
    with pytest.raises(InvalidOptionError, match="^kvListPageSize: must be >= 1"):
        KvReadOptions.from_options({"kvBucket": "B", "kvListPageSize": "0"})
    with pytest.raises(Exception, match="kvListPageSize: only used with kvBucket"):
        _load_stream = ds_spark.read.format("jetstream").option("servers", nats_url).option("stream", "S")
        _load_stream.option("kvListPageSize", "5").load().collect()
    assert split_keys(["a", "b", "c"], min_partitions=2, max_records_per_partition=None) == [("a", "b"), ("c",)]
    assert split_keys([], min_partitions=4, max_records_per_partition=1) == []
    assert KV_SCHEMA == "key string, value binary, revision long, created timestamp"
    source = JetStreamDataSource({"servers": nats_url, "kvBucket": "B"})
    assert source.schema() == KV_SCHEMA
    with pytest.raises(InvalidOptionError, match="^kvBucket: only a batch read"):
        source.streamReader(source.schema())
