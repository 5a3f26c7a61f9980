"""quantize --calib: activation-weighted quantizer search (docs/FORMATS.md, RQ2 section,
"Calibration"). The model is rawloop-small rebuilt as F16 by the gguf package (its matrices are
Q4_0/Q8_0 in the shipped file, and quantize reads only float inputs); the calibration text is
the first 40 KB of tinyshakespeare (public domain), which does not overlap models/heldout.txt
(the end of the same file)."""
import re

import numpy as np
import pytest

from conftest import ROOT, run_rawloop

CALIB = ROOT / "tests" / "data" / "calib-shakespeare.txt"
HELDOUT = ROOT / "models" / "heldout.txt"


def write_f16(src, dst):
    """Copies a GGUF with 2-D tensors dequantized to F16 (1-D in F32), metadata as is."""
    import gguf
    from gguf import GGUFReader, GGUFValueType, GGUFWriter
    from gguf.quants import dequantize

    r = GGUFReader(str(src))
    arch = r.fields["general.architecture"]
    w = GGUFWriter(str(dst), bytes(arch.parts[arch.data[0]]).decode())
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k == "general.architecture":
            continue
        t = f.types[0]
        if k == "general.file_type":
            w.add_uint32(k, int(gguf.LlamaFileType.MOSTLY_F16))
        elif t == GGUFValueType.ARRAY:
            st = f.types[1]
            if st == GGUFValueType.STRING:
                w.add_array(k, [bytes(f.parts[i]).decode() for i in f.data])
            else:
                w.add_key_value(k, [f.parts[i][0].item() for i in f.data], t, sub_type=st)
        elif t == GGUFValueType.STRING:
            w.add_string(k, bytes(f.parts[f.data[0]]).decode())
        else:
            w.add_key_value(k, f.parts[f.data[0]][0].item(), t)
    for t in r.tensors:
        a = dequantize(t.data, t.tensor_type).reshape([int(x) for x in reversed(t.shape)])
        w.add_tensor(t.name, a.astype(np.float16 if a.ndim == 2 else np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.fixture(scope="module")
def f16(tmp_path_factory):
    d = tmp_path_factory.mktemp("calib")
    p = d / "small-f16.gguf"
    write_f16(ROOT / "models" / "rawloop-small.gguf", p)
    return p


def mean_kld(model, base):
    p = run_rawloop("perplexity", "-m", model, "-f", HELDOUT, "-c", 512, "--kl-divergence", base)
    out = p.stdout.decode() + p.stderr.decode()
    m = re.search(r"^KLD: n=\d+ mean=([0-9.eE+-]+)", out, re.M)
    assert m, out
    return float(m.group(1))


def test_calibrated_rq2_has_lower_kld(f16, tmp_path):
    base = tmp_path / "base.bin"
    run_rawloop("perplexity", "-m", f16, "-f", HELDOUT, "-c", 512, "--chunks", 8,
                "--save-logits", base)
    plain, cal = tmp_path / "rq2.gguf", tmp_path / "rq2-calib.gguf"
    run_rawloop("quantize", f16, plain, "--type", "RQ2")
    p = run_rawloop("quantize", f16, cal, "--type", "RQ2", "--calib", CALIB)
    err = p.stderr.decode()
    # 8 layers x 7 matrices in RQ2 weighted; the tied token_embd is Q8_0, which ignores them
    assert re.search(r"--calib: importances from 8 chunks of 512 tokens .*; 56 matrices use "
                     r"them, 1 \(", err), err
    assert plain.read_bytes() != cal.read_bytes()
    k_plain, k_cal = mean_kld(plain, base), mean_kld(cal, base)
    assert k_cal < k_plain, (k_cal, k_plain)
    # --calib-chunks 1 is a different (smaller) sample: a different file, still valid
    one = tmp_path / "rq2-calib1.gguf"
    err = run_rawloop("quantize", f16, one, "--type", "RQ2", "--calib", CALIB,
                      "--calib-chunks", 1).stderr.decode()
    assert "importances from 1 chunk of 512" in err, err
    assert one.read_bytes() != cal.read_bytes()


def test_calib_reference_and_legacy_types(f16, tmp_path):
    """Q8_0 keeps its reference quantizer: --calib changes no byte. Q4_0 with --calib is
    llama.cpp's imatrix Q4_0: every weighted matrix runs the weighted search (its bytes change),
    ffn_down of the first n/8 layers (layer 0 of 8 here) becomes Q4_1 (weighted too), and what
    gets no importances (norms, the tied token_embd head in Q8_0) keeps its bytes."""
    from gguf import GGMLQuantizationType as T, GGUFReader
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    run_rawloop("quantize", f16, a, "--type", "Q8_0")
    err = run_rawloop("quantize", f16, b, "--type", "Q8_0", "--calib", CALIB,
                      "--calib-chunks", 1).stderr.decode()
    assert re.search(r"0 matrices use them, 57 \(types without a weighted search", err), err
    assert a.read_bytes() == b.read_bytes()
    run_rawloop("quantize", f16, a, "--type", "Q4_0")
    imx = tmp_path / "imatrix.dat"
    err = run_rawloop("quantize", f16, b, "--type", "Q4_0", "--calib", CALIB,
                      "--calib-chunks", 1, "--calib-out", imx).stderr.decode()
    assert re.search(r"56 matrices use them, 1 \(types without a weighted search", err), err
    assert f"wrote the importances of 56 matrices to {imx}" in err, err
    check_imatrix(imx, b)
    ta = {t.name: t for t in GGUFReader(str(a)).tensors}
    tb = {t.name: t for t in GGUFReader(str(b)).tensors}
    moved = sorted(n for n in ta if ta[n].tensor_type != tb[n].tensor_type)
    assert moved == ["blk.0.ffn_down.weight"], moved
    assert tb["blk.0.ffn_down.weight"].tensor_type == T.Q4_1
    same = sorted(n for n in ta if bytes(ta[n].data) == bytes(tb[n].data))
    assert all(n == "token_embd.weight" or n.endswith("norm.weight") for n in same), same
    assert "token_embd.weight" in same and len(same) == 1 + 2 * 8 + 1, same


def read_legacy_imatrix(path):
    """llama.cpp's legacy imatrix layout (what llama-quantize --imatrix reads): int32 entry
    count; per entry int32 name length, the name, int32 ncall, int32 value count, float32
    values (llama-quantize divides them by ncall)."""
    b = path.read_bytes()
    n, o, out = int(np.frombuffer(b, "<i4", 1, 0)[0]), 4, {}
    for _ in range(n):
        ln = int(np.frombuffer(b, "<i4", 1, o)[0])
        name = b[o + 4:o + 4 + ln].decode()
        ncall, cnt = (int(v) for v in np.frombuffer(b, "<i4", 2, o + 4 + ln))
        o += 12 + ln
        out[name] = (ncall, np.frombuffer(b, "<f4", cnt, o).copy())
        o += 4 * cnt
    assert o == len(b), (o, len(b))
    return out


def check_imatrix(imx, model):
    """--calib-out wrote one entry per weighted matrix of model (the Q4_0 / Q4_1 ones), with
    ncall 1, one positive importance per input column, and the same vector for matrices that
    read the same input (q, k, v; gate, up)."""
    from gguf import GGMLQuantizationType as T, GGUFReader
    m = read_legacy_imatrix(imx)
    ts = {t.name: t for t in GGUFReader(str(model)).tensors}
    weighted = sorted(n for n, t in ts.items() if t.tensor_type in (T.Q4_0, T.Q4_1))
    assert sorted(m) == weighted and len(m) == 56, sorted(m)
    for name, (ncall, v) in m.items():
        assert ncall == 1 and v.size == int(ts[name].shape[0]), (name, ncall, v.size, ts[name].shape)
        assert np.all(np.isfinite(v)) and np.all(v > 0), name
    for l in range(8):
        q, k, v = (m[f"blk.{l}.attn_{x}.weight"][1] for x in "qkv")
        assert np.array_equal(q, k) and np.array_equal(q, v), l
        assert np.array_equal(m[f"blk.{l}.ffn_gate.weight"][1], m[f"blk.{l}.ffn_up.weight"][1]), l
        assert not np.array_equal(q, m[f"blk.{l}.attn_output.weight"][1]), l


def test_bad_calib_input(f16, tmp_path):
    out = tmp_path / "out.gguf"

    def fails(args, msg, code=1):
        p = run_rawloop("quantize", f16, out, "--type", "RQ2", *args, check=False)
        err = p.stderr.decode()
        assert p.returncode == code, err
        assert msg in err, err
        assert not out.exists() and not (tmp_path / "out.gguf.tmp").exists()

    fails(["--calib", tmp_path / "missing.txt"], "--calib: cannot open")
    short = tmp_path / "short.txt"
    short.write_text("To be, or not to be: that is the question.\n")
    fails(["--calib", short], "calibration needs at least one chunk of 512")
    fails(["--calib-chunks", "2"], "--calib-chunks needs --calib", code=2)
    fails(["--calib", CALIB, "--calib-chunks", "0"], "--calib-chunks", code=2)
    fails(["--calib-out", tmp_path / "imx.dat"], "--calib-out needs --calib", code=2)
    fails(["--calib", CALIB, "--calib-out", out], "--calib-out names IN or OUT", code=2)
    fails(["--calib", CALIB, "--calib-out", tmp_path / "no-such-dir" / "imx.dat"], "--calib-out: cannot create")
    hf = tmp_path / "hfdir"
    hf.mkdir()
    p = run_rawloop("quantize", hf, out, "--type", "RQ2", "--calib", CALIB, check=False)
    assert p.returncode == 1 and "convert it first" in p.stderr.decode(), p.stderr
    assert not out.exists()
