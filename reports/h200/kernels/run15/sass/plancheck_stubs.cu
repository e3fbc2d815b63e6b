#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include "rmsnorm_plan.h"
namespace rmsnorm { namespace detail {
template <typename T> const char* forward_launch(const ForwardPlan&, const ForwardArgs&, Variant, bool, cudaStream_t) { return nullptr; }
template <typename T> const char* fused_add_launch(const ForwardPlan&, const ForwardArgs&, cudaStream_t) { return nullptr; }
template <typename T> const char* backward_launch(const BackwardPlan&, const BackwardArgs&, bool, void*, cudaStream_t) { return nullptr; }
#define INST(T) template const char* forward_launch<T>(const ForwardPlan&, const ForwardArgs&, Variant, bool, cudaStream_t); \
  template const char* fused_add_launch<T>(const ForwardPlan&, const ForwardArgs&, cudaStream_t); \
  template const char* backward_launch<T>(const BackwardPlan&, const BackwardArgs&, bool, void*, cudaStream_t);
INST(float) INST(__nv_bfloat16) INST(__half)
}}
