"""Every ```python block of README.md and docs/*.md runs against a real nats-server, so the
documentation cannot drift from the client.

Conventions (an HTML comment on the line right before the fence; several comments may be
stacked there):

* ``<!-- doc-test: skip (reason) -->``: the block is not run; its test skips with the reason.
* ``<!-- doc-test: spark -->``: the block runs under the ``spark`` marker, in its own Python
  process with a local Spark session. Its namespace has ``spark`` (the data source
  registered), ``url`` (the server), ``nc`` and ``js`` (a connection to it), ``df`` (100 rows:
  ``order_id``, ``msg_id``, ``data``) and ``out`` and ``ckpt`` (empty directories); the server
  has the stream the guide uses, ``ORDERS`` on ``orders.>``, with 20 messages on
  ``orders.eu.*``.
* ``<!-- doc-test: continue -->``: the block runs in the namespace of the previous block of the
  same file (one test runs the chain; a skipped block in between is left out).
* ``<!-- example: NAME -->``: names the block; a named block may have checks on what it
  prints (``EXPECTED`` below) and a server set up for it (the authentication examples).

Every chain runs on a fresh JetStream server of its own (so a block may assume an empty
account), in a fresh namespace, with a timeout. A block talks to ``nats://127.0.0.1:4222``
(where ``jssync server`` listens); the test points it at its server by replacing that
address (``localhost:4222`` for the TLS examples). A failing block's traceback shows the
Markdown file and line.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from jssync.client import Client
from jssync.server import NatsServer
from tests.integration.test_tls_auth import TlsFirstServer
from tests.support.certs import Certs, make_certs
from tests.support.jwts import Operator, new_key

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

MARKER_RE = re.compile(r"<!--\s*doc-test:\s*(skip|spark|continue)\b\s*(?:\((.*)\))?\s*-->")
NAME_RE = re.compile(r"<!--\s*example:\s*([\w-]+)\s*-->")
COMMENT_RE = re.compile(r"^\s*<!--.*-->\s*$")


@dataclass
class Block:
    file: str  # relative to the repository root
    line: int  # the first line of code (1-based)
    code: str
    name: str | None = None
    skip: str | None = None  # the reason
    spark: bool = False
    cont: bool = False

    @property
    def label(self) -> str:
        return f"{self.file}:{self.line}" + (f"[{self.name}]" if self.name else "")


@dataclass
class Chain:
    blocks: list[Block] = field(default_factory=list)

    @property
    def spark(self) -> bool:
        return any(b.spark for b in self.blocks)


def parse(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        if lines[i].strip() != "```python":
            i += 1
            continue
        end = i + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        code = textwrap.dedent("\n".join(lines[i + 1 : end]) + "\n")  # (a fence inside a list item is indented)
        block = Block(str(path.relative_to(ROOT)), i + 2, code)
        j = i - 1
        while j >= 0 and COMMENT_RE.match(lines[j]):
            if m := MARKER_RE.search(lines[j]):
                kind, reason = m.group(1), (m.group(2) or "").strip()
                if kind == "skip":
                    block.skip = reason or "(no reason given)"
                elif kind == "spark":
                    block.spark = True
                else:
                    block.cont = True
            elif m := NAME_RE.search(lines[j]):
                block.name = m.group(1)
            j -= 1
        blocks.append(block)
        i = end + 1
    return blocks


def chains() -> tuple[list[Chain], list[Block]]:
    """The chains of blocks that run (a ``continue`` block joins the chain of the previous
    block of its file that runs), and the skipped blocks."""
    out: list[Chain] = []
    skipped: list[Block] = []
    for path in DOCS:
        first = True
        for block in parse(path):
            if block.skip is not None:
                skipped.append(block)
            elif block.cont and not first:
                out[-1].blocks.append(block)
            else:
                out.append(Chain([block]))
                first = False
    return out, skipped


def _params() -> list[Any]:
    run, skipped = chains()
    params = [pytest.param(None, f"{b.label}: {b.skip}", id=b.label) for b in skipped]
    for chain in run:
        marks = [pytest.mark.spark, pytest.mark.slow] if chain.spark else []
        params.append(pytest.param(chain, None, id=chain.blocks[0].label, marks=marks))
    return params


# What a named example prints, in order (pieces of its standard output).
EXPECTED: dict[tuple[str, str], list[str]] = {
    ("docs/jetstream.md", "dedup"): ["503 10077 maximum messages per subject exceeded"],
    ("docs/kv.md", "buckets"): ["CFG 5 3600.0 0", "['CFG']"],
    ("docs/kv.md", "values"): ["user.1 b'alice' True KeyValueOp.PUT", "[b'alice', b'alice v2', b'', b'back']",
                               "b'alice v2'"],
    ("docs/kv.md", "snapshot"): ["['user.0', 'user.1', 'user.2', 'user.3']", "['user.0', 'user.1']",
                                 "['user.0', 'user.1', 'user.2', 'user.3']", "b'name 0'"],
    ("docs/kv.md", "watch"): ["b'on'", "None", "beta b'off' KeyValueOp.PUT", "[b'off', None]"],
    ("docs/kv.md", "purge-deletes"): ["1\n1\n[]\n"],
    ("docs/objects.md", "basics"): ["15 1 SHA-256="],
    ("docs/objects.md", "streaming"): ["20 chunks\n5242880\n"],
    ("docs/objects.md", "digest"): ["refused:"],
    ("docs/objects.md", "manage"): ["['a.txt', 'b.txt']\nrenamed\n{'Content-Type': ['text/plain']}\nb.txt is gone\nTrue\n"],
    ("docs/objects.md", "links"): ["b'\\x89PNG...'\nObjectLink(bucket='docs-assets'"],
    ("docs/objects.md", "watch"): ["existing\nNone\nnew\nTrue\n"],
    ("docs/objects.md", "watch-callback"): ["['report.pdf']\n"],
    ("docs/objects.md", "seal"): ["True True JetStream\nsealed: read only\nb'%PDF-1.7'\n"],
    ("docs/consumers.md", "ordered"): ["[b'bonjour']", "orders.eu.de b'hallo'", "b'ciao'"],
    ("docs/consumers.md", "overflow"): ["overflow worker got 10 jobs"],
    ("docs/consumers.md", "pinned"): ["worker-a is now the pinned worker", "worker-b is now the pinned worker",
                                      "pinned_client_id="],
    ("docs/consumers.md", "prioritized"): ["[b'first'] [b'second']"],
}


def test_every_expectation_names_a_block() -> None:
    run, skipped = chains()
    named = {(b.file, b.name) for b in [*skipped, *(b for c in run for b in c.blocks)] if b.name}
    assert set(EXPECTED) <= named, set(EXPECTED) - named


def test_the_conventions_are_read() -> None:
    text = (
        "x\n\n<!-- doc-test: skip (needs a TLS server) -->\n```python\na = 1\n```\n"
        "<!-- example: two -->\n<!-- doc-test: continue -->\n```python\nb = 2\n```\n"
        "<!-- doc-test: spark -->\n```python\nc = 3\n```\n"
    )
    path = ROOT / "docs" / ".doc_blocks_selftest.md"
    path.write_text(text)
    try:
        a, b, c = parse(path)
    finally:
        path.unlink()
    assert (a.skip, a.line, a.code) == ("needs a TLS server", 5, "a = 1\n")
    assert (b.name, b.cont, b.skip, b.line) == ("two", True, None, 10)
    assert (c.spark, c.cont) == (True, False)


# ------------------------------------------------------------------------------ set-ups


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(str(tmp_path_factory.mktemp("doc-certs")))


class Setup:
    """What a block needs: a server (configured as the page says for the authentication
    examples), files in its working directory, environment variables."""

    def __init__(self, tmp: Path, make: Callable[..., NatsServer], certs: Callable[[], Certs],
                 monkeypatch: pytest.MonkeyPatch) -> None:
        self.tmp = tmp
        self.make = make
        self.certs = certs
        self.monkeypatch = monkeypatch
        self.host = "127.0.0.1"

    def file(self, name: str, text: str) -> None:
        (self.tmp / name).write_text(text)

    def server(self, block: Block) -> NatsServer:
        name = block.name if block.file == "docs/getting-started.md" else None
        if name == "userpass":
            return self.make(jetstream=False, config='authorization { user: app, password: "s3cret" }')
        if name == "token":
            return self.make(jetstream=False, config='authorization { token: "s3cret-token" }')
        if name == "nkey":
            key = new_key("user")
            self.file("user.nk", key.seed + "\n")
            self.monkeypatch.setenv("NATS_NKEY_SEED", key.seed)
            return self.make(jetstream=False, config=f'authorization {{ users: [ {{ nkey: "{key.public}" }} ] }}')
        if name in ("creds", "callbacks"):
            op = Operator()
            account = op.account("APP")
            user = account.user("doc")
            self.file("app.creds", user.creds())
            self.file("app.jwt", user.jwt + "\n")
            self.monkeypatch.setenv("NATS_USER_SEED", user.key.seed)
            return self.make(jetstream=False, config=op.server_config(account))
        if name in ("mtls", "mtls-first"):
            certs = self.certs()
            for attr, target in (("ca_file", "ca.pem"), ("client_cert_file", "client.pem"),
                                 ("client_key_file", "client.key")):
                shutil.copy(getattr(certs, attr), self.tmp / target)
            self.host = "localhost"
            if name == "mtls":
                return self.make(jetstream=False, config=certs.server_tls_block("verify: true"))
            server = TlsFirstServer(jetstream=False,
                                    config=certs.server_tls_block("handshake_first: true\n  verify: true"))
            server.probe_context = certs.client_context(client_cert=True)
            return server
        return self.make()

    def point_at(self, code: str, server: NatsServer) -> str:
        return code.replace(f"{self.host}:4222", f"{self.host}:{server.port}")


@pytest.fixture
def started() -> Iterator[list[NatsServer]]:
    servers: list[NatsServer] = []
    yield servers
    for s in servers:
        s.cleanup()


# ------------------------------------------------------------------------------ the test


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("chain", "skip_reason"), _params())
def test_doc_block(
    chain: Chain | None,
    skip_reason: str | None,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    started: list[NatsServer],
) -> None:
    if chain is None:
        pytest.skip(skip_reason or "")
    blocks = chain.blocks
    make = request.getfixturevalue("nats_server_factory")
    setup = Setup(tmp_path, make, lambda: request.getfixturevalue("certs"), monkeypatch)
    server = setup.server(blocks[0])
    if not server.running:
        server.start(10)
        started.append(server)
    monkeypatch.chdir(tmp_path)
    if chain.spark:
        out = _run_spark(blocks, setup, server, tmp_path)
    else:
        namespace: dict[str, Any] = {"__name__": "__doc_block__"}
        try:
            for b in blocks:
                # padded so that a traceback shows the line of the Markdown file
                code = "\n" * (b.line - 1) + setup.point_at(b.code, server)
                exec(compile(code, b.file, "exec"), namespace)  # noqa: S102 - the documentation's own code
        finally:
            for value in namespace.values():  # a block may leave a client open: no threads left behind
                if isinstance(value, Client):
                    value.close()
        out = capsys.readouterr().out
    for b in blocks:
        rest = out
        for piece in EXPECTED.get((b.file, b.name or ""), []):
            assert piece in rest, f"{b.label} should print {piece!r}; it printed:\n{out}"
            rest = rest[rest.index(piece) + len(piece) :]


_SPARK_RUNNER = r'''
import json, os, sys, tempfile
spec = json.loads(sys.stdin.read())
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
from pyspark.sql import SparkSession
import jssync
from jssync.spark import JetStreamDataSource
spark = (SparkSession.builder.master("local[2]").appName("doc-blocks").config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
spark.dataSource.register(JetStreamDataSource)
nc = jssync.connect(spec["url"])
nc.jetstream().create_stream(name="ORDERS", subjects=["orders.>"])
for i in range(20):
    nc.jetstream().publish(f"orders.eu.{i % 3}", b"%d" % i)
ns = {"__name__": "__doc_block__", "spark": spark, "url": spec["url"], "nc": nc, "js": nc.jetstream(),
      "out": tempfile.mkdtemp(), "ckpt": tempfile.mkdtemp(),
      "df": spark.range(100).selectExpr("concat('order-', id) as order_id", "concat('order-', id) as msg_id",
                                        "cast(id as string) as data")}
try:
    for b in spec["blocks"]:
        exec(compile("\n" * (b["line"] - 1) + b["code"], b["file"], "exec"), ns)
    for q in spark.streams.active:
        q.stop()
finally:
    nc.close()
    spark.stop()
'''


def _run_spark(blocks: list[Block], setup: Setup, server: NatsServer, tmp: Path) -> str:
    pytest.importorskip("pyspark", reason="the spark extra is not installed")
    spec = {"url": server.url,
            "blocks": [{"file": b.file, "line": b.line, "code": setup.point_at(b.code, server)} for b in blocks]}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-c", _SPARK_RUNNER], input=json.dumps(spec), capture_output=True,
                       text=True, timeout=110, cwd=tmp, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout
