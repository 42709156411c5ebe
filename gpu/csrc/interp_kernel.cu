// simcoll's persistent interpreter kernel: one thread block per executor of
// every rank (blockIdx.x + exec_base is the global executor index); the
// per-instruction logic is interp_core.h, shared with the host driver.
#include "interp_core.h"

#ifndef SC_MAX_THREADS
#define SC_MAX_THREADS 512
#endif

extern "C" __global__ void __launch_bounds__(SC_MAX_THREADS) sc_interp_kernel(ScTable t) {
  sc_run_executor(&t, t.exec_base + (int)blockIdx.x);
}
