// The kernels' device code, included by each kernel unit (forward_*.cu, fused_add_*.cu, backward_*.cu), which
// instantiates the launchers of one element type. nvcc only. The design is in rmsnorm_kernels.cu's header.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <type_traits>

#include "rmsnorm_plan.h"

namespace rmsnorm {
namespace detail {

// ---------------------------------------------------------------------------------------------------
// Elements: exact widening to fp32 from a packed 32-bit word (`hi` picks the upper 16-bit element), and
// rounding from fp32 to the element's bits. `fresh` is the same widening through inline assembly that the
// compiler can neither merge with another conversion nor hoist: a second pass over a row's elements then
// widens again from the packed words instead of keeping every element's fp32 value alive across the row
// reduction, which would double the registers the row's data takes and halve occupancy.

template <typename E>
struct Bits;
template <>
struct Bits<float> {
  __device__ static float get(uint32_t w, bool) { return __uint_as_float(w); }
  __device__ static float fresh(uint32_t w, bool) {
    uint32_t r;
    asm volatile("mov.b32 %0, %1;" : "=r"(r) : "r"(w));
    return __uint_as_float(r);
  }
  __device__ static uint32_t from_float(float v) { return __float_as_uint(v); }
};
template <>
struct Bits<__nv_bfloat16> {
  // bf16 is the top half of an fp32: widening is exact.
  __device__ static float get(uint32_t w, bool hi) { return __uint_as_float(hi ? w & 0xffff0000u : w << 16); }
  __device__ static float fresh(uint32_t w, bool hi) {
    uint32_t r;
    if (hi) {
      asm volatile("and.b32 %0, %1, 0xffff0000;" : "=r"(r) : "r"(w));
    } else {
      asm volatile("shl.b32 %0, %1, 16;" : "=r"(r) : "r"(w));
    }
    return __uint_as_float(r);
  }
  __device__ static uint32_t from_float(float v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }
};
template <>
struct Bits<__half> {
  __device__ static float get(uint32_t w, bool hi) {
    return __half2float(__ushort_as_half((unsigned short)(hi ? w >> 16 : w & 0xffffu)));
  }
  __device__ static float fresh(uint32_t w, bool hi) {
    float r;
    if (hi) {
      asm volatile("{ .reg .b16 l, h; mov.b32 {l, h}, %1; cvt.f32.f16 %0, h; }" : "=f"(r) : "r"(w));
    } else {
      asm volatile("{ .reg .b16 l, h; mov.b32 {l, h}, %1; cvt.f32.f16 %0, l; }" : "=f"(r) : "r"(w));
    }
    return r;
  }
  __device__ static uint32_t from_float(float v) { return __half_as_ushort(__float2half_rn(v)); }
};

// One canonical group as raw 32-bit words: 4 words of 16-bit elements (one 16-byte vector), 8 of fp32.
template <typename E>
struct Group {
  static_assert(sizeof(E) == 2 || sizeof(E) == 4, "16- or 32-bit elements");
  static constexpr int kWords = kGroup * int(sizeof(E)) / 4;
  static constexpr int kPerWord = 4 / int(sizeof(E));
  uint32_t u[kWords];

