"""Fuzz target: the replies of a batched direct get (ADR-31), fed to :mod:`jscore.directget`.

The input is a script of replies separated by NUL bytes (at most 16). Each reply is a header
block (``NATS/1.0 ...``; a piece that does not start with it gets ``NATS/1.0\\r\\n`` in front and a
blank line behind, so the fuzzer spends its time on headers) that
:func:`jscore.headers.parse_header_block` accepts; pieces it refuses are skipped, as the wire
parser would have refused their frame. Each script is fed to a fresh
:class:`~jscore.directget.DirectGetBatch` in batch mode and in multi_last mode.

Invariants, whatever the replies:

* :func:`jscore.directget.parse_batch_reply` returns or raises :class:`JetStreamError`, nothing else;
* ``receive_msg`` and ``handle_timeout`` never raise;
* at most one ``DirectGetFinished``, and nothing after it; once finished, ``next_deadline()`` is
  None and later replies change nothing;
* its error is None or a :class:`NatsError`, and ``reason`` says which kind;
* delivered messages have strictly increasing sequences, non-empty stream and subject, and of
  the server's ``Nats-*`` direct-get names only the earlier occurrences left in ``headers`` (the
  last of each is the server's);
* a request is only ever sent first or after an end of batch, and only in multi_last mode;
* a machine made with ``rows=True`` delivers the same messages as plain values
  (:data:`jscore.jsapi.StoredRow`: the same subject, sequence, payload, stream, exact time and
  headers) and ends the same way.

Run it long with atheris (see fuzz/README.md)::

    pip install atheris
    python fuzz/fuzz_directget.py fuzz/corpus/directget -max_total_time=3600
"""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fuzz._runner import run
from jscore import directget as DG
from jscore.errors import JetStreamError, NatsError, RemoteProtocolError
from jscore.headers import Headers, header_lines_dict, parse_header_block
from jscore.jsapi import DIRECT_GET_HEADERS
from jscore.models import StoredMsg
from jscore.times import parse_nats_time

__all__ = ["parse_script", "check_script", "one_input", "MAX_REPLIES"]

MAX_REPLIES = 16
_SUBJECT = "$JS.API.DIRECT.GET.S"
_BATCH = DG.resolve_batch(batch=10)
_MULTI = DG.resolve_last_for(["a.>", "b.*"], up_to_time=datetime(2026, 1, 1, tzinfo=timezone.utc), batch=2)
_REASONS_OK = {"eob", "empty", "stopped"}
_REASONS_ERR = {"status", "timeout", "gap", "unsupported", "malformed"}


def parse_script(data: bytes) -> list[tuple[Headers, int | None, str | None, bytes]]:
    """The replies of ``data``: ``(headers, status, description, payload)`` for every piece the
    header parser accepts. The payload is the piece's length in bytes, so it varies too."""
    replies = []
    for piece in data.split(b"\x00")[:MAX_REPLIES]:
        block = piece if piece.startswith(b"NATS/1.0") else b"NATS/1.0\r\n" + piece + b"\r\n\r\n"
        try:
            headers, status, description = parse_header_block(block)
        except RemoteProtocolError:
            continue
        replies.append((headers, status, description, bytes(len(piece) % 7)))
    return replies


