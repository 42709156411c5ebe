"""TACCL's synthesizer end to end (TACCL §5): sketch -> logical topology ->
stage 1 routing -> stage 2 ordering -> stage 3 contiguity and exact
scheduling -> a verified, timed :class:`~simcoll.algorithm.Algorithm`.

Chunks: each GPU's data is split into the sketch's ``input_chunkup`` chunks
(§5.2); one chunk is ``input_size / input_chunkup`` bytes for every
collective (Allgather: the GPU's input; Alltoall: the block a GPU sends to
each other GPU; ReduceScatter and Allreduce: the block each GPU owns after
the ReduceScatter, so the Allreduce buffer is P × ``input_size``, the
Allgather output it is built from). The nccl-tests size of the result
(:attr:`TacclResult.size_bytes`) is ``collective.size_chunks`` chunks.

>>> from simcoll import load_machine
>>> r = taccl_synthesize(load_machine("ndv2*2", "ndv2-taccl"), "ndv2-sk-1", "allgather", time_limit_s=20)
>>> r.algorithm.schedule, r.status in ("optimal", "feasible")
('timed', True)
"""

from __future__ import annotations

import time as _time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...algorithm import Algorithm, Transfer
from ...analytic import algbw_GBps
from ...collectives import Collective, canonical_name, make_collective
from ...errors import SynthesisError
from ...machines import Machine, load_machine
from ...verify import check
from ..sccl import inverse_collective
from .combining import allreduce_plan, copy_plan, reduce_plan, rename_allgather_sends, reversal_isomorphism
from .contiguity import Schedule, solve_contiguity
from .ordering import Ordering, Plan, heuristic_order, improve_order, merged_lower_bound_ns
from .routing import NS, Routing, StageOutcome, solve_routing
from .sketch import LogicalTopology, Sketch, check_satisfiable, load_sketch, logical_topology

SUPPORTED = ("allgather", "alltoall", "reducescatter", "allreduce")


@dataclass(frozen=True)
class TacclResult:
    """One TACCL synthesis: ``status`` "optimal" (both MILPs proved optimal),
    "feasible" (a stage hit its time limit; ``gap`` is stage 3's relative gap,
    ``routing_gap`` stage 1's) or "heuristic" (stage 3 found nothing in time:
    the stage-2 greedy schedule is returned). ``time_s`` is total wall time;
    ``stage_times_s`` splits it; ``predicted_time_s`` is stage 3's objective."""

    status: str
    collective: str
    sketch: str
    topology: str
    algorithm: Algorithm
    time_s: float
    stage_times_s: dict[str, float]
    predicted_time_s: float
    chunk_bytes: float
    size_bytes: float
    gap: float
    routing_gap: float
    stage_status: dict[str, str] = field(default_factory=dict)
    relaxed_time_s: float = 0.0  # stage 1's objective (bandwidth-relaxed; the largest over its routings)
    greedy_time_s: float = 0.0  # stage 2's greedy makespan (B.2), before the forward-backward improvement

    @property
    def algbw_GBps(self) -> float:
        """Predicted algorithm bandwidth at the sketch's size (nccl-tests)."""
        return algbw_GBps(self.size_bytes, self.predicted_time_s)

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "collective": self.collective,
            "sketch": self.sketch,
            "topology": self.topology,
            "time_s": round(self.time_s, 4),
            "stage_times_s": {k: round(v, 4) for k, v in self.stage_times_s.items()},
            "stage_status": dict(self.stage_status),
            "predicted_time_us": round(self.predicted_time_s * 1e6, 4),
            "relaxed_time_us": round(self.relaxed_time_s * 1e6, 4),
            "greedy_time_us": round(self.greedy_time_s * 1e6, 4),
            "chunk_bytes": self.chunk_bytes,
            "size_bytes": self.size_bytes,
            "algbw_GBps": round(self.algbw_GBps, 4),
            "gap": None if self.gap != self.gap else round(self.gap, 6),
            "routing_gap": None if self.routing_gap != self.routing_gap else round(self.routing_gap, 6),
            "transfers": len(self.algorithm.transfers),
        }


def taccl_collective(name: str, num_ranks: int, chunkup: int) -> Collective:
    """The collective TACCL synthesizes for ``input_chunkup`` = ``chunkup``."""
    key = canonical_name(name)
    if key not in SUPPORTED:
        raise SynthesisError(f"TACCL synthesis supports {', '.join(SUPPORTED)}; got {name!r}")
    if key == "allreduce":
        return make_collective("allreduce", num_ranks, num_ranks * chunkup)
    return make_collective(key, num_ranks, chunkup)


