"""A tiny GGUF serializer that records where every field lies, so tests can corrupt one field
at a time, and the corpus of broken files built from it (one case per bug class of
../shared/reference/formats-and-ecosystem.md §2 "Fuzz plan classes").

Each case is (name, bytes, substring): `rawloop info` must reject the file with exit code 1 and a
message on stderr containing substring (a regex, matched case-sensitively).

Written from the GGUF layout description, independently of src/gguf.c.
"""
import struct

# value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
        BOOL: "<B", U64: "<Q", I64: "<q", F64: "<d"}
# ggml types used here: id -> (block elements, block bytes)
GGML = {0: (1, 4), 1: (1, 2), 2: (32, 18), 8: (32, 34), 12: (256, 144)}


class Gguf:
    """Serializes a GGUF file; .at[name] gives the byte offset of each named field."""

    def __init__(self, version=3, alignment=32):
        self.version = version
        self.alignment = alignment
        self.kvs = []      # (key, vtype, value[, arr_type])
        self.tensors = []  # dicts: name, ne, type, offset (None = packed), nbytes (None = computed)
        self.at = {}

    def kv(self, key, vtype, value, arr_type=None):
        self.kvs.append((key, vtype, value, arr_type))
        return self

    def tensor(self, name, ne, ttype=0, offset=None, nbytes=None):
        self.tensors.append(dict(name=name, ne=list(ne), type=ttype, offset=offset, nbytes=nbytes))
        return self

    @staticmethod
    def tensor_bytes(t):
        if t["nbytes"] is not None:
            return t["nbytes"]
        blck, size = GGML[t["type"]]
        n = t["ne"][0] // blck * size
        for d in t["ne"][1:]:
            n *= d
        return n

    def _val(self, out, name, vtype, value, arr_type):
        if vtype == STRING:
            b = value.encode() if isinstance(value, str) else value
            self.at[name + ".len"] = len(out)
            out += struct.pack("<Q", len(b)) + b
        elif vtype == ARRAY:
            self.at[name + ".arr_type"] = len(out)
            out += struct.pack("<I", arr_type)
            self.at[name + ".count"] = len(out)
            out += struct.pack("<Q", len(value))
            for i, v in enumerate(value):
                self._val(out, f"{name}[{i}]", arr_type, v, None)
        elif isinstance(value, (bytes, bytearray)):
            out += value  # raw, for type confusion
        else:
            out += struct.pack(_FMT[vtype], value)

    def build(self):
        out = bytearray(b"GGUF")
        self.at = {"version": 4}
        out += struct.pack("<I", self.version)
        self.at["n_tensors"] = len(out)
        out += struct.pack("<Q", len(self.tensors))
        self.at["n_kv"] = len(out)
        out += struct.pack("<Q", len(self.kvs))
        for i, (key, vtype, value, arr_type) in enumerate(self.kvs):
            kb = key.encode() if isinstance(key, str) else key
            self.at[f"kv{i}.key.len"] = len(out)
            out += struct.pack("<Q", len(kb)) + kb
            self.at[f"kv{i}.type"] = len(out)
            out += struct.pack("<I", vtype)
            self.at[f"kv{i}.value"] = len(out)
            self._val(out, f"kv{i}", vtype, value, arr_type)
        off = 0
        for i, t in enumerate(self.tensors):
            nb = t["name"].encode() if isinstance(t["name"], str) else t["name"]
            self.at[f"t{i}.name.len"] = len(out)
            out += struct.pack("<Q", len(nb)) + nb
            self.at[f"t{i}.n_dims"] = len(out)
            out += struct.pack("<I", len(t["ne"]))
            self.at[f"t{i}.ne"] = len(out)
            out += b"".join(struct.pack("<Q", d) for d in t["ne"])
            self.at[f"t{i}.type"] = len(out)
            out += struct.pack("<I", t["type"])
            self.at[f"t{i}.offset"] = len(out)
            out += struct.pack("<Q", off if t["offset"] is None else t["offset"])
            off = _align(off + self.tensor_bytes(t), self.alignment)
        self.at["header_end"] = len(out)
        if self.tensors:
            out += bytes(_align(len(out), self.alignment) - len(out))
            self.at["data"] = len(out)
            for i, t in enumerate(self.tensors):
                n = self.tensor_bytes(t)
                out += bytes((j * 7 + i) & 255 for j in range(n))
                out += bytes(_align(n, self.alignment) - n)
        return bytes(out)


def _align(o, a):
    return o + (a - o % a) % a


def patch(data, pos, fmt, value):
    b = bytearray(data)
    struct.pack_into(fmt, b, pos, value)
    return bytes(b)


def base():
    """A valid file with every kind of field: scalars, a string, arrays, 3 tensors."""
    g = Gguf()
    g.kv("general.architecture", STRING, "llama")
    g.kv("general.alignment", U32, 32)
    g.kv("test.flag", BOOL, 1)
    g.kv("tokenizer.ggml.tokens", ARRAY, ["a", "bc", "def"], STRING)
    g.kv("tokenizer.ggml.scores", ARRAY, [0.5, -1.0, 2.0], F32)
    g.tensor("token_embd.weight", [64, 2], 8)
    g.tensor("blk.0.attn_q.weight", [4, 4], 0)
    g.tensor("output_norm.weight", [8], 1)
    return g


