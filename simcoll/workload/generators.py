"""Training steps as frameworks run them: data, tensor and pipeline parallelism.

Each generator is a plain function of a network's shape and the job's
parallel layout that returns a :class:`~.ops.Workload`:

- :func:`data_parallel` - every GPU holds the whole network; the backward
  pass fills gradient buckets in reverse layer order and each full bucket's
  Allreduce starts on its own stream while the backward pass goes on, as
  PyTorch DDP does (S. Li et al., "PyTorch Distributed", VLDB 2020, §3.2:
  buckets of ``bucket_cap_mb`` = 25 MB, the first one 1 MB).
- :func:`transformer` - a Megatron-LM step: tensor parallelism inside each
  layer (two Allreduces of the activations in the forward pass and two in
  the backward, M. Shoeybi et al. 2019, §3, Fig. 3), pipeline parallelism
  over stages with the 1F1B schedule (D. Narayanan et al., "Efficient
  Large-Scale Language Model Training on GPU Clusters", SC 2021, §2.2.1),
  and data parallelism across replicas with the last micro-batch's gradient
  buckets reduced as its backward pass goes. Ranks are laid out as
  Megatron lays them out: tensor-parallel ranks next to each other (inside
  a node), then data-parallel, then pipeline stages.

Networks are named shapes in ``networks.yaml`` beside this module
(:func:`network_layers`); a layer's forward FLOPs per sample are the
matrix products of its shape (a transformer layer: ``24 s h^2 + 4 s^2 h``,
Narayanan et al. 2021, §5.1; a convolution: ``2 x`` its multiply-adds), the
backward pass twice the forward, and compute takes its roofline time on the
machine's GPU at ``compute_efficiency`` of peak (:mod:`.run`, rule W2).

>>> w = data_parallel("resnet50", ranks=4, batch_per_gpu=32)
>>> w.num_ranks, w.samples_per_step, sum(op.kind == "collective" for op in w.programs[0])
(4, 128, 5)
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import WorkloadError
from .ops import CollectiveOp, Compute, Op, Recv, Send, Workload

__all__ = ["GENERATORS", "Layer", "data_parallel", "generate_workload", "network_layers", "transformer"]

NETWORKS_FILE = Path(__file__).with_name("networks.yaml")
#: PyTorch DDP's defaults: ``bucket_cap_mb=25`` and a first bucket of 1 MiB
#: (``torch.distributed``'s ``_DEFAULT_FIRST_BUCKET_BYTES``; Li et al. 2020, §3.2).
DDP_BUCKET_BYTES = 25 * 1024 * 1024
DDP_FIRST_BUCKET_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Layer:
    """One layer of a network: its parameters and forward FLOPs per sample
    (split, for a transformer layer, into its attention and MLP halves)."""

    name: str
    params: float
    forward_flops: float
    attention_flops: float = 0.0  # of forward_flops, a transformer layer's attention block
    attention_params: float = 0.0  # of params, the attention block's (and its layer norm's)

    @property
    def mlp_flops(self) -> float:
        return self.forward_flops - self.attention_flops

    @property
    def mlp_params(self) -> float:
        return self.params - self.attention_params


@functools.cache
def _networks() -> dict[str, Any]:
    from ..files import load_yaml

    return load_yaml(NETWORKS_FILE, error=WorkloadError)


def network_layers(name: str) -> list[Layer]:
    """The layers of network ``name`` (``networks.yaml``), input first.

    >>> layers = network_layers("resnet50")
    >>> round(sum(l.params for l in layers) / 1e6, 2), round(sum(l.forward_flops for l in layers) / 2e9, 2)
    (25.56, 4.09)
    """
    networks = _networks()
    if name not in networks:
        raise WorkloadError(f"unknown network {name!r}; known: {', '.join(networks)}")
    spec = networks[name]
    if spec["kind"] == "resnet":
        return _resnet_layers(spec)
    h, s, v = spec["hidden"], spec["sequence"], spec["vocabulary"]
    layers = [Layer("embedding", v * h + s * h, 0.0)]
    for i in range(spec["layers"]):
        # 12 h^2 + 13 h parameters; forward 24 s h^2 + 4 s^2 h FLOPs, of which the attention block
        # (QKV, scores, values, projection) 8 s h^2 + 4 s^2 h and the MLP 16 s h^2 (Narayanan et al. 2021, §5.1)
        # (of the parameters, attention 4 h^2 + 4 h and its layer norm 2 h; the MLP 8 h^2 + 5 h and its 2 h)
        layers.append(Layer(f"layer{i}", 12 * h * h + 13 * h, 24 * s * h * h + 4 * s * s * h,
                            8 * s * h * h + 4 * s * s * h, 4 * h * h + 6 * h))  # fmt: skip
    layers.append(Layer("logits", 0.0, 2 * s * h * v))  # weights tied to the embedding
    return layers


def _resnet_layers(spec: Mapping[str, Any]) -> list[Layer]:
    """Per block: parameters (convolutions and batch norms) and 2 x multiply-adds (He et al. 2016, Table 1)."""
    size = spec["image"]
    stem = spec["stem"]
    size //= stem["stride"]
    channels = stem["channels"]
    layers = [Layer("stem", 3 * channels * stem["kernel"] ** 2 + 2 * channels,
                    2 * 3 * channels * stem["kernel"] ** 2 * size * size)]  # fmt: skip
    size //= 2  # max-pool
    for s, (blocks, width, out, stride) in enumerate(spec["stages"]):
        for b in range(blocks):
            first = b == 0
            step = stride if first else 1
            out_size = size // step
            convs = [(channels * width, size), (9 * width * width, out_size), (width * out, out_size)]
            norms = width + width + out
            if first:
                convs.append((channels * out, out_size))  # the projection shortcut
                norms += out
            params = sum(weights for weights, _ in convs) + 2 * norms
            flops = sum(2 * weights * at * at for weights, at in convs)
            layers.append(Layer(f"stage{s + 1}.block{b}", params, flops))
            channels, size = out, out_size
    classes = spec["classes"]
    layers.append(Layer("fc", channels * classes + classes, 2 * channels * classes))
    return layers


# -- data parallelism ---------------------------------------------------------------------------------------
def _buckets(layers: list[Layer], bytes_per_param: float, cap_bytes: float, first_bytes: float):
    """DDP's buckets, filled in backward order: (the layer whose gradients close it, its bytes)."""
    buckets, size, cap = [], 0.0, first_bytes
    for layer in reversed(layers):
        size += layer.params * bytes_per_param
        if size >= cap and layer.params:
            buckets.append((layer.name, size))
            size, cap = 0.0, cap_bytes
    if size > 0:
        buckets.append((layers[0].name, size))
    return buckets


