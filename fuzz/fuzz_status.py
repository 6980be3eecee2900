"""Fuzz target: JetStream status messages (``NATS/1.0 <code> <description>`` header blocks).

Invariants, whatever the bytes:

* :func:`jscore.headers.parse_header_block` returns or raises ``RemoteProtocolError`` and nothing
  else. A status it returns is a 3-digit code (0-999); its description, if any, has no control
  character and no surrounding whitespace; no description without a code.
* The same block framed as an ``HMSG`` (without and with a reply subject, as heartbeats and
  flow-control requests come) satisfies the wire invariant of :mod:`fuzz.fuzz_wire`: fed whole,
  byte by byte or split anywhere, the :class:`jscore.protocol.Parser` gives the same events or
  raises ``RemoteProtocolError`` every time.
* The parser and ``parse_header_block`` agree: the block parses alone exactly when its ``HMSG``
  parses, and then the one event carries the same status, description and headers (the payload
  and the accounting size are the frame's).

Inputs that do not start with ``NATS/1.0`` are also tried as the rest of a status line
(``NATS/1.0 `` + data + ``\\r\\n\\r\\n``), so the fuzzer spends its time on codes and descriptions.

Run it long with atheris (see fuzz/README.md)::

    pip install atheris
    python fuzz/fuzz_status.py fuzz/corpus/status -max_total_time=3600
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fuzz._runner import run
from fuzz.fuzz_wire import FUZZ_MAX_PAYLOAD, check_wire
from jscore.errors import RemoteProtocolError
from jscore.headers import Headers, parse_header_block
from jscore.protocol import MsgReceived

__all__ = ["check_status", "status_frame", "one_input", "MAX_FRAMED"]

MAX_FRAMED = FUZZ_MAX_PAYLOAD - 16
"""Blocks longer than this are not framed: the frame would exceed the wire target's max_payload."""
_CONTROL = frozenset(range(0x20)) - {0x09} | {0x7F}


def status_frame(block: bytes, payload: bytes = b"", reply: bytes | None = None) -> bytes:
    """An ``HMSG`` frame carrying ``block`` as its header block, sizes computed."""
    r = b" " + reply if reply else b""
    return b"HMSG _INBOX.fuzz 7%s %d %d\r\n%s%s\r\n" % (r, len(block), len(block) + len(payload), block, payload)


def check_status(block: bytes) -> tuple[Headers, int | None, str | None] | None:
    """Check the invariants on one header block; return the parse result, None if rejected."""
    try:
        parsed: tuple[Headers, int | None, str | None] | None = parse_header_block(block)
    except RemoteProtocolError:
        parsed = None
    if parsed is not None:
        headers, status, description = parsed
        assert isinstance(headers, Headers)
        if status is None:
            assert description is None, "a description without a status code"
        else:
            assert type(status) is int and 0 <= status <= 999, status
            assert block[9:12] == b"%03d" % status, (block[:16], status)
        if description is not None:
            assert description == description.strip(), description
            assert not any(ord(c) in _CONTROL for c in description), description
    if len(block) > MAX_FRAMED:
        return parsed
    for reply, payload in ((None, b""), (b"$JS.FC.S.x.1", b"")):
        frame = status_frame(block, payload, reply)
        result = check_wire(frame)
        if parsed is None:
            # The frame itself is well formed, so the only reason to reject it is the block
            # (or an HMSG header size under the minimal block, which parse_header_block also refuses).
            assert result.error is not None, (block, result)
            continue
        assert result.error is None, (block, result)
        assert len(result.events) == 1, result
        event = result.events[0]
        assert isinstance(event, MsgReceived), event
        headers, status, description = parsed
        assert (event.status, event.description) == (status, description), (event, parsed)
        assert event.headers == headers
        assert event.data == payload
        assert event.reply == (reply.decode() if reply else None)
        assert event.size == len(b"_INBOX.fuzz") + len(reply or b"") + len(block) + len(payload)
    return parsed


def one_input(data: bytes) -> None:
    """The fuzz entry point: raises only when an invariant is broken."""
    check_status(data)
    if not data.startswith(b"NATS/1.0"):
        check_status(b"NATS/1.0 " + data + b"\r\n\r\n")


def main(argv: list[str]) -> None:
    run(argv, one_input)


if __name__ == "__main__":
    main(sys.argv)
