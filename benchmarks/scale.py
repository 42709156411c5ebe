"""Scale to thousands of GPUs (issue 15): wall time, peak memory and CPU time per case.

Each case runs in a fresh subprocess (``simcoll`` command lines, or a short
Python snippet), so no case profits from another's caches. Its peak memory
is the larger of the process's own maximum resident set size (``os.wait4``)
and the sampled peak of the resident memory of it and all its descendants
at once (``compare --jobs`` runs tasks in workers forked by a fork server,
which the benchmark cannot wait for); its CPU seconds are the whole tree's
(:class:`TreeSampler`).

    python benchmarks/scale.py                 # every case of the issue's table (compare --jobs 2)
    python benchmarks/scale.py --jobs 1        # the compare cases one algorithm at a time
    python benchmarks/scale.py --quick         # skip the largest (dgx-h100*128, dgx-h100*512)
    python benchmarks/scale.py --only ring     # cases whose name contains "ring"
    python benchmarks/scale.py --ranks 256     # a smaller ring for the CLI case
    python benchmarks/scale.py --per-algorithm 'dgx-h100*128'   # where compare's time goes
    python benchmarks/scale.py --per-algorithm 'dgx-h100*128' --only ring   # the generators named *ring*

``--per-algorithm TOPO`` times every Allreduce generator on its own, each in
a fresh process: generation, then a simulation per size (``--sizes``; the
first pays for the plan and node symmetry, the next reuse them), with the
transfers, the node rotation used, whether the compiled event core ran
and the process's peak memory.

Targets (issue 15's table):

==============================================================  =============
case                                                            target
==============================================================  =============
CLI ``algo generate`` + ``verify`` + ``simulate`` ring:1024     <= 10 s, 2 GB
``compare -t 'dgx-h100*16' -c allreduce --sizes 1GB``           <= 10 s
``compare -t 'dgx-h100*128' -c allreduce --sizes 1MB,1GB``      <= 60 s, 4 GB
nccl-tree / nccl-ring Allreduce on ``dgx-h100*512``, 1 GB        <= 60 s, 8 GB
HiCCL Allreduce on ``perlmutter*48`` (192 GPUs), gen + simulate <= 5 s
==============================================================  =============

What each session measured with it is in ``docs/scale.md``.

These are not timed tests: the machine (and its load) decides the figures.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable


@dataclass(frozen=True)
class Case:
    """One row of the table: the commands run one after another (each a
    subprocess argv), the targets, and whether ``--quick`` skips it."""

    name: str
    commands: tuple[tuple[str, ...], ...]
    target_s: float
    target_gb: float | None
    large: bool = False


def _cli(*args: str) -> tuple[str, ...]:
    return (PYTHON, "-m", "simcoll", *args)


def _snippet(code: str) -> tuple[str, ...]:
    return (PYTHON, "-c", code)


def cases(workdir: Path, ranks: int, fmt: str, jobs: int = 1) -> list[Case]:
    schedule = str(workdir / f"ring{ranks}.{fmt}")
    topo = f"ring:{ranks}"
    hiccl = (
        "from simcoll import load_machine; from simcoll.algorithms import generate; "
        "from simcoll.simulator import simulate; m = load_machine('perlmutter*48'); "
        "a = generate('hiccl', m, 'allreduce'); r = simulate(a, m, 1 << 30, time_limit_s=600); "
        "print(f'hiccl perlmutter*48: {len(a.transfers)} transfers, {r.time_s * 1e6:.1f} us')"
    )

    def big(name: str) -> str:
        return (
            "from simcoll import load_machine; from simcoll.algorithms import generate; "
            "from simcoll.simulator import simulate; m = load_machine('dgx-h100*512'); "
            f"a = generate({name!r}, m, 'allreduce'); "
            "r = simulate(a, m, 1 << 30, time_limit_s=600, record_timeline=False, record_utilisation=False); "
            f"print(f'{name} dgx-h100*512: {{len(a.transfers)}} transfers, {{r.time_s * 1e6:.1f}} us')"
        )

    return [
        Case(
            f"cli-ring:{ranks}",
            (
                _cli("algo", "generate", "ring", "-t", topo, "-c", "allreduce", "-o", schedule),
                _cli("verify", schedule),
                _cli("simulate", schedule, "-t", topo, "--size", "1GB", "--no-verify"),
            ),
            10.0,
            2.0,
        ),
        Case(
            "compare-dgx-h100*16",
            (_cli("compare", "-t", "dgx-h100*16", "-c", "allreduce", "--sizes", "1GB", "--jobs", str(jobs)),),
            10.0,
            None,
        ),
        Case("hiccl-perlmutter*48", (_snippet(hiccl),), 5.0, None),
        Case(
            "compare-dgx-h100*128",
            (_cli("compare", "-t", "dgx-h100*128", "-c", "allreduce", "--sizes", "1MB,1GB", "--jobs", str(jobs)),),
            60.0,
            4.0,
            large=True,
        ),
        Case("nccl-tree-dgx-h100*512", (_snippet(big("nccl-tree")),), 60.0, 8.0, large=True),
        # 8 channels x 4,096 ranks x 8,190 steps: 268 million transfers, held as the 1 million of the first
        # two nodes and their rotation (simcoll.algorithm.OrbitTable)
        Case("nccl-ring-dgx-h100*512", (_snippet(big("nccl-ring")),), 60.0, 8.0, large=True),
    ]


class TreeSampler:
    """Samples a process and all its descendants every ``interval_s`` from
    ``/proc`` (Linux): the peak of their summed resident memory, and their
    CPU seconds (each process's last reading; a process that lives less
    than one interval may be missed). ``compare --jobs`` runs its tasks in
    workers forked by a fork server, which the benchmark cannot wait for:
    their own peaks do not reach ``wait4``'s resource usage, and two
    workers at once hold the sum of their memory."""

    def __init__(self, pid: int, interval_s: float = 0.1) -> None:
        self.pid, self.interval_s = pid, interval_s
        self.peak_bytes = 0
        self.cpu_ticks: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._page = os.sysconf("SC_PAGE_SIZE")
        self._tick = os.sysconf("SC_CLK_TCK")

    def __enter__(self) -> TreeSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def cpu_s(self) -> float:
        return sum(self.cpu_ticks.values()) / self._tick

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def sample(self) -> None:
        parents: dict[int, list[int]] = {}
        stats: dict[int, list[str]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            stats[int(entry)] = fields
            parents.setdefault(int(fields[1]), []).append(int(entry))
        tree, todo = [], [self.pid]
        while todo:
            pid = todo.pop()
            tree.append(pid)
            todo.extend(parents.get(pid, ()))
        rss = 0
        for pid in tree:
            fields = stats.get(pid)
            if fields is None:
                continue
            self.cpu_ticks[pid] = int(fields[11]) + int(fields[12])  # utime + stime
            rss += int(fields[21]) * self._page
        self.peak_bytes = max(self.peak_bytes, rss)


def run_command(
    argv: tuple[str, ...], timeout_s: float, memory_gb: float | None
) -> tuple[float, float, float, int, str]:
    """Wall seconds, peak memory in GB, CPU seconds, return code and the
    child's last output lines. Peak memory is the larger of the child's own
    peak RSS (``os.wait4`` gives each child's own resource usage, its
    waited-for descendants included) and the sampled peak of the summed RSS
    of the child and its descendants (:class:`TreeSampler`); CPU seconds
    are the larger of ``wait4``'s and the sampled sum. With ``memory_gb``,
    each process's address space is capped at twice that (a MemoryError
    instead of a machine brought down by swapping)."""

    def cap_memory() -> None:
        import resource

        limit = int(2 * memory_gb * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    with tempfile.TemporaryFile("w+") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=cap_memory if memory_gb else None,
        )
        timer = threading.Timer(timeout_s, proc.kill)
        timer.start()
        try:
            with TreeSampler(proc.pid) as sampler:
                _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read()
    rc = proc.returncode if proc.returncode >= 0 else 124
    peak_gb = max(usage.ru_maxrss / (1 << 20), sampler.peak_bytes / (1 << 30))
    cpu_s = max(usage.ru_utime + usage.ru_stime, sampler.cpu_s)
    return wall, peak_gb, cpu_s, rc, "\n".join(text.strip().splitlines()[-3:])


def per_algorithm_snippet(topology: str, name: str, sizes: list[int], time_limit_s: float) -> tuple[str, ...]:
    """A child that generates ``name``'s Allreduce on ``topology`` and
    simulates it at each size, printing one line with the timings."""
    return _snippet(
        "import time; from simcoll import load_machine; from simcoll.algorithms import generate; "
        "from simcoll.simulator import simulate; from simcoll.collector import collector_paused; "
        f"m = load_machine({topology!r}); t = time.perf_counter(); out = []\n"
        "with collector_paused():\n"
        f"    a = generate({name!r}, m, 'allreduce'); out.append(f'gen {{time.perf_counter() - t:.2f}}')\n"
        f"    for size in {sizes!r}:\n"
        "        t = time.perf_counter()\n"
        f"        r = simulate(a, m, size, time_limit_s={time_limit_s!r}, verify=False, record_timeline=False, "
        "record_utilisation=False)\n"
        "        c = ', compiled' if r.stats['compiled'] else ''\n"
        "        out.append(f'sim {time.perf_counter() - t:.2f} (x{r.stats[\"node_rotation\"]}{c})')\n"
        "print(f'{len(a.transfers)} transfers: ' + ', '.join(out))"
    )


def per_algorithm(topology: str, sizes: list[int], timeout_s: float, only: str | None = None) -> int:
    """Every Allreduce generator on ``topology`` (see the module docstring),
    or those whose name contains ``only``."""
    from simcoll.algorithms import REGISTRY

    print(f"{'algorithm':<20} {'wall s':>8} {'cpu s':>6} {'peak GB':>8}  result")
    for name, generator in REGISTRY.items():
        if "allreduce" not in generator.collectives or (only and only not in name):
            continue
        wall, peak, cpu, rc, tail = run_command(per_algorithm_snippet(topology, name, sizes, timeout_s), timeout_s, 8.0)
        last = tail.splitlines()[-1] if tail else ""
        if rc and "NotApplicableError: " in last:
            last = "not applicable: " + last.split("NotApplicableError: ", 1)[1]
        elif rc:
            last = f"exit {rc}: {last}"
        print(f"{name:<20} {wall:>8.2f} {cpu:>6.1f} {peak:>8.2f}  {last}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="run only cases (or, with --per-algorithm, generators) whose name contains this")
    parser.add_argument("--quick", action="store_true", help="skip the largest cases")
    parser.add_argument("--ranks", type=int, default=1024, help="ring size of the CLI case (default 1024)")
    parser.add_argument("--format", default="npz", choices=("npz", "json"), help="schedule file of the CLI case")
    parser.add_argument(
        "--jobs",
        type=int,
        default=min(2, os.cpu_count() or 1),
        help="compare --jobs for the compare cases (default: 2, the issue's two cores, or fewer if the machine has fewer)",
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per command before giving up")
    parser.add_argument("--verbose", "-v", action="store_true", help="print each command's last output lines")
    parser.add_argument("--per-algorithm", metavar="TOPO", help="time every Allreduce generator on TOPO instead")
    parser.add_argument(
        "--sizes", default="1MB,1GB", help="sizes for --per-algorithm, LOW:HIGH or a comma list (default 1MB,1GB)"
    )
    args = parser.parse_args(argv)
    # Children see the checkout first, whatever is installed.
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    if args.per_algorithm:
        from simcoll.units import parse_size_range

        return per_algorithm(args.per_algorithm, parse_size_range(args.sizes), args.timeout, args.only)
    print(f"compare cases with --jobs {args.jobs}")
    print(f"{'case':<24} {'wall s':>8} {'target':>7} {'peak GB':>8} {'target':>7} {'cpu s':>6}  steps (s)")
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases(Path(tmp), args.ranks, args.format, args.jobs):
            if (args.only and args.only not in case.name) or (args.quick and case.large):
                continue
            walls, peaks, cpus, notes = [], [], [], []
            for command in case.commands:
                wall, peak, cpu, rc, tail = run_command(command, args.timeout, case.target_gb)
                walls.append(wall)
                peaks.append(peak)
                cpus.append(cpu)
                if rc:
                    notes.append(f"exit {rc}: {tail}")
                    break
                if args.verbose:
                    notes.append(tail)
            failed += bool(notes and notes[-1].startswith("exit"))
            peak = max(peaks)
            gb = f"{case.target_gb:g}" if case.target_gb else "-"
            steps = " + ".join(f"{w:.2f}" for w in walls)
            cpu = sum(cpus)
            print(
                f"{case.name:<24} {sum(walls):>8.2f} {case.target_s:>7g} {peak:>8.2f} {gb:>7} {cpu:>6.1f}  {steps}",
                flush=True,
            )
            for note in notes:
                print("    " + note.replace("\n", "\n    "))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
