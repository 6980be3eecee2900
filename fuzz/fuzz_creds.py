"""Fuzz target: credentials and seed files (:func:`jscore.auth.parse_creds`, :func:`jscore.auth.parse_seed`).

The input is the content of a ``.creds`` file (the ``nsc`` format: a ``-----BEGIN NATS USER
JWT-----`` block and a ``-----BEGIN USER NKEY SEED-----`` block) or of a seed file. Besides the
raw bytes, the input is spliced into a well-formed creds file (as the JWT, as the seed, as the
text between the blocks, as a marker line), and every file is also tried with CR LF line ends.

Invariants, whatever the bytes:

* ``parse_creds`` returns ``(jwt: str, seed: bytearray)`` and ``parse_seed`` a ``bytearray``,
  or they raise :class:`~jscore.errors.CredentialsError`; nothing else escapes;
* what they return is what the file holds: the JWT is three base64url parts, the seed 58
  base32 characters starting ``SU`` whose CRC-16 (computed here independently, with
  :func:`binascii.crc_hqx`) matches, and both are lines of the file (surrounding whitespace
  aside); ``looks_like_seed`` accepts the seed;
* no secret in an error: the error's message and ``args`` (and those of the cause and context
  Python prints with it) hold no run of 12 or more characters of a token of
  the input (a JWT, a seed or any other run of base64/base32 characters);
  :class:`~jscore.auth.Credentials` built from a parsed file shows no value in its ``repr``;
* line ends do not matter: a file with LF line ends and the same with CR LF give the same
  outcome (same values, or the same error message); checked on the raw input and on one of
  the spliced files (which one depends on the input's length);
* the caller's buffer is left as it was (the parser wipes its own copies only).

Run it long with atheris (see fuzz/README.md)::

    pip install atheris
    python -m fuzz --minutes 10 creds
"""

from __future__ import annotations

import base64
import binascii
import re
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fuzz._runner import run
from jscore.auth import Credentials, check_user_seed, looks_like_seed, parse_creds, parse_seed
from jscore.errors import CredentialsError

__all__ = ["TEMPLATES", "make_seed", "error_text", "check_file", "one_input"]

JWT = (
    b"eyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ"
    b".eyJqdGkiOiJGVVpaIiwiaWF0IjoxNzAwMDAwMDAwLCJzdWIiOiJVQUJDIn0"
    b".c2lnbmF0dXJlLW9mLXRoZS1vcGVyYXRvci1rZXk"
)


def make_seed(body: bytes, prefix: bytes = b"SU") -> bytes:
    """A seed with a valid checksum: ``prefix`` (the role) and 32 bytes of key material,
    encoded as nkeys encode them (base32 without padding, CRC-16/XMODEM little-endian)."""
    seed_prefix = 18 << 3  # nkeys' prefix bytes: S (seed), then the role's: U A O N C
    role = {b"SU": 20, b"SA": 0, b"SO": 14, b"SN": 13, b"SC": 2}[prefix] << 3
    raw = bytes([seed_prefix | (role >> 5), (role & 31) << 3]) + body[:32].ljust(32, b"\x00")
    crc = binascii.crc_hqx(raw, 0).to_bytes(2, "little")
    return base64.b32encode(raw + crc).rstrip(b"=")


SEED = make_seed(bytes(range(32)))
CREDS = (
    b"-----BEGIN NATS USER JWT-----\n%s\n------END NATS USER JWT------\n\n"
    b"************************* IMPORTANT *************************\n"
    b"NKEY Seed printed below can be used to sign and prove identity.\n\n"
    b"-----BEGIN USER NKEY SEED-----\n%s\n------END USER NKEY SEED------\n\n"
    b"*************************************************************\n"
)
TEMPLATES: tuple[bytes, ...] = (
    CREDS % (b"%s", SEED),
    CREDS % (JWT, b"%s"),
    b"-----BEGIN NATS USER JWT-----\n" + JWT + b"\n------END NATS USER JWT------\n%s\n"
    b"-----BEGIN USER NKEY SEED-----\n" + SEED + b"\n------END USER NKEY SEED------\n",
    b"%s\n" + JWT + b"\n------END NATS USER JWT------\n-----BEGIN USER NKEY SEED-----\n" + SEED + b"\n-----END-----\n",
)
"""Creds files with a hole (``%s``) for the fuzzer's bytes."""

