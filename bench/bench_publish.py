#!/usr/bin/env python
"""Core publish, one call at a time: wall time and (with --callgrind) instructions per publish,
for one or more source trees side by side, against a running nats-server.

Run on demand, from the repository root with the dev virtualenv::

    .venv/bin/nats-server -p 14222 &
    .venv/bin/python bench/bench_publish.py --server nats://127.0.0.1:14222 . ../other-checkout
    .venv/bin/python bench/bench_publish.py --server nats://127.0.0.1:14222 --callgrind . ../other-checkout

Wall time: each tree runs in its own process ``--procs`` times, the trees alternating; a process
publishes ``--msgs`` messages of 128 B then flushes, ``--rounds`` times. Reported: median and
min ns per publish over all rounds. Instructions (needs valgrind): callgrind counts a process
publishing ``--msgs`` and one publishing 5x as many; the difference over the extra messages is
the count per publish (the I/O thread's work included; run it on a quiet machine, the I/O
thread's turns depend on timing).
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = """
import sys, time
sys.path.insert(0, sys.argv[1])
import jssync
def main():
    nc = jssync.connect(sys.argv[2], reconnect=False)
    pub, data, n = nc.publish, b"x" * 128, int(sys.argv[3])
    out = []
    for _ in range(int(sys.argv[4])):
        t0 = time.perf_counter()
        for _ in range(n):
            pub("bench.publish", data)
        nc.flush(timeout=60)
        out.append((time.perf_counter() - t0) / n * 1e9)
    print(" ".join(f"{x:.0f}" for x in out))
    nc.close()
main()
"""


def wall(trees: list[str], server: str, msgs: int, rounds: int, procs: int) -> None:
    results: dict[str, list[float]] = {t: [] for t in trees}
    for _ in range(procs):
        for t in trees:
            out = subprocess.run(
                [sys.executable, "-c", CHILD, str(Path(t).resolve()), server, str(msgs), str(rounds)],
                capture_output=True, text=True, check=True,
            ).stdout
            results[t] += [float(x) for x in out.split()]
    for t, v in results.items():
        print(f"{t}: median {statistics.median(v):.0f} ns, min {min(v):.0f} ns per publish ({len(v)} rounds)")


def instructions(tree: str, server: str, msgs: int) -> float:
    counts = []
    for n in (msgs, 5 * msgs):
        err = subprocess.run(
            ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-c", CHILD,
             str(Path(tree).resolve()), server, str(n), "1"],
            capture_output=True, text=True, check=True,
        ).stderr
        m = re.search(r"Collected : (\d+)", err)
        if m is None:
            raise SystemExit(f"no callgrind total in: {err[-500:]}")
        counts.append(int(m.group(1)))
    return (counts[1] - counts[0]) / (4 * msgs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trees", nargs="+", help="source trees (each with jscore/ and jssync/)")
    ap.add_argument("--server", required=True, help="URL of a running nats-server")
    ap.add_argument("--msgs", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--procs", type=int, default=6)
    ap.add_argument("--callgrind", action="store_true", help="count instructions instead (valgrind)")
    a = ap.parse_args()
    if a.callgrind:
        for t in a.trees:
            print(f"{t}: {instructions(t, a.server, min(a.msgs, 10_000)):.0f} instructions per publish")
    else:
        wall(a.trees, a.server, a.msgs, a.rounds, a.procs)


if __name__ == "__main__":
    main()
