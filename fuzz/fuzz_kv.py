"""Fuzz target: the key-value store's rules (:mod:`jscore.kv`).

The input is up to four pieces separated by NUL bytes: a header block (``NATS/1.0 ...``; a piece
that does not start with it gets ``NATS/1.0\\r\\n`` in front and a blank line behind), a key,
a watcher script, a payload. Three things are driven from them.

**Entries from stored messages.** The block is read as a direct-get reply
(:func:`jscore.jsapi.stored_msg_from_direct`) and, base64-encoded in ``hdrs``, as a
``STREAM.MSG.GET`` response (:func:`jscore.models.decode_response` +
:func:`jscore.jsapi.stored_msg_from_get`); the raw bytes are also decoded as a whole
``STREAM.MSG.GET`` body. Whatever comes back goes through :func:`jscore.kv.entry_from_stored`.
Invariants:

* decoding returns or raises :class:`~jscore.errors.JetStreamError`, nothing else; building
  the entry never raises;
* the entry's operation is the one nats.go reads from the same headers: ``KV-Operation``
  exactly ``DEL`` or ``PURGE`` (its first value; an absent or empty one falls through to the
  marker), else ``Nats-Marker-Reason`` exactly ``MaxAge`` or ``Purge`` (a purge) or ``Remove``
  (a delete), anything else a put. Header names match without regard to case. A put keeps its
  value, a marker's value is empty; the revision is the sequence, ``created`` the stored time,
  the key the subject without ``$KV.<bucket>.``;
* the same message (the block's headers, a key, a sequence, a time, a payload) read as a
  direct-get reply (with the server's ``Nats-*`` headers added) and as a ``STREAM.MSG.GET``
  body gives the same entry.

**Keys, filters, buckets.** The key piece (UTF-8, latin-1 when it is not) goes through
:func:`~jscore.kv.check_key`, :func:`~jscore.kv.check_filter` and :func:`~jscore.kv.check_bucket`:
each returns its argument or raises ``InvalidKeyError`` / ``InvalidOptionError``, nothing else;
a key is accepted exactly when it is 1+ of ``A-Z a-z 0-9 - _ / = .`` with no empty token; an
accepted key is an accepted filter; a filter's subject is a valid subscription subject
(:func:`jscore.jsapi.check_filter_subject`); ``key_of(key_subject(key))`` is the key.

**The watcher's decisions.** The script's first byte picks the options; each following pair of
bytes is a consumer created with some ``num_pending`` or a delivery (a sequence that may go
back, an operation, ``num_pending``), fed to :class:`~jscore.kv.WatchState`. Invariants:
``include_history`` with ``updates_only`` is refused (``InvalidOptionError``) and nothing else
is; delivered revisions strictly increase; a delivery above the last revision seen gives one
entry (none for a delete or purge with ``ignore_deletes``), one at or below it none; an entry's
value is empty for markers and with ``meta_only``; its ``delta`` is the ``num_pending``; the
"caught up" marker ``None`` comes exactly once, at the first ``num_pending`` of 0 and after that
delivery's entry, and never with ``updates_only``.

Run it long with atheris (see fuzz/README.md)::

    pip install atheris
    python -m fuzz --minutes 10 kv
"""

from __future__ import annotations

import base64
import json
import re
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fuzz._runner import run
from jscore import kv as K
from jscore.errors import BadSubjectError, InvalidKeyError, InvalidOptionError, JetStreamError, RemoteProtocolError
from jscore.headers import Headers, parse_header_block
from jscore.jsapi import DIRECT_GET_HEADERS, check_filter_subject, stored_msg_from_direct, stored_msg_from_get
from jscore.models import MsgGetResponse, StoredMsg, decode_response
from jscore.protocol import MAX_SUBJECT_BYTES

__all__ = ["expected_operation", "check_entry", "check_stored", "check_names", "check_watch", "one_input"]

BUCKET = "B"
PREFIX = "$KV.B."
_KEY = re.compile(r"[-/_=.A-Za-z0-9]+")
_T0 = datetime(2026, 11, 25, 1, 2, 3, tzinfo=timezone.utc)
_ERR_BODY = b'{"error":{"code":404,"err_code":10037,"description":"no message found"}}'


def expected_operation(headers: Headers | None) -> K.KeyValueOp:
    """The operation nats.go reads from a stored message's headers (values matched exactly)."""
    if not headers:
        return K.KeyValueOp.PUT
    op = headers.get("KV-Operation")
    if op:
        return K.KeyValueOp.DEL if op == "DEL" else K.KeyValueOp.PURGE if op == "PURGE" else K.KeyValueOp.PUT
    reason = headers.get("Nats-Marker-Reason")
    if reason in ("MaxAge", "Purge"):
        return K.KeyValueOp.PURGE
    return K.KeyValueOp.DEL if reason == "Remove" else K.KeyValueOp.PUT


