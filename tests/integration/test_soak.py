"""60 s of the ledger soak (``python -m tests.soak``, docs/reliability.md) in the suite: a 3-node
cluster, an R3 stream, sync / async / bulk publishers and three kinds of consumers, with a fixed
seed of faults (node kills and restarts, SIGSTOP, connection cuts, stream and consumer leader
step-downs). Every check of the ledger must hold: nothing acked lost or stored twice, nothing
unexpected, nothing refused stored anyway, every consumer saw everything (the ordered one exactly
once, in order), and no blocking call outlived its timeout."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from jssync.server import NatsCluster
from tests.soak import SoakConfig, run_soak

SEED = 14  # two kills, two pauses, two cuts, three stream and two consumer step-downs in 60 s


@pytest.mark.soak
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_soak_60s(nats_cluster_factory: Callable[..., NatsCluster]) -> None:
    cluster = nats_cluster_factory(3)
    report = run_soak(cluster, SoakConfig(seconds=60.0, seed=SEED, drain_timeout=45.0))
    faults = report["faults"]
    summary = json.dumps(
        {k: report[k] for k in ("faults", "publishers", "stream", "consumers", "recovery", "calls")}, default=str
    )[:4000]
    assert sum(f["injected"] for f in faults.values()) >= 5, f"too few faults were injected: {faults}"
    assert report["violations"] == {}, (
        f"soak violations (seed {SEED}): {json.dumps(report['violations'], default=str)[:6000]}\n{summary}"
    )
    for name, pub in report["publishers"].items():
        assert pub["acked"] > 0, f"{name} never got an ack: {summary}"
    assert report["stream"]["read_back"] == report["stream"]["messages"] > 0
