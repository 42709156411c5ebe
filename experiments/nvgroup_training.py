"""NV-Group Fig. 14 end to end: ResNet-50 training on a DGX-2, NVGroup-Ring
against NCCL 2.6 inside a whole data-parallel step (simcoll.workload).

The set-up of NV-Group §5.3: ResNet-50, 64 images per GPU, Horovod with
tensor fusion (gradients fused into Allreduces of up to 64 MB, Horovod's
default fusion threshold), TensorFlow, 1 to 16 GPUs of one DGX-2. The
compute is what the paper's own numbers give a single GPU: Fig. 14 states
5,788 images/s at 93.9 % scaling efficiency on 16 GPUs, i.e. 385.3 images/s
on one (5,788 / (16 x 0.939)); the backward pass is twice the forward, both
by the network's layer FLOPs (simcoll.workload.generators), so the step's
compute takes 64 / 385.3 s on every GPU. Only the Allreduces differ between
the two runs: NCCL 2.6's choice on the DP group, or NVGroup-Ring.

Writes ``<out>/nvgroup_training.csv`` (throughput and scaling efficiency per
GPU count and schedule) and ``<out>/nvgroup_training.png``.

    python experiments/nvgroup_training.py --out out/ [--fast]
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
from _common import Comparison, baseline_label, paper, parse_args, print_comparisons, write_csv

from simcoll.files import save_figure
from simcoll.workload import data_parallel, network_layers, run_workload

#: NV-Group's baseline: NCCL v2.6 (NV-Group §5.1).
NCCL = {"version": "2.6"}
BATCH_PER_GPU = 64  # NV-Group §5.3: "a fixed batch size, 64 per GPU"
#: Horovod's default fusion threshold (HOROVOD_FUSION_THRESHOLD, 64 MiB; Sergeev and Del Balso 2018, §4).
FUSION_BYTES = 64 << 20
#: Fig. 14: 5,788 images/s at 93.9 % scaling efficiency on 16 GPUs, so one GPU trains 5,788 / (16 x 0.939).
PAPER_THROUGHPUT_16, PAPER_EFFICIENCY_16 = 5788.0, 0.939
SINGLE_GPU_IMAGES_PER_S = PAPER_THROUGHPUT_16 / (16 * PAPER_EFFICIENCY_16)
CLAIM = "nvgroup.fig14.dgx2_resnet50_throughput"
SCHEDULES = {"nccl": "NCCL 2.6 (its choice)", "nvgroup-ring": "NVGroup-Ring"}


def compute_efficiency(machine_peak_flops: float) -> float:
    """The fraction of the GPU's peak at which ResNet-50's layer FLOPs take
    the paper's single-GPU step time (forward, and a backward of twice it)."""
    step_flops = 3 * BATCH_PER_GPU * sum(layer.forward_flops for layer in network_layers("resnet50"))
    return step_flops / machine_peak_flops / (BATCH_PER_GPU / SINGLE_GPU_IMAGES_PER_S)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(__doc__, argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    from simcoll import load_machine

    machine = load_machine("dgx2")
    efficiency = compute_efficiency(machine.model.gpu.peak_flops_per_s)
    rows = []
    for gpus in (1, 16) if args.fast else (1, 2, 4, 8, 16):
        for schedule, label in SCHEDULES.items():
            step = data_parallel("resnet50", ranks=gpus, batch_per_gpu=BATCH_PER_GPU, bucket_bytes=FUSION_BYTES,
                                 first_bucket_bytes=FUSION_BYTES, compute_efficiency=efficiency, schedule=schedule,
                                 nccl=NCCL["version"])  # fmt: skip
            result = run_workload(step, machine)
            comm = result.communication()
            rows.append({
                "gpus": gpus, "schedule": label, "step_time_s": result.step_time_s,
                "images_per_s": result.throughput_per_s,
                "scaling_efficiency": result.throughput_per_s / (gpus * SINGLE_GPU_IMAGES_PER_S),
                "exposed_communication_s": result.exposed_communication_s(),
                "allreduce_busy_s": comm[0]["busy_s"] if comm else 0.0,
            })  # fmt: skip
    df = pd.DataFrame(rows)
    write_csv(df, out / "nvgroup_training.csv")
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, part in df.groupby("schedule", sort=False):
        ax.plot(part.gpus, part.images_per_s, marker="o", label=label)
    ax.set_xlabel("GPUs of one DGX-2")
    ax.set_ylabel("images/s (simulated)")
    ax.set_title("ResNet-50, 64 images per GPU (NV-Group Fig. 14)")
    ax.legend()
    save_figure(fig, out / "nvgroup_training.png")
    plt.close(fig)

    at16 = df[df.gpus == 16].set_index("schedule")
    gain = at16.images_per_s[SCHEDULES["nvgroup-ring"]] / at16.images_per_s[SCHEDULES["nccl"]]
    comparisons = [
        Comparison(
            "ResNet-50 on 16 DGX-2 GPUs: throughput gained with NVGroup-Ring over NCCL",
            paper(CLAIM),
            f"{(gain - 1) * 100:.2f} %",
            "NV-Group §5.3, Fig. 14",
            claim=CLAIM,
            value=(gain - 1) * 100,
        ),
        Comparison(
            "16-GPU scaling efficiency, NVGroup-Ring / NCCL",
            "93.9% / 85.2% (5,788 / 5,193 images/s)",
            " / ".join(
                f"{at16.scaling_efficiency[SCHEDULES[s]]:.1%} ({at16.images_per_s[SCHEDULES[s]]:,.0f} images/s)"
                for s in ("nvgroup-ring", "nccl")
            ),  # fmt: skip
            "NV-Group §5.3, Fig. 14(b)",
        ),
        Comparison(
            "Allreduce time a step on 16 GPUs, and how much of it compute does not hide (NCCL)",
            "not reported",
            f"{at16.allreduce_busy_s[SCHEDULES['nccl']] * 1e3:.2f} ms, "
            f"{at16.exposed_communication_s[SCHEDULES['nccl']] * 1e3:.2f} ms exposed of a "
            f"{at16.step_time_s[SCHEDULES['nccl']] * 1e3:.1f} ms step",
            "simulated",
        ),
    ]
    print_comparisons("NV-Group Fig. 14 (training)", comparisons, baseline_label(**NCCL))
    print(f"wrote {out / 'nvgroup_training.csv'} and {out / 'nvgroup_training.png'}")
    return {"results": df, "comparisons": comparisons}


if __name__ == "__main__":
    main()