def check_entry(msg: StoredMsg) -> K.KeyValueEntry:
    """The entry of a stored message, checked against the message."""
    entry = K.entry_from_stored(BUCKET, msg.subject, msg.seq, msg.data, msg.headers, msg.time)
    op = expected_operation(msg.headers)
    assert entry.operation is op, (entry.operation, op, msg.headers)
    assert entry.value == (msg.data if op is K.KeyValueOp.PUT else b""), entry
    assert entry.revision == msg.seq and entry.bucket == BUCKET and entry.delta == 0, entry
    assert entry.created == (msg.time if msg.time is not None else datetime(1970, 1, 1, tzinfo=timezone.utc))
    assert entry.key == (msg.subject[len(PREFIX):] if msg.subject.startswith(PREFIX) else msg.subject), entry
    return entry


def _decode_get(body: bytes) -> StoredMsg | JetStreamError:
    try:
        return stored_msg_from_get(decode_response(body, MsgGetResponse).message, "KV_B")
    except JetStreamError as exc:
        return exc


def _decode_direct(block: bytes, payload: bytes) -> StoredMsg | JetStreamError | None:
    try:
        headers, status, description = parse_header_block(block)
    except RemoteProtocolError:
        return None  # the wire parser refuses such a frame
    try:
        return stored_msg_from_direct(headers, payload, status, description)
    except JetStreamError as exc:
        return exc


def _nats_time(t: datetime, nanos: int) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S") + f".{nanos:09d} +0000 UTC"


def check_stored(block: bytes, key: str, seq: int, nanos: int, payload: bytes) -> tuple[object, object]:
    """The raw block as a direct-get reply, then the same message both ways; returns the two
    outcomes of the second (None for a block the header parser refuses)."""
    raw = _decode_direct(block, payload)
    if isinstance(raw, StoredMsg):
        check_entry(raw)
    try:
        headers, status, _ = parse_header_block(block)
    except RemoteProtocolError:
        return None, None
    if status is not None or any(k.lower() in DIRECT_GET_HEADERS for k in headers):
        return None, None  # not a stored message's own headers
    t = _T0 + timedelta(seconds=seq % 100_000)
    subject = PREFIX + key
    stamp = t.strftime("%Y-%m-%dT%H:%M:%S") + f".{nanos:09d}Z"
    hdrs = base64.b64encode(block).decode()
    data = base64.b64encode(payload).decode()
    body = (
        f'{{"message":{{"subject":{json.dumps(subject)},"seq":{seq},"hdrs":"{hdrs}","data":"{data}","time":"{stamp}"}}}}'
    ).encode()
    via_get = _decode_get(body)
    server = [("Nats-Stream", "KV_B"), ("Nats-Subject", subject), ("Nats-Sequence", str(seq)),
              ("Nats-Time-Stamp", _nats_time(t, nanos))]  # fmt: skip
    # Written out as a server would (not through encode_headers, which refuses what a client may
    # not send but other clients do: a control character in a value).
    direct_block = (
        "NATS/1.0\r\n" + "".join(f"{k}: {v}\r\n" for k, v in [*headers.items(), *server]) + "\r\n"
    ).encode("utf-8", "surrogatepass")
    via_direct = _decode_direct(direct_block, payload)
    if isinstance(via_get, StoredMsg) and isinstance(via_direct, StoredMsg):
        a, b = check_entry(via_get), check_entry(via_direct)
        assert a == b, (a, b)
    elif isinstance(via_get, StoredMsg) or isinstance(via_direct, StoredMsg):
        raise AssertionError(f"one path decodes, the other does not: {via_get!r} / {via_direct!r}")
    return via_get, via_direct


def check_names(text: str) -> bool:
    """Key, filter and bucket checks on ``text``; returns whether it is a valid key."""
    want_key = bool(_KEY.fullmatch(text)) and not text.startswith(".") and not text.endswith(".") and ".." not in text
    try:
        assert K.check_key(text) is text
        is_key = True
    except InvalidKeyError:
        is_key = False
    assert is_key == want_key, (text, is_key)
    try:
        assert K.check_filter(text) is text
        is_filter = True
    except InvalidKeyError:
        is_filter = False
    assert is_filter or not is_key, text
    # A key or filter the rules accept may still make a subject over the server's limit with a
    # given bucket: building the subject refuses it (InvalidKeyError), exactly then.
    too_long = len(f"$KV.{BUCKET}.{text}".encode()) > MAX_SUBJECT_BYTES
    if is_filter:
        try:
            (subject,) = K.filter_subjects(BUCKET, [text])
        except InvalidKeyError:
            assert too_long, text
        else:
            assert not too_long, text
            try:
                check_filter_subject(subject)
            except BadSubjectError as exc:
                raise AssertionError(f"accepted filter {text!r} makes an invalid subject: {exc}") from exc
    if is_key and too_long:
        try:
            K.key_subject(BUCKET, text)
        except InvalidKeyError:
            is_key = False
        else:
            raise AssertionError(f"a key over the subject limit was accepted: {len(text)} bytes")
    if is_key:
        subject = K.key_subject(BUCKET, text)
        assert K.key_of(BUCKET, subject) == text and "*" not in subject and ">" not in subject
    try:
        assert K.check_bucket(text) is text
    except InvalidOptionError:
        pass
    return is_key


