#!/usr/bin/env python
"""Frame-encoding call sites, before and after a change: client CPU per message, interleaved.

Every call site that builds a PUB/HPUB frame is driven through the public API (or, for the core,
the connection machine) and timed by the CPU time of the calling thread (``time.thread_time``),
which leaves out the I/O thread, the server and the other processes on the machine. Two
checkouts are compared in one run: each round starts one worker process per checkout (the order
alternates), both against the same nats-server; the table shows the median and [min..max] over
the rounds, in ns per message, and the ratio after / before.

    .venv/bin/python bench/bench_frames.py --before /tmp/base-checkout --after . --rounds 7
    .venv/bin/python bench/bench_frames.py --after .          # one checkout, no comparison

A worker only imports ``jscore`` / ``jssync`` from the checkout on its ``PYTHONPATH``, so the
script works against any revision with the same API (it reaches two private names on purpose,
to time a call site alone: ``Client._publish_to_reply`` and ``PartitionWriter._builder``).

Cases (128-byte payloads, one stream in memory for the JetStream ones):

* ``core.publish`` / ``_hdr`` / ``_reply``: ``Connection.publish`` on a connected machine, no
  socket (its fast path; the checked path with a header, with a reply subject).
* ``nc.publish`` / ``_hdr``: ``Client.publish`` then a flush (the fast path builds the frame
  itself; with headers it goes through the machine's checked path).
* ``msg.ack``: ``Msg.ack()`` of fetched messages (only the acks are timed), with the I/O thread's
  wake-ups per ack; ``ack.deferred``: the ack call site as a consume handler uses it, no wake-up.
* ``js.publish``: synchronous JetStream publish (it waits for each PubAck; wide spread).
* ``js.publish_async`` / ``_msgid`` / ``_hdr``: 50k publishes then ``publish_async_complete``.
* ``spark.build``: the Spark writer's row -> frame builder alone; ``spark.add_all``: a
  ``PartitionWriter`` writing 200k ``Row``s and waiting for every ack.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

CASES = (
    "core.publish",
    "core.publish_hdr",
    "core.publish_reply",
    "nc.publish",
    "nc.publish_hdr",
    "msg.ack",
    "msg.ack wake-ups/msg",
    "ack.deferred",
    "js.publish",
    "js.publish_async",
    "js.publish_async_msgid",
    "js.publish_async_hdr",
    "spark.add_all",
    "spark.build",
)

PAYLOAD = b"x" * 128


def _cpu(fn: Callable[[], int]) -> float:
    """ns of this thread's CPU per message for one call of ``fn`` (which returns its count)."""
    t0 = time.thread_time_ns()
    n = fn()
    return (time.thread_time_ns() - t0) / n


def _best(fn: Callable[[], int], reps: int) -> float:
    return min(_cpu(fn) for _ in range(reps))


def _core_conn() -> Any:
    from jscore.connection import ConnectOptions, Connection

    conn = Connection(ConnectOptions(servers=("nats://a:4222",)), rng=random.Random(1))
    conn.start(0.0)
    while conn.next_event() is not None:
        pass
    conn.connection_made(0.0)
    conn.receive_data(b'INFO {"max_payload":1048576,"headers":true}\r\n', 0.0)
    conn.data_to_send()
    conn.receive_data(b"PONG\r\n", 0.0)
    while conn.next_event() is not None:
        pass
    assert conn.is_connected
    return conn


