"""nkey / JWT authentication in the core: CONNECT with ``jwt`` / ``nkey`` and ``sig`` (golden
bytes, fixed keys and nonce), the injected callables, and the creds / seed file parsers.

The core signs nothing: a fixed fake signer stands in for ed25519 here (the shell's real
signer, with a fixed key, has its own golden test in tests/sync/test_auth_shell.py).
"""

from __future__ import annotations

import base64
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jscore import events as ev
from jscore.auth import (
    MAX_CREDENTIALS_FILE,
    Credentials,
    check_user_jwt,
    check_user_seed,
    connect_auth_fields,
    encode_signature,
    looks_like_seed,
    parse_creds,
    parse_seed,
)
from jscore.connection import Connection, State
from jscore.errors import (
    AuthorizationError,
    AuthorizationExpiredError,
    AuthorizationRevokedError,
    CredentialsError,
    InvalidOptionError,
    NoServersError,
    RemoteProtocolError,
)
from tests.core.test_connection import Harness, client_frames, of

# A user seed and its public key, made once with the nkeys package from the bytes 0..31 (fixed
# test values: no real account uses them).
SEED = "SUAAAAICAMCAKBQHBAEQUCYMBUHA6EARCIJRIFIWC4MBSGQ3DQOR4H776Y"
PUBLIC = "UAB2CB576PHBBPQ5ODORRZ2LYCMWPZGWGCN2KDK7DXOIMZASKUY3RLKK"
ACCOUNT_SEED = "SAAAAAICAMCAKBQHBAEQUCYMBUHA6EARCIJRIFIWC4MBSGQ3DQOR4HYMHI"
JWT = "eyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ.eyJzdWIiOiJVQUIyQ0I1NzYifQ.c2lnbmF0dXJl"
NONCE = "nonce-FIXED-123"
FAKE_SIG = bytes(range(64))
FAKE_SIG_B64 = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vMDEyMzQ1Njc4OTo7PD0-Pw"


class Signer:
    """A stand-in for ed25519: records the nonces it was given, returns a fixed signature."""

    def __init__(self, sig: Any = FAKE_SIG) -> None:
        self.nonces: list[bytes] = []
        self.sig = sig

    def __call__(self, nonce: bytes) -> Any:
        self.nonces.append(nonce)
        if isinstance(self.sig, BaseException):
            raise self.sig
        return self.sig


def harness(credentials: Credentials | None, **options: Any) -> Harness:
    h = Harness(**options)
    h.conn = Connection(h.options, rng=random.Random(h.seed), credentials=credentials)
    return h


# --------------------------------------------------------------------------- CONNECT, golden bytes


def test_connect_with_jwt_golden_bytes() -> None:
    signer = Signer()
    h = harness(Credentials(jwt=JWT, sign=signer))
    h.dial()
    h.info({"server_id": "S", "nonce": NONCE, "auth_required": True})
    assert h.conn.data_to_send() == (
        b'CONNECT {"verbose":false,"pedantic":false,"tls_required":false,"lang":"python3-jssync",'
        b'"version":"0.1.0","protocol":1,"echo":true,"headers":true,"no_responders":true,'
        b'"jwt":"eyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ.eyJzdWIiOiJVQUIyQ0I1NzYifQ.c2lnbmF0dXJl",'
        b'"sig":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vMDEyMzQ1Njc4OTo7PD0-Pw"}\r\n'
        b"PING\r\n"
    )
    assert signer.nonces == [NONCE.encode()]
    assert of(h.send(b"PONG\r\n"), ev.Connected)


def test_connect_with_nkey_golden_bytes() -> None:
    h = harness(Credentials(nkey=PUBLIC, sign=Signer()), name="svc")
    h.dial()
    h.info({"nonce": NONCE})
    assert h.conn.data_to_send() == (
        b'CONNECT {"verbose":false,"pedantic":false,"tls_required":false,"lang":"python3-jssync",'
        b'"version":"0.1.0","protocol":1,"echo":true,"headers":true,"no_responders":true,"name":"svc",'
        b'"nkey":"UAB2CB576PHBBPQ5ODORRZ2LYCMWPZGWGCN2KDK7DXOIMZASKUY3RLKK",'
        b'"sig":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vMDEyMzQ1Njc4OTo7PD0-Pw"}\r\n'
        b"PING\r\n"
    )


def test_signature_is_base64url_without_padding() -> None:
    assert encode_signature(FAKE_SIG) == FAKE_SIG_B64
    assert base64.urlsafe_b64decode(FAKE_SIG_B64 + "==") == FAKE_SIG
    assert "=" not in encode_signature(b"\xff" * 64) and "+" not in encode_signature(b"\xfb" * 64)


