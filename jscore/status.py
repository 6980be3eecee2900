"""Every status line and API error the client interprets: one table of data, one enum.

A server answer the client has to *decide* something about comes in one of two shapes:

* a **status line**, the first line of a header block: ``NATS/1.0 <code> <description>``, usually
  with no payload (pull replies, direct-get replies, the server's ``503`` "no responders");
* an **API error**, the ``error`` object of a JSON reply: ``{"code", "err_code", "description"}``
  (a refused JetStream publish).

:data:`STATUS_TABLE` lists every one of them that changes what the client does, as
:class:`StatusRule` rows. A row names what it matches (its :class:`Line`, the code or err_code
and an exact description prefix) and, in one column per :class:`Context`, the
:class:`Disposition`: what that part of the client does with it. The machines read their
behaviour from here (:mod:`jscore.pull`, :mod:`jscore.directget`, :mod:`jscore.publish`, the
blocking client's requests); ``tools/gen_conformance.py`` writes docs/conformance.md from it.

Matching, the same for every context:

* a status line by its code and the **exact** prefix of its description, case included (never a
  substring search, never case-folded); the rows of one code are tried in table order, the
  specific prefixes first and the code's catch-all (prefix ``""``) last; a code with no row takes
  the context's catch-all row (code None);
* an API error by its err_code and exact description prefix the same way; an err_code with no
  row takes the row for its HTTP-like ``code`` (err_code None, code set), else the catch-all.

Rows belong to one :class:`Family` and fill exactly that family's columns: a pull row says what
consume and fetch do, a direct-get row what a single get and a batch do, and so on. Adding a
status line: add a row here (the specific prefix above its code's catch-all), then one
expectation in tests/core/test_status.py, and regenerate docs/conformance.md.

Lookups are dicts built once at import, per context and code (pull statuses are on a hot path).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Final

from .errors import (
    BadRequestError,
    ConsumerDeletedError,
    ConsumerIsPushBasedError,
    DirectGetNoRespondersError,
    DuplicateMsgIdInProcessError,
    JetStreamAPIError,
    JetStreamError,
    JetStreamNotEnabledError,
    JetStreamUnavailableError,
    MaxBytesError,
    MaxBytesExceededError,
    MaxMsgsError,
    MaxMsgsPerSubjectError,
    MsgNotFoundError,
    NatsError,
    NoRespondersError,
    NoStreamResponseError,
    PinIdMismatchError,
    PullBadRequestError,
    PullNoRespondersError,
    PullRequestLimitError,
    PullStatusError,
    StoreFailedError,
    TooManySubjectsError,
)

__all__ = [
    "Family",
    "Context",
    "FAMILY_CONTEXTS",
    "Line",
    "Disposition",
    "DISPOSITION_TEXT",
    "ALLOWED",
    "StatusRule",
    "STATUS_TABLE",
    "rules",
    "family_rules",
    "by_code",
    "catch_all",
    "classify",
    "classify_api_error",
    "request_error",
    "check_table",
]


class Family(enum.Enum):
    """Who reads a row: each family has its own contexts (columns)."""

    PULL = "pull"
    DIRECT_GET = "direct get"
    PUBLISH = "publish"
    REQUEST = "request"
    API_REQUEST = "JetStream API request"


class Context(enum.Enum):
    """One column of the table. The value is the :class:`StatusRule` attribute holding it."""

    CONSUME = "consume"  # a pull consume (ADR-37)
    FETCH = "fetch"  # a pull fetch / next
    DIRECT_SINGLE = "single"  # a single direct get (a request)
    DIRECT_BATCH = "batch"  # a batched or multi_last direct get
    PUBLISH = "publish"  # the reply to a JetStream publish (sync, async and bulk alike)
    REQUEST = "request"  # a core request (``nc.request``)
    API = "api"  # a JetStream API request (``$JS.API...``)

    @property
    def family(self) -> Family:
        return _FAMILY_OF[self]


_FAMILY_OF: Final[dict[Context, Family]] = {
    Context.CONSUME: Family.PULL,
    Context.FETCH: Family.PULL,
    Context.DIRECT_SINGLE: Family.DIRECT_GET,
    Context.DIRECT_BATCH: Family.DIRECT_GET,
    Context.PUBLISH: Family.PUBLISH,
    Context.REQUEST: Family.REQUEST,
    Context.API: Family.API_REQUEST,
}

FAMILY_CONTEXTS: Final[dict[Family, tuple[Context, ...]]] = {
    family: tuple(c for c in Context if _FAMILY_OF[c] is family) for family in Family
}


class Line(enum.Enum):
    """What a row matches."""

    STATUS = "status line"  # NATS/1.0 <code> <description>: matched on code and description
    API_ERROR = "API error"  # {"error": {...}}: matched on err_code (or code) and description


class Disposition(enum.Enum):
    """What the client does with a status line or an API error, in one context. Each context
    allows its own values (:data:`ALLOWED`)."""

    # pull: consume and fetch
    HEARTBEAT = "heartbeat"
    FLOW_CONTROL = "flow_control"
    # pull: consume
    REPULL = "repull"
    RESET_REPULL = "reset_repull"
    WARN_REPULL = "warn_repull"
    WARN_NO_SPIN = "warn_no_spin"
    WARN_REFUSED_REPULL = "warn_refused_repull"
    WARN_BACKOFF_REPULL = "warn_backoff_repull"
    CLEAR_PIN_REPULL = "clear_pin_repull"
    RETRY_BACKOFF = "retry_backoff"
    TERMINAL = "terminal"
    # pull: fetch / next
    END = "end"
    END_ERROR = "end_error"
    END_ERROR_IF_EMPTY = "end_error_if_empty"
    RESEND_PULL = "resend_pull"
    # direct get (and requests: ERROR)
    END_OF_BATCH = "end_of_batch"
    EMPTY = "empty"
    ERROR = "error"
    # publish replies (the outcome policy in jscore.publish acts on these)
    RESEND = "resend"
    RESEND_WITH_MSG_ID = "resend_with_msg_id"
    IN_PROCESS = "in_process"
    REFUSED = "refused"
    PER_SUBJECT_LIMIT = "per_subject_limit"
    # requests
    DELIVER = "deliver"


D = Disposition

DISPOSITION_TEXT: Final[dict[Disposition, str]] = {
    D.HEARTBEAT: "activity only: resets the heartbeat watchdog",
    D.FLOW_CONTROL: "reply with an empty message to its reply subject",
    D.REPULL: "subtract pending; re-pull when at or under the threshold",
    D.RESET_REPULL: "reset pending to 0; re-pull at once",
    D.WARN_REPULL: "subtract pending; warning; re-pull when at or under the threshold",
    D.WARN_NO_SPIN: "subtract pending; with messages still buffered: next pull after the "
    "application takes one; with an empty buffer after a delivery: re-pull; when nothing came "
    "at all (a message larger than max_bytes): warning once, no pull for `expires` seconds",
    D.WARN_REFUSED_REPULL: "warning; the server refused the pull as it arrived (no pending "
    "headers): subtract that pull's batch / max_bytes; re-pull at once; refused again before a "
    "message arrives: the re-pull waits 1 s, doubling up to 10 s (no spin, never terminal)",
    D.WARN_BACKOFF_REPULL: "warning; subtract pending (the last pull's batch / max_bytes without "
    "pending headers); re-pull after 1 s, doubling up to 10 s while no message arrives; never "
    "terminal (ADR-37: a consume recovers from every status but the two it names)",
    D.CLEAR_PIN_REPULL: "clear the pin id (`PinIdCleared`); subtract pending (all of it without "
    "pending headers); any backoff is cancelled; re-pull at once without `id`",
    D.RETRY_BACKOFF: "warning; pending reset; retry with backoff; ends after K consecutive (default 3)",
    D.TERMINAL: "consume ends with the error",
    D.END: "ends, no error",
    D.END_ERROR: "ends with the error",
    D.END_ERROR_IF_EMPTY: "ends; error only if no message arrived",
    D.RESEND_PULL: "nobody received the pull, so it is sent again (the same pull, with what is left "
    "of its expiry) after 50 ms, doubling, up to 3 times while that expiry leaves room for it; "
    "then, or once a message arrived, ends with the error",
    D.END_OF_BATCH: "ends the request; its Nats-Num-Pending / Nats-Last-Sequence (and "
    "Nats-UpTo-Sequence) give the cursor; multi_last requests the next page while Nats-Num-Pending > 0",
    D.EMPTY: "ends, no error: nothing (more) matched; an empty iteration",
    D.ERROR: "raises the error",
    D.RESEND: "not stored: sent again (with or without a msg id) within the re-send budget; "
    "then a definite failure, or ambiguous if an earlier send may have been stored",
    D.RESEND_WITH_MSG_ID: "not stored: sent again within the re-send budget if the publish has a "
    "msg id; without one, and after the budget, a definite failure (ambiguous if an earlier send "
    "may have been stored)",
    D.IN_PROCESS: "maybe stored (the same msg id is being stored): sent again with its msg id "
    "within the re-send budget; then ambiguous",
    D.REFUSED: "definite failure, nothing stored; ambiguous instead if an earlier send of the same "
    "publish may have been stored",
    D.PER_SUBJECT_LIMIT: "a refusal like the above; a publisher in per-subject dedup mode (the Spark "
    "writers' subject mode) counts it as already stored (a duplicate)",
    D.DELIVER: "the reply is returned to the caller as it is",
}

ALLOWED: Final[dict[Context, frozenset[Disposition]]] = {
    Context.CONSUME: frozenset(
        {
            D.HEARTBEAT,
            D.FLOW_CONTROL,
            D.REPULL,
            D.RESET_REPULL,
            D.WARN_REPULL,
            D.WARN_NO_SPIN,
            D.WARN_REFUSED_REPULL,
            D.WARN_BACKOFF_REPULL,
            D.CLEAR_PIN_REPULL,
            D.RETRY_BACKOFF,
            D.TERMINAL,
        }
    ),
    Context.FETCH: frozenset(
        {D.HEARTBEAT, D.FLOW_CONTROL, D.END, D.END_ERROR, D.END_ERROR_IF_EMPTY, D.RESEND_PULL}
    ),
    Context.DIRECT_SINGLE: frozenset({D.ERROR}),
    Context.DIRECT_BATCH: frozenset({D.END_OF_BATCH, D.EMPTY, D.ERROR}),
    Context.PUBLISH: frozenset({D.RESEND, D.RESEND_WITH_MSG_ID, D.IN_PROCESS, D.REFUSED, D.PER_SUBJECT_LIMIT}),
    Context.REQUEST: frozenset({D.ERROR, D.DELIVER}),
    Context.API: frozenset({D.ERROR, D.DELIVER}),
}
"""The dispositions each context knows what to do with."""


@dataclasses.dataclass(frozen=True)
class StatusRule:
    """One row of the table.

    ``code`` is the status code of a status line, or the HTTP-like ``code`` of an API error (None:
    any). ``err_code`` is the err_code an API-error row matches (None: any; status rows: None).
    ``description_prefix`` is matched with ``str.startswith`` against the description exactly as
    the server sends it (``""``: any). ``error`` is the error type the answer is reported as,
    when it is reported (None on an API-error catch-all: the type of its err_code,
    :func:`jscore.errors.api_error`). ``reports_err_code`` is the err_code a direct-get error
    carries (a status line has none of its own). The context columns hold the dispositions: a
    row fills exactly the columns of its :attr:`family`.
    """

    code: int | None
    description_prefix: str
    note: str
    error: type[NatsError] | None = None
    line: Line = Line.STATUS
    err_code: int | None = None
    reports_err_code: int = 0
    consume: Disposition | None = None
    fetch: Disposition | None = None
    single: Disposition | None = None
    batch: Disposition | None = None
    publish: Disposition | None = None
    request: Disposition | None = None
    api: Disposition | None = None

    def disposition(self, context: Context) -> Disposition | None:
        """The row's disposition in ``context`` (None: the row is not read there)."""
        value: Disposition | None = getattr(self, context.value)
        return value

    @property
    def contexts(self) -> tuple[Context, ...]:
        """The contexts whose column this row fills."""
        return tuple(c for c in Context if getattr(self, c.value) is not None)

    @property
    def family(self) -> Family:
        return self.contexts[0].family

    @property
    def is_catch_all(self) -> bool:
        """Matches whatever is left: no code (status line), or no err_code and no code."""
        if self.line is Line.STATUS:
            return self.code is None
        return self.err_code is None and self.code is None