def worker(url: str, reps: int, cases: set[str]) -> dict[str, float]:
    import jssync

    out: dict[str, float] = {}

    def want(*names: str) -> bool:
        return any(n in cases for n in names)

    subj = "bench.frames"

    # -- the connection machine alone (no socket): its fast path and its checked path
    conn = _core_conn()

    def core(n: int, **kw: Any) -> Callable[[], int]:
        def run() -> int:
            pub = conn.publish
            for i in range(n):
                pub(subj, PAYLOAD, **kw)
                if i & 1023 == 0:
                    conn.data_to_send()
            conn.data_to_send()
            return n

        return run

    conn.publish(subj, PAYLOAD)  # the subject into the cache
    if want("core.publish"):
        out["core.publish"] = _best(core(200_000), reps)
    if want("core.publish_hdr"):
        out["core.publish_hdr"] = _best(core(100_000, headers={"A": "b"}), reps)
    if want("core.publish_reply"):
        out["core.publish_reply"] = _best(core(100_000, reply="r.x"), reps)

    nc = jssync.connect(url, name="bench-frames")
    try:
        nc.publish(subj, PAYLOAD)
        nc.flush()

        def nc_pub(n: int, **kw: Any) -> Callable[[], int]:
            def run() -> int:
                pub = nc.publish
                for _ in range(n):
                    pub(subj, PAYLOAD, **kw)
                nc.flush(30)
                return n

            return run

        if want("nc.publish"):
            out["nc.publish"] = _best(nc_pub(200_000), reps)
        if want("nc.publish_hdr"):
            out["nc.publish_hdr"] = _best(nc_pub(100_000, headers={"A": "b"}), reps)

        if want("ack.deferred"):
            # the ack call site alone: acks as a consume handler sends them (written with the
            # dispatcher's next take report, so no wake-up syscall per ack); the server drops
            # acks for a consumer that does not exist
            def acks_deferred() -> int:
                n = 200_000
                send = nc._publish_to_reply
                for i in range(n):
                    send("$JS.ACK.BENCH.c.1.%d.%d.0.0" % (i, i), b"+ACK", True)
                nc.flush(30)
                return n

            out["ack.deferred"] = _best(acks_deferred, reps)

        js = nc.jetstream()
        stream = "BENCHFRAMES" + uuid.uuid4().hex[:8].upper()
        st = js.create_stream(name=stream, subjects=[f"{stream.lower()}.>"], storage="memory", duplicate_window=5.0)
        jsubj = f"{stream.lower()}.a"
        try:
            # acks: load, fetch (untimed), then time the acks alone
            def acks() -> int:
                n = 20_000
                for _ in range(n):
                    js.publish_async(jsubj, PAYLOAD)
                js.publish_async_complete(60)
                name = "c" + uuid.uuid4().hex[:8]
                c = js.create_consumer(stream, durable_name=name, ack_policy="explicit", max_ack_pending=-1)
                cpu = 0
                got = 0
                while got < n:
                    msgs = list(c.fetch(1000, expires=5.0))
                    t0 = time.thread_time_ns()
                    for m in msgs:
                        m.ack()
                    cpu += time.thread_time_ns() - t0
                    got += len(msgs)
                nc.flush(30)
                js.delete_consumer(stream, name)
                st.purge()
                return cpu // 1  # total ns; divided below

            if want("msg.ack"):
                # (wake-ups of the I/O thread per ack: a syscall each, which thread CPU counts)
                pokes = [0]
                poke = nc._poke

                def counted() -> None:
                    pokes[0] += 1
                    poke()

                nc._poke = counted  # type: ignore[method-assign]
                best = []
                for _ in range(reps):
                    pokes[0] = 0
                    best.append((acks() / 20_000, pokes[0] / 20_000))
                del nc._poke
                out["msg.ack"], out["msg.ack wake-ups/msg"] = min(best)

            def js_pub() -> int:
                n = 3_000
                for _ in range(n):
                    js.publish(jsubj, PAYLOAD)
                return n

            if want("js.publish"):
                out["js.publish"] = _best(js_pub, reps)
                st.purge()

            def js_async(n: int, kind: str) -> Callable[[], int]:
                def run() -> int:
                    pa = js.publish_async
                    base = uuid.uuid4().hex
                    if kind == "msgid":
                        for i in range(n):
                            pa(jsubj, PAYLOAD, msg_id=f"{base}-{i}")
                    elif kind == "hdr":
                        for _ in range(n):
                            pa(jsubj, PAYLOAD, headers={"A": "b"})
                    else:
                        for _ in range(n):
                            pa(jsubj, PAYLOAD)
                    js.publish_async_complete(60)
                    st.purge()
                    return n

                return run

            for kind in ("", "msgid", "hdr"):
                case = "js.publish_async" + (f"_{kind}" if kind else "")
                if want(case):
                    out[case] = _best(js_async(50_000, kind), reps)

            Row: Any = None
            try:
                from pyspark.sql import Row
            except ImportError:
                pass
            if Row is not None and want("spark.build"):
                from jssync.spark._config import WriteOptions
                from jssync.spark._writer import PartitionWriter

                rows = [Row(data=PAYLOAD) for _ in range(200_000)]

                def spark_build() -> int:
                    # the writer's row -> frame builder alone (nothing is sent)
                    w = PartitionWriter(nc, WriteOptions(subject=jsubj), write_id=uuid.uuid4().hex[:12], partition_id=0)
                    try:
                        build = w._builder(rows[0])
                        for i, row in enumerate(rows):
                            build(row, i)
                    finally:
                        w.close()
                    return len(rows)

                out["spark.build"] = _best(spark_build, reps)

            if Row is not None and want("spark.add_all"):
                from jssync.spark._config import WriteOptions
                from jssync.spark._writer import PartitionWriter

                rows = [Row(data=PAYLOAD) for _ in range(200_000)]

                def spark() -> int:
                    w = PartitionWriter(nc, WriteOptions(subject=jsubj), write_id=uuid.uuid4().hex[:12], partition_id=0)
                    try:
                        w.add_all(rows)
                        w.finish()
                    finally:
                        w.close()
                    st.purge()
                    return len(rows)

                out["spark.add_all"] = _best(spark, reps)
        finally:
            js.delete_stream(stream)
    finally:
        nc.close()
    return out


