#!/usr/bin/env python
"""Where a Spark write's time goes, without Spark: the Arrow sink's task work alone, and what
nats-server spends per message of each kind.

Run on demand (not in CI), from the repository root with the dev virtualenv (pyarrow), against
a running JetStream server::

    .venv/bin/nats-server -js -p 14222 -sd /tmp/store &
    .venv/bin/python bench/bench_spark_write.py --server nats://127.0.0.1:14222
    .venv/bin/python bench/bench_spark_write.py --server nats://127.0.0.1:14222 --server-cost

Default: what one task of ``df.write.format("jetstream")`` does with its partition
(``write_rows(arrow_rows(batches))``: Arrow columns to rows, a frame with a msg id per row,
every PubAck settled), for ``--rows`` rows of 128 B held in Arrow record batches of 10,000 rows,
into a fresh file stream, ``--reps`` times: rows/s, CPU per row of this process (both threads)
and of nats-server (its PID from the URL's port; CPU from /proc, so Linux only).

``--server-cost``: nats-server's CPU per message for 128 B publishes written by a raw socket
(no client library), five kinds: a msg id and a reply subject of its own, a msg id and a reply
subject shared by 64 messages in a row (what the Spark writers send), a reply only, a msg id
only, neither. At most 2,000 acks are outstanding; without a reply the
stream's message count paces the writer.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run from a checkout without installing

import jssync  # noqa: E402


def _server_pid(url: str) -> int:
    port = url.rsplit(":", 1)[1].strip("/")
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(b"nats-server" in c for c in cmd[:1]) and (port.encode() in cmd or b"-p" not in cmd and port == "4222"):
            return int(pid)
    raise SystemExit(f"no nats-server process listening on port {port} found in /proc")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def sink(url: str, rows: int, reps: int) -> None:
    import pyarrow as pa

    from jssync.spark._config import NatsConfig, WriteOptions
    from jssync.spark._writer import make_write_id, write_rows
    from jssync.spark.datasource import arrow_rows

    pid = _server_pid(url)
    table = pa.table({"data": pa.array([str(i).rjust(128, "x").encode() for i in range(rows)], type=pa.binary())})
    batches = table.to_batches(max_chunksize=10_000)
    with jssync.connect(url, name="bench-spark-write") as nc:
        js = nc.jetstream(timeout=60.0)
        for rep in range(reps):
            name, subject = f"BENCHWRITE_{rep}", f"benchwrite.{rep}"
            try:
                js.delete_stream(name)
            except jssync.errors.StreamNotFoundError:
                pass
            js.create_stream(name=name, subjects=[subject], storage="file")
            wopts = WriteOptions(subject=subject, stream=name)
            s0, c0, t0 = _cpu_s(pid), time.process_time(), time.perf_counter()
            n = write_rows(arrow_rows(iter(batches), wopts), NatsConfig(servers=(url,)), wopts, write_id=make_write_id(),
                           partition_id=0)  # fmt: skip
            t, c, s = time.perf_counter() - t0, time.process_time() - c0, _cpu_s(pid) - s0
            if n != rows or js.stream_info(name).state.messages != rows:
                raise RuntimeError(f"wrote {n}, the stream holds {js.stream_info(name).state.messages}, expected {rows}")
            js.delete_stream(name)
            print(f"sink      {rows / t:>9,.0f} rows/s   CPU us/row: task {c / rows * 1e6:5.1f}   server {s / rows * 1e6:5.1f}")


def server_cost(url: str, rows: int, reps: int) -> None:
    pid = _server_pid(url)
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    payload = b"x" * 128
    with jssync.connect(url, name="bench-spark-write") as nc:
        js = nc.jetstream(timeout=60.0)
        for rep in range(reps):
            for kind in ("id+reply", "id+reply/64", "reply", "id", "neither"):
                name, subject = f"BENCHCOST_{rep}", f"benchcost.{rep}".encode()
                try:
                    js.delete_stream(name)
                except jssync.errors.StreamNotFoundError:
                    pass
                js.create_stream(name=name, subjects=[subject.decode()], storage="file")
                frames = []
                for i in range(rows):
                    token = i - i % 64 if kind.endswith("/64") else i  # (/64: a reply token per 64 messages)
                    reply = b" _R.%d" % token if "reply" in kind else b""
                    if kind.startswith("id"):
                        hdr = b"NATS/1.0\r\nNats-Msg-Id: w-0-%d\r\n\r\n" % i
                        frames.append(b"HPUB %s%s %d %d\r\n%s%s\r\n" % (subject, reply, len(hdr), len(hdr) + len(payload), hdr, payload))
                    else:
                        frames.append(b"PUB %s%s %d\r\n%s\r\n" % (subject, reply, len(payload), payload))
                sock = socket.create_connection((host, int(port)))
                sock.recv(4096)
                sock.sendall(b'CONNECT {"verbose":false,"headers":true,"no_responders":true,"protocol":1}\r\nSUB _R.> 1\r\nPING\r\n')
                got = [0]
                seen = b""
                while b"PONG" not in seen:
                    seen += sock.recv(4096)

                def read() -> None:
                    tail = b""  # (a "MSG " split between two reads is counted once)
                    try:
                        while data := sock.recv(1 << 20):
                            data = tail + data
                            got[0] += data.count(b"MSG ")
                            tail = data[-3:]
                    except OSError:
                        pass

                threading.Thread(target=read, daemon=True).start()
                s0, t0 = _cpu_s(pid), time.perf_counter()
                for i in range(0, rows, 500):
                    if "reply" in kind:
                        while i - got[0] > 2000:
                            time.sleep(0.0005)
                    elif i % 20_000 == 0:
                        while js.stream_info(name).state.messages < i - 20_000:
                            time.sleep(0.001)
                    sock.sendall(b"".join(frames[i : i + 500]))
                while js.stream_info(name).state.messages < rows:
                    time.sleep(0.002)
                t, s = time.perf_counter() - t0, _cpu_s(pid) - s0
                sock.close()
                js.delete_stream(name)
                print(f"{kind:<9} {rows / t:>9,.0f} msgs/s   server CPU us/msg: {s / rows * 1e6:5.1f}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server", required=True, help="URL of a running JetStream server (on this machine)")
    p.add_argument("--rows", type=int, default=200_000, help="rows (messages) per write (200,000)")
    p.add_argument("--reps", type=int, default=3, help="writes (3)")
    p.add_argument("--server-cost", action="store_true", help="nats-server's CPU per message kind, raw socket")
    args = p.parse_args(argv)
    (server_cost if args.server_cost else sink)(args.server, args.rows, args.reps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
