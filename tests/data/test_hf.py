"""data=hf: a dataset of Hugging Face `datasets` (Parquet, JSON lines, CSV, a save_to_disk folder), tokenized once
into shards, for language modelling and for fine-tuning on responses only (padded and packed); its mistakes one
line each."""

from __future__ import annotations

import json
import random

import pytest

from harness.data import HFDataModule
from harness.data.sources import hf_shards as hf
from harness.errors import ConfigError
from harness.tasks.training import run
from tests.conftest import PROBES_OFF

pa = pytest.importorskip("pyarrow")
datasets = pytest.importorskip("datasets")
pq = pytest.importorskip("pyarrow.parquet")

WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "seven",
    "wizards",
    "quietly",
    "judge",
    "boxing",
]
CHAR = {"kind": "char"}
BPE = {"kind": "bpe", "vocab_size": 300}  # an end of text: a fine-tuned example learns where it stops


def texts(count: int = 60, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 20))) for _ in range(count)]


def pairs(count: int = 40) -> list[dict]:
    rng = random.Random(1)
    return [
        {"prompt": f"{a} plus {b} is", "response": f" {a + b}."}
        for a, b in ((rng.randint(1, 50), rng.randint(1, 50)) for _ in range(count))
    ]


def chats(count: int = 40) -> list[dict]:
    rng = random.Random(2)
    out = []
    for _ in range(count):
        a, b = rng.randint(1, 9), rng.randint(1, 9)
        turns = [
            ("user", f"add {a} {b}"),
            ("assistant", f"{a + b}"),
            ("user", "double"),
            ("assistant", f"{2 * (a + b)}"),
        ]
        out.append({"messages": [{"role": r, "content": c} for r, c in turns]})
    return out


def jsonl(path, rows: list[dict]):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def ready(tmp_path, length: int = 24, tokenizer=CHAR, **keys) -> HFDataModule:
    data = HFDataModule(length=length, tokenizer=tokenizer, root=str(tmp_path / "data"), batch_size=4, **keys)
    data.prepare_data()
    data.setup()
    return data


def stream(data: HFDataModule) -> list[int]:
    store = data.train_dataset.store
    return store.read(0, len(store)).tolist()


def masked_targets(item: dict, tokenizer) -> str:
    return tokenizer.decode(item["targets"][item["loss_mask"]].tolist())


def test_parquet_jsonl_csv_and_a_saved_folder_give_the_same_tokens(tmp_path):
    rows = [{"text": t, "n": i} for i, t in enumerate(texts())]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "a.parquet")
    jsonl(tmp_path / "a.jsonl", rows)
    datasets.Dataset.from_list(rows).to_csv(str(tmp_path / "a.csv"), index=False)
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "saved"))
    streams = [
        stream(ready(tmp_path / "roots" / name, path=str(tmp_path / name)))
        for name in ("a.parquet", "a.jsonl", "a.csv", "saved")
    ]
    assert streams[0] == streams[1] == streams[2] == streams[3]
    data = ready(tmp_path / "again", path=str(tmp_path / "a.parquet"))
    held = round(len(rows) * 0.1)  # no validation split: the last rows held out
    assert data.tokenizer.decode(stream(data)).startswith(rows[0]["text"])
    val = data.val_dataset
    assert rows[-held]["text"] in data.tokenizer.decode(
        val.store.read(val.begin, val.end - val.begin).tolist()
    )


def test_a_dataset_s_own_validation_split_is_used(tmp_path):
    train, val = texts(40, seed=0), texts(10, seed=9)
    datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict({"text": train}),
            "validation": datasets.Dataset.from_dict({"text": val}),
        }
    ).save_to_disk(str(tmp_path / "saved"))
    data = ready(tmp_path, path=str(tmp_path / "saved"))
    v = data.val_dataset
    assert data.tokenizer.decode(v.store.read(v.begin, v.end - v.begin).tolist()) == "".join(t for t in val)


