"""GGUF files with rawloop's own tensor types, read without rawloop (the gguf package refuses
them, which test_rq2.py checks): a minimal GGUF reader, and numpy decoders of the layouts
docs/FORMATS.md documents (RQ2 by its bit layout; FP8 with torch's float8_e4m3fn as the e4m3
decoder; RQ4 by its bit layout). Other types are dequantized by gguf.quants. Shared by test_rq2.py,
test_rq4.py and test_fp8.py."""
from __future__ import annotations

import struct

import numpy as np
import torch

import gguf
from gguf.quants import dequantize

import oracle_models as om

RQ2_ID = 1024
FP8_ID = 1025
RQ4_ID = 1026
KEY = "rawloop.format_version"


# ---- the documented layout, in numpy -------------------------------------------------------------

def fp8_dequant(raw: np.ndarray) -> np.ndarray:
    """FP8 blocks (uint8, 34 bytes each) -> float32 values, 32 per block: bf16 d, then e4m3
    codes; value = d * e4m3(code), one float32 multiply. torch decodes the codes (0x7f/0xff,
    NaN to torch, are never written)."""
    b = np.asarray(raw, dtype=np.uint8).reshape(-1, 34)
    d = torch.from_numpy(b[:, :2].copy()).view(torch.bfloat16).float()            # [nb, 1]
    v = torch.from_numpy(b[:, 2:].copy()).view(torch.float8_e4m3fn).float()      # [nb, 32]
    return (d * v).numpy().reshape(-1)


# id -> (values per block, bytes per block, decoder, name)
RAWLOOP_TYPES = {}


def rq2_dequant(raw: np.ndarray) -> np.ndarray:
    """RQ2 blocks (uint8, 20 bytes each) -> float32 values, 64 per block: codes of weight j in
    byte j/4 at bits 2*(j%4), then fp16 d, fp16 m; value = d*code + m."""
    b = np.asarray(raw, dtype=np.uint8).reshape(-1, 20)
    codes = (b[:, :16, None] >> np.array([0, 2, 4, 6], dtype=np.uint8)) & 3   # [nb, 16, 4]
    codes = codes.reshape(-1, 64).astype(np.float32)
    d = b[:, 16:18].copy().view("<f2").astype(np.float32)
    m = b[:, 18:20].copy().view("<f2").astype(np.float32)
    return (d * codes + m).reshape(-1)   # float32 products and sums, as the C reference


def rq4_dequant(raw: np.ndarray) -> np.ndarray:
    """RQ4 blocks (uint8, 36 bytes each) -> float32 values, 64 per block: per 32-value half h,
    16 code bytes, byte i holding weight 32h + i in its low nibble and 32h + 16 + i in its high
    one; then fp16 d, fp16 m; value = d*code + m."""
    b = np.asarray(raw, dtype=np.uint8).reshape(-1, 36)
    q = b[:, :32].reshape(-1, 2, 16)
    codes = np.concatenate([q & 15, q >> 4], axis=2).reshape(-1, 64).astype(np.float32)
    d = b[:, 32:34].copy().view("<f2").astype(np.float32)
    m = b[:, 34:36].copy().view("<f2").astype(np.float32)
    return (d * codes + m).reshape(-1)   # float32 products and sums, as the C reference


RAWLOOP_TYPES.update({RQ2_ID: (64, 20, rq2_dequant, "RQ2"), FP8_ID: (32, 34, fp8_dequant, "FP8"),
                      RQ4_ID: (64, 36, rq4_dequant, "RQ4")})


def random_dm_blocks(rng, nb: int, bs: int, d_range, m_range) -> np.ndarray:
    """nb random blocks of an RQ type (bs bytes: codes, then fp16 d, fp16 m) with d and m drawn
    uniformly from the given ranges: every code byte is legal, only the pair must be sane."""
    raw = rng.integers(0, 256, (nb, bs), dtype=np.uint8)
    for at, (lo, hi) in ((bs - 4, d_range), (bs - 2, m_range)):
        raw[:, at:at + 2] = np.frombuffer(rng.uniform(lo, hi, nb).astype("<f2").tobytes(), np.uint8).reshape(nb, 2)
    return raw


