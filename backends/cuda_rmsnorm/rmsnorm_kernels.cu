// RMSNorm forward and backward kernels whose bits cannot depend on the batch.
//
// The rule that makes them batch-invariant: every number that decides a row's reduction order (threads
// per row, chunks per thread, chunk width) comes from (dim, dtype) alone, and a row's arithmetic is the
// same whether its elements arrive by 16-byte vector loads or by scalar loads. Only loads and stores
// differ between the vector and scalar paths (and between the all-aligned kernels and the general
// ones): they put the same words in registers, and everything computed from those words is a fixed
// sequence of correctly rounded operations (__fmaf_rn, __fadd_rn, __fsqrt_rn, ...) that the compiler
// may neither contract nor reassociate, so there is exactly one possible result for each row.
//
// No torch headers here: this file compiles with nvcc alone.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <type_traits>

#include "rmsnorm.h"

namespace rmsnorm {
namespace {

// Rows shorter than this many threads share a block, so that small dims (head_dim 128) still give each
// block enough bytes in flight to stream at copy speed.
constexpr int kMinBlockThreads = 256;
// Four 16-byte chunks (64 bytes of a row) per thread. Measured on an H200 against two: forward 1.000 vs
// 0.991 of copy speed at 65536 x 4096 bf16 and 0.990 vs 0.976 at 2097152 x 128; backward 0.951 vs 0.936
// and 0.940 vs 0.904. More bytes in flight per thread beat the occupancy they cost.
constexpr int kChunksPerThread = 4;
// A row never spans more threads than one block can hold.
constexpr int kMaxThreadsPerRow = 1024;
// The backward holds x, dy, weight and its dw sums in registers: half the threads, twice the registers.
constexpr int kMaxBackwardThreadsPerRow = 512;
// The dw reduction over partitions: a 32 x 32 block, 32 columns by 32 interleaved partition strides.
constexpr int kFinalCols = 32;
constexpr int kFinalSplits = 32;

// ---------------------------------------------------------------------------------------------------
// Packs: N consecutive elements of a row, kept as raw 32-bit words (two 16-bit elements a word), moved
// as 16-byte pieces when the row allows it.
//
// Both load paths build the same words, so the compiler keeps one packed representation in registers;
// scalar loads into unpacked 16-bit elements would double the registers a row's data takes.

// Per element type: exact widening to fp32 from a packed word (`hi` picks the upper 16-bit element),
// rounding from fp32 to the element's bits, and `fresh`, the same widening through inline assembly the
// compiler can neither merge with another conversion nor hoist out of a loop (see Pack::fresh).
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

template <typename E, int N>
struct alignas(16) Pack {
  static_assert(sizeof(E) == 2 || sizeof(E) == 4, "16- or 32-bit elements");
  static_assert(sizeof(E) * N % 16 == 0, "a pack is a whole number of 16-byte pieces");
  static constexpr int kWords = int(sizeof(E)) * N / 4;
  static constexpr int kPerWord = 4 / int(sizeof(E));
  uint32_t u[kWords];

