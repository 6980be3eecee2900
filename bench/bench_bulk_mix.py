#!/usr/bin/env python
"""Where the bulk delivery reader (jscore.bulk) pays: the parse and the Arrow batch of a Spark
read's deliveries, frame by frame against in bulk, for several message sizes and mixes of
messages with and without headers. No server: the deliveries are made in memory, fed to the
parser in reads of 256 KiB, and the runs it gives are built into Arrow batches as the Spark
reader builds them.

Run on demand (not in CI), with the dev virtualenv (NumPy, PyArrow)::

    .venv/bin/python bench/bench_bulk_mix.py
    .venv/bin/python bench/bench_bulk_mix.py --sizes 128,2048 --plain-every 0,50 --reps 5

``--plain-every N``: every N-th message has no headers (an MSG frame among HMSG frames; 0: none).
Medians of ``--reps``, us per message.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jscore import bulk  # noqa: E402
from jscore.headers import bulk_headers  # noqa: E402
from jscore.protocol import AckLane, Parser  # noqa: E402
from jssync.spark import datasource as ds  # noqa: E402

SID = 13
READ = 256 * 1024


def deliveries(size: int, count: int, plain_every: int) -> bytes:
    out = []
    for i in range(1, count + 1):
        reply = b"$JS.ACK.S.OC_1.1.%d.%d.%d.%d" % (i, i, 1_700_000_000_000_000_000 + i, count - i)
        payload = b"x" * size
        if plain_every and i % plain_every == 0:
            out.append(b"MSG s.x %d %s %d\r\n%s\r\n" % (SID, reply, len(payload), payload))
        else:
            block = b"NATS/1.0\r\nNats-Msg-Id: m-%d\r\n\r\n" % i
            out.append(b"HMSG s.x %d %s %d %d\r\n%s%s\r\n" % (SID, reply, len(block), len(block) + size, block, payload))
    return b"".join(out)


class _Options:
    stream = "S"


def once(data: bytes, columns: bool) -> tuple[float, float, int]:
    """Seconds to parse, seconds to build the Arrow batches, messages."""
    lane = AckLane("_INBOX.x")
    lane.arm_runs(SID, cursors=True, columns=columns)
    parser = Parser(max_payload=1 << 20, lane=lane)
    items: list[Any] = []
    gc.collect()  # (the garbage of the run before is not this one's to collect)
    t0 = time.perf_counter()
    for at in range(0, len(data), READ):
        for e in parser.feed(data[at : at + READ]):
            if e.columns is not None:
                items.append(e.columns)
            else:
                items.extend((m.subject, m.data, bulk_headers(m.headers), c[1], c[3]) for m, c in zip(e.msgs, e.cursors))
    t1 = time.perf_counter()
    real = ds._range_batches
    ds._range_batches = lambda *a, **k: (x for x in [items])  # type: ignore[assignment]
    try:
        rows = sum(b.num_rows for b in ds.read_range_arrow(None, _Options, None))  # type: ignore[arg-type]
    finally:
        ds._range_batches = real  # type: ignore[assignment]
    return t1 - t0, time.perf_counter() - t1, rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="128,512,2048,8192", help="payload sizes in bytes (128,512,2048,8192)")
    p.add_argument("--plain-every", default="0,2,50", help="every N-th message without headers (0,2,50; 0: none)")
    p.add_argument("--megabytes", type=int, default=6, help="deliveries per case, in MiB (6)")
    p.add_argument("--reps", type=int, default=3, help="runs per case and mode (3)")
    args = p.parse_args()
    if not bulk.load():
        raise SystemExit("NumPy and PyArrow are needed")
    print("size  plain-every  mode           parse   build   total  (us a message)")
    for size in map(int, args.sizes.split(",")):
        for every in map(int, args.plain_every.split(",")):
            count = (args.megabytes << 20) // (size + 110)
            data = deliveries(size, count, every)
            got: dict[bool, list[tuple[float, float, int]]] = {False: [], True: []}
            for rep in range(args.reps):
                for columns in (False, True) if rep % 2 == 0 else (True, False):  # (neither always first)
                    got[columns].append(once(data, columns))
            for columns, runs in got.items():
                assert all(r[2] == count for r in runs)
                parse = statistics.median(r[0] for r in runs) / count * 1e6
                build = statistics.median(r[1] for r in runs) / count * 1e6
                mode = "bulk" if columns else "frame by frame"
                print(f"{size:5d}  {every:11d}  {mode:14s} {parse:6.2f}  {build:6.2f}  {parse + build:6.2f}", flush=True)


if __name__ == "__main__":
    main()
