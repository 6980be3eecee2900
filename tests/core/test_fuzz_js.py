"""A short run of the JetStream fuzz targets (ack metadata, status lines, API JSON): all seeds,
then a few hundred hypothesis inputs each, and checks that each harness can fail.

The long runs are external (atheris, see fuzz/README.md); this keeps the targets and their
invariants working in the normal test run, like tests/core/test_fuzz_smoke.py for the wire.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fuzz import fuzz_ackmeta, fuzz_apijson, fuzz_status
from jscore.errors import RemoteProtocolError
from jscore.headers import Headers
from jscore.jsmsg import MsgMetadata

FUZZ_DIR = Path(fuzz_ackmeta.__file__).resolve().parent
TARGETS: dict[str, Callable[[bytes], None]] = {
    "ackmeta": fuzz_ackmeta.one_input,
    "status": fuzz_status.one_input,
    "apijson": fuzz_apijson.one_input,
}
SEEDS = sorted((name, path) for name in TARGETS for path in (FUZZ_DIR / "corpus" / name).iterdir() if path.is_file())
SMOKE = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Seeds that reproduce a bug found by a target in code this target does not own. strict: once the
# bug is fixed the seed passes, the xfail turns into a failure, and this entry must go.
KNOWN_FAILURES: dict[tuple[str, str], str] = {}

ACK_FRAGMENTS = [
    "$JS.ACK.", "$JS.", "ACK.", ".", "_", "S", "C", "0", "1", "9", "18446744073709551615", "18446744073709551616",
    "00", "-1", "+1", "²", "٣", " ", "hub.", "ACC.", "tok", "é",
]  # fmt: skip
STATUS_FRAGMENTS = [
    b"NATS/1.0", b" ", b"100", b"404", b"408", b"409", b"423", b"503", b"204", b"4O9", b"1000",
    b"Idle Heartbeat", b"FlowControl Request", b"No Messages", b"Request Timeout", b"Consumer Deleted",
    b"Batch Completed", b"Leadership Change", b"Nats-Wrong-Pin-Id", b"EOB", b"\r\n", b"\r", b"\n", b"\t",
    b"Nats-Pending-Messages: 5", b"Nats-Pending-Bytes: 10", b"Nats-Pin-Id: x", b"Status: 503", b":", b"\x00", b"\xff",
]  # fmt: skip
JSON_FRAGMENTS = [
    b"{", b"}", b"[", b"]", b",", b":", b'"stream"', b'"seq"', b'"error"', b'"code"', b'"err_code"',
    b'"description"', b'"config"', b'"name"', b'"state"', b'"created"', b'"max_age"', b'"retention"',
    b'"ack_policy"', b'"delivered"', b'"limits"', b'"S"', b'"2024-01-01T00:00:00Z"', b'"0001-01-01T00:00:00Z"',
    b"0", b"1", b"-1", b"10059", b"10077", b"1e400", b"1.5", b"true", b"null", b'"\\ud800"', b'"\xff"',
]  # fmt: skip


def test_corpora_are_seeded() -> None:
    for name in TARGETS:
        files = [p for p in (FUZZ_DIR / "corpus" / name).iterdir() if p.is_file()]
        assert len(files) >= 20, f"fuzz/corpus/{name} needs its seeds"


def _seed_params() -> list[Any]:
    params = []
    for target, path in SEEDS:
        reason = KNOWN_FAILURES.get((target, path.name))
        marks = [pytest.mark.xfail(reason=reason, strict=True, raises=RecursionError)] if reason else []
        params.append(pytest.param(target, path, marks=marks, id=f"{target}/{path.name}"))
    return params


@pytest.mark.parametrize(("target", "path"), _seed_params())
def test_seed(target: str, path: Path) -> None:
    TARGETS[target](path.read_bytes())


# ----------------------------------------------------------------------------- ackmeta


@SMOKE
@given(st.binary(max_size=120))
@example(b"")
@example(b"$JS.ACK.S.C.1.2.3.4.5")
def test_ackmeta_random_bytes(data: bytes) -> None:
    fuzz_ackmeta.one_input(data)


@SMOKE
@given(st.lists(st.sampled_from(ACK_FRAGMENTS) | st.text(max_size=3), max_size=24).map("".join))
def test_ackmeta_fragments(text: str) -> None:
    fuzz_ackmeta.one_input(text.encode("utf-8", "surrogatepass"))


@SMOKE
@given(
    st.lists(st.sampled_from(["S", "C", "_", "hub", "0", "7", "18446744073709551615", "01", ""]), min_size=7, max_size=12)
)
def test_ackmeta_token_lists(tokens: list[str]) -> None:
    """Well-formed shapes with a random token in each place: reaches the number checks."""
    fuzz_ackmeta.one_input(("$JS.ACK." + ".".join(tokens)).encode())


def test_ackmeta_parses_what_it_should() -> None:
    meta = fuzz_ackmeta.check_ack_subject("$JS.ACK.hub.ACC.S.C.1.2.3.4.5.tok")
    assert isinstance(meta, MsgMetadata) and meta.domain == "hub"
    assert fuzz_ackmeta.check_ack_subject("$JS.ACK.S.C.1.2.3.4") is None


def test_ackmeta_harness_catches_a_lossy_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    from jscore.jsmsg import parse_ack_subject as real

    def lossy(subject: str) -> MsgMetadata:
        import msgspec

        return msgspec.structs.replace(real(subject), token=None)

    monkeypatch.setattr(fuzz_ackmeta, "parse_ack_subject", lossy)
    with pytest.raises(AssertionError):
        fuzz_ackmeta.one_input(b"$JS.ACK.d.h.S.C.1.2.3.4.5.tok")


def test_ackmeta_harness_lets_unexpected_exceptions_escape(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(subject: str) -> MsgMetadata:
        raise ValueError("not the typed error")

    monkeypatch.setattr(fuzz_ackmeta, "parse_ack_subject", boom)
    with pytest.raises(ValueError, match="typed"):
        fuzz_ackmeta.one_input(b"x")


# ----------------------------------------------------------------------------- status


@SMOKE
@given(st.binary(max_size=120))
@example(b"")
@example(b"NATS/1.0 100 Idle Heartbeat\r\n\r\n")
def test_status_random_bytes(data: bytes) -> None:
    fuzz_status.one_input(data)


@SMOKE
@given(st.lists(st.sampled_from(STATUS_FRAGMENTS) | st.binary(max_size=3), max_size=16).map(b"".join))
def test_status_fragments(data: bytes) -> None:
    fuzz_status.one_input(data)


def test_status_agrees_with_the_parser() -> None:
    parsed = fuzz_status.check_status(b"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 5\r\n\r\n")
    assert parsed is not None
    headers, status, description = parsed
    assert (status, description, headers["Nats-Pending-Messages"]) == (408, "Request Timeout", "5")
    assert fuzz_status.check_status(b"NATS/1.0 4O9 x\r\n\r\n") is None


def test_status_harness_catches_a_disagreeing_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    def wrong(block: bytes) -> tuple[Headers, int | None, str | None]:
        return Headers(), 999, "made up"

    monkeypatch.setattr(fuzz_status, "parse_header_block", wrong)
    with pytest.raises(AssertionError):
        fuzz_status.one_input(b"NATS/1.0 100 Idle Heartbeat\r\n\r\n")


def test_status_harness_lets_unexpected_exceptions_escape(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(block: bytes) -> tuple[Headers, int | None, str | None]:
        raise KeyError("not a RemoteProtocolError")

    monkeypatch.setattr(fuzz_status, "parse_header_block", boom)
    with pytest.raises(KeyError):
        fuzz_status.one_input(b"NATS/1.0 503\r\n\r\n")
    assert issubclass(RemoteProtocolError, Exception)


# ----------------------------------------------------------------------------- apijson


@SMOKE
@given(st.binary(max_size=200))
@example(b"")
@example(b'{"stream":"S","seq":1}')
def test_apijson_random_bytes(data: bytes) -> None:
    fuzz_apijson.one_input(data)


@SMOKE
@given(st.lists(st.sampled_from(JSON_FRAGMENTS) | st.binary(max_size=2), max_size=24).map(b"".join))
def test_apijson_fragments(data: bytes) -> None:
    fuzz_apijson.one_input(data)


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(["stream", "seq", "code", "name", "config", "error", "err_code", "description", "state", "x"]), inner, max_size=4),
    max_leaves=12,
)  # fmt: skip


@SMOKE
@given(_json_values)
def test_apijson_structured(value: object) -> None:
    import json

    fuzz_apijson.one_input(json.dumps(value, allow_nan=True).encode())


def test_apijson_error_bodies_are_typed() -> None:
    from jscore.errors import MaxMsgsPerSubjectError, StreamNotFoundError

    out = fuzz_apijson.check_json(b'{"error":{"code":404,"err_code":10059,"description":"stream not found"}}')
    assert all(isinstance(v, StreamNotFoundError) for v in out.values())
    body = b'{"error":{"code":503,"err_code":10077,"description":"maximum messages per subject exceeded"}}'
    assert all(isinstance(v, MaxMsgsPerSubjectError) for v in fuzz_apijson.check_json(body).values())


def test_apijson_harness_lets_untyped_errors_escape(monkeypatch: pytest.MonkeyPatch) -> None:
    def leaky(data: bytes) -> object:
        raise TypeError("not a JetStreamError")

    monkeypatch.setitem(fuzz_apijson.DECODERS, "pub_ack", (leaky, object))
    with pytest.raises(TypeError):
        fuzz_apijson.one_input(b"{}")


def test_apijson_harness_catches_disagreeing_pub_ack_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    from jscore.models import PubAck, decode_pub_ack

    def off_by_one(data: bytes) -> PubAck:
        ack = decode_pub_ack(data)
        return PubAck(stream=ack.stream, seq=ack.seq + 1)

    monkeypatch.setitem(fuzz_apijson.DECODERS, "pub_ack", (off_by_one, PubAck))
    with pytest.raises(AssertionError):
        fuzz_apijson.one_input(b'{"stream":"S","seq":1}')
