// RMSNorm kernels that reduce every row in the contract's canonical order, so that their bits equal the
// native reference's (and the Triton kernels') on every input, and cannot depend on the batch.
//
// The canonical order (CONTRACT.md): squares formed in fp32; the row padded with zeros to
// P = max(8, next power of two >= dim) and cut into G = P / 8 groups of 8 consecutive elements (one 16-byte
// vector of bf16/fp16, two of fp32); each group reduced by halving (v[0:4] + v[4:8], then [0:2] + [2:4],
// then [0] + [1]); the group sums reduced by halving (r[0:G/2] + r[G/2:G], ...). Here thread t of the T
// threads of a row owns groups t, t + T, ..., t + (K-1)T: the first log2(K) levels over the groups pair
// m with m + K/2 in its registers, the remaining ones pair thread t with t + T/2: across warps through
// shared memory, then across lanes by an xor butterfly. A row whose groups do not fit in registers is
// streamed, its groups visited in bit-reversed order, which turns the halving tree into a pairwise tree a
// small stack can build (see `Stack`).
//
// Every multiply and add is a correctly rounded intrinsic (__fmul_rn, __fadd_rn: never contracted into an
// FMA, never reassociated), the square root and the divisions are correctly rounded (__fsqrt_rn, __fdiv_rn:
// the mean, and inv = 1 / rms once per row, which every element then multiplies by, as the canonical
// order's normalize step says), and the build adds -fmad=false besides. So a row has exactly one possible
// result, whatever the launch, and the launch configuration is a function of (dim, dtype) alone.
//
// No torch headers here: this file compiles with nvcc alone.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "rmsnorm.h"

namespace rmsnorm {
namespace {

// The canonical group: 8 consecutive elements of a row.
constexpr int kGroup = 8;
// Threads per block of the register kernels. Rows narrower than this share a block, so that small dims
// (head_dim 128) still keep enough bytes in flight per block to stream at copy speed.
constexpr int kBlockThreads = 256;
// Threads per row of the backward's register kernel, which holds the row's x and dy: at most one block.
constexpr int kBackwardMaxThreadsPerRow = kBlockThreads;
// Threads per row (and per block) of the streaming kernels for rows too long for registers.
constexpr int kLoopThreads = 512;
// Deepest stack a streamed row needs: log2(groups per thread) + 1 <= 32.
constexpr int kMaxStack = 32;
// The dw reduction over chunks: a 32 x 32 block, 32 columns by 32 interleaved running sums.
constexpr int kFinalCols = 32;
constexpr int kFinalSplits = 32;
// dw: rows are cut into chunks of rows_per_block * steps rows; steps doubles (up to kMaxSteps) from the
// fewest that make a chunk kMinChunkRows rows until at most kMaxChunks chunks cover the batch. More chunks
// spread the batch over more blocks, fewer chunks write and re-read less workspace (chunks x dim fp32).
constexpr int kMaxChunks = 1024;
constexpr int kMaxSteps = 64;
// Sets of rows each forward block handles in turn, reading one set ahead (see forward_kernel). Measured on
// an H200 (bf16, two groups a thread, fraction of a copy), with the per-element division: 0.893 / 0.898 at
// 65536 x 4096 / 2097152 x 128 with 4 sets, 0.678 / 0.790 with 1, 0.881 / 0.918 with 8; with the
// reciprocal: 0.900 / 0.913 with 4 sets, 0.880 / 0.896 with 2, 0.873 / 0.898 with 8.
constexpr int kForwardRowSets = 4;
// A chunk's workspace row (dim fp32, written and read back) stays under a tenth of its rows' traffic.
constexpr int kMinChunkRows = 16;

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
template <int N>
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
      default:
        warps_tree<N, 16>(v, buf, base);
        break;
    }
  }
  const int width = tpr < 32 ? tpr : 32;
  for (int offset = width >> 1; offset > 0; offset >>= 1)
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
// Forward. The output element is y = (x * inv) * w' rounded once to the output dtype, where w' is w
// (kPlain), 1 + w formed in fp32 (kOffset), or absent (kUnweighted). kFusedAdd first forms
// s = x + residual in fp32, rounds it to the residual's dtype (x's), stores it as residual_out, and
// normalizes s as stored, as kPlain.

enum class Mode : int { kPlain, kOffset, kUnweighted, kFusedAdd };

