"""rawloop perplexity --save-logits / --kl-divergence (cli/kld.h has the file format).

Oracle: numpy. The logits of both models for every chunk come from `rawloop logits` (raw
float32, no storage format in between), the token ids from `rawloop tokenize`; numpy computes
KL(base || quant), the argmax agreement and the PPLs, which rawloop's figures must match within
the error of the uint16 storage. The base file itself is parsed here independently of rawloop.
"""
import os
import re
import signal
import struct
import subprocess

import numpy as np
import pytest

from conftest import RAWLOOP, ROOT, run_rawloop

MODELS = ROOT / "models"
BASE_MODEL = MODELS / "rawloop-draft-f16.gguf"
QUANT_MODEL = MODELS / "rawloop-draft.gguf"
TEXT = ROOT / "models" / "heldout.txt"
CTX, CHUNKS = 128, 4
FIRST, N_SCORED = CTX // 2, CTX - 1 - CTX // 2
HEAD = 48
ROW_HEAD = 16
KLD_LINE = re.compile(rb"^KLD: (.*)$", re.M)


def kld_fields(out):
    m = KLD_LINE.findall(out)
    assert m, f"no KLD: line in\n{out[-3000:].decode(errors='replace')}"
    return {k.decode(): float(v) for k, v in (kv.split(b"=") for kv in m[-1].split())}


def ppl_args(model, *extra):
    return ["perplexity", "-m", model, "-f", TEXT, "-c", CTX, "--chunks", CHUNKS, *extra]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    path = tmp_path_factory.mktemp("kld") / "base.rllogit"
    run_rawloop(*ppl_args(BASE_MODEL, "--save-logits", path))
    assert not os.path.exists(str(path) + ".tmp")
    return path


def read_base(path):
    """Parses the file as kld.h describes it; returns (header dict, tokens, rows)."""
    data = path.read_bytes()
    assert data[:8] == b"RLLOGIT1"
    version, reserved, nv, ctx, n_chunks, n_scored = struct.unpack_from("<IIQQQQ", data, 8)
    assert (version, reserved) == (1, 0)
    toks = np.frombuffer(data, "<i4", ctx * n_chunks, HEAD)
    row_bytes = ROW_HEAD + 2 * nv
    off = HEAD + 4 * ctx * n_chunks
    assert len(data) == off + n_chunks * n_scored * row_bytes
    rows = []
    for r in range(n_chunks * n_scored):
        o = off + r * row_bytes
        lo, step, im, lp_tok = struct.unpack_from("<ffif", data, o)
        codes = np.frombuffer(data, "<u2", nv, o + ROW_HEAD)
        rows.append((lo, step, im, lp_tok, codes))
    return dict(n_vocab=nv, ctx=ctx, n_chunks=n_chunks, n_scored=n_scored), toks, rows


@pytest.fixture(scope="module")
def fed_tokens():
    """The chunks as llama-perplexity feeds them: [BOS]+text, cut into CTX, BOS at each start."""
    p = run_rawloop("tokenize", "-m", BASE_MODEL, "--ids", input=TEXT.read_bytes())
    ids = [0] + [int(x) for x in p.stdout.split()]  # BOS is id 0 in these models
    chunks = np.array(ids[:CTX * CHUNKS], dtype=np.int64).reshape(CHUNKS, CTX)
    chunks[:, 0] = 0
    return chunks


def model_logits(model, chunk, tmp_path):
    out = tmp_path / "logits.bin"
    run_rawloop("logits", "-m", model, "--ids", " ".join(map(str, chunk)), "-o", out)
    return np.fromfile(out, "<f4").reshape(len(chunk), -1).astype(np.float64)


def log_softmax(x):
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


@pytest.fixture(scope="module")
def oracle(fed_tokens, tmp_path_factory):
    """Exact per-position KL, argmax agreement and NLLs from the raw logits of both models."""
    tmp = tmp_path_factory.mktemp("oracle")
    kl, same, nll_q, nll_b, lp_base = [], [], [], [], []
    for chunk in fed_tokens:
        lb = log_softmax(model_logits(BASE_MODEL, chunk, tmp))[FIRST:CTX - 1]
        lq = log_softmax(model_logits(QUANT_MODEL, chunk, tmp))[FIRST:CTX - 1]
        nxt = chunk[FIRST + 1:]
        kl.append((np.exp(lb) * (lb - lq)).sum(axis=1))
        same.append(lb.argmax(axis=1) == lq.argmax(axis=1))
        nll_q.append(-lq[np.arange(N_SCORED), nxt])
        nll_b.append(-lb[np.arange(N_SCORED), nxt])
        lp_base.append(lb)
    return dict(kl=np.concatenate(kl), same=np.concatenate(same), nll_q=np.concatenate(nll_q),
                nll_b=np.concatenate(nll_b), lp_base=np.concatenate(lp_base))


