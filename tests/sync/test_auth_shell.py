"""The client's credentials (jssync.auth): files read at every connect attempt, the nkeys extra
imported lazily, signing with a real key (golden bytes), bounded callbacks, secrets kept out of
reprs, errors, events and pickles; and the client against the scripted fake server (the
CONNECT it sends, a rotated creds file used at the reconnect).
"""

from __future__ import annotations

import ast
import json
import os
import pickle
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import jssync
from jscore.auth import Credentials
from jscore.connection import ConnectOptions
from jscore.errors import CredentialsError, InvalidOptionError
from jscore.session import Session
from jssync import Client
from jssync.auth import NKEYS_INSTALL_HINT, Authenticator
from jssync.events import ConnectAttemptFailed, Disconnected, Reconnected
from tests.core.test_auth import ACCOUNT_SEED, JWT, PUBLIC, SEED
from tests.integration import EventLog, clients, wait_until
from tests.support.fakeserver import FakeServer
from tests.support.jwts import creds_text, new_key

__all__ = ["clients"]

nkeys = pytest.importorskip("nkeys")
pytestmark = pytest.mark.timeout(60)

NONCE = "nonce-FIXED-123"
# ed25519 is deterministic: the signature of NONCE by SEED, computed once with nkeys.
SIG = "9U8ymecJrM4hF-QDAKhzzKu6Tfe49RiVvga7sKcNhTKbVwktbEr-WEltX9Mc2Ov1NQlJpqKfQbKyr-gO2BAoBQ"
JSSYNC_DIR = Path(jssync.__file__).resolve().parent


def _secrets_absent(*texts: str, secrets: tuple[str, ...] = (SEED, JWT)) -> None:
    for text in texts:
        for secret in secrets:
            assert secret not in text, text
            assert secret[:24] not in text, text


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# --------------------------------------------------------------------------- signing, golden bytes


def _handshake(auth: Authenticator, info: dict[str, Any]) -> bytes:
    """Run one handshake of a session with ``auth``'s credentials; return what it wrote."""
    import random

    session = Session(ConnectOptions(servers=("nats://a:4222",)), rng=random.Random(1), credentials=auth.credentials)
    session.start(0.0)
    auth.load()
    session.connection_made(0.0)
    session.receive_data(b"INFO " + json.dumps(info).encode() + b"\r\n", 0.0)
    return session.data_to_send()


@pytest.mark.parametrize("source", ["file", "string"])
def test_nkey_seed_connect_golden_bytes(source: str, tmp_path: Path) -> None:
    seed = _write(tmp_path, "user.nk", SEED + "\n") if source == "file" else SEED
    auth = Authenticator(nkey_seed=seed)
    assert _handshake(auth, {"nonce": NONCE}) == (
        b'CONNECT {"verbose":false,"pedantic":false,"tls_required":false,"lang":"python3-jssync",'
        b'"version":"0.1.0","protocol":1,"echo":true,"headers":true,"no_responders":true,'
        b'"nkey":"UAB2CB576PHBBPQ5ODORRZ2LYCMWPZGWGCN2KDK7DXOIMZASKUY3RLKK",'
        b'"sig":"9U8ymecJrM4hF-QDAKhzzKu6Tfe49RiVvga7sKcNhTKbVwktbEr-WEltX9Mc2Ov1NQlJpqKfQbKyr-gO2BAoBQ"}\r\n'
        b"PING\r\n"
    )