  // Element j as an exact fp32.
  __device__ __forceinline__ float get(int j) const {
    return Bits<E>::get(u[j / kPerWord], kPerWord == 2 && (j & 1));
  }
  // Element j again, through a conversion the compiler cannot merge with get(j) or hoist out of a loop.
  // A second pass over a row's elements then widens again from the packed words, instead of the compiler
  // keeping every element's fp32 value alive across the row reduction (or, for the weight, across the
  // whole row loop), which would double or triple the registers the data occupies and halve occupancy.
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

// The raw storage type of one element.
template <typename E>
using RawOf = typename std::conditional<sizeof(E) == 4, uint32_t, unsigned short>::type;

__device__ __forceinline__ bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

// Elements [base, base + N) of `row`, zeros (+0.0) past `limit`.
//
// kAligned: the caller has checked that every row start is 16-byte aligned and that dim is a multiple of
// N, so a pack is either wholly inside the row or wholly outside; `vec` is then ignored. Otherwise the
// vector branch is taken only for a whole pack of an aligned row (`vec`), and the scalar branch builds the
// same words element by element.
template <bool kAligned, typename E, int N>
__device__ __forceinline__ void load_pack(Pack<E, N>& p, const E* __restrict__ row, int base, int limit,
                                          bool vec) {
  if (kAligned ? base < limit : (vec && base + N <= limit)) {
    const uint4* src = reinterpret_cast<const uint4*>(row + base);
#pragma unroll
    for (int i = 0; i < Pack<E, N>::kWords / 4; ++i) {
      const uint4 q = src[i];
      p.u[4 * i] = q.x;
      p.u[4 * i + 1] = q.y;
      p.u[4 * i + 2] = q.z;
      p.u[4 * i + 3] = q.w;
    }
  } else if (kAligned) {
#pragma unroll
    for (int i = 0; i < Pack<E, N>::kWords; ++i) p.u[i] = 0u;
  } else {
    const RawOf<E>* raw = reinterpret_cast<const RawOf<E>*>(row);
#pragma unroll
    for (int i = 0; i < Pack<E, N>::kWords; ++i) {
      if constexpr (sizeof(E) == 4) {
        p.u[i] = base + i < limit ? raw[base + i] : 0u;
      } else {
        const uint32_t lo = base + 2 * i < limit ? raw[base + 2 * i] : 0u;
        const uint32_t hi = base + 2 * i + 1 < limit ? raw[base + 2 * i + 1] : 0u;
        p.u[i] = lo | (hi << 16);
      }
    }
  }
}

template <bool kAligned, typename E, int N>
__device__ __forceinline__ void store_pack(const Pack<E, N>& p, E* __restrict__ row, int base, int limit,
                                           bool vec) {
  if (kAligned ? base < limit : (vec && base + N <= limit)) {
    uint4* dst = reinterpret_cast<uint4*>(row + base);
#pragma unroll
    for (int i = 0; i < Pack<E, N>::kWords / 4; ++i)
      dst[i] = make_uint4(p.u[4 * i], p.u[4 * i + 1], p.u[4 * i + 2], p.u[4 * i + 3]);
  } else if (!kAligned) {
    RawOf<E>* raw = reinterpret_cast<RawOf<E>*>(row);
#pragma unroll
    for (int i = 0; i < Pack<E, N>::kWords; ++i) {
      if constexpr (sizeof(E) == 4) {
        if (base + i < limit) raw[base + i] = p.u[i];
      } else {
        if (base + 2 * i < limit) raw[base + 2 * i] = (unsigned short)(p.u[i] & 0xffffu);
        if (base + 2 * i + 1 < limit) raw[base + 2 * i + 1] = (unsigned short)(p.u[i] >> 16);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// The row reduction: a butterfly inside each warp, then the row's warps in index order.
//
// A butterfly leaves every lane holding the same bits (a + b == b + a in IEEE arithmetic), and the
// cross-warp sum reads the per-warp values in a fixed order, so every thread of the row gets the same
// total, and that total depends only on the row's values and on tpr.

__device__ __forceinline__ float row_sum(float v, int tpr, float* slots) {
  const int width = tpr < 32 ? tpr : 32;
  for (int offset = width >> 1; offset > 0; offset >>= 1)
    v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, offset));
  if (tpr > 32) {
    const int warp = threadIdx.x >> 5;
    const int warps_per_row = tpr >> 5;
    const int first = warp & ~(warps_per_row - 1);
    if ((threadIdx.x & 31) == 0) slots[warp] = v;
    __syncthreads();
    v = slots[first];
    // A short unroll: a full one would hold up to 31 loaded values in registers beside the row's data.
#pragma unroll 4
    for (int i = 1; i < warps_per_row; ++i) v = __fadd_rn(v, slots[first + i]);
  }
  return v;
}

// 1 / sqrt(mean + eps), each step correctly rounded: eps inside the square root.
__device__ __forceinline__ float inverse_rms(float sum_of_squares, int dim, float eps) {
  return __frcp_rn(__fsqrt_rn(__fadd_rn(__fdiv_rn(sum_of_squares, __int2float_rn(dim)), eps)));
}

// ---------------------------------------------------------------------------------------------------
// Forward, registers path: thread `lane` of a row holds chunks lane, lane + tpr, ..., lane + (CPT-1)*tpr
// (a chunk is 16 bytes of x), so a warp's loads are contiguous. Its partial sum of squares runs over
// those chunks in order, elements in order inside each chunk.

template <typename T, typename O, int CPT, bool kAligned>
__global__ void __launch_bounds__(kMaxThreadsPerRow)
    forward_kernel(const T* __restrict__ x, int64_t x_stride, const T* __restrict__ w, O* __restrict__ y,
                   int64_t y_stride, float* __restrict__ rstd, int64_t rows, int dim, int tpr_shift, float eps) {
  constexpr int V = 16 / sizeof(T);
  __shared__ float slots[32];
  const int tpr = 1 << tpr_shift;
  const int lane = threadIdx.x & (tpr - 1);
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x >> tpr_shift) + (threadIdx.x >> tpr_shift);
  // Threads past the last row still take part in the row reduction's shuffles and barriers.
  const bool valid = row < rows;
  const int limit = valid ? dim : 0;
  const T* xr = x + (valid ? row * x_stride : 0);

  Pack<T, V> xv[CPT];
  Pack<T, V> wv[CPT];
  const bool x_vec = aligned16(xr);
  const bool w_vec = aligned16(w);
#pragma unroll
  for (int k = 0; k < CPT; ++k) load_pack<kAligned>(xv[k], xr, (lane + k * tpr) * V, limit, x_vec);
#pragma unroll
  for (int k = 0; k < CPT; ++k) load_pack<kAligned>(wv[k], w, (lane + k * tpr) * V, limit, w_vec);

  float acc = 0.0f;
#pragma unroll
  for (int k = 0; k < CPT; ++k)
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float v = xv[k].get(j);
      acc = __fmaf_rn(v, v, acc);
    }
  const float r = inverse_rms(row_sum(acc, tpr, slots), dim, eps);
  if (rstd != nullptr && valid && lane == 0) rstd[row] = r;

  O* yr = y + (valid ? row * y_stride : 0);
  const bool y_vec = aligned16(yr);
#pragma unroll
  for (int k = 0; k < CPT; ++k) {
    Pack<O, V> out;
#pragma unroll
    for (int j = 0; j < V; ++j) out.set(j, __fmul_rn(__fmul_rn(xv[k].fresh(j), r), wv[k].fresh(j)));
    store_pack<kAligned>(out, yr, (lane + k * tpr) * V, limit, y_vec);
  }
}

// Forward, looping path for rows too long to hold in registers: one row per block of blockDim threads,
// thread t owns chunks t, t + blockDim, ...; x is read twice (the second time mostly from cache).
template <typename T, typename O>
__global__ void __launch_bounds__(kMaxThreadsPerRow)
    forward_loop_kernel(const T* __restrict__ x, int64_t x_stride, const T* __restrict__ w, O* __restrict__ y,
                        int64_t y_stride, float* __restrict__ rstd, int dim, float eps) {
  constexpr int V = 16 / sizeof(T);
  __shared__ float slots[32];
  const int64_t row = blockIdx.x;
  const int nchunks = (dim + V - 1) / V;
  const T* xr = x + row * x_stride;
  const bool x_vec = aligned16(xr);
  const bool w_vec = aligned16(w);

  float acc = 0.0f;
  for (int c = threadIdx.x; c < nchunks; c += blockDim.x) {
    Pack<T, V> xv;
    load_pack<false>(xv, xr, c * V, dim, x_vec);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float v = xv.get(j);
      acc = __fmaf_rn(v, v, acc);
    }
  }
  const float r = inverse_rms(row_sum(acc, blockDim.x, slots), dim, eps);
  if (rstd != nullptr && threadIdx.x == 0) rstd[row] = r;

