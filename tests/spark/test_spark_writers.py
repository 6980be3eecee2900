"""The exactly-once writers in a local Spark (local[2,3]) against a real nats-server.

Each writer lands exactly the rows it was given, also when Spark runs a task or a micro-batch
again: a task failing on its first attempt after half its rows are stored, a streaming query
restarted from a checkpoint whose last batch was not committed, a whole job run again in
subject mode.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from jssync.spark import (
    DuplicateWindowWarning,
    JetStreamForeachWriter,
    ShortDuplicateWindowError,
    make_write_id,
    publish_partition,
    write_batch,
)

N = 20_000


def _count(js: Any, stream: str) -> int:
    return int(js.stream(stream).info().state.messages)


def _payloads(js: Any, stream: str, expected: int) -> list[bytes]:
    oc = js.ordered_consumer(stream)
    out: list[bytes] = []
    while len(out) < expected:
        batch = [m.data for m in oc.fetch(5000, expires=2.0)]
        if not batch:
            break
        out += batch
    return out


@pytest.fixture(scope="module")
def source_dir(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> str:
    """20k rows (``data`` = "0".."19999") in two parquet files: a replayable streaming source."""
    path = tmp_path_factory.mktemp("spark-source") / "rows"
    spark.range(0, N, numPartitions=2).selectExpr("cast(id as string) as data").write.parquet(str(path))
    return str(path)


def _uncommit_last_batch(checkpoint: Path) -> int:
    """Remove the last commit of a checkpoint: on restart Spark runs that batch again (same
    batch id, same offsets), like after a crash between the sink's write and the commit."""
    commits = sorted((int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit()))
    last = commits[-1]
    for p in (checkpoint / "commits").iterdir():
        if p.name in (str(last), f".{last}.crc"):
            p.unlink()
    return last


# --------------------------------------------------------------------------- publish_partition


def test_publish_partition_writes_exactly_n(spark: Any, nats_url: str, js: Any, names: Any) -> None:
    js.create_stream(name=names.stream, subjects=[names.subject + ".>"])
    subject = names.subject + ".rows"
    df = spark.range(0, N, numPartitions=4).selectExpr("cast(id as string) as data")
    run = make_write_id()
    df.foreachPartition(lambda rows: publish_partition(rows, servers=nats_url, subject=subject, run_id=run))
    assert _count(js, names.stream) == N
    data = _payloads(js, names.stream, N)
    assert sorted(int(d) for d in data) == list(range(N))

    # The same job again with the same run id (e.g. re-submitted within the window): nothing new.
    written = df.rdd.mapPartitions(
        lambda rows: [publish_partition(rows, servers=nats_url, subject=subject, run_id=run)]
    ).sum()
    assert written == N
    assert _count(js, names.stream) == N


def test_publish_partition_through_map_in_arrow(spark: Any, nats_url: str, js: Any, names: Any) -> None:
    """``mapInArrow`` hands publish_partition record batches: every row is stored once, with the
    msg ids foreachPartition gives the same rows (the same job through foreachPartition then
    stores nothing new)."""
    js.create_stream(name=names.stream, subjects=[names.subject + ".>"])
    subject = names.subject + ".arrow"
    df = spark.range(0, N, numPartitions=4).selectExpr("cast(id as string) as data")
    run, url = make_write_id(), nats_url

    def publish(batches: Any) -> Any:
        import pyarrow as pa

        n = publish_partition(batches, servers=url, subject=subject, run_id=run)
        yield pa.RecordBatch.from_pydict({"written": [n]})

    assert df.mapInArrow(publish, "written long").groupBy().sum("written").first()[0] == N
    assert _count(js, names.stream) == N
    assert sorted(int(d) for d in _payloads(js, names.stream, N)) == list(range(N))
    df.foreachPartition(lambda rows: publish_partition(rows, servers=url, subject=subject, run_id=run))
    assert _count(js, names.stream) == N


