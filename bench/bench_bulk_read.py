#!/usr/bin/env python
"""The Spark read task with and without the bulk delivery reader (jscore.bulk), in one tree,
against a running server: the read task's CPU per row (``read_partition`` of a whole stream in
one process), split into the parse (``Parser.feed``), the rest of the I/O thread's session work
and the task's own thread; and the parser alone on socket reads captured from such a read.

Run on demand (not in CI), with the dev virtualenv, on a stream such as bench_spark_read.py
makes (``--stream``, 200,000 messages of 128 B with a ``Nats-Msg-Id`` each)::

    .venv/bin/nats-server -js -p 14222 -sd /tmp/store &
    .venv/bin/python bench/bench_spark_read.py --server nats://127.0.0.1:14222 --no-spark --rounds 1 --reps 1 .
    .venv/bin/python bench/bench_bulk_read.py --server nats://127.0.0.1:14222 --rounds 3

Each mode runs in its own process, the modes alternating (``off``: the bulk reader disabled,
every delivery read frame by frame; ``on``: as shipped). Process CPU comes from ``getrusage``,
the split from ``time.thread_time_ns`` around the parser's and the session's entry points.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, pickle, resource, sys, time
sys.path.insert(0, sys.argv[1])
mode, url, stream, rows, reps = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
import jscore.bulk
if mode == "off":
    jscore.bulk.AVAILABLE = False  # (read before any subscription is armed: frame by frame)
import numpy, pyarrow, pyarrow.compute  # (imported in both modes: their import is not measured)
from jscore import protocol, session
spent = {"parse": 0, "session": 0}
feed, receive = protocol.Parser.feed, session.Session.receive_data
def timed_feed(self, data):
    t = time.thread_time_ns(); out = feed(self, data); spent["parse"] += time.thread_time_ns() - t; return out
def timed_receive(self, data, now):
    t = time.thread_time_ns(); out = receive(self, data, now); spent["session"] += time.thread_time_ns() - t; return out
protocol.Parser.feed, session.Session.receive_data = timed_feed, timed_receive
from jssync.spark._config import NatsConfig
from jssync.spark.datasource import ReadOptions, SeqRange, read_partition
config, ropts = NatsConfig(servers=(url,)), ReadOptions(stream=stream)
def read():
    return sum(b.num_rows for b in read_partition(config, ropts, SeqRange(0, 1, rows)))
read()  # (a warm-up read)
spent.update(parse=0, session=0)
r0, t0, w0 = resource.getrusage(resource.RUSAGE_SELF), time.thread_time_ns(), time.perf_counter()
n = sum(read() for _ in range(reps))
r1, t1, w1 = resource.getrusage(resource.RUSAGE_SELF), time.thread_time_ns(), time.perf_counter()
print(json.dumps({
    "mode": mode, "rows": n, "rows_per_s": n / (w1 - w0),
    "user_us": (r1.ru_utime - r0.ru_utime) / n * 1e6, "sys_us": (r1.ru_stime - r0.ru_stime) / n * 1e6,
    "parse_us": spent["parse"] / n / 1e3, "session_us": spent["session"] / n / 1e3,
    "task_thread_us": (t1 - t0) / n / 1e3,
}))
"""

REPLAY = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
url, stream, rows = sys.argv[2], sys.argv[3], int(sys.argv[4])
from jscore import protocol
from jscore.protocol import AckLane, Parser
reads = []
feed = protocol.Parser.feed
def capture(self, data):
    reads.append(bytes(data)); return feed(self, data)
protocol.Parser.feed = capture
from jssync.spark._config import NatsConfig
from jssync.spark.datasource import ReadOptions, SeqRange, read_partition
n = sum(b.num_rows for b in read_partition(NatsConfig(servers=(url,)), ReadOptions(stream=stream), SeqRange(0, 1, rows)))
protocol.Parser.feed = feed
first = next(i for i, r in enumerate(reads) if r.count(b"HMSG ") > 100)
reads = [reads[first][reads[first].index(b"HMSG "):]] + reads[first + 1:]
def parse(columns):
    lane = AckLane("_INBOX.x")
    for sid in range(1, 200):  # (each pull of the read is a subscription of its own)
        lane.arm_runs(sid, cursors=True, columns=columns)
    parser = Parser(max_payload=1 << 20, lane=lane)
    for r in reads:
        parser.feed(r)
    return lane.delivery_read
out = {}
for columns in (False, True, False, True):
    parse(columns)
    t = time.perf_counter()
    for _ in range(10):
        frames = parse(columns)
    out.setdefault("bulk" if columns else "frame_by_frame", []).append((time.perf_counter() - t) / 10 / frames * 1e6)
print(json.dumps({"frames": frames, "reads": len(reads), **{k: min(v) for k, v in out.items()}}))
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server", required=True, help="URL of a running JetStream server")
    p.add_argument("--stream", default="BENCHREAD", help="stream to read (BENCHREAD, as bench_spark_read.py makes it)")
    p.add_argument("--rows", type=int, default=200_000, help="messages in the stream (200,000)")
    p.add_argument("--reps", type=int, default=4, help="reads per process after a warm-up read (4)")
    p.add_argument("--rounds", type=int, default=3, help="processes per mode, the modes alternating (3)")
    p.add_argument("--replay-rows", type=int, default=20_000, help="rows read for the parser-alone replay (20,000; 0: none)")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON")
    args = p.parse_args()
    results: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
    for _ in range(args.rounds):
        for mode in ("off", "on"):
            out = subprocess.run(
                [sys.executable, "-c", CHILD, str(ROOT), mode, args.server, args.stream, str(args.rows), str(args.reps)],
                check=True, capture_output=True, text=True,
            ).stdout  # fmt: skip
            got = json.loads(out.strip().splitlines()[-1])
            results[mode].append(got)
            print(
                f"{mode:3s}  {got['rows_per_s']:9,.0f} rows/s  CPU us/row: user {got['user_us']:.3f} sys {got['sys_us']:.3f}"
                f"  | parse {got['parse_us']:.3f}  session {got['session_us']:.3f}  task thread {got['task_thread_us']:.3f}",
                flush=True,
            )
    for mode, runs in results.items():
        med = {k: statistics.median(r[k] for r in runs) for k in ("rows_per_s", "user_us", "parse_us", "session_us", "task_thread_us")}
        print(f"median {mode:3s} " + "  ".join(f"{k} {v:,.3f}" for k, v in med.items()))
    replay = None
    if args.replay_rows:
        out = subprocess.run(
            [sys.executable, "-c", REPLAY, str(ROOT), args.server, args.stream, str(args.replay_rows)],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
        replay = json.loads(out.strip().splitlines()[-1])
        print(
            f"parser alone on {replay['reads']} captured reads ({replay['frames']} frames): "
            f"frame by frame {replay['frame_by_frame']:.3f} us a frame, bulk {replay['bulk']:.3f}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": results, "replay": replay}, indent=1))


if __name__ == "__main__":
    main()
