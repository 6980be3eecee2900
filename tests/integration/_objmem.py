"""Run in a subprocess by test_objstore_memory: put then get an object of SIZE MiB streamed
from a generating file object, and print the peak resident set (VmHWM) growth of each step."""

from __future__ import annotations

import hashlib
import json
import sys

import jssync


class Source:
    """A binary file object that generates ``size`` bytes without ever holding them."""

    def __init__(self, size: int) -> None:
        self.left = size
        self.sha = hashlib.sha256()
        self.block = bytes(range(256)) * 4096  # 1 MiB pattern

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        out = (self.block * (n // len(self.block) + 1))[:n] if n > len(self.block) else self.block[:n]
        # vary the bytes so a wrong chunk order changes the digest
        if out:
            out = (self.left % 251).to_bytes(1, "big") + out[1:]
        self.left -= len(out)
        self.sha.update(out)
        return out


def hwm_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("no VmHWM")


def reset_hwm() -> None:
    with open("/proc/self/clear_refs", "w") as f:  # resets VmHWM to the current RSS
        f.write("5")


def main() -> None:
    url, bucket, size_mib = sys.argv[1], sys.argv[2], int(sys.argv[3])
    size = size_mib << 20
    with jssync.connect(url) as nc:
        js = nc.jetstream(timeout=10.0)
        obs = js.create_object_store(bucket)
        obs.put("warmup", b"x" * 300_000)
        obs.get_bytes("warmup")
        reset_hwm()
        base = hwm_kib()
        src = Source(size)
        info = obs.put("big", src, timeout=30.0)
        put_peak = hwm_kib() - base
        reset_hwm()
        base = hwm_kib()
        sha = hashlib.sha256()
        n = 0
        with obs.get("big", timeout=30.0) as r:
            for chunk in r:
                sha.update(chunk)
                n += len(chunk)
        get_peak = hwm_kib() - base
        # control: the measurement sees 16 MiB held at once (so the checks above can fail)
        reset_hwm()
        base = hwm_kib()
        held = b"c" * (16 << 20)
        control = hwm_kib() - base
        del held
        ok = n == size and sha.digest() == src.sha.digest() and info.size == size
        print(json.dumps({"put_kib": put_peak, "get_kib": get_peak, "ok": ok, "chunks": info.chunks,
                          "control_kib": control}))


if __name__ == "__main__":
    main()