HUGE = [2**31 - 1, 2**31, 2**31 + 1, 2**32, 2**63, 2**64 - 1]

TRUNC_RE = r"truncated|remain|past the end|no room|bad magic|empty file"


def cases():
    """Yields (name, file bytes, expected stderr regex)."""
    g = base()
    good = g.build()
    at = dict(g.at)

    # (6) truncated at many byte positions: every field start (+1, +3), every 37th byte, and
    # through the data; the padding after the last tensor is optional, so stop at its end.
    offs = [g.at["data"]]
    for t in g.tensors:
        offs.append(_align(offs[-1] + Gguf.tensor_bytes(t), 32))
    data_end = offs[-2] + Gguf.tensor_bytes(g.tensors[-1])
    cuts = sorted({p for v in at.values() for p in (v, v + 1, v + 3)} |
                  set(range(0, len(good), 37)) | {data_end - 1, at["data"] + 1})
    for c in cuts:
        if c < data_end:
            yield f"trunc_{c}", good[:c], TRUNC_RE

    # (1) every count/length field at huge values and at remaining+1.
    fields = {
        "n_tensors": ("tensor count", True),
        "n_kv": ("kv count", True),
        "kv0.key.len": ("key length", False),
        "kv0.len": ("string length", False),
        "kv3.count": ("array count", False),
        "kv3[1].len": ("string length", False),
        "kv4.count": ("array count", False),
        "t0.name.len": ("tensor name length|is \\d+ bytes long", False),
    }
    for field, (msg, is_count) in fields.items():
        pos = at[field]
        for v in HUGE + [len(good) - (pos + 8) + 1]:
            yield f"{field}={v}", patch(good, pos, "<Q", v), msg
    # small-but-wrong counts: a count one too high runs into following data with a clear error
    yield "n_kv+1", patch(good, at["n_kv"], "<Q", 6), r"kv 5|tensor|value type|remain"

    # (2) element-count / byte-size overflow, bad dims
    def one_tensor(ne, ttype=0, **kw):
        return Gguf().tensor("w", ne, ttype, **kw).build()
    yield "ne_overflow_2^32x2^32", one_tensor([2**32, 2**32], nbytes=0), "overflow"
    yield "ne_overflow_4d", one_tensor([2**16] * 4, nbytes=0), "overflow"
    yield "ne_bytes_wrap_2^42+1", one_tensor([2**42 + 1, 2**22], nbytes=0), "overflow"
    yield "ne_bytes_wrap_q8", one_tensor([32 * 2**57, 4], 8, nbytes=0), "overflow"
    yield "ne_2^63", one_tensor([2**63], nbytes=0), "out of range"
    yield "ne_2^64-1", one_tensor([1, 2**64 - 1], nbytes=0), "out of range"
    yield "ne0_not_multiple_q8_0", one_tensor([33, 1], 8, nbytes=34), "not a multiple of the Q8_0"
    yield "ne0_not_multiple_q4_k", one_tensor([128], 12, nbytes=144), "not a multiple of the Q4_K"
    for nd in (0, 5, 2**32 - 1):
        yield f"n_dims={nd}", patch(good, at["t1.n_dims"], "<I", nd), "n_dims"

    # (3) type ids out of range / removed / unknown, named with the tensor
    for tid in (4, 5, 31, 36, 41, 42, 43, 1000, 2**31, 2**32 - 1):
        yield f"type={tid}", patch(good, at["t1.type"], "<I", tid), \
            f"'blk.0.attn_q.weight': unknown or unsupported ggml type id {tid}"

    # (4) value-type confusion; (5) alignment
    for vt in (13, 2**32 - 1):
        yield f"value_type={vt}", patch(good, at["kv2.type"], "<I", vt), "unknown value type"
    yield "arr_type=13", patch(good, at["kv4.arr_type"], "<I", 13), "unknown array element type"

    def with_align(vtype, value):
        g2 = Gguf()
        g2.kv("general.alignment", vtype, value)
        g2.tensor("w", [8], 0)
        return g2.build()
    yield "alignment_0", with_align(U32, 0), "general.alignment.*power of two"
    yield "alignment_48", with_align(U32, 48), "general.alignment.*power of two"
    yield "alignment_2^31", with_align(U32, 2**31), "no room|past the end"
    yield "alignment_int32", with_align(I32, 32), "'general.alignment' must be UINT32, found INT32"
    yield "alignment_string", with_align(STRING, "32"), \
        "'general.alignment' must be UINT32, found STRING"
    yield "alignment_u64", with_align(U64, 32), "'general.alignment' must be UINT32, found UINT64"
    yield "bool_2", patch(good, at["kv2.value"], "<B", 2), "BOOL value .* must be 0 or 1"
    yield "bool_255", patch(good, at["kv2.value"], "<B", 255), "must be 0 or 1"
    yield "bool_array_2", Gguf().kv("b", ARRAY, [1, 0, 2], BOOL).build(), "BOOL element 2"

    # (6) offsets
    rel = [o - g.at["data"] for o in offs]  # packed offsets: 0, 160, 224
    yield "offset_unordered", patch(patch(good, at["t0.offset"], "<Q", rel[1]), at["t1.offset"],
                                    "<Q", 0), \
        f"'token_embd.weight': offset {rel[1]} is not where the previous tensor ends \\(expected 0\\)"
    yield "offset_overlap", patch(good, at["t1.offset"], "<Q", 0), \
        f"'blk.0.attn_q.weight': offset 0 is not where the previous tensor ends \\(expected {rel[1]}\\)"
    yield "offset_gap", patch(good, at["t2.offset"], "<Q", rel[2] + 32), \
        f"offset {rel[2] + 32} is not where the previous tensor ends \\(expected {rel[2]}\\)"
    yield "offset_misaligned", patch(good, at["t1.offset"], "<Q", rel[1] + 1), \
        f"offset {rel[1] + 1} is not where"
    yield "offset_beyond_eof", patch(good, at["t2.offset"], "<Q", 2**40), "offset 1099511627776"
    yield "offset_2^64-1", patch(good, at["t2.offset"], "<Q", 2**64 - 1), "is not where"
    yield "data_past_eof", good[:data_end - 1], "'output_norm.weight'.*past the end"

    # (7) duplicates, empty / long names, nested arrays, string > remaining
    g3 = base()
    g3.kvs.append(("test.flag", U8, 3, None))
    yield "duplicate_key", g3.build(), "duplicate key 'test.flag'"
    g4 = base()
    g4.tensors[2]["name"] = "token_embd.weight"
    yield "duplicate_tensor", g4.build(), "duplicate tensor name 'token_embd.weight'"
    yield "empty_key", Gguf().kv("", U32, 1).build(), "empty key"
    yield "empty_tensor_name", Gguf().tensor("", [8]).build(), "empty tensor name"
    yield "tensor_name_64", Gguf().tensor("n" * 64, [8]).build(), "64 bytes long, the limit is 63"
    yield "nested_array", _nested(), "nested arrays"
    yield "string_gt_remaining", patch(good, at["kv0.len"], "<Q", len(good)), "string length"

    # header: version and magic
    yield "version_0", patch(good, 4, "<I", 0), "version 0 is not supported"
    yield "version_1", patch(good, 4, "<I", 1), "version 1 is not supported"
    yield "version_4", patch(good, 4, "<I", 4), "version 4 is not supported"
    yield "version_byteswapped", patch(good, 4, ">I", 3), "endianness"
    yield "magic_ggml", b"GGML" + good[4:], "bad magic"
    yield "magic_lower", b"gguf" + good[4:], "bad magic"
    yield "empty", b"", "empty file"
    yield "three_bytes", b"GGU", "bad magic"