def test_task_failing_after_half_its_rows_is_retried_without_duplicates(
    spark: Any, nats_url: str, js: Any, names: Any, tmp_path: Path
) -> None:
    js.create_stream(name=names.stream, subjects=[names.subject + ".>"])
    subject = names.subject + ".rows"
    rows_n, parts = 4000, 4
    marks = tmp_path / "failures"
    marks.mkdir()
    run = make_write_id()
    url, marks_s = nats_url, str(marks)

    def partition(rows: Any) -> None:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        rows = list(rows)
        half = len(rows) // 2

        def feed() -> Any:
            for i, row in enumerate(rows):
                if i == half and ctx.attemptNumber() == 0:
                    open(os.path.join(marks_s, f"p{ctx.partitionId()}"), "w").close()
                    raise RuntimeError("injected failure after half the rows")
                yield row

        if ctx.attemptNumber() == 0:
            # The first attempt stores its first half for sure (the same msg ids: same run,
            # partition and row indexes), then fails in the middle of the full write.
            assert publish_partition(iter(rows[:half]), servers=url, subject=subject, run_id=run) == half
        publish_partition(feed(), servers=url, subject=subject, run_id=run)

    df = spark.range(0, rows_n, numPartitions=parts).selectExpr("cast(id as string) as data")
    df.foreachPartition(partition)
    assert sorted(p.name for p in marks.iterdir()) == [f"p{i}" for i in range(parts)]  # every task failed once
    assert _count(js, names.stream) == rows_n
    assert sorted(int(d) for d in _payloads(js, names.stream, rows_n)) == list(range(rows_n))


def test_subject_mode_full_job_rerun_leaves_no_duplicate(spark: Any, nats_url: str, js: Any, names: Any) -> None:
    js.create_stream(
        name=names.stream,
        subjects=[names.subject + ".*"],
        discard="new",
        max_msgs_per_subject=1,
        discard_new_per_subject=True,
        duplicate_window=1.0,  # no help from the msg-id window: the subject does the dedup
    )
    rows_n = 3000
    df = spark.range(0, rows_n, numPartitions=3).selectExpr("cast(id as string) as data", "concat('k', id) as key")

    def job() -> int:
        run = make_write_id()  # a new run: only the key column makes the ids stable
        return int(
            df.rdd.mapPartitions(
                lambda rows: [
                    publish_partition(
                        rows, servers=nats_url, subject=names.subject, run_id=run, msg_id_column="key",
                        dedupe_mode="subject", stream=names.stream,
                    )
                ]
            ).sum()
        )

    assert job() == rows_n
    assert job() == rows_n  # every row refused as "already written", counted as written
    assert _count(js, names.stream) == rows_n
    info = js.stream(names.stream).info(subjects_filter=names.subject + ".*")
    assert len(info.state.subjects) == rows_n


# --------------------------------------------------------------------------- streaming writers


