"""The Authentication examples of docs/getting-started.md run as written, each against a real
nats-server configured as the page says (only the port differs, and the files the example
names are made here: seeds, creds, certificates)."""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jssync.server import NatsServer
from tests.integration.test_tls_auth import TlsFirstServer
from tests.support.certs import Certs, make_certs
from tests.support.jwts import Operator, new_key

pytestmark = pytest.mark.timeout(60)

DOC = Path(__file__).resolve().parents[2] / "docs" / "getting-started.md"
EXAMPLE_RE = re.compile(r"<!-- example: ([\w-]+) -->\n```python\n(.*?)```", re.S)


def examples() -> dict[str, str]:
    return dict(EXAMPLE_RE.findall(DOC.read_text(encoding="utf-8")))


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(str(tmp_path_factory.mktemp("doc-certs")))


class Setup:
    """What one example needs: a server, files in the working directory, environment."""

    def __init__(self, tmp: Path, make: Callable[..., NatsServer], certs: Certs, monkeypatch: pytest.MonkeyPatch) -> None:
        self.tmp = tmp
        self.make = make
        self.certs = certs
        self.monkeypatch = monkeypatch
        self.host = "127.0.0.1"

    def file(self, name: str, text: str) -> None:
        (self.tmp / name).write_text(text)

    def server(self, name: str) -> NatsServer:
        if name == "userpass":
            return self.make(jetstream=False, config='authorization { user: app, password: "s3cret" }')
        if name == "token":
            return self.make(jetstream=False, config='authorization { token: "s3cret-token" }')
        if name == "nkey":
            key = new_key("user")
            self.file("user.nk", key.seed + "\n")
            self.monkeypatch.setenv("NATS_NKEY_SEED", key.seed)
            return self.make(jetstream=False, config=f'authorization {{ users: [ {{ nkey: "{key.public}" }} ] }}')
        if name in ("creds", "callbacks"):
            op = Operator()
            account = op.account("APP")
            user = account.user("doc")
            self.file("app.creds", user.creds())
            self.file("app.jwt", user.jwt + "\n")
            self.monkeypatch.setenv("NATS_USER_SEED", user.key.seed)
            return self.make(jetstream=False, config=op.server_config(account))
        for f in ("ca_file", "client_cert_file", "client_key_file"):
            shutil.copy(getattr(self.certs, f), self.tmp / {"ca_file": "ca.pem", "client_cert_file": "client.pem",
                                                            "client_key_file": "client.key"}[f])
        self.host = "localhost"
        if name == "mtls":
            return self.make(jetstream=False, config=self.certs.server_tls_block("verify: true"))
        if name == "mtls-first":
            server = TlsFirstServer(jetstream=False, config=self.certs.server_tls_block("handshake_first: true\n  verify: true"))
            server.probe_context = self.certs.client_context(client_cert=True)
            return server
        raise AssertionError(f"no setup for the example {name!r}")


@pytest.fixture
def started() -> Iterator[list[NatsServer]]:
    servers: list[NatsServer] = []
    yield servers
    for s in servers:
        s.cleanup()


def test_every_authentication_method_has_an_example() -> None:
    assert set(examples()) == {"userpass", "token", "nkey", "creds", "callbacks", "mtls", "mtls-first"}


@pytest.mark.parametrize("name", sorted(examples()))
def test_example_runs(
    name: str,
    nats_server_factory: Callable[..., NatsServer],
    certs: Certs,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    started: list[NatsServer],
) -> None:
    code = examples()[name]
    setup = Setup(tmp_path, nats_server_factory, certs, monkeypatch)
    server = setup.server(name)
    if not server.running:
        server.start(10)
        started.append(server)
    monkeypatch.chdir(tmp_path)
    assert ":4222" in code, "the examples use the default port"
    code = code.replace(f"{setup.host}:4222", f"{setup.host}:{server.port}")
    namespace: dict[str, Any] = {"__name__": f"doc_example_{name}"}
    exec(compile(code, f"{DOC.name}:{name}", "exec"), namespace)  # noqa: S102 - the documentation's own code
