"""Shared fixtures: where the build is, where ../shared is, and a runner for the CLI."""
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = ROOT / os.environ.get("RAWLOOP_BUILD", "build")
SHARED = ROOT.parent / "shared"
RAWLOOP = BUILD / "rawloop"


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long oracle cases, skipped under sanitizers")


def run_quant_tool(mode, tname, data, tmp_path, weights=None):
    """build/test_quant's tool mode (`quant|dequant TYPE in out [w]`): the C quantizer / reference
    dequantizer on raw bytes, for the gguf-oracle tests. weights: a float32 file of importances
    (quant only): rows as long as it, each quantized by rl_quant_row_w with them."""
    src, dst = tmp_path / f"{tname}.in", tmp_path / f"{tname}.out"
    src.write_bytes(data)
    extra = [str(weights)] if weights is not None else []
    p = subprocess.run([str(BUILD / "test_quant"), mode, tname, str(src), str(dst), *extra],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return dst.read_bytes()


def run_rawloop(*args, input=None, check=True, timeout=600):
    """Runs build/rawloop with args; returns CompletedProcess (bytes)."""
    p = subprocess.run([str(RAWLOOP), *map(str, args)], input=input, capture_output=True,
                       timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"rawloop {' '.join(map(str, args))} failed ({p.returncode}):\n"
                             f"{p.stderr.decode(errors='replace')}")
    return p


@pytest.fixture(scope="session")
def rawloop():
    assert RAWLOOP.exists(), f"{RAWLOOP} not built: run make first"
    return run_rawloop
