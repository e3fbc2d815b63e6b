// The forward kernels for __half rows: one translation unit of the parallel build (rmsnorm_device.h).
#include "rmsnorm_device.h"

namespace rmsnorm {
namespace detail {
template const char* forward_launch<__half>(const ForwardPlan&, const ForwardArgs&, Variant, bool, cudaStream_t);
}  // namespace detail
}  // namespace rmsnorm