def _nested():
    out = bytearray(b"GGUF") + struct.pack("<IQQ", 3, 0, 1)
    out += struct.pack("<Q", 1) + b"a" + struct.pack("<II", ARRAY, ARRAY) + struct.pack("<Q", 1)
    out += struct.pack("<IQ", U8, 1) + b"\x01"
    return bytes(out)


def scan_kvs(data, first=8):
    """Minimal independent GGUF metadata walker (a fast stand-in for gguf.GGUFReader on large
    vocab files): returns [(key, type, arr_type, count, first values)] in file order."""
    pos = 24
    n_kv = struct.unpack_from("<Q", data, 16)[0]

    def string(p):
        n = struct.unpack_from("<Q", data, p)[0]
        return bytes(data[p + 8:p + 8 + n]).decode("utf-8", "replace"), p + 8 + n

    def value(t, p):
        if t == STRING:
            return string(p)
        return struct.unpack_from(_FMT[t], data, p)[0], p + struct.calcsize(_FMT[t])

    out = []
    for _ in range(n_kv):
        key, pos = string(pos)
        t = struct.unpack_from("<I", data, pos)[0]
        pos += 4
        if t != ARRAY:
            v, pos = value(t, pos)
            out.append((key, t, None, 1, [v]))
            continue
        at, n = struct.unpack_from("<IQ", data, pos)
        pos += 12
        vals = []
        if at == STRING:
            for i in range(n):
                ln = struct.unpack_from("<Q", data, pos)[0]
                if i < first:
                    vals.append(bytes(data[pos + 8:pos + 8 + ln]).decode("utf-8", "replace"))
                pos += 8 + ln
        else:
            size = struct.calcsize(_FMT[at])
            vals = [struct.unpack_from(_FMT[at], data, pos + i * size)[0] for i in range(min(n, first))]
            pos += n * size
        out.append((key, t, at, n, vals))
    return out
