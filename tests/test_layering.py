"""The import graph of `budgetscope`, read statically (every `import` in every module, function-level ones
included): the store imports nothing above it, the analysis nothing of the command line, and no two of the
package's rooms (its folders and its root modules: `opener`, `cli`, …), nor two of its modules, import each other
round a loop; and every import inside a function says why (docs/design.md, "Architecture")."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "budgetscope"

FORBIDDEN = {
    "archive": ("ingest", "derive", "sources", "opener"),  # the store stores; landing and deriving are above it
    "analysis": ("cli", "commands"),  # the command line is a face on the analysis, never under it
}
"""folder (or root module) → what it must not import (a subpackage or a root module, by its first name)."""
EXCEPTIONS: dict[tuple[str, str], str] = {}
"""(module, import) → why it may break a rule, for now."""


def imports(root: Path, package: str) -> dict[str, set[str]]:
    """module → the modules of `package` it imports, for every .py file under `root` (the package's folder)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).with_suffix("")
        parts = [package, *rel.parts]
        is_init = parts[-1] == "__init__"
        if is_init:
            parts = parts[:-1]
        name = ".".join(parts)
        here = parts if is_init else parts[:-1]  # the package a relative import starts from
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join([*here[: len(here) - node.level + 1], *([base] if base else [])])
                # `from budgetscope.archive import manifest` imports the module budgetscope.archive.manifest
                found |= {f"{base}.{a.name}" for a in node.names} | {base}
        graph[name] = {m for m in found if m == package or m.startswith(package + ".")} - {name}
    return graph


def room(module: str, package: str) -> str:
    """The first name under the package: a subpackage (`archive`) or a root module (`cli`, `opener`)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else package


def violations(graph: dict[str, set[str]], package: str, folders: set[str]) -> list[str]:
    """What breaks the rules: a forbidden import, or a cycle between the package's rooms: its `folders` and its
    root modules (a root module such as `opener` that imports a folder which imports it back is a circle, though
    no two modules close it: `opener` → `collector.tuning`, `collector.writer` → `opener`)."""
    found = []
    for mod, targets in graph.items():
        for t in targets:
            if t in graph or any(g.startswith(t + ".") for g in graph):
                if room(t, package) in FORBIDDEN.get(room(mod, package), ()) and (mod, t) not in EXCEPTIONS:
                    found.append(f"{mod} imports {t}")
    rooms = set(folders) | {room(m, package) for m in graph if m.count(".") == 1}
    edges: dict[str, set[str]] = {r: set() for r in rooms}
    for mod, targets in graph.items():
        a = room(mod, package)
        if a not in rooms:
            continue
        for t in targets:
            b = room(t, package)
            if b in rooms and b != a:
                edges[a].add(b)
    found += [f"cycle between rooms: {' → '.join(c)}" for c in _cycles(edges)]
    return found


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected set of more than one node (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                out.append(sorted(scc) + [sorted(scc)[0]])

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def folders_of(root: Path) -> set[str]:
    return {p.parent.name for p in root.glob("*/__init__.py")}


def test_budgetscope_keeps_its_layers():
    graph = imports(PACKAGE, "budgetscope")
    assert "budgetscope.archive.directory" in graph and "budgetscope.ingest.lander" in graph  # it read the package
    assert violations(graph, "budgetscope", folders_of(PACKAGE)) == []


def module_cycles(graph: dict[str, set[str]], package: str, rooms: tuple[str, ...] | None = None) -> list[list[str]]:
    """One circle through each knot of modules importing each other (imports inside functions count: a circle
    hidden in a function is still a circle); `rooms` narrows the search to those folders or root modules.
    `from pkg import x` counts as importing the package's `__init__` too, so a module importing its own
    package's `__init__` that imports it back is a circle."""
    keep = {m for m in graph if rooms is None or room(m, package) in rooms or m.split(".")[-1] in rooms}
    return _cycles({m: {t for t in graph[m] if t in keep} for m in keep})


def test_no_two_modules_of_the_package_import_each_other_round_a_loop():
    assert module_cycles(imports(PACKAGE, "budgetscope"), "budgetscope") == []


def unexplained_function_imports(root: Path) -> list[str]:
    """`path:line` of each import inside a function with no comment saying why (the measured cost of importing it
    at the top). The comment sits on the import's lines or the line above its block of imports. The command modules
    import the library inside their functions for one reason, measured once in `commands/__init__.py`'s docstring:
    those imports need no comment of their own."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        lines = path.read_text().splitlines()
        for fn in ast.walk(ast.parse("\n".join(lines), str(path))):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for body in _bodies(fn):
                for block in _import_blocks(body):
                    need = [n for n in block if not (rel.startswith("commands/") and _of_package(n, root.name))]
                    first, last = block[0].lineno, block[-1].end_lineno or block[-1].lineno
                    if need and not any("#" in lines[i - 1] for i in range(max(first - 1, 1), last + 1)):
                        found += [f"{rel}:{n.lineno}" for n in need]
    return found


def _bodies(fn: ast.AST) -> list[list[ast.stmt]]:
    """Every statement list inside `fn` (its body, and those of its if/try/with/for blocks)."""
    return [
        body
        for node in ast.walk(fn)
        for name in ("body", "orelse", "finalbody")
        if isinstance(body := getattr(node, name, None), list)
    ]


def _import_blocks(body: list[ast.stmt]) -> list[list[ast.stmt]]:
    """Runs of consecutive import statements in `body`."""
    blocks: list[list[ast.stmt]] = []
    for i, node in enumerate(body):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if i and isinstance(body[i - 1], (ast.Import, ast.ImportFrom)):
                blocks[-1].append(node)
            else:
                blocks.append([node])
    return blocks


def _of_package(node: ast.stmt, package: str) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").split(".")[0] == package
    return all(a.name.split(".")[0] == package for a in node.names)


def test_every_import_inside_a_function_says_why():
    assert unexplained_function_imports(PACKAGE) == []


FAKE = {  # a fake package, planted with one violation of each rule
    "__init__.py": "",
    "cli.py": "",
    "commands/__init__.py": "",
    "commands/report.py": "",
    "archive/__init__.py": "",
    "archive/store.py": "def land():\n    from fakescope.ingest.lander import Lander  # hidden in a function\n",
    "ingest/__init__.py": "",
    "ingest/lander.py": "from fakescope.archive import store\n",
    "derive/__init__.py": "",
    "derive/rows.py": "",
    "analysis/__init__.py": "",
    "analysis/report.py": "from fakescope import cli\nfrom ..commands import report\n",
    "sweep/__init__.py": "from fakescope.loadgen import plan\n",
    "loadgen/__init__.py": "",
    "loadgen/plan.py": "from fakescope.sweep import runner\n",
    "sweep/runner.py": "",
}


@pytest.fixture
def fakescope(tmp_path: Path) -> Path:
    root = tmp_path / "fakescope"
    for name, text in FAKE.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_each_rule_fails_on_a_fake_package_that_breaks_it(fakescope):
    found = violations(imports(fakescope, "fakescope"), "fakescope", folders_of(fakescope))
    assert sorted(found) == sorted(
        [
            "fakescope.archive.store imports fakescope.ingest.lander",
            "fakescope.analysis.report imports fakescope.cli",
            "fakescope.analysis.report imports fakescope.commands.report",
            "fakescope.analysis.report imports fakescope.commands",
            "cycle between rooms: archive → ingest → archive",
            "cycle between rooms: loadgen → sweep → loadgen",
        ]
    )


def test_a_circle_through_a_root_module_is_found(fakescope):
    # budgetscope's last one: the opener took the collector's tuning while the collector's writer opened archives
    (fakescope / "archive/store.py").write_text("")
    (fakescope / "loadgen/plan.py").write_text("")
    (fakescope / "opener.py").write_text("from fakescope.collector.tuning import HOLDING\n")
    (fakescope / "collector/__init__.py").parent.mkdir()
    (fakescope / "collector/__init__.py").write_text("")
    (fakescope / "collector/tuning.py").write_text("")
    (fakescope / "collector/writer.py").write_text("def open_():\n    from fakescope.opener import Archive\n")
    graph = imports(fakescope, "fakescope")
    assert module_cycles(graph, "fakescope") == []  # no two modules close it
    assert [v for v in violations(graph, "fakescope", folders_of(fakescope)) if "cycle" in v] == [
        "cycle between rooms: collector → opener → collector"
    ]


def test_a_circle_between_modules_of_a_fake_package_is_found(fakescope):
    (fakescope / "ingest/decode.py").write_text("from fakescope.ingest import lander\n")
    (fakescope / "ingest/lander.py").write_text("from fakescope.ingest.decode import x\n")
    assert module_cycles(imports(fakescope, "fakescope"), "fakescope", ("ingest",)) == [
        ["fakescope.ingest.decode", "fakescope.ingest.lander", "fakescope.ingest.decode"]
    ]


def test_a_circle_through_a_function_or_a_package_init_is_found(fakescope):
    (fakescope / "derive/__init__.py").write_text("from fakescope.derive.rows import Row\n")
    (fakescope / "derive/rows.py").write_text("def row():\n    from fakescope.derive import classify\n")
    (fakescope / "derive/classify.py").write_text("")
    assert module_cycles(imports(fakescope, "fakescope"), "fakescope") == [
        ["fakescope.archive.store", "fakescope.ingest.lander", "fakescope.archive.store"],
        ["fakescope.derive", "fakescope.derive.rows", "fakescope.derive"],
        ["fakescope.loadgen.plan", "fakescope.sweep", "fakescope.loadgen.plan"],
    ]


def test_an_import_inside_a_function_without_a_reason_is_found(fakescope):
    (fakescope / "ingest/decode.py").write_text(
        "def a():\n    import json\n\n\ndef b():\n    # pyarrow: 1 s to import\n    import pyarrow\n    import os\n"
    )
    (fakescope / "commands/report.py").write_text(
        "def report():\n    from fakescope.archive import store\n    import re\n"
    )
    assert unexplained_function_imports(fakescope) == ["commands/report.py:3", "ingest/decode.py:2"]


def test_a_clean_fake_package_passes(fakescope):
    (fakescope / "archive/store.py").write_text("")
    (fakescope / "analysis/report.py").write_text("from fakescope.derive import rows\n")
    (fakescope / "loadgen/plan.py").write_text("")
    assert violations(imports(fakescope, "fakescope"), "fakescope", folders_of(fakescope)) == []
