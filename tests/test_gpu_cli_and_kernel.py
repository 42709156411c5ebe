"""simcoll gpu's commands without a GPU, the runner's refusal, and the CUDA
kernel compiling with nvcc for sm_80 and sm_90 without register spills."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
import simcoll.gpu
from simcoll.gpu import runner
from simcoll.gpu.errors import GpuUnavailableError
from simcoll.gpu.table import to_table

from simcoll.algorithms import applicable
from simcoll.cli.gpu import main  # noqa: E402  (a broken import fails the module, never skips it)
from simcoll.compiler import lower_algorithm
from simcoll.errors import SimcollError
from simcoll.machines import load_machine
from tests.test_gpu_table import ring2


def saved_ring(tmp_path):
    machine = load_machine("ring:4")
    program = lower_algorithm(applicable(machine, "allreduce")["ring"], machine=machine)
    path = tmp_path / "ring.json"
    program.save(path)
    return program, path


def test_check_passes_a_lowered_program_and_reports_json(tmp_path, capsys):
    _, path = saved_ring(tmp_path)
    assert main(["gpu", "check", str(path), "--size", "4096", "--dtype", "bfloat16", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["size_bytes"] == 4096 and not report["differences"]


def test_check_fails_with_exit_1_on_a_deadlock(tmp_path, capsys):
    from simcoll.collectives import make_collective
    from tests.program_builders import op, program, tb

    coll = make_collective("allgather", 2)
    execs = [
        [tb(0, op("recv", dst=("output", 1)), op("send", ("input", 0)), send=1, recv=1)],
        [tb(0, op("recv", dst=("output", 0)), op("send", ("input", 0)), send=0, recv=0)],
    ]
    path = tmp_path / "stuck.json"
    program(coll, execs, {"input": 1, "output": 2}, name="stuck").save(path)
    assert main(["gpu", "check", str(path), "--timeout", "0.5"]) == 1
    assert "deadlock" in capsys.readouterr().out


def test_gpu_only_commands_exit_2_in_one_line_without_a_gpu(tmp_path, capsys):
    if simcoll.gpu.cuda_available():
        pytest.skip("a GPU is present")
    _, path = saved_ring(tmp_path)
    assert main(["gpu", "run", str(path), "--size", "1MB"]) == 2
    captured = capsys.readouterr()  # an error: on stderr, nothing on stdout
    assert not captured.out and captured.err.count("\n") == 1 and "no CUDA GPU" in captured.err
    with pytest.raises(GpuUnavailableError):
        runner.run(ring2(), 4096)


def test_source_is_self_contained(tmp_path):
    _, path = saved_ring(tmp_path)
    out = tmp_path / "kernel.cu"
    assert main(["gpu", "source", str(path), "-o", str(out)]) == 0
    text = out.read_text()
    assert "#include" not in text and "sc_interp_kernel" in text and "sc_table_instructions[]" in text


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_kernel_compiles_with_nvcc_without_spills(tmp_path, arch):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not installed")
    src = tmp_path / "kernel.cu"
    src.write_text(runner.table_source(to_table(ring2())))
    proc = subprocess.run([nvcc, "-cubin", f"-arch={arch}", "-Xptxas", "-v", "-o", str(tmp_path / "k.cubin"),
                           str(src)], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert_no_spills(proc.stderr)


def assert_no_spills(log: str) -> None:
    """Every function in a ``-Xptxas -v`` log reports zero spill stores and loads."""
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    assert spills and all(int(a) == 0 and int(b) == 0 for a, b in spills), log


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_kernel_compiles_with_nvrtc_without_spills(arch):
    from simcoll.gpu import nvrtc

    if not nvrtc.nvrtc_available():
        pytest.skip("NVRTC is not installed (cuda-bindings and nvidia-cuda-nvrtc-cu12)")
    result = nvrtc.compile_source(runner.table_source(to_table(ring2())), arch)
    assert result.cubin[:4] == b"\x7fELF" and f"for '{arch}'" in result.log
    assert_no_spills(result.log)


def test_nvrtc_reports_a_compile_error_with_its_log():
    from simcoll.gpu import nvrtc

    if not nvrtc.nvrtc_available():
        pytest.skip("NVRTC is not installed")
    with pytest.raises(SimcollError, match="could not compile.*undefined"):
        nvrtc.compile_source('extern "C" __global__ void k() { undefined_name(); }')
