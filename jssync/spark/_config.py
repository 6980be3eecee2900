"""Frozen, picklable settings of the Spark integration: where to connect (:class:`NatsConfig`)
and how to write (:class:`WriteOptions`).

Both are plain values: hashable (the executor-side connection cache is keyed by the config),
picklable (Spark ships them to executors inside closures), and their ``repr`` never shows a
password or a token (Spark prints closures and plans in logs and in the UI). Neither holds a
connection: :meth:`NatsConfig.connect` makes one where it runs.

``from_options`` parse the string options of ``DataFrameReader.option`` / the data source (the
Kafka connector's style: ``servers`` comma-separated, ``"true"``/``"false"`` booleans, seconds as
decimal strings) and raise :class:`~jscore.errors.InvalidOptionError` whose message starts with
the option's name.
"""

from __future__ import annotations

import math
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Final, Literal

from jscore.auth import looks_like_seed
from jscore.connection import _redact, parse_server_url
from jscore.errors import BadSubjectError, InvalidOptionError
from jscore.protocol import check_publish_subject
from jscore.publish import DEFAULT_MAX_PENDING_BYTES

if TYPE_CHECKING:
    from jssync.client import Client

__all__ = ["NatsConfig", "WriteOptions", "DedupeMode", "option_lookup"]

DedupeMode = Literal["msgid", "subject"]

_SECRET_FIELDS = frozenset({"password", "token"})
# Paths of files read on the executor, and their option names.
_PATH_FIELDS: Final = {
    "creds_file": "credsFile",
    "nkey_seed_file": "nkeySeedFile",
    "tls_ca_file": "tlsCaFile",
    "tls_cert_file": "tlsCertFile",
    "tls_key_file": "tlsKeyFile",
}


def option_lookup(options: Mapping[str, str]) -> dict[str, str]:
    """The options keyed by lower-cased name (Spark's own options are case-insensitive)."""
    out: dict[str, str] = {}
    for key, value in options.items():
        if not isinstance(key, str):
            raise InvalidOptionError(f"option names must be strings, got {key!r}")
        out[key.lower()] = value
    return out


def _text(opts: Mapping[str, str], name: str) -> str | None:
    value = opts.get(name.lower())
    if value is None:
        return None
    if not isinstance(value, str):
        value = str(value)
    value = value.strip()
    return value or None


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    value = opts.get(name.lower())
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise InvalidOptionError(f"{name}: expected 'true' or 'false', got {value!r}")


def _float(opts: Mapping[str, str], name: str, default: float, *, minimum: float = 0.0, strict: bool = True) -> float:
    value = opts.get(name.lower())
    if value is None:
        return default
    try:
        number = float(str(value).strip())
    except ValueError:
        raise InvalidOptionError(f"{name}: expected a number of seconds, got {value!r}") from None
    if not math.isfinite(number) or (number <= minimum if strict else number < minimum):
        bound = f"> {minimum:g}" if strict else f">= {minimum:g}"
        raise InvalidOptionError(f"{name}: must be a finite number {bound}, got {value!r}")
    return number


def _int(opts: Mapping[str, str], name: str, default: int, *, minimum: int) -> int:
    value = opts.get(name.lower())
    if value is None:
        return default
    try:
        number = int(str(value).strip())
    except ValueError:
        raise InvalidOptionError(f"{name}: expected an integer, got {value!r}") from None
    if number < minimum:
        raise InvalidOptionError(f"{name}: must be >= {minimum}, got {value!r}")
    return number