def data_parallel(
    model: str = "resnet50",
    ranks: int = 8,
    batch_per_gpu: int = 32,
    *,
    bucket_bytes: float = DDP_BUCKET_BYTES,
    first_bucket_bytes: float = DDP_FIRST_BUCKET_BYTES,
    grad_bytes_per_param: float = 4,
    compute_efficiency: float = 1.0,
    schedule: str = "nccl",
    nccl: str | None = None,
) -> Workload:
    """One data-parallel training step of ``model`` on ``ranks`` GPUs, each
    with ``batch_per_gpu`` samples: forward, backward with bucketed gradient
    Allreduces (``grad_bytes_per_param``: 4 for FP32 gradients) overlapping
    it on stream ``"dp"``, all on group ``"dp"`` (module docstring)."""
    _check_positive_ints(ranks=ranks, batch_per_gpu=batch_per_gpu)
    layers = network_layers(model)
    _check_scale(f"data-parallel {model}", ranks, ranks * 3 * len(layers))
    ops: list[Op] = []
    for layer in layers:
        ops.append(
            Compute(f"fwd.{layer.name}", flops=layer.forward_flops * batch_per_gpu, efficiency=compute_efficiency)
        )
    closes = dict(_buckets(layers, grad_bytes_per_param, bucket_bytes, first_bucket_bytes))
    k = 0
    for layer in reversed(layers):
        ops.append(Compute(f"bwd.{layer.name}", flops=2 * layer.forward_flops * batch_per_gpu,
                           efficiency=compute_efficiency))  # fmt: skip
        if layer.name in closes:
            ops.append(CollectiveOp(f"allreduce.bucket{k}", "allreduce", "dp", closes[layer.name], schedule,
                                    deps=(f"bwd.{layer.name}",), stream="dp"))  # fmt: skip
            k += 1
    return Workload(
        name=f"{model}-dp{ranks}",
        programs=tuple(tuple(ops) for _ in range(ranks)),
        groups={"dp": tuple(range(ranks))},
        samples_per_step=ranks * batch_per_gpu,
        nccl=nccl,
        description=f"{model}, data parallel on {ranks} GPUs, {batch_per_gpu} samples each, DDP buckets of "
        f"{bucket_bytes / 2**20:g} MiB",
    )