def block_dm(q: np.ndarray, bs: int):
    """The (d, m) pairs of an RQ type's blocks as float32 arrays."""
    b = np.asarray(q, dtype=np.uint8).reshape(-1, bs)
    return (b[:, bs - 4:bs - 2].copy().view("<f2").astype(np.float32).ravel(),
            b[:, bs - 2:].copy().view("<f2").astype(np.float32).ravel())


def c_dequant(type_name_: str, raw: np.ndarray, tmp_path) -> np.ndarray:
    """The C reference decoder's values for raw blocks (`test_quant dequant TYPE`)."""
    import subprocess
    from conftest import BUILD
    src, dst = tmp_path / "in.bin", tmp_path / "out.f32"
    raw.tofile(src)
    subprocess.run([str(BUILD / "test_quant"), "dequant", type_name_, str(src), str(dst)], check=True)
    return np.fromfile(dst, dtype="<f4")


# ---- a minimal GGUF reader (the gguf package refuses rawloop's types) -----------------------------

_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
           11: "<q", 12: "<d"}


def read_gguf(path):
    """(kvs {key: (type, value, value_offset)}, tensors {name: (type, ne, raw bytes)})."""
    data = pathlib_bytes(path)
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, data, pos)[0]
        pos += struct.calcsize(fmt)
        return v

    def string():
        nonlocal pos
        n = take("<Q")
        s = data[pos:pos + n].decode()
        pos += n
        return s

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("<I"), take("<Q")
            return [value(et) for _ in range(n)]
        return take(_SCALAR[t])

    assert data[:4] == b"GGUF"
    pos = 4
    assert take("<I") == 3
    nt, nkv = take("<Q"), take("<Q")
    kvs = {}
    for _ in range(nkv):
        k = string()
        t = take("<I")
        off = pos
        kvs[k] = (t, value(t), off)
    infos = []
    for _ in range(nt):
        name = string()
        nd = take("<I")
        ne = [take("<Q") for _ in range(nd)]
        infos.append((name, ne, take("<I"), take("<Q")))
    align = kvs.get("general.alignment", (4, 32, 0))[1]
    base = (pos + align - 1) // align * align
    tensors = {}
    for name, ne, t, off in infos:
        if t in RAWLOOP_TYPES:
            blck, size = RAWLOOP_TYPES[t][:2]
        else:
            blck, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(t)]
        nbytes = ne[0] // blck * size * int(np.prod(ne[1:], dtype=np.int64))
        tensors[name] = (t, ne, np.frombuffer(data, np.uint8, nbytes, base + off))
    return kvs, tensors


def pathlib_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def dequant_tensor(t, ne, raw):
    """float32 array in numpy order (rows, cols) from the raw bytes of one tensor."""
    if t in RAWLOOP_TYPES:
        vals = RAWLOOP_TYPES[t][2](raw)
    else:
        qt = gguf.GGMLQuantizationType(t)
        vals = dequantize(raw.reshape(-1, gguf.GGML_QUANT_SIZES[qt][1]), qt).reshape(-1)
    return np.asarray(vals, dtype=np.float32).reshape(tuple(reversed(ne)))


def type_name(t):
    return RAWLOOP_TYPES[t][3] if t in RAWLOOP_TYPES else gguf.GGMLQuantizationType(t).name


def hf_from_tensors(tensors, spec):
    """A fresh HF model holding exactly the dequantized tensors (Q/K un-permuted for llama)."""
    model = om._empty_hf_model(spec)
    sd = model.state_dict()
    with torch.no_grad():
        for name in sd:
            if name.endswith("rotary_emb.inv_freq"):
                continue
            g = om._hf_to_gguf_name(name)
            if g == "output.weight" and g not in tensors:
                g = "token_embd.weight"   # tied embeddings: the head is the embedding
            arr = dequant_tensor(*tensors[g])
            if g.endswith(("attn_q.weight", "attn_k.weight")):
                kv = spec.n_heads if g.endswith("attn_q.weight") else spec.n_kv_heads
                arr = om.unpermute_qk(arr, spec.n_heads, kv)
            sd[name].copy_(torch.from_numpy(np.array(arr, dtype=np.float32)))
    return model


def f32_source(d, spec):
    """A random-weight F32 GGUF of spec in folder d (the input the quantizer tests start from)."""
    src = d / "f32.gguf"
    om.write_gguf(om.build_hf_model(spec), spec, src, "F32")
    return src
