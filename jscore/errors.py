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
    "ConnectTimeoutError",
    "AuthorizationError",
    "AuthorizationExpiredError",
    "AuthorizationRevokedError",
    "CredentialsError",
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
    "JetStreamNotEnabledError",
    "JetStreamNotEnabledForAccountError",
    "JetStreamUnavailableError",
    "BadRequestError",
    "InsufficientResourcesError",
    "AccountResourcesExceededError",
    "StorageResourcesExceededError",
    "MemoryResourcesExceededError",
    "MaximumStreamsLimitError",
    "MaximumConsumersLimitError",
    "InvalidStreamConfigError",
    "StreamSubjectOverlapError",
    "StreamSealedError",
    "StreamNotMatchError",
    "WrongLastMsgIdError",
    "DuplicateMsgIdInProcessError",
    "ConsumerDoesNotExistError",
    "ConsumerNameInUseError",
    "WorkQueueConsumerConflictError",
    "PriorityGroupNotFoundError",
    "MsgTTLDisabledError",
    "InvalidMsgTTLError",
    "RequiredApiLevelError",
    "API_ERRORS",
    "API_ERRORS_BY_DESCRIPTION",
    "api_error",
    "PubAckTimeoutError",
    "ConsumerDeletedError",
    "NoHeartbeatError",
    "FetchTimeoutError",
    "PinIdMismatchError",
    "NoConsumerInfoError",
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
    """The server reported 'User Authentication Expired' (or 'Account Authentication Expired')."""


class AuthorizationRevokedError(AuthorizationError):
    """The server reported 'User Authentication Revoked' (the account revoked this user)."""


class SecureConnectionRequiredError(NatsError):
    """TLS was required by the client but the server does not offer it (nothing was sent)."""


class TimeoutError(NatsError, builtins.TimeoutError):  # noqa: A001 - deliberate shadow
    """A blocking call ran out of time. Also a builtin :class:`TimeoutError`."""


class ConnectTimeoutError(NoServersError, TimeoutError):
    """No server could be reached and the last attempt ran out of time (no TCP connection, no
    INFO, no PONG within ``connect_timeout``): a :class:`NoServersError` and a
    :class:`TimeoutError`."""


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


class CredentialsError(InvalidOptionError):
    """Credentials that cannot be used, found before anything is sent to a server: a creds or
    seed file that is missing, unreadable or malformed, a seed that is not a user seed, a
    credentials callback that failed, or the ``nkeys`` extra not installed. The message names
    the file or callback, never the secret. (A server refusing credentials raises
    :class:`AuthorizationError`.)"""


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
    """10037 no message found (also 10043 "sequence N not found", 10057 "no message found" of a
    message delete, and the 404 of a direct get)."""


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


class JetStreamNotEnabledError(JetStreamAPIError):
    """10076 JetStream is not enabled on the server. Also raised (with ``err_code`` 0) when the
    JetStream API has no responders: JetStream is off, or the domain / api_prefix is wrong."""


class JetStreamNotEnabledForAccountError(JetStreamNotEnabledError):
    """10039 JetStream is not enabled for this account."""


class JetStreamUnavailableError(JetStreamAPIError):
    """10008 "JetStream system temporarily unavailable" (a cluster without a meta leader, or a
    stream/consumer without quorum). Transient: worth retrying."""


class BadRequestError(JetStreamAPIError):
    """10003 the server could not make sense of the request."""


class InsufficientResourcesError(JetStreamAPIError):
    """10023 insufficient resources; the base of the other resource-limit errors."""


class AccountResourcesExceededError(InsufficientResourcesError):
    """10002 resource limits exceeded for the account."""


class StorageResourcesExceededError(InsufficientResourcesError):
    """10047 insufficient storage resources available (``max_file_store`` reached)."""


class MemoryResourcesExceededError(InsufficientResourcesError):
    """10028 insufficient memory resources available (``max_memory_store`` reached)."""


class MaximumStreamsLimitError(JetStreamAPIError):
    """10027 maximum number of streams reached."""


class MaximumConsumersLimitError(JetStreamAPIError):
    """10026 maximum consumers limit reached (the stream's ``max_consumers``)."""


class InvalidStreamConfigError(JetStreamAPIError):
    """10052 the stream configuration is not valid; the description says why."""


class StreamSubjectOverlapError(JetStreamAPIError):
    """10065 the stream's subjects overlap with those of an existing stream."""


class StreamSealedError(JetStreamAPIError):
    """10109 invalid operation on a sealed stream."""


