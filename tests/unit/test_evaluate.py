"""The evaluation: per-segment mechanics restore exactly, a plan's executed peak matches its
card's prediction where the model is exact, the bootstrap interval, and the command."""

from __future__ import annotations

import itertools
import json
import os

import numpy as np
import pytest
from click.testing import CliRunner

from replayverify.evaluate import calibrate as cal
from replayverify.evaluate import measure, stats
from replayverify.evaluate import segments as sg
from replayverify.evaluate.report import _fit_lines
from replayverify.evaluate.workloads import ACTIVATION, Cell, make_step, result_bytes
from replayverify.planner import parse_card, plan, policy_cost

KiB, MiB = 1 << 10, 1 << 20


def _activation(fraction: float, segments: int = 5, elements: int = 4096) -> Cell:
    return Cell(
        f"act-{fraction}", ACTIVATION, 64 * KiB, fraction, segments, elements, (16 * MiB,), 64
    )


def _calibration(workload: str, fraction: float = 0.01) -> Cell:
    return Cell(workload, workload, 128 * KiB, fraction, 5, 0, (16 * MiB,), 64)


def _forward_only(cell: Cell, dtype: str) -> bytes:
    """The state the forward pass leaves (no preservation, no backward)."""
    step = make_step(np, cell, dtype)
    carry = step.begin()
    for k in range(step.segments):
        _, carry = step.forward(k, carry, keep=False, write=True)
    return step.state.tobytes()


CELLS = [
    _activation(0.05),
    _activation(1.0),
    _calibration("queue"),
    _calibration("prototype"),
    _calibration("recurrence"),
    _calibration("queue", 1.0),
]


@pytest.mark.parametrize("cell", CELLS, ids=lambda c: f"{c.name}-f{c.fraction}")
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_every_mechanic_restores_exactly(cell: Cell, dtype: str) -> None:
    """Every uniform and a spread of mixed policies: the state ends where the forward pass
    left it, and gradients and results equal eager's, bit for bit."""
    visible = _forward_only(cell, dtype)
    n = cell.segments
    rng = np.random.default_rng(3)
    policies = [(o,) * n for o in sg.OPTIONS]
    policies += [tuple(rng.choice(sg.OPTIONS, size=n)) for _ in range(12)]
    policies += [p for p in itertools.product(sg.OPTIONS, repeat=n)][::23]
    reference = None
    for share in (False, True):
        for policy in policies:
            step = make_step(np, cell, dtype)
            result = sg.run_segmented(step, policy, copy=np.copyto, share_anchors=share)
            assert step.state.tobytes() == visible, (policy, share)
            got = result_bytes(np, step, result)
            reference = reference or got
            assert got == reference, (policy, share)


@pytest.mark.parametrize("cell", [CELLS[0], CELLS[1], CELLS[3]], ids=lambda c: c.name)
def test_mechanics_on_a_device_array_module(cell: Cell) -> None:
    """The same code on tests/unit/fake_device (arrays that refuse implicit host
    conversion, like CuPy's): the same bytes as on NumPy, for mixed policies."""
    from tests.unit import fake_device as fd

    def copy(dst, src) -> None:
        dst[...] = src

    policy = ("eager", "region", "whole", "region", "eager")
    for share in (False, True):
        host = make_step(np, cell)
        want = result_bytes(
            np, host, sg.run_segmented(host, policy, copy=np.copyto, share_anchors=share)
        )
        dev = make_step(fd, cell)
        got = result_bytes(fd, dev, sg.run_segmented(dev, policy, copy=copy, share_anchors=share))
        assert got == want


def test_dense_region_segment_journals_later_overlapping_writes() -> None:
    cell = _activation(1.0)
    step = make_step(np, cell)
    assert sg.journalled(step, ("eager", "region", "eager", "whole", "eager")) == [
        False,
        True,
        True,
        True,
        True,
    ]
    sparse = make_step(np, _activation(0.05))
    assert sg.journalled(sparse, ("eager", "region", "eager", "whole", "eager")) == [
        False,
        True,
        False,
        False,
        False,
    ]


