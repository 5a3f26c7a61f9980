"""K-quant blocks against llama.cpp's llama-quantize (no imatrix), byte for byte.

rawloop's Q4_K, Q5_K and Q6_K quantizers reproduce llama.cpp's reference K-quantizers, so a
model quantized by `rawloop quantize` carries the same blocks as one quantized by
llama-quantize from the same floats. llama.cpp is not available in CI: its blocks for a fixed
set of rows are stored in tests/data/kquant/ (README there says how they were made), and this
test quantizes the same rows with rawloop's C quantizer (build/test_quant's tool mode) and
compares bytes.

The rows cover the cases where a search or a rounding rule decides: gaussian rows at two
scales, heavy tails, a lone outlier, constant rows of both signs, zeros, magnitudes so small
that the fp16 super-scale underflows (codes then come from the sub-block search), positive-only
data (the min clamps at 0), rows with all-zero sub-blocks, large magnitudes, and a grid whose
values sit exactly on rounding ties (ties to even)."""

import hashlib
import pathlib

import numpy as np
import pytest

from conftest import run_quant_tool

DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "kquant"
COLS = 256
TYPES = {"Q4_K": 144, "Q5_K": 176, "Q6_K": 210}  # bytes per 256-value block


def make_rows(n=COLS, seed=20240605):
    """The fixture's input rows, [12, n] float32. RandomState's streams are frozen by numpy
    (NEP 19), so the rows are the same on every numpy; the test checks their hash anyway.
    (test_qimatrix_llama.py draws its wider rows here too, with its own seed.)"""
    rs = np.random.RandomState(seed)
    rows = []
    rows.append(rs.standard_normal(n))                               # 0 gaussian
    rows.append(rs.standard_normal(n) * 0.02)                        # 1 weight-sized
    rows.append(rs.standard_t(2, n) * 0.05)                          # 2 heavy tails
    r = rs.standard_normal(n) * 0.1
    r[37] = 5.0
    rows.append(r)                                                   # 3 one outlier
    rows.append(np.full(n, 0.5))                                     # 4 constant > 0
    rows.append(np.full(n, -0.25))                                   # 5 constant < 0
    rows.append(np.zeros(n))                                         # 6 zeros
    rows.append(rs.standard_normal(n) * 1e-7)                        # 7 fp16 d underflows
    rows.append(rs.uniform(0.0, 1.0, n))                             # 8 positive only
    r = rs.standard_normal(n)
    r[0:32] = 0
    r[96:112] = 0
    r[200:256] = 0
    rows.append(r)                                                   # 9 zero sub-blocks
    rows.append(rs.standard_normal(n) * 1000.0)                      # 10 large
    rows.append((rs.randint(-8, 8, n) + 0.5 * rs.randint(0, 2, n)) * 0.125)  # 11 ties
    return np.stack(rows).astype(np.float32)


def fixture_meta():
    meta = {}
    for line in (DATA / "README").read_text().splitlines():
        if line.startswith("input-sha256: "):
            meta["sha"] = line.split(": ", 1)[1].strip()
    return meta


def test_fixture_rows_are_the_recorded_ones():
    rows = make_rows()
    assert rows.shape == (12, COLS)
    assert hashlib.sha256(rows.tobytes()).hexdigest() == fixture_meta()["sha"], \
        "make_rows() no longer gives the rows the fixture was made from"


@pytest.mark.parametrize("tname", sorted(TYPES))
def test_blocks_match_llama_quantize(tname, tmp_path):
    rows = make_rows()
    ref = (DATA / f"{tname.lower()}.bin").read_bytes()
    bs = TYPES[tname]
    assert len(ref) == rows.size // 256 * bs
    ours = run_quant_tool("quant", tname, rows.tobytes(), tmp_path)
    assert len(ours) == len(ref)
    bad = [i for i in range(len(ref) // bs) if ours[i * bs:(i + 1) * bs] != ref[i * bs:(i + 1) * bs]]
    assert not bad, f"{tname}: blocks {bad} differ from llama-quantize's (row = block * 256 / {COLS})"