  __device__ __forceinline__ float get(int j) const {
    return Bits<E>::get(u[j / kPerWord], kPerWord == 2 && (j & 1));
  }
  __device__ __forceinline__ float fresh(int j) const {
    return Bits<E>::fresh(u[j / kPerWord], kPerWord == 2 && (j & 1));
  }
  // Element j rounded from fp32; for 16-bit elements call it for j = 0, 1, 2, ... in order.
  __device__ __forceinline__ void set(int j, float v) {
    if constexpr (kPerWord == 1) {
      u[j] = Bits<E>::from_float(v);
    } else if (j & 1) {
      u[j >> 1] |= Bits<E>::from_float(v) << 16;
    } else {
      u[j >> 1] = Bits<E>::from_float(v);
    }
  }
};

template <typename E>
using RawOf = typename std::conditional<sizeof(E) == 4, uint32_t, unsigned short>::type;

__device__ __forceinline__ bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// How a 16-byte access treats the caches: rows of x, dy and the outputs stream through once (evict first,
// so that they do not push the weight out of L1); the weight is read by every row (read-only path);
// workspace and shared memory plain.
enum class Cache : int { kPlain, kStream, kReadOnly };

template <Cache C>
__device__ __forceinline__ uint4 load16(const uint4* p) {
  if constexpr (C == Cache::kStream) {
    return __ldcs(p);
  } else if constexpr (C == Cache::kReadOnly) {
    return __ldg(p);
  } else {
    return *p;
  }
}

template <Cache C>
__device__ __forceinline__ void store16(uint4* p, uint4 v) {
  if constexpr (C == Cache::kStream) {
    __stcs(p, v);
  } else {
    *p = v;
  }
}

// Elements [base, base + 8) of `row`, +0.0 past `limit` (the canonical zero padding). A group wholly inside
// a 16-byte-aligned row (`vec`) moves as 16-byte vectors; any other is built element by element into the
// same words, so the arithmetic that follows cannot tell the two apart.
template <typename E, Cache C = Cache::kPlain>
__device__ __forceinline__ void load_group(Group<E>& g, const E* row, int base, int limit, bool vec) {
  if (vec && base + kGroup <= limit) {
    const uint4* src = reinterpret_cast<const uint4*>(row + base);
#pragma unroll
    for (int i = 0; i < Group<E>::kWords / 4; ++i) {
      const uint4 q = load16<C>(src + i);
      g.u[4 * i] = q.x;
      g.u[4 * i + 1] = q.y;
      g.u[4 * i + 2] = q.z;
      g.u[4 * i + 3] = q.w;
    }
  } else {
    const RawOf<E>* raw = reinterpret_cast<const RawOf<E>*>(row);
#pragma unroll
    for (int i = 0; i < Group<E>::kWords; ++i) {
      if constexpr (sizeof(E) == 4) {
        g.u[i] = base + i < limit ? raw[base + i] : 0u;
      } else {
        const uint32_t lo = base + 2 * i < limit ? raw[base + 2 * i] : 0u;
        const uint32_t hi = base + 2 * i + 1 < limit ? raw[base + 2 * i + 1] : 0u;
        g.u[i] = lo | (hi << 16);
      }
    }
  }
}

template <typename E, Cache C = Cache::kPlain>
__device__ __forceinline__ void store_group(const Group<E>& g, E* row, int base, int limit, bool vec) {
  if (vec && base + kGroup <= limit) {
    uint4* dst = reinterpret_cast<uint4*>(row + base);
#pragma unroll
    for (int i = 0; i < Group<E>::kWords / 4; ++i)
      store16<C>(dst + i, make_uint4(g.u[4 * i], g.u[4 * i + 1], g.u[4 * i + 2], g.u[4 * i + 3]));
  } else {
    RawOf<E>* raw = reinterpret_cast<RawOf<E>*>(row);
#pragma unroll
    for (int i = 0; i < Group<E>::kWords; ++i) {
      if constexpr (sizeof(E) == 4) {
        if (base + i < limit) raw[base + i] = g.u[i];
      } else {
        if (base + 2 * i < limit) raw[base + 2 * i] = (unsigned short)(g.u[i] & 0xffffu);
        if (base + 2 * i + 1 < limit) raw[base + 2 * i + 1] = (unsigned short)(g.u[i] >> 16);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// The canonical tree, level by level.

// One group: v[0:4] + v[4:8], then [0:2] + [2:4], then [0] + [1].
__device__ __forceinline__ float group_tree(float (&v)[kGroup]) {
#pragma unroll
  for (int j = 0; j < 4; ++j) v[j] = __fadd_rn(v[j], v[j + 4]);
#pragma unroll
  for (int j = 0; j < 2; ++j) v[j] = __fadd_rn(v[j], v[j + 2]);
  return __fadd_rn(v[0], v[1]);
}

// A thread's K group sums (its groups t + m T, m < K): r[0:K/2] + r[K/2:K], ... in registers.
template <int K>
__device__ __forceinline__ float thread_tree(float (&r)[K]) {
  if constexpr (K == 1) {
    return r[0];
  } else {
    float h[K / 2];
#pragma unroll
    for (int m = 0; m < K / 2; ++m) h[m] = __fadd_rn(r[m], r[m + K / 2]);
    return thread_tree<K / 2>(h);
  }
}

// The levels across the W warps of a row, for the lane whose values sit at buf[base + 32 w].
template <int N, int W>
__device__ __forceinline__ void warps_tree(float (&v)[N], const float* buf, int base) {
#pragma unroll
  for (int n = 0; n < N; ++n) {
    float a[W];
#pragma unroll
    for (int w = 0; w < W; ++w) a[w] = buf[n * blockDim.x + base + 32 * w];
    v[n] = thread_tree<W>(a);
  }
}

// The levels across the T = 2^tpr_shift threads of a row, for N values at once: thread t is paired with
// t + T/2 first, which for T > 32 means warp w with warp w + W/2 (through shared memory), then lanes by an
// xor butterfly with offsets 16, 8, ..., 1. A butterfly leaves each lane the same bits (a + b == b + a), so
// every thread of the row returns the row's total. `scratch` holds 2 * N * blockDim.x floats; `parity`
// alternates between consecutive rows of a thread, so that one barrier per row suffices.
// kSplit (the backward): the butterfly of a row of 32 threads or more unrolled without a test an offset.
template <int N, bool kSplit = false>
__device__ __forceinline__ void row_tree(float (&v)[N], int tpr_shift, float* scratch, int parity) {
  const int tpr = 1 << tpr_shift;
  if (tpr > 32) {
    float* buf = scratch + parity * N * blockDim.x;
#pragma unroll
    for (int n = 0; n < N; ++n) buf[n * blockDim.x + threadIdx.x] = v[n];
    __syncthreads();
    const int base = (threadIdx.x & ~(tpr - 1)) + (threadIdx.x & 31);
    switch (tpr >> 5) {
      case 2:
        warps_tree<N, 2>(v, buf, base);
        break;
      case 4:
        warps_tree<N, 4>(v, buf, base);
        break;
      case 8:
        warps_tree<N, 8>(v, buf, base);
        break;
      case 16:
        warps_tree<N, 16>(v, buf, base);
        break;
      default:
        warps_tree<N, 32>(v, buf, base);
        break;
    }
  }
  if (kSplit && tpr >= 32) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1)
#pragma unroll
      for (int n = 0; n < N; ++n) v[n] = __fadd_rn(v[n], __shfl_xor_sync(0xffffffffu, v[n], offset));
    return;
  }
  // Offsets width/2, ..., 1 with width = min(T, 32), unrolled.
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    if (offset < tpr)
#pragma unroll
      for (int n = 0; n < N; ++n) v[n] = __fadd_rn(v[n], __shfl_xor_sync(0xffffffffu, v[n], offset));
}

// A streamed thread's group sums. Visiting its groups m in bit-reversed order mp (m = bitrev(mp)) turns
// the halving tree over m into the pairwise tree over mp, whose nodes a binary counter completes: after
// pushing leaf mp, merge once per trailing one bit of mp.
template <int N>
struct Stack {
  float s[N][kMaxStack];
  int top = 0;
  __device__ __forceinline__ void push(const float (&v)[N], int mp) {
    float c[N];
#pragma unroll
    for (int n = 0; n < N; ++n) c[n] = v[n];
    for (int bits = mp; bits & 1; bits >>= 1) {
      --top;
#pragma unroll
      for (int n = 0; n < N; ++n) c[n] = __fadd_rn(s[n][top], c[n]);
    }
#pragma unroll
    for (int n = 0; n < N; ++n) s[n][top] = c[n];
    ++top;
  }
};

__device__ __forceinline__ int bit_reversed(int mp, int bits) {
  return bits == 0 ? 0 : int(__brev(unsigned(mp)) >> (32 - bits));
}

// rms = sqrt(sum / dim + eps), each step correctly rounded: eps inside the square root.
__device__ __forceinline__ float root_mean(float sum_of_squares, int dim, float eps) {
  return __fsqrt_rn(__fadd_rn(__fdiv_rn(sum_of_squares, __int2float_rn(dim)), eps));
}

// inv = 1 / rms, correctly rounded, once per row: the canonical order's normalize step (and the backward's)
// multiplies each element by it, where it used to divide each element by rms. The edge cases keep their
// bits' class (contract/canonical_order.py, RECIPROCAL_NOTE): rms = +Inf gives inv = +0.0, rms = +0.0
// gives +Inf, NaN stays NaN, and a finite positive rms lies in [2^-75, 2^64], so inv is a normal number.
__device__ __forceinline__ float reciprocal(float rms) { return __fdiv_rn(1.0f, rms); }

// ---------------------------------------------------------------------------------------------------
// Staging rows through shared memory. A thread's 16-byte vectors of one row sit at slot[w * stride]
// (stride = the block's thread count, so that a warp's accesses fall on consecutive 16-byte words); a row
// whose start is 16-byte aligned is copied with cp.async, zero-filled past `limit`, any other one is loaded
// element by element and stored there, so that what is read back is the same either way.

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void copy_async16(uint4* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)), "l"(src),
               "r"(src_bytes)
               : "memory");
}

__device__ __forceinline__ void commit_async() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

template <int N>
__device__ __forceinline__ void wait_async() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Wait until at most `pending` of this thread's most recent copy groups are in flight.
__device__ __forceinline__ void wait_async_pending(int pending) {
  switch (pending) {
    case 1:
      wait_async<1>();
      break;
    case 2:
      wait_async<2>();
      break;
    case 3:
      wait_async<3>();
      break;
    case 4:
      wait_async<4>();
      break;
    case 5:
      wait_async<5>();
      break;
    case 6:
      wait_async<6>();
      break;
    case 7:
      wait_async<7>();
      break;
    default:
      wait_async<0>();
      break;
  }
}

// 16-byte words a group of E takes.
template <typename E>
constexpr int kWordsOf = Group<E>::kWords / 4;

template <typename E>
__device__ __forceinline__ void stage_group(uint4* slot, int stride, const E* row, int base, int limit, bool async) {
  constexpr int kPer = 16 / int(sizeof(E));
  if (async) {
#pragma unroll
    for (int w = 0; w < kWordsOf<E>; ++w) {
      const int start = base + w * kPer;
      const int n = limit - start < 0 ? 0 : (limit - start > kPer ? kPer : limit - start);
      copy_async16(slot + w * stride, n > 0 ? static_cast<const void*>(row + start) : static_cast<const void*>(row),
                   n * int(sizeof(E)));
    }
  } else {
    Group<E> g;
    load_group<E>(g, row, base, limit, false);
#pragma unroll
    for (int w = 0; w < kWordsOf<E>; ++w)
      slot[w * stride] = make_uint4(g.u[4 * w], g.u[4 * w + 1], g.u[4 * w + 2], g.u[4 * w + 3]);
  }
}

template <typename E>
__device__ __forceinline__ void read_staged(Group<E>& g, const uint4* slot, int stride) {
#pragma unroll
  for (int w = 0; w < kWordsOf<E>; ++w) {
    const uint4 q = slot[w * stride];
    g.u[4 * w] = q.x;
    g.u[4 * w + 1] = q.y;
    g.u[4 * w + 2] = q.z;
    g.u[4 * w + 3] = q.w;
  }
}

// ---------------------------------------------------------------------------------------------------
// Forward. The output element is y = (x * inv) * w' rounded once to the output dtype, where w' is w
// (kPlain), 1 + w formed in fp32 (kOffset), or absent (kUnweighted). kFusedAdd first forms
// s = x + residual in fp32, rounds it to the residual's dtype (x's), stores it as residual_out, and
// normalizes s as stored, as kPlain.


// Element pairs (2i, 2i+1) rounded from fp32 into one 32-bit word: one conversion instruction a pair.
template <typename O>
__device__ __forceinline__ uint32_t pack_pair(float lo, float hi) {
  if constexpr (std::is_same<O, __nv_bfloat16>::value) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  } else {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
}

// Group<O> from 8 fp32 values, each rounded once.
template <typename O>
__device__ __forceinline__ void pack_group(Group<O>& out, const float (&v)[kGroup]) {
  if constexpr (sizeof(O) == 4) {
#pragma unroll
    for (int j = 0; j < kGroup; ++j) out.u[j] = __float_as_uint(v[j]);
  } else {
#pragma unroll
    for (int i = 0; i < kGroup / 2; ++i) out.u[i] = pack_pair<O>(v[2 * i], v[2 * i + 1]);
  }
}

// The group of this row the thread holds as its input: x, or for kFusedAdd s = x + residual rounded and
// stored as residual_out.
template <typename T, Mode M, Cache L = Cache::kStream>
__device__ __forceinline__ void load_input(Group<T>& g, const ForwardArgs& a, int64_t row, int base, int limit) {
  const T* xr = static_cast<const T*>(a.x) + row * a.x_stride;
  load_group<T, L>(g, xr, base, limit, aligned16(xr));
  if constexpr (M == Mode::kFusedAdd) {
    const T* rr = static_cast<const T*>(a.residual) + row * a.residual_stride;
    Group<T> r;
    load_group<T, L>(r, rr, base, limit, aligned16(rr));
    float sum[kGroup];
#pragma unroll
    for (int j = 0; j < kGroup; ++j) sum[j] = __fadd_rn(g.get(j), r.get(j));
    pack_group<T>(g, sum);
    T* out = static_cast<T*>(a.residual_out) + row * a.residual_out_stride;
    store_group<T, Cache::kStream>(g, out, base, limit, aligned16(out));
  }
}

template <typename T>
__device__ __forceinline__ float group_sum_of_squares(const Group<T>& g) {
  float v[kGroup];
#pragma unroll
  for (int j = 0; j < kGroup; ++j) {
    const float e = g.get(j);
    v[j] = __fmul_rn(e, e);
  }
  return group_tree(v);
}

template <typename T, Mode M>
__device__ __forceinline__ void load_weight(Group<T>& wg, const ForwardArgs& a, int base, int limit) {
  if constexpr (M != Mode::kUnweighted) {
    load_group<T, Cache::kReadOnly>(wg, static_cast<const T*>(a.w), base, limit, aligned16(a.w));
  }
}

// The output values of the input group `g` (re-widened with fresh), its weight group and the row's inv = 1 / rms:
// xhat = x * inv, then y = xhat * w', two rounded multiplies.
template <typename T, Mode M>
__device__ __forceinline__ void output_values(const Group<T>& g, const Group<T>& wg, float inv, float (&v)[kGroup]) {
#pragma unroll
  for (int j = 0; j < kGroup; ++j) {
    const float n = __fmul_rn(g.fresh(j), inv);
    if constexpr (M == Mode::kOffset) {
      v[j] = __fmul_rn(n, __fadd_rn(1.0f, wg.fresh(j)));
    } else if constexpr (M == Mode::kUnweighted) {
      v[j] = n;
    } else {
      v[j] = __fmul_rn(n, wg.fresh(j));
    }
  }
}

// The output group, rounded a pair at a time (pack_group: the same bits as element by element), stored.
template <typename T, typename O, Mode M, Cache S = Cache::kStream>
__device__ __forceinline__ void store_output(const Group<T>& g, const Group<T>& wg, const ForwardArgs& a,
                                             int64_t row, int base, int limit, float inv) {
  float v[kGroup];
  output_values<T, M>(g, wg, inv, v);
  Group<O> out;
  pack_group<O>(out, v);
  O* yr = static_cast<O*>(a.y) + row * a.y_stride;
  store_group<O, S>(out, yr, base, limit, aligned16(yr));
}

// The weight's groups in shared memory, one 16-byte word (two for fp32) a group, +0.0 past dim: read once a
// block, then by every row of it.
template <typename T>
__device__ __forceinline__ void stage_weight(uint4* wsm, const T* w, int width, int dim) {
  constexpr int kW = kWordsOf<T>;
  const bool vec = aligned16(w);
  for (int gi = threadIdx.x; gi < width / kGroup; gi += blockDim.x) {
    Group<T> g;
    load_group<T, Cache::kReadOnly>(g, w, gi * kGroup, dim, vec);
#pragma unroll
    for (int i = 0; i < kW; ++i) wsm[gi * kW + i] = make_uint4(g.u[4 * i], g.u[4 * i + 1], g.u[4 * i + 2], g.u[4 * i + 3]);
  }
}

// The thread's copies of one row into the stage at shared address `dst` (word (m, i) at dst + (m kW + i)
// `step` bytes). The fast path: the thread's groups lie wholly inside the row and the row is 16-byte aligned,
// so every copy is a plain 16-byte cp.async at a constant offset.
template <typename T, int K>
__device__ __forceinline__ void stage_row(uint32_t dst, uint32_t step, uint4* dst_ptr, const T* row, int col0,
                                          int col_step, int dim, bool fast) {
  constexpr int kW = kWordsOf<T>;
  constexpr int kPer = 16 / int(sizeof(T));
  if (fast) {
#pragma unroll
    for (int m = 0; m < K; ++m)
#pragma unroll
      for (int i = 0; i < kW; ++i)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst + uint32_t(m * kW + i) * step),
                     "l"(row + col0 + m * col_step + i * kPer)
                     : "memory");
  } else {
    const bool async = aligned16(row);
    const int stride = int(step / 16);
#pragma unroll
    for (int m = 0; m < K; ++m)
      stage_group<T>(dst_ptr + m * kW * stride, stride, row, col0 + m * col_step, dim, async);
  }
}

