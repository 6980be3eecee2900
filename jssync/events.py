"""Typed notifications passed to ``on_event``.

The connection-level ones come from the core (:mod:`jscore.events`); the client adds the ones
only it can observe (a slow subscription, a callback that raised). The notifications of a
consume (``consume(on_event=...)``, ``messages().notifications()``) come from the pull machine
(:mod:`jscore.pull`) and are re-exported here: ``HeartbeatMissed``, ``StatusWarning``,
``PinIdChanged``, ``PinIdCleared``, ``ConsumerReconnected``, ``ConsumeTerminated``.
"""

from __future__ import annotations

import msgspec

from jscore.events import (
    Closed,
    ConnectAttemptFailed,
    Connected,
    ConnectionEvent,
    Disconnected,
    LameDuck,
    PublishesDropped,
    Reconnected,
    ServerError,
    ServerPoolWarning,
    ServersDiscovered,
)
from jscore.pull import (
    ConsumerReconnected,
    ConsumeTerminated,
    HeartbeatMissed,
    PinIdChanged,
    PinIdCleared,
    StatusWarning,
)

__all__ = [
    "Closed",
    "ConnectAttemptFailed",
    "Connected",
    "ConnectionEvent",
    "Disconnected",
    "LameDuck",
    "PublishesDropped",
    "Reconnected",
    "ServerError",
    "ServerPoolWarning",
    "ServersDiscovered",
    "SlowConsumer",
    "CallbackError",
    # consume notifications
    "ConsumerReconnected",
    "ConsumeTerminated",
    "HeartbeatMissed",
    "PinIdChanged",
    "PinIdCleared",
    "StatusWarning",
]


class SlowConsumer(msgspec.Struct, frozen=True, kw_only=True):
    """A subscription's queue was full; ``dropped`` messages were discarded so far."""

    sid: int
    subject: str
    dropped: int


class CallbackError(msgspec.Struct, frozen=True, kw_only=True):
    """A subscription callback (or an ``on_event`` handler) raised; the subscription goes on."""

    subject: str
    error: BaseException