def test_a_prepared_dataset_is_reused_by_a_full_run_without_tokenizing_again(
    tmp_path, make_config, one_thread, monkeypatch
):
    pq.write_table(pa.table({"text": texts(80)}), tmp_path / "train.parquet")
    keys = [
        "model=transformer", "data=hf", f"data.path={tmp_path / 'train.parquet'}", "data.text_field=text",
        "tokenizer=bpe", "tokenizer.vocab_size=300", "data.length=16", f"data.root={tmp_path / 'data'}",
    ]  # fmt: skip
    verdict = run(make_config(*keys, "mode=overfit", "n=2", *PROBES_OFF))
    assert verdict["status"] == "PASS", verdict
    assert verdict["checks"] and all(c["status"] == "PASS" for c in verdict["checks"]), verdict["checks"]
    monkeypatch.setattr(hf, "_write", lambda source: pytest.fail("tokenized again"))
    monkeypatch.setattr(datasets.Dataset, "map", lambda *a, **k: pytest.fail("mapped again"))
    full = run(
        make_config(
            *keys, "mode=full", "mode.max_steps=4", "preflight=false", *PROBES_OFF, run_dir=tmp_path / "full"
        )
    )
    assert full["status"] == "DONE", full


def test_fine_tuning_on_pairs_learns_the_responses_only_padded_and_packed(tmp_path):
    rows = pairs()
    path = jsonl(tmp_path / "pairs.jsonl", rows)
    fields = dict(path=str(path), prompt_field="prompt", response_field="response")
    padded = ready(tmp_path, tokenizer=BPE, **fields)
    eos = padded.tokenizer.decode([padded.tokenizer.eos_id])
    assert len(padded.train_dataset) == len(rows) - round(len(rows) * 0.1)
    for i in range(len(padded.train_dataset)):
        item = padded.train_dataset[i]
        assert masked_targets(item, padded.tokenizer) == rows[i]["response"] + eos
        assert padded.train_dataset.record(i) == {
            "text": rows[i]["prompt"] + "\n",  # data.separator's default: on the prompt's side
            "label": rows[i]["response"] + eos,
        }
    packed = ready(tmp_path, tokenizer=BPE, packing=True, **fields)
    responses = {r["response"] for r in rows}
    for i in range(8):
        item = packed.train_dataset[i]
        ids, documents = item["input_ids"].tolist(), item["document_ids"].tolist()
        assert documents == sorted(documents) and documents[0] == 0
        for document in set(documents) - {
            documents[0],
            documents[-1],
        }:  # the whole ones: their response learned
            where = [t for t, d in enumerate(documents) if d == document]
            whole = packed.tokenizer.decode([ids[t] for t in where])
            learned = packed.tokenizer.decode(
                [item["targets"][t].item() for t in where if item["loss_mask"][t]]
            )
            assert whole.endswith(eos) and learned[: -len(eos)] in responses, (whole, learned)
            # the document's last input is its eos, whose target begins the next: the learned ones end before it
            assert whole[: -len(eos)].endswith(learned[: -len(eos)])


def test_fine_tuning_on_chats_learns_the_assistant_s_messages_only(tmp_path):
    rows = chats()
    data = ready(
        tmp_path,
        length=64,
        tokenizer=BPE,
        path=str(jsonl(tmp_path / "chats.jsonl", rows)),
        messages_field="messages",
    )
    eos = data.tokenizer.decode([data.tokenizer.eos_id])
    for i in range(len(data.train_dataset)):
        answers = [m["content"] for m in rows[i]["messages"] if m["role"] == "assistant"]
        assert (
            masked_targets(data.train_dataset[i], data.tokenizer) == "".join(f"{a}\n" for a in answers) + eos
        )
        record = data.train_dataset.record(i)
        assert record["text"].startswith("<|user|>\nadd ") and record["label"].endswith(f"\n{eos}")


