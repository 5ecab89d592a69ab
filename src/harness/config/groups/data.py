"""The built-in data sources' and tokenizers' keys, each declared once (conf/data/*.yaml, conf/tokenizer/*.yaml pick
one and keep their comments): `Synthetic`, `Text`, `Folder`, `Corpus`, `HFDataset`; `Char`, `BPE`, `Loaded`. The
rules the sources share with the door: `held_out_fraction`, `synthetic_tokens`, `tuning_fields`, `stream_padded`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig

from harness.config.declare import key
from harness.errors import ConfigError

#: data=synthetic's labelling rules
RULES = ("random", "first_token")
_TOKENIZER = "the tokenizer group's node (char | bpe | hf), handed over as it is"


def held_out_fraction(val_fraction: float) -> float:
    """`data.val_fraction`, the share of a corpus held out for validation, if it lies strictly in (0, 1)."""
    if not 0 < val_fraction < 1:
        raise ConfigError("data.val_fraction", val_fraction, "must lie strictly between 0 and 1 (try 0.1)")
    return val_fraction


def synthetic_tokens(alphabet, labels) -> None:
    """Refuse data=synthetic's alphabet or labels unless both are non-empty strings of distinct characters."""
    for name, tokens in (("alphabet", alphabet), ("labels", labels)):
        if not isinstance(tokens, str) or not tokens:
            raise ConfigError(
                f"data.{name}",
                repr(tokens),
                f"must be a non-empty string of characters (try the default, "
                f"data.{name}={getattr(Synthetic, name)})",
            )
    if set(alphabet) & set(labels) or len(set(alphabet + labels)) != len(alphabet + labels):
        raise ConfigError(
            "data.labels", labels, "label tokens must be distinct from each other and from data.alphabet"
        )


def tuning_fields(prompt: str | None, response: str | None, messages: str | None) -> None:
    """Refuse data=hf's fine-tuning fields unless a prompt comes with its response and chats come alone."""
    if (prompt is None) != (response is None):
        raise ConfigError(
            "data.response_field" if response is None else "data.prompt_field",
            None,
            "fine-tuning on pairs needs both data.prompt_field and data.response_field",
        )
    if messages and prompt:
        raise ConfigError("data.messages_field", messages, "give it or the prompt/response fields, not both")


def stream_padded(packing: bool, streaming: bool) -> None:
    """Refuse data=hf's packing of a stream: a stream is fine-tuned one example a row."""
    if streaming and packing:
        raise ConfigError("data.packing", "true", "a stream is fine-tuned padded: set data.packing=false")


# the keys most sources share, each with its own default
def _length(default: int, doc: str):
    return key(default, doc, low=1, whole=True)


def _batch_size(default: int):
    return key(
        default, "examples a batch in mode=full (mode=overfit uses one batch of all n)", low=1, whole=True
    )


def _num_workers():
    return key(0, "DataLoader worker processes, 0: none", low=0, whole=True)


def _seed(doc: str):
    return key(0, doc, low=0, whole=True)


def _root(doc: str):
    return key("${paths.data_dir}", doc)


@dataclass
class Synthetic:
    """data=synthetic: random token sequences with a label at the last position (harness.data.SyntheticDataModule)."""

    _target_: str = "harness.data.SyntheticDataModule"
    length: int = _length(32, "tokens per example; the label is predicted after the last one")
    size: int = key(1000, "training examples", low=1, whole=True)
    val_size: int = key(100, "validation examples", low=1, whole=True)
    rule: str = key(
        "random", "random: an arbitrary label (memorization) | first_token: one of token 0", choices=RULES
    )
    alphabet: str = key("abcdefghijklmnop", "the tokens sequences are drawn from")
    labels: str = key("0123", "the label tokens (the classes), apart from each other and from the alphabet")
    seed: int = _seed("the generator's seed (a different seed is a different dataset)")
    batch_size: int = _batch_size(32)
    root: str = _root("where datasets are cached, by their parameters (paths.data_dir: data/)")
    num_workers: int = _num_workers()

    @staticmethod
    def rules(node: DictConfig, cfg: DictConfig) -> None:
        synthetic_tokens(node.get("alphabet"), node.get("labels"))


