"""Issue 15: the machine a parallel comparison's fork server prepares once.

Claims: preparing a machine (its bandwidth relation and the routes of its
first node's pairs, worked out ahead) changes no generated schedule and no
simulated time; a worker takes the prepared machine only for the token it
was prepared under, and a fork server whose machine file cannot be read
prepares nothing (its workers use their own copies).
"""

from __future__ import annotations

import pickle

import pytest

from simcoll import load_machine, worker_machine
from simcoll.algorithms import generate
from simcoll.simulator import simulate
from simcoll.simulator.routing import route_caches

ALGORITHMS = ["ring", "double-binary-tree", "direct", "nccl-ring", "nvls-tree"]


def test_a_prepared_machine_gives_the_same_schedules_and_times():
    prepared, plain = load_machine("dgx-h100*2"), load_machine("dgx-h100*2")
    worker_machine.prepare(prepared, contention=True)
    g, p = 8, prepared.num_ranks
    routes = route_caches(prepared).recipes[True]
    assert {pair for pair in routes if pair[0] < g} == {(s, d) for s in range(g) for d in range(p) if s != d}
    for name in ALGORITHMS:
        a, b = generate(name, prepared, "allreduce"), generate(name, plain, "allreduce")
        assert a.rounds_per_step == b.rounds_per_step
        for size in (1 << 20, 1 << 28):
            ta = simulate(a, prepared, size, verify=False).time_s
            tb = simulate(b, plain, size, verify=False).time_s
            assert ta == tb, (name, size)


def test_a_worker_takes_the_prepared_machine_for_its_token_only(tmp_path, monkeypatch):
    machine = load_machine("dgx-h100*2")
    path = tmp_path / "machine.pickle"
    token = worker_machine.write_for_server(machine, True, path)
    assert token == worker_machine.token_of(machine, True) != worker_machine.token_of(machine, False)
    monkeypatch.setattr(worker_machine, "_PREPARED", None)
    monkeypatch.setenv(worker_machine.ENV_VAR, str(path))
    worker_machine._prepare_from_environment()  # what the fork server's import does
    own = load_machine("dgx-h100*2")
    prepared = worker_machine.machine_for(token, own)
    assert prepared is not own and prepared.name == own.name
    assert route_caches(prepared).recipes[True]
    assert worker_machine.machine_for(worker_machine.token_of(own, False), own) is own


@pytest.mark.parametrize("content", [b"", b"not a pickle", pickle.dumps("no machine")])
def test_a_server_that_cannot_read_its_machine_prepares_none(tmp_path, monkeypatch, content):
    path = tmp_path / "machine.pickle"
    path.write_bytes(content)
    monkeypatch.setattr(worker_machine, "_PREPARED", None)
    monkeypatch.setenv(worker_machine.ENV_VAR, str(path))
    worker_machine._prepare_from_environment()
    machine = load_machine("ring:4")
    assert worker_machine.machine_for(worker_machine.token_of(machine, True), machine) is machine
