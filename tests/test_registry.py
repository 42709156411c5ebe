"""What each registered generator implements is declared once (``@implements``
on its function, read by its registry entry) and that one declaration is what
the generator accepts, what the registry and ``simcoll algo list`` report, and
what a direct call enforces (issue 12 item 5)."""

from __future__ import annotations

import json

import pytest

from simcoll.algorithms import REGISTRY, applicable, generate
from simcoll.algorithms.common import implements
from simcoll.algorithms.registry import Generator
from simcoll.cli import main
from simcoll.collectives import COLLECTIVES, ROOTED, make_collective
from simcoll.errors import NotApplicableError, SimcollError
from simcoll.machines import load_machine
from simcoll.verify import check

# Small machines on which, between them, every generator applies: a flat one,
# a two-node cluster (hierarchical families) and NVSwitch nodes with reducing
# switches (in-network families).
MACHINES = ("fully-connected:4", "ndv2*2", "dgx-h100", "dgx-h100*2")


@pytest.fixture(scope="module")
def machines():
    return {spec: load_machine(spec) for spec in MACHINES}


def _collective(name: str, num_ranks: int):
    return make_collective(name, num_ranks, root=0 if name in ROOTED else None)


@pytest.mark.parametrize("name", list(REGISTRY))
def test_each_declared_collective_builds_a_verified_algorithm_somewhere(name, machines):
    """Nothing is over-declared: every collective an entry lists yields, on
    one of the small machines, an Algorithm of that collective that passes
    verification."""
    entry = REGISTRY[name]
    assert entry.collectives, name
    for coll in entry.collectives:
        reasons = []
        for spec, machine in machines.items():
            try:
                algo = generate(name, machine, coll)
            except NotApplicableError as exc:
                assert "implements" not in str(exc), (name, coll, str(exc))
                reasons.append(f"{spec}: {exc}")
                continue
            assert algo.collective.name == coll
            assert check(algo, machine) == [], (name, coll, spec)
            break
        else:
            pytest.fail(f"{name} declares {coll} but builds it on none of {MACHINES}: {reasons}")


@pytest.mark.parametrize("name", list(REGISTRY))
def test_each_undeclared_collective_is_refused_by_a_direct_call(name, machines):
    """Nothing is under-declared: the generator function, called directly
    (bypassing the registry), refuses every other collective with a
    NotApplicableError naming the algorithm, what it implements and the
    collective asked for."""
    entry = REGISTRY[name]
    function = entry.function
    undeclared = [c for c in COLLECTIVES if c not in entry.collectives]
    for coll in undeclared:
        for machine in machines.values():
            with pytest.raises(NotApplicableError) as info:
                function(machine.topology, _collective(coll, machine.num_ranks))
            message = str(info.value)
            assert message.endswith(f"not {coll}"), message
            assert f"implements {', '.join(entry.collectives)}" in message
            assert message.startswith(f"{name} implements "), message


def test_registry_entry_and_function_carry_one_declaration():
    """The entry's collectives are the function's own declaration object,
    not a second list that could drift."""
    for name, entry in REGISTRY.items():
        assert tuple(entry.collectives) == entry.function.collectives, name
        assert len(set(entry.collectives)) == len(entry.collectives), name
        assert set(entry.collectives) <= set(COLLECTIVES), name


def test_a_second_differing_declaration_is_rejected():
    function = REGISTRY["bruck"].function
    with pytest.raises(SimcollError, match="'bruck' lists .*allreduce.* but its function implements"):
        Generator("bruck", function, ("allgather", "allreduce"), "differs from @implements")


def test_a_rank_count_mismatch_is_refused_in_the_same_place(machines):
    topology = machines["fully-connected:4"].topology
    for name, entry in REGISTRY.items():
        coll = entry.collectives[0]
        with pytest.raises(
            NotApplicableError, match=f"^{name}: the collective has 8 ranks but fully-connected:4 has 4$"
        ):
            entry.function(topology, _collective(coll, 8))


def test_generate_by_name_refuses_an_undeclared_collective():
    with pytest.raises(NotApplicableError, match="^bruck implements allgather, alltoall, not allreduce$"):
        generate("bruck", "fully-connected:4", "allreduce")


def test_applicable_asks_exactly_the_generators_that_declare_the_collective():
    found = applicable("fully-connected:4", "alltoall")
    assert set(found) == {name for name, g in REGISTRY.items() if "alltoall" in g.collectives}


def test_implements_enforces_on_a_new_function():
    @implements("swap", ("allgather", "alltoall"))
    def swap(topology, collective, extra=1):
        return (collective.name, extra)

    topology = load_machine("ring:2").topology
    assert swap.collectives == ("allgather", "alltoall")
    assert swap(topology, make_collective("alltoall", 2), extra=3) == ("alltoall", 3)
    with pytest.raises(NotApplicableError, match="^swap implements allgather, alltoall, not broadcast$"):
        swap(topology, make_collective("broadcast", 2, root=0))


def test_algo_list_shows_the_declaration(capsys):
    assert main(["algo", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {row["name"]: tuple(row["collectives"]) for row in rows} == {
        name: g.function.collectives for name, g in REGISTRY.items()
    }
