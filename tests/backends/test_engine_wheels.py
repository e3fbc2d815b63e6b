"""The engine wheels' packing (benchmarks/engine_wheels.py): every group fits its limit, only wheels larger than what
is left of a group are split, and the parts, joined in order as benchmarks/engines_on_device.sh joins them, give
back the wheel with the checksum written beside them."""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import random
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MIB = 1 << 20


@pytest.fixture(scope="module")
def wheels_module():
    spec = importlib.util.spec_from_file_location("engine_wheels", ROOT / "benchmarks" / "engine_wheels.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_plan_covers_each_wheel_once_within_the_capacity(wheels_module):
    sizes = {"big.whl": 97 * MIB, "large.whl": 88 * MIB, "a.whl": 3 * MIB, "b.whl": MIB // 2, "c.whl": 1000}
    capacity = 56 * MIB
    groups = wheels_module.plan(sizes, capacity)
    assert len(groups) == 4  # 188.5 MiB in groups of 56
    assert all(sum(end - start for _, start, end in g) <= capacity for g in groups)
    for name, size in sizes.items():
        ranges = sorted((s, e) for g in groups for n, s, e in g if n == name)
        assert ranges[0][0] == 0 and ranges[-1][1] == size
        assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
        if size < 4 * MIB:
            assert len(ranges) == 1  # small wheels go whole


def test_pack_writes_parts_that_join_to_the_wheel(wheels_module, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    gen = random.Random(0)
    contents = {"big-1.0-py3-none-any.whl": gen.randbytes(5 * MIB + 123),
                "small-1.0-py3-none-any.whl": gen.randbytes(1000)}
    for name, data in contents.items():
        (src / name).write_bytes(data)
    out = tmp_path / ".whl-engines"
    folders = wheels_module.pack(src, out, max_mib=2.5)
    assert [f.name for f in folders] == ["g1", "g2", "g3"]
    assert all(sum(p.stat().st_size for p in f.iterdir() if ".part-" in p.name or p.suffix == ".whl")
               <= 2.5 * MIB for f in folders)
    big = "big-1.0-py3-none-any.whl"
    parts = sorted((p for f in folders for p in f.glob(f"{big}.part-*")),
                   key=lambda p: int(re.search(r"part-(\d+)$", p.name).group(1)))
    assert len(parts) == 3 and not any((f / big).exists() for f in folders)
    joined = b"".join(p.read_bytes() for p in parts)
    assert joined == contents[big]
    for part in parts:  # each group holding a part holds the checksum too
        digest, name = (part.parent / f"{big}.sha256").read_text().split()
        assert name == big and digest == hashlib.sha256(joined).hexdigest()
    assert [p.read_bytes() for f in folders for p in f.glob("small-*.whl")] == [contents["small-1.0-py3-none-any.whl"]]


def test_the_pinned_list_names_each_package_once(wheels_module):
    names = [spec.split("==")[0].lower().replace("_", "-") for spec, _ in wheels_module.WHEELS]
    assert len(names) == len(set(names))
    assert all("==" in spec for spec, _ in wheels_module.WHEELS)
    for engine in ("liger-kernel", "fla-core", "xformers", "quack-kernels", "flashinfer-python"):
        assert engine in names