def test_user_password_and_jwt_are_both_sent() -> None:
    # As nats.go: every configured credential goes into CONNECT; the server picks.
    h = harness(Credentials(jwt=JWT, sign=Signer()), user="bob", password="pw")
    h.connect({"nonce": NONCE})
    assert h.last_connect["user"] == "bob" and h.last_connect["jwt"] == JWT and h.last_connect["sig"] == FAKE_SIG_B64


def test_without_a_nonce_the_empty_string_is_signed() -> None:
    signer = Signer()
    h = harness(Credentials(jwt=JWT, sign=signer))
    h.connect({})
    assert signer.nonces == [b""] and h.last_connect["sig"] == FAKE_SIG_B64


def test_without_credentials_connect_has_no_auth_fields() -> None:
    h = harness(None)
    h.connect({"nonce": NONCE})
    assert not {"jwt", "nkey", "sig"} & set(h.last_connect)


def test_sources_are_called_at_every_handshake() -> None:
    """A callable JWT is asked again at each connect: a rotated credential is used at the next
    reconnect. Each handshake signs its own server's nonce."""
    jwts = iter([JWT, JWT.replace("c2lnbmF0dXJl", "c2lnMg")])
    signer = Signer()
    h = harness(Credentials(jwt=lambda: next(jwts), sign=signer), reconnect_wait=0.5, reconnect_jitter=0.0)
    h.connect({"nonce": "n1"})
    first = h.last_connect["jwt"]
    h.now = 10.0
    h.lose(OSError("reset"))
    h.handshake({"nonce": "n2"})
    assert first == JWT and h.last_connect["jwt"].endswith(".c2lnMg")
    assert signer.nonces == [b"n1", b"n2"]


def test_connect_after_tls_upgrade_is_signed_too() -> None:
    signer = Signer()
    h = harness(Credentials(jwt=JWT, sign=signer), servers=("tls://a:4222",))
    h.dial()
    h.info({"tls_required": True, "nonce": NONCE})
    assert h.pump() == [ev.TlsUpgradeRequested(hostname="a")] and signer.nonces == []
    h.conn.tls_established(h.now)
    (connect, ping) = client_frames(h.conn.data_to_send())
    assert connect[1]["sig"] == FAKE_SIG_B64 and connect[1]["tls_required"] is True and signer.nonces == [NONCE.encode()]


# --------------------------------------------------------------------------- failing sources


@pytest.mark.parametrize(
    ("credentials", "message"),
    [
        pytest.param(Credentials(jwt=JWT, sign=Signer(ValueError("kms down"))), "raised ValueError", id="signer-raises"),
        pytest.param(Credentials(jwt=JWT, sign=Signer(base64.b64encode(FAKE_SIG))), "not base64", id="signer-base64"),
        pytest.param(Credentials(jwt=JWT, sign=Signer("text")), "expected bytes", id="signer-str"),
        pytest.param(Credentials(jwt=lambda: 1 / 0, sign=Signer()), "raised ZeroDivisionError", id="jwt-raises"),  # type: ignore[arg-type,return-value]
        pytest.param(Credentials(jwt=lambda: "", sign=Signer()), "empty", id="jwt-empty"),
        pytest.param(Credentials(jwt="not-a-jwt", sign=Signer()), "malformed", id="jwt-malformed"),
        pytest.param(Credentials(nkey="AABC", sign=Signer()), "public user nkey", id="nkey-malformed"),
        pytest.param(Credentials(nkey=SEED, sign=Signer()), "public user nkey", id="nkey-is-a-seed"),
    ],
)
def test_unusable_credentials_end_the_attempt_before_connect(credentials: Credentials, message: str) -> None:
    h = harness(credentials)
    h.dial()
    h.info({"nonce": NONCE})
    events = h.pump()
    (close,) = of(events, ev.CloseRequested)
    assert isinstance(close.error, CredentialsError) and message in str(close.error), close.error
    assert h.conn.data_to_send() == b"", "no CONNECT may be sent"
    assert SEED not in str(close.error) and "kms down" not in str(close.error)
    events = h.lose()
    (closed,) = of(events, ev.Closed)  # the only server, never connected: connect() raises it
    assert isinstance(closed.error, CredentialsError)


def test_unusable_credentials_while_reconnecting_are_retried() -> None:
    outcomes: list[Any] = [FAKE_SIG, OSError("file mid-rotation"), FAKE_SIG]
    h = harness(Credentials(jwt=JWT, sign=lambda n: _next(outcomes)), reconnect_wait=1.0, reconnect_jitter=0.0)
    h.connect({"nonce": "a"})
    h.now = 5.0
    h.lose(OSError())
    h.dial()
    h.info({"nonce": "b"})
    assert isinstance(of(h.pump(), ev.CloseRequested)[0].error, CredentialsError)
    events = h.lose()
    (failed,) = of(events, ev.ConnectAttemptFailed)
    assert isinstance(failed.error, CredentialsError) and not of(events, ev.Closed)
    assert h.conn._pool, "a local credentials problem is not the server's fault: it stays in the pool"
    h.handshake({"nonce": "c"})
    assert h.conn.is_connected


