"""Fuzz target: the JetStream ack-subject parser (:func:`jscore.jsmsg.parse_ack_subject`).

Invariant: whatever the string, ``parse_ack_subject`` returns a :class:`MsgMetadata` or raises
``NotJetStreamMessageError`` and nothing else. For a subject that parses, every field is in range
(unsigned 64-bit numbers, non-empty names, an aware UTC timestamp that agrees with
``timestamp_ns`` to the nanosecond) and :func:`jscore.jsmsg.format_ack_subject` rebuilds the
very same subject: parsing loses nothing and invents nothing. :func:`jscore.jsmsg.ack_cursor`
(the ordered consumer's read of a run) gives None or exactly the consumer, sequences and time
stamp ``parse_ack_subject`` gives, and never declines a v1 subject that parses.

The bytes are tried as UTF-8 (as the wire parser decodes subjects) and, so that the fuzzer
reaches the number parsing quickly, also behind a ``$JS.ACK.`` prefix.

Run it long with atheris (see fuzz/README.md)::

    pip install atheris
    python fuzz/fuzz_ackmeta.py fuzz/corpus/ackmeta -max_total_time=3600
"""

from __future__ import annotations

import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fuzz._runner import run
from jscore.errors import NotJetStreamMessageError
from jscore.jsmsg import MsgMetadata, ack_cursor, format_ack_subject, parse_ack_subject
from jscore.times import unix_ns

__all__ = ["check_ack_subject", "one_input"]

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MAX_U64 = 2**64 - 1


def check_ack_subject(subject: str) -> MsgMetadata | None:
    """Check the invariant on one subject; return the metadata, None if it was rejected."""
    cursor = ack_cursor(subject)
    try:
        meta = parse_ack_subject(subject)
    except NotJetStreamMessageError:
        assert cursor is None, (subject, cursor)
        return None
    assert isinstance(meta, MsgMetadata)
    seqs = meta.sequence
    if cursor is not None:
        assert cursor == (meta.consumer, seqs.stream, seqs.consumer, meta.timestamp_ns), (cursor, meta)
    else:  # (declined: only the v2 forms)
        assert meta.account_hash is not None, subject
    for n in (meta.num_delivered, meta.num_pending, meta.sequence.stream, meta.sequence.consumer, meta.timestamp_ns):
        assert type(n) is int and 0 <= n <= _MAX_U64, n
    assert meta.stream and meta.consumer and "." not in meta.stream + meta.consumer
    assert meta.domain is None or (meta.domain and meta.domain != "_")
    assert meta.timestamp.utcoffset() == timedelta(0)
    assert (meta.timestamp - _EPOCH) // timedelta(microseconds=1) == meta.timestamp_ns // 1000
    assert unix_ns(meta.timestamp) == meta.timestamp_ns
    again = format_ack_subject(meta)
    assert again == subject, (again, subject)
    assert parse_ack_subject(again) == meta
    return meta


def one_input(data: bytes) -> None:
    """The fuzz entry point: raises only when the invariant is broken."""
    try:
        text = data.decode()
    except UnicodeDecodeError:
        text = data.decode("latin-1")
    check_ack_subject(text)
    if not text.startswith("$JS.ACK."):
        check_ack_subject("$JS.ACK." + text)


def main(argv: list[str]) -> None:
    run(argv, one_input)


if __name__ == "__main__":
    main(sys.argv)