  O* yr = y + row * y_stride;
  const bool y_vec = aligned16(yr);
  for (int c = threadIdx.x; c < nchunks; c += blockDim.x) {
    Pack<T, V> xv;
    Pack<T, V> wv;
    load_pack<false>(xv, xr, c * V, dim, x_vec);
    load_pack<false>(wv, w, c * V, dim, w_vec);
    Pack<O, V> out;
#pragma unroll
    for (int j = 0; j < V; ++j) out.set(j, __fmul_rn(__fmul_rn(xv.get(j), r), wv.get(j)));
    store_pack<false>(out, yr, c * V, dim, y_vec);
  }
}

// ---------------------------------------------------------------------------------------------------
// Backward. With g = dy * w, r = rstd and c = sum_j g_j x_j over the row:
//   dx_i = r * (g_i - x_i * (c / dim) * r^2),    dw_i = sum over rows of dy_i * x_i * r.
// dx is per row with a thread mapping fixed by (dim, dtype), so it is batch-invariant like the forward.
// dw has no atomics: block b owns the contiguous rows of partition b; each of its threads keeps fp32
// sums for its own columns over its rows in row order; the row groups of a block are added in group
// order; partition b's sums go to workspace row b; a second kernel adds the partitions in index order.

template <typename T, typename G, int CPT, bool kAligned>
__global__ void __launch_bounds__(kMaxBackwardThreadsPerRow)
    backward_kernel(const G* __restrict__ dy, int64_t dy_stride, const T* __restrict__ x, int64_t x_stride,
                    const T* __restrict__ w, const float* __restrict__ rstd, T* __restrict__ dx,
                    int64_t dx_stride, float* __restrict__ workspace, int padded_dim, int64_t rows,
                    int64_t rows_per_part, int dim, int tpr_shift) {
  constexpr int V = 16 / sizeof(T);
  __shared__ float slots[2][32];
  extern __shared__ float4 group_sums_raw[];  // [groups][padded_dim] fp32, only when groups > 1
  float* group_sums = reinterpret_cast<float*>(group_sums_raw);

  const int tpr = 1 << tpr_shift;
  const int lane = threadIdx.x & (tpr - 1);
  const int group = threadIdx.x >> tpr_shift;
  const int groups = blockDim.x >> tpr_shift;
  const int64_t begin = int64_t(blockIdx.x) * rows_per_part;
  const int64_t end = begin + rows_per_part < rows ? begin + rows_per_part : rows;
  // Every thread runs the same number of steps so that shuffles and barriers stay matched.
  const int64_t steps = (end - begin + groups - 1) / groups;

  Pack<T, V> wv[CPT];
  const bool w_vec = aligned16(w);
#pragma unroll
  for (int k = 0; k < CPT; ++k) load_pack<kAligned>(wv[k], w, (lane + k * tpr) * V, dim, w_vec);
  float dw_acc[CPT][V];
#pragma unroll
  for (int k = 0; k < CPT; ++k)
#pragma unroll
    for (int j = 0; j < V; ++j) dw_acc[k][j] = 0.0f;

  // Row `s` of this group is begin + s * groups + group.
#pragma unroll 1
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t row = begin + s * groups + group;
    const bool valid = row < end;
    const int limit = valid ? dim : 0;
    const T* xr = x + (valid ? row * x_stride : 0);
    const G* gr = dy + (valid ? row * dy_stride : 0);
    const bool x_vec = aligned16(xr);
    const bool g_vec = aligned16(gr);
    Pack<T, V> xv[CPT];
    Pack<G, V> gv[CPT];
#pragma unroll
    for (int k = 0; k < CPT; ++k) load_pack<kAligned>(xv[k], xr, (lane + k * tpr) * V, limit, x_vec);
#pragma unroll
    for (int k = 0; k < CPT; ++k) load_pack<kAligned>(gv[k], gr, (lane + k * tpr) * V, limit, g_vec);
    const float r = valid ? rstd[row] : 0.0f;

    float part = 0.0f;
#pragma unroll
    for (int k = 0; k < CPT; ++k)
#pragma unroll
      for (int j = 0; j < V; ++j) part = __fmaf_rn(__fmul_rn(gv[k].get(j), wv[k].fresh(j)), xv[k].get(j), part);
    const float c = row_sum(part, tpr, slots[s & 1]);
    const float coef = __fmul_rn(__fmul_rn(__fdiv_rn(c, __int2float_rn(dim)), r), r);

    T* dxr = dx + (valid ? row * dx_stride : 0);
    const bool dx_vec = aligned16(dxr);
#pragma unroll
    for (int k = 0; k < CPT; ++k) {
      Pack<T, V> out;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float xf = xv[k].fresh(j);
        const float gf = gv[k].fresh(j);
        out.set(j, __fmul_rn(r, __fmaf_rn(-xf, coef, __fmul_rn(gf, wv[k].fresh(j)))));
        if (valid) dw_acc[k][j] = __fmaf_rn(gf, __fmul_rn(xf, r), dw_acc[k][j]);
      }
      store_pack<kAligned>(out, dxr, (lane + k * tpr) * V, limit, dx_vec);
    }
  }

