"""Joint activation/state planning over profile cards.

Public names: :func:`plan` and :class:`Plan`; cards via :func:`load_card`,
:func:`loads_card`, :func:`parse_card` (:class:`CardError` on a bad card); budgets via
:func:`parse_budget`; :func:`policy_cost` recomputes any policy's (time, peak).
The planner needs only profile cards: it imports nothing else from the package.
"""

from replayverify.planner.card import (
    OPTIONS,
    Card,
    CardError,
    OptionCost,
    SegmentCard,
    format_bytes,
    load_card,
    loads_card,
    parse_budget,
    parse_card,
)
from replayverify.planner.plan import AgnosticReport, Plan, card_costs, plan, policy_cost

__all__ = [
    "OPTIONS",
    "AgnosticReport",
    "Card",
    "CardError",
    "OptionCost",
    "Plan",
    "SegmentCard",
    "card_costs",
    "format_bytes",
    "load_card",
    "loads_card",
    "parse_budget",
    "parse_card",
    "plan",
    "policy_cost",
]
