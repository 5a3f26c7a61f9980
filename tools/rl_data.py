"""Data and tokenizer for rawloop's own model (see docs/MODEL.md).

The corpus is the two public-domain texts in ../shared/data. Each file is cleaned (Project
Gutenberg licence header/footer removed, CRLF normalised, runs of blank lines collapsed) and split
by characters at a line boundary: the last 5% of each file is the held-out test text, the 2% before
that is a validation slice used only to pick the checkpoint, the rest is training text. The BPE
tokenizer is trained on training + validation text only.
"""
import pathlib
import re

SOURCES = ["tinyshakespeare.txt", "war_and_peace.txt"]
BOS, EOS = "<|bos|>", "<|eos|>"
TEST_FRAC = 0.05
VAL_FRAC = 0.02
# The GPT-2 pre-tokenizer regex: what HF's ByteLevel(use_regex=True) applies and what the GGUF
# pre-tokenizer name "gpt-2" selects in llama.cpp-compatible engines.
GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"


def strip_gutenberg(text):
    """Keeps only the book between the '*** START OF' and '*** END OF' markers, if present, and
    drops the 'End of the Project Gutenberg EBook' trailer line."""
    start = re.search(r"^\*\*\* ?START OF TH(IS|E) PROJECT GUTENBERG EBOOK.*$", text, re.M)
    end = re.search(r"^\*\*\* ?END OF TH(IS|E) PROJECT GUTENBERG EBOOK.*$", text, re.M)
    if start and end:
        text = text[start.end():end.start()]
        text = re.sub(r"^End of (the )?Project Gutenberg.*$", "", text, flags=re.M | re.I)
    return text


def clean(text):
    text = text.replace("\r\n", "\n")
    text = strip_gutenberg(text)
    text = re.sub(r"[ \t]+\n", "\n", text)          # trailing spaces
    text = re.sub(r"\n{3,}", "\n\n", text)          # runs of blank lines
    return text.strip("\n") + "\n"


def _cut(text, frac_from_end):
    """Index of the first line start at or after len*(1-frac): splits never cut a line."""
    i = int(len(text) * (1.0 - frac_from_end))
    j = text.find("\n", i)
    return len(text) if j < 0 else j + 1


def load_splits(data_dir):
    """Returns {source: {"train": str, "val": str, "test": str}}."""
    data_dir = pathlib.Path(data_dir)
    out = {}
    for name in SOURCES:
        text = clean((data_dir / name).read_text(encoding="utf-8"))
        t = _cut(text, TEST_FRAC)
        v = _cut(text[:t], VAL_FRAC / (1.0 - TEST_FRAC))
        out[name] = {"train": text[:v], "val": text[v:t], "test": text[t:]}
    return out


def heldout_text(splits):
    """The one held-out evaluation file: the test slices of both sources, in SOURCES order."""
    return "".join(splits[n]["test"] for n in SOURCES)


def train_tokenizer(texts, vocab_size=4096):
    """Byte-level BPE (GPT-2 byte mapping and regex, no prefix space) with BOS/EOS at ids 0/1."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2,
                                  special_tokens=[BOS, EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def load_tokenizer(path):
    from tokenizers import Tokenizer
    return Tokenizer.from_file(str(path))


def encode(tok, text):
    """Plain text ids: no BOS, no special-token parsing (the text holds none)."""
    return tok.encode(text, add_special_tokens=False).ids