// Row kernel: blockDim.x / T rows a block and one set of rows a block (a grid of ceil(rows / slots) blocks);
// thread t of a row loads its groups t + m T, m < K, straight into registers and keeps them there for the
// second pass. The staged backward's mapping and arithmetic (so its bits), without the staging: a block holds no
// shared memory but the row tree's scratch, so registers alone bound how many are resident, and the hardware
// hands each finished block's place to the next set. Threads past the last row load zeros and take part in the
// row tree's barrier. Loads and stores without the evict-first hint the other kernels use: with it, the bf16
// forward ran at 0.933 of a copy at 65536 x 4096 after an L2 flush and 1.003 in a loop of back-to-back calls;
// without, 1.001 and 0.999 (measured on an H200).
// kLean (launch_rows picks it for 16-bit rows in and out, not the fused add): every row is the plan's padded width
// exactly, x, y and the weight 16-byte aligned with 16-byte strides, so each of a thread's groups is a plain 16-byte access at m T
// 16-byte steps from one address, with none of the general path's tests a group.
template <typename T, typename O, Mode M, int K, bool kLean = false>
__global__ void __launch_bounds__(kMaxThreads, sizeof(T) == 2 && M != Mode::kFusedAdd && K == 4 ? 3 : 0) forward_row_kernel(const ForwardArgs a) {
  __shared__ float scratch[kMaxThreads];
  constexpr Mode kOut = M == Mode::kFusedAdd ? Mode::kPlain : M;
  constexpr int kIn = Group<T>::kWords / 4, kOutVec = Group<O>::kWords / 4;  // 16-byte words a group
  const int tpr = 1 << a.tpr_shift;
  const int t = threadIdx.x & (tpr - 1);
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x >> a.tpr_shift) + (threadIdx.x >> a.tpr_shift);
  const bool valid = row < a.rows;
  Group<T> g[K];
  float part[K];
  if constexpr (kLean) {
    const uint4* xs = reinterpret_cast<const uint4*>(static_cast<const T*>(a.x) + row * a.x_stride) + t * kIn;
#pragma unroll
    for (int m = 0; m < K; ++m) {
#pragma unroll
      for (int i = 0; i < kIn; ++i) {
        const uint4 q = valid ? xs[(m * tpr) * kIn + i] : make_uint4(0u, 0u, 0u, 0u);
        g[m].u[4 * i] = q.x;
        g[m].u[4 * i + 1] = q.y;
        g[m].u[4 * i + 2] = q.z;
        g[m].u[4 * i + 3] = q.w;
      }
      part[m] = group_sum_of_squares(g[m]);
    }
  } else {
#pragma unroll
    for (int m = 0; m < K; ++m) {
      if (valid) {
        load_input<T, M, Cache::kPlain>(g[m], a, row, (t + m * tpr) * kGroup, a.dim);
      } else {
#pragma unroll
        for (int i = 0; i < Group<T>::kWords; ++i) g[m].u[i] = 0u;
      }
      part[m] = group_sum_of_squares(g[m]);
    }
  }
  float total[1] = {thread_tree<K>(part)};
  row_tree<1>(total, a.tpr_shift, scratch, 0);
  const float inv = reciprocal(root_mean(total[0], a.dim, a.eps));
  if (!valid) return;
  if constexpr (kLean) {
    const uint4* ws = reinterpret_cast<const uint4*>(a.w) + t * kIn;
    uint4* ys = reinterpret_cast<uint4*>(static_cast<O*>(a.y) + row * a.y_stride) + t * kOutVec;
#pragma unroll
    for (int m = 0; m < K; ++m) {
      Group<T> wg;
      if constexpr (kOut != Mode::kUnweighted) {
#pragma unroll
        for (int i = 0; i < kIn; ++i) {
          const uint4 q = __ldg(ws + (m * tpr) * kIn + i);
          wg.u[4 * i] = q.x;
          wg.u[4 * i + 1] = q.y;
          wg.u[4 * i + 2] = q.z;
          wg.u[4 * i + 3] = q.w;
        }
      }
      float v[kGroup];
      output_values<T, kOut>(g[m], wg, inv, v);
      Group<O> out;
      pack_group<O>(out, v);
#pragma unroll
      for (int i = 0; i < kOutVec; ++i)
        ys[(m * tpr) * kOutVec + i] = make_uint4(out.u[4 * i], out.u[4 * i + 1], out.u[4 * i + 2], out.u[4 * i + 3]);
    }
  } else {
#pragma unroll
    for (int m = 0; m < K; ++m) {
      const int base = (t + m * tpr) * kGroup;
      Group<T> wg;
      load_weight<T, kOut>(wg, a, base, a.dim);
      store_output<T, O, kOut, Cache::kPlain>(g[m], wg, a, row, base, a.dim, inv);
    }
  }
}

