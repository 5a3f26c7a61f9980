"""Q4_0 / Q4_1 / Q5_0 / Q5_1 with importances against llama.cpp's llama-quantize, byte for byte.

With --calib, rawloop quantizes these types with llama.cpp's imatrix quantizers
(quantize_row_q4_1_impl and siblings in ggml-quants.c; src/quant.c, quant_legacy_w), so the
blocks equal llama-quantize's when it is given the same importances as its imatrix. llama.cpp
is not available in CI: its blocks for a fixed set of rows and importances are stored in
tests/data/qimatrix/ (README there says how they were made: llama-quantize with a legacy imatrix
file holding importances()), and this test quantizes the same rows with rawloop's C quantizer
(build/test_quant's tool mode with an importance file) and compares bytes.

The rows are test_kquant_llama.py's kinds (gaussian at three scales, heavy tails, an outlier,
constants of both signs, zeros, fp16-underflowing values, positive-only data, zero blocks,
rounding ties), 768 wide; the importances vary by 32-column block: log-normal, uniform,
all zero, one dominant column, every other column zero, tiny (1e-12), large (1e6), and ones
with a few zeros. Every row meets every kind of importance block three times."""

import hashlib
import pathlib

import numpy as np
import pytest

from conftest import run_quant_tool
from test_kquant_llama import make_rows as make_rows_of

DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "qimatrix"
COLS, ROWS = 768, 12
TYPES = {"Q4_0": 18, "Q4_1": 20, "Q5_0": 22, "Q5_1": 24}  # bytes per 32-value block


def make_rows():
    """[12, 768] float32: test_kquant_llama's kinds of rows, 768 wide, from another seed."""
    return make_rows_of(COLS, seed=20261201)


def importances():
    """[768] float32, one kind per 32-column block (block k: kind k % 8)."""
    rs = np.random.RandomState(7)
    w = np.empty(COLS)
    for k in range(COLS // 32):
        lognormal = np.exp(1.5 * rs.standard_normal(32))
        kind = k % 8
        if kind == 0:
            b = lognormal
        elif kind == 1:
            b = np.ones(32)
        elif kind == 2:
            b = np.zeros(32)
        elif kind == 3:
            b = np.full(32, 1e-3)
            b[rs.randint(32)] = 1e4
        elif kind == 4:
            b = lognormal * (np.arange(32) % 2)
        elif kind == 5:
            b = lognormal * 1e-12
        elif kind == 6:
            b = lognormal * 1e6
        else:
            b = np.ones(32)
            b[rs.choice(32, 3, replace=False)] = 0
        w[32 * k:32 * (k + 1)] = b
    return w.astype(np.float32)


def fixture_meta():
    meta = {}
    for line in (DATA / "README").read_text().splitlines():
        if ": " in line and line.split(": ", 1)[0] in ("rows-sha256", "importances-sha256"):
            k, v = line.split(": ", 1)
            meta[k] = v.strip()
    return meta


def test_fixture_inputs_are_the_recorded_ones():
    rows, w = make_rows(), importances()
    assert rows.shape == (ROWS, COLS) and w.shape == (COLS,)
    meta = fixture_meta()
    assert hashlib.sha256(rows.tobytes()).hexdigest() == meta["rows-sha256"], \
        "make_rows() no longer gives the rows the fixture was made from"
    assert hashlib.sha256(w.tobytes()).hexdigest() == meta["importances-sha256"], \
        "importances() no longer gives the importances the fixture was made from"


@pytest.mark.parametrize("tname", sorted(TYPES))
def test_blocks_match_llama_quantize(tname, tmp_path):
    rows, w = make_rows(), importances()
    ref = (DATA / f"{tname.lower()}.bin").read_bytes()
    bs = TYPES[tname]
    assert len(ref) == rows.size // 32 * bs
    (tmp_path / "w.f32").write_bytes(w.tobytes())
    ours = run_quant_tool("quant", tname, rows.tobytes(), tmp_path, tmp_path / "w.f32")
    assert len(ours) == len(ref)
    bad = [i for i in range(len(ref) // bs) if ours[i * bs:(i + 1) * bs] != ref[i * bs:(i + 1) * bs]]
    assert not bad, f"{tname}: {len(bad)} blocks differ from llama-quantize's, first {bad[:8]} " \
                    f"(row = block // {COLS // 32}, importance kind = block % 8)"


@pytest.mark.parametrize("tname", sorted(TYPES))
def test_importances_change_the_blocks(tname, tmp_path):
    """The fixture is not the reference quantizer's output: without importances the blocks
    differ (so the comparison above tests the weighted search)."""
    rows = make_rows()
    ref = (DATA / f"{tname.lower()}.bin").read_bytes()
    plain = run_quant_tool("quant", tname, rows.tobytes(), tmp_path)
    bs = TYPES[tname]
    differ = sum(plain[i:i + bs] != ref[i:i + bs] for i in range(0, len(ref), bs))
    assert differ > len(ref) // bs // 2, differ
