"""Compile the project's Triton FORWARD kernel (_rms_norm_fwd_kernel) offline for sm_90, with the GPU tuning
(launch_config(..., interpreted=False)), as _forward launches it. Writes cubin + SASS + resource usage.

    SRC=<a checkout of the tree> python triton_fwd_sass.py 8192 float16   (writes into the working folder)
"""

import os
import subprocess
import sys
import tempfile
import types
from pathlib import Path

sys.dont_write_bytecode = True
os.environ.pop("TRITON_INTERPRET", None)
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="cache-", dir=os.getcwd())
MAIN = os.environ["SRC"]
# Map the package layout of pyproject.toml onto the read-only source tree without installing it.
pkg = types.ModuleType("rmsnorm_conformance")
pkg.__path__ = [f"{MAIN}/rmsnorm_conformance"]
sys.modules["rmsnorm_conformance"] = pkg
for sub, d in [("contract", "contract"), ("harness", "harness"), ("backends", "backends")]:
    m = types.ModuleType(f"rmsnorm_conformance.{sub}")
    m.__path__ = [f"{MAIN}/{d}"]
    sys.modules[m.__name__] = m
    setattr(pkg, sub, m)
import torch  # noqa: E402 (after the package's modules are mapped onto the tree)
import triton  # noqa: E402 (after the package's modules are mapped onto the tree)
from triton.backends.compiler import GPUTarget  # noqa: E402 (after the package's modules are mapped onto the tree)
from triton.compiler import ASTSource  # noqa: E402 (after the package's modules are mapped onto the tree)

import rmsnorm_conformance.backends.triton_rmsnorm as tr  # noqa: E402 (after the package's modules are mapped onto the tree)

dim = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
dtype = getattr(torch, sys.argv[2] if len(sys.argv) > 2 else "float16")
cfg = tr.launch_config(dim, dtype, interpreted=False)
print("triton", triton.__version__, "cfg", cfg)
k = tr._rms_norm_fwd_kernel
p = {torch.bfloat16: "*bf16", torch.float16: "*fp16", torch.float32: "*fp32"}[dtype]
sig = dict(
    x_ptr=p,
    r_ptr=p,
    w_ptr=p,
    y_ptr=p,
    ro_ptr=p,
    n_rows="i32",
    x_row_stride="i32",
    r_row_stride="i32",
    eps="fp32",
    n_cols="i32",
    weight_mode="i32",
)
consts = dict(
    DIM=tr.dim_constexpr(dim),
    GROUPS=cfg.groups,
    ROWS=cfg.rows,
    TILES=cfg.tiles,
    VEC=cfg.vec,
    RESIDUAL=False,
    FLAT=cfg.flat,
)
sig.update({n: "constexpr" for n in consts})
names = k.arg_names
attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in ("x_ptr", "r_ptr", "w_ptr", "y_ptr", "ro_ptr")}
src = ASTSource(k, {n: sig[n] for n in names}, consts, attrs)
c = triton.compile(
    src, target=GPUTarget("cuda", 90, 32), options={"num_warps": cfg.num_warps, "enable_fp_fusion": False}
)
tag = f"triton_fwd_{dtype}_{dim}".replace("torch.", "")
out = os.path.join(os.getcwd(), tag)
Path(out + ".cubin").write_bytes(c.asm["cubin"])
Path(out + ".ptx").write_text(c.asm["ptx"])
bin_ = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
sass = subprocess.run([f"{bin_}/cuobjdump", "-sass", out + ".cubin"], capture_output=True, text=True).stdout
Path(out + ".sass").write_text(sass)
print(
    subprocess.run(
        [f"{bin_}/cuobjdump", "--dump-resource-usage", out + ".cubin"], capture_output=True, text=True
    ).stdout
)
print("shared", c.metadata.shared, "num_warps", c.metadata.num_warps, "->", out + ".{cubin,ptx,sass}")