def test_base_file_layout_and_storage_error(base, fed_tokens, oracle):
    h, toks, rows = read_base(base)
    assert h == dict(n_vocab=4096, ctx=CTX, n_chunks=CHUNKS, n_scored=N_SCORED)
    assert np.array_equal(toks.reshape(CHUNKS, CTX), fed_tokens)
    assert len(rows) == CHUNKS * N_SCORED
    worst = 0.0
    for (lo, step, im, lp_tok, codes), lp in zip(rows, oracle["lp_base"]):
        assert 0 < step <= 64 / 65535 * 1.001
        assert im == lp.argmax()
        decoded = lo + step * codes.astype(np.float64)
        # The documented error: at most half a code step (plus float rounding of lo).
        worst = max(worst, np.abs(decoded - lp).max() / step)
    assert worst <= 0.5 + 1e-2, f"decoded log-probs off by {worst} steps"
    lp_toks = np.array([r[3] for r in rows])
    np.testing.assert_allclose(lp_toks, -oracle["nll_b"], rtol=0, atol=1e-5)


def test_same_model_gives_zero_kld(base):
    p = run_rawloop(*ppl_args(BASE_MODEL, "--kl-divergence", base))
    f = kld_fields(p.stdout)
    assert f["n"] == CHUNKS * N_SCORED
    assert 0 <= f["mean"] < 1e-6 and f["max"] < 1e-6, f
    assert f["top1"] == 1.0
    assert abs(f["ln_ppl_ratio"]) < 1e-6 and f["ppl_q"] == pytest.approx(f["ppl_base"], rel=1e-6)
    assert b"Same top p: 100.000" in p.stdout


def test_q8_against_f16_matches_numpy(base, oracle):
    p = run_rawloop(*ppl_args(QUANT_MODEL, "--kl-divergence", base))
    f = kld_fields(p.stdout)
    kl = oracle["kl"]
    n = len(kl)
    assert f["n"] == n
    # A small but real divergence: Q8_0 is close to F16 and not equal.
    assert 1e-6 < f["mean"] < 1e-2, f
    # Storage error of the base rows: ~1e-4 nats per log-prob, which after renormalization moves
    # a position's KL by far less than the KL itself (measured: 2e-5 relative on the mean,
    # 2e-7 absolute on the median); 0.5% + 5e-7 absolute leaves room for other SIMD paths.
    tol = dict(rel=5e-3, abs=5e-7)
    assert f["mean"] == pytest.approx(kl.mean(), **tol)
    assert f["se"] == pytest.approx(kl.std() / np.sqrt(n - 1), **tol)
    assert f["median"] == pytest.approx(np.median(kl), **tol)
    assert f["p99"] == pytest.approx(np.percentile(kl, 99), **tol)
    assert f["max"] == pytest.approx(kl.max(), **tol)
    assert f["top1"] == pytest.approx(oracle["same"].mean(), abs=1e-9)
    top = oracle["same"].mean()
    assert f["top1_se"] == pytest.approx(np.sqrt(top * (1 - top) / (n - 1)), abs=1e-9)
    ln_ratio = oracle["nll_q"].mean() - oracle["nll_b"].mean()
    assert f["ln_ppl_ratio"] == pytest.approx(ln_ratio, abs=1e-6)
    assert f["ppl_q"] == pytest.approx(np.exp(oracle["nll_q"].mean()), rel=1e-6)
    assert f["ppl_base"] == pytest.approx(np.exp(oracle["nll_b"].mean()), rel=1e-6)
    d = oracle["nll_q"] - oracle["nll_b"]  # se of the ratio: var(nll_q - nll_b) / (n - 1)
    assert f["ln_ppl_ratio_se"] == pytest.approx(d.std() / np.sqrt(n - 1), rel=1e-3)
    assert b"Final estimate: PPL = " in p.stdout and b"Same top p:" in p.stdout


def expect_error(args, *words):
    p = run_rawloop(*args, check=False)
    assert p.returncode == 1, (p.returncode, p.stderr)
    err = p.stderr.decode()
    last = err.strip().splitlines()[-1]  # progress lines may come before the one error line
    assert last.startswith("rawloop: "), err
    for w in words:
        assert w in last, (w, last)
    assert b"KLD:" not in p.stdout


def test_mismatched_ctx_and_chunks(base):
    expect_error(["perplexity", "-m", QUANT_MODEL, "-f", TEXT, "-c", 64, "--kl-divergence",
                  base], "-c 128", "-c 64")
    expect_error(["perplexity", "-m", QUANT_MODEL, "-f", TEXT, "--chunks", 3, "--kl-divergence",
                  base], "4 chunks", "--chunks 3")