def test_bad_policies_are_refused() -> None:
    step = make_step(np, _activation(0.05))
    with pytest.raises(ValueError, match="5 segments"):
        sg.run_segmented(step, ("eager",), copy=np.copyto)
    with pytest.raises(ValueError, match="unknown options"):
        sg.run_segmented(step, ("eager",) * 4 + ("readset",), copy=np.copyto)


def test_executed_peak_equals_the_card_prediction() -> None:
    """Calibrate a card on an activation cell, plan under several budgets, execute.

    The card's model (persistent + sum of retained + largest temporary) is exact when the
    policy's largest temporary is that of its last segment (backward starts there, with
    everything retained still held); elsewhere it over-predicts by the retained bytes
    already released. Peaks are compared above the step's starting allocation (which drifts
    by a few KiB of Python objects from run to run), to within 8 KiB against arrays of 256
    KiB."""
    cell = _activation(0.05, segments=6, elements=64 * KiB)
    dev = cal.device("numpy")
    exact = 0
    with dev.tracking():
        card = parse_card(measure.calibrate_card(dev, cell, 2))
        lo = plan(card, 0).min_peak
        hi = policy_cost(card, ("eager",) * 6)[1]
        policies = [(o,) * 6 for o in sg.OPTIONS]
        for frac in (0.1, 0.3, 0.5, 0.7, 0.9):
            for options in (("eager", "region"), ("eager", "whole", "region")):
                result = plan(card, int(lo + frac * (hi - lo)), options=options)
                assert result.feasible
                policies.append(result.policy)
        for policy in dict.fromkeys(policies):
            predicted = policy_cost(card, policy)[1] - card.persistent_bytes
            q = [card.segments[j].option(o).temporary for j, o in enumerate(policy)]
            step = make_step(np, cell)
            measured = measure.peak_policy(dev, step, policy, False, 1, 2)["peak_above_start"]
            if q[-1] == max(q):
                assert abs(measured - predicted) <= 8 * KiB, (policy, measured, predicted)
                exact += 1
            else:
                assert measured <= predicted + 8 * KiB, (policy, measured, predicted)
    assert exact >= 3


def retained_formula(step, cell: Cell, option: str, share: bool) -> list[int]:
    """Bytes each segment keeps from forward to backward, from the cell's geometry alone
    (docs/evaluate.md, "What each method retains"): N the state, A one activation, J_k
    segment k's journal (its regions times the granularity)."""
    n, N = cell.segments, cell.state_bytes
    A = cell.activation_elements * 4
    J = [step.layout(k).payload_bytes for k in range(n)]
    if cell.workload == ACTIVATION:  # eager: h_k and t_k; whole and region also keep h_k
        per = {"eager": [2 * A] * n, "whole": [A + N] * n, "region": [A + j for j in J]}
    else:  # eager: a pre-state copy; the carry is nothing
        anchors = [N] + [0 if share else N] * (n - 1)
        per = {"eager": [N] * n, "whole": anchors, "region": J}
    return per[option]


UNIFORM = [("eager", False), ("whole", False), ("whole", True), ("region", False)]


def test_executed_peak_above_start_equals_the_byte_formula() -> None:
    """Every uniform method (whole with its own anchors and with one shared anchor) on every
    workload of the study, at 1/16,384 of the paper's scale: the bytes kept per segment are
    exactly the geometry formula, and the step's peak above its start exceeds their sum by
    at most the step's working set — six activation-sized arrays (a replay's activation
    and output beside backward's four), two write-set or journal-sized arrays (the
    fancy-index gather and NumPy's journal swap buffer), 16 KiB and 512 bytes per segment of
    Python objects (journal and anchor records, backward sums)."""
    from replayverify.evaluate.workloads import paper_cells

    dev = cal.device("numpy")
    with dev.tracking():
        for cell in (c.at(16384) for c in paper_cells()):
            act = cell.workload == ACTIVATION
            row = cal.ROW_BYTES["queue" if act else cell.workload]
            for option, share in UNIFORM:
                if share and act:
                    continue
                step = make_step(np, cell)
                tally = sg.Tally()
                sg.run_segmented(
                    step,
                    (option,) * cell.segments,
                    copy=np.copyto,
                    share_anchors=share,
                    tally=tally,
                )
                want = retained_formula(step, cell, option, share)
                assert tally.retained == want, (cell.name, option, share)
                written = max(s.rows for s in step.sets) * row
                journal = max(step.layout(k).payload_bytes for k in range(cell.segments))
                bound = (
                    6 * cell.activation_elements * 4
                    + 2 * max(written, journal)
                    + 16 * KiB
                    + 512 * cell.segments
                )
                step = make_step(np, cell)
                policy = (option,) * cell.segments
                peak = measure.peak_policy(dev, step, policy, share, 1)["peak_above_start"]
                excess = peak - sum(want)
                assert 0 <= excess <= bound, (cell.name, option, share, excess, bound)


