// Host driver of the simcoll interpreter core: one std::thread per executor,
// the same per-instruction code as the CUDA kernel (interp_core.h). Built by
// simcoll.gpu.host at test time and called through ctypes. A wall-clock
// deadline turns a deadlock into an abort with every executor's state kept in
// the status words.
#include <chrono>
#include <thread>
#include <vector>

namespace {
std::chrono::steady_clock::time_point g_deadline;
}

struct ScTable;
static int sc_host_poll(const ScTable *t, unsigned long long *spins);
#define SC_POLL(t, spins) sc_host_poll(t, spins)
#include "interp_core.h"

static int sc_host_poll(const ScTable *t, unsigned long long *spins) {
  *spins += 1;
  if (*spins > 64) std::this_thread::yield();  // far more threads than cores
  if ((*spins & 255) != 0) return 0;
  if (sc_load_flag(t->status)) return 1;
  if (std::chrono::steady_clock::now() > g_deadline) {
    sc_store_flag(t->status, 1);
    return 1;
  }
  return 0;
}

extern "C" int sc_host_run(ScTable *t, double timeout_s) {
  g_deadline = std::chrono::steady_clock::now() +
               std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(timeout_s));
  std::vector<std::thread> threads;
  threads.reserve(t->num_executors);
  for (int g = 0; g < t->num_executors; ++g) threads.emplace_back([t, g] { sc_run_executor(t, t->exec_base + g); });
  for (auto &th : threads) th.join();
  return sc_load_flag(t->status);
}

extern "C" int sc_table_struct_size() { return (int)sizeof(ScTable); }
