"""NCCL's tuning constants, loaded from a data file per NCCL release
(``nccl_2_30.yaml``, the default, and the older ones of
:mod:`simcoll.nccl.versions`).

The numbers are facts read from NVIDIA/nccl at each release's tag (every file
cites its source lines); this module only checks their shape and offers typed
look-ups. A file's ``model`` says which tuner reads it: ``tune-model`` (NCCL
2.13+, :mod:`simcoll.nccl.tuner`), ``classic`` (2.5-2.12,
:mod:`simcoll.nccl.classic`) or ``thresholds`` (2.4,
:mod:`simcoll.nccl.thresholds`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from ..errors import ModelError

#: NCCL's algorithms, in simcoll spelling (NCCL: Tree, Ring, CollNetDirect,
#: CollNetChain, NVLS, NVLSTree, PAT).
ALGORITHMS = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")
#: NCCL's protocols, in the order of its tables.
PROTOCOLS = ("ll", "ll128", "simple")
#: GPU generations NCCL distinguishes (``NCCL_*_COMPCAP_IDX``).
GENERATIONS = ("volta", "ampere", "hopper", "blackwell")
HARDWARE = ("nvlink", "pci", "net")
#: The tuners a constants file can be read by (its ``model`` field; ``tune-model`` when absent).
MODELS = ("tune-model", "classic", "thresholds")
#: Fields every file of a model must have (besides ``version`` and ``source``).
_REQUIRED = {
    "classic": (
        "algorithms", "protocols", "base_latency_us", "hw_latency_us", "bus_cap_sm80_GBps", "ring_ll_fraction",
        "ring_ll_fraction_one_node_other", "ll_max_bw", "ring_ll128_fraction", "ring_ll128_fraction_one_gpu_per_node",
        "ll128_max_bw_per_channel", "tree_fraction", "max_tree_bw", "per_channel_max_tree_bw", "tree_ll_divisor",
        "tree_ll128_fraction_one_node", "tree_ll128_fraction_multi_node", "tree_ll128_cap_factor",
        "multi_node_ll_intra_latency_factor", "ring_allreduce_inter_steps", "ring_simple_plateau_factor",
        "ring_simple_plateau_min_bytes_per_rank", "power_tree_simple_pci_latency_is_ring", "tree_correction_factor",
        "ll128_compute_capabilities", "ll128_max_nic_path", "warp_size", "max_threads", "thread_threshold", "link_bw",
    ),
    "thresholds": (
        "algorithms", "protocols", "thread_threshold", "tree_thread_threshold_factor", "ll_channel_threshold",
        "ll_min_threads", "default_threads", "tree_threshold",
    ),
}  # fmt: skip

DEFAULT_FILE = Path(__file__).with_name("nccl_2_30.yaml")


def generation(compute_capability: int) -> str:
    """NCCL's GPU-generation index for a compute capability such as 80 or 90
    (tuning.cc:262-265: >= 100 Blackwell, >= 90 Hopper, >= 80 Ampere, else Volta)."""
    if compute_capability >= 100:
        return "blackwell"
    if compute_capability >= 90:
        return "hopper"
    if compute_capability >= 80:
        return "ampere"
    return "volta"


def node_index(num_nodes: int) -> int:
    """Column of the per-node-count tables: 1 node, 2 nodes, >= 3 nodes."""
    return 0 if num_nodes <= 1 else 1 if num_nodes == 2 else 2


@dataclass(frozen=True)
class TunerConstants:
    """The parsed constants file; ``data`` keeps every field of the file."""

    version: str
    source: str
    data: dict[str, Any]
    model: str = "tune-model"

    @property
    def algorithms(self) -> tuple[str, ...]:
        """The algorithms this release has."""
        return tuple(self.data.get("algorithms", ALGORITHMS))

    @property
    def protocols(self) -> tuple[str, ...]:
        """The protocols this release has."""
        return tuple(self.data.get("protocols", PROTOCOLS))

    def base_latency(self, algorithm: str, protocol: str) -> float:
        return float(self.data["base_latency_us"][algorithm][PROTOCOLS.index(protocol)])

    def hw_latency(self, hardware: str, algorithm: str, protocol: str) -> float:
        return float(self.data["hw_latency_us"][hardware][algorithm][PROTOCOLS.index(protocol)])

    def per_generation(self, table: str, gen: str, num_nodes: int) -> float:
        return float(self.data[table][gen][node_index(num_nodes)])

    def __getitem__(self, key: str) -> Any:
        return self.data[key]


_TABLES_BY_GEN = (
    "ll_max_bw",
    "per_channel_max_ring_ll128_bw",
    "per_channel_max_tree_ll128_bw",
    "per_channel_max_tree_bw",
    "per_channel_max_nvls_tree_bw",
)


@lru_cache(maxsize=8)
def load_constants(path: str | Path = DEFAULT_FILE) -> TunerConstants:
    """Read and check a constants file (default: NCCL 2.30.7's)."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ModelError(f"{path}: cannot read NCCL tuner constants: {exc}") from None
    if not isinstance(data, dict):
        raise ModelError(f"{path}: expected a mapping of NCCL tuner constants")
    model = str(data.get("model", "tune-model"))
    if model not in MODELS:
        raise ModelError(f"{path}: model {model!r} is not one of {', '.join(MODELS)}")
    if model != "tune-model":
        missing = [key for key in _REQUIRED[model] if key not in data]
        if missing:
            raise ModelError(f"{path}: missing NCCL tuner constant(s) {', '.join(missing)} (model {model})")
        unknown = sorted(set(data["algorithms"]) - set(ALGORITHMS)) + sorted(set(data["protocols"]) - set(PROTOCOLS))
        if unknown:
            raise ModelError(f"{path}: unknown algorithm(s) or protocol(s) {unknown}")
        return TunerConstants(str(data.get("version", "?")), str(data.get("source", path)), data, model)
    try:
        for table in ("base_latency_us",):
            _check_algo_table(data[table], f"{path}: {table}")
        for hw in HARDWARE:
            _check_algo_table(data["hw_latency_us"][hw], f"{path}: hw_latency_us.{hw}")
        for table in _TABLES_BY_GEN:
            for gen in GENERATIONS:
                row = data[table][gen]
                if len(row) != 3:
                    raise ModelError(f"{path}: {table}.{gen} needs 3 values (1, 2, >=4 nodes), got {row}")
        for gen in GENERATIONS:
            float(data["nvls_efficiency"][gen])
        if len(data["tree_correction_factor"]) != 3:
            raise ModelError(f"{path}: tree_correction_factor needs one row per protocol")
    except KeyError as exc:
        raise ModelError(f"{path}: missing NCCL tuner constant {exc}") from None
    return TunerConstants(version=str(data.get("version", "?")), source=str(data.get("source", path)), data=data)


def _check_algo_table(table: Any, where: str) -> None:
    for algorithm in ALGORITHMS:
        row = table.get(algorithm) if isinstance(table, dict) else None
        if row is None or len(row) != 3:
            raise ModelError(f"{where}.{algorithm} needs 3 values (LL, LL128, Simple), got {row}")