// Streaming kernel: one row per block of kLoopThreads threads, 2^groups_shift groups per thread. The first
// pass builds the tree (and, for kFusedAdd, writes residual_out); the second reads the row again (for
// kFusedAdd, the residual_out this thread wrote) and writes y.
template <typename T, typename O, Mode M>
__global__ void __launch_bounds__(kLoopThreads) forward_loop_kernel(const ForwardArgs a) {
  __shared__ float scratch[2 * kLoopThreads];
  const int tpr = blockDim.x;
  const int t = threadIdx.x;
  const int64_t row = blockIdx.x;
  const int groups = 1 << a.groups_shift;
  Stack<1> stack;
  for (int mp = 0; mp < groups; ++mp) {
    Group<T> g;
    load_input<T, M>(g, a, row, (t + bit_reversed(mp, a.groups_shift) * tpr) * kGroup, a.dim);
    const float leaf[1] = {group_sum_of_squares(g)};
    stack.push(leaf, mp);
  }
  float total[1] = {stack.s[0][0]};
  row_tree<1>(total, __ffs(tpr) - 1, scratch, 0);
  const float inv = reciprocal(root_mean(total[0], a.dim, a.eps));
  ForwardArgs again = a;
  if constexpr (M == Mode::kFusedAdd) {
    again.x = a.residual_out;
    again.x_stride = a.residual_out_stride;
  }
  constexpr Mode kOut = M == Mode::kFusedAdd ? Mode::kPlain : M;
  for (int m = 0; m < groups; ++m) {
    const int base = (t + m * tpr) * kGroup;
    Group<T> g;
    Group<T> wg;
    load_input<T, kOut>(g, again, row, base, a.dim);
    load_weight<T, kOut>(wg, a, base, a.dim);
    store_output<T, O, kOut>(g, wg, a, row, base, a.dim, inv);
  }
}

// Programmatic dependent launch (Hopper on): the backward lets dw's final kernel be scheduled while its own last
// blocks run (`launch_dependents`), and the final kernel waits for the whole backward grid to finish and its
// writes to be visible before it reads a partial row (`wait`, which returns at once where the launch had no such
// dependency). Only when the final kernel starts moves, never what it reads: the same bits either way.
__device__ __forceinline__ void dependents_may_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void wait_for_prerequisite_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// ---------------------------------------------------------------------------------------------------
// Backward. With g the output gradient (in fp32), w the weight and x the input, per row:
//   rms = the forward's, recomputed in the canonical order (the kernel reads x anyway);
//   c = sum of (g * w) * x in the canonical order;
//   inv = 1 / rms (correctly rounded, once a row);
//   dx = ((g * w) - x * ((c / dim) / (rms * rms))) * inv;
//   the row's dw term = g * (x * inv).
// dx is per row with a thread mapping fixed by (dim, dtype): batch-invariant like the forward.
//
// dw is the canonical tree over rows, bit for bit (contract/canonical_order.py, "backward dw"). The rows
// are padded with zero rows to P' = a power of two >= max(8, rows) (the + 0.0 at the end makes any P' give
// the same bits), cut into G' = P'/8 row groups of 8 consecutive rows, and the row-group sums are halved:
// r[0:G'/2] + r[G'/2:G'], ... So block p of Q (both powers of two) takes the M = G'/Q row groups
// p, p + Q, ..., p + (M-1)Q: the tree's first log2(M) levels over row groups are all inside it, and
// what it leaves, one partial row, is the value of row group p in a halving tree over Q partial rows,
// which dw_final_kernel finishes. Inside the block, leaf k in [0, 8M) is row 8(p + Q bitrev(k >> 3))
// + bitrev(k & 7): in that order the block's subtree is the pairwise tree of adjacent leaves (the halving
// tree over a bit-reversed index is the adjacent one). The block's row slots take consecutive runs of
// L leaves; in each, the three levels of a row group are registers (s0, s1, s2, selected by the leaf's low
// bits), the levels over its row groups a stack in shared memory that only the thread itself touches (a
// binary counter: after leaf group q, merge once per trailing one bit of q), and the runs' totals are
// added pairwise across slots at the end. Zero rows past the batch enter as +0.0 terms. No atomics, no
// order that depends on the launch: the same bits as the native reference and the Triton kernels.


// Row of leaf k of block p of Q.
__device__ __forceinline__ int64_t leaf_row(int64_t p, int64_t q, int k, int mbits) {
  return 8 * (p + q * bit_reversed(k >> 3, mbits)) + bit_reversed(k & 7, 3);
}

// The two row sums of one group: sum of squares and sum of (g * w) * x.
template <typename T, typename G>
__device__ __forceinline__ void group_sums(const Group<T>& x, const Group<G>& g, const Group<T>& w, float (&out)[2]) {
  float sq[kGroup];
  float gwx[kGroup];
#pragma unroll
  for (int j = 0; j < kGroup; ++j) {
    const float xf = x.get(j);
    sq[j] = __fmul_rn(xf, xf);
    gwx[j] = __fmul_rn(__fmul_rn(g.get(j), w.get(j)), xf);
  }
  out[0] = group_tree(sq);
  out[1] = group_tree(gwx);
}

struct RowFactors {
  float inv;   // 1 / rms
  float coef;  // (c / dim) / (rms * rms)
};

__device__ __forceinline__ RowFactors row_factors(const float (&sums)[2], int dim, float eps) {
  const float rms = root_mean(sums[0], dim, eps);
  return RowFactors{reciprocal(rms), __fdiv_rn(__fdiv_rn(sums[1], __int2float_rn(dim)), __fmul_rn(rms, rms))};
}

