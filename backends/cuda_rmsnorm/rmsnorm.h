// The boundary between the torch binding and the CUDA kernels.
//
// Plain C++ on purpose: neither torch nor CUDA headers, so the kernels compile with nvcc alone and the
// binding compiles against any torch build's headers (a CPU-only wheel ships no usable c10/cuda headers).
// Every entry point returns nullptr on success, else a static error string; streams travel as void*.
#pragma once

#include <cstdint>

namespace rmsnorm {

// Element types of x (and weight, and the x-dtype outputs).
enum class DType : int { kFloat32 = 0, kBFloat16 = 1, kFloat16 = 2 };

// y[r, :] = x[r, :] * rsqrt(mean(x[r, :]^2) + eps) * w, for r < rows. x rows are x_stride elements apart
// (last-dim stride 1); y rows y_stride apart; y is fp32 when out_fp32, else x's dtype. rstd, when not
// null, receives each row's 1/sqrt(mean(x^2) + eps) in fp32 for the backward.
const char* forward(DType dtype, bool out_fp32, const void* x, int64_t x_stride, const void* w, void* y,
                    int64_t y_stride, float* rstd, int64_t rows, int64_t dim, float eps, void* stream);

// How the backward splits rows for dw: `parts` partitions of `rows_per_part` contiguous rows (the last
// may be shorter), each summed into one row of a [parts, padded_dim] fp32 workspace, which must be
// zero-filled first when `zero_workspace` is set. Depends on the current device (its multiprocessor
// count) and on (rows, dim, dtype), nothing else.
const char* backward_plan(DType dtype, bool dy_fp32, int64_t rows, int64_t dim, int64_t* parts,
                          int64_t* rows_per_part, int64_t* padded_dim, bool* zero_workspace);

// dx (x's dtype, rows dx_stride apart) and, when dw is not null, dw (weight's dtype) from dy (x's dtype,
// or fp32 when dy_fp32), x, w and the forward's rstd. `workspace` is the plan's [parts, padded_dim]
// buffer and partition (ignored when dw is null).
const char* backward(DType dtype, bool dy_fp32, const void* dy, int64_t dy_stride, const void* x,
                     int64_t x_stride, const void* w, const float* rstd, void* dx, int64_t dx_stride,
                     float* workspace, int64_t parts, int64_t rows_per_part, int64_t padded_dim, void* dw,
                     int64_t rows, int64_t dim, void* stream);

}  // namespace rmsnorm
