#!/usr/bin/env python
"""Where a JetStream workload's CPU goes, per thread: the calling thread, the I/O thread (and a
consume's handler thread), and the server, in microseconds per message, for one or more source
trees side by side, against a running nats-server.

Run on demand, from the repository root with the dev virtualenv::

    .venv/bin/nats-server -js -p 14222 -sd /tmp/bench-store &
    .venv/bin/python bench/bench_threads.py --server nats://127.0.0.1:14222 --server-pid $! \\
        --workload publish_async . ../other-checkout

Workloads (128 B payloads, ``--msgs`` messages, a fresh stream each time):

* ``publish_async``: ``js.publish_async`` with at most 1000 acks outstanding, every PubAck read
  (as the peer harness's js_pub_async);
* ``consume``: ``consumer.consume`` of a pre-filled stream with batches of 500, every message
  acked in the handler (as the harness's consume; the fill is not measured);
* ``publish_partition``: the Spark writer, ``jssync.spark.publish_partition``, on a list of
  ``Row(data=...)`` outside Spark (needs pyspark; a msg id per row, every ack checked);
* ``direct_get_batch``: ``stream.direct_get_last_for`` of 1000 subjects, repeated until
  ``--msgs`` replies were read (the calling thread reads its own replies: the I/O thread is
  idle); ``direct_get_batch_msgid``: the same with a msg id stored with each message (as the
  Spark writer stores them: a header of the message's own in every reply).

Each tree runs in its own process ``--procs`` times, the trees alternating. A thread's CPU is
read from ``/proc`` (user + system), the server's too when ``--server-pid`` is given. The two
client threads take turns under the GIL, so the client's limit is about their sum.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import os, sys, threading, time
sys.path.insert(0, sys.argv[1])
import jssync
url, workload, n, spid = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
TICK = os.sysconf("SC_CLK_TCK")

def cpu(path):
    f = open(path).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICK

def threads():
    out = {}
    names = {t.native_id: t.name for t in threading.enumerate()}
    for tid in os.listdir("/proc/self/task"):
        try:
            out[names.get(int(tid), "other")] = out.get(names.get(int(tid), "other"), 0.0) + cpu(f"/proc/self/task/{tid}/stat")
        except FileNotFoundError:
            pass
    return out

def server():
    return cpu(f"/proc/{spid}/stat") if spid else 0.0

def fresh_stream(js, name, **config):
    try:
        js.delete_stream(name)
    except Exception:
        pass
    js.create_stream(name=name, subjects=[name.lower() + ".>"], **config)

data = b"x" * 128
nc = jssync.connect(url)
js = nc.jetstream()
if workload == "publish_async":
    from collections import deque
    fresh_stream(js, "BTPA")
    futs = deque()
    c0, s0, t0 = threads(), server(), time.perf_counter()
    for _ in range(n):
        if len(futs) >= 1000:
            futs.popleft().result(timeout=30)
        futs.append(js.publish_async("btpa.x", data))
    js.publish_async_complete(timeout=60)
    while futs:
        futs.popleft().result(timeout=30)
    t1, s1, c1 = time.perf_counter(), server(), threads()
elif workload == "consume":
    fresh_stream(js, "BTCS")
    for _ in range(n):
        js.publish_async("btcs.x", data)
    js.publish_async_complete(timeout=120)
    js.create_consumer("BTCS", durable_name="c", ack_policy="explicit")
    consumer = js.consumer("BTCS", "c")
    got = []
    done = threading.Event()
    def handler(m):
        got.append(m)
        m.ack()
        if len(got) >= n:
            done.set()
    c0, s0, t0 = threads(), server(), time.perf_counter()
    with consumer.consume(handler, max_messages=500):
        done.wait(300)
        nc.flush(timeout=60)
        t1, s1, c1 = time.perf_counter(), server(), threads()
    assert len(got) == n, len(got)
elif workload == "publish_partition":
    from pyspark.sql import Row
    from jssync.spark import publish_partition
    fresh_stream(js, "BTPP")
    rows = [Row(data=data) for _ in range(n)]
    publish_partition(rows[:1000], servers=url, subject="btpp.x", run_id="warm", partition_id=1)  # (its connection is cached)
    c0, s0, t0 = threads(), server(), time.perf_counter()
    assert publish_partition(rows, servers=url, subject="btpp.x", run_id="run", partition_id=0) == n
    t1, s1, c1 = time.perf_counter(), server(), threads()
elif workload in ("direct_get_batch", "direct_get_batch_msgid"):
    # The last message of each of 1000 subjects (128 B, a msg id each in the _msgid form, as
    # the Spark writer stores them), read with direct_get_last_for until n replies were read.
    fresh_stream(js, "BTDG", allow_direct=True)
    with_id = workload.endswith("msgid")
    for i in range(1000):
        js.publish_async(f"btdg.{i}", data, msg_id=f"id-{i}" if with_id else None)
    js.publish_async_complete(timeout=60)
    stream = js.stream("BTDG")
    seen = 0
    c0, s0, t0 = threads(), server(), time.perf_counter()
    while seen < n:
        for m in stream.direct_get_last_for(["btdg.*"]):
            seen += 1
    t1, s1, c1 = time.perf_counter(), server(), threads()
    n = seen
else:
    raise SystemExit(f"unknown workload {workload}")
nc.close()
parts = {k: (c1[k] - c0.get(k, 0.0)) * 1e6 / n for k in c1}
print(f"rate={n / (t1 - t0):.0f} wall={(t1 - t0) * 1e6 / n:.2f} server={(s1 - s0) * 1e6 / n:.2f} "
      + " ".join(f"{k}={v:.2f}" for k, v in sorted(parts.items()) if v >= 0.05))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trees", nargs="+", help="source trees (each with jscore/ and jssync/)")
    ap.add_argument("--server", required=True, help="URL of a running nats-server with JetStream")
    ap.add_argument("--server-pid", type=int, default=0, help="its pid, to read its CPU too")
    ap.add_argument("--workload", choices=("publish_async", "consume", "publish_partition", "direct_get_batch",
                                           "direct_get_batch_msgid"), default="publish_async")
    ap.add_argument("--msgs", type=int, default=50_000)
    ap.add_argument("--procs", type=int, default=3)
    a = ap.parse_args()
    results: dict[str, list[dict[str, float]]] = {t: [] for t in a.trees}
    for _ in range(a.procs):
        for t in a.trees:
            out = subprocess.run(
                [sys.executable, "-c", CHILD, str(Path(t).resolve()), a.server, a.workload, str(a.msgs), str(a.server_pid)],
                capture_output=True, text=True, check=True,
            ).stdout
            row = dict((k, float(v)) for k, v in (kv.split("=") for kv in out.split()))
            print(f"{t}: " + "  ".join(f"{k} {v:,.2f}" for k, v in row.items()), flush=True)
            results[t].append(row)
    print(f"\n{a.workload}, {a.msgs:,} messages, median [min..max] over {a.procs} processes "
          "(rate in messages/s, the rest in us per message):")
    for t, rows in results.items():
        keys = sorted({k for r in rows for k in r}, key=lambda k: (k != "rate", k != "wall", k))
        cells = []
        for k in keys:
            v = [r.get(k, 0.0) for r in rows]
            cells.append(f"{k} {statistics.median(v):,.2f} [{min(v):,.2f}..{max(v):,.2f}]")
        print(f"  {t}: " + ", ".join(cells))


if __name__ == "__main__":
    main()
