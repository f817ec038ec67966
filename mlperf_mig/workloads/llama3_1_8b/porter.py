"""The Porter stemmer as ROUGE's reference tokenisation uses it: NLTK's `PorterStemmer` in its
default mode (NLTK_EXTENSIONS), written here from the published algorithm and NLTK's documented
departures from it, so that scoring needs no NLTK at run time.

The `rouge-score` package (what `evaluate`'s rouge and so the MLPerf scorer call) stems every
lower-case token longer than 3 characters with that stemmer. The departures from Porter (1980),
all of them NLTK's:
- irregular forms map to fixed stems (`dying` -> `die`, `skies` -> `sky`, `news` -> `news`);
- words of one or two letters are left alone;
- step 1a: a four-letter word in `ies` keeps `ie` (`ties` -> `tie`); step 1b likewise for `ied`
  (`tied` -> `tie`, longer words `-ied` -> `-i`);
- step 1c turns a final `y` into `i` only after a consonant that is not the first letter;
- step 2 first rewrites `alli` -> `al` (then runs step 2 again), uses `bli` -> `ble` rather than
  `abli` -> `able`, and adds `fulli` -> `ful` and `logi` -> `log` (the measure taken with the
  `l`);
- a two-letter stem vowel-consonant counts as consonant-vowel-consonant.

tests/workloads/llama3_1_8b/test_porter.py checks it against NLTK word by word.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

__all__ = ["stem"]

_VOWELS = frozenset("aeiou")
_IRREGULAR = {
    "skies": "sky",
    "sky": "sky",
    "dying": "die",
    "lying": "lie",
    "tying": "tie",
    "news": "news",
    "innings": "inning",
    "inning": "inning",
    "outings": "outing",
    "outing": "outing",
    "cannings": "canning",
    "canning": "canning",
    "howe": "howe",
    "proceed": "proceed",
    "exceed": "exceed",
    "succeed": "succeed",
}

# (suffix, replacement, condition on the stem left once the suffix is cut)
_Rule = tuple[str, str, Callable[[str], bool] | None]


def _is_consonant(word: str, i: int) -> bool:
    """Porter's consonant: not a vowel, and a `y` only when it follows a vowel or starts the
    word."""
    letter = word[i]
    if letter in _VOWELS:
        return False
    if letter == "y":
        return i == 0 or not _is_consonant(word, i - 1)
    return True


def _measure(stem: str) -> int:
    """m of [C](VC)^m[V]: how many vowel-consonant sequences the stem has."""
    pattern = "".join("c" if _is_consonant(stem, i) else "v" for i in range(len(stem)))
    return pattern.count("vc")


def _positive_measure(stem: str) -> bool:
    return _measure(stem) > 0


def _measure_above_one(stem: str) -> bool:
    return _measure(stem) > 1


def _has_vowel(stem: str) -> bool:
    return any(not _is_consonant(stem, i) for i in range(len(stem)))


def _ends_double_consonant(word: str) -> bool:
    return len(word) >= 2 and word[-1] == word[-2] and _is_consonant(word, len(word) - 1)


def _ends_cvc(word: str) -> bool:
    """*o: the stem ends consonant-vowel-consonant, the last not w, x or y (or, NLTK's
    addition, the stem is two letters, vowel then consonant)."""
    if len(word) >= 3:
        return (
            _is_consonant(word, len(word) - 3)
            and not _is_consonant(word, len(word) - 2)
            and _is_consonant(word, len(word) - 1)
            and word[-1] not in "wxy"
        )
    return len(word) == 2 and not _is_consonant(word, 0) and _is_consonant(word, 1)


def _apply_first(word: str, rules: Sequence[_Rule]) -> str:
    """The first rule whose suffix the word ends with decides: replaced when its condition holds,
    the word unchanged when not (no later rule is tried). The suffix `*d` stands for a double
    consonant, of which one letter is cut."""
    for suffix, replacement, condition in rules:
        if suffix == "*d":
            if not _ends_double_consonant(word):
                continue
            stem = word[:-2]
        elif word.endswith(suffix):
            stem = word[: len(word) - len(suffix)]
        else:
            continue
        if condition is None or condition(stem):
            return stem + replacement
        return word
    return word


def _step1a(word: str) -> str:
    if word.endswith("ies") and len(word) == 4:
        return word[:-3] + "ie"
    return _apply_first(
        word, [("sses", "ss", None), ("ies", "i", None), ("ss", "ss", None), ("s", "", None)]
    )


def _step1b(word: str) -> str:
    if word.endswith("ied"):
        return word[:-3] + ("ie" if len(word) == 4 else "i")
    if word.endswith("eed"):
        stem = word[:-3]
        return stem + "ee" if _measure(stem) > 0 else word
    for suffix in ("ed", "ing"):
        if word.endswith(suffix) and _has_vowel(word[: -len(suffix)]):
            stem = word[: -len(suffix)]
            break
    else:
        return word
    last = stem[-1]
    return _apply_first(
        stem,
        [
            ("at", "ate", None),
            ("bl", "ble", None),
            ("iz", "ize", None),
            ("*d", last, lambda _cut: last not in "lsz"),
            ("", "e", lambda cut: _measure(cut) == 1 and _ends_cvc(cut)),
        ],
    )


def _step1c(word: str) -> str:
    return _apply_first(
        word, [("y", "i", lambda stem: len(stem) > 1 and _is_consonant(stem, len(stem) - 1))]
    )


_STEP2 = (
    ("ational", "ate"),
    ("tional", "tion"),
    ("enci", "ence"),
    ("anci", "ance"),
    ("izer", "ize"),
    ("bli", "ble"),
    ("alli", "al"),
    ("entli", "ent"),
    ("eli", "e"),
    ("ousli", "ous"),
    ("ization", "ize"),
    ("ation", "ate"),
    ("ator", "ate"),
    ("alism", "al"),
    ("iveness", "ive"),
    ("fulness", "ful"),
    ("ousness", "ous"),
    ("aliti", "al"),
    ("iviti", "ive"),
    ("biliti", "ble"),
    ("fulli", "ful"),
)


def _step2(word: str) -> str:
    if word.endswith("alli") and _positive_measure(word[:-4]):
        return _step2(word[:-4] + "al")
    rules: list[_Rule] = [(s, r, _positive_measure) for s, r in _STEP2]
    # the measure of `logi` is taken with its `l`, so that short stems (geo-, theo-) qualify
    rules.append(("logi", "log", lambda _stem: _positive_measure(word[:-3])))
    return _apply_first(word, rules)


_STEP3 = (
    ("icate", "ic"),
    ("ative", ""),
    ("alize", "al"),
    ("iciti", "ic"),
    ("ical", "ic"),
    ("ful", ""),
    ("ness", ""),
)
_STEP4 = (
    "al",
    "ance",
    "ence",
    "er",
    "ic",
    "able",
    "ible",
    "ant",
    "ement",
    "ment",
    "ent",
    "ion",
    "ou",
    "ism",
    "ate",
    "iti",
    "ous",
    "ive",
    "ize",
)


def _step3(word: str) -> str:
    return _apply_first(word, [(s, r, _positive_measure) for s, r in _STEP3])


def _step4_condition(suffix: str) -> Callable[[str], bool]:
    if suffix == "ion":
        return lambda stem: _measure(stem) > 1 and stem[-1:] in ("s", "t")
    return _measure_above_one


def _step4(word: str) -> str:
    return _apply_first(word, [(s, "", _step4_condition(s)) for s in _STEP4])


def _step5a(word: str) -> str:
    if word.endswith("e"):
        stem = word[:-1]
        measure = _measure(stem)
        if measure > 1 or (measure == 1 and not _ends_cvc(stem)):
            return stem
    return word


def _step5b(word: str) -> str:
    return _apply_first(word, [("ll", "l", lambda _stem: _measure(word[:-1]) > 1)])


@functools.lru_cache(maxsize=1 << 16)
def stem(word: str) -> str:
    """The Porter stem of a word as NLTK's PorterStemmer gives it (lower-cased first; as in
    NLTK, the two-letter rule reads the word as written)."""
    lower = word.lower()
    if lower in _IRREGULAR:
        return _IRREGULAR[lower]
    if len(word) <= 2:
        return lower
    word = lower
    for step in (_step1a, _step1b, _step1c, _step2, _step3, _step4, _step5a, _step5b):
        word = step(word)
    return word
