"""The exception hierarchy of jssync, shared by the sans-IO core and the blocking client.

Every error the library raises derives from :class:`NatsError`. Errors that mean "you passed
something invalid" are also :class:`ValueError`; every timeout is also the builtin
:class:`TimeoutError`, so ``except TimeoutError`` works whichever layer raised it.
"""

from __future__ import annotations

import builtins

__all__ = [
    "NatsError",
    "ConnectionClosedError",
    "ConnectionLostError",
    "NoServersError",
    "AuthorizationError",
    "AuthorizationExpiredError",
    "SecureConnectionRequiredError",
    "TimeoutError",
    "NoRespondersError",
    "MaxPayloadError",
    "BadSubjectError",
    "BadHeaderError",
    "InvalidOptionError",
    "ProtocolError",
    "LocalProtocolError",
    "RemoteProtocolError",
    "ReconnectBufferExceededError",
    "SlowConsumerError",
    "ServerError",
    "PermissionsViolationError",
    "StaleConnectionError",
    "ClientForkedError",
    "JetStreamError",
    "JetStreamAPIError",
    "StreamNotFoundError",
    "StreamNameInUseError",
    "ConsumerNotFoundError",
    "ConsumerExistsError",
    "MsgNotFoundError",
    "WrongLastSequenceError",
    "MsgSizeExceededError",
    "HeaderSizeExceededError",
    "StoreFailedError",
    "MaxMsgsPerSubjectError",
    "MaxMsgsError",
    "MaxBytesError",
    "InvalidPriorityGroupError",
    "API_ERRORS",
    "API_ERRORS_BY_DESCRIPTION",
    "api_error",
    "PubAckTimeoutError",
    "ConsumerDeletedError",
    "NoHeartbeatError",
    "PinIdMismatchError",
    "MsgAlreadyAckedError",
]


class NatsError(Exception):
    """Root of every error raised by jscore and jssync."""


# --- connection --------------------------------------------------------------------------


class ConnectionClosedError(NatsError):
    """The client was closed (by the user, or after giving up reconnecting)."""


class ConnectionLostError(NatsError):
    """The transport broke while an operation was in flight; the outcome is unknown."""


class NoServersError(NatsError):
    """No server of the pool could be reached (or every one ran out of attempts)."""


class AuthorizationError(NatsError):
    """The server refused the credentials ('Authorization Violation')."""


class AuthorizationExpiredError(AuthorizationError):
    """The server reported 'User Authentication Expired'."""


class SecureConnectionRequiredError(NatsError):
    """TLS was required by the client but the server does not offer it (nothing was sent)."""


class TimeoutError(NatsError, builtins.TimeoutError):  # noqa: A001 - deliberate shadow
    """A blocking call ran out of time. Also a builtin :class:`TimeoutError`."""


class NoRespondersError(NatsError):
    """A request found no subscriber (the server answered with a 503 status)."""


class ReconnectBufferExceededError(NatsError):
    """Publishing while disconnected would exceed ``reconnect_buffer_size``; nothing was queued."""


class SlowConsumerError(NatsError):
    """A subscription's pending queue overflowed; messages were dropped and counted."""


class ClientForkedError(NatsError):
    """The client was created in another process: after ``os.fork()`` make a new client."""


# --- bad input (raised before anything is queued) -----------------------------------------


class MaxPayloadError(NatsError, ValueError):
    """Payload plus headers exceed the server's ``max_payload``."""


class BadSubjectError(NatsError, ValueError):
    """A subject, reply subject or queue group name is not valid."""


class BadHeaderError(NatsError, ValueError):
    """A header key or value is not valid (CR/LF are rejected, never rewritten)."""


class InvalidOptionError(NatsError, ValueError):
    """An option has an invalid value or conflicts with another option."""


# --- protocol ----------------------------------------------------------------------------


class ProtocolError(NatsError):
    """The NATS protocol was violated."""


class LocalProtocolError(ProtocolError):
    """This client was asked to do something the protocol does not allow in its state."""


class RemoteProtocolError(ProtocolError):
    """The server sent bytes that are not valid NATS protocol. The parser is poisoned."""


