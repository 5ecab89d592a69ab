"""DataModules a fork might write, used by tests: correct ones, and ones with one planted data-pipeline mistake.

parts.py         what they share: the texts, a tokenizer with special tokens, the base DataModule, build()
correct.py       correct pipelines: padded language modelling, classification, a sharded stream, text windows
habits.py        correct pipelines written with other habits (Hugging Face's, GPT-2's, left and max-length padding)
buggy.py         one planted mistake each in the pipelines of correct.py
buggy_habits.py  one planted mistake each in the habits of habits.py and in special tokens
packed.py        packed documents that declare their boundaries (a batch's `document_ids`)

`CORRECT` and `BUGGY` below name them all, and `build(cls, length)` makes one ready to use. A config names one by
its module, as a fork names its own: `data._target_=tests.forks.data.correct.PaddedLM`."""

from __future__ import annotations

from tests.forks.data import buggy, buggy_habits, correct, habits
from tests.forks.data.buggy_habits import NoEosLM
from tests.forks.data.correct import FixedClassification, PaddedClassification, PaddedLM, StreamingLM
from tests.forks.data.habits import PackedLM, SpacedTokenizer
from tests.forks.data.parts import Examples, alphabet, build, help_text

__all__ = [
    "BUGGY",
    "CORRECT",
    "Examples",
    "FixedClassification",
    "NoEosLM",
    "PackedLM",
    "PaddedClassification",
    "PaddedLM",
    "SpacedTokenizer",
    "StreamingLM",
    "alphabet",
    "build",
    "help_text",
]

CORRECT = {
    cls.__name__: cls
    for cls in (
        correct.PaddedLM,
        correct.PaddedClassification,
        correct.FixedClassification,
        correct.StreamingLM,
        correct.TextWindowsLM,
        habits.HFStylePaddedLM,
        habits.EosIsPadLM,
        habits.LeftPaddedLM,
        habits.MaxLengthPaddedLM,
        habits.PackedLM,
        habits.MappingBatches,
        habits.NumpyVocabSize,
        habits.TinyIIDLM,
        habits.PaddedRecordsLM,
        habits.CutThenPaddedLM,
        habits.LeftPaddedRecordsLM,
        habits.EosPaddedRecordsLM,
        habits.HFEosPadLM,
    )
}
BUGGY = {
    cls.__name__: cls
    for cls in (
        buggy.PadCountedLM,
        buggy.PadCountedFromInputsLM,
        buggy.EosPaddedLM,
        buggy.ValIsTrain,
        buggy.ValSliceOfTrain,
        buggy.OverlappingWindowsLM,
        buggy.SameBatchSampler,
        buggy.IgnoresIndexDataset,
        buggy.LabelFirstClassification,
        buggy.LabelOffByOneClassification,
        buggy.UnshardedStreamingLM,
        buggy.EosEqualsVocabSize,
        buggy.TargetsAreInputsLM,
        buggy.ShiftedByTwoLM,
        buggy.LabelInInputClassification,
        buggy.TimeMajorCollate,
        buggy.OtherVocabularyOrder,
        buggy.EmptyLossMask,
        buggy.MutatingValLoader,
        buggy_habits.EosNotLearnedLM,
        buggy_habits.EmptyValLoader,
        buggy_habits.Int32Targets,
        buggy_habits.PadCountedRecordsLM,
        buggy_habits.EosMaskedAsPadLM,
        buggy_habits.DoubledBosLM,
        buggy_habits.EosSometimesLM,
    )
}
