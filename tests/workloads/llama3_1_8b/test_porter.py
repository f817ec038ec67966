"""The Porter stemmer of ROUGE's tokenisation, checked word by word against NLTK's."""

from __future__ import annotations

import re

import numpy as np
import pytest
from nltk.stem.porter import PorterStemmer  # installed with rouge-score (the test extra)

from mlperf_mig.workloads.llama3_1_8b.porter import stem
from mlperf_mig.workloads.llama3_1_8b.tokenizer import CORPUS

# Stems and suffixes that reach every rule of every step, and the irregular forms.
_STEMS = (
    *("rat", "gener", "hop", "fil", "relat", "condit", "sky", "t", "agre", "fe", "sing", "happ"),
    *("control", "roll", "fall", "hiss", "fizz", "fail", "bor", "mot", "lov", "troubl", "siz"),
    *("conflat", "analog", "geo", "theo", "formal", "sensit", "valen", "hesit", "digit", "radic"),
    *("nation", "sens", "tap", "ski", "d", "l", "cri", "ee", "abl", "us", "1990"),
)
_SUFFIXES = (
    *("", "s", "es", "ies", "ied", "ed", "ing", "eed", "ational", "tional", "enci", "anci"),
    *("izer", "bli", "abli", "alli", "entli", "eli", "ousli", "ization", "ation", "ator"),
    *("alism", "iveness", "fulness", "ousness", "aliti", "iviti", "biliti", "fulli", "logi"),
    *("icate", "ative", "alize", "iciti", "ical", "ful", "ness", "al", "ance", "ence", "er"),
    *("ic", "able", "ible", "ant", "ement", "ment", "ent", "sion", "tion", "ion", "ou", "ism"),
    *("ate", "iti", "ous", "ive", "ize", "e", "ll", "y", "ly", "sses", "ss", "at", "bl", "iz"),
)
_IRREGULAR = ("skies", "sky", "dying", "lying", "tying", "news", "innings", "outings", "cannings")


def _random_words(count: int) -> list[str]:
    """Letter strings with English-like letter frequencies (deterministic)."""
    rng = np.random.default_rng(0)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    weights = np.array(
        [8, 2, 3, 4, 12, 2, 2, 5, 7, 0.2, 1, 4, 2, 7, 8, 2, 0.1, 6, 6, 9, 3, 1, 2, 0.2, 2, 0.1]
    )
    weights /= weights.sum()
    return ["".join(rng.choice(letters, int(rng.integers(1, 14)), p=weights)) for _ in range(count)]


def test_stems_equal_nltks() -> None:
    """Every suffix rule, the corpus's words and random letter strings stem as NLTK stems them."""
    words = {a + b for a in _STEMS for b in _SUFFIXES}
    words |= {w.lower() for w in re.findall(r"[A-Za-z]+", CORPUS)}
    words |= {*_random_words(2000), *_IRREGULAR}
    nltk = PorterStemmer()
    different = [(w, nltk.stem(w), stem(w)) for w in sorted(words) if nltk.stem(w) != stem(w)]
    assert different == []


@pytest.mark.parametrize(
    ("word", "expected"),
    [
        ("caresses", "caress"),
        ("ponies", "poni"),
        ("ties", "tie"),
        ("hopping", "hop"),
        ("dying", "die"),
    ],
)
def test_known_stems(word: str, expected: str) -> None:
    """A few stems of the published algorithm and NLTK's extensions."""
    assert stem(word) == expected