# ------------------------------------------------------------------ row builders (read like the docs)


def _pull(
    code: int | None, prefix: str, consume: Disposition, fetch: Disposition, error: type[NatsError] | None, note: str
) -> StatusRule:
    return StatusRule(code, prefix, note, error, consume=consume, fetch=fetch)


def _direct(
    code: int | None,
    prefix: str,
    single: Disposition,
    batch: Disposition,
    error: type[NatsError] | None,
    reports_err_code: int,
    note: str,
) -> StatusRule:
    return StatusRule(code, prefix, note, error, reports_err_code=reports_err_code, single=single, batch=batch)


def _publish_status(code: int | None, prefix: str, d: Disposition, error: type[NatsError], note: str) -> StatusRule:
    return StatusRule(code, prefix, note, error, publish=d)


def _publish_error(
    err_code: int | None,
    prefix: str,
    d: Disposition,
    error: type[NatsError] | None,
    note: str,
    *,
    code: int | None = None,
) -> StatusRule:
    return StatusRule(code, prefix, note, error, line=Line.API_ERROR, err_code=err_code, publish=d)


def _request(code: int | None, prefix: str, d: Disposition, error: type[NatsError] | None, note: str) -> StatusRule:
    return StatusRule(code, prefix, note, error, request=d)


def _api(code: int | None, prefix: str, d: Disposition, error: type[NatsError] | None, note: str) -> StatusRule:
    return StatusRule(code, prefix, note, error, api=d)


