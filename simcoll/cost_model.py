"""Cost models: α-β parameters per link type, and the switch, PCIe, compute,
executor, protocol and per-call parameters the simulator uses, read from
``models/*.yaml``.

Every entry carries a ``source``: the paper table, datasheet or calibration run
its numbers come from. YAML schema::

    name: ndv2-taccl
    description: text
    links:                              # keyed by topology link type
      nvlink: {alpha_s: 0.7e-6, beta_s_per_byte: 46.0e-12, source: "TACCL Table 1"}
      pcie:   {alpha_s: 1.0e-6, bandwidth_Bps: 13.0e9, source: "..."}
      ib:     {alpha_s: 1.7e-6, bandwidth_Bps: 25.0e9, efficiency: 0.96, source: "..."}
    switches:                           # keyed by component kind (optional)
      nvswitch: {latency_s: 0.0, port_bandwidth_Bps: 150e9,
                 concurrency_efficiency: [[1, 1.0], [8, 0.9]],
                 reduce_Bps: 15e9, multicast_Bps: 25e9, source: "..."}   # in-switch reduction (optional)
    host_memory: {bandwidth_Bps: 40e9, source: "..."}   # optional
    compute: {reduce_bandwidth_Bps: 400e9, reduce_launch_s: 2e-6, fused: false, source: "..."}
    gpu: {peak_flops_per_s: 989e12, memory_Bps: 3.35e12, source: "..."}  # optional: workloads' roofline
    executor: {thread_block_bandwidth_Bps: 10e9, kernel_launch_s: 5e-6,     # optional
               fifo_slots: 8, slot_bytes: 524288, host_signal_s: 2e-6,
               signal_latency_s: 2e-6, source: "..."}
    network: {host_staging: true, nic_binding: bijective, source: "..."}  # optional
    call: {overhead_s: 10e-6, source: "..."}                              # optional; or per launch mode:
    call: {overhead_s: {threads: 28.6e-6, processes: 0.0}, launch: processes, source: "..."}
    nccl: {algorithms: [Ring, Tree], protocols: [Simple], source: "..."}   # optional
    default_protocol: Simple                                              # optional
    protocols:                          # optional; a protocol not listed costs nothing
      LL:     {efficiency: 0.5, hop_latency_s: 0.6e-6, call_latency_s: 6.6e-6, source: "..."}
      LL128:  {efficiency: 0.9375, hop_latency_s: 1.9e-6, call_latency_s: 14e-6, source: "..."}
      Simple: {efficiency: 1.0, hop_latency_s: 3.4e-6, call_latency_s: 8.4e-6, source: "..."}

The costs NCCL pays (issue 13 item 3), each zero / one when absent so that a
model without them gives the pure α-β times of the closed forms:

- ``links.<type>.bandwidth_Bps`` is the line rate of one link per direction;
  ``efficiency`` (default 1, in (0, 1]) is the fraction of it data actually
  moves at (an NVLink3 link carries ~20 of its 25 GB/s). The simulator, the
  routes and the analytic cost use the effective rate
  :attr:`LinkParams.bandwidth_Bps` = line rate × efficiency;
  :attr:`LinkParams.line_rate_Bps` keeps the line rate. A link of
  multiplicity ``count`` carries ``count`` times as much. Give either
  ``bandwidth_Bps`` or ``beta_s_per_byte`` (= 1 / line rate), not both.
- ``compute.fused``: ``true`` when reduction is fused into the transfer
  pipeline (NCCL's recvReduceSend: data is reduced as it streams in), so a
  reducing message moves at ``min(link rate, reduce_bandwidth_Bps)`` and no
  reduction time is charged after it lands; ``false`` (default): the serial
  ``T_R(n) = reduce_launch_s + n / reduce_bandwidth_Bps`` after every reducing
  message (NV-Group Table 2).
- ``call.overhead_s``: the fixed cost of one collective call (kernel launch and
  the ranks' synchronisation), paid once per call run under a protocol. It
  depends on how the job launches (:data:`LAUNCH_MODES`): one process driving
  several GPUs (``threads``: nccl-tests ``-g 8``, whose one host thread
  launches every GPU's kernel in turn), one process per GPU (``processes``:
  MPI, srun, torchrun) or calls captured in CUDA/HIP graphs (``graphs``:
  nccl-tests ``-G``). A number prices every mode alike; a mapping prices each
  mode it names, and ``call.launch`` says which the model runs in until
  :meth:`CostModel.with_launch` picks another (a log's header says which
  mode it was measured in: :attr:`simcoll.calibration.nccl_tests.NcclTestsLog.launch`).
- ``protocols.<LL|LL128|Simple>``: ``efficiency`` (payload / wire bytes: a
  message of ``n`` bytes puts ``n / efficiency`` bytes on the wire; default 1),
  ``hop_latency_s`` (added to the α of every message: NCCL's per-hop
  latency) and ``call_latency_s`` (added once per call: NCCL's base latency).
  The protocol a schedule runs with is ``algorithm.metadata["protocol"]`` (an
  Algorithm), ``program.protocol`` (a Program) or ``simulate(...,
  protocol=...)``; else the model's ``default_protocol``; else none, and no
  protocol cost applies (:meth:`CostModel.protocol`).
- ``network.nic_binding``: which NIC carries a GPU's inter-node traffic
  (:class:`NetworkParams`); ``bijective`` on machines with one NIC per GPU.
- ``nccl``: the NCCL environment the machine's vendor ships
  (:class:`NcclParams`): the algorithms and protocols NCCL may pick, as
  NCCL_ALGO / NCCL_PROTO set them, for the ``nccl`` baseline's tuner.

Why one module of ~870 lines: a parameter set lives here five times, as a
section of the schema above, a dataclass, a field of :class:`CostModel`, a
parser in :func:`model_from_dict` and an entry of :func:`model_to_dict`, and a
new one changes all five (``nccl`` did, in one change to this file); side by
side they do not drift apart. The seam between the dataclasses and the YAML
code would also take :class:`CostModel` out of the module named after it (the
YAML half needs the dataclasses, so only they could move without an import
cycle).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from .errors import ModelError
from .files import load_yaml, write_atomic


@dataclass(frozen=True)
class LinkParams:
    """α-β parameters of one link of a type: a message of ``n`` bytes over
    ``count`` parallel links takes ``alpha_s + n / (count * bandwidth_Bps)``.

    ``bandwidth_Bps`` is the *effective* rate, ``line_rate_Bps × efficiency``
    (module docstring); build from a line rate with :meth:`from_line_rate`.
    """

    alpha_s: float
    bandwidth_Bps: float
    source: str
    efficiency: float = 1.0
    line_rate_Bps: float | None = None

    def __post_init__(self) -> None:
        if self.line_rate_Bps is None:
            line = self.bandwidth_Bps if self.efficiency == 1 else self.bandwidth_Bps / self.efficiency
            object.__setattr__(self, "line_rate_Bps", line)

    @classmethod
    def from_line_rate(cls, alpha_s: float, line_rate_Bps: float, source: str, efficiency: float = 1.0) -> LinkParams:
        """Link parameters from the line rate and the fraction of it data moves at."""
        return cls(alpha_s, line_rate_Bps * efficiency, source, efficiency, line_rate_Bps)

    @property
    def beta_s_per_byte(self) -> float:
        """Seconds per byte at the effective rate."""
        return 1.0 / self.bandwidth_Bps


@dataclass(frozen=True)
class SwitchParams:
    """A switch kind: per-traversal latency, optional per-port bandwidth cap, and
    the fraction of port bandwidth left with ``n`` concurrent connections
    (piecewise-linear through the given points; TACCL §3.2, Fig. 4)."""

    latency_s: float
    source: str
    port_bandwidth_Bps: float | None = None
    concurrency_efficiency: tuple[tuple[int, float], ...] = ()
    # In-network reduction (switches with ``reduce: true`` in the topology): the
    # rate per link of a switch port at which data entering it is combined,
    # and the rate per link at which a result is multicast out of it (None:
    # the link's own bandwidth). A reduction from P ranks over ports of c links
    # runs at most at c * reduce_Bps (simcoll.simulator.network.switch_route).
    reduce_Bps: float | None = None
    multicast_Bps: float | None = None

    def efficiency(self, connections: int) -> float:
        points = self.concurrency_efficiency
        if not points or connections <= points[0][0]:
            return points[0][1] if points else 1.0
        for (n0, e0), (n1, e1) in zip(points, points[1:], strict=False):
            if connections <= n1:
                return e0 + (e1 - e0) * (connections - n0) / (n1 - n0)
        return points[-1][1]


@dataclass(frozen=True)
class ComputeParams:
    """Reduction cost: ``T_R(n) = reduce_launch_s + n / reduce_bandwidth_Bps``
    (NV-Group Table 2's T_R, linear in the reduced bytes), charged after a
    reducing message unless ``fused``: then the reduction runs inside the
    transfer pipeline (NCCL's recvReduceSend) and only caps the message's
    rate at ``reduce_bandwidth_Bps``."""

    reduce_bandwidth_Bps: float
    reduce_launch_s: float
    source: str
    fused: bool = False

    def reduce_time_s(self, size_bytes: float) -> float:
        return self.reduce_launch_s + size_bytes / self.reduce_bandwidth_Bps


@dataclass(frozen=True)
class GpuParams:
    """The GPU's peak rates, for a workload's compute operations given as
    work rather than time (:mod:`simcoll.workload`): ``peak_flops_per_s``
    (dense 16-bit tensor-core rate) and ``memory_Bps`` (HBM bandwidth). An
    operation of ``F`` FLOPs touching ``M`` bytes takes at least
    ``max(F / peak_flops_per_s, M / memory_Bps)`` (the roofline; S. Williams
    et al., "Roofline", CACM 2009)."""

    peak_flops_per_s: float
    memory_Bps: float
    source: str

    def roofline_s(self, flops: float, memory_bytes: float) -> float:
        return max(flops / self.peak_flops_per_s, memory_bytes / self.memory_Bps)


#: Connection FIFO depth when a model gives none: NCCL's NCCL_STEPS = 8 slots
#: per connection (GC3 §6.1: "1 <= s <= 8"), which MSCCL inherits.
DEFAULT_FIFO_SLOTS = 8


@dataclass(frozen=True)
class ExecutorParams:
    """What one GPU thread block can drive, the cost of a kernel launch, and the
    runtime's connection buffers (GC3 §6.1):

    - ``thread_block_bandwidth_Bps``: the copy rate one thread block sustains
      (GC3 §5: one A100 thread block cannot saturate an NVLink);
    - ``kernel_launch_s``: one kernel launch (paid once by a persistent kernel,
      once per kernel by a multi-kernel lowering);
    - ``fifo_slots``: slots per connection; a send blocks while the receiver's
      slots are full (default :data:`DEFAULT_FIFO_SLOTS`);
    - ``slot_bytes``: the slot (tile) size; chunks larger than it are tiled and
      the tiles pipeline (GC3 §6.2). ``None``: no tiling;
    - ``host_signal_s``: CPU↔GPU work-queue signalling latency of host-driven
      executors (NV-Group §4.2). ``None``: 0;
    - ``stream_bound``: ``true`` where the thread block's rate bounds every
      byte it reads and writes, not only what it sends: a block copies each
      received tile out of its FIFO slot, so a fused receive-and-send keeps it
      busy for its reads and writes together (simcoll's interpreter, measured
      on an H100: :mod:`simcoll.simulator.program_mode`). ``None``: the rate
      caps only a block's transfers, receives cost nothing (GC3 §5's model);
    - ``signal_latency_s``: how long after a thread block raises a flag in
      memory (a message's arrival, a freed FIFO slot, a finished step) another
      block sees it: the semaphores and FIFO flags of GC3 §6.2, Fig. 5, polled
      through memory. The raising block does not wait for it (written by
      ``simcoll gpu calibrate`` from its flag ping-pong). ``None``: 0;
    - ``write_share``: under ``stream_bound``, the share of a one-block copy's
      time its writes take (its reads take the rest), so that an op making
      ``r`` reads and ``w`` writes per element keeps the block
      ``r·(1 - share) + w·share`` copies' time. ``None``: reads and writes
      cost alike (0.5).
    """

    thread_block_bandwidth_Bps: float
    kernel_launch_s: float
    source: str
    fifo_slots: int = DEFAULT_FIFO_SLOTS
    slot_bytes: float | None = None
    host_signal_s: float | None = None
    stream_bound: bool | None = None
    signal_latency_s: float | None = None
    write_share: float | None = None


NIC_BINDINGS = ("packed", "round-robin", "bijective")
PROTOCOLS = ("Simple", "LL", "LL128")
#: How a job launches its collective calls (module docstring, ``call.overhead_s``).
LAUNCH_MODES = ("threads", "processes", "graphs")


@dataclass(frozen=True)
class ProtocolParams:
    """What one protocol costs (module docstring): payload / wire bytes, the
    latency added to every message, and the latency added once per call
    (NCCL's per-hop ``hwLat`` and ``baseLat``, NCCL 2.30.7 tuning.cc).
    ``name`` None is "no protocol": no cost at all."""

    name: str | None
    efficiency: float = 1.0
    hop_latency_s: float = 0.0
    call_latency_s: float = 0.0
    source: str = ""


@dataclass(frozen=True)
class CallParams:
    """The fixed cost of one collective call: kernel launch and the ranks'
    synchronisation, paid once per call by every simulator path.

    ``overhead_s`` is the cost in the launch mode ``launch`` (None: a model
    whose one cost prices every mode); ``by_launch`` holds the cost of each
    launch mode the model prices separately (empty for one cost)."""

    overhead_s: float
    source: str
    launch: str | None = None
    by_launch: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class NetworkParams:
    """Contention effects of the simulator's network model beyond max-min sharing.

    - ``host_staging``: where a NIC has no GPUDirect RDMA (``gpudirect: false``
      in the topology), traffic to and from it is staged through host memory:
      it crosses the PCIe path between the GPU and its CPU and between the CPU
      and the NIC, and host memory carries every byte twice (written by one
      side, read by the other) (TACCL §4.2, NDv2).
    - ``nic_binding``: which NIC a GPU's inter-node traffic uses (HiCCL §2.3):
      ``packed`` (GPU g of G uses NIC ⌊g·N/G⌋), ``round-robin`` (NIC g mod N),
      ``bijective`` (GPU g uses NIC g; packed on a node with fewer NICs than
      GPUs, e.g. a fabric what-if that removes NICs; with k times as many
      NICs as GPUs, GPU g uses its own k, NICs g·k .. g·k + k - 1, its
      traffic spread evenly over them); ``None``: the topology's own
      shortest routes.
    """

    source: str
    host_staging: bool = False
    nic_binding: str | None = None


#: NCCL's algorithm names as NCCL_ALGO spells them (lower case) -> the tuner's names.
NCCL_ALGORITHMS = {
    "tree": "tree",
    "ring": "ring",
    "collnetdirect": "collnet_direct",
    "collnet_direct": "collnet_direct",
    "collnetchain": "collnet_chain",
    "collnet_chain": "collnet_chain",
    "nvls": "nvls",
    "nvlstree": "nvls_tree",
    "nvls_tree": "nvls_tree",
    "pat": "pat",
}


@dataclass(frozen=True)
class NcclParams:
    """The NCCL environment a machine runs with (its vendor's profile), as
    restrictions of NCCL's tuner (:func:`simcoll.nccl.baseline.nccl_choice`):
    ``algorithms`` as NCCL_ALGO, ``protocols`` as NCCL_PROTO sets them, in the
    tuner's spelling (``ring``, ``nvls_tree``; ``simple``, ``ll128``); None
    leaves the tuner free. A log that prints NCCL_ALGO / NCCL_PROTO overrides
    them."""

    source: str
    algorithms: tuple[str, ...] | None = None
    protocols: tuple[str, ...] | None = None


@dataclass(frozen=True)
class CostModel:
    """A validated cost model (module docstring); build it with
    :func:`model_from_dict` or :func:`simcoll.machines.load_model`.

    ``sources``, ``host_memory_source`` and ``protocol_sources`` keep the
    provenance of the parameters that have no dataclass of their own, so that
    :func:`save_model` writes a file as complete as the one read; ``raw`` is the
    mapping it was built from (not compared).
    """

    name: str
    links: Mapping[str, LinkParams]
    description: str = ""
    switches: Mapping[str, SwitchParams] = field(default_factory=dict)
    host_memory_bandwidth_Bps: float | None = None
    compute: ComputeParams | None = None
    gpu: GpuParams | None = None
    executor: ExecutorParams | None = None
    network: NetworkParams | None = None
    protocol_efficiency: Mapping[str, float] = field(default_factory=dict)
    sources: tuple[str, ...] = ()
    host_memory_source: str | None = None
    protocol_sources: Mapping[str, str] = field(default_factory=dict)
    protocol_hop_latency_s: Mapping[str, float] = field(default_factory=dict)
    protocol_call_latency_s: Mapping[str, float] = field(default_factory=dict)
    default_protocol: str | None = None
    call: CallParams | None = None
    nccl: NcclParams | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def link(self, link_type: str) -> LinkParams:
        try:
            return self.links[link_type]
        except KeyError:
            raise ModelError(
                f"model {self.name!r} has no parameters for link type {link_type!r} "
                f"(it covers: {', '.join(sorted(self.links)) or 'nothing'})"
            ) from None

    def reduce_time_s(self, size_bytes: float) -> float:
        """T_R of NV-Group Table 2; zero when the model gives no compute cost."""
        return self.compute.reduce_time_s(size_bytes) if self.compute else 0.0

    @property
    def fused_reduction(self) -> bool:
        """Whether reduction is fused into the transfer pipeline (:class:`ComputeParams`)."""
        return self.compute is not None and self.compute.fused

    def reduce_after_s(self, size_bytes: float) -> float:
        """Time charged after a reducing message of ``size_bytes`` lands: T_R,
        or nothing when the reduction is fused."""
        return 0.0 if self.fused_reduction else self.reduce_time_s(size_bytes)

    @property
    def fused_reduce_rate_Bps(self) -> float:
        """The rate cap of a reducing message: the reduction rate when fused, else none (inf)."""
        return self.compute.reduce_bandwidth_Bps if self.fused_reduction else math.inf

    @property
    def call_overhead_s(self) -> float:
        """The fixed per-call cost (:class:`CallParams`); zero when absent."""
        return self.call.overhead_s if self.call is not None else 0.0

    def protocol(self, name: str | None = None) -> ProtocolParams:
        """The costs of protocol ``name`` (default: :attr:`default_protocol`).

        A protocol the model does not list costs nothing (efficiency 1, no
        latency), as does no protocol at all.

        Raises
        ------
        ModelError
            For a name that is not LL, LL128 or Simple.

        Examples
        --------
        >>> from simcoll.machines import load_model
        >>> load_model("dgx-a100").protocol("LL").efficiency
        0.5
        >>> load_model("generic").protocol()
        ProtocolParams(name=None, efficiency=1.0, hop_latency_s=0.0, call_latency_s=0.0, source='')
        """
        name = name if name is not None else self.default_protocol
        if name is None:
            return ProtocolParams(None)
        if name not in PROTOCOLS:
            raise ModelError(f"unknown protocol {name!r}: use {', '.join(PROTOCOLS)}")
        return ProtocolParams(
            name,
            efficiency=self.protocol_efficiency.get(name, 1.0),
            hop_latency_s=self.protocol_hop_latency_s.get(name, 0.0),
            call_latency_s=self.protocol_call_latency_s.get(name, 0.0),
            source=self.protocol_sources.get(name, ""),
        )

    def call_cost_s(self, protocol: str | None = None) -> float:
        """Everything paid once per call of a runtime: :attr:`call_overhead_s`
        plus the protocol's ``call_latency_s``. A schedule run under no
        protocol (``protocol`` None and no :attr:`default_protocol`) is a bare
        α-β schedule, as the papers' closed forms cost it: it pays neither."""
        proto = self.protocol(protocol)
        return 0.0 if proto.name is None else self.call_overhead_s + proto.call_latency_s

    @property
    def launch(self) -> str | None:
        """The launch mode the model's call cost is for (:data:`LAUNCH_MODES`); None where one cost prices every mode."""
        return self.call.launch if self.call is not None else None

    def with_launch(self, launch: str) -> CostModel:
        """This model with calls launched as ``launch`` (:data:`LAUNCH_MODES`):
        the per-call cost of that mode where the model prices modes apart;
        a model with one cost for every mode keeps it.

        Raises
        ------
        ModelError
            An unknown mode, or one the model's call costs leave out.

        Examples
        --------
        >>> from simcoll.machines import load_model
        >>> model = load_model("dgx1")
        >>> model.with_launch("threads").call_overhead_s > model.with_launch("processes").call_overhead_s
        True
        """
        if launch not in LAUNCH_MODES:
            raise ModelError(f"unknown launch mode {launch!r} (use {', '.join(LAUNCH_MODES)})")
        call = self.call
        if call is None or not call.by_launch:
            return self if call is None else replace(self, call=replace(call, launch=launch))
        if launch not in call.by_launch:
            raise ModelError(
                f"model {self.name!r} prices calls launched as {' or '.join(call.by_launch)}, not as {launch} "
                f"(add call.overhead_s.{launch} to it, or calibrate it on a log launched so)"
            )
        return replace(self, call=replace(call, overhead_s=call.by_launch[launch], launch=launch))

    def switch_latency_s(self, kind: str) -> float:
        params = self.switches.get(kind)
        return params.latency_s if params else 0.0

    def with_link(self, link_type: str, **changes: float) -> CostModel:
        """A what-if copy with one link type's parameters changed, e.g.
        ``model.with_link("nvlink", bandwidth_Bps=50e9)``: ``bandwidth_Bps``
        is the line rate (the link's efficiency stays unless ``efficiency`` is
        given too), ``alpha_s`` the latency."""
        unknown = sorted(set(changes) - {"alpha_s", "bandwidth_Bps", "efficiency"})
        if unknown:
            raise ModelError(f"with_link: unknown parameter {unknown[0]!r} (use alpha_s, bandwidth_Bps, efficiency)")
        base = self.link(link_type)
        new = LinkParams.from_line_rate(
            changes.get("alpha_s", base.alpha_s),
            changes.get("bandwidth_Bps", base.line_rate_Bps),
            f"what-if from {self.name}: {changes}",
            changes.get("efficiency", base.efficiency),
        )
        return CostModel(**{**vars(self), "name": f"{self.name}+whatif", "links": {**self.links, link_type: new}})


_TOP = {
    "name",
    "description",
    "links",
    "switches",
    "host_memory",
    "compute",
    "gpu",
    "executor",
    "network",
    "protocols",
    "default_protocol",
    "call",
    "nccl",
    "sources",
}


def _number(entry: Mapping, key: str, where: str, *, required: bool = True, positive: bool = False) -> float | None:
    if key not in entry:
        if required:
            raise ModelError(f"{where}.{key}: required")
        return None
    value = entry[key]
    if isinstance(value, str):
        # PyYAML follows YAML 1.1, which reads 25.0e9 (no exponent sign) as a string.
        try:
            value = float(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ModelError(f"{where}.{key}: must be a number, got {value!r}")
    if not math.isfinite(value):
        raise ModelError(f"{where}.{key}: must be a finite number, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise ModelError(f"{where}.{key}: must be {'positive' if positive else 'non-negative'}, got {value!r}")
    return float(value)


def _entry(raw: Any, allowed: set[str], where: str) -> Mapping:
    if not isinstance(raw, Mapping):
        raise ModelError(f"{where}: expected a mapping")
    unknown = sorted(set(raw) - allowed - {"source"})
    if unknown:
        raise ModelError(f"{where}: unknown field {unknown[0]!r} (allowed: {', '.join(sorted(allowed | {'source'}))})")
    if not isinstance(raw.get("source"), str) or not raw["source"].strip():
        raise ModelError(f"{where}.source: every parameter set must say where its numbers come from")
    return raw


def model_from_dict(data: Any, where: str = "<model>") -> CostModel:
    """Validate a parsed ``models/*.yaml`` description and build a :class:`CostModel`.

    Each top-level section has its own parser (``_parse_links``,
    ``_parse_switches``, ...); ``where`` (usually the file) prefixes every
    error message.

    Examples
    --------
    >>> model = model_from_dict({"name": "m", "links": {"nvlink": {"alpha_s": 1e-6, "bandwidth_Bps": 25e9,
    ...     "source": "NVLink2 25 GB/s per link and direction"}}})
    >>> model.link("nvlink").beta_s_per_byte
    4e-11
    >>> model_from_dict({"name": "m", "links": {"nvlink": {"alpha_s": 0, "bandwidth_Bps": 1}}}, "m.yaml")
    Traceback (most recent call last):
    simcoll.errors.ModelError: m.yaml: links.nvlink.source: every parameter set must say where its numbers come from
    """
    if not isinstance(data, Mapping):
        raise ModelError(f"{where}: expected a mapping at the top level")
    unknown = sorted(set(data) - _TOP)
    if unknown:
        raise ModelError(f"{where}: unknown field {unknown[0]!r} (allowed: {', '.join(sorted(_TOP))})")
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise ModelError(f"{where}: field 'name' is required")
    host_bw, host_source = _parse_host_memory(data.get("host_memory"), where)
    protocols, protocol_sources, hop_latency, call_latency = _parse_protocols(data.get("protocols"), where)
    default_protocol = data.get("default_protocol")
    if default_protocol is not None and default_protocol not in PROTOCOLS:
        raise ModelError(f"{where}: default_protocol must be one of {', '.join(PROTOCOLS)}, got {default_protocol!r}")
    return CostModel(
        name=name,
        description=str(data.get("description") or ""),
        links=_parse_links(data.get("links"), where),
        switches=_parse_switches(data.get("switches"), where),
        host_memory_bandwidth_Bps=host_bw,
        compute=_parse_compute(data.get("compute"), where),
        gpu=_parse_gpu(data.get("gpu"), where),
        executor=_parse_executor(data.get("executor"), where),
        network=_parse_network(data.get("network"), where),
        protocol_efficiency=protocols,
        sources=_parse_sources(data.get("sources"), where),
        host_memory_source=host_source,
        protocol_sources=protocol_sources,
        protocol_hop_latency_s=hop_latency,
        protocol_call_latency_s=call_latency,
        default_protocol=default_protocol,
        call=_parse_call(data.get("call"), where),
        nccl=_parse_nccl(data.get("nccl"), where),
        raw=dict(data),
    )


def _parse_links(raw_links: Any, where: str) -> dict[str, LinkParams]:
    """``links``: α-β parameters per link type (bandwidth or β, not both)."""
    if not isinstance(raw_links, Mapping) or not raw_links:
        raise ModelError(f"{where}: field 'links' must map link types to parameters")
    links = {}
    for link_type, raw in raw_links.items():
        here = f"{where}: links.{link_type}"
        entry = _entry(raw, {"alpha_s", "bandwidth_Bps", "beta_s_per_byte", "efficiency"}, here)
        alpha = _number(entry, "alpha_s", here)
        if ("bandwidth_Bps" in entry) == ("beta_s_per_byte" in entry):
            raise ModelError(f"{here}: give exactly one of bandwidth_Bps and beta_s_per_byte")
        if "bandwidth_Bps" in entry:
            bandwidth = _number(entry, "bandwidth_Bps", here, positive=True)
        else:
            bandwidth = 1.0 / _number(entry, "beta_s_per_byte", here, positive=True)
        efficiency = _fraction(entry, "efficiency", here)
        links[str(link_type)] = LinkParams.from_line_rate(alpha, bandwidth, entry["source"], efficiency)
    return links


def _parse_switches(raw_switches: Any, where: str) -> dict[str, SwitchParams]:
    """``switches``: latency, port bandwidth and concurrency efficiency per switch kind."""
    if raw_switches is not None and not isinstance(raw_switches, Mapping):
        raise ModelError(f"{where}: switches: expected a mapping from switch kinds to parameters")
    switches = {}
    for kind, raw in (raw_switches or {}).items():
        here = f"{where}: switches.{kind}"
        entry = _entry(
            raw, {"latency_s", "port_bandwidth_Bps", "concurrency_efficiency", "reduce_Bps", "multicast_Bps"}, here
        )
        switches[str(kind)] = SwitchParams(
            latency_s=_number(entry, "latency_s", here),
            port_bandwidth_Bps=_number(entry, "port_bandwidth_Bps", here, required=False, positive=True),
            concurrency_efficiency=_efficiency_points(entry.get("concurrency_efficiency") or [], here),
            reduce_Bps=_number(entry, "reduce_Bps", here, required=False, positive=True),
            multicast_Bps=_number(entry, "multicast_Bps", here, required=False, positive=True),
            source=entry["source"],
        )
    return switches


def _fraction(entry: Mapping, key: str, here: str) -> float:
    """An optional efficiency in (0, 1], default 1."""
    value = _number(entry, key, here, required=False, positive=True)
    if value is None:
        return 1.0
    if value > 1:
        raise ModelError(f"{here}.{key}: must lie in (0, 1], got {value}")
    return value


def _efficiency_points(raw: Any, here: str) -> tuple[tuple[int, float], ...]:
    try:
        points = tuple((int(n), float(e)) for n, e in raw)
    except (TypeError, ValueError):
        raise ModelError(f"{here}.concurrency_efficiency: expected a list of [connections, efficiency] pairs") from None
    if any(n < 1 or not 0 < e <= 1 for n, e in points) or [n for n, _ in points] != sorted({n for n, _ in points}):
        raise ModelError(
            f"{here}.concurrency_efficiency: connections must increase from 1 and efficiencies lie in (0, 1]"
        )
    return points


def _parse_host_memory(raw: Any, where: str) -> tuple[float | None, str | None]:
    """``host_memory``: (bandwidth, source), or (None, None) when absent."""
    if raw is None:
        return None, None
    here = f"{where}: host_memory"
    entry = _entry(raw, {"bandwidth_Bps"}, here)
    return _number(entry, "bandwidth_Bps", here, positive=True), entry["source"]


def _parse_compute(raw: Any, where: str) -> ComputeParams | None:
    """``compute``: the reduction cost T_R."""
    if raw is None:
        return None
    here = f"{where}: compute"
    entry = _entry(raw, {"reduce_bandwidth_Bps", "reduce_launch_s", "fused"}, here)
    fused = entry.get("fused", False)
    if not isinstance(fused, bool):
        raise ModelError(f"{here}.fused: must be true or false, got {fused!r}")
    return ComputeParams(
        reduce_bandwidth_Bps=_number(entry, "reduce_bandwidth_Bps", here, positive=True),
        reduce_launch_s=_number(entry, "reduce_launch_s", here),
        source=entry["source"],
        fused=fused,
    )


def _parse_gpu(raw: Any, where: str) -> GpuParams | None:
    """``gpu``: peak compute and memory rates (the workloads' roofline)."""
    if raw is None:
        return None
    here = f"{where}: gpu"
    entry = _entry(raw, {"peak_flops_per_s", "memory_Bps"}, here)
    return GpuParams(
        peak_flops_per_s=_number(entry, "peak_flops_per_s", here, positive=True),
        memory_Bps=_number(entry, "memory_Bps", here, positive=True),
        source=entry["source"],
    )


def _parse_call(raw: Any, where: str) -> CallParams | None:
    """``call``: the fixed per-call cost, one number or one per launch mode."""
    if raw is None:
        return None
    here = f"{where}: call"
    entry = _entry(raw, {"overhead_s", "launch"}, here)
    launch = entry.get("launch")
    if launch is not None and launch not in LAUNCH_MODES:
        raise ModelError(f"{here}.launch: unknown launch mode {launch!r} (use {', '.join(LAUNCH_MODES)})")
    costs = entry.get("overhead_s")
    if not isinstance(costs, Mapping):
        return CallParams(overhead_s=_number(entry, "overhead_s", here), source=entry["source"], launch=launch)
    unknown = sorted(set(costs) - set(LAUNCH_MODES))
    if unknown or not costs:
        raise ModelError(
            f"{here}.overhead_s: "
            + (f"unknown launch mode {unknown[0]!r}" if unknown else "no launch mode")
            + f" (a number, or one per launch mode: {', '.join(LAUNCH_MODES)})"
        )
    by_launch = {mode: _number(costs, mode, f"{here}.overhead_s") for mode in LAUNCH_MODES if mode in costs}
    if launch is None:
        if len(by_launch) > 1:
            raise ModelError(
                f"{here}.launch: required with costs for several launch modes (one of {', '.join(by_launch)})"
            )
        launch = next(iter(by_launch))
    elif launch not in by_launch:
        raise ModelError(f"{here}.launch: {launch!r} has no cost in overhead_s (it prices {', '.join(by_launch)})")
    return CallParams(by_launch[launch], entry["source"], launch, by_launch)


def _parse_executor(raw: Any, where: str) -> ExecutorParams | None:
    """``executor``: thread-block rate, kernel launch, FIFO slots and tiles."""
    if raw is None:
        return None
    here = f"{where}: executor"
    entry = _entry(
        raw,
        {
            "thread_block_bandwidth_Bps",
            "kernel_launch_s",
            "fifo_slots",
            "slot_bytes",
            "host_signal_s",
            "stream_bound",
            "signal_latency_s",
            "write_share",
        },
        here,
    )
    slots = _number(entry, "fifo_slots", here, required=False, positive=True)
    if slots is not None and slots != int(slots):
        raise ModelError(f"{here}.fifo_slots: must be a positive integer, got {entry['fifo_slots']!r}")
    stream_bound = entry.get("stream_bound")
    if stream_bound is not None and not isinstance(stream_bound, bool):
        raise ModelError(f"{here}.stream_bound: must be true or false, got {stream_bound!r}")
    share = _number(entry, "write_share", here, required=False, positive=True)
    if share is not None and share >= 1:
        raise ModelError(f"{here}.write_share: must lie in (0, 1), got {entry['write_share']!r}")
    return ExecutorParams(
        thread_block_bandwidth_Bps=_number(entry, "thread_block_bandwidth_Bps", here, positive=True),
        kernel_launch_s=_number(entry, "kernel_launch_s", here),
        source=entry["source"],
        fifo_slots=int(slots) if slots is not None else DEFAULT_FIFO_SLOTS,
        slot_bytes=_number(entry, "slot_bytes", here, required=False, positive=True),
        host_signal_s=_number(entry, "host_signal_s", here, required=False),
        stream_bound=stream_bound or None,
        signal_latency_s=_number(entry, "signal_latency_s", here, required=False),
        write_share=share,
    )


def _names(entry: Mapping, key: str, known: Mapping[str, str], here: str) -> tuple[str, ...] | None:
    """A list of NCCL names (any case) in the tuner's spelling, or None when absent."""
    if key not in entry:
        return None
    value = entry[key]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise ModelError(f"{here}.{key}: must be a non-empty list of names, got {value!r}")
    out = []
    for name in value:
        if name.lower() not in known:
            raise ModelError(f"{here}.{key}: unknown name {name!r} (known: {', '.join(sorted(set(known.values())))})")
        out.append(known[name.lower()])
    return tuple(dict.fromkeys(out))


def _parse_nccl(raw: Any, where: str) -> NcclParams | None:
    """``nccl``: the algorithms and protocols NCCL may pick on this machine."""
    if raw is None:
        return None
    here = f"{where}: nccl"
    entry = _entry(raw, {"algorithms", "protocols"}, here)
    protocols = {p.lower(): p.lower() for p in PROTOCOLS}
    return NcclParams(
        source=entry["source"],
        algorithms=_names(entry, "algorithms", NCCL_ALGORITHMS, here),
        protocols=_names(entry, "protocols", protocols, here),
    )


def _parse_network(raw: Any, where: str) -> NetworkParams | None:
    """``network``: host staging and NIC binding."""
    if raw is None:
        return None
    here = f"{where}: network"
    entry = _entry(raw, {"host_staging", "nic_binding"}, here)
    staging = entry.get("host_staging", False)
    if not isinstance(staging, bool):
        raise ModelError(f"{here}.host_staging: must be true or false, got {staging!r}")
    binding = entry.get("nic_binding")
    if binding is not None and binding not in NIC_BINDINGS:
        raise ModelError(f"{here}.nic_binding: must be one of {', '.join(NIC_BINDINGS)}, got {binding!r}")
    return NetworkParams(source=entry["source"], host_staging=staging, nic_binding=binding)


def _parse_protocols(
    raw: Any, where: str
) -> tuple[dict[str, float], dict[str, str], dict[str, float], dict[str, float]]:
    """``protocols``: efficiency, source, hop and call latency per protocol
    (Simple's efficiency is 1.0 unless given; latencies only where given)."""
    if raw is not None and not isinstance(raw, Mapping):
        raise ModelError(f"{where}: protocols: expected a mapping from protocols to parameters")
    protocols, sources, hop, call = {"Simple": 1.0}, {}, {}, {}
    for proto, entry_raw in (raw or {}).items():
        here = f"{where}: protocols.{proto}"
        if proto not in PROTOCOLS:
            raise ModelError(f"{here}: protocol must be Simple, LL or LL128")
        entry = _entry(entry_raw, {"efficiency", "hop_latency_s", "call_latency_s"}, here)
        if "efficiency" in entry:
            eff = _number(entry, "efficiency", here, positive=True)
            if eff > 1:
                raise ModelError(f"{here}.efficiency: must be at most 1, got {eff}")
            protocols[proto] = eff
        for key, into in (("hop_latency_s", hop), ("call_latency_s", call)):
            if key in entry:
                into[proto] = _number(entry, key, here)
        sources[proto] = entry["source"]
    return protocols, sources, hop, call


def _parse_sources(raw: Any, where: str) -> tuple[str, ...]:
    """``sources``: a string or a list of strings."""
    if raw is None:
        return ()
    if isinstance(raw, str):
        return (raw,)
    if not isinstance(raw, list):
        raise ModelError(f"{where}: sources: expected a string or a list of strings")
    return tuple(str(s) for s in raw)


def model_to_dict(model: CostModel) -> dict[str, Any]:
    """The inverse of :func:`model_from_dict`: ``model_from_dict(model_to_dict(m)) == m``.

    Link speeds are written as ``bandwidth_Bps``; Simple's efficiency is
    written only when the model states a source for it.

    Examples
    --------
    >>> model = model_from_dict({"name": "m", "links": {"pcie": {"alpha_s": 1e-6, "beta_s_per_byte": 1e-10,
    ...     "source": "PCIe"}}})
    >>> model_to_dict(model)["links"]
    {'pcie': {'alpha_s': 1e-06, 'bandwidth_Bps': 10000000000.0, 'source': 'PCIe'}}
    >>> model_from_dict(model_to_dict(model)) == model
    True
    """
    out: dict[str, Any] = {"name": model.name}
    if model.description:
        out["description"] = model.description
    if model.sources:
        out["sources"] = list(model.sources)
    out["links"] = {kind: _link_to_dict(p) for kind, p in model.links.items()}
    if model.switches:
        out["switches"] = {kind: _switch_to_dict(p) for kind, p in model.switches.items()}
    if model.host_memory_bandwidth_Bps is not None:
        out["host_memory"] = {"bandwidth_Bps": model.host_memory_bandwidth_Bps, "source": model.host_memory_source}
    if model.compute is not None:
        compute = _fields(model.compute)
        if not model.compute.fused:
            del compute["fused"]  # the default: written only when set
        out["compute"] = compute
    if model.gpu is not None:
        out["gpu"] = _fields(model.gpu)
    if model.executor is not None:
        out["executor"] = _fields(model.executor)
    if model.network is not None:
        out["network"] = _fields(model.network)
    if model.call is not None:
        call = model.call
        out["call"] = {"overhead_s": dict(call.by_launch) if call.by_launch else call.overhead_s}
        if call.launch is not None:
            out["call"]["launch"] = call.launch
        out["call"]["source"] = call.source
    if model.nccl is not None:
        out["nccl"] = {k: list(v) if isinstance(v, tuple) else v for k, v in _fields(model.nccl).items()}
    if model.default_protocol is not None:
        out["default_protocol"] = model.default_protocol
    protocols = {}
    for proto in PROTOCOLS:
        if proto not in model.protocol_sources:
            continue
        entry: dict[str, Any] = {}
        if proto in model.protocol_efficiency:
            entry["efficiency"] = model.protocol_efficiency[proto]
        for key, values in (
            ("hop_latency_s", model.protocol_hop_latency_s),
            ("call_latency_s", model.protocol_call_latency_s),
        ):
            if proto in values:
                entry[key] = values[proto]
        protocols[proto] = {**entry, "source": model.protocol_sources[proto]}
    unsourced = sorted(
        p
        for p, e in [
            *model.protocol_efficiency.items(),
            *model.protocol_hop_latency_s.items(),
            *model.protocol_call_latency_s.items(),
        ]
        if p not in protocols and (p, e) != ("Simple", 1)
    )
    if unsourced:
        raise ModelError(f"model {model.name!r}: protocol {unsourced[0]} has no source to write")
    if protocols:
        out["protocols"] = protocols
    return out


def _link_to_dict(params: LinkParams) -> dict[str, Any]:
    entry: dict[str, Any] = {"alpha_s": params.alpha_s, "bandwidth_Bps": params.line_rate_Bps}
    if params.efficiency != 1:
        entry["efficiency"] = params.efficiency
    return {**entry, "source": params.source}


def _switch_to_dict(params: SwitchParams) -> dict[str, Any]:
    entry: dict[str, Any] = {"latency_s": params.latency_s}
    if params.port_bandwidth_Bps is not None:
        entry["port_bandwidth_Bps"] = params.port_bandwidth_Bps
    if params.concurrency_efficiency:
        entry["concurrency_efficiency"] = [list(point) for point in params.concurrency_efficiency]
    for key in ("reduce_Bps", "multicast_Bps"):
        if getattr(params, key) is not None:
            entry[key] = getattr(params, key)
    entry["source"] = params.source
    return entry


def _fields(params: Any) -> dict[str, Any]:
    """A parameter dataclass as a mapping, without the optional fields left at None, its source last."""
    entry = {key: value for key, value in vars(params).items() if value is not None and key != "source"}
    return {**entry, "source": params.source}


def load_model_file(path: str | Path) -> CostModel:
    """Read and validate one ``models/*.yaml`` file (:func:`simcoll.machines.load_model`
    resolves names too)."""
    return model_from_dict(load_yaml(path, error=ModelError), where=str(path))


def save_model(model: CostModel, path: str | Path) -> None:
    """Write a cost model as YAML that :func:`simcoll.machines.load_model` reads
    back to an equal model, atomically (a failed write leaves the old file).

    Parameters
    ----------
    model : CostModel
        The model; every parameter set in it must have a source.
    path : str or Path
        The file to write (``.yaml``).

    Raises
    ------
    ModelError
        Naming the file when it cannot be written.

    Examples
    --------
    >>> import tempfile
    >>> from simcoll.machines import load_model
    >>> model = load_model("dgx1").with_link("nvlink", bandwidth_Bps=50e9)
    >>> path = Path(tempfile.mkdtemp()) / "what-if.yaml"
    >>> save_model(model, path)
    >>> load_model(str(path)) == model
    True
    """
    text = yaml.safe_dump(model_to_dict(model), sort_keys=False, allow_unicode=True, width=120)
    write_atomic(path, f"# cost model {model.name}, written by simcoll.cost_model.save_model\n{text}", error=ModelError)
