"""The ``jetstream`` data source as a data engineer used to the Kafka connector expects it, in a
local Spark against a real nats-server: option names checked on the driver (with the Kafka
connector's names), writes refused before any task when no stream captures the subject, the
source's figures in the query progress, payloads decoded into columns (and serialised on
writes), a user schema checked, partitions by subject, and a streaming query stopped in the middle
of a micro-batch and restarted from its checkpoint storing every row exactly once.
"""

from __future__ import annotations

import json
import time
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from jssync.spark._writer import DuplicateWindowWarning
from jssync.spark.datasource import (
    HAS_ADMISSION_CONTROL,
    HAS_TRIGGER_AVAILABLE_NOW,
    JetStreamDataSource,
    iter_range,
)

_ALL = 2**63


@pytest.fixture(scope="module")
def ds_spark(spark: Any) -> Any:
    spark.dataSource.register(JetStreamDataSource)
    return spark


def _reader(spark: Any, url: str, stream: str, **options: str) -> Any:
    r = spark.read.format("jetstream").option("servers", url).option("stream", stream)
    for k, v in options.items():
        r = r.option(k, v)
    return r


def _stored(js: Any, stream: str) -> list[Any]:
    return list(iter_range(js, stream, (), 1, _ALL))


# ====================================================================== option names


def test_option_names_checked_on_the_driver(ds_spark: Any, nats_url: str, js: Any, names: Any) -> None:
    js.create_stream(name=names.stream, subjects=[f"{names.subject}.>"])
    for i in range(6):
        js.publish(f"{names.subject}.{'a' if i % 2 else 'b'}", f"{i}".encode())
    with pytest.raises(Exception, match=r"(?i)minPartiton: unknown option.*did you mean minPartitions\?"):
        _reader(ds_spark, nats_url, names.stream, minPartiton="2").load().collect()
    with pytest.raises(Exception, match=r"kafka.bootstrap.servers: .*use servers"):
        _reader(ds_spark, nats_url, names.stream, **{"kafka.bootstrap.servers": "h:9092"}).load().collect()
    with pytest.raises(Exception, match=r"subject: a write option; a read does not take it"):
        _reader(ds_spark, nats_url, names.stream, subject="x").load().collect()
    df = ds_spark.range(0, 3).selectExpr("cast(id as string) as data")
    with pytest.raises(Exception, match=r"(?i)maxPendng: unknown option .*did you mean maxPending\?"):
        df.write.format("jetstream").option("servers", nats_url).option("subject", f"{names.subject}.w") \
            .option("maxPendng", "10").mode("append").save()
    # Kafka's names with the same meaning, in any case.
    rows = _reader(ds_spark, nats_url, names.stream, SUBSCRIBE=f"{names.subject}.a").load().collect()
    assert sorted(r.seq for r in rows) == [2, 4, 6]
    df.write.format("jetstream").option("servers", nats_url).option("topic", f"{names.subject}.t").mode("append").save()
    assert sorted(m.data for m in _stored(js, names.stream) if m.subject == f"{names.subject}.t") == [b"0", b"1", b"2"]
    assert js.stream(names.stream).info().state.messages == 9


# ====================================================================== writes checked before any task


def test_write_to_an_uncaptured_subject_fails_at_once(ds_spark: Any, nats_url: str, js: Any, names: Any) -> None:
    js.create_stream(name=names.stream, subjects=[f"{names.subject}.>"])
    df = ds_spark.range(0, 50, numPartitions=2).selectExpr("cast(id as string) as data")
    started = time.monotonic()
    with pytest.raises(Exception, match=r"NoStreamResponseError.*no stream captures 'nowhere\.") as info:
        df.write.format("jetstream").option("servers", nats_url).option("subject", f"nowhere.{names.subject}") \
            .mode("append").save()
    # (it used to wait for the publish retries: 180 s)
    assert time.monotonic() - started < 60, info.value
    # A stream that does not capture the subject.
    js.create_stream(name=names.stream + "_B", subjects=[f"{names.subject}b.>"])
    with pytest.raises(Exception, match=r"stream: stream '.*_B' does not capture subject"):
        df.write.format("jetstream").option("servers", nats_url).option("subject", f"{names.subject}.x") \
            .option("stream", names.stream + "_B").mode("append").save()
    # Subject mode on a stream without discard_new_per_subject.
    with pytest.raises(Exception, match=r"dedupeMode: 'subject' needs stream"):
        df.selectExpr("data", "data as id").write.format("jetstream").option("servers", nats_url) \
            .option("subject", f"{names.subject}.ids").option("msgIdColumn", "id").option("dedupeMode", "subject") \
            .mode("append").save()
    # A subject column: each task checks its new values against the stream's subjects first.
    bad = ds_spark.range(0, 10, numPartitions=1).selectExpr(
        "cast(id as string) as data", f"case when id = 9 then 'elsewhere.x' else '{names.subject}.ok' end as subject"
    )
    with pytest.raises(Exception, match=r"subjectColumn: subject 'elsewhere.x'"):
        bad.write.format("jetstream").option("servers", nats_url).option("stream", names.stream).mode("append").save()
    assert js.stream(names.stream).info().state.messages == 0  # nothing published
    with pytest.raises(Exception, match=r"dataColumn: column 'id' is bigint"):
        ds_spark.range(0, 3).write.format("jetstream").option("servers", nats_url) \
            .option("subject", f"{names.subject}.x").option("dataColumn", "id").mode("append").save()


