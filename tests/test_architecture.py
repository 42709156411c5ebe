"""The house drawn from the imports (DESIGN.md, issue 48): which module may
import which, read from the source with :mod:`ast` (every ``import`` and
``from ... import``, at module level or inside a function).

- no import cycle among simcoll's modules;
- producers and consumers meet only through Algorithm and Program: no
  synthesizer imports the simulator, and the simulator no synthesizer;
- the simulator's rooms: the reference engine uses what a message crosses
  (``routing``) but none of the fast paths nor their flow sharing; the fast
  paths do not lean on the reference; ``routing`` knows no flows;
- no module over ~800 lines without a reason stated in its docstring.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "simcoll"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """The simcoll modules ``path`` imports (a package's name where it names one)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("simcoll"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("simcoll"):
                continue
            found.add(target)
            for alias in node.names:  # ``from . import compiled`` names a module
                if (PACKAGE.parent / (target + "." + alias.name).replace(".", "/")).with_suffix(".py").exists():
                    found.add(f"{target}.{alias.name}")
    return found


@pytest.fixture(scope="module")
def graph() -> nx.DiGraph:
    g = nx.DiGraph()
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    for name, path in modules.items():
        g.add_node(name)
        for target in _imports(path):
            # a name inside a module counts as the module; a package as its __init__
            while target not in modules and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in modules and target != name:
                g.add_edge(name, target)
    return g


def _reaches(graph: nx.DiGraph, source: str, prefix: str) -> list[str]:
    """Modules under ``prefix`` that ``source`` imports directly."""
    return sorted(t for t in graph.successors(source) if t == prefix or t.startswith(prefix + "."))


def test_no_import_cycle_among_modules(graph):
    # a package's __init__ re-exporting its modules is not a cycle of meaning: leave those edges out
    g = graph.copy()
    g.remove_edges_from([(a, b) for a, b in graph.edges if b.startswith(a + ".") or a.startswith(b + ".")])
    assert list(nx.simple_cycles(g)) == []


def test_producers_and_consumers_meet_only_through_algorithm_and_program(graph):
    synthesizers = [m for m in graph if m.startswith("simcoll.synthesis")]
    simulator = [m for m in graph if m.startswith("simcoll.simulator")]
    assert [
        (m, _reaches(graph, m, "simcoll.simulator")) for m in synthesizers if _reaches(graph, m, "simcoll.simulator")
    ] == []
    assert [
        (m, _reaches(graph, m, "simcoll.synthesis")) for m in simulator if _reaches(graph, m, "simcoll.synthesis")
    ] == []


def test_the_simulator_rooms(graph):
    reference = "simcoll.simulator.reference"
    assert _reaches(graph, reference, "simcoll.simulator.fast") == []
    assert _reaches(graph, reference, "simcoll.simulator.network") == []
    assert _reaches(graph, reference, "simcoll.simulator.fair_share") == []
    assert "simcoll.simulator.routing" in graph.successors(reference)
    fast = [m for m in graph if m.startswith("simcoll.simulator.fast")]
    assert [m for m in fast if reference in graph.successors(m)] == []
    routing = "simcoll.simulator.routing"
    assert [t for t in graph.successors(routing) if t.startswith("simcoll.simulator")] == []


def test_long_modules_say_why(graph):
    unexplained = []
    for path in PACKAGE.rglob("*.py"):
        lines = path.read_text(encoding="utf-8").count("\n")
        if lines > 800:
            doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
            if "Why one module" not in doc:
                unexplained.append(f"{path.relative_to(ROOT)} ({lines} lines)")
    assert unexplained == []
