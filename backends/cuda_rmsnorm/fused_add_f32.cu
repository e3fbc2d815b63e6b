// The fused add kernels for float rows: one translation unit of the parallel build (rmsnorm_device.h).
#include "rmsnorm_device.h"

namespace rmsnorm {
namespace detail {
template const char* fused_add_launch<float>(const ForwardPlan&, const ForwardArgs&, cudaStream_t);
}  // namespace detail
}  // namespace rmsnorm
