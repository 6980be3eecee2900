#!/usr/bin/env python
"""Key-value reads of one bucket by jssync, before and after a change: ``kv.keys()`` and
``kv.get_many(">")`` (a watcher over the whole bucket when it holds more than 1024 keys), each on
a fresh connection as ``bench/bench_kv.py`` times them, for two or more source trees in turn.

    .venv/bin/python bench/bench_kv.py --keys 10000 --rounds 1     # makes the bucket bench_kv
    .venv/bin/python bench/bench_kv_trees.py --server URL /path/to/before . --rounds 3 --reps 8

Each round runs every tree in its own process (the order alternates), ``--reps`` reads of each
workload; prints per process the median keys/s and the median CPU per key of the process.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import json, statistics, sys, time
sys.path.insert(0, sys.argv[1])
import jssync
url, bucket, reps = sys.argv[2], sys.argv[3], int(sys.argv[4])
res = {"keys": [], "get_all": []}
for _ in range(reps):
    for workload in res:
        with jssync.connect(url) as nc:
            kv = nc.jetstream(timeout=30.0).key_value(bucket)
            c0, t0 = time.process_time(), time.perf_counter()
            got = kv.keys() if workload == "keys" else {k: e.value for k, e in kv.get_many(">").items()}
            res[workload].append((len(got) / (time.perf_counter() - t0), (time.process_time() - c0) / len(got) * 1e6))
print(json.dumps({w: [statistics.median(r for r, _ in v), statistics.median(c for _, c in v)] for w, v in res.items()}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trees", nargs="+", help="source trees (each with jscore/ and jssync/)")
    ap.add_argument("--server", required=True, help="URL of the server holding the bucket")
    ap.add_argument("--bucket", default="bench_kv")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    out: list[dict[str, object]] = []
    for r in range(args.rounds):
        for tree in args.trees if r % 2 == 0 else list(reversed(args.trees)):
            path = os.path.abspath(tree)
            res = json.loads(
                subprocess.run(
                    [sys.executable, "-c", CHILD, path, args.server, args.bucket, str(args.reps)],
                    cwd=path, capture_output=True, text=True, check=True,
                ).stdout
            )  # fmt: skip
            out.append({"round": r + 1, "tree": tree, **res})
            for workload, (rate, cpu) in res.items():
                print(f"round {r + 1}  {tree:30s} {workload:8s} {rate:9,.0f} keys/s  CPU {cpu:5.2f} us/key", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
