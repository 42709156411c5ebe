"""simcoll's exceptions, as a specification (issue 48): every class lives in
:mod:`simcoll.errors` and derives from :class:`SimcollError`; each specific
class is raised, through the public API, for the case its docstring names, and
is also the class callers caught before (an UnknownMachineError is a
TopologyError), so no existing ``except`` clause changes what it catches; the
CLI turns every one into exit 2 and one line."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import simcoll.errors as errors
from simcoll import check, generate, load_machine, load_topology, make_collective
from simcoll.calibration import parse_nccl_tests
from simcoll.cli import main
from simcoll.compare import compare
from simcoll.errors import (
    BuildError,
    DumpError,
    FileError,
    ModelError,
    NcclTestsLogError,
    NotApplicableError,
    OptionError,
    SimcollError,
    SizeError,
    SolverError,
    StudyError,
    SweepError,
    SynthesisError,
    TooLargeError,
    TopologyError,
    UnknownMachineError,
    UnknownModelError,
    VerificationError,
)

ROOT = Path(__file__).resolve().parents[1]


def _error_classes() -> list[type[BaseException]]:
    return [c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, BaseException)]


def _modules():
    """Every module of the package (simcoll.gpu is gpu/, mapped in by the install)."""
    for package in (importlib.import_module("simcoll"), importlib.import_module("simcoll.gpu")):
        yield package.__name__
        for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            if info.name.rsplit(".", 1)[-1] != "__main__":  # importing one runs the command
                yield info.name


# -- one home -------------------------------------------------------------------------
def test_every_class_in_simcoll_errors_is_a_documented_simcoll_error():
    classes = _error_classes()
    assert len(classes) >= 25
    for cls in classes:
        assert cls.__module__ == "simcoll.errors", cls
        assert issubclass(cls, SimcollError), cls
        assert inspect.getdoc(cls) and cls.__doc__ != SimcollError.__doc__ or cls is SimcollError, cls
        assert re.search(rf"\b{cls.__name__}\b", errors.__doc__), f"{cls.__name__} is not in the module's tree"


def test_every_exception_class_of_the_package_is_defined_in_simcoll_errors():
    """No module defines an exception class of its own (private control flow,
    such as the ring search's ``_OutOfBudget``, excepted)."""
    elsewhere = set()
    for name in _modules():
        module = importlib.import_module(name)
        for value in vars(module).values():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__.startswith("simcoll")
                and not value.__name__.startswith("_")
                and value.__module__ != "simcoll.errors"
            ):
                elsewhere.add(f"{value.__module__}.{value.__qualname__}")
    assert elsewhere == set()


def test_the_moved_classes_are_still_importable_from_their_old_modules():
    from simcoll.gpu.errors import GpuUnavailableError, InterpreterDeadlockError

    from simcoll.calibration.calibrate import CalibrationError
    from simcoll.calibration.nccl_tests import NcclTestsLogError as FromLogs
    from simcoll.sweeps.study import StudyError as FromStudy
    from simcoll.topology_import import DumpError as FromImport

    assert CalibrationError is errors.CalibrationError
    assert FromLogs is NcclTestsLogError and FromStudy is StudyError and FromImport is DumpError
    assert GpuUnavailableError is errors.GpuUnavailableError
    assert InterpreterDeadlockError is errors.InterpreterDeadlockError


def test_nothing_raises_the_bare_base_class():
    """Every raise names its case (the base class is for catching)."""
    bare = re.compile(r"raise SimcollError\(")
    offenders = {
        str(path.relative_to(ROOT))
        for folder in ("simcoll", "gpu")
        for path in (ROOT / folder).rglob("*.py")
        if bare.search(path.read_text(encoding="utf-8"))
    }
    assert offenders == set()


