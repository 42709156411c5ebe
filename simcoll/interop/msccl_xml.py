"""MSCCL XML: the runtime format of MSCCL and RCCL, to and from :class:`Program`.

The format (``../shared/reference/FACTS.md``; GC3 §5–6, the GC3-IR) is::

    <algo name proto nchannels nchunksperloop ngpus coll inplace [outofplace minBytes maxBytes redop]>
      <gpu id i_chunks o_chunks s_chunks>
        <tb id send recv chan>
          <step s type srcbuf srcoff dstbuf dstoff cnt depid deps hasdep/>

Two runtime dialects (FACTS.md): ``"classic"`` (the default, the format of the
msccl-tools compiler and of every file in ``../shared/interop/msccl-xml/``:
ReduceScatter spelled ``reduce_scatter``, ``minBytes``/``maxBytes``/
``outofplace`` optional) and ``"newer"`` (newer MSCCL/RCCL runtimes: those four
attributes required, ReduceScatter spelled ``reducescatter``, no ``custom``
collective). Import accepts both.

Mapping onto :class:`~simcoll.program.Program`: ``<gpu>`` → a
:class:`RankProgram` with buffers ``input``/``output``/``scratch`` of
``i_chunks``/``o_chunks``/``s_chunks``; ``<tb>`` → an :class:`Executor` (id,
send/recv peer, ``-1`` → None, channel); ``<step>`` → an :class:`Instruction`
(``s``→send, ``r``→recv, ``rcs rrc rrs rrcs``, ``cpy``→copy, ``re``→reduce,
``nop``), ``depid``/``deps`` → ``deps``. As the runtime does, a step keeps only
its *local* references: send ``src``; recv and rcs ``dst``; rrs ``src``; rrc,
rrcs, cpy, re both. The XML's other reference of a send or receive names the
peer's buffer and is informative only; the exporter recomputes it by matching
sends and receives in FIFO order per connection, and ``hasdep`` from the
dependencies, so export of an imported file reproduces it. ``nchannels`` and
``nchunksperloop`` are kept on the Program only when they differ from what its
thread blocks and collective imply.

Newer runtimes fold a ``nop``'s dependency into the next real step and merge
chains of ``re`` steps into one reduction; both keep the meaning written here.

The collective: ``allreduce``/``reduce``/``broadcast`` have chunk factor
``nchunksperloop``; ``allgather``/``alltoall``/``reduce_scatter``/``gather``/
``scatter`` have ``nchunksperloop / ngpus`` (the largest buffer holds all
ranks' chunks, as msccl-tools writes it). Roots of rooted collectives are
inferred (the one rank that never receives, or never sends). ``custom``
collectives state no postcondition: it is inferred as what the program delivers
into the output buffers (each input slot a contribution; contributions reduced
together are one chunk of a combining collective), and every output slot must
receive data; pass ``collective=`` to check against a known one instead. In
place (``inplace="1"``, e.g. msccl-tools' AllToNext forward program) the same
inference runs with output and input aliased as the verifier aliases them.

>>> program = read_msccl_xml("allreduce_ring.xml")            # doctest: +SKIP
>>> parse_msccl_xml(export_msccl_xml(program)) == program      # doctest: +SKIP
True

Why one module of ~970 lines: import and export are the two directions of one
mapping, and each leans on the other. Both use the tables of step types and
collective names below; the importer keeps ``nchunksperloop`` only where it
differs from what the exporter writes (:func:`_chunks_per_loop`); and the
exporter is specified by the importer reading its output back to the same
Program (the round trip above, tested on the files of
``../shared/interop/msccl-xml/``). Split, the shared tables and helpers would
need a module of their own, and the examples each other's functions. The
sections (parsing, import, the collective an ``<algo>`` implements, export)
read one at a time.
"""

from __future__ import annotations

import re
from collections import defaultdict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from xml.parsers import expat
from xml.sax.saxutils import quoteattr

from ..collectives import Collective, custom_collective, make_collective
from ..errors import AlgorithmError, CollectiveError
from ..files import read_text, write_atomic
from ..program import RECEIVES, SENDS, Executor, Instruction, Program, RankProgram, Ref

DIALECTS = ("classic", "newer")
DEFAULT_DIALECT = "classic"
#: ``maxBytes`` written by the newer dialect when the Program states no upper size (int64 max).
UNBOUNDED_BYTES = 2**63 - 1

_OP_FROM_XML = {
    "s": "send",
    "r": "recv",
    "rcs": "rcs",
    "rrc": "rrc",
    "rrs": "rrs",
    "rrcs": "rrcs",
    "cpy": "copy",
    "re": "reduce",
    "nop": "nop",
}
_OP_TO_XML = {v: k for k, v in _OP_FROM_XML.items()}
_BUFFER_FROM_XML = {"i": "input", "o": "output", "s": "scratch"}
_BUFFER_TO_XML = {v: k for k, v in _BUFFER_FROM_XML.items()}
# Which of src/dst the runtime reads for each op (MSCCL's interpreter).
_LOCAL_SRC = frozenset({"send", "rrs", "rrc", "rrcs", "copy", "reduce"})
_LOCAL_DST = frozenset({"recv", "rcs", "rrc", "rrcs", "copy", "reduce"})
# Collective names: XML spelling -> simcoll name.
_COLL_FROM_XML = {
    "allreduce": "allreduce",
    "allgather": "allgather",
    "alltoall": "alltoall",
    "reduce_scatter": "reducescatter",
    "reducescatter": "reducescatter",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "gather": "gather",
    "scatter": "scatter",
}
# Chunk factor C = nchunksperloop / divisor(ngpus).
_PER_RANK_FACTOR = frozenset({"allgather", "alltoall", "reducescatter", "gather", "scatter"})
_COLL_TO_FACTOR_NAMES = frozenset(_COLL_FROM_XML.values())
_ALGO_REQUIRED = ("proto", "nchannels", "nchunksperloop", "ngpus", "coll")
_STEP_REQUIRED = ("s", "type", "srcbuf", "srcoff", "dstbuf", "dstoff", "cnt", "depid", "deps", "hasdep")