def test_creds_connect_golden_bytes_and_the_signature_verifies(tmp_path: Path) -> None:
    import base64

    import nacl.signing

    auth = Authenticator(creds=_write(tmp_path, "u.creds", creds_text(JWT, SEED, newline="\r\n")))
    wire = _handshake(auth, {"nonce": NONCE, "auth_required": True})
    assert wire == (
        b'CONNECT {"verbose":false,"pedantic":false,"tls_required":false,"lang":"python3-jssync",'
        b'"version":"0.1.0","protocol":1,"echo":true,"headers":true,"no_responders":true,'
        b'"jwt":"' + JWT.encode() + b'","sig":"' + SIG.encode() + b'"}\r\nPING\r\n'
    )
    raw_public = base64.b32decode(PUBLIC.encode())[1:-2]
    nacl.signing.VerifyKey(raw_public).verify(NONCE.encode(), base64.urlsafe_b64decode(SIG + "=="))


def test_the_key_is_wiped_once_the_nonce_is_signed(tmp_path: Path) -> None:
    auth = Authenticator(nkey_seed=_write(tmp_path, "u.nk", SEED))
    auth.load()
    creds = auth.credentials
    assert creds.sign is not None
    assert len(creds.sign(b"n")) == 64
    with pytest.raises(CredentialsError, match="no nkey seed was loaded"):
        creds.sign(b"n")  # a second signature needs a new load (the next connect attempt)
    auth.load()
    auth.forget()
    with pytest.raises(CredentialsError):
        creds.sign(b"n")


# --------------------------------------------------------------------------- files, read every time


def test_creds_file_is_read_again_at_every_load(tmp_path: Path) -> None:
    path = tmp_path / "u.creds"
    path.write_text(creds_text(JWT, SEED))
    auth = Authenticator(creds=str(path))
    creds = auth.credentials
    auth.load()
    assert callable(creds.jwt) and creds.jwt() == JWT
    other = new_key("user")
    rotated = JWT.replace("c2lnbmF0dXJl", "cm90YXRlZA")
    path.write_text(creds_text(rotated, other.seed))
    auth.load()
    assert creds.jwt() == rotated
    path.unlink()
    with pytest.raises(CredentialsError, match="cannot read the creds file") as info:
        auth.load()
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(lambda: creds_text(JWT, SEED).split("*****")[0], "no nkey seed", id="jwt-only"),
        pytest.param(lambda: creds_text(JWT, SEED).split("IMPORTANT")[1], "no user JWT", id="seed-only"),
        pytest.param(lambda: creds_text(JWT, ACCOUNT_SEED), "account seed", id="account-seed"),
        pytest.param(lambda: creds_text(JWT, SEED[:30]), "malformed", id="truncated"),
        pytest.param(lambda: "x" * (2 << 20), "larger than", id="huge"),
        pytest.param(lambda: None, "cannot read", id="directory"),
        pytest.param(lambda: "\udcff", "no user JWT", id="not-utf8"),
    ],
)
def test_bad_creds_files_raise_credentials_error_without_the_secret(
    content: Callable[[], str | None], message: str, tmp_path: Path
) -> None:
    text = content()
    if text is None:
        path = str(tmp_path)
    else:
        path = str(tmp_path / "bad.creds")
        Path(path).write_bytes(text.encode("utf-8", "surrogateescape"))
    auth = Authenticator(creds=path)
    with pytest.raises(CredentialsError, match=message) as info:
        auth.load()
    _secrets_absent(str(info.value), repr(info.value), repr(auth), secrets=(SEED, JWT, ACCOUNT_SEED))


def test_seed_given_as_a_path_or_as_the_seed(tmp_path: Path) -> None:
    assert "seed file" in repr(Authenticator(nkey_seed=Path(_write(tmp_path, "u.nk", SEED))))
    auth = Authenticator(nkey_seed=f"  {SEED}\n")
    assert repr(auth) == "<jssync Authenticator seed>"
    assert repr(Authenticator(nkey_seed=SEED.encode() + b"\n")) == "<jssync Authenticator seed>"
    with pytest.raises(CredentialsError, match="malformed"):
        Authenticator(nkey_seed=b"SUnot-a-seed")
    with pytest.raises(CredentialsError, match="account seed") as info:
        Authenticator(nkey_seed=ACCOUNT_SEED)
    _secrets_absent(str(info.value), secrets=(ACCOUNT_SEED,))
    with pytest.raises(InvalidOptionError, match="not its content") as info2:
        Authenticator(creds=creds_text(JWT, SEED))
    _secrets_absent(str(info2.value))


