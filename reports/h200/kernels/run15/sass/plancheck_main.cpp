#include <cstdio>
#include "rmsnorm_plan.h"
namespace rmsnorm { namespace detail { BackwardPlan backward_plan_for(DType d, int64_t rows, int dim); } }
using namespace rmsnorm;
int main() {
  struct S { long rows; int dim; DType d; const char* n; } shapes[] = {
    {65536, 4096, DType::kBFloat16, "65536x4096 bf16"}, {2097152, 128, DType::kBFloat16, "2097152x128 bf16"},
    {16384, 8192, DType::kBFloat16, "16384x8192 bf16"}, {4096, 4096, DType::kBFloat16, "4096x4096 bf16"},
    {65536, 2048, DType::kBFloat16, "65536x2048 bf16"}, {65536, 4096, DType::kFloat16, "65536x4096 f16"},
    {65536, 4096, DType::kFloat32, "65536x4096 f32"}, {65536, 1000, DType::kBFloat16, "65536x1000 bf16"}};
  for (auto& s : shapes) {
    detail::BackwardPlan c = detail::backward_plan_for(s.d, s.rows, s.dim);
    int es = s.d == DType::kFloat32 ? 4 : 2;
    int stage = c.k * es * c.threads * 16;
    int fixed = detail::backward_fixed_bytes(c, es);
    int stages = 3; while (stages > 2 && stages * stage + fixed > detail::kSharedBudget) --stages;
    printf("%-18s k=%d tpr=%d threads=%d run_shift=%d rows/block=%d Q=%ld stages=%d smem=%d\n", s.n, c.k, 1 << c.tpr_shift,
           c.threads, c.run_shift, 8 << c.mbits, 1L << c.q_shift, stages, stages * stage + fixed);
  }
}
