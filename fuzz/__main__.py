"""Run the fuzz targets under atheris: ``python -m fuzz --minutes N [targets]``.

Each target runs in its own process (libFuzzer owns the process it fuzzes in), one after the
other, with its seed corpus, its dictionary and a working corpus of its own:

* ``fuzz/corpus/<target>/`` (the seeds under version control) is read, never written;
* ``fuzz/work/<target>/`` receives the inputs libFuzzer finds interesting (git-ignored: copy
  the ones worth keeping into the seed corpus), and ``fuzz/work/<target>.log`` its output;
* a finding (an invariant broken, an exception other than the typed ones, a timeout, memory
  exhausted) stops the run at once; libFuzzer writes the input to
  ``fuzz/crashes/<target>/crash-<sha1>`` (``timeout-``, ``oom-``), and the runner prints the
  command that replays it.

A target stops after ``--minutes`` (or ``--seconds``) or ``--runs`` executions, whichever comes
first. The summary gives, per target, the executions, their rate, the coverage libFuzzer
measured (``cov``: instrumented branches of jscore and the target reached, ``ft``: features)
and the corpus size. Exit status: 0 without a finding, 1 with one, 2 when atheris is missing.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

FUZZ_DIR = Path(__file__).resolve().parent
ROOT = FUZZ_DIR.parent

TARGETS: dict[str, int] = {
    "wire": 8192,
    "headers": 4096,
    "ackmeta": 1024,
    "status": 4096,
    "apijson": 4096,
    "directget": 4096,
    "info": 4096,
    "creds": 4096,
    "kv": 4096,
    "objmeta": 4096,
}
"""Every target by name, with the largest input libFuzzer makes for it (``-max_len``)."""

INTERRUPTED = 72
"""libFuzzer's exit status when interrupted (``-interrupted_exitcode``)."""
_STOPPED = (INTERRUPTED, 130, -2)
"""Exit statuses of a run stopped by Ctrl-C: libFuzzer's, or Python's when the signal lands in
the target's Python code (``KeyboardInterrupt``: status 130, no final figures) or kills it."""
_STAT = re.compile(r"^stat::(\w+):\s*(\d+)", re.M)
_PROGRESS = re.compile(r"^#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)/", re.M)
_ARTIFACT = re.compile(r"Test unit written to (\S+)")


@dataclass
class Result:
    """What one target's run gave."""

    target: str
    returncode: int
    seconds: float
    executions: int = 0
    rate: int = 0
    cov: int = 0
    ft: int = 0
    corpus: int = 0
    new_units: int = 0
    artifact: str | None = None
    log: Path = field(default_factory=Path)

    @property
    def interrupted(self) -> bool:
        """Stopped by the user (Ctrl-C): not a finding."""
        return self.returncode in _STOPPED and self.artifact is None

    @property
    def finding(self) -> bool:
        return self.artifact is not None or self.returncode not in (0, *_STOPPED)


def parse_log(text: str, result: Result) -> Result:
    """Fill ``result`` from libFuzzer's output (``-print_final_stats=1``)."""
    stats = {k: int(v) for k, v in _STAT.findall(text)}
    progress = _PROGRESS.findall(text)
    if progress:
        last = progress[-1]
        result.executions, result.cov, result.ft, result.corpus = (int(x) for x in last)
    result.executions = stats.get("number_of_executed_units", result.executions)
    result.rate = stats.get("average_exec_per_sec", 0)
    result.new_units = stats.get("new_units_added", 0)
    artifact = _ARTIFACT.findall(text)
    result.artifact = artifact[-1] if artifact else None
    return result


def command(
    target: str, *, seconds: int, runs: int, seed: int, work: Path, crashes: Path, extra: Sequence[str]
) -> list[str]:
    """The command line that fuzzes one target."""
    return [
        sys.executable,
        str(FUZZ_DIR / f"fuzz_{target}.py"),
        str(work / target),
        str(FUZZ_DIR / "corpus" / target),
        f"-dict={FUZZ_DIR / 'dict' / f'{target}.dict'}",
        f"-artifact_prefix={crashes / target}{os.sep}",
        f"-max_len={TARGETS[target]}",
        f"-max_total_time={seconds}",
        f"-runs={runs}",
        f"-seed={seed}",
        "-timeout=30",
        "-rss_limit_mb=2048",
        "-print_final_stats=1",
        *extra,
    ]


