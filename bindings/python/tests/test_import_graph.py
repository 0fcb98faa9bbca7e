"""The package's modules import each other without a circle (issue 48): no
module imports, directly or through others, one that imports it back. Read
from the sources with ``ast`` (imports inside functions count too), so it needs
neither the extension module nor its dependencies."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "python" / "bertflow"


def _module_name(path):
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph():
    """Module name (``bertflow._calibrators``) to the package modules it imports."""
    files = sorted(PACKAGE.rglob("*.py"))
    names = {_module_name(f): f for f in files}
    graph = {}
    for name, f in names.items():
        is_pkg = f.name == "__init__.py"
        package = name if is_pkg else name.rpartition(".")[0]
        deps = set()
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                subs = [f"{mod}.{a.name}" for a in node.names]
                # ``from . import _bertflow`` names the extension module (or a
                # submodule), not the package's __init__.
                extension = [a.name for a in node.names if a.name == "_bertflow"]
                names_only = [s for s in subs if s not in names] != [] and not extension
                targets = ([mod] if names_only else []) + subs
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            for t in targets:
                if t in names and t != name:
                    deps.add(t)
        graph[name] = deps
    return graph


def find_circle(graph):
    done = set()

    def visit(node, path):
        if node in path:
            return path[path.index(node):] + [node]
        if node in done:
            return None
        for d in sorted(graph[node]):
            c = visit(d, path + [node])
            if c:
                return c
        done.add(node)
        return None

    for n in sorted(graph):
        c = visit(n, [])
        if c:
            return c
    return None


def test_package_modules_import_each_other_without_a_circle():
    g = import_graph()
    assert "bertflow._calibrators" in g and "bertflow._quantize" in g, sorted(g)
    assert "bertflow._base" in g["bertflow._quantize"]
    # The package's __init__ imports every module: a module importing a name
    # from the package root would be a circle through it, and is one here too.
    circle = find_circle(g)
    assert circle is None, "import circle: " + " -> ".join(circle)


def test_a_circle_is_found():
    assert find_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_circle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None
