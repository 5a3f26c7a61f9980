"""Runs every C unit-test binary (build/test_*) as one pytest case each."""
import subprocess

import pytest

from conftest import BUILD, ROOT

UNITS = sorted(p.stem for p in (ROOT / "tests" / "unit").glob("test_*.c"))
# host programs of the CUDA code (tests/cuda/test_cursor.cu), built wherever nvcc is: the
# build says so by its stamp (Makefile, CUDA=1)
if (BUILD / "obj" / "cuda-1.stamp").exists():
    UNITS.append("test_cursor")


@pytest.mark.parametrize("name", UNITS)
def test_unit(name):
    exe = BUILD / name
    assert exe.exists(), f"{exe} not built"
    p = subprocess.run([str(exe)], capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