# ---------------------------------------------------------------------------
# Parsing (expat, for line numbers; several <algo> elements per file allowed)
# ---------------------------------------------------------------------------
@dataclass
class _Node:
    tag: str
    attrs: dict[str, str]
    line: int
    children: list[_Node] = field(default_factory=list)


def _parse(text: str, where: str) -> list[_Node]:
    # Drop an XML declaration (keeping line numbers) and wrap, so that files
    # holding several <algo> elements parse.
    text = re.sub(r"^\s*<\?xml[^>]*\?>", lambda m: "\n" * m.group(0).count("\n"), text)
    root = _Node("document", {}, 0)
    stack = [root]
    parser = expat.ParserCreate()

    def start(tag: str, attrs: dict[str, str]) -> None:
        node = _Node(tag, dict(attrs), parser.CurrentLineNumber)
        stack[-1].children.append(node)
        stack.append(node)

    def end(_tag: str) -> None:
        stack.pop()

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    try:
        parser.Parse("<simcoll-document>" + text + "</simcoll-document>", True)
    except expat.ExpatError as exc:
        raise AlgorithmError(
            f"{where}: not well-formed XML at line {exc.lineno}: {expat.ErrorString(exc.code)}"
        ) from None
    return root.children[0].children


class _Context:
    """Names the file and element in error messages."""

    def __init__(self, where: str):
        self.where = where

    def error(self, node: _Node, message: str) -> AlgorithmError:
        ident = " ".join(f'{k}="{node.attrs[k]}"' for k in ("id", "s") if k in node.attrs)
        element = f"<{node.tag}{' ' + ident if ident else ''}>"
        return AlgorithmError(f"{self.where}:{node.line}: {element}: {message}")

    def attr(self, node: _Node, name: str, default: str | None = None) -> str:
        value = node.attrs.get(name, default)
        if value is None:
            raise self.error(node, f"missing attribute {name!r}")
        return value

    def int_attr(self, node: _Node, name: str, least: int | None = None, default: str | None = None) -> int:
        raw = self.attr(node, name, default)
        try:
            value = int(raw)
        except ValueError:
            raise self.error(node, f"attribute {name}={raw!r} is not an integer") from None
        if least is not None and value < least:
            raise self.error(node, f"attribute {name}={value} must be >= {least}")
        return value

    def flag(self, node: _Node, name: str, default: str | None = None) -> bool:
        value = self.int_attr(node, name, default=default)
        if value not in (0, 1):
            raise self.error(node, f"attribute {name}={value} must be 0 or 1")
        return bool(value)


# ---------------------------------------------------------------------------
# Import
# ---------------------------------------------------------------------------
def read_msccl_xml_all(path: str | Path, *, collective: Collective | None = None) -> list[Program]:
    """Every ``<algo>`` of an MSCCL XML file, as Programs, in file order.

    Parameters
    ----------
    path : str or Path
        The file.
    collective : Collective, optional
        Overrides the collective the file implies (see :func:`parse_msccl_xml`).

    Returns
    -------
    list of Program
        One per ``<algo>`` element, in file order.

    Raises
    ------
    AlgorithmError
        Naming the file, line and element (see :func:`parse_msccl_xml_all`).

    Examples
    --------
    >>> read_msccl_xml_all("missing.xml")
    Traceback (most recent call last):
    simcoll.errors.AlgorithmError: missing.xml: cannot read: No such file or directory
    """
    return _import_text(read_text(path, error=AlgorithmError), str(path), collective)


def parse_msccl_xml_all(text: str, where: str = "<xml text>", *, collective: Collective | None = None) -> list[Program]:
    """Every ``<algo>`` of MSCCL XML text, as Programs, in order.

    Parameters
    ----------
    text : str
        The XML.
    where : str
        What the text is (a file name), the prefix of error messages.
    collective : Collective, optional
        Overrides the collective the XML implies (see :func:`parse_msccl_xml`).

    Returns
    -------
    list of Program
        One per ``<algo>`` element, in order.

    Raises
    ------
    AlgorithmError
        Naming ``where``, the line and the element for unknown step types,
        buffers or collectives, missing or malformed attributes, and
        references to thread blocks, steps or buffer slots that do not exist.

    Examples
    --------
    >>> parse_msccl_xml_all("<!-- nothing -->")
    Traceback (most recent call last):
    simcoll.errors.AlgorithmError: <xml text>: no <algo> element
    """
    return _import_text(text, where, collective)


