"""Loading, validation (one malformed program per rule), canonical JSON and sha256."""

import copy
import dataclasses
import json

import numpy as np
import pytest

from replayverify.programs import (
    ProgramError,
    canonical_json,
    generate,
    load_program,
    program_sha256,
    program_to_dict,
    save_program,
)
from replayverify.programs.model import Init, Loss

BASE = {
    "format": "replayverify.program", "version": 1, "name": "base",
    "buffers": [{"name": "s", "nbytes": 64}, {"name": "i", "nbytes": 16}],
    "views": [
        {"name": "x", "buffer": "s", "dtype": "float64", "offset": 0, "shape": [4],
         "strides": [8]},
        {"name": "y", "buffer": "s", "dtype": "float64", "offset": 32, "shape": [4],
         "strides": [8]},
        {"name": "ix", "buffer": "i", "dtype": "int32", "offset": 0, "shape": [4],
         "strides": [4]},
    ],
    "init": [{"view": "x", "values": [1.0, 2.0, 3.0, 4.0]}],
    "rng": {"key": [1, 2], "counter": [0, 0, 0, 0]},
    "ops": [{"op": "tanh", "dst": "y", "x": "x", "a": 1.0},
            {"op": "noise", "dst": "x", "x": "y", "sigma": 0.1}],
    "segments": [1, 1],
    "inputs": ["x"],
    "loss": {"view": "y", "weights": [1, 1, 1, 1]},
}


def mutate(path, value):
    doc = copy.deepcopy(BASE)
    target = doc
    for key in path[:-1]:
        target = target[key]
    if value is DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return doc


DELETE = object()
V2D = {"name": "g", "buffer": "s", "dtype": "float64", "offset": 0, "shape": [2, 2],
       "strides": [8, 8]}

MALFORMED = [
    # (id, document, field named in the message, words in the reason)
    ("unknown top key", mutate(["extra"], 1), "program.extra", "unknown key"),
    ("missing loss", mutate(["loss"], DELETE), "program.loss", "missing"),
    ("wrong format", mutate(["format"], "other"), "format", "must be"),
    ("wrong version", mutate(["version"], 2), "version", "must be 1"),
    ("no buffers", mutate(["buffers"], []), "buffers", "at least one"),
    ("duplicate buffer", mutate(["buffers", 1, "name"], "s"), "buffers[1].name", "duplicate"),
    ("zero-byte buffer", mutate(["buffers", 1, "nbytes"], 0), "buffers[1].nbytes", ">= 1"),
    ("unknown buffer key", mutate(["buffers", 0, "dtype"], "x"), "buffers[0].dtype", "unknown"),
    ("unknown view buffer", mutate(["views", 0, "buffer"], "nope"), "views[0].buffer",
     "unknown buffer"),
    ("bad dtype", mutate(["views", 0, "dtype"], "float16"), "views[0].dtype", "must be one of"),
    ("misaligned offset", mutate(["views", 1, "offset"], 4), "views[1].offset", "multiple"),
    ("misaligned stride", mutate(["views", 0, "strides"], [12]), "views[0].strides[0]",
     "multiple"),
    ("zero stride", mutate(["views", 0, "strides"], [0]), "views[0].strides[0]", "positive"),
    ("negative stride", mutate(["views", 0, "strides"], [-8]), "views[0].strides[0]",
     "positive"),
    ("3-D view", mutate(["views", 0, "shape"], [1, 1, 4]), "views[0].shape", "1-D or 2-D"),
    ("strides count", mutate(["views", 0, "strides"], [8, 8]), "views[0].strides", "one stride"),
    ("zero extent", mutate(["views", 0, "shape"], [0]), "views[0].shape[0]", ">= 1"),
    ("out of bounds", mutate(["views", 1, "offset"], 40), "views[1]", "reach byte"),
    ("self-overlapping 1-D", mutate(["views", 0, "strides"], [0]), "views[0].strides[0]",
     "positive"),
    ("self-overlapping 2-D", mutate(["views", 2], V2D), "views[2].strides", "overlap"),
    ("duplicate view", mutate(["views", 1, "name"], "x"), "views[1].name", "duplicate"),
    ("unknown op", mutate(["ops", 0, "op"], "exp"), "ops[0].op", "unknown op"),
    ("unknown op key", mutate(["ops", 0, "b"], 1.0), "ops[0].b", "unknown key"),
    ("unknown op view", mutate(["ops", 0, "x"], "z"), "ops[0].x", "unknown view"),
    ("missing required coef", mutate(["ops", 1, "sigma"], DELETE), "ops[1].sigma", "missing"),
    ("float op on int view", mutate(["ops", 0, "dst"], "ix"), "ops[0].x", "differs"),
    ("int op on float view", mutate(["ops", 0], {"op": "iadd", "dst": "x", "x": "x", "k": 1}),
     "ops[0].dst", "integer views"),
    ("shape mismatch", mutate(["views", 1, "shape"], [3]), "ops[0].x", "shape"),
    ("coefficient NaN via text", None, "json", "NaN"),
    ("integer coefficient out of range",
     mutate(["ops", 0], {"op": "iadd", "dst": "ix", "x": "ix", "k": 2**31}), "ops[0].k", "<="),
    ("dropout keep 0", mutate(["ops", 1], {"op": "dropout", "dst": "x", "x": "y", "keep": 0}),
     "ops[1].keep", "(0, 1]"),
    ("gather with float index",
     mutate(["ops", 0], {"op": "gather", "dst": "y", "x": "x", "index": "y"}),
     "ops[0].index", "integer"),
    ("bad segment sum", mutate(["segments"], [1, 2]), "segments", "sum to 3"),
    ("empty segments", mutate(["segments"], []), "segments", "at least one"),
    ("negative segment", mutate(["segments"], [-1, 3]), "segments[0]", ">= 0"),
    ("overlapping inputs", mutate(["inputs"], ["x", "x"]), "inputs[1]", "duplicate"),
    ("integer input", mutate(["inputs"], ["ix"]), "inputs[0]", "must be float"),
    ("weight count", mutate(["loss", "weights"], [1, 2]), "loss.weights", "has 2 weights"),
    ("init count", mutate(["init", 0, "values"], [1.0]), "init[0].values", "has 1 values"),
    ("init out of int range", mutate(["init"], [{"view": "ix", "values": [2**31, 0, 0, 0]}]),
     "init[0].values[0]", "<="),
    ("init float in int view", mutate(["init"], [{"view": "ix", "values": [0.5, 0, 0, 0]}]),
     "init[0].values[0]", "integer"),
    ("bool is not a number", mutate(["loss", "weights"], [True, 1, 1, 1]), "loss.weights[0]",
     "number"),
    ("rng key length", mutate(["rng", "key"], [1]), "rng.key", "2 u32"),
    ("rng word range", mutate(["rng", "counter"], [0, 0, 0, 2**32]), "rng.counter[3]", "<="),
    ("size limit", mutate(["buffers", 0, "nbytes"], 2**40), "buffers", "exceeds the limit"),
]