def run_target(
    target: str, *, seconds: int, runs: int, seed: int, work: Path, crashes: Path, extra: Sequence[str] = ()
) -> Result:
    (work / target).mkdir(parents=True, exist_ok=True)
    (crashes / target).mkdir(parents=True, exist_ok=True)
    log = work / f"{target}.log"
    cmd = command(target, seconds=seconds, runs=runs, seed=seed, work=work, crashes=crashes, extra=extra)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    start = time.monotonic()
    with log.open("w") as out, subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
    ) as proc:
        try:
            returncode = proc.wait()
        except KeyboardInterrupt:  # the fuzzer got the SIGINT too: let it print its figures
            returncode = proc.wait()
            returncode = returncode if returncode != 0 else INTERRUPTED
    result = Result(target, returncode, time.monotonic() - start, log=log)
    return parse_log(log.read_text(errors="replace"), result)


def summary(results: list[Result]) -> str:
    lines = [
        f"{'target':<10} {'executions':>11} {'exec/s':>7} {'cov':>5} {'ft':>6} {'corpus':>6} {'seconds':>7}  finding",
    ]
    for r in results:
        found = (r.artifact or f"exit status {r.returncode}") if r.finding else "interrupted" if r.interrupted else "none"
        lines.append(
            f"{r.target:<10} {r.executions:>11,} {r.rate:>7,} {r.cov:>5} {r.ft:>6} {r.corpus:>6} {r.seconds:>7.0f}  {found}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fuzz", description=__doc__.split("\n\n")[0])
    parser.add_argument("targets", nargs="*", metavar="target", help=f"default: all ({', '.join(TARGETS)})")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--minutes", type=float, default=None, help="time per target (default 10)")
    budget.add_argument("--seconds", type=float, default=None, help="time per target, in seconds")
    parser.add_argument("--runs", type=int, default=-1, help="stop a target after this many executions")
    parser.add_argument("--seed", type=int, default=0, help="libFuzzer's seed (0: a fresh one each run)")
    parser.add_argument("--work", type=Path, default=FUZZ_DIR / "work", help="working corpora and logs")
    parser.add_argument("--crashes", type=Path, default=FUZZ_DIR / "crashes", help="where findings are written")
    parser.add_argument("--libfuzzer", action="append", default=[], metavar="FLAG", help="an extra libFuzzer flag")
    args = parser.parse_args(argv)
    unknown = [t for t in args.targets if t not in TARGETS]
    if unknown:
        parser.error(f"unknown target(s) {', '.join(unknown)}; the targets are {', '.join(TARGETS)}")
    try:
        import atheris  # type: ignore[import-not-found,import-untyped,unused-ignore]  # noqa: F401
    except ImportError:
        print("atheris is not installed (pip install atheris, or pip install -e '.[dev]')", file=sys.stderr)
        return 2
    seconds = args.seconds if args.seconds is not None else 60 * (args.minutes if args.minutes is not None else 10)
    results = []
    for target in args.targets or list(TARGETS):
        print(f"fuzzing {target} for {seconds:.0f} s" + (f" or {args.runs:,} runs" if args.runs > 0 else ""), flush=True)
        result = run_target(
            target,
            seconds=max(1, round(seconds)),
            runs=args.runs,
            seed=args.seed,
            work=args.work.resolve(),
            crashes=args.crashes.resolve(),
            extra=args.libfuzzer,
        )
        results.append(result)
        if result.interrupted:
            print(summary(results))
            return 130
        if result.finding:
            print(summary(results))
            print(f"\nFINDING in {target}: see {result.log}", file=sys.stderr)
            if result.artifact:
                print(f"replay: python fuzz/fuzz_{target}.py {result.artifact}", file=sys.stderr)
            return 1
    print(summary(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
