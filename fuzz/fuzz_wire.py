"""Fuzz target: the server-to-client wire parser (:class:`jscore.protocol.Parser`).

Invariant (DESIGN.md, "Testing layers" 4): the same bytes fed whole, byte by byte, or split at
arbitrary points yield the same event list, or every feeding raises ``RemoteProtocolError`` and
nothing else. Also checked:

* the events returned before an error are a prefix of the byte-by-byte events (a parser never
  emits a frame that another split would have rejected);
* after an error the parser is poisoned: the next ``feed`` raises ``RemoteProtocolError`` again;
* ``buffered`` never exceeds the control-line cap plus the largest accepted message (INFO has
  its own cap), plus a few bytes of framing.

``one_input`` raises ``AssertionError`` when the invariant breaks, and lets any exception other
than ``RemoteProtocolError`` escape: both are crashes for a coverage-guided fuzzer.

Run it long with atheris (see fuzz/README.md)::

    pip install atheris
    python fuzz/fuzz_wire.py fuzz/corpus/wire -max_total_time=3600
"""

from __future__ import annotations

import random
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fuzz._runner import run
from jscore.errors import RemoteProtocolError
from jscore.protocol import MAX_CONTROL_LINE, MAX_INFO_LINE, PAYLOAD_MARGIN, Parser, ParserEvent

__all__ = ["FeedResult", "feed", "buffer_bound", "derived_cuts", "check_wire", "one_input", "FUZZ_MAX_PAYLOAD"]

FUZZ_MAX_PAYLOAD = 1024
"""A small max_payload so that the size checks are reachable with short inputs."""
SLACK = 8
"""Framing bytes around a message: two CRLFs and a trailing CR."""


class FeedResult:
    """What one way of feeding produced: the events, the error (if any), the peak of ``buffered``."""

    __slots__ = ("events", "error", "max_buffered")

    def __init__(self, events: list[ParserEvent], error: RemoteProtocolError | None, max_buffered: int) -> None:
        self.events = events
        self.error = error
        self.max_buffered = max_buffered

    def __repr__(self) -> str:
        return f"FeedResult(events={self.events!r}, error={self.error!r}, max_buffered={self.max_buffered})"


def buffer_bound(max_payload: int) -> int:
    """The most a parser may hold for an incomplete frame."""
    return max(MAX_INFO_LINE, MAX_CONTROL_LINE + max_payload + PAYLOAD_MARGIN) + SLACK


def feed(data: bytes, cuts: Iterable[int] = (), max_payload: int = FUZZ_MAX_PAYLOAD) -> FeedResult:
    """Feed ``data`` to a fresh parser in chunks split at ``cuts`` (positions into ``data``).

    Only ``RemoteProtocolError`` is caught; anything else propagates to the caller.
    """
    parser = Parser(max_payload)
    events: list[ParserEvent] = []
    peak = 0
    prev = 0
    points = sorted({c for c in cuts if 0 < c < len(data)})
    points.append(len(data))
    for cut in points:
        try:
            events.extend(parser.feed(data[prev:cut]))
        except RemoteProtocolError as exc:
            assert parser.poisoned, "parser raised but is not poisoned"
            assert parser.buffered == 0, "a poisoned parser must drop its buffer"
            try:
                parser.feed(b"PING\r\n")
            except RemoteProtocolError:
                pass
            else:
                raise AssertionError("a poisoned parser accepted more input") from exc
            return FeedResult(events, exc, peak)
        peak = max(peak, parser.buffered)
        prev = cut
    return FeedResult(events, None, peak)


def derived_cuts(data: bytes, limit: int = 16) -> list[int]:
    """Split points derived from the input itself, so a fuzzer can steer them."""
    if len(data) < 2:
        return []
    rng = random.Random(data[:16])  # a private generator seeded by the data: deterministic
    k = 1 + data[0] % limit
    return sorted(rng.randrange(1, len(data)) for _ in range(k))


def check_wire(
    data: bytes, extra_splits: Sequence[Sequence[int]] = (), max_payload: int = FUZZ_MAX_PAYLOAD
) -> FeedResult:
    """Check the wire invariant on ``data``; return the whole-feed result."""
    whole = feed(data, (), max_payload)
    bytewise = feed(data, range(1, len(data)), max_payload)
    others = [feed(data, derived_cuts(data), max_payload)]
    others.extend(feed(data, cuts, max_payload) for cuts in extra_splits)
    bound = buffer_bound(max_payload)
    for result in (whole, bytewise, *others):
        assert result.max_buffered <= bound, f"buffered {result.max_buffered} > bound {bound}"
        assert (result.error is None) == (whole.error is None), (
            f"whole feed {'raised' if whole.error else 'succeeded'} but a split feed did not: "
            f"whole={whole!r} split={result!r}"
        )
        n = len(result.events)
        assert result.events == bytewise.events[:n], f"events differ: {result.events!r} vs {bytewise.events!r}"
        if whole.error is None:
            assert n == len(bytewise.events), f"events differ: {result.events!r} vs {bytewise.events!r}"
    return whole


def one_input(data: bytes) -> None:
    """The fuzz entry point: raises only when the invariant is broken."""
    check_wire(data)


def main(argv: list[str]) -> None:
    run(argv, one_input)


if __name__ == "__main__":
    main(sys.argv)