def _next(items: list[Any]) -> Any:
    item = items.pop(0)
    if isinstance(item, BaseException):
        raise item
    return item


def test_two_servers_refused_credentials_error_wins_over_no_servers() -> None:
    h = harness(Credentials(jwt=JWT, sign=Signer(ValueError())), servers=("nats://a:4222", "nats://b:4222"))
    for _ in range(2):
        h.dial()
        h.info({"nonce": NONCE})
        h.pump()
        events = h.lose()
    (closed,) = of(events, ev.Closed)
    assert isinstance(closed.error, CredentialsError) and not isinstance(closed.error, NoServersError)


@pytest.mark.parametrize("nonce", [5, ["x"], {"a": 1}, True])
def test_a_nonce_that_is_not_a_string_is_a_protocol_error(nonce: Any) -> None:
    signer = Signer()
    h = harness(Credentials(jwt=JWT, sign=signer))
    h.dial()
    h.info({"nonce": nonce})
    events = h.pump()
    (err,) = of(events, ev.ServerError)
    assert isinstance(err.error, RemoteProtocolError) and of(events, ev.CloseRequested)
    assert signer.nonces == [] and h.conn.data_to_send() == b""


def test_credentials_combinations_and_repr() -> None:
    with pytest.raises(CredentialsError, match="exclude"):
        Credentials(jwt=JWT, nkey=PUBLIC, sign=Signer())
    with pytest.raises(CredentialsError, match="signer"):
        Credentials(jwt=JWT)
    with pytest.raises(CredentialsError, match="needs a user JWT"):
        Credentials(sign=Signer())
    assert issubclass(CredentialsError, InvalidOptionError) and issubclass(CredentialsError, ValueError)
    text = repr(Credentials(jwt=JWT, sign=Signer()))
    assert JWT not in text and "hidden" in text


# --------------------------------------------------------------------------- -ERR of JWT users


@pytest.mark.parametrize(
    ("text", "cls"),
    [
        ("User Authentication Expired", AuthorizationExpiredError),
        ("Account Authentication Expired", AuthorizationExpiredError),
        ("User Authentication Revoked", AuthorizationRevokedError),
        ("Authorization Violation", AuthorizationError),
    ],
)
def test_auth_errors_close_and_reconnect(text: str, cls: type[Exception]) -> None:
    h = harness(Credentials(jwt=JWT, sign=Signer()), reconnect_wait=0.5, reconnect_jitter=0.0)
    h.connect({"nonce": NONCE})
    events = h.send(b"-ERR '%s'\r\n" % text.encode())
    (err,) = of(events, ev.ServerError)
    assert err.fatal and type(err.error) is cls and isinstance(err.error, AuthorizationError)
    assert of(events, ev.CloseRequested)
    events = h.lose()
    assert of(events, ev.Disconnected) and h.conn.state in (State.WAITING, State.DIALING)


# --------------------------------------------------------------------------- creds files

CREDS = (
    "-----BEGIN NATS USER JWT-----\n"
    f"{JWT}\n"
    "------END NATS USER JWT------\n"
    "\n"
    "************************* IMPORTANT *************************\n"
    "NKEY Seed printed below can be used to sign and prove identity.\n"
    "NKEYs are sensitive and should be treated as secrets.\n"
    "\n"
    "-----BEGIN USER NKEY SEED-----\n"
    f"{SEED}\n"
    "------END USER NKEY SEED------\n"
    "\n"
    "*************************************************************\n"
)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(CREDS, id="lf"),
        pytest.param(CREDS.replace("\n", "\r\n"), id="crlf"),
        pytest.param(CREDS.replace(f"{JWT}\n", f"   {JWT}  \t\n").replace(f"{SEED}\n", f"\n\n  {SEED} \n\n"), id="whitespace"),
        pytest.param("# my account\n\n" + CREDS.replace("\n\n", "\n\n\n\n") + "\ntrailing notes\n", id="surrounding-text"),
        pytest.param(CREDS.replace("\n", "\r\n").rstrip() , id="no-final-newline"),
        pytest.param("\n".join(reversed(CREDS.split("\n\n")[2:3])) + "\n" + CREDS.split("\n\n")[0] + "\n", id="seed-first"),
    ],
)
def test_parse_creds(text: str) -> None:
    jwt, seed = parse_creds(text.encode())
    assert jwt == JWT and bytes(seed) == SEED.encode() and isinstance(seed, bytearray)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(CREDS.split("************************* IMPORTANT")[0], "no nkey seed", id="jwt-only"),
        pytest.param("-----BEGIN USER NKEY SEED-----\n" + SEED + "\n------END USER NKEY SEED------\n", "no user JWT", id="seed-only"),
        pytest.param("", "no user JWT", id="empty"),
        pytest.param(SEED + "\n", "no user JWT", id="bare-seed"),
        pytest.param(CREDS.replace(SEED, SEED[:40]), "malformed", id="truncated-seed"),
        pytest.param(CREDS.replace(SEED, ACCOUNT_SEED), "account seed", id="account-seed"),
        pytest.param(CREDS.replace(SEED, SEED[:20] + ("A" if SEED[20] != "A" else "B") + SEED[21:]), "checksum", id="checksum"),
        pytest.param(CREDS.replace(JWT, "eyJ0eXAi.x"), "malformed", id="jwt-two-parts"),
        pytest.param(CREDS.replace(SEED, "SUÄ" + SEED[3:]), "no nkey seed", id="non-ascii"),
        pytest.param(CREDS.replace("------END USER NKEY SEED------", ""), "no nkey seed", id="unterminated"),
    ],
)
def test_parse_creds_refuses(text: str, message: str) -> None:
    with pytest.raises(CredentialsError, match=message) as info:
        parse_creds(text.encode())
    assert SEED not in str(info.value) and SEED[:20] not in str(info.value) and JWT not in str(info.value)


