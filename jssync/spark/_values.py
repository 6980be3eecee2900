"""Payloads as columns: ``valueFormat`` / ``valueSchema`` of the ``jetstream`` data source.

* :func:`parse_ddl` reads a Spark DDL schema (``"id long, name string, tags array<string>"``)
  into plain :class:`Field` values, without a JVM (the data source's driver side runs in a Python
  worker that has none);
* :class:`ValueDecoder` turns one message payload into the values of those columns on the
  workers, treating malformed payloads like Spark's JSON reader (``mode``: ``PERMISSIVE`` keeps
  the row with the bad fields null and the payload in the corrupt-record column,
  ``DROPMALFORMED`` drops it, ``FAILFAST`` fails the task);
* :func:`json_encoder` serialises rows for ``valueFormat=json`` writes; :func:`json_plan` says
  which columns, and :func:`payload_rows` turns the rows of a ``valueFormat`` json or string
  write into payloads (the data source's Row path and the writer functions share it).

Nothing here imports pyspark or pyarrow: the values produced are plain Python values that
``pyarrow.array`` takes for the matching Arrow type (timestamps as microseconds since the epoch).
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timezone
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any, Final, Literal, Union

import msgspec

from jscore.errors import InvalidOptionError, JetStreamError

if TYPE_CHECKING:
    from ._config import WriteOptions

__all__ = [
    "DType",
    "Field",
    "parse_ddl",
    "ddl",
    "ValueFormat",
    "ParseMode",
    "MalformedRecordError",
    "ValueDecoder",
    "DROP",
    "json_encoder",
    "JsonPlan",
    "json_plan",
    "payload_rows",
    "RowPayloads",
]

DType = Union[str, tuple[Any, ...]]
"""A column type: an atomic name (``"string"``, ``"long"``, ...), ``("decimal", p, s)``,
``("array", element)``, ``("map", key, value)`` or ``("struct", (Field, ...))``."""

ValueFormat = Literal["binary", "string", "json"]
ParseMode = Literal["PERMISSIVE", "DROPMALFORMED", "FAILFAST"]


@dataclass(frozen=True)
class Field:
    name: str
    type: DType
    nullable: bool = True


class MalformedRecordError(JetStreamError):
    """``mode=FAILFAST``: a payload could not be decoded with ``valueFormat`` / ``valueSchema``."""


# ====================================================================== DDL

_ATOMIC: Final = {
    "string": "string",
    "varchar": "string",
    "char": "string",
    "binary": "binary",
    "boolean": "boolean",
    "bool": "boolean",
    "tinyint": "byte",
    "byte": "byte",
    "smallint": "short",
    "short": "short",
    "int": "int",
    "integer": "int",
    "bigint": "long",
    "long": "long",
    "float": "float",
    "real": "float",
    "double": "double",
    "date": "date",
    "timestamp": "timestamp",
    "timestamp_ltz": "timestamp",
    "timestamp_ntz": "timestamp_ntz",
}
_DECIMAL: Final = frozenset({"decimal", "dec", "numeric"})
_TOKEN: Final = re.compile(r"\s*(?:(`(?:[^`]|``)*`)|('(?:[^'\\]|\\.)*')|([A-Za-z_][A-Za-z0-9_]*)|(\d+)|([<>(),:]))")


def _tokens(text: str, what: str) -> list[str]:
    out: list[str] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if m is None:
            raise InvalidOptionError(f"{what}: cannot read the DDL at {text[pos:pos + 20]!r} in {text!r}")
        out.append(next(g for g in m.groups() if g is not None))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, text: str, what: str) -> None:
        self.text = text
        self.what = what
        self.toks = _tokens(text, what)
        self.i = 0

    def fail(self, expected: str) -> InvalidOptionError:
        got = self.toks[self.i] if self.i < len(self.toks) else "the end"
        return InvalidOptionError(f"{self.what}: expected {expected}, got {got!r} in {self.text!r}")

    def peek(self) -> str | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (expected is not None and tok.lower() != expected):
            raise self.fail(repr(expected) if expected else "more")
        self.i += 1
        return tok

    def name(self) -> str:
        tok = self.peek()
        if tok is None or tok in "<>(),:" or tok.startswith("'"):
            raise self.fail("a column name")
        self.i += 1
        return tok[1:-1].replace("``", "`") if tok.startswith("`") else tok

    def fields(self, closing: str | None) -> tuple[Field, ...]:
        out: list[Field] = []
        seen: set[str] = set()
        while True:
            if closing is not None and self.peek() == closing and not out:
                break
            name = self.name()
            if self.peek() == ":":
                self.take()
            dtype = self.type()
            nullable = True
            if self.peek() is not None and self.peek().lower() == "not":  # type: ignore[union-attr]
                self.take()
                self.take("null")
                nullable = False
            if self.peek() is not None and self.peek().lower() == "comment":  # type: ignore[union-attr]
                self.take()
                tok = self.take()
                if not tok.startswith("'"):
                    raise self.fail("a quoted comment")
            if name.lower() in seen:
                raise InvalidOptionError(f"{self.what}: column {name!r} appears twice in {self.text!r}")
            seen.add(name.lower())
            out.append(Field(name, dtype, nullable))
            if self.peek() == ",":
                self.take()
                continue
            break
        return tuple(out)

    def type(self) -> DType:
        if self.peek() is None:
            raise self.fail("a type")
        word = self.take().lower()
        if word in _ATOMIC:
            if word in ("varchar", "char"):
                self.take("(")
                self.take()
                self.take(")")
            return _ATOMIC[word]
        if word in _DECIMAL:
            p, s = 10, 0
            if self.peek() == "(":
                self.take()
                p = self.int()
                if self.peek() == ",":
                    self.take()
                    s = self.int()
                self.take(")")
            if not 1 <= p <= 38 or not 0 <= s <= p:
                raise InvalidOptionError(f"{self.what}: decimal({p},{s}) needs 1 <= precision <= 38 and 0 <= scale <= precision")
            return ("decimal", p, s)
        if word == "array":
            self.take("<")
            elem = self.type()
            self.take(">")
            return ("array", elem)
        if word == "map":
            self.take("<")
            key = self.type()
            self.take(",")
            value = self.type()
            self.take(">")
            if key != "string":
                raise InvalidOptionError(f"{self.what}: a JSON object's keys are strings: use map<string, ...> in {self.text!r}")
            return ("map", key, value)
        if word == "struct":
            self.take("<")
            fields = self.fields(">")
            self.take(">")
            return ("struct", fields)
        self.i -= 1
        raise self.fail("a type (string, binary, boolean, tinyint, smallint, int, bigint, float, double, "
                        "decimal(p,s), date, timestamp, timestamp_ntz, array<..>, map<string,..>, struct<..>)")

    def int(self) -> int:
        tok = self.take()
        if not tok.isdigit():
            self.i -= 1
            raise self.fail("a number")
        return int(tok)


def parse_ddl(text: str, what: str = "valueSchema") -> tuple[Field, ...]:
    """``"a int, b struct<c: string>"`` (also wrapped in ``struct<...>``) -> fields. Raises
    :class:`InvalidOptionError` starting with ``what``."""
    p = _Parser(text, what)
    if not p.toks:
        raise InvalidOptionError(f"{what}: expected a DDL schema such as 'id long, name string', got {text!r}")
    if len(p.toks) > 1 and p.toks[0].lower() == "struct" and p.toks[1] == "<":
        dtype = p.type()
        assert isinstance(dtype, tuple)
        fields: tuple[Field, ...] = dtype[1]
    else:
        fields = p.fields(None)
    if p.peek() is not None:
        raise p.fail("',' or the end")
    if not fields:
        raise InvalidOptionError(f"{what}: the schema has no column: {text!r}")
    return fields


def _type_ddl(t: DType) -> str:
    if isinstance(t, str):
        return {"byte": "tinyint", "short": "smallint", "long": "bigint"}.get(t, t)
    if t[0] == "decimal":
        return f"decimal({t[1]},{t[2]})"
    if t[0] == "array":
        return f"array<{_type_ddl(t[1])}>"
    if t[0] == "map":
        return f"map<{_type_ddl(t[1])},{_type_ddl(t[2])}>"
    return "struct<" + ",".join(f"{_quote(f.name)}:{_type_ddl(f.type)}" for f in t[1]) + ">"


def _quote(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) else "`" + name.replace("`", "``") + "`"


def ddl(fields: tuple[Field, ...]) -> str:
    """Fields -> a DDL string Spark parses back to the same schema."""
    return ", ".join(
        f"{_quote(f.name)} {_type_ddl(f.type)}" + ("" if f.nullable else " NOT NULL") for f in fields
    )


# ====================================================================== JSON -> values


class _Bad(Exception):
    """One value does not fit its type (the reason is the message)."""


_INT_RANGE: Final = {"byte": 8, "short": 16, "int": 32, "long": 64}
_NON_NUMERIC: Final = {
    "nan": math.nan,
    "infinity": math.inf,
    "+infinity": math.inf,
    "inf": math.inf,
    "+inf": math.inf,
    "-infinity": -math.inf,
    "-inf": -math.inf,
}
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=timezone.utc)
_json_text = msgspec.json.Encoder().encode

Convert = Callable[[Any], Any]


def _micros(when: datetime) -> int:
    delta = when - (_EPOCH if when.tzinfo is not None else _EPOCH.replace(tzinfo=None))
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _iso(text: str) -> datetime:
    t = text.strip()
    if t.endswith(("Z", "z")):
        t = t[:-1] + "+00:00"
    return datetime.fromisoformat(t)


def converter(t: DType, path: str = "") -> Convert:
    """The function taking a decoded JSON value to the Python value of type ``t`` (None stays
    None); raises ``_Bad`` when it does not fit (Spark's JSON reader rules)."""
    if t == "string":

        def to_string(v: Any) -> Any:
            if v is None or isinstance(v, str):
                return v
            return _json_text(v).decode()  # a number or an object in a string column: its JSON text

        return to_string
    if t == "boolean":

        def to_bool(v: Any) -> Any:
            if v is None or isinstance(v, bool):
                return v
            raise _Bad(f"{path or 'value'}: expected a boolean, got {_show(v)}")

        return to_bool
    if isinstance(t, str) and t in _INT_RANGE:
        bits = _INT_RANGE[t]
        lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1

        def to_int(v: Any) -> Any:
            if v is None:
                return None
            if isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi:
                return v
            raise _Bad(f"{path or 'value'}: expected a {_type_ddl(t)}, got {_show(v)}")

        return to_int
    if t in ("float", "double"):

        def to_float(v: Any) -> Any:
            if v is None:
                return None
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return float(v)
            if isinstance(v, str) and v.strip().lower() in _NON_NUMERIC:
                return _NON_NUMERIC[v.strip().lower()]
            raise _Bad(f"{path or 'value'}: expected a {t}, got {_show(v)}")

        return to_float
    if isinstance(t, tuple) and t[0] == "decimal":
        precision, scale = t[1], t[2]
        quantum = Decimal(1).scaleb(-scale)

        def to_decimal(v: Any) -> Any:
            if v is None:
                return None
            if isinstance(v, bool) or not isinstance(v, (int, float, str)):
                raise _Bad(f"{path or 'value'}: expected a decimal({precision},{scale}), got {_show(v)}")
            try:
                d = Decimal(str(v) if isinstance(v, float) else v).quantize(quantum)
            except (InvalidOperation, ValueError):
                raise _Bad(f"{path or 'value'}: expected a decimal({precision},{scale}), got {_show(v)}") from None
            if not d.is_finite() or len(d.as_tuple().digits) > precision:
                raise _Bad(f"{path or 'value'}: {_show(v)} does not fit decimal({precision},{scale})")
            return d

        return to_decimal
    if t == "date":

        def to_date(v: Any) -> Any:
            if v is None:
                return None
            if isinstance(v, str):
                try:
                    return date.fromisoformat(v.strip())
                except ValueError:
                    pass
            raise _Bad(f"{path or 'value'}: expected a date (yyyy-mm-dd), got {_show(v)}")

        return to_date
    if t in ("timestamp", "timestamp_ntz"):
        aware = t == "timestamp"

        def to_timestamp(v: Any) -> Any:
            if v is None:
                return None
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                if not aware:
                    raise _Bad(f"{path or 'value'}: expected an ISO 8601 timestamp without a zone, got {_show(v)}")
                return round(v * 1_000_000)  # seconds since the epoch, like Spark's JSON reader
            if isinstance(v, str):
                try:
                    when = _iso(v)
                except ValueError:
                    pass
                else:
                    if aware:
                        if when.tzinfo is None:
                            when = when.replace(tzinfo=timezone.utc)  # no zone: UTC
                        return _micros(when)
                    if when.tzinfo is None:
                        return _micros(when)
            raise _Bad(f"{path or 'value'}: expected an ISO 8601 timestamp, got {_show(v)}")

        return to_timestamp
    if t == "binary":

        def to_binary(v: Any) -> Any:
            if v is None:
                return None
            if isinstance(v, str):
                try:
                    return base64.b64decode(v, validate=True)
                except (binascii.Error, ValueError):
                    pass
            raise _Bad(f"{path or 'value'}: expected base64 text for a binary column, got {_show(v)}")

        return to_binary
    if isinstance(t, tuple) and t[0] == "array":
        elem = converter(t[1], f"{path}[]")

        def to_array(v: Any) -> Any:
            if v is None:
                return None
            if not isinstance(v, list):
                raise _Bad(f"{path or 'value'}: expected an array, got {_show(v)}")
            return [elem(x) for x in v]

        return to_array
    if isinstance(t, tuple) and t[0] == "map":
        val = converter(t[2], f"{path}{{}}")

        def to_map(v: Any) -> Any:
            if v is None:
                return None
            if not isinstance(v, dict):
                raise _Bad(f"{path or 'value'}: expected an object for a map, got {_show(v)}")
            return [(k, val(x)) for k, x in v.items()]

        return to_map
    if isinstance(t, tuple) and t[0] == "struct":
        subs = [(f.name, converter(f.type, f"{path}.{f.name}" if path else f.name), f.nullable) for f in t[1]]

        def to_struct(v: Any) -> Any:
            if v is None:
                return None
            if not isinstance(v, dict):
                raise _Bad(f"{path or 'value'}: expected an object, got {_show(v)}")
            out = {}
            for name, conv, nullable in subs:
                x = conv(v.get(name))
                if x is None and not nullable:
                    raise _Bad(f"{path}.{name}: missing (NOT NULL)")
                out[name] = x
            return out

        return to_struct
    raise InvalidOptionError(f"valueSchema: unsupported type {t!r}")  # pragma: no cover - parse_ddl refuses it


def _show(v: Any) -> str:
    text = _json_text(v).decode()
    return text if len(text) <= 40 else text[:37] + "..."


DROP: Final = object()
"""What :meth:`ValueDecoder.decode` returns for a malformed payload under DROPMALFORMED."""


class ValueDecoder:
    """Decodes payloads into the value columns of a read (one per task; not thread-safe).

    ``fmt``: ``string`` gives one string column (the payload as UTF-8), ``json`` one column per
    field of ``fields``. :meth:`decode` returns the list of column values, with the corrupt-record
    text last when ``mode`` is ``PERMISSIVE`` (None for a good payload), or :data:`DROP`
    (``DROPMALFORMED``); with ``FAILFAST`` a malformed payload raises :class:`_Bad`, which the
    reader turns into a :class:`MalformedRecordError` naming the message.
    """

    def __init__(self, fmt: ValueFormat, fields: tuple[Field, ...], mode: ParseMode) -> None:
        self.fmt = fmt
        self.mode = mode
        self.permissive = mode == "PERMISSIVE"
        self.fields = fields
        self._decode_json = msgspec.json.Decoder().decode
        self._convs = [(f.name, converter(f.type, f.name), f.nullable) for f in fields]

    def decode(self, data: bytes) -> list[Any] | object:
        if self.fmt == "string":
            try:
                values: list[Any] = [data.decode("utf-8")]
            except UnicodeDecodeError as exc:
                return self._malformed([None], data, f"not UTF-8 text ({exc.reason} at byte {exc.start})")
            if self.permissive:
                values.append(None)
            return values
        try:
            obj = self._decode_json(data)
        except msgspec.DecodeError as exc:
            reason = "an empty payload" if not data else f"not JSON ({exc})"
            return self._malformed([None] * len(self._convs), data, reason)
        if not isinstance(obj, dict):
            return self._malformed([None] * len(self._convs), data, f"not a JSON object ({_show(obj)})")
        out: list[Any] = []
        problem: str | None = None
        get = obj.get
        for name, conv, nullable in self._convs:
            try:
                x = conv(get(name))
                if x is None and not nullable:
                    raise _Bad(f"{name}: missing (NOT NULL)")
            except _Bad as exc:
                if problem is None:
                    problem = str(exc)
                x = None
            out.append(x)
        if problem is not None:
            return self._malformed(out, data, problem)
        if self.permissive:
            out.append(None)
        return out

    def _malformed(self, partial: list[Any], data: bytes, reason: str) -> list[Any] | object:
        if self.mode == "FAILFAST":
            raise _Bad(reason)
        if self.mode == "DROPMALFORMED":
            return DROP
        partial.append(data.decode("utf-8", "replace"))
        return partial


# ====================================================================== rows -> JSON


def json_encoder() -> Callable[[Any], bytes]:
    """Serialises one row (a dict, nested dicts and lists) as Spark's ``to_json`` would:
    timestamps as ISO 8601, dates as yyyy-mm-dd, decimals as numbers, binary as base64."""
    return msgspec.json.Encoder(decimal_format="number").encode


@dataclass(frozen=True)
class JsonPlan:
    """``valueFormat=json`` writes: the columns serialised into each payload. ``struct``: the
    one struct column ``value`` is the payload object."""

    columns: tuple[str, ...]
    struct: bool = False


def json_plan(names: Sequence[str], value_is_struct: bool, wopts: WriteOptions) -> JsonPlan:
    """What a ``valueFormat=json`` write serialises, given the columns' names: a struct column
    ``value`` alone, else every column but the subject column (when no fixed ``subject`` is set)
    and the headers column; :class:`InvalidOptionError` when nothing is left."""
    if value_is_struct:
        return JsonPlan(("value",), struct=True)
    reserved = {wopts.headers_column}
    if wopts.subject is None:
        reserved.add(wopts.subject_column)
    cols = tuple(n for n in names if n not in reserved)
    if not cols:
        raise InvalidOptionError(
            f"valueFormat: json serialises a struct column 'value', or every column but the subject and "
            f"headers ones; the DataFrame has only {list(names)}"
        )
    return JsonPlan(cols)


def _is_row(v: Any) -> bool:
    return isinstance(v, tuple) and getattr(v, "__fields__", None) is not None  # a pyspark Row


def _zoned(value: Any) -> Any:
    """A Row's values with its timestamps in UTC: pyspark hands a ``timestamp`` as a datetime
    without zone in the process's local time; the data source's Arrow batches carry the zone,
    and the payload must be the same (``...Z``)."""
    if isinstance(value, datetime):
        return value.astimezone(timezone.utc) if value.tzinfo is None else value
    if isinstance(value, dict):
        return {k: _zoned(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_zoned(v) for v in value]
    return value


def _as_text(value: Any, column: str) -> Any:
    """``valueFormat=string``: the data column's value as text (bytes and str as they are)."""
    if value is None:
        return b""
    if isinstance(value, (bytes, bytearray, memoryview, str)):
        return value
    if isinstance(value, (Mapping, list, tuple)):
        kind = "struct" if _is_row(value) or isinstance(value, Mapping) else "array"
        raise InvalidOptionError(
            f"dataColumn: column {column!r} holds a {kind}; valueFormat=string writes scalars as text "
            f"(valueFormat=json serialises structures)"
        )
    return str(value)


class RowPayloads:
    """Turns the rows of a write with ``valueFormat`` json or string into ``(data, subject,
    headers, msg_id)`` tuples whose data is the payload (call it on each row).

    ``json`` serialises what ``plan`` names (fixed on the driver from the DataFrame's schema),
    or, without a plan, what each row holds: its ``value`` field when that is a struct (a Row;
    in a dict row, a dict), else every field but the subject and headers ones. A Row's
    timestamps (datetimes without zone, in local time, as pyspark makes them) are written in
    UTC, as the data source writes them. ``string``
    writes the data column as text. Rows are pyspark Rows or dicts; with ``string`` also tuples
    ``(data, subject, headers, msg_id)`` and bare values. A subject column's new values are
    checked against ``wopts.captures`` when the driver gathered them."""

    def __init__(self, wopts: WriteOptions, plan: JsonPlan | None = None) -> None:
        self.wopts = wopts
        self.plan = plan
        self._json = wopts.value_format == "json"
        self._enc = json_encoder()
        self._plans: dict[tuple[tuple[str, ...], bool], JsonPlan] = {}
        self._seen: set[str] = set()
        self._check = wopts.captures is not None and wopts.subject is None

    def __call__(self, row: Any) -> Any:
        wopts = self.wopts
        dc = wopts.data_column
        d: Mapping[str, Any]
        if _is_row(row):
            d = row.asDict(recursive=True)
            struct = self._json and self.plan is None and "value" in row.__fields__ and _is_row(row["value"])
            if self._json:
                d = _zoned(d)
        elif isinstance(row, Mapping):
            d = row
            struct = isinstance(row.get("value"), Mapping)
        elif not self._json:
            if isinstance(row, (tuple, list)):
                n = len(row)
                return (_as_text(row[0] if n else None, dc), row[1] if n > 1 else None, row[2] if n > 2 else None,
                        row[3] if n > 3 else None)
            return _as_text(row, dc)
        else:
            raise InvalidOptionError(
                f"valueFormat: json serialises the fields of pyspark Rows or dicts, got a {type(row).__name__}"
            )
        data: Any
        if not self._json:
            if dc not in d:
                raise InvalidOptionError(f"dataColumn: the rows have no column {dc!r} (columns: {list(d)[:20]})")
            data = _as_text(d[dc], dc)
        else:
            p = self.plan
            if p is None:
                key = (tuple(d), struct)
                p = self._plans.get(key)
                if p is None:
                    p = self._plans[key] = json_plan(key[0], struct, wopts)
            if p.struct:
                v = d.get("value")
                data = b"" if v is None else self._enc(v)
            else:
                data = self._enc({c: d.get(c) for c in p.columns})
        subject = d.get(wopts.subject_column) if wopts.subject is None else None
        if self._check and subject is not None:
            from ._writer import check_captured

            check_captured((subject,), wopts, self._seen)
        m = wopts.msg_id_column
        return (data, subject, d.get(wopts.headers_column), d.get(m) if m is not None else None)


def payload_rows(rows: Iterable[Any], wopts: WriteOptions, plan: JsonPlan | None = None) -> Iterator[Any]:
    """The rows of a write as the partition writer takes them: with ``valueFormat`` json or
    string converted by :class:`RowPayloads`, with ``binary`` as they are."""
    if wopts.value_format == "binary":
        return iter(rows)
    return map(RowPayloads(wopts, plan), rows)
