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


def test_update_object_store_to_three_replicas(nats_cluster: NatsCluster, clients: Callable[..., Client]) -> None:  # noqa: F811
    """On a cluster the server allows R1 -> R3 (a single server refuses it); the objects stay."""
    js = clients(nats_cluster.urls).jetstream(timeout=10.0)
    js.create_object_store("grow", description="r1")
    data = secrets.token_bytes(300_000)
    js.object_store("grow").put("o", data)
    obs = js.update_object_store("grow", replicas=3, description="r3")
    st = obs.status()
    assert (st.replicas, st.description) == (3, "r3")
    assert obs.get_bytes("o") == data
    from jscore.errors import JetStreamAPIError

    with pytest.raises(JetStreamAPIError, match="no suitable peers") as refused:
        js.update_object_store("grow", replicas=5)  # more than the cluster has: the server's error
    assert refused.value.err_code == 10005
