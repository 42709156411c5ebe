// simcoll's persistent interpreter kernel: one thread block per executor of
// every rank (blockIdx.x + exec_base is the global executor index); the
// per-instruction logic is interp_core.h, shared with the host driver.
#include "interp_core.h"

// No __launch_bounds__: with __launch_bounds__(512) ptxas holds the kernel to
// 64 registers and spills; left free it needs 124 with the 16-byte data path
// (nvcc 13.0 and NVRTC, sm_80 and sm_90: benchmarks/gpu_kernel.py), so
// 512-thread blocks still launch (one per SM), and
// the runner checks the real co-residency with the occupancy API.
extern "C" __global__ void sc_interp_kernel(ScTable t) {
  sc_run_executor(&t, t.exec_base + (int)blockIdx.x);
}
