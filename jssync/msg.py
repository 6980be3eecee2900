"""Messages as the application sees them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from jscore.headers import Headers, HeadersInput
from jscore.protocol import MsgReceived

if TYPE_CHECKING:
    from .client import Client

__all__ = ["Msg"]


class Msg:
    """A received message: ``subject``, ``reply``, ``data`` (bytes), ``headers`` (None or
    :class:`Headers`). Status messages (``NATS/1.0 503`` ...) carry ``status`` and
    ``description``."""

    __slots__ = ("subject", "reply", "data", "headers", "status", "description", "sid", "size", "_client")

    def __init__(
        self,
        subject: str,
        data: bytes = b"",
        reply: str | None = None,
        headers: Headers | None = None,
        *,
        status: int | None = None,
        description: str | None = None,
        sid: int = 0,
        size: int = 0,
        client: Client | None = None,
    ) -> None:
        self.subject = subject
        self.reply = reply
        self.data = data
        self.headers = headers
        self.status = status
        self.description = description
        self.sid = sid
        self.size = size
        self._client = client

    @classmethod
    def _from_event(cls, m: MsgReceived, client: Client | None) -> Msg:
        msg = cls.__new__(cls)
        msg.subject = m.subject
        msg.reply = m.reply
        msg.data = m.data
        msg.headers = m.headers
        msg.status = m.status
        msg.description = m.description
        msg.sid = m.sid
        msg.size = m.size
        msg._client = client
        return msg

    def respond(self, payload: bytes = b"", *, headers: HeadersInput | None = None) -> None:
        """Publish a reply to this message's reply subject."""
        if not self.reply:
            raise ValueError("message has no reply subject")
        if self._client is None:
            raise ValueError("message is not bound to a client")
        self._client.publish(self.reply, payload, headers=headers)

    def __repr__(self) -> str:
        extra = f", status={self.status}" if self.status is not None else ""
        return f"Msg(subject={self.subject!r}, reply={self.reply!r}, data={self.data[:64]!r}{extra})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Msg):
            return NotImplemented
        return (self.subject, self.reply, self.data, self.headers, self.status) == (
            other.subject,
            other.reply,
            other.data,
            other.headers,
            other.status,
        )

    __hash__ = None  # type: ignore[assignment]
