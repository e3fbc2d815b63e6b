// The boundary between the torch binding and the CUDA kernels.
//
// Plain C++ on purpose: neither torch nor CUDA headers, so the kernels compile with nvcc alone and the
// binding compiles against any torch build's headers (a CPU-only wheel ships no usable c10/cuda headers).
// Every entry point returns nullptr on success, else a static error string; streams travel as void*.
// Rows are `*_stride` elements apart and have unit stride along dim.
#pragma once

#include <cstdint>

namespace rmsnorm {

// Element types of x (and weight, and the x-dtype outputs).
enum class DType : int { kFloat32 = 0, kBFloat16 = 1, kFloat16 = 2 };

// What multiplies the normalized row x / rms: the weight, 1 + weight (formed in fp32), or nothing.
enum class Variant : int { kPlain = 0, kOffset = 1, kUnweighted = 2 };

// y[r, :] = (x[r, :] / rms_r) * w' rounded once, rms_r = sqrt(mean(x[r, :]^2) + eps) in the canonical
// order, w' as `variant` says. y is fp32 when out_fp32 (kPlain only), else x's dtype. w may be null for
// kUnweighted.
const char* forward(DType dtype, Variant variant, bool out_fp32, const void* x, int64_t x_stride, const void* w,
                    void* y, int64_t y_stride, int64_t rows, int64_t dim, float eps, void* stream);

// residual_out = x + residual (fp32 add, rounded to the dtype), y = the plain forward of residual_out as
// stored. residual_out may be residual and y may be x (in place).
const char* fused_add(DType dtype, const void* x, int64_t x_stride, const void* residual, int64_t residual_stride,
                      const void* w, void* y, int64_t y_stride, void* residual_out, int64_t residual_out_stride,
                      int64_t rows, int64_t dim, float eps, void* stream);

// How dw is summed: the canonical tree over rows (padded with zero rows to a power of two), blocks of
// rows_per_block rows (row groups p, p + programs, ...) each leaving one fp32 partial row, then the halving
// tree over the `programs` partial rows. The backward's fp32 workspace is [workspace_rows, dim]. A function of
// (dtype, rows, dim) only; no choice in it changes a bit of dw.
const char* backward_plan(DType dtype, int64_t rows, int64_t dim, int64_t* rows_per_block, int64_t* programs,
                          int64_t* workspace_rows);

// dx (x's dtype) and, when dw is not null, dw (weight's dtype) from dy (x's dtype, or fp32 when dy_fp32),
// x, w and eps; the row's rms is recomputed exactly as the forward formed it. `workspace` holds
// [workspace_rows, dim] fp32 (ignored when dw is null).
const char* backward(DType dtype, bool dy_fp32, const void* dy, int64_t dy_stride, const void* x, int64_t x_stride,
                     const void* w, void* dx, int64_t dx_stride, float* workspace, int64_t workspace_rows, void* dw,
                     int64_t rows, int64_t dim, float eps, void* stream);

// A tuning sweep's launch configuration for the forward (which = 0: groups a thread, threads a block, rows
// staged, sets of rows a block at most), the fused add (1, the same) or the backward (2: the first three, then
// dw's rows per block); 0 keeps a default. No value changes a bit. Not thread-safe: for sweeps, between
// launches.
const char* set_tuning(int which, int k, int threads, int stages, int extra);

}  // namespace rmsnorm
