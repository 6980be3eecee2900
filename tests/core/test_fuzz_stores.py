"""A short run of the credentials, key-value and object-metadata fuzz targets (fuzz/fuzz_creds.py,
fuzz/fuzz_kv.py, fuzz/fuzz_objmeta.py): every seed, a few hundred hypothesis inputs per target,
and checks that each harness can fail.

The long runs are external (atheris, see fuzz/README.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fuzz import fuzz_creds, fuzz_kv, fuzz_objmeta
from jscore import auth, kv, objstore
from jscore.errors import CredentialsError
from jscore.headers import Headers

FUZZ_DIR = Path(fuzz_kv.__file__).resolve().parent
TARGETS: dict[str, Callable[[bytes], None]] = {
    "creds": fuzz_creds.one_input,
    "kv": fuzz_kv.one_input,
    "objmeta": fuzz_objmeta.one_input,
}
SEEDS = sorted((name, path) for name in TARGETS for path in (FUZZ_DIR / "corpus" / name).iterdir() if path.is_file())
SMOKE = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

CREDS_FRAGMENTS = [
    b"-----BEGIN NATS USER JWT-----", b"------END NATS USER JWT------", b"-----BEGIN USER NKEY SEED-----",
    b"------END USER NKEY SEED------", b"---", b"-----", b"\n", b"\r\n", b"\r", b" ", b"\t", fuzz_creds.JWT,
    fuzz_creds.SEED, fuzz_creds.SEED[:30], b"SA", b"SU", b".", b"=", b"\x00", b"\xff", b"JWT", b"SEED",
]  # fmt: skip
KV_FRAGMENTS = [
    b"NATS/1.0", b"\r\n", b": ", b"KV-Operation", b"DEL", b"PURGE", b"del", b"Nats-Marker-Reason", b"MaxAge",
    b"Remove", b"Purge", b"Nats-Rollup", b"sub", b"Nats-Subject", b"$KV.B.", b"Nats-Sequence", b"5",
    b"Nats-Time-Stamp", b"\x00", b"k", b".", b"*", b">", b"/", b"\x80", b"\x01", b"\x08", b" 404",
]  # fmt: skip
OBJ_FRAGMENTS = [
    b"{", b"}", b"[", b"]", b",", b":", b'"name"', b'"nuid"', b'"size"', b'"chunks"', b'"digest"', b'"options"',
    b'"link"', b'"max_chunk_size"', b'"headers"', b'"bucket"', b'"o"', b'">"', b'"a.b"', b'""', b"-1", b"0",
    b"null", b'"SHA-256=ungWv48Bz-pBQUDeXa4iI7ADYaOWF3qctBD_YfIAFa0="', b"=", b"\xff", b"\\ud800",
]  # fmt: skip


def test_corpora_are_seeded() -> None:
    for name in TARGETS:
        files = [p for p in (FUZZ_DIR / "corpus" / name).iterdir() if p.is_file()]
        assert len(files) >= 20, f"fuzz/corpus/{name} needs its seeds"


@pytest.mark.parametrize(("target", "path"), SEEDS, ids=[f"{t}/{p.name}" for t, p in SEEDS])
def test_seed(target: str, path: Path) -> None:
    TARGETS[target](path.read_bytes())


# ----------------------------------------------------------------------------- creds


@SMOKE
@given(st.binary(max_size=200))
@example(b"")
@example(fuzz_creds.SEED)
def test_creds_random_bytes(data: bytes) -> None:
    fuzz_creds.one_input(data)


@SMOKE
@given(st.lists(st.sampled_from(CREDS_FRAGMENTS) | st.binary(max_size=3), max_size=16).map(b"".join))
def test_creds_fragments(data: bytes) -> None:
    fuzz_creds.one_input(data)


def test_creds_parse_what_they_should() -> None:
    out = fuzz_creds.check_file(fuzz_creds.CREDS % (fuzz_creds.JWT, fuzz_creds.SEED))
    assert out["creds"] == ("creds", fuzz_creds.JWT.decode(), fuzz_creds.SEED)
    assert out["seed"] == ("seed", fuzz_creds.SEED)
    assert fuzz_creds.check_file(b"nothing")["creds"][0] == "error"


def test_creds_harness_catches_a_secret_in_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    real = auth.check_user_seed

    def leaky(seed: bytes | bytearray) -> None:
        try:
            real(seed)
        except CredentialsError:
            raise CredentialsError(f"bad seed {bytes(seed)[:20]!r}") from None

    monkeypatch.setattr(fuzz_creds, "check_user_seed", leaky)
    with pytest.raises(AssertionError, match="part of the input"):
        fuzz_creds.one_input(fuzz_creds.SEED[:-1] + b"A")


def test_creds_harness_catches_a_secret_in_the_cause(monkeypatch: pytest.MonkeyPatch) -> None:
    def leaky(data: bytes | bytearray) -> tuple[str, bytearray]:
        try:
            raise ValueError(bytes(data))
        except ValueError as exc:
            raise CredentialsError("unreadable") from exc

    monkeypatch.setattr(fuzz_creds, "parse_creds", leaky)
    with pytest.raises(AssertionError, match="part of the input"):
        fuzz_creds.one_input(fuzz_creds.SEED)


def test_creds_harness_catches_a_line_end_difference(monkeypatch: pytest.MonkeyPatch) -> None:
    real = auth.parse_creds

    def lf_only(data: bytes | bytearray) -> tuple[str, bytearray]:
        if b"\r" in data:
            raise CredentialsError("no CR LF here")
        return real(data)

    monkeypatch.setattr(fuzz_creds, "parse_creds", lf_only)
    with pytest.raises(AssertionError):
        fuzz_creds.one_input(b"")


def test_creds_harness_lets_untyped_errors_escape(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(data: bytes | bytearray) -> bytearray:
        raise IndexError("not a CredentialsError")

    monkeypatch.setattr(fuzz_creds, "parse_seed", boom)
    with pytest.raises(IndexError):
        fuzz_creds.one_input(b"x")


# ----------------------------------------------------------------------------- kv


@SMOKE
@given(st.binary(max_size=200))
@example(b"")
@example(b"KV-Operation: DEL\x00a.b\x00\x01\x03\x00")
def test_kv_random_bytes(data: bytes) -> None:
    fuzz_kv.one_input(data)


@SMOKE
@given(st.lists(st.sampled_from(KV_FRAGMENTS) | st.binary(max_size=3), max_size=20).map(b"".join))
def test_kv_fragments(data: bytes) -> None:
    fuzz_kv.one_input(data)


@SMOKE
@given(st.text(alphabet="ab.*>/=_-é ", max_size=10), st.binary(max_size=40))
def test_kv_names_and_scripts(key: str, script: bytes) -> None:
    fuzz_kv.one_input(b"A: b\x00" + key.encode() + b"\x00" + script)


def test_kv_same_entry_both_ways() -> None:
    via_get, via_direct = fuzz_kv.check_stored(b"NATS/1.0\r\nKV-Operation: DEL\r\n\r\n", "a.b", 7, 123, b"")
    assert via_get == via_direct and via_get is not None
    assert fuzz_kv.check_entry(via_get).operation is kv.KeyValueOp.DEL  # type: ignore[arg-type]


def test_kv_harness_catches_a_lost_value(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bug this target found: a message with an empty marker reason read as a purge."""
    def greedy(headers: Headers | None) -> kv.KeyValueOp:
        return kv.KeyValueOp.PURGE if headers and "Nats-Marker-Reason" in headers else kv.KeyValueOp.PUT

    monkeypatch.setattr(kv, "operation_of", greedy)
    with pytest.raises(AssertionError):
        fuzz_kv.one_input(b"Nats-Marker-Reason: \x00k\x00\x00value")