// dx for one group, and (when `want_dw`) the row's dw terms g * (x * inv).
template <typename T, typename G>
__device__ __forceinline__ void group_grads(const Group<T>& x, const Group<G>& g, const Group<T>& w,
                                            const RowFactors& f, Group<T>& dx, float (&terms)[kGroup],
                                            bool want_dw) {
#pragma unroll
  for (int j = 0; j < kGroup; ++j)
    dx.set(j, __fmul_rn(__fsub_rn(__fmul_rn(g.fresh(j), w.fresh(j)), __fmul_rn(x.fresh(j), f.coef)), f.inv));
  if (want_dw) {
#pragma unroll
    for (int j = 0; j < kGroup; ++j) terms[j] = __fmul_rn(g.fresh(j), __fmul_rn(x.fresh(j), f.inv));
  }
}


// c[j] += s[j] with s on the left (the earlier subtree), for one group of 8 columns.
__device__ __forceinline__ void add_left(float (&c)[kGroup], const float (&s)[kGroup]) {
#pragma unroll
  for (int j = 0; j < kGroup; ++j) c[j] = __fadd_rn(s[j], c[j]);
}

// `p` moved by `bytes` (a row's start from its tensor's, when it fits in 32 bits).
template <typename E>
__device__ __forceinline__ E* byte_offset(E* p, uint32_t bytes) {
  using Byte = typename std::conditional<std::is_const<E>::value, const char, char>::type;
  return reinterpret_cast<E*>(reinterpret_cast<Byte*>(p) + bytes);
}

// The backward's staging fast path for one leaf: the thread's K groups of x, then of dy, each a plain 16-byte
// cp.async at the same shared slots as stage_row's (word (m, i) of x at dst + (m kWx + i) step, of dy after
// K kWx words), issued back to back.
template <typename T, typename G, int K>
__device__ __forceinline__ void stage_rows_fast(uint32_t dst, uint32_t step, const T* xr, const G* gr, int col_step) {
  constexpr int kWx = kWordsOf<T>;
  constexpr int kWg = kWordsOf<G>;
#pragma unroll
  for (int m = 0; m < K; ++m)
#pragma unroll
    for (int i = 0; i < kWx; ++i)
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst + uint32_t(m * kWx + i) * step),
                   "l"(xr + m * col_step + i * (16 / int(sizeof(T))))
                   : "memory");
#pragma unroll
  for (int m = 0; m < K; ++m)
#pragma unroll
    for (int i = 0; i < kWg; ++i)
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst + uint32_t(K * kWx + m * kWg + i) * step),
                   "l"(gr + m * col_step + i * (16 / int(sizeof(G))))
                   : "memory");
}