def test_duplicate_window_checked_once_on_the_driver(spark: Any, nats_url: str, js: Any, names: Any) -> None:
    """The data source's writer() runs on the driver: the warning is given there, and the tasks
    (here: the writer's write() in this process) do not check again."""
    import pyarrow as pa
    from pyspark.sql.types import StringType, StructField, StructType

    js.create_stream(name=names.stream, subjects=[f"{names.subject}.>"], duplicate_window=2.0)
    source = JetStreamDataSource({"servers": nats_url, "subject": f"{names.subject}.w", "writeId": "x"})
    schema = StructType([StructField("data", StringType())])
    with pytest.raises(Exception, match="only valid for a streaming write"):
        source.writer(schema, False)
    source = JetStreamDataSource({"servers": nats_url, "subject": f"{names.subject}.w"})
    with pytest.warns(DuplicateWindowWarning, match="duplicate_window of 2 s"):
        writer = source.writer(schema, False)
    assert writer.wopts.checked  # type: ignore[attr-defined]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second warning (from the task) would fail here
        message = writer.write(iter([pa.record_batch([pa.array(["a", "b"])], names=["data"])]))
    assert message.count == 2  # type: ignore[attr-defined]


# ====================================================================== the source's figures


def test_streaming_source_reports_its_figures(ds_spark: Any, nats_url: str, js: Any, names: Any, tmp_path: Path) -> None:
    js.create_stream(name=names.stream, subjects=[f"{names.subject}.>"])
    for i in range(25):
        js.publish(f"{names.subject}.x", b"0123456789")
    q = (
        ds_spark.readStream.format("jetstream").option("servers", nats_url).option("stream", names.stream)
        .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "10").load()
        .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True).start()
    )
    q.awaitTermination(120)
    assert q.exception() is None
    progress = [p for p in q.recentProgress if p["numInputRows"]]
    assert sum(p["numInputRows"] for p in progress) == 25
    if not HAS_ADMISSION_CONTROL:
        pytest.skip("reportLatestOffset needs PySpark >= 4.2")
    first = json.loads(progress[0]["sources"][0]["latestOffset"])
    assert first["seq"] == 26 and first["stream"] == names.stream and first["latestSeq"] == 25
    if HAS_TRIGGER_AVAILABLE_NOW:
        assert first["batchSequences"] == 10 and first["offsetsBehindLatest"] == 15
        assert first["estimatedBytesBehindLatest"] > 15 * 10  # (stored size includes subject and headers)
    last = json.loads(progress[-1]["sources"][0]["latestOffset"])
    assert last["offsetsBehindLatest"] == 0 and last["estimatedBytesBehindLatest"] == 0


# ====================================================================== payloads as columns


