"""nkey and JWT authentication against real nats-server processes (TESTPLAN 15 and 16, the
nkey / creds parts).

- nkey users in the server's config: the right seed (a file or the seed itself) is accepted, a
  wrong one refused with ``AuthorizationError``;
- operator mode with ``resolver: MEMORY`` and ``resolver_preload``, the operator, account and
  user JWTs made here with the nkeys package (tests/support/jwts.py): a valid user is accepted
  (creds file with LF or CRLF, or the ``user_jwt_cb`` / ``signature_cb`` pair); an expired, a
  wrongly signed, a revoked user, or one of an unknown account is refused with
  ``AuthorizationError``;
- rotation: the creds file is read again at every reconnect, so after ``User Authentication
  Expired`` or, once the server revokes the old user, ``Authorization Violation``, the client
  comes back with the new file; without a new file it stops, typed, without a tight loop;
- secrets (seeds, JWTs) appear in no repr, error, event or pickle;
- the testcontainers provider passes creds through (skips without a Docker engine).
"""

from __future__ import annotations

import logging
import os
import pickle
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import jssync
from jscore.errors import (
    AuthorizationError,
    AuthorizationExpiredError,
    CredentialsError,
    NatsError,
    SecureConnectionRequiredError,
)
from jssync import Client
from jssync.events import Closed, ConnectAttemptFailed, Disconnected, Reconnected, ServerError
from jssync.server import NatsServer
from tests.integration import EventLog, clients, collect
from tests.support.jwts import Account, Key, Operator, User, new_key
from tests.support.proxy import FaultProxy

__all__ = ["clients"]

nkeys = pytest.importorskip("nkeys")
pytestmark = pytest.mark.timeout(60)

CONNECT_TIMEOUT = 1.0


def _write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def _connect_error(url: str, **options: Any) -> tuple[BaseException, float]:
    opts: dict[str, Any] = {"connect_timeout": CONNECT_TIMEOUT, "reconnect_wait": 0.1, **options}
    t0 = time.monotonic()
    try:
        nc = jssync.connect(url, **opts)
    except BaseException as exc:  # noqa: BLE001 - returned to the test
        return exc, time.monotonic() - t0
    nc.close()
    pytest.fail(f"connecting to {url} with {sorted(options)} unexpectedly succeeded")


def _texts(exc: BaseException) -> list[str]:
    chain: list[str] = []
    cur: BaseException | None = exc
    while cur is not None and len(chain) < 10:
        chain += [str(cur), repr(cur)]
        cur = cur.__cause__ or cur.__context__
    return chain


def _assert_no_secret(secrets: list[str], *texts: str) -> None:
    for text in texts:
        for secret in secrets:
            assert secret not in text, f"a secret leaked into: {text[:200]}"
            assert secret[:20] not in text, f"part of a secret leaked into: {text[:200]}"


def _roundtrip(nc: Client) -> None:
    sub = nc.subscribe("auth.check")
    nc.publish("auth.check", b"ok")
    assert collect(sub, 1)[0].data == b"ok"
    sub.unsubscribe()


# --------------------------------------------------------------------------- nkey users


@pytest.fixture
def nkey_user() -> Key:
    return new_key("user")


@pytest.fixture
def nkey_server(nats_server_factory: Callable[..., NatsServer], nkey_user: Key) -> NatsServer:
    return nats_server_factory(
        jetstream=False, config=f'authorization {{ users: [ {{ nkey: "{nkey_user.public}" }} ] }}'
    )


@pytest.mark.parametrize("form", ["file", "file-crlf-decorated", "string", "pathlib"])
def test_nkey_user_accepted(
    form: str, nkey_server: NatsServer, nkey_user: Key, clients: Callable[..., Client], tmp_path: Path
) -> None:
    seed: Any
    if form == "string":
        seed = nkey_user.seed
    elif form == "file-crlf-decorated":
        seed = _write(tmp_path / "u.nk", f"-----BEGIN USER NKEY SEED-----\r\n{nkey_user.seed}\r\n------END USER NKEY SEED------\r\n")
    else:
        seed = _write(tmp_path / "u.nk", nkey_user.seed + "\n")
        if form == "pathlib":
            seed = Path(seed)
    events = EventLog()
    nc = clients(nkey_server.url, nkey_seed=seed, on_event=events)
    _roundtrip(nc)
    assert nc.server_info.get("nonce")
    _assert_no_secret([nkey_user.seed], repr(nc), repr(nc.options), str(nc.options), repr(events.events))
    with pytest.raises(TypeError):
        pickle.dumps(nc)
    _assert_no_secret([nkey_user.seed], repr(pickle.loads(pickle.dumps(nc.options))), str(pickle.dumps(nc.options)))