def test_overlapping_inputs_rejected():
    doc = copy.deepcopy(BASE)
    doc["views"].append({"name": "xs", "buffer": "s", "dtype": "float64", "offset": 8,
                         "shape": [2], "strides": [8]})
    doc["inputs"] = ["x", "xs"]
    with pytest.raises(ProgramError, match=r"inputs\[1\]: input 'xs' overlaps input 'x'"):
        load_program(doc)


@pytest.mark.parametrize("name,doc,field,words", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_programs_are_refused_naming_field_and_reason(name, doc, field, words):
    if doc is None:
        text = json.dumps(BASE).replace('"sigma": 0.1', '"sigma": NaN')
        with pytest.raises(ProgramError) as err:
            load_program(text)
    else:
        with pytest.raises(ProgramError) as err:
            load_program(doc)
    assert err.value.field == field, str(err.value)
    assert words in err.value.reason, str(err.value)


def test_infinity_literal_and_overflow_are_refused():
    for literal in ("Infinity", "-Infinity", "1e999"):
        text = json.dumps(BASE).replace('"sigma": 0.1', f'"sigma": {literal}')
        with pytest.raises(ProgramError):
            load_program(text)


def test_size_limit_is_checked_before_allocating():
    doc = mutate(["buffers", 0, "nbytes"], 2**62)  # would be an impossible allocation
    with pytest.raises(ProgramError, match="exceeds the limit"):
        load_program(doc)
    assert load_program(BASE, max_bytes=80).nbytes == 80
    with pytest.raises(ProgramError):
        load_program(BASE, max_bytes=79)


def test_defaults_are_filled_in_canonically():
    doc = copy.deepcopy(BASE)
    for key in ("name", "init", "rng", "segments", "inputs"):
        del doc[key]
    doc["ops"] = [{"op": "axpby", "dst": "y", "x": "x", "y": "x"}]
    p = load_program(doc)
    d = program_to_dict(p)
    assert d["rng"] == {"key": [0, 0], "counter": [0, 0, 0, 0]}
    assert d["segments"] == [1] and d["inputs"] == [] and d["name"] == ""
    assert d["ops"][0] == {"op": "axpby", "dst": "y", "x": "x", "y": "x", "a": 1.0, "b": 1.0,
                           "c": 0.0}
    explicit = copy.deepcopy(doc)
    explicit["ops"] = d["ops"]
    explicit.update(name="", init=[], segments=[1], inputs=[],
                    rng={"key": [0, 0], "counter": [0, 0, 0, 0]})
    assert program_sha256(load_program(explicit)) == program_sha256(p)


def test_canonical_json_sorted_compact():
    text = canonical_json(load_program(BASE))
    assert ": " not in text and ", " not in text
    assert text.startswith('{"buffers":')


def test_load_from_path_text_and_dict_agree(tmp_path):
    p = load_program(BASE)
    path = tmp_path / "p.json"
    save_program(p, path)
    assert load_program(path) == p
    assert load_program(str(path)) == p
    assert load_program(json.dumps(BASE)) == p
    assert load_program(p.to_json()) == p


@pytest.mark.parametrize("family", ["default", "derivative", "bytes", "alias", "complex"])
def test_generated_programs_round_trip(family):
    for i in range(20):
        p = generate(3, i, family)
        again = load_program(json.loads(p.to_json()))
        assert again == p and again.sha256 == p.sha256


def test_sha256_names_the_canonical_document():
    import hashlib

    p = load_program(BASE)
    assert p.sha256 == hashlib.sha256(canonical_json(p).encode()).hexdigest()


def _definition(p):
    """canonical_json's definition: json.dumps of the canonical document (SPEC §6)."""
    return json.dumps(program_to_dict(p), sort_keys=True, separators=(",", ":"),
                      allow_nan=False)


def _outcome(fn, p):
    try:
        return fn(p)
    except Exception as exc:
        return type(exc).__name__


@pytest.mark.parametrize("family", ["default", "derivative", "bytes", "alias", "complex",
                                    "mixed", "hazard"])
def test_canonical_json_is_the_canonical_document_dumped(family):
    for i in range(20):
        p = generate(5, i, family)
        assert canonical_json(p) == _definition(p)


def _renamed(p, old, new):
    def name(n):
        return new if n == old else n

    return dataclasses.replace(
        p, views=tuple(dataclasses.replace(v, name=name(v.name)) for v in p.views),
        ops=tuple(dataclasses.replace(o, **{f: name(getattr(o, f)) for f in o.spec.view_fields})
                  for o in p.ops),
        init=tuple(dataclasses.replace(e, view=name(e.view)) for e in p.init),
        loss=dataclasses.replace(p.loss, view=name(p.loss.view)),
        inputs=tuple(map(name, p.inputs)))


def _with_op(p, k, **fields):
    ops = list(p.ops)
    ops[k] = dataclasses.replace(ops[k], **fields)
    return dataclasses.replace(p, ops=tuple(ops))


def test_canonical_json_matches_its_definition_on_odd_fields():
    """Escaped and non-ASCII names, names holding "nan" or "%", numbers of other types
    (converted as program_to_dict converts them), and fields json.dumps refuses or writes
    otherwise (non-finite numbers, numpy integers, bools, None): the same text, or the
    same exception, as json.dumps of the canonical document."""
    p = load_program(BASE)
    k = 0  # the tanh op
    odd = [_renamed(p, "x", name) for name in ['é"\\\n%s%r', "info", "nan", "x\u2028", "😀"]]
    odd += [dataclasses.replace(p, name=name) for name in ["%%", "inf", None, 3]]
    odd += [_with_op(p, k, a=a) for a in [2, True, np.float32(0.1), -0.0, 1e300, "1.5",
                                          float("inf"), float("nan"), None]]
    odd += [_with_op(p, k, x=None),
            dataclasses.replace(p, segments=(True, 1)),
            dataclasses.replace(p, segments=(np.int64(1), 1)),
            dataclasses.replace(p, loss=Loss("y", (np.float32(1), 1, 1, float("inf")))),
            dataclasses.replace(p, loss=Loss("y", (np.float32(1), 1, 1, 2))),
            dataclasses.replace(p, init=(Init("nosuch", (1.0,)),)),
            dataclasses.replace(p, views=(dataclasses.replace(p.views[0], shape=[4]),
                                          *p.views[1:]))]
    odd += [dataclasses.replace(p, views=(dataclasses.replace(p.views[0], shape=shape,
                                                              strides=strides), *p.views[1:]))
            for shape, strides in [((1, 4), (32, 8)), ((2, 1, 2), (16, 8, 8)), ((4,), (8, 8)),
                                   ((2, 2), (16,)), ((), ())]]
    odd += [dataclasses.replace(p, views=(dataclasses.replace(p.views[0], **field),
                                          *p.views[1:]))
            for field in [{"offset": True}, {"offset": 0.0}, {"offset": np.int64(0)},
                          {"offset": "0"}, {"strides": (True,)}, {"shape": (4.0,)},
                          {"buffer": None}, {"dtype": 4}, {"strides": None}]]
    for q in odd:
        assert _outcome(canonical_json, q) == _outcome(_definition, q)
