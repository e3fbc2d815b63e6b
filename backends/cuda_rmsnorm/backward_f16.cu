// The backward kernels for __half rows: one translation unit of the parallel build (rmsnorm_device.h).
#include "rmsnorm_device.h"

namespace rmsnorm {
namespace detail {
template const char* backward_launch<__half>(const BackwardPlan&, const BackwardArgs&, bool, void*, cudaStream_t);
}  // namespace detail
}  // namespace rmsnorm