_OPS: tuple[Headers | None, ...] = (
    None,
    Headers({"KV-Operation": "DEL"}),
    Headers({"KV-Operation": "PURGE", "Nats-Rollup": "sub"}),
    Headers({"Nats-Marker-Reason": "MaxAge"}),
    Headers({"Nats-Marker-Reason": "Remove"}),
    Headers({"KV-Operation": "del"}),
    Headers({"Nats-Marker-Reason": ""}),
    Headers({"Other": "x"}),
)


def check_watch(script: bytes) -> list[K.KeyValueEntry | None]:
    """Drive a WatchState with the script; returns what the application got."""
    flags = script[0] if script else 0
    include_history, ignore_deletes, meta_only, updates_only = (bool(flags & (1 << i)) for i in range(4))
    try:
        options = K.WatchOptions(include_history=include_history, ignore_deletes=ignore_deletes,
                                 meta_only=meta_only, updates_only=updates_only)  # fmt: skip
    except InvalidOptionError:
        assert include_history and updates_only
        options = K.WatchOptions(ignore_deletes=ignore_deletes, meta_only=meta_only, updates_only=True)
    else:
        assert not (include_history and updates_only)
    state = K.WatchState(BUCKET, options)
    got: list[K.KeyValueEntry | None] = []
    last = 0
    marked = False
    seq = 0
    steps = script[1:257]
    for i in range(0, len(steps) - 1, 2):
        a, b = steps[i], steps[i + 1]
        pending = b & 3 if b & 4 else b >> 3
        if a & 0x80:
            out = state.created(pending)
            assert all(x is None for x in out), out
        else:
            seq = max(0, seq + (a & 7) - 2)
            headers = _OPS[(a >> 3) & 7]
            data = bytes([a, b])
            out = state.delivered(f"{PREFIX}k{b & 3}", data, headers, seq, _T0, pending)
            entries = [x for x in out if x is not None]
            op = K.operation_of(headers)
            if seq > last:
                last = seq
                if options.ignore_deletes and op is not K.KeyValueOp.PUT:
                    assert not entries, entries
                else:
                    assert len(entries) == 1, entries
                    (e,) = entries
                    assert e.revision == seq and e.delta == pending and e.operation is op and e.key == f"k{b & 3}"
                    assert e.value == (b"" if options.meta_only or op is not K.KeyValueOp.PUT else data), e
            else:
                assert not entries, (seq, last, entries)
            assert out[: len(entries)] == entries, "the marker comes after the delivery's entry"
        markers = out.count(None)
        if pending == 0 and not marked and not options.updates_only:
            assert markers == 1, (out, pending)
            marked = True
        else:
            assert markers == 0, (out, pending, marked)
        got.extend(out)
    revisions = [e.revision for e in got if e is not None]
    assert revisions == sorted(set(revisions)), revisions
    return got


def one_input(data: bytes) -> None:
    """The fuzz entry point: raises only when an invariant is broken."""
    pieces = data.split(b"\x00", 3)
    piece = pieces[0]
    block = piece if piece.startswith(b"NATS/1.0") else b"NATS/1.0\r\n" + piece + b"\r\n\r\n"
    key_bytes = pieces[1] if len(pieces) > 1 else b"k"
    script = pieces[2] if len(pieces) > 2 else b""
    payload = pieces[3] if len(pieces) > 3 else piece[:16]
    try:
        key = key_bytes.decode()
    except UnicodeDecodeError:
        key = key_bytes.decode("latin-1")
    is_key = check_names(key)
    number = int.from_bytes(key_bytes[:8].ljust(8, b"\x00"), "little")
    check_stored(block, key if is_key else "k", number % (1 << 63) or 1, number % 1_000_000_000, payload)
    for body in (data, b'{"message":%s}' % piece, _ERR_BODY):
        got = _decode_get(body)
        if isinstance(got, StoredMsg):
            check_entry(got)
    check_watch(script)


def main(argv: list[str]) -> None:
    run(argv, one_input)


if __name__ == "__main__":
    main(sys.argv)
