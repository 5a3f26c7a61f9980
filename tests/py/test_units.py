"""Runs every C unit-test binary (build/test_*) as one pytest case each."""
import subprocess

import pytest

from conftest import BUILD, ROOT

UNITS = sorted(p.stem for p in (ROOT / "tests" / "unit").glob("test_*.c"))


@pytest.mark.parametrize("name", UNITS)
def test_unit(name):
    exe = BUILD / name
    assert exe.exists(), f"{exe} not built"
    p = subprocess.run([str(exe)], capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
