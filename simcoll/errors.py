"""Exceptions raised by simcoll.

Every public entry point validates its input and raises a subclass of
:class:`SimcollError` whose message names the offending file, field, chunk,
rank, step or instruction. The CLI turns these into a one-line message and a
non-zero exit code.
"""


class SimcollError(Exception):
    """Base class of every error simcoll raises on bad input or failed checks."""


class TopologyError(SimcollError):
    """A topology description is malformed or names something that does not exist."""


class ModelError(SimcollError):
    """A cost-model description is malformed or does not cover a machine."""


class CollectiveError(SimcollError):
    """A collective specification is malformed or unknown."""


class AlgorithmError(SimcollError):
    """An Algorithm or Program is malformed (before any semantic check)."""


class NotApplicableError(SimcollError):
    """An algorithm generator does not apply to the given machine or collective."""


class SynthesisError(SimcollError):
    """A synthesis instance is malformed (bad steps, rounds, chunks or bandwidth
    relation); a solver's "unsat" or "unknown" is an answer, not an error."""


class VerificationError(SimcollError):
    """An Algorithm or Program does not implement its collective.

    ``problems`` lists every fault found, each a sentence naming the chunk,
    rank, step or instruction at fault.
    """

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        head = problems[0] if problems else "verification failed"
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        super().__init__(head + more)
