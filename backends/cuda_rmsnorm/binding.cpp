// The kernels as torch custom operators (namespace rmsnorm_cuda): schemas and the CUDA implementations (shapes,
// layouts, allocation, the current stream, errors), all in C++. binding_autograd.cpp registers the forward's
// autograd and binding_python.cpp a small Python entry (module rmsnorm_cuda_fast) that calls the operators'
// typed dispatcher handles directly, so that an eager call from Python reaches the launch without the boxed
// torch.ops path. Three translation units, which a cold build compiles in parallel, each including only the
// torch headers it needs.
//
// No CUDA headers: this file compiles against a CPU-only torch's headers; everything CUDA lives in the kernel
// units (rmsnorm_kernels.cu and the rest). The fake (meta) implementations that torch.compile and opcheck need
// are registered from Python (_ops.py).

#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <cmath>
#include <tuple>
#include <utility>
#include <vector>

#include "rmsnorm.h"

namespace {

using at::Tensor;

rmsnorm::DType dtype_code(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return rmsnorm::DType::kFloat32;
    case at::kBFloat16:
      return rmsnorm::DType::kBFloat16;
    case at::kHalf:
      return rmsnorm::DType::kFloat16;
    default:
      break;
  }
  TORCH_CHECK_TYPE(false, "rms_norm supports x of dtype float32, bfloat16 or float16, got x.dtype=", type);
}

rmsnorm::DType dtype_code(const Tensor& t) { return dtype_code(t.scalar_type()); }

// t as [rows, dim] with unit stride along dim. reshape gives a view whenever the leading dims flatten with
// one row stride (contiguous batches, row slices, rows of a wider buffer), and a copy otherwise; a last-dim
// stride other than 1 (column-major, say) takes a contiguous copy.
Tensor as_rows(const Tensor& t, int64_t dim) {
  Tensor rows = t.dim() == 2 ? t : t.reshape({-1, dim});
  if (dim > 1 && rows.stride(1) != 1) rows = rows.contiguous();
  return rows;
}

void* current_stream(const at::Device& device) {
  const auto* impl = c10::impl::getDeviceGuardImpl(device.type());
  return impl->getStreamNativeHandle(impl->getStream(device));
}

void check(const char* err, const char* what) {
  TORCH_CHECK(err == nullptr, "rms_norm CUDA ", what, " failed: ", err == nullptr ? "" : err);
}

// The contract's input rules (contract/inputs.py words them for Python; the Python wrapper re-raises any
// failure here through them, so these messages only need to be clear).
void check_x(const Tensor& x, double eps) {
  TORCH_CHECK(x.is_cuda(), "the cuda rms_norm needs x on a cuda device, got x.device=", x.device());
  dtype_code(x);
  TORCH_CHECK_VALUE(x.dim() >= 1 && x.size(-1) >= 1, "rms_norm needs a last dim of at least 1, got x.shape=",
                    x.sizes());
  TORCH_CHECK_VALUE(std::isfinite(eps) && eps > 0, "rms_norm needs eps to be a finite number > 0, got eps=", eps);
}

void check_weight(const Tensor& x, const Tensor& w) {
  TORCH_CHECK_TYPE(w.scalar_type() == x.scalar_type(), "rms_norm needs weight in the dtype of x, got x.dtype=",
                   x.scalar_type(), " and weight.dtype=", w.scalar_type());
  TORCH_CHECK_VALUE(w.dim() == 1 && w.size(0) == x.size(-1), "rms_norm needs weight of shape (", x.size(-1),
                    ",), got x.shape=", x.sizes(), " and weight.shape=", w.sizes());
  TORCH_CHECK_VALUE(w.device() == x.device(), "rms_norm needs x and weight on one device, got x.device=",
                    x.device(), " and weight.device=", w.device());
}

void check_residual(const Tensor& x, const Tensor& r) {
  TORCH_CHECK_TYPE(r.scalar_type() == x.scalar_type(), "fused_add needs residual in the dtype of x, got x.dtype=",
                   x.scalar_type(), " and residual.dtype=", r.scalar_type());
  TORCH_CHECK_VALUE(r.sizes() == x.sizes(), "fused_add needs residual of x's shape, got x.shape=", x.sizes(),
                    " and residual.shape=", r.sizes());
  TORCH_CHECK_VALUE(r.device() == x.device(), "fused_add needs x and residual on one device, got x.device=",
                    x.device(), " and residual.device=", r.device());
}

// The span of bytes t's elements lie in.
std::pair<intptr_t, intptr_t> byte_span(const Tensor& t) {
  intptr_t low = reinterpret_cast<intptr_t>(t.data_ptr());
  intptr_t high = low;
  for (int64_t d = 0; d < t.dim(); ++d) {
    const intptr_t reach = intptr_t((t.size(d) - 1) * t.stride(d) * int64_t(t.element_size()));
    (reach < 0 ? low : high) += reach;
  }
  return {low, high + intptr_t(t.element_size())};
}

