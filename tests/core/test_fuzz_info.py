"""A short run of the INFO/CONNECT handshake fuzz target (fuzz/fuzz_info.py): every seed, a few
hundred hypothesis inputs, and checks that the harness can fail."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fuzz import fuzz_info
from jscore import connection

CORPUS = Path(fuzz_info.__file__).resolve().parent / "corpus" / "info"
SEEDS = sorted(p for p in CORPUS.iterdir() if p.is_file())
SMOKE = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

INFO_FRAGMENTS = [
    b"{", b"}", b"[", b"]", b",", b":", b'"max_payload"', b'"connect_urls"', b'"ldm"', b'"tls_required"',
    b'"tls_available"', b'"auth_required"', b'"nonce"', b'"user"', b'"auth_token"', b"true", b"null", b"0", b"-1",
    b"1024", b"67108865", b'"10.0.0.1:4222"', b'"[::1]:4222"', b'"h:65536"', b'"u:p@h:1"', b"\x00", b"\x01", b"\xff",
]  # fmt: skip
_info_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**65), max_value=2**65) | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=5)
    | st.dictionaries(st.sampled_from(["max_payload", "connect_urls", "ldm", "tls_required", "tls_available",
                                       "headers", "proto", "server_id", "nonce", "user"]), inner, max_size=5),
    max_leaves=16,
)  # fmt: skip


def test_corpus_is_seeded() -> None:
    assert len(SEEDS) >= 20


@pytest.mark.parametrize("path", SEEDS, ids=lambda p: p.name)
def test_seed(path: Path) -> None:
    fuzz_info.one_input(path.read_bytes())


@SMOKE
@given(st.binary(max_size=200))
@example(b"")
@example(b'{"max_payload":1024,"connect_urls":["10.0.0.1:4222"],"ldm":true}')
def test_random_bytes(data: bytes) -> None:
    fuzz_info.one_input(data)


@SMOKE
@given(st.lists(st.sampled_from(INFO_FRAGMENTS) | st.binary(max_size=3), max_size=24).map(b"".join))
def test_fragments(data: bytes) -> None:
    fuzz_info.one_input(data)


@SMOKE
@given(st.dictionaries(st.sampled_from(["max_payload", "connect_urls", "ldm", "tls_required", "server_id"]), _info_values))
def test_structured_info(info: dict[str, object]) -> None:
    fuzz_info.one_input(json.dumps(info, allow_nan=True).encode())


@SMOKE
@given(st.binary(max_size=6), st.text(max_size=12), st.text(max_size=12), st.text(max_size=12))
def test_client_fields(flags: bytes, name: str, user: str, secret: str) -> None:
    client = flags[:1] + "\x01".join((name, user, secret, secret)).encode("utf-8", "surrogatepass")
    fuzz_info.one_input(b'{"server_id":"S","tls_available":true}\x00' + client)


def test_the_handshake_is_driven_to_the_end() -> None:
    d = fuzz_info.check_handshake(b'{"server_id":"S","connect_urls":["10.0.0.1:4222"]}', fuzz_info.client_options(b""))
    assert d.closed and "nats://10.0.0.1:4222" in d.conn.servers


def test_harness_lets_untyped_errors_escape(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(self: connection.Connection, urls: object, field: str) -> None:
        raise KeyError("not a typed error")

    monkeypatch.setattr(connection.Connection, "_discover", boom)
    with pytest.raises(KeyError):
        fuzz_info.one_input(b'{"server_id":"S"}')


def test_harness_catches_a_connect_that_takes_fields_from_info(monkeypatch: pytest.MonkeyPatch) -> None:
    real = connection.encode_connect
    monkeypatch.setattr(connection, "encode_connect", lambda fields: real({**fields, "user": "mallory"}))
    with pytest.raises(AssertionError):
        fuzz_info.one_input(b'{"server_id":"S","user":"mallory"}')


def test_harness_catches_an_unbounded_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connection, "MAX_DISCOVERED", 10**6)
    urls = [f"10.{i // 256}.{i % 256}.1:4222" for i in range(fuzz_info.MAX_DISCOVERED + 5)]
    with pytest.raises(AssertionError):
        fuzz_info.one_input(json.dumps({"connect_urls": urls}).encode())