# ------------------------------------------------------------------ the table

# Within a family, the rows of one code are tried in order: specific prefixes first, the code's
# catch-all ("") last; the family's catch-all row comes last. Descriptions checked against
# nats-server (server/consumer.go, stream.go, errors.json) and, where marked in the tests,
# against a running nats-server.
STATUS_TABLE: Final[tuple[StatusRule, ...]] = (
    # ======================================================== pull (ADR-37): consume | fetch / next
    _pull(100, "Idle Heartbeat", D.HEARTBEAT, D.HEARTBEAT, None,
          "Sent every idle_heartbeat while a pull waits; no reply subject."),
    _pull(100, "FlowControl Request", D.FLOW_CONTROL, D.FLOW_CONTROL, None,
          "Push-consumer flow control; answered anyway if it ever reaches a pull inbox."),
    _pull(100, "", D.HEARTBEAT, D.HEARTBEAT, None,
          "Any other control message: counts as activity, nothing else."),
    _pull(404, "No Messages", D.REPULL, D.END, None,
          "A no_wait (or expires-less) pull found nothing."),
    _pull(404, "", D.REPULL, D.END, None,
          "Any other 404 is read as 'no messages'."),
    _pull(408, "Request Timeout", D.REPULL, D.END, None,
          "The pull expired; carries Nats-Pending-Messages / Nats-Pending-Bytes."),
    _pull(408, "Interest Expired", D.REPULL, D.END, None,
          "The reply subject lost interest (cross-account); carries pending headers."),
    _pull(408, "", D.REPULL, D.END, None,
          "Any other 408, e.g. 'Requests Pending' of a no_wait pull."),
    _pull(409, "Message Size Exceeds MaxBytes", D.WARN_NO_SPIN, D.END_ERROR_IF_EMPTY, MaxBytesExceededError,
          "The next message is larger than the pull's remaining max_bytes; carries pending headers."),
    _pull(409, "Batch Completed", D.REPULL, D.END, None,
          "The batch was filled before max_bytes; carries pending headers."),
    _pull(409, "Leadership Change", D.RESET_REPULL, D.END, None,
          "The consumer leader moved; no pending headers, so pending restarts from 0 (nats.go#2063)."),
    _pull(409, "Server Shutdown", D.WARN_REPULL, D.END, None,
          "The server is going down; carries pending headers."),
    _pull(409, "Exceeded MaxWaiting", D.WARN_REFUSED_REPULL, D.END_ERROR, PullRequestLimitError,
          "Too many pulls waiting on the consumer (max_waiting); the new pull is refused."),
    _pull(409, "Exceeded MaxRequestBatch", D.WARN_REFUSED_REPULL, D.END_ERROR, PullRequestLimitError,
          "'Exceeded MaxRequestBatch of N': batch above the consumer's max_batch."),
    _pull(409, "Exceeded MaxRequestExpires", D.WARN_REFUSED_REPULL, D.END_ERROR, PullRequestLimitError,
          "'Exceeded MaxRequestExpires of D': expires above the consumer's max_expires."),
    _pull(409, "Exceeded MaxRequestMaxBytes", D.WARN_REFUSED_REPULL, D.END_ERROR, PullRequestLimitError,
          "'Exceeded MaxRequestMaxBytes of N': max_bytes above the consumer's max_bytes."),
    _pull(409, "Consumer Deleted", D.TERMINAL, D.END_ERROR, ConsumerDeletedError,
          "The consumer was deleted while the pull waited."),
    _pull(409, "Consumer is push based", D.TERMINAL, D.END_ERROR, ConsumerIsPushBasedError,
          "Pulls sent to a push consumer (terminal in ADR-37)."),
    _pull(409, "", D.WARN_BACKOFF_REPULL, D.END_ERROR, PullStatusError,
          "Any other 409: unknown to this client; a consume recovers (ADR-37), a fetch ends."),
    _pull(400, "Bad Request", D.TERMINAL, D.END_ERROR, PullBadRequestError,
          "'Bad Request - <reason>': the server refused the request (e.g. 'Priority Group missing', "
          "'Invalid Priority Group', 'Not a Overflow Priority consumer'); the same pull would be "
          "refused again, so a consume ends (as nats.go's does)."),
    _pull(423, "Nats-Wrong-Pin-Id", D.CLEAR_PIN_REPULL, D.END_ERROR, PinIdMismatchError,
          "A waiting pull's pin id lost the pin (priority groups, ADR-42); carries pending headers."),
    _pull(423, "Nats-Pin-Id mismatch", D.CLEAR_PIN_REPULL, D.END_ERROR, PinIdMismatchError,
          "A new pull carried a pin id that is not the pinned one; no pending headers."),
    _pull(423, "", D.CLEAR_PIN_REPULL, D.END_ERROR, PinIdMismatchError,
          "Any other 423 is read as a pin id mismatch."),
    _pull(503, "", D.RETRY_BACKOFF, D.RESEND_PULL, PullNoRespondersError,
          "No responders: nothing serves the consumer's MSG.NEXT subject (consumer, stream or "
          "JetStream gone or not ready; on a cluster, a consumer just created can answer so for a "
          "moment, until its leader's interest reaches this server)."),
    _pull(None, "", D.WARN_BACKOFF_REPULL, D.END_ERROR, PullStatusError,
          "Any other status code (e.g. 412 Required Api Level): unknown to this client; a consume "
          "recovers with backoff (ADR-37), a fetch ends."),
    # ======================================================== direct get (ADR-31): single | batch
    # Checked against nats-server 2.15.1 (see tests/integration/test_direct_get_batch.py).
    _direct(204, "EOB", D.ERROR, D.END_OF_BATCH, None, 0,
            "End of batch: zero-length, with Nats-Num-Pending, Nats-Last-Sequence and, for multi_last, "
            "Nats-UpTo-Sequence. A single get never expects one."),
    _direct(204, "", D.ERROR, D.END_OF_BATCH, None, 0,
            "Any other 204 is read as an end of batch too (204 has no other meaning in ADR-31)."),
    _direct(404, "", D.ERROR, D.EMPTY, MsgNotFoundError, 10037,
            "'Message Not Found' (seq, subject, time) or 'No Results' (multi_last): nothing matched. "
            "A single get raises like STREAM.MSG.GET; a batch is simply empty."),
    _direct(408, "", D.ERROR, D.ERROR, BadRequestError, 10003,
            "'Bad Request' / 'Empty Request': the server refused the request. The client validates "
            "first (seq with start_time, batch < 1 ...), so this is a rule it does not know."),
    _direct(413, "", D.ERROR, D.ERROR, TooManySubjectsError, 0,
            "'Too Many Results': multi_last matched more than 1024 subjects, whatever batch or up_to_seq."),
    _direct(503, "", D.ERROR, D.ERROR, DirectGetNoRespondersError, 0,
            "No responders: no such stream, or it does not allow direct get (allow_direct false); "
            "immediate, not a timeout."),
    _direct(None, "", D.ERROR, D.ERROR, None, 0,
            "Any other status (e.g. 500 with a store error): reported with its code and description."),
    # ======================================================== publish replies (sync, async, bulk)
    # Status lines: nats-server answers a publish nobody receives with an empty `NATS/1.0 503`.
    _publish_status(503, "", D.RESEND, NoStreamResponseError,
                    "No responders: no stream captures the subject, or its leader is being elected. "
                    "Nobody received the message, so a re-send can never store it twice."),
    _publish_status(None, "", D.REFUSED, JetStreamError,
                    "Any other status line: not a JetStream answer ('unexpected status')."),
    # API errors (err_codes and texts of nats-server's errors.json; 10077 carries the store's error).
    _publish_error(10158, "", D.IN_PROCESS, DuplicateMsgIdInProcessError,
                   "'duplicate message id is in process' (code 409): a clustered stream is still "
                   "storing a message with this msg id; it may be this one."),
    _publish_error(10008, "", D.RESEND_WITH_MSG_ID, JetStreamUnavailableError,
                   "'JetStream system temporarily unavailable' (code 503): no meta leader, or the "
                   "stream has no quorum; the message was not stored."),
    _publish_error(10077, "maximum messages per subject exceeded", D.PER_SUBJECT_LIMIT, MaxMsgsPerSubjectError,
                   "discard_new_per_subject refused the message (code 503): on a stream keyed by "
                   "subject it is the 'already published' answer of infinite deduplication."),
    _publish_error(10077, "maximum messages exceeded", D.REFUSED, MaxMsgsError,
                   "A discard-new stream is at max_msgs (code 503); a re-send gets the same answer."),
    _publish_error(10077, "maximum bytes exceeded", D.REFUSED, MaxBytesError,
                   "A discard-new stream is at max_bytes (code 503); a re-send gets the same answer."),
    _publish_error(10077, "", D.REFUSED, StoreFailedError,
                   "Any other store failure (code 503): reported with the store's text."),
    _publish_error(None, "", D.RESEND_WITH_MSG_ID, None,
                   "Any other API error with code 503 (no leader, no quorum, not current): "
                   "transient; the message was not stored.",
                   code=503),
    _publish_error(None, "", D.REFUSED, None,
                   "Any other API error (e.g. 10071 wrong last sequence, 10060 expected stream, "
                   "10054 message size): a definite refusal, raised as the err_code's type."),
    # ======================================================== requests
    _request(503, "", D.ERROR, NoRespondersError,
             "No responders (an empty `NATS/1.0 503`): nothing subscribes to the subject; "
             "immediate, not a timeout."),
    _request(None, "", D.DELIVER, None,
             "Any other status line is a reply like any other: the caller gets it with its status."),
    _api(503, "", D.ERROR, JetStreamNotEnabledError,
         "No responders on the JetStream API: JetStream is off, or the domain / API prefix is wrong "
         "(err_code 0)."),
    _api(None, "", D.DELIVER, None,
         "Any other reply is decoded as the API response (an error body raises its typed error)."),
)  # fmt: skip


