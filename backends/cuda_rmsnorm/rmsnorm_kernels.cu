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
// dw follows the same tree with rows in place of elements (the canonical order's "backward dw" step): see
// "Backward" below for how its levels are spread over registers, shared memory, blocks and a final kernel.
//
// Rows reach the arithmetic in one of two ways, the same tree either way. The row kernel (every forward and fused
// add; its lean form for 16-bit rows of exactly the padded width) loads a row's groups straight into registers, one
// set of rows a block, as many blocks as sets: registers alone bound residency and the hardware balances the
// blocks. The staged kernel (the backward) copies each thread's own 16-byte vectors of the rows it will handle a few rows ahead
// into shared memory with cp.async (zero-filled past the row's end), so that the bytes in flight do not depend
// on registers or occupancy. A thread only ever reads back what it copied itself, so the staging needs no
// barrier. Which kernel, how many rows ahead, how many threads a row and a block: a function of (dim, dtype) and
// of the shared memory they fit in; none changes a bit.
//
// Every multiply and add is a correctly rounded intrinsic (__fmul_rn, __fadd_rn: never contracted into an
// FMA, never reassociated), the square root and the divisions are correctly rounded (__fsqrt_rn, __fdiv_rn:
// the mean, and inv = 1 / rms once per row, which every element then multiplies by, as the canonical
// order's normalize step says), and the build adds -fmad=false besides. So a row has exactly one possible
// result, whatever the launch.
//
// No torch headers here: this file compiles with nvcc alone.

//
// The file layout: this file holds the plans (which thread takes which groups, a function of dim and dtype)
// and the entry points of rmsnorm.h; rmsnorm_device.h holds the kernels; each kernel unit (forward_<dtype>.cu,
// fused_add_<dtype>.cu, backward_<dtype>.cu) instantiates one family's launchers for one element type, so that
// a cold build compiles them in parallel. No split changes a kernel's machine code.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <cstdlib>

#include "rmsnorm_plan.h"

