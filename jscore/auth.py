"""Authentication in the core: what CONNECT carries for nkey and JWT users, and the formats of
creds and seed files.

The core does no cryptography and reads no file. The shell injects :class:`Credentials`:

- ``sign(nonce: bytes) -> bytes``: the raw ed25519 signature (64 bytes) of the server's nonce;
- ``jwt``: the user JWT, a string or a ``() -> str`` called at each handshake (creds);
- ``nkey``: the public user nkey, a string or a ``() -> str`` (a seed without a JWT).

At every handshake the connection machine calls :func:`connect_auth_fields` with the INFO's
``nonce``; CONNECT then carries ``jwt`` or ``nkey`` and ``sig`` (the signature, base64url
without padding, as nats.go sends it). A callable that fails or returns something unusable
ends that connect attempt with :class:`~jscore.errors.CredentialsError` (nothing is sent).

The parsers (:func:`parse_creds`, :func:`parse_seed`) take the bytes of a file and return the
JWT and the seed; :func:`check_user_seed` checks a seed's form, role and checksum (CRC-16, an
encoding check, not cryptography). Every error names what is wrong, never the secret.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Union

from .errors import CredentialsError

__all__ = [
    "Credentials",
    "MAX_CREDENTIALS_FILE",
    "check_user_jwt",
    "check_user_seed",
    "connect_auth_fields",
    "encode_signature",
    "looks_like_seed",
    "parse_creds",
    "parse_seed",
]

StrSource = Union[str, Callable[[], str]]

MAX_CREDENTIALS_FILE: Final = 1 << 20
"""The largest creds or seed file read (1 MiB; a creds file is a few KiB)."""

_SIGNATURE_LEN: Final = 64
_SEED_LEN: Final = 58  # base32 of 1 prefix byte pair + 32 bytes + a 2-byte CRC (36 bytes)
_SEED_RE: Final = re.compile(rb"S[A-Z2-7]{57}")
_SEED_TEXT_RE: Final = re.compile(r"\s*S[A-Z2-7]{57}\s*")
_TOKEN_RE: Final = re.compile(rb"[A-Za-z0-9_\-.=]+")
_MARKER_RE: Final = re.compile(rb"-{3,}[^\r\n]*?-{3,}")
_B64URL_RE: Final = re.compile(r"[A-Za-z0-9_\-]+")
_ROLES: Final = {b"U": "user", b"A": "account", b"O": "operator", b"N": "server", b"C": "cluster"}


@dataclass(frozen=True, repr=False, eq=False)
class Credentials:
    """What the shell gives the core for nkey / JWT authentication. ``jwt`` and ``nkey``
    exclude each other; ``sign`` is required with either. Its repr shows no value."""

    jwt: StrSource | None = None
    nkey: StrSource | None = None
    sign: Callable[[bytes], bytes] | None = None

    def __post_init__(self) -> None:
        if self.jwt is not None and self.nkey is not None:
            raise CredentialsError("a user JWT and an nkey exclude each other (a JWT names its own nkey)")
        if self.sign is None and (self.jwt is not None or self.nkey is not None):
            raise CredentialsError("a user JWT or an nkey needs a signer for the server's nonce")
        if self.sign is not None and self.jwt is None and self.nkey is None:
            raise CredentialsError("a signer needs a user JWT or an nkey to go with it")

    def __repr__(self) -> str:
        kind = "jwt" if self.jwt is not None else "nkey" if self.nkey is not None else "none"
        return f"Credentials({kind}, values hidden)"


def encode_signature(sig: bytes) -> str:
    """A signature as CONNECT carries it: base64url without padding."""
    return base64.urlsafe_b64encode(sig).rstrip(b"=").decode("ascii")


def _text(source: StrSource, what: str) -> str:
    if callable(source):
        try:
            value = source()
        except CredentialsError:
            raise
        except Exception as exc:
            raise CredentialsError(f"{what} raised {type(exc).__name__}") from exc
    else:
        value = source
    if isinstance(value, (bytes, bytearray)):
        try:
            value = bytes(value).decode("ascii")
        except UnicodeDecodeError:
            raise CredentialsError(f"{what} returned bytes that are not ASCII") from None
    if not isinstance(value, str):
        raise CredentialsError(f"{what} returned {type(value).__name__}, expected str")
    value = value.strip()
    if not value:
        raise CredentialsError(f"{what} returned an empty string")
    return value


def connect_auth_fields(credentials: Credentials, nonce: str | None) -> dict[str, str]:
    """The CONNECT fields of ``credentials`` for a server that sent ``nonce``: ``jwt`` or
    ``nkey``, and ``sig``. Without a nonce the empty string is signed (as nats.go does; such a
    server does not check it). Raises :class:`CredentialsError`."""
    fields: dict[str, str] = {}
    if credentials.jwt is not None:
        jwt = _text(credentials.jwt, "the user JWT source")
        check_user_jwt(jwt)
        fields["jwt"] = jwt
    elif credentials.nkey is not None:
        nkey = _text(credentials.nkey, "the nkey source")
        if not re.fullmatch(r"U[A-Z2-7]{55}", nkey):
            raise CredentialsError("the nkey is not a public user nkey (56 base32 characters starting with U)")
        fields["nkey"] = nkey
    sign = credentials.sign
    if sign is not None:
        data = (nonce or "").encode()
        try:
            sig = sign(data)
        except CredentialsError:
            raise
        except Exception as exc:
            raise CredentialsError(f"signing the server's nonce raised {type(exc).__name__}") from exc
        if not isinstance(sig, (bytes, bytearray, memoryview)):
            raise CredentialsError(f"the signer returned {type(sig).__name__}, expected bytes")
        sig = bytes(sig)
        if len(sig) != _SIGNATURE_LEN:
            raise CredentialsError(
                f"the signer returned {len(sig)} bytes: expected the raw {_SIGNATURE_LEN}-byte ed25519 "
                "signature (not base64)"
            )
        fields["sig"] = encode_signature(sig)
    return fields


# --------------------------------------------------------------------------- file formats


def _blocks(data: bytes | bytearray) -> list[tuple[bytes, bytearray]]:
    """The decorated blocks of an ``nsc`` file, in order: (opening marker, token). A block is a
    marker line (three or more dashes, text, three or more dashes), the token on the next
    non-blank line, and a closing marker line. CR LF line ends, blank lines and whitespace
    around lines are tolerated; text outside blocks is ignored."""
    lines = _lines(data)
    found: list[tuple[bytes, bytearray]] = []
    i = 0
    n = len(lines)
    while i < n:
        line = lines[i].strip()
        if not _MARKER_RE.fullmatch(line):
            i += 1
            continue
        j = i + 1
        while j < n and not lines[j].strip():
            j += 1
        if j >= n:
            break
        token = lines[j].strip()
        if _MARKER_RE.fullmatch(token) or not _TOKEN_RE.fullmatch(token):
            i = j if _MARKER_RE.fullmatch(token) else j + 1
            continue
        k = j + 1
        while k < n and not lines[k].strip():
            k += 1
        if k < n and _MARKER_RE.fullmatch(lines[k].strip()):
            found.append((bytes(line).upper(), token))
            i = k + 1
        else:
            i = j + 1
    _wipe(lines)
    return found


def _lines(data: bytes | bytearray) -> list[bytearray]:
    buf = bytearray(data)
    lines = buf.splitlines()
    buf[:] = bytes(len(buf))
    return lines


def _wipe(lines: list[bytearray]) -> None:
    """Best effort (Python cannot promise it): overwrite the copies of a file's lines, which
    may hold a seed, before they are freed."""
    for line in lines:
        line[:] = bytes(len(line))


def parse_creds(data: bytes | bytearray) -> tuple[str, bytearray]:
    """The user JWT and the seed of a creds file (the ``nsc`` / ``nats context`` format): the
    block whose marker names a JWT (else the first block), and the block whose marker names a
    seed (else the second). The seed is checked with :func:`check_user_seed`."""
    if len(data) > MAX_CREDENTIALS_FILE:
        raise CredentialsError(f"the creds file is larger than {MAX_CREDENTIALS_FILE} bytes")
    blocks = _blocks(data)
    jwt_block = next((t for m, t in blocks if b"JWT" in m), None)
    seed_block = next((t for m, t in blocks if b"SEED" in m), None)
    if jwt_block is None and blocks and blocks[0][1] is not seed_block:
        jwt_block = blocks[0][1]
    if seed_block is None and len(blocks) > 1 and blocks[1][1] is not jwt_block:
        seed_block = blocks[1][1]
    if jwt_block is None:
        raise CredentialsError("the creds file has no user JWT block (-----BEGIN NATS USER JWT-----)")
    if seed_block is None:
        raise CredentialsError("the creds file has no nkey seed block (-----BEGIN USER NKEY SEED-----)")
    try:
        jwt = bytes(jwt_block).decode("ascii")
    except UnicodeDecodeError:  # pragma: no cover - the token pattern is ASCII
        raise CredentialsError("the creds file's JWT is not ASCII") from None
    check_user_jwt(jwt)
    check_user_seed(seed_block)
    return jwt, seed_block


def parse_seed(data: bytes | bytearray) -> bytearray:
    """The user seed of a seed file: a decorated seed block (as in a creds file), else the
    first line that holds a seed (``SU...``) alone. Checked with :func:`check_user_seed`."""
    if len(data) > MAX_CREDENTIALS_FILE:
        raise CredentialsError(f"the seed file is larger than {MAX_CREDENTIALS_FILE} bytes")
    blocks = _blocks(data)
    seed = next((t for m, t in blocks if b"SEED" in m), None)
    if seed is None:
        seed = next((t for _m, t in blocks if t.startswith(b"S") and not t.count(b".")), None)
    if seed is None:
        lines = _lines(data)
        seed = next((c for c in (line.strip() for line in lines) if c.startswith(b"S") and _TOKEN_RE.fullmatch(c)), None)
        _wipe(lines)
    if seed is None:
        raise CredentialsError("no nkey seed found (a line SU... or a -----BEGIN USER NKEY SEED----- block)")
    check_user_seed(seed)
    return seed


def looks_like_seed(text: str) -> bool:
    """True when ``text`` is an nkey seed itself (``S`` and 57 base32 characters) rather than
    the path of a file holding one."""
    return bool(_SEED_TEXT_RE.fullmatch(text))


def _crc16(data: bytes) -> int:
    """CRC-16/XMODEM, the checksum of nkeys (``binascii.crc_hqx`` from 0 is that CRC)."""
    return binascii.crc_hqx(data, 0)


def check_user_seed(seed: bytes | bytearray) -> None:
    """Raise :class:`CredentialsError` unless ``seed`` is a well-formed user seed (``SU`` and
    56 more base32 characters whose CRC-16 matches)."""
    if len(seed) != _SEED_LEN or not _SEED_RE.fullmatch(seed):
        raise CredentialsError(f"the nkey seed is malformed (expected {_SEED_LEN} base32 characters starting with S)")
    role = bytes(seed[1:2])
    if role != b"U":
        name = _ROLES.get(role, "unknown")
        raise CredentialsError(f"the nkey seed is {'an' if name[0] in 'aeiou' else 'a'} {name} seed (S{role.decode()}...), "
                               "not a user seed (SU...)")
    try:
        raw = base64.b32decode(bytes(seed) + b"======")
    except (binascii.Error, ValueError):  # pragma: no cover - the pattern is base32
        raise CredentialsError("the nkey seed is not valid base32") from None
    body, crc = raw[:-2], raw[-2:]
    if _crc16(body) != int.from_bytes(crc, "little"):
        raise CredentialsError("the nkey seed's checksum does not match (a truncated or mistyped seed?)")


def check_user_jwt(jwt: str) -> None:
    """Raise :class:`CredentialsError` unless ``jwt`` has the form of a JWT (three base64url
    parts; the server checks the rest)."""
    parts = jwt.split(".")
    if len(parts) != 3 or not all(_B64URL_RE.fullmatch(p) for p in parts):
        raise CredentialsError("the user JWT is malformed (expected three base64url parts separated by dots)")
