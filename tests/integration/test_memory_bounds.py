"""Memory under a firehose, measured from /proc in a subprocess: a real nats-server sends 100 KB
messages as fast as it can to a client with one subscription nobody reads and one whose callback
is slower than the stream. The client's peak resident set stays within the two subscriptions'
byte limits (64 MiB each by default) plus slack, the overflow is counted, and requests and
flushes made meanwhile return within their timeouts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

from jssync import Client
from tests.integration import PROC_STATUS, clients  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parents[2]
PAYLOAD = 100_000
SECONDS = 5.0
TIMEOUT = 1.0

CHILD = PROC_STATUS + textwrap.dedent(
    """
    import json, sys, time
    import jssync

    url, seconds, timeout = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    nc = jssync.connect(url)
    unread = nc.subscribe("fire")
    slow = nc.subscribe("fire", callback=lambda m: time.sleep(0.002))
    nc.flush()
    base = status("VmRSS")
    print("ready", flush=True)
    sys.stdin.readline()  # the parent starts the firehose
    worst = 0.0
    calls = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for call in (lambda: nc.request("echo", b"x", timeout=timeout), lambda: nc.flush(timeout=timeout)):
            t0 = time.monotonic()
            try:
                call()
            except TimeoutError:
                pass
            worst = max(worst, time.monotonic() - t0)
            calls += 1
    out = dict(base=base, hwm=status("VmHWM"), worst=worst, calls=calls,
               dropped=unread.dropped + slow.dropped, unread_bytes=unread.pending_bytes)
    nc.close(timeout=2)
    print(json.dumps(out), flush=True)
    """
)


def test_a_firehose_of_100kb_messages_keeps_the_client_bounded(nats_url: str, clients: Callable[..., Client]) -> None:
    responder = clients(nats_url)
    responder.subscribe("echo", callback=lambda m: m.respond(b"ok"))
    responder.flush()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, nats_url, str(SECONDS), str(TIMEOUT)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "ready", child.stderr.read() if child.stderr else ""
        pub = clients(nats_url)
        stop = threading.Event()
        sent = [0]

        def firehose() -> None:
            body = b"f" * PAYLOAD
            while not stop.is_set():
                pub.publish("fire", body)
                sent[0] += 1

        t = threading.Thread(target=firehose, daemon=True)
        t.start()
        child.stdin.write("go\n")
        child.stdin.flush()
        out, err = child.communicate(timeout=SECONDS + 60)
        stop.set()
        t.join(10)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 0, err
    r = json.loads(out.strip().splitlines()[-1])
    grown = r["hwm"] - r["base"]
    print(f"sent {sent[0]} x {PAYLOAD} B; peak growth {grown / 2**20:.1f} MiB; dropped {r['dropped']}; "
          f"worst call {r['worst']:.3f} s over {r['calls']} calls")
    assert sent[0] * PAYLOAD > 300 * 2**20, "the firehose was too weak to test anything"
    assert r["dropped"] > 0, "nothing overflowed: the test did not reach the limits"
    assert r["unread_bytes"] <= 64 * 2**20
    # two subscriptions of 64 MiB each, the read buffers of a turn, and interpreter slack; the
    # client that bounded subscriptions by count only grew by gigabytes here
    assert grown < 2 * 64 * 2**20 + 96 * 2**20, grown / 2**20
    assert r["worst"] < TIMEOUT + 0.5, r["worst"]
