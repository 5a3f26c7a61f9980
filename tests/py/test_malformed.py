"""`rawloop info` on broken and on valid GGUF files.

Broken files (tests/py/gguf_corpus.py, one case per parser bug class) must be rejected with exit
code 1, a message on stderr naming the offending field, and no sanitizer report. Valid files
written by the gguf Python package (the independent oracle) must be accepted and listed exactly
as the package wrote them; and files written by rawloop's own writer must be readable by the
package.
"""
import re
import subprocess

import numpy as np
import pytest

import gguf_corpus
from conftest import BUILD, SHARED, run_rawloop

SANITIZER = re.compile(r"AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|"
                       r"runtime error:|MemorySanitizer")
CASES = list(gguf_corpus.cases())


def _info(path):
    return run_rawloop("info", path, check=False, timeout=120)


@pytest.mark.parametrize("name,data,expect", CASES, ids=[c[0] for c in CASES])
def test_malformed_rejected(tmp_path, rawloop, name, data, expect):
    path = tmp_path / f"{name}.gguf"
    path.write_bytes(data)
    p = _info(path)
    err = p.stderr.decode(errors="replace")
    assert not SANITIZER.search(err), err
    assert p.returncode == 1, f"exit {p.returncode} (signal if negative); stderr: {err}"
    assert err.startswith("rawloop: "), err
    assert str(path) in err, f"message does not name the file: {err}"
    assert re.search(expect, err), f"expected /{expect}/ in: {err}"
    assert p.stdout == b"", "nothing printed on stdout for a rejected file"


def test_directory_and_missing(tmp_path, rawloop):
    p = _info(tmp_path)
    assert p.returncode == 1 and b"is a directory" in p.stderr
    p = _info(tmp_path / "missing.gguf")
    assert p.returncode == 1 and b"cannot open" in p.stderr


def test_usage_errors(rawloop):
    p = run_rawloop("info", "--bogus", check=False)
    assert p.returncode == 2 and b"usage: rawloop info" in p.stderr
    p = run_rawloop("info", check=False)
    assert p.returncode == 2 and b"usage" in p.stderr
    p = run_rawloop("info", "--help", check=False)
    assert p.returncode == 0 and b"usage: rawloop info" in p.stdout


def test_zero_dim_tensor_accepted(tmp_path, rawloop):
    """ggml allows ne[k] == 0 (an empty tensor); rawloop accepts it with size 0 and no crash."""
    g = gguf_corpus.Gguf().tensor("empty", [32, 0, 3], 8).tensor("after", [4], 0)
    path = tmp_path / "zero.gguf"
    path.write_bytes(g.build())
    p = run_rawloop("info", path)
    out = parse_info(p.stdout.decode())
    assert out["tensors"]["empty"] == ("Q8_0", [32, 0, 3], 0, 0)
    assert out["tensors"]["after"] == ("F32", [4], 0, 16)


@pytest.mark.parametrize("version", [2, 3])
def test_corpus_base_is_valid(tmp_path, rawloop, version):
    """The unbroken base of the corpus opens (as v3, and as v2, which has the same layout), so
    each broken case differs by its one fault."""
    g = gguf_corpus.base()
    g.version = version
    path = tmp_path / "base.gguf"
    path.write_bytes(g.build())
    out = parse_info(run_rawloop("info", path).stdout.decode())
    assert out["version"] == version
    assert list(out["tensors"]) == ["token_embd.weight", "blk.0.attn_q.weight",
                                    "output_norm.weight"]


# ---- positive cases against the gguf package -------------------------------------------------

KV_LINE = re.compile(r"^  (\S+): (ARRAY of (\w+), (\d+) elements|(\w+)) = (.*)$")
T_LINE = re.compile(r"^  (\S+): (\w+) \[([\d, ]+)\] offset (\d+), (\d+) bytes$")


