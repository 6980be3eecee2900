"""Fuzz target: the object store's metadata (:mod:`jscore.objstore`).

The input is an object's metadata document (the JSON of an ``ObjectInfo``, as another client
stored it on ``$O.<bucket>.M.<name>``), also spliced into typical documents (as the ``nuid``,
the ``name``, the ``digest``, ``options``, ``headers``, ``size`` ...). Its text (UTF-8 with
lone surrogates allowed, latin-1 when it is not UTF-8) is also tried as an object name and as
a digest string.

Invariants, whatever the bytes:

* :func:`~jscore.objstore.decode_info` returns an :class:`ObjectInfo` or raises
  :class:`~jscore.errors.BadObjectMetaError`, nothing else; ``mtime`` is the one given;
* a decoded info is usable as it is: its name is an object name (whose metadata subject can
  be built unless it is too long, as above); its ``nuid`` is empty or one literal subject token (the reader subscribes to, and a
  put or delete purges, ``$O.<bucket>.C.<nuid>``: a ``>`` there would reach every object of
  the bucket); size, chunk count and ``max_chunk_size`` are not negative; and it is written
  back as it was read (``decode_info(encode_meta(info))`` is the info: ``update_meta``
  rewrites what it read);
* :func:`~jscore.objstore.check_object_name` returns the name or raises
  :class:`~jscore.errors.InvalidObjectNameError`; an accepted name's subject is a literal
  subject whose last token is the padded base64url of the name's UTF-8, which decodes back to
  the name, or, exactly when that subject would be over ``MAX_SUBJECT_BYTES``,
  ``meta_subject`` raises ``InvalidObjectNameError`` (as it does for a refused name);
* :func:`~jscore.objstore.digest_bytes` returns 32 bytes or raises
  :class:`~jscore.errors.DigestMismatchError`; it accepts ``SHA-256=`` (the prefix in any case)
  and the base64url of 32 bytes (43 characters, with or without its ``=``) and nothing else;
  ``digest_string`` of the bytes reads back to them; :func:`~jscore.objstore.check_digest`
  passes exactly for those bytes, else raises ``DigestMismatchError``.

Run it long with atheris (see fuzz/README.md)::

    pip install atheris
    python -m fuzz --minutes 10 objmeta
"""

from __future__ import annotations

import base64
import hashlib
import re
import sys
from datetime import datetime, timezone
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import msgspec

from fuzz._runner import run
from jscore import objstore as O
from jscore.errors import BadObjectMetaError, BadSubjectError, DigestMismatchError, InvalidObjectNameError
from jscore.models import ObjectInfo
from jscore.protocol import MAX_SUBJECT_BYTES, check_publish_subject

__all__ = ["TEMPLATES", "check_info", "check_name", "check_digest_text", "one_input"]

BUCKET = "B"
MTIME = datetime(2026, 11, 25, 1, 2, 3, 456789, tzinfo=timezone.utc)
TEMPLATES: tuple[bytes, ...] = (
    b'{"name":"o","bucket":"B","nuid":%s,"size":3,"chunks":1,"digest":"SHA-256=ungWv48Bz-pBQUDeXa4iI7ADYaOWF3qctBD_YfIAFa0="}',
    b'{"name":%s,"bucket":"B","nuid":"N","size":0,"chunks":0}',
    b'{"name":"o","bucket":"B","nuid":"N","size":3,"chunks":1,"digest":%s}',
    b'{"name":"o","bucket":"B","nuid":"N","options":%s}',
    b'{"name":"o","bucket":"B","nuid":"N","options":{"link":%s}}',
    b'{"name":"o","bucket":"B","nuid":"N","headers":%s,"metadata":{"k":"v"}}',
    b'{"name":"o","bucket":"B","nuid":"N","size":%s,"chunks":2,"mtime":"0001-01-01T00:00:00Z"}',
    b'{"name":"o","bucket":"B","nuid":"N","description":%s,"deleted":true}',
)
"""Metadata documents with a hole (``%s``) for the fuzzer's bytes."""

_DIGEST = re.compile(r"(?i:sha-256)=([A-Za-z0-9_-]{43})=?")


