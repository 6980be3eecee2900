"""The soak's ledger and its checks (pure: no I/O, no clock).

Every message a publisher writes carries a ledger id in its payload (``<id>|<padding>``): ``s<n>``
(sync ``js.publish``), ``a<n>`` (``publish_async``) or ``b<p>.<r>`` (row ``r`` of partition ``p``
of the bulk writer). The ids are dense per publisher, so what was attempted is known from the
highest number handed out; each id is also packed into one int (:func:`code_of`) so that the
ledger stays small on long runs.

Outcomes, from the error types (``jscore.errors``):

* ``acked``: a PubAck (with its stream sequence; 0 when the writer does not say, as the bulk
  writer): stored exactly once, at that sequence;
* ``ambiguous``: :class:`PubAckTimeoutError` and the other timeouts, a lost connection, 10158
  "in process" (:func:`classify_error`): stored at most once;
* ``failed``: a definite refusal (an API error, no stream answered, a full window, input refused
  before sending): not stored at all.

:func:`check` compares the ledger with the stream as read back after the run and with what
every consumer saw, Jepsen-ledger style, and returns the violations.
"""

from __future__ import annotations

import threading
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from jscore import errors as E

__all__ = [
    "KINDS",
    "ACKED_NO_SEQ",
    "AMBIGUOUS",
    "FAILED",
    "UNRESOLVED",
    "Ledger",
    "PublisherLedger",
    "ConsumerLog",
    "CallTimes",
    "classify_error",
    "code_of",
    "text_of",
    "parse_payload",
    "check",
]

SYNC, ASYNC, BULK = 1, 2, 3
KINDS = {SYNC: "sync", ASYNC: "async", BULK: "bulk"}
_LETTER = {SYNC: "s", ASYNC: "a", BULK: "b"}
_KIND_OF = {ord("s"): SYNC, ord("a"): ASYNC, ord("b"): BULK}
_SHIFT = 48
_ROW_BITS = 24


def code_of(kind: int, n: int, row: int | None = None) -> int:
    """The int of a ledger id: the kind in the top bits, then ``n`` (bulk: partition, row)."""
    if kind == BULK:
        assert row is not None and 0 <= row < (1 << _ROW_BITS)
        return (kind << _SHIFT) | (n << _ROW_BITS) | row
    return (kind << _SHIFT) | n


def text_of(code: int) -> str:
    kind = code >> _SHIFT
    n = code & ((1 << _SHIFT) - 1)
    if kind == BULK:
        return f"b{n >> _ROW_BITS}.{n & ((1 << _ROW_BITS) - 1)}"
    return f"{_LETTER.get(kind, '?')}{n}"


def parse_payload(data: bytes) -> int:
    """The ledger code in a payload; -1 when it is not one of ours."""
    end = data.find(b"|")
    if end < 2:
        return -1
    kind = _KIND_OF.get(data[0])
    if kind is None:
        return -1
    body = data[1:end]
    try:
        if kind == BULK:
            p, _, r = body.partition(b".")
            return code_of(BULK, int(p), int(r))
        return code_of(kind, int(body))
    except (ValueError, AssertionError):
        return -1


def classify_error(exc: BaseException) -> str:
    """``ambiguous`` or ``failed`` (definitely not stored), from what the error types document."""
    if isinstance(exc, E.DuplicateMsgIdInProcessError):
        return "ambiguous"  # 10158: another copy is being stored right now
    if isinstance(exc, (E.TooManyStalledMsgsError, E.ReconnectBufferExceededError)):
        return "failed"  # the message was not sent
    if isinstance(exc, (E.PubAckTimeoutError, E.ConnectionLostError, E.TimeoutError)):
        return "ambiguous"
    if isinstance(exc, (E.JetStreamAPIError, E.NoStreamResponseError, ValueError)):
        return "failed"  # an answer refusing it, no stream, or input refused before sending
    if isinstance(exc, E.ConnectionClosedError):
        return "failed"  # raised before sending: "nothing was published"
    return "ambiguous"  # anything else promises nothing


# The state of one sync / async publish in PublisherLedger.states (index n - 1): a stream
# sequence (> 0), or one of these.
ACKED_NO_SEQ, AMBIGUOUS, FAILED, UNRESOLVED = 0, -1, -2, -3