// Register kernel blocks resident per multiprocessor the forward is compiled for. A thread holds its groups
// of the current row, of the next one (read ahead) and of the weight: with up to 64 bytes of x a thread
// (32 bytes for the fused add, which holds the residual's too) that fits 80 registers, three blocks; with
// more, two blocks (128 registers), which those rows need to hold their data unspilled.
template <typename T, int K, Mode M>
constexpr int forward_blocks_per_sm() {
  return K * int(sizeof(T)) > (M == Mode::kFusedAdd ? 4 : 8) ? 2 : 3;
}

struct ForwardArgs {
  const void* x;
  int64_t x_stride;
  const void* residual;  // kFusedAdd
  int64_t residual_stride;
  const void* w;  // unused by kUnweighted
  void* y;
  int64_t y_stride;
  void* residual_out;  // kFusedAdd; may alias residual (and y may alias x): each thread reads its own
  int64_t residual_out_stride;  // elements before it writes them
  int64_t rows;
  int dim;
  int tpr_shift;  // log2(threads per row)
  int groups_shift;  // streaming kernel: log2(groups per thread)
  int row_sets;      // register kernel: consecutive sets of rows_per_block rows each block handles
  float eps;
};

// The raw groups of this row the thread reads: x, and for kFusedAdd the residual too.
template <typename T, Mode M>
struct RawInput {
  Group<T> x;
  Group<T> r;  // kFusedAdd only
};

template <typename T, Mode M>
__device__ __forceinline__ void load_raw(RawInput<T, M>& in, const ForwardArgs& a, int64_t row, int base,
                                         int limit) {
  const T* xr = static_cast<const T*>(a.x) + row * a.x_stride;
  load_group<T, Cache::kStream>(in.x, xr, base, limit, aligned16(xr));
  if constexpr (M == Mode::kFusedAdd) {
    const T* rr = static_cast<const T*>(a.residual) + row * a.residual_stride;
    load_group<T, Cache::kStream>(in.r, rr, base, limit, aligned16(rr));
  }
}

// The input group the row is normalized from: x, or for kFusedAdd s = x + residual rounded, which it stores
// as residual_out.
template <typename T, Mode M>
__device__ __forceinline__ void finish_input(Group<T>& g, const RawInput<T, M>& in, const ForwardArgs& a,
                                             int64_t row, int base, int limit) {
  if constexpr (M == Mode::kFusedAdd) {
#pragma unroll
    for (int j = 0; j < kGroup; ++j) g.set(j, __fadd_rn(in.x.get(j), in.r.get(j)));
    T* out = static_cast<T*>(a.residual_out) + row * a.residual_out_stride;
    store_group<T, Cache::kStream>(g, out, base, limit, aligned16(out));
  } else {
    g = in.x;
  }
}

