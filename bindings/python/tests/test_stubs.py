"""The type stubs (``bertflow/__init__.pyi``) say what the package does:
every public name of ``bertflow`` has a stub, and every stubbed function,
class and method takes the parameters, in order, with the defaults that the
runtime object takes. The defaults live once, in core and the calibrator
registry; this test is what keeps the hand-written stubs from drifting."""

import ast
import inspect
import pathlib
import types

import pytest

import bertflow

STUB = pathlib.Path(bertflow.__file__).with_name("__init__.pyi")
NO_DEFAULT = "<none>"


def _default(node):
    if node is None:
        return NO_DEFAULT
    try:
        return ast.literal_eval(node)
    except ValueError:
        return ast.unparse(node)


def _stub_params(fn):
    a = fn.args
    pos = a.posonlyargs + a.args
    defaults = [None] * (len(pos) - len(a.defaults)) + list(a.defaults)
    out = [(p.arg, _default(d)) for p, d in zip(pos, defaults)]
    if a.vararg:
        out.append(("*" + a.vararg.arg, NO_DEFAULT))
    out += [(p.arg, _default(d)) for p, d in zip(a.kwonlyargs, a.kw_defaults)]
    if a.kwarg:
        out.append(("**" + a.kwarg.arg, NO_DEFAULT))
    return [p for p in out if p[0] not in ("self", "cls")]


def _runtime_params(obj):
    out = []
    for p in inspect.signature(obj).parameters.values():
        if p.name in ("self", "cls"):
            continue
        name = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "") + p.name
        default = NO_DEFAULT if p.default is p.empty else p.default
        out.append((name, default))
    return out


def _stubs():
    tree = ast.parse(STUB.read_text())
    names, calls = set(), {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            names.add(node.name)
            calls[node.name] = node
        elif isinstance(node, ast.ClassDef):
            names.add(node.name)
            for sub in node.body:
                if isinstance(sub, ast.FunctionDef):
                    decorators = {ast.unparse(d) for d in sub.decorator_list}
                    if "property" in decorators or any(d.endswith(".setter") for d in decorators):
                        continue
                    calls[f"{node.name}.{sub.name}"] = sub
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names, calls


NAMES, CALLS = _stubs()


def test_every_public_name_has_a_stub():
    public = {n for n in dir(bertflow) if not n.startswith("_")
              and not isinstance(getattr(bertflow, n), types.ModuleType)}
    missing = sorted(public - NAMES)
    assert not missing, f"public names without a stub in {STUB.name}: {missing}"
    extra = sorted(n for n in NAMES if not n.startswith("_") and not hasattr(bertflow, n))
    assert not extra, f"stubs of names bertflow does not have: {extra}"


@pytest.mark.parametrize("qualname", sorted(CALLS))
def test_stub_signature_is_the_runtime_one(qualname):
    obj = bertflow
    for part in qualname.split("."):
        obj = inspect.getattr_static(obj, part) if part != qualname.split(".")[0] else getattr(obj, part)
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    if qualname.endswith(".__init__") and obj is object.__init__:
        pytest.skip("inherited object.__init__")
    try:
        runtime = _runtime_params(obj)
    except (TypeError, ValueError):
        pytest.skip(f"{qualname}: no introspectable signature")
    stub = _stub_params(CALLS[qualname])
    # A native method whose default is a Rust constant (core's) shows `...`:
    # the stub must give a default there, and the value is core's to check.
    stub = [(n, Ellipsis if r[1] is Ellipsis and d != NO_DEFAULT else d)
            for (n, d), r in zip(stub, runtime)] if len(stub) == len(runtime) else stub
    assert stub == runtime, qualname
