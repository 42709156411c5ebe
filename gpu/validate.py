"""Measured vs simulated time of one schedule over sizes (``simcoll gpu validate``).

:func:`validate` runs a Program through a measurement function (by default
:func:`simcoll.gpu.runner.run`'s median time, which needs a GPU; or the
measured column of an earlier sweep's CSV, :func:`measured_times`) and through
:func:`simcoll.simulate` on a machine, size by size, and reports the relative
error ``(simulated - measured) / measured``. The issue's target for a
calibrated model is a median ``|error|`` within 15 % over 1 KB – 1 GB.
:func:`write_csv` and :func:`write_plot` write the sweep atomically
(:func:`simcoll.files.atomic_output`).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from simcoll.errors import FileError, OptionError, VerificationError
from simcoll.files import atomic_output, read_csv_rows, write_atomic
from simcoll.machines import Machine
from simcoll.program import Program

from .reference import dtype_info

#: The issue's accuracy target for a calibrated model (median |error| over 1 KB – 1 GB).
TARGET_MEDIAN_ERROR = 0.15
CSV_COLUMNS = ("size_bytes", "measured_us", "simulated_us", "error_pct", "algbw_measured_GBps", "algbw_simulated_GBps")


@dataclass(frozen=True)
class ValidationRow:
    """One size: measured and simulated seconds."""

    size_bytes: int
    measured_s: float
    simulated_s: float

    @property
    def error(self) -> float:
        """``(simulated - measured) / measured``."""
        return (self.simulated_s - self.measured_s) / self.measured_s

    def as_csv(self) -> tuple:
        return (self.size_bytes, self.measured_s * 1e6, self.simulated_s * 1e6, 100 * self.error,
                self.size_bytes / self.measured_s / 1e9, self.size_bytes / self.simulated_s / 1e9)  # fmt: skip


@dataclass(frozen=True)
class Validation:
    """The rows of a sweep and the schedule and machine they are for."""

    program: str
    machine: str
    model: str
    rows: tuple[ValidationRow, ...]

    @property
    def median_abs_error(self) -> float:
        return float(np.median([abs(r.error) for r in self.rows]))

    @property
    def within_target(self) -> bool:
        return self.median_abs_error <= TARGET_MEDIAN_ERROR

    def lines(self) -> list[str]:
        """A human-readable table, one line per size, then the median."""
        out = [f"{self.program} on {self.machine} (model {self.model})",
               f"{'size':>12} {'measured us':>12} {'simulated us':>13} {'error':>8}"]  # fmt: skip
        for r in self.rows:
            out.append(f"{r.size_bytes:>12} {r.measured_s * 1e6:>12.2f} {r.simulated_s * 1e6:>13.2f} "
                       f"{100 * r.error:>+7.1f}%")  # fmt: skip
        verdict = "within" if self.within_target else "outside"
        out.append(f"median |error| {100 * self.median_abs_error:.1f}% ({verdict} the "
                   f"{100 * TARGET_MEDIAN_ERROR:.0f}% target)")  # fmt: skip
        return out


def valid_sizes(program: Program, sizes: Sequence[int], dtype: str = "float32") -> list[int]:
    """``sizes`` rounded up to whole elements per chunk (the runner needs
    multiples of ``size_chunks × element bytes``), duplicates dropped."""
    per = program.collective.size_chunks * dtype_info(dtype)[2]
    out: list[int] = []
    for s in sizes:
        v = max(per, math.ceil(int(s) / per) * per)
        if v not in out:
            out.append(v)
    return out


def gpu_measure(devices: Sequence[int] = (0,), *, iters: int = 20, dtype: str = "float32"
                ) -> Callable[[Program, int], float]:  # fmt: skip
    """A measurement function running on the GPU (median time; a wrong result
    is an error, since its time would be meaningless)."""
    from .runner import run

    def measure(program: Program, size_bytes: int) -> float:
        result = run(program, size_bytes, devices, iters=iters, dtype=dtype)
        if not result.verified:
            wrong = f"{program.name} at {size_bytes} B gave a wrong result on the GPU"
            raise VerificationError([f"{wrong}: {p}" for p in result.problems] or [wrong])
        return result.time_s

    return measure


def measured_times(path: str) -> dict[int, float]:
    """Measured seconds by size from a sweep's CSV (:func:`write_csv`), so a
    measurement taken on a GPU can be simulated again anywhere.

    Raises
    ------
    FileError
        When the file cannot be read, lacks the ``size_bytes`` and
        ``measured_us`` columns, or holds a row that is not a size and a
        positive time (naming the line).
    """
    out: dict[int, float] = {}
    for line, row in read_csv_rows(path, ("size_bytes", "measured_us"), "validation CSV"):
        try:
            size, seconds = int(row["size_bytes"]), float(row["measured_us"]) / 1e6
        except (TypeError, ValueError):
            raise FileError(f"{path}:{line}: expected a size in bytes and a time in us, got {row!r}") from None
        if size <= 0 or not seconds > 0 or not math.isfinite(seconds):
            raise FileError(f"{path}:{line}: size {size} B, time {seconds * 1e6} us: not a measurement")
        out[size] = seconds
    if not out:
        raise FileError(f"{path}: no measurements")
    return out


def recorded_measure(times: dict[int, float], source: str) -> Callable[[Program, int], float]:
    """A measurement function answering from ``times`` (size -> seconds, e.g.
    :func:`measured_times`); a size it lacks is an :class:`~simcoll.errors.OptionError`
    naming ``source`` (the sizes asked for are not the ones measured)."""

    def measure(program: Program, size_bytes: int) -> float:
        if size_bytes not in times:
            raise OptionError(f"{source} has no measurement of {program.name} at {size_bytes} B "
                              f"(it has {', '.join(map(str, sorted(times)))})")  # fmt: skip
        return times[size_bytes]

    return measure


def validate(
    program: Program,
    machine: Machine,
    sizes: Sequence[int],
    measure: Callable[[Program, int], float],
    *,
    dtype: str = "float32",
) -> Validation:
    """Measure and simulate ``program`` at every size (rounded by :func:`valid_sizes`).

    Raises
    ------
    OptionError
        When the machine's rank count differs from the Program's, or
        ``measure`` gives something that is not a positive time.
    VerificationError
        From :func:`gpu_measure`, when the GPU computes a wrong result.
    """
    from simcoll.simulator import simulate

    if machine.num_ranks != program.num_ranks:
        raise OptionError(f"{program.name} has {program.num_ranks} ranks but machine {machine.name} has "
                          f"{machine.num_ranks}; pick a topology with --topology")  # fmt: skip
    rows = []
    for size in valid_sizes(program, sizes, dtype):
        measured = float(measure(program, size))
        if not measured > 0 or not math.isfinite(measured):
            raise OptionError(f"{program.name}: measured time at {size} B is {measured!r}, not a positive time")
        rows.append(ValidationRow(size, measured, simulate(program, machine, size).time_s))
    return Validation(program.name, machine.name, machine.model.name, tuple(rows))


def write_csv(validation: Validation, path: str) -> None:
    """The rows as CSV (:data:`CSV_COLUMNS`), written atomically."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for row in validation.rows:
        writer.writerow([row.as_csv()[0], *(f"{v:.6g}" for v in row.as_csv()[1:])])
    write_atomic(path, buffer.getvalue())


