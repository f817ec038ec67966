"""BERT-Large on SQuAD v1.1: F1 / exact match, one `[384, 2]` float32 logit pair per sample."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import attrs
import numpy as np

from mlperf_mig.workloads.bert.interface import INPUTS, OUTPUTS, SEQ_LEN
from mlperf_mig.workloads.workload import (
    ONE_ANSWER,
    CheckerModel,
    ReferenceScript,
    ResponseFormat,
    Score,
    Workload,
)

if TYPE_CHECKING:
    import onnx

    from mlperf_mig.workloads.bert.squad import SquadSource
    from mlperf_mig.workloads.samples import SampleSource

# The known_answer backend's logits carry a sample's code (see `known_outputs`).
LOGIT_STEPS = 1 << 16
MAX_SPAN_EXTRA = 4  # the end is 0-3 tokens after the start


@attrs.frozen(kw_only=True)
class Bert(Workload):
    """BERT question answering: the graph, SQuAD and F1 scoring."""

    def build_graph(
        self,
        *,
        variant: str,
        precision: str,
        seed: int,
        act_amax: Mapping[str, float] | None = None,
    ) -> tuple[onnx.ModelProto, list[str]]:
        from mlperf_mig.workloads.bert.graph import build_bert

        return build_bert(variant=variant, precision=precision, seed=seed, act_amax=act_amax)

    def calibration_feeds(self, batch: int, seed: int) -> dict[str, np.ndarray]:
        """Token ids of the vocabulary, masks padded as real features are to 384."""
        from mlperf_mig.workloads.bert.graph import VOCAB_SIZE

        rng = np.random.default_rng(seed)
        seq = self.inputs[0].shape[1]
        assert seq is not None  # the interface fixes the sequence axis
        positions = np.arange(seq)[None, :]
        lengths = rng.integers(seq // 2, seq + 1, (batch, 1))
        ids, mask, segments = (t.name for t in self.inputs)
        return {
            ids: rng.integers(0, VOCAB_SIZE, (batch, seq), dtype=np.int64),
            mask: (positions < lengths).astype(np.int64),
            segments: (positions >= seq // 4).astype(np.int64).repeat(batch, 0),
        }

    def fill_synthetic(
        self,
        *,
        seed: int,
        total_count: int,
        indices: Sequence[int],
        out: Mapping[str, np.ndarray],
        scratch: dict[str, Any],
    ) -> None:
        """`[CLS] query [SEP] context [SEP]` of random token ids, of random lengths."""
        for row, index in enumerate(indices):
            _fill_question(np.random.default_rng((seed, int(index))), row, out)

    def check_dataset(self, dataset: str, vocab: str | None) -> None:
        """The SQuAD json and the vocabulary are read as UTF-8 and the json parsed; questions
        are tokenised later."""
        from mlperf_mig.workloads.bert.squad import check_files

        check_files(dataset, vocab)

    def open_dataset(self, dataset: str, *, vocab: str | None, limit: int | None) -> SampleSource:
        from mlperf_mig.workloads.bert.squad import SquadSource

        return SquadSource.open(dataset, benchmark=self, vocab=vocab, limit=limit)

    def write_payload(self, outputs: Mapping[str, np.ndarray], payload: np.ndarray) -> None:
        """float32 `[384, 2]`: start and end logits interleaved."""
        start, end = (outputs[name] for name in self.output_names())
        payload[: len(start), :, 0] = start
        payload[: len(end), :, 1] = end

    def score(self, source: SampleSource, answers: Mapping[int, bytes]) -> Score:
        """F1 (and exact match) as accuracy-squad.py computes it, over all the questions."""
        logits = {
            index: np.frombuffer(data, dtype=np.float32).reshape(SEQ_LEN, 2)
            for index, data in answers.items()
        }
        # Scored answers come from the source open_dataset() made: a SquadSource.
        squad = cast("SquadSource", source)
        features = squad.features
        f1, em, questions = squad.score(logits)
        logged = len({features[index].example_index for index in logits})
        extra = {
            "exact_match": em,
            "features": float(len(logits)),
            "questions_logged": float(logged),
        }
        return Score(value=f1, count=questions, extra=extra)

    def accuracy_figures(
        self, value: float, count: int, extra: Mapping[str, float]
    ) -> dict[str, float]:
        """exact_match and f1 (%)."""
        return {"exact_match": extra["exact_match"], "f1": value}

    def accuracy_line(self, figures: Mapping[str, float]) -> str:
        """accuracy-squad.py's '{"exact_match": .., "f1": ..}'."""
        return json.dumps(
            {"exact_match": float(figures["exact_match"]), "f1": float(figures["f1"])}
        )

    def known_outputs(
        self, samples: Sequence[Mapping[str, np.ndarray]], codes: Sequence[int]
    ) -> dict[str, np.ndarray]:
        """A span inside the sample's own context (the tokens of segment 1 before the last
        [SEP]): start = context[code mod n], end = start + (code >> 16) mod 4, clipped to the
        context. All start logits are 0 except the start's, 1 + (code mod 2**16) / 2**16, and
        all end logits 0 except the end's, 1 + (code >> 16) / 2**16: exact in float32, so the
        payload carries the whole code."""
        start_name, end_name = self.output_names()
        start_logits = np.zeros((len(codes), SEQ_LEN), dtype=np.float32)
        end_logits = np.zeros((len(codes), SEQ_LEN), dtype=np.float32)
        for row, (sample, code) in enumerate(zip(samples, codes)):
            start, end = _known_span(sample, code)
            start_logits[row, start], end_logits[row, end] = _known_logits(code)
        return {start_name: start_logits, end_name: end_logits}

    def known_payload(self, sample: Mapping[str, np.ndarray]) -> bytes:
        code = self.sample_code(sample)
        start, end = _known_span(sample, code)
        start_value, end_value = _known_logits(code)
        pair = np.zeros((SEQ_LEN, 2), dtype=np.float32)
        pair[start, 0] = start_value
        pair[end, 1] = end_value
        return pair.tobytes()