def _import_text(text: str, where: str, collective: Collective | None) -> list[Program]:
    nodes = _parse(text, where)
    ctx = _Context(where)
    algos = []
    for node in nodes:
        if node.tag != "algo":
            raise ctx.error(node, "expected <algo> at the top level")
        algos.append(node)
    if not algos:
        raise AlgorithmError(f"{where}: no <algo> element")
    return [_import_algo(ctx, node, collective) for node in algos]


def read_msccl_xml(path: str | Path, *, index: int | None = None, collective: Collective | None = None) -> Program:
    """The Program of an MSCCL XML file (GC3-IR).

    Parameters
    ----------
    path : str or Path
        The file.
    index : int, optional
        Which ``<algo>`` of a file holding several (else use
        :func:`read_msccl_xml_all`).
    collective : Collective, optional
        Overrides the collective the file implies (see :func:`parse_msccl_xml`).

    Returns
    -------
    Program
        The file's (or the ``index``-th) ``<algo>``.

    Raises
    ------
    AlgorithmError
        Naming the file, line and element.

    Examples
    --------
    >>> import tempfile
    >>> from simcoll import lower_algorithm, make_collective
    >>> from simcoll.algorithm import steps_from_lists
    >>> swap = steps_from_lists("swap", make_collective("allgather", 2, 1), [[(0, 0, 1, "copy"), (1, 1, 0, "copy")]])
    >>> program = lower_algorithm(swap)
    >>> path = Path(tempfile.mkdtemp()) / "ring.xml"
    >>> _ = path.write_text(export_msccl_xml(program))
    >>> again = read_msccl_xml(path)             # all but the Program's metadata
    >>> (again.ranks, again.collective) == (program.ranks, program.collective)
    True
    """
    return _pick(_import_text(read_text(path, error=AlgorithmError), str(path), collective), index, str(path))


def parse_msccl_xml(
    text: str, where: str = "<xml text>", *, index: int | None = None, collective: Collective | None = None
) -> Program:
    """The Program of MSCCL XML text (GC3-IR).

    Parameters
    ----------
    text : str
        The XML.
    where : str
        What the text is (a file name), the prefix of error messages.
    index : int, optional
        Which ``<algo>`` of text holding several (else use
        :func:`parse_msccl_xml_all`).
    collective : Collective, optional
        Overrides the collective the XML implies (useful for
        ``coll="custom"``, whose postcondition the XML does not state).

    Returns
    -------
    Program
        The text's (or the ``index``-th) ``<algo>``.

    Raises
    ------
    AlgorithmError
        Naming ``where``, the line and the element.

    Examples
    --------
    >>> p = parse_msccl_xml('''<algo name="x" proto="Simple" nchannels="1" nchunksperloop="1" ngpus="2"
    ...   coll="custom" inplace="0">
    ...  <gpu id="0" i_chunks="1" o_chunks="0" s_chunks="0"><tb id="0" send="1" recv="-1" chan="0">
    ...   <step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    ...  </tb></gpu>
    ...  <gpu id="1" i_chunks="0" o_chunks="1" s_chunks="0"><tb id="0" send="-1" recv="0" chan="0">
    ...   <step s="0" type="r" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    ...  </tb></gpu></algo>''')
    >>> p.instruction_counts()
    {'send': 1, 'recv': 1}
    """
    return _pick(_import_text(text, where, collective), index, where)


def _pick(programs: list[Program], index: int | None, where: str) -> Program:
    if index is None:
        if len(programs) > 1:
            raise AlgorithmError(
                f"{where}: holds {len(programs)} <algo> elements; choose one with index (0..{len(programs) - 1}) "
                "or import them all"
            )
        return programs[0]
    if not isinstance(index, int) or not 0 <= index < len(programs):
        raise AlgorithmError(f"{where}: index {index!r} out of range 0..{len(programs) - 1}")
    return programs[index]


def _import_algo(ctx: _Context, node: _Node, collective: Collective | None) -> Program:
    for name in _ALGO_REQUIRED:
        ctx.attr(node, name)
    name = node.attrs.get("name") or Path(ctx.where).stem or "msccl"
    protocol = ctx.attr(node, "proto")
    ngpus = ctx.int_attr(node, "ngpus", least=1)
    nchannels = ctx.int_attr(node, "nchannels", least=1)
    nchunks = ctx.int_attr(node, "nchunksperloop", least=1)
    coll_name = ctx.attr(node, "coll")
    inplace = ctx.flag(node, "inplace", default="0")
    outofplace = ctx.flag(node, "outofplace") if "outofplace" in node.attrs else None
    min_bytes = ctx.int_attr(node, "minBytes", least=0) if "minBytes" in node.attrs else None
    max_bytes = ctx.int_attr(node, "maxBytes", least=0) if "maxBytes" in node.attrs else None
    reduce_op = node.attrs.get("redop")

    gpus: dict[int, _Node] = {}
    for child in node.children:
        if child.tag != "gpu":
            raise ctx.error(child, "expected <gpu> inside <algo>")
        gid = ctx.int_attr(child, "id", least=0)
        if gid >= ngpus:
            raise ctx.error(child, f"gpu id {gid} is not below ngpus={ngpus}")
        if gid in gpus:
            raise ctx.error(child, f"gpu {gid} appears twice (first at line {gpus[gid].line})")
        gpus[gid] = child
    missing = [g for g in range(ngpus) if g not in gpus]
    if missing:
        raise ctx.error(node, f"ngpus={ngpus} but there is no <gpu> for rank(s) {missing}")
    ranks = tuple(_import_gpu(ctx, gpus[g], ngpus) for g in range(ngpus))

    if collective is None:
        collective = _collective(ctx, node, coll_name, ngpus, nchunks, inplace, ranks)
    elif collective.num_ranks != ngpus:
        raise ctx.error(node, f"the given collective is for {collective.num_ranks} ranks, the file for {ngpus}")
    used_channels = 1 + max((e.channel for r in ranks for e in r.executors), default=0)
    implied_chunks = _chunks_per_loop(collective, ranks)
    try:
        return Program(
            name=name,
            collective=collective,
            ranks=ranks,
            protocol=protocol,
            chunks_per_loop=None if nchunks == implied_chunks else nchunks,
            declared_channels=None if nchannels == used_channels else nchannels,
            min_bytes=min_bytes,
            max_bytes=max_bytes,
            outofplace=outofplace,
            reduce_op=reduce_op,
        )
    except AlgorithmError as exc:
        raise ctx.error(node, str(exc)) from None


