"""Authentication and TLS against real nats-server processes.

Certificates come from ``tests.support.certs`` (openssl CLI; the tests skip with the reason when
it is missing): a CA and a server certificate for ``localhost`` only (SAN DNS:localhost).
TESTPLAN scenarios 11 (TLS downgrade by a proxy), 12 (first half: IP vs hostname), 13
(handshake_first in both directions) and the user/password and token parts of 15; mutual TLS
(client certificates, ``verify: true`` and ``verify_and_map``), also with ``tls_first``. The
nkey and JWT parts of 15 are in test_nkeys_jwt.py.
"""

from __future__ import annotations

import json
import logging
import pickle
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import jssync
from jscore.errors import (
    AuthorizationError,
    NatsError,
    NoServersError,
    SecureConnectionRequiredError,
)
from jssync import Client
from jssync.events import Connected, Disconnected, Reconnected
from jssync.server import NatsServer
from tests.integration import EventLog, clients, collect, wait_until
from tests.support.certs import Certs, make_certs
from tests.support.proxy import FaultProxy

__all__ = ["clients"]

pytestmark = pytest.mark.timeout(60)

USER = "alice"
PASSWORD = "pw-S3cr3t-9f27"
TOKEN = "tok-S3cr3t-51ab"
CONNECT_TIMEOUT = 1.0


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(str(tmp_path_factory.mktemp("certs")))


def _assert_no_secret(*texts: str) -> None:
    for text in texts:
        assert PASSWORD not in text, text
        assert TOKEN not in text, text


def _connect_error(url: str, **options: Any) -> tuple[BaseException, float]:
    """Connect expecting a failure; return the exception and how long it took."""
    opts: dict[str, Any] = {"connect_timeout": CONNECT_TIMEOUT, "reconnect_wait": 0.1, **options}
    t0 = time.monotonic()
    try:
        nc = jssync.connect(url, **opts)
    except BaseException as exc:  # noqa: BLE001 - returned to the test
        return exc, time.monotonic() - t0
    nc.close()
    pytest.fail(f"connecting to {url} unexpectedly succeeded")


