"""Sweeps: studies declared as data, expanded into points, run in batches on Dask
(or serially), stored as Parquet part files keyed by point, so a killed sweep
resumes with nothing lost (the studies under ``experiments/`` use it).

>>> from simcoll.sweeps import load_study, run_study, load_results
>>> study = load_study({"name": "doc", "machines": ["ring:4"], "collectives": ["allgather"],
...                     "algorithms": ["ring", "direct"], "sizes": "1KB,1MB"})
>>> import tempfile
>>> out = tempfile.mkdtemp()
>>> run_study(study, out, serial=True, progress=False).done
4
>>> sorted(load_results(out).algorithm.unique())
['direct', 'ring']

The modules: :mod:`.study` (the study format, expansion, point keys),
:mod:`.runner` (batches on Dask or serially), :mod:`.store` (the Parquet
dataset), :mod:`.plots` (figures from the results), :mod:`.command` (the
``simcoll sweep`` command; ``python -m simcoll.sweeps`` runs it too).
"""

from .runner import SweepSummary, run_batch, run_study
from .store import COLUMNS, load_results, sweep_status
from .study import AlgorithmSpec, Batch, MachineSpec, Point, Study, StudyError, apply_overrides, load_study

__all__ = [
    "COLUMNS",
    "AlgorithmSpec",
    "Batch",
    "MachineSpec",
    "Point",
    "Study",
    "StudyError",
    "SweepSummary",
    "apply_overrides",
    "load_results",
    "load_study",
    "run_batch",
    "run_study",
    "sweep_status",
]
