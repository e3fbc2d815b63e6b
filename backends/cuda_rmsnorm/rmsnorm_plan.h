// The host side shared by the kernel units: the launch plans, the kernels' arguments and the per-dtype
// launchers each unit defines. Plain C++ over the CUDA runtime's types; see rmsnorm_kernels.cu for the design.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "rmsnorm.h"

namespace rmsnorm {
namespace detail {

// The canonical group: 8 consecutive elements of a row.
constexpr int kGroup = 8;
// Most threads a block of the staged kernels has (a row may take all of them): at most 128 registers a
// thread, which four groups a thread in the forward and three levels of dw's tree in the backward's registers
// need.
constexpr int kMaxThreads = 512;
// Most groups a thread of the forward and fused add kernels holds. The widest staged row (kMaxStagedWidth)
// needs two at kMaxThreads threads; the defaults take at most four, and the kernels are compiled for 1, 2 and 4
// only: eight were never picked (0.905 against four's 0.911 on an H200), and compiling them
// took about a third of each forward unit's nvcc time (the CPU compile check, tests/test_cuda_backend.py).
constexpr int kMaxGroupsPerThread = 4;
constexpr int kMaxBackwardThreads = kMaxThreads;
// Most groups a thread of the staged backward holds: two reach every staged width at kMaxBackwardThreads threads,
// and four spilled 96-184 bytes a thread on an H200 and were never a default. Not compiled: four
// took half of each backward unit's nvcc time (11.0 -> 5.9 s for bf16 on the CPU's compile check).
constexpr int kMaxBackwardGroups = 2;
// Threads per row (and per block) of the streaming kernels for rows too long for the staged ones.
constexpr int kLoopThreads = 512;
// Widest padded row the staged kernels take; wider rows stream.
constexpr int kMaxStagedWidth = 8192;
// Deepest stack a streamed row needs: log2(groups per thread) + 1 <= 32.
constexpr int kMaxStack = 32;
// Rows staged at most, the one being reduced included (cp.async.wait_group takes an immediate).
constexpr int kMaxStages = 8;
// Shared memory a staged block may use: two blocks of the backward at 4096 columns fit a multiprocessor.
constexpr int kSharedBudget = 112 * 1024;
// dw's final kernel: 32 columns by 32 threads that each reduce a share of the blocks' partial rows.
constexpr int kFinalCols = 32;
constexpr int kFinalSplits = 32;
// dw: blocks of the backward the plan aims at, at least (about two per multiprocessor of an H100/H200).
constexpr int64_t kMinPrograms = 256;
// The backward: rows from which rows of 64 threads or more take 512 threads a block (backward_plan_for).
constexpr int64_t kManyRows = 16384;
// dw: bytes of x (and as many of dy) per block the plan aims at: a block's partial row (dim fp32, written
// and read back once) stays near 1 % of its rows' traffic.
constexpr int64_t kRowBytesPerProgram = 1 << 19;

enum class Mode : int { kPlain, kOffset, kUnweighted, kFusedAdd };

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
  int tpr_shift;     // log2(threads per row)
  int groups_shift;  // streaming kernel: log2(groups per thread)
  float eps;
};

struct BackwardArgs {
  const void* dy;
  int64_t dy_stride;
  const void* x;
  int64_t x_stride;
  const void* w;
  void* dx;
  int64_t dx_stride;
  float* workspace;  // [Q, dim] fp32 partial rows (streaming: then the stacks), or null when dw is not wanted
  int64_t rows;
  int dim;
  int tpr_shift;
  int groups_shift;  // streaming kernel: log2(groups per thread)
  int stages;        // staged kernel
  int run_shift;     // log2(row groups a slot takes in turn); streaming: log2(row groups per block)
  int mbits;         // log2(row groups per block)
  float eps;
};

// A tuning sweep's override (rmsnorm_kernels.cu reads them): up to four values, 0 the default.
struct Tuning {
  int v[4] = {0, 0, 0, 0};
};

struct ForwardPlan {
  bool streaming;
  int k;             // groups a thread
  int tpr_shift;     // log2(threads a row)
  int threads;       // threads a block
  int groups_shift;  // streaming: log2(groups a thread)
};

struct BackwardPlan {
  bool streaming;
  int k;
  int tpr_shift;
  int threads;
  int slots_shift;   // log2(rows a block reduces at once)
  int run_shift;     // staged: log2(row groups a slot takes in turn); streaming: log2(row groups a block)
  int mbits;         // log2(row groups a block)
  int groups_shift;  // streaming
  int q_shift;       // log2(blocks): dw's partial rows
  int64_t workspace_rows;
};

// The overrides in force: 0 forward, 1 fused add, 2 backward.
Tuning& tuning(int which);

// Shared memory the staged backward uses besides its staging.
int backward_fixed_bytes(const BackwardPlan& c, int element_bytes);

// The CUDA runtime's last error as a string, or nullptr.
const char* last_error();

// Whether dw's final kernel may overlap the backward's last blocks (programmatic dependent launch): on a device of
// compute capability 9.0 or more, unless RMSNORM_CUDA_DEPENDENT_LAUNCH=0 (read once a process). Cached per device.
const char* dependent_launch_enabled(bool* enabled);

// Blocks of `fn` resident on the whole device at once (cached; raises the shared-memory limit first).
const char* resident_blocks(const void* fn, int threads, size_t smem, int64_t* blocks);

// The launchers, one explicit instantiation per element type in the kernel units (forward_*.cu,
// fused_add_*.cu, backward_*.cu), so that ninja compiles the kernels in parallel.
template <typename T>
const char* forward_launch(const ForwardPlan& c, const ForwardArgs& a, Variant variant, bool out_fp32,
                           cudaStream_t stream);
template <typename T>
const char* fused_add_launch(const ForwardPlan& c, const ForwardArgs& a, cudaStream_t stream);
template <typename T>
const char* backward_launch(const BackwardPlan& c, const BackwardArgs& a, bool dy_fp32, void* dw,
                            cudaStream_t stream);

}  // namespace detail
}  // namespace rmsnorm
