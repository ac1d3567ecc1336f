"""The architecture's done-when checks (docs/architecture.md), read from the source with ``ast``.

- the import graph of ``roofprof/`` has no circles (function-level imports count; an import
  under ``if TYPE_CHECKING:`` does not);
- no module is longer than :data:`MAX_LINES` lines;
- no ``.kind == "cpu"``/``"cuda"`` branch outside ``roofprof/devices/`` (capabilities are
  declared by the device);
- no op-name dispatch (``op.name == "q_proj"``, ``name in ("lm_head", ...)``) outside
  ``roofprof/models/`` (the family tags each op with ``fn``/``group``/``short``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "roofprof"
MAX_LINES = 650
#: Modules allowed over MAX_LINES, with the reason (ideally none).
LONG_MODULES: dict[str, str] = {}
#: Modules without ``__all__`` yet, with the reason (ideally none).
NO_ALL: dict[str, str] = {}
DEVICE_KINDS = {"cpu", "cuda"}
#: Op names of the model families (what a name-based dispatch would compare against).
OP_NAMES = {
    "embedding",
    "attn_norm",
    "mlp_norm",
    "final_norm",
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
    "lm_head",
    "rope",
    "attention",
    "attn_scores",
    "attn_softmax",
    "attn_pv",
    "attn_residual",
    "mlp_residual",
    "silu_mul",
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """The roofprof modules ``module`` imports (at any depth, except under TYPE_CHECKING)."""
    found: set[str] = set()

    def target(name: str) -> str | None:
        # the longest known module prefix: `from roofprof.x import y` is an arrow to roofprof.x
        parts = name.split(".")
        while parts:
            cand = ".".join(parts)
            if cand in MODULES:
                return cand
            parts.pop()
        return None

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("roofprof"):
                    found.add(target(alias.name) or alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            if name.startswith("roofprof"):
                t = target(name)
                if t is not None:
                    found.add(t)
                    if node.module is None or t == name:
                        # `from roofprof import models` imports the submodule roofprof.models
                        for alias in node.names:
                            sub = target(f"{name}.{alias.name}")
                            if sub is not None and sub != t:
                                found.add(sub)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    found.discard(module)
    return found


def _graph() -> dict[str, set[str]]:
    graph = {}
    for mod, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        graph[mod] = _imports(tree, mod, path.name == "__init__.py")
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            strong(v)
    return out


def _edges_within(graph: dict[str, set[str]], comp: list[str]) -> list[str]:
    return [f"{a} -> {b}" for a in comp for b in sorted(graph[a]) if b in comp]


def test_the_import_graph_has_no_circles():
    graph = _graph()
    assert len(graph) > 40 and "roofprof.profiling.engine" in graph["roofprof.profiling.profiler"]
    cycles = _cycles(graph)
    assert not cycles, "import circles:\n" + "\n".join(
        "; ".join(_edges_within(graph, c)) for c in cycles
    )


def test_the_cycle_finder_sees_a_circle_and_the_type_checking_exemption():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from roofprof.workload import Op\n"
        "def f():\n    from roofprof.units import si\n"
    )
    assert _imports(tree, "roofprof.x", False) == {"roofprof.units"}


def test_no_module_is_too_long():
    long = {
        str(p.relative_to(PACKAGE.parent)): n
        for p in MODULES.values()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    unexplained = {k: v for k, v in long.items() if k not in LONG_MODULES}
    assert not unexplained, f"modules over {MAX_LINES} lines (split them): {unexplained}"


def _str_constants(node: ast.expr) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return {s for e in node.elts for s in _str_constants(e)}
    return set()


def _comparisons(path: Path):
    """``(line, left, constants)`` of every ``x == "..."``/``x != "..."``/``x in (...)``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        for op, left, right in zip(node.ops, operands, operands[1:], strict=False):
            if not isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)):
                continue
            for a, b in ((left, right), (right, left)):
                consts = _str_constants(b)
                if consts:
                    yield node.lineno, a, consts


def _attr(node: ast.expr) -> str | None:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def test_device_kind_branches_live_in_devices():
    found = []
    for mod, path in MODULES.items():
        if mod.startswith("roofprof.devices"):
            continue
        for line, left, consts in _comparisons(path):
            if isinstance(left, ast.Attribute) and left.attr == "kind" and consts & DEVICE_KINDS:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{line}")
    assert not found, "branches on a device kind outside roofprof/devices/: " + ", ".join(found)