# -- Megatron: tensor x pipeline x data ---------------------------------------------------------------------
def transformer(
    model: str = "gpt3-175b",
    tp: int = 8,
    pp: int = 1,
    dp: int = 1,
    *,
    micro_batch: int = 1,
    micro_batches: int | None = None,
    bytes_per_value: float = 2,
    grad_bytes_per_param: float = 4,
    bucket_bytes: float = DDP_BUCKET_BYTES,
    compute_efficiency: float = 1.0,
    schedule: str | Mapping[str, str] = "nccl",
    nccl: str | None = None,
    experts: int = 1,
    moe_every: int = 2,
    top_k: int = 1,
    capacity_factor: float = 1.0,
) -> Workload:
    """One Megatron-LM step of transformer ``model`` on ``tp x pp x dp``
    GPUs (module docstring): ``micro_batches`` micro-batches of
    ``micro_batch`` sequences per replica (default ``pp``) through the 1F1B
    pipeline; activations of ``bytes_per_value`` bytes (2: BF16).
    ``schedule`` is one schedule for every collective, or one per role
    (``{"tp": "nccl", "dp": "ring", "ep": "direct"}``). Groups are
    ``tp.d<d>.p<p>`` and ``dp.t<t>.p<p>``; rank ``t + tp (d + dp p)`` is
    tensor rank ``t`` of replica ``d`` in stage ``p``.

    Mixture of experts: with ``experts`` = ``dp`` (expert parallelism over
    the data-parallel ranks, one expert each, as GShard and DeepSpeed-MoE
    place them), every ``moe_every``-th layer's MLP is an expert layer: its
    tokens go to their experts by an Alltoall over the replica's
    data-parallel group and come back by another (two forward, two
    backward: D. Lepikhin et al., GShard, 2020, §2.2), each expert computing
    ``top_k x capacity_factor`` times a dense MLP's tokens (W. Fedus et al.,
    Switch Transformer, 2021: top-1, capacity factor 1-1.25), and its
    gradients, which no other rank holds, are not reduced across replicas.

    >>> w = transformer("bert-large", tp=2, pp=2, dp=2, micro_batches=2)
    >>> w.num_ranks, sorted(w.groups)[:2], w.samples_per_step
    (8, ['dp.t0.p0', 'dp.t0.p1'], 4)
    """
    _check_positive_ints(tp=tp, pp=pp, dp=dp, micro_batch=micro_batch, experts=experts, moe_every=moe_every,
                         top_k=top_k)  # fmt: skip
    if experts not in (1, dp):
        raise WorkloadError(f"transformer: experts must be 1 (dense) or dp = {dp} (one expert per data-parallel rank), "
                            f"got {experts}")  # fmt: skip
    if isinstance(capacity_factor, bool) or not isinstance(capacity_factor, (int, float)) or not capacity_factor > 0:
        raise WorkloadError(f"transformer: capacity_factor must be positive, got {capacity_factor!r}")
    micro_batches = pp if micro_batches is None else micro_batches
    _check_positive_ints(micro_batches=micro_batches)
    spec = _networks().get(model)
    if spec is None or spec.get("kind") != "transformer":
        known = [n for n, s in _networks().items() if s.get("kind") == "transformer"]
        raise WorkloadError(f"transformer: {model!r} is not a transformer network; known: {', '.join(known)}")
    layers = network_layers(model)
    blocks = layers[1:-1]
    if len(blocks) % pp:
        raise WorkloadError(f"transformer: {len(blocks)} layers of {model} do not split into {pp} equal stages")
    per_rank = micro_batches * (len(blocks) // pp + 2) * (8 if tp > 1 or experts > 1 else 2)
    _check_scale(f"transformer {model}", tp * pp * dp, tp * pp * dp * per_rank)
    roles = {"tp": schedule, "dp": schedule, "ep": schedule} if isinstance(schedule, str) else dict(schedule)
    unknown = sorted(set(roles) - {"tp", "dp", "ep"})
    if unknown or not all(isinstance(v, str) for v in roles.values()):
        raise WorkloadError(f"transformer: schedule is one name or a mapping of roles tp, dp and ep to names, "
                            f"got {schedule!r}")  # fmt: skip
    per_stage = len(blocks) // pp
    activation_bytes = micro_batch * spec["sequence"] * spec["hidden"] * bytes_per_value
    groups = {}
    for p in range(pp):
        for d in range(dp):
            groups[f"tp.d{d}.p{p}"] = tuple(t + tp * (d + dp * p) for t in range(tp))
        for t in range(tp):
            groups[f"dp.t{t}.p{p}"] = tuple(t + tp * (d + dp * p) for d in range(dp))
    moe = frozenset(layer.name for i, layer in enumerate(blocks) if experts > 1 and (i + 1) % moe_every == 0)
    job = _Megatron(tp, pp, dp, micro_batches, micro_batch, activation_bytes, grad_bytes_per_param, bucket_bytes,
                    compute_efficiency, roles.get("tp", "nccl"), roles.get("dp", "nccl"), roles.get("ep", "nccl"),
                    moe, top_k * capacity_factor)  # fmt: skip
    programs = []
    for p in range(pp):
        stage = blocks[p * per_stage : (p + 1) * per_stage]
        first, last = p == 0, p == pp - 1
        extra = ([layers[0]] if first else []), ([layers[-1]] if last else [])
        for d in range(dp):
            for t in range(tp):
                programs.append((p, d, t, job.rank_program(p, d, t, stage, *extra)))
    programs.sort(key=lambda item: item[2] + tp * (item[1] + dp * item[0]))
    return Workload(
        name=f"{model}-tp{tp}-pp{pp}-dp{dp}" + (f"-ep{experts}" if moe else ""),
        programs=tuple(program for *_, program in programs),
        groups=groups,
        samples_per_step=micro_batch * micro_batches * dp,
        nccl=nccl,
        description=f"{model}, Megatron tensor {tp} x pipeline {pp} (1F1B, {micro_batches} micro-batches of "
        f"{micro_batch}) x data {dp}" + (f", {len(moe)} expert layers over {experts} experts" if moe else ""),
    )


@dataclass(frozen=True)
class _Megatron:
    tp: int
    pp: int
    dp: int
    micro_batches: int
    micro_batch: int
    activation_bytes: float
    grad_bytes_per_param: float
    bucket_bytes: float
    efficiency: float
    tp_schedule: str
    dp_schedule: str
    ep_schedule: str = "nccl"
    moe: frozenset = frozenset()  # the names of the expert layers
    expert_load: float = 1.0  # top_k x capacity_factor: an expert's tokens over a dense MLP's

    def rank(self, p: int, d: int, t: int) -> int:
        return t + self.tp * (d + self.dp * p)

    def rank_program(self, p, d, t, stage: list[Layer], head: list[Layer], tail: list[Layer]) -> tuple[Op, ...]:
        """Rank (t, d, p)'s step: 1F1B order (warm-up forwards, then one
        forward and one backward in turn, then the remaining backwards)."""
        m_count = self.micro_batches
        warmup = min(self.pp - p - 1, m_count)
        order = [("F", m) for m in range(warmup)]
        for i in range(m_count - warmup):
            order += [("F", warmup + i), ("B", i)]
        order += [("B", m) for m in range(m_count - warmup, m_count)]
        ops: list[Op] = []
        for phase, m in order:
            if phase == "F":
                self._forward(ops, p, d, t, m, stage, head, tail)
            else:
                self._backward(ops, p, d, t, m, stage, head, tail)
        return tuple(ops)

    def _compute(self, ops: list[Op], name: str, flops: float, deps: tuple[str, ...]) -> str:
        ops.append(Compute(name, flops=flops * self.micro_batch / self.tp, efficiency=self.efficiency, deps=deps))
        return name

    def _tp_allreduce(self, ops: list[Op], name: str, p: int, d: int, after: str) -> str:
        ops.append(CollectiveOp(name, "allreduce", f"tp.d{d}.p{p}", self.activation_bytes, self.tp_schedule,
                                deps=(after,), stream="tp"))  # fmt: skip
        return name

    def _layer(self, ops, tag: str, p: int, d: int, t: int, layer: Layer, before: tuple[str, ...], scale: float):
        """A layer's forward (``scale`` 1) or backward (2) pass: what the next one waits for."""
        if not layer.forward_flops:  # the embedding: a lookup, no matrix product
            return before
        expert = layer.name in self.moe
        if not layer.attention_flops or (self.tp == 1 and not expert):
            return (self._compute(ops, f"{tag}.{layer.name}", scale * layer.forward_flops, before),)
        halves = [("attn", layer.attention_flops), ("mlp", layer.mlp_flops)]
        last = before
        for part, flops in halves if scale == 1 else halves[::-1]:
            moving = expert and part == "mlp"  # the tokens to their experts and back (GShard §2.2)
            if moving:
                last = (self._alltoall(ops, f"{tag}.{layer.name}.dispatch", p, t, last),)
                flops *= self.expert_load
            last = (self._compute(ops, f"{tag}.{layer.name}.{part}", scale * flops, last),)
            if self.tp > 1:
                last = (self._tp_allreduce(ops, f"{tag}.{layer.name}.{part}.allreduce", p, d, last[0]),)
            if moving:
                last = (self._alltoall(ops, f"{tag}.{layer.name}.combine", p, t, last),)
        return last

    def _alltoall(self, ops: list[Op], name: str, p: int, t: int, after: tuple[str, ...]) -> str:
        ops.append(CollectiveOp(name, "alltoall", f"dp.t{t}.p{p}", self.activation_bytes * self.expert_load,
                                self.ep_schedule, deps=after, stream="ep"))  # fmt: skip
        return name

    def _forward(self, ops, p, d, t, m, stage, head, tail) -> None:
        last: tuple[str, ...] = ()
        if p > 0:
            ops.append(Recv(f"recv.F{m}", self.rank(p - 1, d, t), self.activation_bytes, stream="pp-recv"))
            last = (f"recv.F{m}",)
        for layer in head + stage + tail:
            last = self._layer(ops, f"F{m}", p, d, t, layer, last, 1.0)
        if p < self.pp - 1:
            ops.append(Send(f"send.F{m}", self.rank(p + 1, d, t), self.activation_bytes, deps=last, stream="pp-send"))

    def _backward(self, ops, p, d, t, m, stage, head, tail) -> None:
        last: tuple[str, ...] = ()
        if p < self.pp - 1:
            ops.append(Recv(f"recv.B{m}", self.rank(p + 1, d, t), self.activation_bytes, stream="pp-recv"))
            last = (f"recv.B{m}",)
        final = m == self.micro_batches - 1 and self.dp > 1
        filled, k = 0.0, 0
        layers = list(reversed(head + stage + tail))
        for i, layer in enumerate(layers):
            last = self._layer(ops, f"B{m}", p, d, t, layer, last, 2.0)
            if not final:
                continue
            shared = layer.attention_params if layer.name in self.moe else layer.params  # (an expert's are its own)
            filled += shared / self.tp * self.grad_bytes_per_param
            if filled and (filled >= self.bucket_bytes or i == len(layers) - 1):
                ops.append(CollectiveOp(f"B{m}.grads{k}", "allreduce", f"dp.t{t}.p{p}", filled, self.dp_schedule,
                                        deps=last, stream="dp"))  # fmt: skip
                filled, k = 0.0, k + 1
        if p > 0:
            ops.append(Send(f"send.B{m}", self.rank(p - 1, d, t), self.activation_bytes, deps=last, stream="pp-send"))


# -- by name ------------------------------------------------------------------------------------------------
GENERATORS: dict[str, Callable[..., Workload]] = {"data-parallel": data_parallel, "transformer": transformer}


def generate_workload(kind: str, **options: Any) -> Workload:
    """The workload of generator ``kind`` (:data:`GENERATORS`) with ``options``."""
    if kind not in GENERATORS:
        raise WorkloadError(f"unknown workload generator {kind!r}; known: {', '.join(GENERATORS)}")
    try:
        return GENERATORS[kind](**options)
    except TypeError as exc:
        raise WorkloadError(f"{kind}: {exc}") from None


def _check_scale(what: str, ranks: int, operations: int) -> None:
    """Refuse a job larger than simcoll builds, before building it."""
    from ..limits import MAX_GPUS, MAX_WORKLOAD_OPERATIONS

    if ranks > MAX_GPUS:
        raise WorkloadError(
            f"{what}: {ranks:,} ranks, more than simcoll takes (simcoll.limits.MAX_GPUS = {MAX_GPUS:,})"
        )
    if operations > MAX_WORKLOAD_OPERATIONS:
        raise WorkloadError(f"{what}: about {operations:,} operations, more than simcoll holds "
                            f"(simcoll.limits.MAX_WORKLOAD_OPERATIONS = {MAX_WORKLOAD_OPERATIONS:,})")  # fmt: skip


def _check_positive_ints(**values: Any) -> None:
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise WorkloadError(f"{key} must be a positive whole number, got {value!r}")