_RUN = 12
_SEED_SHAPE = re.compile(rb"SU[A-Z2-7]{56}")
_JWT_SHAPE = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")


def error_text(exc: BaseException) -> str:
    """Everything an error shows of itself: its message and the ``repr`` of its arguments, and
    the same for the causes and contexts Python prints with it (source lines and file names of
    a traceback are not the error's)."""
    shown: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        shown.append(str(current))
        shown.extend(repr(a) for a in current.args)
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    return "\n".join(shown)


_ERROR_RUN = re.compile(r"[A-Za-z0-9_\-.=+/]{%d,}" % _RUN)


def _check_error(exc: CredentialsError, data: bytes) -> None:
    """No run of ``_RUN`` token characters is both in what the error shows and in the input.
    (Such a run lies inside a run of token characters of the error's text: those are few and
    short, so they are the ones searched for in the input.)"""
    text = error_text(exc)
    for m in _ERROR_RUN.finditer(text):
        run = m.group().encode("utf-8", "backslashreplace")
        for i in range(len(run) - _RUN + 1):
            window = run[i:i + _RUN]
            assert window not in data, f"error shows part of the input: {window!r} in {str(exc)!r}"


def _lines(data: bytes) -> set[bytes]:
    return {line.strip() for line in data.splitlines()}


def _check_seed(seed: object, data: bytes) -> None:
    assert isinstance(seed, bytearray), type(seed)
    assert _SEED_SHAPE.fullmatch(seed), seed
    raw = base64.b32decode(bytes(seed) + b"======")
    assert binascii.crc_hqx(raw[:-2], 0) == int.from_bytes(raw[-2:], "little"), "checksum"
    assert bytes(seed) in _lines(data), "the seed is not a line of the file"
    assert looks_like_seed(seed.decode())


def _outcome(fn: object, data: bytes) -> tuple[object, ...]:
    """Run one parser on a copy of ``data`` the caller keeps; returns its outcome as a tuple."""
    assert callable(fn)
    buffer = bytearray(data)
    try:
        value = fn(buffer)
    except CredentialsError as exc:
        assert buffer == data, "the parser changed the caller's buffer"
        _check_error(exc, data)
        return ("error", str(exc))
    assert buffer == data, "the parser changed the caller's buffer"
    if fn is parse_seed:
        _check_seed(value, data)
        return ("seed", bytes(value))
    assert isinstance(value, tuple) and len(value) == 2, value
    jwt, seed = value
    assert isinstance(jwt, str) and _JWT_SHAPE.fullmatch(jwt), jwt
    assert jwt.encode() in _lines(data), "the JWT is not a line of the file"
    _check_seed(seed, data)
    creds = Credentials(jwt=jwt, sign=lambda nonce: bytes(64))
    assert jwt not in repr(creds) and jwt[:_RUN] not in repr(creds), repr(creds)
    return ("creds", jwt, bytes(seed))


def check_file(data: bytes, crlf: bool = True) -> dict[str, tuple[object, ...]]:
    """Both parsers on ``data``, and (``crlf``) on ``data`` with CR LF line ends; returns the
    outcomes."""
    out = {"creds": _outcome(parse_creds, data), "seed": _outcome(parse_seed, data)}
    if crlf and b"\r" not in data:
        crlf = data.replace(b"\n", b"\r\n")
        for name, fn in (("creds", parse_creds), ("seed", parse_seed)):
            other = _outcome(fn, crlf)
            assert other == out[name], (name, out[name], other)
    return out


def one_input(data: bytes) -> None:
    """The fuzz entry point: raises only when an invariant is broken."""
    check_file(data)
    if len(data) <= 4096:
        pick = len(data) % len(TEMPLATES)  # (CR LF on one template per input: the parser is the slow part)
        for i, template in enumerate(TEMPLATES):
            check_file(template.replace(b"%s", data, 1), crlf=i == pick)
    try:
        check_user_seed(data)
    except CredentialsError as exc:
        _check_error(exc, data)
    else:
        assert _SEED_SHAPE.fullmatch(data), data


def main(argv: list[str]) -> None:
    run(argv, one_input)


if __name__ == "__main__":
    main(sys.argv)