def _import_gpu(ctx: _Context, node: _Node, ngpus: int) -> RankProgram:
    rank = int(node.attrs["id"])
    buffers = {
        "input": ctx.int_attr(node, "i_chunks", least=0),
        "output": ctx.int_attr(node, "o_chunks", least=0),
        "scratch": ctx.int_attr(node, "s_chunks", least=0),
    }
    if not buffers["scratch"]:
        del buffers["scratch"]  # an unused scratch buffer is simply absent
    tbs: dict[int, _Node] = {}
    for child in node.children:
        if child.tag != "tb":
            raise ctx.error(child, "expected <tb> inside <gpu>")
        tid = ctx.int_attr(child, "id", least=0)
        if tid in tbs:
            raise ctx.error(child, f"thread block {tid} appears twice on gpu {rank}")
        tbs[tid] = child
    steps_of: dict[int, list[_Node]] = {}
    executors = []
    for tid, tb in tbs.items():
        send = ctx.int_attr(tb, "send", least=-1)
        recv = ctx.int_attr(tb, "recv", least=-1)
        chan = ctx.int_attr(tb, "chan", least=0)
        for label, peer in (("send", send), ("recv", recv)):
            if peer == rank or peer >= ngpus:
                raise ctx.error(tb, f"{label} peer {peer} is not another gpu in 0..{ngpus - 1}")
        steps = [c for c in tb.children]
        for st in steps:
            if st.tag != "step":
                raise ctx.error(st, "expected <step> inside <tb>")
        steps_of[tid] = steps
        instructions = []
        for position, st in enumerate(steps):
            ins = _import_step(ctx, st, position, buffers)
            if ins.op in SENDS and send < 0:
                raise ctx.error(st, f"type {st.attrs['type']!r} sends but thread block {tid} has send=-1")
            if ins.op in RECEIVES and recv < 0:
                raise ctx.error(st, f"type {st.attrs['type']!r} receives but thread block {tid} has recv=-1")
            instructions.append(ins)
        executors.append(
            Executor(
                id=tid,
                instructions=tuple(instructions),
                send_peer=None if send < 0 else send,
                recv_peer=None if recv < 0 else recv,
                channel=chan,
            )
        )
    # Dependencies must name existing steps, and the step waited on must signal (hasdep).
    waited: set[tuple[int, int]] = set()
    for e in executors:
        for position, ins in enumerate(e.instructions):
            for dep_tb, dep_step in ins.deps:
                st = steps_of[e.id][position]
                if dep_tb not in steps_of:
                    raise ctx.error(st, f"depid={dep_tb}: gpu {rank} has no thread block {dep_tb}")
                if not 0 <= dep_step < len(steps_of[dep_tb]):
                    raise ctx.error(st, f"deps={dep_step}: thread block {dep_tb} has no step {dep_step}")
                if dep_tb == e.id and dep_step >= position:
                    raise ctx.error(st, f"depends on its own step {dep_step} (a thread block runs its steps in order)")
                waited.add((dep_tb, dep_step))
    for tid, steps in steps_of.items():
        for position, st in enumerate(steps):
            if (tid, position) in waited and not ctx.flag(st, "hasdep"):
                raise ctx.error(
                    st, "another thread block waits on this step but hasdep=0: the runtime would never signal it"
                )
    executors.sort(key=lambda e: e.id)
    return RankProgram(rank=rank, buffers=buffers, executors=tuple(executors))


def _import_step(ctx: _Context, node: _Node, position: int, buffers: dict[str, int]) -> Instruction:
    for name in _STEP_REQUIRED:
        ctx.attr(node, name)
    s = ctx.int_attr(node, "s")
    if s != position:
        raise ctx.error(node, f"step s={s} is at position {position} of its thread block")
    kind = node.attrs["type"]
    op = _OP_FROM_XML.get(kind)
    if op is None:
        raise ctx.error(node, f"unknown step type {kind!r}; known: {', '.join(_OP_FROM_XML)}")
    ctx.flag(node, "hasdep")
    depid = ctx.int_attr(node, "depid", least=-1)
    deps = ctx.int_attr(node, "deps", least=-1)
    if (depid < 0) != (deps < 0):
        raise ctx.error(node, f"depid={depid} and deps={deps} must both be -1 or both name a step")
    dependencies = () if depid < 0 else ((depid, deps),)
    if op == "nop":
        ctx.int_attr(node, "cnt", least=0)
        return Instruction("nop", deps=dependencies)
    count = ctx.int_attr(node, "cnt", least=1)

    def ref(prefix: str) -> Ref:
        code = node.attrs[f"{prefix}buf"]
        buffer = _BUFFER_FROM_XML.get(code)
        if buffer is None:
            raise ctx.error(node, f"{prefix}buf={code!r} is not one of i, o, s")
        offset = ctx.int_attr(node, f"{prefix}off", least=0)
        size = buffers.get(buffer, 0)
        if offset + count > size:
            raise ctx.error(
                node, f"{prefix}buf={code} {prefix}off={offset} cnt={count} overruns the {size}-chunk buffer"
            )
        return Ref(buffer, offset)

    return Instruction(
        op,
        src=ref("src") if op in _LOCAL_SRC else None,
        dst=ref("dst") if op in _LOCAL_DST else None,
        count=count,
        deps=dependencies,
    )


