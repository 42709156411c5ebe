/* simcoll interpreter core: runs one executor of an instruction table
 * (simcoll.gpu.table). Compiled three ways from this one file:
 *   - by nvcc / NVRTC inside interp_kernel.cu (one thread block per executor),
 *   - by the host C++ compiler inside host_driver.cpp (one thread per executor),
 *   - never with standard headers, so NVRTC needs no include path.
 * Semantics are those of simcoll/gpu/reference.py (the NumPy reference):
 * sums widen to float32, add, and round back to nearest even.
 *
 * Synchronisation (MSCCL-style, GC3 Fig. 5): steps[g] counts the steps
 * executor g finished (over all tiles); a dependency (d, s) of tile t waits
 * for steps[d] >= t * count(d) + s + 1. A connection's FIFO has `slots` slots
 * in the receiver's memory; the sender advances tails[c] after writing a
 * slot, the receiver advances heads[c] after it is done with one (Simple
 * protocol). Flags are published with release stores and read with acquire
 * loads (the SC_* memory-ordering helpers below).
 *
 * LL protocol (NCCL's low-latency protocol; NVIDIA/nccl issue #281): a slot
 * holds 8-byte lines, each 4 bytes of data (one 32-bit or two 16-bit
 * elements) and a 4-byte flag, written with one 64-bit store. The flag is the
 * message's sequence number on its connection (1, 2, ...), so the receiver
 * polls every line until its flag matches and needs no tail counter; the
 * data and its flag cannot be seen apart. Each piece (chunk) of a message
 * starts on a line boundary: ceil(tile_elems * elem_bytes / 4) lines. Slots
 * are reused with higher sequence numbers, so a stale line never matches;
 * a driver that restarts the counters must zero the FIFOs.
 */
#ifndef SIMCOLL_INTERP_CORE_H
#define SIMCOLL_INTERP_CORE_H

typedef long long sc_i64;
typedef unsigned long long sc_u64;
typedef unsigned int sc_u32;
typedef unsigned short sc_u16;

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define SC_HD __host__ __device__ inline
#else
#define SC_HD inline
#endif

/* ---- table columns (must equal simcoll.gpu.table's *_COLUMNS) ---------- */
#define SC_EX_RANK 0
#define SC_EX_ID 1
#define SC_EX_CHANNEL 2
#define SC_EX_KIND 3
#define SC_EX_SEND_PEER 4
#define SC_EX_RECV_PEER 5
#define SC_EX_SEND_CONN 6
#define SC_EX_RECV_CONN 7
#define SC_EX_FIRST 8
#define SC_EX_COUNT 9
#define SC_EX_NCOL 10

#define SC_IN_OP 0
#define SC_IN_SRC_RANK 1
#define SC_IN_SRC_BUFFER 2
#define SC_IN_SRC_OFFSET 3
#define SC_IN_DST_RANK 4
#define SC_IN_DST_BUFFER 5
#define SC_IN_DST_OFFSET 6
#define SC_IN_COUNT 7
#define SC_IN_DEP_FIRST 8
#define SC_IN_DEP_COUNT 9
#define SC_IN_SOURCE_FIRST 10
#define SC_IN_SOURCE_COUNT 11
#define SC_IN_NCOL 12

#define SC_DEP_EXECUTOR 0
#define SC_DEP_STEP 1
#define SC_DEP_NCOL 2

#define SC_SRC_RANK 0
#define SC_SRC_BUFFER 1
#define SC_SRC_OFFSET 2
#define SC_SRC_NCOL 3

#define SC_CONN_SRC 0
#define SC_CONN_DST 1
#define SC_CONN_CHANNEL 2
#define SC_CONN_SENDER 3
#define SC_CONN_RECEIVER 4
#define SC_CONN_SLOTS 5
#define SC_CONN_MAX_COUNT 6
#define SC_CONN_SLOT_BYTES 7
#define SC_CONN_NCOL 8

