"""TACCL stage 3, contiguity and exact scheduling (TACCL §5.1 step 3,
Appendix B.3, eqs. 16-21), on CP-SAT over integer nanoseconds.

Paths (stage 1) and orders (stage 2) are fixed. Variables per transfer: send
time ``s`` and arrival ``e``. On a contiguity-capable link (inter-node, §5.1),
a Boolean ``together[i]`` joins the i-th and (i+1)-th chunks of the link's
order into one message. TACCL's pairwise ``is_together[c, o, r]`` restricted
to neighbours in the link order: a message is a run of consecutive chunks
(sending non-neighbours together would reorder the link, which stage 2 fixed).
Then (``lat1`` = α + β·n, ``b`` = β·n):

- eq. 16: ``together[i] -> s[i+1] = s[i]``;
- eq. 17-18 through a running finish ``f``: ``f[i] = s[i] + lat1`` when i
  starts a message, ``f[i] = f[i-1] + b`` when it continues one, and
  ``e[i] = f[last chunk of its message]`` (all members arrive together), so a
  message of m chunks costs α + m·β·n;
- eq. 19: consecutive messages on a link do not overlap: ``s[i+1] >= e[i]``
  unless ``together[i]``;
- eqs. 20-21: consecutive entries of a GPU's switch (or NIC) send order, and
  of its receive order, do not overlap: ``s[next] >= e[prev]``;
- eqs. 1-4: ``s >= e`` of every transfer it depends on (its chunk is at the
  sender; for a reduction, every contribution has arrived), and the objective
  ``time >= e`` of every transfer, minimised.

The stage-2 greedy schedule is a feasible solution with no contiguity; it is
the hint and bounds the horizon, so a time limit always leaves a schedule at
least as good as the greedy one (status "feasible", gap from CP-SAT's bound).
"""

from __future__ import annotations

import time as _time
from dataclasses import dataclass

from ortools.sat.python import cp_model

from .ordering import Ordering, Plan
from .routing import StageOutcome, _outcome, run_solver


@dataclass(frozen=True)
class Schedule:
    """Exact send and arrival times (ns) per transfer and the message (group)
    each belongs to (``None`` for single-chunk messages)."""

    start_ns: tuple[int, ...]
    end_ns: tuple[int, ...]
    group: tuple[int | None, ...]
    outcome: StageOutcome

    @property
    def makespan_ns(self) -> int:
        return max(self.end_ns, default=0)


def greedy_schedule(ordering: Ordering, wall_s: float = 0.0) -> Schedule:
    """The stage-2 schedule as a Schedule (no contiguity)."""
    n = len(ordering.start_ns)
    return Schedule(
        ordering.start_ns, ordering.end_ns, (None,) * n, StageOutcome("heuristic", wall_s, ordering.makespan_ns)
    )


def _port_bounds(plan: Plan, ordering: Ordering, contiguity: bool) -> list[int]:
    """Valid lower bounds on the makespan: each link and each GPU hyperedge is
    busy for every chunk's α + β when the chunk's link cannot merge chunks,
    and for the β parts plus at least one α of those that can (they travel
    as one or more messages, each paying its α)."""
    ts = plan.transfers
    out = []
    for orders in (ordering.chunk_order, ordering.switch_send_order, ordering.switch_recv_order):
        for order in orders.values():
            merging = [i for i in order if contiguity and ts[i].contiguous]
            busy = sum(ts[i].lat_ns for i in order if not (contiguity and ts[i].contiguous))
            busy += sum(ts[i].lat_ns - ts[i].alpha_ns for i in merging)
            out.append(busy + min((ts[i].alpha_ns for i in merging), default=0))
    return out


