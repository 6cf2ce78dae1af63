"""The package's layout: no import cycle among kvsched's modules, and every import made
inside a function says why it waits (start-up time, an optional dependency).

The graph is read from the source (ast), not from a run: an import under `if TYPE_CHECKING:`
never runs and is left out; an import inside a function runs when it is called and counts."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "kvsched"


def module_files(package: Path = PACKAGE) -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its `__init__.py`)."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _type_checking_only(tree: ast.Module) -> set[int]:
    """The ids of the nodes under `if TYPE_CHECKING:`."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            out.update(id(sub) for stmt in node.body for sub in ast.walk(stmt))
    return out


def _function_nodes(tree: ast.Module) -> dict[int, ast.AST]:
    """Each node inside a function or method, by id, with the outermost function."""
    out: dict[int, ast.AST] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for sub in ast.walk(node):
                if sub is not node:
                    out.setdefault(id(sub), node)
    return out


def imports(name: str, path: Path, modules: dict[str, Path]
            ) -> list[tuple[ast.stmt, str, bool]]:
    """The kvsched modules `name` imports when it runs: (statement, module, in a function)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = _type_checking_only(tree)
    local = _function_nodes(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([node.module] if node.module else [])])
            for alias in node.names:
                whole = f"{base}.{alias.name}"
                if whole in modules:
                    targets.append(whole)  # a submodule: the package's names are not read
                elif not PACKAGE.parent.joinpath(*base.split("."), f"{alias.name}.c").exists():
                    targets.append(base)  # a name the module defines, not a C extension
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name and target.split(".")[0] == "kvsched":
                out.append((node, target, id(node) in local))
    return out


def import_graph() -> dict[str, set[str]]:
    modules = module_files()
    return {name: {target for _, target, _ in imports(name, path, modules)}
            for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_cycles_finds_a_loop_of_three_and_not_a_chain():
    """The cycle finder itself: a -> b -> c -> a is one, a -> b -> c is none."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_import_cycle():
    """No two kvsched modules import each other, directly or round a loop, at module level or
    inside a function."""
    found = cycles(import_graph())
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def part_of(name: str) -> str:
    """The part a module belongs to: its subpackage (`kvsched.records` for
    `kvsched.records.rows`), or itself at the package's top (`kvsched.runner`)."""
    return ".".join(name.split(".")[:2])


def part_graph() -> dict[str, set[str]]:
    """Which parts import which, through any of their modules."""
    graph: dict[str, set[str]] = {}
    for name, targets in import_graph().items():
        graph.setdefault(part_of(name), set())
        for target in targets:
            if part_of(target) != part_of(name):
                graph[part_of(name)].add(part_of(target))
                graph.setdefault(part_of(target), set())
    return graph


PART_LOOPS_LEFT: list[list[str]] = []
"""Parts that still import each other round a loop, each for a reason (docs/extending.md,
"Where the parts live"): none since the trace formats' registry, which the schema reads while
the workload's builder reads the schema's specs, moved below both (`kvsched.trace_formats`,
data importing nothing of kvsched)."""


def test_no_two_parts_import_each_other():
    """Beyond the modules, the parts (a subpackage, or a module at the package's top) stand
    in layers: none imports another that imports it back, through any of their modules,
    but the loops named in PART_LOOPS_LEFT (and one that is mended leaves that list)."""
    assert cycles(part_graph()) == PART_LOOPS_LEFT


def _has_reason(lines: list[str], node: ast.stmt) -> bool:
    """A comment on the import's lines, or on the line above the run of imports (and `try:`
    lines) it starts or belongs to."""
    end = node.end_lineno or node.lineno
    if any("#" in lines[i - 1] for i in range(node.lineno, end + 1)):
        return True
    above = node.lineno - 1
    while above >= 1:
        text = lines[above - 1].strip()
        if text.startswith("#") or "  # " in text:
            return True
        if not (text.startswith(("import ", "from ", "try:", ")")) or text == ""
                or text.endswith(",")):
            return False
        above -= 1
    return False


def test_every_function_local_import_says_why():
    """An import inside a function waits on purpose (start-up time, an optional package):
    a comment says which, on its line or the line above its group."""
    modules = module_files()
    silent = []
    for path in modules.values():
        lines = path.read_text(encoding="utf-8").splitlines()
        tree = ast.parse("\n".join(lines))
        skipped = _type_checking_only(tree)
        local = _function_nodes(tree)
        for node in ast.walk(tree):
            if (isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) in local
                    and id(node) not in skipped and not _has_reason(lines, node)):
                silent.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert not silent, "function-local imports without a reason: " + ", ".join(silent)