def write_plot(validation: Validation, path: str) -> None:
    """Measured and simulated time against size (log-log), and the error,
    written atomically (format from the suffix, e.g. ``.png``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [r.size_bytes for r in validation.rows]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(6.4, 6.0), sharex=True, height_ratios=(2, 1))
    top.loglog(sizes, [r.measured_s * 1e6 for r in validation.rows], "o-", label="measured (GPU)")
    top.loglog(sizes, [r.simulated_s * 1e6 for r in validation.rows], "s--", label=f"simulated ({validation.model})")
    top.set_ylabel("time (us)")
    top.set_title(f"{validation.program} on {validation.machine}")
    top.legend()
    bottom.semilogx(sizes, [100 * r.error for r in validation.rows], "d-")
    bottom.axhline(0, color="grey", lw=0.8)
    bottom.set_ylabel("error (%)")
    bottom.set_xlabel("size (bytes)")
    fig.tight_layout()
    suffix = str(path).rsplit(".", 1)[-1] if "." in str(path) else "png"
    with atomic_output(path, "wb") as handle:
        fig.savefig(handle, format=suffix, dpi=120)
    plt.close(fig)


__all__ = [
    "CSV_COLUMNS",
    "TARGET_MEDIAN_ERROR",
    "Validation",
    "ValidationRow",
    "gpu_measure",
    "measured_times",
    "recorded_measure",
    "valid_sizes",
    "validate",
    "write_csv",
    "write_plot",
]