def test_other_text_is_refused(base, tmp_path):
    other = tmp_path / "other.txt"
    other.write_bytes(TEXT.read_bytes()[5000:])
    expect_error(["perplexity", "-m", QUANT_MODEL, "-f", other, "--kl-divergence", base],
                 "other tokens")


def test_truncated_and_wrong_magic(base, tmp_path):
    data = base.read_bytes()
    cut = tmp_path / "cut.bin"
    cut.write_bytes(data[:-100])
    expect_error(["perplexity", "-m", QUANT_MODEL, "-f", TEXT, "--kl-divergence", cut],
                 "truncated")
    cut.write_bytes(data[:20])
    expect_error(["perplexity", "-m", QUANT_MODEL, "-f", TEXT, "--kl-divergence", cut],
                 "truncated")
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"_logits_" + data[8:])
    expect_error(["perplexity", "-m", QUANT_MODEL, "-f", TEXT, "--kl-divergence", bad], "magic")
    extra = tmp_path / "extra.bin"
    extra.write_bytes(data + b"\0")
    expect_error(["perplexity", "-m", QUANT_MODEL, "-f", TEXT, "--kl-divergence", extra],
                 "after the last row")


def test_other_vocabulary_is_refused(base, tmp_path):
    # A well-formed file from a model with a larger vocabulary: same counts, longer rows.
    h, toks, rows = read_base(base)
    nv = 8192
    out = bytearray(b"RLLOGIT1" + struct.pack("<IIQQQQ", 1, 0, nv, CTX, CHUNKS, N_SCORED))
    out += toks.tobytes()
    for lo, step, im, lp_tok, codes in rows:
        out += struct.pack("<ffif", lo, step, im, lp_tok) + codes.tobytes() + bytes(2 * (nv - 4096))
    other = tmp_path / "vocab.bin"
    other.write_bytes(bytes(out))
    expect_error(["perplexity", "-m", QUANT_MODEL, "-f", TEXT, "--kl-divergence", other],
                 "8192", "4096")


def test_corrupt_row_is_refused(base, tmp_path):
    data = bytearray(base.read_bytes())
    off = HEAD + 4 * CTX * CHUNKS + 5 * (ROW_HEAD + 2 * 4096)
    data[off + 4:off + 8] = struct.pack("<f", float("nan"))  # a row's step
    bad = tmp_path / "nan.bin"
    bad.write_bytes(bytes(data))
    expect_error(["perplexity", "-m", QUANT_MODEL, "-f", TEXT, "--kl-divergence", bad],
                 "corrupt row")


def test_failed_save_leaves_no_file(tmp_path):
    out = tmp_path / "b.bin"
    short = tmp_path / "short.txt"
    short.write_text("Too short for a context of 128 tokens.")
    p = run_rawloop("perplexity", "-m", BASE_MODEL, "-f", short, "-c", CTX, "--save-logits",
                    out, check=False)
    assert p.returncode == 1 and b"need at least" in p.stderr
    assert not out.exists() and not (tmp_path / "b.bin.tmp").exists()
    # A failed rerun leaves an earlier complete file alone.
    out.write_bytes(b"earlier")
    run_rawloop("perplexity", "-m", BASE_MODEL, "-f", short, "-c", CTX, "--save-logits", out,
                check=False)
    assert out.read_bytes() == b"earlier"
    p = run_rawloop("perplexity", "-m", BASE_MODEL, "-f", TEXT, "--save-logits",
                    tmp_path / "no" / "dir.bin", check=False)
    assert p.returncode == 1 and b"cannot create" in p.stderr


def test_killed_save_leaves_no_file(tmp_path):
    out = tmp_path / "b.bin"
    args = ["perplexity", "-m", MODELS / "rawloop-small.gguf", "-f", TEXT, "-c", 512,
            "--save-logits", out]
    proc = subprocess.Popen([str(RAWLOOP), *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        got = b""
        while b"[2]" not in got:  # two chunks written: the .tmp file has rows in it
            b = proc.stdout.read(1)
            assert b, "rawloop ended before its second chunk"
            got += b
        assert (tmp_path / "b.bin.tmp").exists() and not out.exists()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == -signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not out.exists() and not (tmp_path / "b.bin.tmp").exists()


def test_usage(base):
    p = run_rawloop("perplexity", "--help")
    assert b"--save-logits" in p.stdout and b"--kl-divergence" in p.stdout
    p = run_rawloop("perplexity", "-f", TEXT, "--save-logits", "x", "--kl-divergence", base,
                    check=False)
    assert p.returncode == 2
