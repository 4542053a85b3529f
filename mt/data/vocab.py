"""The contract every tokenizer keeps: the special ids, the metadata file, and the text it encodes.

Special ids are the same for every tokenizer: <pad> 0, <unk> 1, <START> 2, <END> 3. `clean(text)`
is what mt's own tokenizers encode: lone surrogates (a str can hold them, UTF-8 cannot, and
SentencePiece refuses them) become U+FFFD, and control characters other than tab, newline and
carriage return become spaces, so the commands, the API and the server take any Python string.
"""

import re

PAD, UNK, START, END = 0, 1, 2, 3
SPECIALS = ["<pad>", "<unk>", "<START>", "<END>"]
META_FILE = "tokenizer.json"
_UNSAFE = re.compile("[\ud800-\udfff\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def without_surrogates(text: str) -> str:
    """`text` with each lone surrogate as U+FFFD: all an imported Marian tokenizer changes."""
    return _SURROGATE.sub("\ufffd", text) if _SURROGATE.search(text) else text


def clean(text: str) -> str:
    """`text` as mt's own tokenizers take it (see above); most text comes back as it is."""
    if not _UNSAFE.search(text):
        return text
    return _UNSAFE.sub(lambda m: "\ufffd" if m.group() >= "\ud800" else " ", text)
