"""An R3 object store on the 3-node loopback cluster: put and get, and a read after the node the
client was connected to is killed."""

from __future__ import annotations

import secrets
from collections.abc import Callable

import pytest

from jssync import Client
from jssync.server import NatsCluster
from tests.integration import clients  # noqa: F401 - fixture

pytestmark = pytest.mark.timeout(120)


def test_r3_bucket_survives_a_node(nats_cluster: NatsCluster, clients: Callable[..., Client]) -> None:  # noqa: F811
    nc = clients(nats_cluster.urls, reconnect_wait=0.1)
    js = nc.jetstream(timeout=10.0)
    obs = js.create_object_store("r3", replicas=3)
    assert obs.status().replicas == 3
    data = secrets.token_bytes(2_000_000)
    obs.put("o", data)
    assert obs.get_bytes("o") == data
    connected = nc.connected_url
    idx = next(i for i, s in enumerate(nats_cluster.servers) if s.url == connected or str(s.port) in str(connected))
    nats_cluster.stop(idx)
    got = None
    for _ in range(20):  # the stream may be electing a new leader
        try:
            got = js.object_store("r3").get_bytes("o", timeout=5.0)
            break
        except Exception:
            continue
    assert got == data
