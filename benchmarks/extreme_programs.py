"""Memory and time of the CLI on valid extreme programs (issue #13).

Run: python benchmarks/extreme_programs.py [--case NAME ...] [--skip-check]

Each case is a valid program written to a temporary file and run as
``python -m replayverify run --json FILE`` and ``check --json FILE`` in a fresh
subprocess; the figures are wall time and the subprocess's peak resident memory
(``ru_maxrss`` of the child). As a baseline measured in the same run, the same
subprocess loading ``replayverify`` and numpy and exiting (``import``) gives the
constant that every peak includes; targets are stated against it:

- ``buffer-64mib``: one 64 MiB buffer, a 1M-element float64 view written by 3 ops:
  ``run`` peak <= 3 x 64 MiB + the import baseline + 64 MiB;
- ``tiny-views-256mib``: a 256 MiB buffer (the default limit) with 8-element views at
  both ends: ``run`` peak <= 3 x 256 MiB + the import baseline;
- ``million-3ops``: 1M float64 elements, 3 ops (axpby, tanh, mul), all one input:
  ``run`` <= 2 s; ``check`` <= 4 s and <= 300 MiB over the import baseline (issue #28;
  machine shared: see the load line);
- ``guard-edge``: a derivative reference whose shadow is just under the 2 GiB guard:
  every record ``unsupported`` or ``match``, never ``error``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

MiB = 2**20


def _view(name: str, buf: str, offset: int, n: int, dtype: str = "float64") -> dict:
    item = 8 if dtype.endswith("64") else 4
    return {"name": name, "buffer": buf, "dtype": dtype, "offset": offset, "shape": [n],
            "strides": [item]}


def _program(name: str, nbytes: int, views: list[dict], ops: list[dict], inputs: list[str],
             loss_view: str, n_loss: int, init: list[dict] | None = None) -> dict:
    return {"format": "replayverify.program", "version": 1, "name": name,
            "buffers": [{"name": "b", "nbytes": nbytes}], "views": views, "init": init or [],
            "ops": ops, "inputs": inputs,
            "loss": {"view": loss_view, "weights": [1.0] * n_loss}}


def _three_ops(x: str, y: str) -> list[dict]:
    return [{"op": "axpby", "dst": y, "x": x, "y": x, "a": 0.5, "b": 0.25, "c": 0.1},
            {"op": "tanh", "dst": y, "x": y, "a": 1.5},
            {"op": "mul", "dst": x, "x": x, "y": y}]


def cases() -> dict[str, dict]:
    n = 1 << 20
    last = 256 * MiB - 64
    return {
        "buffer-64mib": _program("buffer-64mib", 64 * MiB,
                                 [_view("x", "b", 0, n), _view("y", "b", 8 * n, n)],
                                 _three_ops("x", "y"), ["x"], "x", n),
        "tiny-views-256mib": _program("tiny-views-256mib", 256 * MiB,
                                      [_view("x", "b", 0, 8), _view("y", "b", last, 8)],
                                      _three_ops("x", "y"), ["x"], "x", 8),
        "million-3ops": _program("million-3ops", 16 * n,
                                 [_view("x", "b", 0, n), _view("y", "b", 8 * n, n)],
                                 _three_ops("x", "y"), ["x"], "x", n),
        # 11,585 input coordinates x 11,586 float addresses x 16 bytes (long double): the
        # forward Jacobian's shadow alone is just under 2 GiB
        "guard-edge": _program("guard-edge", 8 * 11586,
                               [_view("x", "b", 0, 11585), _view("y", "b", 8 * 11585, 1)],
                               [{"op": "tanh", "dst": "y", "x": "y", "a": 1.0}], ["x"], "x",
                               11585),
    }


def _child(args: list[str]) -> tuple[float, int, int, str]:
    # one grandchild per measurement so that RUSAGE_CHILDREN holds only that call
    code = ("import json, sys, resource, subprocess, time\n"
            "t = time.perf_counter()\n"
            "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
            "s = time.perf_counter() - t\n"
            "r = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024\n"
            "outs = {}\n"
            "for line in p.stdout.splitlines():\n"
            "    if line.startswith('{') and '\"outcome\"' in line:\n"
            "        rec = json.loads(line)\n"
            "        key = rec['outcome'] + (': ' + rec['detail'][:60] if rec['outcome'] in "
            "('error', 'diverge') else '')\n"
            "        outs[key] = outs.get(key, 0) + 1\n"
            "print(json.dumps([s, r, p.returncode, p.stderr[-300:], outs]))\n")
    out = subprocess.run([sys.executable, "-c", code, sys.executable, *args],
                         capture_output=True, text=True, check=True)
    return tuple(json.loads(out.stdout))  # type: ignore[return-value]  # s, rss, code, err, outs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", action="append", default=None)
    ap.add_argument("--skip-check", action="store_true")
    a = ap.parse_args()
    base_s, base_rss, _, _, _ = _child(["-c", "import numpy, replayverify.cli"])
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"import baseline: {base_s:.2f} s, peak {base_rss / MiB:.0f} MiB")
    print("| case | command | seconds | peak MiB | peak - import MiB | exit | outcomes |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, doc in cases().items():
            if a.case and name not in a.case:
                continue
            path = Path(tmp) / f"{name}.json"
            path.write_text(json.dumps(doc))
            for cmd in ("run", "check"):
                if cmd == "check" and a.skip_check:
                    continue
                s, rss, code, err, outs = _child(["-m", "replayverify", cmd, "--json",
                                                  str(path)])
                note = ", ".join(f"{n} {k}" for k, n in sorted(outs.items()))
                if code not in (0, 1):
                    note += err[-200:].replace("\n", " ")
                print(f"| {name} | {cmd} | {s:.2f} | {rss / MiB:.0f} | "
                      f"{(rss - base_rss) / MiB:.0f} | {code} | {note} |", flush=True)


if __name__ == "__main__":
    main()
