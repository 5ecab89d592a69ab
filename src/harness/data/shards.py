"""Token shards: a corpus's files cut into pieces and tokenized (the workers' side of harness.data.prepare_corpus),
and read back through memory maps (TokenStore): meta.json and shard-NNNNN.bin files, the token stream in order
(uint16 or uint32, no header). A document: a text file, a .jsonl record, a .parquet row (pyarrow, lazily)."""

from __future__ import annotations

import gzip
import hashlib
import json
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path

import numpy as np

FORMAT = "harness-corpus-1"
BLOCK = 1 << 20  # bytes read (and tokenized) at a time: what bounds a worker's memory
WHITESPACE = b" \t\n\r\x0b\x0c"
TASK_BYTES = (256 << 10, 64 << 20)  # the least and most a worker's task (one shard) reads


class NotText(Exception):
    """A file that is not UTF-8 (for .jsonl: not JSON records with the text field; for .parquet: no Parquet,
    or no text column), or cannot be read; `fix`: what to do (None: make it UTF-8 text)."""

    def __init__(self, path: str, offset: int, reason: str, fix: str | None = None):
        super().__init__(path, offset, reason, fix)  # the parts as args: it crosses a process pool intact
        self.path, self.offset, self.reason, self.fix = path, offset, reason, fix


#: what to do about a file of the corpus that cannot be read
UNREADABLE = "make it readable (its permissions), or leave it out of data.files"
#: what to do about a .parquet file pyarrow cannot read
DAMAGED = "write or download it again, or leave it out of data.files"
PARQUET_BATCH = 1024  # rows decoded at a time, within one row group: a worker's memory on Parquet


@dataclass(frozen=True)
class Piece:
    """Bytes [start, end) of a file (end None: to its end); `last`: the piece ends its file."""

    path: str
    start: int = 0
    end: int | None = None
    last: bool = True

    @property
    def jsonl(self) -> bool:
        return self.path.endswith((".jsonl", ".jsonl.gz"))

    @property
    def gz(self) -> bool:
        return self.path.endswith(".gz")

    @property
    def parquet(self) -> bool:
        return self.path.endswith(".parquet")


def _cut_after(data: bytes, lines: bool) -> int:
    """The last place in `data` where a piece may end (0 if none): after a newline followed by a non-space
    byte, or any newline for records (`lines`)."""
    # GPT-2's pre-tokenizer splits there anyway: the tokens do not depend on where the pieces fall
    end = len(data) - 1  # the byte after the newline must be in data
    while (i := data.rfind(b"\n", 0, end)) >= 0:
        if lines or data[i + 1] not in WHITESPACE:
            return i + 1
        end = i
    return 0


def _first_cut(data: bytes, lines: bool) -> int | None:
    """The first place in `data` where a piece may begin, as `_cut_after` places it; None if none."""
    i = -1
    while (i := data.find(b"\n", i + 1, len(data) - 1)) >= 0:
        if lines or data[i + 1] not in WHITESPACE:
            return i + 1
    return None


def split_file(path: str, size: int, piece_bytes: int) -> list[Piece]:
    """`path` as pieces of about `piece_bytes` (a .gz or .parquet file is one piece: not entered part-way)."""
    if path.endswith((".gz", ".parquet")) or size <= piece_bytes:
        return [Piece(path)]
    starts = [0]
    with open(path, "rb") as f:
        while starts[-1] + piece_bytes < size:
            f.seek(starts[-1] + piece_bytes)
            cut = _first_cut(f.read(BLOCK), lines=path.endswith(".jsonl"))
            if cut is None:  # nowhere to cut in a whole block: the rest is one piece
                break
            starts.append(starts[-1] + piece_bytes + cut)
    ends = [*starts[1:], size]
    return [Piece(path, s, e, last=e == size) for s, e in zip(starts, ends, strict=True)]


def _open(piece: Piece):
    if piece.gz:
        return gzip.open(piece.path, "rb")
    f = open(piece.path, "rb")  # noqa: SIM115  (closed by the caller's with)
    f.seek(piece.start)
    return f


def _decode(data: bytes, piece: Piece, offset: int) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise NotText(piece.path, offset + err.start, f"not UTF-8 text ({err.reason})") from None


def read_texts(piece: Piece, text_field: str = "text"):
    """Yield (text, ends a document) for `piece`, about BLOCK bytes at a time; NotText for a file that is no
    text or cannot be read."""
    try:
        yield from _texts(piece, text_field)
    except (OSError, EOFError) as err:
        reason = f"cannot be read ({getattr(err, 'strerror', None) or err})"
        raise NotText(piece.path, piece.start, reason, UNREADABLE) from None


