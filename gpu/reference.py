"""NumPy reference executor of an :class:`~simcoll.gpu.table.InstructionTable`.

It runs the packed table (not the Program) on real data, so reaching the
collective's postcondition proves that the table encodes the Program
faithfully; and it is the golden result the host-thread and GPU interpreters
must match bit for bit.

Semantics (shared with ``gpu/csrc/interp_core.h``):

- A chunk is ``chunk_elems`` consecutive elements; a reference (rank,
  buffer, offset) with ``count`` n covers chunks ``offset .. offset+n-1``.
  In-place collectives map the alias buffer into its target (table
  ``aliases``).
- Sums are element-wise: both operands are widened to float32, added in
  float32 and rounded back to the element type with round-to-nearest-even
  (IEEE 754 §4.3.1). For float16 and bfloat16 that equals the correctly
  rounded half-precision sum, since float32 has at least 2p+2 bits for
  their p (Figueroa, "When is double rounding innocuous?", 1995).
  bfloat16 is held as ``uint16`` bit patterns.
- Operands combine in the Program's order: ``rrc``/``rrs``/``rrcs``
  compute received ⊕ src, ``reduce`` dst ⊕ src, ``load_reduce`` folds its
  sources left to right. The result therefore does not depend on the
  schedule's timing for race-free Programs (:func:`simcoll.verify.check`).
- Executors run round-robin, each as far as it can: an instruction waits for
  its dependencies, a receive for a message, a send for a free FIFO slot
  (``table.fifo_slots`` messages per connection). No progress with work left
  raises :class:`~simcoll.errors.InterpreterDeadlockError`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from simcoll.collectives import Collective
from simcoll.errors import AlgorithmError, InterpreterDeadlockError

from .table import OP_CODES, InstructionTable

#: Element types: name -> (code in interp_core.h, storage dtype, bytes).
DTYPES: dict[str, tuple[int, np.dtype, int]] = {
    "float32": (0, np.dtype(np.float32), 4),
    "float16": (1, np.dtype(np.float16), 2),
    "bfloat16": (2, np.dtype(np.uint16), 2),
}

_OP = {code: name for name, code in OP_CODES.items()}
_RECEIVES = {"recv", "rcs", "rrc", "rrs", "rrcs", "wait"}
_SENDS = {"send", "rcs", "rrs", "rrcs", "signal"}


def dtype_info(dtype: str) -> tuple[int, np.dtype, int]:
    """(code, storage dtype, element bytes) of an element type name."""
    if dtype not in DTYPES:
        raise AlgorithmError(f"unknown element type {dtype!r}; known: {', '.join(DTYPES)}")
    return DTYPES[dtype]


def to_float32(values: np.ndarray, dtype: str) -> np.ndarray:
    """Widen storage values to float32 (exact)."""
    if dtype == "bfloat16":
        return (values.astype(np.uint32) << np.uint32(16)).view(np.float32)
    return values.astype(np.float32)


def from_float32(values: np.ndarray, dtype: str) -> np.ndarray:
    """Round float32 values to the storage type, to nearest even."""
    values = np.asarray(values, dtype=np.float32)
    if dtype == "float32":
        return values
    if dtype == "float16":
        return values.astype(np.float16)
    bits = values.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    nan = (bits & 0x7FFFFFFF) > 0x7F800000
    if nan.any():
        rounded[nan] = ((bits[nan] >> 16) | 0x40).astype(np.uint16)  # quiet NaN, sign kept
    return rounded


def add(a: np.ndarray, b: np.ndarray, dtype: str) -> np.ndarray:
    """``a ⊕ b`` as the interpreter computes it (see the module docstring)."""
    return from_float32(to_float32(a, dtype) + to_float32(b, dtype), dtype)


def chunk_elems(table: InstructionTable, size_bytes: int, dtype: str) -> int:
    """Elements per chunk for a collective of ``size_bytes`` (the nccl-tests
    size: :attr:`~simcoll.collectives.Collective.size_chunks` chunks)."""
    _, _, width = dtype_info(dtype)
    per = table.collective.size_chunks * width
    if not isinstance(size_bytes, int) or size_bytes < per or size_bytes % per:
        raise AlgorithmError(
            f"{table.name}: size {size_bytes!r} bytes is not a positive multiple of {per} "
            f"({table.collective.size_chunks} chunks of {dtype})"
        )
    return size_bytes // per


@dataclass
class Buffers:
    """Every rank's buffers: ``data[rank][buffer id]`` (flat arrays, ``None``
    where undeclared; alias buffers are views into their targets)."""

    data: list[list[np.ndarray | None]]
    chunk_elems: int
    dtype: str

    def snapshot(self) -> list[list[np.ndarray | None]]:
        return [[None if a is None else a.copy() for a in rank] for rank in self.data]


def make_inputs(
    collective: Collective, elems: int, dtype: str, *, seed: int = 0, integers: bool = True
) -> list[np.ndarray]:
    """Per rank, its input buffer's data (storage dtype). With ``integers``
    the values are small positive integers, so any summation order is exact
    and the postcondition can be checked for equality."""
    rng = np.random.default_rng(seed)
    out = []
    for layout in collective.input_layout:
        n = len(layout) * elems
        values = rng.integers(1, 8, n).astype(np.float32) if integers else rng.standard_normal(n).astype(np.float32)
        out.append(from_float32(values, dtype))
    return out


def allocate(table: InstructionTable, elems: int, dtype: str, inputs: list[np.ndarray]) -> Buffers:
    """Zeroed buffers with the inputs written in (through in-place aliases)."""
    _, storage, _ = dtype_info(dtype)
    data: list[list[np.ndarray | None]] = []
    for r in range(table.num_ranks):
        alias_buf, target, offset = (int(v) for v in table.aliases[r])
        row: list[np.ndarray | None] = []
        for b, n in enumerate(table.buffer_chunks[r]):
            row.append(None if n < 0 or b == alias_buf else np.zeros(int(n) * elems, dtype=storage))
        if alias_buf >= 0:
            length = max(int(table.buffer_chunks[r, alias_buf]), len(table.collective.input_layout[r])) * elems
            row[alias_buf] = row[target][offset * elems : offset * elems + length]
        data.append(row)
        need = inputs[r].size
        if need:
            inp = data[r][0]
            if inp is None or inp.size < need:
                raise AlgorithmError(f"{table.name}: rank {r}'s input buffer is smaller than its {need} input elements")
            inp[:need] = inputs[r]
    return Buffers(data, elems, dtype)


def expected_outputs(collective: Collective, inputs: list[np.ndarray], elems: int, dtype: str) -> list[np.ndarray]:
    """The postcondition on data: per rank, its output buffer's required
    values (the chunk, or for combining collectives the sum over every
    contributor, accumulated in float64 and rounded once)."""
    where: dict[int, list[tuple[int, int]]] = {}
    for r, layout in enumerate(collective.input_layout):
        seen = set()
        for i, c in enumerate(layout):
            if c not in seen:
                where.setdefault(c, []).append((r, i))
                seen.add(c)
    out = []
    for layout in collective.output_layout:
        values = np.zeros(len(layout) * elems, dtype=np.float64)
        for j, c in enumerate(layout):
            parts = where[c] if collective.combining else where[c][:1]
            for r, i in parts:
                values[j * elems : (j + 1) * elems] += to_float32(inputs[r][i * elems : (i + 1) * elems], dtype)
        out.append(from_float32(values.astype(np.float32), dtype))
    return out


def postcondition_problems(table: InstructionTable, buffers: Buffers, inputs: list[np.ndarray]) -> list[str]:
    """Output slots that differ from :func:`expected_outputs` (empty when the
    run reached the postcondition)."""
    coll = table.collective
    expected = expected_outputs(coll, inputs, buffers.chunk_elems, buffers.dtype)
    problems = []
    e = buffers.chunk_elems
    for r, layout in enumerate(coll.output_layout):
        out = buffers.data[r][1]
        for j, c in enumerate(layout):
            got = None if out is None else out[j * e : (j + 1) * e]
            want = expected[r][j * e : (j + 1) * e]
            if got is None or got.tobytes() != want.tobytes():
                problems.append(f"rank {r} output[{j}] (chunk {c}) does not hold its expected values")
    return problems


def execute(table: InstructionTable, buffers: Buffers) -> None:
    """Run the table on ``buffers`` in place (see the module docstring)."""
    e, dtype = buffers.chunk_elems, buffers.dtype
    ex, ins_t, deps, srcs, conns = table.executors, table.instructions, table.deps, table.sources, table.connections
    n = table.num_executors
    pc = [0] * n
    fifo: list[deque] = [deque() for _ in range(conns.shape[0])]
    slots = table.fifo_slots

    def span(rank: int, ref_rank: int, buf: int, off: int, count: int) -> np.ndarray:
        owner = rank if ref_rank < 0 else ref_rank
        array = buffers.data[owner][buf]
        return array[off * e : (off + count) * e]

    def blocked(g: int) -> str | None:
        row = ins_t[int(ex[g, 8]) + pc[g]]
        for d, step in deps[row[8] : row[8] + row[9]]:
            if pc[d] <= step:
                return f"waits for {table.executor_label(int(d))} step {int(step)}"
        op = _OP[int(row[0])]
        if op in _RECEIVES and not fifo[ex[g, 7]]:
            return f"step {pc[g]} ({op}) waits for a message from rank {int(ex[g, 5])} on channel {int(ex[g, 2])}"
        if op in _SENDS and len(fifo[ex[g, 6]]) >= slots:
            return f"step {pc[g]} ({op}) waits for a free FIFO slot to rank {int(ex[g, 4])}"
        return None

    def run_one(g: int) -> None:
        rank = int(ex[g, 0])
        row = [int(v) for v in ins_t[int(ex[g, 8]) + pc[g]]]
        op, count = _OP[row[0]], row[7]
        received = fifo[ex[g, 7]].popleft() if op in _RECEIVES else None
        outgoing = None

        def src() -> np.ndarray:
            return span(rank, row[1], row[2], row[3], count)

        def dst() -> np.ndarray:
            return span(rank, row[4], row[5], row[6], count)

        if op == "send":
            outgoing = src().copy()
        elif op in ("recv", "rcs"):
            dst()[:] = received
            outgoing = received
        elif op in ("rrc", "rrs", "rrcs"):
            outgoing = add(received, src(), dtype)
            if op != "rrs":
                dst()[:] = outgoing
        elif op in ("copy", "put", "get"):
            dst()[:] = src()
        elif op == "reduce":
            target = dst()
            target[:] = add(target, src(), dtype)
        elif op == "load_reduce":
            sources = srcs[row[10] : row[10] + row[11]]
            value = span(rank, *(int(v) for v in sources[0]), count).copy()
            for s in sources[1:]:
                value = add(value, span(rank, *(int(v) for v in s), count), dtype)
            dst()[:] = value
        elif op == "signal":
            outgoing = np.empty(0)
        if op in _SENDS:
            fifo[ex[g, 6]].append(outgoing)
        pc[g] += 1

    progress = True
    while progress:
        progress = False
        for g in range(n):
            while pc[g] < ex[g, 9] and blocked(g) is None:
                run_one(g)
                progress = True
    stuck = [g for g in range(n) if pc[g] < ex[g, 9]]
    if stuck:
        raise InterpreterDeadlockError(
            table.name, "NumPy reference executor", [f"{table.executor_label(g)} {blocked(g)}" for g in stuck]
        )


@dataclass(frozen=True)
class ReferenceRun:
    """Result of :func:`run_reference`: inputs, final buffers and the problems
    found against the postcondition (empty: reached)."""

    inputs: list[np.ndarray]
    buffers: Buffers
    problems: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems


def run_reference(
    table: InstructionTable, size_bytes: int, dtype: str = "float32", *, seed: int = 0, integers: bool = True
) -> ReferenceRun:
    """Allocate, fill with :func:`make_inputs`, :func:`execute` and check the postcondition."""
    elems = chunk_elems(table, size_bytes, dtype)
    inputs = make_inputs(table.collective, elems, dtype, seed=seed, integers=integers)
    buffers = allocate(table, elems, dtype, inputs)
    execute(table, buffers)
    problems = postcondition_problems(table, buffers, inputs) if integers else []
    return ReferenceRun(inputs, buffers, problems)


def same_bits(a: Buffers, b: Buffers) -> list[str]:
    """(rank, buffer) pairs whose contents differ in any bit."""
    out = []
    for r, (ra, rb) in enumerate(zip(a.data, b.data, strict=True)):
        for k, (x, y) in enumerate(zip(ra, rb, strict=True)):
            if x is None and y is None:
                continue
            if x is None or y is None or x.tobytes() != y.tobytes():
                out.append(f"rank {r} buffer {k}")
    return out
