"""JetStream API models: msgspec Structs named and shaped as nats-server's JSON.

Conventions: durations are float seconds in Python and integer nanoseconds on the wire; enums
hold the wire strings; server-defaulted fields are left unset (``None``) so they are not sent;
unknown response fields are ignored; one cached decoder per response type.
"""

from __future__ import annotations

from typing import Any, Final, TypeVar

import msgspec

from .errors import JetStreamAPIError, JetStreamError, api_error

__all__ = ["ApiError", "PubAck", "decode_pub_ack", "decode_response", "encode"]

T = TypeVar("T")


class ApiError(msgspec.Struct, frozen=True):
    """The ``error`` object of a failed JetStream API response."""

    code: int
    err_code: int = 0
    description: str = ""

    def to_exception(self) -> JetStreamAPIError:
        return api_error(self.code, self.err_code, self.description)


class PubAck(msgspec.Struct, frozen=True, kw_only=True):
    """The acknowledgement of a stored (or deduplicated) message."""

    stream: str
    seq: int
    duplicate: bool = False
    domain: str | None = None


class _PubAckResponse(msgspec.Struct, frozen=True, kw_only=True):
    error: ApiError | None = None
    stream: str = ""
    seq: int = 0
    duplicate: bool = False
    domain: str | None = None


_pub_ack_decoder: Final = msgspec.json.Decoder(_PubAckResponse)
_decoders: dict[Any, Any] = {}
_encoder: Final = msgspec.json.Encoder()


def decode_pub_ack(data: bytes) -> PubAck:
    """Decode a PubAck reply; an error body raises its typed :class:`JetStreamAPIError`."""
    try:
        r = _pub_ack_decoder.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise JetStreamError(f"invalid PubAck {data[:128]!r}: {exc}") from exc
    if r.error is not None:
        raise r.error.to_exception()
    if not r.stream or r.seq <= 0:
        raise JetStreamError(f"invalid PubAck (no stream or sequence): {data[:128]!r}")
    return PubAck(stream=r.stream, seq=r.seq, duplicate=r.duplicate, domain=r.domain)


def decode_response(data: bytes, type_: type[T]) -> T:
    """Decode an API response into ``type_`` (whose Struct has an ``error`` field or not),
    raising the typed error for an error body. Decoders are cached per type."""
    try:
        err = _error_probe.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise JetStreamError(f"invalid JetStream API response {data[:128]!r}: {exc}") from exc
    if err.error is not None:
        raise err.error.to_exception()
    dec = _decoders.get(type_)
    if dec is None:
        dec = _decoders[type_] = msgspec.json.Decoder(type_)
    try:
        result: T = dec.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise JetStreamError(f"invalid JetStream API response for {type_.__name__}: {exc}") from exc
    return result


class _ErrorProbe(msgspec.Struct, frozen=True):
    error: ApiError | None = None


_error_probe: Final = msgspec.json.Decoder(_ErrorProbe)


def encode(value: Any) -> bytes:
    return _encoder.encode(value)
