"""What the verifiers of Algorithms and Programs share: a chunk's value,
``(chunk id, contributions)``, reducing two values (a contribution counted
twice is an error), and the collective's postcondition on the final values
(the package docstring describes the model)."""

from __future__ import annotations

from ..collectives import Collective

Value = tuple[int, frozenset[int]]
MAX_PROBLEMS = 20


def _initial_value(chunk: int, rank: int) -> Value:
    return (chunk, frozenset({rank}))


def _combine(a: Value, b: Value, where: str, problems: list[str]) -> Value:
    if a[0] != b[0]:
        problems.append(f"{where}: reduces chunk {a[0]} with chunk {b[0]}")
        return a
    twice = a[1] & b[1]
    if twice:
        problems.append(f"{where}: chunk {a[0]} would count the contribution of rank(s) {sorted(twice)} twice")
    return (a[0], a[1] | b[1])


def _check_post(collective: Collective, holds, problems: list[str]) -> None:
    """``holds(rank, chunk, out_index)`` gives the final value at that output slot."""
    for rank, layout in enumerate(collective.output_layout):
        for index, chunk in enumerate(layout):
            value = holds(rank, chunk, index)
            where = f"rank {rank} output[{index}]"
            if value is None:
                problems.append(f"{where}: chunk {chunk} never arrives")
            elif value[0] != chunk:
                problems.append(f"{where}: holds chunk {value[0]} instead of chunk {chunk}")
            elif collective.combining:
                expected = collective.contributors(chunk)
                if value[1] != expected:
                    missing = sorted(expected - value[1])
                    problems.append(f"{where}: chunk {chunk} lacks the contributions of rank(s) {missing}")
