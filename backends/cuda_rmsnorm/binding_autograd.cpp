// The forward's autograd for the rmsnorm_cuda operators (binding.cpp defines them): the forward saves x and
// weight; the backward recomputes each row's rms. Its own translation unit: torch's custom_function.h is the
// heaviest header the binding needs, and ninja compiles this unit beside the others.

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <tuple>

#include "binding_ops.h"

namespace {

using at::Tensor;
using rmsnorm_binding::forward_op;

const c10::TypedOperatorHandle<std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&, double, bool)>&
backward_op() {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("rmsnorm_cuda::rms_norm_backward", "")
          .typed<std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&, double, bool)>();
  return op;
}

class RMSNormFunction : public torch::autograd::Function<RMSNormFunction> {
 public:
  static Tensor forward(torch::autograd::AutogradContext* ctx, const Tensor& x, const Tensor& weight, double eps,
                        bool out_fp32) {
    const at::AutoDispatchBelowADInplaceOrView below;
    Tensor y = forward_op().call(x, weight, eps, out_fp32);
    ctx->save_for_backward({x, weight});
    ctx->saved_data["eps"] = eps;
    return y;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const double eps = ctx->saved_data["eps"].toDouble();
    auto [dx, dw] = backward_op().call(grads[0], saved[0], saved[1], eps, ctx->needs_input_grad(1));
    return {ctx->needs_input_grad(0) ? dx : Tensor(), ctx->needs_input_grad(1) ? dw : Tensor(), Tensor(),
            Tensor()};
  }
};

Tensor rms_norm_autograd(const Tensor& x, const Tensor& weight, double eps, bool out_fp32) {
  // The common eager case, no graph to record, skips the autograd node altogether.
  if (!c10::GradMode::is_enabled() || !(x.requires_grad() || weight.requires_grad())) {
    const at::AutoDispatchBelowADInplaceOrView below;
    return forward_op().call(x, weight, eps, out_fp32);
  }
  return RMSNormFunction::apply(x, weight, eps, out_fp32);
}

}  // namespace

TORCH_LIBRARY_IMPL(rmsnorm_cuda, Autograd, m) { m.impl("rms_norm", &rms_norm_autograd); }
