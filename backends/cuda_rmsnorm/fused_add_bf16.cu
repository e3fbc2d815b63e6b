// The fused add kernels for __nv_bfloat16 rows: one translation unit of the parallel build (rmsnorm_device.h).
#include "rmsnorm_device.h"

namespace rmsnorm {
namespace detail {
template const char* fused_add_launch<__nv_bfloat16>(const ForwardPlan&, const ForwardArgs&, cudaStream_t);
}  // namespace detail
}  // namespace rmsnorm