/* ---- op codes (simcoll.program.INSTRUCTION_OPS order) ------------------- */
#define SC_OP_SEND 0
#define SC_OP_RECV 1
#define SC_OP_RCS 2
#define SC_OP_RRC 3
#define SC_OP_RRS 4
#define SC_OP_RRCS 5
#define SC_OP_COPY 6
#define SC_OP_REDUCE 7
#define SC_OP_PUT 8
#define SC_OP_GET 9
#define SC_OP_LOAD_REDUCE 10
#define SC_OP_SIGNAL 11
#define SC_OP_WAIT 12
#define SC_OP_NOP 13

/* ---- element types (simcoll.gpu.reference.DTYPES codes) ----------------- */
#define SC_DT_FLOAT32 0
#define SC_DT_FLOAT16 1
#define SC_DT_BFLOAT16 2

/* ---- protocols (simcoll.gpu.table.PROTOCOL_CODES) ------------------------ */
#define SC_PROTO_SIMPLE 0
#define SC_PROTO_LL 1

/* ---- status words: status[0] = abort flag; per executor 4 words --------- */
#define SC_STATUS_HEADER 1
#define SC_STATUS_WORDS 4 /* state, step, tile, argument */
#define SC_STATE_RUNNING 0
#define SC_STATE_DONE 1
#define SC_STATE_WAIT_DEP 2
#define SC_STATE_WAIT_RECV 3
#define SC_STATE_WAIT_SLOT 4

struct ScTable {
  const int *executors, *instructions, *deps, *sources, *connections;
  char *const *bufs;  /* [num_ranks * num_buffers], in-place aliases resolved */
  char *const *fifos; /* [num_connections]: slots * max_count * tile_elems elements */
  sc_u64 *steps;      /* [num_executors] */
  sc_u64 *heads;      /* [num_connections], advanced by the receiver */
  sc_u64 *tails;      /* [num_connections], advanced by the sender */
  int *status;        /* [SC_STATUS_HEADER + SC_STATUS_WORDS * num_executors] */
  sc_i64 chunk_elems, tile_elems, num_tiles, spin_limit;
  int num_ranks, num_buffers, num_executors, exec_base, dtype, elem_bytes, protocol;
};

/* ---- memory ordering and thread cooperation ---------------------------- */
#if defined(__CUDA_ARCH__)
#define SC_TID ((int)threadIdx.x)
#define SC_NTHREADS ((int)blockDim.x)
#define SC_BARRIER() __syncthreads()
/* A poll spins on plain loads and fences once, when the value it waits for is
 * there: a fence in every spin kept dozens of polling blocks contending. */