# -- each case, through the public API ------------------------------------------------
def test_a_spec_that_names_no_machine_is_an_unknown_machine_error():
    with pytest.raises(UnknownMachineError, match="unknown topology 'nope'") as raised:
        load_machine("nope")
    assert isinstance(raised.value, TopologyError) and isinstance(raised.value, SimcollError)
    with pytest.raises(UnknownMachineError, match="unknown generator 'torus3d'"):
        load_topology("torus3d:4")
    with pytest.raises(UnknownMachineError):
        load_topology("nope*2")  # a cluster of an unknown node
    # a known generator with bad parameters is a TopologyError, not an unknown machine
    with pytest.raises(TopologyError) as bad:
        load_topology("torus2d:4")
    assert not isinstance(bad.value, UnknownMachineError)


def test_a_model_spec_that_names_no_model_is_an_unknown_model_error():
    with pytest.raises(UnknownModelError, match="unknown model 'nope'") as raised:
        load_machine("dgx1", "nope")
    assert isinstance(raised.value, ModelError)


def test_a_malformed_nccl_tests_log_is_a_log_error_and_a_file_error():
    with pytest.raises(NcclTestsLogError, match=r"^run\.log:1: ") as raised:
        parse_nccl_tests("# nThread 1 nGpus 1\nNCCL version 2.19.3\n", path="run.log")
    assert isinstance(raised.value, FileError)


def test_a_malformed_topology_dump_is_a_dump_error_a_topology_error_and_a_file_error():
    from simcoll.topology_import import import_topology

    with pytest.raises(DumpError) as raised:
        import_topology("nvidia-smi", "nothing like nvidia-smi topo -m\n")
    assert isinstance(raised.value, TopologyError) and isinstance(raised.value, FileError)


def test_a_file_without_a_class_of_its_own_is_a_file_error(tmp_path):
    from simcoll.files import parse_json, read_text

    with pytest.raises(FileError, match="cannot read"):
        read_text(tmp_path / "missing.json")
    with pytest.raises(FileError, match="not valid JSON"):
        parse_json("{", "x.json")
    # a file of a kind with a class of its own raises that class
    with pytest.raises(TopologyError, match="cannot read") as topology:
        load_topology(str(tmp_path / "missing.yaml"))
    assert not isinstance(topology.value, FileError)


def test_a_generator_that_does_not_apply_is_not_applicable():
    with pytest.raises(NotApplicableError, match="no route"):
        generate("binomial-tree", "ring:4", "allreduce")
    # compare leaves such a row out, and raises the same class when no row is left
    df, skipped = compare("ring:4", "allreduce", [1024], algorithms=["ring", "binomial-tree"])
    assert set(df.algorithm) == {"ring"} and "no route" in skipped["binomial-tree"]
    with pytest.raises(NotApplicableError, match="no algorithm applies"):
        compare("ring:4", "allreduce", [1024], algorithms=["binomial-tree"])


def test_bad_arguments_are_option_errors_and_value_errors():
    from simcoll.algorithms import REGISTRY

    cases = [
        lambda: generate("nope", "ring:4", "allreduce"),
        lambda: REGISTRY["ring"].parse_options({"nope": "1"}),
        lambda: REGISTRY["hiccl"].parse_options({"ring": "0"}),
        lambda: compare("ring:4", "allreduce", [1024], jobs=0),
        lambda: compare("ring:4", "allreduce", [1024], method="guess"),
        lambda: compare("ring:4", "allreduce", [1024], algorithms=["nope"]),
        lambda: check(generate("ring", "ring:4", "allreduce"), "ring:4", time_limit_s=0),
    ]
    for case in cases:
        with pytest.raises(OptionError) as raised:
            case()
        assert isinstance(raised.value, ValueError)


def test_a_size_that_is_not_one_is_a_size_error():
    from simcoll.units import parse_size, parse_size_range

    for case in (lambda: parse_size("lots"), lambda: parse_size("0.5"), lambda: parse_size_range("8KB:1KB")):
        with pytest.raises(SizeError):
            case()


def test_too_large_is_refused_before_it_is_built():
    with pytest.raises(TooLargeError):
        make_collective("allgather", 4096, chunk_factor=24 * 4096)


