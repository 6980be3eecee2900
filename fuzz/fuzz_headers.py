"""Fuzz target: the header block parser (:func:`jscore.headers.parse_header_block`).

Invariant: whatever the bytes, ``parse_header_block`` returns or raises ``RemoteProtocolError``
and nothing else. A parsed value never holds CR or LF. For a block that parses, re-encoding the
parsed headers with :func:`jscore.headers.encode_headers` succeeds (what the parser accepts, the
encoder accepts), except that a value received with a control character other than TAB (which
other clients send, and the parser takes as it is) is refused by the encoder with
``BadHeaderError``, and only then; a re-encoded block ends in exactly one blank line, and
parsing it gives the same headers (the status line is not part of ``Headers`` and is not
re-encoded). A block the parser recognised as a direct get reply in the server's layout
(``Headers._direct_layout``) holds the message's own headers (none of them named like one of the
server's) and then exactly the server's headers, each once and in order; the own lines and the
values kept for the direct get's reader are the ones the pairs hold. A bulk reader's columns of
it (:func:`jscore.headers.header_columns`, alone, twice and beside no headers) give back exactly
:func:`jscore.headers.headers_dict` of it for each item.

The same bytes are also framed as an ``HMSG`` and run through the wire invariant of
:mod:`fuzz.fuzz_wire`, so header parsing is exercised under every split too.

Run it long with atheris (see fuzz/README.md)::

    pip install atheris
    python fuzz/fuzz_headers.py fuzz/corpus/headers -max_total_time=3600
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fuzz.fuzz_wire import check_wire
from fuzz._runner import run
from jscore.errors import BadHeaderError, RemoteProtocolError
from jscore.headers import Headers, encode_headers, header_columns, headers_dict, headers_of_lines, parse_header_block

__all__ = ["check_headers", "hmsg_frame", "one_input"]

_DIRECT_KEYS = ("Nats-Stream", "Nats-Subject", "Nats-Sequence", "Nats-Time-Stamp", "Nats-Num-Pending",
                "Nats-Last-Sequence", "Nats-UpTo-Sequence")  # fmt: skip


def hmsg_frame(block: bytes, payload: bytes = b"") -> bytes:
    """An ``HMSG`` frame carrying ``block`` as its header block, sizes computed."""
    return b"HMSG fuzz.h 1 %d %d\r\n%s%s\r\n" % (len(block), len(block) + len(payload), block, payload)


def check_headers(block: bytes) -> tuple[Headers, int | None, str | None] | None:
    """Check the header invariant on one block; return the parse result, None if rejected."""
    try:
        headers, status, description = parse_header_block(block)
    except RemoteProtocolError:
        return None
    assert isinstance(headers, Headers)
    _check_columns(block)
    layout = headers._direct_layout()  # (before anything splits the block)
    if layout is not None:
        own_lines, fields = layout[0], layout[1:]
        assert own_lines is not None
        own = headers_of_lines(own_lines).items()
        pairs = headers.items()
        assert pairs[: len(own)] == own, (pairs, own)
        assert not {k.lower() for k, _ in own} & {k.lower() for k in _DIRECT_KEYS}, own
        server = pairs[len(own) :]
        assert [k for k, _ in server] == [k for k, v in zip(_DIRECT_KEYS, fields) if v is not None], pairs
        assert [v for _, v in server] == [v for v in fields if v is not None], (pairs, fields)
    if status is not None:
        assert 0 <= status <= 999, status
    else:
        assert description is None, "a description without a status code"
    values = [v for _, v in headers.items()]
    assert not any("\r" in v or "\n" in v for v in values), values
    controls = any(any((ord(c) < 32 and c != "\t") or c == "\x7f" for c in v) for v in values)
    try:
        encoded = encode_headers(headers)
    except BadHeaderError:
        assert controls, ("refused without a control character", values)
        return headers, status, description
    assert not controls, ("a control character was encoded", values)
    assert encoded.startswith(b"NATS/1.0\r\n"), encoded[:16]
    assert encoded.endswith(b"\r\n\r\n") and not encoded.endswith(b"\r\n\r\n\r\n"), encoded[-8:]
    again, status2, description2 = parse_header_block(encoded)
    assert again == headers, (again, headers)
    assert again.items() == headers.items()
    assert status2 is None and description2 is None
    return headers, status, description


def _check_columns(block: bytes) -> None:
    """header_columns of the block's headers (each item parsed afresh: the columns read the block
    as the parser left it) against headers_dict of each."""
    items: list[Headers | None] = [parse_header_block(block)[0], None, parse_header_block(block)[0]]
    want = [None if h is None else headers_dict(parse_header_block(block)[0]) for h in items]
    for batch in (items[:1], items):
        counts, keys, value_counts, values = header_columns(batch)
        got: list[list[tuple[str, list[str]]] | None] = []
        k = v = 0
        for c in counts:
            if c is None:
                got.append(None)
                continue
            row = []
            for _ in range(c):
                n = 1 if value_counts is None else value_counts[k]
                row.append((keys[k], values[v : v + n]))
                k, v = k + 1, v + n
            got.append(row)
        assert (k, v) == (len(keys), len(values)), (k, v, keys, values)
        assert got == [None if d is None else list(d.items()) for d in want[: len(batch)]], (got, want)


def one_input(data: bytes) -> None:
    """The fuzz entry point: raises only when an invariant is broken."""
    check_headers(data)
    # The raw bytes as a header block, and with a valid prefix and terminator added.
    if not data.startswith(b"NATS/1.0"):
        check_headers(b"NATS/1.0" + data + b"\r\n\r\n")
    if len(data) <= 2048:
        check_wire(hmsg_frame(data, b"xy"))


def main(argv: list[str]) -> None:
    run(argv, one_input)


if __name__ == "__main__":
    main(sys.argv)
