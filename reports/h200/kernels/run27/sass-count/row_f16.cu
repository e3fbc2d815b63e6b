// The row kernel for fp16 (not compiled by forward_f16.cu, which uses the staged kernel for fp16).
#include "rmsnorm_device.h"
namespace rmsnorm { namespace detail {
template __global__ void forward_row_kernel<__half, __half, Mode::kPlain, 4>(const ForwardArgs);
}}