def test_op_name_dispatch_lives_in_models():
    found = []
    for mod, path in MODULES.items():
        if mod.startswith("roofprof.models"):
            continue
        for line, left, consts in _comparisons(path):
            if _attr(left) in ("name", "op_name") or (
                isinstance(left, ast.Name) and left.id == "name"
            ):
                if consts & OP_NAMES:
                    found.append(
                        f"{path.relative_to(PACKAGE.parent)}:{line} {sorted(consts & OP_NAMES)}"
                    )
    assert not found, "op-name dispatch outside roofprof/models/: " + ", ".join(found)


@pytest.mark.parametrize(
    "mod", sorted(m for m in MODULES if not m.endswith("__main__") and m not in NO_ALL)
)
def test_every_module_declares_all(mod):
    tree = ast.parse(MODULES[mod].read_text(encoding="utf-8"))
    names = {
        t.id
        for node in tree.body
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(t, ast.Name)
    }
    assert "__all__" in names, f"{mod} has no __all__"


def test_no_private_names_are_imported_across_modules():
    found = []
    for mod, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("roofprof"):
                for alias in node.names:
                    private = alias.name.startswith("_") and not alias.name.startswith("__")
                    if (
                        private and f"{node.module}.{alias.name}" not in MODULES
                    ):  # a private module is fine
                        found.append(f"{mod}: from {node.module} import {alias.name}")
    assert not found, "private names imported across modules: " + "; ".join(found)


def _private_module_attributes(tree: ast.AST) -> list[tuple[int, str]]:
    """``alias._name`` where ``alias`` is a roofprof module bound by an import (and ``_name``
    is not itself a private module): reaching into another module's private names."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in MODULES:
                    aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else "roofprof"
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("roofprof"):
            for a in node.names:
                if f"{node.module}.{a.name}" in MODULES:
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    return [
        (node.lineno, f"{node.value.id}.{node.attr}")
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id in aliases
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and f"{aliases[node.value.id]}.{node.attr}" not in MODULES
    ]


def test_no_private_names_are_reached_through_a_module():
    found = [
        f"{mod}:{line}: {name}"
        for mod, path in MODULES.items()
        for line, name in _private_module_attributes(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert not found, "private names reached across modules (make the seam public): " + "; ".join(
        found
    )


def test_the_private_attribute_check_sees_a_reach_and_allows_private_modules():
    tree = ast.parse(
        "import roofprof.models.llama as llama\n"
        "from roofprof.devices import _nvml\n"
        "class B(llama._Builder): pass\n"
        "x = _nvml.query\n"
    )
    assert _private_module_attributes(tree) == [(3, "llama._Builder")]


def test_the_module_map_names_every_module_and_only_modules():
    import re

    text = (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text[text.index("## Module map") : text.index("## Import floors")]
    named = {
        name
        for line in section.splitlines()
        if line.startswith("| `")
        for name in re.findall(r"`([^`]+)`", line.split("|")[1])
        if name != "cli.<verb>"
    }
    modules = {m.removeprefix("roofprof.") if m != "roofprof" else "__init__" for m in MODULES}
    assert not modules - named, f"modules missing from docs/architecture.md: {modules - named}"
    assert not named - modules, f"the module map names what is not a module: {named - modules}"


def _floors(graph: dict[str, set[str]]) -> dict[str, int]:
    floors: dict[str, int] = {}

    def floor(mod: str) -> int:
        if mod not in floors:
            floors[mod] = 1 + max((floor(dep) for dep in graph[mod] if dep in graph), default=-1)
        return floors[mod]

    for mod in graph:
        floor(mod)
    return floors


def _short(mod: str) -> str:
    return "__init__" if mod == "roofprof" else mod.removeprefix("roofprof.")


def floors_table() -> str:
    """The import-floors table of docs/architecture.md, computed from the import graph."""
    by_floor: dict[int, list[str]] = {}
    for mod, level in _floors(_graph()).items():
        by_floor.setdefault(level, []).append(_short(mod))
    rows = ["| floor | modules |", "| --- | --- |"]
    for level in sorted(by_floor):
        names = ", ".join(f"`{name}`" for name in sorted(by_floor[level]))
        rows.append(f"| {level} | {names} |")
    return "\n".join(rows)


def test_the_import_floors_table_is_the_import_graph():
    text = (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text[text.index("## Import floors") :]
    table = "\n".join(line for line in section.splitlines() if line.startswith("| "))
    assert table == floors_table(), (
        "docs/architecture.md's import floors are stale: "
        "paste the output of `python tests/test_architecture.py`"
    )


if __name__ == "__main__":
    print(floors_table())
