"""The llama3.1-8b tokenizers: the in-process byte-level BPE and a user's tokenizer.json."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mlperf_mig.errors import ModelFileError
from mlperf_mig.workloads.llama3_1_8b.tokenizer import (
    BOS_TOKEN,
    EOS_TOKEN,
    TextTokenizer,
    builtin_tokenizer,
    check_vocabulary,
    load_tokenizer,
)

_DIGEST = (
    "import hashlib\n"
    "from mlperf_mig.workloads.llama3_1_8b.tokenizer import builtin_tokenizer\n"
    "print(hashlib.sha256(builtin_tokenizer().to_json().encode()).hexdigest())\n"
)


@pytest.fixture(name="tokenizer")
def fixture_tokenizer() -> TextTokenizer:
    return builtin_tokenizer()


def _digest_in_child(hash_seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    done = subprocess.run(
        [sys.executable, "-c", _DIGEST],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    return done.stdout.strip()


def test_builtin_tokenizer_is_identical_across_processes(tokenizer: TextTokenizer) -> None:
    """Two fresh processes with different hash seeds train byte-for-byte the same tokenizer.json."""
    here = hashlib.sha256(tokenizer.to_json().encode()).hexdigest()
    assert _digest_in_child("1") == _digest_in_child("2") == here


def test_builtin_vocabulary_is_exactly_1024(tokenizer: TextTokenizer) -> None:
    """The default vocabulary is the tiny model's 1024 ids, begin and end tokens included."""
    assert tokenizer.vocab_size == 1024
    assert tokenizer.eos_id == tokenizer.backend.token_to_id(EOS_TOKEN)
    assert tokenizer.backend.token_to_id(BOS_TOKEN) is not None


def test_builtin_tokenizer_is_cached(tokenizer: TextTokenizer) -> None:
    """The tokenizer is trained once per process and vocabulary size."""
    assert builtin_tokenizer() is tokenizer and builtin_tokenizer(512).vocab_size == 512


def test_round_trip(tokenizer: TextTokenizer) -> None:
    """Any text, punctuation, digits and non-Latin scripts included, decodes back to itself."""
    text = 'Prices rose 3.5% in Zürich on Monday, "naïve" analysts said — 東京 too! 🙂\n\nEnd.'
    ids = tokenizer.encode(text)
    assert ids.dtype == np.int32 and int(ids.max()) < 1024
    assert tokenizer.decode(ids) == text


def test_encode_starts_with_begin_of_text(tokenizer: TextTokenizer) -> None:
    """Like Llama 3.1's tokenizer, an encoded prompt starts with the begin-of-text id."""
    assert int(tokenizer.encode("Article:")[0]) == tokenizer.backend.token_to_id(BOS_TOKEN)


def test_decode_drops_special_tokens(tokenizer: TextTokenizer) -> None:
    """Decoding leaves the end-of-text token out, as the reference's batch_decode does."""
    ids = [*tokenizer.encode("The council voted."), tokenizer.eos_id]
    assert tokenizer.decode(ids) == "The council voted."


def test_too_large_a_vocabulary_is_refused() -> None:
    """A size the built-in corpus cannot reach is refused with the largest it can."""
    with pytest.raises(ValueError, match="pass vocab_size at most"):
        builtin_tokenizer(100_000)


def test_vocabulary_mismatch_is_refused_in_one_line(tokenizer: TextTokenizer) -> None:
    """A tokenizer of 1024 ids for a model of 128,256 is refused: what, expected, fix."""
    with pytest.raises(ModelFileError) as caught:
        check_vocabulary(tokenizer, 128_256)
    message = str(caught.value)
    assert "has 1024 tokens" in message and "128256" in message and "\n" not in message


def test_matching_vocabulary_passes(tokenizer: TextTokenizer) -> None:
    """The built-in tokenizer matches the tiny model's vocabulary."""
    check_vocabulary(tokenizer, 1024)


def test_load_tokenizer_reads_a_file_or_its_folder(
    tokenizer: TextTokenizer, tmp_path: Path
) -> None:
    """A tokenizer.json, or the model folder holding it, loads with the same ids."""
    (tmp_path / "tokenizer.json").write_text(tokenizer.to_json(), encoding="utf-8")
    for path in (tmp_path, tmp_path / "tokenizer.json"):
        loaded = load_tokenizer(path)
        assert loaded.vocab_size == 1024 and loaded.eos_ids == (tokenizer.eos_id,)
        assert (
            loaded.encode("The mayor said.").tolist()
            == tokenizer.encode("The mayor said.").tolist()
        )


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (None, "does not exist"),
        (b"{not json", "is not a Hugging Face tokenizer.json"),
        (b"\xff\xfe", "is not UTF-8"),
    ],
)
def test_bad_tokenizer_file_is_one_line(tmp_path: Path, content: bytes | None, match: str) -> None:
    """A missing, malformed or non-UTF-8 tokenizer.json is a ModelFileError in one line."""
    path = tmp_path / "tokenizer.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ModelFileError, match=match) as caught:
        load_tokenizer(path)
    assert "\n" not in str(caught.value)


def test_tokenizer_fifo_is_refused(tmp_path: Path) -> None:
    """A FIFO named tokenizer.json is refused without blocking on it."""
    path = tmp_path / "tokenizer.json"
    os.mkfifo(path)
    with pytest.raises(ModelFileError, match="not a regular file"):
        load_tokenizer(path)


def test_tokenizer_without_end_token_is_refused(tmp_path: Path) -> None:
    """A tokenizer with none of the known end-of-sequence tokens cannot stop a generation."""
    from tokenizers import Tokenizer, models

    path = tmp_path / "tokenizer.json"
    path.write_text(Tokenizer(models.BPE()).to_str(), encoding="utf-8")
    with pytest.raises(ModelFileError, match="no end-of-sequence token"):
        load_tokenizer(path)


def test_llama_end_tokens_come_eot_first(tmp_path: Path) -> None:
    """A Llama 3.1-style tokenizer stops at <|eot_id|> first, then <|end_of_text|>."""
    from tokenizers import Tokenizer, models

    backend = Tokenizer(models.BPE())
    backend.add_special_tokens(["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"])
    path = tmp_path / "tokenizer.json"
    path.write_text(backend.to_str(), encoding="utf-8")
    assert load_tokenizer(path).eos_ids == (2, 1)
