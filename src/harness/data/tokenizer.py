"""Tokenizers behind one contract (`Tokenizer`), chosen by the `tokenizer` config group: char (CharTokenizer,
a fixed alphabet), bpe (a byte-level BPE trained on the corpus), hf (a tokenizer.json or folder of your own).
Its configs hold a `kind` and its arguments, built here (tokenizer_config)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from harness.errors import ConfigError

# no `_target_` in conf/tokenizer/: data configs that take any tokenizer take the whole node and build it
# here, once the corpus is known
KINDS = ("char", "bpe", "hf")
END_OF_TEXT = "<|endoftext|>"  # the BPE's one special token: GPT-2's, between documents (both BOS and EOS)
#: special tokens a tokenizer.json of unknown origin may use to end a document, in order of preference
EOS_NAMES = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|eos|>")
BOS_NAMES = ("<|begin_of_text|>", "<s>", "<bos>", "<|bos|>")


class Tokenizer(Protocol):
    """What the harness asks of a tokenizer (docs/contracts.md): `bos_id`/`eos_id` None where it has none;
    `fingerprint()`, a stable hash of its vocabulary, which prepared shards are checked against."""

    vocab_size: int
    bos_id: int | None
    eos_id: int | None

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...

    def fingerprint(self) -> str: ...


class CharTokenizer:
    """Maps each character of `alphabet` to its index; `decode(encode(s)) == s`, and a character outside it is
    a ValueError naming it and its position."""

    bos_id = eos_id = None  # characters only: documents are simply concatenated

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

    def fingerprint(self) -> str:
        return hashlib.sha256(("char\0" + self.alphabet).encode()).hexdigest()

    def spec(self) -> dict:
        """What a worker process needs to rebuild this tokenizer (see `from_spec`)."""
        return {"kind": "char", "alphabet": self.alphabet}

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size})"


class HFTokenizer:
    """A Hugging Face `tokenizers.Tokenizer` behind the contract: encoding adds no special tokens (the data
    adds them), decoding keeps them."""

    def __init__(self, backend, bos_id: int | None = None, eos_id: int | None = None):
        self.backend, self.bos_id, self.eos_id = backend, bos_id, eos_id

    @classmethod
    def from_str(cls, text: str, bos: str | None = None, eos: str | None = None) -> HFTokenizer:
        from tokenizers import Tokenizer as Backend

        backend = Backend.from_str(text)
        return cls(backend, *(backend.token_to_id(t) if t is not None else None for t in (bos, eos)))

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        return self.backend.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        # encode_batch_fast (tokenizers >= 0.21) skips the character offsets: twice as fast on code
        encode = getattr(self.backend, "encode_batch_fast", self.backend.encode_batch)
        return [e.ids for e in encode(texts, add_special_tokens=False)]

    def decode(self, ids: list[int]) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=False)

    def special(self, token_id: int | None) -> str | None:
        return None if token_id is None else self.backend.id_to_token(token_id)

    def fingerprint(self) -> str:
        """sha256 of what maps text to ids: the model (vocabulary, merges), added tokens, normalizer and
        pre-tokenizer."""
        whole = json.loads(self.backend.to_str())
        kept = {k: whole.get(k) for k in ("model", "added_tokens", "normalizer", "pre_tokenizer")}
        return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()

    def spec(self) -> dict:
        return {
            "kind": "hf",
            "json": self.backend.to_str(),
            "bos": self.special(self.bos_id),
            "eos": self.special(self.eos_id),
        }

    def save(self, path: Path) -> None:
        self.backend.save(str(path))

    def __repr__(self) -> str:
        return f"HFTokenizer(vocab_size={self.vocab_size}, bos={self.bos_id}, eos={self.eos_id})"


def from_spec(spec: dict) -> CharTokenizer | HFTokenizer:
    """The tokenizer a `spec()` describes (how worker processes get theirs)."""
    if spec["kind"] == "char":
        return CharTokenizer(spec["alphabet"])
    return HFTokenizer.from_str(spec["json"], bos=spec["bos"], eos=spec["eos"])


def tokenizer_config(node) -> dict:
    """The `tokenizer` config node as a plain dict, its kind and arguments checked (ConfigError otherwise)."""
    from omegaconf import DictConfig, OmegaConf

    cfg = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node or {})
    kind = cfg.get("kind")
    if kind not in KINDS:
        raise ConfigError("tokenizer.kind", kind, f"choose one of {', '.join(KINDS)} (tokenizer=bpe, ...)")
    vocab = cfg.get("vocab_size")
    if kind == "bpe" and (isinstance(vocab, bool) or not isinstance(vocab, int) or vocab < 257):
        raise ConfigError(
            "tokenizer.vocab_size", vocab, "a byte-level BPE needs >= 257 tokens (256 bytes + <|endoftext|>)"
        )
    if kind == "hf" and not cfg.get("path"):
        raise ConfigError(
            "tokenizer.path", cfg.get("path"), "required: a tokenizer.json file or a tokenizer folder"
        )
    return cfg


def train_bpe(texts: Iterable[str], vocab_size: int) -> HFTokenizer:
    """A byte-level BPE (GPT-2's pre-tokenizer, no prefix space) trained on `texts`, streamed: `decode(encode(s))
    == s` for any string. Its one special token, `<|endoftext|>`, is id 0 and both BOS and EOS."""
    from tokenizers import Tokenizer as Backend
    from tokenizers import decoders, models, pre_tokenizers, trainers

    backend = Backend(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[END_OF_TEXT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # every byte: any text encodes
        show_progress=False,
    )
    backend.train_from_iterator(texts, trainer)
    eos = backend.token_to_id(END_OF_TEXT)
    return HFTokenizer(backend, bos_id=eos, eos_id=eos)


def load_hf(path: str, eos_token: str | None = None) -> HFTokenizer:
    """A tokenizer.json file or a tokenizer folder as an HFTokenizer, offline; EOS `eos_token`, else the
    folder's, else the first of EOS_NAMES it holds (BOS likewise)."""
    from tokenizers import Tokenizer as Backend

    where = Path(path).expanduser()
    fix = "give a tokenizer.json file, or a folder holding one (tokenizer=hf tokenizer.path=...)"
    if not where.exists():
        raise ConfigError("tokenizer.path", path, f"no such file or folder; {fix}")
    backend = bos = eos = None
    if where.is_dir():
        backend, bos, eos = _from_transformers(where)
        where = where / "tokenizer.json"
    if backend is None:
        try:
            backend = Backend.from_file(str(where))
        except Exception as err:
            reason = "no tokenizer.json in it" if not where.exists() else f"not a tokenizer.json: {err}"
            raise ConfigError("tokenizer.path", path, f"{reason}; {fix}") from None
    vocab = backend.get_vocab(with_added_tokens=True)
    if eos_token is not None and eos_token not in vocab:
        raise ConfigError("tokenizer.eos_token", eos_token, f"not a token of {path}; leave it null")
    eos = eos_token or eos or next((t for t in EOS_NAMES if t in vocab), None)
    bos = bos or next((t for t in BOS_NAMES if t in vocab), None)
    return HFTokenizer(backend, *(vocab[t] if t is not None else None for t in (bos, eos)))


def _from_transformers(folder: Path) -> tuple:
    """(backend, bos, eos) of a tokenizer folder through transformers, offline; Nones where it cannot."""
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except Exception:  # not installed, or no config it understands: the folder's tokenizer.json decides
        return None, None, None
    return getattr(tok, "backend_tokenizer", None), tok.bos_token, tok.eos_token