def test_wrong_nkey_seed_refused(nkey_server: NatsServer, tmp_path: Path) -> None:
    wrong = new_key("user")
    for seed in (wrong.seed, _write(tmp_path / "wrong.nk", wrong.seed)):
        exc, took = _connect_error(nkey_server.url, nkey_seed=seed)
        assert isinstance(exc, AuthorizationError), repr(exc)
        assert took < CONNECT_TIMEOUT + 0.5
        _assert_no_secret([wrong.seed], *_texts(exc))


def test_seed_of_the_wrong_kind_is_refused_locally(nkey_server: NatsServer, tmp_path: Path) -> None:
    account = new_key("account")
    for seed in (account.seed, _write(tmp_path / "acc.nk", account.seed)):
        exc, _ = _connect_error(nkey_server.url, nkey_seed=seed)
        assert isinstance(exc, CredentialsError) and "account seed" in str(exc), repr(exc)
        _assert_no_secret([account.seed], *_texts(exc))


# --------------------------------------------------------------------------- operator mode


class Trust:
    """An operator, one account and its users, and a server trusting them (the accounts in an
    included file, so a test can revoke a user and restart the server)."""

    def __init__(self) -> None:
        self.operator = Operator()
        self.account: Account = self.operator.account("APP")
        self.server = NatsServer(jetstream=False, config='include "accounts.conf"')
        self.write_accounts()

    def write_accounts(self) -> None:
        path = Path(os.path.dirname(self.server.config_file)) / "accounts.conf"
        path.write_text(self.operator.server_config(self.account))


@pytest.fixture
def trust() -> Iterator[Trust]:
    t = Trust()
    try:
        t.server.start(10)
        yield t
    finally:
        t.server.cleanup()


def _authorized_users(server: NatsServer) -> list[str]:
    connz = server.monitor_json("connz?auth=1")
    conns = connz.get("connections") or []
    assert isinstance(conns, list)
    return [str(c.get("authorized_user")) for c in conns]


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_operator_mode_valid_user_accepted(
    newline: str, trust: Trust, clients: Callable[..., Client], tmp_path: Path
) -> None:
    alice = trust.account.user("alice", expires=time.time() + 600)
    creds = _write(tmp_path / "alice.creds", "# from nsc\n" + alice.creds(newline=newline) + "\n\n")
    events = EventLog()
    nc = clients(trust.server.url, creds=creds, on_event=events)
    _roundtrip(nc)
    assert _authorized_users(trust.server) == [alice.key.public]
    _assert_no_secret([alice.key.seed, alice.jwt], repr(nc), repr(nc.options), repr(events.events), str(nc.stats))


def test_operator_mode_user_jwt_and_signature_callbacks(
    trust: Trust, clients: Callable[..., Client]
) -> None:
    """Keys kept elsewhere (a vault, a KMS): the application returns the JWT and signs the nonce."""
    bob = trust.account.user("bob")
    nonces: list[bytes] = []

    def sign(nonce: bytes) -> bytes:
        nonces.append(nonce)
        return bob.key.sign(nonce)

    nc = clients(trust.server.url, user_jwt_cb=lambda: bob.jwt, signature_cb=sign)
    _roundtrip(nc)
    assert nonces == [str(nc.server_info["nonce"]).encode()]
    assert _authorized_users(trust.server) == [bob.key.public]


def _refused_users(trust: Trust) -> dict[str, User]:
    account = trust.account
    now = int(time.time())
    stranger = trust.operator.account("NOT-PRELOADED")
    revoked = account.user("revoked", iat=now - 120)
    account.revoke(revoked, at=now - 60)
    return {
        "expired": account.user("expired", expires=now - 5),
        "wrongly-signed": account.user("forged", forged_by=new_key("account")),
        "revoked": revoked,
        "unknown-account": stranger.user("stranger"),
    }


