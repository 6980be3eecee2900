"""The `jssync` command's authentication options against real nats-server processes: --creds,
--nkey, --user/--password, --token, --tls-ca/--tls-cert/--tls-key (before or after the
command); refusals are a one-line typed message and exit status 2, without the secret."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from jssync.cli import main
from jssync.server import NatsServer
from tests.support.certs import Certs, make_certs
from tests.support.jwts import Operator, new_key

pytestmark = pytest.mark.timeout(60)

PASSWORD = "cli-S3cr3t-pw"
TOKEN = "cli-S3cr3t-tok"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_help_lists_the_authentication_options(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--help"], ["pub", "--help"], ["stream", "--help"]):
        assert main(argv) == 0
        out = capsys.readouterr().out
        for option in ("--creds", "--nkey", "--user", "--password", "--token", "--tls-cert", "--tls-key", "--tls-ca"):
            assert option in out, (argv, option)


def test_creds_and_nkey(nats_server_factory: Callable[..., NatsServer], tmp_path: Path,
                        capsys: pytest.CaptureFixture[str]) -> None:
    op = Operator()
    account = op.account("APP")
    server = nats_server_factory(jetstream=False, config=op.server_config(account))
    good = tmp_path / "good.creds"
    good.write_text(account.user("cli").creds())
    expired = account.user("old", expires=time.time() - 5)
    bad = tmp_path / "expired.creds"
    bad.write_text(expired.creds())
    assert _run(capsys, "--creds", str(good), "pub", "cli.x", "hi", "--server", server.url)[0] == 0
    assert _run(capsys, "pub", "cli.x", "hi", "--server", server.url, "--creds", str(good))[0] == 0
    code, _, err = _run(capsys, "pub", "cli.x", "hi", "--server", server.url, "--creds", str(bad))
    assert code == 1 and "AuthorizationError" in err
    assert expired.key.seed not in err and expired.jwt not in err
    code, _, err = _run(capsys, "pub", "cli.x", "--server", server.url, "--creds", str(tmp_path / "missing.creds"))
    assert code == 2 and "CredentialsError" in err and "missing.creds" in err

    user = new_key("user")
    nkey_server = nats_server_factory(jetstream=False, config=f'authorization {{ users: [ {{ nkey: "{user.public}" }} ] }}')
    seed_file = tmp_path / "user.nk"
    seed_file.write_text(user.seed + "\n")
    assert _run(capsys, "pub", "cli.x", "--server", nkey_server.url, "--nkey", str(seed_file))[0] == 0
    code, _, err = _run(capsys, "pub", "cli.x", "--server", nkey_server.url)
    assert code == 1 and "AuthorizationError" in err


def test_user_password_and_token(nats_server_factory: Callable[..., NatsServer],
                                 capsys: pytest.CaptureFixture[str]) -> None:
    userpass = nats_server_factory(jetstream=False, config=f'authorization {{ user: cli, password: "{PASSWORD}" }}')
    assert _run(capsys, "pub", "a", "--server", userpass.url, "--user", "cli", "--password", PASSWORD)[0] == 0
    code, out, err = _run(capsys, "pub", "a", "--server", userpass.url, "--user", "cli", "--password", PASSWORD + "x")
    assert code == 1 and "AuthorizationError" in err and PASSWORD not in out + err
    token = nats_server_factory(jetstream=False, config=f'authorization {{ token: "{TOKEN}" }}')
    assert _run(capsys, "--token", TOKEN, "pub", "a", "--server", token.url)[0] == 0
    code, out, err = _run(capsys, "--token", TOKEN + "x", "pub", "a", "--server", token.url)
    assert code == 1 and "AuthorizationError" in err and TOKEN not in out + err


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(str(tmp_path_factory.mktemp("cli-certs")))


def test_tls_client_certificate(nats_server_factory: Callable[..., NatsServer], certs: Certs,
                                capsys: pytest.CaptureFixture[str]) -> None:
    server = nats_server_factory(jetstream=False, config=certs.server_tls_block("verify: true"))
    url = f"tls://localhost:{server.port}"
    tls = ["--tls-ca", certs.ca_file, "--tls-cert", certs.client_cert_file, "--tls-key", certs.client_key_file]
    assert _run(capsys, "pub", "m.x", "hi", "--server", url, *tls)[0] == 0
    code, _, err = _run(capsys, "pub", "m.x", "--server", url, "--tls-ca", certs.ca_file)
    assert code == 1 and ("AuthorizationError" in err or "cannot connect" in err), err
    # wrong options: the usage status, before connecting
    code, _, err = _run(capsys, "pub", "m.x", "--server", url, "--tls-cert", certs.client_cert_file)
    assert code == 2 and "go together" in err
    code, _, err = _run(capsys, "pub", "m.x", "--server", url, "--tls-ca", certs.ca_file + ".missing")
    assert code == 2 and "cannot load the TLS files" in err
