"""Fuzz target: JetStream API JSON decoding (:mod:`jscore.models`, :func:`jscore.publish.decode_ack`).

Invariant: whatever the bytes, decoding an API response into ``StreamInfo``, ``ConsumerInfo``,
``AccountInfo`` (:func:`jscore.models.decode_response`) or a PubAck
(:func:`jscore.publish.decode_ack`, :func:`jscore.models.decode_pub_ack`) returns a value of the
expected type or raises :class:`~jscore.errors.JetStreamError` (an API error body raises its typed
:class:`~jscore.errors.JetStreamAPIError` subclass, which is one). Nothing else escapes: no
``msgspec.ValidationError``, ``RecursionError``, ``UnicodeDecodeError``, ``KeyError`` ...

Also checked:

* an error body (a JSON object whose ``error`` member is an object) never decodes to a value:
  every decoder raises a ``JetStreamAPIError`` whose ``code``, ``err_code`` and
  ``description`` are the body's, with the class :func:`jscore.errors.api_error` picks. This
  holds whatever else the body holds: a repeated key counts with its last value (as the
  server's JSON decoder reads it), a field of the wrong type or missing counts as 0, 0 or "";
* the PubAck fast path (``decode_ack``) and the general path (``decode_pub_ack``) agree: equal
  PubAcks, or the same error class;
* a decoded PubAck has a stream and a positive sequence.

Besides the raw bytes, the input is spliced into typical response shapes (as a PubAck's
``seq``, a stream info's ``state``, an ``error`` object ...) so the fuzzer reaches the typed
fields and not only the JSON syntax errors.

Run it long with atheris (see fuzz/README.md)::

    pip install atheris
    python fuzz/fuzz_apijson.py fuzz/corpus/apijson -max_total_time=3600
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import msgspec

from fuzz._runner import run
from jscore.errors import JetStreamAPIError, JetStreamError, api_error
from jscore.models import AccountInfo, ConsumerInfo, PubAck, StreamInfo, decode_pub_ack, decode_response
from jscore.publish import decode_ack

__all__ = ["DECODERS", "TEMPLATES", "check_json", "one_input"]

DECODERS: dict[str, tuple[Callable[[bytes], Any], type]] = {
    "stream_info": (lambda d: decode_response(d, StreamInfo), StreamInfo),
    "consumer_info": (lambda d: decode_response(d, ConsumerInfo), ConsumerInfo),
    "account_info": (lambda d: decode_response(d, AccountInfo), AccountInfo),
    "pub_ack": (decode_ack, PubAck),
    "pub_ack_slow": (decode_pub_ack, PubAck),
}

TEMPLATES: tuple[bytes, ...] = (
    b'{"stream":"S","seq":%s}',
    b'{"stream":%s,"seq":1}',
    b'{"error":%s}',
    b'{"error":{"code":503,"err_code":10077,"description":%s}}',
    b'{"config":{"name":"S"},"state":%s}',
    b'{"config":%s,"created":"2024-01-01T00:00:00Z"}',
    b'{"stream_name":"S","name":"C","config":{"ack_policy":%s},"delivered":{"consumer_seq":1,"stream_seq":2}}',
    b'{"memory":0,"limits":%s,"api":{"total":1,"errors":0}}',
)
"""Response shapes with a hole (``%s``) for the fuzzer's bytes."""


def _error_body(data: bytes) -> tuple[int, int, str] | None:
    """The (code, err_code, description) of an error body, read independently of jscore: an
    untyped decode (a repeated key keeps its last value), a field of the wrong type counts as
    absent; None when ``data`` is not a JSON object with an ``error`` object."""
    try:
        obj = msgspec.json.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None
    err = obj.get("error")
    if not isinstance(err, dict):
        return None
    code, err_code, description = err.get("code"), err.get("err_code"), err.get("description")
    return (
        code if type(code) is int else 0,
        err_code if type(err_code) is int else 0,
        description if type(description) is str else "",
    )


def _outcome(fn: Callable[[bytes], Any], want: type, data: bytes) -> Any:
    """The decoded value or the JetStreamError raised; anything else propagates (a crash)."""
    try:
        value = fn(data)
    except JetStreamError as exc:
        return exc
    assert isinstance(value, want), (type(value), want)
    return value


def check_json(data: bytes) -> dict[str, Any]:
    """Check the invariant on one body; return each decoder's outcome by name."""
    outcomes = {name: _outcome(fn, want, data) for name, (fn, want) in DECODERS.items()}
    expected = _error_body(data)
    if expected is not None:
        want_cls = type(api_error(*expected))
        for name, out in outcomes.items():
            assert isinstance(out, JetStreamAPIError), (name, out)  # never a value, always typed
            assert type(out) is want_cls, (name, type(out), want_cls)
            assert (out.code, out.err_code, out.description) == expected, (name, out)
    fast, slow = outcomes["pub_ack"], outcomes["pub_ack_slow"]
    if isinstance(fast, PubAck) or isinstance(slow, PubAck):
        assert fast == slow, (fast, slow)
        assert fast.stream and fast.seq > 0, fast
    else:
        assert type(fast) is type(slow), (fast, slow)
    return outcomes


def one_input(data: bytes) -> None:
    """The fuzz entry point: raises only when the invariant is broken."""
    check_json(data)
    if len(data) <= 4096:
        for template in TEMPLATES:
            check_json(template % data)


def main(argv: list[str]) -> None:
    run(argv, one_input)


if __name__ == "__main__":
    main(sys.argv)
