"""The client against a 3-node cluster on loopback: discovery and failover."""

from __future__ import annotations

import ssl
from collections.abc import Callable
from pathlib import Path

import pytest

from jscore.errors import AuthorizationError, TimeoutError
from jssync import Client
from jssync.events import (
    Closed,
    ConnectAttemptFailed,
    Disconnected,
    Reconnected,
    ServerError,
    ServersDiscovered,
)
from jssync.server import NatsCluster
from tests.integration import EventLog, await_interest, clients, collect, wait_until

__all__ = ["clients"]

pytestmark = pytest.mark.timeout(90)


def test_discovery_and_failover_to_another_node(
    nats_cluster_factory: Callable[..., NatsCluster], clients: Callable[..., Client]
) -> None:
    cluster = nats_cluster_factory(3)
    urls = cluster.urls
    events = EventLog()
    nc = clients(urls[0], on_event=events, max_reconnect_attempts=-1)
    assert nc.connected_url == urls[0]
    # the other nodes are learned from INFO connect_urls (first or async INFO)
    wait_until(lambda: set(urls) <= set(nc.servers), 5.0, what=f"{urls} in {nc.servers}")
    assert nc.servers[0] == urls[0]
    if len(nc.servers) > 1 and not events.of(ServersDiscovered):
        events.wait_for(ServersDiscovered, timeout=2)

    sub = nc.subscribe("cl.data")
    qsub = nc.subscribe("cl.work", queue="w")
    remote = clients(urls[2], ignore_discovered_servers=True)
    await_interest(nc, (remote,))
    for i in range(20):
        remote.publish("cl.data", b"%d" % i)
        remote.publish("cl.work", b"%d" % i)
    assert [m.data for m in collect(sub, 20)] == [b"%d" % i for i in range(20)]
    assert len(collect(qsub, 20)) == 20

    # kill the node the client is connected to
    cluster.kill(0)
    (disc,) = events.wait_for(Disconnected, timeout=3)
    (rec,) = events.wait_for(Reconnected, timeout=5)
    assert rec.url in urls[1:], rec.url
    assert nc.connected_url == rec.url
    assert events.time_of(rec) - events.time_of(disc) < 2.0

    # subscriptions work on the new node, published from a client connected to another one
    other = urls[2] if rec.url == urls[1] else urls[1]
    publisher = clients(other, ignore_discovered_servers=True)
    await_interest(nc, (publisher,))
    for i in range(50):
        publisher.publish("cl.data", b"after-%d" % i)
        publisher.publish("cl.work", b"after-%d" % i)
    publisher.flush(timeout=2)
    assert [m.data for m in collect(sub, 50)] == [b"after-%d" % i for i in range(50)]
    assert [m.data for m in collect(qsub, 50)] == [b"after-%d" % i for i in range(50)]
    # request/reply across the cluster after the failover
    publisher.subscribe("cl.svc", callback=lambda m: m.respond(b"node:" + m.data))
    publisher.flush(timeout=2)
    await_interest(publisher, (nc,))
    assert nc.request("cl.svc", b"x", timeout=2).data == b"node:x"
    assert nc.stats["reconnects"] == 1


def test_tls_cluster_gossiped_ip_urls_are_verified_against_the_configured_hostname(
    nats_cluster_factory: Callable[..., NatsCluster],
    clients: Callable[..., Client],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """TESTPLAN 12, second half: the cluster gossips ``127.0.0.1:port`` URLs; the certificate only
    names ``localhost``. Failover to a gossiped URL must verify against ``localhost`` (the host
    the user configured) and must not skip verification."""
    from tests.support.certs import make_certs

    certs = make_certs(str(tmp_path_factory.mktemp("cluster-certs")))
    cluster = nats_cluster_factory(3, jetstream=False, config=certs.server_tls_block())
    ports = [s.port for s in cluster.servers]
    events = EventLog()
    ctx = certs.client_context()
    nc = clients(f"tls://localhost:{ports[0]}", tls=ctx, on_event=events)
    gossiped = {f"tls://127.0.0.1:{p}" for p in ports[1:]}
    wait_until(lambda: gossiped <= set(nc.servers), 5.0, what=f"{gossiped} in {nc.servers}")
    sub = nc.subscribe("tlscl")
    cluster.kill(0)
    (rec,) = events.wait_for(Reconnected, timeout=5)
    assert rec.url in gossiped, rec.url
    sock = nc._sock
    assert isinstance(sock, ssl.SSLSocket)
    assert sock.server_hostname == "localhost"
    assert sock.context.check_hostname and sock.context.verify_mode == ssl.CERT_REQUIRED
    other = ports[2] if rec.url.endswith(f":{ports[1]}") else ports[1]
    publisher = clients(f"tls://localhost:{other}", tls=certs.client_context(), ignore_discovered_servers=True)
    await_interest(nc, (publisher,))
    publisher.publish("tlscl", b"over-tls")
    assert collect(sub, 1)[0].data == b"over-tls"


AUTH = 'authorization { user: alice, password: "pw-cluster-1" }'


def test_url_credentials_are_used_for_gossiped_servers(
    nats_cluster_factory: Callable[..., NatsCluster], clients: Callable[..., Client]
) -> None:
    """Credentials given only in the URL must also be sent to the servers learned from INFO
    (they used to be sent nowhere else: failover ended in Authorization Violation)."""
    cluster = nats_cluster_factory(3, jetstream=False, config=AUTH)
    ports = [s.port for s in cluster.servers]
    events = EventLog()
    nc = clients(f"nats://alice:pw-cluster-1@127.0.0.1:{ports[0]}", on_event=events)
    wait_until(lambda: len(nc.servers) == 3, 5.0, what="the gossiped servers")
    sub = nc.subscribe("auth.cl")
    cluster.kill(0)
    (rec,) = events.wait_for(Reconnected, timeout=5)
    assert rec.url != f"nats://127.0.0.1:{ports[0]}"
    assert not events.of(ServerError), [e.error for e in events.of(ServerError)]
    other = [p for p in ports[1:] if not rec.url.endswith(f":{p}")][0]
    publisher = clients(f"nats://127.0.0.1:{other}", user="alice", password="pw-cluster-1")
    await_interest(nc, (publisher,))
    publisher.publish("auth.cl", b"ok")
    assert collect(sub, 1)[0].data == b"ok"
    assert "pw-cluster-1" not in repr(nc.options) + repr(nc)


def test_revoked_credentials_close_the_client_instead_of_looping(
    nats_cluster_factory: Callable[..., NatsCluster], clients: Callable[..., Client]
) -> None:
    """Every node refuses the credentials after a config reload. Each INFO gossips the whole
    cluster again; servers given up on must stay given up on, so the client closes with
    AuthorizationError after two refusals per server instead of retrying for ever."""
    cluster = nats_cluster_factory(3, jetstream=False, config=AUTH)
    events = EventLog()
    nc = clients(cluster.urls[0], user="alice", password="pw-cluster-1", on_event=events)
    wait_until(lambda: len(nc.servers) == 3, 5.0, what="the gossiped servers")
    for server in cluster.servers:
        cfg = Path(server.config_file)
        cfg.write_text(cfg.read_text().replace("pw-cluster-1", "pw-cluster-2"))
        server.reload()
    wait_until(lambda: nc.is_closed, 5.0, what="the client to give up")
    assert isinstance(nc.last_error, AuthorizationError)
    (closed,) = events.wait_for(Closed)
    assert isinstance(closed.error, AuthorizationError)
    failed = events.of(ConnectAttemptFailed)
    assert 3 <= len(failed) <= 6, len(failed)  # at most two refusals per server
