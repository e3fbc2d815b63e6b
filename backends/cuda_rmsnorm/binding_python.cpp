// The fast Python entry into the rmsnorm_cuda operators (binding.cpp): module rmsnorm_cuda_fast. Only Python's
// limited API, so one build loads into any Python 3.10+ that runs the torch it was built against.

#define PY_SSIZE_T_CLEAN
#define Py_LIMITED_API 0x030A0000
#include <Python.h>

#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <cmath>
#include <cstddef>
#include <exception>
#include <tuple>

#include "binding_ops.h"
#include "rmsnorm.h"

namespace {

using at::Tensor;
using rmsnorm_binding::forward_op;

}  // namespace

// ---------------------------------------------------------------------------------------------------
// The fast Python entry. It accepts exact torch.Tensor and nn.Parameter arguments only (anything else, a
// subclass with __torch_function__ say, raises TypeError and the Python side takes torch.ops), reads the
// at::Tensor that torch's Python object holds right after the object header (torch/csrc/autograd/
// python_variable.h; layout_matches checks that once at load), and calls the operator through the dispatcher
// from the top, so autograd, functorch and dispatch modes all still apply.

extern PyObject* THPVariableClass;  // exported by libtorch_python (torch/csrc/autograd/python_variable.h)
extern PyObject* ParameterClass;
PyObject* THPVariable_Wrap(const at::TensorBase& var);

namespace {

struct TensorObject {
  PyObject ob_base;
  at::Tensor cdata;
};

const at::Tensor* unpack(PyObject* o) {
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(o));
  if (type != THPVariableClass && type != ParameterClass) return nullptr;
  return &reinterpret_cast<TensorObject*>(o)->cdata;
}

bool parse(PyObject* const* args, Py_ssize_t nargs, Py_ssize_t tensors, Py_ssize_t expected,
           const at::Tensor** out, double* eps, bool* flag) {
  if (nargs != expected) {
    PyErr_SetString(PyExc_TypeError, "rmsnorm_cuda_fast: wrong number of arguments");
    return false;
  }
  for (Py_ssize_t i = 0; i < tensors; ++i) {
    out[i] = unpack(args[i]);
    if (out[i] == nullptr) {
      PyErr_SetString(PyExc_TypeError, "rmsnorm_cuda_fast: arguments must be plain tensors");
      return false;
    }
  }
  if (!PyFloat_Check(args[tensors])) {
    PyErr_SetString(PyExc_TypeError, "rmsnorm_cuda_fast: eps must be a float");
    return false;
  }
  *eps = PyFloat_AsDouble(args[tensors]);
  if (flag != nullptr) *flag = args[tensors + 1] == Py_True;
  return true;
}

// Whether the fast entry may call the operator: the contract's input rules checked without throwing. Bad input
// never reaches the dispatcher from here; the Python side takes the checked path and raises the contract's
// error. (A C++ exception thrown from the operator on this path once ended the process on a GPU machine.)
bool fast_inputs_ok(const at::Tensor& x, const at::Tensor* w, const at::Tensor* r, double eps) {
  const auto type = x.scalar_type();
  if (!x.is_cuda() || (type != at::kFloat && type != at::kBFloat16 && type != at::kHalf)) return false;
  if (x.dim() < 1 || x.size(-1) < 1 || !std::isfinite(eps) || eps <= 0) return false;
  if (w != nullptr && (w->scalar_type() != type || w->dim() != 1 || w->size(0) != x.size(-1) ||
                       w->device() != x.device())) {
    return false;
  }
  return r == nullptr || (r->scalar_type() == type && r->sizes() == x.sizes() && r->device() == x.device());
}

// The in-place entry's own rules, checked without throwing: each of x and residual holds one location an element
// (has_internal_overlap answers No only then) and they share no storage. Anything else, the operator's refusals
// of overlapping writes included, takes the Python side's checked path (check_in_place's error thrown on this path
// ended the process on an H200, as the input errors of e1f51fd had).
bool fast_in_place_ok(const at::Tensor& x, const at::Tensor& r) {
  return at::has_internal_overlap(x) == at::MemOverlap::No && at::has_internal_overlap(r) == at::MemOverlap::No &&
         !x.storage().is_alias_of(r.storage());
}

bool fast_refused() {
  PyErr_SetString(PyExc_ValueError, "rmsnorm_cuda_fast: input outside the fast entry's rules");
  return false;
}

template <typename F>
PyObject* guarded(F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "rmsnorm_cuda_fast: unknown C++ exception");
  }
  return nullptr;
}

template <typename Signature>
c10::TypedOperatorHandle<Signature> typed(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Signature>();
}

PyObject* py_rms_norm(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  const at::Tensor* t[2];
  double eps;
  bool out_fp32;
  if (!parse(args, nargs, 2, 4, t, &eps, &out_fp32)) return nullptr;
  if (!fast_inputs_ok(*t[0], t[1], nullptr, eps) && !fast_refused()) return nullptr;
  return guarded([&] { return THPVariable_Wrap(forward_op().call(*t[0], *t[1], eps, out_fp32)); });
}

PyObject* py_rms_norm_offset(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  static const auto op = typed<Tensor(const Tensor&, const Tensor&, double)>("rmsnorm_cuda::rms_norm_offset");
  const at::Tensor* t[2];
  double eps;
  if (!parse(args, nargs, 2, 3, t, &eps, nullptr)) return nullptr;
  if (!fast_inputs_ok(*t[0], t[1], nullptr, eps) && !fast_refused()) return nullptr;
  return guarded([&] { return THPVariable_Wrap(op.call(*t[0], *t[1], eps)); });
}

