"""Q4_0 / Q4_1 / Q5_0 / Q5_1 and Q4_K / Q5_K / Q6_K with importances against llama.cpp's
llama-quantize, byte for byte.

With --calib, rawloop quantizes these types with llama.cpp's imatrix quantizers
(quantize_row_q4_1_impl, quantize_row_q4_K_impl and their siblings in ggml-quants.c; src/quant.c,
quant_legacy_w, quant_k45 and quant_q6_k given importances), so the blocks equal
llama-quantize's when it is given the same importances as its imatrix. llama.cpp
is not available in CI: its blocks for a fixed set of rows and importances are stored in
tests/data/qimatrix/ (README there says how they were made: llama-quantize with a legacy imatrix
file holding importances()), and this test quantizes the same rows with rawloop's C quantizer
(build/test_quant's tool mode with an importance file) and compares bytes.

The rows are test_kquant_llama.py's kinds (gaussian at three scales, heavy tails, an outlier,
constants of both signs, zeros, fp16-underflowing values, positive-only data, zero blocks,
rounding ties), 768 wide; the importances vary by 32-column block: log-normal, uniform,
all zero, one dominant column, every other column zero, tiny (1e-12), large (1e6), and ones
with a few zeros. Every row meets every kind of importance block three times.

The K-quants work on 256-value super-blocks (3 per row) and round their sub-block scales with
the importances summed per sub-block, so they are also checked with a second set,
importances_superblock(), whose kinds change per super-block: all ones (equal importances still
run the imatrix search), all zero (the sub-block scales' weights vanish: d = dmin = 0), and
log-normal with sub-blocks scaled 1e-4 .. 1e3."""

import hashlib
import pathlib

import numpy as np
import pytest

from conftest import run_quant_tool
from test_kquant_llama import make_rows as make_rows_of

DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "qimatrix"
COLS, ROWS = 768, 12
TYPES = {"Q4_0": 18, "Q4_1": 20, "Q5_0": 22, "Q5_1": 24}  # bytes per 32-value block
K_TYPES = {"Q4_K": 144, "Q5_K": 176, "Q6_K": 210}  # bytes per 256-value super-block


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


def importances_superblock():
    """[768] float32, one kind per 256-column super-block: all ones, all zeros, and log-normal
    with sub-block j (32 columns) scaled by 10^(j - 4)."""
    rs = np.random.RandomState(11)
    w = np.empty(COLS)
    w[:256] = 1.0
    w[256:512] = 0.0
    w[512:] = np.exp(1.5 * rs.standard_normal(256)) * np.repeat(10.0 ** (np.arange(8) - 4), 32)
    return w.astype(np.float32)


# K-quant fixtures: file suffix -> the importances llama-quantize was given
K_SETS = {"": importances, "_sb": importances_superblock}


def fixture_meta():
    meta = {}
    keys = ("rows-sha256", "importances-sha256", "importances-superblock-sha256")
    for line in (DATA / "README").read_text().splitlines():
        if ": " in line and line.split(": ", 1)[0] in keys:
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
    wsb = importances_superblock()
    assert wsb.shape == (COLS,)
    assert hashlib.sha256(wsb.tobytes()).hexdigest() == meta["importances-superblock-sha256"], \
        "importances_superblock() no longer gives the importances the fixture was made from"


def differing_blocks(a, b, bs):
    return [i for i in range(len(b) // bs) if a[i * bs:(i + 1) * bs] != b[i * bs:(i + 1) * bs]]


def check_fixture(tname, fixture, bs, per_block, w, tmp_path, where):
    """rawloop's blocks of make_rows() in tname with importances w against llama-quantize's
    blocks in DATA / fixture (bs bytes per block of per_block values); where: how a block index
    maps to the rows, for the message."""
    rows = make_rows()
    ref = (DATA / fixture).read_bytes()
    assert len(ref) == rows.size // per_block * bs
    (tmp_path / "w.f32").write_bytes(w.tobytes())
    ours = run_quant_tool("quant", tname, rows.tobytes(), tmp_path, tmp_path / "w.f32")
    assert len(ours) == len(ref)
    bad = differing_blocks(ours, ref, bs)
    assert not bad, f"{fixture}: {len(bad)} of {len(ref) // bs} blocks differ from llama-quantize's, " \
                    f"first {bad[:8]} ({where})"


@pytest.mark.parametrize("tname", sorted(TYPES))
def test_blocks_match_llama_quantize(tname, tmp_path):
    check_fixture(tname, f"{tname.lower()}.bin", TYPES[tname], 32, importances(), tmp_path,
                  f"row = block // {COLS // 32}, importance kind = block % 8")


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


@pytest.mark.parametrize("suffix", sorted(K_SETS))
@pytest.mark.parametrize("tname", sorted(K_TYPES))
def test_kquant_blocks_match_llama_quantize(tname, suffix, tmp_path):
    """llama-quantize's imatrix Q4_K / Q5_K / Q6_K blocks (quantize_row_q4_K_impl and siblings),
    from a Q4_K_M / Q5_K_M run (README), against rawloop's rl_quant_row_w."""
    check_fixture(tname, f"{tname.lower()}{suffix}.bin", K_TYPES[tname], 256, K_SETS[suffix](), tmp_path,
                  "row = block // 3, super-block = block % 3")


@pytest.mark.parametrize("suffix", sorted(K_SETS))
@pytest.mark.parametrize("tname", sorted(K_TYPES))
def test_kquant_importances_change_the_blocks(tname, suffix, tmp_path):
    """The K-quant fixtures are not the reference quantizer's output: without importances most
    super-blocks differ (measured: 27-33 of 36; the rest are rows of constants and zeros), so
    ignoring the importances fails the comparison above. With importances_superblock(), the
    super-blocks of equal importances (every third block) differ from the reference too (9 of
    12: all but rows 4-6, the constants and zeros, on which both searches agree), which a
    fallback to the reference for equal importances would not give."""
    rows = make_rows()
    ref = (DATA / f"{tname.lower()}{suffix}.bin").read_bytes()
    plain = run_quant_tool("quant", tname, rows.tobytes(), tmp_path)
    bs = K_TYPES[tname]
    differ = differing_blocks(plain, ref, bs)
    assert len(differ) >= 27, differ
    if suffix == "_sb":
        uniform = range(0, len(ref) // bs, 3)
        assert len(set(uniform) & set(differ)) >= 9, differ