def _texts(piece: Piece, text_field: str):
    if piece.parquet:
        yield from _rows(piece, text_field)
        return
    with _open(piece) as stream:
        if piece.jsonl:
            yield from _records(stream, piece, text_field)
            return
        left = None if piece.end is None else piece.end - piece.start
        offset, carry = piece.start, b""  # offset: where data[0] lies in the (decompressed) file
        while True:
            block = stream.read(BLOCK if left is None else min(BLOCK, left))
            left = None if left is None else left - len(block)
            data = carry + block
            if not block:  # the end of the piece
                yield _decode(data, piece, offset), piece.last
                return
            cut = _cut_after(data, lines=False)
            if cut == 0 and len(data) < 16 * BLOCK:
                carry = data  # nowhere to cut yet: read on
                continue
            if cut == 0:  # 16 blocks without a newline: cut before the last character's first byte
                cut = len(data) - 1
                while cut > 0 and data[cut] & 0xC0 == 0x80:
                    cut -= 1
                cut = cut or len(data)  # no character starts in it: not UTF-8, which _decode says
            yield _decode(data[:cut], piece, offset), False
            offset, carry = offset + cut, data[cut:]


def _records(stream, piece: Piece, text_field: str):
    """Yield (the text field, True) of each JSON record, one a line."""
    offset = piece.start
    for line in stream:
        if piece.end is not None and offset >= piece.end:
            return
        text = _decode(line, piece, offset)
        if text.strip():
            try:
                value = json.loads(text)[text_field]
            except (json.JSONDecodeError, KeyError, TypeError):
                raise NotText(piece.path, offset, f"not a JSON record with a {text_field!r} field") from None
            if not isinstance(value, str):
                raise NotText(piece.path, offset, f"the {text_field!r} field is not a string")
            yield value, True
        offset += len(line)


def _first_line(err: Exception) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


def _is_text(kind) -> bool:
    import pyarrow as pa

    kind = kind.value_type if pa.types.is_dictionary(kind) else kind
    view = getattr(pa.types, "is_string_view", lambda _: False)  # pyarrow >= 16
    return pa.types.is_string(kind) or pa.types.is_large_string(kind) or view(kind)


