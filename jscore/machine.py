"""The protocol every sub-machine of a :class:`~jscore.session.Session` speaks.

A sub-machine is one operation riding on the connection: a fetch, a consume, a batched direct
get, a publish window, an ordered consumer. The session owns them: it feeds each the messages
of its inbox, its commands and its timeouts, tells it about the connection, acts on the
frames it asks to send and hands everything else it emits to the operation's sink.

=============================  ==============================================================
call                           meaning
=============================  ==============================================================
``receive_msg(msg, now)``      a message of the machine's inbox subscription
``handle(command, now)``       a command: from the application (:class:`Stop`, ``Drain`` ...)
                               or from the session (:class:`ConnectionLost`,
                               :class:`ConnectionRestored`, :class:`ConnectionClosed`; after
                               a consume's ``Drain``, ``InboxDrained`` once nothing more
                               can arrive for its inbox)
``handle_timeout(now)``        fire expired timers; a spurious call is a no-op
``next_deadline()``            the earliest armed timer, or None; pure
``drain_events()``             every queued event, oldest first
``finished``                   True once the machine has ended: no event follows, and
                               messages that still reach it (the rest of the read it ended
                               in) are ignored
=============================  ==============================================================

A machine may also read runs from the connection's lane (:class:`jscore.protocol.AckLane`),
one kind each; the session arms its inbox for the kind it has a method for, and the run must
mean exactly what its frames fed to ``receive_msg`` one by one would:

=============================  ==============================================================
``receive_acks(run, now)``     PubAcks of a publish window's ``<inbox>.*`` (``AcksReceived``)
``receive_msgs(run, now)``     messages in a row, no status among them (``MsgsReceived``):
                               a fetch, a consume, an ordered consumer (with a true
                               ``RUN_CURSORS`` class attribute, the runs the delivery
                               lane reads carry each message's ack cursor; runs read
                               the general way have ``cursors`` None)
``receive_direct(run, now)``   direct get replies in the server's exact form
                               (``DirectRepliesReceived``): a batched direct get
=============================  ==============================================================

The connection commands are shared by every machine so that the session can tell them all
the same thing; each machine decides what a lost or restored connection means for it.
"""

from __future__ import annotations

from typing import Any, Protocol

import msgspec

from .protocol import MsgReceived

__all__ = [
    "ConnectionClosed",
    "ConnectionLost",
    "ConnectionRestored",
    "MachineFailed",
    "SendRequested",
    "Stop",
    "SubMachine",
]


class SubMachine(Protocol):
    """What the session needs of a machine (see the table in the module docstring)."""

    @property
    def finished(self) -> bool: ...

    def receive_msg(self, msg: MsgReceived, now: float) -> None: ...

    def handle(self, command: Any, now: float) -> None: ...

    def handle_timeout(self, now: float) -> None: ...

    def next_deadline(self) -> float | None: ...

    def drain_events(self) -> list[Any]: ...


# ------------------------------------------------------------------------------ commands


class Stop(msgspec.Struct, frozen=True, kw_only=True):
    """End now: nothing is delivered after this (the transport drops its local queue)."""


class ConnectionLost(msgspec.Struct, frozen=True, kw_only=True):
    """The connection dropped (it may come back)."""

    error: Exception | None = None


class ConnectionRestored(msgspec.Struct, frozen=True, kw_only=True):
    """The connection is back and the machine's inbox is subscribed again. ``url`` is the
    server it is back on."""

    url: str = ""


class ConnectionClosed(msgspec.Struct, frozen=True, kw_only=True):
    """The connection is closed for good: the machine ends with ``error``."""

    error: Exception | None = None


# ------------------------------------------------------------------------------ events


class MachineFailed(msgspec.Struct, frozen=True, kw_only=True):
    """Emitted by the session to a machine's sink, as its last event, when the machine could
    not go on: it raised (a bug: it is poisoned), or a frame it asked for could not be queued
    (the reconnect buffer is full, the connection is closed). ``error`` says why."""

    error: BaseException
    reason: str


class SendRequested(msgspec.Struct, frozen=True, kw_only=True):
    """A frame the machine asks the session to publish: ``body`` to ``subject``.

    With ``reply_token`` the reply subject is the machine's inbox prefix followed by the token:
    the machine was attached with a wildcard inbox (``<inbox>.*``), so every reply comes back
    to it and the last token tells which request it answers (a machine with several requests
    in flight, or a new pull per server consumer). ``best_effort``: a publish that cannot be
    queued is dropped instead of ending the machine (a clean-up such as deleting a throw-away
    consumer).
    """

    subject: str
    body: bytes = b""
    reply_token: str | None = None
    best_effort: bool = False
