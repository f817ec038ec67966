"""ImageNet preprocessing, SQuAD features and the accuracy metrics computed from LoadGen's log."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from mlperf_mig.errors import DatasetError
from mlperf_mig.harness import accuracy
from mlperf_mig.workloads.bert import BERT
from mlperf_mig.workloads.bert.squad import (
    SquadSource,
    WordPieceTokenizer,
    basic_tokens,
    f1_score,
    normalize_answer,
)
from mlperf_mig.workloads.resnet50 import RESNET50
from mlperf_mig.workloads.resnet50.imagenet import MEAN_RGB, ImageNetSource, preprocess


def test_preprocess_is_mlperf_layout(tmp_path: Path) -> None:
    """A flat-colour image becomes [3, 224, 224] float32 of colour minus the channel mean."""
    path = tmp_path / "flat.ppm"
    Image.new("RGB", (500, 300), (200, 100, 50)).save(path)
    array = preprocess(path)
    assert array.shape == (3, 224, 224) and array.dtype == np.float32
    expected = np.array([200, 100, 50], dtype=np.float32) - MEAN_RGB
    assert np.allclose(array[:, 100, 100], expected)


def test_preprocess_crops_the_centre(tmp_path: Path) -> None:
    """Resize to 256 on the shorter side, then the centre 224 square: the borders are cut."""
    image = Image.new("RGB", (512, 256), (0, 0, 0))
    image.paste((255, 255, 255), (0, 0, 100, 256))  # a white band on the far left
    path = tmp_path / "band.ppm"
    image.save(path)
    assert np.allclose(preprocess(path)[0], -MEAN_RGB[0])


def test_imagenet_source_reads_val_map(imagenet_dir: Path) -> None:
    """val_map.txt gives names and labels; `sample_count` keeps the first ones."""
    source = ImageNetSource.open(imagenet_dir, benchmark=RESNET50, limit=4)
    assert source.total_count == 4 and source.labels.tolist() == [0, 100, 200, 300]


def test_missing_imagenet_folder_raises(tmp_path: Path) -> None:
    """A folder that does not exist is a dataset error naming it."""
    with pytest.raises(DatasetError, match="does not exist"):
        ImageNetSource.open(tmp_path / "nope", benchmark=RESNET50)


def test_missing_val_map_raises(tmp_path: Path) -> None:
    """A folder without val_map.txt is a dataset error."""
    with pytest.raises(DatasetError, match=r"has no val_map\.txt"):
        ImageNetSource.open(tmp_path, benchmark=RESNET50)


def test_missing_image_raises(imagenet_dir: Path, tmp_path: Path) -> None:
    """A val_map.txt entry whose image is missing is reported before any run."""
    (tmp_path / "val_map.txt").write_text("gone.JPEG 3\n")
    with pytest.raises(DatasetError, match=r"missing, first 'gone\.JPEG'"):
        ImageNetSource.open(tmp_path, benchmark=RESNET50)


def test_basic_tokens_split_punctuation_and_accents() -> None:
    """Uncased basic tokenisation lower-cases, strips accents and splits punctuation."""
    assert basic_tokens("Café, naïve!") == ["cafe", ",", "naive", "!"]


def test_wordpiece_longest_match_first() -> None:
    """WordPiece takes the longest vocabulary prefix, then `##` continuations, else [UNK]."""
    vocab = {t: i for i, t in enumerate(["[UNK]", "jump", "##ed", "##e", "fox"])}
    tokenizer = WordPieceTokenizer(vocab)
    assert tokenizer.tokenize("Jumped fox cat") == ["jump", "##ed", "fox", "[UNK]"]


def test_squad_features_layout(squad_dir: Path) -> None:
    """Each question gives one feature: [CLS] query [SEP] context [SEP], padded to 384."""
    source = SquadSource.open(squad_dir, benchmark=BERT)
    assert source.total_count == 3
    ids = source.arrays["input_ids"][0]
    mask = source.arrays["input_mask"][0]
    segments = source.arrays["segment_ids"][0]
    length = int(mask.sum())
    assert ids[0] == 2 and ids[length - 1] == 3 and not ids[length:].any()
    assert segments[:length].tolist().count(0) == 1 + 6 + 1  # [CLS] where did the fox jump ? [SEP]


def test_squad_without_vocab_raises(squad_dir: Path, tmp_path: Path) -> None:
    """A SQuAD file without a vocab.txt next to it (or given) is a dataset error."""
    lone = tmp_path / "dev-v1.1.json"
    lone.write_text((squad_dir / "dev-v1.1.json").read_text())
    with pytest.raises(DatasetError, match="vocabulary"):
        SquadSource.open(lone, benchmark=BERT)


def test_squad_not_json_raises(tmp_path: Path, squad_dir: Path) -> None:
    """A file that is not SQuAD json is a dataset error."""
    bad = tmp_path / "dev-v1.1.json"
    bad.write_text("{}")
    with pytest.raises(DatasetError, match="not a SQuAD"):
        SquadSource.open(bad, benchmark=BERT, vocab=squad_dir / "vocab.txt")


@pytest.mark.parametrize(
    ("paragraph", "field"),
    [
        ({"context": 5, "qas": [{"id": "q", "question": "a", "answers": []}]}, "'context'"),
        ({"context": "a b", "qas": [{"id": "q", "question": None, "answers": []}]}, "'question'"),
        ({"context": "a b", "qas": "none"}, "string indices"),
    ],
)
def test_squad_wrong_field_types_raise(
    tmp_path: Path, squad_dir: Path, paragraph: dict, field: str
) -> None:
    """A SQuAD json whose fields have the wrong types is a dataset error naming the field."""
    bad = tmp_path / "dev-v1.1.json"
    bad.write_text(json.dumps({"data": [{"paragraphs": [paragraph]}]}))
    with pytest.raises(DatasetError, match=f"is not SQuAD v1.1.*{field}"):
        SquadSource.open(bad, benchmark=BERT, vocab=squad_dir / "vocab.txt")


def test_imagenet_sample_count_beyond_the_folder_is_refused(imagenet_dir: Path) -> None:
    """Asking for more images than val_map.txt lists is an error, not a silent cut to six."""
    assert ImageNetSource.open(imagenet_dir, benchmark=RESNET50, limit=6).total_count == 6
    with pytest.raises(DatasetError, match="sample count 7 is more than the 6 images"):
        ImageNetSource.open(imagenet_dir, benchmark=RESNET50, limit=7)


def test_squad_sample_count_beyond_the_file_is_refused(squad_dir: Path) -> None:
    """Asking for more features than the SQuAD file makes is an error, not a silent cut."""
    available = SquadSource.open(squad_dir, benchmark=BERT).total_count
    assert SquadSource.open(squad_dir, benchmark=BERT, limit=available).total_count == available
    with pytest.raises(
        DatasetError, match=f"sample count {available + 1} is more than the {available} features"
    ):
        SquadSource.open(squad_dir, benchmark=BERT, limit=available + 1)


def test_f1_and_normalisation() -> None:
    """Official SQuAD normalisation drops case, punctuation and articles before comparing."""
    assert normalize_answer("The  Lazy dog!") == "lazy dog"
    assert f1_score("lazy dog in Paris", "the lazy dog") == pytest.approx(2 * 0.5 * 1 / 1.5)


def _write_accuracy_log(folder: Path, payloads: dict[int, bytes]) -> None:
    entries = [
        {"seq_id": i, "qsl_idx": index, "data": data.hex().upper()}
        for i, (index, data) in enumerate(payloads.items())
    ]
    (folder / "mlperf_log_accuracy.json").write_text(json.dumps(entries))


def test_top1_from_accuracy_log(imagenet_dir: Path, tmp_path: Path) -> None:
    """Top-1 compares the int32 payloads with val_map labels; real weights get a verdict."""
    source = ImageNetSource.open(imagenet_dir, benchmark=RESNET50)
    answers = {0: 0, 1: 100, 2: 7, 3: 300}  # three of four right
    _write_accuracy_log(tmp_path, {i: np.int32(c).tobytes() for i, c in answers.items()})
    report = accuracy.score(RESNET50, source, tmp_path, weights_synthetic=False)
    assert report.value == pytest.approx(75.0) and report.sample_count == 4
    assert report.meaningful and report.passed is False


ANSWER_WORDS = ((10, 10), (12, 12), (6, 8))  # Paris / 1990. / the lazy dog


def test_f1_from_accuracy_log(squad_dir: Path, tmp_path: Path) -> None:
    """Logits that point at the answers give F1 and exact match of 100."""
    source = SquadSource.open(squad_dir, benchmark=BERT)
    payloads = {}
    for index, (first, last) in enumerate(ANSWER_WORDS):
        to_word = source.features[index].token_to_word
        start = min(t for t, w in to_word.items() if w == first)
        end = max(t for t, w in to_word.items() if w == last)
        logits = np.zeros((384, 2), dtype=np.float32)
        logits[start, 0] = logits[end, 1] = 10.0
        payloads[index] = logits.tobytes()
    _write_accuracy_log(tmp_path, payloads)
    report = accuracy.score(BERT, source, tmp_path, weights_synthetic=True)
    assert report.value == pytest.approx(100.0)
    assert report.extra["exact_match"] == pytest.approx(100.0)
    assert report.meaningful is False and report.passed is None
    assert "synthetic weights" in report.note