# ------------------------------------------------------------------ lookups, built once

_RULES: dict[Context, tuple[StatusRule, ...]] = {c: () for c in Context}
_BY_CODE: dict[Context, dict[int, tuple[StatusRule, ...]]] = {c: {} for c in Context}
_ANY: dict[Context, StatusRule] = {}
_API_BY_ERR_CODE: dict[Context, dict[int, tuple[StatusRule, ...]]] = {c: {} for c in Context}
_API_BY_CODE: dict[Context, dict[int, StatusRule]] = {c: {} for c in Context}
_API_ANY: dict[Context, StatusRule] = {}


def _build() -> None:
    for rule in STATUS_TABLE:
        for ctx in rule.contexts:
            _RULES[ctx] += (rule,)
            if rule.line is Line.STATUS:
                if rule.code is None:
                    _ANY.setdefault(ctx, rule)
                else:
                    codes = _BY_CODE[ctx]
                    codes[rule.code] = codes.get(rule.code, ()) + (rule,)
            elif rule.err_code is not None:
                errs = _API_BY_ERR_CODE[ctx]
                errs[rule.err_code] = errs.get(rule.err_code, ()) + (rule,)
            elif rule.code is not None:
                _API_BY_CODE[ctx].setdefault(rule.code, rule)
            else:
                _API_ANY.setdefault(ctx, rule)