// In place, y goes into x and residual_out into residual (contract/inputs.py check_in_place, the same words):
// neither may hold one location twice, and they may not overlap.
void check_in_place(const Tensor& x, const Tensor& residual) {
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"x", &x}, {"residual", &residual}}) {
    TORCH_CHECK_VALUE(at::has_internal_overlap(*t) != at::MemOverlap::Yes, "fused_add_rms_norm_ writes into ", name,
                      ", whose elements share memory (strides ", t->strides(), " for shape ", t->sizes(),
                      "): pass a tensor with one location an element");
  }
  if (x.numel() == 0 || residual.numel() == 0 || !x.storage().is_alias_of(residual.storage())) return;
  const auto [x0, x1] = byte_span(x);
  const auto [r0, r1] = byte_span(residual);
  TORCH_CHECK_VALUE(!(x0 < r1 && r0 < x1), "fused_add_rms_norm_ writes into x and residual, which overlap in memory ",
                    "(x.data_ptr()=", x.data_ptr(), ", residual.data_ptr()=", residual.data_ptr(),
                    "): pass separate tensors");
}

int64_t row_count(const Tensor& x) { return x.numel() / x.size(-1); }

Tensor forward_variant(const Tensor& x, const Tensor* weight, double eps, rmsnorm::Variant variant, bool out_fp32) {
  check_x(x, eps);
  if (weight != nullptr) check_weight(x, *weight);
  const int64_t dim = x.size(-1);
  Tensor y = at::empty(x.sizes(), x.options().dtype(out_fp32 ? at::kFloat : x.scalar_type()));
  const int64_t rows = row_count(x);
  if (rows == 0) return y;
  const c10::DeviceGuard guard(x.device());
  const Tensor x2 = as_rows(x, dim);
  const Tensor w = weight == nullptr ? Tensor() : weight->contiguous();
  check(rmsnorm::forward(dtype_code(x), variant, out_fp32, x2.data_ptr(), x2.stride(0),
                         weight == nullptr ? nullptr : w.data_ptr(), y.data_ptr(), dim, rows, dim,
                         static_cast<float>(eps), current_stream(x.device())),
        "forward");
  return y;
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps, bool out_fp32) {
  return forward_variant(x, &weight, eps, rmsnorm::Variant::kPlain, out_fp32);
}

Tensor rms_norm_offset(const Tensor& x, const Tensor& weight, double eps) {
  return forward_variant(x, &weight, eps, rmsnorm::Variant::kOffset, false);
}

Tensor rms_norm_unweighted(const Tensor& x, double eps) {
  return forward_variant(x, nullptr, eps, rmsnorm::Variant::kUnweighted, false);
}

// (dx, dw) from dy, x, weight and eps; dw is an empty tensor unless need_dw. The rms is recomputed from x
// in the forward's order, so nothing but the inputs needs saving.
std::tuple<Tensor, Tensor> rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, double eps,
                                             bool need_dw) {
  check_x(x, eps);
  check_weight(x, weight);
  TORCH_CHECK_VALUE(dy.sizes() == x.sizes(), "rms_norm backward needs dy of x's shape, got dy.shape=", dy.sizes(),
                    " and x.shape=", x.sizes());
  const bool dy_fp32 = dy.scalar_type() == at::kFloat && x.scalar_type() != at::kFloat;
  TORCH_CHECK_TYPE(dy.scalar_type() == x.scalar_type() || dy_fp32,
                   "rms_norm backward needs dy in x's dtype or float32, got dy.dtype=", dy.scalar_type());
  TORCH_CHECK_VALUE(dy.device() == x.device(), "rms_norm backward needs dy on ", x.device(), ", got ",
                    dy.device());
  const int64_t dim = x.size(-1);
  const int64_t rows = row_count(x);
  Tensor dx = at::empty(x.sizes(), x.options());
  if (rows == 0) return {dx, need_dw ? at::zeros({dim}, weight.options()) : at::empty({0}, weight.options())};
  Tensor dw = at::empty({need_dw ? dim : 0}, weight.options());
  const c10::DeviceGuard guard(x.device());
  const auto code = dtype_code(x);
  int64_t rows_per_block = 0;
  int64_t programs = 0;
  int64_t workspace_rows = 0;
  check(rmsnorm::backward_plan(code, rows, dim, &rows_per_block, &programs, &workspace_rows), "backward plan");
  Tensor workspace;
  if (need_dw) workspace = at::empty({workspace_rows, dim}, x.options().dtype(at::kFloat));
  const Tensor x2 = as_rows(x, dim);
  const Tensor dy2 = as_rows(dy, dim);
  const Tensor w = weight.contiguous();
  check(rmsnorm::backward(code, dy_fp32, dy2.data_ptr(), dy2.stride(0), x2.data_ptr(), x2.stride(0), w.data_ptr(),
                          dx.data_ptr(), dim, need_dw ? workspace.data_ptr<float>() : nullptr, workspace_rows,
                          need_dw ? dw.data_ptr() : nullptr, rows, dim, static_cast<float>(eps),
                          current_stream(x.device())),
        "backward");
  return {dx, dw};
}

