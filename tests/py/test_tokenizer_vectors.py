"""llama.cpp's tokenizer test vectors: every case of every vocab in testdata/tokenizers must give
exactly the expected ids (`rawloop tokenize --ids`, no BOS, no special parsing).

Format (llama.cpp tests/test-tokenizer-0): the .inp file is the cases joined by
"\\n__ggml_vocab_test__\\n" with a final separator (so the newline before a separator is not part
of the text); the .out file has one line of space-separated ids per case."""
import pytest

from conftest import SHARED, run_rawloop

VOCAB_DIR = SHARED / "testdata" / "tokenizers"
SEP = b"\n__ggml_vocab_test__\n"


def load_cases():
    cases = []
    for gguf in sorted(VOCAB_DIR.glob("*.gguf")):
        inp = (VOCAB_DIR / (gguf.name + ".inp")).read_bytes()
        out = (VOCAB_DIR / (gguf.name + ".out")).read_bytes()
        assert inp.endswith(SEP), f"{gguf.name}.inp does not end with the separator"
        texts = inp.split(SEP)[:-1]
        lines = out.split(b"\n")
        assert lines[-1] == b"", f"{gguf.name}.out does not end with a newline"
        lines = lines[:-1]
        assert len(texts) == len(lines), f"{gguf.name}: {len(texts)} inputs, {len(lines)} outputs"
        for i, (text, ids) in enumerate(zip(texts, lines)):
            cases.append(pytest.param(gguf, text, [int(x) for x in ids.split()],
                                      id=f"{gguf.stem}-{i}"))
    return cases


CASES = load_cases()


def test_vectors_present():
    assert len(CASES) >= 5 * 40, f"only {len(CASES)} tokenizer cases found in {VOCAB_DIR}"


@pytest.mark.parametrize("gguf,text,expected", CASES)
def test_vector(rawloop, gguf, text, expected):
    p = rawloop("tokenize", "-m", gguf, "--ids", input=text)
    got = [int(x) for x in p.stdout.split()]
    assert got == expected, f"text {text!r}"
