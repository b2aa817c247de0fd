"""The layers of the code, and no import cycles.

Every import statement of every module under pbtree/, storage/, spark_loader/ and tools/
counts, at module level or inside a function, and so does ``importlib.import_module`` or
``__import__`` of a literal name. Each layer is a folder, and imports only from the layers it
lists:

=========  ===============================================  =================================
layer      modules                                          may import
=========  ===============================================  =================================
storage    storage/                                         storage
library    pbtree/ but pbtree/cli/                          storage, library
spark      spark_loader/ but spark_loader/cli.py            storage, library, spark
cli        pbtree/cli/ (the pbtree command)                 storage, library, cli, tools
spark-cli  spark_loader/cli.py                              all but tools, and not
                                                            pbtree.cli.main
tools      tools/                                           anything
=========  ===============================================  =================================

A new module of pbtree belongs to the library, or to the command if it is in pbtree/cli/.
Some modules import none of the packages (``LEAVES``): pbtree.config, every tunable
threshold, so that every module may import it; and pbtree/cli/__init__.py, which runs
whenever a module of the command is imported. The pbtree command reaches Spark through one
hook only (``HOOK``): pbtree.cli.main imports spark_loader.cli, inside one function, to
register build and match-batch; spark_loader.cli takes what the two share from
pbtree.cli.common. The command may import tools (``pbtree generate``'s synthetic profiles
are tools.workloads'). And no module imports itself back through others: the import graph,
lazy imports included, has no cycle.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("storage", "pbtree", "spark_loader", "tools")

#: the package of pbtree's command, pbtree/cli/: every module under it is the cli layer
CLI = "pbtree.cli"
#: the one import from pbtree's command into spark_loader: (importer, imported)
HOOK = ("pbtree.cli.main", "spark_loader.cli")
#: the modules that import none of the packages, and why
LEAVES = {
    "pbtree.config": "every module may import it (the thresholds)",
    CLI: "it runs whenever a module of pbtree/cli/ is imported (spark_loader.cli loads "
         "pbtree.cli.common, never the command)",
}

ALLOWED = {
    "storage": {"storage"},
    "library": {"storage", "library"},
    "spark": {"storage", "library", "spark"},
    "cli": {"storage", "library", "cli", "tools"},
    "spark-cli": {"storage", "library", "spark", "cli", "spark-cli"},
    "tools": {"storage", "library", "spark", "cli", "spark-cli", "tools"},
}
WHY = {
    "storage": "storage imports nothing from pbtree (nor anything above it)",
    "library": "the library never imports the CLI, spark_loader or tools",
    "spark": "spark_loader depends on the library, never on a CLI or tools",
    "cli": ("the pbtree command reaches spark_loader only through the hook "
            f"{HOOK[0]} -> {HOOK[1]}"),
    "spark-cli": "spark_loader.cli never imports tools",
}
DYNAMIC = {"import_module", "__import__"}


def layer(module: str) -> str:
    """The layer a module (dotted name) belongs to."""
    top = module.split(".")[0]
    if top == "storage":
        return "storage"
    if top == "pbtree":
        return "cli" if module == CLI or module.startswith(CLI + ".") else "library"
    if top == "spark_loader":
        return "spark-cli" if module == "spark_loader.cli" else "spark"
    if top == "tools":
        return "tools"
    raise ValueError(f"{module}: not in any of {PACKAGES}")


@dataclass(frozen=True)
class Import:
    """One module importing another: where, how (the statement) and whether in a function."""

    source: str
    target: str
    path: str
    line: int
    text: str
    lazy: bool

    def __str__(self) -> str:
        where = " (inside a function)" if self.lazy else ""
        return f"{self.path}:{self.line}: {self.source} imports {self.target}: " \
               f"`{self.text}`{where}"


def modules(root: Path) -> dict[str, Path]:
    """Dotted name -> file of every module of the packages under ``root``."""
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _known(name: str, known: dict[str, Path]) -> str | None:
    """The module ``name`` loads among ``known``: itself, or the longest known prefix
    (``pbtree.core.Index`` -> ``pbtree.core``); None outside the packages."""
    parts = name.split(".")
    while parts:
        if ".".join(parts) in known:
            return ".".join(parts)
        parts.pop()
    return None


def _names(module: str, is_package: bool, node: ast.AST) -> list[str]:
    """The dotted names an import node loads, relative imports resolved: ``from a import b``
    loads a.b, module or not (``_known`` finds the module among them)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            parts = module.split(".")
            if not is_package:
                parts.pop()
            parts = parts[:len(parts) - node.level + 1]
            base = ".".join(parts + ([node.module] if node.module else []))
        return [f"{base}.{alias.name}" for alias in node.names]
    return [node.args[0].value]  # importlib.import_module("...") / __import__("...")