namespace rmsnorm {
namespace detail {

// ---------------------------------------------------------------------------------------------------
// Launch configuration: which thread holds which groups is a function of (dim, dtype) only, and no choice
// here (groups a thread, threads a block, rows staged, rows of dw per block, grid size) changes a bit: each
// computes the canonical tree. The dw plan alone looks at the number of rows, to size the tree's padding.

int log2_floor(int64_t v) {
  int s = 0;
  while ((int64_t(1) << (s + 1)) <= v) ++s;
  return s;
}

int64_t padded_width(int64_t n) {
  int64_t padded = kGroup;
  while (padded < n) padded <<= 1;
  return padded;
}

int element_size(DType d) { return d == DType::kFloat32 ? 4 : 2; }

// A tuning sweep's override, read once per process from an environment variable: up to four
// comma-separated non-negative integers (0: the default); anything malformed is ignored. No value changes
// a bit.

Tuning read_tuning(const char* name) {
  Tuning t;
  const char* text = std::getenv(name);
  if (text == nullptr) return t;
  Tuning parsed;
  const char* p = text;
  for (int i = 0; i < 4; ++i) {
    char* end = nullptr;
    const long v = std::strtol(p, &end, 10);
    if (end == p || v < 0 || v > 1 << 20) return t;
    parsed.v[i] = int(v);
    if (*end == '\0') return parsed;
    if (*end != ',') return t;
    p = end + 1;
  }
  return t;
}

// The overrides in force: forward, fused add, backward. Read from the environment at first use; a sweep in
// one process sets them through set_tuning.
Tuning& tuning(int which) {
  static Tuning slots[3] = {read_tuning("RMSNORM_CUDA_FORWARD_CONFIG"), read_tuning("RMSNORM_CUDA_FUSED_ADD_CONFIG"),
                            read_tuning("RMSNORM_CUDA_BACKWARD_CONFIG")};
  return slots[which];
}

int power_of_two_in(int v, int lo, int hi) {
  int p = lo;
  while (p < v && p < hi) p <<= 1;
  return p;
}


// Forward defaults, from a sweep on an H200 (bf16, fraction of a copy): four groups a
// thread for rows of more than 64 groups (0.911 at 65536 x 4096 against 0.905 with eight and 0.882 with two),
// two for narrower ones (0.895 at 2097152 x 128 against 0.861 with four and 0.71 with eight); the fused add
// two everywhere (0.916 / 0.921); 512 threads a block, two rows staged (three or four were no faster); and,
// from a later sweep, a grid of at least ceil(sets / 4) blocks but never fewer than are resident, for the forward
// and the fused add alike (forward 0.943 / 0.939 / 0.909 / 0.913 at 65536 x 4096, 2097152 x 128, 16384 x 8192,
// 4096 x 4096, against 0.914 / 0.898 / 0.880 / 0.913 on a grid of resident blocks and 0.927 / 0.921 / 0.886 /
// 0.888 with at most 8 sets a block; fused add 0.940 / 0.949 / 0.937 / 1.038 against 0.926 / 0.935 / 0.926 /
// 1.034 with 8). Fewer than four groups a thread leave the kernels bound by instruction issue (profiled on an
// H200): the per-row work (index arithmetic, the row tree, the correctly rounded divisions
// and square root, which every thread of a row computes) is spread over too few elements.
// Since a later sweep (H200, bf16 / fp16, fraction of a copy after an L2 flush), the fused add and
// the bf16 and fp32 forwards run the row kernel (no staging, one set of rows a block, plain loads and stores):
// fused add 1.011 / 1.007 / 0.989 / 1.119 at 65536 x 4096, 2097152 x 128, 16384 x 8192, 4096 x 4096 (fp16 1.007 /
// 1.017 / 0.998 / 1.103) against the staged kernel's 0.942 / 0.938 / 0.938 / 1.054, with 256 threads a block and
// groups / 256 groups a thread (one at 128 columns: 0.98 against 0.89 with two); the bf16 forward 1.001 / 0.940 /
// 0.969 / 0.927 against 0.941 / 0.928 / 0.903 / 0.925, with 128 threads a block; the fp32 forward 0.928 / 0.910 /
// 0.873 / 0.793 against staging's 0.628 / 0.704 / 0.610 / 0.553 (fused add 0.874 / 0.938 / 0.938 / 0.912 against
// 0.690 / 0.724 / 0.676 / 0.672). The fp16 forward stays staged: the row kernel ran it at 0.850 at 16384 x 8192
// against staging's 0.907, and keeping each element's fp32 value (one conversion an element instead of two) made it
// slower still (0.708: the registers cost a third of the resident warps).
// Since then the fp16 forward runs the row kernel too, whose lean form (rows of exactly the padded width,
// aligned: no test a group, outputs rounded a pair at a time) took it from the staged kernel's 0.942 / 0.966 / 0.908
// / 0.890 to 0.977 / 1.004 / 0.967 / 0.946, and the staged forward kernel is gone. RMSNORM_CUDA_FORWARD_CONFIG
// (forward, forward_fp32, the weight variants) and RMSNORM_CUDA_FUSED_ADD_CONFIG (the fused add) override the
// defaults as "k,threads,stages,sets": groups a thread and threads a block (stages and sets applied to the staged
// kernel and are ignored). The forward takes 256 threads a block too (benchmarks/kernel_sweep.py --kinds forward on
// an H100, bf16): 0.988 of a copy at 4096 x 4096 against 0.969 with 128 (1.004 / 1.002
// against 1.006 / 1.001 at 65536 x 4096 and 2097152 x 128, within their spread): twice the rows a block, half the
// blocks for the launch to ramp up and drain at a batch that fills the GPU about twice.
ForwardPlan forward_plan(DType d, int dim, bool fused_add) {
  const Tuning tune = tuning(fused_add ? 1 : 0);
  ForwardPlan c{};
  const int64_t padded = padded_width(dim);
  const int64_t groups = padded / kGroup;
  if (padded > kMaxStagedWidth) {
    c.streaming = true;
    c.threads = kLoopThreads;
    c.tpr_shift = log2_floor(kLoopThreads);
    c.groups_shift = log2_floor(groups / kLoopThreads);
    return c;
  }
  int k = tune.v[0] ? power_of_two_in(tune.v[0], 1, kMaxGroupsPerThread)
                    : fused_add ? int(groups / 256 > 1 ? groups / 256 : 1) : (groups <= 64 ? 2 : 4);
  while (k > groups) k >>= 1;
  while (groups / k > kMaxThreads) k <<= 1;
  const int tpr = int(groups / k);
  c.k = k;
  c.tpr_shift = log2_floor(tpr);
  c.threads = power_of_two_in(tune.v[1] ? tune.v[1] : 256, 32, kMaxThreads);
  if (c.threads < tpr) c.threads = tpr;
  return c;
}


// Shared memory the staged backward uses besides its staging: the weight, the dw stack and the row tree's
// scratch.
int backward_fixed_bytes(const BackwardPlan& c, int element_bytes) {
  const int width = c.k * (1 << c.tpr_shift) * kGroup;
  return width * element_bytes + c.run_shift * c.k * 2 * c.threads * 16 + 2 * 2 * c.threads * int(sizeof(float));
}

// Backward defaults: two groups a thread for 16-bit rows, one for fp32 (at most kMaxBackwardThreads threads a
// row: the registers hold three levels of dw's tree, 24 floats a group), at least 256 threads a block, rows of dw
// per block aiming at kRowBytesPerProgram of x but at least kMinPrograms blocks. Rows of 64 threads or more take
// 512 threads a block (two rows at once) from kManyRows rows on: benchmarks/kernel_sweep.py --kinds backward on an
// H100 (bf16) read 0.942 / 0.919 of a copy at 65536 x 4096 / 16384 x 4096 against 0.925 / 0.884 with 256, but
// 0.830 against 0.856 at 4096 x 4096, where the 256 blocks of 512 threads are two waves of one block a
// multiprocessor; 2097152 x 128 the same either way (0.903 / 0.904).
// RMSNORM_CUDA_BACKWARD_CONFIG overrides them as "k,threads,stages,rows per block" (the stages are chosen in
// backward(), where dy's dtype is known). A function of (dtype, rows, dim): the workspace's shape.
BackwardPlan backward_plan_for(DType d, int64_t rows, int dim) {
  const Tuning tune = tuning(2);
  BackwardPlan c{};
  const int64_t padded = padded_width(dim);
  const int64_t groups = padded / kGroup;
  const int64_t padded_rows = padded_width(rows);  // P' before the block's own minimum
  if (padded > kMaxStagedWidth) {
    c.streaming = true;
    c.threads = kLoopThreads;
    c.tpr_shift = log2_floor(kLoopThreads);
    c.groups_shift = log2_floor(groups / kLoopThreads);
    int64_t per_block = padded_rows / kMinPrograms;
    if (per_block < 8) per_block = 8;
    const int64_t total = padded_rows > per_block ? padded_rows : per_block;
    c.run_shift = log2_floor(per_block / 8);
    c.mbits = c.run_shift;
    c.q_shift = log2_floor(total / per_block);
    c.workspace_rows = (int64_t(1) << c.q_shift) * (1 + c.run_shift + 3);
    return c;
  }
  int k = tune.v[0] ? power_of_two_in(tune.v[0], 1, kMaxBackwardGroups) : (element_size(d) == 4 ? 1 : 2);
  while (k > groups) k >>= 1;
  while (groups / k > kMaxBackwardThreads) k <<= 1;
  const int tpr = int(groups / k);
  c.k = k;
  c.tpr_shift = log2_floor(tpr);
  const int wide_rows_threads = tpr >= 64 && padded_rows >= kManyRows ? 512 : 256;
  c.threads = power_of_two_in(tune.v[1] ? tune.v[1] : wide_rows_threads, 32, kMaxBackwardThreads);
  if (c.threads < tpr) c.threads = tpr;
  // No more row slots than row groups: a slot's run is at least a row group, and runs of zero rows cost time.
  while (c.threads > tpr && int64_t(c.threads / tpr) * 8 > padded_rows) c.threads >>= 1;
  const int slots = c.threads / tpr;
  c.slots_shift = log2_floor(slots);
  const int64_t least = int64_t(8) * slots;  // a run is at least one row group a slot
  int64_t target = tune.v[3] ? padded_width(tune.v[3]) : padded_width(kRowBytesPerProgram / (padded * element_size(d)));
  if (target < least) target = least;
  int64_t per_block = padded_rows / kMinPrograms;
  if (per_block > target) per_block = target;
  if (per_block < least) per_block = least;
  c.run_shift = log2_floor(per_block / least);
  // Two stages of the widest staging (dy in fp32) must fit beside the stack.
  const int widest_stage = k * (element_size(d) / 2 + 2) * c.threads * 16;
  while (c.run_shift > 0 && backward_fixed_bytes(c, element_size(d)) + 2 * widest_stage > 200 * 1024) --c.run_shift;
  per_block = least << c.run_shift;
  const int64_t total = padded_rows > per_block ? padded_rows : per_block;
  c.mbits = log2_floor(per_block / 8);
  c.q_shift = log2_floor(total / per_block);
  c.workspace_rows = int64_t(1) << c.q_shift;
  return c;
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

// Blocks of `fn` resident on the whole device at once with `threads` threads and `smem` bytes of dynamic
// shared memory (raising the kernel's shared-memory limit first where it needs more than 48 KB). Cached
// per thread: the query costs more than a small batch's kernel.
const char* resident_blocks(const void* fn, int threads, size_t smem, int64_t* blocks) {
  struct Entry {
    const void* fn;
    int device;
    int threads;
    size_t smem;
    int64_t blocks;
  };
  thread_local Entry cache[64];
  thread_local int used = 0;
  thread_local int next = 0;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return last_error();
  for (int i = 0; i < used; ++i) {
    const Entry& e = cache[i];
    if (e.fn == fn && e.device == device && e.threads == threads && e.smem == smem) {
      *blocks = e.blocks;
      return nullptr;
    }
  }
  if (smem > 48 * 1024) {
    int optin = 0;
    if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess)
      return last_error();
    if (smem > size_t(optin)) return "rmsnorm: a block needs more shared memory than the device has";
    if (cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, optin) != cudaSuccess)
      return last_error();
  }
  int per_sm = 0;
  int sms = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, threads, smem) != cudaSuccess) return last_error();
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) return last_error();
  if (per_sm < 1) return "rmsnorm: a block does not fit a multiprocessor";
  *blocks = int64_t(per_sm) * sms;
  cache[next] = Entry{fn, device, threads, smem, *blocks};
  next = (next + 1) % 64;
  if (used < 64) ++used;
  return nullptr;
}