// Staged kernel. Slot s of the block (T threads a row) takes leaves s L, ..., s L + L - 1 in turn. Shared
// memory: [stages][K][x words, dy words][threads] 16-byte words, the weight's groups, the dw stack
// [run_shift][K][2][threads] float4, the row tree's scratch.
template <typename T, typename G, int K>
__global__ void __launch_bounds__(kMaxBackwardThreads) backward_kernel(const BackwardArgs a) {
  dependents_may_launch();
  extern __shared__ uint4 smem[];
  constexpr int kWx = kWordsOf<T>;
  constexpr int kWg = kWordsOf<G>;
  const int threads = blockDim.x;
  const int tpr = 1 << a.tpr_shift;
  const int t = threadIdx.x & (tpr - 1);
  const int slots = threads >> a.tpr_shift;
  const int slot = threadIdx.x >> a.tpr_shift;
  const int stages = a.stages;
  const int ahead = stages - 1;
  const int stage_words = K * (kWx + kWg) * threads;
  const int width = K * tpr * kGroup;
  const int runs = 1 << a.run_shift;  // row groups per slot
  const int leaves = runs * 8;
  uint4* wsm = smem + stages * stage_words;
  float4* stack = reinterpret_cast<float4*>(wsm + width / kGroup * kWx);  // [run_shift][K][2][threads]
  float* scratch = reinterpret_cast<float*>(stack + a.run_shift * K * 2 * threads);  // 2 x 2 x threads
  const int64_t p = blockIdx.x;
  const int64_t q = gridDim.x;
  const bool want_dw = a.workspace != nullptr;
  const int col0 = t * kGroup;
  const int col_step = tpr * kGroup;
  const uint32_t step = uint32_t(threads) * 16;
  const uint32_t sbase = shared_address(smem + threadIdx.x);
  const T* x = static_cast<const T*>(a.x);
  const G* dy = static_cast<const G*>(a.dy);
  const bool inside = col0 + (K - 1) * col_step + kGroup <= a.dim;
  const bool x_fast = inside && aligned16(x) && ((a.x_stride * int64_t(sizeof(T))) & 15) == 0;
  const bool g_fast = inside && aligned16(dy) && ((a.dy_stride * int64_t(sizeof(G))) & 15) == 0;

  const bool dx_fast = inside && aligned16(a.dx) && ((a.dx_stride * int64_t(sizeof(T))) & 15) == 0;
  // Every row below a.rows starts less than 2^31 bytes from its tensor's start (x, dy and dx): a row's address is
  // then one 32-bit multiply and a 64-bit add, not a 64-bit multiply (the same address either way).
  const int64_t widest = max(max(a.x_stride * int64_t(sizeof(T)), a.dy_stride * int64_t(sizeof(G))),
                             a.dx_stride * int64_t(sizeof(T)));
  const bool narrow = a.x_stride >= 0 && a.dy_stride >= 0 && a.dx_stride >= 0 && widest < (int64_t(1) << 31) &&
                      a.rows < (int64_t(1) << 31) && (a.rows - 1) * widest < (int64_t(1) << 31);
  const bool both_fast = x_fast && g_fast;

  stage_weight<T>(wsm, static_cast<const T*>(a.w), width, a.dim);
  __syncthreads();

  // Leaf i of the slot is row 8 (p + q bitrev(k >> 3)) + bitrev(k & 7), k = slot * leaves + i (leaf_row): the
  // row group's base 8 (p + q bitrev(k >> 3)) changes every 8 leaves only, so it is kept and recomputed when i
  // enters a new row group (issue visits i = 0, 1, 2, ... in turn; the loop visits even i, two leaves at a time).
  const int run0 = slot * runs;
  auto group_base = [&](int i) -> int64_t { return 8 * (p + q * bit_reversed(run0 + (i >> 3), a.mbits)); };
  int64_t issue_base = 0;
  // The copies of leaf i into the stage at shared offset `st_off` (16-byte words from this thread's slot of stage
  // 0). A row past the batch is staged as zeros (the general path with limit 0: +0.0 in every word), so that its
  // dw terms g * (x * 0) are +0.0 without a select an element (leaf()).
  auto issue = [&](int i, int st_off) {
    if (i < leaves) {
      if ((i & 7) == 0) issue_base = group_base(i);
      const int64_t row = issue_base + bit_reversed(i & 7, 3);
      const uint32_t dst = sbase + uint32_t(st_off) * 16;
      uint4* dst_ptr = smem + threadIdx.x + st_off;
      const bool ok = row < a.rows;
      if (ok && both_fast && narrow) {  // every copy a plain 16-byte cp.async, issued back to back
        const T* xr = byte_offset(x, uint32_t(row) * uint32_t(a.x_stride * int64_t(sizeof(T)))) + col0;
        const G* gr = byte_offset(dy, uint32_t(row) * uint32_t(a.dy_stride * int64_t(sizeof(G)))) + col0;
        stage_rows_fast<T, G, K>(dst, step, xr, gr, col_step);
      } else {
        const int limit = ok ? a.dim : 0;
        stage_row<T, K>(dst, step, dst_ptr, ok ? x + row * a.x_stride : x, col0, col_step, limit, x_fast && ok);
        stage_row<G, K>(dst + uint32_t(K * kWx) * step, step, dst_ptr + K * kWx * threads,
                        ok ? dy + row * a.dy_stride : dy, col0, col_step, limit, g_fast && ok);
      }
    }
    commit_async();
  };
  const int ring = stages * stage_words;  // the stages' 16-byte words, per thread one in `threads`
  auto next_stage = [&](int off) { return off + stage_words == ring ? 0 : off + stage_words; };

  int issue_off = 0;
  for (int s = 0; s < ahead; ++s) {
    issue(s, issue_off);
    issue_off = next_stage(issue_off);
  }
  int read_off = 0;
  float s0[K][kGroup];
  float s1[K][kGroup];
  float s2[K][kGroup];
  float c[K][kGroup];
  // Leaf i (row `row`): its dx written, its dw terms g * (x * inv) into `terms` (+0.0 for a row past the batch:
  // its x and dy were staged as +0.0 and its inv is taken as +0.0, so each term is +0.0 * (+0.0 * +0.0)).
  auto leaf = [&](int i, int64_t row, float (&terms)[K][kGroup]) {
    issue(i + ahead, issue_off);
    issue_off = next_stage(issue_off);
    if (ahead <= 2) {  // the default's 3 stages and the 2 a tight budget leaves, without the switch's jump table
      asm volatile("{\n .reg .pred two;\n setp.eq.s32 two, %0, 2;\n @two cp.async.wait_group 2;\n"
                   " @!two cp.async.wait_group 1;\n}\n" ::"r"(ahead)
                   : "memory");
    } else {
      wait_async_pending(ahead);
    }
    const bool valid = row < a.rows;
    const uint4* xs = smem + read_off + threadIdx.x;
    const uint4* gs = xs + K * kWx * threads;
    read_off = next_stage(read_off);
    float sq[K];
    float gwx[K];
#pragma unroll
    for (int m = 0; m < K; ++m) {
      Group<T> xg;
      Group<G> gg;
      Group<T> wg;
      read_staged(xg, xs + m * kWx * threads, threads);
      read_staged(gg, gs + m * kWg * threads, threads);
      read_staged(wg, wsm + (t + m * tpr) * kWx, 1);
      float both[2];
      group_sums(xg, gg, wg, both);
      sq[m] = both[0];
      gwx[m] = both[1];
    }
    float sums[2] = {thread_tree<K>(sq), thread_tree<K>(gwx)};
    row_tree<2, true>(sums, a.tpr_shift, scratch, i & 1);
    const RowFactors f = row_factors(sums, a.dim, a.eps);
    const float term_inv = valid ? f.inv : 0.0f;

#pragma unroll
    for (int m = 0; m < K; ++m) {
      Group<T> xg;
      Group<G> gg;
      Group<T> wg;
      read_staged(xg, xs + m * kWx * threads, threads);
      read_staged(gg, gs + m * kWg * threads, threads);
      read_staged(wg, wsm + (t + m * tpr) * kWx, 1);
      float d[kGroup];
#pragma unroll
      for (int j = 0; j < kGroup; ++j) {
        const float xf = xg.get(j);
        const float gf = gg.get(j);
        d[j] = __fmul_rn(__fsub_rn(__fmul_rn(gf, wg.get(j)), __fmul_rn(xf, f.coef)), f.inv);
        terms[m][j] = __fmul_rn(gf, __fmul_rn(xf, term_inv));
      }
      if (valid) {
        Group<T> out;
        pack_group<T>(out, d);
        if (dx_fast && narrow) {
          T* dxr = byte_offset(static_cast<T*>(a.dx), uint32_t(row) * uint32_t(a.dx_stride * int64_t(sizeof(T))));
          uint4* dst = reinterpret_cast<uint4*>(dxr + col0 + m * col_step);
#pragma unroll
          for (int w = 0; w < Group<T>::kWords / 4; ++w)
            store16<Cache::kStream>(dst + w,
                                    make_uint4(out.u[4 * w], out.u[4 * w + 1], out.u[4 * w + 2], out.u[4 * w + 3]));
        } else {
          T* dxr = static_cast<T*>(a.dx) + row * a.dx_stride;
          store_group<T, Cache::kStream>(out, dxr, col0 + m * col_step, a.dim, aligned16(dxr));
        }
      }
    }
  };
  // Two leaves an iteration, the first one's terms straight into s0: the tree's lowest level costs no moves
  // (bf16 0.749 / 0.867 -> 0.788 / 0.889 of a copy at 65536 x 4096 / 2097152 x 128, with the zero terms of rows
  // past the batch then a uniform branch; they are now staged zeros times inv = +0.0, one select a leaf). Four
  // leaves an iteration were slower (0.776 / 0.844), eight much slower (0.490 / 0.706), on an H200.
  // Leaves i and i + 1 (i even) are rows r and r + 4 of one row group (bitrev(2j + 1) = bitrev(2j) + 4 over three
  // bits). The loop is compiled twice, with and without dw's tree: without it the terms are not computed, and
  // with it the terms land where the tree keeps them (one loop for both took register moves an iteration).
  auto pairs = [&](auto dw_tag) {
    constexpr bool kDw = decltype(dw_tag)::value;
    int64_t leaf_base = 0;
#pragma unroll 1
    for (int i = 0; i < leaves; i += 2) {
      if ((i & 7) == 0) leaf_base = group_base(i);
      const int64_t row = leaf_base + bit_reversed(i & 7, 3);
      leaf(i, row, s0);
      leaf(i + 1, row + 4, c);
      if constexpr (kDw) {
        // The pair into the tree: registers for the levels inside a row group, the stack for those above.
#pragma unroll
        for (int m = 0; m < K; ++m) add_left(c[m], s0[m]);
        if ((i & 2) == 0) {
#pragma unroll
          for (int m = 0; m < K; ++m)
#pragma unroll
            for (int j = 0; j < kGroup; ++j) s1[m][j] = c[m][j];
          continue;
        }
#pragma unroll
        for (int m = 0; m < K; ++m) add_left(c[m], s1[m]);
        if ((i & 4) == 0) {
#pragma unroll
          for (int m = 0; m < K; ++m)
#pragma unroll
            for (int j = 0; j < kGroup; ++j) s2[m][j] = c[m][j];
          continue;
        }
#pragma unroll
        for (int m = 0; m < K; ++m) add_left(c[m], s2[m]);
        // c is the sum of row group i >> 3 of the run: merge it with the finished subtrees below it.
        const int run = i >> 3;
        int level = 0;
        for (int bits = run; bits & 1; bits >>= 1, ++level) {
#pragma unroll
          for (int m = 0; m < K; ++m) {
            const float4 lo = stack[((level * K + m) * 2) * threads + threadIdx.x];
            const float4 hi = stack[((level * K + m) * 2 + 1) * threads + threadIdx.x];
            const float left[kGroup] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
            add_left(c[m], left);
          }
        }
        if (run + 1 < runs) {
#pragma unroll
          for (int m = 0; m < K; ++m) {
            stack[((level * K + m) * 2) * threads + threadIdx.x] = make_float4(c[m][0], c[m][1], c[m][2], c[m][3]);
            stack[((level * K + m) * 2 + 1) * threads + threadIdx.x] = make_float4(c[m][4], c[m][5], c[m][6], c[m][7]);
          }
        }
      }
    }
  };
  if (want_dw) {
    pairs(std::true_type{});
  } else {
    pairs(std::false_type{});
  }
  wait_async<0>();
  if (!want_dw) return;
  // c: the slot's run total (its last leaf merged everything). Slots hold consecutive runs: add adjacent
  // pairs of slots, then pairs of pairs, through shared memory (the staging area, free now).
  float* out_row = a.workspace + p * a.dim;
  if (slots == 1) {
#pragma unroll
    for (int m = 0; m < K; ++m) {
      Group<float> gsum;
#pragma unroll
      for (int j = 0; j < kGroup; ++j) gsum.u[j] = __float_as_uint(c[m][j]);
      store_group<float>(gsum, out_row, col0 + m * col_step, a.dim, aligned16(out_row));
    }
    return;
  }
  float* comb = reinterpret_cast<float*>(smem);
  __syncthreads();
#pragma unroll
  for (int m = 0; m < K; ++m) {
    float4* dst = reinterpret_cast<float4*>(comb + slot * width + col0 + m * col_step);
    dst[0] = make_float4(c[m][0], c[m][1], c[m][2], c[m][3]);
    dst[1] = make_float4(c[m][4], c[m][5], c[m][6], c[m][7]);
  }
  __syncthreads();
  for (int col = threadIdx.x; col < a.dim; col += threads) {
    for (int span = 1; span < slots; span <<= 1)
      for (int s = 0; s < slots; s += 2 * span)
        comb[s * width + col] = __fadd_rn(comb[s * width + col], comb[(s + span) * width + col]);
    out_row[col] = comb[col];
  }
}