def parse_info(text):
    """Parses `rawloop info` output into {version, alignment, kv: {key: (type, n, value text)},
    tensors: {name: (type, shape, offset, nbytes)}}."""
    out = {"kv": {}, "tensors": {}}
    section = None
    for line in text.splitlines():
        if line.startswith("version: "):
            out["version"] = int(line.split()[1])
        elif line.startswith("alignment: "):
            out["alignment"] = int(line.split()[1])
        elif line.startswith("metadata: "):
            section = "kv"
        elif line.startswith("tensors: "):
            section = "tensors"
        elif line.startswith("total: "):
            out["total"] = line
        elif section == "kv" and (m := KV_LINE.match(line)):
            if m.group(3):
                out["kv"][m.group(1)] = ("ARRAY:" + m.group(3), int(m.group(4)), m.group(6))
            else:
                out["kv"][m.group(1)] = (m.group(5), 1, m.group(6))
        elif section == "tensors" and (m := T_LINE.match(line)):
            shape = [int(x) for x in m.group(3).split(", ")]
            out["tensors"][m.group(1)] = (m.group(2), shape, int(m.group(4)), int(m.group(5)))
        elif line.startswith("  "):
            raise AssertionError(f"unparsed line: {line!r}")
    return out


def unquote(s):
    """Decodes a quoted string of the info output; a cut one ("..."...(N bytes)) gives its
    shown prefix."""
    s = re.sub(r'\.\.\.\(\d+ bytes\)$', "", s)
    assert s.startswith('"') and s.endswith('"'), s
    body = s[1:-1]
    body = re.sub(r"\\x([0-9a-f]{2})", lambda m: chr(int(m.group(1), 16)), body)
    return body.replace('\\"', '"').replace("\\\\", "\\")


def str_matches(text, full):
    """True when a shown string value is full, or, if cut, a prefix of it with full's length."""
    m = re.search(r"\.\.\.\((\d+) bytes\)$", text)
    if not m:
        return unquote(text) == full
    return full.startswith(unquote(text)) and int(m.group(1)) == len(full.encode())


def split_elems(s):
    assert s.startswith("[") and s.endswith("]"), s
    return [x for x in re.findall(r'"(?:[^"\\]|\\.)*"(?:\.\.\.\(\d+ bytes\))?|[^, \[\]][^,\]]*',
                                  s[1:-1])]