def solve_contiguity(
    plan: Plan,
    ordering: Ordering,
    time_limit_s: float = 60.0,
    workers: int = 2,
    contiguity: bool = True,
    gap_limit: float = 1e-3,
    patience_s: float | None = None,
    reorder: bool = False,
) -> Schedule:
    """Stage 3 (module docstring). With ``reorder`` (not in TACCL), links
    that cannot merge chunks and switch-hyperedge ports keep stage 2's order
    only as the hint: their transfers are intervals under CP-SAT no-overlap
    constraints, so the solver may reorder them (exact disjunctive
    scheduling; IB links and NIC ports keep the fixed order and contiguity)."""
    t0 = _time.perf_counter()
    ts = plan.transfers
    n = len(ts)
    horizon = ordering.makespan_ns
    model = cp_model.CpModel()
    s = [model.new_int_var(0, horizon, f"s{i}") for i in range(n)]
    e = [model.new_int_var(0, horizon, f"e{i}") for i in range(n)]
    intervals: dict[int, cp_model.IntervalVar] = {}

    def interval(i: int) -> cp_model.IntervalVar:
        if i not in intervals:
            intervals[i] = model.new_interval_var(s[i], ts[i].lat_ns, e[i], f"iv{i}")
        return intervals[i]

    merges: dict[int, cp_model.IntVar] = {}  # i -> together(i, next on its link)
    next_on_link: dict[int, int] = {}
    for order in ordering.chunk_order.values():
        first = ts[order[0]]
        can_merge = contiguity and first.contiguous and len(order) > 1
        if not can_merge:
            for i in order:
                model.add(e[i] == s[i] + ts[i].lat_ns)
            if reorder and not first.contiguous:
                model.add_no_overlap([interval(i) for i in order])
                continue
            for a, b in zip(order, order[1:], strict=False):
                model.add(s[b] >= e[a])  # eq. 19
            continue
        f = [model.new_int_var(0, horizon, f"f{i}") for i in order]
        together = [model.new_bool_var(f"m{a}") for a in order[:-1]]
        for k, (a, b) in enumerate(zip(order, order[1:], strict=False)):
            merges[a] = together[k]
            next_on_link[a] = b
        for k, i in enumerate(order):
            lat1, per_chunk = ts[i].lat_ns, ts[i].lat_ns - ts[i].alpha_ns
            if k == 0:
                model.add(f[0] == s[i] + lat1)
            else:
                m, prev = together[k - 1], order[k - 1]
                model.add(s[i] == s[prev]).only_enforce_if(m)  # eq. 16
                model.add(f[k] == f[k - 1] + per_chunk).only_enforce_if(m)  # eq. 17
                model.add(f[k] == s[i] + lat1).only_enforce_if(m.Not())
                model.add(s[i] >= e[prev]).only_enforce_if(m.Not())  # eq. 19
            if k < len(order) - 1:
                model.add(e[i] == e[order[k + 1]]).only_enforce_if(together[k])
                model.add(e[i] == f[k]).only_enforce_if(together[k].Not())  # eq. 18
            else:
                model.add(e[i] == f[k])
    for orders in (ordering.switch_send_order, ordering.switch_recv_order):  # eqs. 20-21
        for (_rank, kind), order in orders.items():
            if reorder and kind == "switch":
                model.add_no_overlap([interval(i) for i in order])
                continue
            for a, b in zip(order, order[1:], strict=False):
                if (ts[a].src, ts[a].dst) != (ts[b].src, ts[b].dst):
                    model.add(s[b] >= e[a])
    for i, t in enumerate(ts):  # eqs. 3-4
        for d in t.deps:
            model.add(s[i] >= e[d])
    makespan = model.new_int_var(0, horizon, "time")
    model.add_max_equality(makespan, e)  # eq. 2
    for lower in _port_bounds(plan, ordering, contiguity):  # redundant: tightens the reported bound
        model.add(makespan >= lower)
    model.minimize(makespan)  # eq. 1
    for i in range(n):
        model.add_hint(s[i], ordering.start_ns[i])
        model.add_hint(e[i], ordering.end_ns[i])
    for m in merges.values():
        model.add_hint(m, 0)

    solver, status = run_solver(model, time_limit_s - (_time.perf_counter() - t0), workers, gap_limit, patience_s)
    wall = _time.perf_counter() - t0
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        fallback = greedy_schedule(ordering, wall)
        return Schedule(
            fallback.start_ns,
            fallback.end_ns,
            fallback.group,
            StageOutcome("heuristic", wall, ordering.makespan_ns, solver.best_objective_bound),
        )
    start = tuple(solver.value(v) for v in s)
    end = tuple(solver.value(v) for v in e)
    group: list[int | None] = [None] * n
    next_id = 0
    for order in ordering.chunk_order.values():
        k = 0
        while k < len(order):
            run = [order[k]]
            while run[-1] in merges and solver.boolean_value(merges[run[-1]]):
                run.append(next_on_link[run[-1]])
            if len(run) > 1:
                for i in run:
                    group[i] = next_id
                next_id += 1
            k += len(run)
    outcome = _outcome(solver, status, wall)
    return Schedule(start, end, tuple(group), outcome)