# -- the collective an <algo> implements ---------------------------------------------
def _collective(
    ctx: _Context, node: _Node, coll: str, ngpus: int, nchunks: int, inplace: bool, ranks: Sequence[RankProgram]
) -> Collective:
    if coll == "custom":
        return _infer_custom(ctx, node, ranks, inplace)
    name = _COLL_FROM_XML.get(coll)
    if name is None:
        known = ", ".join(sorted({*_COLL_FROM_XML, "custom"}))
        raise ctx.error(node, f"collective coll={coll!r} is not supported; known: {known}")
    if name in _PER_RANK_FACTOR:
        if nchunks % ngpus:
            raise ctx.error(node, f"nchunksperloop={nchunks} is not a multiple of ngpus={ngpus} for {coll}")
        factor = nchunks // ngpus
    else:
        factor = nchunks
    root = None
    if name in ("broadcast", "scatter", "reduce", "gather"):
        root = _infer_root(ctx, node, name, ranks)
    try:
        return make_collective(name, ngpus, factor, root=root, inplace=inplace)
    except CollectiveError as exc:
        raise ctx.error(node, str(exc)) from None


def _infer_root(ctx: _Context, node: _Node, name: str, ranks: Sequence[RankProgram]) -> int:
    ops = RECEIVES if name in ("broadcast", "scatter") else SENDS
    verb = "receives" if name in ("broadcast", "scatter") else "sends"
    candidates = [r.rank for r in ranks if not any(ins.op in ops for e in r.executors for ins in e.instructions)]
    if len(candidates) != 1:
        raise ctx.error(node, f"cannot tell the root of this {name}: rank(s) {candidates} never {verb}")
    return candidates[0]


