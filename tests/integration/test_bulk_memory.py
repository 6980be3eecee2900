"""The Spark writers' memory bound, measured from /proc in a subprocess against a real
nats-server: a partition of 64 KiB rows (192 MiB in all, made lazily) written with
``maxPendingBytes`` of 8 MiB grows the process by about the bound, not by what the count bound
alone (4,000 frames: 256 MiB) would let it hold. Every row is stored once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import jssync
from tests.integration import PROC_STATUS

ROOT = Path(__file__).resolve().parents[2]
ROWS = 3000
ROW = 64 * 1024
LIMIT = 8 * 1024 * 1024
BATCH = 64  # frames the writer hands over at a time (the bound may be passed by one batch)
# The joined copies of the window on their way to the socket, and the allocator's slack: the
# growth measured here is 31-40 MiB; what the count bound alone would hold is 256 MiB.
SLACK = 40 * 1024 * 1024

pytestmark = pytest.mark.timeout(180)

CHILD = PROC_STATUS + textwrap.dedent(
    """
    import json, sys
    from jssync.spark import NatsConfig, WriteOptions, write_partition

    url, subject, rows, size, limit = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    cfg = NatsConfig(servers=(url,))
    # A small write first: imports, the cached connection and its buffers are the baseline.
    write_partition(iter([b"w" * size] * 10), cfg, WriteOptions(subject=subject), write_id="warm", partition_id=0)
    base = status("VmRSS")
    result = write_partition(
        (b"%08d" % i + b"r" * (size - 8) for i in range(rows)), cfg,
        WriteOptions(subject=subject, max_pending_bytes=limit), write_id="big", partition_id=0,
    )
    print(json.dumps(dict(base=base, hwm=status("VmHWM"), written=result.written)), flush=True)
    """
)


def _write(url: str, subject: str, limit: int) -> dict[str, int]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", CHILD, url, subject, str(ROWS), str(ROW), str(limit)],
        capture_output=True, text=True, env=env, timeout=150,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    result: dict[str, int] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_a_partition_of_large_rows_holds_about_max_pending_bytes(nats_url: str) -> None:
    nc = jssync.connect(nats_url)
    try:
        js = nc.jetstream(timeout=30)
        name = "BMEM" + os.urandom(3).hex().upper()
        subject = name.lower() + ".x"
        js.create_stream(name=name, subjects=[subject], max_msg_size=ROW + 1024)
        r = _write(nats_url, subject, LIMIT)
        assert r["written"] == ROWS
        growth = r["hwm"] - r["base"]
        print(f"growth {growth / 2**20:.1f} MiB")
        assert growth <= LIMIT + BATCH * (ROW + 200) + SLACK, f"grew {growth / 2**20:.1f} MiB"
        assert js.stream_info(name).state.messages == ROWS + 10
        js.delete_stream(name)
    finally:
        nc.close()
