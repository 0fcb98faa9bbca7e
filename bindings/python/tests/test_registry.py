"""The calibrator classes come from the Rust registry of kinds: the same JSON
as `bertflow kinds --json`, the same defaults, the same ranges."""

import ast
import inspect
import json
import pickle
from pathlib import Path

import numpy as np
import pytest
from sklearn.base import clone

import bertflow
from bertflow import _calibrators
from conftest import correlated

STUB = Path(bertflow.__file__).with_name("__init__.pyi")
CLASS_OF = {c._kind: c for c in _calibrators._CLASSES.values()}


def test_kinds_equals_the_command(run_cli):
    out = json.loads(run_cli("kinds", "--json").stdout)
    assert bertflow.kinds() == out
    assert [k["name"] for k in out] == [
        "none", "sn", "whiten", "natsv", "sn+natsv", "pca", "softwhiten", "auto", "flow"
    ]
    text = run_cli("kinds").stdout
    for k in out:
        assert k["synopsis"] in text
        for p in k["params"]:
            assert p["range"] in text


def _registry_defaults(kind):
    return {
        p["name"]: (p["example"] if p["required"] else p["default"]) for p in kind["params"]
    }


@pytest.mark.parametrize("kind", bertflow.kinds(), ids=lambda k: k["name"])
def test_class_defaults_are_the_registry(kind):
    cls = CLASS_OF[kind["name"]]
    sig = inspect.signature(cls.__init__)
    params = [p for p in sig.parameters.values() if p.name != "self"]
    assert [p.name for p in params] == [p["name"] for p in kind["params"]]
    want = _registry_defaults(kind)
    assert {p.name: p.default for p in params} == want
    c = cls()
    assert c.get_params() == want
    # The defaults make a valid spec: the canonical one of the kind's defaults.
    assert bertflow.calibrator(c.spec).get_params() == want
    again = clone(c)
    assert type(again) is cls and again.get_params() == want
    assert pickle.loads(pickle.dumps(c)).get_params() == want
    # Positional arguments follow the registry's order.
    if params:
        first = kind["params"][0]
        v = first["example"] if first["required"] else first["default"]
        assert cls(v).get_params()[first["name"]] == v
        with pytest.raises(TypeError):
            cls(*([v] * (len(params) + 1)))
        with pytest.raises(TypeError):
            cls(nonsense=1)


def _stub_signatures():
    tree = ast.parse(STUB.read_text())
    out = {}
    calibrators = {c.__name__ for c in CLASS_OF.values()}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name in calibrators:
            for f in node.body:
                if isinstance(f, ast.FunctionDef) and f.name == "__init__":
                    args = f.args.args[1:]
                    defaults = [ast.literal_eval(d) for d in f.args.defaults]
                    out[node.name] = dict(zip([a.arg for a in args], defaults))
                    assert len(defaults) == len(args), node.name
    return out


def test_type_stubs_match_the_registry():
    stubs = _stub_signatures()
    for kind in bertflow.kinds():
        cls = CLASS_OF[kind["name"]]
        assert stubs[cls.__name__] == _registry_defaults(kind), cls.__name__
        assert list(stubs[cls.__name__]) == [p["name"] for p in kind["params"]]


@pytest.mark.parametrize(
    "cls, kwargs, words",
    [
        (bertflow.Flow, {"levels": 17}, "levels must be an integer in 1..=16, got 17"),
        (bertflow.Flow, {"batch": 1}, "batch must be >= 2, got 1"),
        (bertflow.Flow, {"lr": 0.0}, "lr must be a finite number > 0"),
        (bertflow.Flow, {"coupling": "spline"}, "valid values: additive, affine"),
        (bertflow.SoftWhitening, {"alpha": 1.5}, "alpha must be a number in [0, 1], got 1.5"),
        (bertflow.SoftWhitening, {"blend": 1.0}, "blend must be a number in [0, 1), got 1"),
        (bertflow.Whitening, {"k": 0}, "k must be >= 1, got 0"),
        (bertflow.Natsv, {"k": 0}, "k must be >= 1, got 0"),
    ],
)
def test_out_of_range_values_name_the_range(rng, cls, kwargs, words):
    x = correlated(rng, 40, 6)
    with pytest.raises(ValueError) as e:
        cls(**kwargs).fit(x)
    assert words in str(e.value)
    with pytest.raises(ValueError):
        cls(**kwargs).spec


def test_types_are_checked_before_rust(rng):
    for cls, kwargs, name in [
        (bertflow.Flow, {"levels": 2.0}, "levels must be an int"),
        (bertflow.Flow, {"lr": "fast"}, "lr must be a number"),
        (bertflow.Flow, {"coupling": 1}, "coupling must be a str"),
        (bertflow.SoftWhitening, {"drop": True}, "drop must be an int"),
    ]:
        with pytest.raises(TypeError, match=name):
            cls(**kwargs).spec
    # numpy scalars are numbers.
    f = bertflow.Flow(levels=np.int64(2), lr=np.float32(0.5))
    assert f.spec.startswith("flow:levels=2,") and ",lr=5e-1," in f.spec


def test_docs_come_from_the_registry():
    for kind in bertflow.kinds():
        doc = CLASS_OF[kind["name"]].__doc__
        for p in kind["params"]:
            assert p["doc"] in doc and p["range"] in doc
