"""CNN/DailyMail for llama3.1-8b: the prompt template, synthetic samples, a user's cnn_eval.json."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from mlperf_mig.errors import DatasetError
from mlperf_mig.workloads.llama3_1_8b.cnn_dailymail import (
    DATACENTER_SAMPLE_COUNT,
    EDGE_SAMPLE_COUNT,
    PROMPT_TEMPLATE,
    format_prompt,
    read_cnn_eval,
    synthetic_cnn_dailymail,
)
from mlperf_mig.workloads.llama3_1_8b.tokenizer import TextTokenizer, builtin_tokenizer


@pytest.fixture(name="tokenizer")
def fixture_tokenizer() -> TextTokenizer:
    return builtin_tokenizer()


def _record(**fields: Any) -> dict[str, Any]:
    return {"input": "The council met.", "tok_input": [0, 5, 9], "output": "It met.", **fields}


def _write(path: Path, document: Any) -> Path:
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def _refusal(path: Path, *, vocab_size: int = 1024, **kwargs: Any) -> str:
    with pytest.raises(DatasetError) as caught:
        read_cnn_eval(path, vocab_size=vocab_size, **kwargs)
    message = str(caught.value)
    assert "\n" not in message and str(path) in message
    return message


def test_prompt_template_is_the_references() -> None:
    """The template is MLCommons' download_cnndm.py instruction, character for character."""
    assert PROMPT_TEMPLATE == (
        "Summarize the following news article in 128 tokens. Please output the summary only, "
        "without any other text.\n\nArticle:\n{input}\n\nSummary:"
    )
    assert format_prompt("A {b} c.").endswith("Article:\nA {b} c.\n\nSummary:")


def test_official_sample_counts() -> None:
    """13,368 articles for the datacenter benchmark, 5,000 for the edge one."""
    assert (DATACENTER_SAMPLE_COUNT, EDGE_SAMPLE_COUNT) == (13_368, 5_000)


def test_synthetic_samples_are_deterministic(tokenizer: TextTokenizer) -> None:
    """Sample i depends only on (seed, i): a longer set starts with the shorter one."""
    short = synthetic_cnn_dailymail(3)
    long = synthetic_cnn_dailymail(5, tokenizer=tokenizer)
    assert long.inputs[:3] == short.inputs and long.outputs[:3] == short.outputs
    assert [t.tolist() for t in long.tok_inputs[:3]] == [t.tolist() for t in short.tok_inputs]
    assert synthetic_cnn_dailymail(3, tokenizer=tokenizer, seed=1).inputs != short.inputs


def test_synthetic_prompts_use_the_template_and_fit(tokenizer: TextTokenizer) -> None:
    """Each prompt is the template around its article, tokenized, and at most max_prompt_tokens."""
    samples = synthetic_cnn_dailymail(20, tokenizer=tokenizer, max_prompt_tokens=128)
    assert samples.synthetic and len(samples) == 20
    assert int(samples.prompt_lengths.max()) <= 128
    assert int(samples.prompt_lengths.min()) >= 128 // 4 - 8
    for article, ids, summary in zip(samples.inputs, samples.tok_inputs, samples.outputs):
        assert tokenizer.decode(ids) == format_prompt(article)
        assert summary.endswith(".") and len(summary.split()) >= 4


def test_synthetic_prompt_limit_too_small_is_refused(tokenizer: TextTokenizer) -> None:
    """A limit that cannot hold the template and one sentence says the least that can."""
    with pytest.raises(ValueError, match="pass at least"):
        synthetic_cnn_dailymail(1, tokenizer=tokenizer, max_prompt_tokens=20)


def test_reads_a_cnn_eval_json(tmp_path: Path) -> None:
    """The fields of each record are read in order; extra fields (instruction) are ignored."""
    path = _write(tmp_path / "cnn_eval.json", [_record(instruction={"llama": "x"}), _record()])
    samples = read_cnn_eval(tmp_path, vocab_size=16)
    assert len(samples) == 2 and not samples.synthetic and samples.source == str(path)
    assert samples.tok_inputs[0].dtype.name == "int32" and samples.tok_inputs[0].tolist() == [
        0,
        5,
        9,
    ]