// Streaming backward for rows too long for the staged kernel: one block of kLoopThreads threads a row,
// taking the block's 8M leaves in order; the first pass over a row builds both row sums, the second writes
// dx and pushes the row's dw terms into a stack of partial rows kept in the workspace (rows
// [Q + p log2(8M), Q + (p + 1) log2(8M)) of it), each column touched by one thread only.
template <typename T, typename G>
__global__ void __launch_bounds__(kLoopThreads) backward_loop_kernel(const BackwardArgs a) {
  dependents_may_launch();
  __shared__ float scratch[2 * 2 * kLoopThreads];
  const int tpr = blockDim.x;
  const int t = threadIdx.x;
  const int groups = 1 << a.groups_shift;
  const T* w = static_cast<const T*>(a.w);
  const bool w_vec = aligned16(w);
  const int64_t p = blockIdx.x;
  const int64_t q = gridDim.x;
  const int leaves = 8 << a.run_shift;
  const int levels = a.run_shift + 3;
  const bool want_dw = a.workspace != nullptr;
  float* out_row = want_dw ? a.workspace + p * a.dim : nullptr;
  float* stack = want_dw ? a.workspace + (q + p * levels) * a.dim : nullptr;
  const bool ws_vec = want_dw && aligned16(out_row) && aligned16(a.workspace + a.dim);

#pragma unroll 1
  for (int i = 0; i < leaves; ++i) {
    // One row a block: the condition is block-uniform, so the barriers stay matched.
    const int64_t row = leaf_row(p, q, i, a.mbits);
    const bool valid = row < a.rows;
    RowFactors f{0.0f, 0.0f};
    const T* xr = static_cast<const T*>(a.x) + (valid ? row : 0) * a.x_stride;
    const G* gr = static_cast<const G*>(a.dy) + (valid ? row : 0) * a.dy_stride;
    const bool x_vec = aligned16(xr);
    const bool g_vec = aligned16(gr);
    if (valid) {
      Stack<2> sums_stack;
      for (int mp = 0; mp < groups; ++mp) {
        const int base = (t + bit_reversed(mp, a.groups_shift) * tpr) * kGroup;
        Group<T> xg;
        Group<G> gg;
        Group<T> wg;
        load_group(xg, xr, base, a.dim, x_vec);
        load_group(gg, gr, base, a.dim, g_vec);
        load_group(wg, w, base, a.dim, w_vec);
        float both[2];
        group_sums(xg, gg, wg, both);
        sums_stack.push(both, mp);
      }
      float sums[2] = {sums_stack.s[0][0], sums_stack.s[1][0]};
      row_tree<2>(sums, __ffs(tpr) - 1, scratch, i & 1);
      f = row_factors(sums, a.dim, a.eps);
    } else if (!want_dw) {
      continue;
    }
    T* dxr = static_cast<T*>(a.dx) + (valid ? row : 0) * a.dx_stride;
    const bool dx_vec = aligned16(dxr);
    for (int m = 0; m < groups; ++m) {
      const int base = (t + m * tpr) * kGroup;
      float c[kGroup];
      if (valid) {
        Group<T> xg;
        Group<G> gg;
        Group<T> wg;
        load_group(xg, xr, base, a.dim, x_vec);
        load_group(gg, gr, base, a.dim, g_vec);
        load_group(wg, w, base, a.dim, w_vec);
        Group<T> out;
        group_grads(xg, gg, wg, f, out, c, want_dw);
        store_group(out, dxr, base, a.dim, dx_vec);
      } else {
#pragma unroll
        for (int j = 0; j < kGroup; ++j) c[j] = 0.0f;  // a zero row's term is +0.0
      }
      if (!want_dw) continue;
      int level = 0;
      for (int bits = i; bits & 1; bits >>= 1, ++level) {
        Group<float> left;
        load_group(left, stack + int64_t(level) * a.dim, base, a.dim, ws_vec);
        float l[kGroup];
#pragma unroll
        for (int j = 0; j < kGroup; ++j) l[j] = left.get(j);
        add_left(c, l);
      }
      Group<float> gsum;
#pragma unroll
      for (int j = 0; j < kGroup; ++j) gsum.u[j] = __float_as_uint(c[j]);
      store_group(gsum, i + 1 < leaves ? stack + int64_t(level) * a.dim : out_row, base, a.dim, ws_vec);
    }
  }
}

// dw[col] = the halving tree over the Q = 2^q_shift partial rows, + 0.0, rounded to the weight's dtype.
// Thread (x, y) takes rows y + F u, u < Q/F (F = min(32, Q)): the tree's first levels pair u with u + Q/(2F),
// all inside the thread; then the F results are halved across y, the levels pairing y with y + F/2, y + F/4, ...
// in that order.

// The halving tree over U values in registers: v[i] + v[i + h] for h = U/2, ..., 1, the earlier half on the left.
template <int U>
__device__ __forceinline__ float halving_tree(float (&v)[U]) {
#pragma unroll
  for (int h = U / 2; h > 0; h >>= 1)
#pragma unroll
    for (int i = 0; i < h; ++i) v[i] = __fadd_rn(v[i], v[i + h]);
  return v[0];
}

// Thread y's share for U = Q/F <= 32: every leaf loaded before any is added, the tree in registers.
template <int U>
__device__ __forceinline__ float final_share(const float* __restrict__ workspace, int y, int splits, int dim, int col) {
  float v[U];
#pragma unroll
  for (int u = 0; u < U; ++u) v[u] = workspace[(y + int64_t(splits) * u) * dim + col];
  return halving_tree(v);
}

// Thread y's share for U > 32: the leaves visited in bit-reversed order, so that a stack builds their halving
// tree, loaded kFinalBatch at a time before any is added (one load after another, each waiting on the stack's
// adds, took 17-20 µs at Q = 1024 on an H200). Out of line, so that its stack's local memory is
// not the whole kernel's; a template, so that every unit including this header may define it.
template <int kFinalBatch = 32>
__device__ __noinline__ float final_share_streamed(const float* __restrict__ workspace, int y, int splits, int u_shift,
                                                   int dim, int col) {
  Stack<1> stack;
  const int count = 1 << u_shift;
  for (int base = 0; base < count; base += kFinalBatch) {
    float leaves[kFinalBatch];
#pragma unroll
    for (int k = 0; k < kFinalBatch; ++k)
      leaves[k] = workspace[(y + int64_t(splits) * bit_reversed(base + k, u_shift)) * dim + col];
#pragma unroll
    for (int k = 0; k < kFinalBatch; ++k) {
      const float leaf[1] = {leaves[k]};
      stack.push(leaf, base + k);
    }
  }
  return stack.s[0][0];
}

// The shares' tree in registers up to 32 leaves a thread (the default plans' Q = 1024 at 65536 rows is 32): the
// stack's local memory had made this kernel 18.8 µs at 65536 x 4096 and 12.8 µs at 2097152 x 128, 4 % and 3 % of
// the backward (measured on an H200).
template <typename T>
__global__ void __launch_bounds__(kFinalCols* kFinalSplits)
    dw_final_kernel(const float* __restrict__ workspace, int q_shift, int dim, T* __restrict__ dw) {
  wait_for_prerequisite_grid();
  __shared__ float sums[kFinalSplits][kFinalCols + 1];
  const int col = blockIdx.x * kFinalCols + threadIdx.x;
  const int f_shift = q_shift < 5 ? q_shift : 5;
  const int splits = 1 << f_shift;
  const int u_shift = q_shift - f_shift;
  const int y = threadIdx.y;
  float s = 0.0f;
  if (y < splits && col < dim) {
    switch (u_shift) {
      case 0:
        s = final_share<1>(workspace, y, splits, dim, col);
        break;
      case 1:
        s = final_share<2>(workspace, y, splits, dim, col);
        break;
      case 2:
        s = final_share<4>(workspace, y, splits, dim, col);
        break;
      case 3:
        s = final_share<8>(workspace, y, splits, dim, col);
        break;
      case 4:
        s = final_share<16>(workspace, y, splits, dim, col);
        break;
      case 5:
        s = final_share<32>(workspace, y, splits, dim, col);
        break;
      default:
        s = final_share_streamed(workspace, y, splits, u_shift, dim, col);
        break;
    }
  }
  sums[y][threadIdx.x] = s;
  __syncthreads();
  for (int span = splits >> 1; span > 0; span >>= 1) {
    if (y < span) sums[y][threadIdx.x] = __fadd_rn(sums[y][threadIdx.x], sums[y + span][threadIdx.x]);
    __syncthreads();
  }
  if (y == 0 && col < dim)
    reinterpret_cast<RawOf<T>*>(dw)[col] = RawOf<T>(Bits<T>::from_float(__fadd_rn(sums[0][threadIdx.x], 0.0f)));
}