def _check_positive(name: str, value: object, *, allow_zero: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidOptionError(f"{name}: expected a number, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise InvalidOptionError(f"{name}: must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")


@dataclass(frozen=True, repr=False)
class NatsConfig:
    """Where and how to connect: a frozen, hashable, picklable value whose repr hides secrets.

    ``creds_file``, ``nkey_seed_file`` and the ``tls_*_file`` options are file paths, read where
    the connection is made (on the executor, again at every reconnect), so the files must exist
    there; the secrets in them never travel in the plan, a closure or a pickle. (``password``
    and ``token`` do: Spark ships the config to the executors.) A seed or a creds file's
    content given instead of a path is refused without being echoed.
    """

    servers: tuple[str, ...] = ("nats://127.0.0.1:4222",)
    user: str | None = None
    password: str | None = None
    token: str | None = None
    creds_file: str | None = None
    nkey_seed_file: str | None = None
    tls: bool = False
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    connect_timeout: float = 5.0
    name: str | None = "jssync-spark"

    def __post_init__(self) -> None:
        servers = self.servers
        if isinstance(servers, str):
            servers = tuple(s.strip() for s in servers.split(",") if s.strip())
        elif not isinstance(servers, tuple):
            servers = tuple(servers)
        object.__setattr__(self, "servers", servers)
        if not servers:
            raise InvalidOptionError("servers: at least one server URL is needed")
        for url in servers:
            if not isinstance(url, str):
                raise InvalidOptionError(f"servers: URLs must be strings, got {type(url).__name__}")
            parse_server_url(url)  # InvalidOptionError with the URL redacted
        _check_positive("connect_timeout", self.connect_timeout)
        if not isinstance(self.tls, bool):
            raise InvalidOptionError(f"tls: expected a bool, got {self.tls!r}")
        for f in ("user", "password", "token", *_PATH_FIELDS, "name"):
            value = getattr(self, f)
            if value is not None and not isinstance(value, str):
                raise InvalidOptionError(f"{f}: expected a string, got {type(value).__name__}")
        for f, option in _PATH_FIELDS.items():
            value = getattr(self, f)
            if value is not None and (looks_like_seed(value) or "-----BEGIN" in value or "\n" in value):
                # Never echo it: it is a secret pasted where a path belongs.
                raise InvalidOptionError(
                    f"{option}: expected the path of a file (read on the executor), not the secret itself"
                )
        if self.creds_file is not None and self.nkey_seed_file is not None:
            raise InvalidOptionError("credsFile and nkeySeedFile exclude each other")
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise InvalidOptionError("tlsCertFile and tlsKeyFile go together (the client certificate and its key)")

    @property
    def uses_tls(self) -> bool:
        return self.tls or any(getattr(self, f) is not None for f in ("tls_ca_file", "tls_cert_file"))

    def __repr__(self) -> str:
        parts = []
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in _SECRET_FIELDS and value:
                shown = "'***'"
            elif f.name == "servers":
                shown = repr(tuple(_redact(u) for u in value))
            else:
                shown = repr(value)
            parts.append(f"{f.name}={shown}")
        return f"NatsConfig({', '.join(parts)})"

    __str__ = __repr__

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> NatsConfig:
        """Parse string options: ``servers`` (comma-separated URLs; ``url`` is an alias),
        ``user``, ``password``, ``token``, ``credsFile``, ``nkeySeedFile``, ``tls``
        (true/false), ``tlsCaFile``, ``tlsCertFile``, ``tlsKeyFile``, ``connectTimeout``
        (seconds), ``name``. Unknown options are ignored (they belong to the reader or
        writer)."""
        opts = option_lookup(options)
        for old, new in (("creds", "credsFile"), ("nkeySeed", "nkeySeedFile")):
            if opts.get(old.lower()) is not None:
                raise InvalidOptionError(f"{old}: use {new} (the path of a file read on the executor)")
        raw = _text(opts, "servers") or _text(opts, "url")
        if raw is None:
            raise InvalidOptionError("servers: the option is required (comma-separated NATS URLs)")
        servers = tuple(s.strip() for s in raw.split(",") if s.strip())
        if not servers:
            raise InvalidOptionError("servers: the option is required (comma-separated NATS URLs)")
        for url in servers:
            try:
                parse_server_url(url)
            except InvalidOptionError as exc:
                raise InvalidOptionError(f"servers: {exc}") from None
        name = _text(opts, "name")
        return cls(
            servers=servers,
            user=_text(opts, "user"),
            password=opts.get("password") or None,
            token=opts.get("token") or None,
            creds_file=_text(opts, "credsFile"),
            nkey_seed_file=_text(opts, "nkeySeedFile"),
            tls=_bool(opts, "tls", False),
            tls_ca_file=_text(opts, "tlsCaFile"),
            tls_cert_file=_text(opts, "tlsCertFile"),
            tls_key_file=_text(opts, "tlsKeyFile"),
            connect_timeout=_float(opts, "connectTimeout", 5.0),
            name=name if name is not None else "jssync-spark",
        )

    def connect(self) -> Client:
        """A new connected :class:`jssync.Client` (executor side; never pickle it)."""
        from jssync.client import connect

        kwargs: dict[str, Any] = {"connect_timeout": self.connect_timeout}
        for f in ("user", "password", "token", "name"):
            value = getattr(self, f)
            if value is not None:
                kwargs[f] = value
        if self.creds_file is not None:
            kwargs["creds"] = self.creds_file
        if self.nkey_seed_file is not None:
            kwargs["nkey_seed"] = self.nkey_seed_file
        if self.uses_tls:
            kwargs["tls"] = self.ssl_context()
        return connect(list(self.servers), **kwargs)

    def ssl_context(self) -> ssl.SSLContext:
        """The TLS context these options describe (the CA and client certificate files are read
        here, on the executor)."""
        try:
            ctx = ssl.create_default_context(cafile=self.tls_ca_file)
            if self.tls_cert_file is not None and self.tls_key_file is not None:
                ctx.load_cert_chain(self.tls_cert_file, self.tls_key_file)
        except (OSError, ssl.SSLError) as exc:
            raise InvalidOptionError(f"tls: cannot load the TLS files: {exc}") from None
        return ctx


@dataclass(frozen=True)
class WriteOptions:
    """How a writer publishes rows (see docs/spark.md for the exactly-once matrix).

    ``subject``: the subject of every row (overrides the row's ``subject_column``);
    ``msg_id_column``: take each row's msg id from this column instead of the deterministic
    ``<write id>-<partition>-<row index>`` (for plans that are not deterministic);
    ``dedupe_mode``: ``"msgid"`` (the ``Nats-Msg-Id`` header, deduplicated inside the stream's
    ``duplicate_window``) or ``"subject"`` (the id is appended to the subject as ``.<id>`` on a
    ``discard_new_per_subject`` stream with ``max_msgs_per_subject=1``: no time window);
    ``stream``: the stream to check the ``duplicate_window`` of (``min_duplicate_window``
    seconds; a warning, or an error with ``fail_on_short_window``); ``max_pending`` async
    publishes in flight per task, each given ``ack_timeout`` seconds, and at most
    ``max_pending_bytes`` bytes of them (the frames, headers included); ``retries``: how often a
    publish that failed for a transient or ambiguous reason is sent again (same msg id).
    """

    subject: str | None = None
    subject_column: str = "subject"
    data_column: str = "data"
    headers_column: str = "headers"
    msg_id_column: str | None = None
    dedupe_mode: DedupeMode = "msgid"
    stream: str | None = None
    min_duplicate_window: float = 120.0
    fail_on_short_window: bool = False
    max_pending: int = 4000
    max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES
    ack_timeout: float = 30.0
    retries: int = 5
    value_format: Literal["binary", "string", "json"] = "binary"
    check_subjects: bool = True
    checked: bool = False
    captures: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.dedupe_mode not in ("msgid", "subject"):
            raise InvalidOptionError(f"dedupeMode: expected 'msgid' or 'subject', got {self.dedupe_mode!r}")
        if self.subject is not None:
            if not isinstance(self.subject, str) or not self.subject.strip():
                raise InvalidOptionError(f"subject: expected a non-empty subject, got {self.subject!r}")
            try:
                check_publish_subject(self.subject, "subject")
            except BadSubjectError as exc:
                raise InvalidOptionError(f"subject: {exc}") from None
        for f in ("subject_column", "data_column", "headers_column"):
            value = getattr(self, f)
            if not isinstance(value, str) or not value:
                raise InvalidOptionError(f"{f}: expected a column name, got {value!r}")
        if self.msg_id_column is not None and (not isinstance(self.msg_id_column, str) or not self.msg_id_column):
            raise InvalidOptionError(f"msgIdColumn: expected a column name, got {self.msg_id_column!r}")
        if self.stream is not None and (not isinstance(self.stream, str) or not self.stream.strip()):
            raise InvalidOptionError(f"stream: expected a stream name, got {self.stream!r}")
        _check_positive("minDuplicateWindow", self.min_duplicate_window, allow_zero=True)
        _check_positive("ackTimeout", self.ack_timeout)
        if not isinstance(self.fail_on_short_window, bool):
            raise InvalidOptionError(f"failOnShortWindow: expected a bool, got {self.fail_on_short_window!r}")
        if isinstance(self.max_pending, bool) or not isinstance(self.max_pending, int) or self.max_pending < 1:
            raise InvalidOptionError(f"maxPending: must be an integer >= 1, got {self.max_pending!r}")
        if (
            isinstance(self.max_pending_bytes, bool)
            or not isinstance(self.max_pending_bytes, int)
            or self.max_pending_bytes < 1
        ):
            raise InvalidOptionError(f"maxPendingBytes: must be an integer >= 1, got {self.max_pending_bytes!r}")
        if isinstance(self.retries, bool) or not isinstance(self.retries, int) or self.retries < 0:
            raise InvalidOptionError(f"retries: must be an integer >= 0, got {self.retries!r}")
        if self.value_format not in ("binary", "string", "json"):
            raise InvalidOptionError(f"valueFormat: expected 'binary', 'string' or 'json', got {self.value_format!r}")
        for f in ("check_subjects", "checked"):
            if not isinstance(getattr(self, f), bool):
                raise InvalidOptionError(f"{f}: expected a bool, got {getattr(self, f)!r}")

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> WriteOptions:
        """Parse string options: ``subject``, ``subjectColumn``, ``dataColumn``,
        ``headersColumn``, ``msgIdColumn``, ``dedupeMode`` (msgid | subject), ``stream``,
        ``minDuplicateWindow`` (seconds), ``failOnShortWindow`` (true/false), ``maxPending``,
        ``maxPendingBytes``, ``ackTimeout`` (seconds), ``retries``, ``valueFormat`` (binary | string | json),
        ``checkSubjects`` (true/false). Unknown options are ignored (the data source refuses
        them before, see :mod:`jssync.spark._options`)."""
        opts = option_lookup(options)
        mode = (_text(opts, "dedupeMode") or "msgid").lower()
        if mode not in ("msgid", "subject"):
            raise InvalidOptionError(f"dedupeMode: expected 'msgid' or 'subject', got {opts.get('dedupemode')!r}")
        dedupe: DedupeMode = "subject" if mode == "subject" else "msgid"
        return cls(
            subject=_text(opts, "subject"),
            subject_column=_text(opts, "subjectColumn") or "subject",
            data_column=_text(opts, "dataColumn") or "data",
            headers_column=_text(opts, "headersColumn") or "headers",
            msg_id_column=_text(opts, "msgIdColumn"),
            dedupe_mode=dedupe,
            stream=_text(opts, "stream"),
            min_duplicate_window=_float(opts, "minDuplicateWindow", 120.0, strict=False),
            fail_on_short_window=_bool(opts, "failOnShortWindow", False),
            max_pending=_int(opts, "maxPending", 4000, minimum=1),
            max_pending_bytes=_int(opts, "maxPendingBytes", DEFAULT_MAX_PENDING_BYTES, minimum=1),
            ack_timeout=_float(opts, "ackTimeout", 30.0),
            retries=_int(opts, "retries", 5, minimum=0),
            value_format=_value_format(opts),
            check_subjects=_bool(opts, "checkSubjects", True),
        )


def _value_format(opts: Mapping[str, str]) -> Literal["binary", "string", "json"]:
    raw = _text(opts, "valueFormat")
    low = (raw or "binary").lower()
    if low == "json":
        return "json"
    if low == "string":
        return "string"
    if low == "binary":
        return "binary"
    raise InvalidOptionError(f"valueFormat: expected 'binary', 'string' or 'json', got {raw!r}")