def check_script(replies: list[tuple[Headers, int | None, str | None, bytes]], options: object) -> DG.DirectGetBatch:
    """Feed ``replies`` to a fresh machine and check the invariants; returns the machine."""
    assert isinstance(options, (DG.BatchOptions, DG.LastForOptions))
    now = 100.0
    machine = DG.DirectGetBatch(_SUBJECT, options, timeout=1.0, now=now)
    events = machine.drain_events()
    assert len(events) == 1 and isinstance(events[0], DG.DirectGetRequested), events
    finished = 0
    last_seq = -1
    eobs = 0
    for headers, status, description, payload in replies:
        if status is None:
            try:
                DG.parse_batch_reply(headers, payload)
            except JetStreamError:
                pass
        was_done = machine.done
        now += 0.01
        machine.receive(headers, payload, status, description, now)
        if status is not None and DG.classify_direct_status(status, description).batch is DG.Disposition.END_OF_BATCH:
            eobs += 1
        new = machine.drain_events()
        if was_done:
            assert not new, new
            continue
        for e in new:
            assert finished == 0, f"event after the end: {e}"
            if isinstance(e, DG.StoredMsgsDelivered):
                assert e.msgs, "an empty run of messages"
                for msg in e.msgs:
                    assert isinstance(msg.seq, int) and msg.seq > last_seq, (msg.seq, last_seq)
                    last_seq = msg.seq
                    assert msg.stream and msg.subject
                    # The server's names are the last of each in the reply; earlier ones stay
                    # among the message's own headers.
                    for name in DIRECT_GET_HEADERS:
                        sent = sum(k.lower() == name for k, _ in headers.items())
                        kept = 0 if msg.headers is None else sum(k.lower() == name for k, _ in msg.headers.items())
                        assert kept == max(0, sent - 1), (name, sent, kept)
            elif isinstance(e, DG.DirectGetRequested):
                assert isinstance(options, DG.LastForOptions), "a batch never sends a second request"
                assert status is not None and eobs > 0, "a page request only after an end of batch"
            else:
                assert isinstance(e, DG.DirectGetFinished)
                finished += 1
                if e.error is None:
                    assert e.reason in _REASONS_OK, e
                else:
                    assert isinstance(e.error, NatsError), e.error
                    assert e.reason in _REASONS_ERR, e
        if machine.done:
            assert machine.next_deadline() is None
    # Time runs out for whatever is still waiting.
    if not machine.done:
        deadline = machine.next_deadline()
        assert deadline is not None
        machine.handle_timeout(deadline - 0.001)
        assert not machine.done
        machine.handle_timeout(deadline)
        assert machine.done and machine.reason == "timeout" and isinstance(machine.error, TimeoutError)
        assert [type(e) for e in machine.drain_events()] == [DG.DirectGetFinished]
    assert machine.next_deadline() is None
    return machine


def _delivered(machine: DG.DirectGetBatch, replies: list[tuple[Headers, int | None, str | None, bytes]]) -> list[object]:
    out: list[object] = []
    for headers, status, description, payload in replies:
        machine.receive(headers, payload, status, description, 100.0)
    for e in machine.drain_events():
        if isinstance(e, DG.StoredMsgsDelivered):
            out.extend(e.msgs)
    return out


def check_rows_agree(data: bytes, options: object) -> None:
    """The same script to a machine of each kind: the same messages, and the same end."""
    assert isinstance(options, (DG.BatchOptions, DG.LastForOptions))
    plain = DG.DirectGetBatch(_SUBJECT, options, timeout=1.0, now=100.0)
    rows = DG.DirectGetBatch(_SUBJECT, options, timeout=1.0, now=100.0, rows=True)
    msgs = _delivered(plain, parse_script(data))
    got = _delivered(rows, parse_script(data))
    assert len(msgs) == len(got), (msgs, got)
    for msg, row in zip(msgs, got):
        assert isinstance(msg, StoredMsg) and isinstance(row, tuple), (msg, row)
        subject, seq, payload, headers, stamp, stream = row
        assert (subject, seq, payload, stream) == (msg.subject, msg.seq, msg.data, msg.stream), (msg, row)
        assert (parse_nats_time(stamp) if isinstance(stamp, str) else stamp) == msg.time, (stamp, msg.time)
        if isinstance(headers, str):
            want: dict[str, list[str]] | None = None
            for k, v in msg.headers.items() if msg.headers is not None else ():
                want = want or {}
                want.setdefault(k, []).append(v)
            assert header_lines_dict(headers) == want, (headers, msg.headers)
        else:
            assert headers == msg.headers, (headers, msg.headers)
    assert (rows.done, rows.reason, type(rows.error), str(rows.error)) == (
        plain.done, plain.reason, type(plain.error), str(plain.error),
    )  # fmt: skip


def one_input(data: bytes) -> None:
    """The fuzz entry point: raises only when an invariant is broken."""
    replies = parse_script(data)
    check_script(replies, _BATCH)
    check_script(replies, _MULTI)
    check_rows_agree(data, _BATCH)
    check_rows_agree(data, _MULTI)


def main(argv: list[str]) -> None:
    run(argv, one_input)


if __name__ == "__main__":
    main(sys.argv)