@dataclass
class PublisherLedger:
    """One publisher's outcomes (written by its thread only), 8 bytes a publish: ``states[n-1]``
    is the acked sequence or :data:`AMBIGUOUS` / :data:`FAILED` / :data:`UNRESOLVED`; the bulk
    writer's ``partitions`` map a partition to (rows, outcome) (every row of a partition shares
    its outcome: the partition is written again whole until it is acked)."""

    kind: int
    states: array = field(default_factory=lambda: array("q"))  # type: ignore[type-arg]
    partitions: dict[int, tuple[int, int]] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)  # error type -> count
    resolved_by_retry: int = 0  # ambiguous at first, then acked by a re-publish of the same id

    # -- recording

    def attempt(self) -> int:
        """A new sync / async id: its n."""
        self.states.append(UNRESOLVED)
        return len(self.states)

    def settle(self, n: int, state: int) -> None:
        self.states[n - 1] = state

    def settle_partition(self, p: int, rows: int, state: int) -> None:
        self.partitions[p] = (rows, state)

    def error(self, exc: BaseException) -> str:
        name = type(exc).__name__
        self.errors[name] = self.errors.get(name, 0) + 1
        return classify_error(exc)

    # -- reading

    @property
    def attempted(self) -> int:
        return sum(r for r, _ in self.partitions.values()) if self.kind == BULK else len(self.states)

    def was_attempted(self, code: int) -> bool:
        kind = code >> _SHIFT
        n = code & ((1 << _SHIFT) - 1)
        if kind != self.kind:
            return False
        if kind == BULK:
            part = self.partitions.get(n >> _ROW_BITS)
            return part is not None and (n & ((1 << _ROW_BITS) - 1)) < part[0]
        return 1 <= n <= len(self.states)

    def outcomes(self) -> Iterable[tuple[int, int]]:
        """(code, state) of every publish."""
        if self.kind == BULK:
            for p, (rows, state) in self.partitions.items():
                for r in range(rows):
                    yield code_of(BULK, p, r), state
        else:
            kind = self.kind
            for i, state in enumerate(self.states):
                yield code_of(kind, i + 1), state

    def count(self, which: str) -> int:
        n = 0
        for _, state in self.outcomes():
            if which == "acked" and state >= 0 or which == "ambiguous" and state in (AMBIGUOUS, UNRESOLVED) or (
                which == "failed" and state == FAILED
            ):
                n += 1
        return n

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "attempted": self.attempted,
            "acked": self.count("acked"),
            "ambiguous": self.count("ambiguous"),
            "failed": self.count("failed"),
            "errors": dict(sorted(self.errors.items())),
        }
        if self.kind == BULK:
            out["partitions"] = len(self.partitions)
        if self.resolved_by_retry:
            out["ambiguous_then_acked_by_retry"] = self.resolved_by_retry
        return out