PyObject* py_rms_norm_unweighted(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  static const auto op = typed<Tensor(const Tensor&, double)>("rmsnorm_cuda::rms_norm_unweighted");
  const at::Tensor* t[1];
  double eps;
  if (!parse(args, nargs, 1, 2, t, &eps, nullptr)) return nullptr;
  if (!fast_inputs_ok(*t[0], nullptr, nullptr, eps) && !fast_refused()) return nullptr;
  return guarded([&] { return THPVariable_Wrap(op.call(*t[0], eps)); });
}

PyObject* py_fused_add_rms_norm(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  static const auto op = typed<std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&, double)>(
      "rmsnorm_cuda::fused_add_rms_norm");
  const at::Tensor* t[3];
  double eps;
  if (!parse(args, nargs, 3, 4, t, &eps, nullptr)) return nullptr;
  if (!fast_inputs_ok(*t[0], t[2], t[1], eps) && !fast_refused()) return nullptr;
  return guarded([&]() -> PyObject* {
    auto [y, residual_out] = op.call(*t[0], *t[1], *t[2], eps);
    PyObject* a = THPVariable_Wrap(y);
    PyObject* b = a == nullptr ? nullptr : THPVariable_Wrap(residual_out);
    if (b == nullptr) {
      Py_XDECREF(a);
      return nullptr;
    }
    PyObject* pair = PyTuple_Pack(2, a, b);
    Py_DECREF(a);
    Py_DECREF(b);
    return pair;
  });
}

PyObject* py_fused_add_rms_norm_(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  static const auto op =
      typed<void(at::Tensor&, at::Tensor&, const Tensor&, double)>("rmsnorm_cuda::fused_add_rms_norm_");
  const at::Tensor* t[3];
  double eps;
  if (!parse(args, nargs, 3, 4, t, &eps, nullptr)) return nullptr;
  const bool ok = fast_inputs_ok(*t[0], t[2], t[1], eps) && fast_in_place_ok(*t[0], *t[1]);
  if (!ok && !fast_refused()) return nullptr;
  return guarded([&]() -> PyObject* {
    at::Tensor x = *t[0];
    at::Tensor residual = *t[1];
    op.call(x, residual, *t[2], eps);
    Py_RETURN_NONE;
  });
}

// set_tuning(which, k, threads, stages, extra): rmsnorm::set_tuning, for sweeps in one process.
PyObject* py_set_tuning(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 5) {
    PyErr_SetString(PyExc_TypeError, "set_tuning(which, k, threads, stages, extra)");
    return nullptr;
  }
  long v[5];
  for (Py_ssize_t i = 0; i < 5; ++i) {
    v[i] = PyLong_AsLong(args[i]);
    if (v[i] == -1 && PyErr_Occurred()) return nullptr;
  }
  if (const char* err = rmsnorm::set_tuning(int(v[0]), int(v[1]), int(v[2]), int(v[3]), int(v[4]))) {
    PyErr_SetString(PyExc_ValueError, err);
    return nullptr;
  }
  Py_RETURN_NONE;
}

// True when `tensor`'s Python object holds its at::Tensor where unpack reads it: the TensorImpl there is the
// one whose address torch reports as tensor._cdata.
PyObject* py_layout_matches(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2 || Py_TYPE(args[0]) != reinterpret_cast<PyTypeObject*>(THPVariableClass)) Py_RETURN_FALSE;
  void* expected = PyLong_AsVoidPtr(args[1]);
  if (expected == nullptr && PyErr_Occurred()) return nullptr;
  void* impl = *reinterpret_cast<void**>(reinterpret_cast<char*>(args[0]) + offsetof(TensorObject, cdata));
  if (impl == expected) Py_RETURN_TRUE;
  Py_RETURN_FALSE;
}

PyMethodDef fast_methods[] = {
    {"rms_norm", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(py_rms_norm)), METH_FASTCALL,
     "rms_norm(x, weight, eps, out_fp32)"},
    {"rms_norm_offset", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(py_rms_norm_offset)),
     METH_FASTCALL, "rms_norm_offset(x, weight, eps)"},
    {"rms_norm_unweighted", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(py_rms_norm_unweighted)),
     METH_FASTCALL, "rms_norm_unweighted(x, eps)"},
    {"fused_add_rms_norm", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(py_fused_add_rms_norm)),
     METH_FASTCALL, "fused_add_rms_norm(x, residual, weight, eps)"},
    {"fused_add_rms_norm_", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(py_fused_add_rms_norm_)),
     METH_FASTCALL, "fused_add_rms_norm_(x, residual, weight, eps)"},
    {"set_tuning", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(py_set_tuning)), METH_FASTCALL,
     "set_tuning(which, k, threads, stages, extra): a sweep's launch configuration (0: default)"},
    {"layout_matches", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(py_layout_matches)),
     METH_FASTCALL, "layout_matches(tensor, tensor._cdata)"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef fast_module = {PyModuleDef_HEAD_INIT, "rmsnorm_cuda_fast",
                           "Direct eager entries into the rmsnorm_cuda operators", -1, fast_methods};

}  // namespace

PyMODINIT_FUNC PyInit_rmsnorm_cuda_fast() { return PyModule_Create(&fast_module); }
