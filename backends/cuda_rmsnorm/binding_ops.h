// The dispatcher handle of the plain forward operator, for the binding units that call it from C++ (the autograd
// in binding_autograd.cpp, the fast Python entry in binding_python.cpp): one schema name and one signature.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

namespace rmsnorm_binding {

inline const c10::TypedOperatorHandle<at::Tensor(const at::Tensor&, const at::Tensor&, double, bool)>&
forward_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("rmsnorm_cuda::rms_norm", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&, double, bool)>();
  return op;
}

}  // namespace rmsnorm_binding
