#!/usr/bin/env python
"""Where a Spark batch read's CPU goes: rows/s of ``spark.read.format("jetstream").count()`` and
the CPU per row of each process (nats-server, the Spark JVM and of it its JIT compiler's threads,
the PySpark Python workers), for one
or more source trees in turn, against a running server. Also, with ``--outside``, the read task's
own work without Spark (``read_partition`` of the whole stream in this process: rows/s and CPU
per row of this process, both threads).

Run on demand (not in CI), with the dev virtualenv (pyspark, pyarrow, a Java 17+ runtime)::

    .venv/bin/nats-server -js -p 14222 -sd /tmp/store &
    .venv/bin/python bench/bench_spark_read.py --server nats://127.0.0.1:14222 --rows 200000 /path/to/before .
    .venv/bin/python bench/bench_spark_read.py --server URL --no-spark --rounds 6 --reps 2 /path/to/before .
    .venv/bin/python bench/bench_spark_read.py --server URL --rounds 1 --floors .   # beside Spark's floors

The stream (``--stream``, made once if absent) holds ``--rows`` messages of 128 B, each with a
``Nats-Msg-Id`` as the Spark writers store them. Each tree runs in its own process, from its own
directory (the PySpark workers import the jssync of their working directory, which comes first
on their ``sys.path``), with ``--reps`` reads after one warm-up read. ``--direct`` reads with
batched direct gets (the stream gets ``allow_direct``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _cpu_by_kind(me: int) -> dict[str, float]:
    """CPU seconds so far of the server, the JVM and the PySpark workers (from /proc)."""
    out: dict[str, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == me:
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        kind = (
            "server" if "nats-server" in cmd else
            "jvm" if "java" in cmd else
            "workers" if "pyspark" in cmd and ("daemon" in cmd or "worker" in cmd) else None
        )  # fmt: skip
        if kind is not None:
            out[kind] = out.get(kind, 0.0) + (int(fields[11]) + int(fields[12])) / tick
        if kind == "jvm":  # (of it, the JIT compiler's threads: a query's code compiled, not its rows)
            for tid in os.listdir(f"/proc/{pid}/task"):
                try:
                    name = Path(f"/proc/{pid}/task/{tid}/comm").read_text()
                    task = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                if "CompilerThre" in name:
                    out["jit"] = out.get("jit", 0.0) + (int(task[11]) + int(task[12])) / tick
    return out


def _setup(url: str, stream: str, rows: int, direct: bool) -> None:
    import jssync
    from jssync.spark import make_write_id, publish_partition

    with jssync.connect(url, name="bench-spark-read") as nc:
        js = nc.jetstream(timeout=60.0)
        try:
            info = js.stream_info(stream)
        except jssync.errors.StreamNotFoundError:
            info = None
        if info is None or info.state.messages != rows:
            if info is not None:
                js.delete_stream(stream)
            js.create_stream(name=stream, subjects=[f"benchread.{stream}"], storage="file", allow_direct=direct)
            data = (b"x" * 128,)
            publish_partition(
                iter([data] * rows), servers=url, subject=f"benchread.{stream}", run_id=make_write_id(), stream=stream,
                partition_id=0,
            )  # fmt: skip
        elif direct and not info.config.allow_direct:
            import msgspec

            js.update_stream(msgspec.structs.replace(info.config, allow_direct=True))


def _child(args: argparse.Namespace) -> dict[str, Any]:
    """In the tree's own process and directory: the reads."""
    sys.path.insert(0, os.getcwd())
    from jssync.spark._config import NatsConfig
    from jssync.spark.datasource import ReadOptions, SeqRange, read_partition

    tree = os.getcwd()
    out: dict[str, Any] = {"tree": tree, "spark": [], "outside": []}
    if args.outside:
        cfg = NatsConfig(servers=(args.server,))
        ropts = ReadOptions(stream=args.stream, direct_get=args.direct)
        for _ in range(args.reps + 1):
            c0, t0 = time.process_time(), time.perf_counter()
            n = sum(b.num_rows for b in read_partition(cfg, ropts, SeqRange(0, 1, args.rows)))
            t, c = time.perf_counter() - t0, time.process_time() - c0
            out["outside"].append({"rows": n, "rows_per_s": n / t, "cpu_us_per_row": c / n * 1e6})
        out["outside"] = out["outside"][1:]
    if args.no_spark:
        return out
    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = tree
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[2]").appName("jssync-bench-spark-read")
    for k, v in {
        "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false", "spark.driver.memory": "2g",
        "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
        "spark.python.worker.reuse": "true", "spark.executorEnv.PYTHONPATH": tree,
    }.items():  # fmt: skip
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        from jssync.spark import JetStreamDataSource

        spark.dataSource.register(JetStreamDataSource)
        where = spark.sparkContext.parallelize([0], 1).map(lambda _: __import__("jssync").__file__).collect()[0]
        if not where.startswith(tree):
            raise RuntimeError(f"the Spark workers import {where}, not the tree's")
        df = spark.read.format("jetstream").option("servers", args.server).option("stream", args.stream)
        df = (df.option("directGet", "true") if args.direct else df).load()
        df.count()
        reads = {"spark": df}
        if args.floors:
            # Spark's floors of bench_spark.py, the same rows from memory (no server): what the
            # JVM and the workers cost when nothing is read from the wire.
            sys.path.insert(0, str(HERE))
            from bench_spark import floor_source

            parts = df.rdd.getNumPartitions()
            spark.dataSource.register(floor_source(args.stream, f"benchread.{args.stream}", "floor", args.rows, parts, 128))
            for kind, arrow in (("floor-tuples", "false"), ("floor-arrow", "true")):
                reads[kind] = spark.read.format("jssync_bench_floor").option("arrow", arrow).load()
                reads[kind].count()
                out[kind] = []
        for _ in range(args.reps):
            for kind, frame in reads.items():
                c0, t0 = _cpu_by_kind(os.getpid()), time.perf_counter()
                n = frame.count()
                t, c1 = time.perf_counter() - t0, _cpu_by_kind(os.getpid())
                if n != args.rows:
                    raise RuntimeError(f"{kind}: count() = {n}, expected {args.rows}")
                cpu = {k: (c1.get(k, 0.0) - c0.get(k, 0.0)) / n * 1e6 for k in c1}
                out[kind].append({"rows": n, "rows_per_s": n / t, "cpu_us_per_row": cpu})
    finally:
        spark.stop()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trees", nargs="+", help="source trees (directories holding jssync/ and jscore/)")
    p.add_argument("--server", required=True, help="URL of a running JetStream server")
    p.add_argument("--stream", default="BENCHREAD", help="stream to read (made if absent; BENCHREAD)")
    p.add_argument("--rows", type=int, default=200_000, help="messages in the stream (200,000)")
    p.add_argument("--reps", type=int, default=3, help="measured reads per tree and round (3)")
    p.add_argument("--rounds", type=int, default=2, help="rounds, the trees in turn (2)")
    p.add_argument("--direct", action="store_true", help="read with batched direct gets")
    p.add_argument("--floors", action="store_true", help="also count Spark's floors (bench_spark.py's sources of the "
                   "same rows from memory, as tuples and as Arrow batches) after each read, CPU per process alike")
    p.add_argument("--outside", action="store_true", help="also time read_partition outside Spark")
    p.add_argument("--no-spark", action="store_true", help="only the reads outside Spark (implies --outside; many short "
                   "rounds compare trees on a machine whose speed drifts)")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.outside = args.outside or args.no_spark
    if args.child:
        print(json.dumps(_child(args)))
        return 0
    sys.path.insert(0, str(HERE.parent))
    _setup(args.server, args.stream, args.rows, args.direct)
    results = []
    for r in range(args.rounds):
        for tree in args.trees:
            cmd = [
                sys.executable, str(HERE / "bench_spark_read.py"), "--child", "--server", args.server, "--stream",
                args.stream, "--rows", str(args.rows), "--reps", str(args.reps),
                *(["--direct"] if args.direct else []), *(["--outside"] if args.outside else []),
                *(["--no-spark"] if args.no_spark else []), *(["--floors"] if args.floors else []), ".",
            ]  # fmt: skip
            done = subprocess.run(cmd, cwd=Path(tree).resolve(), capture_output=True, text=True, check=False)
            if done.returncode != 0:
                print(done.stderr[-3000:], file=sys.stderr)
                return 1
            res = json.loads(done.stdout.strip().splitlines()[-1])
            results.append({"round": r + 1, **res})
            for kind in ("outside", "spark", "floor-tuples", "floor-arrow"):
                for m in res.get(kind, ()):
                    cpu = m["cpu_us_per_row"]
                    cpu_s = f"{cpu:5.1f}" if isinstance(cpu, float) else "  ".join(f"{k} {v:5.1f}" for k, v in sorted(cpu.items()))
                    print(f"round {r + 1}  {res['tree']:<24} {kind:<12} {m['rows_per_s']:>9,.0f} rows/s   CPU us/row: {cpu_s}")
    for kind in ("outside", "spark", "floor-tuples", "floor-arrow"):
        for tree in args.trees:
            runs = [m for res in results if res["tree"] == str(Path(tree).resolve()) for m in res.get(kind, ())]
            if runs:
                rates = sorted(m["rows_per_s"] for m in runs)
                cpus = sorted(m["cpu_us_per_row"] if kind == "outside" else m["cpu_us_per_row"].get("workers", 0.0) for m in runs)
                print(f"median   {str(Path(tree).resolve()):<24} {kind:<12} {rates[len(rates) // 2]:>9,.0f} rows/s   "
                      f"CPU us/row{' (workers)' if kind != 'outside' else ''}: {cpus[len(cpus) // 2]:5.1f}   ({len(runs)} reads)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
