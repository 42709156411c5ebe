"""Workloads (simcoll.workload): checking, running a step, generating the papers' jobs, files and CLI.

What a user expects: a collective alone in a step takes what `simulate`
gives it; communication that overlaps compute is not exposed; ranks that
issue their calls in different orders stop with a sentence, not a hang;
the generators' networks have their published sizes; bad workloads are
refused in one line.
"""

from __future__ import annotations

import json
import math

import pytest

from simcoll import load_machine
from simcoll.cli import main
from simcoll.errors import SimulationError, WorkloadError
from simcoll.nccl.baseline import nccl_algorithm
from simcoll.simulator import simulate
from simcoll.workload import (
    CollectiveOp,
    Compute,
    Recv,
    Send,
    Workload,
    check_workload,
    data_parallel,
    load_workload,
    network_layers,
    run_workload,
    save_workload,
    transformer,
    workload_from_dict,
)
from simcoll.workload.generators import DDP_BUCKET_BYTES, DDP_FIRST_BUCKET_BYTES, _buckets
from simcoll.workload.run import group_topology


def _same_on_every_rank(ranks: int, *ops, groups=None) -> Workload:
    return Workload("w", tuple(tuple(ops) for _ in range(ranks)), groups or {"all": tuple(range(ranks))})


# -- checking -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "programs,groups,message",
    [
        (((Compute("a", 1e-3, deps=("b",)), Compute("b", 1e-3, deps=("a",))),), {}, "in a cycle"),
        (((Compute("a", 1e-3, deps=("zz",)),),), {}, "depends on 'zz', which is no operation"),
        (((Compute("a", 1e-3), Compute("a", 1e-3)),), {}, "used twice"),
        (((Compute("a"),),), {}, "give duration_s, or flops"),
        (((Compute("a", 1e-3, efficiency=1.5),),), {}, "efficiency is a fraction"),
        (((CollectiveOp("c", "allreduce", "g", 8),), ()), {"g": (0, 5)}, "rank 5 is outside"),
        (((CollectiveOp("c", "allreduce", "nope", 8),), ()), {"g": (0, 1)}, "unknown group 'nope'"),
        (
            ((CollectiveOp("c", "allreduce", "g", 8),), (CollectiveOp("c", "allreduce", "g", 8),)),
            {"g": (0,)},
            "rank 1 is not in group 'g'",
        ),
        (
            ((CollectiveOp("c", "allreduce", "g", 8),), (CollectiveOp("c", "allreduce", "g", 16),)),
            {"g": (0, 1)},
            "has size_bytes 8 but rank 1",
        ),
        (
            ((CollectiveOp("c", "allreduce", "g", 8),), ()),
            {"g": (0, 1)},
            "rank 0 issues 1 collectives on it but rank 1 issues 0",
        ),
        (((Send("s", 1, 8),), ()), {}, "sends 1 messages to rank 1 but rank 1 receives 0"),
        (((Send("s", 1, 8),), (Recv("r", 0, 16),)), {}, "expects 16"),
        (((Send("s", 0, 8),), ()), {}, "peer must be another rank"),
    ],
)
def test_bad_workloads_are_refused_naming_the_fault(programs, groups, message):
    with pytest.raises(WorkloadError, match=message):
        check_workload(Workload("bad", programs, groups))


def test_a_workload_larger_than_the_machine_is_refused():
    with pytest.raises(WorkloadError, match="has 16 ranks but the machine has 8"):
        run_workload(_same_on_every_rank(16, Compute("a", 1e-3)), "dgx1")


def test_calls_are_matched_in_issue_order_per_group():
    ops = (CollectiveOp("x", "allreduce", "all", 8), CollectiveOp("y", "allgather", "all", 16))
    matching = check_workload(_same_on_every_rank(2, *ops))
    assert matching.calls == {("all", 0): ((0, 0), (1, 0)), ("all", 1): ((0, 1), (1, 1))}


# -- running a step ---------------------------------------------------------------------------------------
def test_a_collective_after_compute_takes_its_solo_time():
    size = 64 << 20
    workload = _same_on_every_rank(8, Compute("fwd", 1e-3), CollectiveOp("ar", "allreduce", "all", size, deps=("fwd",)))
    result = run_workload(workload, "dgx-h100")
    machine = load_machine("dgx-h100").with_launch("processes")
    alone = simulate(nccl_algorithm(machine, "allreduce", size), machine, size, verify=False).time_s
    assert result.step_time_s == pytest.approx(1e-3 + alone, rel=1e-9)
    assert result.stats["launch"] == "processes"
    (row,) = result.communication()
    assert row["busy_s"] == pytest.approx(alone, rel=1e-9) and row["exposed_s"] == pytest.approx(alone, rel=1e-9)