@pytest.mark.parametrize(
    ("record", "match"),
    [
        ({"input": "a", "tok_input": [1]}, "record 1, field 'output': missing"),
        (_record(input=7), "record 1, field 'input': expected a string, got int"),
        (_record(output="  "), "record 1, field 'output': is empty"),
        (_record(tok_input="0 5 9"), "record 1, field 'tok_input': expected a list"),
        (_record(tok_input=[]), "record 1, field 'tok_input': is empty"),
        (_record(tok_input=[1, 2.5]), "record 1, field 'tok_input': item 1 is float"),
        (_record(tok_input=[1, True]), "record 1, field 'tok_input': item 1 is bool"),
        (_record(tok_input=[1, 16]), "token id 16 .item 1. is outside the model's vocabulary 0-15"),
        (_record(tok_input=[-1]), "token id -1 .item 0. is outside"),
        (_record(tok_input=[2**70]), "is outside the model's vocabulary"),
        ([1, 2], "record 1: a JSON list, expected an object"),
    ],
)
def test_bad_record_is_named_in_one_line(tmp_path: Path, record: Any, match: str) -> None:
    """A missing field, a wrong type, empty text or an id outside the vocabulary names the
    file, the record and the field."""
    path = _write(tmp_path / "cnn_eval.json", [_record(), record])
    assert re.search(match, _refusal(path, vocab_size=16))


def test_not_a_list_is_refused(tmp_path: Path) -> None:
    """A JSON object at the top is not a cnn_eval.json."""
    path = _write(tmp_path / "cnn_eval.json", {"data": [_record()]})
    assert "holds a JSON dict, expected a list" in _refusal(path)


def test_empty_list_is_refused(tmp_path: Path) -> None:
    """A file with no records is refused."""
    assert "holds no records" in _refusal(_write(tmp_path / "cnn_eval.json", []))


def test_too_large_a_file_is_refused(tmp_path: Path) -> None:
    """A file past max_bytes is refused before it is parsed."""
    path = _write(tmp_path / "cnn_eval.json", [_record()] * 10)
    assert "more than the 100" in _refusal(path, max_bytes=100)


def test_fifo_is_refused(tmp_path: Path) -> None:
    """A FIFO is refused without blocking on it."""
    path = tmp_path / "cnn_eval.json"
    os.mkfifo(path)
    assert "is not a regular file" in _refusal(path)


def test_not_json_is_refused(tmp_path: Path) -> None:
    """Text that does not parse is refused with the parser's position."""
    path = tmp_path / "cnn_eval.json"
    path.write_text("[{", encoding="utf-8")
    assert "is not JSON" in _refusal(path)


def test_missing_file_is_refused(tmp_path: Path) -> None:
    """A path that does not exist says which file was expected."""
    assert "does not exist" in _refusal(tmp_path / "cnn_eval.json")


def test_prompt_longer_than_the_model_takes_is_refused(tmp_path: Path) -> None:
    """With max_prompt_tokens, a longer tok_input is refused."""
    path = _write(tmp_path / "cnn_eval.json", [_record(tok_input=[1] * 9)])
    assert "9 tokens, more than the 8" in _refusal(path, max_prompt_tokens=8)


def test_synthetic_set_round_trips_through_the_reader(
    tokenizer: TextTokenizer, tmp_path: Path
) -> None:
    """A synthetic set written as cnn_eval.json reads back the same."""
    samples = synthetic_cnn_dailymail(4, tokenizer=tokenizer)
    records = [
        {"input": i, "tok_input": t.tolist(), "output": o}
        for i, t, o in zip(samples.inputs, samples.tok_inputs, samples.outputs)
    ]
    read = read_cnn_eval(
        _write(tmp_path / "cnn_eval.json", records), vocab_size=tokenizer.vocab_size
    )
    assert read.inputs == samples.inputs and read.outputs == samples.outputs
    assert [t.tolist() for t in read.tok_inputs] == [t.tolist() for t in samples.tok_inputs]
