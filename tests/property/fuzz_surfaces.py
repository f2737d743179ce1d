"""Fuzzing the surfaces around the loaders (issue #28): run directories, plug-ins, options.

Each case is drawn from a seeded ``random.Random`` and is one of:

- ``damage``: a finished 3-program suite directory damaged at random (a byte changed, a
  line deleted, duplicated or swapped, the file cut or grown, a progress mark edited,
  dropped or repeated, progress.jsonl not UTF-8 / a directory / gone, another seed's
  records, summary.json a directory), then ``suite --resume``;
- ``faulty-engine``: ``check`` with an engine plug-in that exits, raises its own
  KeyboardInterrupt, raises, or returns junk; or whose module fails to load;
- ``options``: a command with option values drawn from a pool of garbage (NaN, huge and
  negative numbers, unusable paths, malformed seeds and shards, relative plug-in names);
- ``concurrent`` (subprocesses): two ``suite --resume`` of one directory at once;
- ``kill-resume`` (subprocesses): a suite killed with SIGKILL at a random moment, then
  resumed.

A case passes when: nothing raises past the CLI (no traceback); the exit status is 0, 1
or 2; a refusal (2) is one line under 300 characters (click's own usage errors aside)
and leaves a run directory exactly as it was; a run that exits 0 or 1 ends with the
records of an uninterrupted run (timings aside) and never duplicates a program.
``tests/property/test_fuzz_surfaces.py`` runs a derandomized slice in CI;
``scripts/fuzz_surfaces.sh`` runs thousands and prints one summary line.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from click.testing import CliRunner

from replayverify.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "examples" / "shift-tanh.json")
PROGRAMS = 3
LINE = 300
KINDS = {"damage": 10, "faulty-engine": 4, "options": 10, "concurrent": 1, "kill-resume": 1}


@dataclass
class Result:
    kind: str
    what: str
    problems: list[str] = field(default_factory=list)


def records_of(out: Path) -> list[dict] | str:
    """The records minus timings, or what made them unreadable."""
    got = []
    try:
        for line in (out / "records.jsonl").read_text().splitlines():
            d = json.loads(line)
            d.pop("seconds", None)
            got.append(d)
    except (OSError, ValueError) as exc:
        return f"unreadable records: {type(exc).__name__}"
    return got


def snapshot(out: Path) -> dict[str, bytes | str]:
    """Every entry of ``out`` but the lock: bytes of files, "dir" for directories."""
    if not out.is_dir():
        return {}
    return {p.name: (p.read_bytes() if p.is_file() else "dir") for p in sorted(out.iterdir())
            if p.name != "run.lock"}


def suite_args(out: Path, seed: int = 0) -> list[str]:
    return ["suite", "--programs", str(PROGRAMS), "--seed", str(seed), "--workers", "1",
            "--out", str(out), "--no-shrink"]


class Fixtures:
    """The finished runs every case starts from (made once per campaign)."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.ref = tmp / "ref"
        self.other = tmp / "other"
        for out, seed in ((self.ref, 0), (self.other, 1)):
            res = CliRunner().invoke(main, suite_args(out, seed))
            assert res.exit_code in (0, 1), res.output
        self.records = records_of(self.ref)


def _one_line(text: str, problems: list[str], usage_ok: bool = True) -> None:
    text = text.strip("\n")
    if usage_ok and text.startswith("Usage:") and "Error:" in text:
        return  # click's own usage error (bad option type): its convention, exit 2
    if "\n" in text or len(text) > LINE:
        problems.append(f"refusal not one line under {LINE} chars: {text[:400]!r}")


def _invoke(args: list[str], problems: list[str]):
    res = CliRunner().invoke(main, args)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        problems.append(f"raised {type(res.exception).__name__}: {res.exception}")
    if res.exit_code not in (0, 1, 2):
        problems.append(f"exit status {res.exit_code}")
    if "Traceback" in res.output:
        problems.append("traceback in the output")
    return res


# ---------------------------------------------------------------- damage


