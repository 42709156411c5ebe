"""Compact builders for hand-made Programs in tests (verifier and simulator)."""

from simcoll.program import Executor, Instruction, Program, RankProgram, Ref


def ref(spec):
    return None if spec is None else Ref(*spec)


def op(name, src=None, dst=None, n=1, deps=(), sources=()):
    return Instruction(name, ref(src), ref(dst), n, tuple(deps), tuple(ref(s) for s in sources))


def tb(eid, *steps, send=None, recv=None, chan=0, kind="threadblock"):
    return Executor(eid, tuple(steps), send, recv, chan, kind)


def program(coll, executors, buffers, **kw):
    """``executors[r]``: rank r's executors; ``buffers``: one dict for every
    rank, or a list of per-rank dicts."""
    per_rank = buffers if isinstance(buffers, list) else [buffers] * coll.num_ranks
    ranks = [RankProgram(r, dict(per_rank[r]), tuple(executors[r])) for r in range(coll.num_ranks)]
    return Program(kw.pop("name", "test"), coll, tuple(ranks), **kw)
