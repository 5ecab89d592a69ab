"""Fine-tuning examples (data=hf with prompt/response pairs or chat messages): each example as pieces of text,
each in the loss or not (`message_pieces`, `pair_pieces`), tokenized with the loss on the responses only
(`encode_example`). No torch: the shards are written without it; harness.data.sources.corpus_datamodule reads them."""

from __future__ import annotations

#: a chat without a template of its own: each message as `<|role|>`, a newline, its content and a newline
PLAIN_ROLE = "<|{role}|>\n"


def _render_plain(messages: list[dict], generation_prompt: bool) -> str:
    """Chat messages as text where the tokenizer has no chat template (PLAIN_ROLE)."""
    text = "".join(PLAIN_ROLE.format(role=m["role"]) + f"{m['content']}\n" for m in messages)
    return text + (PLAIN_ROLE.format(role="assistant") if generation_prompt else "")


def chat_renderer(template_tokenizer):
    """`render(messages, generation_prompt) -> str`: the tokenizer's own chat template where it has one (a
    transformers tokenizer), else _render_plain."""
    if template_tokenizer is None or not getattr(template_tokenizer, "chat_template", None):
        return _render_plain

    def render(messages: list[dict], generation_prompt: bool) -> str:
        if not messages:
            return ""
        return template_tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=generation_prompt
        )

    return render


def message_pieces(messages: list[dict], render) -> list[tuple[str, bool]]:
    """(text, in the loss) pieces of a chat: each assistant message's rendering in the loss, the rest (the
    template's words, the other roles, the prompt that opens each answer) outside it."""
    pieces, done = [], ""
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        before, upto = render(messages[:i], True), render(messages[: i + 1], False)
        if not (before.startswith(done) and upto.startswith(before)):  # a template that rewrites the past
            return [(render(messages, False), True)]
        pieces += [(before[len(done) :], False), (upto[len(before) :], True)]
        done = upto
    rest = render(messages, False)[len(done) :]
    return [(t, loss) for t, loss in [*pieces, (rest, False)] if t]


def pair_pieces(prompt: str, response: str, render, separator: str) -> list[tuple[str, bool]]:
    """A prompt and its response: through the chat template where there is one, else the prompt and `separator`
    (on the prompt's side: not learned), then the response, in the loss."""
    if render is _render_plain:
        return [(prompt + separator, False), (response, True)]
    return message_pieces(
        [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}], render
    )


def encode_example(pieces: list[tuple[str, bool]], tokenizer, bos: bool) -> tuple[list[int], list[int]]:
    """(ids, loss): the pieces' tokens, preceded by the BOS (`bos`) and followed by the EOS, which is in the
    loss where the last piece is (the model learns to stop); loss[k] is 1 where token k is a target to learn."""
    ids, loss = ([tokenizer.bos_id], [0]) if bos else ([], [])
    for text, in_loss in pieces:
        tokens = tokenizer.encode(text)
        ids += tokens
        loss += [int(in_loss)] * len(tokens)
    if tokenizer.eos_id is not None:
        ids.append(tokenizer.eos_id)
        loss.append(int(bool(pieces) and pieces[-1][1]))
    return ids, loss