  if (workspace == nullptr) return;
  float* part_row = workspace + int64_t(blockIdx.x) * padded_dim;
  const int nchunks = padded_dim / V;
  // With several row groups in the block, each parks its sums in shared memory and the block adds the
  // groups column by column in group order; a lone group writes its sums straight out.
  float* sums = groups == 1 ? part_row : group_sums + group * padded_dim;
#pragma unroll
  for (int k = 0; k < CPT; ++k) {
    const int chunk = lane + k * tpr;
    if (chunk < nchunks) {
      Pack<float, V> out;
#pragma unroll
      for (int j = 0; j < V; ++j) out.set(j, dw_acc[k][j]);
      store_pack<true>(out, sums, chunk * V, padded_dim, true);
    }
  }
  if (groups == 1) return;
  __syncthreads();
  for (int col = threadIdx.x; col < padded_dim; col += blockDim.x) {
    float total = group_sums[col];
    for (int gi = 1; gi < groups; ++gi) total = __fadd_rn(total, group_sums[gi * padded_dim + col]);
    part_row[col] = total;
  }
}

// Backward, looping path for long rows: one block of blockDim threads walks its partition's rows one by
// one; thread t owns chunks t, t + blockDim, ... and adds its dw terms into the partition's workspace
// row in place (zero-filled beforehand; no other thread touches those columns).
template <typename T, typename G>
__global__ void __launch_bounds__(kMaxBackwardThreadsPerRow)
    backward_loop_kernel(const G* __restrict__ dy, int64_t dy_stride, const T* __restrict__ x,
                         int64_t x_stride, const T* __restrict__ w, const float* __restrict__ rstd,
                         T* __restrict__ dx, int64_t dx_stride, float* __restrict__ workspace, int padded_dim,
                         int64_t rows, int64_t rows_per_part, int dim) {
  constexpr int V = 16 / sizeof(T);
  __shared__ float slots[2][32];
  const int64_t begin = int64_t(blockIdx.x) * rows_per_part;
  const int64_t end = begin + rows_per_part < rows ? begin + rows_per_part : rows;
  const int nchunks = (dim + V - 1) / V;
  const bool w_vec = aligned16(w);
  float* part_row = workspace == nullptr ? nullptr : workspace + int64_t(blockIdx.x) * padded_dim;

  for (int64_t row = begin; row < end; ++row) {
    const T* xr = x + row * x_stride;
    const G* gr = dy + row * dy_stride;
    const bool x_vec = aligned16(xr);
    const bool g_vec = aligned16(gr);
    const float r = rstd[row];

    float part = 0.0f;
    for (int c = threadIdx.x; c < nchunks; c += blockDim.x) {
      Pack<T, V> xv;
      Pack<T, V> wv;
      Pack<G, V> gv;
      load_pack<false>(xv, xr, c * V, dim, x_vec);
      load_pack<false>(wv, w, c * V, dim, w_vec);
      load_pack<false>(gv, gr, c * V, dim, g_vec);
#pragma unroll
      for (int j = 0; j < V; ++j) part = __fmaf_rn(__fmul_rn(gv.get(j), wv.get(j)), xv.get(j), part);
    }
    const float c = row_sum(part, blockDim.x, slots[row & 1]);
    const float coef = __fmul_rn(__fmul_rn(__fdiv_rn(c, __int2float_rn(dim)), r), r);

    T* dxr = dx + row * dx_stride;
    const bool dx_vec = aligned16(dxr);
    for (int ch = threadIdx.x; ch < nchunks; ch += blockDim.x) {
      Pack<T, V> xv;
      Pack<T, V> wv;
      Pack<G, V> gv;
      load_pack<false>(xv, xr, ch * V, dim, x_vec);
      load_pack<false>(wv, w, ch * V, dim, w_vec);
      load_pack<false>(gv, gr, ch * V, dim, g_vec);
      Pack<T, V> out;
      Pack<float, V> acc;
      if (part_row != nullptr) load_pack<true>(acc, part_row, ch * V, padded_dim, true);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float xf = xv.get(j);
        const float gf = gv.get(j);
        out.set(j, __fmul_rn(r, __fmaf_rn(-xf, coef, __fmul_rn(gf, wv.get(j)))));
        acc.set(j, __fmaf_rn(gf, __fmul_rn(xf, r), acc.get(j)));
      }
      store_pack<false>(out, dxr, ch * V, dim, dx_vec);
      if (part_row != nullptr) store_pack<true>(acc, part_row, ch * V, padded_dim, true);
    }
  }
}

