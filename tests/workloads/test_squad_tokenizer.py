"""The SQuAD WordPiece tokenizer (the `tokenizers` library) gives token for token what the
MLPerf reference's tokenizer gives.

The expectations below were recorded from the hand-written tokenizer of commit 7415c11, then
changed where the reference differs from it (CJK characters are words of their own) and checked
token for token against transformers' BertTokenizer and the reference's BasicTokenizer on every
text and every word here: literal token lists (test_datasets.py has the short test texts), and
SHA-256 digests of the ids and features of a SQuAD-like sample with accents, punctuation,
symbols, control and zero-width characters, CJK and emoji, a word over 100 characters, and a
vocab with whole words, split words and missing words.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from pathlib import Path

import pytest

from mlperf_mig.workloads.bert import BERT
from mlperf_mig.workloads.bert.squad import SquadSource, WordPieceTokenizer

PARAGRAPHS = (
    "Normandy (French: Normandie; Norman: Nourmandie; Latin: Normannia) is a geographical "
    "region of France. The Normans (Norman: Nourmands; French: Normands) gave their name to "
    "it in the 10th and 11th centuries; Rollo's descendants swore fealty to King Charles III.",
    "The Super Bowl 50 halftime show — headlined by Coldplay, with Beyoncé and Bruno Mars — "
    'drew 115.5 million viewers; tickets cost $4,000–$5,000 (a record!). "Great," said '
    "O'Brien, «vraiment» ‘superb’… Was it the city's best-ever show? Yes/no: 50/50.",
    "Naïve café-goers in Zürich, São Paulo and Kraków ate crème brûlée at 7:30\u00a0p.m.\t"
    "and paid €12.50; the Ångström unit (Å) is 10\u207b\u00b9\u2070 m. Ünïcödé ṫëxt: ĲSSELMEER.",
    "Chinese 中文字符 and Japanese カタカナ appear here, with emoji 😀 and a zero\u200bwidth "
    "space, a soft\u00adhyphen, a joiner\u200d, a bell\x07 and a line\u2028separator; "
    + "supercalifragilisticexpialidocious" * 3
    + " is one very long word of 102 letters.",
    "In 1879, Nikola Tesla (Serbian Cyrillic: Никола Тесла) worked at Budapest's telephone "
    "exchange; his AC-motor patents (U.S. Patent 381,968) were licensed to Westinghouse "
    "for $60,000 + royalties of $2.50/HP — about 0.8% of revenue.",
)
QUESTIONS = (
    (0, "What is Normandy's Latin name?", "Normannia"),
    (0, "In which centuries did the Normans name the region?", "10th and 11th centuries"),
    (1, "Who headlined the Super Bowl 50 halftime show?", "Coldplay"),
    (1, "How many viewers did the show draw?", "115.5 million"),
    (2, "Where did naïve café-goers eat crème brûlée?", "Zürich"),
    (3, "Which script is カタカナ?", "Japanese"),
    (4, "Where did Tesla work in 1879?", "Budapest's telephone exchange"),
    (4, "How much did Westinghouse pay for the patents?", "$60,000"),
)

SPECIAL = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def sample_vocab(texts: list[str]) -> list[str]:
    """A vocab with whole words, split words (prefix + ## pieces) and words left out ([UNK])."""
    folded = [
        "".join(c for c in unicodedata.normalize("NFD", t.lower()) if not unicodedata.combining(c))
        for t in texts
    ]
    found = sorted({w for t in folded for w in re.findall(r"[a-z]+|[0-9]+|[^\sa-z0-9]", t)})
    vocab = list(SPECIAL)
    for index, word in enumerate(found):
        if index % 7 == 3:
            continue
        if index % 3 == 1 and len(word) > 4:
            vocab += [word[:3], "##" + word[3:5]] + (["##" + word[5:]] if word[5:] else [])
        else:
            vocab.append(word)
    return list(dict.fromkeys(vocab))


def _sample_texts() -> list[str]:
    return list(PARAGRAPHS) + [question for _, question, _ in QUESTIONS]


@pytest.fixture(name="sample_tokenizer")
def fixture_sample_tokenizer() -> WordPieceTokenizer:
    """The tokenizer over the sample's vocab."""
    return WordPieceTokenizer({t: i for i, t in enumerate(sample_vocab(_sample_texts()))})


@pytest.fixture(name="sample_squad")
def fixture_sample_squad(tmp_path: Path) -> Path:
    """The sample as a SQuAD v1.1 folder: dev-v1.1.json and its vocab.txt."""
    paragraphs = [
        {
            "context": text,
            "qas": [
                {
                    "id": f"q{i}",
                    "question": q,
                    "answers": [{"text": a, "answer_start": text.index(a)}],
                }
                for i, (p, q, a) in enumerate(QUESTIONS)
                if p == n
            ],
        }
        for n, text in enumerate(PARAGRAPHS)
    ]
    data = {"version": "1.1", "data": [{"title": "s", "paragraphs": paragraphs}]}
    (tmp_path / "dev-v1.1.json").write_text(json.dumps(data))
    (tmp_path / "vocab.txt").write_text("\n".join(sample_vocab(_sample_texts())) + "\n")
    return tmp_path


def test_accents_symbols_and_split_words_as_before(sample_tokenizer: WordPieceTokenizer) -> None:
    """The paragraph of accents, symbols and split words gives the recorded tokens."""
    assert sample_tokenizer.tokenize(PARAGRAPHS[2]) == [
        "naive",
        "cafe",
        "[UNK]",
        "goers",
        "in",
        "zurich",
        ",",
        "sao",
        "pau",
        "##lo",
        "and",
        "krakow",
        "ate",
        "cre",
        "##me",
        "brulee",
        "at",
        "7",
        "[UNK]",
        "30",
        "p",
        ".",
        "m",
        ".",
        "and",
        "paid",
        "[UNK]",
        ".",
        "50",
        ";",
        "the",
        "[UNK]",
        "unit",
        "(",
        "a",
        ")",
        "is",
        "[UNK]",
        "m",
        ".",
        "uni",
        "##co",
        "##de",
        "text",
        "[UNK]",
        "[UNK]",
        ".",
    ]


def test_control_cjk_emoji_and_long_words_as_before(sample_tokenizer: WordPieceTokenizer) -> None:
    """The paragraph of control, zero-width and CJK characters, emoji and a 102-letter word
    gives the recorded tokens: each CJK character is a word of its own (中文字符 is four, one
    of them missing from the vocab), katakana stays one word."""
    assert sample_tokenizer.tokenize(PARAGRAPHS[3]) == [
        "chinese",
        "中",
        "文",
        "[UNK]",
        "符",
        "and",
        "[UNK]",
        "[UNK]",
        "appear",
        "here",
        ",",
        "[UNK]",
        "emoji",
        "😀",
        "and",
        "a",
        "[UNK]",
        "[UNK]",
        ",",
        "a",
        "[UNK]",
        ",",
        "a",
        "joi",
        "##ne",
        "##r",
        ",",
        "a",
        "bell",
        "and",
        "a",
        "[UNK]",
        "separator",
        ";",
        "[UNK]",
        "is",
        "one",
        "very",
        "long",
        "word",
        "[UNK]",
        "102",
        "letters",
        ".",
    ]


def test_sample_ids_as_before(sample_tokenizer: WordPieceTokenizer) -> None:
    """The ids of every paragraph and question hash to the recorded digest."""
    ids = [sample_tokenizer.ids(sample_tokenizer.tokenize(text)) for text in _sample_texts()]
    assert sum(map(len, ids)) == 395
    digest = hashlib.sha256(json.dumps(ids).encode()).hexdigest()
    assert digest == "b76a8e54e93e7e0640a5d303f589fec9006942e02a4063e206513d6587534934"


def test_sample_features_as_before(sample_squad: Path) -> None:
    """The 384-token features of the SQuAD-like sample hash to the recorded digest."""
    source = SquadSource.open(sample_squad, benchmark=BERT)
    assert source.total_count == 8
    digest = hashlib.sha256()
    for name in ("input_ids", "input_mask", "segment_ids"):
        digest.update(source.arrays[name].tobytes())
    assert digest.hexdigest() == "6ea0eac7488b5e054ed88e452edf90f634764179d872ccca856eeaf7b35a7a22"


def test_word_pieces_know_their_word(sample_tokenizer: WordPieceTokenizer) -> None:
    """tokenize_words maps each piece to the split word it came from."""
    tokens, words = sample_tokenizer.tokenize_words(["Paulo,", "\x07", "café"])
    assert tokens == ["pau", "##lo", ",", "cafe"] and words == [0, 0, 0, 2]