MOVED = {"kvsched.roofline": "kvsched.timing.roofline",
         "kvsched.profiled": "kvsched.timing.profiled",
         "kvsched.stepfit": "kvsched.timing.stepfit", "kvsched.kvpool": "kvsched.timing.kvpool",
         "kvsched.serve_defaults": "kvsched.timing.serve_defaults",
         "kvsched.hardware": "kvsched.timing.hardware",
         "kvsched.trace_csv": "kvsched.workload.trace_csv",
         "kvsched.trace_notes": "kvsched.workload.trace_notes",
         "kvsched.workload.formats": "kvsched.trace_formats",
         "kvsched.cli_app": "kvsched.cli.shared", "kvsched.cli_capacity": "kvsched.cli.capacity",
         "kvsched.cli_progress": "kvsched.cli.progress",
         "kvsched.diagnosis": "kvsched.records.diagnosis",
         "kvsched.analysis.diagnosis": "kvsched.records.diagnosis",
         "kvsched.sweep": "kvsched.analysis.sweep",
         "kvsched.capacity": "kvsched.analysis.capacity",
         "kvsched.capacity_grid": "kvsched.analysis.capacity_grid",
         "kvsched.slo_watch": "kvsched.analysis.slo_watch",
         "kvsched.record_table": "kvsched.records.table",
         "kvsched.csvout": "kvsched.records.csvout", "kvsched.fastcsv": "kvsched.records.fastcsv",
         "kvsched.floatfmt": "kvsched.records.floatfmt",
         "kvsched.metrics": "kvsched.records.metrics",
         "kvsched.metric_names": "kvsched.records.metric_names",
         "kvsched.record_mode": "kvsched.records.mode",
         "kvsched.steplog": "kvsched.records.steplog",
         "kvsched.loop": "kvsched.cluster.loop", "kvsched.cluster_run": "kvsched.cluster.run",
         "kvsched.pd": "kvsched.cluster.pd", "kvsched.transfer": "kvsched.cluster.transfer",
         "kvsched.conformance": "kvsched.decisions",
         "kvsched.plots_sweep": "kvsched.plots.sweep",
         "kvsched.plots_capacity": "kvsched.plots.capacity",
         "kvsched.plot_folders": "kvsched.plots.folders"}
"""Modules that moved, by the old path a branch written before the move may import, and where
each lives now. `kvsched._moved.MOVED` is the table that keeps them working; this list is the
promise it is held to."""


def test_a_moved_modules_old_path_is_the_new_module():
    """`import kvsched.roofline` (a branch written before the move) gives the very module
    `kvsched.timing.roofline`: one module object, so a name set on either is seen by both,
    and no file is left at the old path."""
    import importlib

    modules = module_files()
    for old, new in MOVED.items():
        assert old not in modules, f"{old}: a file stands at the old path"
        assert importlib.import_module(old) is importlib.import_module(new), old
        assert importlib.import_module(old).__spec__.name == new, old


def test_a_moved_modules_names_are_imported_from_its_old_path_on_demand():
    """In a fresh interpreter, `import kvsched` imports none of the moved modules; then
    `from kvsched.<old> import <name>` gets each public name of the new module, and only
    then is the new module imported."""
    import subprocess
    import sys

    code = (
        "import importlib, sys, kvsched\n"
        f"moved = {MOVED!r}\n"
        "print(sorted(new for new in moved.values() if new in sys.modules))\n"
        "for old, new in moved.items():\n"
        "    public = [n for n in vars(importlib.import_module(new)) if not n.startswith('_')]\n"
        "    assert public, new\n"
        "    for name in public:\n"
        "        space = {}\n"
        "        exec(f'from {old} import {name}', space)\n"
        "        assert space[name] is getattr(sys.modules[new], name), (old, name)\n"
        "print('ok')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.split("\n")[:2] == ["[]", "ok"], done.stdout + done.stderr


def test_the_alias_table_keeps_every_promised_old_path():
    """Each old path promised here is in `kvsched._moved.MOVED`, pointing at its new home."""
    from kvsched._moved import MOVED as table

    for old, new in MOVED.items():
        assert table.get(old) == new, old
    for old, new in table.items():
        assert new not in table, f"{old} -> {new}: an alias must name a module, not an alias"


def test_the_cli_package_hands_on_what_the_cli_module_held():
    """`kvsched.cli` was one module and is now a package: `app` and `main` (the command the
    console script runs) and every other public name of its commands are still found there."""
    import kvsched.cli
    import kvsched.cli.commands

    assert kvsched.cli.app is kvsched.cli.commands.app
    assert kvsched.cli.main is kvsched.cli.commands.main
    for name in vars(kvsched.cli.commands):
        if not name.startswith("_"):
            assert getattr(kvsched.cli, name) is getattr(kvsched.cli.commands, name), name


def test_the_records_package_hands_on_what_the_records_module_held():
    """`kvsched.records` was one module and is now a package: every public name of that
    module (now `kvsched.records.rows`) is still found there."""
    import kvsched.records
    import kvsched.records.rows

    public = [name for name in vars(kvsched.records.rows) if not name.startswith("_")]
    assert "RunResult" in public and "STEP_COLUMNS" in public
    for name in public:
        assert getattr(kvsched.records, name) is getattr(kvsched.records.rows, name), name


def test_the_plots_package_hands_on_what_the_plots_module_held():
    """`kvsched.plots` was one module (now `kvsched.plots.run`) and is a package: every public
    name of that module is still found there."""
    import kvsched.plots
    import kvsched.plots.run

    public = [name for name in vars(kvsched.plots.run) if not name.startswith("_")]
    assert "plot_run_folder" in public and "save_png" in public
    for name in public:
        assert getattr(kvsched.plots, name) is getattr(kvsched.plots.run, name), name


def test_the_cluster_package_hands_on_what_the_cluster_module_held():
    """`kvsched.cluster` was one module (now `kvsched.cluster.replicas`) and is a package:
    its names are found there on first use, and importing a light submodule does not
    import the replicas' loop."""
    import subprocess
    import sys

    import kvsched.cluster
    import kvsched.cluster.replicas

    public = [name for name in vars(kvsched.cluster.replicas) if not name.startswith("_")]
    assert "run_cluster" in public and "ClusterResult" in public
    for name in public:
        assert getattr(kvsched.cluster, name) is getattr(kvsched.cluster.replicas, name), name
    code = ("import sys, kvsched.cluster.pd, kvsched.cluster.transfer\n"
            "print('kvsched.cluster.replicas' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.split() == ["False"], done.stderr
