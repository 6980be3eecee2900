#!/usr/bin/env python
"""The parser alone on JetStream deliveries: microseconds of CPU per frame to read a buffer of
1,000 of them into one run (with its cursors, on an ordered consumer's or a watcher's inbox: the
delivery lane), for one or more source trees, interleaved, no server and no socket.

    .venv/bin/python bench/bench_parse.py /path/to/before . --rounds 5

Cases (128-byte payloads, v1 ack subjects as nats-server writes them):

* ``one_subject_hmsg``: every frame to one subject with a ``Nats-Msg-Id`` header (a Spark read
  of a stream the Spark writers wrote);
* ``many_subjects_msg``: every frame to its own subject, no headers (a KV listing's deliveries);
* ``many_subjects_hmsg``: the same with a ``KV-Operation`` header;
* ``consume_msg``: a fetch's or a consume's inbox (runs without cursors, the general way's parse):
  every frame to one subject, no headers.

Each tree runs in its own process (it imports the ``jscore`` of its own directory); the table
shows the median and [min..max] over the rounds of each process's best of 7 timings.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CASES = ("one_subject_hmsg", "many_subjects_msg", "many_subjects_hmsg", "consume_msg")

CHILD = r"""
import json, sys, timeit
sys.path.insert(0, sys.argv[1])
from jscore.protocol import AckLane, MsgsReceived, Parser

def frames(case):
    out = []
    for i in range(1000):
        reply = b"$JS.ACK.S.OC_abcdEFGH_1.1.%d.%d.1764690000123456789.%d" % (i + 1, i + 1, 200000 - i - 1)
        subject = b"read.s" if case in ("one_subject_hmsg", "consume_msg") else b"$KV.B.k.%05d" % i
        payload = b"x" * 128
        if case in ("many_subjects_msg", "consume_msg"):
            out.append(b"MSG %s 17 %s %d\r\n%s\r\n" % (subject, reply, len(payload), payload))
            continue
        hdr = (b"NATS/1.0\r\nNats-Msg-Id: w-abcdef0123456789:0:%d\r\n\r\n" % i if case == "one_subject_hmsg"
               else b"NATS/1.0\r\nKV-Operation: PUT\r\n\r\n")
        out.append(b"HMSG %s 17 %s %d %d\r\n%s%s\r\n" % (subject, reply, len(hdr), len(hdr) + len(payload), hdr, payload))
    return b"".join(out)

result = {}
for case in sys.argv[2].split(","):
    buf = frames(case)
    lane = AckLane("_INBOX.x")
    lane.arm_runs(17, cursors=case != "consume_msg")
    parser = Parser(max_payload=1 << 20, lane=lane)
    def feed():
        events = parser.feed(buf)
        assert len(events) == 1 and isinstance(events[0], MsgsReceived) and len(events[0].msgs) == 1000
    result[case] = min(timeit.repeat(feed, number=20, repeat=7)) / 20 / 1000 * 1e6
print(json.dumps(result))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trees", nargs="+", help="source trees (each with jscore/)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    got: dict[str, list[dict[str, float]]] = {t: [] for t in args.trees}
    for r in range(args.rounds):
        for tree in args.trees if r % 2 == 0 else list(reversed(args.trees)):
            path = os.path.abspath(tree)
            out = subprocess.run(
                [sys.executable, "-c", CHILD, path, args.cases], cwd=path, capture_output=True, text=True, check=True
            )
            got[tree].append(json.loads(out.stdout))
    for case in args.cases.split(","):
        print(case)
        for tree in args.trees:
            v = sorted(x[case] for x in got[tree])
            print(f"  {tree:40s} {statistics.median(v):6.3f} us/frame [{v[0]:.3f}..{v[-1]:.3f}]")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rounds": args.rounds, "results": got}, f, indent=1)


if __name__ == "__main__":
    main()
