"""The command and analysis layers import one way: `analysis/` never imports `cli` or `commands/`, and the
modules of `analysis/` import each other without a circle (imports inside functions included)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "budgetscope"


def _imports(path: Path) -> set[str]:
    """Every budgetscope module `path` imports, at top level or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("budgetscope"):
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("budgetscope"))
    return found


def _analysis_graph() -> dict[str, set[str]]:
    modules = {f"budgetscope.analysis.{p.stem}": p for p in (PACKAGE / "analysis").glob("*.py") if p.stem != "__init__"}
    return {name: _imports(p) & set(modules) for name, p in modules.items()}


def test_analysis_never_imports_the_command_line():
    for path in (PACKAGE / "analysis").glob("*.py"):
        bad = {m for m in _imports(path) if m == "budgetscope.cli" or m.startswith("budgetscope.commands")}
        assert not bad, f"{path.name} imports {sorted(bad)}: the commands call the analysis, never the reverse"


def find_circle(graph: dict[str, set[str]]) -> None:
    """Raise AssertionError naming the first circle of `graph` (module → the modules it imports)."""
    done, path = set(), []

    def visit(node: str) -> None:
        if node in path:
            raise AssertionError("import circle: " + " → ".join(path[path.index(node) :] + [node]))
        if node in done:
            return
        path.append(node)
        for dep in sorted(graph[node]):
            visit(dep)
        path.pop()
        done.add(node)

    for name in sorted(graph):
        visit(name)


def test_analysis_modules_import_each_other_without_a_circle():
    find_circle(_analysis_graph())


def test_the_circle_finder_finds_a_circle():
    with pytest.raises(AssertionError, match="a → b → a"):
        find_circle({"a": {"b"}, "b": {"a"}})


def _click_exception_classes() -> list[str]:
    """`path:Class` of every class in the package derived from click's ClickException."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and any(ast.unparse(b).endswith("ClickException") for b in node.bases):
                found.append(f"{path.relative_to(PACKAGE).as_posix()}:{node.name}")
    return found


def test_one_usage_error_for_every_command():
    """Bad input is one line and exit 2 through the one `commands.options.UsageError`, not a copy a command."""
    assert _click_exception_classes() == ["commands/options.py:UsageError"]
