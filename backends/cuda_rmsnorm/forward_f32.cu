// The forward kernels for float rows: one translation unit of the parallel build (rmsnorm_device.h).
#include "rmsnorm_device.h"

namespace rmsnorm {
namespace detail {
template const char* forward_launch<float>(const ForwardPlan&, const ForwardArgs&, Variant, bool, cudaStream_t);
}  // namespace detail
}  // namespace rmsnorm
