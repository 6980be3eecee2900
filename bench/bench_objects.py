#!/usr/bin/env python
"""Object store put and get throughput, jssync side by side with nats-py, in one run.

Each round puts an object of ``--mib`` MiB (128 KiB chunks, file-backed bucket) and reads it
back, with jssync and with nats-py (the order alternates), against the same nats-server
(an embedded one unless ``--server``). Prints MiB/s per client and step: median [min..max].

    .venv/bin/python bench/bench_objects.py --mib 64 --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Callable

import jssync
from jssync.server import NatsServer


def run_jssync(url: str, data: bytes) -> tuple[float, float]:
    with jssync.connect(url) as nc:
        js = nc.jetstream(timeout=30.0)
        obs = js.create_object_store("bench_jssync")
        t0 = time.perf_counter()
        obs.put("o", data)
        t1 = time.perf_counter()
        got = obs.get_bytes("o")
        t2 = time.perf_counter()
        assert got == data
        js.delete_object_store("bench_jssync")
    return t1 - t0, t2 - t1


def run_natspy(url: str, data: bytes) -> tuple[float, float]:
    import nats

    async def main() -> tuple[float, float]:
        nc = await nats.connect(url)
        js = nc.jetstream(timeout=30.0)
        obs = await js.create_object_store("bench_natspy")
        t0 = time.perf_counter()
        await obs.put("o", data)
        t1 = time.perf_counter()
        got = (await obs.get("o")).data
        t2 = time.perf_counter()
        assert got == data
        await js.delete_object_store("bench_natspy")
        await nc.close()
        return t1 - t0, t2 - t1

    return asyncio.run(main())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--server", default=None)
    args = ap.parse_args()
    data = os.urandom(args.mib << 20)
    runners: dict[str, Callable[[str, bytes], tuple[float, float]]] = {"jssync": run_jssync, "nats-py": run_natspy}
    results: dict[str, dict[str, list[float]]] = {k: {"put": [], "get": []} for k in runners}

    def rounds(url: str) -> None:
        names = list(runners)
        for i in range(args.rounds):
            for name in names if i % 2 == 0 else names[::-1]:
                put, get = runners[name](url, data)
                results[name]["put"].append(args.mib / put)
                results[name]["get"].append(args.mib / get)

    if args.server:
        rounds(args.server)
    else:
        with tempfile.TemporaryDirectory() as d, NatsServer(store_dir=d).start() as s:
            rounds(s.url)
    print(f"object of {args.mib} MiB, 128 KiB chunks, {args.rounds} rounds: MiB/s median [min..max]")
    for name, steps in results.items():
        cells = [f"{step} {statistics.median(v):7.1f} [{min(v):.1f}..{max(v):.1f}]" for step, v in steps.items()]
        print(f"{name:8s} " + "   ".join(cells))


if __name__ == "__main__":
    main()
