"""``replayverify plan CARD --budget BYTES``: the planner on the command line.

Exit status: 0 when a policy fits the budget, 1 when none does (or, with
``--state-agnostic``, when the agnostic pick does not fit once charged its true costs),
2 for a bad card, budget or option list (one line on stderr).
"""

from __future__ import annotations

import click

from replayverify.cli_common import fail, finish_clean_if, json_option
from replayverify.planner.card import OPTIONS, Card, CardError, format_bytes, load_card
from replayverify.planner.card import parse_budget as _parse_budget
from replayverify.planner.plan import Plan, plan
from replayverify.untrusted import dumps, one_line


def _describe(card: Card, result: Plan) -> list[str]:
    """Readable lines for one plan."""
    lines = [
        f"card: {card.name or '(unnamed)'}, {len(card.segments)} segments, "
        f"persistent {format_bytes(card.persistent_bytes)}",
        f"budget: {format_bytes(result.budget)} ({result.budget} B); "
        f"options: {', '.join(result.options)}",
    ]
    if result.policy is None:
        kinds = [{k for k, _ in seg.options} for seg in card.segments]
        offered = set().union(*kinds)
        missing = next(s.name for s, k in zip(card.segments, kinds) if not k & set(result.options))
        lines.append(
            f"no policy: segment {missing!r} offers none of {', '.join(result.options)} "
            f"(the card offers {', '.join(o for o in OPTIONS if o in offered)})"
        )
        return lines
    assert result.predicted_peak is not None and result.predicted_time is not None
    if result.state_agnostic is not None:
        a = result.state_agnostic
        lines.append(
            f"planned without state costs: time {a.planned_time:.6g}, peak "
            f"{format_bytes(a.planned_peak or 0)} "
            f"({'fits' if a.planned_feasible else 'over budget'} in that model)"
        )
        fits = "fits" if result.feasible else "does not fit"
        lines.append(f"verdict: charged its true costs, the state-agnostic pick {fits}")
    elif result.feasible:
        if result.optimal:
            claim = f"optimal, by {result.method}"
        elif result.truncated:
            claim = "not proven optimal: frontier truncated"
        else:
            claim = f"not proven optimal by {result.method}"
        lines.append(f"verdict: fits ({claim})")
    else:
        lines.append(
            f"verdict: no policy fits; the least peak is {format_bytes(result.min_peak or 0)} "
            f"({result.min_peak} B), shown below"
        )
    lines.append(
        f"predicted: time {result.predicted_time:.6g}, peak "
        f"{format_bytes(result.predicted_peak)} ({result.predicted_peak} B)"
    )
    counts = ", ".join(f"{k} {result.policy.count(k)}" for k in OPTIONS)
    lines.append(f"policy: {counts}")
    trunc = "truncated" if result.truncated else "untruncated"
    lines.append(f"frontier: {result.frontier_size} states ({trunc})")
    width = max(7, max(len(s.name) for s in card.segments))
    lines.append(f"{'segment':<{width}}  option  {'retained':>12}  {'temporary':>12}  {'time':>10}")
    for seg, kind in zip(card.segments, result.policy):
        cost = seg.option(kind)
        assert cost is not None
        lines.append(
            f"{seg.name:<{width}}  {kind:<6}  {format_bytes(cost.retained):>12}  "
            f"{format_bytes(cost.temporary):>12}  {cost.time:>10.6g}"
        )
    return lines


@click.command("plan")
@click.argument("card", type=click.Path(dir_okay=False))
@click.option("--budget", required=True, help="Memory budget: bytes or a size like 44GiB.")
@click.option(
    "--options",
    "options",
    default=",".join(OPTIONS),
    show_default=True,
    help="Comma-separated options the planner may use (eager,whole is the control).",
)
@click.option(
    "--state-agnostic",
    is_flag=True,
    help="Plan without state_* costs, then charge the pick its true costs.",
)
@click.option(
    "--max-frontier",
    type=click.IntRange(min=1),
    default=None,
    help="Truncate each step's frontier to K states (drops the optimality claim).",
)
@json_option("one object.")
def plan_command(
    card: str,
    budget: str,
    options: str,
    state_agnostic: bool,
    max_frontier: int | None,
    as_json: bool,
) -> None:
    """Choose eager / whole / region per segment of a profile CARD under a memory budget.

    Prints the plan (one JSON object with --json); writes no files. Exit status 0 when a
    policy fits the budget, 1 when none does (with --state-agnostic: when the agnostic
    pick does not fit once charged its true costs), 2 for a bad card, budget or option list.
    """
    try:
        limit = _parse_budget(budget)
        loaded = load_card(card)
    except CardError as exc:
        where = "" if exc.field == "budget" else f"{one_line(card, 80)}: rejected: "
        fail(f"{where}{exc}")
    try:
        result = plan(
            loaded,
            limit,
            options=options,
            state_agnostic=state_agnostic,
            max_frontier=max_frontier,
        )
    except CardError as exc:
        fail(str(exc))
    if as_json:
        click.echo(dumps(result.to_json()))
    else:
        click.echo("\n".join(_describe(loaded, result)))
    finish_clean_if(result.feasible)
