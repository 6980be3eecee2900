"""The ``jetstream`` PySpark data source in a local Spark against a real nats-server: batch and
streaming reads (exact rows and sequences, partitioning, restarts from a checkpoint, data loss),
batch and streaming writes (exactly once, also when re-run or replayed), and option errors that
name the option.
"""

from __future__ import annotations

import re
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from jscore.errors import InvalidOptionError
from jssync.spark import datasource as dsmod
from jssync.spark.datasource import (
    HAS_ADMISSION_CONTROL,
    HAS_TRIGGER_AVAILABLE_NOW,
    SCHEMA,
    JetStreamDataSource,
    ReadOptions,
    SeqRange,
    iter_range,
    read_range,
    split_range,
    streaming_write_id,
)


_ALL = 2**63

# PySpark >= 4.2: Trigger.AvailableNow on a Python source honours maxRecordsPerTrigger (several
# micro-batches). PySpark 4.0 / 4.1 run it as one micro-batch holding the whole backlog.
_SPLITS_AVAILABLE_NOW = HAS_ADMISSION_CONTROL and HAS_TRIGGER_AVAILABLE_NOW


@pytest.fixture(scope="module")
def ds_spark(spark: Any) -> Any:
    spark.dataSource.register(JetStreamDataSource)
    return spark


def _reader(spark: Any, url: str, stream: str, **options: str) -> Any:
    r = spark.read.format("jetstream").option("servers", url).option("stream", stream)
    for k, v in options.items():
        r = r.option(k, v)
    return r


def _stream_reader(spark: Any, url: str, stream: str, **options: str) -> Any:
    r = spark.readStream.format("jetstream").option("servers", url).option("stream", stream)
    for k, v in options.items():
        r = r.option(k, v)
    return r


def _stored(js: Any, stream: str) -> list[tuple[int, str, bytes]]:
    """(seq, subject, data) of every message in the stream, read independently."""
    return [(m.metadata.sequence.stream, m.subject, m.data) for m in iter_range(js, stream, (), 1, _ALL)]


def _seqs(batches: Any) -> list[int]:
    """The ``seq`` column of the Arrow record batches a reader returns."""
    return [q for b in batches for q in b.column("seq").to_pylist()]


def _stamps(js: Any, stream: str) -> dict[int, int]:
    """seq -> stored timestamp in nanoseconds."""
    return {m.metadata.sequence.stream: m.metadata.timestamp_ns for m in iter_range(js, stream, (), 1, _ALL)}


def _run_available_now(query_source: Any, checkpoint: Path, out: Path) -> list[int]:
    q = (
        query_source.writeStream.format("parquet")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start(str(out))
    )
    q.awaitTermination(120)
    if q.exception() is not None:
        raise q.exception()
    return [int(p["numInputRows"]) for p in q.recentProgress]


# ====================================================================== options (no Spark)


@pytest.mark.parametrize(
    ("options", "streaming", "name"),
    [
        ({}, False, "stream"),
        ({"stream": "a.b"}, False, "stream"),
        ({"stream": "S", "subjects": "a,,b"}, False, "subjects"),
        ({"stream": "S", "subjects": "a.>.b"}, False, "subjects"),
        ({"stream": "S", "startingOffsets": "first"}, False, "startingOffsets"),
        ({"stream": "S", "startingOffsets": '{"seq": 0}'}, False, "startingOffsets"),
        ({"stream": "S", "startingOffsets": "latest"}, False, "startingOffsets"),
        ({"stream": "S", "startingTimestamp": "yesterday"}, False, "startingTimestamp"),
        ({"stream": "S", "startingTimestamp": "1", "startingOffsets": "earliest"}, True, "startingTimestamp"),
        ({"stream": "S", "endingOffsets": "earliest"}, False, "endingOffsets"),
        ({"stream": "S", "endingOffsets": '{"seq": 5}'}, True, "endingOffsets"),
        ({"stream": "S", "minPartitions": "0"}, False, "minPartitions"),
        ({"stream": "S", "maxRecordsPerPartition": "x"}, False, "maxRecordsPerPartition"),
        ({"stream": "S", "maxRecordsPerTrigger": "-3"}, True, "maxRecordsPerTrigger"),
        ({"stream": "S", "failOnDataLoss": "maybe"}, True, "failOnDataLoss"),
    ],
)
def test_read_option_errors_name_the_option(options: dict[str, str], streaming: bool, name: str) -> None:
    with pytest.raises(InvalidOptionError) as info:
        ReadOptions.from_options(options, streaming=streaming)
    assert str(info.value).startswith(name + ":"), str(info.value)


def test_read_options_parse_and_defaults() -> None:
    batch = ReadOptions.from_options({"stream": "S"}, streaming=False)
    assert (batch.starting, batch.ending, batch.fail_on_data_loss, batch.subjects) == ("earliest", None, True, ())
    live = ReadOptions.from_options({"STREAM": "S", "subjects": "a.*, b.>"}, streaming=True)
    assert live.starting == "latest" and live.subjects == ("a.*", "b.>")
    o = ReadOptions.from_options(
        {"stream": "S", "startingOffsets": '{"seq": 7}', "endingOffsets": '{"seq": 9}', "failOnDataLoss": "false"},
        streaming=False,
    )
    assert (o.starting, o.ending, o.fail_on_data_loss) == (7, 9, False)
    t = ReadOptions.from_options({"stream": "S", "startingTimestamp": "2025-01-31T12:00:00Z"}, streaming=True)
    assert t.starting_time == datetime(2025, 1, 31, 12, tzinfo=timezone.utc)
    ms = ReadOptions.from_options({"stream": "S", "startingTimestamp": "1738324800000"}, streaming=True)
    assert ms.starting_time == datetime(2025, 1, 31, 12, tzinfo=timezone.utc)