// The group of this row the thread holds as its input: x, or for kFusedAdd s = x + residual rounded and
// stored as residual_out.
template <typename T, Mode M>
__device__ __forceinline__ void load_input(Group<T>& g, const ForwardArgs& a, int64_t row, int base, int limit) {
  const T* xr = static_cast<const T*>(a.x) + row * a.x_stride;
  load_group<T, Cache::kStream>(g, xr, base, limit, aligned16(xr));
  if constexpr (M == Mode::kFusedAdd) {
    const T* rr = static_cast<const T*>(a.residual) + row * a.residual_stride;
    Group<T> r;
    load_group<T, Cache::kStream>(r, rr, base, limit, aligned16(rr));
    Group<T> sum;
#pragma unroll
    for (int j = 0; j < kGroup; ++j) sum.set(j, __fadd_rn(g.get(j), r.get(j)));
    g = sum;
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

// The output group from the input group `g` (re-widened with fresh), its weight group and the row's
// inv = 1 / rms: xhat = x * inv, then y = xhat * w', two rounded multiplies.
template <typename T, typename O, Mode M>
__device__ __forceinline__ void store_output(const Group<T>& g, const Group<T>& wg, const ForwardArgs& a,
                                             int64_t row, int base, int limit, float inv) {
  Group<O> out;
#pragma unroll
  for (int j = 0; j < kGroup; ++j) {
    const float n = __fmul_rn(g.fresh(j), inv);
    float v = n;
    if constexpr (M == Mode::kOffset) {
      v = __fmul_rn(n, __fadd_rn(1.0f, wg.fresh(j)));
    } else if constexpr (M != Mode::kUnweighted) {
      v = __fmul_rn(n, wg.fresh(j));
    }
    out.set(j, v);
  }
  O* yr = static_cast<O*>(a.y) + row * a.y_stride;
  store_group<O, Cache::kStream>(out, yr, base, limit, aligned16(yr));
}

// Register kernel: blockDim.x / T rows per set, thread t of a row holds groups t + m T, m < K. A block
// handles row_sets consecutive sets of rows, and reads the next set's rows while it reduces and writes the
// current one, so that its loads stay in flight through the arithmetic (the canonical tree, with a barrier
// per row where a row spans warps, makes a row's compute phase long enough to matter). The weight is read
// once per block and held.
template <typename T, typename O, Mode M, int K>
__global__ void __launch_bounds__(kBlockThreads, (forward_blocks_per_sm<T, K, M>())) forward_kernel(const ForwardArgs a) {
  __shared__ float scratch[2 * kBlockThreads];
  const int tpr = 1 << a.tpr_shift;
  const int t = threadIdx.x & (tpr - 1);
  const int rows_per_set = blockDim.x >> a.tpr_shift;
  const int64_t first_set_row = int64_t(blockIdx.x) * a.row_sets * rows_per_set;
  const int64_t my_row = first_set_row + (threadIdx.x >> a.tpr_shift);

  Group<T> wg[K];
#pragma unroll
  for (int m = 0; m < K; ++m) load_weight<T, M>(wg[m], a, (t + m * tpr) * kGroup, a.dim);

  RawInput<T, M> next[K];
  {
    const bool valid = my_row < a.rows;
#pragma unroll
    for (int m = 0; m < K; ++m) load_raw<T, M>(next[m], a, valid ? my_row : 0, (t + m * tpr) * kGroup, valid ? a.dim : 0);
  }
#pragma unroll 1
  for (int set = 0; set < a.row_sets; ++set) {
    // A block-uniform exit: every thread leaves together, so the barriers stay matched.
    if (first_set_row + int64_t(set) * rows_per_set >= a.rows) break;
    const int64_t row_raw = my_row + int64_t(set) * rows_per_set;
    // Threads past the last row take part in the row tree's shuffles and barrier with an empty row.
    const bool valid = row_raw < a.rows;
    const int64_t row = valid ? row_raw : 0;
    const int limit = valid ? a.dim : 0;
    RawInput<T, M> cur[K];
#pragma unroll
    for (int m = 0; m < K; ++m) cur[m] = next[m];
    const int64_t ahead = row_raw + rows_per_set;
    if (set + 1 < a.row_sets) {
      const bool ahead_valid = ahead < a.rows;
#pragma unroll
      for (int m = 0; m < K; ++m)
        load_raw<T, M>(next[m], a, ahead_valid ? ahead : 0, (t + m * tpr) * kGroup, ahead_valid ? a.dim : 0);
    }
    Group<T> g[K];
    float part[K];
#pragma unroll
    for (int m = 0; m < K; ++m) finish_input<T, M>(g[m], cur[m], a, row, (t + m * tpr) * kGroup, limit);
#pragma unroll
    for (int m = 0; m < K; ++m) part[m] = group_sum_of_squares(g[m]);
    float total[1] = {thread_tree<K>(part)};
    row_tree<1>(total, a.tpr_shift, scratch, set & 1);
    const float inv = reciprocal(root_mean(total[0], a.dim, a.eps));
#pragma unroll
    for (int m = 0; m < K; ++m) store_output<T, O, M>(g[m], wg[m], a, row, (t + m * tpr) * kGroup, limit, inv);
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

// ---------------------------------------------------------------------------------------------------
// Backward. With g the output gradient (in fp32), w the weight and x the input, per row:
//   rms = the forward's, recomputed in the canonical order (the kernel reads x anyway);
//   c = sum of (g * w) * x in the canonical order;
//   inv = 1 / rms (correctly rounded, once a row);
//   dx = ((g * w) - x * ((c / dim) / (rms * rms))) * inv;
//   the row's dw term = g * (x * inv).
// dx is per row with a thread mapping fixed by (dim, dtype): batch-invariant like the forward.
// dw has no atomics, and its order depends on (rows, dim, dtype) only: the rows are cut into chunks of
// rows_per_block * steps consecutive rows; in a chunk, row group j of the block sums rows
// first + j, first + j + rows_per_block, ... in that order, from +0.0; the block adds its row groups' sums
// in group order into the chunk's workspace row; dw_final_kernel adds the chunks (see there). No device
// property enters, so dw is the same on every GPU. It is not the reference's canonical row tree: that
// tree's subtrees are rows strided across the whole batch, which a copy-speed kernel cannot sum without
// per-column state for every level; dx, which the batch-invariance rules judge, is bitwise the reference's.

struct BackwardArgs {
  const void* dy;
  int64_t dy_stride;
  const void* x;
  int64_t x_stride;
  const void* w;
  void* dx;
  int64_t dx_stride;
  float* workspace;  // [chunks, dim] fp32, or null when dw is not wanted
  int64_t rows;
  int dim;
  int tpr_shift;
  int groups_shift;  // streaming kernel
  int steps;         // rows per row group per chunk
  float eps;
};

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

// 8 fp32 sums in shared memory (16-byte aligned) plus 8 terms, in place.
__device__ __forceinline__ void accumulate8(float* sums, const float (&terms)[kGroup]) {
  float4* p = reinterpret_cast<float4*>(sums);
  float4 a = p[0];
  float4 b = p[1];
  a.x = __fadd_rn(a.x, terms[0]);
  a.y = __fadd_rn(a.y, terms[1]);
  a.z = __fadd_rn(a.z, terms[2]);
  a.w = __fadd_rn(a.w, terms[3]);
  b.x = __fadd_rn(b.x, terms[4]);
  b.y = __fadd_rn(b.y, terms[5]);
  b.z = __fadd_rn(b.z, terms[6]);
  b.w = __fadd_rn(b.w, terms[7]);
  p[0] = a;
  p[1] = b;
}

// Register kernel: each row group of the block walks `steps` rows of the chunk; its dw sums live in shared
// memory (its own slice, which only its own threads touch until the end), so that the registers hold only
// the row's x and dy.
template <typename T, typename G, int K>
__global__ void __launch_bounds__(kBackwardMaxThreadsPerRow) backward_kernel(const BackwardArgs a) {
  __shared__ float scratch[2 * 2 * kBackwardMaxThreadsPerRow];
  extern __shared__ float4 group_sums_raw[];  // [row groups][K * T * 8] fp32, when dw is wanted
  float* group_dw = reinterpret_cast<float*>(group_sums_raw);

  const int tpr = 1 << a.tpr_shift;
  const int t = threadIdx.x & (tpr - 1);
  const int rg = threadIdx.x >> a.tpr_shift;
  const int row_groups = blockDim.x >> a.tpr_shift;
  const int width = K * tpr * kGroup;
  const int64_t first = int64_t(blockIdx.x) * row_groups * a.steps;
  const T* w = static_cast<const T*>(a.w);
  const bool w_vec = aligned16(w);
  const bool want_dw = a.workspace != nullptr;
  float* mine = group_dw + rg * width;
  if (want_dw) {
#pragma unroll
    for (int m = 0; m < K; ++m) {
      float4* p = reinterpret_cast<float4*>(mine + (t + m * tpr) * kGroup);
      p[0] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      p[1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  }

#pragma unroll 1
  for (int s = 0; s < a.steps; ++s) {
    const int64_t row_raw = first + int64_t(s) * row_groups + rg;
    const bool valid = row_raw < a.rows;
    const int64_t row = valid ? row_raw : 0;
    const int limit = valid ? a.dim : 0;
    const T* xr = static_cast<const T*>(a.x) + row * a.x_stride;
    const G* gr = static_cast<const G*>(a.dy) + row * a.dy_stride;
    const bool x_vec = aligned16(xr);
    const bool g_vec = aligned16(gr);
    Group<T> xg[K];
    Group<G> gg[K];
#pragma unroll
    for (int m = 0; m < K; ++m) load_group<T, Cache::kStream>(xg[m], xr, (t + m * tpr) * kGroup, limit, x_vec);
#pragma unroll
    for (int m = 0; m < K; ++m) load_group<G, Cache::kStream>(gg[m], gr, (t + m * tpr) * kGroup, limit, g_vec);

    float sq[K];
    float gwx[K];
#pragma unroll
    for (int m = 0; m < K; ++m) {
      // The weight is read again (from L1) where it is needed rather than held across the row tree.
      Group<T> wg;
      load_group<T, Cache::kReadOnly>(wg, w, (t + m * tpr) * kGroup, limit, w_vec);
      float both[2];
      group_sums(xg[m], gg[m], wg, both);
      sq[m] = both[0];
      gwx[m] = both[1];
    }
    float sums[2] = {thread_tree<K>(sq), thread_tree<K>(gwx)};
    row_tree<2>(sums, a.tpr_shift, scratch, s & 1);
    const RowFactors f = row_factors(sums, a.dim, a.eps);

    T* dxr = static_cast<T*>(a.dx) + row * a.dx_stride;
    const bool dx_vec = aligned16(dxr);
#pragma unroll
    for (int m = 0; m < K; ++m) {
      Group<T> wg;
      load_group<T, Cache::kReadOnly>(wg, w, (t + m * tpr) * kGroup, limit, w_vec);
      Group<T> out;
      float terms[kGroup];
      group_grads(xg[m], gg[m], wg, f, out, terms, want_dw && valid);
      store_group<T, Cache::kStream>(out, dxr, (t + m * tpr) * kGroup, limit, dx_vec);
      if (want_dw && valid) accumulate8(mine + (t + m * tpr) * kGroup, terms);
    }
  }

  if (!want_dw) return;
  // The chunk's sums: the row groups' added in group order, into the chunk's workspace row.
  __syncthreads();
  float* chunk_row = a.workspace + int64_t(blockIdx.x) * a.dim;
  for (int col = threadIdx.x; col < a.dim; col += blockDim.x) {
    float total = group_dw[col];
    for (int j = 1; j < row_groups; ++j) total = __fadd_rn(total, group_dw[j * width + col]);
    chunk_row[col] = total;
  }
}

// Streaming backward for rows too long for registers: one block of kLoopThreads threads walks the chunk's
// `steps` rows in order; the first pass over a row builds both trees, the second writes dx and adds the
// dw terms into the chunk's workspace row, which only this thread touches at those columns.
template <typename T, typename G>
__global__ void __launch_bounds__(kLoopThreads) backward_loop_kernel(const BackwardArgs a) {
  __shared__ float scratch[2 * 2 * kLoopThreads];
  const int tpr = blockDim.x;
  const int t = threadIdx.x;
  const int groups = 1 << a.groups_shift;
  const T* w = static_cast<const T*>(a.w);
  const bool w_vec = aligned16(w);
  float* chunk_row = a.workspace == nullptr ? nullptr : a.workspace + int64_t(blockIdx.x) * a.dim;
  const bool ws_vec = chunk_row != nullptr && aligned16(chunk_row);
  const int64_t first = int64_t(blockIdx.x) * a.steps;

  for (int s = 0; s < a.steps; ++s) {
    // A block-uniform condition: every thread leaves together, so the barriers stay matched.
    const int64_t row = first + s;
    if (row >= a.rows) break;
    const T* xr = static_cast<const T*>(a.x) + row * a.x_stride;
    const G* gr = static_cast<const G*>(a.dy) + row * a.dy_stride;
    const bool x_vec = aligned16(xr);
    const bool g_vec = aligned16(gr);
    Stack<2> stack;
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
      stack.push(both, mp);
    }
    float sums[2] = {stack.s[0][0], stack.s[1][0]};
    row_tree<2>(sums, __ffs(tpr) - 1, scratch, s & 1);
    const RowFactors f = row_factors(sums, a.dim, a.eps);

    T* dxr = static_cast<T*>(a.dx) + row * a.dx_stride;
    const bool dx_vec = aligned16(dxr);
    for (int m = 0; m < groups; ++m) {
      const int base = (t + m * tpr) * kGroup;
      Group<T> xg;
      Group<G> gg;
      Group<T> wg;
      load_group(xg, xr, base, a.dim, x_vec);
      load_group(gg, gr, base, a.dim, g_vec);
      load_group(wg, w, base, a.dim, w_vec);
      float terms[kGroup];
      Group<T> out;
      group_grads(xg, gg, wg, f, out, terms, chunk_row != nullptr);
      store_group(out, dxr, base, a.dim, dx_vec);
      if (chunk_row != nullptr) {
        Group<float> acc;
        if (s == 0) {
#pragma unroll
          for (int j = 0; j < kGroup; ++j) acc.u[j] = 0u;  // +0.0: the first row's terms are added to it
        } else {
          load_group(acc, chunk_row, base, a.dim, ws_vec);
        }
#pragma unroll
        for (int j = 0; j < kGroup; ++j) acc.set(j, __fadd_rn(acc.get(j), terms[j]));
        store_group(acc, chunk_row, base, a.dim, ws_vec);
      }
    }
  }
}

// dw[col] = the sum over chunks q of workspace[q, col]: thread (tx, ty) adds chunks ty, ty + 32, ... in
// order, then thread (tx, 0) adds the 32 running sums in order of ty.
template <typename T>
__global__ void __launch_bounds__(kFinalCols* kFinalSplits)
    dw_final_kernel(const float* __restrict__ workspace, int64_t chunks, int dim, T* __restrict__ dw) {
  __shared__ float sums[kFinalSplits][kFinalCols + 1];
  const int col = blockIdx.x * kFinalCols + threadIdx.x;
  float s = 0.0f;
  if (col < dim)
    for (int64_t q = threadIdx.y; q < chunks; q += kFinalSplits) s = __fadd_rn(s, workspace[q * dim + col]);
  sums[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && col < dim) {
    float total = sums[0][threadIdx.x];
    for (int i = 1; i < kFinalSplits; ++i) total = __fadd_rn(total, sums[i][threadIdx.x]);
    reinterpret_cast<RawOf<T>*>(dw)[col] = RawOf<T>(Bits<T>::from_float(total));
  }
}

// ---------------------------------------------------------------------------------------------------
// Launch configuration: a function of (dim, element size) only, never of the number of rows (the
// backward's dw chunking alone looks at the rows; it changes no dx bit).

struct Config {
  int k;               // groups per thread held in registers (1, 2 or 4), or 0: the streaming kernels
  int tpr_shift;       // log2(threads per row)
  int groups_shift;    // streaming kernels: log2(groups per thread)
  int threads;         // threads per block
  int rows_per_block;  // rows a block handles at once
  int row_sets;        // forward register kernel: sets of rows_per_block rows a block handles in turn
};

int log2_floor(int64_t v) {
  int s = 0;
  while ((int64_t(1) << (s + 1)) <= v) ++s;
  return s;
}

// `k_wanted` groups per thread, more only when the row would need more than `max_tpr` threads, up to
// `k_max`; beyond that the streaming kernels.
Config make_config(int dim, int k_wanted, int k_max, int max_tpr) {
  Config c{};
  int64_t padded = kGroup;
  while (padded < dim) padded <<= 1;
  const int64_t groups = padded / kGroup;
  int64_t k = groups < k_wanted ? groups : k_wanted;
  while (groups / k > max_tpr && k < k_max) k <<= 1;
  if (groups / k > max_tpr) {
    c.k = 0;
    c.tpr_shift = log2_floor(kLoopThreads);
    c.groups_shift = log2_floor(groups / kLoopThreads);
    c.threads = kLoopThreads;
    c.rows_per_block = 1;
    return c;
  }
  c.k = int(k);
  c.tpr_shift = log2_floor(groups / k);
  c.threads = (1 << c.tpr_shift) < kBlockThreads ? kBlockThreads : (1 << c.tpr_shift);
  c.rows_per_block = c.threads >> c.tpr_shift;
  return c;
}

// Two groups a thread (32 bytes of x for 16-bit elements, 64 for fp32), four for rows wider than 256
// threads hold that way (8192 elements), the streaming kernels beyond. Measured on an H200 with the
// reciprocal (bf16, fraction of a copy in the same process, benchmarks/forward_tuning.py): forward with two
// groups and 4 row sets 0.900 at 65536 x 4096 and 0.913 at 2097152 x 128; four groups and 2 sets 0.919 /
// 0.856; one group and 4 sets 0.900 (two groups there) / 0.866.
// A tuning sweep's override of the register kernel's (groups a thread wanted, row sets), read once per
// process from RMSNORM_CUDA_FORWARD_CONFIG (forward, forward_fp32, the weight variants) and
// RMSNORM_CUDA_FUSED_ADD_CONFIG (the fused add) as "k,sets", k in 1, 2, 4 and sets in 1..64; anything else
// is ignored. No value changes a bit: every spread of a row's groups over threads computes the canonical
// tree, and the configuration stays a function of (dim, dtype) within the process.
struct ForwardTuning {
  int k = 0;     // 0: the default
  int sets = 0;  // 0: the default
};

ForwardTuning read_forward_tuning(const char* name) {
  ForwardTuning t;
  const char* text = std::getenv(name);
  if (text == nullptr) return t;
  char* end = nullptr;
  const long k = std::strtol(text, &end, 10);
  if (end == text || *end != ',') return t;
  const char* rest = end + 1;
  const long sets = std::strtol(rest, &end, 10);
  if (end == rest || *end != '\0') return t;
  if ((k == 1 || k == 2 || k == 4) && sets >= 1 && sets <= 64) {
    t.k = int(k);
    t.sets = int(sets);
  }
  return t;
}

// The fused add's own default, from the same sweep (benchmarks/forward_tuning.py on an H200, bf16, fraction of
// a copy): one group a thread and 4 row sets where a row fits 256 threads that way (0.957 at 2097152 x 128,
// against 0.910 with two groups), four groups and 2 sets for wider rows (0.933 at 65536 x 4096, against
// 0.906 with two groups and 4 sets). Only those two dims were measured; the rule between them is a guess.
ForwardTuning fused_add_default(int dim) {
  int64_t padded = kGroup;
  while (padded < dim) padded <<= 1;
  return padded / kGroup <= kBlockThreads ? ForwardTuning{1, 4} : ForwardTuning{4, 2};
}

Config forward_config(DType d, int dim, bool fused_add) {
  static const ForwardTuning plain = read_forward_tuning("RMSNORM_CUDA_FORWARD_CONFIG");
  static const ForwardTuning fused = read_forward_tuning("RMSNORM_CUDA_FUSED_ADD_CONFIG");
  ForwardTuning t = fused_add ? fused : plain;
  if (fused_add && t.k == 0) t = fused_add_default(dim);
  Config c = make_config(dim, t.k != 0 ? t.k : 2, 4, kBlockThreads);
  c.row_sets = c.k == 0 ? 1 : (t.sets != 0 ? t.sets : kForwardRowSets);
  return c;
}

// The backward holds x and dy per group: two groups a thread for fp32, and for 16-bit elements two below
// 64 groups a row (more rows a block, shorter row trees: 0.627 against 0.593 of copy at 2097152 x 128 bf16
// on an H200) and four from there (fewer, longer rows: 0.620 against 0.579 at 65536 x 4096).
Config backward_config(DType d, int dim) {
  const bool wide = d == DType::kFloat32;
  int64_t padded = kGroup;
  while (padded < dim) padded <<= 1;
  const int k = wide || padded / kGroup < 64 ? 2 : 4;
  return make_config(dim, k, k, kBackwardMaxThreadsPerRow);
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

template <typename T, typename O, Mode M>
const char* launch_forward(const Config& c, const ForwardArgs& a, cudaStream_t stream) {
  if (c.k == 0) {
    if (a.rows > INT_MAX) return "rmsnorm: too many rows for the streaming kernel";
    forward_loop_kernel<T, O, M><<<unsigned(a.rows), c.threads, 0, stream>>>(a);
    return last_error();
  }
  const int64_t per_block = int64_t(c.rows_per_block) * a.row_sets;
  const int64_t blocks = (a.rows + per_block - 1) / per_block;
  if (blocks > INT_MAX) return "rmsnorm: too many rows for one launch";
  switch (c.k) {
    case 1:
      forward_kernel<T, O, M, 1><<<unsigned(blocks), c.threads, 0, stream>>>(a);
      break;
    case 2:
      forward_kernel<T, O, M, 2><<<unsigned(blocks), c.threads, 0, stream>>>(a);
      break;
    default:
      forward_kernel<T, O, M, 4><<<unsigned(blocks), c.threads, 0, stream>>>(a);
      break;
  }
  return last_error();
}

// Rows per row group per dw chunk: the fewest (a power of two up to kMaxSteps, giving chunks of at least
// kMinChunkRows rows) that cover the batch with at most kMaxChunks chunks.
int64_t dw_steps(const Config& c, int64_t rows) {
  int64_t steps = 1;
  while (steps < kMaxSteps && (c.rows_per_block * steps < kMinChunkRows ||
                               (rows + c.rows_per_block * steps - 1) / (c.rows_per_block * steps) > kMaxChunks))
    steps <<= 1;
  return steps;
}

template <typename T, typename G>
const char* launch_backward(const Config& c, BackwardArgs a, int64_t chunks, T* dw, cudaStream_t stream) {
  if (a.rows == 0) return nullptr;
  if (chunks <= 0 || chunks > INT_MAX || chunks * c.rows_per_block * a.steps < a.rows)
    return "rmsnorm: the backward's chunks do not cover the rows";
  if (dw == nullptr) a.workspace = nullptr;
  if (c.k == 0) {
    backward_loop_kernel<T, G><<<unsigned(chunks), c.threads, 0, stream>>>(a);
  } else {
    const size_t smem = a.workspace != nullptr
                            ? size_t(c.rows_per_block) * c.k * (size_t(1) << a.tpr_shift) * kGroup * sizeof(float)
                            : 0;
    switch (c.k) {
      case 1:
        backward_kernel<T, G, 1><<<unsigned(chunks), c.threads, smem, stream>>>(a);
        break;
      case 2:
        backward_kernel<T, G, 2><<<unsigned(chunks), c.threads, smem, stream>>>(a);
        break;
      default:
        backward_kernel<T, G, 4><<<unsigned(chunks), c.threads, smem, stream>>>(a);
        break;
    }
  }
  if (const char* err = last_error()) return err;
  if (dw == nullptr) return nullptr;
  const dim3 block(kFinalCols, kFinalSplits);
  const unsigned grid = unsigned((a.dim + kFinalCols - 1) / kFinalCols);
  dw_final_kernel<T><<<grid, block, 0, stream>>>(a.workspace, chunks, a.dim, dw);
  return last_error();
}

const char* check_dim(int64_t dim) {
  // Column indices are int inside the kernels, and a padded row may reach twice the dim.
  if (dim < 1 || dim > (int64_t(1) << 29)) return "rmsnorm: dim must be between 1 and 2^29";
  return nullptr;
}

}  // namespace

const char* forward(DType dtype, Variant variant, bool out_fp32, const void* x, int64_t x_stride, const void* w,
                    void* y, int64_t y_stride, int64_t rows, int64_t dim, float eps, void* stream) {
  if (const char* err = check_dim(dim)) return err;
  if (rows == 0) return nullptr;
  if (out_fp32 && variant != Variant::kPlain) return "rmsnorm: fp32 output is for the plain forward only";
  const Config c = forward_config(dtype, int(dim), false);
  ForwardArgs a{};
  a.x = x;
  a.x_stride = x_stride;
  a.w = w;
  a.y = y;
  a.y_stride = y_stride;
  a.rows = rows;
  a.dim = int(dim);
  a.tpr_shift = c.tpr_shift;
  a.groups_shift = c.groups_shift;
  a.row_sets = c.row_sets;
  a.eps = eps;
  auto s = static_cast<cudaStream_t>(stream);
  return dispatch(dtype, [&](auto tag) -> const char* {
    using T = typename decltype(tag)::type;
    switch (variant) {
      case Variant::kOffset:
        return launch_forward<T, T, Mode::kOffset>(c, a, s);
      case Variant::kUnweighted:
        return launch_forward<T, T, Mode::kUnweighted>(c, a, s);
      case Variant::kPlain:
        break;
    }
    return out_fp32 ? launch_forward<T, float, Mode::kPlain>(c, a, s) : launch_forward<T, T, Mode::kPlain>(c, a, s);
  });
}

const char* fused_add(DType dtype, const void* x, int64_t x_stride, const void* residual, int64_t residual_stride,
                      const void* w, void* y, int64_t y_stride, void* residual_out, int64_t residual_out_stride,
                      int64_t rows, int64_t dim, float eps, void* stream) {
  if (const char* err = check_dim(dim)) return err;
  if (rows == 0) return nullptr;
  const Config c = forward_config(dtype, int(dim), true);
  ForwardArgs a{};
  a.x = x;
  a.x_stride = x_stride;
  a.residual = residual;
  a.residual_stride = residual_stride;
  a.w = w;
  a.y = y;
  a.y_stride = y_stride;
  a.residual_out = residual_out;
  a.residual_out_stride = residual_out_stride;
  a.rows = rows;
  a.dim = int(dim);
  a.tpr_shift = c.tpr_shift;
  a.groups_shift = c.groups_shift;
  a.row_sets = c.row_sets;
  a.eps = eps;
  auto s = static_cast<cudaStream_t>(stream);
  return dispatch(dtype, [&](auto tag) -> const char* {
    using T = typename decltype(tag)::type;
    return launch_forward<T, T, Mode::kFusedAdd>(c, a, s);
  });
}

const char* backward_plan(DType dtype, int64_t rows, int64_t dim, int64_t* rows_per_block, int64_t* steps,
                          int64_t* chunks) {
  if (const char* err = check_dim(dim)) return err;
  const Config c = backward_config(dtype, int(dim));
  *rows_per_block = c.rows_per_block;
  *steps = dw_steps(c, rows);
  const int64_t per_chunk = *rows_per_block * *steps;
  *chunks = rows == 0 ? 0 : (rows + per_chunk - 1) / per_chunk;
  return nullptr;
}

const char* backward(DType dtype, bool dy_fp32, const void* dy, int64_t dy_stride, const void* x, int64_t x_stride,
                     const void* w, void* dx, int64_t dx_stride, float* workspace, int64_t chunks, void* dw,
                     int64_t rows, int64_t dim, float eps, void* stream) {
  if (const char* err = check_dim(dim)) return err;
  const Config c = backward_config(dtype, int(dim));
  BackwardArgs a{};
  a.dy = dy;
  a.dy_stride = dy_stride;
  a.x = x;
  a.x_stride = x_stride;
  a.w = w;
  a.dx = dx;
  a.dx_stride = dx_stride;
  a.workspace = workspace;
  a.rows = rows;
  a.dim = int(dim);
  a.tpr_shift = c.tpr_shift;
  a.groups_shift = c.groups_shift;
  a.steps = int(dw_steps(c, rows));
  a.eps = eps;
  auto s = static_cast<cudaStream_t>(stream);
  return dispatch(dtype, [&](auto tag) -> const char* {
    using T = typename decltype(tag)::type;
    if (dy_fp32) return launch_backward<T, float>(c, a, chunks, static_cast<T*>(dw), s);
    return launch_backward<T, T>(c, a, chunks, static_cast<T*>(dw), s);
  });
}

}  // namespace rmsnorm