class ServerError(NatsError):
    """The server sent ``-ERR``. ``text`` holds its message without quotes."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


class PermissionsViolationError(ServerError):
    """'Permissions Violation for Publish/Subscription to ...' (non-fatal)."""

    def __init__(self, text: str, *, operation: str = "", subject: str = "", queue: str | None = None) -> None:
        super().__init__(text)
        self.operation = operation
        self.subject = subject
        self.queue = queue


class StaleConnectionError(ServerError):
    """The server (or this client) declared the connection stale."""


# --- JetStream ---------------------------------------------------------------------------


class JetStreamError(NatsError):
    """Root of JetStream errors."""


class JetStreamAPIError(JetStreamError):
    """The JetStream API answered with an error body."""

    def __init__(self, code: int, err_code: int, description: str) -> None:
        super().__init__(f"{description} (code={code}, err_code={err_code})")
        self.code = code
        self.err_code = err_code
        self.description = description


class StreamNotFoundError(JetStreamAPIError):
    """10059 stream not found."""


class StreamNameInUseError(JetStreamAPIError):
    """10058 stream name already in use with a different configuration."""


class ConsumerNotFoundError(JetStreamAPIError):
    """10014 consumer not found."""


class ConsumerExistsError(JetStreamAPIError):
    """10148 consumer already exists (create with a different configuration)."""


class MsgNotFoundError(JetStreamAPIError):
    """10037 no message found."""


class WrongLastSequenceError(JetStreamAPIError):
    """10071 wrong last sequence (an expected-last-* publish condition failed)."""


class MsgSizeExceededError(JetStreamAPIError):
    """10054 message size exceeds the stream's max_msg_size."""


class HeaderSizeExceededError(JetStreamAPIError):
    """10097 header size exceeds the limit."""


class StoreFailedError(JetStreamAPIError):
    """10077 the stream refused to store the message; subclasses say which limit refused it."""


class MaxMsgsPerSubjectError(StoreFailedError):
    """10077 "maximum messages per subject exceeded": on a ``discard_new_per_subject`` stream
    this is the "already published" answer of infinite deduplication."""


class MaxMsgsError(StoreFailedError):
    """10077 "maximum messages exceeded" (discard new)."""


class MaxBytesError(StoreFailedError):
    """10077 "maximum bytes exceeded" (discard new)."""


class InvalidPriorityGroupError(JetStreamAPIError):
    """10162 invalid priority group."""


# err_code -> class; 10077 is refined by description (see :func:`api_error`).
API_ERRORS: dict[int, type[JetStreamAPIError]] = {
    10059: StreamNotFoundError,
    10058: StreamNameInUseError,
    10014: ConsumerNotFoundError,
    10148: ConsumerExistsError,
    10037: MsgNotFoundError,
    10071: WrongLastSequenceError,
    10054: MsgSizeExceededError,
    10097: HeaderSizeExceededError,
    10077: StoreFailedError,
    10162: InvalidPriorityGroupError,
}

# (err_code, exact lower-case description prefix) -> class, checked before API_ERRORS.
API_ERRORS_BY_DESCRIPTION: tuple[tuple[int, str, type[JetStreamAPIError]], ...] = (
    (10077, "maximum messages per subject exceeded", MaxMsgsPerSubjectError),
    (10077, "maximum messages exceeded", MaxMsgsError),
    (10077, "maximum bytes exceeded", MaxBytesError),
)


def api_error(code: int, err_code: int, description: str) -> JetStreamAPIError:
    """The typed error for a JetStream API error body: by err_code AND description for the
    codes the server reuses (10077), never by the HTTP-like code alone."""
    low = description.strip().lower()
    for ec, prefix, cls in API_ERRORS_BY_DESCRIPTION:
        if ec == err_code and low.startswith(prefix):
            return cls(code, err_code, description)
    return API_ERRORS.get(err_code, JetStreamAPIError)(code, err_code, description)


class PubAckTimeoutError(JetStreamError, TimeoutError):
    """No PubAck arrived in time: the publish may or may not have been stored (ambiguous)."""


class ConsumerDeletedError(JetStreamError):
    """The consumer was deleted while a pull was in flight ('409 Consumer Deleted')."""


class NoHeartbeatError(JetStreamError, TimeoutError):
    """Idle heartbeats stopped arriving for two heartbeat intervals."""


class PinIdMismatchError(JetStreamError):
    """The server answered 423: this client's pin id is no longer the pinned one."""


class MsgAlreadyAckedError(JetStreamError):
    """A terminal acknowledgement was already sent for this message."""