def _run_worker(checkout: str, url: str, reps: int, cases: str) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(checkout))
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--worker", "--url", url, "--reps", str(reps), "--cases", cases],
        env=env,
        cwd=os.path.abspath(checkout),
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode:
        raise SystemExit(f"worker for {checkout} failed:\n{proc.stderr}")
    result: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before", help="checkout measured as 'before'")
    p.add_argument("--after", default=".", help="checkout measured as 'after' (default: .)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--reps", type=int, default=3, help="repetitions per case inside a worker (the best counts)")
    p.add_argument("--cases", default=",".join(CASES), help="comma-separated subset of " + ",".join(CASES))
    p.add_argument("--server", metavar="URL", help="a running JetStream server")
    p.add_argument("--json", metavar="FILE")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.url, args.reps, set(args.cases.split(",")))))
        return 0

    sys.path.insert(0, os.path.abspath(args.after))
    from jssync.server import NatsServer

    server = None
    url = args.server
    if url is None:
        server = NatsServer(jetstream=True).start()
        url = server.url
    labels = ["before", "after"] if args.before else ["after"]
    trees = {"before": args.before, "after": args.after}
    results: dict[str, list[dict[str, float]]] = {k: [] for k in labels}
    try:
        for r in range(args.rounds):
            order = labels if r % 2 == 0 else labels[::-1]
            for label in order:
                results[label].append(_run_worker(trees[label], url, args.reps, args.cases))
                print(f"round {r + 1} {label}: done", file=sys.stderr)
    finally:
        if server is not None:
            server.stop()

    def cell(values: list[float]) -> str:
        f = ",.0f" if max(values) >= 10 else ".3f"
        return f"{statistics.median(values):{f}} [{min(values):{f}}..{max(values):{f}}]"

    head = "| call site | " + " | ".join(f"{k} ns/msg" for k in labels) + (" | after / before |" if args.before else " |")
    print(head)
    print("|" + " --- |" * (len(labels) + 1 + (1 if args.before else 0)))
    for case in CASES:
        cols = [[res[case] for res in results[k] if case in res] for k in labels]
        if not all(cols):
            continue
        row = f"| {case} | " + " | ".join(cell(c) for c in cols)
        if args.before:
            ratios = [a / b for a, b in zip(cols[1], cols[0])]
            row += f" | {statistics.median(cols[1]) / statistics.median(cols[0]):.3f} (per round {statistics.median(ratios):.3f})"
        print(row + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"url": url, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