const char* dependent_launch_enabled(bool* enabled) {
  static const bool allowed = [] {
    const char* text = std::getenv("RMSNORM_CUDA_DEPENDENT_LAUNCH");
    return text == nullptr || text[0] != '0';
  }();
  *enabled = false;
  if (!allowed) return nullptr;
  thread_local int known[64] = {};  // per device: 0 unknown, 1 no, 2 yes
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return last_error();
  if (device < 0 || device >= 64) return nullptr;
  if (known[device] == 0) {
    int major = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) return last_error();
    known[device] = major >= 9 ? 2 : 1;
  }
  *enabled = known[device] == 2;
  return nullptr;
}

const char* check_dim(int64_t dim) {
  // Column indices are int inside the kernels, and a padded row may reach twice the dim.
  if (dim < 1 || dim > (int64_t(1) << 29)) return "rmsnorm: dim must be between 1 and 2^29";
  return nullptr;
}

}  // namespace detail

using namespace detail;

const char* forward(DType dtype, Variant variant, bool out_fp32, const void* x, int64_t x_stride, const void* w,
                    void* y, int64_t y_stride, int64_t rows, int64_t dim, float eps, void* stream) {
  if (const char* err = check_dim(dim)) return err;
  if (rows == 0) return nullptr;
  if (out_fp32 && variant != Variant::kPlain) return "rmsnorm: fp32 output is for the plain forward only";
  const ForwardPlan c = forward_plan(dtype, int(dim), false);
  ForwardArgs a{};
  a.x = x;
  a.x_stride = x_stride;
  a.w = w;
  a.y = y;
  a.y_stride = y_stride;
  a.rows = rows;
  a.dim = int(dim);
  a.eps = eps;
  auto s = static_cast<cudaStream_t>(stream);
  return dispatch(dtype, [&](auto tag) -> const char* {
    return forward_launch<typename decltype(tag)::type>(c, a, variant, out_fp32, s);
  });
}

