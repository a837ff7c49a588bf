"""Tokenizers: word-level for the embedded corpus (the lens shows "four", not bytes), byte-level
for any UTF-8 text. Both serialize to a small JSON dict saved with every checkpoint."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Protocol

UNK, EOS = "<unk>", "<eos>"
_WORD_RE = re.compile(r"[A-Za-z]+|[0-9]+|\n|[^\sA-Za-z0-9]")


@dataclass
class WordTokenizer:
    """Words and punctuation marks; a newline is the end-of-document token <eos>.

    decode(encode(t)) == t for text whose tokens are separated by single spaces and whose lines
    end in a newline (the form the corpus is written in)."""

    words: list[str]
    kind: str = "word"
    _index: dict[str, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.vocab = [UNK, EOS] + [w for w in self.words if w not in (UNK, EOS)]
        self._index = {w: i for i, w in enumerate(self.vocab)}

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    @property
    def eos_id(self) -> int:
        return self._index[EOS]

    def split(self, text: str) -> list[str]:
        return _WORD_RE.findall(text)

    def encode(self, text: str) -> list[int]:
        unk = self._index[UNK]
        return [self._index.get(EOS if t == "\n" else t, unk) for t in self.split(text)]

    def unknown_words(self, text: str) -> list[str]:
        """Words of text outside the vocabulary (they encode as <unk>), in order of appearance."""
        seen: dict[str, None] = {}
        for t in self.split(text):
            if t != "\n" and t not in self._index:
                seen[t] = None
        return list(seen)

    def decode(self, ids: list[int]) -> str:
        out: list[str] = []
        for i in ids:
            token = self.vocab[i]
            if token == EOS:
                out.append("\n")
            else:
                if out and out[-1] != "\n":
                    out.append(" ")
                out.append(token)
        return "".join(out)

    def token_str(self, i: int) -> str:
        return self.vocab[i]

    def to_dict(self) -> dict:
        return {"kind": "word", "vocab": self.vocab}


@dataclass
class ByteTokenizer:
    """UTF-8 bytes, 256 ids; decode replaces an incomplete trailing character."""

    kind: str = "byte"

    @property
    def vocab_size(self) -> int:
        return 256

    @property
    def eos_id(self) -> int | None:
        return None

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def unknown_words(self, text: str) -> list[str]:
        return []

    def decode(self, ids: list[int]) -> str:
        return bytes(ids).decode("utf-8", errors="replace")

    def token_str(self, i: int) -> str:
        return bytes([i]).decode("utf-8", errors="backslashreplace")

    def to_dict(self) -> dict:
        return {"kind": "byte"}


Tokenizer = WordTokenizer | ByteTokenizer


class TokenizerLike(Protocol):
    """What nanolm asks of a tokenizer: nanolm's own (WordTokenizer, ByteTokenizer) and a Hugging Face one behind
    ``nanolm.interp.view.HFTokenizer`` all have it, so no caller has to guess a tokenizer's shape."""

    @property
    def vocab_size(self) -> int: ...

    @property
    def eos_id(self) -> int | None:
        """The end-of-text id: the token that ends a document (nanolm's <eos>), None when there is none."""
        ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str:
        """The text of token ids."""
        ...

    def token_str(self, i: int) -> str:
        """One token as text, for tables."""
        ...

    def unknown_words(self, text: str) -> list[str]:
        """The pieces of text the tokenizer reads as its unknown token, in order of appearance."""
        ...


def tokenizer_from_dict(d: dict) -> Tokenizer:
    if d.get("kind") == "byte":
        return ByteTokenizer()
    if d.get("kind") == "word" and isinstance(d.get("vocab"), list):
        return WordTokenizer(list(d["vocab"]))
    raise ValueError(f"not a nanolm tokenizer description: kind={d.get('kind')!r}")