def test_parse_creds_refuses_huge_files() -> None:
    with pytest.raises(CredentialsError, match="larger than"):
        parse_creds(CREDS.encode() + b"\n" * MAX_CREDENTIALS_FILE)


@pytest.mark.parametrize(
    "text",
    [
        SEED,
        SEED + "\n",
        "\r\n  " + SEED + "  \r\n",
        "# a comment\n" + SEED + "\n",
        "-----BEGIN USER NKEY SEED-----\r\n" + SEED + "\r\n------END USER NKEY SEED------\r\n",
        CREDS,
    ],
)
def test_parse_seed(text: str) -> None:
    assert bytes(parse_seed(text.encode())) == SEED.encode()


@pytest.mark.parametrize(
    ("text", "message"),
    [("", "no nkey seed"), ("hello\n", "no nkey seed"), (ACCOUNT_SEED, "account seed"), (SEED[:-1], "malformed"),
     (SEED + "A", "malformed")],
)
def test_parse_seed_refuses(text: str, message: str) -> None:
    with pytest.raises(CredentialsError, match=message):
        parse_seed(text.encode())


def test_check_user_seed_and_jwt() -> None:
    check_user_seed(SEED.encode())
    check_user_jwt(JWT)
    for bad in ("a.b", "a.b.c.d", "a..c", "a.b.c d", "ä.b.c"):
        with pytest.raises(CredentialsError):
            check_user_jwt(bad)
    assert looks_like_seed(SEED) and looks_like_seed(f" {SEED}\n") and looks_like_seed(ACCOUNT_SEED)
    assert not looks_like_seed("/home/me/user.nk") and not looks_like_seed("seed.nk") and not looks_like_seed(SEED[:-1])


def test_connect_auth_fields_directly() -> None:
    assert connect_auth_fields(Credentials(nkey=lambda: PUBLIC, sign=Signer()), "x") == {"nkey": PUBLIC, "sig": FAKE_SIG_B64}
    assert connect_auth_fields(Credentials(jwt=lambda: JWT.encode(), sign=Signer(bytearray(FAKE_SIG))), None) == {  # type: ignore[arg-type,return-value]
        "jwt": JWT,
        "sig": FAKE_SIG_B64,
    }


# --------------------------------------------------------------------------- any bytes


_PIECES = st.sampled_from(
    [
        b"-----BEGIN NATS USER JWT-----", b"------END NATS USER JWT------", b"-----BEGIN USER NKEY SEED-----",
        b"------END USER NKEY SEED------", b"---", b"\n", b"\r\n", b"\r", b" ", b"\t", JWT.encode(), SEED.encode(),
        ACCOUNT_SEED.encode(), SEED[:30].encode(), b"\xff", b"\x00", b"S", b"SU", b"*****",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_PIECES, st.binary(max_size=20)), max_size=30))
def test_parsers_accept_or_raise_credentials_error_only(parts: list[bytes]) -> None:
    """Whatever a file holds, the parsers return a checked JWT and seed or raise
    CredentialsError, and the error never quotes the seed."""
    data = b"".join(parts)
    try:
        jwt, seed = parse_creds(data)
    except CredentialsError as exc:
        assert SEED not in str(exc) and SEED[:30] not in str(exc)
    else:
        check_user_jwt(jwt)
        check_user_seed(seed)
    try:
        seed = parse_seed(data)
    except CredentialsError as exc:
        assert SEED not in str(exc)
    else:
        check_user_seed(seed)