def taccl_synthesize(
    machine: Machine | str,
    sketch: Sketch | str | Path | dict,
    collective: str,
    *,
    model: str | None = None,
    time_limit_s: float = 60.0,
    input_size_bytes: int | None = None,
    contiguity: bool = True,
    paths: str = "auto",
    gap_limit: float = 1e-3,
    patience_s: float | None = None,
    reorder: bool = False,
    improve_passes: int = 8,
    workers: int = 2,
    progress: Callable[[str], None] | None = None,
) -> TacclResult:
    """Synthesize ``collective`` on ``machine`` under ``sketch`` (TACCL §5).

    ``time_limit_s`` applies to each MILP stage separately; on a limit the
    best feasible solution is kept and its gap reported. A stage also stops
    once its relative gap is below ``gap_limit`` (Gurobi's default MIPGap is
    1e-4; 1e-3 here), reported as "feasible" with that gap unless proven,
    and, with ``patience_s``, once no better solution has come for that long.
    ``reorder`` lets stage 3 reorder non-IB links and switch ports
    (:func:`.contiguity.solve_contiguity`; an extension, off as in TACCL).
    ``improve_passes`` bounds the forward-backward improvement of stage 2's
    greedy schedule (:func:`.ordering.improve_order`, an extension; 0 keeps
    TACCL's B.2 greedy orders as they are; stage 3 also runs on the greedy
    orders, within what is left of its time limit, unless
    :func:`.ordering.merged_lower_bound_ns` shows contiguity cannot make them
    win).
    ``input_size_bytes`` overrides the sketch's ``input_size``. ``progress`` receives one line per
    stage. ``paths`` is stage 1's path pruning (:func:`.routing.candidate_links`);
    ``"auto"`` takes ``"level"`` when every chunk goes to every rank
    (Allgather and the Allgathers inside ReduceScatter and Allreduce: relays
    spread a receiver's switch egress) and ``"shortest"`` otherwise (Alltoall:
    one destination per chunk, where wider pruning only grows the model).
    Raises :class:`~simcoll.errors.SynthesisError` on a bad sketch, an
    unsatisfiable logical topology, or (never expected) a failed verification.
    """
    if not (isinstance(time_limit_s, (int, float)) and 0 < time_limit_s < float("inf")):
        raise SynthesisError(f"time_limit_s must be a positive number of seconds, got {time_limit_s!r}")
    t_all = _time.perf_counter()
    if isinstance(machine, str):
        machine = load_machine(machine, model)
    sk = sketch if isinstance(sketch, Sketch) else load_sketch(sketch)
    if input_size_bytes is not None:
        sk = sk.with_changes(input_size_bytes=int(input_size_bytes))
    coll = taccl_collective(collective, machine.num_ranks, sk.input_chunkup)
    run = _Run(
        machine=machine,
        sketch=sk,
        collective=coll,
        logical=logical_topology(machine, sk),
        chunk_bytes=sk.input_size_bytes / sk.input_chunkup,
        time_limit_s=time_limit_s,
        workers=workers,
        gap_limit=gap_limit,
        patience_s=patience_s,
        paths=("shortest" if coll.name == "alltoall" else "level") if paths == "auto" else paths,
        contiguity=contiguity,
        reorder=reorder,
        improve_passes=improve_passes,
        say=progress or (lambda _msg: None),
    )
    run.say(
        f"TACCL {coll.name} on {machine.name} with sketch {sk.name}: {len(run.logical.links)} logical links, "
        f"{coll.num_chunks} chunks of {run.chunk_bytes:.0f} B"
    )
    plan = _stage1_routing(run)
    greedy, ordering = _stage2_ordering(run, plan)
    schedule = _stage3_contiguity(run, plan, greedy, ordering)
    algorithm = _algorithm(coll, sk, machine, plan, schedule, run.chunk_bytes)
    problems = check(algorithm, machine)
    if problems:
        raise SynthesisError(f"TACCL produced an algorithm that fails verification: {problems[0]}")
    result = _result(run, algorithm, schedule, greedy, _time.perf_counter() - t_all)
    run.say(
        f"  verified; predicted {result.predicted_time_s * 1e6:.2f} us = {result.algbw_GBps:.2f} GB/s algbw; "
        f"total {result.time_s:.2f} s"
    )
    return result