// dw[col] = sum over partitions p of workspace[p, col]: thread (tx, ty) adds partitions ty, ty + 32, ...
// in order, then thread (tx, 0) adds the 32 strides in order.
template <typename T>
__global__ void __launch_bounds__(kFinalCols* kFinalSplits)
    dw_final_kernel(const float* __restrict__ workspace, int64_t parts, int padded_dim, int dim,
                    T* __restrict__ dw) {
  __shared__ float sums[kFinalSplits][kFinalCols + 1];
  const int col = blockIdx.x * kFinalCols + threadIdx.x;
  float s = 0.0f;
  if (col < dim)
    for (int64_t p = threadIdx.y; p < parts; p += kFinalSplits) s = __fadd_rn(s, workspace[p * padded_dim + col]);
  sums[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && col < dim) {
    float total = sums[0][threadIdx.x];
    for (int i = 1; i < kFinalSplits; ++i) total = __fadd_rn(total, sums[i][threadIdx.x]);
    reinterpret_cast<RawOf<T>*>(dw)[col] = RawOf<T>(Bits<T>::from_float(total));
  }
}

// ---------------------------------------------------------------------------------------------------
// Launch configuration: a function of (dim, element size) only, never of the number of rows. The
// forward and the backward each have their own (the backward caps threads per row lower), which is
// fine: each is a fixed function of (dim, dtype), so each is batch-invariant on its own.