// [rows_per_block, programs, workspace_rows]: how the backward spreads dw's canonical tree over blocks for a
// batch of `rows` rows of `dim` (rmsnorm_kernels.cu, "Backward"); no entry changes a bit of dw.
std::vector<int64_t> backward_plan(int64_t rows, int64_t dim, at::ScalarType dtype) {
  int64_t plan[3] = {0, 0, 0};
  check(rmsnorm::backward_plan(dtype_code(dtype), rows, dim, &plan[0], &plan[1], &plan[2]), "backward plan");
  return {plan[0], plan[1], plan[2]};
}

// The kernel writes y and residual_out row by row through the given row strides; `y` may be x and
// `residual_out` may be residual.
void launch_fused_add(const Tensor& x2, const Tensor& r2, const Tensor& w, const Tensor& y2, const Tensor& ro2,
                      double eps) {
  const int64_t dim = x2.size(1);
  check(rmsnorm::fused_add(dtype_code(x2), x2.data_ptr(), x2.stride(0), r2.data_ptr(), r2.stride(0), w.data_ptr(),
                           y2.data_ptr(), y2.stride(0), ro2.data_ptr(), ro2.stride(0), x2.size(0), dim,
                           static_cast<float>(eps), current_stream(x2.device())),
        "fused_add");
}

std::tuple<Tensor, Tensor> fused_add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& weight,
                                              double eps) {
  check_x(x, eps);
  check_weight(x, weight);
  check_residual(x, residual);
  Tensor y = at::empty(x.sizes(), x.options());
  Tensor residual_out = at::empty(x.sizes(), x.options());
  if (row_count(x) == 0) return {y, residual_out};
  const c10::DeviceGuard guard(x.device());
  const int64_t dim = x.size(-1);
  launch_fused_add(as_rows(x, dim), as_rows(residual, dim), weight.contiguous(), y.view({-1, dim}),
                   residual_out.view({-1, dim}), eps);
  return {y, residual_out};
}

// In place, as engines do: y into x, residual_out into residual. Rows that cannot be addressed in place
// (a layout reshape must copy) are computed aside and copied back.
void fused_add_rms_norm_(Tensor& x, Tensor& residual, const Tensor& weight, double eps) {
  check_x(x, eps);
  check_weight(x, weight);
  check_residual(x, residual);
  check_in_place(x, residual);
  if (row_count(x) == 0) return;
  const c10::DeviceGuard guard(x.device());
  const int64_t dim = x.size(-1);
  const Tensor x2 = as_rows(x, dim);
  const Tensor r2 = as_rows(residual, dim);
  if (x2.is_alias_of(x) && r2.is_alias_of(residual)) {
    launch_fused_add(x2, r2, weight.contiguous(), x2, r2, eps);
    return;
  }
  const Tensor y = at::empty(x2.sizes(), x2.options());
  const Tensor residual_out = at::empty(x2.sizes(), x2.options());
  launch_fused_add(x2, r2, weight.contiguous(), y, residual_out, eps);
  x.copy_(y.view(x.sizes()));
  residual.copy_(residual_out.view(x.sizes()));
}

}  // namespace

TORCH_LIBRARY(rmsnorm_cuda, m) {
  m.def("rms_norm(Tensor x, Tensor weight, float eps, bool out_fp32=False) -> Tensor");
  m.def("rms_norm_backward(Tensor dy, Tensor x, Tensor weight, float eps, bool need_dw) -> (Tensor, Tensor)");
  m.def("rms_norm_offset(Tensor x, Tensor weight, float eps) -> Tensor");
  m.def("rms_norm_unweighted(Tensor x, float eps) -> Tensor");
  m.def("fused_add_rms_norm(Tensor x, Tensor residual, Tensor weight, float eps) -> (Tensor, Tensor)");
  m.def("fused_add_rms_norm_(Tensor(a!) x, Tensor(b!) residual, Tensor weight, float eps) -> ()");
  m.def("backward_plan(int rows, int dim, ScalarType dtype) -> int[]", &backward_plan);
}

TORCH_LIBRARY_IMPL(rmsnorm_cuda, CUDA, m) {
  m.impl("rms_norm", &rms_norm);
  m.impl("rms_norm_backward", &rms_norm_backward);
  m.impl("rms_norm_offset", &rms_norm_offset);
  m.impl("rms_norm_unweighted", &rms_norm_unweighted);
  m.impl("fused_add_rms_norm", &fused_add_rms_norm);
  m.impl("fused_add_rms_norm_", &fused_add_rms_norm_);
}
