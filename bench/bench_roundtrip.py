#!/usr/bin/env python
"""Round trips one after the other: what a sleeping waiter costs, and jssync's synchronous
publish and direct get, against a running server.

Run on demand (not in CI), from the repository root with the dev virtualenv::

    .venv/bin/nats-server -js -p 14222 -sd /tmp/store &
    .venv/bin/python bench/bench_roundtrip.py --server nats://127.0.0.1:14222
    .venv/bin/python bench/bench_roundtrip.py --server URL --trees <old checkout> . --rounds 3

Two parts, each in its own subprocess per measurement:

* ``raw``: a plain socket publishing to a stream and reading each PubAck, with four ways of
  waiting for it: a blocking ``recv`` (``sleep``), ``poll`` then ``recv`` (``poll``), a loop of
  non-blocking ``recv`` calls (``spin``), and ``sleep`` after a busy loop of ``--busy``
  iterations before each send (``busy``: a client slow to send its next request). It prints
  the time from the end of the send to the answer (median) and the round trips per second.
* ``trees``: jssync's ``js.publish``, ``stream.direct_get(last_by_subject=...)`` and
  ``consumer.fetch(1)`` with an ack of each message (``fetch_one``), each in a loop, with the
  CPU of the calling thread per call, for each tree given (a checkout's root), the trees
  interleaved in ``--rounds`` rounds; ``--natsio PYTHON`` adds natsio's ``fetch(1)`` loop.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent

_RAW = textwrap.dedent(
    """
    import select, socket, sys, time
    from urllib.parse import urlparse
    url, mode, n, busy = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    u = urlparse(url)
    s = socket.create_connection((u.hostname, u.port or 4222))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.recv(65536)
    s.sendall(b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true}'
              b'\\r\\nSUB _INBOX.rt 1\\r\\nPING\\r\\n')
    got = b""
    while b"PONG" not in got:
        got += s.recv(65536)
    frame = b"PUB rtb.a _INBOX.rt 128\\r\\n" + b"x" * 128 + b"\\r\\n"
    if mode in ("poll", "spin"):
        s.setblocking(False)
    p = select.poll()
    p.register(s, select.POLLIN)
    waits = []

    def one():
        if mode == "busy":
            for _ in range(busy):
                pass
        s.send(frame)
        t = time.perf_counter_ns()
        if mode == "spin":
            while True:
                try:
                    b = s.recv(65536)
                    break
                except BlockingIOError:
                    pass
        else:
            if mode == "poll":
                p.poll(1000)
            b = s.recv(65536)
        waits.append(time.perf_counter_ns() - t)
        while not b.endswith(b"}\\r\\n"):
            try:
                b += s.recv(65536)
            except BlockingIOError:
                pass

    for _ in range(500):
        one()
    waits.clear()
    t0 = time.perf_counter()
    for _ in range(n):
        one()
    dt = time.perf_counter() - t0
    waits.sort()
    print(f'{{"rate": {n / dt:.1f}, "answer_us": {waits[n // 2] / 1000:.2f}}}')
    """
)

_TREE = textwrap.dedent(
    """
    import sys, time
    import jssync
    url, n = sys.argv[1], int(sys.argv[2])
    nc = jssync.connect(url, reconnect=False)
    js = nc.jetstream()
    data = b"x" * 128
    for _ in range(500):
        js.publish("rtb.a", data)
    out = {}
    t0, c0 = time.perf_counter(), time.thread_time()
    for _ in range(n):
        js.publish("rtb.a", data)
    t1, c1 = time.perf_counter(), time.thread_time()
    out["publish"] = [n / (t1 - t0), (c1 - c0) / n * 1e6]
    s = js.stream("RTB")
    t0, c0 = time.perf_counter(), time.thread_time()
    for _ in range(n):
        s.direct_get(last_by_subject="rtb.a")
    t1, c1 = time.perf_counter(), time.thread_time()
    out["direct_get"] = [n / (t1 - t0), (c1 - c0) / n * 1e6]
    name = "rt" + str(time.time_ns())
    js.create_consumer("RTB", durable_name=name, ack_policy="explicit")
    c = js.consumer("RTB", name)
    k = min(n, 2000)
    got = 0
    t0, c0 = time.perf_counter(), time.thread_time()
    while got < k:
        for m in c.fetch(1, expires=2):
            m.ack()
            got += 1
    t1, c1 = time.perf_counter(), time.thread_time()
    out["fetch_one"] = [k / (t1 - t0), (c1 - c0) / k * 1e6]
    js.delete_consumer("RTB", name)
    nc.close()
    import json
    print(json.dumps(out))
    """
)


_NATSIO = textwrap.dedent(
    """
    import asyncio, json, sys, time
    import natsio

    async def main():
        url, k = sys.argv[1], int(sys.argv[2])
        nc = await natsio.connect(url, allow_reconnect=False)
        js = nc.jetstream()
        stream = await js.stream("RTB")
        from natsio.jetstream import ConsumerConfig
        config = ConsumerConfig(durable_name="natsio" + str(time.time_ns()), ack_policy="explicit")
        consumer = await stream.create_consumer(config)
        got = 0
        t0 = time.perf_counter()
        while got < k:
            for m in await consumer.fetch(1, timeout=2):
                await m.ack()
                got += 1
        dt = time.perf_counter() - t0
        await nc.close()
        print(json.dumps({"fetch_one": [k / dt]}))

    asyncio.run(main())
    """
)


def _stream(url: str) -> None:
    sys.path.insert(0, str(HERE.parent))
    import jssync

    nc = jssync.connect(url, reconnect=False)
    js = nc.jetstream()
    try:
        js.delete_stream("RTB")
    except Exception:  # noqa: BLE001 - not there yet
        pass
    js.create_stream(name="RTB", subjects=["rtb.>"], allow_direct=True, max_msgs=100_000)
    nc.close()


def _run(code: str, args: list[str], path: str | None = None, python: str | None = None) -> dict[str, object]:
    env = dict(os.environ)
    if path is not None:
        env["PYTHONPATH"] = path
    # (from the tree's own directory: ``-c`` puts the working directory first on sys.path)
    out = subprocess.run(
        [python or sys.executable, "-c", code, *args], env=env, cwd=path, check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", default="nats://127.0.0.1:14222")
    ap.add_argument("--n", type=int, default=5000, help="round trips per measurement")
    ap.add_argument("--busy", type=int, default=2000, help="busy-loop iterations before each send (raw, busy)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--trees", nargs="*", default=[], help="checkouts to measure jssync from")
    ap.add_argument("--no-raw", action="store_true")
    ap.add_argument("--natsio", help="a Python >= 3.13 with natsio: its fetch(1) + ack loop, for comparison")
    ap.add_argument("--json", help="write every measurement here")
    a = ap.parse_args()
    _stream(a.server)
    results: dict[str, list[object]] = {}
    for r in range(a.rounds):
        if not a.no_raw:
            for mode in ("sleep", "poll", "spin", "busy"):
                got = _run(_RAW, [a.server, mode, str(a.n), str(a.busy)])
                results.setdefault(f"raw-{mode}", []).append(got)
                print(f"round {r + 1} raw {mode:5}: {got['rate']:8.0f}/s  answer {got['answer_us']:6.1f} us", flush=True)
        for tree in a.trees:
            got = _run(_TREE, [a.server, str(a.n)], str(Path(tree).resolve()))
            results.setdefault(f"tree-{tree}", []).append(got)
            parts = [f"{what} {got[what][0]:7.0f}/s ({got[what][1]:5.1f} us CPU)" for what in got]  # type: ignore[index]
            print(f"round {r + 1} {tree}: " + "  ".join(parts), flush=True)
        if a.natsio:
            got = _run(_NATSIO, [a.server, str(min(a.n, 2000))], python=a.natsio)
            results.setdefault("natsio", []).append(got)
            print(f"round {r + 1} natsio: fetch_one {got['fetch_one'][0]:7.0f}/s", flush=True)  # type: ignore[index]
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
