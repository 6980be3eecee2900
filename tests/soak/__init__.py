"""The ledger soak: a loaded R3 stream on a 3-node loopback cluster under random (seeded) faults,
checked Jepsen-ledger style. ``python -m tests.soak --minutes 5`` runs it (see docs/reliability.md);
``tests/integration/test_soak.py`` runs 60 s of it in the suite."""

from .run import SoakConfig, memory_kib, run_soak

__all__ = ["SoakConfig", "run_soak", "memory_kib"]