class RecordingWriter(JetStreamForeachWriter):
    """Appends "<epoch> <partition> <written> <duplicates>" to a file at each successful close."""

    def __init__(self, record: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.record = record

    def open(self, partition_id: int, epoch_id: int) -> bool:
        self.where = (epoch_id, partition_id)
        return super().open(partition_id, epoch_id)

    def close(self, error: BaseException | None) -> None:
        super().close(error)
        r = self.last_result
        if error is None and r is not None:
            with open(self.record, "a") as f:
                f.write(f"{self.where[0]} {self.where[1]} {r.written} {r.duplicates}\n")


def test_foreach_writer_exactly_n_across_a_rerun_epoch(
    spark: Any, nats_url: str, js: Any, names: Any, source_dir: str, tmp_path: Path
) -> None:
    js.create_stream(name=names.stream, subjects=[names.subject + ".>"])
    checkpoint = tmp_path / "ck"
    record = tmp_path / "record.txt"
    src = spark.readStream.schema("data string").option("maxFilesPerTrigger", 1).parquet(source_dir)

    def run() -> list[list[int]]:
        record.write_text("")
        writer = RecordingWriter(str(record), servers=nats_url, subject=names.subject + ".rows")
        q = src.writeStream.foreach(writer).option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
        q.awaitTermination(120)
        assert q.exception() is None
        return [[int(x) for x in line.split()] for line in record.read_text().splitlines()]

    first = run()
    assert sum(r[2] for r in first) == N and sum(r[3] for r in first) == 0
    assert sorted({r[0] for r in first}) == [0, 1]  # two epochs (one file each)
    assert _count(js, names.stream) == N
    last = _uncommit_last_batch(checkpoint)
    again = run()  # the last epoch runs again: the same msg ids, all deduplicated
    assert {r[0] for r in again} == {last}
    assert sum(r[2] for r in again) == sum(r[3] for r in again) == N // 2
    assert _count(js, names.stream) == N
    assert sorted(int(d) for d in _payloads(js, names.stream, N)) == list(range(N))


def test_write_batch_exactly_n_across_a_rerun_batch(
    spark: Any, nats_url: str, js: Any, names: Any, source_dir: str, tmp_path: Path
) -> None:
    js.create_stream(name=names.stream, subjects=[names.subject + ".>"])
    checkpoint = tmp_path / "ck"
    src = spark.readStream.schema("data string").option("maxFilesPerTrigger", 1).parquet(source_dir)
    subject = names.subject + ".rows"
    calls: list[tuple[int, int]] = []  # (batch id, rows written): foreachBatch runs on the driver

    def batch(bdf: Any, bid: int) -> None:
        calls.append((bid, write_batch(bdf, bid, servers=nats_url, subject=subject)))

    def run() -> None:
        calls.clear()
        q = src.writeStream.foreachBatch(batch).option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
        q.awaitTermination(120)
        assert q.exception() is None

    run()
    assert calls == [(0, N // 2), (1, N // 2)]
    assert _count(js, names.stream) == N
    last = _uncommit_last_batch(checkpoint)
    run()
    assert calls == [(last, N // 2)]  # the batch ran again, its rows were all duplicates
    assert _count(js, names.stream) == N


# --------------------------------------------------------------------------- the duplicate window


def test_duplicate_window_warning_and_failure(spark: Any, nats_url: str, js: Any, names: Any) -> None:
    js.create_stream(name=names.stream, subjects=[names.subject + ".>"], duplicate_window=1.0)
    df = spark.range(0, 10, numPartitions=1).selectExpr("cast(id as string) as data")
    subject = names.subject + ".rows"
    with pytest.warns(DuplicateWindowWarning, match=r"duplicate_window of 1 s.*minDuplicateWindow \(120 s\)"):
        assert write_batch(df, 0, servers=nats_url, subject=subject, query_id="job-1", stream=names.stream) == 10
    with pytest.raises(ShortDuplicateWindowError, match="failOnShortWindow"):
        write_batch(df, 1, servers=nats_url, subject=subject, query_id="job-1", stream=names.stream, fail_on_short_window=True)
    # The stream is found from the subject too (no stream option).
    with pytest.warns(DuplicateWindowWarning):
        write_batch(df, 2, servers=nats_url, subject=subject, query_id="job-1", min_duplicate_window=60)
    assert _count(js, names.stream) == 20


def test_write_batch_checks_columns_and_ids_on_the_driver(spark: Any, nats_url: str) -> None:
    from jscore.errors import InvalidOptionError

    df = spark.range(0, 3).selectExpr("id", "cast(id as string) as data")
    with pytest.raises(InvalidOptionError, match="^query_id: "):
        write_batch(df, 0, servers=nats_url, subject="x.y")  # not in a streaming query
    with pytest.raises(InvalidOptionError, match="^dataColumn: .*'payload'"):
        write_batch(df, 0, servers=nats_url, subject="x.y", query_id="q", data_column="payload")
    with pytest.raises(InvalidOptionError, match="^dataColumn: column 'id' is bigint"):
        write_batch(df, 0, servers=nats_url, subject="x.y", query_id="q", data_column="id")
    with pytest.raises(InvalidOptionError, match="^subject: .*'subject'"):
        write_batch(df, 0, servers=nats_url, query_id="q")
    with pytest.raises(InvalidOptionError, match="^msgIdColumn: "):
        write_batch(df, 0, servers=nats_url, subject="x.y", msg_id_column="key")


# --------------------------------------------------------------------------- value_format


def test_writer_functions_serialise_columns_like_the_data_source(spark: Any, nats_url: str, js: Any, names: Any) -> None:
    """value_format="json" in publish_partition and write_batch: each payload is the row's
    columns (or its struct column ``value``) exactly as the data source's valueFormat=json
    writes the same DataFrame; value_format="string" writes the data column as text."""
    from datetime import datetime, timezone
    from decimal import Decimal

    from jssync.spark import JetStreamDataSource

    spark.dataSource.register(JetStreamDataSource)
    js.create_stream(name=names.stream, subjects=[names.subject + ".>"])
    rows = [(i, f"n{i}", Decimal(f"{i}.25"), datetime(2025, 1, 31, 12, i, tzinfo=timezone.utc), [i, None],
             {"k": i}, bytes([i])) for i in range(20)]
    df = spark.createDataFrame(rows, "id long, name string, price decimal(10,2), at timestamp, "
                                     "tags array<int>, attrs map<string,int>, raw binary").repartition(3)

    def written(tag: str) -> dict[int, bytes]:
        out = {}
        for m in js.ordered_consumer(names.stream, filter_subjects=[f"{names.subject}.{tag}"]).fetch(100, expires=2.0):
            out[int(json.loads(m.data).get("id", -1))] = m.data
        return out

    df.write.format("jetstream").option("servers", nats_url).option("subject", f"{names.subject}.ds") \
        .option("valueFormat", "json").option("minDuplicateWindow", "0").mode("append").save()
    want = written("ds")
    assert len(want) == 20 and want[3] == (
        b'{"id":3,"name":"n3","price":3.25,"at":"2025-01-31T12:03:00Z","tags":[3,null],"attrs":{"k":3},"raw":"Aw=="}'
    )
    run = make_write_id()
    subject = f"{names.subject}.fp"
    df.foreachPartition(lambda it: publish_partition(it, servers=nats_url, subject=subject, run_id=run,
                                                     value_format="json"))
    assert written("fp") == want
    assert write_batch(df, 0, servers=nats_url, subject=f"{names.subject}.wb", query_id="vf",
                       value_format="json") == 20
    assert written("wb") == want
    # A struct column `value` is the payload object; the subject column is not serialised.
    nested = df.selectExpr("struct(id, name) as value", f"'{names.subject}.nested' as subject")
    assert write_batch(nested, 0, servers=nats_url, query_id="vf2", value_format="json") == 20
    assert written("nested")[3] == b'{"id":3,"name":"n3"}'
    texts = df.selectExpr("id * 2 as data")
    assert write_batch(texts, 0, servers=nats_url, subject=f"{names.subject}.txt", query_id="vf3",
                       value_format="string") == 20
    got = sorted(int(m.data) for m in js.ordered_consumer(names.stream, filter_subjects=[f"{names.subject}.txt"]).fetch(100, expires=2.0))
    assert got == [2 * i for i in range(20)]
    from jscore.errors import InvalidOptionError

    with pytest.raises(InvalidOptionError, match="^valueFormat: json serialises a struct column 'value'"):
        write_batch(df.select("id").selectExpr("'x' as subject"), 0, servers=nats_url, query_id="q", value_format="json")