def test_a_malformed_synthesis_instance_is_a_synthesis_error():
    from simcoll.synthesis import synthesize

    with pytest.raises(SynthesisError):
        synthesize("ring:4", "allgather", chunks=1, steps=0)


def test_a_sweep_point_whose_synthesis_finds_nothing_is_a_solver_error():
    """The sweep records the message as the point's error (tests/test_sweeps.py)."""
    from simcoll.sweeps import load_study, runner

    study = load_study(
        {
            "name": "unsat",
            "machines": ["ring:4"],
            "collectives": ["allgather"],
            "algorithms": [{"sccl": {"chunks": 1, "steps": 1}}],  # a 4-ring cannot gather in one step
            "sizes": "1KB",
        }
    )
    batch = study.batches()[0]
    with pytest.raises(SolverError, match="^sccl synthesis: unsat") as raised:
        runner._schedule(batch.machine, batch.collective, batch.algorithm)
    assert isinstance(raised.value, RuntimeError)


def test_the_sweep_engine_raises_sweep_errors(tmp_path):
    from simcoll.sweeps import load_results, load_study, run_study

    with pytest.raises(SweepError, match="no such results directory"):
        load_results(tmp_path / "nowhere")
    with pytest.raises(StudyError) as raised:
        load_study({"name": "x"})
    assert isinstance(raised.value, SweepError)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "part-0.parquet").write_bytes(b"")
    study = {"name": "t", "machines": ["ring:4"], "collectives": ["allgather"], "algorithms": ["ring"], "sizes": "1KB"}
    with pytest.raises(SweepError, match="already holds results"):
        run_study(study, tmp_path / "out", serial=True)


def test_an_incorrect_schedule_is_a_verification_error():
    from simcoll.verify import verify

    algo = generate("ring", "ring:4", "allgather")
    with pytest.raises(VerificationError) as raised:
        verify(algo.with_changes(transfers=algo.transfers[:-1]), "ring:4")
    assert raised.value.problems


def test_native_code_that_cannot_be_built_is_a_build_error(monkeypatch, tmp_path):
    from simcoll import native

    monkeypatch.setattr(native, "compiler", lambda: None)
    with pytest.raises(BuildError, match="no C\\+\\+ compiler"):
        native.build_shared_library("x", tmp_path / "x.cpp", [], what="a test library")


def test_a_plot_of_a_frame_that_lacks_what_it_needs_is_an_option_error():
    import pandas as pd

    from simcoll.sweeps.plots import plot_bandwidth

    with pytest.raises(OptionError, match="metric"):
        plot_bandwidth(pd.DataFrame(), metric="speed")
    with pytest.raises(OptionError, match="no column"):
        plot_bandwidth(pd.DataFrame({"x": [1]}))


# -- the CLI ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "cls", [c for c in _error_classes() if c.__init__ is Exception.__init__], ids=lambda c: c.__name__
)
def test_the_cli_turns_every_error_into_exit_2_and_one_line(cls, monkeypatch, capsys):
    """(A negative answer, an incorrect schedule or an unsat synthesis, is
    exit 1 and no exception.)"""
    import argparse

    def fail(args):
        raise cls("what went wrong")

    def build_parser():  # a command that raises cls
        parser = argparse.ArgumentParser(prog="simcoll")
        parser.set_defaults(func=fail, command="test")
        return parser

    monkeypatch.setattr("simcoll.cli.build_parser", build_parser)
    assert main([]) == 2
    assert capsys.readouterr().err == "simcoll: error: what went wrong\n"


def test_the_cli_exit_2_for_specific_classes(capsys):
    assert main(["compare", "-t", "nope", "-c", "allreduce", "--sizes", "1KB"]) == 2
    assert "unknown topology 'nope'" in capsys.readouterr().err
    assert main(["algo", "generate", "nope", "-t", "ring:4", "-c", "allreduce"]) == 2
    assert "unknown algorithm 'nope'" in capsys.readouterr().err