class ConsumerLog:
    """What one consumer saw: (stream seq, ledger code) per delivery, in delivery order."""

    def __init__(self, name: str, *, ordered: bool = False) -> None:
        self.name = name
        self.ordered = ordered
        self.seqs = array("q")
        self.codes = array("q")
        self._seen = bytearray()  # per seq: deliveries, saturating at 255
        self.distinct = 0
        self.errors: dict[str, int] = {}

    def saw(self, seq: int, code: int) -> None:
        self.seqs.append(seq)
        self.codes.append(code)
        seen = self._seen
        if seq >= len(seen):
            seen.extend(bytes(max(seq + 1 - len(seen), len(seen) // 2 + 1024)))
        c = seen[seq]
        if c == 0:
            self.distinct += 1
        if c < 255:
            seen[seq] = c + 1

    @property
    def seen_bytes(self) -> int:
        return len(self._seen)

    def covers(self, seqs: Iterable[int]) -> bool:
        seen = self._seen
        n = len(seen)
        return all(s < n and seen[s] for s in seqs)

    def missing(self, seqs: Iterable[int]) -> list[int]:
        seen = self._seen
        n = len(seen)
        return [s for s in seqs if s >= n or not seen[s]]

    def error(self, exc: BaseException) -> None:
        name = type(exc).__name__
        self.errors[name] = self.errors.get(name, 0) + 1


class CallTimes:
    """Every timed blocking call: count, worst time, and those that outlived their bound."""

    def __init__(self, margin: float) -> None:
        self.margin = margin
        self._lock = threading.Lock()
        self.calls: dict[str, list[float]] = {}  # name -> [count, worst elapsed, its bound]
        self.over: list[dict[str, Any]] = []

    def record(self, name: str, elapsed: float, bound: float, at: float, what: str = "") -> None:
        with self._lock:
            c = self.calls.get(name)
            if c is None:
                c = self.calls[name] = [0, 0.0, bound]
            c[0] += 1
            if elapsed > c[1]:
                c[1] = elapsed
                c[2] = bound
            if elapsed > bound + self.margin:
                self.over.append(
                    {"call": name, "elapsed": round(elapsed, 3), "bound": bound, "at": round(at, 3), "what": what}
                )

    def excused(self, over: dict[str, Any]) -> bool:
        """An overrun no longer than the stall of the whole process measured during the call
        (``process_stalled_s``, set by the runner from its probe thread): the call could not
        have returned while nothing in the process ran."""
        return bool(over["elapsed"] <= over["bound"] + self.margin + over.get("process_stalled_s", 0.0))

    def summary(self) -> dict[str, Any]:
        with self._lock:
            return {
                name: {"count": int(c[0]), "worst_s": round(c[1], 3), "bound_s": c[2]}
                for name, c in sorted(self.calls.items())
            }


@dataclass
class Ledger:
    publishers: list[PublisherLedger]
    consumers: list[ConsumerLog]
    times: CallTimes


def check(
    ledger: Ledger,
    stored: Sequence[tuple[int, int]],
    raw: dict[int, bytes] | None = None,
    limit: int = 20,
) -> dict[str, Any]:
    """The violations (each a list of at most ``limit`` examples plus a count) of the run.

    ``stored`` is the whole stream read back after the run: (seq, ledger code) in stream order
    (:func:`parse_payload`; -1 for a payload that is not one of ours, whose bytes ``raw`` may
    give for the report).
    """
    raw = raw or {}
    v: dict[str, list[Any]] = {}
    counts: dict[str, int] = {}

    def bad(kind: str, example: Any) -> None:
        counts[kind] = counts.get(kind, 0) + 1
        ex = v.setdefault(kind, [])
        if len(ex) < limit:
            ex.append(example)

    by_kind = {p.kind: p for p in ledger.publishers}
    where: dict[int, list[int]] = {}  # code -> seqs stored at
    code_at: dict[int, int] = {}
    prev = 0
    for seq, code in stored:
        if seq <= prev:
            bad("stream_out_of_order", {"seq": seq, "after": prev})
        prev = seq
        code_at[seq] = code
        pub = by_kind.get(code >> _SHIFT) if code >= 0 else None
        if pub is None or not pub.was_attempted(code):
            what = text_of(code) if code >= 0 else raw.get(seq, b"?")[:40].decode(errors="replace")
            bad("unexpected", {"seq": seq, "payload": what})
            continue
        where.setdefault(code, []).append(seq)
    for code, seqs in where.items():
        if len(seqs) > 1:
            bad("stored_twice", {"id": text_of(code), "seqs": seqs[:5]})

    for pub in ledger.publishers:
        for code, state in pub.outcomes():
            at = where.get(code)
            if state >= 0:
                if not at:
                    bad("lost", {"id": text_of(code), "acked_seq": state})
                elif state and state not in at:
                    bad("acked_at_other_seq", {"id": text_of(code), "acked_seq": state, "stored_at": at[:5]})
            elif state == FAILED and at:
                bad("failed_but_stored", {"id": text_of(code), "stored_at": at[:5]})

    stored_seqs = [seq for seq, _ in stored]
    for log in ledger.consumers:
        for seq, code in zip(log.seqs, log.codes):
            if code_at.get(seq, -2) != code:
                bad("consumer_saw_unstored", {"consumer": log.name, "seq": seq, "id": text_of(code) if code >= 0 else "?"})
        if log.ordered:
            got = list(log.seqs)
            if got != stored_seqs:
                first = next((i for i, (a, b) in enumerate(zip(got, stored_seqs)) if a != b), min(len(got), len(stored_seqs)))
                bad(
                    "ordered_not_exactly_once_in_order",
                    {
                        "consumer": log.name,
                        "delivered": len(got),
                        "stored": len(stored_seqs),
                        "first_difference_at": first,
                        "got": got[max(0, first - 2) : first + 3],
                        "expected": stored_seqs[max(0, first - 2) : first + 3],
                    },
                )
        else:
            missing = log.missing(stored_seqs)
            if missing:
                bad("consumer_missed", {"consumer": log.name, "missing": len(missing), "first": missing[:10]})

    for over in ledger.times.over:
        if not ledger.times.excused(over):
            bad("over_timeout", over)

    out: dict[str, Any] = {}
    for kind in sorted(counts):
        out[kind] = {"count": counts[kind], "examples": v[kind]}
    return out
