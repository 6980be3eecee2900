#!/usr/bin/env python
"""Memory of the Spark writers: the Python workers' resident set while a local[2] job writes
``--rows`` rows (1M by default) to JetStream, through ``publish_partition`` and through the data
source (``df.write.format("jetstream")``), and through ``publish_partition`` fed Arrow batches by
``df.mapInArrow``.

Run on demand (not in CI), from the repository root with the dev virtualenv (pyspark, pyarrow and
a Java 17+ runtime)::

    .venv/bin/python bench/bench_spark_memory.py                    # 1M x 128 B, then 100k x 4 KiB
    .venv/bin/python bench/bench_spark_memory.py --rows 200000 --big-rows 20000   # smoke run

A sampler thread reads ``/proc/<pid>/status`` of every PySpark Python worker (the processes
running ``pyspark.daemon`` or ``pyspark.worker``) every 20 ms. Before each measured write, one
small write through the same writer warms the workers (imports, the cached connection); the
worker's resident set then is its baseline. Printed per writer and row size: the baseline, the
peak during the write and the growth (peak - baseline) of the worker that grew most, with the
bound the writer keeps: ``maxPending`` frames in flight per task (4,000 by default), each frame
the row plus its framing (``HPUB`` line, reply subject, the ``Nats-Msg-Id`` header: about 150 B).
Every write is checked: the stream holds exactly the rows written.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _p in (str(ROOT), str(HERE)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import bench_spark  # noqa: E402  (the SparkSession and DataFrame of the write benchmark)

import jssync  # noqa: E402

FRAMING = 150  # bytes a frame adds to its row (HPUB line, reply subject, Nats-Msg-Id header), about


def _workers() -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if b"pyspark.daemon" in cmd or b"pyspark.worker" in cmd or b"pyspark/daemon" in cmd:
            pids.append(int(entry))
    return pids


def _rss_kib(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


class Sampler:
    """The peak VmRSS of every PySpark worker while running (KiB, by pid)."""

    def __init__(self) -> None:
        self.peak: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def snapshot(self) -> dict[int, int]:
        return {pid: rss for pid in _workers() if (rss := _rss_kib(pid)) is not None}

    def _run(self) -> None:
        while not self._stop.is_set():
            for pid, rss in self.snapshot().items():
                if rss > self.peak.get(pid, 0):
                    self.peak[pid] = rss
            self._stop.wait(0.02)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def write(writer: str, df: Any, url: str, stream: str, subject: str, max_pending: int) -> None:
    if writer == "publish_partition":
        bench_spark.publish_rows(df, url, subject, stream, max_pending)
    elif writer == "mapInArrow":
        bench_spark.publish_arrow(df, url, subject, stream, max_pending)
    else:
        df.write.format("jetstream").option("servers", url).option("subject", subject).option("stream", stream).option(
            "maxPending", str(max_pending)
        ).mode("append").save()


def measure(spark: Any, js: Any, url: str, writer: str, rows: int, size: int, args: argparse.Namespace) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:6]
    warm = bench_spark.make_df(spark, max(2000, args.partitions * 1000), size, args.partitions)
    df = bench_spark.make_df(spark, rows, size, args.partitions)
    results: dict[str, Any] = {}
    for phase, frame in (("warm", warm), ("measured", df)):
        name, subject = f"MEM_{tag}_{phase}", f"mem.{tag}.{phase}"
        js.create_stream(name=name, subjects=[subject], storage="file")
        before = Sampler().snapshot()
        t0 = time.perf_counter()
        with Sampler() as sampler:
            write(writer, frame, url, name, subject, args.max_pending)
        elapsed = time.perf_counter() - t0
        stored = js.stream_info(name).state.messages
        js.delete_stream(name)
        if stored != frame.count():
            raise RuntimeError(f"{writer}: {stored} stored, {frame.count()} written")
        if phase == "measured":
            growth = {pid: peak - before.get(pid, peak) for pid, peak in sampler.peak.items()}
            top = max(growth, key=lambda p: growth[p]) if growth else None
            results = {
                "writer": writer,
                "rows": rows,
                "row_bytes": size,
                "seconds": round(elapsed, 1),
                "workers": len(sampler.peak),
                "baseline_mib": round(before.get(top, 0) / 1024, 1) if top else None,
                "peak_mib": round(sampler.peak[top] / 1024, 1) if top else None,
                "growth_mib": round(growth[top] / 1024, 1) if top else None,
                "bound_mib": round(args.max_pending * (size + FRAMING) / 2**20, 1),
            }
    warm.unpersist()
    df.unpersist()
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=1_000_000, help="rows of --size bytes (1,000,000)")
    p.add_argument("--size", type=int, default=128, help="row payload bytes (128)")
    p.add_argument("--big-rows", type=int, default=100_000, help="rows of --big-size bytes (100,000; 0: skip)")
    p.add_argument("--big-size", type=int, default=4096, help="row payload bytes of the second write (4096)")
    p.add_argument("--partitions", type=int, default=2)
    p.add_argument("--max-pending", type=int, default=4000, help="frames in flight per task (4000, the default)")
    p.add_argument("--writers", default="publish_partition,mapInArrow,datasource",
                   help="publish_partition (foreachPartition, Rows), mapInArrow (publish_partition fed Arrow "
                   "batches), datasource (df.write.format('jetstream'))")
    p.add_argument("--arrow-batch", type=int, help="spark.sql.execution.arrow.maxRecordsPerBatch (Spark's default: 10,000)")
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    out: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        from jssync.server import NatsServer

        srv = NatsServer(jetstream=True, name="bench-spark-memory")
        srv.start()
        stack.callback(srv.cleanup)
        spark = bench_spark.spark_session("2g")
        stack.callback(spark.stop)
        from jssync.spark import JetStreamDataSource

        spark.dataSource.register(JetStreamDataSource)
        if args.arrow_batch:
            spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(args.arrow_batch))
        nc = jssync.connect(srv.url)
        stack.callback(nc.close)
        js = nc.jetstream(timeout=60.0)
        sizes = [(args.rows, args.size)] + ([(args.big_rows, args.big_size)] if args.big_rows else [])
        for writer in [w.strip() for w in args.writers.split(",") if w.strip()]:
            for rows, size in sizes:
                r = measure(spark, js, srv.url, writer, rows, size, args)
                out.append(r)
                print(json.dumps(r), flush=True)
    print()
    print("| writer | rows x bytes | time | worker RSS before | peak | growth | in-flight bound (maxPending x frame) |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in out:
        print(
            f"| {r['writer']} | {r['rows']:,} x {r['row_bytes']} | {r['seconds']} s | {r['baseline_mib']} MiB | "
            f"{r['peak_mib']} MiB | {r['growth_mib']} MiB | {r['bound_mib']} MiB |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
