// Torch binding for the RMSNorm kernels: shapes, layouts, allocation, the current stream, errors.
//
// Only CPU-side torch headers: the current CUDA stream and the device guard go through c10's
// device-generic interfaces, so this file compiles against any torch build's headers (a CPU-only wheel
// ships c10/cuda headers that cannot be included), and everything CUDA lives in rmsnorm_kernels.cu.

#include <torch/extension.h>

#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <string>
#include <tuple>

#include "rmsnorm.h"

namespace {

rmsnorm::DType dtype_code(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat:
      return rmsnorm::DType::kFloat32;
    case at::kBFloat16:
      return rmsnorm::DType::kBFloat16;
    case at::kHalf:
      return rmsnorm::DType::kFloat16;
    default:
      break;
  }
  TORCH_CHECK_TYPE(false, "rms_norm supports float32, bfloat16 or float16, got ", t.scalar_type());
}

// x as [rows, dim] with unit stride along dim. reshape gives a view whenever the leading dims can be
// flattened with one row stride (contiguous batches, row slices, rows of a wider buffer), and a copy
// otherwise; a last-dim stride other than 1 (column-major, say) takes a contiguous copy.
at::Tensor as_rows(const at::Tensor& t, int64_t dim) {
  at::Tensor rows = t.dim() == 2 ? t : t.reshape({-1, dim});
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

void check_cuda_pair(const at::Tensor& x, const at::Tensor& w) {
  TORCH_CHECK(x.is_cuda(), "the cuda rms_norm needs tensors on a cuda device, got x.device=", x.device());
  TORCH_CHECK(w.device() == x.device(), "rms_norm needs x and weight on one device, got x.device=", x.device(),
              " and weight.device=", w.device());
  TORCH_CHECK_TYPE(w.scalar_type() == x.scalar_type(), "rms_norm needs weight in the dtype of x, got x.dtype=",
                   x.scalar_type(), " and weight.dtype=", w.scalar_type());
  TORCH_CHECK(x.dim() >= 1 && w.dim() == 1 && w.size(0) == x.size(-1) && x.size(-1) >= 1,
              "rms_norm needs weight of shape (", x.dim() >= 1 ? x.size(-1) : 0, ",), got x.shape=", x.sizes(),
              " and weight.shape=", w.sizes());
}

// y (and, when want_rstd, each row's fp32 1/rms for the backward) for x of any shape [..., dim].
std::tuple<at::Tensor, at::Tensor> forward_impl(const at::Tensor& x, const at::Tensor& weight, double eps,
                                                bool out_fp32, bool want_rstd) {
  check_cuda_pair(x, weight);
  const int64_t dim = x.size(-1);
  const auto out_type = out_fp32 ? at::kFloat : x.scalar_type();
  at::Tensor y = at::empty(x.sizes(), x.options().dtype(out_type));
  const int64_t rows = dim == 0 ? 0 : x.numel() / dim;
  at::Tensor rstd = want_rstd ? at::empty({rows}, x.options().dtype(at::kFloat)) : at::Tensor();
  if (rows == 0) return {y, rstd};

  const c10::DeviceGuard guard(x.device());
  const at::Tensor x2 = as_rows(x, dim);
  const at::Tensor w = weight.contiguous();
  check(rmsnorm::forward(dtype_code(x), out_fp32, x2.data_ptr(), x2.stride(0), w.data_ptr(), y.data_ptr(), dim,
                         want_rstd ? rstd.data_ptr<float>() : nullptr, rows, dim, static_cast<float>(eps),
                         current_stream(x.device())),
        "forward");
  return {y, rstd};
}

at::Tensor forward(const at::Tensor& x, const at::Tensor& weight, double eps, bool out_fp32) {
  return std::get<0>(forward_impl(x, weight, eps, out_fp32, false));
}

std::tuple<at::Tensor, at::Tensor> forward_train(const at::Tensor& x, const at::Tensor& weight, double eps,
                                                 bool out_fp32) {
  return forward_impl(x, weight, eps, out_fp32, true);
}

// (dx, dw) from dy and the forward's saved x, weight and rstd; dw is undefined (None) unless need_dw.
std::tuple<at::Tensor, at::Tensor> backward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& weight,
                                            const at::Tensor& rstd, bool need_dw) {
  check_cuda_pair(x, weight);
  TORCH_CHECK(dy.sizes() == x.sizes(), "rms_norm backward needs dy of x's shape, got dy.shape=", dy.sizes(),
              " and x.shape=", x.sizes());
  const bool dy_fp32 = dy.scalar_type() == at::kFloat && x.scalar_type() != at::kFloat;
  TORCH_CHECK_TYPE(dy.scalar_type() == x.scalar_type() || dy_fp32,
                   "rms_norm backward needs dy in x's dtype or float32, got dy.dtype=", dy.scalar_type());
  TORCH_CHECK(dy.device() == x.device() && rstd.device() == x.device(), "rms_norm backward needs all tensors on ",
              x.device());
  const int64_t dim = x.size(-1);
  const int64_t rows = x.numel() / dim;
  TORCH_CHECK(rstd.scalar_type() == at::kFloat && rstd.numel() == rows && rstd.is_contiguous(),
              "rms_norm backward needs the forward's rstd");

  at::Tensor dx = at::empty(x.sizes(), x.options());
  if (rows == 0) return {dx, need_dw ? at::zeros_like(weight) : at::Tensor()};

  const c10::DeviceGuard guard(x.device());
  const auto code = dtype_code(x);
  int64_t parts = 0;
  int64_t rows_per_part = 0;
  int64_t padded_dim = 0;
  bool zero_workspace = false;
  check(rmsnorm::backward_plan(code, dy_fp32, rows, dim, &parts, &rows_per_part, &padded_dim, &zero_workspace),
        "backward plan");
  at::Tensor workspace;
  at::Tensor dw;
  if (need_dw) {
    const auto opts = x.options().dtype(at::kFloat);
    workspace = zero_workspace ? at::zeros({parts, padded_dim}, opts) : at::empty({parts, padded_dim}, opts);
    dw = at::empty({dim}, weight.options());
  }
  const at::Tensor x2 = as_rows(x, dim);
  const at::Tensor dy2 = as_rows(dy, dim);
  const at::Tensor w = weight.contiguous();
  check(rmsnorm::backward(code, dy_fp32, dy2.data_ptr(), dy2.stride(0), x2.data_ptr(), x2.stride(0), w.data_ptr(),
                          rstd.data_ptr<float>(), dx.data_ptr(), dim,
                          need_dw ? workspace.data_ptr<float>() : nullptr, parts, rows_per_part, padded_dim,
                          need_dw ? dw.data_ptr() : nullptr, rows, dim, current_stream(x.device())),
        "backward");
  return {dx, dw};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Batch-invariant RMSNorm CUDA kernels";
  m.def("forward", &forward, "y = x * rsqrt(mean(x^2) + eps) * weight", py::arg("x"), py::arg("weight"),
        py::arg("eps"), py::arg("out_fp32"));
  m.def("forward_train", &forward_train, "(y, rstd) for the backward", py::arg("x"), py::arg("weight"),
        py::arg("eps"), py::arg("out_fp32"));
  m.def("backward", &backward, "(dx, dw) from dy", py::arg("dy"), py::arg("x"), py::arg("weight"),
        py::arg("rstd"), py::arg("need_dw"));
}