def _literal_subject(subject: str) -> bool:
    try:
        check_publish_subject(subject)
    except BadSubjectError:
        return False
    return True


def check_info(data: bytes) -> ObjectInfo | None:
    """Decode one document and check the invariants; the info, None when it was refused."""
    try:
        info = O.decode_info(data, MTIME)
    except BadObjectMetaError:
        try:
            O.decode_info(data)
        except BadObjectMetaError:
            return None
        raise AssertionError("decoded without mtime, refused with one") from None
    assert isinstance(info, ObjectInfo) and info.mtime == MTIME, info
    assert O.check_object_name(info.name) == info.name
    _meta_subject(info.name)
    if info.nuid:
        subject = O.chunk_subject(BUCKET, info.nuid)
        assert _literal_subject(subject) and subject.split(".")[3:] == [info.nuid], info.nuid
    assert info.size >= 0 and info.chunks >= 0, info
    if info.options is not None and info.options.max_chunk_size is not None:
        assert info.options.max_chunk_size >= 0, info.options
    again = O.decode_info(O.encode_meta(info))
    assert again == msgspec.structs.replace(info, mtime=None), (again, info)
    if isinstance(info.digest, str):
        check_digest_text(info.digest)
    return info


def _meta_subject(name: str) -> str | None:
    """The metadata subject of an accepted name: a literal subject, or None when it would be
    too long (an ``InvalidObjectNameError`` that says so, exactly when it would)."""
    too_long = len(f"$O.{BUCKET}.M.") + 4 * ((len(name.encode()) + 2) // 3) > MAX_SUBJECT_BYTES
    try:
        subject = O.meta_subject(BUCKET, name)
    except InvalidObjectNameError as exc:
        assert too_long and "too long" in str(exc), exc
        return None
    assert not too_long and _literal_subject(subject), subject
    return subject


def check_name(name: str) -> bool:
    """The name checks; returns whether ``name`` is accepted."""
    try:
        assert O.check_object_name(name) is name
    except InvalidObjectNameError:
        try:
            O.meta_subject(BUCKET, name)
        except InvalidObjectNameError:
            return False
        raise AssertionError(f"meta_subject took a name check_object_name refuses: {name!r}") from None
    subject = _meta_subject(name)
    if subject is None:
        return True
    prefix, token = subject.rsplit(".", 1)
    assert prefix == f"$O.{BUCKET}.M" and re.fullmatch(r"[A-Za-z0-9_-]*=*", token), subject
    assert base64.urlsafe_b64decode(token).decode() == name
    return True


def check_digest_text(text: str) -> bytes | None:
    """The digest checks on one string; the 32 bytes, None when refused."""
    try:
        raw = O.digest_bytes(text)
    except DigestMismatchError:
        raw = None
    shape = _DIGEST.fullmatch(text)
    if raw is None:
        if shape is not None:
            canonical = base64.urlsafe_b64decode(shape.group(1) + "=")
            raise AssertionError(f"refused a well-formed digest {text!r} of {canonical.hex()}")
        try:
            O.check_digest(text, bytes(32))
        except DigestMismatchError:
            pass
        else:
            raise AssertionError(f"check_digest accepted an unreadable digest {text!r}")
        return None
    assert isinstance(raw, bytes) and len(raw) == 32, raw
    assert shape is not None, f"accepted a malformed digest {text!r}"
    assert O.digest_bytes(O.digest_string(raw)) == raw
    O.check_digest(text, raw)
    other = hashlib.sha256(raw).digest()
    try:
        O.check_digest(text, other)
    except DigestMismatchError:
        pass
    else:
        raise AssertionError("check_digest accepted other bytes")
    return raw


def one_input(data: bytes) -> None:
    """The fuzz entry point: raises only when an invariant is broken."""
    check_info(data)
    if len(data) <= 4096:
        for template in TEMPLATES:
            check_info(template % data)
    try:
        text = data.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        text = data.decode("latin-1")
    check_name(text)
    check_digest_text(text)
    check_digest_text("SHA-256=" + text)
    raw = hashlib.sha256(data).digest()
    assert check_digest_text(O.digest_string(raw)) == raw


def main(argv: list[str]) -> None:
    run(argv, one_input)


if __name__ == "__main__":
    main(sys.argv)