@pytest.mark.parametrize("alignment", [32, 64])
def test_gguf_package_file(tmp_path, rawloop, alignment):
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "pkg.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    if alignment != 32:
        w.add_custom_alignment(alignment)
    w.add_uint32("t.u32", 4000000000)
    w.add_int32("t.i32", -7)
    w.add_uint64("t.u64", 2**63 + 5)
    w.add_int64("t.i64", -(2**40))
    w.add_float32("t.f32", 0.1)
    w.add_float64("t.f64", 2.5e-300)
    w.add_bool("t.bool", True)
    w.add_uint8("t.u8", 200)
    w.add_int16("t.i16", -300)
    w.add_string("t.str", 'quote " and \\ and ünïcode')
    w.add_string("t.long", "x" * 200)
    w.add_array("t.arr_i", [1, -2, 3])
    w.add_array("t.arr_f", [0.5, 1.5])
    w.add_array("t.arr_s", ["a", "bb", "c c"])
    rng = np.random.default_rng(0)
    f32 = rng.standard_normal((3, 8), dtype=np.float32)
    f16 = rng.standard_normal((2, 16)).astype(np.float16)
    q_src = rng.standard_normal((4, 64), dtype=np.float32)
    q8 = gguf.quants.quantize(q_src, gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("f32.weight", f32)
    w.add_tensor("f16.weight", f16)
    w.add_tensor("q8.weight", q8, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("vec", np.arange(5, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    out = parse_info(run_rawloop("info", path).stdout.decode())
    assert out["version"] == 3 and out["alignment"] == alignment
    kv = out["kv"]
    assert kv["general.architecture"] == ("STRING", 1, '"llama"')
    assert kv["t.u32"] == ("UINT32", 1, "4000000000")
    assert kv["t.i32"] == ("INT32", 1, "-7")
    assert kv["t.u64"] == ("UINT64", 1, str(2**63 + 5))
    assert kv["t.i64"] == ("INT64", 1, str(-(2**40)))
    assert kv["t.f32"][0] == "FLOAT32" and np.float32(kv["t.f32"][2]) == np.float32(0.1)
    assert kv["t.f64"][0] == "FLOAT64" and float(kv["t.f64"][2]) == 2.5e-300
    assert kv["t.bool"] == ("BOOL", 1, "true")
    assert kv["t.u8"] == ("UINT8", 1, "200")
    assert kv["t.i16"] == ("INT16", 1, "-300")
    assert unquote(kv["t.str"][2]) == 'quote " and \\ and ünïcode'
    assert kv["t.long"][2].startswith('"' + "x" * 80 + '"...') and "200 bytes" in kv["t.long"][2]
    assert kv["t.arr_i"][:2] == ("ARRAY:INT32", 3) and split_elems(kv["t.arr_i"][2]) == \
        ["1", "-2", "3"]
    assert kv["t.arr_f"][:2] == ("ARRAY:FLOAT32", 2)
    assert [float(x) for x in split_elems(kv["t.arr_f"][2])] == [0.5, 1.5]
    assert kv["t.arr_s"][:2] == ("ARRAY:STRING", 3)
    assert [unquote(x) for x in split_elems(kv["t.arr_s"][2])] == ["a", "bb", "c c"]

    # Tensors as the package itself reads them back.
    r = gguf.GGUFReader(str(path))
    assert len(out["tensors"]) == len(r.tensors) == 4
    for t in r.tensors:
        typ, shape, offset, nbytes = out["tensors"][t.name]
        assert typ == t.tensor_type.name, t.name
        assert shape == [int(x) for x in t.shape], t.name
        assert nbytes == int(t.n_bytes), t.name
        assert r.data_offset + offset == int(t.data_offset), t.name
    assert out["tensors"]["f32.weight"][:2] == ("F32", [8, 3])
    assert out["tensors"]["q8.weight"][:2] == ("Q8_0", [64, 4])
    assert out["tensors"]["q8.weight"][3] == 4 * 2 * 34
    assert out["tensors"]["f16.weight"][:2] == ("F16", [16, 2])


VOCABS = sorted((SHARED / "testdata" / "tokenizers").glob("*.gguf"))


TYPE_NAMES = ["UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32", "BOOL",
              "STRING", "ARRAY", "UINT64", "INT64", "FLOAT64"]


@pytest.mark.parametrize("path", VOCABS, ids=[p.name for p in VOCABS])
def test_vocab_files_open(rawloop, path):
    """The shared vocab files open, and every key, type, count and shown element matches an
    independent walk of the file (gguf_corpus.scan_kvs; gguf.GGUFReader is too slow here)."""
    out = parse_info(run_rawloop("info", path).stdout.decode())
    want = gguf_corpus.scan_kvs(path.read_bytes())
    assert list(out["kv"]) == [k for k, *_ in want]
    for key, t, at, n, vals in want:
        typ, count, text = out["kv"][key]
        if at is None:
            assert typ == TYPE_NAMES[t] and count == 1, key
            if t == gguf_corpus.STRING:
                assert str_matches(text, vals[0]), key
            elif t in (gguf_corpus.F32, gguf_corpus.F64):
                assert np.float32(text) == np.float32(vals[0]), key
            elif t == gguf_corpus.BOOL:
                assert text == ("true" if vals[0] else "false"), key
            else:
                assert int(text) == vals[0], key
            continue
        assert (typ, count) == ("ARRAY:" + TYPE_NAMES[at], n), key
        shown = [x for x in split_elems(text) if x != "..."]
        assert len(shown) == min(n, 8), key
        if at == gguf_corpus.STRING:
            assert all(str_matches(x, v) for x, v in zip(shown, vals)), key
        elif at in (gguf_corpus.F32, gguf_corpus.F64):
            assert [np.float32(x) for x in shown] == [np.float32(v) for v in vals], key
        else:
            assert [int(x) for x in shown] == vals, key


def test_rawloop_writer_read_by_gguf_package(tmp_path):
    """build/test_gguf --write writes tests/unit/test_gguf.c's sample with the rawloop writer; the
    gguf package must read back the same values."""
    gguf = pytest.importorskip("gguf")
    exe = BUILD / "test_gguf"
    assert exe.exists(), f"{exe} not built"
    path = tmp_path / "rl.gguf"
    subprocess.run([str(exe), "--write", str(path)], check=True, timeout=60)
    assert not (tmp_path / "rl.gguf.tmp").exists()
    r = gguf.GGUFReader(str(path))
    f = r.fields
    assert f["general.architecture"].contents() == "rawloop-test"
    assert f["test.u32"].contents() == 4000000000
    assert f["test.i32"].contents() == -123456
    assert f["test.u64"].contents() == 2**64 - 1
    assert np.float32(f["test.f32"].contents()) == np.float32(0.1)
    assert f["test.true"].contents() is True or f["test.true"].contents() == 1
    assert f["test.false"].contents() in (False, 0)
    assert f["test.empty_str"].contents() == ""
    assert f["test.arr.i32"].contents() == [-3, 0, 7, 2147483647, -2147483648]
    assert np.array_equal(np.float32(f["test.arr.f32"].contents()),
                          np.float32([0.5, -1.25, 3.0e38, 1e-7]))
    assert f["test.arr.u8"].contents() == [0, 1, 255]
    assert f["test.arr.i16"].contents() == [-32768, 32767]
    assert f["test.arr.u64"].contents() == [2**64 - 1, 0]
    assert f["test.arr.i64"].contents() == [-(2**63), 42]
    assert f["test.arr.f64"].contents() == [3.141592653589793, -1e300]
    assert f["test.arr.empty"].contents() == []
    assert f["test.arr.str"].contents() == ["alpha", "", "γάμμα ✓", "with\nnewline"]
    types = gguf.GGMLQuantizationType
    want = {
        "tok_embd.weight": (types.F32, [4, 3], 48),
        "norm.weight": (types.F16, [8], 16),
        "blk.0.attn_q.weight": (types.Q8_0, [64, 2], 136),
        "blk.0.ffn_down.weight": (types.Q4_K, [256, 1, 2], 288),
        "empty": (types.F32, [2, 0, 3, 1], 0),
    }
    assert [t.name for t in r.tensors] == list(want)
    for t in r.tensors:
        typ, shape, nbytes = want[t.name]
        assert t.tensor_type == typ and [int(x) for x in t.shape] == shape, t.name
        assert int(t.n_bytes) == nbytes and int(t.data_offset) % 32 == 0, t.name
        # test_gguf.c's pattern(): byte j of tensor i is i*31 + j*7 + 1 (mod 256)
        i = list(want).index(t.name)
        raw = np.frombuffer(r.data, dtype=np.uint8)[int(t.data_offset):int(t.data_offset) + nbytes]
        assert np.array_equal(raw, (i * 31 + np.arange(nbytes) * 7 + 1).astype(np.uint8)), t.name


def test_prefill_and_autotune_flags_on_the_cpu(rawloop):
    """--prefill takes exact|fast|auto (anything else is a usage error); the CPU refuses fast
    (its prompts are already batched with decoding's arithmetic) and --autotune (no GPU knobs),
    each with a message that names the problem; exact runs and says what it did."""
    for cmd in (["bench", "-p", "4", "-n", "1"], ["run", "-n", "1"], ["perplexity", "-f", "x"],
                ["logits", "--ids", "1", "-o", "/dev/null"]):
        p = run_rawloop(*cmd, "--prefill", "bogus", check=False)
        assert p.returncode == 2 and b"--prefill expects exact, fast or auto" in p.stderr, cmd
    p = run_rawloop("bench", "--device", "cpu", "--prefill", "fast", "-p", "4", "-n", "1", "-r", "1",
                    check=False)
    assert p.returncode == 1 and b"--prefill fast is GPU-only" in p.stderr
    p = run_rawloop("bench", "--device", "cpu", "--autotune", "-p", "0", "-n", "2", "-r", "1",
                    check=False)
    assert p.returncode == 1 and b"--autotune tunes the GPU's tile knobs" in p.stderr
    p = run_rawloop("bench", "--device", "cpu", "--prefill", "exact", "-p", "4", "-n", "1", "-r", "1",
                    "--no-ceiling", "--json")
    assert b'"prefill": "exact: batches of up to 64 tokens, bit-identical' in p.stdout
