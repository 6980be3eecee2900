#!/usr/bin/env python
"""The I/O thread's work per received message, measured on the core alone (no socket, no
thread): a connected :class:`jscore.session.Session` is fed the bytes nats-server sends for

* ``multi_last``: a batched direct get of 1000 subjects (ADR-31 multi_last), every reply in the
  server's header layout, then its ``204 EOB``, into a :class:`jscore.directget.DirectGetBatch`;
* ``fetch``: 500 JetStream messages of 128 B (``MSG`` with an ack subject) into a
  :class:`jscore.pull.FetchMachine`;
* ``puback``: 1000 PubAcks (``MSG`` on the publish window's reply inbox, one token each) into
  the :class:`jscore.pubmachines.AsyncPublishMachine` of ``publish_async``;

in 64 KiB chunks, as a socket read would hand them over, and the process CPU time of
``receive_data`` is divided by the messages. Prints the minimum and the median over
``--rounds`` rounds, in ns per message. Compare two checkouts by running it with each on
``PYTHONPATH``, alternately:

    PYTHONPATH=. .venv/bin/python bench/bench_receive.py --rounds 60
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable

from jscore import directget as DG
from jscore import pull as P
from jscore.connection import ConnectOptions
from jscore.machine import Stop
from jscore.publish import PendingPublish, PublishWindow
from jscore.pubmachines import AsyncPublishMachine
from jscore.session import Session

_CHUNK = 64 * 1024


def connected_session() -> Session:
    s = Session(ConnectOptions(servers=("nats://127.0.0.1:4222",), ping_interval=1000.0), rng=random.Random(1))
    s.start(0.0)
    while s.next_event() is not None:
        pass
    s.connection_made(0.0)
    s.receive_data(b"INFO " + json.dumps({"max_payload": 1 << 20, "headers": True}).encode() + b"\r\n", 0.0)
    s.data_to_send()
    s.receive_data(b"PONG\r\n", 0.0)
    while s.next_event() is not None:
        pass
    return s


def chunks(data: bytes) -> list[bytes]:
    return [data[i : i + _CHUNK] for i in range(0, len(data), _CHUNK)]


def multi_last_bytes(inbox: str, sid: int, n: int = 1000) -> list[bytes]:
    out = []
    for i in range(n):
        hdr = (
            f"NATS/1.0\r\nNats-Stream: DG\r\nNats-Subject: dg.{i}\r\nNats-Sequence: {i + 1}\r\n"
            f"Nats-Time-Stamp: 2026-11-25T03:08:22.{424187740 + i * 1000:09d}Z\r\n"
            f"Nats-Num-Pending: {n - 1 - i}\r\nNats-Last-Sequence: {i}\r\n\r\n"
        ).encode()
        payload = f"dg.{i}|".encode().ljust(128, b"x")
        out.append(b"HMSG %s %d %d %d\r\n%s%s\r\n" % (inbox.encode(), sid, len(hdr), len(hdr) + len(payload), hdr, payload))
    eob = f"NATS/1.0 204 EOB\r\nNats-Num-Pending: 0\r\nNats-Last-Sequence: {n}\r\nNats-UpTo-Sequence: {n}\r\n\r\n".encode()
    out.append(b"HMSG %s %d %d %d\r\n%s\r\n" % (inbox.encode(), sid, len(eob), len(eob), eob))
    return chunks(b"".join(out))


def fetch_bytes(inbox: str, sid: int, start: int, n: int = 500) -> list[bytes]:
    out = []
    for i in range(start, start + n):
        reply = f"$JS.ACK.B.c.1.{i}.{i}.1764040102424187740.{10**6 - i}"
        out.append(b"MSG %s %d %s 128\r\n%s\r\n" % (inbox.encode(), sid, reply.encode(), b"x" * 128))
    return chunks(b"".join(out))


def one_multi_last(s: Session) -> float:
    got: list[object] = []
    m = DG.DirectGetBatch("$JS.API.DIRECT.GET.DG", DG.resolve_last_for(["dg.*"]), timeout=5.0, now=0.0)
    slot = s.attach(m, got.append, 0.0)
    s.data_to_send()
    data = multi_last_bytes(s.inbox_of(slot), s._slots[slot].sid)
    t0 = time.process_time_ns()
    for c in data:
        s.receive_data(c, 0.0)
    elapsed = time.process_time_ns() - t0
    n = sum(len(getattr(e, "msgs", (e,))) for e in got)  # (a run of messages is one event)
    assert m.done and m.error is None and n == 1001, (m.reason, m.error, n)
    s.data_to_send()
    return elapsed / 1000


def make_fetch() -> Callable[[Session], float]:
    start = [1]

    def one_fetch(s: Session) -> float:
        got: list[object] = []
        m = P.FetchMachine(P.resolve_fetch_options(max_messages=500, expires=5.0), 0.0)
        slot = s.attach(m, got.append, 0.0, target="$JS.API.CONSUMER.MSG.NEXT.B.c")
        s.data_to_send()
        data = fetch_bytes(s.inbox_of(slot), s._slots[slot].sid, start[0])
        start[0] += 500
        t0 = time.process_time_ns()
        for c in data:
            s.receive_data(c, 0.0)
        elapsed = time.process_time_ns() - t0
        assert m.finished and len(got) >= 500, (m, len(got))
        s.data_to_send()
        return elapsed / 500

    return one_fetch


def one_puback(s: Session) -> float:
    window: PublishWindow[PendingPublish] = PublishWindow(max_pending=2000)
    m = AsyncPublishMachine(window, PublishWindow(max_pending=10), gen=0, connected=True)
    slot = s.attach(m, lambda e: None, 0.0, wildcard=True)
    prefix = s.inbox_of(slot)
    m.set_prefix(prefix)
    sid = s._slots[slot].sid
    out = []
    for i in range(1000):
        token = window.next_token()
        window.add(PendingPublish("bench.js", b"x", None, None), 0.0, 0, token)
        body = b'{"stream":"BENCH","seq":%d}' % (i + 1)
        out.append(b"MSG %s%s %d %d\r\n%s\r\n" % (prefix.encode(), token.encode(), sid, len(body), body))
    data = chunks(b"".join(out))
    t0 = time.process_time_ns()
    for c in data:
        s.receive_data(c, 0.0)
    elapsed = time.process_time_ns() - t0
    assert not window.pending, len(window.pending)
    s.command(slot, Stop(), 0.0)
    return elapsed / 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=40)
    args = ap.parse_args()
    s = connected_session()
    for name, one in (("multi_last 1000", one_multi_last), ("fetch 500", make_fetch()), ("puback 1000", one_puback)):
        for _ in range(3):
            one(s)  # warm-up
        res = [one(s) for _ in range(args.rounds)]
        print(f"{name}: {min(res):,.0f} ns/msg min, {statistics.median(res):,.0f} median ({args.rounds} rounds)")


if __name__ == "__main__":
    main()