def _fill_question(rng: np.random.Generator, row: int, out: Mapping[str, np.ndarray]) -> None:
    length = int(rng.integers(SEQ_LEN // 4, SEQ_LEN + 1))
    query = int(rng.integers(8, 64))
    ids = np.zeros(SEQ_LEN, dtype=np.int64)
    ids[:length] = rng.integers(1000, 30000, size=length)
    ids[0], ids[query], ids[length - 1] = 101, 102, 102  # [CLS] query [SEP] context [SEP]
    mask = np.zeros(SEQ_LEN, dtype=np.int64)
    mask[:length] = 1
    segments = np.zeros(SEQ_LEN, dtype=np.int64)
    segments[query + 1 : length] = 1
    out["input_ids"][row] = ids
    out["input_mask"][row] = mask
    out["segment_ids"][row] = segments


def _known_span(sample: Mapping[str, np.ndarray], code: int) -> tuple[int, int]:
    """(start, end) token positions inside the sample's context; (0, 0) without a context."""
    context = np.flatnonzero((sample["segment_ids"] == 1) & (sample["input_mask"] == 1))[:-1]
    if not len(context):
        return 0, 0
    first = int(code % len(context))
    last = min(first + (code >> 16) % MAX_SPAN_EXTRA, len(context) - 1)
    return int(context[first]), int(context[last])


def _known_logits(code: int) -> tuple[float, float]:
    """The start and end logit values that carry the code (exact in float32)."""
    return 1.0 + (code % LOGIT_STEPS) / LOGIT_STEPS, 1.0 + (code >> 16) / LOGIT_STEPS


BERT = Bert(
    name="bert",
    listing_order=20,
    aliases=("bert-99", "bert-99.9"),
    conf_model_name="bert",
    submission_names=("bert-99", "bert-99.9"),
    inputs=INPUTS,
    outputs=OUTPUTS,
    performance_sample_count=10833,
    server_latency_bound_ms=130.0,
    offline_min_samples=10833,
    accuracy_metric="f1",
    accuracy_target=0.99 * 90.874,
    required_audits=("TEST01",),  # TEST04 exempts inputs of variable cost
    official_weights="model.onnx (BERT-Large SQuAD v1.1)",
    checker_models=tuple(
        CheckerModel(
            name=name,
            folders=(name,),
            performance_sample_count=10833,
            offline_min_samples=10833,
            min_query_count=(("SingleStream", 1024), ("Offline", 1)),
            server_latency_bound_ns=None,
            required_scenarios=(
                ("edge", ("SingleStream", "Offline")),
                ("datacenter,edge", ("SingleStream", "Offline")),
            ),
            accuracy_target=90.874 * level,
            accuracy_pattern=(
                r"^{[\"\']exact_match[\"\']\:\s*[\d\.]+,\s*[\"\']f1[\"\']\:\s*([\d\.]+)}"
            ),
            accuracy_delta_percent=delta,
        )
        for name, level, delta in (("bert-99", 0.99, 1.0), ("bert-99.9", 0.999, 0.1))
    ),
    reference_script=ReferenceScript(
        how=(
            "language/bert/accuracy-squad.py computes it: the best span (n-best 20, at most 30 "
            "tokens, float64 scores) of each question's windows, its WordPiece text aligned back "
            "onto the original characters, F1 and exact match averaged over all the dataset's "
            "questions (a question without a logged window counts 0)"
        ),
        command=(
            "python3 language/bert/accuracy-squad.py --vocab_file vocab.txt --val_data "
            "dev-v1.1.json --log_file mlperf_log_accuracy.json"
        ),
        why=(
            "our log holds float32 [384, 2] start/end logits, the script's defaults: no "
            "--output_dtype or --output_transposed"
        ),
    ),
    response=ResponseFormat(kind=ONE_ANSWER, shape=(SEQ_LEN, 2), dtype="float32"),
    int8_on_cpu=True,
)