def test_shared_whole_card_predicts_one_anchor() -> None:
    """The calibration workloads' whole method keeps one anchor for the step (the paper's
    whole snapshot); its card prices exactly that (a regression: the per-segment card priced
    an anchor per segment, 64 times the executed peak), and its executed peak above start
    matches the prediction within the Python objects of a step (8 KiB)."""
    dev = cal.device("numpy")
    with dev.tracking():
        for workload in cal.WORKLOADS:
            cell = _calibration(workload)
            shared = parse_card(measure.calibrate_shared_whole(dev, cell, 1))
            policy = ("whole",) * cell.segments
            predicted = policy_cost(shared, policy)[1] - shared.persistent_bytes
            retained = sum(s.option("whole").retained for s in shared.segments)
            assert retained == cell.state_bytes
            step = make_step(np, cell)
            measured = measure.peak_policy(dev, step, policy, True, 1, 2)["peak_above_start"]
            assert abs(measured - predicted) <= 8 * KiB, (workload, measured, predicted)


def test_bootstrap_on_a_known_case() -> None:
    # identical ratios: the estimate is that ratio and the interval a point
    b = np.linspace(1.0, 2.0, 10)
    r = stats.paired_ratio(2.5 * b, b)
    assert r.estimate == pytest.approx(2.5) and r.low == pytest.approx(2.5)
    assert r.high == pytest.approx(2.5) and r.processes == 10
    # log-normal ratios: the interval is the normal-theory one, within Monte-Carlo error
    rng = np.random.default_rng(1)
    n, mu, sigma = 400, np.log(0.8), 0.1
    logs = rng.normal(mu, sigma, n)
    b = rng.uniform(1.0, 3.0, n)
    r = stats.paired_ratio(b * np.exp(logs), b)
    centre = logs.mean()
    half = 1.959964 * logs.std() / np.sqrt(n)
    assert r.estimate == pytest.approx(np.exp(centre), rel=1e-12)
    assert r.low == pytest.approx(np.exp(centre - half), rel=2e-3)
    assert r.high == pytest.approx(np.exp(centre + half), rel=2e-3)
    assert r.low < 0.8 < r.high
    # seeded: the same data give the same interval
    assert stats.paired_ratio(b * np.exp(logs), b) == r
    with pytest.raises(ValueError):
        stats.paired_ratio(np.array([1.0, 0.0]), np.array([1.0, 1.0]))


def test_paper_cells_scale() -> None:
    from replayverify.evaluate.workloads import paper_cells

    cells = {c.name: c for c in paper_cells()}
    big = cells["large-sparse"]
    assert big.activation_elements == 4096 * 65536 and big.budgets == (32 << 30, 44 << 30)
    small = big.at(512)
    assert small.state_bytes == (1 << 30) // 512 and small.budgets == (64 * MiB, 88 * MiB)
    assert small.granularity == 16 and small.activation_elements == 4096 * 128


