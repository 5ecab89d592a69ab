"""A character-level tokenizer: one token per character of a fixed alphabet."""

from __future__ import annotations


class CharTokenizer:
    """Maps each character of `alphabet` to its index. `decode(encode(s)) == s` for any `s` over the
    alphabet; a character outside it raises a ValueError naming the character and its position."""

    def __init__(self, alphabet: str):
        if len(set(alphabet)) != len(alphabet):
            raise ValueError(f"alphabet {alphabet!r} repeats a character; each token must be unique")
        if not alphabet:
            raise ValueError("alphabet is empty; a tokenizer needs at least one character")
        self.alphabet = alphabet
        self._index = {c: i for i, c in enumerate(alphabet)}

    @property
    def vocab_size(self) -> int:
        return len(self.alphabet)

    def encode(self, text: str) -> list[int]:
        try:
            return [self._index[c] for c in text]
        except KeyError as missing:
            position = next(i for i, c in enumerate(text) if c not in self._index)
            raise ValueError(
                f"character {missing.args[0]!r} at position {position} is not in the tokenizer's "
                f"alphabet of {self.vocab_size} characters; add it to the alphabet or remove it from the text"
            ) from None

    def decode(self, ids: list[int]) -> str:
        return "".join(self.alphabet[i] for i in ids)

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size})"