def test_option_combinations() -> None:
    with pytest.raises(InvalidOptionError, match="exclude each other"):
        Authenticator(creds="a.creds", nkey_seed=SEED)
    with pytest.raises(InvalidOptionError, match="exclude each other"):
        Authenticator(creds="a.creds", user_jwt_cb=lambda: JWT, signature_cb=lambda n: b"")
    with pytest.raises(InvalidOptionError, match="go together"):
        Authenticator(user_jwt_cb=lambda: JWT)
    with pytest.raises(InvalidOptionError, match="go together"):
        Authenticator(signature_cb=lambda n: b"")
    with pytest.raises(InvalidOptionError, match="callable"):
        Authenticator(user_jwt_cb="jwt", signature_cb=lambda n: b"")  # type: ignore[arg-type]


def test_authenticator_is_not_picklable_and_hides_values(tmp_path: Path) -> None:
    for auth in (Authenticator(nkey_seed=SEED), Authenticator(creds=_write(tmp_path, "u.creds", creds_text(JWT, SEED)))):
        auth.load()
        with pytest.raises(TypeError):
            pickle.dumps(auth)
        _secrets_absent(repr(auth), repr(auth.credentials))


# --------------------------------------------------------------------------- callbacks, bounded


def test_callbacks_run_off_the_calling_thread_and_are_bounded() -> None:
    threads: list[str] = []
    release = threading.Event()

    def jwt_cb() -> str:
        threads.append(threading.current_thread().name)
        return JWT

    def slow_sig(nonce: bytes) -> bytes:
        threads.append(threading.current_thread().name)
        release.wait(10)
        return bytes(64)

    auth = Authenticator(user_jwt_cb=jwt_cb, signature_cb=slow_sig, timeout=0.3)
    auth.load()
    creds = auth.credentials
    assert callable(creds.jwt) and creds.jwt() == JWT and creds.sign is not None
    with pytest.raises(CredentialsError, match="signature_cb did not finish within 0.3 s"):
        creds.sign(b"n")
    release.set()
    assert threads and all(t == "jssync-credentials" for t in threads)

    def broken() -> str:
        raise RuntimeError(f"vault said no to {SEED}")

    auth2 = Authenticator(user_jwt_cb=broken, signature_cb=lambda n: bytes(64))
    with pytest.raises(CredentialsError, match="user_jwt_cb raised RuntimeError") as info:
        auth2.load()
    assert SEED not in str(info.value)  # (the cause is the callback's own exception)


# --------------------------------------------------------------------------- the nkeys extra


def test_missing_nkeys_names_the_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "nkeys", None)  # import nkeys -> ImportError
    for kwargs in ({"creds": str(tmp_path / "u.creds")}, {"nkey_seed": SEED}):
        with pytest.raises(CredentialsError, match=r"pip install nkeys .*\[nkeys\]") as info:
            jssync.connect("nats://127.0.0.1:1", connect_timeout=0.2, **kwargs)  # type: ignore[arg-type]
        assert NKEYS_INSTALL_HINT in str(info.value) and isinstance(info.value.__cause__, ImportError)
    # callbacks need no nkeys
    Authenticator(user_jwt_cb=lambda: JWT, signature_cb=lambda n: bytes(64))


def test_importing_jssync_does_not_import_nkeys() -> None:
    code = "import sys, jssync, jssync.auth, jssync.client, jscore.auth; print('nkeys' in sys.modules, 'nacl' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.stdout.split() == ["False", "False"], out.stderr