def test_split_range() -> None:
    assert split_range(5, 4) == []
    assert split_range(1, 10) == [SeqRange(0, 1, 10)]
    parts = split_range(1, 10, min_partitions=3)
    assert [(p.start, p.end) for p in parts] == [(1, 4), (5, 7), (8, 10)]
    assert len(split_range(1, 10, max_records_per_partition=4)) == 3
    assert len(split_range(1, 2, min_partitions=8)) == 2  # never an empty range
    assert streaming_write_id("base", "0a1b-2c", 3) == "base-0a1b2c-b3"


def test_stream_reader_offsets_partitions_and_data_loss(nats_url: str, js: Any, names: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver side of a streaming read as every supported PySpark calls it (no Spark needed):
    ``initialOffset``, ``partitions``, ``read`` and ``latestOffset()`` without arguments (what
    PySpark 4.0 / 4.1 call; the start is then the end returned last)."""
    import inspect

    from jssync.spark.datasource import DataLossError, JetStreamStreamReader

    js.create_stream(name=names.stream, subjects=[f"{names.subject}.>"])
    for i in range(10):
        js.publish(f"{names.subject}.x", b"x")
    source = JetStreamDataSource({"servers": nats_url, "stream": names.stream, "maxRecordsPerTrigger": "4"})
    reader = source.streamReader(source.schema())  # type: ignore[arg-type]
    assert isinstance(reader, JetStreamStreamReader)
    assert len(inspect.signature(reader.latestOffset).parameters) == 2  # also callable as 4.2+ does
    if not HAS_ADMISSION_CONTROL:
        assert reader.getDefaultReadLimit() is None
    assert reader.initialOffset() == {"seq": 11}  # streaming default: latest
    # The first call of a run is not capped (PySpark 4.0 runs Trigger.AvailableNow as one batch
    # up to a single latestOffset() call); maxRecordsPerTrigger applies from the second on.
    assert reader.latestOffset() == {"seq": 11}
    for i in range(10):
        js.publish(f"{names.subject}.x", b"y")  # sequences 11..20
    assert reader.latestOffset() == {"seq": 15}
    assert reader.latestOffset() == {"seq": 19}
    assert reader.latestOffset() == {"seq": 21}
    assert reader.latestOffset() == {"seq": 21}  # nothing new
    parts = reader.partitions({"seq": 3}, {"seq": 11})
    assert [(p.start, p.end) for p in parts] == [(3, 10)]  # type: ignore[attr-defined]
    assert _seqs(reader.read(parts[0])) == list(range(3, 11))  # Arrow batches
    monkeypatch.setattr(dsmod, "ARROW_BATCH_ROWS", 3)
    batches = list(reader.read(parts[0]))
    assert [b.num_rows for b in batches] == [3, 3, 2] and _seqs(batches) == list(range(3, 11))
    tuples = list(read_range(reader.config, reader.ropts, parts[0]))
    assert [row[5] for row in tuples] == [t for b in batches for t in b.column("timestamp").to_pylist()]
    assert [row[2] for row in tuples] == [dict(h) if h is not None else None for b in batches for h in b.column("headers").to_pylist()]
    assert reader.partitions({"seq": 11}, {"seq": 11}) == []  # (4.0 calls this on a restart)
    js.stream(names.stream).purge(seq=6)
    with pytest.raises(DataLossError, match="failOnDataLoss"):
        reader.partitions({"seq": 3}, {"seq": 11})
    # A range planned before the purge, read after it: the task fails too.
    with pytest.raises(DataLossError, match="failOnDataLoss"):
        list(reader.read(parts[0]))
    lenient = JetStreamDataSource({"servers": nats_url, "stream": names.stream, "failOnDataLoss": "false"})
    lreader = lenient.streamReader(lenient.schema())  # type: ignore[arg-type]
    lparts = lreader.partitions({"seq": 3}, {"seq": 12})
    assert [q for p in lparts for q in _seqs(lreader.read(p))] == [6, 7, 8, 9, 10, 11]
    # latestOffset() without arguments checks for data loss from the second call on.
    legacy = source.streamReader(source.schema())  # type: ignore[arg-type]
    assert legacy.latestOffset() == {"seq": 21}
    assert lreader.latestOffset() == {"seq": 21}
    for i in range(5):
        js.publish(f"{names.subject}.x", b"z")  # sequences 21..25
    js.stream(names.stream).purge(seq=24)
    with pytest.raises(DataLossError, match="failOnDataLoss"):
        legacy.latestOffset()
    assert lreader.latestOffset() == {"seq": 26}  # skips 21..23, reads 24..25
    assert list(js.stream(names.stream).consumer_names()) == []


@pytest.mark.skipif(not HAS_ADMISSION_CONTROL, reason="admission control (ReadLimit) needs PySpark >= 4.2")
def test_stream_reader_admission_control_and_available_now(nats_url: str, js: Any, names: Any) -> None:
    """``latestOffset(start, limit)`` and Trigger.AvailableNow as PySpark 4.2+ call them."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

    from jssync.spark.datasource import DataLossError, JetStreamStreamReader

    js.create_stream(name=names.stream, subjects=[f"{names.subject}.>"])
    for i in range(10):
        js.publish(f"{names.subject}.x", b"x")
    source = JetStreamDataSource({"servers": nats_url, "stream": names.stream, "maxRecordsPerTrigger": "4"})
    reader = source.streamReader(source.schema())  # type: ignore[arg-type]
    assert isinstance(reader, JetStreamStreamReader)
    assert reader.getDefaultReadLimit() == ReadMaxRows(4)
    start = {"seq": 1}
    assert reader.latestOffset(start, ReadMaxRows(4)) == {"seq": 5}
    assert reader.latestOffset(start, ReadAllAvailable()) == {"seq": 11}
    assert reader.latestOffset({"seq": 8}, ReadMinRows(5)) == {"seq": 8}  # only 3: wait
    assert reader.latestOffset({"seq": 11}, ReadMaxRows(4)) == {"seq": 11}  # nothing new
    # Trigger.AvailableNow: never past the end seen when it was prepared.
    reader.prepareForTriggerAvailableNow()
    js.publish(f"{names.subject}.x", b"late")
    assert reader.latestOffset({"seq": 9}, ReadAllAvailable()) == {"seq": 11}
    js.stream(names.stream).purge(seq=6)
    with pytest.raises(DataLossError, match="failOnDataLoss"):
        reader.latestOffset({"seq": 3}, ReadAllAvailable())
    lenient = JetStreamDataSource({"servers": nats_url, "stream": names.stream, "failOnDataLoss": "false"})
    lreader = lenient.streamReader(lenient.schema())  # type: ignore[arg-type]
    assert lreader.latestOffset({"seq": 3}, ReadMaxRows(2)) == {"seq": 8}  # skips to 6, then 2 rows
    assert list(js.stream(names.stream).consumer_names()) == []


# ====================================================================== batch read


@pytest.mark.parametrize("allow_direct", [False, True], ids=["ordered-consumers", "direct-gets"])
def test_batch_read_exact_rows_sequences_and_partitions(
    ds_spark: Any, nats_url: str, js: Any, names: Any, allow_direct: bool
) -> None:
    subj = names.subject
    js.create_stream(name=names.stream, subjects=[f"{subj}.>"], allow_direct=allow_direct)
    for i in range(300):
        headers = {"k": ["v1", "v2"], "one": "x"} if i == 7 else None
        js.publish(f"{subj}.{'a' if i % 3 == 0 else 'b'}", f"m{i}".encode(), headers=headers)
    js.stream(names.stream).delete_msg(50)
    js.stream(names.stream).delete_msg(51)
    stored = _stored(js, names.stream)
    assert len(stored) == 298

    direct = {"directGet": "true"} if allow_direct else {}
    df = _reader(ds_spark, nats_url, names.stream, minPartitions="4", **direct).load()
    assert df.schema.simpleString() == ds_spark.createDataFrame([], SCHEMA).schema.simpleString()
    assert df.rdd.getNumPartitions() == 4
    rows = df.collect()
    assert sorted((r.seq, r.subject, r.data) for r in rows) == stored
    assert {r.stream for r in rows} == {names.stream}
    by_seq = {r.seq: r for r in rows}
    assert by_seq[8].headers == {"k": ["v1", "v2"], "one": ["x"]}
    assert by_seq[9].headers is None
    # (collect gives naive local datetimes: compare instants)
    want_ns = _stamps(js, names.stream)[8]
    got = by_seq[8].timestamp.astimezone(timezone.utc)
    assert round(got.timestamp() * 1_000_000) == want_ns // 1000  # truncated to µs, like StoredMsg.time

    # A subject filter: a sparse range, read by sequence; maxRecordsPerPartition splits it.
    fdf = _reader(ds_spark, nats_url, names.stream, subjects=f"{subj}.a", maxRecordsPerPartition="100", **direct).load()
    assert fdf.rdd.getNumPartitions() == 3
    assert sorted(r.seq for r in fdf.collect()) == [s for s, sub, _ in stored if sub == f"{subj}.a"]

    # Start / end offsets (end exclusive), and a start by timestamp.
    part = _reader(
        ds_spark, nats_url, names.stream, startingOffsets='{"seq": 40}', endingOffsets='{"seq": 61}', **direct
    ).load()
    assert sorted(r.seq for r in part.collect()) == [s for s in range(40, 61) if s not in (50, 51)]
    # (exact: the stored nanosecond timestamps; the option is in epoch milliseconds)
    stamps = _stamps(js, names.stream)
    cut_ms = stamps[290] // 1_000_000
    since = _reader(ds_spark, nats_url, names.stream, startingTimestamp=str(cut_ms), **direct).load()
    assert sorted(r.seq for r in since.collect()) == sorted(s for s, ns in stamps.items() if ns >= cut_ms * 1_000_000)

    # No server-side state left behind.
    assert list(js.stream(names.stream).consumer_names()) == []


def _records(
    js: Any, stream: str, start: int, end: int, batch: int | None = None, subjects: tuple[str, ...] = (), direct: bool = True
) -> Any:
    records = dsmod.iter_range_records(js, stream, subjects, start, end, batch, direct)
    return [(seq, subject, data) for subject, data, _h, seq, _t in records]


def test_a_read_stopped_early_deletes_its_ordered_consumer_at_once(js: Any, names: Any) -> None:
    """Closing the record or message iterator of a range mid-way ends its ordered consumer
    then and there (not when the garbage collector gets to it): nothing is left on the server."""
    js.create_stream(name=names.stream, subjects=[f"{names.subject}.>"])
    for i in range(30):
        js.publish(f"{names.subject}.x", b"%d" % i)
    for it in (dsmod.iter_range_records(js, names.stream, (), 1, 30, 10, False), iter_range(js, names.stream, (), 1, 30, 10)):
        first = next(it)
        assert list(js.stream(names.stream).consumer_names()), "reading with an ordered consumer"
        keep = [first, it]  # (a reference kept: only close() may end it)
        it.close()
        assert list(js.stream(names.stream).consumer_names()) == []
        assert keep


def test_a_read_tasks_pulls_stop_at_their_byte_limit_and_a_larger_message_is_still_read(js: Any, names: Any) -> None:
    """Pulls with a byte limit (a read task's, when fetchBatchSize is not set) take the stream
    in several pulls, in order; a message over the limit ends the pulls with it empty, and it
    is read by a pull without the limit, not taken for the end of the stream."""
    js.create_stream(name=names.stream, subjects=[f"{names.subject}.>"])
    sizes = [100] * 30 + [5000] + [100] * 9
    for i, size in enumerate(sizes):
        js.publish(f"{names.subject}.x", bytes([65 + i % 26]) * size, headers={"Nats-Msg-Id": f"m{i}"})
    pulls = list(dsmod._iter_ordered(js, names.stream, (), 1, len(sizes), 1000, records=True, max_bytes=2000))
    got = [r for pull in pulls for r in pull]
    assert [r[3] for r in got] == list(range(1, len(sizes) + 1))
    assert [len(r[1]) for r in got] == sizes
    assert len(pulls) >= 3, "2000 bytes a pull: several pulls"
    assert [len(pull) for pull in pulls if any(len(r[1]) == 5000 for r in pull)] == [1], "asked again for it alone"
    limited = [pull for pull in pulls if all(len(r[1]) == 100 for r in pull)]
    assert len(limited) >= 2 and all(sum(len(r[1]) for r in pull) <= 2000 for pull in limited)
    assert dsmod.read_fetch_bytes(1 << 20) == dsmod.READ_FETCH_BYTES
    assert dsmod.read_fetch_bytes(64 << 20) == 128 << 20, "any one message fits a pull"
    assert list(js.stream(names.stream).consumer_names()) == []


def test_a_server_that_refuses_the_read_tasks_pulls_is_read_with_smaller_ones(
    js: Any, names: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server whose limits (max_request_batch, max_request_max_bytes) refuse a read task's
    pulls of 16,384 messages and 8 MiB is read with pulls of 4096 messages and no byte limit,
    as before those pulls; a refusal of those too is the task's error."""
    from jscore.errors import PullRequestLimitError
    from jssync.ordered import OrderedConsumer

    js.create_stream(name=names.stream, subjects=[f"{names.subject}.>"])
    for i in range(30):
        js.publish(f"{names.subject}.x", b"m%d" % i)
    real = OrderedConsumer._fetch_records
    asked: list[tuple[int, int | None]] = []

    def limited(self: Any, max_messages: int, **kw: Any) -> Any:
        asked.append((max_messages, kw.get("max_bytes")))
        if kw.get("max_bytes") is not None or max_messages > 4096:
            raise PullRequestLimitError(409, f"Exceeded MaxRequestBatch of {limit}")
        return real(self, max_messages, **kw)

    monkeypatch.setattr(OrderedConsumer, "_fetch_records", limited)
    limit = 4096
    got = [r for pull in dsmod.iter_range_batches(js, names.stream, (), 1, 30) for r in pull]
    assert [r[1] for r in got] == [b"m%d" % i for i in range(30)]
    assert asked[0] == (30, dsmod.read_fetch_bytes(js.client.max_payload)) and asked[1] == (30, None)
    limit = 1
    monkeypatch.setattr(OrderedConsumer, "_fetch_records", lambda self, n, **kw: (_ for _ in ()).throw(
        PullRequestLimitError(409, "Exceeded MaxRequestBatch of 1")))
    with pytest.raises(PullRequestLimitError):
        list(dsmod.iter_range_batches(js, names.stream, (), 1, 30))
    assert list(js.stream(names.stream).consumer_names()) == []


def test_direct_get_option_needs_a_stream_that_allows_them(ds_spark: Any, nats_url: str, js: Any, names: Any) -> None:
    js.create_stream(name=names.stream, subjects=[f"{names.subject}.>"])
    js.publish(f"{names.subject}.x", b"m")
    assert ReadOptions.from_options({"stream": "S", "directGet": "true"}, streaming=False).direct_get
    with pytest.raises(Exception, match=r"directGet: stream .* does not allow direct gets"):
        _reader(ds_spark, nats_url, names.stream, directGet="true").load().collect()
    with pytest.raises(InvalidOptionError, match="directGet"):
        ReadOptions.from_options({"stream": "S", "directGet": "sometimes"}, streaming=False)


def test_direct_read_of_a_range_and_when_it_asks_the_leader(
    js: Any, names: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream with allow_direct is read with batched direct gets, no consumer; the leader
    (an ordered consumer) reads only what the direct gets cannot vouch for: here the end of
    the range, deleted."""
    subj = names.subject
    js.create_stream(name=names.stream, subjects=[f"{subj}.>"], allow_direct=True)
    for i in range(60):
        js.publish(f"{subj}.{'a' if i % 2 else 'b'}", f"m{i}".encode(), headers={"Nats-Msg-Id": f"id{i}"} if i % 5 else None)
    ordered: list[tuple[int, int]] = []
    real = dsmod._iter_ordered

    def spy(js_: Any, stream: str, subjects: Any, start: int, end: int, batch: int, *, records: bool, **kw: Any) -> Any:
        if records:  # (the reader's; the test's own helpers read messages with iter_range)
            ordered.append((start, end))
        return real(js_, stream, subjects, start, end, batch, records=records, **kw)

    want = [(m[0], m[1], m[2]) for m in _stored(js, names.stream)]  # (read with iter_range, before the spy)
    monkeypatch.setattr(dsmod, "_iter_ordered", spy)
    assert _records(js, names.stream, 1, 60, batch=7) == want
    assert _records(js, names.stream, 11, 30) == want[10:30]
    assert ordered == [], "read with direct gets alone"
    assert _records(js, names.stream, 1, 5, direct=False) == want[:5]
    assert ordered == [(1, 5)], "without directGet: an ordered consumer, allow_direct or not"
    ordered.clear()
    got = list(dsmod.iter_range_records(js, names.stream, (), 5, 6, None, True))
    assert [(r[3], dsmod._headers_dict(r[2])) for r in got] == [(5, {"Nats-Msg-Id": ["id4"]}), (6, None)]
    stamps = _stamps(js, names.stream)
    assert [dsmod._stamp_value(r[4]).ns for r in got] == [stamps[5], stamps[6]], "the exact stored time"
    # One filter subject: direct gets too, stopping at the end of the range.
    assert _records(js, names.stream, 1, 40, batch=4, subjects=(f"{subj}.a",)) == [w for w in want[:40] if w[1].endswith(".a")]
    assert ordered == []
    # The end of the range deleted: the direct gets stop early; the leader confirms the rest.
    for seq in (58, 59, 60):
        js.stream(names.stream).delete_msg(seq)
    assert _records(js, names.stream, 1, 60, batch=25) == want[:57]
    assert ordered == [(58, 60)]
    # Two filter subjects: a direct get takes one, so the ordered consumer reads it all.
    assert _records(js, names.stream, 1, 10, subjects=(f"{subj}.a", f"{subj}.b")) == want[:10]
    assert ordered[-1] == (1, 10)
    assert list(js.stream(names.stream).consumer_names()) == []


def test_time_column_from_texts_nanoseconds_or_both() -> None:
    """The time column of a read batch: RFC 3339 texts (direct gets), nanoseconds (an ordered
    consumer), or both in one batch (a direct read that went on with an ordered consumer)."""
    import pyarrow as pa

    from jscore.times import parse_server_stamp, unix_ns

    texts = ["2026-11-28T11:15:52.794341572Z", "2026-11-28T11:15:53.1Z"]
    nanos = [unix_ns(parse_server_stamp(t)) for t in texts]
    want = [n // 1000 for n in nanos]
    us = pa.timestamp("us", tz="UTC")
    times = [parse_server_stamp(t) for t in texts]
    for stamps in (texts, nanos, times, [texts[0], nanos[1]], [nanos[0], texts[1]], [times[0], texts[1]]):
        assert dsmod._stamp_array(stamps, us).cast(pa.int64()).to_pylist() == want, stamps
    assert [dsmod._stamp_value(s).ns for s in (texts[0], nanos[0], times[0])] == [nanos[0]] * 3
    # Outside Arrow's nanosecond range, and before 1970 (rounded down, as a datetime is).
    odd = ["1969-12-31T23:59:59.9999995Z", "2300-01-01T00:00:00.5Z", "1600-01-01T00:00:00.1Z"]
    got = dsmod._stamp_array(odd, us).cast(pa.int64()).to_pylist()
    assert got == [unix_ns(parse_server_stamp(t)) // 1000 for t in odd] and got[0] == -1


def test_time_column_from_nanoseconds_in_one_call_or_one_by_one() -> None:
    """Nanosecond stamps (an ordered consumer's) become microseconds rounded down, in one call
    when they fit int64, one by one past it (an ack subject's stamp is a u64)."""
    import pyarrow as pa

    us = pa.timestamp("us", tz="UTC")
    for stamps in ([0, 999, 1000, 1_764_000_000_123_456_789], [2**63 + 5_000, 1_999]):
        assert dsmod._stamp_array(stamps, us).cast(pa.int64()).to_pylist() == [n // 1000 for n in stamps]
        # (a run read in bulk gives them as an Arrow uint64 array: the same column)
        assert dsmod._ns_stamp_array(pa.array(stamps, type=pa.uint64()), us).equals(dsmod._stamp_array(stamps, us))


def test_headers_column_is_each_messages_headers_by_key() -> None:
    """The read's headers column, built from the batch's columns (no dict per message): the
    same map as the dict of each message's headers, null where there are none."""
    import pyarrow as pa

    from jscore.headers import Headers, bulk_headers, parse_header_block

    type_ = dsmod._arrow_schema().field("headers").type
    one = [parse_header_block(b"NATS/1.0\r\nNats-Msg-Id: r-%d\r\n\r\n" % i)[0] for i in range(3)]
    many = parse_header_block(b"NATS/1.0\r\nA: 1\r\nB: x\r\nA: 2\r\n\r\n")[0]
    lines = [bulk_headers(h) for h in one]  # (as a read keeps them: one key, one value each)
    assert all(isinstance(h, str) for h in lines)
    for items in (
        one, [one[0], None, "K: v\r\n", "", one[1]], [None, many, one[2], Headers([("C", "z")])], [None, None], [],
        lines, ["A: 1\r\n", "B: 2\r\n"], ["A: 1\r\n", None, "A: 2\r\n"], ["A: 1\r\nA: 2\r\n", "A: 3\r\n"],
    ):
        got = dsmod._headers_array(list(items), type_)
        assert got.type == type_
        want = [None if (d := dsmod._headers_dict(h) if h else None) is None else list(d.items()) for h in items]
        assert got.to_pylist() == want, items
    assert pa.array([{"A": ["1", "2"]}], type=type_).to_pylist() == [[("A", ["1", "2"])]]  # (the form compared)


def test_direct_read_that_fails_goes_on_with_the_leader(js: Any, names: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A direct get that fails midway (here a timeout after five replies: it could be a server
    that cannot batch, no responders, a permission) hands the rest of the range to an ordered
    consumer, from the last message taken: nothing lost, nothing twice."""
    from jscore.errors import TimeoutError as NatsTimeout
    from jssync.stream import Stream

    subj = names.subject
    js.create_stream(name=names.stream, subjects=[f"{subj}.>"], allow_direct=True)
    for i in range(30):
        js.publish(f"{subj}.x", f"m{i}".encode())
    real = Stream._direct_rows
    calls = []

    class Failing:
        def __init__(self, it: Any) -> None:
            self.it, self.n = it, 0

        def __enter__(self) -> Any:
            return self

        def __exit__(self, *exc: object) -> None:
            self.it.close()

        def __iter__(self) -> Any:
            for row in self.it:
                if self.n == 5:
                    raise NatsTimeout("injected")
                self.n += 1
                yield row

    def failing(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return Failing(real(self, *args, **kwargs))

    monkeypatch.setattr(Stream, "_direct_rows", failing)
    want = [(m[0], m[1], m[2]) for m in _stored(js, names.stream)]
    assert _records(js, names.stream, 1, 30, batch=20) == want
    assert len(calls) == 1, "the rest came from the ordered consumer"


def test_direct_read_of_messages_with_headers_named_like_the_servers(js: Any, names: Any) -> None:
    """Messages carrying Nats-Sequence, Nats-Subject, ... of their own (a republished message
    does): the reader goes by the server's values, which come last in a direct get reply."""
    subj = names.subject
    js.create_stream(name=names.stream, subjects=[f"{subj}.>"], allow_direct=True)
    for i in range(20):
        own = {"Nats-Sequence": "999", "Nats-Subject": "forged", "Nats-Stream": "OTHER", "Nats-Last-Sequence": "7"} if i in (0, 2, 8) else None
        js.publish(f"{subj}.x", f"m{i}".encode(), headers=own)
    want = [(m[0], m[1], m[2]) for m in _stored(js, names.stream)]
    assert len(want) == 20
    assert _records(js, names.stream, 1, 20, batch=6) == want
    got = list(dsmod.iter_range_records(js, names.stream, (), 3, 3, None, True))
    assert dsmod._headers_dict(got[0][2]) == {
        "Nats-Sequence": ["999"], "Nats-Subject": ["forged"], "Nats-Stream": ["OTHER"], "Nats-Last-Sequence": ["7"]
    }
    msg = js.stream(names.stream).direct_get(9)  # (a single get: no cursor headers of the server's)
    assert (msg.seq, msg.subject, msg.stream) == (9, f"{subj}.x", names.stream)
    assert msg.headers is not None and dict(msg.headers.items()) == {
        "Nats-Sequence": "999", "Nats-Subject": "forged", "Nats-Stream": "OTHER", "Nats-Last-Sequence": "7"
    }


def test_direct_read_takes_no_reply_of_a_filtered_mirror(js: Any, names: Any) -> None:
    """A mirror with mirror_direct answers the stream's direct gets with ITS messages (here
    half of them): the reader takes only the stream's own replies, so nothing is missed."""
    from jscore.models import StreamSource

    subj = names.subject
    js.create_stream(name=names.stream, subjects=[f"{subj}.>"], allow_direct=True)
    for i in range(40):
        js.publish(f"{subj}.{'a' if i % 2 else 'b'}", f"m{i}".encode())
    mirror = names.stream + "_M"
    js.create_stream(name=mirror, mirror=StreamSource(name=names.stream, filter_subject=f"{subj}.a"), mirror_direct=True)
    try:
        deadline = time.monotonic() + 10
        while js.stream_info(mirror).state.messages < 20:
            assert time.monotonic() < deadline, "the mirror did not catch up"
            time.sleep(0.05)
        # (the mirror answers some of the requests: several reads see both kinds of replies)
        seen = {m.stream for _ in range(20) for m in js.stream(names.stream).direct_get_batch(seq=1, batch=2)}
        assert seen == {names.stream, mirror}, "the mirror answers the stream's direct gets"
        want = [(m[0], m[1], m[2]) for m in _stored(js, names.stream)]
        for _ in range(10):
            assert _records(js, names.stream, 1, 40, batch=10) == want
    finally:
        js.delete_stream(mirror)


def test_batch_read_option_error_reaches_the_driver(ds_spark: Any, nats_url: str) -> None:
    with pytest.raises(Exception, match="minPartitions"):
        _reader(ds_spark, nats_url, "S", minPartitions="many").load().collect()
    with pytest.raises(Exception, match="servers"):
        ds_spark.read.format("jetstream").option("stream", "S").load().collect()


# ====================================================================== streaming read


def test_streaming_read_available_now_restart(ds_spark: Any, nats_url: str, js: Any, names: Any, tmp_path: Path) -> None:
    js.create_stream(name=names.stream, subjects=[f"{names.subject}.>"])
    for i in range(25):
        js.publish(f"{names.subject}.x", f"a{i}".encode())
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"

    def source(**extra: str) -> Any:
        return _stream_reader(ds_spark, nats_url, names.stream, startingOffsets="earliest", **extra).load()

    # maxRecordsPerTrigger splits the backlog into micro-batches; availableNow stops at the end.
    batches = _run_available_now(source(maxRecordsPerTrigger="10"), ckpt, out)
    assert [n for n in batches if n] == ([10, 10, 5] if _SPLITS_AVAILABLE_NOW else [25])
    for i in range(25, 40):
        js.publish(f"{names.subject}.x", f"a{i}".encode())
    batches = _run_available_now(source(), ckpt, out)
    assert sum(batches) == 15  # only the new rows
    rows = ds_spark.read.parquet(str(out)).collect()
    seqs = sorted(r.seq for r in rows)
    assert seqs == list(range(1, 41))  # every one, none twice
    assert sorted(r.data for r in rows) == sorted(f"a{i}".encode() for i in range(40))
    # Nothing new: a restart reads nothing.
    assert sum(_run_available_now(source(), ckpt, out)) == 0
    assert list(js.stream(names.stream).consumer_names()) == []


def test_streaming_read_fail_on_data_loss(ds_spark: Any, nats_url: str, js: Any, names: Any, tmp_path: Path) -> None:
    js.create_stream(name=names.stream, subjects=[f"{names.subject}.>"])
    for i in range(5):
        js.publish(f"{names.subject}.x", b"x")
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"

    def source(**extra: str) -> Any:
        return _stream_reader(ds_spark, nats_url, names.stream, startingOffsets="earliest", **extra).load()

    assert sum(_run_available_now(source(), ckpt, out)) == 5
    for i in range(5):
        js.publish(f"{names.subject}.x", b"y")
    js.stream(names.stream).purge(keep=2)  # sequences 6..8 were never read
    with pytest.raises(Exception, match="failOnDataLoss") as info:
        _run_available_now(source(), ckpt, out)
    assert "6..8" in str(info.value)
    assert sum(_run_available_now(source(failOnDataLoss="false"), ckpt, out)) == 2
    assert sorted(r.seq for r in ds_spark.read.parquet(str(out)).collect()) == [1, 2, 3, 4, 5, 9, 10]


# ====================================================================== writes


def test_batch_write_exactly_once_and_rerun_with_msg_id_column(
    ds_spark: Any, nats_url: str, js: Any, names: Any
) -> None:
    js.create_stream(name=names.stream, subjects=[f"{names.subject}.>"])
    assert _reader(ds_spark, nats_url, names.stream).load().count() == 0  # an empty stream reads empty
    n = 3000
    df = ds_spark.range(0, n, numPartitions=3).selectExpr(
        "cast(id as string) as key", "cast(concat('row-', id) as binary) as data"
    )

    def write(**extra: str) -> None:
        w = df.write.format("jetstream").option("servers", nats_url).option("subject", f"{names.subject}.w")
        w = w.option("stream", names.stream)
        for k, v in extra.items():
            w = w.option(k, v)
        w.mode("append").save()

    write(msgIdColumn="key")
    assert js.stream(names.stream).info().state.messages == n
    write(msgIdColumn="key")  # the same job again: every id is a duplicate
    assert js.stream(names.stream).info().state.messages == n
    datas = sorted(d for _, _, d in _stored(js, names.stream))
    assert datas == sorted(f"row-{i}".encode() for i in range(n))
    # The stream reads back through the data source, the same rows.
    back = _reader(ds_spark, nats_url, names.stream).load()
    assert back.count() == n

    with pytest.raises(Exception, match="append"):
        df.write.format("jetstream").option("servers", nats_url).option("subject", "x.y").mode("overwrite").save()


def test_batch_write_arrow_columns_subject_headers_and_nulls(ds_spark: Any, nats_url: str, js: Any, names: Any) -> None:
    """The batch sink reads Arrow batches: a subject column, a map<string,array<string>> headers
    column, a null data value (an empty message) and a string data column all arrive as rows
    would; the msg ids are <write id>-<partition>-<row index>, the same as the Row path."""
    js.create_stream(name=names.stream, subjects=[f"{names.subject}.>"])
    n = 600
    df = ds_spark.range(0, n, numPartitions=2).selectExpr(
        f"concat('{names.subject}.s', cast(id % 3 as string)) as subject",
        "case when id = 7 then null else cast(id as string) end as data",
        "map('row', array(cast(id as string)), 'tag', array('a', 'b')) as headers",
    )
    df.write.format("jetstream").option("servers", nats_url).option("stream", names.stream).mode("append").save()
    msgs = list(iter_range(js, names.stream, (), 1, _ALL))
    assert len(msgs) == n
    by_row = {int(m.headers["row"]): m for m in msgs}
    assert sorted(by_row) == list(range(n))
    for i, m in by_row.items():
        assert m.subject == f"{names.subject}.s{i % 3}"
        assert m.data == (b"" if i == 7 else str(i).encode())
        assert m.headers.get_all("tag") == ["a", "b"]
    ids = {m.headers["Nats-Msg-Id"] for m in msgs}
    assert len(ids) == n and all(re.fullmatch(r"[0-9a-f]+-[01]-\d+", i) for i in ids), sorted(ids)[:3]


def test_streaming_write_replayed_batch_is_deduplicated(
    ds_spark: Any, nats_url: str, js: Any, names: Any, tmp_path: Path
) -> None:
    src, dst = names.stream + "_SRC", names.stream + "_DST"
    js.create_stream(name=src, subjects=[f"{names.subject}.in.>"])
    js.create_stream(name=dst, subjects=[f"{names.subject}.out.>"])
    for i in range(500):
        js.publish(f"{names.subject}.in.x", f"r{i}".encode())
    ckpt = tmp_path / "ckpt"

    def run() -> list[int]:
        q = (
            _stream_reader(ds_spark, nats_url, src, startingOffsets="earliest", maxRecordsPerTrigger="200")
            .load()
            .selectExpr("data", "headers")
            .writeStream.format("jetstream")
            .option("servers", nats_url)
            .option("subject", f"{names.subject}.out.x")
            .option("checkpointLocation", str(ckpt))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(120)
        if q.exception() is not None:
            raise q.exception()
        return [int(p["numInputRows"]) for p in q.recentProgress if int(p["numInputRows"])]

    batches = run()
    assert batches == ([200, 200, 100] if _SPLITS_AVAILABLE_NOW else [500])
    assert js.stream(dst).info().state.messages == 500
    # A crash after the sink wrote the last micro-batch but before Spark committed it: on
    # restart Spark runs that batch again with the same batch id; the msg ids dedupe it.
    commits = sorted(int(p.name) for p in (ckpt / "commits").iterdir() if p.name.isdigit())
    last = commits[-1]
    for p in (ckpt / "commits").iterdir():
        if p.name in (str(last), f".{last}.crc"):
            p.unlink()
    # The last micro-batch (rows 400..499; with PySpark 4.0 / 4.1 the only one) ran again.
    assert sum(run()) == batches[-1]
    assert js.stream(dst).info().state.messages == 500
    got = sorted(d for _, _, d in _stored(js, dst))
    assert got == sorted(f"r{i}".encode() for i in range(500))


def test_arrow_read_of_runs_read_in_bulk_is_the_read_one_by_one(
    nats_url: str, js: Any, names: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Arrow read (Spark's) takes long runs of deliveries as the connection read them in
    bulk, without a Python object per message (jscore.bulk): its rows are the tuple read's,
    whatever the messages (a msg id, more header lines, none; two subjects; payloads holding
    lines that look like frames)."""
    from jscore import bulk
    from jscore import protocol as proto
    from jssync.spark._config import NatsConfig

    if not bulk.AVAILABLE:
        pytest.skip("NumPy and PyArrow are not installed: no read in bulk")
    js.create_stream(name=names.stream, subjects=[f"{names.subject}.>"])
    n = 3000
    for i in range(n):
        subject = f"{names.subject}.{'a' if i % 50 else 'b'}"
        payload = (b"\r\nHMSG x 1 r 5 5\r\n" if i % 97 == 0 else b"") + b"p" * (i % 200)
        if i % 1000 == 999:
            js.publish_async(subject, payload)  # (no headers: MSG)
        elif i % 300 == 7:
            js.publish_async(subject, payload, headers={"K": "v 1", "Other": "x\ty"}, msg_id=f"m-{i}")
        else:
            js.publish_async(subject, payload, msg_id=f"m-{i}")
    js.publish_async_complete(timeout=30)
    read_in_bulk = []
    real = proto.bulk.read_deliveries

    def counted(*args: Any, **kwargs: Any) -> Any:
        got = real(*args, **kwargs)
        read_in_bulk.append(0 if got is None else got.count)
        return got

    monkeypatch.setattr(proto.bulk, "read_deliveries", counted)
    config, ropts = NatsConfig(servers=(nats_url,)), ReadOptions(stream=names.stream)
    batches = list(dsmod.read_range_arrow(config, ropts, SeqRange(0, 1, n)))
    assert sum(read_in_bulk) >= n // 4, read_in_bulk  # (runs that break rest the bulk reader a while)
    assert all(b.num_rows <= dsmod.ARROW_BATCH_ROWS for b in batches)
    rows = [
        (r["subject"], r["data"], None if r["headers"] is None else dict(r["headers"]), r["stream"], r["seq"], r["timestamp"])
        for b in batches
        for r in b.to_pylist()
    ]
    assert len(rows) == n
    assert rows == list(read_range(config, ropts, SeqRange(0, 1, n)))
    assert rows[999][2] is None and rows[7][2] == {"Nats-Msg-Id": ["m-7"], "K": ["v 1"], "Other": ["x\ty"]}
    # A range that ends inside a run read in bulk keeps the rows up to its end.
    part = list(dsmod.read_range_arrow(config, ropts, SeqRange(0, 1, 2345)))
    assert [r["seq"] for b in part for r in b.to_pylist()] == list(range(1, 2346))


def test_arrow_read_of_large_messages_hands_over_what_it_holds_past_its_byte_bound(
    nats_url: str, js: Any, names: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task does not hold ARROW_BATCH_ROWS rows of any size: past ARROW_BATCH_BYTES of
    messages it hands over what it holds (every row once, in order), pull by pull."""
    from jssync.spark._config import NatsConfig

    js.create_stream(name=names.stream, subjects=[f"{names.subject}.>"])
    n = 60
    for i in range(n):
        js.publish_async(f"{names.subject}.x", b"%03d" % i + b"p" * 500, msg_id=f"m-{i}" if i % 7 else None)
    js.publish_async_complete(timeout=30)
    config = NatsConfig(servers=(nats_url,))
    ropts = ReadOptions(stream=names.stream, fetch_batch=5)
    whole = list(dsmod.read_range_arrow(config, ropts, SeqRange(0, 1, n)))
    assert [b.num_rows for b in whole] == [n]  # (60 rows of 500 B: under both bounds)
    monkeypatch.setattr(dsmod, "ARROW_BATCH_BYTES", 2000)
    bounded = list(dsmod.read_range_arrow(config, ropts, SeqRange(0, 1, n)))
    assert len(bounded) >= n // 5 and all(b.num_rows <= 5 for b in bounded)  # (each pull of 5 is over 2000 B)
    assert [r for b in bounded for r in b.to_pylist()] == [r for b in whole for r in b.to_pylist()]
    assert [r["seq"] for b in bounded for r in b.to_pylist()] == list(range(1, n + 1))
    # A read that decodes its payloads holds no more than that either.
    text = ReadOptions(stream=names.stream, value_format="string")
    decoded = list(dsmod.read_range_decoded(config, text, SeqRange(0, 1, n)))
    assert all(b.num_rows <= 4 for b in decoded)  # (the 4th row's payload takes it past 2000 bytes)
    assert [r["seq"] for b in decoded for r in b.to_pylist()] == list(range(1, n + 1))


def test_rebatch_keeps_every_row_in_order_in_batches_of_at_most_rows() -> None:
    """The Arrow reader's batches of ``rows`` rows out of runs of any size, the rest held back:
    every row once, in order, also when a column stays in several chunks (as Arrow leaves a
    binary column past 2 GiB when it combines chunks)."""
    import pyarrow as pa

    schema = pa.schema([("seq", pa.int64()), ("data", pa.binary())])

    def batch(seqs: range) -> Any:
        return pa.RecordBatch.from_arrays([pa.array(seqs, pa.int64()), pa.array([b"x"] * len(seqs))], schema=schema)

    for sizes, rows in (([5], 4), ([3, 4, 1], 4), ([4], 4), ([1, 1, 1], 8), ([10, 7], 3)):
        made, at = [], 0
        for size in sizes:
            made.append(batch(range(at, at + size)))
            at += size
        full, rest, left = dsmod._rebatch(made, rows, schema)
        assert all(b.num_rows == rows for b in full) and left == sum(b.num_rows for b in rest) == at % rows
        assert [s for b in full + rest for s in b.column(0).to_pylist()] == list(range(at))

    chunked = pa.Table.from_batches([batch(range(0, 3)), batch(range(3, 7))])  # (two chunks a column)
    full, rest, left = dsmod._cut(chunked, 5)
    assert [s for b in full + rest for s in b.column(0).to_pylist()] == list(range(7)) and left == 2
    assert [b.num_rows for b in full + rest] == [3, 2, 2]
