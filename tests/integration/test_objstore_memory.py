"""Memory stays flat for a large put and get (the object is never held whole): measured in a
subprocess from /proc (VmHWM, the peak resident set), against a file-backed bucket."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jssync.server import NatsServer

pytestmark = pytest.mark.timeout(300)

SIZE_MIB = 128


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc")
def test_put_and_get_of_128_mib_stay_flat(nats_server: NatsServer) -> None:
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run(
        [sys.executable, "-m", "tests.integration._objmem", nats_server.url, "mem", str(SIZE_MIB)],
        cwd=root, env=env, capture_output=True, text=True, timeout=240,
    )
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout.strip().splitlines()[-1])
    print(r)
    assert r["ok"] and r["chunks"] == SIZE_MIB * 8
    # A put or get holding the object would grow by 128 MiB; the window is about 4 MiB.
    assert r["control_kib"] >= 15 * 1024, r  # the measurement works here
    assert r["put_kib"] < 32 * 1024, r
    assert r["get_kib"] < 32 * 1024, r