__device__ inline sc_u64 sc_load_poll(sc_u64 *p) { return *(volatile sc_u64 *)p; }
__device__ inline void sc_acquire_fence(void) { __threadfence_system(); }
__device__ inline void sc_store_release(sc_u64 *p, sc_u64 v) {
  __threadfence_system();
  *(volatile sc_u64 *)p = v;
}
__device__ inline int sc_load_flag(int *p) { return *(volatile int *)p; }
/* LL lines: data and flag in one 64-bit word, so no ordering is needed */
__device__ inline sc_u64 sc_load_line(const sc_u64 *p) { return *(volatile const sc_u64 *)p; }
__device__ inline void sc_store_line(sc_u64 *p, sc_u64 v) { *(volatile sc_u64 *)p = v; }
__device__ inline void sc_store_flag(int *p, int v) { *(volatile int *)p = v; }
#define SC_PAUSE() ((void)0)
#else
#define SC_TID 0
#define SC_NTHREADS 1
#define SC_BARRIER() ((void)0)
/* the polling load is itself the acquire (ThreadSanitizer models acquire loads, not fences) */
inline sc_u64 sc_load_poll(sc_u64 *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
inline void sc_acquire_fence(void) {}
inline void sc_store_release(sc_u64 *p, sc_u64 v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
inline int sc_load_flag(int *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
inline sc_u64 sc_load_line(const sc_u64 *p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
inline void sc_store_line(sc_u64 *p, sc_u64 v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }
inline void sc_store_flag(int *p, int v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
#if defined(__x86_64__) || defined(__i386__)
#define SC_PAUSE() __builtin_ia32_pause()
#else
#define SC_PAUSE() ((void)0)
#endif
#endif

/* SC_POLL(t, spins): called while spinning; nonzero aborts the run. A
 * driver may define it before including this file (the host driver checks a
 * wall-clock deadline); the default counts spins against t->spin_limit. */
#ifndef SC_POLL
SC_HD int sc_default_poll(const ScTable *t, sc_u64 *spins) {
  *spins += 1;
  SC_PAUSE();
  if ((*spins & 1023) != 0) return 0;
  if (sc_load_flag(t->status)) return 1;
  if (t->spin_limit > 0 && *spins > (sc_u64)t->spin_limit) {
    sc_store_flag(t->status, 1);
    return 1;
  }
  return 0;
}
#define SC_POLL(t, spins) sc_default_poll(t, spins)
#endif

/* ---- element conversions (round to nearest even) ------------------------ */
SC_HD float sc_bits_to_float(sc_u32 b) {
  union { sc_u32 u; float f; } v;
  v.u = b;
  return v.f;
}
SC_HD sc_u32 sc_float_to_bits(float f) {
  union { sc_u32 u; float f; } v;
  v.f = f;
  return v.u;
}
SC_HD float sc_half_to_float(sc_u16 h) {
  sc_u32 sign = ((sc_u32)h & 0x8000u) << 16, exp = ((sc_u32)h >> 10) & 0x1fu, mant = (sc_u32)h & 0x3ffu;
  if (exp == 0) {
    if (mant == 0) return sc_bits_to_float(sign);
    int e = -1;
    do {
      e++;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    return sc_bits_to_float(sign | ((sc_u32)(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13));
  }
  if (exp == 31) return sc_bits_to_float(sign | 0x7f800000u | (mant << 13));
  return sc_bits_to_float(sign | ((exp + 112u) << 23) | (mant << 13));
}
SC_HD sc_u16 sc_float_to_half(float f) {
  sc_u32 x = sc_float_to_bits(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {
    if (ax == 0x7f800000u) return (sc_u16)(sign | 0x7c00u);
    sc_u32 m = (ax >> 13) & 0x3ffu;
    return (sc_u16)(sign | 0x7c00u | (m ? m : 1u));
  }
  if (ax >= 0x38800000u) { /* a normal half (or overflow) */
    sc_u32 e = (ax >> 23) - 112u;
    if (e >= 31u) return (sc_u16)(sign | 0x7c00u);
    sc_u32 h = (e << 10) | ((ax & 0x7fffffu) >> 13), rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
    return (sc_u16)(sign | h);
  }
  if (ax >= 0x33000000u) { /* a subnormal half */
    sc_u32 e = ax >> 23, mant = (ax & 0x7fffffu) | 0x800000u, shift = 126u - e;
    sc_u32 h = mant >> shift, rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (h & 1u))) h++;
    return (sc_u16)(sign | h);
  }
  return (sc_u16)sign;
}
SC_HD float sc_bf16_to_float(sc_u16 h) { return sc_bits_to_float((sc_u32)h << 16); }
SC_HD sc_u16 sc_float_to_bf16(float f) {
  sc_u32 x = sc_float_to_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (sc_u16)((x >> 16) | 0x40u);
  return (sc_u16)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
SC_HD float sc_load(int dtype, const char *p, sc_i64 i) {
  if (dtype == SC_DT_FLOAT32) return ((const float *)p)[i];
  sc_u16 h = ((const sc_u16 *)p)[i];
  return dtype == SC_DT_FLOAT16 ? sc_half_to_float(h) : sc_bf16_to_float(h);
}
SC_HD void sc_store(int dtype, char *p, sc_i64 i, float v) {
  if (dtype == SC_DT_FLOAT32)
    ((float *)p)[i] = v;
  else
    ((sc_u16 *)p)[i] = dtype == SC_DT_FLOAT16 ? sc_float_to_half(v) : sc_float_to_bf16(v);
}
/* a ⊕ b rounded to the element type (as a float holding that value) */
SC_HD float sc_add(int dtype, float a, float b) {
  float s = a + b;
  if (dtype == SC_DT_FLOAT32) return s;
  return dtype == SC_DT_FLOAT16 ? sc_half_to_float(sc_float_to_half(s)) : sc_bf16_to_float(sc_float_to_bf16(s));
}

/* 16 bytes moved by one load and one store (ld/st.v2.u64 on the GPU). One
 * thread block must keep many of them in flight to approach the memory's rate:
 * each thread loads SC_COPY_UNROLL (copies) or SC_REDUCE_UNROLL (pairs to add)
 * words before it stores any. */
struct alignas(16) sc_v16 {
  sc_u64 lo, hi;
};
#define SC_COPY_UNROLL 8
#define SC_REDUCE_UNROLL 4

SC_HD int sc_aligned16(const void *p) { return ((sc_u64)p & 15u) == 0; }

/* x ⊕ y element by element for 8 bytes of elements (2 float32 or 4 halves);
 * the same rounding as sc_add on each element */
SC_HD sc_u64 sc_add8(int dtype, sc_u64 x, sc_u64 y) {
  sc_u64 out = 0;
  if (dtype == SC_DT_FLOAT32) {
    for (int k = 0; k < 2; ++k) {
      const float v = sc_bits_to_float((sc_u32)(x >> (32 * k))) + sc_bits_to_float((sc_u32)(y >> (32 * k)));
      out |= (sc_u64)sc_float_to_bits(v) << (32 * k);
    }
    return out;
  }
  for (int k = 0; k < 4; ++k) {
    const sc_u16 a = (sc_u16)(x >> (16 * k)), b = (sc_u16)(y >> (16 * k));
    const sc_u16 r = dtype == SC_DT_FLOAT16
                         ? sc_float_to_half(sc_half_to_float(a) + sc_half_to_float(b))
                         : sc_float_to_bf16(sc_bf16_to_float(a) + sc_bf16_to_float(b));
    out |= (sc_u64)r << (16 * k);
  }
  return out;
}
SC_HD sc_v16 sc_add16(int dtype, sc_v16 x, sc_v16 y) {
  sc_v16 r;
  r.lo = sc_add8(dtype, x.lo, y.lo);
  r.hi = sc_add8(dtype, x.hi, y.hi);
  return r;
}

/* The 16-byte words [0, words) of out1 (and out2) := a (⊕ b): rounds in
 * which every thread handles `unroll` words, then one word per thread. */
SC_HD void sc_apply16(int dt, sc_i64 words, sc_v16 *out1, sc_v16 *out2, const sc_v16 *a, const sc_v16 *b) {
  sc_i64 w0 = 0;
  if (b == 0) {
    const sc_i64 round = (sc_i64)SC_NTHREADS * SC_COPY_UNROLL;
    for (; w0 + round <= words; w0 += round) {
      sc_v16 v[SC_COPY_UNROLL];
      for (int u = 0; u < SC_COPY_UNROLL; ++u) v[u] = a[w0 + u * SC_NTHREADS + SC_TID];
      for (int u = 0; u < SC_COPY_UNROLL; ++u) {
        out1[w0 + u * SC_NTHREADS + SC_TID] = v[u];
        if (out2) out2[w0 + u * SC_NTHREADS + SC_TID] = v[u];
      }
    }
  } else {
    const sc_i64 round = (sc_i64)SC_NTHREADS * SC_REDUCE_UNROLL;
    for (; w0 + round <= words; w0 += round) {
      sc_v16 va[SC_REDUCE_UNROLL], vb[SC_REDUCE_UNROLL];
      for (int u = 0; u < SC_REDUCE_UNROLL; ++u) va[u] = a[w0 + u * SC_NTHREADS + SC_TID];
      for (int u = 0; u < SC_REDUCE_UNROLL; ++u) vb[u] = b[w0 + u * SC_NTHREADS + SC_TID];
      for (int u = 0; u < SC_REDUCE_UNROLL; ++u) {
        const sc_v16 v = sc_add16(dt, va[u], vb[u]);
        out1[w0 + u * SC_NTHREADS + SC_TID] = v;
        if (out2) out2[w0 + u * SC_NTHREADS + SC_TID] = v;
      }
    }
  }
  for (sc_i64 w = w0 + SC_TID; w < words; w += SC_NTHREADS) {
    const sc_v16 v = b == 0 ? a[w] : sc_add16(dt, a[w], b[w]);
    out1[w] = v;
    if (out2) out2[w] = v;
  }
}

/* out1[i] (and out2[i] when given) := a[i] (⊕ b[i] when b is given), n elements.
 * Plain copies move bits (no conversion). Where every pointer is 16-byte
 * aligned the bulk moves as 16-byte words (sc_apply16), the rest element by
 * element; both round each element the same way. */
SC_HD void sc_apply(const ScTable *t, sc_i64 n, char *out1, char *out2, const char *a, const char *b) {
  const int dt = t->dtype;
  sc_i64 first = 0;
  if (sc_aligned16(out1) && sc_aligned16(out2) && sc_aligned16(a) && sc_aligned16(b)) {
    const sc_i64 per = 16 / t->elem_bytes, words = n / per;
    sc_apply16(dt, words, (sc_v16 *)out1, (sc_v16 *)out2, (const sc_v16 *)a, (const sc_v16 *)b);
    first = words * per;
  }
  for (sc_i64 i = first + SC_TID; i < n; i += SC_NTHREADS) {
    if (b == 0) {
      if (t->elem_bytes == 4) {
        sc_u32 v = ((const sc_u32 *)a)[i];
        ((sc_u32 *)out1)[i] = v;
        if (out2) ((sc_u32 *)out2)[i] = v;
      } else {
        sc_u16 v = ((const sc_u16 *)a)[i];
        ((sc_u16 *)out1)[i] = v;
        if (out2) ((sc_u16 *)out2)[i] = v;
      }
    } else {
      float v = sc_add(dt, sc_load(dt, a, i), sc_load(dt, b, i));
      sc_store(dt, out1, i, v);
      if (out2) sc_store(dt, out2, i, v);
    }
  }
}

/* Raw bits of element i (32- or 16-bit) */
SC_HD sc_u32 sc_raw(int elem_bytes, const char *p, sc_i64 i) {
  return elem_bytes == 4 ? ((const sc_u32 *)p)[i] : (sc_u32)((const sc_u16 *)p)[i];
}
SC_HD void sc_put_raw(int elem_bytes, char *p, sc_i64 i, sc_u32 v) {
  if (elem_bytes == 4)
    ((sc_u32 *)p)[i] = v;
  else
    ((sc_u16 *)p)[i] = (sc_u16)v;
}

/* LL lines of one piece of ``len`` elements. The value of each element is the
 * received one (rline) or src's; with both, received ⊕ src. It goes to dst
 * and/or as lines with flag ``sflag`` to sline; received lines are polled
 * until their flag is ``rflag``. Returns nonzero when the run was aborted. */
SC_HD int sc_ll_piece(const ScTable *t, sc_i64 len, char *dst, char *sline, const char *rline, const char *src,
                      sc_u32 sflag, sc_u32 rflag) {
  const int eb = t->elem_bytes, dt = t->dtype;
  const sc_i64 per = 4 / eb, words = (len + per - 1) / per;
  for (sc_i64 w = SC_TID; w < words; w += SC_NTHREADS) {
    const sc_i64 e0 = w * per;
    const int ne = (int)(len - e0 < per ? len - e0 : per);
    sc_u32 data = 0;
    if (rline) {
      sc_u64 spins = 0, line;
      while ((sc_u32)((line = sc_load_line((const sc_u64 *)rline + w)) >> 32) != rflag)
        if (SC_POLL(t, &spins)) return 1;
      data = (sc_u32)line;
      if (src) {
        sc_u32 out = 0;
        for (int k = 0; k < ne; ++k) {
          const sc_u32 bits = eb == 4 ? data : (data >> (16 * k)) & 0xffffu;
          const float a = dt == SC_DT_FLOAT32   ? sc_bits_to_float(bits)
                          : dt == SC_DT_FLOAT16 ? sc_half_to_float((sc_u16)bits)
                                                : sc_bf16_to_float((sc_u16)bits);
          const float v = sc_add(dt, a, sc_load(dt, src, e0 + k));
          const sc_u32 r = dt == SC_DT_FLOAT32   ? sc_float_to_bits(v)
                           : dt == SC_DT_FLOAT16 ? (sc_u32)sc_float_to_half(v)
                                                 : (sc_u32)sc_float_to_bf16(v);
          out |= eb == 4 ? r : r << (16 * k);
        }
        data = out;
      }
    } else {
      for (int k = 0; k < ne; ++k) data |= eb == 4 ? sc_raw(eb, src, e0) : sc_raw(eb, src, e0 + k) << (16 * k);
    }
    if (dst)
      for (int k = 0; k < ne; ++k) sc_put_raw(eb, dst, e0 + k, eb == 4 ? data : (data >> (16 * k)) & 0xffffu);
    if (sline) sc_store_line((sc_u64 *)sline + w, ((sc_u64)sflag << 32) | data);
  }
  return 0;
}

/* Address of element `elem` of chunk `chunk` of (rank, buffer); rank < 0: local. */
SC_HD char *sc_addr(const ScTable *t, int rank, int ref_rank, int buffer, sc_i64 chunk, sc_i64 elem) {
  int owner = ref_rank < 0 ? rank : ref_rank;
  return t->bufs[owner * t->num_buffers + buffer] + (chunk * t->chunk_elems + elem) * t->elem_bytes;
}

SC_HD void sc_set_status(const ScTable *t, int g, int state, int step, int tile, int arg) {
  if (SC_TID != 0) return;
  int *s = t->status + SC_STATUS_HEADER + SC_STATUS_WORDS * g;
  s[0] = state;
  s[1] = step;
  s[2] = tile;
  s[3] = arg;
}

/* Thread 0 spins until *p >= target; all threads then pass a barrier.
 * Returns nonzero when the run was aborted. */
SC_HD int sc_wait_at_least(const ScTable *t, sc_u64 *p, sc_u64 target, int *aborted) {
  if (SC_TID == 0 && !*aborted) {
    sc_u64 spins = 0;
    while (sc_load_poll(p) < target) {
      if (SC_POLL(t, &spins)) {
        *aborted = 1;
        break;
      }
    }
    sc_acquire_fence(); /* orders the block's reads after the flag (its threads wait at the barrier) */
  }
  SC_BARRIER();
  return *aborted;
}

/* Runs every tile of executor g (a global executor index). Returns 0 when
 * done, 1 when aborted (deadlock timeout or another executor's abort). */
SC_HD int sc_run_executor(const ScTable *t, int g) {
  const int *ex = t->executors + g * SC_EX_NCOL;
  const int rank = ex[SC_EX_RANK], first = ex[SC_EX_FIRST], count = ex[SC_EX_COUNT];
  const int sconn = ex[SC_EX_SEND_CONN], rconn = ex[SC_EX_RECV_CONN];
  const int *sc = sconn >= 0 ? t->connections + sconn * SC_CONN_NCOL : 0;
  const int *rc = rconn >= 0 ? t->connections + rconn * SC_CONN_NCOL : 0;
  const int ll = t->protocol == SC_PROTO_LL;
  /* bytes of one piece in a FIFO slot: tile_elems elements, or their LL lines */
  const sc_i64 piece_bytes = ll ? (t->tile_elems * t->elem_bytes + 3) / 4 * 8 : t->tile_elems * t->elem_bytes;
  const sc_i64 sstride = sc ? (sc_i64)sc[SC_CONN_MAX_COUNT] * piece_bytes : 0;
  const sc_i64 rstride = rc ? (sc_i64)rc[SC_CONN_MAX_COUNT] * piece_bytes : 0;
  sc_u64 sent = 0, received = 0;
#if defined(__CUDA_ARCH__)
  __shared__ int aborted_flag;
  if (SC_TID == 0) aborted_flag = 0;
  SC_BARRIER();
  int *aborted = &aborted_flag;
#else
  int aborted_flag = 0;
  int *aborted = &aborted_flag;
#endif
  for (sc_i64 tile = 0; tile < t->num_tiles; ++tile) {
    const sc_i64 toff = tile * t->tile_elems;
    const sc_i64 rest = t->chunk_elems - toff;
    const sc_i64 len = rest < t->tile_elems ? rest : t->tile_elems;
    for (int s = 0; s < count; ++s) {
      const int *in = t->instructions + (first + s) * SC_IN_NCOL;
      const int op = in[SC_IN_OP], n = in[SC_IN_COUNT];
      for (int k = 0; k < in[SC_IN_DEP_COUNT]; ++k) {
        const int *dep = t->deps + (in[SC_IN_DEP_FIRST] + k) * SC_DEP_NCOL;
        const int d = dep[SC_DEP_EXECUTOR];
        const sc_u64 need = (sc_u64)tile * (sc_u64)t->executors[d * SC_EX_NCOL + SC_EX_COUNT] + dep[SC_DEP_STEP] + 1;
        sc_set_status(t, g, SC_STATE_WAIT_DEP, s, (int)tile, d);
        if (sc_wait_at_least(t, t->steps + d, need, aborted)) return 1;
      }
      const int receives = op == SC_OP_RECV || op == SC_OP_RCS || op == SC_OP_RRC || op == SC_OP_RRS ||
                           op == SC_OP_RRCS || op == SC_OP_WAIT;
      const int sends = op == SC_OP_SEND || op == SC_OP_RCS || op == SC_OP_RRS || op == SC_OP_RRCS ||
                        op == SC_OP_SIGNAL;
      const int pieces = (op == SC_OP_SIGNAL || op == SC_OP_WAIT || op == SC_OP_NOP) ? 0 : n;
      const int ll_lines = ll && pieces > 0 && (receives || sends); /* this message travels as LL lines */
      char *rslot = 0, *sslot = 0;
      if (receives) {
        sc_set_status(t, g, SC_STATE_WAIT_RECV, s, (int)tile, rconn);
        /* LL data needs no tail: every line carries its own flag */
        if (!ll_lines && sc_wait_at_least(t, t->tails + rconn, received + 1, aborted)) return 1;
        rslot = t->fifos[rconn] + (sc_i64)(received % (sc_u64)rc[SC_CONN_SLOTS]) * rstride;
      }
      if (sends) {
        sc_set_status(t, g, SC_STATE_WAIT_SLOT, s, (int)tile, sconn);
        if (sc_wait_at_least(t, t->heads + sconn, sent + 1 > (sc_u64)sc[SC_CONN_SLOTS] ? sent + 1 - sc[SC_CONN_SLOTS] : 0,
                             aborted))
          return 1;
        sslot = t->fifos[sconn] + (sc_i64)(sent % (sc_u64)sc[SC_CONN_SLOTS]) * sstride;
      }
      if (!(ll_lines && receives)) sc_set_status(t, g, SC_STATE_RUNNING, s, (int)tile, -1);
      const int sr = in[SC_IN_SRC_RANK], sb = in[SC_IN_SRC_BUFFER], so = in[SC_IN_SRC_OFFSET];
      const int dr = in[SC_IN_DST_RANK], db = in[SC_IN_DST_BUFFER], dof = in[SC_IN_DST_OFFSET];
      for (int p = 0; p < pieces; ++p) {
        const sc_i64 mo = (sc_i64)p * (ll_lines ? piece_bytes : len * t->elem_bytes); /* piece p of a message */
        char *src = sb >= 0 ? sc_addr(t, rank, sr, sb, so + p, toff) : 0;
        char *dst = db >= 0 ? sc_addr(t, rank, dr, db, dof + p, toff) : 0;
        if (ll_lines) {
          const int reduces = op == SC_OP_RRC || op == SC_OP_RRS || op == SC_OP_RRCS;
          char *out = (op == SC_OP_SEND || op == SC_OP_RRS) ? 0 : dst;
          if (sc_ll_piece(t, len, out, sends ? sslot + mo : 0, receives ? rslot + mo : 0,
                          (op == SC_OP_SEND || reduces) ? src : 0, (sc_u32)(sent + 1), (sc_u32)(received + 1)))
            *aborted = 1;
          continue;
        }
        switch (op) {
          case SC_OP_SEND: sc_apply(t, len, sslot + mo, 0, src, 0); break;
          case SC_OP_RECV: sc_apply(t, len, dst, 0, rslot + mo, 0); break;
          case SC_OP_RCS: sc_apply(t, len, dst, sslot + mo, rslot + mo, 0); break;
          case SC_OP_RRC: sc_apply(t, len, dst, 0, rslot + mo, src); break;
          case SC_OP_RRS: sc_apply(t, len, sslot + mo, 0, rslot + mo, src); break;
          case SC_OP_RRCS: sc_apply(t, len, dst, sslot + mo, rslot + mo, src); break;
          case SC_OP_COPY:
          case SC_OP_PUT:
          case SC_OP_GET: sc_apply(t, len, dst, 0, src, 0); break;
          case SC_OP_REDUCE: sc_apply(t, len, dst, 0, dst, src); break;
          case SC_OP_LOAD_REDUCE: {
            const int *s0 = t->sources + in[SC_IN_SOURCE_FIRST] * SC_SRC_NCOL;
            const int ns = in[SC_IN_SOURCE_COUNT];
            for (sc_i64 i = SC_TID; i < len; i += SC_NTHREADS) {
              float v = sc_load(t->dtype, sc_addr(t, rank, s0[0], s0[1], s0[2] + p, toff), i);
              for (int q = 1; q < ns; ++q) {
                const int *sq = s0 + q * SC_SRC_NCOL;
                v = sc_add(t->dtype, v, sc_load(t->dtype, sc_addr(t, rank, sq[0], sq[1], sq[2] + p, toff), i));
              }
              sc_store(t->dtype, dst, i, v);
            }
            break;
          }
          default: break;
        }
      }
      SC_BARRIER();
      if (*aborted) return 1;
      if (ll_lines && receives) sc_set_status(t, g, SC_STATE_RUNNING, s, (int)tile, -1);
      if (SC_TID == 0) {
        if (sends) sc_store_release(t->tails + sconn, ++sent);
        if (receives) sc_store_release(t->heads + rconn, ++received);
        sc_store_release(t->steps + g, (sc_u64)tile * (sc_u64)count + (sc_u64)s + 1);
      }
      if (SC_TID != 0) {
        if (sends) ++sent;
        if (receives) ++received;
      }
    }
  }
  sc_set_status(t, g, SC_STATE_DONE, count, (int)t->num_tiles, -1);
  return 0;
}

#endif /* SIMCOLL_INTERP_CORE_H */
