"""Running a workload: every rank's streams on one simulated machine.

:func:`run_workload` checks a :class:`~.ops.Workload`, works out each call's
schedule, and plays the step on :class:`simcoll.simulator.concurrent.SharedRun`,
where every collective and send shares the one network (its rules C1-C6).
On top of them:

W1. **Streams.** Each stream of a rank runs its operations one at a time in
    issue order; an operation starts when the one before it on its stream
    has ended and so have its ``deps``. Streams run at once: compute on one
    stream does not slow compute on another, nor communication (the SMs a
    communication kernel takes are not modelled).
W2. **Compute** takes ``duration_s``, or ``max(flops / peak, memory_bytes /
    bandwidth) / efficiency`` on the model's GPU (``gpu:`` in ``models/``).
W3. **Collectives.** A member's operation arrives at its call when it
    starts and ends when the call ends (C2, C4); the call runs the group's
    schedule: ``"nccl"`` - what NCCL (the workload's release) picks for that
    collective and size on the group's GPUs; a generator - built on the
    group's GPUs and timed under the protocol NCCL would pick; a file -
    checked once on the group's GPUs. A group's GPUs are the machine with
    only them (:func:`simcoll.topology_generators.gpu_subset`, as
    ``CUDA_VISIBLE_DEVICES`` leaves them to a communicator); the messages
    then cross the whole machine. A group of one rank costs nothing.
W4. **Sends.** A send and its receive are one point-to-point call (C6):
    both have to have started before the data moves, and both end when it
    has landed.
W5. **Calls that never meet.** A call whose members arrive together and
    that shares no resource with any call in flight beside it takes exactly
    its time alone (C3). The fast engine first plays the step so, each call
    timed alone once (by :func:`~simcoll.simulator.simulate`'s fastest path
    where the group is the whole machine); at the first call whose members
    arrive apart, or that meets another on a resource, it plays the step
    again on the shared network. ``stats["path"]`` says which stood
    (``"calls alone"`` or ``"shared network"``, with ``stats["not_alone"]``
    saying why).

The step ends when the last operation ends. A workload whose ranks wait on
one another for ever (members issuing their calls in different orders on
one stream) stops with an error naming who waits for whom.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import simpy

from ..algorithm import Algorithm
from ..errors import SimcollError, SimulationError, WorkloadError
from ..machines import Machine, as_machine
from ..simulator.concurrent import SharedRun
from ..simulator.engine import run_with_limit
from .ops import CollectiveOp, Compute, Workload, check_workload
from .results import WorkloadResult

__all__ = ["run_workload"]


def run_workload(
    workload: Workload,
    machine: Machine | str,
    *,
    engine: str = "fast",
    contention: bool = True,
    time_limit_s: float = 600.0,
    nccl=None,
    launch: str | None = "processes",
    alone_first: bool = True,
) -> WorkloadResult:
    """Simulate one step of ``workload`` on ``machine`` (rules W1-W5).

    Parameters
    ----------
    workload : Workload
        Checked by :func:`~.ops.check_workload`; it may use fewer ranks than
        the machine has (the rest stay idle).
    machine : Machine or str
        The machine, or a topology spec with its default model.
    engine : {"fast", "reference"}
        The network the calls share (:class:`~simcoll.simulator.concurrent.SharedRun`).
    contention : bool
        False: every message runs alone at its route's rate.
    time_limit_s : float
        Wall-clock limit of building the schedules and of the run together.
    nccl : str or NcclSetup, optional
        The NCCL release (and environment) ``"nccl"`` schedules follow, over
        the workload's own (:func:`simcoll.nccl.versions.as_setup`).
    launch : str or None
        How the job launches its calls, which prices each call
        (:meth:`simcoll.machines.Machine.with_launch`): ``"processes"``
        (default: frameworks run one process per GPU, torchrun and MPI
        alike), ``"threads"``, ``"graphs"`` (CUDA graphs); None keeps the
        machine's.
    alone_first : bool
        With the fast engine, first play the step with every call at its
        time alone, which stands where no two calls meet (W5); False plays
        it on the shared network at once (the same result, slower).

    Returns
    -------
    WorkloadResult
        Step time, per-operation timeline, exposed communication, throughput;
        ``stats["path"]`` says how it was played (W5) and
        ``stats["transfers"]`` how many messages were simulated for it
        (under ``"calls alone"``, those of each distinct call's run alone).

    Raises
    ------
    WorkloadError
        For a workload that does not check, or a schedule that cannot run
        on its group.
    SimulationError
        When ranks wait on one another for ever, or the limit is reached.

    Examples
    --------
    >>> from simcoll.workload.ops import CollectiveOp, Compute, Workload
    >>> step = tuple((Compute("fwd", duration_s=1e-3), CollectiveOp("ar", "allreduce", "all", 4e6, "ring",
    ...                                                             deps=("fwd",))) for _ in range(4))
    >>> r = run_workload(Workload("toy", step, {"all": (0, 1, 2, 3)}), "ring:4")
    >>> round(r.step_time_s * 1e6, 3)   # 1 ms, then the ring Allreduce as simulate() times it alone
    1254.2
    """
    wall0 = time.perf_counter()
    machine = as_machine(machine)
    if launch is not None:
        machine = machine.with_launch(launch)
    matching = check_workload(workload, machine.num_ranks)
    if not (isinstance(time_limit_s, (int, float)) and time_limit_s > 0):
        raise SimulationError(f"time_limit_s must be positive, got {time_limit_s!r}")
    schedules = _Schedules(machine, nccl if nccl is not None else workload.nccl, wall0, time_limit_s)
    programs = workload.programs
    call_plans = {}
    for key, members in matching.calls.items():
        group = workload.groups[key[0]]
        rank, i = members[0]
        call_plans[key] = (schedules.algorithm(programs[rank][i], tuple(int(r) for r in group)), group)
    durations = _durations(workload, machine)

    offsets = np.cumsum([0] + [len(p) for p in programs])
    what = f"workload {workload.name!r} on {machine.name}"
    solo = _SoloCalls(machine, engine, contention, schedules, call_plans, workload, matching)
    path, why = "shared network", None
    if engine == "fast" and alone_first:  # W5: calls that never meet take their times alone
        env = simpy.Environment()
        played = _play(env, workload, matching, durations, offsets, lambda key: solo.timed(env, key))
        try:
            events = run_with_limit(env, time_limit_s, what=what, started_s=wall0)
            path = "calls alone" if not np.isnan(played[1]).any() else path
        except _NotAlone as exc:
            why = str(exc)
    if path == "shared network":
        run = SharedRun(machine, engine=engine, contention=contention)
        env = run.env
        played = _play(env, workload, matching, durations, offsets, lambda key: solo.start(run, key))
        events = run.run(time_limit_s, started_s=wall0, what=what)
    start_s, end_s, waiting, calls = played
    if np.isnan(end_s).any():
        raise SimulationError(_stall(workload, matching, offsets, start_s, end_s, waiting, calls, env.now))
    transfers = run.network.transfers if path == "shared network" else solo.transfers
    return WorkloadResult.from_run(
        workload,
        machine,
        offsets=offsets,
        start_s=start_s,
        end_s=end_s,
        stats={
            "engine": engine,
            "path": path,
            "not_alone": why,
            "launch": machine.model.launch,
            "contention": contention,
            "calls": len(matching.calls),
            "sends": len(matching.sends),
            "transfers": transfers,
            "events": events,
            "schedules": schedules.labels,
            "wall_s": time.perf_counter() - wall0,
        },
    )


def _play(env, workload: Workload, matching, durations, offsets, call_for):
    """Every rank's streams as SimPy processes (W1-W4) over the calls
    ``call_for(key)`` gives (``("call", (group, k))`` or ``("send", (src,
    dst, k))``): each has ``arrive(member)`` and a ``done`` event. Returns
    the operations' start and end arrays (filled as the run goes), the
    operations waiting in a call, and the calls."""
    programs = workload.programs
    start_s = np.full(int(offsets[-1]), np.nan)
    end_s = np.full(int(offsets[-1]), np.nan)
    member_of: dict[tuple[int, int], tuple[tuple, int]] = {}
    for key, members in matching.calls.items():
        for m, ri in enumerate(members):
            member_of[ri] = (("call", key), m)
    for key, (s, r) in matching.sends.items():
        member_of[s] = (("send", key), 0)
        member_of[r] = (("send", key), 1)
    names_of = [{op.name: i for i, op in enumerate(program)} for program in programs]
    needed = {(rank, names_of[rank][d]) for rank, program in enumerate(programs) for op in program for d in op.deps}
    done = {ri: env.event() for ri in needed}
    calls: dict[tuple, object] = {}  # started
    waiting: dict[tuple[int, int], tuple] = {}  # (rank, op) -> the call it waits in

    def stream(rank: int, indices: Sequence[int]):
        program = programs[rank]
        names = names_of[rank]
        base = int(offsets[rank])
        for i in indices:
            op = program[i]
            if op.deps:
                yield env.all_of([done[(rank, names[d])] for d in op.deps])
            start_s[base + i] = env.now
            if isinstance(op, Compute):
                yield env.timeout(durations[(rank, i)])
            else:
                key, member = member_of[(rank, i)]
                call = calls.get(key)
                if call is None:
                    call = calls[key] = call_for(key)
                waiting[(rank, i)] = key
                call.arrive(member)
                yield call.done
                del waiting[(rank, i)]
            end_s[base + i] = env.now
            event = done.get((rank, i))
            if event is not None:
                event.succeed()

    for rank, program in enumerate(programs):
        by_stream: dict[str, list[int]] = {}
        for i, op in enumerate(program):
            by_stream.setdefault(op.stream, []).append(i)
        for indices in by_stream.values():
            env.process(stream(rank, indices))
    return start_s, end_s, waiting, calls


class _SoloCalls:
    """The calls of a workload: started on a shared run (W3, W4), or timed
    as they take alone (W5), with what each occupies of the machine."""

    def __init__(self, machine, engine, contention, schedules, call_plans, workload, matching) -> None:
        self.machine = machine
        self.engine = engine
        self.contention = contention
        self.schedules = schedules
        self.call_plans = call_plans
        self.workload = workload
        self.matching = matching
        self.transfers = 0
        self._times: dict[tuple, float] = {}
        self._resources: dict[tuple, frozenset] = {}
        self._mapper = SharedRun(machine, engine=engine, contention=contention)  # routes and connections; never run
        self.active: list[_Timed] = []  # the calls in flight (W5)

    def _describe(self, key: tuple):
        """(algorithm, machine ranks, size, protocol, switches) of a
        collective call, or (None, (src, dst), size, "Simple", None) of a send."""
        programs = self.workload.programs
        if key[0] == "call":
            algorithm, group = self.call_plans[key[1]]
            op = programs[group[0]][self.matching.calls[key[1]][0][1]]
            if algorithm is None:
                return None, tuple(group), op.size_bytes, None, None
            protocol = self.schedules.protocol(algorithm, op, group)
            return algorithm, tuple(group), op.size_bytes, protocol, self.schedules.switches(algorithm, group)
        (s_rank, s_index), _ = self.matching.sends[key[1]]
        return None, key[1][:2], programs[s_rank][s_index].size_bytes, "Simple", None

    def start(self, run: SharedRun, key: tuple):
        """The call on the shared run ``run`` (W3, W4)."""
        algorithm, ranks, size, protocol, switches = self._describe(key)
        if key[0] == "send":
            return run.send(ranks[0], ranks[1], size, name=f"send {ranks[0]}->{ranks[1]}")
        if algorithm is None:  # a group of one: nothing to move
            return _Nothing(run.env)
        return run.start(algorithm, size, ranks, protocol=protocol, name=f"{algorithm.name} on {key[1][0]}",
                         switches=switches)  # fmt: skip

    def alone_s(self, key: tuple) -> float:
        """How long the call takes alone on the machine, its members arriving at once."""
        algorithm, ranks, size, protocol, switches = self._describe(key)
        if key[0] == "call" and algorithm is None:
            return 0.0
        cache = (id(algorithm), ranks, size, protocol, tuple(sorted((switches or {}).items())))
        if cache not in self._times:
            if algorithm is not None and ranks == tuple(range(self.machine.num_ranks)) and not switches:
                from ..simulator import simulate

                result = simulate(algorithm, self.machine, size, protocol=protocol, contention=self.contention,
                                  verify=False, record_timeline=False, record_utilisation=False)  # fmt: skip
                self._times[cache], transfers = result.time_s, result.transfers
            else:
                alone = SharedRun(self.machine, engine=self.engine, contention=self.contention)
                call = self.start(alone, key)
                call.arrive_all()
                alone.env.run()
                self._times[cache], transfers = call.end_s, alone.network.transfers
            self.transfers += transfers
        return self._times[cache]

    def resources(self, key: tuple) -> frozenset:
        """The ids of every resource the call's messages cross."""
        if key not in self._resources:
            algorithm, ranks, size, protocol, switches = self._describe(key)
            if key[0] == "send":
                connections = [ranks]
            elif algorithm is None:
                connections = []
            else:
                connections = self._mapper.connections(self.start(self._mapper, key))
            network = self._mapper.network
            self._resources[key] = frozenset(r.id for c in set(connections) for r, _ in network.route(*c)[2])
        return self._resources[key]

    def timed(self, env, key: tuple) -> _Timed:
        return _Timed(self, env, key, 2 if key[0] == "send" else len(self._describe(key)[1]))

    def begin(self, call: _Timed) -> None:
        """``call`` starts (its members all arrived): it stands for the
        shared run only if no call in flight shares a resource with it (W5);
        raises :class:`_NotAlone` at the first that does, so that a step
        whose calls meet stops playing at once."""
        now = call.env.now
        self.active = [c for c in self.active if c.end_s > now]
        mine = self.resources(call.key)
        for other in self.active:
            if mine & self.resources(other.key):
                raise _NotAlone(f"{_label(call.key)} and {_label(other.key)} share a resource while both run")
        self.active.append(call)


class _NotAlone(Exception):
    """Calls of a step meet (W5): it runs on the shared network instead."""


def _label(key: tuple) -> str:
    return (
        f"call {key[1][1]} on group {key[1][0]!r}" if key[0] == "call" else f"send {key[1][2]} {key[1][0]}->{key[1][1]}"
    )


class _Timed:
    """A call that takes its time alone from its members' arrival (W5)."""

    def __init__(self, calls: _SoloCalls, env, key: tuple, members: int) -> None:
        self.calls = calls
        self.env = env
        self.key = key
        self.waiting = members
        self.arrived: set[int] = set()
        self.done = env.event()
        self.first_s: float | None = None
        self.start_s = self.end_s = math.nan

    def arrive(self, member: int) -> None:
        self.arrived.add(member)
        now = self.env.now
        if self.first_s is None:
            self.first_s = now
        elif now != self.first_s:
            raise _NotAlone(f"the members of {_label(self.key)} arrive at different times")
        if len(self.arrived) == self.waiting:
            duration = self.calls.alone_s(self.key)
            self.start_s, self.end_s = now, now + duration
            self.calls.begin(self)
            self.env.timeout(duration).callbacks.append(lambda _e: self.done.succeed(self.end_s))


class _Nothing:
    """The call of a group of one rank: it ends as it starts."""

    def __init__(self, env) -> None:
        self.done = env.event()

    def arrive(self, member: int) -> None:
        self.done.succeed()


def _durations(workload: Workload, machine: Machine) -> dict[tuple[int, int], float]:
    """W2: every compute operation's time."""
    gpu = machine.model.gpu
    out = {}
    for rank, program in enumerate(workload.programs):
        for i, op in enumerate(program):
            if not isinstance(op, Compute):
                continue
            if op.duration_s is not None:
                out[(rank, i)] = float(op.duration_s)
                continue
            if gpu is None:
                raise WorkloadError(
                    f"workload {workload.name!r}: rank {rank} compute {op.name!r} gives FLOPs and bytes, but model "
                    f"{machine.model.name!r} has no 'gpu' section (peak_flops_per_s, memory_Bps) for the roofline: "
                    "add one, or give duration_s"
                )
            out[(rank, i)] = gpu.roofline_s(op.flops, op.memory_bytes) / op.efficiency
    return out


class _Schedules:
    """W3: each call's Algorithm, built once per group shape, collective,
    schedule and (for ``"nccl"``, whose choice depends on it) size."""

    def __init__(self, machine: Machine, nccl, started_s: float, time_limit_s: float) -> None:
        from ..nccl.versions import as_setup

        self.machine = machine
        try:
            self.setup = as_setup(nccl)
        except SimcollError as exc:
            raise WorkloadError(f"nccl: {exc}") from None
        self.started_s = started_s
        self.time_limit_s = time_limit_s
        self._machines: dict[tuple, Machine] = {}
        self._algorithms: dict[tuple, Algorithm | None] = {}
        self._protocols: dict[tuple, str | None] = {}
        self._files: dict[str, Algorithm] = {}
        self._built_on: dict[int, int] = {}  # id(algorithm) -> the first node of the group it was built for
        self.labels: dict[str, str] = {}  # "<collective> <size> on <group shape>" -> what ran

    def shape(self, ranks: tuple[int, ...]) -> tuple:
        """The same GPUs of other nodes (equal nodes, ranked node by node)
        share one schedule: key them by node offset and local index."""
        topology = self.machine.topology
        if topology.node_shifts:
            per_node = topology.num_ranks // len(topology.nodes)
            first = ranks[0] // per_node
            return tuple((r // per_node - first, r % per_node) for r in ranks)
        return ranks

    def group_machine(self, ranks: tuple[int, ...]) -> Machine:
        key = self.shape(ranks)
        found = self._machines.get(key)
        if found is None:
            if ranks == tuple(range(self.machine.num_ranks)):
                found = self.machine
            else:
                found = Machine(group_topology(self.machine.topology, ranks), self.machine.model)
            self._machines[key] = found
        return found

    def algorithm(self, op: CollectiveOp, ranks: tuple[int, ...]) -> Algorithm | None:
        from ..collectives import canonical_name

        try:
            collective = canonical_name(op.collective)
        except SimcollError as exc:
            raise WorkloadError(f"{op.kind} {op.name!r}: {exc}") from None
        if len(ranks) == 1:
            return None
        key = (self.shape(ranks), collective, op.schedule, op.size_bytes if op.schedule == "nccl" else None)
        if key not in self._algorithms:
            from ..simulator.engine import check_limit

            check_limit(self.started_s, self.time_limit_s, "workload", f"building the schedule of {op.name!r}")
            machine = self.group_machine(ranks)
            try:
                algorithm = self._build(op, collective, machine)
            except WorkloadError:
                raise
            except SimcollError as exc:
                raise WorkloadError(f"{collective} {op.name!r} on {len(ranks)} ranks ({op.schedule}): {exc}") from None
            self._algorithms[key] = algorithm
            self._built_on[id(algorithm)] = self.machine.topology.node_of(ranks[0])
            choice = (algorithm.metadata or {}).get("nccl_choice", algorithm.name)
            from ..units import format_size

            shown = ", ".join(map(str, ranks[:4])) + (", ..." if len(ranks) > 4 else "")
            self.labels[f"{collective} {format_size(op.size_bytes)} on ranks {shown}"] = str(choice)
        return self._algorithms[key]

    def _build(self, op: CollectiveOp, collective: str, machine: Machine) -> Algorithm:
        from ..algorithms import REGISTRY, generate

        if op.schedule == "nccl":
            from ..nccl.baseline import nccl_algorithm

            return nccl_algorithm(machine, collective, int(op.size_bytes), nccl=self.setup)
        if op.schedule in REGISTRY:
            return generate(op.schedule, machine, collective)
        if not Path(op.schedule).exists():
            raise WorkloadError(f"{op.kind} {op.name!r}: schedule {op.schedule!r} is not 'nccl', a generator "
                                f"({', '.join(REGISTRY)}) or a file")  # fmt: skip
        return self._file(op, collective, machine)

    def _file(self, op: CollectiveOp, collective: str, machine: Machine) -> Algorithm:
        from ..interop.schedules import load_schedule
        from ..verify import check

        algorithm = self._files.get(op.schedule)
        if algorithm is None:
            algorithm = load_schedule(op.schedule)
            if not isinstance(algorithm, Algorithm):
                raise WorkloadError(f"{op.schedule}: a workload runs Algorithms, not a {type(algorithm).__name__}")
            self._files[op.schedule] = algorithm
        if algorithm.collective.name != collective or algorithm.num_ranks != machine.num_ranks:
            raise WorkloadError(f"{op.kind} {op.name!r}: {op.schedule} is {algorithm.collective.name} on "
                                f"{algorithm.num_ranks} ranks, not {collective} on {machine.num_ranks}")  # fmt: skip
        problems = check(algorithm, machine)
        if problems:
            raise WorkloadError(f"{op.schedule} on {machine.name}: {problems[0]}")
        return algorithm

    def switches(self, algorithm: Algorithm, ranks: tuple[int, ...]) -> dict[str, str] | None:
        """The switches a schedule built for the same GPUs of another node
        reduces in, moved to this group's nodes: the component in the same
        place of the node as many nodes on."""
        topology = self.machine.topology
        shift = topology.node_of(ranks[0]) - self._built_on.get(id(algorithm), topology.node_of(ranks[0]))
        if not shift or not algorithm.switch_reductions:
            return None
        if not hasattr(self, "_node_components"):
            self._node_components: dict[int, list[str]] = {}
            for c in topology.components:
                if c.node is not None:
                    self._node_components.setdefault(c.node, []).append(c.name)
        moved = {}
        for name in {r.switch for r in algorithm.switch_reductions}:
            node = topology.component(name).node
            if node is not None:
                moved[name] = self._node_components[node + shift][self._node_components[node].index(name)]
        return moved

    def protocol(self, algorithm: Algorithm, op: CollectiveOp, ranks: tuple[int, ...]) -> str | None:
        """NCCL's pick for a generated or read schedule (its own where it names one)."""
        key = (id(algorithm), op.size_bytes)
        if key not in self._protocols:
            from ..nccl.baseline import protocol_for

            self._protocols[key] = protocol_for(algorithm, self.group_machine(ranks), op.size_bytes, self.setup)
        return self._protocols[key]


def group_topology(topology, ranks: tuple[int, ...]):
    """The machine a communicator of ``ranks`` sees (W3): the nodes that
    hold them, with only their GPUs (:func:`~simcoll.topology_generators.gpu_subset`),
    and the fabric between nodes; ranked in the group's order.

    >>> from simcoll.machines import load_topology
    >>> t = group_topology(load_topology("dgx-h100*4"), (0, 16))
    >>> t.num_ranks, len(t.nodes), t.gpu(1).name
    (2, 2, 'n2.gpu0')
    """
    from ..topology import build_topology
    from ..topology_generators import gpu_subset

    nodes = {topology.node_of(r) for r in ranks}
    if len(nodes) < len(topology.nodes):  # leave out the other nodes, switches and all
        kept = [c for c in topology.components if c.node is None or c.node in nodes]
        names = {c.name for c in kept}
        renumbered = {}
        components = []
        for c in kept:
            if c.kind == "gpu":
                renumbered[c.rank] = len(renumbered)
                c = dataclasses.replace(c, rank=renumbered[c.rank])
            components.append(c)
        links = [lk for lk in topology.links if lk.src in names and lk.dst in names]
        topology = build_topology(topology.name, components, links, description=topology.description,
                                  sources=topology.sources)  # fmt: skip
        ranks = tuple(renumbered[r] for r in ranks)
    return gpu_subset(topology, list(ranks))


def _stall(workload, matching, offsets, start_s, end_s, waiting, calls, now_s: float) -> str:
    """Who waits for whom when the step cannot go on."""
    lines = []
    for (rank, i), key in list(waiting.items())[:3]:
        op = workload.programs[rank][i]
        call = calls[key]
        if key[0] == "call":
            group = workload.groups[key[1][0]]
            missing = [group[m] for m in range(len(group)) if m not in getattr(call, "arrived", set())]
            lines.append(f"rank {rank} waits in {op.kind} {op.name!r} on group {key[1][0]!r} for rank(s) "
                         f"{', '.join(map(str, missing[:6]))}")  # fmt: skip
        else:
            peer = op.peer
            lines.append(f"rank {rank} waits in {op.kind} {op.name!r} for rank {peer}")
    if not lines:
        first = int(np.flatnonzero(np.isnan(end_s))[0])
        rank = int(np.searchsorted(offsets, first, side="right") - 1)
        op = workload.programs[rank][first - int(offsets[rank])]
        lines.append(f"rank {rank} {op.kind} {op.name!r} never started")
    left = int(np.isnan(end_s).sum())
    return (f"workload {workload.name!r} stalled at simulated time {now_s * 1e6:.3f} us with {left} operation(s) "
            f"left: {'; '.join(lines)} (do the members issue their calls in the same order on each stream?)")  # fmt: skip