def test_evaluate_command_runs_a_small_study(tmp_path, monkeypatch) -> None:
    from replayverify.cli import main
    from replayverify.evaluate import run

    requests: list = []
    spawn = run._spawn

    def recording(request):
        requests.append((request["mode"], [c["cell"]["name"] for c in request["cells"]]))
        return spawn(request)

    monkeypatch.setattr(run, "_spawn", recording)

    out = tmp_path / "eval"
    args = [
        "evaluate",
        "--out",
        str(out),
        "--scale",
        "4096",
        "--repeats",
        "2",
        "--warmups",
        "0",
        "--steps",
        "1",
        "--calibration-steps",
        "1",
        "--cells",
        "large-sparse,queue",
    ]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    # every cell in fresh processes of its own: its calibration, then one per repeat
    assert sorted(requests) == sorted(
        [(mode, [cell]) for cell in ("large-sparse", "queue")
         for mode in ("calibrate", "measure", "measure")]
    )

    def strict(token: str):
        raise AssertionError(f"evaluate.json holds the non-JSON token {token}")

    doc = json.loads((out / "evaluate.json").read_text(), parse_constant=strict)
    assert doc["format"] == "replayverify.evaluate" and doc["processes"] == 2
    assert {r["process"] for r in doc["rows"]} == {0, 1}
    assert all(r["semantic"] for r in doc["rows"])
    assert set(doc["cards"]) == {"large-sparse", "queue"}
    for s in doc["summary"]:
        assert s["infeasible"] or s["processes"] == 2
        if s["infeasible"]:
            assert s["method"] in ("state-agnostic", "eager/whole", "joint")
    md = (out / "report.md").read_text()
    assert "shape of Table 4" in md and "shape of Table 8" in md
    assert "Predicted (card) against measured" in md
    assert doc["device"]["cores"] == os.cpu_count()  # what the times were taken on
    assert doc["process_per_cell"] and "processes per cell" in md.splitlines()[2]
    assert f"{doc['device']['cores']} cores" in md.splitlines()[2]
    png = out / "resource-map.png"
    assert png.exists() == (not doc["plot"].startswith("resource map: PNG skipped"))


def test_evaluate_still_takes_processes_as_a_hidden_deprecated_spelling(tmp_path) -> None:
    from replayverify.cli import main

    result = CliRunner().invoke(main, ["evaluate", "--out", str(tmp_path), "--processes", "3",
                                       "--cells", "nope"])
    assert result.exit_code == 2 and "unknown cells" in result.output
    assert "replayverify: --processes is deprecated: use --repeats" in result.output
    assert "--processes" not in CliRunner().invoke(main, ["evaluate", "--help"]).output
    ctx = main.commands["evaluate"].make_context("evaluate", ["--out", "x", "--processes", "3"])
    assert (ctx.params["processes"], ctx.params["old_processes"]) == (10, 3)


def test_evaluate_command_refuses_bad_usage(tmp_path) -> None:
    from replayverify.cli import main

    result = CliRunner().invoke(main, ["evaluate", "--out", str(tmp_path), "--cells", "nope"])
    assert result.exit_code == 2 and "unknown cells" in result.output
    assert "Traceback" not in result.output


def test_time_model_fit_recovers_known_scales() -> None:
    """Plain times generated from the card with known per-option scales: the fit finds
    them (up to its pull towards 1) and its error after is far below its error before."""
    rng = np.random.default_rng(4)
    n = 6
    card = {
        "segments": [
            {"options": {o: {"time": float(rng.uniform(1, 3))} for o in sg.OPTIONS}}
            for _ in range(n)
        ]
    }
    true = {"eager": 1.3, "whole": 0.8, "region": 1.1}
    policies = {(o,) * n for o in sg.OPTIONS}
    policies |= {tuple(str(x) for x in rng.choice(sg.OPTIONS, size=n)) for _ in range(8)}
    measured = {
        p: sum(true[o] * seg["options"][o]["time"] for seg, o in zip(card["segments"], p))
        for p in policies
    }
    scale, report = measure.fit_scales(card, measured)
    assert scale == pytest.approx([true[o] for o in sg.OPTIONS], abs=0.05)
    assert report["error_after"]["max"] < report["error_before"]["max"] / 4
    fitted = measure.scaled_card(card, scale)
    assert fitted["segments"][0]["options"]["whole"]["time"] == pytest.approx(
        scale[1] * card["segments"][0]["options"]["whole"]["time"]
    )


def test_kendall_tau() -> None:
    from replayverify.evaluate.run import _kendall

    assert _kendall([1, 2, 3], [10, 20, 30]) == 1.0
    assert _kendall([1, 2, 3], [30, 20, 10]) == -1.0
    assert _kendall([1, 2, 3], [10, 30, 20]) == pytest.approx(1 / 3)
    assert _kendall([1], [1]) is None