struct Config {
  int vec;             // elements per 16-byte chunk
  int nchunks;         // chunks per row, the last one possibly partial
  int tpr_shift;       // log2(threads per row)
  int cpt;             // chunks per thread held in registers (2 or 4), or 0 for the looping kernels
  int threads;         // threads per block
  int rows_per_block;  // rows a block handles at once
};

Config make_config(int elem_size, int dim, int max_threads_per_row) {
  Config c{};
  c.vec = 16 / elem_size;
  c.nchunks = (dim + c.vec - 1) / c.vec;
  // kChunksPerThread chunks per thread over a power-of-two number of threads per row; a row too long for
  // four chunks a thread at the thread cap takes the looping kernels.
  const int wanted = (c.nchunks + kChunksPerThread - 1) / kChunksPerThread;
  int tpr = 1;
  c.tpr_shift = 0;
  while (tpr < wanted && tpr < max_threads_per_row) {
    tpr <<= 1;
    ++c.tpr_shift;
  }
  if (c.nchunks <= 2 * tpr) {
    c.cpt = 2;
  } else if (c.nchunks <= 4 * tpr) {
    c.cpt = 4;
  } else {
    c.cpt = 0;  // the looping kernels use max_threads_per_row threads, one row per block
    tpr = max_threads_per_row;
  }
  c.threads = tpr < kMinBlockThreads ? kMinBlockThreads : tpr;
  c.rows_per_block = c.threads / tpr;
  return c;
}

Config forward_config(DType d, int dim) { return make_config(d == DType::kFloat32 ? 4 : 2, dim, kMaxThreadsPerRow); }
Config backward_config(DType d, int dim) {
  return make_config(d == DType::kFloat32 ? 4 : 2, dim, kMaxBackwardThreadsPerRow);
}

template <typename T>
struct Tag {
  using type = T;
};

template <typename F>
const char* dispatch(DType d, F&& f) {
  switch (d) {
    case DType::kFloat32:
      return f(Tag<float>{});
    case DType::kBFloat16:
      return f(Tag<__nv_bfloat16>{});
    case DType::kFloat16:
      return f(Tag<__half>{});
  }
  return "rmsnorm: unknown dtype code";
}

