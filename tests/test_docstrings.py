"""The public API's docstrings: numpy style for every function of
``simcoll.__all__``, every module's examples collected and run, and the
package docstring's quick start equal to the README's."""

from __future__ import annotations

import doctest
import importlib
import inspect
import pkgutil
import re
import sys
from pathlib import Path

import pytest
import tomllib

import simcoll

ROOT = Path(__file__).resolve().parents[1]

#: numpy-style section headers: a title line underlined by dashes of its length.
_SECTION = re.compile(r"^\s*(\w[\w ]*)\n\s*-+\s*$", re.M)


def _sections(doc: str) -> set[str]:
    return {m.group(1).strip() for m in _SECTION.finditer(doc) if len(m.group(0).split("\n")[1].strip()) >= 3}


def _public_functions():
    for name in simcoll.__all__:
        obj = getattr(simcoll, name)
        if inspect.isfunction(obj):
            yield name, obj


@pytest.mark.parametrize("name", [name for name, _ in _public_functions()])
def test_public_function_has_a_numpy_docstring(name):
    function = getattr(simcoll, name)
    doc = inspect.getdoc(function) or ""
    sections = _sections(doc)
    if inspect.signature(function).parameters:
        assert "Parameters" in sections, f"{name}: no Parameters section"
    if inspect.signature(function).return_annotation not in (None, "None"):
        assert {"Returns", "Yields"} & sections, f"{name}: no Returns or Yields section"
    assert "Examples" in sections, f"{name}: no Examples section"
    assert ">>>" in doc.split("Examples", 1)[1], f"{name}: its Examples section has no example"


def test_public_classes_are_documented():
    undocumented = [
        n for n in simcoll.__all__ if inspect.isclass(getattr(simcoll, n)) and not inspect.getdoc(getattr(simcoll, n))
    ]
    assert undocumented == []


def test_the_pytest_configuration_runs_the_package_doctests():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "--doctest-modules" in config["addopts"].split()
    assert {"tests", "simcoll", "gpu"} <= set(config["testpaths"])


def _modules_with_examples():
    for info in pkgutil.walk_packages(simcoll.__path__, "simcoll."):
        spec = importlib.util.find_spec(info.name)
        if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
            continue
        if ">>>" in Path(spec.origin).read_text(encoding="utf-8"):
            yield info.name


@pytest.mark.parametrize("module_name", sorted(_modules_with_examples()))
def test_every_module_with_examples_runs_at_least_one(module_name):
    """doctest finds the module's examples, and not all of them are skipped."""
    module = importlib.import_module(module_name)
    tests = doctest.DocTestFinder(exclude_empty=True).find(module, module_name)
    runnable = [example for test in tests for example in test.examples if not example.options.get(doctest.SKIP, False)]
    assert runnable, f"{module_name} has '>>>' but doctest would run none of its examples"


def test_import_is_lazy():
    """``import simcoll`` loads no heavy dependency (the CLI starts fast)."""
    code = (
        "import sys, simcoll; "
        "print(sorted(m for m in ('pandas', 'matplotlib', 'ortools', 'z3', 'simpy') if m in sys.modules))"
    )
    import subprocess

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    assert set(dir(simcoll)) >= set(simcoll.__all__)
    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        simcoll.nonexistent  # noqa: B018


def _quick_start(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip().startswith(">>> ")]


def test_package_docstring_quick_start_is_the_readme_one():
    readme = (ROOT / "README.md").read_text()
    block = readme.split("```pycon\n", 1)[1].split("```", 1)[0]
    assert _quick_start(block) == _quick_start(simcoll.__doc__)
    assert len(_quick_start(block)) >= 8