def _causes(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and len(chain) < 10:
        chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    return chain


# --------------------------------------------------------------------------- user/password, token


@pytest.fixture
def userpass_server(nats_server_factory: Callable[..., NatsServer]) -> NatsServer:
    return nats_server_factory(
        jetstream=False, config=f'authorization {{ user: {USER}, password: "{PASSWORD}" }}'
    )


def test_user_password(
    userpass_server: NatsServer, clients: Callable[..., Client], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    events = EventLog()
    nc = clients(userpass_server.url, user=USER, password=PASSWORD, on_event=events)
    sub = nc.subscribe("auth.x")
    nc.publish("auth.x", b"hi")
    assert collect(sub, 1)[0].data == b"hi"
    host_port = userpass_server.url.split("://", 1)[1]
    nc2 = clients(f"nats://{USER}:{PASSWORD}@{host_port}")  # credentials in the URL
    nc2.flush(timeout=2)
    assert nc2.is_connected
    _assert_no_secret(
        repr(nc), repr(nc.options), str(nc.options), repr(nc2), repr(nc2.options), str(nc2.servers),
        repr(events.events), caplog.text,
    )
    assert nc2.connected_url is not None and PASSWORD not in nc2.connected_url
    for opts in (nc.options, nc2.options):  # a pickle carries no secret either
        pickled = pickle.dumps(opts)
        assert PASSWORD.encode() not in pickled
        back = pickle.loads(pickled)
        assert back.password is None and PASSWORD not in str(back.servers) and back.servers[0].endswith(host_port)


@pytest.mark.parametrize(
    "options",
    [
        pytest.param({"user": USER, "password": PASSWORD + "-wrong"}, id="wrong-password"),
        pytest.param({"user": "mallory", "password": PASSWORD}, id="wrong-user"),
        pytest.param({}, id="no-credentials"),
        pytest.param({"token": TOKEN}, id="token-instead"),
        pytest.param({"url_creds": f"{USER}:{PASSWORD}-x"}, id="wrong-url-credentials"),
    ],
)
def test_wrong_credentials_fail_typed_and_fast(
    userpass_server: NatsServer, options: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    events = EventLog()
    options["on_event"] = events
    url = userpass_server.url
    url_creds = options.pop("url_creds", None)
    if url_creds:
        url = url.replace("nats://", f"nats://{url_creds}@")
    exc, took = _connect_error(url, **options)
    assert isinstance(exc, AuthorizationError), repr(exc)
    assert took < CONNECT_TIMEOUT + 0.5
    _assert_no_secret(str(exc), repr(exc), *(str(c) for c in _causes(exc)), repr(events.events), caplog.text)


@pytest.fixture
def token_server(nats_server_factory: Callable[..., NatsServer]) -> NatsServer:
    return nats_server_factory(jetstream=False, config=f'authorization {{ token: "{TOKEN}" }}')


def test_token(token_server: NatsServer, clients: Callable[..., Client], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    events = EventLog()
    nc = clients(token_server.url, token=TOKEN, on_event=events)
    sub = nc.subscribe("tok")
    nc.publish("tok", b"t")
    assert collect(sub, 1)[0].data == b"t"
    _assert_no_secret(repr(nc), repr(nc.options), str(nc.options), repr(events.events), caplog.text)
    assert TOKEN.encode() not in pickle.dumps(nc.options) and pickle.loads(pickle.dumps(nc.options)).token is None
    exc, took = _connect_error(token_server.url, token=TOKEN + "x")
    assert isinstance(exc, AuthorizationError) and took < CONNECT_TIMEOUT + 0.5
    _assert_no_secret(str(exc), repr(exc))
    exc, _ = _connect_error(token_server.url)
    assert isinstance(exc, AuthorizationError)


# --------------------------------------------------------------------------- TLS


@pytest.fixture
def tls_server(nats_server_factory: Callable[..., NatsServer], certs: Certs) -> NatsServer:
    return nats_server_factory(jetstream=False, config=certs.server_tls_block())


def _localhost(server: NatsServer, scheme: str = "tls") -> str:
    return f"{scheme}://localhost:{server.port}"


def test_tls_to_localhost_with_the_test_ca(
    tls_server: NatsServer, certs: Certs, clients: Callable[..., Client]
) -> None:
    assert tls_server.info.get("tls_required") is True
    events = EventLog()
    nc = clients(_localhost(tls_server), tls=certs.client_context(), on_event=events)
    assert nc.connected_url == _localhost(tls_server)
    sub = nc.subscribe("tls.x")
    nc.publish("tls.x", b"secure", headers={"A": ["1", "2"]})
    m = collect(sub, 1)[0]
    assert m.data == b"secure" and m.headers is not None and m.headers.get_all("A") == ["1", "2"]
    assert isinstance(nc._sock, ssl.SSLSocket)
    # nats:// plus a context also upgrades (the server requires TLS)
    nc2 = clients(_localhost(tls_server, "nats"), tls=certs.client_context())
    nc2.flush(timeout=2)
    assert isinstance(nc2._sock, ssl.SSLSocket)
    events.wait_for(Connected)


def test_tls_bulk_traffic_and_reconnect(tls_server: NatsServer, certs: Certs, clients: Callable[..., Client]) -> None:
    """Large TLS writes (partial SSL writes, records split across reads) and a TLS reconnect."""
    events = EventLog()
    a = clients(_localhost(tls_server), tls=certs.client_context(), on_event=events)
    b = clients(_localhost(tls_server), tls=certs.client_context())
    sub = b.subscribe("tls.bulk")
    b.flush(timeout=2)
    payloads = [bytes([i % 251]) * (i * 37 % 40_000) for i in range(600)]
    for p in payloads:
        a.publish("tls.bulk", p)
    a.flush(timeout=10)
    assert [m.data for m in collect(sub, len(payloads), 15)] == payloads
    tls_server.kill()
    events.wait_for(Disconnected, timeout=2)
    tls_server.start()
    events.wait_for(Reconnected, timeout=5)
    assert isinstance(a._sock, ssl.SSLSocket)
    wait_until(lambda: b.is_connected, 5.0, what="the reader to reconnect")
    b.flush(timeout=2)
    a.publish("tls.bulk", b"after")
    assert collect(sub, 1)[0].data == b"after"


def test_tls_to_127_0_0_1_fails_verification(tls_server: NatsServer, certs: Certs) -> None:
    exc, took = _connect_error(f"tls://127.0.0.1:{tls_server.port}", tls=certs.client_context())
    assert isinstance(exc, NatsError), repr(exc)
    assert took < CONNECT_TIMEOUT + 0.5
    assert any(isinstance(c, ssl.SSLCertVerificationError) for c in _causes(exc)), _causes(exc)


def test_tls_without_trusting_the_ca_fails(tls_server: NatsServer) -> None:
    for options in ({"tls": True}, {}):  # explicit TLS; plain client told by INFO to upgrade
        exc, took = _connect_error(_localhost(tls_server, "nats"), **options)
        assert isinstance(exc, NatsError), repr(exc)
        assert took < CONNECT_TIMEOUT + 0.5
        assert any(isinstance(c, ssl.SSLCertVerificationError) for c in _causes(exc)), _causes(exc)


def test_tls_and_user_password(
    nats_server_factory: Callable[..., NatsServer], certs: Certs, clients: Callable[..., Client]
) -> None:
    server = nats_server_factory(
        jetstream=False,
        config=certs.server_tls_block() + f'\nauthorization {{ user: {USER}, password: "{PASSWORD}" }}',
    )
    nc = clients(_localhost(server), tls=certs.client_context(), user=USER, password=PASSWORD)
    nc.flush(timeout=2)
    exc, _ = _connect_error(_localhost(server), tls=certs.client_context(), user=USER, password="nope")
    assert isinstance(exc, AuthorizationError)
    _assert_no_secret(repr(nc), repr(nc.options))


# --------------------------------------------------------------------------- scenario 11


def _strip_tls(frame: bytes) -> bytes | None:
    if not frame.startswith(b"INFO "):
        return None
    info = json.loads(frame[5:])
    if "tls_required" not in info and "tls_available" not in info:
        return None
    info.pop("tls_required", None)
    info.pop("tls_available", None)
    return b"INFO " + json.dumps(info).encode() + b"\r\n"


@pytest.mark.parametrize("server_kind", ["plain", "tls"])
def test_tls_downgrade_by_a_proxy_sends_no_credentials(
    server_kind: str,
    nats_server_factory: Callable[..., NatsServer],
    fault_proxy: Callable[..., FaultProxy],
    certs: Certs,
) -> None:
    config = certs.server_tls_block() if server_kind == "tls" else ""
    server = nats_server_factory(jetstream=False, config=config)
    proxy = fault_proxy(server)
    rule = proxy.rewrite_frames("down", _strip_tls)
    url = f"tls://{USER}:{PASSWORD}@localhost:{proxy.port}"
    exc, took = _connect_error(url, tls=certs.client_context(), token=TOKEN)
    assert isinstance(exc, SecureConnectionRequiredError), repr(exc)
    assert took < CONNECT_TIMEOUT + 0.5
    if server_kind == "tls":
        assert rule.matched == 1  # the downgrade really happened
    assert proxy.connections == 1  # no retry to leak through
    up = proxy.captured("up")
    assert b"CONNECT" not in up
    assert PASSWORD.encode() not in up and TOKEN.encode() not in up and USER.encode() not in up
    _assert_no_secret(str(exc), repr(exc))


# --------------------------------------------------------------------------- scenario 13


class TlsFirstServer(NatsServer):
    """A nats-server with ``handshake_first: true``: its readiness probe must speak TLS first
    (NatsServer's plain probe never sees an INFO from such a server)."""

    probe_context: ssl.SSLContext

    def _probe_info(self, timeout: float) -> dict[str, object] | None:
        with socket.create_connection((self.host, self.port), timeout=timeout) as raw:
            with self.probe_context.wrap_socket(raw, server_hostname="localhost") as s:
                buf = b""
                while b"\n" not in buf and len(buf) < 1 << 20:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    buf += chunk
        line = buf.split(b"\n", 1)[0].rstrip(b"\r")
        if not line.startswith(b"INFO {"):
            return None
        parsed = json.loads(line[5:])
        return dict(parsed) if isinstance(parsed, dict) else None


@pytest.fixture
def tls_first_server(certs: Certs) -> Iterator[NatsServer]:
    server = TlsFirstServer(jetstream=False, config=certs.server_tls_block("handshake_first: true"))
    server.probe_context = certs.client_context()
    try:
        server.start(10)
        yield server
    finally:
        server.cleanup()


def test_tls_first_client_connects_to_a_handshake_first_server(
    tls_first_server: NatsServer, certs: Certs, clients: Callable[..., Client]
) -> None:
    nc = clients(_localhost(tls_first_server), tls=certs.client_context(), tls_first=True)
    sub = nc.subscribe("tf")
    nc.publish("tf", b"first")
    assert collect(sub, 1)[0].data == b"first"
    assert isinstance(nc._sock, ssl.SSLSocket)


@pytest.mark.parametrize(
    "options",
    [
        pytest.param({"tls": "ctx"}, id="tls-upgrade-client"),
        pytest.param({}, id="plain-client"),
    ],
)
def test_non_tls_first_client_vs_handshake_first_server_fails_in_time(
    options: dict[str, Any], tls_first_server: NatsServer, certs: Certs
) -> None:
    if options.get("tls") == "ctx":
        options = {"tls": certs.client_context()}
    exc, took = _connect_error(_localhost(tls_first_server, "nats"), **options)
    assert isinstance(exc, NatsError), repr(exc)
    assert took < CONNECT_TIMEOUT + 0.5, f"took {took:.2f}s"


def test_tls_first_client_vs_plain_tls_server_fails_in_time(tls_server: NatsServer, certs: Certs) -> None:
    exc, took = _connect_error(_localhost(tls_server), tls=certs.client_context(), tls_first=True)
    assert isinstance(exc, NatsError), repr(exc)
    assert isinstance(exc, NoServersError) or any(isinstance(c, ssl.SSLError) for c in _causes(exc))
    assert took < CONNECT_TIMEOUT + 0.5, f"took {took:.2f}s"


# --------------------------------------------------------------------------- mutual TLS (client certificates)


@pytest.fixture
def mtls_server(nats_server_factory: Callable[..., NatsServer], certs: Certs) -> NatsServer:
    """A server that requires a client certificate and verifies it against the test CA."""
    return nats_server_factory(jetstream=False, config=certs.server_tls_block("verify: true"))


def test_mutual_tls_with_a_client_certificate(
    mtls_server: NatsServer, certs: Certs, clients: Callable[..., Client]
) -> None:
    nc = clients(_localhost(mtls_server), tls=certs.client_context(client_cert=True))
    sub = nc.subscribe("mtls.x")
    nc.publish("mtls.x", b"mutual")
    assert collect(sub, 1)[0].data == b"mutual"
    assert isinstance(nc._sock, ssl.SSLSocket)
    assert nc._sock.getpeercert() is not None  # the server's certificate was verified too


@pytest.mark.parametrize("which", ["no-certificate", "untrusted-certificate"])
def test_mutual_tls_refuses_a_client_without_a_trusted_certificate(
    which: str, mtls_server: NatsServer, certs: Certs
) -> None:
    ctx = certs.client_context() if which == "no-certificate" else certs.client_context(rogue=True)
    exc, took = _connect_error(_localhost(mtls_server), tls=ctx)
    _assert_certificate_refused(exc)
    assert took < CONNECT_TIMEOUT + 0.5, f"took {took:.2f}s"


def _assert_certificate_refused(exc: BaseException) -> None:
    """A server refusing the client certificate answers with a TLS alert (AuthorizationError,
    chained from the ssl.SSLError), or, depending on timing, the alert is lost to the closed
    connection (NoServersError chained from the SSL or socket error). Never a hang."""
    causes = _causes(exc)
    if isinstance(exc, AuthorizationError):
        assert isinstance(exc.__cause__, ssl.SSLError), causes
        assert "client certificate" in str(exc)
    else:
        assert isinstance(exc, NoServersError), repr(exc)
        assert any(isinstance(c, (ssl.SSLError, ConnectionError)) for c in causes[1:]), causes


def test_mutual_tls_maps_the_certificate_to_a_user(
    nats_server_factory: Callable[..., NatsServer], certs: Certs, clients: Callable[..., Client]
) -> None:
    """``verify_and_map``: the certificate's subject is the user; no password is sent."""
    server = nats_server_factory(
        jetstream=False,
        config=certs.server_tls_block("verify_and_map: true")
        + '\nauthorization { users: [ { user: "CN=jssync test client" } ] }',
    )
    nc = clients(_localhost(server), tls=certs.client_context(client_cert=True))
    nc.flush(timeout=2)
    assert nc.is_connected
    exc, _ = _connect_error(_localhost(server), tls=certs.client_context(rogue=True))
    _assert_certificate_refused(exc)


@pytest.fixture
def mtls_first_server(certs: Certs) -> Iterator[NatsServer]:
    server = TlsFirstServer(jetstream=False, config=certs.server_tls_block("handshake_first: true\n  verify: true"))
    server.probe_context = certs.client_context(client_cert=True)
    try:
        server.start(10)
        yield server
    finally:
        server.cleanup()


def test_tls_first_with_a_client_certificate(
    mtls_first_server: NatsServer, certs: Certs, clients: Callable[..., Client]
) -> None:
    nc = clients(_localhost(mtls_first_server), tls=certs.client_context(client_cert=True), tls_first=True)
    sub = nc.subscribe("tf.mtls")
    nc.publish("tf.mtls", b"first")
    assert collect(sub, 1)[0].data == b"first"
    exc, took = _connect_error(_localhost(mtls_first_server), tls=certs.client_context(), tls_first=True)
    _assert_certificate_refused(exc)
    assert took < CONNECT_TIMEOUT + 0.5, f"took {took:.2f}s"