def _dynamic(node: ast.AST) -> bool:
    """Whether a node is a call of importlib.import_module or __import__."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    return name in DYNAMIC


def _walk(node: ast.AST, lazy: bool = False) -> Iterator[tuple[ast.AST, bool]]:
    """Every node under ``node``, and whether it runs only when a function is called."""
    for child in ast.iter_child_nodes(node):
        yield child, lazy
        yield from _walk(child, lazy or isinstance(
            child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda))


def imports(root: Path = ROOT) -> tuple[list[Import], list[str]]:
    """Every import between the modules under ``root``; and the dynamic imports of a name
    that is not a literal, which no test can follow (file:line and the call)."""
    known = modules(root)
    found: list[Import] = []
    unfollowed: list[str] = []
    for module, path in known.items():
        rel = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
        for node, lazy in _walk(tree):
            dynamic = _dynamic(node)
            if dynamic and not (node.args and isinstance(node.args[0], ast.Constant)
                                and isinstance(node.args[0].value, str)):
                unfollowed.append(f"{rel}:{node.lineno}: `{ast.unparse(node)}`")
            elif dynamic or isinstance(node, ast.Import | ast.ImportFrom):
                names = _names(module, path.name == "__init__.py", node)
                targets = {_known(name, known) for name in names} - {None, module}
                found.extend(Import(module, target, rel, node.lineno, ast.unparse(node), lazy)
                             for target in sorted(targets))
    return found, unfollowed


def violations(found: list[Import]) -> list[str]:
    """Each import that breaks a layer rule, with the rule."""
    bad = []
    for imp in found:
        source, target = layer(imp.source), layer(imp.target)
        if (imp.source, imp.target) == HOOK:
            if not imp.lazy:
                bad.append(f"{imp}\n    the hook must import spark_loader.cli inside the "
                           f"function that registers its commands, not at module level")
        elif source == "spark-cli" and imp.target == HOOK[0]:
            bad.append(f"{imp}\n    {HOOK[0]} loads spark_loader.cli: import what both "
                       f"need from pbtree.cli.common instead")
        elif imp.source in LEAVES:
            bad.append(f"{imp}\n    {imp.source} imports nothing of {PACKAGES}: "
                       f"{LEAVES[imp.source]}")
        elif target not in ALLOWED[source]:
            bad.append(f"{imp}\n    {source} may not import {target}: {WHY[source]}")
    hooks = [imp for imp in found if (imp.source, imp.target) == HOOK]
    if len(hooks) > 1:
        bad.append(f"{HOOK[0]} imports {HOOK[1]} in {len(hooks)} places; keep one hook:\n"
                   + "\n".join(f"  {imp}" for imp in hooks))
    return bad


def cycles(found: list[Import]) -> list[list[Import]]:
    """One cycle of imports per strongly connected group of modules (Tarjan)."""
    graph: dict[str, dict[str, Import]] = {}
    for imp in found:
        graph.setdefault(imp.source, {}).setdefault(imp.target, imp)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, {}):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            connect(v)
    found_cycles = []
    for group in groups:  # the shortest way from the group's first module back to it
        start = min(group)
        paths = {start: []}
        todo = [start]
        while todo:
            v = todo.pop(0)
            for w, imp in sorted(graph.get(v, {}).items()):
                if w == start:
                    found_cycles.append([*paths[v], imp])
                    todo = []
                    break
                if w in group and w not in paths:
                    paths[w] = [*paths[v], imp]
                    todo.append(w)
    return found_cycles


FOUND, UNFOLLOWED = imports()


def third_party(root: Path = ROOT) -> list[tuple[str, str, int]]:
    """(module, top-level package, line) of every import at module level, outside the
    standard library and these packages, in the storage, library and cli layers: what
    ``import pbtree`` and the ``pbtree`` command load whatever extras are installed."""
    found = []
    for module, path in modules(root).items():
        if layer(module) not in ("storage", "library", "cli"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node, lazy in _walk(tree):
            if lazy or not isinstance(node, ast.Import | ast.ImportFrom) or \
                    getattr(node, "level", 0):
                continue
            names = [a.name for a in node.names] if isinstance(node, ast.Import) \
                else [node.module or ""]
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in PACKAGES \
                        and top != "__future__":
                    found.append((module, top, node.lineno))
    return found


def declared(root: Path = ROOT) -> set[str]:
    """The distributions pyproject.toml's ``dependencies`` name (installed with pbtree
    whatever extras are asked for)."""
    with open(root / "pyproject.toml", "rb") as src:
        wanted = tomllib.load(src)["project"]["dependencies"]
    return {re.split(r"[<>=!~\[ ;]", item, maxsplit=1)[0].lower() for item in wanted}


def test_the_library_loads_only_its_declared_dependencies():
    """``pip install pbtree`` without extras must give a library and a command that import:
    every package they import at module level is a dependency, not an extra's (the Spark
    commands load pyspark inside the functions that run them)."""
    missing = [f"{module}:{line} imports {top}" for module, top, line in third_party()
               if top.lower() not in declared()]
    assert not missing, "not in pyproject.toml's dependencies:\n" + "\n".join(missing)
    assert {top for _, top, _ in third_party()} >= {"lmdb", "numpy", "msgpack"}


def test_the_modules_are_found():
    found = set(modules(ROOT))
    assert {"storage.env", "pbtree.core", "spark_loader.cli", "tools.workloads", *HOOK,
            *LEAVES} <= found
    assert {layer(module) for module in found} == set(ALLOWED), "a layer has no module"
    assert any((imp.source, imp.target) == HOOK for imp in FOUND), "the hook is gone"


def test_every_import_keeps_to_its_layer():
    bad = violations(FOUND)
    if bad:
        pytest.fail("imports across the layers (see tests/test_layers.py):\n"
                    + "\n".join(bad), pytrace=False)


def test_no_import_cycles():
    found = cycles(FOUND)
    if found:
        pytest.fail("import cycles:\n" + "\n".join(
            " -> ".join([c[0].source, *(imp.target for imp in c)]) + "\n"
            + "\n".join(f"  {imp}" for imp in c) for c in found), pytrace=False)


def test_dynamic_imports_name_their_module():
    if UNFOLLOWED:
        pytest.fail("dynamic imports of a computed name hide a dependency from this test; "
                    "import the module by name:\n" + "\n".join(UNFOLLOWED), pytrace=False)


def _tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for package in PACKAGES:
        (root / package).mkdir(exist_ok=True)
        (root / package / "__init__.py").touch()


def test_the_checks_catch_what_they_guard_against(tmp_path):
    _tree(tmp_path, {
        "storage/env.py": "from pbtree.errors import StorageError\n",
        "pbtree/errors.py": "",
        "pbtree/config.py": "from storage import env\n",
        "pbtree/core.py": "def f():\n    from .cli.streams import Source\n",
        "pbtree/cli/__init__.py": "from pbtree.cli.main import main\n",
        "pbtree/cli/main.py": "import importlib\nimport spark_loader.cli\n"
                              "def g(name):\n    importlib.import_module(name)\n",
        "pbtree/cli/common.py": "",
        "pbtree/cli/streams.py": "import tools.workloads\nfrom spark_loader import build\n",
        "spark_loader/build.py": "",
        "spark_loader/cli.py": "from pbtree.cli import common, main\n",
        "spark_loader/match.py": "from pbtree import core\n"
                                 "def h():\n    importlib.import_module('spark_loader.match')\n",
        "tools/demo.py": "import pbtree.core\n",
        "tools/workloads.py": "",
    })
    found, unfollowed = imports(tmp_path)
    bad = "\n".join(violations(found))
    assert "storage/env.py:1: storage.env imports pbtree.errors" in bad
    assert "pbtree/config.py:1: pbtree.config imports storage.env" in bad
    # any module in pbtree/cli/ is the command's, with no list to keep
    assert "pbtree/core.py:2: pbtree.core imports pbtree.cli.streams: " \
           "`from .cli.streams import Source` (inside a function)\n" \
           "    library may not import cli" in bad
    assert "pbtree/cli/__init__.py:1: pbtree.cli imports pbtree.cli.main" in bad
    assert "pbtree/cli/main.py:2: pbtree.cli.main imports spark_loader.cli" in bad  # not lazy
    assert "pbtree/cli/streams.py:2: pbtree.cli.streams imports spark_loader.build" in bad
    assert "spark_loader/cli.py:1: spark_loader.cli imports pbtree.cli.main" in bad
    # the command's shared options, up the layers (tools), and itself are fine
    assert "spark_loader.cli imports pbtree.cli.common" not in bad
    assert "pbtree.cli.streams imports tools.workloads" not in bad
    assert not [line for line in bad.splitlines()
                if line.startswith(("tools/", "spark_loader/match.py"))]
    assert [[(imp.source, imp.target) for imp in c] for c in cycles(found)] == [
        [("pbtree.cli.main", "spark_loader.cli"), ("spark_loader.cli", "pbtree.cli.main")]]
    assert unfollowed == ["pbtree/cli/main.py:4: `importlib.import_module(name)`"]