def parquet_file(path: str, text_field: str):
    """`path` opened as a pyarrow ParquetFile (its footer read), its `text_field` column checked to be text;
    NotText (offset 0) if pyarrow is missing, the file is no Parquet, or it has no such text column."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        reason = "is Parquet, which needs the datasets extra (pyarrow is not installed)"
        raise NotText(path, 0, reason, "pip install -e '.[datasets]'") from None
    try:
        file = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as err:
        raise NotText(
            path, 0, f"is not a Parquet file, or is damaged ({_first_line(err)})", DAMAGED
        ) from None
    schema = file.schema_arrow
    texts = [f.name for f in schema if _is_text(f.type)]
    fix = f"set data.text_field={texts[0] if texts else '<the text column>'} (a column of strings)"
    if text_field not in schema.names:
        file.close()
        raise NotText(path, 0, f"has no {text_field!r} column (it has: {', '.join(schema.names)})", fix)
    if not _is_text(schema.field(text_field).type):
        file.close()
        kind = schema.field(text_field).type
        raise NotText(path, 0, f"its {text_field!r} column holds {kind}, not text (strings)", fix)
    return file


def _rows(piece: Piece, text_field: str):
    """Yield (the text column's value, True) of each row of a Parquet file, PARQUET_BATCH rows at a time."""
    with parquet_file(piece.path, text_field) as file:
        row = 0
        for group in range(file.num_row_groups):
            chunks = file.metadata.row_group(group).to_dict()["columns"]
            chunks = [c for c in chunks if c["path_in_schema"] == text_field] or chunks
            offset = min(c["dictionary_page_offset"] or c["data_page_offset"] for c in chunks)  # the column's
            for values in _batches(file, group, text_field, piece.path, offset):
                for value in values:
                    if value is None:
                        fix = "fill or drop its null rows, or leave it out of data.files"
                        reason = f"the {text_field!r} column is null in row {row}"
                        raise NotText(piece.path, offset, reason, fix)
                    yield value, True
                    row += 1


def _batches(file, group: int, text_field: str, path: str, offset: int):
    """Yield the values of the text column in row group `group`, a list of PARQUET_BATCH at a time; a page
    that cannot be read is NotText at `offset` (where the column's chunk starts)."""
    import pyarrow as pa

    batches = file.iter_batches(PARQUET_BATCH, row_groups=[group], columns=[text_field], use_threads=False)
    while True:
        try:
            batch = next(batches, None)
        except (pa.ArrowException, OSError) as err:
            reason = f"row group {group} cannot be read as Parquet ({_first_line(err)})"
            raise NotText(path, offset, reason, DAMAGED) from None
        if batch is None:
            return
        yield batch.column(0).to_pylist()


@dataclass(frozen=True)
class Task:
    """One worker's share: consecutive pieces, tokenized into one shard file."""

    index: int
    pieces: tuple[Piece, ...]
    size: int  # bytes on disk, for the progress bar

    @property
    def shard(self) -> str:
        return f"shard-{self.index:05d}.bin"


def plan(files: list[tuple[str, int]], workers: int, piece_bytes: int = 4 << 20) -> list[Task]:
    """Tasks over `files` ((path, bytes) in order): about four a worker, 256 KiB to 64 MiB each, of whole
    pieces of `piece_bytes` (the same on every machine)."""
    total = sum(size for _, size in files)
    task_bytes = min(max(total // (4 * max(workers, 1)), TASK_BYTES[0]), TASK_BYTES[1])
    tasks, pieces, size = [], [], 0
    for path, file_size in files:
        for piece in split_file(path, file_size, piece_bytes):
            piece_size = (piece.end if piece.end is not None else file_size) - piece.start
            if pieces and size + piece_size > task_bytes:
                tasks.append(Task(len(tasks), tuple(pieces), size))
                pieces, size = [], 0
            pieces.append(piece)
            size += piece_size
    if pieces:
        tasks.append(Task(len(tasks), tuple(pieces), size))
    return tasks


def documents(pieces, text_field: str):
    """Yield (text, starts a document, ends one) over `pieces`, in order."""
    for piece in pieces:
        starting = piece.start == 0 or piece.jsonl
        for text, ends in read_texts(piece, text_field):
            yield text, starting, ends
            starting = ends


def scan_task(task: Task, text_field: str) -> tuple[int, str]:
    """(task index, every character its pieces hold, sorted): a char tokenizer's alphabet, in parallel."""
    seen: set[str] = set()
    for text, _, _ in documents(task.pieces, text_field):
        seen.update(text)
    return task.index, "".join(sorted(seen))


def encode_task(task: Task, spec: dict, text_field: str, folder: str, dtype: str) -> tuple[int, int, str]:
    """Tokenize `task` into `folder/task.shard`: (task index, tokens written, their sha256); each document
    followed by the EOS, preceded by the BOS where it differs."""
    from harness.data.tokenizer import from_spec

    tokenizer = from_spec(spec)
    eos, bos = tokenizer.eos_id, tokenizer.bos_id if tokenizer.bos_id != tokenizer.eos_id else None
    encode_batch = getattr(tokenizer, "encode_batch", None) or (
        lambda texts: [tokenizer.encode(t) for t in texts]
    )
    digest, count, batch = hashlib.sha256(), 0, []

    def flush() -> int:
        ids = []
        for (_, starts, ends), encoded in zip(batch, encode_batch([t for t, _, _ in batch]), strict=True):
            ids += ([bos] if starts and bos is not None else []) + encoded
            ids += [eos] if ends and eos is not None else []
        data = np.asarray(ids, dtype=dtype).tobytes()
        out.write(data)
        digest.update(data)
        batch.clear()
        return len(ids)

    with open(Path(folder) / task.shard, "wb") as out:
        for item in documents(task.pieces, text_field):
            batch.append(item)
            if sum(len(t) for t, _, _ in batch) >= BLOCK:
                count += flush()
        count += flush()
    return task.index, count, digest.hexdigest()


class TokenStore:
    """A prepared folder's token stream, read through memory maps opened on first read in the process that
    reads (pickling carries the paths, not the data)."""

    def __init__(self, folder: Path, meta: dict):
        self.paths = [Path(folder) / s["file"] for s in meta["shards"]]
        self.counts = [s["tokens"] for s in meta["shards"]]
        self.ends = np.cumsum(self.counts).tolist()
        self.dtype = np.dtype(meta["dtype"])
        self.maps: list | None = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "maps": None}

    def __len__(self) -> int:
        return self.ends[-1] if self.ends else 0

    def read(self, start: int, count: int) -> np.ndarray:
        """Tokens [start, start + count) of the stream, across shard boundaries."""
        if self.maps is None:
            self.maps = [
                np.memmap(p, dtype=self.dtype, mode="r") if n else np.empty(0, self.dtype)
                for p, n in zip(self.paths, self.counts, strict=True)
            ]
        assert start >= 0 and start + count <= len(self), (start, count, len(self))
        parts, k = [], bisect_right(self.ends, start)
        while count > 0:
            offset = start - (self.ends[k] - self.counts[k])
            take = min(count, self.counts[k] - offset)
            parts.append(self.maps[k][offset : offset + take])
            start, count, k = start + take, count - take, k + 1
        return np.concatenate(parts) if len(parts) != 1 else np.array(parts[0])