@dataclass
class Text:
    """data=text: next-character prediction on a text file, or CPython's own docs (harness.data.TextDataModule);
    an alphabet that misses a character of the corpus is refused where the corpus is read."""

    _target_: str = "harness.data.TextDataModule"
    length: int = _length(32, "characters of context per example (targets are the next characters)")
    path: str | None = key(
        None, "a UTF-8 text file; null: CPython's own reference docs (pydoc_data), no download"
    )
    alphabet: str | None = key(
        None, "the characters the tokenizer knows; null: every character of the corpus"
    )
    val_fraction: float = key(0.1, "the share of the corpus, at its end, held out for validation (in (0, 1))")
    batch_size: int = _batch_size(32)
    root: str = _root("where ingested datasets are cached (paths.data_dir: data/)")
    num_workers: int = _num_workers()

    @staticmethod
    def rules(node: DictConfig, cfg: DictConfig) -> None:
        held_out_fraction(node.get("val_fraction"))


@dataclass
class Folder:
    """data=folder: your own dataset folder in the harness's format (harness.data.FolderDataModule)."""

    _target_: str = "harness.data.FolderDataModule"
    path: str = key("???", "the dataset folder: meta.json, train.jsonl, val.jsonl (required)")
    length: int = _length(32, "tokens per example: must equal the length in its meta.json")
    batch_size: int = _batch_size(32)
    num_workers: int = _num_workers()


@dataclass
class Corpus:
    """data=corpus: next-token prediction on text files of any size, tokenized once into token shards
    (harness.data.CorpusDataModule)."""

    _target_: str = "harness.data.CorpusDataModule"
    files: Any = key(
        "stdlib", "a file, a folder, a glob or a list of them; stdlib: the running Python's library"
    )
    tokenizer: Any = key("${tokenizer}", _TOKENIZER)
    text_field: str = key("text", "where the text is: a .jsonl record's field, a .parquet row's column")
    length: int = _length(128, "tokens of context per example (targets are the next tokens)")
    val_fraction: float = key(
        0.1, "the share of the token stream, at its end, held out for validation (in (0, 1))"
    )
    val_windows: int | None = key(
        512, "validation windows spread over the held-out tokens; null: all", low=1, whole=True
    )
    max_files: int | None = key(None, "take only the first N files (in order); null: all", low=1, whole=True)
    max_bytes: int | None = key(
        None, "take files in order until they hold this many bytes; null: all", low=1, whole=True
    )
    workers: int | None = key(
        None, "processes that read and tokenize the files; null: every core", low=1, whole=True
    )
    seed: int = _seed("where the training windows start: window i at a place drawn from (seed, i)")
    batch_size: int = _batch_size(16)
    root: str = _root("where prepared corpora are kept, by their files and tokenizer (paths.data_dir)")
    num_workers: int = _num_workers()

    @staticmethod
    def rules(node: DictConfig, cfg: DictConfig) -> None:
        held_out_fraction(node.get("val_fraction"))