def test_operator_mode_refusals_are_typed(trust: Trust, tmp_path: Path, clients: Callable[..., Client]) -> None:
    users = _refused_users(trust)
    trust.write_accounts()  # the revocation
    trust.server.restart()
    # control: a fresh user of the same account is accepted by this very server
    ok = trust.account.user("control")
    nc = clients(trust.server.url, creds=_write(tmp_path / "ok.creds", ok.creds()))
    _roundtrip(nc)
    for name, user in users.items():
        exc, took = _connect_error(trust.server.url, creds=_write(tmp_path / f"{name}.creds", user.creds()))
        assert isinstance(exc, AuthorizationError), (name, repr(exc))
        assert took < CONNECT_TIMEOUT + 0.5, (name, took)
        _assert_no_secret([user.key.seed, user.jwt], *_texts(exc))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(lambda u: u.creds().split("*****")[0], "no nkey seed", id="jwt-only"),
        pytest.param(lambda u: u.creds().split("IMPORTANT")[1], "no user JWT", id="seed-only"),
        pytest.param(lambda u: u.creds().replace(u.key.seed, u.key.seed[:-3]), "malformed", id="truncated-seed"),
    ],
)
def test_operator_mode_bad_creds_files_fail_locally(
    content: Callable[[User], str], message: str, trust: Trust, tmp_path: Path
) -> None:
    user = trust.account.user("u")
    exc, _ = _connect_error(trust.server.url, creds=_write(tmp_path / "bad.creds", content(user)))
    assert isinstance(exc, CredentialsError) and message in str(exc), repr(exc)
    _assert_no_secret([user.key.seed, user.jwt], *_texts(exc))


def test_tls_downgrade_sends_no_jwt_nor_signature(
    trust: Trust, fault_proxy: Callable[..., FaultProxy], tmp_path: Path
) -> None:
    """TESTPLAN 11 with creds: a client that asks for TLS (a tls:// URL) meets a server that
    does not offer it: SecureConnectionRequiredError, and the proxy in between recorded no
    CONNECT, no JWT, no nkey (test_tls_auth.py strips TLS from a TLS server's INFO)."""
    user = trust.account.user("tls-only")
    proxy = fault_proxy(trust.server)
    exc, _ = _connect_error(f"tls://localhost:{proxy.port}", creds=_write(tmp_path / "u.creds", user.creds()))
    assert isinstance(exc, SecureConnectionRequiredError), repr(exc)
    up = proxy.captured("up")
    assert b"CONNECT" not in up and user.jwt.encode()[:40] not in up and user.key.public.encode() not in up


