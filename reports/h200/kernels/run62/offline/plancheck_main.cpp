// The backward's plans under the run's patches (a host program over rmsnorm_kernels.cu, launchers stubbed by
// ../../run15/sass/plancheck_stubs.cu): rows a block, blocks, the workspace (partial rows, then the stacks) and
// the shared memory a block at the stages the launcher would take. STAGES0: the launcher's default (3 for the
// tree and the L2 stack, 4 for the paired rows); MINSTAGES: its least (2; 3 paired).
#include <cstdio>
#include "rmsnorm_plan.h"
#ifndef STAGES0
#define STAGES0 3
#endif
// The tree (-DBASE) has no stack offset: its stack is in shared memory.
#ifdef BASE
#define STACK_OFFSET(c) -1L
#else
#define STACK_OFFSET(c) (long)(c).stack_offset
#endif
#ifndef MINSTAGES
#define MINSTAGES 2
#endif
namespace rmsnorm { namespace detail { BackwardPlan backward_plan_for(DType d, int64_t rows, int dim); } }
using namespace rmsnorm;
int main() {
  struct S { long rows; int dim; DType d; int per_block; const char* n; } shapes[] = {
    {65536, 4096, DType::kBFloat16, 0, "65536x4096 bf16"}, {65536, 4096, DType::kBFloat16, 128, "  128 rows a block"},
    {65536, 4096, DType::kBFloat16, 256, "  256 rows a block"}, {2097152, 128, DType::kBFloat16, 0, "2097152x128 bf16"},
    {16384, 8192, DType::kBFloat16, 0, "16384x8192 bf16"}, {4096, 4096, DType::kBFloat16, 0, "4096x4096 bf16"},
    {65536, 4095, DType::kBFloat16, 0, "65536x4095 bf16"}, {65536, 4096, DType::kFloat32, 0, "65536x4096 f32"},
    {7, 1000, DType::kBFloat16, 0, "7x1000 bf16"}};
  for (auto& s : shapes) {
    detail::tuning(2).v[3] = s.per_block;
    detail::BackwardPlan c = detail::backward_plan_for(s.d, s.rows, s.dim);
    const int es = s.d == DType::kFloat32 ? 4 : 2;
    const int stage = c.k * 2 * es / 2 * c.threads * 16;  // x and dy in x's dtype
    const int fixed = detail::backward_fixed_bytes(c, es);
    int stages = STAGES0;
    while (stages > MINSTAGES && stages * stage + fixed > detail::kSharedBudget) --stages;
    const long q = 1L << c.q_shift;
    printf("%-18s k=%d threads=%d rows/block=%d Q=%ld run_shift=%d stack_offset=%ld workspace_rows=%ld "
           "(partials %ld) stages=%d smem=%d\n", s.n, c.k, c.threads, 8 << c.mbits, q, c.run_shift,
           STACK_OFFSET(c), (long)c.workspace_rows, q, stages, stages * stage + fixed);
  }
}