def _infer_custom(ctx: _Context, node: _Node, ranks: Sequence[RankProgram], inplace: bool = False) -> Collective:
    """Precondition: input slot k of rank r holds its own contribution (an
    *atom*). A dependency-respecting run tracks each slot's value as a set of
    atoms; atoms reduced together are contributions of one chunk. Chunks are
    numbered by their first atom, rank-major. Postcondition: the chunk each
    output slot ends with; every output slot must be filled. The verifier then
    checks the rest (e.g. that every reduction has all its contributions).

    In place (``inplace="1"``), input and output are one buffer, aliased as
    :meth:`Collective.inplace_alias` says (the verifier's view): where the
    XML gives a rank no output chunks (msccl-tools' in-place form), its output
    is its input buffer as the program leaves it. A rank with no input chunks
    contributes nothing, as out of place (the XML cannot say that its data
    lies inside its output buffer, as an in-place Allgather's does: its
    unwritten output slots are then reported as never receiving data)."""
    name = node.attrs.get("name") or "custom"
    sizes = {r.rank: (r.buffers["input"], r.buffers["output"]) for r in ranks}
    if inplace:
        sizes = {rank: (n_in, n_out or n_in) for rank, (n_in, n_out) in sizes.items()}
    aliases = {r.rank: None for r in ranks}
    if inplace:
        probe = Collective(
            name=name,
            num_ranks=len(ranks),
            chunk_factor=1,
            num_chunks=0,
            input_layout=tuple((0,) * sizes[r.rank][0] for r in ranks),
            output_layout=tuple((0,) * sizes[r.rank][1] for r in ranks),
            combining=False,
            inplace=True,
        )
        aliases = {r.rank: probe.inplace_alias(r.rank) for r in ranks}
    atoms = [(r.rank, k) for r in ranks for k in range(sizes[r.rank][0])]
    parent = {a: a for a in atoms}

    def find(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    def combine(x: frozenset | None, y: frozenset | None) -> frozenset | None:
        if x is None or y is None:
            return None  # the verifier reports reading empty slots
        first = find(next(iter(x)))
        for atom in x | y:
            parent[find(atom)] = first
        return x | y

    slots = _AliasedSlots(aliases)
    for r, k in atoms:
        slots[(r, "input", k)] = frozenset({(r, k)})
    combining = _run(ctx, node, ranks, slots, combine)
    chunk_of: dict[tuple[int, int], int] = {}
    for atom in atoms:  # rank-major order: a chunk is numbered by its first atom
        chunk_of.setdefault(find(atom), len(chunk_of))
    inputs = [tuple(chunk_of[find((r.rank, k))] for k in range(sizes[r.rank][0])) for r in ranks]
    outputs = []
    for r in ranks:
        layout = []
        for k in range(sizes[r.rank][1]):
            value = slots.get((r.rank, "output", k))
            if not value:
                raise ctx.error(node, f'coll="custom": rank {r.rank} output[{k}] never receives data')
            layout.append(chunk_of[find(next(iter(value)))])
        outputs.append(tuple(layout))
    try:
        collective = custom_collective(name, inputs, outputs, combining=combining)
    except CollectiveError as exc:
        raise ctx.error(node, f"inferred postcondition is not a collective: {exc}") from None
    return replace(collective, inplace=True) if inplace else collective


class _AliasedSlots(dict):
    """Symbolic buffer slots keyed ``(rank, buffer, index)``, with a rank's
    aliased buffer (in-place collectives) mapped onto the buffer it lives in."""

    def __init__(self, aliases: dict[int, tuple[str, str, int] | None]):
        super().__init__()
        self.aliases = aliases

    def _key(self, key: tuple[int, str, int]) -> tuple[int, str, int]:
        rank, buffer, index = key
        alias = self.aliases.get(rank)
        if alias and buffer == alias[0]:
            return (rank, alias[1], alias[2] + index)
        return key

    def __setitem__(self, key, value) -> None:
        super().__setitem__(self._key(key), value)

    def __getitem__(self, key):
        return super().__getitem__(self._key(key))

    def get(self, key, default=None):
        return super().get(self._key(key), default)


def _run(ctx: _Context, node: _Node, ranks: Sequence[RankProgram], slots: dict, combine) -> bool:
    """Execute the program in a dependency-respecting order on symbolic values
    (``combine`` reduces two); return whether anything was reduced."""
    execs = [(r.rank, e) for r in ranks for e in r.executors]
    pc = [0] * len(execs)
    fifo: dict[tuple[int, int, int], deque] = defaultdict(deque)
    index = {(rank, e.id): g for g, (rank, e) in enumerate(execs)}
    reduced = False

    def read(rank: int, ref: Ref, n: int) -> list:
        return [slots.get((rank, ref.buffer, ref.index + k)) for k in range(n)]

    def write(rank: int, ref: Ref, values: list) -> None:
        for k, v in enumerate(values):
            slots[(rank, ref.buffer, ref.index + k)] = v

    progress = True
    while progress:
        progress = False
        for g, (rank, e) in enumerate(execs):
            while pc[g] < len(e.instructions):
                ins = e.instructions[pc[g]]
                if any(pc[index[(rank, d)]] <= s for d, s in ins.deps):
                    break
                incoming = (e.recv_peer, rank, e.channel)
                if ins.op in RECEIVES and not fifo[incoming]:
                    break
                payload = fifo[incoming].popleft() if ins.op in RECEIVES else None
                if ins.op in ("rrc", "rrs", "rrcs", "reduce"):
                    reduced = True
                    other = payload if ins.op != "reduce" else read(rank, ins.dst, ins.count)
                    payload = [combine(x, y) for x, y in zip(other, read(rank, ins.src, ins.count), strict=False)]
                if ins.op == "send":
                    payload = read(rank, ins.src, ins.count)
                elif ins.op == "copy":
                    write(rank, ins.dst, read(rank, ins.src, ins.count))
                elif ins.op in ("recv", "rcs", "rrc", "rrcs", "reduce"):
                    write(rank, ins.dst, payload)
                if ins.op in SENDS:
                    fifo[(rank, e.send_peer, e.channel)].append(payload)
                pc[g] += 1
                progress = True
    if any(pc[g] < len(e.instructions) for g, (_, e) in enumerate(execs)):
        raise ctx.error(node, 'coll="custom": the program deadlocks, so its postcondition cannot be inferred')
    return reduced


# ---------------------------------------------------------------------------
# Export
# ---------------------------------------------------------------------------
def export_msccl_xml(program: Program, dialect: str = DEFAULT_DIALECT) -> str:
    """MSCCL XML text for ``program`` in ``dialect`` (``"classic"`` or ``"newer"``).

    Executors become thread blocks renumbered 0..n-1 in id order; extra named
    scratch buffers are laid out after ``scratch``; an instruction with several
    dependencies gets ``nop`` steps before it carrying the extra ones (FACTS.md);
    ``hasdep`` marks every step waited on; the informative peer reference of a
    send or receive is recomputed by FIFO matching per connection. Raises
    :class:`AlgorithmError` for what MSCCL XML cannot express: host executors,
    one-sided or signalling ops, unexpanded ``instances``, and (newer
    dialect) collectives the runtime does not know.

    Parameters
    ----------
    program : Program
        The Program to write.
    dialect : {"classic", "newer"}
        ``classic``: the msccl-tools compiler's format; ``newer``: newer
        MSCCL/RCCL runtimes' (module docstring).

    Returns
    -------
    str
        The XML text (:func:`write_msccl_xml` writes it to a file).

    Raises
    ------
    AlgorithmError
        For an unknown dialect or what MSCCL XML cannot express (above).

    Examples
    --------
    >>> from simcoll import lower_algorithm, make_collective
    >>> from simcoll.algorithm import steps_from_lists
    >>> swap = steps_from_lists("swap", make_collective("allgather", 2, 1), [[(0, 0, 1, "copy"), (1, 1, 0, "copy")]])
    >>> text = export_msccl_xml(lower_algorithm(swap))
    >>> text.splitlines()[0].startswith("<algo")
    True
    """
    if dialect not in DIALECTS:
        raise AlgorithmError(f"unknown MSCCL XML dialect {dialect!r}; known: {', '.join(DIALECTS)}")
    if program.instances != 1:
        raise AlgorithmError(
            f"{program.name}: instances={program.instances} is not expanded; MSCCL XML lists every thread block "
            "(compile with the instances replicated)"
        )
    coll = _coll_to_xml(program, dialect)
    layouts = [_scratch_layout(rp) for rp in program.ranks]
    steps = _lay_out_steps(program)
    hints = _peer_refs(program)
    waited = {
        (rank, dep_exec, dep_step)
        for rank, per_exec in steps.items()
        for rows in per_exec.values()
        for _, deps, _ in rows
        for dep_exec, dep_step in deps
    }

    def ref_attrs(rank: int, ref: Ref | None) -> tuple[str, int]:
        if ref is None:
            return "i", -1
        offset, code = layouts[rank][ref.buffer]
        return code, offset + ref.index

    chunks = _chunks_per_loop(program.collective, program.ranks)
    if program.chunks_per_loop is not None:
        if program.collective.builtin and program.collective.name in _COLL_TO_FACTOR_NAMES:
            if program.chunks_per_loop != chunks:
                raise AlgorithmError(
                    f"{program.name}: chunks_per_loop={program.chunks_per_loop} contradicts its "
                    f"{program.collective.describe()}, which implies nchunksperloop={chunks}"
                )
        chunks = program.chunks_per_loop
    attrs: list[tuple[str, object]] = [
        ("name", program.name),
        ("proto", program.protocol),
        ("nchannels", program.declared_channels or program.num_channels),
        ("nchunksperloop", chunks),
        ("ngpus", program.num_ranks),
        ("coll", coll),
        ("inplace", int(program.collective.inplace)),
    ]
    if dialect == "newer":
        attrs += [
            (
                "outofplace",
                int(program.outofplace if program.outofplace is not None else not program.collective.inplace),
            ),
            ("minBytes", program.min_bytes if program.min_bytes is not None else 0),
            ("maxBytes", program.max_bytes if program.max_bytes is not None else UNBOUNDED_BYTES),
        ]
    else:
        attrs += [
            (key, int(value) if isinstance(value, bool) else value)
            for key, value in (
                ("outofplace", program.outofplace),
                ("minBytes", program.min_bytes),
                ("maxBytes", program.max_bytes),
            )
            if value is not None
        ]
    if program.reduce_op is not None:
        attrs.append(("redop", program.reduce_op))
    lines = [f"<algo {_attrs(attrs)}>"]
    for rp in program.ranks:
        scratch = sum(rp.buffers[b] for b in rp.buffers if b not in ("input", "output"))
        lines.append(
            f'  <gpu id="{rp.rank}" i_chunks="{_size(rp, "input")}" o_chunks="{_size(rp, "output")}" '
            f's_chunks="{scratch}">'
        )
        tb_of = {e.id: i for i, e in enumerate(sorted(rp.executors, key=lambda e: e.id))}
        for e in sorted(rp.executors, key=lambda e: e.id):
            tid = tb_of[e.id]
            send = -1 if e.send_peer is None else e.send_peer
            recv = -1 if e.recv_peer is None else e.recv_peer
            lines.append(f'    <tb id="{tid}" send="{send}" recv="{recv}" chan="{e.channel}">')
            for s, (ins, deps, original) in enumerate(steps[rp.rank][e.id]):
                depid, depstep = (-1, -1) if not deps else deps[0]
                if ins is None or ins.op == "nop":
                    sb, so, db, do, cnt, kind = "i", -1, "o", -1, 0, "nop"
                else:
                    src, dst = hints.get((rp.rank, e.id, original), (ins.src, ins.dst))
                    src = src if src is not None else dst
                    dst = dst if dst is not None else src
                    sb, so = ref_attrs(rp.rank, src)
                    db, do = ref_attrs(rp.rank, dst)
                    cnt, kind = ins.count, _OP_TO_XML[ins.op]
                hasdep = int((rp.rank, e.id, s) in waited)
                lines.append(
                    f'      <step s="{s}" type="{kind}" srcbuf="{sb}" srcoff="{so}" dstbuf="{db}" dstoff="{do}" '
                    f'cnt="{cnt}" depid="{tb_of.get(depid, -1)}" deps="{depstep}" hasdep="{hasdep}"/>'
                )
            lines.append("    </tb>")
        lines.append("  </gpu>")
    lines.append("</algo>")
    return "\n".join(lines) + "\n"


def write_msccl_xml(program: Program, path: str | Path, dialect: str = DEFAULT_DIALECT) -> None:
    """Write :func:`export_msccl_xml` of ``program`` to ``path``, atomically
    (:func:`simcoll.files.write_atomic`: a failed write leaves the old file).

    Raises
    ------
    AlgorithmError
        For what MSCCL XML cannot express (:func:`export_msccl_xml`), or naming
        the file when it cannot be written.

    Examples
    --------
    >>> import tempfile
    >>> from simcoll import lower_algorithm, make_collective
    >>> from simcoll.algorithm import steps_from_lists
    >>> swap = steps_from_lists("swap", make_collective("allgather", 2, 1), [[(0, 0, 1, "copy"), (1, 1, 0, "copy")]])
    >>> program = lower_algorithm(swap)
    >>> path = Path(tempfile.mkdtemp()) / "ring.xml"
    >>> write_msccl_xml(program, path)
    >>> again = read_msccl_xml(path)             # all but the Program's metadata
    >>> (again.ranks, again.collective) == (program.ranks, program.collective)
    True
    """
    write_atomic(path, export_msccl_xml(program, dialect), error=AlgorithmError)


def _chunks_per_loop(collective: Collective, ranks: Sequence[RankProgram]) -> int:
    """``nchunksperloop`` a Program implies: from a built-in collective, C
    (allreduce, reduce, broadcast) or P·C (the others); else the largest input
    or output buffer (as msccl-tools writes it)."""
    if collective.builtin and collective.name in _COLL_TO_FACTOR_NAMES:
        per_rank = collective.name in _PER_RANK_FACTOR
        return collective.chunk_factor * (collective.num_ranks if per_rank else 1)
    return max((max(_size(r, "input"), _size(r, "output")) for r in ranks), default=1) or 1


def _attrs(pairs: Iterable[tuple[str, object]]) -> str:
    return " ".join(f"{k}={quoteattr(str(v))}" for k, v in pairs)


def _size(rp: RankProgram, buffer: str) -> int:
    return int(rp.buffers.get(buffer, 0))


def _coll_to_xml(program: Program, dialect: str) -> str:
    coll = program.collective
    if coll.builtin and coll.name in ("allreduce", "allgather", "alltoall", "broadcast", "reduce", "gather", "scatter"):
        return coll.name
    if coll.builtin and coll.name == "reducescatter":
        return "reducescatter" if dialect == "newer" else "reduce_scatter"
    if dialect == "newer":
        raise AlgorithmError(
            f"{program.name}: newer MSCCL runtimes run no custom collectives ({coll.name}); use the classic dialect"
        )
    return "custom"


def _scratch_layout(rp: RankProgram) -> dict[str, tuple[int, str]]:
    """buffer -> (offset, XML code): named scratch buffers follow ``scratch``."""
    out = {"input": (0, "i"), "output": (0, "o")}
    offset = 0
    for name in ["scratch", *sorted(b for b in rp.buffers if b not in ("input", "output", "scratch"))]:
        out[name] = (offset, "s")
        offset += int(rp.buffers.get(name, 0))
    return out


def _lay_out_steps(program: Program) -> dict[int, dict[int, list[tuple[Instruction | None, list, int]]]]:
    """Per rank and executor, the XML steps: (instruction or None for an added
    nop, [(tb id, step)] in XML numbering, index of the original instruction)."""
    for rp in program.ranks:
        for e in rp.executors:
            if e.kind != "threadblock":
                raise AlgorithmError(
                    f"{program.name}: rank {rp.rank} executor {e.id} is a {e.kind}; MSCCL runs thread blocks"
                )
            for s, ins in enumerate(e.instructions):
                if ins.op not in _OP_TO_XML:
                    raise AlgorithmError(
                        f"{program.name}: rank {rp.rank} executor {e.id} step {s}: op {ins.op!r} has no MSCCL XML step type"
                    )
    out: dict[int, dict[int, list]] = {}
    for rp in program.ranks:
        new_index: dict[tuple[int, int], int] = {}
        raw: dict[int, list] = {}
        for e in rp.executors:
            rows: list = []
            for s, ins in enumerate(e.instructions):
                rows.extend((None, [dep], s) for dep in ins.deps[1:])
                rows.append((ins, list(ins.deps[:1]), s))
                new_index[(e.id, s)] = len(rows) - 1
            raw[e.id] = rows
        out[rp.rank] = {
            eid: [(ins, [(d, new_index[(d, st)]) for d, st in deps], s) for ins, deps, s in rows]
            for eid, rows in raw.items()
        }
    return out


def _peer_refs(program: Program) -> dict[tuple[int, int, int], tuple[Ref | None, Ref | None]]:
    """(rank, executor, step) -> (src, dst) to write for sends and receives, with
    the peer's reference filled in from the FIFO-matched instruction."""
    sends: dict[tuple[int, int, int], list] = defaultdict(list)
    recvs: dict[tuple[int, int, int], list] = defaultdict(list)
    for rp in program.ranks:
        for e in rp.executors:
            for s, ins in enumerate(e.instructions):
                if ins.op in SENDS:
                    sends[(rp.rank, e.send_peer, e.channel)].append((rp.rank, e.id, s, ins))
                if ins.op in RECEIVES:
                    recvs[(e.recv_peer, rp.rank, e.channel)].append((rp.rank, e.id, s, ins))
    out: dict[tuple[int, int, int], tuple[Ref | None, Ref | None]] = {}
    for conn, senders in sends.items():
        for (rank, eid, step, s_ins), (r_rank, r_eid, r_step, r_ins) in zip(senders, recvs.get(conn, []), strict=False):
            # Where the data lands on the receiver, and where it comes from on the sender.
            landing = r_ins.dst if r_ins.dst is not None else r_ins.src
            origin = s_ins.dst if s_ins.op in ("rcs", "rrcs") else s_ins.src
            if s_ins.op in ("send", "rrs"):  # their dst names the peer's buffer
                out[(rank, eid, step)] = (s_ins.src, landing)
            if r_ins.op in ("recv", "rcs"):  # their src names the peer's buffer
                out[(r_rank, r_eid, r_step)] = (origin, r_ins.dst)
    return out