class StreamNotMatchError(JetStreamAPIError):
    """10060 expected stream does not match (the ``expected_stream`` publish condition)."""


class WrongLastMsgIdError(JetStreamAPIError):
    """10070 wrong last msg ID (the ``expected_last_msg_id`` publish condition failed)."""


class DuplicateMsgIdInProcessError(JetStreamAPIError):
    """10158 a message with the same Nats-Msg-Id is being stored right now: the outcome of this
    publish is not known yet. Ambiguous, safe to retry with the same msg id."""


class ConsumerDoesNotExistError(ConsumerNotFoundError):
    """10149 "consumer does not exist": an update of a consumer that is not there."""


class ConsumerNameInUseError(JetStreamAPIError):
    """10013 consumer name already in use."""


class WorkQueueConsumerConflictError(JetStreamAPIError):
    """10099 / 10100: a work-queue stream allows one consumer per subject; the new consumer
    overlaps an existing one ("multiple non-filtered consumers not allowed on workqueue stream",
    "filtered consumer not unique on workqueue stream")."""


class PriorityGroupNotFoundError(JetStreamAPIError):
    """10160 the priority group does not exist for this consumer."""


class MsgTTLDisabledError(JetStreamAPIError):
    """10166 per-message TTL is disabled (the stream needs ``allow_msg_ttl``)."""


class InvalidMsgTTLError(JetStreamAPIError):
    """10165 invalid per-message TTL."""


class RequiredApiLevelError(JetStreamAPIError):
    """10185 the request needs a newer JetStream API level than the server offers."""


# err_code -> class; 10077 is refined by description (see :func:`api_error`).
API_ERRORS: dict[int, type[JetStreamAPIError]] = {
    10059: StreamNotFoundError,
    10058: StreamNameInUseError,
    10014: ConsumerNotFoundError,
    10148: ConsumerExistsError,
    10037: MsgNotFoundError,
    10043: MsgNotFoundError,  # "sequence N not found" (e.g. deleting a deleted message)
    10071: WrongLastSequenceError,
    10054: MsgSizeExceededError,
    10097: HeaderSizeExceededError,
    10077: StoreFailedError,
    10162: InvalidPriorityGroupError,
    10164: WrongLastSequenceError,
    10076: JetStreamNotEnabledError,
    10039: JetStreamNotEnabledForAccountError,
    10008: JetStreamUnavailableError,
    10003: BadRequestError,
    10023: InsufficientResourcesError,
    10002: AccountResourcesExceededError,
    10047: StorageResourcesExceededError,
    10028: MemoryResourcesExceededError,
    10027: MaximumStreamsLimitError,
    10026: MaximumConsumersLimitError,
    10052: InvalidStreamConfigError,
    10065: StreamSubjectOverlapError,
    10109: StreamSealedError,
    10060: StreamNotMatchError,
    10070: WrongLastMsgIdError,
    10158: DuplicateMsgIdInProcessError,
    10149: ConsumerDoesNotExistError,
    10013: ConsumerNameInUseError,
    10099: WorkQueueConsumerConflictError,
    10100: WorkQueueConsumerConflictError,
    10160: PriorityGroupNotFoundError,
    10166: MsgTTLDisabledError,
    10165: InvalidMsgTTLError,
    10185: RequiredApiLevelError,
}