def check_table(table: tuple[StatusRule, ...] = STATUS_TABLE) -> None:
    """Raise ValueError when the table is not well formed: a row filling columns of more than
    one family or missing one of its family's columns, a disposition its context does not
    know, a duplicate key, a row hidden by an earlier one, a context without its catch-all."""
    seen: set[tuple[Context, Line, int | None, int | None, str]] = set()
    for i, rule in enumerate(table):
        contexts = rule.contexts
        if not contexts:
            raise ValueError(f"row {i} fills no context column: {rule}")
        family = contexts[0].family
        if contexts != FAMILY_CONTEXTS[family]:
            raise ValueError(f"row {i} must fill exactly the {family.value} columns, fills {contexts}")
        for ctx in contexts:
            d = rule.disposition(ctx)
            if d not in ALLOWED[ctx]:
                raise ValueError(f"row {i}: {d} is not a {ctx.value} disposition")
            key = (ctx, rule.line, rule.code, rule.err_code, rule.description_prefix)
            if key in seen:
                raise ValueError(f"row {i} repeats an earlier key: {rule}")
            seen.add(key)
        if not rule.note:
            raise ValueError(f"row {i} has no note")
        if rule.line is Line.STATUS and rule.err_code is not None:
            raise ValueError(f"row {i}: a status row matches no err_code")
        if rule.line is Line.API_ERROR and rule.err_code is None and rule.description_prefix:
            raise ValueError(f"row {i}: an API-error row without err_code matches no description")
        for earlier in table[:i]:
            if (
                earlier.family is family
                and earlier.line is rule.line
                and earlier.code == rule.code
                and earlier.err_code == rule.err_code
                and rule.description_prefix.startswith(earlier.description_prefix)
            ):
                raise ValueError(f"row {i} is hidden by the earlier row {earlier}")
    for ctx in Context:
        catch_alls = [r for r in table if r.disposition(ctx) is not None and r.line is Line.STATUS and r.code is None]
        if len(catch_alls) != 1:
            raise ValueError(f"{ctx.value}: needs exactly one status catch-all row, has {len(catch_alls)}")