def test_nkeys_and_nacl_are_imported_lazily_in_jssync() -> None:
    """Only inside functions: a module-level import would make msgspec not the only dependency."""
    for path in sorted(JSSYNC_DIR.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            assert not [n for n in names if n.split(".")[0] in ("nkeys", "nacl")], f"{path}:{node.lineno}"


# --------------------------------------------------------------------------- the client and the fake server


def test_client_sends_the_signed_nonce_and_rotated_creds_at_reconnect(
    fake_server_factory: Callable[..., FakeServer], clients: Callable[..., Client], tmp_path: Path
) -> None:
    fake = fake_server_factory(info={"nonce": NONCE, "auth_required": True})
    path = tmp_path / "u.creds"
    path.write_text(creds_text(JWT, SEED, newline="\r\n"))
    events = EventLog()
    nc = clients(fake.url, creds=str(path), on_event=events)
    first = fake.accept()
    opts = first.expect_connect()
    assert (opts["jwt"], opts["sig"]) == (JWT, SIG) and "nkey" not in opts
    # rotate: a new user (new JWT, new seed); the next connection must use it
    other = new_key("user")
    rotated = JWT.replace("c2lnbmF0dXJl", "cm90YXRlZA")
    path.write_text(creds_text(rotated, other.seed))
    first.send(b"-ERR 'User Authentication Expired'\r\n")
    first.close()
    events.wait_for(Disconnected)
    second = fake.accept()
    opts2 = second.expect_connect()
    assert opts2["jwt"] == rotated and opts2["sig"] != SIG
    kp = nkeys.from_seed(bytearray(other.seed.encode()))
    import base64

    kp.verify(NONCE.encode(), base64.urlsafe_b64decode(opts2["sig"] + "=="))
    events.wait_for(Reconnected)
    assert nc.is_connected
    _secrets_absent(repr(nc), repr(nc.options), repr(events.events), str(nc.last_error),
                    secrets=(SEED, JWT, other.seed, rotated))


def test_unreadable_creds_at_a_reconnect_is_retried(
    fake_server_factory: Callable[..., FakeServer], clients: Callable[..., Client], tmp_path: Path
) -> None:
    fake = fake_server_factory(info={"nonce": NONCE})
    path = tmp_path / "u.creds"
    path.write_text(creds_text(JWT, SEED))
    events = EventLog()
    nc = clients(fake.url, creds=str(path), on_event=events, reconnect_wait=0.2)
    fake.accept().expect_connect()
    path.unlink()  # mid-rotation
    fake.conns[0].close()
    failed = events.wait_for(ConnectAttemptFailed, pred=lambda e: isinstance(e.error, CredentialsError))
    assert "cannot read the creds file" in str(failed[0].error)
    path.write_text(creds_text(JWT, SEED))
    events.wait_for(Reconnected, timeout=5)
    wait_until(lambda: nc.is_connected, 5.0, what="the client to reconnect")


def test_connect_raises_credentials_error_for_a_missing_file(tmp_path: Path) -> None:
    with FakeServer() as fake:
        with pytest.raises(CredentialsError, match="cannot read the creds file"):
            jssync.connect(fake.url, creds=str(tmp_path / "missing.creds"), connect_timeout=0.5)
        assert fake.connection_count == 0, "nothing is dialed without usable credentials"


def test_credentials_default_is_not_in_connect_options() -> None:
    assert not {"creds", "nkey_seed", "jwt", "seed"} & set(ConnectOptions.__struct_fields__)
    assert Credentials().jwt is None


def test_packaging_msgspec_alone_signing_in_the_nkeys_extra() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((JSSYNC_DIR.parent / "pyproject.toml").read_text())["project"]
    assert [d.split(">")[0] for d in project["dependencies"]] == ["msgspec"]
    extras = project["optional-dependencies"]
    assert [d.split(">")[0] for d in extras["nkeys"]] == ["nkeys"]
    assert "jssync[nkeys]" in extras["dev"], "CI installs .[dev]: the signing tests need nkeys"
