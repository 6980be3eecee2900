"""What every fuzz target shares: run under atheris when it is installed, else replay files."""

from __future__ import annotations

import gc
import sys
import types
from collections.abc import Callable, Iterable
from pathlib import Path

INSTRUMENTED = ("jscore", "fuzz", "__main__")
"""Modules whose Python code atheris instruments for coverage: the parsers and the targets.
Instrumenting everything loaded (the standard library too) made the targets several times
slower without guiding the fuzzer anywhere useful."""


def _ours(obj: object) -> bool:
    if not isinstance(obj, types.FunctionType):
        return False
    module = getattr(obj, "__module__", None) or ""
    return any(module == name or module.startswith(name + ".") for name in INSTRUMENTED)


def instrument(atheris: types.ModuleType) -> int:
    """Instrument every function of :data:`INSTRUMENTED` already imported; returns how many."""
    functions = [obj for obj in gc.get_objects() if _ours(obj)]
    for func in functions:
        atheris.instrument_func(func)
    return len(functions)


def run(argv: list[str], one_input: Callable[[bytes], None]) -> None:
    """Fuzz ``one_input`` with atheris (libFuzzer flags in ``argv``), or replay the files given."""
    try:
        import atheris  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        print("atheris is not installed: pip install atheris  (see fuzz/README.md)", file=sys.stderr)
        print("replaying the given files through one_input instead", file=sys.stderr)
        replay(argv[1:], one_input)
        return
    count = instrument(atheris)
    print(f"INFO: instrumented {count} functions of {', '.join(INSTRUMENTED)}", file=sys.stderr)
    atheris.Setup(argv, one_input)
    atheris.Fuzz()


def replay(paths: Iterable[str], one_input: Callable[[bytes], None]) -> None:
    """Run ``one_input`` on files (or every file of directories): reproduce a crash."""
    for name in paths:
        if name.startswith("-"):  # a libFuzzer flag such as -max_total_time=60
            continue
        path = Path(name)
        files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
        for f in files:
            one_input(f.read_bytes())
            print(f"ok {f}")
