"""Fuzzing every importer (issue 14 item 7): mutated schedules (simcoll
Algorithm and Program JSON, SCCL JSON, the MSCCL XML files of
``../shared/interop/``), topology and model YAML, and TACCL sketches either
load or are refused with a :class:`~simcoll.errors.SimcollError` - never
another exception, never a hang - and a mutated schedule that loads is
verified by the independent checker without raising.

Hypothesis runs derandomized (the same inputs on every run, so CI is
deterministic) with ``SIMCOLL_FUZZ_EXAMPLES`` examples per fuzzer (default
200; e.g. ``SIMCOLL_FUZZ_EXAMPLES=5000 pytest tests/test_fuzz_loaders.py``
for a longer hunt). Every example has a 10 s deadline and runs under a 20 s
alarm: a loader that hangs fails the test instead of stalling CI.
"""

from __future__ import annotations

import copy
import json
import math
import os
import signal
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from simcoll.algorithm import Algorithm
from simcoll.algorithms import generate
from simcoll.compiler import lower_algorithm
from simcoll.cost_model import model_from_dict
from simcoll.errors import SimcollError
from simcoll.interop.schedules import parse_schedules
from simcoll.machines import Machine
from simcoll.synthesis.taccl.sketch import sketch_from_dict
from simcoll.topology import topology_from_dict
from simcoll.verify import check

ROOT = Path(__file__).resolve().parents[1]
XML_DIR = ROOT.parent / "shared" / "interop" / "msccl-xml"
EXAMPLES = int(os.environ.get("SIMCOLL_FUZZ_EXAMPLES", "200"))
FUZZ = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=timedelta(seconds=10),  # examples take milliseconds: generous on a loaded CI machine
    database=None,
)
HANG_S = 20

#: Values a mutation puts in place of a field: wrong types, out of range, huge, not a number.
ODD_VALUES = [None, -1, 0, 1, 2**31, 10**30, -(10**30), 1.5, math.nan, math.inf, "", "x", "-1", True, [], {}, [0, -1]]