const char* fused_add(DType dtype, const void* x, int64_t x_stride, const void* residual, int64_t residual_stride,
                      const void* w, void* y, int64_t y_stride, void* residual_out, int64_t residual_out_stride,
                      int64_t rows, int64_t dim, float eps, void* stream) {
  if (const char* err = check_dim(dim)) return err;
  if (rows == 0) return nullptr;
  const ForwardPlan c = forward_plan(dtype, int(dim), true);
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
  a.eps = eps;
  auto s = static_cast<cudaStream_t>(stream);
  return dispatch(dtype, [&](auto tag) -> const char* {
    return fused_add_launch<typename decltype(tag)::type>(c, a, s);
  });
}

const char* set_tuning(int which, int k, int threads, int stages, int extra) {
  if (which < 0 || which > 2) return "rmsnorm: set_tuning takes 0 (forward), 1 (fused add) or 2 (backward)";
  const int v[4] = {k, threads, stages, extra};
  for (int x : v)
    if (x < 0 || x > 1 << 20) return "rmsnorm: set_tuning takes values from 0 (the default) to 2^20";
  Tuning& t = tuning(which);
  for (int i = 0; i < 4; ++i) t.v[i] = v[i];
  return nullptr;
}

const char* backward_plan(DType dtype, int64_t rows, int64_t dim, int64_t* rows_per_block, int64_t* programs,
                          int64_t* workspace_rows) {
  if (const char* err = check_dim(dim)) return err;
  const BackwardPlan c = backward_plan_for(dtype, rows, int(dim));
  *rows_per_block = int64_t(8) << c.mbits;
  *programs = int64_t(1) << c.q_shift;
  *workspace_rows = rows == 0 ? 0 : c.workspace_rows;
  return nullptr;
}

const char* backward(DType dtype, bool dy_fp32, const void* dy, int64_t dy_stride, const void* x, int64_t x_stride,
                     const void* w, void* dx, int64_t dx_stride, float* workspace, int64_t workspace_rows, void* dw,
                     int64_t rows, int64_t dim, float eps, void* stream) {
  if (const char* err = check_dim(dim)) return err;
  if (rows == 0) return nullptr;
  const BackwardPlan c = backward_plan_for(dtype, rows, int(dim));
  if (dw != nullptr && (workspace == nullptr || workspace_rows != c.workspace_rows))
    return "rmsnorm: the backward's workspace does not match its plan";
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
  a.eps = eps;
  auto s = static_cast<cudaStream_t>(stream);
  return dispatch(dtype, [&](auto tag) -> const char* {
    return backward_launch<typename decltype(tag)::type>(c, a, dy_fp32, dw, s);
  });
}

}  // namespace rmsnorm