def test_json_payloads_read_as_columns(ds_spark: Any, nats_url: str, js: Any, names: Any) -> None:
    js.create_stream(name=names.stream, subjects=[f"{names.subject}.>"])
    payloads = [
        b'{"id": 1, "name": "a", "at": "2025-01-31T12:00:00Z", "tags": ["x"]}',
        b'{"id": 2, "name": "b"}',
        b"not json",
        b'{"id": "three", "name": "c"}',
        b'{"id": 4, "name": "d", "timestamp": "2025-02-01T00:00:00Z"}',
    ]
    for p in payloads:
        js.publish(f"{names.subject}.j", p)
    schema = "id long, name string, at timestamp, tags array<string>"

    def read(**extra: str) -> Any:
        return _reader(ds_spark, nats_url, names.stream, valueFormat="json", valueSchema=schema, **extra).load()

    df = read()
    assert df.columns == ["id", "name", "at", "tags", "_corrupt_record", "subject", "headers", "stream", "seq", "timestamp"]
    rows = {r.seq: r for r in df.collect()}
    assert (rows[1].id, rows[1].name, rows[1].tags, rows[1]._corrupt_record) == (1, "a", ["x"], None)
    assert rows[1].at.astimezone(timezone.utc) == datetime(2025, 1, 31, 12, tzinfo=timezone.utc)
    assert (rows[2].id, rows[2].at) == (2, None)
    assert (rows[3].id, rows[3].name, rows[3]._corrupt_record) == (None, None, "not json")
    assert (rows[4].id, rows[4].name, rows[4]._corrupt_record) == (None, "c", '{"id": "three", "name": "c"}')
    assert rows[5].subject == f"{names.subject}.j" and rows[5].stream == names.stream
    # DROPMALFORMED drops 3 and 4; FAILFAST names the message.
    assert sorted(r.seq for r in read(mode="DROPMALFORMED").collect()) == [1, 2, 5]
    with pytest.raises(Exception, match=r"malformed payload at sequence 3 .*not JSON"):
        read(mode="FAILFAST").collect()
    renamed = read(columnNameOfCorruptRecord="bad", includeHeaders="false")
    assert "bad" in renamed.columns and "headers" not in renamed.columns
    # A value field named like a message column replaces it.
    clash = _reader(ds_spark, nats_url, names.stream, valueSchema="id long, timestamp timestamp", mode="DROPMALFORMED").load()
    assert clash.columns == ["id", "timestamp", "subject", "headers", "stream", "seq"]
    got = {r.id: r.timestamp for r in clash.collect()}
    assert got[2] is None and got[4].astimezone(timezone.utc) == datetime(2025, 2, 1, tzinfo=timezone.utc)
    # string payloads
    text = _reader(ds_spark, nats_url, names.stream, valueFormat="string").load()
    assert dict(text.dtypes)["data"] == "string" and text.filter("seq = 3").first().data == "not json"


def test_user_schema_checked_against_the_source(ds_spark: Any, nats_url: str, js: Any, names: Any) -> None:
    js.create_stream(name=names.stream, subjects=[f"{names.subject}.>"])
    js.publish(f"{names.subject}.x", b'{"n": 1}')
    with pytest.raises(Exception, match=r"schema: the jetstream source returns 'subject string, data binary"):
        ds_spark.read.format("jetstream").schema("n int").option("servers", nats_url).option("stream", names.stream).load().collect()
    ours = "n int, _corrupt_record string, subject string, headers map<string,array<string>>, stream string, seq bigint, timestamp timestamp"
    df = ds_spark.read.format("jetstream").schema(ours).option("servers", nats_url).option("stream", names.stream) \
        .option("valueSchema", "n int").load()
    assert [r.n for r in df.collect()] == [1]


def test_json_write_serialises_columns_and_reads_back(ds_spark: Any, nats_url: str, js: Any, names: Any) -> None:
    js.create_stream(name=names.stream, subjects=[f"{names.subject}.>"])
    df = ds_spark.range(0, 20, numPartitions=2).selectExpr(
        "id", "concat('n', cast(id as string)) as name", "cast(id as decimal(6,2)) as price",
        "timestamp_seconds(1738324800 + id) as at", "array(cast(id as string)) as tags",
        f"concat('{names.subject}.', cast(id % 2 as string)) as subject",
    )
    df.write.format("jetstream").option("servers", nats_url).option("stream", names.stream) \
        .option("valueFormat", "json").mode("append").save()
    msgs = _stored(js, names.stream)
    assert len(msgs) == 20
    first = json.loads(next(m.data for m in msgs if json.loads(m.data)["id"] == 3))
    assert first == {"id": 3, "name": "n3", "price": 3.0, "at": "2025-01-31T12:00:03Z", "tags": ["3"]}
    assert {m.subject for m in msgs} == {f"{names.subject}.0", f"{names.subject}.1"}
    back = _reader(ds_spark, nats_url, names.stream, valueSchema="id long, name string, price decimal(6,2), at timestamp, tags array<string>",
                   mode="FAILFAST").load()
    assert sorted((r.id, r.name) for r in back.collect()) == [(i, f"n{i}") for i in range(20)]
    # A struct column 'value' is the payload object.
    nested = ds_spark.range(0, 3).selectExpr("named_struct('k', id, 'v', 'x') as value")
    nested.write.format("jetstream").option("servers", nats_url).option("subject", f"{names.subject}.s") \
        .option("valueFormat", "json").mode("append").save()
    assert sorted(m.data for m in _stored(js, names.stream) if m.subject == f"{names.subject}.s") == [
        b'{"k":0,"v":"x"}', b'{"k":1,"v":"x"}', b'{"k":2,"v":"x"}'
    ]