def test_no_secret_in_log_lines(
    trust: Trust, clients: Callable[..., Client], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    good = trust.account.user("logged")
    expired = trust.account.user("expired", expires=time.time() - 5)
    events = EventLog()
    nc = clients(trust.server.url, creds=_write(tmp_path / "g.creds", good.creds()), on_event=events)
    _roundtrip(nc)
    exc, _ = _connect_error(trust.server.url, creds=_write(tmp_path / "e.creds", expired.creds()), on_event=events)
    nc.close()
    _assert_no_secret([good.key.seed, good.jwt, expired.key.seed, expired.jwt],
                      caplog.text, repr(events.events), *_texts(exc))


# --------------------------------------------------------------------------- rotation


def test_rotated_creds_used_after_user_authentication_expired(
    trust: Trust, clients: Callable[..., Client], tmp_path: Path
) -> None:
    """TESTPLAN 16 with a rotation: the JWT expires while connected; the server says 'User
    Authentication Expired' and closes; the client reads the creds file again and reconnects
    as the new user."""
    first = trust.account.user("first", expires=time.time() + 3)
    second = trust.account.user("second", expires=time.time() + 600)
    path = tmp_path / "app.creds"
    path.write_text(first.creds())
    events = EventLog()
    nc = clients(trust.server.url, creds=str(path), on_event=events, reconnect_wait=0.1)
    _roundtrip(nc)
    assert _authorized_users(trust.server) == [first.key.public]
    path.write_text(second.creds(newline="\r\n"))  # rotate (nsc / a secrets manager rewrote it)
    err = events.wait_for(ServerError, timeout=8)[0]
    assert isinstance(err.error, AuthorizationExpiredError), err
    events.wait_for(Disconnected, timeout=2)
    events.wait_for(Reconnected, timeout=5)
    _roundtrip(nc)
    assert _authorized_users(trust.server) == [second.key.public]
    _assert_no_secret([first.key.seed, second.key.seed, first.jwt, second.jwt], repr(events.events), repr(nc))


def test_expired_without_rotation_stops_typed_without_a_tight_loop(
    trust: Trust, clients: Callable[..., Client], tmp_path: Path
) -> None:
    """TESTPLAN 16: the JWT expires and the file is not replaced: the reconnect is refused
    ('Authorization Violation') and the client stops with AuthorizationError after at most two
    refusals, at most one attempt per reconnect_wait."""
    user = trust.account.user("short", expires=time.time() + 2)
    events = EventLog()
    nc = clients(trust.server.url, creds=_write(tmp_path / "u.creds", user.creds()), on_event=events,
                 reconnect_wait=0.3, max_reconnect_attempts=10)
    _roundtrip(nc)
    (closed,) = events.wait_for(Closed, timeout=10)
    assert isinstance(closed.error, AuthorizationError), repr(closed.error)
    failed = events.of(ConnectAttemptFailed)
    assert 1 <= len(failed) <= 2 and all(isinstance(f.error, AuthorizationError) for f in failed), failed
    times = [events.time_of(f) for f in failed]
    assert all(b - a >= 0.25 for a, b in zip(times, times[1:])), times
    assert nc.is_closed


def test_rotated_creds_used_after_the_old_user_is_revoked(
    trust: Trust, clients: Callable[..., Client], tmp_path: Path
) -> None:
    """The operator revokes the old user and restarts the server: the reconnect with the old
    file would be an 'Authorization Violation'; with the rotated file the client is back."""
    now = int(time.time())
    old = trust.account.user("old", iat=now - 10)
    new = trust.account.user("new", iat=now)  # issued after the revocation time below
    path = tmp_path / "app.creds"
    path.write_text(old.creds())
    events = EventLog()
    nc = clients(trust.server.url, creds=str(path), on_event=events, reconnect_wait=0.1)
    _roundtrip(nc)
    path.write_text(new.creds())
    trust.account.revoke(old, at=now - 5)
    trust.write_accounts()
    trust.server.restart()
    events.wait_for(Reconnected, timeout=10)
    _roundtrip(nc)
    assert _authorized_users(trust.server) == [new.key.public]


def test_revoked_user_without_rotation_is_refused_after_restart(
    trust: Trust, clients: Callable[..., Client], tmp_path: Path
) -> None:
    old = trust.account.user("old", iat=int(time.time()) - 10)
    events = EventLog()
    nc = clients(trust.server.url, creds=_write(tmp_path / "u.creds", old.creds()), on_event=events,
                 reconnect_wait=0.1)
    _roundtrip(nc)
    trust.account.revoke(old)
    trust.write_accounts()
    trust.server.restart()
    (closed,) = events.wait_for(Closed, timeout=10)
    assert isinstance(closed.error, AuthorizationError), repr(closed.error)
    assert not events.of(Reconnected)
    with pytest.raises(NatsError):
        nc.publish("x", b"after close")


# --------------------------------------------------------------------------- testcontainers


@pytest.mark.container
def test_container_server_with_creds(tmp_path: Path) -> None:
    """The testcontainers provider: a pinned nats image in operator mode, creds passed through."""
    from tests.conftest import NATS_IMAGE, docker_unavailable_reason

    reason = docker_unavailable_reason()
    if reason is not None:
        pytest.skip(f"no Docker engine: {reason}")
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.wait_strategies import LogMessageWaitStrategy

    op = Operator()
    account = op.account("APP")
    user = account.user("container")
    config = "listen: 0.0.0.0:4222\n" + op.server_config(account)
    container = (
        DockerContainer(NATS_IMAGE)
        .with_copy_into_container(config.encode(), "/etc/nats/op.conf")
        .with_command("-c /etc/nats/op.conf")
        .with_exposed_ports(4222)
        .waiting_for(LogMessageWaitStrategy("Server is ready"))
    )
    container.start()
    try:
        url = f"nats://{container.get_container_host_ip()}:{container.get_exposed_port(4222)}"
        with jssync.connect(url, creds=_write(tmp_path / "u.creds", user.creds()), connect_timeout=5) as nc:
            _roundtrip(nc)
        exc, _ = _connect_error(url, creds=_write(tmp_path / "x.creds", account.user("x", expires=time.time() - 5).creds()))
        assert isinstance(exc, AuthorizationError), repr(exc)
    finally:
        container.stop()