@dataclass
class _Run:
    """One synthesis: its inputs, the solvers' settings, and what the stages
    record on the way (routings and stage times) for the result."""

    machine: Machine
    sketch: Sketch
    collective: Collective
    logical: LogicalTopology
    chunk_bytes: float
    time_limit_s: float
    workers: int
    gap_limit: float
    patience_s: float | None
    paths: str
    contiguity: bool
    reorder: bool
    improve_passes: int
    say: Callable[[str], None]
    routings: list[Routing] = field(default_factory=list)
    order_s: float = 0.0
    contiguity_s: float = 0.0

    def route(self, lt: LogicalTopology, base: Collective, label: str) -> Routing:
        """Stage 1 on one logical topology and base collective (TACCL §5.1 step 1, Appendix B.1)."""
        check_satisfiable(lt, base, f"sketch {self.sketch.name!r} on {self.machine.name}")
        r = solve_routing(
            lt,
            base,
            self.chunk_bytes,
            time_limit_s=self.time_limit_s,
            workers=self.workers,
            paths=self.paths,
            gap_limit=self.gap_limit,
            patience_s=self.patience_s,
        )
        self.say(
            f"  stage 1 routing ({label}): {r.outcome.status}, relaxed time {r.outcome.objective_ns * NS * 1e6:.2f} us, "
            f"{len(r.sends)} sends, {r.outcome.wall_s:.2f} s"
        )
        self.routings.append(r)
        return r


def _stage1_routing(run: _Run) -> Plan:
    """Stage 1, routing (TACCL §5.1 step 1, Appendix B.1): the paths of every
    chunk, as the plan of transfers stage 2 orders. Allgather and Alltoall
    are routed directly; ReduceScatter inverts an Allgather routed on the
    reversed links (its dual, SCCL §3.5), taken from the forward routing when
    the reversed logical topology is the same or isomorphic; Allreduce is that
    ReduceScatter followed by the forward Allgather (§5.3)."""
    coll, logical, p, chunkup = run.collective, run.logical, run.machine.num_ranks, run.sketch.input_chunkup
    if coll.name in ("allgather", "alltoall"):
        sends = run.route(logical, coll, coll.name).sends
        return Plan(tuple(copy_plan(logical, run.machine, run.chunk_bytes, sends)))
    ag = make_collective("allgather", p, chunkup)
    rev = logical.reversed()
    symmetric = _same_links(rev, logical)
    pi = None if symmetric else reversal_isomorphism(logical)
    need_forward = symmetric or pi is not None or coll.name == "allreduce"
    fwd = run.route(logical, ag, "allgather") if need_forward else None
    if symmetric:
        back_sends = fwd.sends
    elif pi is not None:
        back_sends = rename_allgather_sends(fwd.sends, pi)
        run.say("  stage 1 routing (reversed allgather): the forward routing renamed (isomorphic reversal)")
    else:
        dual = inverse_collective(make_collective("reducescatter", p, chunkup))
        back_sends = run.route(rev, dual, "reversed allgather").sends
    if coll.name == "reducescatter":
        return Plan(tuple(reduce_plan(logical, run.machine, run.chunk_bytes, back_sends)))
    return allreduce_plan(logical, run.machine, run.chunk_bytes, back_sends, fwd.sends)


def _stage2_ordering(run: _Run, plan: Plan) -> tuple[Ordering, Ordering]:
    """Stage 2, ordering (TACCL §5.1 step 2, Appendix B.2): the greedy orders,
    then (an extension) their forward-backward improvement. Returns both."""
    t0 = _time.perf_counter()
    greedy = heuristic_order(plan)
    ordering = greedy
    if run.improve_passes:
        ordering = improve_order(plan, greedy, max_passes=run.improve_passes, time_limit_s=run.time_limit_s)
    run.order_s = _time.perf_counter() - t0
    run.say(
        f"  stage 2 ordering: {len(plan.transfers)} transfers, greedy makespan {greedy.makespan_ns * NS * 1e6:.2f} us, "
        f"after forward-backward improvement {ordering.makespan_ns * NS * 1e6:.2f} us, {run.order_s:.2f} s"
    )
    return greedy, ordering