# ====================================================================== partitions by subject


def test_partition_by_subject(ds_spark: Any, nats_url: str, js: Any, names: Any) -> None:
    js.create_stream(name=names.stream, subjects=[f"{names.subject}.>"])
    sizes = {"a": 5, "b": 40, "c": 1}
    for subj, n in sizes.items():
        for i in range(n):
            js.publish(f"{names.subject}.{subj}", f"{subj}{i}".encode())
    df = _reader(ds_spark, nats_url, names.stream, partitionBy="subject", maxRecordsPerPartition="20").load()
    assert df.rdd.getNumPartitions() == 4  # a, b (twice), c
    from pyspark.sql.functions import spark_partition_id

    per = df.select(spark_partition_id().alias("p"), "subject").distinct().collect()
    by_part: dict[int, set[str]] = {}
    for r in per:
        by_part.setdefault(r.p, set()).add(r.subject)
    assert all(len(s) == 1 for s in by_part.values())  # one subject per partition
    assert df.count() == 46 and sorted(r.data for r in df.collect()) == sorted(
        f"{s}{i}".encode() for s, n in sizes.items() for i in range(n)
    )
    only = _reader(ds_spark, nats_url, names.stream, partitionBy="subject", subjects=f"{names.subject}.a,{names.subject}.c").load()
    assert only.rdd.getNumPartitions() == 2 and only.count() == 6
    with pytest.raises(Exception, match=r"partitionBy: expected 'sequence' or 'subject'"):
        _reader(ds_spark, nats_url, names.stream, partitionBy="key").load().collect()
    assert list(js.stream(names.stream).consumer_names()) == []


# ====================================================================== stopped mid-batch


def test_streaming_query_stopped_mid_batch_restarts_exactly_once(
    ds_spark: Any, nats_url: str, js: Any, names: Any, tmp_path: Path
) -> None:
    """A jetstream -> jetstream query stopped while its sink is half-way through a micro-batch:
    the batch is not committed, the restart from the checkpoint runs it again with the same msg
    ids, and the destination holds every source row once."""
    src, dst = names.stream + "_SRC", names.stream + "_DST"
    js.create_stream(name=src, subjects=[f"{names.subject}.in.>"])
    js.create_stream(name=dst, subjects=[f"{names.subject}.out.>"])
    n = 6000
    for i in range(n):
        js.publish_async(f"{names.subject}.in.x", f"r{i}".encode())
    js.publish_async_complete(timeout=30)
    ckpt = tmp_path / "ckpt"
    from pyspark.sql.functions import udf

    fast = tmp_path / "fast"  # (the restart's rows go at the first partition's pace)
    fast_name = str(fast)

    @udf("binary")
    def slow(data: bytes) -> bytes:
        # About 1.5 s per 1000 rows, and four times that for the second partition (the rows of
        # the second half) until the restart: the first partition's rows are stored well before
        # the second's, so the stop lands in the batch, not in a race with its end.
        import os

        late = int(data[1:]) >= n // 2 and not os.path.exists(fast_name)
        time.sleep(0.006 if late else 0.0015)
        return data

    def query(trigger: dict[str, Any]) -> Any:
        return (
            ds_spark.readStream.format("jetstream").option("servers", nats_url).option("stream", src)
            .option("startingOffsets", "earliest").option("minPartitions", "2").load()
            .select(slow("data").alias("data"))
            .writeStream.format("jetstream").option("servers", nats_url).option("subject", f"{names.subject}.out.x")
            .option("checkpointLocation", str(ckpt)).trigger(**trigger).start()
        )

    q = query({"processingTime": "1 second"})
    deadline = time.monotonic() + 120
    while js.stream(dst).info().state.messages < 500 and time.monotonic() < deadline and q.isActive:
        time.sleep(0.2)
    q.stop()
    stored_at_stop = js.stream(dst).info().state.messages
    # Stopped inside batch 0: its rows are partly or (when the stop waited for the running
    # tasks) wholly stored, and it is not committed, so the restart runs it again.
    assert 0 < stored_at_stop <= n, stored_at_stop
    commits = [p.name for p in (ckpt / "commits").iterdir() if p.name.isdigit()] if (ckpt / "commits").exists() else []
    assert commits == []  # batch 0 was not committed
    fast.touch()
    q = query({"availableNow": True})
    q.awaitTermination(300)
    assert q.exception() is None
    msgs = _stored(js, dst)
    assert len(msgs) == n
    assert sorted(m.data for m in msgs) == sorted(f"r{i}".encode() for i in range(n))
