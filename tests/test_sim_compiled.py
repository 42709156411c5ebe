"""The compiled event core (:mod:`simcoll.simulator.fast.compiled`) is Algorithm
mode's Python handlers transcribed into C++: on every kind of schedule and
machine it gives the same times, timeline rows and network counters, bit for
bit, and it stops at the wall-clock limit as the Python loop does."""

from __future__ import annotations

import dataclasses

import pytest

from simcoll import load_machine, load_topology
from simcoll.algorithms import generate
from simcoll.errors import TimeLimitError
from simcoll.machines import Machine
from simcoll.native import compiler
from simcoll.simulator import simulate
from simcoll.simulator.fast import algorithm_mode, compiled

pytestmark = pytest.mark.skipif(compiler() is None, reason="no C++ compiler")

SIZES = (1 << 16, 1 << 28)
COUNTERS = ("transfers", "max_sharing", "recomputes", "recomputes_remembered", "handovers", "events", "messages")


def _both(monkeypatch, algorithm, machine, size, **options):
    """The Python handlers' result and the compiled core's, both without a utilisation record."""
    results = []
    for on in (False, True):
        monkeypatch.setattr(compiled, "ENABLED", on)
        result = simulate(algorithm, machine, size, record_utilisation=False, verify=False, **options)
        assert result.stats["compiled"] is on
        results.append(result)
    return results


def _assert_same(python, native):
    assert native.time_s == python.time_s
    assert native.timeline.equals(python.timeline)  # every message's start, arrival and end
    assert {k: native.stats[k] for k in COUNTERS} == {k: python.stats[k] for k in COUNTERS}


@pytest.mark.parametrize(
    ("topo", "coll", "name"),
    [
        ("dgx-h100*2", "allreduce", "double-binary-tree"),  # shared pairs: sharing, handovers, remembered patterns
        ("dgx-h100*2", "allreduce", "chain"),  # private and shared pairs together
        ("dgx-h100*4", "allreduce", "ring"),  # the node rotation's quotient
        ("dgx-h100*2", "allreduce", "nvls-tree"),  # in-switch reductions updating several ranks
        ("dgx-h100*2", "allreduce", "collnet"),
        ("dgx-h100*2", "alltoall", "two-step-alltoall"),  # contiguity groups
        ("dgx-h100*4", "alltoall", "direct"),  # components of hundreds of flows (the vectorised max-min)
        ("dgx2", "alltoall", "direct"),
        ("ndv2*2", "allreduce", "hiccl"),  # host staging through the CPU
        ("dgx-a100*2", "allreduce", "nccl-tree"),  # fused reductions, NIC binding
        ("dgx1", "allgather", "ring"),
        ("perlmutter*2", "reducescatter", "hiccl"),
    ],
)
def test_the_compiled_core_times_every_message_as_the_python_handlers(monkeypatch, topo, coll, name):
    machine = load_machine(topo)
    algorithm = generate(name, machine, coll)
    for size in SIZES:
        _assert_same(*_both(monkeypatch, algorithm, machine, size))


def test_protocols_and_the_ideal_network_too(monkeypatch):
    machine = load_machine("dgx-h100*2")
    algorithm = generate("double-binary-tree", machine, "allreduce")
    _assert_same(*_both(monkeypatch, algorithm, machine, 1 << 20, protocol="LL"))
    _assert_same(*_both(monkeypatch, algorithm, machine, 1 << 20, contention=False))


def test_switch_ports_that_slow_down_with_their_connections_too(monkeypatch):
    """TACCL Fig. 4's concurrency efficiency: a port's capacity depends on
    how many flows it carries, read from a table in the core."""
    machine = load_machine("dgx2")
    model = machine.model
    crowded = dataclasses.replace(model.switches["nvswitch"], concurrency_efficiency=((1, 1.0), (3, 0.7), (6, 0.55)))
    machine = Machine(
        load_topology("dgx2"), dataclasses.replace(model, switches={**model.switches, "nvswitch": crowded})
    )
    for name, coll in (("direct", "alltoall"), ("double-binary-tree", "allreduce")):
        algorithm = generate(name, machine, coll)
        python, native = _both(monkeypatch, algorithm, machine, 1 << 24)
        _assert_same(python, native)
    assert python.time_s != simulate(algorithm, load_machine("dgx2"), 1 << 24).time_s  # the table mattered


def test_the_compiled_core_stops_at_the_wall_clock_limit(monkeypatch):
    machine = load_machine("dgx-h100*2")
    algorithm = generate("double-binary-tree", machine, "allreduce")
    monkeypatch.setattr(compiled, "ENABLED", True)
    run = algorithm_mode._Run(algorithm, machine, 1 << 20, contention=True, record_utilisation=False)
    assert compiled.applies(run)
    run.time_limit_s = 0.0  # (simulate refuses a limit that is not positive: the run is built by hand)
    with pytest.raises(TimeLimitError, match="wall-clock limit of 0 s reached at simulated time"):
        run.run()


def test_a_utilisation_record_keeps_the_python_handlers(monkeypatch):
    monkeypatch.setattr(compiled, "ENABLED", True)
    machine = load_machine("dgx-h100*2")
    algorithm = generate("double-binary-tree", machine, "allreduce")
    assert not simulate(algorithm, machine, 1 << 20).stats["compiled"]
    assert simulate(algorithm, machine, 1 << 20, record_utilisation=False).stats["compiled"]


def test_ctrl_c_is_caught_in_the_core_only_where_python_would_raise_keyboard_interrupt():
    """The core stops at Ctrl-C in place of Python's default handler (which
    cannot run during the call); an ignored or custom SIGINT, or a run in
    another thread, is left to Python."""
    import signal
    import threading

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert compiled._interrupt_raises()
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        assert not compiled._interrupt_raises()
    finally:
        signal.signal(signal.SIGINT, previous)
    seen = []
    worker = threading.Thread(target=lambda: seen.append(compiled._interrupt_raises()))
    worker.start()
    worker.join()
    assert seen == [False]


def test_libraries_are_built_in_a_directory_of_the_users_own(tmp_path, monkeypatch):
    """A library is loaded into the process: the cache directory is the
    user's, mode 0700, and one others may write to is refused."""
    import os
    import tempfile

    from simcoll import native
    from simcoll.errors import SimcollError

    if not hasattr(os, "getuid"):
        pytest.skip("POSIX ownership")
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    folder = native._cache_dir()
    assert folder.stat().st_mode & 0o777 == 0o700 and folder.stat().st_uid == os.getuid()
    folder.chmod(0o777)
    with pytest.raises(SimcollError, match="others may write"):
        native._cache_dir()