def _stage3_contiguity(run: _Run, plan: Plan, greedy: Ordering, ordering: Ordering) -> Schedule:
    """Stage 3, contiguity and exact scheduling (TACCL §5.1 step 3, Appendix
    B.3) on the improved orders and, when a bound says they may win, on the
    greedy ones within what is left of the time limit (merging IB chunks can
    favour the greedy orders)."""

    def solve(orders: Ordering, limit_s: float) -> Schedule:
        return solve_contiguity(
            plan,
            orders,
            time_limit_s=limit_s,
            workers=run.workers,
            contiguity=run.contiguity,
            gap_limit=run.gap_limit,
            patience_s=run.patience_s,
            reorder=run.reorder,
        )

    schedule = solve(ordering, run.time_limit_s)
    run.contiguity_s = schedule.outcome.wall_s
    left_s = run.time_limit_s - run.contiguity_s
    if (
        ordering is not greedy
        and run.contiguity
        and not run.reorder
        and left_s > 0
        and merged_lower_bound_ns(plan, greedy) < schedule.makespan_ns
    ):
        alt = solve(greedy, left_s)
        run.contiguity_s += alt.outcome.wall_s
        run.say(f"  stage 3 on the greedy orders: {alt.makespan_ns * NS * 1e6:.2f} us, {alt.outcome.wall_s:.2f} s")
        if alt.makespan_ns < schedule.makespan_ns:
            schedule = alt
    run.say(
        f"  stage 3 contiguity: {schedule.outcome.status}, time {schedule.makespan_ns * NS * 1e6:.2f} us, "
        f"{sum(g is not None for g in schedule.group)} chunks sent contiguously, {run.contiguity_s:.2f} s"
    )
    return schedule


def _result(run: _Run, algorithm: Algorithm, schedule: Schedule, greedy: Ordering, total_s: float) -> TacclResult:
    """The result: the stages' statuses combined (optimal only when every stage is), times and gaps."""
    routings = run.routings
    stage_status = {
        "routing": "optimal" if all(r.outcome.status == "optimal" for r in routings) else "feasible",
        "contiguity": schedule.outcome.status,
    }
    status = (
        "optimal"
        if set(stage_status.values()) == {"optimal"}
        else ("heuristic" if schedule.outcome.status == "heuristic" else "feasible")
    )
    return TacclResult(
        status=status,
        collective=run.collective.name,
        sketch=run.sketch.name,
        topology=run.machine.name,
        algorithm=algorithm,
        time_s=total_s,
        stage_times_s={
            "routing": sum(r.outcome.wall_s for r in routings),
            "ordering": run.order_s,
            "contiguity": run.contiguity_s,
        },
        predicted_time_s=schedule.makespan_ns * NS,
        chunk_bytes=run.chunk_bytes,
        size_bytes=run.chunk_bytes * run.collective.size_chunks,
        gap=schedule.outcome.gap,
        routing_gap=max((r.outcome.gap for r in routings), default=0.0),
        stage_status=stage_status,
        relaxed_time_s=max((r.outcome.objective_ns or 0) for r in routings) * NS,
        greedy_time_s=greedy.makespan_ns * NS,
    )


def _same_links(a: LogicalTopology, b: LogicalTopology) -> bool:
    return a.links == b.links and a.relay == b.relay


def _algorithm(
    coll: Collective, sk: Sketch, machine: Machine, plan: Plan, schedule: Schedule, chunk_bytes: float
) -> Algorithm:
    transfers = tuple(
        Transfer(
            chunk=t.chunk,
            src=t.src,
            dst=t.dst,
            op=t.op,
            start_s=schedule.start_ns[i] * NS,
            end_s=schedule.end_ns[i] * NS,
            group=schedule.group[i],
        )
        for i, t in enumerate(plan.transfers)
    )
    return Algorithm(
        name=f"taccl-{coll.name}-{sk.name}",
        collective=coll,
        transfers=tuple(sorted(transfers, key=lambda t: (t.start_s, t.src, t.dst, t.chunk))),
        topology=machine.name,
        predicted_time_s=schedule.makespan_ns * NS,
        metadata={
            "synthesizer": "taccl",
            "sketch": sk.name,
            "chunk_bytes": chunk_bytes,
            "input_size_bytes": sk.input_size_bytes,
            "input_chunkup": sk.input_chunkup,
            "model": machine.model.name,
        },
    )


__all__ = ["SUPPORTED", "StageOutcome", "TacclResult", "taccl_collective", "taccl_synthesize"]