def test_groups_on_different_nodes_run_side_by_side_at_their_solo_times():
    # the same 8 GPUs of each node: one schedule built once, its NVLink SHARP switches moved to each node
    size = 256 << 20
    machine = load_machine("dgx-h100*2")
    groups = {"node0": tuple(range(8)), "node1": tuple(range(8, 16))}
    programs = tuple((CollectiveOp("ar", "allreduce", f"node{r // 8}", size),) for r in range(16))
    result = run_workload(Workload("tp", programs, groups), machine)
    group_machine = load_machine(group_topology(machine.topology, groups["node1"]), machine.model.name)
    group_machine = group_machine.with_launch("processes")
    algorithm = nccl_algorithm(group_machine, "allreduce", size)
    assert algorithm.switch_reductions  # NVLS: reduced in the node's switches
    alone = simulate(algorithm, group_machine, size, verify=False).time_s
    ends = result.timeline.groupby("group")["end_s"].max()
    assert ends.to_list() == pytest.approx([alone, alone], rel=1e-9)


def test_communication_under_compute_is_not_exposed():
    size = 64 << 20
    base = (Compute("fwd", 1e-3), CollectiveOp("ar", "allreduce", "all", size, deps=("fwd",)))
    hidden = run_workload(_same_on_every_rank(8, *base, Compute("more", 5e-3)), "dgx-h100")
    (row,) = hidden.communication()
    assert row["exposed_s"] == pytest.approx(0.0, abs=1e-12) and row["busy_s"] > 0
    assert hidden.step_time_s == pytest.approx(6e-3, rel=1e-12)
    # on the compute stream the collective would wait for it: all of it exposed after 6 ms
    exposed = run_workload(_same_on_every_rank(8, base[0], Compute("more", 5e-3), CollectiveOp(
        "ar", "allreduce", "all", size, deps=("more",))), "dgx-h100")  # fmt: skip
    assert exposed.step_time_s == pytest.approx(6e-3 + row["busy_s"], rel=1e-9)
    assert exposed.exposed_communication_s() == pytest.approx(row["busy_s"], rel=1e-9)


def test_ranks_that_disagree_on_the_order_of_their_calls_stop_with_a_sentence():
    groups = {"a": (0, 1), "b": (0, 1)}
    first = (CollectiveOp("x", "allreduce", "a", 1 << 20), CollectiveOp("y", "allreduce", "b", 1 << 20))
    workload = Workload("crossed", (first, first[::-1]), groups)
    with pytest.raises(SimulationError, match="stalled .* rank 0 waits in collective 'x' on group 'a' for rank"):
        run_workload(workload, "dgx-h100")


def test_a_send_joins_two_ranks_compute():
    size = 25e6
    programs = (
        (Compute("fwd", 1e-3), Send("act", 1, size, deps=("fwd",))),
        (Recv("act", 0, size), Compute("fwd", 1e-3, deps=("act",))),
    )
    result = run_workload(Workload("pipe", programs), "ring:4")
    # the generic model has no protocol costs: α + 25 MB / 25 GB/s between the two kernels
    assert result.step_time_s == pytest.approx(2e-3 + 0.7e-6 + size / 25e9, rel=1e-12)


def test_compute_by_work_takes_its_roofline_time():
    flops = 2e12
    result = run_workload(_same_on_every_rank(1, Compute("mm", flops=flops, memory_bytes=1e9, efficiency=0.5)),
                          "dgx-h100")  # fmt: skip
    assert result.step_time_s == pytest.approx(max(flops / 989e12, 1e9 / 3.35e12) / 0.5, rel=1e-12)
    with pytest.raises(WorkloadError, match="has no 'gpu' section"):
        run_workload(_same_on_every_rank(1, Compute("mm", flops=flops)), "ring:4")


def test_both_engines_give_one_step_time():
    workload = transformer("bert-large", tp=2, pp=2, dp=2, micro_batches=2)
    fast = run_workload(workload, "dgx1", time_limit_s=120)
    reference = run_workload(workload, "dgx1", engine="reference", time_limit_s=120)
    assert fast.step_time_s == pytest.approx(reference.step_time_s, rel=1e-9)