def _lines(b: bytes) -> list[bytes]:
    return b.splitlines(keepends=True)


def damage(rng: random.Random, out: Path, fx: Fixtures) -> str:
    """One random damage to a copy of the finished run in ``out``; what it was."""
    files = ["records.jsonl", "programs.jsonl", "progress.jsonl"]
    name = rng.choice(files)
    path = out / name
    data = path.read_bytes()
    lines = _lines(data)
    how = rng.choice(["flip", "delete-line", "dup-line", "swap", "cut", "grow", "utf8",
                      "gone", "dir", "other-seed", "summary-dir", "edit-number"])
    if how == "flip" and data:
        i = rng.randrange(len(data))
        path.write_bytes(data[:i] + bytes([data[i] ^ (1 << rng.randrange(8))]) + data[i + 1:])
    elif how == "delete-line" and lines:
        del lines[rng.randrange(len(lines))]
        path.write_bytes(b"".join(lines))
    elif how == "dup-line" and lines:
        i = rng.randrange(len(lines))
        lines.insert(i, lines[i])
        path.write_bytes(b"".join(lines))
    elif how == "swap" and len(lines) > 1:
        i, j = rng.sample(range(len(lines)), 2)
        lines[i], lines[j] = lines[j], lines[i]
        path.write_bytes(b"".join(lines))
    elif how == "cut":
        path.write_bytes(data[:rng.randrange(len(data) + 1)])
    elif how == "grow":
        path.write_bytes(data + rng.choice([b"{", b"\n", b"garbage\n", lines[-1] if lines
                                            else b"x"]))
    elif how == "utf8":
        path.write_bytes(data[:len(data) // 2] + b"\xff\xfe" + data[len(data) // 2:])
    elif how == "gone":
        path.unlink()
    elif how == "dir":
        path.unlink()
        path.mkdir()
    elif how == "other-seed":
        name = rng.choice(["records.jsonl", "programs.jsonl"])
        shutil.copy(fx.other / name, out / name)
    elif how == "summary-dir":
        name = "summary.json"
        (out / name).unlink()
        (out / name).mkdir()
    elif how == "edit-number":
        text = data.decode("utf-8", "replace")
        digits = [i for i, c in enumerate(text) if c.isdigit()]
        if digits:
            i = rng.choice(digits)
            text = text[:i] + str((int(text[i]) + rng.randrange(1, 10)) % 10) + text[i + 1:]
            path.write_text(text)
    return f"{how} {name}"


def damage_case(rng: random.Random, tmp: Path, fx: Fixtures) -> Result:
    out = tmp / "d"
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(fx.ref, out)
    what = damage(rng, out, fx)
    r = Result("damage", what)
    before = snapshot(out)
    res = _invoke([*suite_args(out), "--resume"], r.problems)
    if res.exit_code == 2:
        _one_line(res.output, r.problems)
        if snapshot(out) != before:
            r.problems.append("a refused resume changed the directory")
    elif res.exit_code in (0, 1) and records_of(out) != fx.records:
        r.problems.append("resume exited 0/1 but its records differ from the reference")
    return r


# ---------------------------------------------------------------- plug-ins


ENGINE_FAULTS = ["ExitEngine", "InterruptEngine", "NoneEngine", "RaiseEngine", "JunkEngine"]
LOAD_FAULTS = {
    "runtime": "raise RuntimeError('import failed\\nsecond line')",
    "syntax": "def f(:\n",
    "exit": "import sys\nsys.exit(4)",
    "interrupt": "raise KeyboardInterrupt",
    "ctor": "class X:\n    def __init__(self):\n        raise OSError('no\\nway')\n",
    "not-engine": "X = 42",
}


def faulty_engine_case(rng: random.Random, tmp: Path) -> Result:
    if rng.random() < 0.5:
        engine = f"tests.helpers:{rng.choice(ENGINE_FAULTS)}"
        r = Result("faulty-engine", engine)
        res = _invoke(["check", EXAMPLE, "--json", "--engine", engine], r.problems)
        if res.exit_code != 1:
            r.problems.append(f"exit {res.exit_code}, not 1 (error records)")
        else:
            mine = [json.loads(x) for x in res.output.splitlines()
                    if x.startswith("{") and engine in x]
            if [d["outcome"] for d in mine] != ["error", "error"]:
                r.problems.append(f"the engine's records: {[d['outcome'] for d in mine]}")
        return r
    fault = rng.choice(sorted(LOAD_FAULTS))
    name = f"rv_fuzz_plugin_{fault}"
    (tmp / f"{name}.py").write_text(LOAD_FAULTS[fault])
    sys.path.insert(0, str(tmp))
    try:
        spec = rng.choice([f"{name}:X", f".{name}:X", f"{name}:missing.attr"])
        command = rng.choice([["check", EXAMPLE, "--engine", spec],
                              ["cohort", "--frameworks", spec, "--seeds", "1:2",
                               "--out", str(tmp / "c")]])
        r = Result("faulty-engine", f"load {fault} {spec} {command[0]}")
        res = _invoke(command, r.problems)
        if res.exit_code != 2:
            r.problems.append(f"exit {res.exit_code}, not 2")
        _one_line(res.output, r.problems, usage_ok=False)
    finally:
        sys.path.remove(str(tmp))
        sys.modules.pop(name, None)
    return r


# ---------------------------------------------------------------- options


GARBAGE = ["nan", "inf", "-inf", "-1", "0", "1e309", "1e300", "", "x", "1:0", "a:b", "0:",
           "10000000000000000000000", "-5:3", "0/0", "2/1", "1/-1", ",", "\x00", "é" * 300,
           "/dev/null", "/proc/rv-fuzz/x", ".rel:X", "math:pi", "math:nothing", "::"]


def options_case(rng: random.Random, tmp: Path, fx: Fixtures) -> Result:
    def g() -> str:
        return rng.choice(GARBAGE)

    out = str(tmp / "o")
    file = tmp / "afile"
    file.write_text("x")
    paths = [out, "/dev/null", str(file / "sub"), str(tmp / ("n" * 300)), "/proc/rv-fuzz/o"]
    commands = [
        ["suite", "--programs", rng.choice(["1", "0", "-1", "10" * 12, "x"]), "--workers", "1",
         "--out", rng.choice(paths), *rng.choice([
             [rng.choice(["--timeout", "--seed", "--shard", "--engine", "--max-shrink"]), g()],
             ["--junit", rng.choice([*paths, str(tmp / "no" / "j.xml"), str(tmp)])]])],
        ["generate", "--programs", rng.choice(["1", "0", str(10**20), "x"]), "--out",
         rng.choice(paths), *rng.choice([[], ["--family", g()], ["--seed", g()]])],
        ["cohort", "--frameworks", rng.choice(["replayverify", "replayverify,replayverify",
                                                ",", g()]),
         "--seeds", rng.choice(["1:2", g(), "0:" + str(10**18)]), "--workers", "1",
         "--out", rng.choice(paths), *rng.choice([[], ["--timeout", g()]])],
        ["check", rng.choice([EXAMPLE, "/dev/null", str(tmp), str(file)]),
         *rng.choice([[], ["--engine", g()], ["--policy", g()], ["--max-bytes", g()]])],
        ["run", rng.choice([EXAMPLE, "/dev/null", str(tmp)]), "--max-bytes",
         rng.choice([g(), "4611686018427387904", "1"])],
        ["replay", rng.choice(["s0/bytes/000001", g()]), "--save",
         rng.choice([*paths, str(tmp / "no" / "p.json"), str(tmp / "p.json")])],
        ["profile", EXAMPLE, "--out", rng.choice(paths + [str(tmp / "no" / "c.json")])],
    ]
    args = rng.choice(commands)
    r = Result("options", " ".join(a[:40] for a in args))
    res = _invoke(args, r.problems)
    rejected_file = args[0] == "check" and res.output.rstrip().endswith("rejected input")
    if res.exit_code == 2 and not rejected_file:  # (check: a table with a rejected record)
        _one_line(res.output, r.problems)
    shutil.rmtree(out, ignore_errors=True)
    return r


# ---------------------------------------------------------------- subprocesses


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))}


