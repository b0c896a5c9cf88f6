"""The library's shape: no import cycles, subpackages import only from layers above them, no
import of our own modules hidden inside a function, and the Layout of docs/layout.md matches the tree.

The graph is built from the source (``ast``), not by importing, so a cycle held together by
a late import is found as surely as one at the top of a file.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LIB = ROOT / "memsafe_lib"

LAYERS: tuple[tuple[str, ...], ...] = (
    ("config", "errors", "io", "maskdropout", "memory", "parallel", "precision", "progress", "threads"),
    ("data",),
    ("ledger",),
    ("variants",),
    ("encodings",),
    ("estimators",),
    ("evaluation",),
    ("reporting",),
    ("gate",),
    ("notebooks", "notebook_outputs", "lab"),
    ("verify", "retire"),
    ("cli",),
)
"""Top to bottom, the order data flows in; a module imports only from its own layer or above."""
PURE = ("measures",)
"""Pure maths (metrics, risk-coverage, inference, Proposition 1): imports nothing of ours
outside itself, and every layer may use it (estimators select on validation with the same
metrics that evaluation reports)."""


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(node: ast.ImportFrom, current: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = current.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def imports_of(path: Path, modules: set[str]) -> tuple[set[str], list[str]]:
    """(memsafe_lib modules imported anywhere in the file, those imported inside a function)."""
    current = module_name(path)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    inside: set[int] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            inside |= {id(n) for n in ast.walk(fn) if isinstance(n, ast.Import | ast.ImportFrom)}
    found: set[str] = set()
    late: list[str] = []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node, current, path.name == "__init__.py")
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        targets = [t for t in targets if t.split(".")[0] == "memsafe_lib" and t != current]
        found |= {t for t in targets if t in modules}
        if id(node) in inside and targets:
            late.append(f"{current}: {ast.unparse(node)}")
    return found, late


def import_graph() -> tuple[dict[str, set[str]], list[str]]:
    files = sorted(LIB.rglob("*.py"))
    modules = {module_name(p) for p in files}
    graph, late = {}, []
    for path in files:
        deps, inner = imports_of(path, modules)
        graph[module_name(path)] = deps
        late += inner
    return graph, late


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path of module names, or None (depth-first search with colours)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return [*stack[stack.index(dep):], dep]
            if dep not in state and (cycle := visit(dep)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def layer_of(module: str) -> int | None:
    return next((i for i, layer in enumerate(LAYERS) if top(module) in layer), None)


def test_cycle_finder_finds_a_planted_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_no_import_cycles() -> None:
    graph, _ = import_graph()
    assert len(graph) > 30  # the parser saw the library
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_no_late_imports_of_our_own_modules() -> None:
    _, late = import_graph()
    assert late == [], "imports of memsafe_lib inside functions (move them to the top):\n" + "\n".join(late)


def test_every_module_has_a_layer() -> None:
    graph, _ = import_graph()
    homeless = sorted(m for m in graph if m != "memsafe_lib" and layer_of(m) is None and top(m) not in PURE)
    assert homeless == [], f"add these to LAYERS or PURE (and to the Layout in docs/layout.md): {homeless}"


def test_imports_follow_the_data() -> None:
    graph, _ = import_graph()
    upward = []
    for module, deps in graph.items():
        for dep in deps:
            if dep == "memsafe_lib":
                continue
            if top(module) in PURE:
                if top(dep) not in PURE:
                    upward.append(f"{module} -> {dep} (measures must stay pure)")
            elif top(dep) not in PURE and (layer_of(dep) or 0) > (layer_of(module) or 0):
                upward.append(f"{module} -> {dep}")
    assert upward == [], "imports against the data flow:\n" + "\n".join(sorted(upward))


def layout_entries(block: str) -> set[str]:
    """Paths (relative to memsafe_lib/) listed under ``memsafe_lib/`` in a layout block:
    two-space indent = an entry of the package, four = a file in the folder above it."""
    entries: set[str] = set()
    inside, folder = False, ""
    for line in block.splitlines():
        indent = len(line) - len(line.lstrip())
        if indent == 0:
            inside = line.startswith("memsafe_lib/")
            continue
        name = re.match(r"\s*([a-z_]+(?:\.py|/))", line)
        if not inside or not name:
            continue
        if indent == 2:
            folder = name.group(1) if name.group(1).endswith("/") else ""
            entries.add(name.group(1))
        elif folder:
            entries.add(folder + name.group(1))
    return entries


def test_layout_parser() -> None:
    block = "memsafe_lib/\n  a.py   x\n  sub/   y\n    b.py  z\nother/   w\n  c.py\n"
    assert layout_entries(block) == {"a.py", "sub/", "sub/b.py"}


def test_documented_layout_matches_the_tree() -> None:
    text = (ROOT / "docs" / "layout.md").read_text(encoding="utf-8")
    block = re.search(r"<!-- layout -->\n```text\n(.*?)```", text, re.S)
    assert block, "docs/layout.md needs a Layout block: <!-- layout --> followed by a ```text block"
    listed = layout_entries(block.group(1))
    actual = {p.relative_to(LIB).as_posix() for p in LIB.rglob("*.py") if p.name != "__init__.py"}
    actual |= {p.name + "/" for p in LIB.iterdir() if p.is_dir() and p.name != "__pycache__"}
    actual -= {p for p in actual if p.endswith(".json")}
    assert listed == actual, (f"in the tree, not in docs/layout.md: {sorted(actual - listed)}; "
                              f"in docs/layout.md, not in the tree: {sorted(listed - actual)}")


@pytest.mark.parametrize("layer", [name for layer in LAYERS for name in layer] + list(PURE))
def test_layers_exist(layer: str) -> None:
    assert (LIB / layer).is_dir() or (LIB / f"{layer}.py").exists()


def test_the_gate_trains_through_product_code() -> None:
    """`memsafe train` and the notebooks build Stage A and Stage B through the same estimators-
    level code; the gate reaches into no experiment module."""
    graph, _ = import_graph()
    gate_modules = [m for m in graph if m == "memsafe_lib.gate" or m.startswith("memsafe_lib.gate.")]
    assert len(gate_modules) > 3  # the package's modules were seen
    reached = sorted(m for g in gate_modules for m in graph[g] if m.startswith("memsafe_lib.evaluation"))
    assert reached == []