# -- generators -------------------------------------------------------------------------------------------
def test_networks_have_their_published_sizes():
    resnet = network_layers("resnet50")
    assert sum(layer.params for layer in resnet) == pytest.approx(25.56e6, rel=1e-3)  # He et al. 2016 (torchvision)
    assert sum(layer.forward_flops for layer in resnet) / 2 == pytest.approx(4.1e9, rel=0.02)  # Table 1: 3.8-4.1 G
    gpt3 = network_layers("gpt3-175b")
    assert sum(layer.params for layer in gpt3) == pytest.approx(175e9, rel=0.01)  # Brown et al. 2020, Table 2.1
    bert = network_layers("bert-large")
    assert sum(layer.params for layer in bert) == pytest.approx(335e6, rel=0.03)  # Devlin et al.: 340 M


def test_ddp_buckets_follow_pytorch():
    layers = network_layers("resnet50")
    buckets = _buckets(layers, 4, DDP_BUCKET_BYTES, DDP_FIRST_BUCKET_BYTES)
    sizes = [size for _, size in buckets]
    assert sum(sizes) == pytest.approx(4 * sum(layer.params for layer in layers))
    assert sizes[0] >= DDP_FIRST_BUCKET_BYTES and all(s >= DDP_BUCKET_BYTES for s in sizes[1:-1])
    assert buckets[0][0] == "fc"  # the first bucket closes on the last layer's gradients


def test_data_parallel_overlaps_gradient_reduction_with_the_backward_pass():
    result = run_workload(data_parallel("resnet50", ranks=8, batch_per_gpu=64, compute_efficiency=0.3), "dgx1")
    (row,) = result.communication()
    assert row["group"] == "dp" and row["calls"] == 5
    assert 0 < row["exposed_s"] < row["busy_s"]  # all but the last bucket hide behind the backward pass
    assert result.throughput_per_s == pytest.approx(8 * 64 / result.step_time_s)


def test_megatron_layout_and_counts():
    tp, pp, dp, micro = 2, 2, 2, 3
    workload = transformer("bert-large", tp=tp, pp=pp, dp=dp, micro_batches=micro)
    matching = check_workload(workload)
    assert workload.groups["tp.d1.p1"] == (6, 7) and workload.groups["dp.t0.p1"] == (4, 6)
    layers = 24 // pp
    tp_calls = sum(1 for (group, _) in matching.calls if group.startswith("tp."))
    assert tp_calls == pp * dp * micro * layers * 4  # two Allreduces forward, two backward (Shoeybi et al. §3)
    assert len(matching.sends) == tp * dp * (pp - 1) * micro * 2  # activations forward, gradients back
    result = run_workload(workload, "dgx-h100")
    assert math.isfinite(result.step_time_s) and result.samples_per_step == dp * micro


def test_stages_must_split_the_layers_evenly():
    with pytest.raises(WorkloadError, match="do not split into 5 equal stages"):
        transformer("bert-large", tp=1, pp=5)


# -- files and the command line ---------------------------------------------------------------------------
def test_a_saved_workload_reads_back_the_same(tmp_path):
    workload = transformer("bert-large", tp=2, pp=2, dp=1, micro_batches=2)
    for name in ("w.yaml", "w.json"):
        save_workload(workload, tmp_path / name)
        assert load_workload(tmp_path / name) == workload


def test_a_file_may_name_a_generator_and_sizes_in_units():
    generated = workload_from_dict({"generate": "data-parallel", "options": {"ranks": 4}})
    assert generated == data_parallel(ranks=4)
    listed = workload_from_dict({"groups": {"g": [0, 1]}, "ranks": [
        [{"op": "collective", "name": "c", "collective": "allreduce", "group": "g", "size_bytes": "1MiB"}]] * 2})  # fmt: skip
    assert listed.programs[0][0].size_bytes == 1 << 20
    with pytest.raises(WorkloadError, match="unknown op 'kernel'"):
        workload_from_dict({"ranks": [[{"op": "kernel", "name": "k"}]]})