def _cmd(out: Path) -> list[str]:
    return [sys.executable, "-m", "replayverify", *suite_args(out)]


def concurrent_case(rng: random.Random, tmp: Path, fx: Fixtures) -> Result:
    out = tmp / "cc"
    shutil.rmtree(out, ignore_errors=True)
    r = Result("concurrent", "two suite --resume at once")
    procs = [subprocess.Popen(_cmd(out) + ["--resume"], env=_env(), cwd=ROOT, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for _ in range(2)]
    codes = []
    for p in procs:
        _, err = p.communicate(timeout=300)
        codes.append(p.returncode)
        if p.returncode == 2:
            _one_line(err, r.problems)
        elif "Traceback" in err:
            r.problems.append("traceback")
    if sorted(codes)[0] not in (0, 1):
        r.problems.append(f"no run finished: exit statuses {codes}")
    if records_of(out) != fx.records:
        r.problems.append("records differ from an uninterrupted run's")
    return r


def kill_resume_case(rng: random.Random, tmp: Path, fx: Fixtures) -> Result:
    out = tmp / "kr"
    shutil.rmtree(out, ignore_errors=True)
    delay = rng.uniform(0.2, 2.0)
    r = Result("kill-resume", f"SIGKILL after {delay:.2f} s")
    p = subprocess.Popen(_cmd(out), env=_env(), cwd=ROOT, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    time.sleep(delay)
    p.send_signal(signal.SIGKILL)
    p.wait()
    res = subprocess.run(_cmd(out) + ["--resume"], env=_env(), cwd=ROOT, capture_output=True,
                         text=True, timeout=300, check=False)
    if res.returncode not in (0, 1):
        r.problems.append(f"resume exit {res.returncode}: {res.stderr[-300:]!r}")
    elif records_of(out) != fx.records:
        r.problems.append("records differ from an uninterrupted run's")
    return r


# ---------------------------------------------------------------- campaign


def run_case(kind: str, rng: random.Random, tmp: Path, fx: Fixtures) -> Result:
    if kind == "damage":
        return damage_case(rng, tmp, fx)
    if kind == "faulty-engine":
        return faulty_engine_case(rng, tmp)
    if kind == "options":
        return options_case(rng, tmp, fx)
    if kind == "concurrent":
        return concurrent_case(rng, tmp, fx)
    return kill_resume_case(rng, tmp, fx)


def campaign(examples: int, seed: int, tmp: Path, kinds: dict[str, int] | None = None,
             report=print) -> list[Result]:
    """``examples`` cases drawn with ``seed``; returns the failing ones (each reported)."""
    kinds = kinds or KINDS
    rng = random.Random(seed)
    fx = Fixtures(tmp)
    failures, counts = [], Counter()
    for i in range(examples):
        kind = rng.choices(list(kinds), weights=list(kinds.values()))[0]
        case_rng = random.Random(rng.getrandbits(64))
        work = tmp / f"case{i % 2}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        result = run_case(kind, case_rng, work, fx)
        counts[kind] += 1
        if result.problems:
            failures.append(result)
            report(f"FAIL {i} {result.kind}: {result.what}: {'; '.join(result.problems)}")
    report(f"fuzz_surfaces: {examples} cases (seed {seed}; "
           + ", ".join(f"{k} {n}" for k, n in sorted(counts.items()))
           + f"), {len(failures)} failed")
    return failures


def main_cli() -> None:
    import argparse
    import tempfile

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-subprocess", action="store_true",
                    help="leave out the concurrent and kill-resume cases (subprocesses)")
    args = ap.parse_args()
    kinds = {k: w for k, w in KINDS.items()
             if not (args.no_subprocess and k in ("concurrent", "kill-resume"))}
    with tempfile.TemporaryDirectory() as tmp:
        failures = campaign(args.examples, args.seed, Path(tmp), kinds)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main_cli()
