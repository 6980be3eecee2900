"""A short coverage-guided pass of every fuzz target under atheris (``python -m fuzz``), seeded,
so that a broken invariant shows up in the normal test run and not only in long campaigns.

Each target runs in its own process (libFuzzer owns the process it fuzzes) for a fixed number of
executions with a fixed seed, capped in time; its working corpus and any finding go to a
temporary directory. A failure shows libFuzzer's output and the failing input in hex. Skipped
where atheris is not installed (it is a dev dependency on Linux x86-64 only).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fuzz import __main__ as runner

ROOT = Path(runner.__file__).resolve().parent.parent

RUNS = {
    "wire": 3_000,
    "headers": 3_000,
    "ackmeta": 50_000,
    "status": 1_500,
    "apijson": 5_000,
    "directget": 10_000,
    "info": 2_000,
    "creds": 500,
    "kv": 1_500,
    "objmeta": 4_000,
}
"""Executions per target: a second or two each at the rates measured (fuzz/README.md)."""
CAP_SECONDS = 8
SEED = 20261125


def _atheris_missing() -> str | None:
    try:
        import atheris  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        return "atheris is not installed (a dev dependency on Linux x86-64: pip install atheris)"
    return None


needs_atheris = pytest.mark.skipif(_atheris_missing() is not None, reason=_atheris_missing() or "")


def test_every_target_has_a_short_pass() -> None:
    assert set(RUNS) == set(runner.TARGETS)
    for target in runner.TARGETS:
        assert (ROOT / "fuzz" / f"fuzz_{target}.py").is_file()
        assert (ROOT / "fuzz" / "dict" / f"{target}.dict").is_file()
        assert any((ROOT / "fuzz" / "corpus" / target).iterdir())


@needs_atheris
@pytest.mark.parametrize("target", list(runner.TARGETS))
def test_short_atheris_pass(target: str, tmp_path: Path) -> None:
    cmd = [
        sys.executable, "-m", "fuzz", target, "--runs", str(RUNS[target]), "--seconds", str(CAP_SECONDS),
        "--seed", str(SEED), "--work", str(tmp_path / "work"), "--crashes", str(tmp_path / "crashes"),
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        log = (tmp_path / "work" / f"{target}.log").read_text(errors="replace")
        found = [f"{p.name}: {p.read_bytes().hex()}" for p in (tmp_path / "crashes" / target).glob("*")]
        pytest.fail(f"fuzz target {target} failed:\n{proc.stdout}\n{log[-6000:]}\ninputs (hex): {found}")
    summary = proc.stdout.splitlines()[-1].split()
    assert summary[0] == target and summary[-1] == "none", proc.stdout
    assert int(summary[1].replace(",", "")) > 0, proc.stdout


def test_parse_log() -> None:
    text = (
        "#2\tINITED cov: 10 ft: 12 corp: 3/40b exec/s: 0 rss: 40Mb\n"
        "#4096\tpulse  cov: 50 ft: 90 corp: 20/1Kb lim: 4 exec/s: 2048 rss: 44Mb\n"
        "==1== ERROR: libFuzzer: deadly signal\n"
        "artifact_prefix='x/'; Test unit written to x/crash-abc\n"
        "stat::number_of_executed_units: 4100\nstat::average_exec_per_sec:     2050\nstat::new_units_added: 17\n"
    )
    r = runner.parse_log(text, runner.Result("wire", 1, 2.0))
    assert (r.executions, r.rate, r.cov, r.ft, r.corpus, r.new_units) == (4100, 2050, 50, 90, 20, 17)
    assert r.artifact == "x/crash-abc" and r.finding and not r.interrupted
    stopped = runner.parse_log("stat::number_of_executed_units: 5\n", runner.Result("wire", runner.INTERRUPTED, 1.0))
    assert stopped.interrupted and not stopped.finding
    # Ctrl-C landing in the target's Python code: KeyboardInterrupt, status 130, no final figures
    text = "#524288\tpulse  cov: 177 ft: 442 corp: 76/19Kb exec/s: 664 rss: 49Mb\nKeyboardInterrupt: stopping.\n"
    python_stop = runner.parse_log(text, runner.Result("status", 130, 1.0))
    assert python_stop.interrupted and not python_stop.finding and python_stop.executions == 524288
    crashed = runner.parse_log("Test unit written to x/crash-1\n", runner.Result("status", 130, 1.0))
    assert crashed.finding and not crashed.interrupted


def test_unknown_target_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        runner.main(["nope"])
    assert "unknown target" in capsys.readouterr().err


@needs_atheris
def test_a_finding_stops_the_run_and_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fuzz_dir = tmp_path / "fuzz"
    (fuzz_dir / "corpus" / "broken").mkdir(parents=True)
    (fuzz_dir / "corpus" / "broken" / "seed").write_bytes(b"BOOM")
    (fuzz_dir / "dict").mkdir()
    (fuzz_dir / "dict" / "broken.dict").write_text('"BOOM"\n')
    (fuzz_dir / "fuzz_broken.py").write_text(
        "import sys\nfrom fuzz._runner import run\n\n\ndef one_input(data):\n"
        "    if data.startswith(b'BOOM'):\n        raise ValueError('an invariant broke')\n\n\nrun(sys.argv, one_input)\n"
    )
    monkeypatch.setattr(runner, "FUZZ_DIR", fuzz_dir)
    monkeypatch.setattr(runner, "TARGETS", {"broken": 64, "never": 64})
    work, crashes = tmp_path / "work", tmp_path / "crashes"
    status = runner.main(["--seconds", "30", "--work", str(work), "--crashes", str(crashes)])
    assert status == 1
    written = list((crashes / "broken").glob("crash-*"))
    assert len(written) == 1 and written[0].read_bytes().startswith(b"BOOM")
    assert "an invariant broke" in (work / "broken.log").read_text()
    assert not (work / "never.log").exists(), "the run goes on after a finding"