@contextmanager
def no_hang(what: str):
    """Fail instead of hanging: SIGALRM after HANG_S seconds."""

    def expired(signum, frame):
        raise AssertionError(f"{what}: no answer within {HANG_S} s (a hang)")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(HANG_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path into a JSON/YAML document (dict keys and list indices)."""
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node[:6]):  # a few elements of long lists are enough
            out += _paths(v, (*prefix, i))
        if len(node) > 6:
            out += _paths(node[-1], (*prefix, len(node) - 1))
    return out


def _mutate(doc: Any, data: st.DataObject) -> Any:
    """One to three mutations of ``doc``: delete, replace with an odd value,
    duplicate or truncate a list, or rename a key."""
    doc = copy.deepcopy(doc)
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            return copy.deepcopy(data.draw(st.sampled_from(ODD_VALUES)))
        path = data.draw(st.sampled_from(paths), label="path")
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        key = path[-1]
        action = data.draw(
            st.sampled_from(["delete", "replace", "duplicate", "truncate", "rename", "reference", "retype"]),
            label="action",
        )
        if action == "delete":
            del parent[key]
        elif action == "replace":
            parent[key] = copy.deepcopy(
                data.draw(st.sampled_from(ODD_VALUES), label="value")
            )  # never share the constants
        elif action == "duplicate" and isinstance(parent[key], list) and parent[key]:
            parent[key] = parent[key] + parent[key][:1]
        elif action == "truncate" and isinstance(parent[key], list):
            parent[key] = parent[key][: len(parent[key]) // 2]
        elif action == "rename" and isinstance(parent, dict):
            parent[f"{key}_typo"] = parent.pop(key)
        elif action == "reference" and _is_int(parent[key]):
            # a wrong but plausible reference: another small rank, chunk, step or index
            parent[key] = data.draw(st.integers(-1, 9).filter(lambda v, old=parent[key]: v != old), label="ref")
        elif action == "retype":
            parent[key] = _retyped(parent[key])
    return doc


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _retyped(value: Any) -> Any:
    """The same content in another JSON type: a number as a string, a string or
    number in a list, a list as an object keyed by position, an object as its items."""
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return {str(i): v for i, v in enumerate(value)}
    if isinstance(value, dict):
        return [[k, v] for k, v in value.items()]
    return 0


def _loads_or_refuses(load, text: str, what: str):
    """``load(text)``, or None when refused with a SimcollError; any other exception fails."""
    with no_hang(what):
        try:
            return load(text)
        except SimcollError as exc:
            assert str(exc).strip() and "\n" not in str(exc).strip(), f"{what}: not one line: {exc!r}"
            return None


def _verified_without_raising(schedules, machine: Machine | None = None) -> None:
    """Each schedule goes through :func:`check`; an Algorithm that passes must
    also pass a separate replay (:func:`_replay_problems`): no silently wrong answer."""
    for schedule in schedules:
        with no_hang("verify"):
            try:
                problems = check(schedule, machine)
            except SimcollError:
                continue
        assert isinstance(problems, list)
        if not problems and isinstance(schedule, Algorithm):
            assert _replay_problems(schedule) == [], f"{schedule.name}: verified but wrong"


def _replay_problems(algorithm: Algorithm) -> list[str]:
    """The postcondition of a step Algorithm, checked by a plain replay written
    for this test (independent of simcoll.verify): each (rank, chunk) slot holds
    the set of ranks whose input it sums; a step's sends all read the state
    before the step (SCCL, PPoPP 2021, §3.2); a copy overwrites, a reduction
    adds contributions that must be disjoint."""
    if algorithm.schedule != "steps" or algorithm.switch_reductions:
        return []
    coll = algorithm.collective
    state: dict[tuple[int, int], frozenset[int]] = {}
    for rank, layout in enumerate(coll.input_layout):
        for chunk in layout:
            state[rank, chunk] = frozenset({rank})
    problems: list[str] = []
    by_step: dict[int, list] = {}
    for t in algorithm.transfers:
        by_step.setdefault(t.step, []).append(t)
    for step in sorted(by_step):
        reads = [(t, state.get((t.src, t.chunk))) for t in by_step[step]]
        for t, value in reads:
            if value is None:
                problems.append(f"step {step}: rank {t.src} sends chunk {t.chunk} it does not hold")
            elif t.op == "reduce":
                have = state.get((t.dst, t.chunk))
                if have is None or have & value:
                    problems.append(f"step {step}: bad reduction of chunk {t.chunk} into rank {t.dst}")
                else:
                    state[t.dst, t.chunk] = have | value
            else:
                state[t.dst, t.chunk] = value
    for rank, layout in enumerate(coll.output_layout):
        for chunk in layout:
            value = state.get((rank, chunk))
            if value is None or (coll.combining and value != coll.contributors(chunk)):
                problems.append(f"rank {rank} chunk {chunk}: wrong or missing")
    return problems


# -- schedules ---------------------------------------------------------------------------------
def _algorithm_doc() -> dict:
    return json.loads(generate("ring", "ring:4", "allreduce", chunks=4).to_json())


def _program_doc() -> dict:
    return json.loads(lower_algorithm(generate("ring", "ring:4", "allgather"), machine="ring:4").to_json())


SCCL_DOC = {
    "sccl_type": "algorithm",
    "name": "allgather-ring3",
    "input_map": {"0": [0], "1": [1], "2": [2]},
    "output_map": {"0": [0, 1, 2], "1": [0, 1, 2], "2": [0, 1, 2]},
    "steps": [
        {"rounds": 1, "sends": [[0, 0, 1], [1, 1, 2], [2, 2, 0]]},
        {"rounds": 1, "sends": [[2, 0, 1], [0, 1, 2], [1, 2, 0]]},
    ],
}


@pytest.mark.parametrize(
    "make_doc", [_algorithm_doc, _program_doc, lambda: SCCL_DOC], ids=["algorithm", "program", "sccl"]
)
@FUZZ
@given(data=st.data())
def test_mutated_json_schedules_load_or_are_refused(make_doc, data):
    text = json.dumps(_mutate(make_doc(), data))
    schedules = _loads_or_refuses(lambda t: parse_schedules(t, "fuzz.json"), text, "schedule JSON")
    if schedules is not None:
        _verified_without_raising(schedules)


def _xml_files() -> list[Path]:
    return sorted(XML_DIR.glob("*.xml")) if XML_DIR.is_dir() else []


@pytest.mark.skipif(not XML_DIR.is_dir(), reason="../shared/interop/msccl-xml is absent")
@FUZZ
@given(data=st.data())
def test_mutated_msccl_xml_loads_or_is_refused(data):
    path = data.draw(st.sampled_from(_xml_files()), label="file")
    text = path.read_text()
    action = data.draw(st.sampled_from(["truncate", "attribute", "delete", "insert"]), label="action")
    if action == "truncate":
        text = text[: data.draw(st.integers(0, len(text) - 1), label="at")]
    elif action == "attribute":
        # a random attribute's value replaced: a wrong but in-range reference (rank, thread block, step,
        # buffer index), out of range, negative, not a number
        quotes = [i for i, ch in enumerate(text) if ch == '"']
        k = data.draw(st.integers(0, len(quotes) // 2 - 1), label="attr")
        start, end = quotes[2 * k], quotes[2 * k + 1]
        values = ["-1", "0", "1", "2", "3", "7", "99999", "x", "", "1.5", "-99999", "nan", "inf", "1e400"]
        value = data.draw(st.sampled_from(values), label="value")
        text = text[: start + 1] + value + text[end:]
    elif action == "delete":
        at = data.draw(st.integers(0, len(text) - 1), label="at")
        text = text[:at] + text[at + data.draw(st.integers(1, 200), label="n") :]
    else:
        at = data.draw(st.integers(0, len(text)), label="at")
        text = text[:at] + data.draw(st.text(min_size=1, max_size=20), label="junk") + text[at:]
    schedules = _loads_or_refuses(lambda t: parse_schedules(t, path.name), text, path.name)
    if schedules is not None:
        _verified_without_raising(schedules)


@FUZZ
@given(data=st.binary(max_size=300))
def test_random_bytes_are_refused_as_a_schedule(data):
    text = data.decode("utf-8", errors="replace")
    assert _loads_or_refuses(lambda t: parse_schedules(t, "junk"), text, "junk bytes") is None or text.strip()


# -- topologies, models, sketches ----------------------------------------------------------------
def _yaml_docs(folder: str) -> list[dict]:
    return [yaml.safe_load(p.read_text()) for p in sorted((ROOT / folder).glob("*.yaml"))]


TOPOLOGIES = _yaml_docs("topologies")
MODELS = _yaml_docs("models")
SKETCHES = [json.loads(p.read_text()) for p in sorted((ROOT / "sketches").glob("*.json"))]


@FUZZ
@given(data=st.data())
def test_mutated_topology_yaml_loads_or_is_refused(data):
    doc = _mutate(data.draw(st.sampled_from(TOPOLOGIES), label="topology"), data)
    text = yaml.safe_dump(doc)
    topology = _loads_or_refuses(lambda t: topology_from_dict(yaml.safe_load(t), "fuzz.yaml"), text, "topology")
    if topology is not None:
        assert topology.num_ranks >= 1
        assert all(0 <= r < topology.num_ranks for r in range(topology.num_ranks))


@FUZZ
@given(data=st.data())
def test_mutated_model_yaml_loads_or_is_refused(data):
    doc = _mutate(data.draw(st.sampled_from(MODELS), label="model"), data)
    model = _loads_or_refuses(lambda t: model_from_dict(yaml.safe_load(t), "fuzz.yaml"), yaml.safe_dump(doc), "model")
    if model is not None:
        for name in model.links:
            link = model.link(name)
            # a model that loads has usable numbers: finite, positive rates and non-negative latencies
            assert math.isfinite(link.bandwidth_Bps) and link.bandwidth_Bps > 0
            assert math.isfinite(link.alpha_s) and link.alpha_s >= 0


@FUZZ
@given(data=st.data())
def test_mutated_taccl_sketch_loads_or_is_refused(data):
    doc = _mutate(data.draw(st.sampled_from(SKETCHES), label="sketch"), data)
    _loads_or_refuses(lambda t: sketch_from_dict(json.loads(t), "fuzz-sketch.json"), json.dumps(doc), "sketch")


def test_the_replay_oracle_accepts_a_correct_schedule_and_catches_a_missing_transfer():
    algorithm = generate("ring", "ring:4", "allreduce", chunks=4)
    assert _replay_problems(algorithm) == []
    doc = json.loads(algorithm.to_json())
    del doc["transfers"][-1]
    (broken,) = parse_schedules(json.dumps(doc), "broken.json")
    assert _replay_problems(broken) and check(broken)


def test_a_topology_whose_links_are_not_a_list_is_refused_naming_the_field():
    # found by the topology fuzzer: ``links: -1`` beside ``gpus`` raised TypeError in the size check
    with pytest.raises(SimcollError, match=r"fuzz\.yaml: field 'links' must be a list"):
        topology_from_dict({"name": "t", "gpus": 2, "links": -1}, "fuzz.yaml")


def test_a_program_executor_channel_that_is_not_an_integer_is_refused_naming_file_and_executor():
    # found by the Program JSON fuzzer: ``"channel": []`` loaded and then raised TypeError in the verifier
    doc = _program_doc()
    doc["ranks"][1]["executors"][1]["channel"] = []
    with pytest.raises(SimcollError, match=r"^p\.json: .*rank 1 executor \d+: channel must be a non-negative integer"):
        parse_schedules(json.dumps(doc), "p.json")


def _workload_docs() -> list[dict]:
    """A small listed workload that checks (compute, a collective, a send, streams, deps) and a generated one."""

    def rank(me: int, peer: int) -> list[dict]:
        move = {"op": "send" if me == 0 else "recv", "name": "act", "peer": peer, "size_bytes": "1MiB"}
        return [
            {"op": "compute", "name": "fwd", "duration_s": 1.0e-3},
            {**move, "deps": ["fwd"], "stream": "p2p"},
            {"op": "compute", "name": "bwd", "flops": 2.0e12, "efficiency": 0.5, "deps": ["act"]},
            {"op": "collective", "name": "grads", "collective": "allreduce", "group": "all", "size_bytes": 25e6,
             "deps": ["bwd"], "stream": "dp", "schedule": "ring"},
        ]  # fmt: skip

    listed = {"name": "toy", "samples_per_step": 64, "nccl": "2.18", "groups": {"all": [0, 1]},
              "ranks": [rank(0, 1), rank(1, 0)]}  # fmt: skip
    generated = {"generate": "transformer", "options": {"model": "bert-large", "tp": 1, "pp": 2, "micro_batches": 1}}
    return [listed, generated]


WORKLOADS = _workload_docs()


def test_the_workloads_the_fuzzer_mutates_check_as_they_are():
    from simcoll.workload import check_workload, workload_from_dict

    for doc in WORKLOADS:
        check_workload(workload_from_dict(doc, "base.yaml"))


@FUZZ
@given(data=st.data())
def test_mutated_workload_loads_or_is_refused(data):
    from simcoll.workload import check_workload, workload_from_dict

    doc = _mutate(data.draw(st.sampled_from(WORKLOADS), label="workload"), data)

    def load(text):
        workload = workload_from_dict(yaml.safe_load(text), "fuzz-workload.yaml")
        check_workload(workload, 64)
        return workload

    _loads_or_refuses(load, yaml.safe_dump(doc), "workload")
