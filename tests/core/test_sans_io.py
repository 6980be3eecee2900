"""jscore is sans-IO: no sockets, no threads, no clock, no global random, no files, no
cryptography (DESIGN.md).

An AST scan of every module of jscore. ``import random`` is allowed only for the
``random.Random`` type (an injected generator); calling a module-level function of ``random``
(random.random, randint, choice, uniform, shuffle, seed ...) is not. File access (``os``,
``io``, ``pathlib``, ``open()``) and signing (``nkeys``, ``nacl``, ``hashlib`` ...) belong to
jssync: the core gets signing as an injected callable and file contents as bytes.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import jscore

FORBIDDEN_MODULES = frozenset(
    {"socket", "select", "selectors", "ssl", "threading", "_thread", "time", "asyncio", "subprocess", "multiprocessing"}
    # files and the operating system
    | {"os", "io", "pathlib", "shutil", "tempfile", "glob", "fcntl", "mmap"}
    # cryptography (signing is injected by the shell; the nkeys extra is imported by jssync)
    | {"nkeys", "nacl", "cryptography", "hashlib", "hmac", "secrets"}
)
RANDOM_ALLOWED = frozenset({"Random"})
JSCORE_DIR = Path(jscore.__file__).resolve().parent
MODULES = sorted(JSCORE_DIR.rglob("*.py"))


def violations(source: str, filename: str = "<src>") -> list[str]:
    """Every sans-IO violation in ``source``, as readable strings."""
    tree = ast.parse(source, filename)
    found: list[str] = []
    random_aliases: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                if top in FORBIDDEN_MODULES:
                    found.append(f"{filename}:{node.lineno}: import {alias.name}")
                if top == "random":
                    random_aliases.add(alias.asname or "random")
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # a relative import inside jscore
                continue
            top = (node.module or "").split(".")[0]
            if top in FORBIDDEN_MODULES:
                found.append(f"{filename}:{node.lineno}: from {node.module} import ...")
            if top == "random":
                for alias in node.names:
                    if alias.name not in RANDOM_ALLOWED:
                        found.append(f"{filename}:{node.lineno}: from random import {alias.name}")
        elif isinstance(node, ast.Call):
            func = node.func
            # __import__("socket") / importlib.import_module("time")
            if isinstance(func, ast.Name) and func.id == "__import__":
                found.append(f"{filename}:{node.lineno}: __import__(...)")
            if isinstance(func, ast.Name) and func.id == "open":
                found.append(f"{filename}:{node.lineno}: open(...)")
            if isinstance(func, ast.Attribute) and func.attr == "open" and isinstance(func.value, ast.Name) and func.value.id == "builtins":
                found.append(f"{filename}:{node.lineno}: builtins.open(...)")
            if isinstance(func, ast.Attribute) and func.attr == "import_module":
                found.append(f"{filename}:{node.lineno}: importlib.import_module(...)")
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in random_aliases
            and node.attr not in RANDOM_ALLOWED
        ):
            found.append(f"{filename}:{node.lineno}: {node.value.id}.{node.attr} (module-level random)")
    return found


def test_jscore_has_modules_to_scan() -> None:
    names = {p.name for p in MODULES}
    assert {"protocol.py", "headers.py", "connection.py", "errors.py", "events.py"} <= names


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(JSCORE_DIR)))
def test_module_is_sans_io(path: Path) -> None:
    assert violations(path.read_text(encoding="utf-8"), path.name) == []


# The scanner itself must be able to fail.
@pytest.mark.parametrize(
    "source",
    [
        "import socket",
        "import select",
        "import selectors",
        "import ssl",
        "import threading",
        "import time",
        "import asyncio",
        "import subprocess",
        "import os, time as t",
        "import asyncio.events",
        "from time import monotonic",
        "from socket import socket as s",
        "from asyncio import sleep",
        "import random\nx = random.random()",
        "import random\nrandom.seed(1)",
        "import random\nrandom.shuffle([])",
        "import random\nrandom.choice('ab')",
        "import random\nrandom.randint(0, 1)",
        "import random\nrandom.uniform(0, 1)",
        "import random as r\nr.random()",
        "import random\nf = random.getrandbits",
        "from random import randint",
        "from random import Random, choice",
        "__import__('socket')",
        "import importlib\nimportlib.import_module('time')",
        "def f():\n    import time\n    return time.monotonic()",
        "import os",
        "from os import path",
        "import io",
        "from pathlib import Path",
        "open('user.creds').read()",
        "import builtins\nbuiltins.open('x')",
        "import nkeys",
        "from nkeys import from_seed",
        "import nacl.signing",
        "from nacl.signing import SigningKey",
        "import hashlib",
        "def sign(seed):\n    import nkeys\n    return nkeys.from_seed(seed)",
    ],
)
def test_scanner_detects(source: str) -> None:
    assert violations(source) != []


@pytest.mark.parametrize(
    "source",
    [
        "import random\ndef f(rng: random.Random) -> float:\n    return rng.random()",
        "from random import Random\nr = Random(1)\nr.choice('ab')",
        "import re\nimport enum\nimport base64\nimport binascii",
        "def f(x):\n    return x.open()",
        "from .protocol import Parser",
        "from collections import deque",
        "x = {}.get('time')",
    ],
)
def test_scanner_allows(source: str) -> None:
    assert violations(source) == []