def test_kv_harness_catches_a_watcher_that_repeats(monkeypatch: pytest.MonkeyPatch) -> None:
    def forgetful(self: kv.WatchState, subject: str, data: bytes, headers: Headers | None, stream_seq: int,
                  timestamp: object, num_pending: int) -> list[object]:
        return [kv.entry_from_delivery("B", subject, data, headers, stream_seq, timestamp, num_pending)]  # type: ignore[arg-type]

    monkeypatch.setattr(kv.WatchState, "delivered", forgetful)
    with pytest.raises(AssertionError):
        fuzz_kv.check_watch(bytes([0x01, 0x03, 0x09, 0x02, 0x09, 0x02, 0x09]))


def test_kv_harness_catches_a_lax_key_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kv, "check_key", lambda key: key)
    with pytest.raises(AssertionError):
        fuzz_kv.one_input(b"A: b\x00a..b")


# ----------------------------------------------------------------------------- objmeta


@SMOKE
@given(st.binary(max_size=200))
@example(b"")
@example(b'">"')
def test_objmeta_random_bytes(data: bytes) -> None:
    fuzz_objmeta.one_input(data)


@SMOKE
@given(st.lists(st.sampled_from(OBJ_FRAGMENTS) | st.binary(max_size=3), max_size=20).map(b"".join))
def test_objmeta_fragments(data: bytes) -> None:
    fuzz_objmeta.one_input(data)


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**65), max_value=2**65) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.sampled_from(["name", "nuid", "size", "chunks", "digest", "options", "link", "bucket",
                                       "max_chunk_size", "headers", "deleted"]), inner, max_size=4),
    max_leaves=10,
)  # fmt: skip


@SMOKE
@given(_json_values)
def test_objmeta_structured(value: object) -> None:
    fuzz_objmeta.one_input(json.dumps(value).encode())


@SMOKE
@given(st.text(max_size=20))
def test_objmeta_names(name: str) -> None:
    fuzz_objmeta.one_input(name.encode("utf-8", "surrogatepass"))


def test_objmeta_harness_catches_a_wildcard_nuid(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bug this target found: a stored nuid of '>' made put and delete purge every chunk."""
    monkeypatch.setattr(objstore, "_unusable", lambda info: None)
    with pytest.raises(AssertionError):
        fuzz_objmeta.one_input(b'">"')


def test_objmeta_harness_catches_a_lax_digest_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    import base64

    monkeypatch.setattr(objstore, "digest_bytes", lambda d: base64.urlsafe_b64decode(d.partition("=")[2] + "=="))
    with pytest.raises(AssertionError):
        fuzz_objmeta.one_input(b"")


def test_objmeta_harness_lets_untyped_errors_escape(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(data: bytes, mtime: object = None) -> object:
        raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "not a BadObjectMetaError")

    monkeypatch.setattr(objstore, "decode_info", boom)
    with pytest.raises(UnicodeDecodeError):
        fuzz_objmeta.one_input(b"{}")