// ---------------------------------------------------------------------------------------------------
// Launching.

template <typename Args>
const char* launch_staged(void (*kernel)(Args), int64_t work_blocks, bool cap_at_resident, int threads,
                          size_t smem, const Args& a, cudaStream_t stream) {
  int64_t resident = 0;
  if (const char* err = resident_blocks(reinterpret_cast<const void*>(kernel), threads, smem, &resident)) return err;
  const int64_t grid = cap_at_resident && work_blocks > resident ? resident : work_blocks;
  if (grid > INT_MAX) return "rmsnorm: too many blocks for one launch";
  kernel<<<unsigned(grid), threads, smem, stream>>>(a);
  return last_error();
}

// The row kernel's grid: one block a set of rows. The lean kernel (16-bit rows in and out, not the fused add, two or
// four groups a thread) where every row is the plan's padded width and every 16-byte access is aligned.
template <typename T, typename O, Mode M, int K>
constexpr bool has_lean_rows() {
  return sizeof(T) == 2 && sizeof(O) == 2 && M != Mode::kFusedAdd && K >= 2;
}

template <typename T, typename O>
bool lean_rows(const ForwardPlan& c, const ForwardArgs& a) {
  const auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; };
  const bool strided = a.rows > 1 && ((a.x_stride * int64_t(sizeof(T))) % 16 != 0 ||
                                      (a.y_stride * int64_t(sizeof(O))) % 16 != 0);
  return int64_t(a.dim) == (int64_t(c.k) << c.tpr_shift) * kGroup && aligned(a.x) && aligned(a.y) &&
         (a.w == nullptr || aligned(a.w)) && !strided;
}

template <typename T, typename O, Mode M, int K>
void launch_row_kernel(bool lean, int64_t sets, int threads, const ForwardArgs& a, cudaStream_t stream) {
  if constexpr (has_lean_rows<T, O, M, K>()) {
    if (lean) {
      forward_row_kernel<T, O, M, K, true><<<unsigned(sets), threads, 0, stream>>>(a);
      return;
    }
  }
  forward_row_kernel<T, O, M, K><<<unsigned(sets), threads, 0, stream>>>(a);
}

template <typename T, typename O, Mode M>
const char* launch_rows(const ForwardPlan& c, int64_t sets, const ForwardArgs& a, cudaStream_t stream) {
  if (sets > INT_MAX) return "rmsnorm: too many blocks for one launch";
  const bool lean = lean_rows<T, O>(c, a);
  switch (c.k) {
    case 1:
      launch_row_kernel<T, O, M, 1>(lean, sets, c.threads, a, stream);
      break;
    case 2:
      launch_row_kernel<T, O, M, 2>(lean, sets, c.threads, a, stream);
      break;
    default:
      launch_row_kernel<T, O, M, 4>(lean, sets, c.threads, a, stream);
      break;
  }
  return last_error();
}

template <typename T, typename O, Mode M>
const char* launch_forward(const ForwardPlan& c, ForwardArgs a, cudaStream_t stream) {
  a.tpr_shift = c.tpr_shift;
  a.groups_shift = c.groups_shift;
  if (c.streaming) {
    if (a.rows > INT_MAX) return "rmsnorm: too many rows for the streaming kernel";
    forward_loop_kernel<T, O, M><<<unsigned(a.rows), c.threads, 0, stream>>>(a);
    return last_error();
  }
  const int slots = c.threads >> c.tpr_shift;
  const int64_t sets = (a.rows + slots - 1) / slots;
  return launch_rows<T, O, M>(c, sets, a, stream);
}

template <typename T, typename G>
const char* launch_backward(const BackwardPlan& c, BackwardArgs a, T* dw, cudaStream_t stream) {
  if (dw == nullptr) a.workspace = nullptr;
  a.tpr_shift = c.tpr_shift;
  a.groups_shift = c.groups_shift;
  a.run_shift = c.run_shift;
  a.mbits = c.mbits;
  const int64_t programs = int64_t(1) << c.q_shift;
  if (programs > INT_MAX) return "rmsnorm: too many blocks for one launch";
  if (c.streaming) {
    backward_loop_kernel<T, G><<<unsigned(programs), c.threads, 0, stream>>>(a);
    if (const char* err = last_error()) return err;
  } else {
    const Tuning tune = tuning(2);
    const int stage_bytes = c.k * (kWordsOf<T> + kWordsOf<G>) * c.threads * 16;
    const int fixed = backward_fixed_bytes(c, int(sizeof(T)));
    int stages = tune.v[2] ? tune.v[2] : 3;
    stages = stages < 2 ? 2 : (stages > kMaxStages ? kMaxStages : stages);
    while (stages > 2 && stages * stage_bytes + fixed > kSharedBudget) --stages;
    a.stages = stages;
    const size_t smem = size_t(stages) * stage_bytes + fixed;
    const char* err = nullptr;
    // One or two groups a thread (backward_plan_for never picks more: kMaxBackwardGroups).
    if (c.k == 1)
      err = launch_staged(backward_kernel<T, G, 1>, programs, false, c.threads, smem, a, stream);
    else
      err = launch_staged(backward_kernel<T, G, 2>, programs, false, c.threads, smem, a, stream);
    if (err) return err;
  }
  if (dw == nullptr) return nullptr;
  const dim3 block(kFinalCols, kFinalSplits);
  const unsigned grid = unsigned((a.dim + kFinalCols - 1) / kFinalCols);
  bool overlap = false;
  if (const char* err = dependent_launch_enabled(&overlap)) return err;
  if (!overlap) {
    dw_final_kernel<T><<<grid, block, 0, stream>>>(a.workspace, c.q_shift, a.dim, dw);
    return last_error();
  }
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(grid);
  config.blockDim = block;
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  const float* workspace = a.workspace;
  const int q_shift = c.q_shift;
  const int dim = a.dim;
  if (cudaLaunchKernelEx(&config, dw_final_kernel<T>, workspace, q_shift, dim, dw) != cudaSuccess) return last_error();
  return last_error();
}

template <typename T>
const char* forward_launch(const ForwardPlan& c, const ForwardArgs& a, Variant variant, bool out_fp32,
                           cudaStream_t stream) {
  switch (variant) {
    case Variant::kOffset:
      return launch_forward<T, T, Mode::kOffset>(c, a, stream);
    case Variant::kUnweighted:
      return launch_forward<T, T, Mode::kUnweighted>(c, a, stream);
    case Variant::kPlain:
      break;
  }
  return out_fp32 ? launch_forward<T, float, Mode::kPlain>(c, a, stream) : launch_forward<T, T, Mode::kPlain>(c, a, stream);
}

template <typename T>
const char* fused_add_launch(const ForwardPlan& c, const ForwardArgs& a, cudaStream_t stream) {
  return launch_forward<T, T, Mode::kFusedAdd>(c, a, stream);
}

template <typename T>
const char* backward_launch(const BackwardPlan& c, const BackwardArgs& a, bool dy_fp32, void* dw, cudaStream_t stream) {
  if (dy_fp32) return launch_backward<T, float>(c, a, static_cast<T*>(dw), stream);
  return launch_backward<T, T>(c, a, static_cast<T*>(dw), stream);
}

}  // namespace detail
}  // namespace rmsnorm
