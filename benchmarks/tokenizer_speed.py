"""SQuAD tokenisation speed: the `tokenizers` library against the hand-written tokenizer it replaced.

    python benchmarks/tokenizer_speed.py [--paragraphs 2000] [--repeats 3]

Tokenises a synthetic SQuAD-like corpus (paragraphs of 120 words and a question each, drawn with
a fixed seed, Zipf-distributed, from 20,000 made-up words with accents, some with punctuation)
the way `build_features` does: the
context's whitespace-split words with the word each piece comes from, and the question. The
baseline is the pure-Python tokenizer the harness had until commit 7415c11, kept here only as the
yardstick (a copy: the library no longer has it). Both must give the same pieces; the script
checks that, then prints the best time of --repeats runs of each and the speedup.
"""

from __future__ import annotations

import argparse
import random
import time
import unicodedata
from collections.abc import Mapping, Sequence

from mlperf_mig.workloads.bert.squad import WordPieceTokenizer

_SYLLABLES = (
    "no",
    "man",
    "der",
    "fé",
    "ïve",
    "zü",
    "rich",
    "são",
    "kra",
    "ków",
    "crè",
    "me",
    "brû",
    "lée",
    "tes",
    "la",
    "pat",
    "ent",
    "west",
    "ing",
    "house",
    "roy",
    "al",
    "ty",
    "tel",
    "phone",
    "ex",
    "change",
    "buda",
    "pest",
    "geo",
    "graph",
    "ic",
    "de",
    "scend",
)
_PUNCT = (",", ".", ";", ":", "(", ")", "'s", "—", "$", "%", "?", "!", "-")


# --- the hand-written tokenizer of commit 7415c11 (the baseline) ---------------------------------
def _is_punctuation(char: str) -> bool:
    code = ord(char)
    if 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def _old_basic_tokens(text: str) -> list[str]:
    cleaned = []
    for char in text:
        if ord(char) in (0, 0xFFFD) or (
            unicodedata.category(char).startswith("C") and char not in "\t\n\r"
        ):
            continue
        cleaned.append(" " if char.isspace() else char)
    tokens: list[str] = []
    for word in "".join(cleaned).lower().split():
        word = "".join(
            c for c in unicodedata.normalize("NFD", word) if unicodedata.category(c) != "Mn"
        )
        current = ""
        for char in word:
            if _is_punctuation(char):
                if current:
                    tokens.append(current)
                tokens.append(char)
                current = ""
            else:
                current += char
        if current:
            tokens.append(current)
    return tokens


class OldWordPiece:
    """Greedy longest-match-first WordPiece in pure Python, with a per-word cache."""

    def __init__(self, vocab: Mapping[str, int]) -> None:
        self.vocab = vocab
        self._cache: dict[str, list[str]] = {}

    def tokenize(self, text: str) -> list[str]:
        pieces: list[str] = []
        for token in _old_basic_tokens(text):
            cached = self._cache.get(token)
            if cached is None:
                cached = self._cache[token] = self._split(token)
            pieces.extend(cached)
        return pieces

    def tokenize_words(self, words: Sequence[str]) -> tuple[list[str], list[int]]:
        tokens: list[str] = []
        token_word: list[int] = []
        for index, word in enumerate(words):
            for piece in self.tokenize(word):
                tokens.append(piece)
                token_word.append(index)
        return tokens, token_word

    def _split(self, word: str) -> list[str]:
        if len(word) > 100:
            return ["[UNK]"]
        pieces, start = [], 0
        while start < len(word):
            end = len(word)
            while start < end:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.vocab:
                    break
                end -= 1
            else:
                return ["[UNK]"]
            pieces.append(piece)
            start = end
        return pieces


# --- the measurement ---------------------------------------------------------------------------
def words(count: int = 20000, seed: int = 0) -> list[str]:
    """`count` distinct made-up words of two to four syllables, some with accents."""
    rng = random.Random(seed)
    found: dict[str, None] = {}
    while len(found) < count:
        found["".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4)))] = None
    return list(found)


def corpus(paragraphs: int, seed: int = 0) -> list[tuple[list[str], str]]:
    """(context words, question) pairs; word frequencies follow Zipf's law, as in prose, and
    some words carry punctuation, as SQuAD's do."""
    rng = random.Random(seed)
    lexicon = words()
    weights = [1 / rank for rank in range(1, len(lexicon) + 1)]

    def draw(n: int) -> list[str]:
        return [
            word + (rng.choice(_PUNCT) if rng.random() < 0.15 else "")
            for word in rng.choices(lexicon, weights, k=n)
        ]

    return [(draw(120), " ".join(draw(10)) + "?") for _ in range(paragraphs)]


def vocab() -> dict[str, int]:
    """Whole words for half the lexicon, prefix + ## pieces for the rest, and punctuation."""
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", *"',.;:()$%?!-"]
    for index, word in enumerate(sorted(set(_old_basic_tokens(" ".join(words()))))):
        tokens += [word] if index % 2 else [word[:3], "##" + word[3:5], "##" + word[5:]]
    return {token: i for i, token in enumerate(dict.fromkeys(tokens))}


def run(tokenizer: object, items: list[tuple[list[str], str]]) -> list[object]:
    return [(tokenizer.tokenize_words(words), tokenizer.tokenize(q)) for words, q in items]


def best_seconds(make: object, items: list[tuple[list[str], str]], repeats: int) -> float:
    """The best of `repeats` runs, each with a fresh tokenizer (so no run starts with a cache)."""
    times = []
    for _ in range(repeats):
        tokenizer = make()
        start = time.perf_counter()
        run(tokenizer, items)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--paragraphs", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    items, table = corpus(args.paragraphs), vocab()
    if run(OldWordPiece(table), items) != run(WordPieceTokenizer(table), items):
        raise SystemExit("the two tokenizers disagree on the corpus; no speed to compare")
    old = best_seconds(lambda: OldWordPiece(table), items, args.repeats)
    new = best_seconds(lambda: WordPieceTokenizer(table), items, args.repeats)
    words = args.paragraphs * 130
    print(f"corpus: {args.paragraphs} paragraphs + questions, {words} words; same pieces: yes")
    print(f"hand-written (pure Python): {old:.3f} s ({words / old:,.0f} words/s)")
    print(f"tokenizers library:         {new:.3f} s ({words / new:,.0f} words/s)")
    print(f"speedup: {old / new:.1f}x")


if __name__ == "__main__":
    main()
