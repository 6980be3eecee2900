"""Messages as the application sees them."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from jscore import jsmsg as _jsmsg
from jscore.errors import InvalidOptionError, MsgAlreadyAckedError, NotJetStreamMessageError
from jscore.headers import Headers, HeadersInput
from jscore.jsmsg import MsgMetadata
from jscore.protocol import MsgReceived

from . import client as _clientmod  # (a module reference: client.py imports this module first)

if TYPE_CHECKING:
    from typing import Protocol

    from .client import Client

    class _AckNextTarget(Protocol):
        def ack_next(self, reply: str) -> None: ...

__all__ = ["JsMsg", "Msg"]


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


# Set on a consume's dispatcher thread to its client: the acks its handler sends for messages
# of that client are written in batches when the dispatcher reports what it took (never left
# behind: it flushes before it waits). An ack of another client's message is not deferred:
# nothing on this thread would flush it.
class _AckDefer(threading.local):
    # A class default, so a thread that never set it reads None without the AttributeError a
    # getattr(local, name, default) raises and swallows inside (about 0.35 us per ack).
    client: object = None


_ack_defer = _AckDefer()
_new_object = object.__new__

_ACK_NONE: int = _jsmsg.ACK_NONE
_ACK_PROGRESS: int = _jsmsg.ACK_IN_PROGRESS
_ACK_DONE: int = _jsmsg.ACK_DONE


class JsMsg(Msg):
    """A message delivered by a JetStream consumer: a :class:`Msg` that can be acknowledged
    and knows where it came from (:attr:`metadata`, parsed from its ack subject on first use).

    The acknowledgement methods go to the message's reply subject. ``ack``, ``nak`` and
    ``term`` are terminal: a second terminal ack of the same message raises
    :class:`MsgAlreadyAckedError` before anything is sent. ``in_progress`` (``+WPI``) may be
    repeated until a terminal ack. An ack that could not be sent (the connection is closed,
    ``ack_sync`` timed out) leaves the message acknowledgeable, so it can be retried.
    """

    __slots__ = ("_ack_state", "_meta", "_source")
    _ack_state: int
    _meta: MsgMetadata | None
    _source: _AckNextTarget | None  # the consume that delivered it (for ack_next)

    @classmethod
    def _from_event(cls, m: MsgReceived, client: Client | None, source: _AckNextTarget | None = None) -> JsMsg:
        # (Msg._from_event written out: one call less per delivered message)
        msg = _new_object(cls)
        msg.subject = m.subject
        msg.reply = m.reply
        msg.data = m.data
        msg.headers = m.headers
        msg.status = m.status
        msg.description = m.description
        msg.sid = m.sid
        msg.size = m.size
        msg._client = client
        msg._ack_state = _ACK_NONE
        msg._meta = None
        msg._source = source
        return msg

    @property
    def metadata(self) -> MsgMetadata:
        """Stream, consumer, sequences, delivery count, pending and timestamp, from the ack
        subject; :class:`NotJetStreamMessageError` if the message has none."""
        meta: MsgMetadata | None = self._meta
        if meta is None:
            if not self.reply:
                raise NotJetStreamMessageError("the message has no reply subject, hence no JetStream metadata")
            meta = self._meta = _jsmsg.parse_ack_subject(self.reply)
        return meta

    @property
    def acked(self) -> bool:
        """A terminal acknowledgement (ack, nak, term) was sent for this message."""
        return self._ack_state == _ACK_DONE

    def _send_ack(self, body: bytes, terminal: bool) -> None:
        reply = self.reply
        client = self._client
        if not reply or client is None:
            raise NotJetStreamMessageError("the message has no ack subject or no client: it cannot be acknowledged")
        before = self._ack_state
        if before == _ACK_DONE:
            raise MsgAlreadyAckedError("a terminal acknowledgement was already sent for this message")
        self._ack_state = _ACK_DONE if terminal else _ACK_PROGRESS
        try:
            # A consume handler's terminal acks are queued without waking the I/O thread
            # (written with the take reports); a +WPI goes at once: it is meant for a handler
            # still at work.
            _clientmod.shell_of(client).publish_to_reply(reply, body, terminal and _ack_defer.client is client)
        except BaseException:
            self._ack_state = before
            raise

    def ack(self) -> None:
        """Acknowledge (``+ACK``): the server will not redeliver the message."""
        self._send_ack(_jsmsg.ACK, True)

    def nak(self, delay: float | None = None) -> None:
        """Negative ack (``-NAK``): redeliver, after ``delay`` seconds if given."""
        self._send_ack(_jsmsg.nak_body(delay), True)

    def in_progress(self) -> None:
        """Work in progress (``+WPI``): reset the server's ack_wait timer; may be repeated."""
        self._send_ack(_jsmsg.WPI, False)

    def term(self, reason: str | None = None) -> None:
        """Terminate (``+TERM``): never redeliver; ``reason`` shows in the server's advisory."""
        self._send_ack(_jsmsg.term_body(reason), True)

    def ack_next(self) -> None:
        """Acknowledge and ask for the next message (``+NXT``), for a message of a running
        ``consume`` or ``messages()``: the pull of one message goes to that consume's inbox and
        counts in its buffer like its own pulls. When the buffer is full, the consume is
        stopping or the connection is down, it sends a plain ``+ACK`` (the next message comes
        with the consume's own pulls). Terminal, like :meth:`ack`. A message of a fetch or next
        raises :class:`InvalidOptionError` before anything is sent: a fetch is one pull, and a
        message asked for by ``+NXT`` would arrive after it, to nobody."""
        source = self._source
        if source is None:
            raise InvalidOptionError(
                "ack_next() is for messages of a consume or messages(); use ack() for a fetched message"
            )
        reply = self.reply
        if not reply or self._client is None:
            raise NotJetStreamMessageError("the message has no ack subject or no client: it cannot be acknowledged")
        before = self._ack_state
        if before == _ACK_DONE:
            raise MsgAlreadyAckedError("a terminal acknowledgement was already sent for this message")
        self._ack_state = _ACK_DONE
        try:
            source.ack_next(reply)
        except BaseException:
            self._ack_state = before
            raise

    def ack_sync(self, timeout: float = 5.0) -> None:
        """Acknowledge and wait until the server confirms it (a "double ack"): on return the
        ack is recorded. A :class:`TimeoutError` leaves the message acknowledgeable."""
        reply = self.reply
        client = self._client
        if not reply or client is None:
            raise NotJetStreamMessageError("the message has no ack subject or no client: it cannot be acknowledged")
        before = self._ack_state
        if before == _ACK_DONE:
            raise MsgAlreadyAckedError("a terminal acknowledgement was already sent for this message")
        self._ack_state = _ACK_DONE
        try:
            client.request(reply, _jsmsg.ACK, timeout=timeout)
        except BaseException:
            self._ack_state = before
            raise

    def __repr__(self) -> str:
        return f"JsMsg(subject={self.subject!r}, reply={self.reply!r}, data={self.data[:64]!r})"