check_table()
_build()


def rules(context: Context) -> tuple[StatusRule, ...]:
    """The rows read in ``context``, in table order."""
    return _RULES[context]


def family_rules(family: Family) -> tuple[StatusRule, ...]:
    """The rows of ``family``, in table order."""
    return tuple(r for r in STATUS_TABLE if r.family is family)


def by_code(context: Context) -> Mapping[int, tuple[StatusRule, ...]]:
    """Status-line rows of ``context`` by code, each code's rows in matching order (for a machine
    that binds it once: a dict hit per status)."""
    return _BY_CODE[context]


def catch_all(context: Context) -> StatusRule:
    """The status-line row of ``context`` that matches a code with no row of its own."""
    return _ANY[context]


def classify(context: Context, code: int, description: str | None) -> StatusRule:
    """The row of a status line in ``context``: the first row of ``code`` whose prefix starts
    ``description`` (case-sensitive), else the context's catch-all."""
    desc = description or ""
    for rule in _BY_CODE[context].get(code, ()):
        if desc.startswith(rule.description_prefix):
            return rule
    return _ANY[context]


def classify_api_error(context: Context, err_code: int, code: int, description: str) -> StatusRule:
    """The row of an API error in ``context``: the first row of ``err_code`` whose prefix starts
    ``description`` (case-sensitive), else the row for its ``code``, else the catch-all."""
    for rule in _API_BY_ERR_CODE[context].get(err_code, ()):
        if description.startswith(rule.description_prefix):
            return rule
    rule_for_code = _API_BY_CODE[context].get(code)
    if rule_for_code is not None:
        return rule_for_code
    return _API_ANY[context]


def request_error(context: Context, code: int, description: str | None, subject: str) -> NatsError | None:
    """For a status reply to a request (``context`` :attr:`Context.REQUEST` or
    :attr:`Context.API`): the error to raise, or None when the reply goes to the caller."""
    rule = classify(context, code, description)
    if rule.disposition(context) is not Disposition.ERROR:
        return None
    cls = rule.error or NoRespondersError
    if issubclass(cls, JetStreamAPIError):
        return cls(
            code,
            0,
            f"JetStream not available: no responders on {subject!r} "
            "(JetStream not enabled, or wrong domain / api_prefix)",
        )
    return cls(f"no responders on {subject!r}")
