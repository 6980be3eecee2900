"""Events and commands of the connection machine.

Events are frozen, complete values named as past-tense facts. Some of them are directives to the
transport (``ConnectRequested``, ``TlsUpgradeRequested``, ``CloseRequested``); the rest are
facts for the application, and the connection-level ones (``Connected``, ``Disconnected``,
``Reconnected``, ``LameDuck``, ``ServerError``, ``Closed`` ...) are what ``on_event`` receives.

Commands are imperative nouns passed to :meth:`jscore.connection.Connection.handle`.
"""

from __future__ import annotations

from typing import Any, Union

import msgspec

from .headers import HeadersInput
from .protocol import AcksReceived, DirectRepliesReceived, MsgReceived, MsgsReceived

__all__ = [
    "ServerAddress",
    "ConnectRequested",
    "TlsUpgradeRequested",
    "CloseRequested",
    "Connected",
    "Reconnected",
    "Disconnected",
    "ConnectAttemptFailed",
    "LameDuck",
    "ServerError",
    "ServersDiscovered",
    "ServerPoolWarning",
    "Closed",
    "FlushCompleted",
    "ReplyReceived",
    "SubscriptionEnded",
    "PublishesDropped",
    "ConnectionEvent",
    "Event",
    "Publish",
    "Subscribe",
    "Unsubscribe",
    "Request",
    "CancelRequest",
    "Flush",
    "Close",
    "Command",
]


class ServerAddress(msgspec.Struct, frozen=True, kw_only=True):
    """One server of the pool. ``url`` never shows a password."""

    url: str
    scheme: str
    host: str
    port: int
    user: str | None = None
    password: str | None = None
    discovered: bool = False

    def __repr__(self) -> str:
        return f"ServerAddress({self.url!r}, discovered={self.discovered})"

    @property
    def tls(self) -> bool:
        return self.scheme == "tls"


# --- directives to the transport ----------------------------------------------------------


class ConnectRequested(msgspec.Struct, frozen=True, kw_only=True):
    """Open a TCP connection to ``server`` (TLS first if ``tls_first``), then call
    ``connection_made`` or ``connection_lost``. ``tls_hostname`` is the name to verify a
    certificate against: the host of the first configured URL for discovered servers."""

    server: ServerAddress
    tls_hostname: str
    tls_first: bool
    timeout: float


class TlsUpgradeRequested(msgspec.Struct, frozen=True, kw_only=True):
    """Wrap the socket in TLS now (after INFO), then call ``tls_established``."""

    hostname: str


class CloseRequested(msgspec.Struct, frozen=True, kw_only=True):
    """Close the socket (after writing ``data_to_send()``), then call ``connection_lost``."""

    error: Exception | None


# --- connection facts ---------------------------------------------------------------------


class Connected(msgspec.Struct, frozen=True, kw_only=True):
    url: str
    server_info: dict[str, Any]


class Reconnected(msgspec.Struct, frozen=True, kw_only=True):
    url: str
    server_info: dict[str, Any]


class Disconnected(msgspec.Struct, frozen=True, kw_only=True):
    url: str
    error: Exception | None


class ConnectAttemptFailed(msgspec.Struct, frozen=True, kw_only=True):
    url: str
    error: Exception | None


class LameDuck(msgspec.Struct, frozen=True, kw_only=True):
    """The server entered lame-duck mode; it will close this connection soon."""

    url: str


class ServerError(msgspec.Struct, frozen=True, kw_only=True):
    """A ``-ERR`` from the server, classified (see :mod:`jscore.errors`)."""

    error: Exception
    fatal: bool


class ServersDiscovered(msgspec.Struct, frozen=True, kw_only=True):
    urls: tuple[str, ...]


class ServerPoolWarning(msgspec.Struct, frozen=True, kw_only=True):
    message: str


class Closed(msgspec.Struct, frozen=True, kw_only=True):
    """The client is closed for good. ``error`` says why, ``None`` after a user close."""

    error: Exception | None


class PublishesDropped(msgspec.Struct, frozen=True, kw_only=True):
    """Buffered publishes that could not be sent (never silent): closing while disconnected, or
    larger than the new server's max_payload after a reconnect."""

    count: int
    reason: str


# --- application facts --------------------------------------------------------------------


class FlushCompleted(msgspec.Struct, frozen=True, kw_only=True):
    token: int


class ReplyReceived(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    token: str
    msg: MsgReceived


class SubscriptionEnded(msgspec.Struct, frozen=True, kw_only=True):
    """The subscription ended: auto-unsubscribe reached, or the server refused it."""

    sid: int
    error: Exception | None


ConnectionEvent = Union[
    Connected,
    Reconnected,
    Disconnected,
    ConnectAttemptFailed,
    LameDuck,
    ServerError,
    ServersDiscovered,
    ServerPoolWarning,
    Closed,
    PublishesDropped,
]

Event = Union[
    ConnectRequested,
    TlsUpgradeRequested,
    CloseRequested,
    ConnectionEvent,
    FlushCompleted,
    ReplyReceived,
    SubscriptionEnded,
    MsgReceived,
    AcksReceived,
    MsgsReceived,
    DirectRepliesReceived,
]


# --- commands -----------------------------------------------------------------------------


class Publish(msgspec.Struct, frozen=True, kw_only=True):
    subject: str
    payload: bytes = b""
    reply: str | None = None
    headers: HeadersInput | None = None


class Subscribe(msgspec.Struct, frozen=True, kw_only=True):
    subject: str
    queue: str | None = None
    max_msgs: int | None = None


class Unsubscribe(msgspec.Struct, frozen=True, kw_only=True):
    sid: int
    max_msgs: int | None = None


class Request(msgspec.Struct, frozen=True, kw_only=True):
    subject: str
    payload: bytes = b""
    headers: HeadersInput | None = None


class CancelRequest(msgspec.Struct, frozen=True, kw_only=True):
    token: str


class Flush(msgspec.Struct, frozen=True):
    pass


class Close(msgspec.Struct, frozen=True):
    pass


Command = Union[Publish, Subscribe, Unsubscribe, Request, CancelRequest, Flush, Close]