const char* last_error() {
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

bool host_aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Every row of a [rows, dim] view starting at p with rows `stride` elements apart begins 16-byte aligned.
template <typename E>
bool rows_aligned16(const void* p, int64_t stride, int64_t rows) {
  return host_aligned16(p) && (rows <= 1 || (stride * int64_t(sizeof(E))) % 16 == 0);
}

template <typename T, typename O, int CPT>
void forward_registers(bool aligned, unsigned blocks, int threads, cudaStream_t stream, const T* x,
                       int64_t x_stride, const T* w, O* y, int64_t y_stride, float* rstd, int64_t rows, int dim,
                       int tpr_shift, float eps) {
  auto kernel = aligned ? forward_kernel<T, O, CPT, true> : forward_kernel<T, O, CPT, false>;
  kernel<<<blocks, threads, 0, stream>>>(x, x_stride, w, y, y_stride, rstd, rows, dim, tpr_shift, eps);
}

template <typename T, typename O>
const char* launch_forward(const Config& c, const T* x, int64_t x_stride, const T* w, O* y, int64_t y_stride,
                           float* rstd, int64_t rows, int dim, float eps, cudaStream_t stream) {
  if (c.cpt == 0) {
    if (rows > INT_MAX) return "rmsnorm: too many rows for the looping kernel";
    forward_loop_kernel<T, O><<<unsigned(rows), c.threads, 0, stream>>>(x, x_stride, w, y, y_stride, rstd, dim,
                                                                        eps);
    return last_error();
  }
  const int64_t blocks = (rows + c.rows_per_block - 1) / c.rows_per_block;
  if (blocks > INT_MAX) return "rmsnorm: too many rows for one launch";
  // Which kernel moves the bytes changes no bits (see the top of this file).
  const bool aligned = dim % c.vec == 0 && rows_aligned16<T>(x, x_stride, rows) && host_aligned16(w) &&
                       rows_aligned16<O>(y, y_stride, rows);
  if (c.cpt == 2) {
    forward_registers<T, O, 2>(aligned, unsigned(blocks), c.threads, stream, x, x_stride, w, y, y_stride, rstd,
                               rows, dim, c.tpr_shift, eps);
  } else {
    forward_registers<T, O, 4>(aligned, unsigned(blocks), c.threads, stream, x, x_stride, w, y, y_stride, rstd,
                               rows, dim, c.tpr_shift, eps);
  }
  return last_error();
}

// The backward's main kernel (its all-aligned variant) and dynamic shared memory, from the config.
template <typename T, typename G>
void backward_kernel_for(const Config& c, int padded_dim, const void** kernel, size_t* smem) {
  if (c.cpt == 0) {
    *kernel = reinterpret_cast<const void*>(backward_loop_kernel<T, G>);
    *smem = 0;
    return;
  }
  *kernel = c.cpt == 2 ? reinterpret_cast<const void*>(backward_kernel<T, G, 2, true>)
                       : reinterpret_cast<const void*>(backward_kernel<T, G, 4, true>);
  *smem = c.rows_per_block > 1 ? size_t(c.rows_per_block) * padded_dim * sizeof(float) : 0;
}

template <typename T, typename G>
const char* plan_backward(const Config& c, int64_t rows, int64_t* parts, int64_t* rows_per_part,
                          int64_t* padded_dim, bool* zero_workspace) {
  *padded_dim = int64_t(c.nchunks) * c.vec;
  *zero_workspace = c.cpt == 0;
  if (rows == 0) {
    *parts = 0;
    *rows_per_part = 0;
    return nullptr;
  }
  const void* kernel;
  size_t smem;
  backward_kernel_for<T, G>(c, int(*padded_dim), &kernel, &smem);
  int device = 0;
  int sms = 0;
  int per_sm = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, c.threads, smem) != cudaSuccess) {
    return last_error();
  }
  // One wave of equal partitions: each resident block walks its own contiguous rows, so no block waits
  // on a tail and the workspace stays small (parts x dim fp32). This is the only place the device
  // enters: dw's summation grouping depends on the multiprocessor count, so dw is bitwise identical
  // run to run on one device model, not across models. dx does not depend on it.
  const int64_t slots = int64_t(sms > 0 ? sms : 1) * (per_sm > 0 ? per_sm : 1);
  const int64_t steps = (rows + c.rows_per_block - 1) / c.rows_per_block;
  const int64_t wanted = steps < slots ? steps : slots;
  // Whole steps per partition, so only the last partition has idle row groups.
  const int64_t per_part = (rows + wanted - 1) / wanted;
  *rows_per_part = (per_part + c.rows_per_block - 1) / c.rows_per_block * c.rows_per_block;
  *parts = (rows + *rows_per_part - 1) / *rows_per_part;
  return nullptr;
}

template <typename T, typename G, int CPT>
void backward_registers(bool aligned, unsigned parts, int threads, size_t smem, cudaStream_t stream,
                        const G* dy, int64_t dy_stride, const T* x, int64_t x_stride, const T* w,
                        const float* rstd, T* dx, int64_t dx_stride, float* ws, int padded_dim, int64_t rows,
                        int64_t rows_per_part, int dim, int tpr_shift) {
  auto kernel = aligned ? backward_kernel<T, G, CPT, true> : backward_kernel<T, G, CPT, false>;
  kernel<<<parts, threads, smem, stream>>>(dy, dy_stride, x, x_stride, w, rstd, dx, dx_stride, ws, padded_dim,
                                           rows, rows_per_part, dim, tpr_shift);
}