def test_per_segment_fit_moves_cost_onto_the_segments_that_are_off() -> None:
    """Measured times in which one segment's whole option costs three times the card's:
    the per-segment fit raises that segment's whole time and leaves the others near 1."""
    n = 4
    card = {"segments": [{"options": {o: {"time": 1.0} for o in sg.OPTIONS}} for _ in range(n)]}
    rng = np.random.default_rng(2)
    policies = {tuple(str(x) for x in rng.choice(sg.OPTIONS, size=n)) for _ in range(20)}
    measured = {p: n + 2.0 * (p[1] == "whole") for p in policies}
    scale, report = measure.fit_scales(card, measured, per_segment=True)
    assert scale[3 + 1] > 1.5  # segment 1, whole
    others = np.delete(scale, 3 + 1)
    assert np.all(np.abs(others - 1) < 0.35)
    assert report["error_after"]["max"] < report["error_before"]["max"]


CUPY_SPECIFIC = ("replayverify.gpu.backend", "replayverify.gpu._kernels", "replayverify.gpu.device",
                 "replayverify.gpu.philox", "replayverify.gpu.engines", "cupy")


def test_a_numpy_study_imports_nothing_of_the_cupy_backend(tmp_path) -> None:
    """``replayverify evaluate --backend numpy`` imports no CuPy-specific code: the command,
    and what its measuring processes run (here in the same process, so that one look at
    ``sys.modules`` covers both), load neither the backend's detection, its kernels and
    device, nor CuPy. (The region journal's NumPy reference, ``gpu/journal.py``, is used.)"""
    import subprocess
    import sys

    from tests.helpers import child_env

    code = (
        "import json, sys\n"
        "from replayverify.evaluate import measure, run\n"
        "run._spawn = lambda request: json.loads(json.dumps(measure.serve(request)))\n"
        "from replayverify.cli import main\n"
        "try:\n"
        f"    main(['evaluate', '--out', {str(tmp_path / 'eval')!r}, '--backend', 'numpy',\n"
        "          '--scale', '4096', '--processes', '1', '--warmups', '0', '--steps', '1',\n"
        "          '--calibration-steps', '1', '--cells', 'large-sparse,queue'],\n"
        "         standalone_mode=False)\n"
        "except SystemExit as exc:\n"
        "    assert not exc.code, exc.code\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'cupy'\n"
        f"                        or m in {CUPY_SPECIFIC!r})))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=child_env(), timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == []
    assert (tmp_path / "eval" / "evaluate.json").exists()


def _fake_time_policy(calls: list, seconds: dict):
    """A stand-in for measure.time_policy: records its (policy, warmups, steps) and answers
    a mean of ``seconds[policy]`` and a least step a third of it."""

    def fake(dev, step, policy, share, warmups, steps, min_timed_s=0.1, probe=True):
        calls.append((tuple(policy), warmups, steps))
        t = seconds(tuple(policy))
        return {"time_s": t, "time_min_s": t / 3, "times_s": [t] * steps,
                "cpu_share": 1.0, **({"probe_s": 1e-3} if probe else {})}

    return fake


def test_the_card_predicts_the_mean_step_timed_as_the_measuring_processes_time_it(
    monkeypatch,
) -> None:
    """The card's times add up to the mean of plain steps timed with the measuring
    processes' warmups and steps (not the least step, not other counts), for every option;
    the fit times every policy the same way and fits their means."""
    calls: list = []
    per_option = {"eager": 0.06, "whole": 0.09, "region": 0.07}

    def seconds(policy):
        return sum(per_option[o] for o in policy) / len(policy)

    monkeypatch.setattr(measure, "time_policy", _fake_time_policy(calls, seconds))
    cell = _activation(0.05, segments=4, elements=4096)
    dev = cal.device("numpy")
    timing = measure.Timing(warmups=3, steps=7)
    raw = measure.calibrate_card(dev, cell, 1, timing)
    for option, t in per_option.items():
        total = sum(seg["options"][option]["time"] for seg in raw["segments"])
        assert total == pytest.approx(t, rel=1e-9), option
    assert calls and all((w, s) == (3, 7) for _, w, s in calls)
    calls.clear()
    _, fit = measure.fit_card(dev, cell, raw, timing)
    # the fit's blocks: one warmup, the measuring processes' 7 steps spread over 4 blocks
    assert calls and all((w, s) == (1, 2) for _, w, s in calls)
    for m in fit["measured"]:
        assert m["measured_s"] == pytest.approx(seconds(tuple(m["policy"].split(","))))
        assert m["spread_s"] == 0 and len(m["blocks_s"]) == measure.FIT_BLOCKS
    assert 0 < fit["probe_s"] < 1  # the real reference kernel, around the blocks
    uniform = [m for m in fit["measured"] if len(set(m["policy"].split(","))) == 1]
    assert len(uniform) == 3
    for m in uniform:  # the unfitted card already predicts the uniform policies' means
        assert m["card_s"] == pytest.approx(m["measured_s"], rel=1e-9)


def test_time_policy_reports_the_reference_kernel_around_the_steps() -> None:
    dev = cal.device("numpy")
    assert 0 < measure.speed_probe(dev) < 1
    cell = _activation(0.05, segments=3, elements=1024)
    row = measure.time_policy(dev, make_step(np, cell), ("eager",) * 3, False, 0, 2)
    assert row["probe_s"] > 0 and len(row["times_s"]) >= 2
    assert 0 < row["cpu_share"] <= 1.5  # CPU time over wall time (clocks differ a little)
    assert row["time_min_s"] <= row["time_s"]


def test_a_time_ratio_outside_the_band_says_what_was_measured() -> None:
    from replayverify.evaluate.report import time_note

    inside = {"predicted_time_s": 0.1, "time_s": 0.12, "process_time_s": [0.1, 0.14]}
    assert time_note(inside) == ""
    slow = {
        "predicted_time_s": 0.05,
        "time_s": 0.09,
        "process_time_s": [0.075, 0.1],
        "machine_slowdown": 1.7,
    }
    assert time_note(slow) == (
        "reference kernel 1.70x its calibration time; 1.06 at calibration speed; "
        "process means 1.50-2.00 of predicted"
    )
    shared = {**slow, "cpu_share": 0.97, "calibration_cpu_share": 0.61}
    assert "CPU share of the steps 0.97, in the calibration 0.61" in time_note(shared)
    wrong = {**slow, "machine_slowdown": 1.0}
    assert "still 1.80 at calibration speed" in time_note(wrong)
    short = {"predicted_time_s": 0.001, "time_s": 0.0018}
    assert time_note(short) == "steps under 5 ms"


def _six_segment_card(dev, timing) -> tuple:
    """A six-segment activation cell's calibrated card with deterministic times (eager 1.0,
    whole 1.6, region 1.2 ms per segment; so is the planners' path), and the cell with one
    budget 0.9 of the way from the least peak to eager's: (cell, card, parsed, budget)."""
    cell = _activation(0.05, segments=6, elements=16 * KiB)
    raw = measure.calibrate_card(dev, cell, 1, timing)  # its bytes; times set here:
    for seg in raw["segments"]:
        for option, cost in seg["options"].items():
            cost["time"] = {"eager": 1.0, "whole": 1.6, "region": 1.2}[option] * 1e-3
            cost.pop("state_time", None)
    card = parse_card(raw)
    lo = plan(card, 0).min_peak
    hi = policy_cost(card, ("eager",) * 6)[1]
    budget = int(lo + 0.9 * (hi - lo))
    cell = Cell(cell.name, cell.workload, cell.state_bytes, cell.fraction, cell.segments,
                cell.activation_elements, (budget,), cell.granularity)
    return cell, raw, card, budget


def test_the_fit_corrects_the_model_until_the_planners_pick_is_the_measured_best(
    monkeypatch,
) -> None:
    """Measured times in which every mix costs 30 % more than the sum of its segments (they
    disturb each other; no per-segment scale says that): at a budget just under eager's
    peak, the per-segment pull towards 1 is loosened until no state-aware pick that was
    timed is slower than a timed rival that fits; the final pick is that fastest timed
    policy or is listed as not timed. (With the fixed pull alone, a pick stays slower.)"""
    dev, timing = cal.device("numpy"), measure.Timing(warmups=0, steps=1)
    cell, raw, card, budget = _six_segment_card(dev, timing)

    def seconds(policy):
        base = sum(seg["options"][o]["time"] for seg, o in zip(raw["segments"], policy))
        return base * (1.3 if len(set(policy)) > 1 else 1.0)

    monkeypatch.setattr(measure, "time_policy", _fake_time_policy([], seconds))
    fitted, fit = measure.fit_card(dev, cell, raw, timing)
    measured = {tuple(m["policy"].split(",")): m["measured_s"] for m in fit["measured"]}
    spread = {tuple(m["policy"].split(",")): m["spread_s"] for m in fit["measured"]}
    assert fit["picks_slower_than_measured"] == []
    late = set(fit["picks_timed_after_fit"])
    off = measure.picks_off(cell, fitted, measured, spread)
    assert {o["pick"] for o in off} <= late  # only a pick timed after the last fit is off
    assert fit["picks_off_after_fit"] == off  # and the fit says so
    assert fit["per_segment"]["ridge"] < measure.FIT_RIDGE  # the correction was needed
    pick = plan(parse_card(fitted), budget).policy
    assert pick in measured  # every pick is timed, in a round or after the last fit
    if ",".join(pick) not in late:
        rivals = [q for q in measured if policy_cost(card, q)[1] <= budget]
        assert measured[pick] == min(measured[q] for q in rivals)
    text = "\n".join(_fit_lines({"cards": {cell.name: {"fit": fit}}}))
    assert (f"{cell.name}: {len(late)} pick(s) of the final fitted card" in text) == bool(late)
    assert all(f"timed at {1e3 * o['pick_s']:.2f} ms" in text for o in off)


def test_the_fit_times_its_policies_in_interleaved_blocks_with_a_spread(monkeypatch) -> None:
    """Each policy is timed in FIT_BLOCKS blocks, round robin with the order rotated by one
    per block (a change of the machine's speed falls on all alike); its time is the mean
    of all its blocks' steps and its spread the standard error of its block means."""
    calls: list = []
    drift = iter(np.linspace(1.0, 1.5, 100))  # the machine slows down as the blocks go

    def fake(dev, step, policy, share, warmups, steps, min_timed_s=0.1, probe=True):
        calls.append(tuple(policy))
        t = {"eager": 1.0, "whole": 2.0, "region": 3.0}[policy[0]] * next(drift)
        return {"time_s": t, "time_min_s": t, "times_s": [t] * steps, "cpu_share": 1.0}

    monkeypatch.setattr(measure, "time_policy", fake)
    dev = cal.device("numpy")
    policies = [(o,) * 2 for o in measure.OPTIONS]
    rows = measure.time_interleaved(dev, None, policies, measure.Timing(2, 5), blocks=4)
    assert len(calls) == 12
    blocks = [calls[i : i + 3] for i in range(0, 12, 3)]
    assert all(sorted(b) == sorted(policies) for b in blocks)  # round robin
    assert [b[0] for b in blocks] == [policies[0], policies[1], policies[2], policies[0]]
    for row in rows.values():
        assert len(row["blocks_s"]) == 4
        assert row["time_s"] == pytest.approx(np.mean(row["blocks_s"]))
        sem = np.std(row["blocks_s"], ddof=1) / 2
        assert row["spread_s"] == pytest.approx(sem) and sem > 0
        assert 0 < row["probe_s"] < 1
    # the drift fell on every policy alike: each one's mean is within the drift's range
    ratio = rows[policies[2]]["time_s"] / rows[policies[0]]["time_s"]
    assert 2.8 < ratio < 3.2


def test_a_pick_tied_with_a_simpler_policy_within_the_spread_is_off() -> None:
    """Where the calibration cannot order the joint pick and a simpler timed rival (means
    within TIE_Z standard errors), the pick is off until the fit prefers the simpler one,
    and the fit aims the pick above it; without a spread the faster pick stands."""
    cell, raw, card, budget = _six_segment_card(
        cal.device("numpy"), measure.Timing(warmups=0, steps=1)
    )
    pick = plan(card, budget).policy
    assert len(set(pick)) > 1  # a mix
    region = ("region",) * 6
    assert policy_cost(card, region)[1] <= budget
    measured = {pick: 0.0100, region: 0.0102}
    assert measure.picks_off(cell, raw, measured) == []  # no spread: the pick is fastest
    spread = {pick: 0.0002, region: 0.0002}  # 0.2 ms apart, within 2 x 0.28 ms
    off = measure.picks_off(cell, raw, measured, spread)
    assert [(o["method"], o["pick"], o["best"], o["tied"]) for o in off] == [
        ("joint", ",".join(pick), ",".join(region), True)
    ]
    target, ties = measure.fit_targets(cell, raw, measured, spread)
    assert target[region] == measured[region]
    assert target[pick] == pytest.approx(0.0102 * (1 + measure.TIE_MARGIN))
    assert [(t["method"], t["preferred"]) for t in ties] == [("joint", ",".join(region))]
    far = {pick: 0.0100, region: 0.0120}  # 2 ms apart: beyond the spread, the pick stands
    assert measure.picks_off(cell, raw, far, spread) == []
    assert measure.fit_targets(cell, raw, far, spread) == (far, [])


def test_the_fit_breaks_a_tie_within_the_spread_towards_the_simpler_policy(monkeypatch) -> None:
    """Blocks that alternate 10 % above and below each policy's true time give every timed
    policy a spread of about 6 %: uniform regions (6 region segments) and the joint
    planner's cheaper mixes are then within it; the fit records the tie, aims the tied
    mixes above uniform regions, and ends with no timed pick off and none of those mixes
    as the joint pick: uniform regions, or a pick it did not time (a permutation of a
    mix, which the rounds can keep finding). Without a spread the same truth keeps the
    mix and records no tie."""
    dev, timing = cal.device("numpy"), measure.Timing(warmups=0, steps=1)
    cell, raw, card, budget = _six_segment_card(dev, timing)
    region = ("region",) * 6
    truth = {p: policy_cost(card, p)[0] for p in [plan(card, budget).policy, region]}
    assert (truth[region] - min(truth.values())) / truth[region] < 0.16  # within the tie

    def run(noise: float) -> tuple[tuple[str, ...], dict]:
        count = [0]

        def fake(dev, step, policy, share, warmups, steps, min_timed_s=0.1, probe=True):
            count[0] += 1
            blk = (count[0] - 1) // len(policies[0]) if policies else 0
            sign = 1 if blk % 2 == 0 else -1
            t = policy_cost(card, tuple(policy))[0] * (1 + sign * noise)
            return {"time_s": t, "time_min_s": t, "times_s": [t] * steps, "cpu_share": 1.0}

        policies: list = []
        real = measure.time_interleaved

        def interleaved(dev, step, ps, timing, blocks=measure.FIT_BLOCKS):
            policies[:] = [ps]
            count[0] = 0
            return real(dev, step, ps, timing, blocks)

        monkeypatch.setattr(measure, "time_policy", fake)
        monkeypatch.setattr(measure, "time_interleaved", interleaved)
        fitted, fit = measure.fit_card(dev, cell, raw, timing)
        return plan(parse_card(fitted), budget).policy, fit

    pick, fit = run(0.0)
    assert pick != region and fit["ties"] == []
    pick, fit = run(0.10)
    assert fit["ties"] and fit["picks_slower_than_measured"] == []
    measured = {tuple(m["policy"].split(",")): m for m in fit["measured"]}
    assert all(m["spread_s"] > 0 for m in measured.values())
    raised = {tuple(q.split(",")) for t in fit["ties"] for q in t["raised"]}
    assert raised and pick not in raised
    for q in raised:
        assert measured[q]["target_s"] > measured[region]["measured_s"]
    assert pick in measured  # timed in a round, or after the last fit
    if ",".join(pick) in fit["picks_timed_after_fit"]:
        off = [o for o in fit["picks_off_after_fit"] if o["method"] == "joint"]
        assert pick == region or [o["pick"] for o in off] == [",".join(pick)]
    else:
        assert pick == region
