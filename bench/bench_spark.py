#!/usr/bin/env python
"""Spark benchmark (issue 5): writing a local[2] DataFrame to JetStream, and the batch read back.

Run on demand (not in CI), from the repository root with the dev virtualenv (pyspark, pyarrow,
nats-py and a Java 17+ runtime)::

    .venv/bin/python bench/bench_spark.py                                 # 1M x 128 B, naive writer 100k rows
    .venv/bin/python bench/bench_spark.py --rows 100000 --naive-rows 20000  # smoke run
    .venv/bin/python bench/bench_spark.py --runs 3 --json spark.json

One nats-server (JetStream, file store) and one SparkSession (``local[2]``, UI off, 2 shuffle
partitions, Python workers reused) for the whole run. The DataFrame is
``spark.range(n).selectExpr(<128-byte binary "data">).repartition(--partitions)``, cached and
materialized before anything is timed. Every write goes into a fresh file stream, is timed on the
driver around ``df.foreachPartition(...)``, and is checked afterwards: the stream must hold exactly
the rows written. Writers:

* ``jssync``   ``jssync.spark.publish_partition`` (the bulk publisher on a connection cached per
               Python worker, a msg id per row, every ack checked, re-sends of the same frame).
* ``naive``    a new jssync connection per partition and ``js.publish`` per row, waiting for each ack
               (no msg id): the Scala nats-spark-connector's approach. Measured on ``--naive-rows``
               rows (100k by default: at its rate 1M rows take minutes); rows/s is comparable.
* ``jssync-ds`` the data source sink, ``df.write.format("jetstream")``: the same writer fed Arrow
               record batches instead of Rows.
* ``jssync-arrow`` ``publish_partition`` handed each partition's Arrow record batches by
               ``df.mapInArrow`` instead of Rows by ``foreachPartition`` (the same msg ids).
* ``nats-py``  nats-py (asyncio) inside foreachPartition: ``asyncio.run`` per partition, a new
               connection, ``await js.publish_async(...)`` per row (nats-py's window,
               ``publish_async_max_pending`` = ``--window``), a done-callback checking every ack,
               then ``publish_async_completed()``, with the same msg ids as ours (``nats-py-bare``: none,
               at-least-once and less work for the server).

Also measured, outside the ratios: ``floor``, the same foreachPartition iterating the rows without
publishing (what Spark's JVM-to-Python row transfer costs on this machine). Then the batch read: ``spark.read.format("jetstream")`` on the stream jssync wrote, ``count()``
(every message goes through the Python data source reader and Arrow). Targets printed: jssync >= 5x
naive, jssync >= 2x nats-py (rows/s); and of the performance issue, as ratios to Spark alone:
``jssync-arrow`` and ``jssync-ds`` >= 0.6x ``floor`` (iterating the DataFrame's rows), the reads
>= 0.8x ``floor-read``. ``publish_partition`` fed Rows (``jssync``) is shown against ``floor``
without a target: the issue names ``mapInArrow`` as its way past the Row hand-off. With
``jssync-arrow``, ``floor-arrow`` (mapInArrow taking the data column's values, no publish) is
measured too and ``jssync-arrow`` shown against it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _p in (str(ROOT), str(HERE)):
    if _p not in sys.path:
        sys.path.insert(0, _p)  # run from a checkout without installing

import bench_core as core  # noqa: E402  (machine facts, process CPU)
import bench_js  # noqa: E402  (SIGTERM handler)

import msgspec  # noqa: E402

import jssync  # noqa: E402

pc = time.perf_counter

TARGETS = {"naive": 5.0, "nats-py": 2.0}  # jssync rows/s >= this x the writer's (issue 5)
WRITERS = ("jssync", "naive", "nats-py", "nats-py-bare", "jssync-ds", "jssync-arrow")
FLOOR = "floor"  # Spark alone: foreachPartition iterating the rows, no publish (not in the ratios)
FLOOR_ARROW = "floor-arrow"  # Spark alone: mapInArrow iterating the batches' data column, no publish
READ_DIRECT = "read-direct"  # the batch read with directGet=true (the stream with allow_direct)
READ_FLOOR = "floor-read"  # Spark alone: a Python source yielding the read's rows from memory, as tuples
READ_FLOOR_ARROW = "floor-read-arrow"  # the same rows as Arrow record batches


# =============================================================================== partition writers
#
# These run in the Spark Python workers: they import what they need and reference nothing from
# the bench modules (this file is pickled by value as __main__).


def naive_partition(rows: Any, url: str, subject: str) -> None:
    """One connection per partition, one synchronous publish (wait for the ack) per row."""
    import jssync as _jssync

    nc = _jssync.connect(url, name="bench-spark-naive")
    try:
        publish = nc.jetstream(timeout=30.0).publish
        for row in rows:
            ack = publish(subject, bytes(row[0]))
            if ack.seq <= 0:
                raise RuntimeError(f"bad PubAck {ack!r}")
    finally:
        nc.close()


def nats_py_partition(rows: Any, url: str, subject: str, window: int, run: str | None = None) -> None:
    """nats-py in the task: an event loop, a connection, publish_async per row, every ack checked;
    with ``run``, each row carries a ``Nats-Msg-Id`` (run-partition-row), the same exactly-once
    work as ours."""
    import asyncio

    from pyspark import TaskContext

    import nats as _nats

    async def run() -> None:
        nc = await _nats.connect(url, name="bench-spark-nats-py")
        try:
            js = nc.jetstream(timeout=30.0, publish_async_max_pending=window)
            failed: list[BaseException] = []

            def done(fut: Any) -> None:
                if fut.cancelled():
                    failed.append(asyncio.CancelledError())
                elif fut.exception() is not None:
                    failed.append(fut.exception())
                elif fut.result().seq <= 0:
                    failed.append(RuntimeError(f"bad PubAck {fut.result()!r}"))

            if run is None:
                for row in rows:
                    fut = await js.publish_async(subject, bytes(row[0]))
                    fut.add_done_callback(done)
            else:
                ctx = TaskContext.get()
                prefix = f"{run}-{ctx.partitionId() if ctx is not None else 0}-"
                for i, row in enumerate(rows):
                    fut = await js.publish_async(subject, bytes(row[0]), headers={"Nats-Msg-Id": prefix + str(i)})
                    fut.add_done_callback(done)
            await asyncio.wait_for(js.publish_async_completed(), 120)
            if failed:
                raise RuntimeError(f"{len(failed)} publishes failed, first: {failed[0]!r}")
        finally:
            await nc.close()

    asyncio.run(run())


def floor_partition(rows: Any) -> None:
    """No publishing: iterate the rows and take the payload bytes (what Spark alone costs)."""
    for row in rows:
        bytes(row[0])


def publish_rows(df: Any, url: str, subject: str, stream: str, window: int) -> None:
    """``publish_partition`` fed Rows by ``foreachPartition``, with a write id for the job."""
    from jssync.spark import make_write_id, publish_partition

    run = make_write_id()
    df.foreachPartition(
        lambda rows: publish_partition(rows, servers=url, subject=subject, run_id=run, stream=stream, max_pending=window)
    )


def publish_arrow(df: Any, url: str, subject: str, stream: str, window: int) -> None:
    """``publish_partition`` fed Arrow record batches by ``mapInArrow``, with a write id for the
    job (each task yields its count)."""
    from jssync.spark import make_write_id, publish_partition

    run = make_write_id()

    def publish(batches: Any) -> Any:
        import pyarrow as pa

        n = publish_partition(batches, servers=url, subject=subject, run_id=run, stream=stream, max_pending=window)
        yield pa.RecordBatch.from_pydict({"written": [n]})

    df.mapInArrow(publish, "written long").collect()


def floor_batches(batches: Any) -> Any:
    """No publishing: take each batch's data column as Python values, as the Arrow writers do
    (what Spark's Arrow hand-off and that conversion cost)."""
    import pyarrow as pa

    n = 0
    for batch in batches:
        n += len(batch.column(0).to_pylist())
    yield pa.RecordBatch.from_pydict({"n": [n]})


def floor_source(stream: str, subject: str, tag: str, rows: int, partitions: int, size: int) -> Any:
    """The read's floor (issue 17): a Python data source that yields the rows the jetstream
    source returns for the stream read back (subject, 128 B data, a ``Nats-Msg-Id`` header,
    stream, sequence, time stamp), built in memory in the reader's tasks. ``arrow``: as Arrow
    record batches of 4,096 rows (what the jetstream reader yields), else one tuple per row
    (the plain form of a Python source). Nothing is read from the server."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class _Range(InputPartition):  # type: ignore[misc]
        def __init__(self, start: int, end: int) -> None:
            self.start, self.end = start, end

    class _Reader(DataSourceReader):  # type: ignore[misc]
        def __init__(self, arrow: bool) -> None:
            self.arrow = arrow

        def partitions(self) -> Any:
            step = -(-rows // partitions)
            return [_Range(s + 1, min(rows, s + step)) for s in range(0, rows, step)]

        def read(self, part: Any) -> Any:
            import datetime as dt

            stamp = dt.datetime(2026, 11, 28, 12, 0, 0, 123456, tzinfo=dt.timezone.utc)

            # One payload and one header map for every row: the conservative floor (the
            # jetstream reader's rows each have their own).
            data, headers = b"x" * size, {"Nats-Msg-Id": [f"{tag}-0-1"]}

            def row(seq: int) -> tuple[Any, ...]:
                return (subject, data, headers, stream, seq, stamp)

            if not self.arrow:
                for seq in range(part.start, part.end + 1):
                    yield row(seq)
                return
            import pyarrow as pa

            from jssync.spark.datasource import _arrow_schema

            schema = _arrow_schema()
            for lo in range(part.start, part.end + 1, 4096):
                cols = list(zip(*(row(seq) for seq in range(lo, min(part.end, lo + 4095) + 1))))
                cols[5] = [int(stamp.timestamp() * 1_000_000)] * len(cols[5])
                yield pa.RecordBatch.from_arrays([pa.array(c, type=f.type) for c, f in zip(cols, schema)], schema=schema)

    class FloorSource(DataSource):  # type: ignore[misc]
        @classmethod
        def name(cls) -> str:
            return "jssync_bench_floor"

        def schema(self) -> str:
            return "subject string, data binary, headers map<string,array<string>>, stream string, seq bigint, timestamp timestamp"

        def reader(self, schema: Any) -> Any:
            return _Reader(self.options.get("arrow") == "true")

    return FloorSource


def warm_worker(rows: Any) -> None:
    """Import everything the writers use in the Python worker, outside the timed part."""
    import nats  # noqa: F401

    import jssync.spark  # noqa: F401

    for _ in rows:
        pass


# =============================================================================== Spark


def spark_session(driver_memory: str) -> Any:
    # The Python workers start in the driver's working directory, which comes first on their
    # sys.path: from another checkout (or an editable install's) they would import its jssync.
    os.chdir(ROOT)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[2]").appName("jssync-bench-spark")
    conf = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.driver.memory": driver_memory,
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.python.worker.reuse": "true",
        "spark.executorEnv.PYTHONPATH": os.environ["PYTHONPATH"],
    }
    for k, v in conf.items():
        builder = builder.config(k, v)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def make_df(spark: Any, n: int, size: int, partitions: int) -> Any:
    """n rows, one binary ``data`` column of exactly ``size`` bytes (the row number, padded), cached."""
    df = spark.range(n).selectExpr(f"cast(lpad(cast(id as string), {size}, 'x') as binary) as data").repartition(partitions)
    df.cache()
    if df.count() != n:
        raise RuntimeError("cached DataFrame has the wrong row count")
    return df


# =============================================================================== runner


class Bench:
    def __init__(self, args: argparse.Namespace, url: str, server_pid: int | None) -> None:
        self.args = args
        self.url = url
        self.server_pid = server_pid
        self.tag = uuid.uuid4().hex[:6]
        self.serial = 0
        self.admin = jssync.connect(url, name="bench-spark-admin")
        self.ajs = self.admin.jetstream(timeout=60.0)
        self.results: dict[str, list[dict[str, Any]]] = {}
        self.read_stream: str | None = None

    def log(self, text: str) -> None:
        if not self.args.quiet:
            print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)

    def new_stream(self, writer: str) -> tuple[str, str]:
        self.serial += 1
        w = writer.replace("-", "_")
        name, subject = f"BENCHSPARK_{self.tag}_{w}_{self.serial}", f"benchspark.{self.tag}.{w}.{self.serial}"
        self.ajs.create_stream(name=name, subjects=[subject], storage="file", num_replicas=1)
        return name, subject

    def action(self, writer: str, df: Any, stream: str, subject: str) -> None:
        url, window = self.url, self.args.window
        if writer == "jssync":
            publish_rows(df, url, subject, stream, window)
        elif writer == "jssync-arrow":
            publish_arrow(df, url, subject, stream, window)
        elif writer == "jssync-ds":
            df.write.format("jetstream").option("servers", url).option("subject", subject).option("stream", stream).option(
                "maxPending", str(window)
            ).mode("append").save()
        elif writer == "naive":
            df.foreachPartition(lambda rows: naive_partition(rows, url, subject))
        elif writer == "nats-py":
            run = "np" + str(id(df))
            df.foreachPartition(lambda rows: nats_py_partition(rows, url, subject, window, run))
        else:  # nats-py-bare: no msg ids (at least once; less work for the server)
            df.foreachPartition(lambda rows: nats_py_partition(rows, url, subject, window))

    def write(self, writer: str, df: Any, n: int, keep: bool = False) -> dict[str, Any]:
        stream, subject = self.new_stream(writer)
        srv0 = core.proc_cpu_s(self.server_pid)
        t0 = pc()
        self.action(writer, df, stream, subject)
        total = pc() - t0
        srv1 = core.proc_cpu_s(self.server_pid)
        state = self.ajs.stream_info(stream).state
        if state.messages != n:
            raise RuntimeError(f"{writer}: stream {stream} holds {state.messages} messages, expected {n}")
        if keep:
            if self.read_stream is not None:
                self.ajs.delete_stream(self.read_stream)
            self.read_stream = stream
        else:
            self.ajs.delete_stream(stream)
        res = {"rows": n, "total_s": total, "rows_per_s": n / total, "stream_bytes": state.bytes}
        if srv0 is not None and srv1 is not None:
            res["server_cpu_s"] = srv1 - srv0
        return res

    def read(self, spark: Any, n: int, direct: bool = False) -> dict[str, Any]:
        df = spark.read.format("jetstream").option("servers", self.url).option("stream", self.read_stream)
        df = (df.option("directGet", "true") if direct else df).load()
        srv0 = core.proc_cpu_s(self.server_pid)
        t0 = pc()
        count = df.count()
        total = pc() - t0
        srv1 = core.proc_cpu_s(self.server_pid)
        if count != n:
            raise RuntimeError(f"read: count() = {count}, expected {n}")
        res = {"rows": n, "total_s": total, "rows_per_s": n / total, "partitions": df.rdd.getNumPartitions()}
        if srv0 is not None and srv1 is not None:
            res["server_cpu_s"] = srv1 - srv0
        return res

    def run_all(self, spark: Any) -> None:
        a = self.args
        from jssync.spark import JetStreamDataSource

        spark.dataSource.register(JetStreamDataSource)
        self.log(f"caching the DataFrames ({a.rows:,} and {a.naive_rows:,} rows x {a.size} B, {a.partitions} partitions)")
        df = make_df(spark, a.rows, a.size, a.partitions)
        df_naive = df if a.naive_rows == a.rows else make_df(spark, a.naive_rows, a.size, a.partitions)
        if a.warmup_rows:
            warm = make_df(spark, a.warmup_rows, a.size, a.partitions)
            warm.foreachPartition(warm_worker)
            for w in a.writers:
                self.write(w, warm, a.warmup_rows)
            warm.unpersist()
            self.log(f"warmed up ({a.warmup_rows:,} rows through each writer)")
        if not a.no_floor:
            for r in range(a.runs):
                t0 = pc()
                df.foreachPartition(floor_partition)
                total = pc() - t0
                self.results.setdefault(FLOOR, []).append({"rows": a.rows, "total_s": total, "rows_per_s": a.rows / total})
                self.log(f"run {r + 1}/{a.runs} floor    {a.rows:>9,} rows  {total:7.2f} s  {a.rows / total:>10,.0f} rows/s")
                if "jssync-arrow" in a.writers:
                    t0 = pc()
                    n = df.mapInArrow(floor_batches, "n long").groupBy().sum("n").first()[0]
                    total = pc() - t0
                    if n != a.rows:
                        raise RuntimeError(f"{FLOOR_ARROW}: {n} rows, expected {a.rows}")
                    self.results.setdefault(FLOOR_ARROW, []).append({"rows": a.rows, "total_s": total, "rows_per_s": a.rows / total})
        for r in range(a.runs):
            order = a.writers[r % len(a.writers) :] + a.writers[: r % len(a.writers)]
            for w in order:
                n = a.naive_rows if w == "naive" else a.rows
                res = self.write(w, df_naive if w == "naive" else df, n, keep=(w == "jssync"))
                self.results.setdefault(w, []).append(res)
                self.log(f"run {r + 1}/{a.runs} {w:<8} {n:>9,} rows  {res['total_s']:7.2f} s  {res['rows_per_s']:>10,.0f} rows/s")
        if "jssync" in a.writers and not a.no_read:
            # The stream as written (the tasks read with ordered consumers), then with
            # allow_direct and directGet=true (batched direct gets). One read first, not measured: the
            # server's first read of a stream loads its blocks from disk (a third slower).
            self.read(spark, a.rows)
            for what, direct in (("read", False), (READ_DIRECT, True)):
                if direct:
                    cfg = self.ajs.stream_info(self.read_stream).config
                    self.ajs.update_stream(msgspec.structs.replace(cfg, allow_direct=True))
                for r in range(a.runs):
                    res = self.read(spark, a.rows, direct)
                    self.results.setdefault(what, []).append(res)
                    self.log(f"run {r + 1}/{a.runs} {what:<8} {a.rows:>9,} rows  {res['total_s']:7.2f} s  {res['rows_per_s']:>10,.0f} rows/s")
        if "read" in self.results:
            parts = self.results["read"][0]["partitions"]
            spark.dataSource.register(floor_source(self.read_stream or "S", "benchspark.floor", self.tag, a.rows, parts, a.size))
            for r in range(a.runs):
                for what, arrow in ((READ_FLOOR, "false"), (READ_FLOOR_ARROW, "true")):
                    t0 = pc()
                    count = spark.read.format("jssync_bench_floor").option("arrow", arrow).load().count()
                    total = pc() - t0
                    if count != a.rows:
                        raise RuntimeError(f"{what}: count() = {count}, expected {a.rows}")
                    self.results.setdefault(what, []).append({"rows": a.rows, "total_s": total, "rows_per_s": a.rows / total})
                    self.log(f"run {r + 1}/{a.runs} {what:<8} {a.rows:>9,} rows  {total:7.2f} s  {a.rows / total:>10,.0f} rows/s")
        if self.read_stream is not None:
            self.ajs.delete_stream(self.read_stream)
        df.unpersist()

    def summary(self) -> dict[str, Any]:
        out = {}
        for what, runs in self.results.items():
            rates = [r["rows_per_s"] for r in runs]
            out[what] = {"rows": runs[0]["rows"], "rows_per_s": core.summarize(rates), "total_s": statistics.median(r["total_s"] for r in runs)}
        return out

    def close(self) -> None:
        self.admin.close()


def ratios(summary: dict[str, Any]) -> list[dict[str, Any]]:
    if "jssync" not in summary:
        return []
    ours = summary["jssync"]["rows_per_s"]["median"]
    return [
        {"vs": w, "ratio": ours / summary[w]["rows_per_s"]["median"], "target": t, "met": ours / summary[w]["rows_per_s"]["median"] >= t}
        for w, t in TARGETS.items()
        if w in summary
    ]


FLOOR_TARGETS = (
    ("jssync", FLOOR, None),
    ("jssync-arrow", FLOOR, 0.6),
    ("jssync-ds", FLOOR, 0.6),
    ("jssync-arrow", FLOOR_ARROW, None),
    ("read", READ_FLOOR, 0.8),
    (READ_DIRECT, READ_FLOOR, 0.8),
    ("read", READ_FLOOR_ARROW, None),
    (READ_DIRECT, READ_FLOOR_ARROW, None),
)
"""(what, floor, target): the Spark ratios of the performance issue (None: shown, no target)."""


def floor_ratios(summary: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for what, vs, target in FLOOR_TARGETS:
        if what in summary and vs in summary:
            ratio = summary[what]["rows_per_s"]["median"] / summary[vs]["rows_per_s"]["median"]
            out.append({"what": what, "vs": vs, "ratio": ratio, "target": target, "met": target is None or ratio >= target})
    return out


def render(facts: dict[str, Any], args: argparse.Namespace, summary: dict[str, Any]) -> str:
    lines = ["", "jssync Spark benchmark (issue 5)", ""]
    for k in ("cpu_model", "cpus_usable", "python", "nats_server", "jssync", "nats_py", "pyspark", "server", "loadavg_start", "loadavg_end", "wall_s"):
        lines.append(f"  {k:<14} {facts.get(k)}")
    lines += [
        "",
        f"local[2], DataFrame of {args.size} B binary rows in {args.partitions} partitions, cached; "
        f"{args.runs} run(s) per writer, median [min..max]; each write into a fresh file stream, verified.",
        f"The naive writer is measured on {args.naive_rows:,} rows (the others on {args.rows:,}): compare rows/s.",
        "",
        f"  {'what':<10} {'rows':>10} {'rows/s':>34} {'s (median)':>11}",
    ]
    labels = {FLOOR: "Spark alone: iterate the rows, no publish", FLOOR_ARROW: "Spark alone: mapInArrow, the data column as values, no publish", "jssync": "publish_partition through foreachPartition (Rows)", "naive": "naive sync js.publish per row", "nats-py": "nats-py publish_async, same msg ids as ours", "nats-py-bare": "nats-py publish_async, no msg ids (at least once)", "jssync-ds": "df.write.format('jetstream') (Arrow batches)", "jssync-arrow": "publish_partition through mapInArrow (Arrow batches)", "read": "read.format('jetstream').count()", READ_DIRECT: "the same, directGet=true (batched direct gets)", READ_FLOOR: "Spark alone: a Python source yielding the same rows, tuples", READ_FLOOR_ARROW: "the same, as Arrow batches"}
    for what in (FLOOR, FLOOR_ARROW, *WRITERS, "read", READ_DIRECT, READ_FLOOR, READ_FLOOR_ARROW):
        s = summary.get(what)
        if s is None:
            continue
        r = s["rows_per_s"]
        lines.append(
            f"  {what:<10} {s['rows']:>10,} {r['median']:>12,.0f} [{r['min']:>9,.0f}..{r['max']:>9,.0f}] {s['total_s']:>11.2f}   {labels[what]}"
        )
    lines.append("")
    for r in ratios(summary):
        lines.append(f"  jssync / {r['vs']:<8} {r['ratio']:6.2f}x   target >= {r['target']:.0f}x: {'MET' if r['met'] else 'NOT MET'}")
    for r in floor_ratios(summary):
        target = f"target >= {r['target']:.1f}: {'MET' if r['met'] else 'NOT MET'}" if r["target"] else "(no target)"
        lines.append(f"  {r['what']:<9} / {r['vs']:<16} {r['ratio']:5.2f}   {target}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=1_000_000, help="rows written by jssync and nats-py, and read back (1,000,000)")
    p.add_argument("--naive-rows", type=int, default=100_000, help="rows written by the naive writer (100,000)")
    p.add_argument("--size", type=int, default=128, help="bytes per row (128)")
    p.add_argument("--partitions", type=int, default=2, help="DataFrame partitions (2)")
    p.add_argument("--window", type=int, default=4000, help="async publishes in flight per task, jssync and nats-py (4000, both defaults)")
    p.add_argument("--runs", type=int, default=1, help="measured runs per writer (1)")
    p.add_argument("--warmup-rows", type=int, default=5000, help="rows through each writer before measuring (5000; 0: none)")
    p.add_argument("--writers", default=",".join(WRITERS), help="comma-separated subset of " + ",".join(WRITERS))
    p.add_argument("--no-floor", action="store_true", help="skip the Spark floor (iterate the rows, no publish)")
    p.add_argument("--no-read", action="store_true", help="skip the batch read")
    p.add_argument("--driver-memory", default="2g", help="spark.driver.memory (2g)")
    p.add_argument("--server", metavar="URL", help="use this running JetStream server instead of starting one")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = p.parse_args(argv)
    args.writers = [w.strip() for w in args.writers.split(",") if w.strip()]
    if args.json:
        args.json = str(Path(args.json).resolve())  # (the run changes to the checkout's directory)
    bad = [w for w in args.writers if w not in WRITERS]
    if bad:
        p.error(f"unknown writer(s) {bad}; choose from {', '.join(WRITERS)}")
    if min(args.rows, args.naive_rows, args.size, args.partitions, args.window, args.runs) < 1 or args.warmup_rows < 0:
        p.error("counts and sizes must be >= 1 (--warmup-rows >= 0)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, bench_js._sigterm)
    with contextlib.ExitStack() as stack:
        if args.server:
            url, server_pid, where = args.server, None, f"external {args.server}"
        else:
            from jssync.server import NatsServer

            srv = NatsServer(jetstream=True, name="bench-spark")
            srv.start()
            stack.callback(srv.cleanup)
            url, server_pid, where = srv.url, srv.pid, "started by the benchmark (JetStream on, file store in a temp dir)"
        facts = {**core.machine_facts(url, not args.server), "server": where, "pyspark": core.version_of("pyspark")}
        spark = spark_session(args.driver_memory)
        stack.callback(spark.stop)
        bench = Bench(args, url, server_pid)
        stack.callback(bench.close)
        started = pc()
        bench.run_all(spark)
        facts.update(loadavg_end=[round(x, 2) for x in os.getloadavg()], wall_s=round(pc() - started, 1))
        summary = bench.summary()
        print(render(facts, args, summary), flush=True)
        if args.json:
            keys = ("rows", "naive_rows", "size", "partitions", "window", "runs", "warmup_rows", "writers")
            doc = {
                "config": {k: getattr(args, k) for k in keys},
                "facts": facts,
                "summary": summary,
                "ratios": ratios(summary),
                "floor_ratios": floor_ratios(summary),
                "runs": bench.results,
            }
            Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
