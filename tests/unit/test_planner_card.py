"""Profile card validation (one table of malformed cards) and budget parsing."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable

import pytest

from replayverify.planner import CardError, load_card, loads_card, parse_budget, parse_card
from replayverify.planner.card import MAX_TOTAL_BYTES


def _card() -> dict:
    return {
        "format": "replayverify.profile",
        "version": 1,
        "name": "t",
        "persistent_bytes": 100,
        "segments": [
            {
                "name": "a",
                "options": {
                    "eager": {"retained": 10, "temporary": 0, "time": 1.5},
                    "whole": {
                        "retained": 4,
                        "temporary": 3,
                        "time": 3,
                        "state_retained": 2,
                        "state_temporary": 1,
                        "state_time": 0.5,
                    },
                },
            },
            {"name": "b", "options": {"region": {"retained": 1, "temporary": 2, "time": 2}}},
        ],
    }


def _set(path: str, value) -> Callable[[dict], None]:
    """A mutation that sets (or, for value ``...``, deletes) the key at a dotted path."""

    def apply(doc: dict) -> None:
        *head, last = path.split(".")
        node = doc
        for key in head:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if isinstance(node, list):
            node[int(last)] = value
        elif value is ...:
            del node[last]
        else:
            node[last] = value

    return apply


OPT = "segments.0.options.eager"
BAD_CARDS = [
    ("empty object", lambda d: d.clear(), "format", "required key is missing"),
    ("format", _set("format", "replayverify.program"), "format", "must be"),
    ("version", _set("version", 2), "version", "must be 1"),
    ("version bool", _set("version", True), "version", "must be 1"),
    ("unknown top key", _set("notes", "x"), "notes", "unknown key"),
    ("name type", _set("name", 3), "name", "must be a string"),
    ("persistent missing", _set("persistent_bytes", ...), "persistent_bytes", "missing"),
    ("persistent negative", _set("persistent_bytes", -1), "persistent_bytes", ">= 0"),
    ("persistent float", _set("persistent_bytes", 1.5), "persistent_bytes", "whole number"),
    ("persistent bool", _set("persistent_bytes", False), "persistent_bytes", "whole number"),
    ("persistent huge", _set("persistent_bytes", 2**63), "persistent_bytes", "<="),
    ("segments type", _set("segments", {}), "segments", "must be a list"),
    ("segments empty", _set("segments", []), "segments", "at least one segment"),
    ("segment type", _set("segments.1", 7), "segments[1]", "must be an object"),
    ("segment unknown key", _set("segments.1.cost", 1), "segments[1].cost", "unknown key"),
    ("segment name empty", _set("segments.1.name", ""), "segments[1].name", "non-empty"),
    ("segment name dup", _set("segments.1.name", "a"), "segments[1].name", "duplicate"),
    ("options missing", _set("segments.1.options", ...), "segments[1].options", "missing"),
    ("options empty", _set("segments.1.options", {}), "segments[1].options", "at least one"),
    ("option unknown", _set("segments.1.options.readset", {}), "readset", "unknown key"),
    ("option type", _set(OPT, [1, 2]), "segments[0].options.eager", "must be an object"),
    ("cost missing", _set(OPT + ".time", ...), "segments[0].options.eager.time", "missing"),
    ("cost unknown", _set(OPT + ".bytes", 1), "segments[0].options.eager.bytes", "unknown"),
    ("retained negative", _set(OPT + ".retained", -5), "eager.retained", ">= 0"),
    ("retained string", _set(OPT + ".retained", "10"), "eager.retained", "whole number"),
    ("temporary float", _set(OPT + ".temporary", 0.5), "eager.temporary", "whole number"),
    ("time string", _set(OPT + ".time", "1"), "eager.time", "must be a number"),
    ("time negative", _set(OPT + ".time", -1), "eager.time", ">= 0"),
    ("time bool", _set(OPT + ".time", True), "eager.time", "must be a number"),
    (
        "state over total",
        _set("segments.0.options.whole.state_retained", 5),
        "whole.state_retained",
        "<= retained",
    ),
    (
        "state time over",
        _set("segments.0.options.whole.state_time", 3.5),
        "whole.state_time",
        "<= time",
    ),
    (
        "state temporary over",
        _set("segments.0.options.whole.state_temporary", 4),
        "whole.state_temporary",
        "<= temporary",
    ),
    (
        "totals overflow",
        lambda d: [
            _set(f"segments.{i}.options.{k}.retained", 2**62)(d)
            for i, k in ((0, "eager"), (1, "region"))
        ],
        "segments",
        "2^63",
    ),
]


@pytest.mark.parametrize(("mutate", "field", "reason"), [b[1:] for b in BAD_CARDS],
                         ids=[b[0] for b in BAD_CARDS])  # fmt: skip
def test_malformed_cards_name_the_field_and_reason(mutate, field: str, reason: str) -> None:
    doc = copy.deepcopy(_card())
    mutate(doc)
    with pytest.raises(CardError) as err:
        parse_card(doc)
    assert field in err.value.field, str(err.value)
    assert reason in err.value.reason, str(err.value)
    assert str(err.value) == f"{err.value.field}: {err.value.reason}"


@pytest.mark.parametrize("value", [[], "card", 3, None])
def test_non_object_cards(value) -> None:
    with pytest.raises(CardError, match="must be an object"):
        parse_card(value)


@pytest.mark.parametrize(
    ("text", "reason"),
    [("{", "not valid JSON"), ('{"a": NaN}', "NaN"), ('{"a": -Infinity}', "-Infinity")],
)
def test_bad_json_text(text: str, reason: str) -> None:
    with pytest.raises(CardError, match=reason) as err:
        loads_card(text)
    assert err.value.field == "json"


def test_missing_file(tmp_path) -> None:
    with pytest.raises(CardError) as err:
        load_card(tmp_path / "absent.json")
    assert err.value.field == "file"


def test_valid_card_round_trips(tmp_path) -> None:
    card = parse_card(_card())
    assert card.segments[0].option("region") is None
    assert card.segments[0].option("whole").agnostic().retained == 2
    again = parse_card(json.loads(json.dumps(card.to_json())))
    assert again == card
    path = tmp_path / "c.json"
    path.write_text(json.dumps(_card()))
    assert load_card(path) == card


def test_default_segment_names_and_int_times() -> None:
    doc = _card()
    del doc["segments"][1]["name"]
    card = parse_card(doc)
    assert card.segments[1].name == "s1"
    assert isinstance(card.segments[1].option("region").time, float)


def test_integral_floats_are_bytes() -> None:
    doc = _card()
    doc["persistent_bytes"] = 100.0
    doc["segments"][1]["options"]["region"]["retained"] = 1e3
    card = parse_card(doc)
    assert card.persistent_bytes == 100 and isinstance(card.persistent_bytes, int)
    assert card.segments[1].option("region").retained == 1000


def test_totals_at_the_limit_are_accepted() -> None:
    doc = _card()
    doc["persistent_bytes"] = MAX_TOTAL_BYTES - 10 - 1 - 3 - 4
    parse_card(doc)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("44GiB", 44 * 2**30),
        ("44 GiB", 44 * 2**30),
        ("512MiB", 512 * 2**20),
        ("1.5GB", 1_500_000_000),
        ("1.5gib", 3 * 2**29),
        ("100", 100),
        ("100B", 100),
        ("2kB", 2000),
        ("1TiB", 2**40),
        ("0", 0),
        (".5KiB", 512),
        (7, 7),
    ],
)
def test_budgets(text, value: int) -> None:
    assert parse_budget(text) == value


@pytest.mark.parametrize("text", ["", "GiB", "-1", "1.1KiB", "4 GiBs", "1e9", "12 34", True, -3])
def test_bad_budgets(text) -> None:
    with pytest.raises(CardError) as err:
        parse_budget(text)
    assert err.value.field == "budget"