template <typename T, typename G>
const char* launch_backward(const Config& c, const G* dy, int64_t dy_stride, const T* x, int64_t x_stride,
                            const T* w, const float* rstd, T* dx, int64_t dx_stride, float* workspace,
                            int64_t parts, int64_t rows_per_part, int64_t padded_dim, T* dw, int64_t rows,
                            int dim, cudaStream_t stream) {
  if (rows == 0) return nullptr;
  if (parts <= 0 || parts > INT_MAX || rows_per_part <= 0 || parts * rows_per_part < rows)
    return "rmsnorm: the backward's partition does not cover the rows";
  float* ws = dw == nullptr ? nullptr : workspace;
  if (c.cpt == 0) {
    backward_loop_kernel<T, G><<<unsigned(parts), c.threads, 0, stream>>>(
        dy, dy_stride, x, x_stride, w, rstd, dx, dx_stride, ws, int(padded_dim), rows, rows_per_part, dim);
  } else {
    const void* unused;
    size_t smem;
    backward_kernel_for<T, G>(c, int(padded_dim), &unused, &smem);
    const bool aligned = dim % c.vec == 0 && rows_aligned16<G>(dy, dy_stride, rows) &&
                         rows_aligned16<T>(x, x_stride, rows) && host_aligned16(w) &&
                         rows_aligned16<T>(dx, dx_stride, rows);
    if (c.cpt == 2) {
      backward_registers<T, G, 2>(aligned, unsigned(parts), c.threads, smem, stream, dy, dy_stride, x, x_stride,
                                  w, rstd, dx, dx_stride, ws, int(padded_dim), rows, rows_per_part, dim,
                                  c.tpr_shift);
    } else {
      backward_registers<T, G, 4>(aligned, unsigned(parts), c.threads, smem, stream, dy, dy_stride, x, x_stride,
                                  w, rstd, dx, dx_stride, ws, int(padded_dim), rows, rows_per_part, dim,
                                  c.tpr_shift);
    }
  }
  if (const char* err = last_error()) return err;
  if (dw == nullptr) return nullptr;
  const dim3 block(kFinalCols, kFinalSplits);
  const unsigned grid = unsigned((dim + kFinalCols - 1) / kFinalCols);
  dw_final_kernel<T><<<grid, block, 0, stream>>>(workspace, parts, int(padded_dim), dim, dw);
  return last_error();
}

const char* check_dim(int64_t dim) {
  // Column indices are int inside the kernels; a pack may reach 16 elements past the row's end.
  if (dim < 1 || dim > INT_MAX - 64) return "rmsnorm: dim must be between 1 and 2^31 - 65";
  return nullptr;
}

}  // namespace

const char* forward(DType dtype, bool out_fp32, const void* x, int64_t x_stride, const void* w, void* y,
                    int64_t y_stride, float* rstd, int64_t rows, int64_t dim, float eps, void* stream) {
  if (const char* err = check_dim(dim)) return err;
  if (rows == 0) return nullptr;
  const Config c = forward_config(dtype, int(dim));
  auto s = static_cast<cudaStream_t>(stream);
  return dispatch(dtype, [&](auto tag) -> const char* {
    using T = typename decltype(tag)::type;
    if (out_fp32)
      return launch_forward<T, float>(c, static_cast<const T*>(x), x_stride, static_cast<const T*>(w),
                                      static_cast<float*>(y), y_stride, rstd, rows, int(dim), eps, s);
    return launch_forward<T, T>(c, static_cast<const T*>(x), x_stride, static_cast<const T*>(w),
                                static_cast<T*>(y), y_stride, rstd, rows, int(dim), eps, s);
  });
}

const char* backward_plan(DType dtype, bool dy_fp32, int64_t rows, int64_t dim, int64_t* parts,
                          int64_t* rows_per_part, int64_t* padded_dim, bool* zero_workspace) {
  if (const char* err = check_dim(dim)) return err;
  const Config c = backward_config(dtype, int(dim));
  return dispatch(dtype, [&](auto tag) -> const char* {
    using T = typename decltype(tag)::type;
    if (dy_fp32) return plan_backward<T, float>(c, rows, parts, rows_per_part, padded_dim, zero_workspace);
    return plan_backward<T, T>(c, rows, parts, rows_per_part, padded_dim, zero_workspace);
  });
}

const char* backward(DType dtype, bool dy_fp32, const void* dy, int64_t dy_stride, const void* x,
                     int64_t x_stride, const void* w, const float* rstd, void* dx, int64_t dx_stride,
                     float* workspace, int64_t parts, int64_t rows_per_part, int64_t padded_dim, void* dw,
                     int64_t rows, int64_t dim, void* stream) {
  if (const char* err = check_dim(dim)) return err;
  const Config c = backward_config(dtype, int(dim));
  auto s = static_cast<cudaStream_t>(stream);
  return dispatch(dtype, [&](auto tag) -> const char* {
    using T = typename decltype(tag)::type;
    if (dy_fp32)
      return launch_backward<T, float>(c, static_cast<const float*>(dy), dy_stride, static_cast<const T*>(x),
                                       x_stride, static_cast<const T*>(w), rstd, static_cast<T*>(dx),
                                       dx_stride, workspace, parts, rows_per_part, padded_dim,
                                       static_cast<T*>(dw), rows, int(dim), s);
    return launch_backward<T, T>(c, static_cast<const T*>(dy), dy_stride, static_cast<const T*>(x), x_stride,
                                 static_cast<const T*>(w), rstd, static_cast<T*>(dx), dx_stride, workspace,
                                 parts, rows_per_part, padded_dim, static_cast<T*>(dw), rows, int(dim), s);
  });
}

}  // namespace rmsnorm