# (err_code, exact lower-case description prefix) -> class, checked before API_ERRORS.
API_ERRORS_BY_DESCRIPTION: tuple[tuple[int, str, type[JetStreamAPIError]], ...] = (
    (10077, "maximum messages per subject exceeded", MaxMsgsPerSubjectError),
    (10077, "maximum messages exceeded", MaxMsgsError),
    (10077, "maximum bytes exceeded", MaxBytesError),
    # STREAM.MSG.DELETE of a missing sequence answers the generic 10057 "no message found".
    (10057, "no message found", MsgNotFoundError),
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


class FetchTimeoutError(JetStreamError, TimeoutError):
    """A fetch's pull was not ended by the server in time: nothing (not even its ``408`` or
    ``404``) came by ``expires`` plus a grace, or a ``no_wait`` pull got no answer at all within
    a second. The server or the link is silent (or, for ``no_wait``, the consumer is at
    ``max_ack_pending``: the server holds such a pull without a word); the messages that did
    arrive are kept. Also a :class:`TimeoutError`."""


class PinIdMismatchError(JetStreamError):
    """The server answered 423: this client's pin id is no longer the pinned one."""


class NoConsumerInfoError(JetStreamError):
    """A consumer handle bound without its info (``js.consumer(..., bind=True)``) was asked for
    its cached info, or for something that needs it, before ``consumer.info()`` succeeded."""


class MsgAlreadyAckedError(JetStreamError):
    """A terminal acknowledgement was already sent for this message."""


# --- JetStream publishing (jscore.publish / jssync.publish) --------------------------------


class NoStreamResponseError(JetStreamError, NoRespondersError):
    """A JetStream publish found no stream listening on its subject (a 503 no-responders answer,
    still there after the retries): no stream captures the subject, or its leader is being
    elected. A definite failure: nothing was stored. Also a :class:`NoRespondersError`."""


class TooManyStalledMsgsError(JetStreamError, TimeoutError):
    """``publish_async`` waited ``timeout`` seconds for room in the full async-publish window;
    the message was NOT sent. Also a :class:`TimeoutError`."""


__all__ += ["NoStreamResponseError", "TooManyStalledMsgsError"]


# --- JetStream messages and the ordered consumer (jscore.jsmsg / jscore.ordered) -----------


class NotJetStreamMessageError(JetStreamError, ValueError):
    """The message has no JetStream ack subject (``$JS.ACK...``) or a malformed one, so it has
    no metadata and cannot be acknowledged: a core NATS message, a message of an ack-none
    consumer without reply, or a reply subject that is not in either server format."""


class OrderedConsumerResetError(JetStreamError):
    """The ordered consumer could not be recreated: it gave up after its bounded number of
    consecutive unsuccessful attempts, or a recreation failed for good. The last failure is
    the ``__cause__``. (A stream that is gone is reported as :class:`StreamNotFoundError`.)"""


__all__ += ["NotJetStreamMessageError", "OrderedConsumerResetError"]


# --- pull consumers: statuses that end a pull (jscore.pull) ---------------------------------


class PullStatusError(JetStreamError):
    """The server ended a pull with a status line this client reports as an error (an unknown
    409, an unknown code ...). ``code`` and ``description`` are the status line's; the status
    table in :mod:`jscore.pull` says which status maps to which subclass."""

    def __init__(self, code: int, description: str, message: str | None = None) -> None:
        super().__init__(message or f"pull ended with status {code} {description}".rstrip())
        self.code = code
        self.description = description


class ConsumerIsPushBasedError(PullStatusError):
    """'409 Consumer is push based': pulls were sent to a push consumer. Terminal (ADR-37)."""


class PullRequestLimitError(PullStatusError):
    """A pull broke a limit of the consumer: '409 Exceeded MaxWaiting', 'Exceeded
    MaxRequestBatch of N', 'Exceeded MaxRequestExpires of D', 'Exceeded MaxRequestMaxBytes of N'.
    A fetch ends with it; a consume reports it as a warning and keeps going."""


class PullBadRequestError(PullStatusError, ValueError):
    """'400 Bad Request - ...': the server refused the pull request (for instance a priority
    group option on a consumer without that policy). Terminal."""


class MaxBytesExceededError(PullStatusError):
    """'409 Message Size Exceeds MaxBytes': the next message is larger than the pull's
    max_bytes, so nothing could be delivered. A fetch that got no message ends with it; a
    consume reports it as a warning (once per streak) without pulling in a tight loop."""


class PullNoRespondersError(ConsumerNotFoundError, NoRespondersError):
    """A pull got '503' (no responders): nothing listens on the consumer's MSG.NEXT subject, so
    the consumer (or its stream, or JetStream) is gone or not ready. A fetch ends with it; a
    consume retries with backoff and ends with it after K consecutive 503s. Both a
    :class:`ConsumerNotFoundError` and a :class:`NoRespondersError`."""

    def __init__(self, code: int = 503, description: str = "", message: str | None = None) -> None:
        status = f"{code} {description}".rstrip()
        super().__init__(code, 0, message or f"no responders for the pull request ({status})")
        self.description = description or "No Responders"


__all__ += [
    "PullStatusError",
    "ConsumerIsPushBasedError",
    "PullRequestLimitError",
    "PullBadRequestError",
    "MaxBytesExceededError",
    "PullNoRespondersError",
]


class NoMessagesError(TimeoutError):
    """``next()`` ended without a message: the pull expired (or the consumer had nothing for a
    no_wait pull). Also a builtin :class:`TimeoutError`."""

__all__ += ["NoMessagesError"]


# --- batched direct get (ADR-31; jscore.directget) ------------------------------------------


class TooManySubjectsError(JetStreamAPIError):
    """'413 Too Many Results': a multi_last direct get matched more than 1024 subjects (the
    server's limit, counted over the subjects that MATCH, not the filters sent). Narrow the
    filters or read with a consumer. ``code`` 413, ``err_code`` 0 (a status carries none)."""


class DirectGetNoRespondersError(JetStreamError, NoRespondersError):
    """A direct get found no responder on ``$JS.API.DIRECT.GET.<stream>``: the stream does not
    exist or does not allow direct get (``allow_direct`` is false). Also a
    :class:`NoRespondersError`."""


class BatchGetUnsupportedError(JetStreamError):
    """The server answered a batched direct get without ``Nats-Num-Pending`` in its first reply:
    it predates batch support (ADR-31; nats-server < 2.11) and sends one message only."""


class BatchGapError(JetStreamError):
    """A reply of a batched direct get was lost: a message's (or the end-of-batch marker's)
    ``Nats-Last-Sequence`` is not the sequence of the message received before it. The messages
    received before the gap were delivered; resume from the last one."""


__all__ += ["TooManySubjectsError", "DirectGetNoRespondersError", "BatchGetUnsupportedError", "BatchGapError"]


# --- key-value store (jscore.kv, jssync.kv) --------------------------------------------------


class InvalidKeyError(InvalidOptionError):
    """A key (or key filter) the key-value layout does not allow; raised before anything is
    sent."""


class BucketNotFoundError(StreamNotFoundError):
    """No key-value bucket or object store of that name (its stream ``KV_<bucket>`` /
    ``OBJ_<bucket>`` does not exist). Made from the server's error, or from a message."""

    def __init__(self, code: int | str, err_code: int = 10059, description: str | None = None) -> None:
        if isinstance(code, str):
            super().__init__(404, err_code, code)
        else:
            super().__init__(code, err_code, description or "bucket not found")

    @classmethod
    def of(cls, error: StreamNotFoundError, bucket: str) -> BucketNotFoundError:
        """The error of a missing ``bucket`` for the stream error that says so (``error``
        itself when it is one already): the server's codes kept, ``error`` as its cause."""
        if isinstance(error, BucketNotFoundError):
            return error
        out = cls(error.code, error.err_code, f"bucket {bucket!r} not found")
        out.__cause__ = error
        return out


class KeyNotFoundError(JetStreamError):
    """The key has no value (never written, or gone), or the revision asked for is not one of
    this key's."""


class KeyDeletedError(KeyNotFoundError):
    """The key's latest entry is a delete or purge marker. ``entry`` is that marker."""

    def __init__(self, message: str, entry: object = None) -> None:
        super().__init__(message)
        self.entry = entry


class KeyWrongLastSequenceError(WrongLastSequenceError):
    """A compare-and-set write (``update``, ``delete(last=)``, ``purge(last=)``) found another
    revision than the one given (the server's 10071)."""


class KeyExistsError(KeyWrongLastSequenceError):
    """``create`` found a value for the key."""


__all__ += [
    "InvalidKeyError",
    "BucketNotFoundError",
    "KeyNotFoundError",
    "KeyDeletedError",
    "KeyWrongLastSequenceError",
    "KeyExistsError",
]


# --- object store (jscore.objstore / jssync.objstore) ----------------------------------------


class InvalidBucketNameError(InvalidOptionError):
    """A bucket name that is not 1+ characters of ``A-Z a-z 0-9 _ -`` (refused before sending)."""


class InvalidObjectNameError(InvalidOptionError):
    """An object name that is empty or not a string (refused before sending)."""


class ObjectNotFoundError(JetStreamError):
    """No such object in the bucket (or it was deleted)."""


class ObjectExistsError(JetStreamError):
    """The name is taken by another object (a rename or a link onto an existing object)."""


class BadObjectMetaError(JetStreamError):
    """The stored metadata of an object is not valid ObjectInfo JSON."""


class DigestMismatchError(JetStreamError):
    """The chunks read do not match the object's size, chunk count or SHA-256 digest. The
    reader raises it instead of handing out the last chunk, so a corrupted object never reads
    to a clean end."""


class BucketSealedError(JetStreamError):
    """The bucket is sealed: it can be read but not changed."""


class ChunkOrderError(JetStreamError):
    """A put's chunk was stored after a chunk published later (a publish sent again after the
    server answered 503 no responders, while it restarted): the object would read back
    scrambled, so the put is undone (its chunks purged, the previous object kept). Put again."""


__all__ += [
    "InvalidBucketNameError", "InvalidObjectNameError", "ObjectNotFoundError",
    "ObjectExistsError", "BadObjectMetaError", "DigestMismatchError", "BucketSealedError", "ChunkOrderError",
]
