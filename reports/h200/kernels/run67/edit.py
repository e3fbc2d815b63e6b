"""Kernels run 67's edit (NOTES.md): backward_kernel compiled a second time for more blocks a multiprocessor (registers
capped to fit them), launched where the block's shared memory leaves room for as many. Usage: edit.py TREE"""
import sys
from pathlib import Path

p = Path(sys.argv[1]) / "backends/cuda_rmsnorm/rmsnorm_device.h"
s = p.read_text()
old_sig = ("template <typename T, typename G, int K>\n"
           "__global__ void __launch_bounds__(kMaxBackwardThreads) backward_kernel(const BackwardArgs a) {")
new_sig = ("// kMinBlocks > 0: compiled for that many blocks a multiprocessor (registers capped to fit them),\n"
           "// launched only where the block's shared memory leaves room for as many (launch_backward): three\n"
           "// blocks of 256 threads with two groups a thread (80 registers), two of 512 with one (64).\n"
           "template <typename T, typename G, int K, int kMinBlocks = 0>\n"
           "__global__ void __launch_bounds__(kMinBlocks == 3 ? 256 : kMaxBackwardThreads, kMinBlocks)\n"
           "    backward_kernel(const BackwardArgs a) {")
assert s.count(old_sig) == 1
s = s.replace(old_sig, new_sig)
old_launch = """    if (c.k == 1)
      err = launch_staged(backward_kernel<T, G, 1>, programs, false, c.threads, smem, a, stream);
    else
      err = launch_staged(backward_kernel<T, G, 2>, programs, false, c.threads, smem, a, stream);"""
new_launch = """    // A multiprocessor's shared memory (228 KB, 1 KB of it reserved a block): the bounded kernels where
    // the blocks they are compiled for fit it (RMSNORM_CUDA_BACKWARD_BOUND=0: never, to compare in one build).
    const auto fits = [&](int blocks) { return blocks * (smem + 1024) <= size_t(228) * 1024 && bounded_backward(); };
    if (c.k == 1 && c.threads == 512 && fits(2))
      err = launch_staged(backward_kernel<T, G, 1, 2>, programs, false, c.threads, smem, a, stream);
    else if (c.k == 1)
      err = launch_staged(backward_kernel<T, G, 1>, programs, false, c.threads, smem, a, stream);
    else if (c.threads == 256 && fits(3))
      err = launch_staged(backward_kernel<T, G, 2, 3>, programs, false, c.threads, smem, a, stream);
    else
      err = launch_staged(backward_kernel<T, G, 2>, programs, false, c.threads, smem, a, stream);"""
assert s.count(old_launch) == 1
s = s.replace(old_launch, new_launch)
anchor = "template <typename T, typename G>\nconst char* launch_backward("
helper = ("// The occupancy experiment's switch, read once a process.\n"
          "inline bool bounded_backward() {\n"
          "  static const bool on = [] {\n"
          "    const char* v = std::getenv(\"RMSNORM_CUDA_BACKWARD_BOUND\");\n"
          "    return v == nullptr || v[0] != '0';\n"
          "  }();\n"
          "  return on;\n"
          "}\n\n")
assert s.count(anchor) == 1
s = s.replace(anchor, helper + anchor)
if "#include <cstdlib>" not in s:
    s = s.replace("#pragma once\n", "#pragma once\n\n#include <cstdlib>\n", 1)
p.write_text(s)
