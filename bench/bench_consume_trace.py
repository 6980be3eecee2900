#!/usr/bin/env python
"""Where a consume waits: a trace of ``consumer.consume(handler)`` acking every message, against a
running server, for the share of the time the server has no pull demand left.

Run on demand (not in CI), from the repository root with the dev virtualenv::

    .venv/bin/nats-server -js -p 14222 -sd /tmp/store &
    .venv/bin/python bench/bench_consume_trace.py --server nats://127.0.0.1:14222
    .venv/bin/python bench/bench_consume_trace.py --server URL --thresholds 250,400,450 --runs 3

The stream (``--stream``, made once if it does not hold ``--msgs`` messages of 128 B) is read by a
fresh durable consumer per run (ack explicit, ``max_ack_pending`` above ``--msgs``, so acks never
hold the server back) with ``consume(handler, max_messages=--batch, threshold_messages=T)``.
The trace records, with their times, every pull the session writes (its batch), every read the
client feeds its session (the messages in it) and every take report of the consume. "No demand"
is the time during which every message pulled so far had arrived: the server had nothing it was
asked to send. The trace hooks the session and the consume driver from outside (a diagnostic:
it slows the client a little); rates of the same run are comparable with each other only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing

import jscore.session as session_module  # noqa: E402
import jssync  # noqa: E402
import jssync.pull as pull_module  # noqa: E402

_trace: list[tuple[float, str, int]] = []


def _hook() -> None:
    """Record pulls written, reads fed and take reports (wrapping the originals)."""
    now = time.perf_counter
    write_pull = session_module.Session._write_pull
    receive_data = session_module.Session.receive_data
    took = pull_module._ConsumeDriver.took

    def traced_write_pull(self: Any, slot: Any, e: Any) -> None:
        _trace.append((now(), "pull", e.batch))
        write_pull(self, slot, e)

    def traced_receive_data(self: Any, data: bytes, at: float) -> None:
        _trace.append((now(), "read", data.count(b"MSG ")))
        receive_data(self, data, at)

    def traced_took(self: Any, count: int, size: int) -> None:
        _trace.append((now(), "took", count))
        took(self, count, size)

    session_module.Session._write_pull = traced_write_pull  # type: ignore[method-assign]
    session_module.Session.receive_data = traced_receive_data  # type: ignore[method-assign]
    pull_module._ConsumeDriver.took = traced_took  # type: ignore[method-assign]


def _setup(url: str, stream: str, msgs: int) -> None:
    with jssync.connect(url, name="bench-consume-trace-setup") as nc:
        js = nc.jetstream(timeout=30.0)
        try:
            held = js.stream_info(stream).state.messages
        except jssync.errors.StreamNotFoundError:
            held = -1
        if held == msgs:
            return
        if held >= 0:
            js.delete_stream(stream)
        js.create_stream(name=stream, subjects=[f"trace.{stream}"])
        for _ in range(msgs):
            js.publish_async(f"trace.{stream}", b"x" * 128)
        js.publish_async_complete(timeout=60.0)


def _run(url: str, stream: str, msgs: int, batch: int, threshold: int) -> dict[str, Any]:
    with jssync.connect(url, name="bench-consume-trace") as nc:
        js = nc.jetstream(timeout=30.0)
        try:
            js.delete_consumer(stream, "TRACE")
        except jssync.errors.ConsumerNotFoundError:
            pass
        js.create_consumer(stream, durable_name="TRACE", ack_policy="explicit", max_ack_pending=msgs + 1)
        consumer = js.consumer(stream, "TRACE")
        seen = [0]
        done = threading.Event()

        def handler(msg: Any) -> None:
            seen[0] += 1
            msg.ack()
            if seen[0] >= msgs:
                done.set()

        _trace.clear()
        t0 = time.perf_counter()
        with consumer.consume(handler, max_messages=batch, threshold_messages=threshold):
            if not done.wait(120.0):
                raise TimeoutError(f"consume: {seen[0]}/{msgs} after 120 s")
        nc.flush(timeout=30.0)
        total = time.perf_counter() - t0
        js.delete_consumer(stream, "TRACE")
    events = list(_trace)
    asked = arrived = 0
    dry = 0.0
    last: float | None = None
    for at, kind, n in events:
        if last is not None and asked <= arrived:
            dry += at - last
        if kind == "pull":
            asked += n
        elif kind == "read":
            arrived += n
        last = at
    reads = [n for _, kind, n in events if kind == "read" and n]
    return {
        "threshold": threshold,
        "msgs_per_s": msgs / total,
        "seconds": total,
        "no_demand_s": dry,
        "no_demand_share": dry / total,
        "pulls": sum(1 for e in events if e[1] == "pull"),
        "reads": len(reads),
        "msgs_per_read_median": statistics.median(reads) if reads else 0,
        "take_reports": sum(1 for e in events if e[1] == "took"),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server", required=True, help="URL of a running JetStream server")
    p.add_argument("--stream", default="TRACE", help="stream to read (made if it does not hold --msgs messages)")
    p.add_argument("--msgs", type=int, default=50_000, help="messages consumed per run (50,000)")
    p.add_argument("--batch", type=int, default=500, help="max_messages of the consume (500)")
    p.add_argument("--thresholds", default="250", help="threshold_messages to try, comma-separated (250: ADR-37's half)")
    p.add_argument("--runs", type=int, default=3, help="runs per threshold, interleaved (3)")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON")
    args = p.parse_args(argv)
    thresholds = [int(t) for t in args.thresholds.split(",") if t.strip()]
    _setup(args.server, args.stream, args.msgs)
    _hook()
    results = []
    for r in range(args.runs):
        for threshold in thresholds:
            res = _run(args.server, args.stream, args.msgs, args.batch, threshold)
            results.append(res)
            print(
                f"run {r + 1}  threshold {threshold:>4}  {res['msgs_per_s']:>9,.0f} msgs/s  no pull demand "
                f"{res['no_demand_share']:5.1%} of {res['seconds']:.3f} s  pulls {res['pulls']}  reads {res['reads']} "
                f"(median {res['msgs_per_read_median']:.0f} msgs)  take reports {res['take_reports']}",
                flush=True,
            )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