def test_the_preflight_judges_a_packed_run_s_documents(tmp_path, make_config, one_thread):
    path = jsonl(tmp_path / "pairs.jsonl", pairs())
    cfg = make_config(
        "model=transformer", "data=hf", f"data.path={path}", "data.prompt_field=prompt", "data.response_field=response",
        "data.packing=true", "tokenizer=char", "data.length=32", f"data.root={tmp_path / 'data'}", "preflight=warn",
        "mode.max_steps=2", *PROBES_OFF,
    )  # fmt: skip
    checks = {c["name"]: c for c in run(cfg)["checks"]}
    assert checks["document_isolation"]["status"] == "FAIL", checks["document_isolation"]
    assert "attention crosses the documents" in checks["document_isolation"]["detail"]
    assert all(checks[name]["status"] == "PASS" for name in ("loss_mask", "data_roundtrip", "special_tokens"))


@pytest.mark.parametrize(
    ("write", "keys", "error"),
    [
        (
            "text",
            {"text_field": "body"},
            "data.text_field=body: not a field of the dataset; its fields: text, n",
        ),
        ("text", {"split": "dev"}, "data.split=dev: not a split of the dataset; its splits: train"),
        (
            "text",
            {"val_split": "dev"},
            "data.val_split=dev: not a split of the dataset; its splits: train, or null",
        ),
        ("text", {"text_field": "n"}, "data.text_field=n: is int64, not text; name a field that holds text"),
        ("empty", {}, "holds no rows (empty Parquet); give a dataset with rows"),
        ("pairs", {"prompt_field": "prompt"}, "fine-tuning on pairs needs both"),
        ("text", {"num_proc": 0}, "data.num_proc=0: must be a whole number >= 1, or null"),
    ],
)
def test_bad_input_is_one_line_naming_the_key(tmp_path, write, keys, error):
    rows = {"text": [{"text": t, "n": i} for i, t in enumerate(texts(20))], "empty": [], "pairs": pairs()}[
        write
    ]
    path = tmp_path / "data.parquet"
    schema = pa.schema([("text", pa.string()), ("n", pa.int64())]) if not rows else None
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    with pytest.raises(ConfigError) as err:
        ready(tmp_path, path=str(path), **keys)
    assert error in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_a_dataset_name_out_of_reach_says_so_and_how_to_use_local_files(tmp_path, monkeypatch):
    import huggingface_hub.constants

    for settings in (datasets.config, huggingface_hub.constants):  # read at import: no network retries
        monkeypatch.setattr(settings, "HF_HUB_OFFLINE", True)
    with pytest.raises(ConfigError) as err:
        ready(tmp_path, path="someone/no-such-dataset")
    message = str(err.value)
    assert (
        message.startswith("data.path=someone/no-such-dataset: cannot be loaded offline")
        and "save_to_disk" in message
    )
    with pytest.raises(ConfigError, match="no such file or folder"):
        ready(tmp_path, path=str(tmp_path / "missing.parquet"))


def test_chats_are_rendered_by_the_tokenizer_s_own_chat_template(tmp_path):
    transformers = pytest.importorskip("transformers")
    from harness.data.tokenizer import train_bpe

    rows = chats()
    trained = train_bpe((m["content"] for r in rows for m in r["messages"]), 300)
    folder = tmp_path / "tokenizer"
    wrapped = transformers.PreTrainedTokenizerFast(
        tokenizer_object=trained.backend, eos_token="<|endoftext|>"
    )
    wrapped.chat_template = (
        "{% for m in messages %}[{{ m.role }}]{{ m.content }}[end]{% endfor %}"
        "{% if add_generation_prompt %}[assistant]{% endif %}"
    )
    wrapped.save_pretrained(str(folder))
    path = jsonl(tmp_path / "chats.jsonl", rows)
    data = ready(
        tmp_path,
        length=64,
        tokenizer={"kind": "hf", "path": str(folder)},
        path=str(path),
        messages_field="messages",
    )
    eos = data.tokenizer.decode([data.tokenizer.eos_id])
    for i in range(len(data.train_dataset)):
        answers = [m["content"] for m in rows[i]["messages"] if m["role"] == "assistant"]
        assert (
            masked_targets(data.train_dataset[i], data.tokenizer)
            == "".join(f"{a}[end]" for a in answers) + eos
        )
        assert data.train_dataset.record(i)["text"].startswith(
            f"[user]{rows[i]['messages'][0]['content']}[end][assistant]"
        )