@dataclass
class HFDataset:
    """data=hf: any Hugging Face `datasets` dataset, for language modelling or fine-tuning, prepared into token
    shards or read as a stream (harness.data.HFDataModule)."""

    _target_: str = "harness.data.HFDataModule"
    path: str = key("???", "a save_to_disk folder, a file, a folder of files or a glob; or a dataset's name")
    name: str | None = key(
        None, "the dataset's config (datasets.load_dataset(path, name)); null: its default"
    )
    split: str = key("train", "the split trained on")
    val_split: str | None = key(
        None, "the split validated on; null: its validation (or test) split, else val_fraction"
    )
    val_fraction: float = key(
        0.1, "the share of the training rows held out where there is no validation split"
    )
    text_field: str = key("text", "language modelling: the field that holds each document's text")
    prompt_field: str | None = key(None, "fine-tuning on pairs: the prompt's field (with response_field)")
    response_field: str | None = key(None, "fine-tuning on pairs: the response's field, the loss on it alone")
    separator: str = key(
        "\n", "what joins a prompt and its response, on the prompt's side (\\n, \\t: a break, a tab)"
    )
    messages_field: str | None = key(
        None, "fine-tuning on chats: a list of {role, content}, the loss on the assistant's"
    )
    packing: bool = key(
        False, "fine-tuning: false, one example a row, padded; true, examples packed end to end"
    )
    streaming: bool = key(False, "true: read as a stream, nothing prepared (each rank and worker its share)")
    length: int = _length(128, "tokens of context per example (targets are the next tokens)")
    val_windows: int | None = key(
        512, "validation windows spread over the held-out tokens; null: all", low=1, whole=True
    )
    num_proc: int | None = key(
        None, "processes datasets' map tokenizes with; null: every core", low=1, whole=True
    )
    seed: int = _seed("where the training windows start: window i at a place drawn from (seed, i)")
    tokenizer: Any = key("${tokenizer}", _TOKENIZER)
    batch_size: int = _batch_size(16)
    root: str = _root("where prepared datasets are kept (data/hf/), with datasets' own cache")
    num_workers: int = _num_workers()

    @staticmethod
    def rules(node: DictConfig, cfg: DictConfig) -> None:
        held_out_fraction(node.get("val_fraction"))
        tuning_fields(node.get("prompt_field"), node.get("response_field"), node.get("messages_field"))
        stream_padded(node.get("packing"), node.get("streaming"))


def _kind(kind: str):
    """The `kind` key of tokenizer=<kind>: the data reads it (the node has no _target_: it is data's argument)."""
    return key(
        kind, "the tokenizer, read by the data: pick another with tokenizer=char | bpe | hf", choices=(kind,)
    )


@dataclass
class Char:
    """tokenizer=char: one token per character (harness.data.tokenizer.CharTokenizer), the default."""

    kind: str = _kind("char")
    alphabet: str | None = key(None, "data=corpus: the characters it knows; null: the corpus's own")

    @staticmethod
    def rules(node: DictConfig, cfg: DictConfig) -> None:
        alphabet = node.get("alphabet")
        if alphabet is not None and not alphabet:
            raise ConfigError(
                "tokenizer.alphabet", repr(alphabet), "must hold a character, or be null (the corpus's)"
            )


@dataclass
class BPE:
    """tokenizer=bpe: a byte-level BPE trained on the corpus once and kept beside its shards."""

    kind: str = _kind("bpe")
    vocab_size: int = key(
        4096,
        "tokens, the 256 bytes and <|endoftext|> included (uint16 shards up to 65536)",
        low=257,
        whole=True,
    )


@dataclass
class Loaded:
    """tokenizer=hf: a tokenizer of your own, a tokenizer.json or a tokenizer folder, loaded offline."""

    kind: str = _kind("hf")
    path: str | None = key(None, "the tokenizer.json file or the tokenizer folder (required)")
    eos_token: str | None = key(
        None, "the token put after each document; null: the folder's EOS, else a known one"
    )

    @staticmethod
    def rules(node: DictConfig, cfg: DictConfig) -> None:
        if not node.get("path"):
            raise ConfigError(
                "tokenizer.path", node.get("path"), "required: a tokenizer.json file or a tokenizer folder"
            )


#: conf/data/<option>.yaml -> its declaration (ConfigStore: data/<option>_schema)
OPTIONS_DATA = {"synthetic": Synthetic, "text": Text, "folder": Folder, "corpus": Corpus, "hf": HFDataset}
#: conf/tokenizer/<option>.yaml -> its declaration (ConfigStore: tokenizer/<option>_schema)
OPTIONS_TOKENIZER = {"char": Char, "bpe": BPE, "hf": Loaded}