def test_cli_generates_and_runs_a_workload(tmp_path, capsys):
    path = tmp_path / "w.yaml"
    assert main(["workload", "generate", "data-parallel", "--option", "ranks=8", "--option", "batch_per_gpu=32",
                 "-o", str(path)]) == 0  # fmt: skip
    capsys.readouterr()
    trace = tmp_path / "t.json"
    assert main(["workload", "run", str(path), "-t", "dgx1", "--json", "--trace", str(trace)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["launch"] == "processes" and summary["step_time_s"] > 0 and summary["ranks"] == 8
    assert {e["pid"] for e in json.loads(trace.read_text())["traceEvents"]} == set(range(8))


def test_cli_refuses_a_bad_workload_in_one_line(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("ranks:\n  - - {op: compute, name: a, deps: [b]}\n")
    assert main(["workload", "run", str(path), "-t", "dgx1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "give duration_s" in err


# -- Chakra execution traces ------------------------------------------------------------------------------
def _field(number: int, wire: int, payload: bytes) -> bytes:
    """One protobuf field, encoded by hand from the public schema's numbers (et_def.proto)."""
    from simcoll.workload.chakra import _varint

    return _varint(number << 3 | wire) + payload


def _varint_field(number: int, value: int) -> bytes:
    from simcoll.workload.chakra import _varint

    return _field(number, 0, _varint(value))


def _bytes_field(number: int, data: bytes) -> bytes:
    from simcoll.workload.chakra import _varint

    return _field(number, 2, _varint(len(data)) + data)


def _attr(name: str, int64: int | None = None, string: str | None = None) -> bytes:
    body = _bytes_field(1, name.encode())  # AttributeProto.name = 1
    body += _varint_field(9, int64) if int64 is not None else _bytes_field(29, string.encode())  # int64_val, string_val
    return _bytes_field(10, body)  # Node.attr = 10


def _hand_made_trace(directory, ranks: int, size: int) -> None:
    from simcoll.workload.chakra import _varint

    for rank in range(ranks):
        metadata = _bytes_field(1, b"0.0.4")  # GlobalMetadata.version = 1
        compute = _varint_field(1, 1) + _bytes_field(2, b"fwd") + _varint_field(3, 4) + _varint_field(7, 1000)
        coll = _varint_field(1, 2) + _bytes_field(2, b"grads") + _varint_field(3, 7) + _bytes_field(5, _varint(1))
        coll += _attr("comm_type", int64=0) + _attr("comm_size", int64=size) + _attr("pg_name", string="0")
        data = b"".join(_varint(len(m)) + m for m in (metadata, compute, coll))
        (directory / f"job.{rank}.et").write_bytes(data)
    (directory / "groups.json").write_text(json.dumps({"0": list(range(ranks))}))


def test_a_chakra_trace_made_from_the_public_schema_imports_and_runs(tmp_path):
    size = 64 << 20
    _hand_made_trace(tmp_path, 8, size)
    from simcoll.workload import load_chakra

    workload = load_chakra(tmp_path / "job", tmp_path / "groups.json")
    assert [op.kind for op in workload.programs[3]] == ["compute", "collective"]
    assert workload.programs[3][1].deps == ("1:fwd",) and workload.groups == {"0": tuple(range(8))}
    result = run_workload(workload, "dgx-h100")
    machine = load_machine("dgx-h100").with_launch("processes")
    alone = simulate(nccl_algorithm(machine, "allreduce", size), machine, size, verify=False).time_s
    assert result.step_time_s == pytest.approx(1e-3 + alone, rel=1e-9)  # 1,000 us, then the Allreduce


def test_a_workload_goes_out_as_chakra_and_comes_back_the_same(tmp_path):
    from simcoll.workload import load_chakra, save_chakra

    workload = transformer("bert-large", tp=2, pp=2, dp=2, micro_batches=2)
    save_chakra(workload, tmp_path)
    back = load_chakra(tmp_path)
    assert back.num_ops == workload.num_ops and back.samples_per_step == workload.samples_per_step
    assert run_workload(back, "dgx-h100").step_time_s == pytest.approx(run_workload(workload, "dgx-h100").step_time_s,
                                                                       rel=1e-12)  # fmt: skip


def test_bad_chakra_traces_are_refused(tmp_path):
    from simcoll.workload import load_chakra

    _hand_made_trace(tmp_path, 2, 1 << 20)
    with pytest.raises(WorkloadError, match="process group '0' is not in the groups given"):
        load_chakra(tmp_path / "job", {})
    (tmp_path / "job.1.et").rename(tmp_path / "job.3.et")
    with pytest.raises(WorkloadError, match="no trace file for rank 1"):
        load_chakra(tmp_path / "job", tmp_path / "groups.json")
    (tmp_path / "job.3.et").unlink()
    (tmp_path / "job.1.et").write_bytes(b"\xff\xff\xff")
    with pytest.raises(WorkloadError, match="truncated or corrupt"):
        load_chakra(tmp_path / "job", tmp_path / "groups.json")


def test_expert_layers_move_their_tokens_by_alltoall_and_keep_their_gradients():
    tp, pp, dp, micro = 2, 2, 4, 2
    dense = transformer("bert-large", tp=tp, pp=pp, dp=dp, micro_batches=micro)
    moe = transformer("bert-large", tp=tp, pp=pp, dp=dp, micro_batches=micro, experts=dp, capacity_factor=1.25)
    matching = check_workload(moe)
    layers_per_stage = 24 // pp
    alltoalls = [k for k in matching.calls if moe.programs[matching.calls[k][0][0]][matching.calls[k][0][1]].collective == "alltoall"]  # fmt: skip
    # every other layer an expert layer: two Alltoalls forward, two backward (GShard §2.2), per micro-batch
    assert len(alltoalls) == tp * pp * micro * (layers_per_stage // 2) * 4
    first = next(op for op in moe.programs[0] if op.kind == "collective" and op.collective == "alltoall")
    assert first.size_bytes == 1 * 512 * 1024 * 2 * 1.25 and first.group == "dp.t0.p0"

    def reduced(workload):
        return sum(op.size_bytes for op in workload.programs[0] if op.kind == "collective" and ".grads" in op.name)

    bert = network_layers("bert-large")[1]
    expert_grads = (layers_per_stage // 2) * bert.mlp_params / tp * 4  # FP32 gradients no other rank holds
    assert reduced(dense) - reduced(moe) == pytest.approx(expert_grads)
    with pytest.raises(WorkloadError, match="experts must be 1"):
        transformer("bert-large", tp=1, pp=1, dp=4, experts=2)
    assert run_workload(moe, "dgx-h100*2").step_time_s > 0


def test_cli_options_keep_text_where_the_generator_takes_text(tmp_path):
    path = tmp_path / "w.yaml"
    assert main(["workload", "generate", "data-parallel", "--option", "nccl=2.30", "--option", "ranks=2",
                 "--option", "bucket_bytes=25MiB", "-o", str(path)]) == 0  # fmt: skip
    workload = load_workload(path)
    assert workload.nccl == "2.30" and workload.num_ranks == 2  # a release, not the number 2.3
    assert main(["workload", "generate", "nope", "-o", str(path)]) == 2


# -- W5: calls that never meet ------------------------------------------------------------------------------
@pytest.mark.parametrize("spec,ranks", [("dgx1", 8), ("dgx-h100*2", 16), ("dgx-h100*2", 8)])
def test_a_step_whose_calls_never_meet_is_timed_from_their_times_alone(spec, ranks):
    step = data_parallel("resnet50", ranks=ranks, batch_per_gpu=64, compute_efficiency=0.3)
    quick, shared = run_workload(step, spec), run_workload(step, spec, alone_first=False)
    assert (quick.stats["path"], shared.stats["path"]) == ("calls alone", "shared network")
    assert quick.end_s == pytest.approx(shared.end_s, rel=1e-9, abs=1e-15)


def test_calls_that_meet_run_on_the_shared_network():
    # two rings at once on the same four GPUs' links: they share every link
    programs = tuple((CollectiveOp("a", "allreduce", "x", 64 << 20, "ring"),
                      CollectiveOp("b", "allreduce", "y", 64 << 20, "ring", stream="other")) for _ in range(4))  # fmt: skip
    result = run_workload(Workload("meet", programs, {"x": (0, 1, 2, 3), "y": (0, 1, 2, 3)}), "ring:4")
    assert result.stats["path"] == "shared network" and "share a resource" in result.stats["not_alone"]
    alone = run_workload(Workload("one", tuple(p[:1] for p in programs), {"x": (0, 1, 2, 3)}), "ring:4")
    assert result.step_time_s > 1.9 * alone.step_time_s  # each got half the links
    staggered = run_workload(transformer("bert-large", tp=2, pp=2, dp=1, micro_batches=2), "dgx-h100")
    assert "arrive at different times" in staggered.stats["not_alone"]  # a pipeline's sends
