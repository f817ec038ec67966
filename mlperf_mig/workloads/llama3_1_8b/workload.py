"""llama3.1-8b and llama3.1-8b-edge: summarize CNN/DailyMail articles, token streams out.

Facts from mlcommons/inference at the v6.1 seeds (reference/llm.md): conf model names with an
underscore (LoadGen's mlperf.conf turns token latencies on under them), 13,368 samples
(datacenter) or 5,000 (edge), greedy decoding to at most 128 new tokens, ROUGE-1/2/L/Lsum each
at least 99% of its target and gen_len within 90-110% of its target.

The graph is a generated Llama-architecture decoder (decoder.py: `tiny` runs in seconds on a CPU;
the full 8B shape is for GPU backends and sizing, never generated on a CPU); prompts are
synthetic CNN/DailyMail-shaped articles in the reference's template (cnn_dailymail.py) tokenized
by a byte-level BPE made in-process (tokenizer.py), or a user's cnn_eval.json; accuracy is ROUGE
computed in the project (rouge.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import attrs
import numpy as np

from mlperf_mig.errors import WorkloadError
from mlperf_mig.workloads.llama3_1_8b.interface import (
    INPUTS,
    MAX_NEW_TOKENS,
    OUTPUTS,
    PROMPT_TOKENS,
    RESPONSE,
    SYNTHETIC_PROMPT_TOKENS,
)
from mlperf_mig.workloads.llama3_1_8b.rouge import (
    EDGE_TARGETS,
    ROUGE_SHARE,
    TARGETS,
    AccuracyTargets,
)
from mlperf_mig.workloads.workload import (
    INTERACTIVE,
    SERVER,
    CheckerModel,
    MemoryFit,
    ReferenceScript,
    Score,
    Workload,
)

if TYPE_CHECKING:
    import onnx

    from mlperf_mig.workloads.generation import TokenGenerator
    from mlperf_mig.workloads.samples import SampleSource

ROUGE_KEYS = ("rouge1", "rouge2", "rougeL", "rougeLsum")
RUNTIME_OVERHEAD_GIB = 1.5  # inferred: CUDA context, activations, allocator slack


@attrs.frozen(kw_only=True)
class Llama31(Workload):
    """llama3.1-8b (or its edge variant): a decoder generating summaries token by token."""

    # the reference's figures on the whole dataset (BF16): each ROUGE (x100) and gen_len
    targets: AccuracyTargets  # the reference's ROUGE, gen_len and gen_num (rouge.py)
    # p99 limits of the Server scenario (ms), None: the workload has no Server run
    ttft_limit_ms: float | None = None
    tpot_limit_ms: float | None = None
    # the Interactive scenario's conf model name and p99 limits (ms; LoadGen's mlperf.conf sets
    # the same under that name); None: the workload has no Interactive run
    interactive_conf_model_name: str | None = None
    interactive_ttft_limit_ms: float | None = None
    interactive_tpot_limit_ms: float | None = None

    def token_limits_ms(self) -> tuple[float, float] | None:
        if self.ttft_limit_ms is None or self.tpot_limit_ms is None:
            return None
        return self.ttft_limit_ms, self.tpot_limit_ms

    def interactive_variant(self) -> Workload:
        """The Interactive run: LoadGen's Server under the interactive conf model name, held
        to the Interactive limits, reported and filed as Interactive."""
        if self.interactive_conf_model_name is None:
            return super().interactive_variant()
        return attrs.evolve(
            self,
            conf_model_name=self.interactive_conf_model_name,
            loadgen_scenarios=(SERVER,),
            server_scenario=INTERACTIVE,
            ttft_limit_ms=self.interactive_ttft_limit_ms,
            tpot_limit_ms=self.interactive_tpot_limit_ms,
        )

    def settings_path(self) -> Path:
        """Its LoadGen presets and targets ship in the workload folder."""
        return Path(__file__).with_name("settings.toml")

    def recipe_path(self, folder: Path | None = None) -> Path:
        """Its engine recipe ships in the workload folder (or `folder`'s <name>.toml)."""
        if folder is not None:
            return super().recipe_path(folder)
        return Path(__file__).with_name("recipe.toml")

    # -- models ------------------------------------------------------------------------------

    def build_graph(
        self,
        *,
        variant: str,
        precision: str,
        seed: int,
        act_amax: Mapping[str, float] | None = None,
    ) -> tuple[onnx.ModelProto, list[str]]:
        """The generated decoder (`tiny` only: the 8B shape is never generated on a CPU)."""
        from mlperf_mig.workloads.llama3_1_8b.decoder import build_decoder
        from mlperf_mig.workloads.llama3_1_8b.shape import TINY

        if variant != "tiny":
            raise WorkloadError(
                f"{self.name}: the full 8B decoder is not generated here (a 16 GB file); pass "
                "--variant tiny for the generated model, or --model with real weights"
            )
        if precision != "fp32":
            raise WorkloadError(
                f"{self.name}: the generated tiny decoder is fp32 only; got --precision {precision}"
            )
        return build_decoder(TINY, seed=seed), []

    def calibration_feeds(self, batch: int, seed: int) -> dict[str, np.ndarray]:
        raise WorkloadError(
            f"{self.name}: int8 calibration is not offered for the generated decoder; use fp32"
        )

    def token_generator(
        self,
        run: Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]],
        *,
        variant: str,
        max_new_tokens: int,
        max_batch: int,
    ) -> TokenGenerator:
        """Greedy generation with a KV cache over the decoder graph (generate.py)."""
        from mlperf_mig.workloads.llama3_1_8b.generate import KvCacheGenerator
        from mlperf_mig.workloads.llama3_1_8b.shape import FULL, TINY

        shape = TINY if variant == "tiny" else FULL
        return KvCacheGenerator(run, shape, max_new_tokens=max_new_tokens, max_batch=max_batch)

    def check_tokenizer(self, path: str, *, variant: str, vocab_size: int | None) -> None:
        """The tokenizer loads (tokenizer.py) and has the model's vocabulary."""
        from mlperf_mig.workloads.llama3_1_8b.shape import FULL, TINY
        from mlperf_mig.workloads.llama3_1_8b.tokenizer import check_vocabulary, load_tokenizer

        if vocab_size is None:
            vocab_size = (TINY if variant == "tiny" else FULL).vocab_size
        check_vocabulary(load_tokenizer(path), vocab_size)

    def end_token_ids(self, variant: str) -> tuple[int, ...]:
        """The end ids of the decoder `variant` (tiny's or Llama 3.1's)."""
        from mlperf_mig.workloads.llama3_1_8b.shape import FULL, TINY

        return (TINY if variant == "tiny" else FULL).end_ids

    def memory_fit(
        self, *, variant: str, precision: str | None, batch: int, memory_gib: float
    ) -> MemoryFit:
        """Weights at `precision` (default bf16 for the 8B shape, fp32 for tiny), a KV cache of
        2 bytes a value for `batch` requests of the longest prompt plus the new tokens, and
        RUNTIME_OVERHEAD_GIB (inferred: CUDA context and activations)."""
        from mlperf_mig.workloads.llama3_1_8b.shape import (
            FULL,
            TINY,
            WEIGHT_BYTES,
            kv_cache_bytes,
            weight_bytes,
        )

        shape = TINY if variant == "tiny" else FULL
        chosen = precision or ("fp32" if variant == "tiny" else "bf16")
        if chosen not in WEIGHT_BYTES:
            raise WorkloadError(
                f"{self.name}: precision {chosen!r} is not one the plan can size; expected one "
                f"of {', '.join(WEIGHT_BYTES)}"
            )
        tokens = PROMPT_TOKENS + MAX_NEW_TOKENS
        return MemoryFit(
            weights_bytes=weight_bytes(shape, chosen),
            kv_cache_bytes=kv_cache_bytes(shape, batch * tokens),
            overhead_bytes=int(RUNTIME_OVERHEAD_GIB * 2**30) if variant != "tiny" else 0,
            batch=batch,
            tokens=tokens,
            memory_gib=memory_gib,
        )

    # -- samples -----------------------------------------------------------------------------

    def fill_synthetic(
        self,
        *,
        seed: int,
        total_count: int,
        indices: Sequence[int],
        out: Mapping[str, np.ndarray],
        scratch: dict[str, Any],
    ) -> None:
        """Synthetic CNN/DailyMail-shaped articles in the reference's prompt template,
        tokenized by the in-process tokenizer; each depends only on (seed, index)."""
        from mlperf_mig.workloads.llama3_1_8b.cnn_dailymail import SyntheticPrompts

        prompts = scratch.get("prompts")
        if not isinstance(prompts, SyntheticPrompts):
            prompts = scratch["prompts"] = SyntheticPrompts(
                seed=seed, max_prompt_tokens=SYNTHETIC_PROMPT_TOKENS
            )
        ids, lengths = out["input_ids"], out["input_length"]
        for row, index in enumerate(indices):
            prompt = prompts.prompt_ids(int(index))
            ids[row, : len(prompt)] = prompt
            ids[row, len(prompt) :] = 0
            lengths[row] = len(prompt)

    def check_dataset(self, dataset: str, vocab: str | None) -> None:
        from mlperf_mig.workloads.llama3_1_8b.cnn_dailymail import check_files

        check_files(dataset, vocab)

    def open_dataset(self, dataset: str, *, vocab: str | None, limit: int | None) -> SampleSource:
        from mlperf_mig.workloads.llama3_1_8b.cnn_dailymail import CnnSource

        return CnnSource.open(dataset, benchmark=self, tokenizer=vocab, limit=limit)

    # -- responses and accuracy --------------------------------------------------------------

    def write_payload(self, outputs: Mapping[str, np.ndarray], payload: np.ndarray) -> None:
        """int32 token ids, one row per sample (the longest output wide)."""
        tokens = outputs["output_ids"]
        payload[: len(tokens)] = tokens

    def score(self, source: SampleSource, answers: Mapping[int, bytes]) -> Score:
        """ROUGE-1/2/L/Lsum (x100), gen_len and gen_num of the decoded answers against the
        reference summaries, as the reference's evaluation computes them (rouge.py)."""
        from mlperf_mig.workloads.llama3_1_8b.cnn_dailymail import CnnSource
        from mlperf_mig.workloads.llama3_1_8b.rouge import score_token_outputs

        cnn = cast("CnnSource", source)  # scored answers come from open_dataset's source
        scores = score_token_outputs(answers, cnn.references(), cnn.tokenizer).to_dict()
        extra = {key: float(scores[key]) for key in (*ROUGE_KEYS[1:], "gen_len", "gen_num")}
        return Score(value=float(scores["rouge1"]), count=int(scores["gen_num"]), extra=extra)

    def accuracy_passes(self, value: float, extra: Mapping[str, float]) -> bool:
        """The checker's rule: each ROUGE at least 99% of its target, gen_len within 90-110%."""
        from mlperf_mig.workloads.llama3_1_8b.rouge import RougeScores, passes

        scores = RougeScores(
            rouge1=value, rouge2=extra["rouge2"], rougeL=extra["rougeL"],
            rougeLsum=extra["rougeLsum"], gen_len=int(extra["gen_len"]),
            gen_num=int(extra["gen_num"]),
        )  # fmt: skip
        return passes(scores, self.targets)

    def accuracy_figures(
        self, value: float, count: int, extra: Mapping[str, float]
    ) -> dict[str, float]:
        return {"rouge1": value, **{k: extra[k] for k in (*ROUGE_KEYS[1:], "gen_len", "gen_num")}}

    def accuracy_line(self, figures: Mapping[str, float]) -> str:
        """The dict the reference's evaluation prints (what the checker's ROUGE1, ROUGE2,
        ROUGEL, ROUGELSUM and GEN_LEN patterns read)."""
        parts = [f"'{key}': {figures[key]:.4f}" for key in ROUGE_KEYS]
        parts.append(f"'gen_len': {int(figures['gen_len'])}")
        parts.append(f"'gen_num': {int(figures['gen_num'])}")
        return "{" + ", ".join(parts) + "}"

    # -- known answers -----------------------------------------------------------------------

    def known_outputs(
        self, samples: Sequence[Mapping[str, np.ndarray]], codes: Sequence[int]
    ) -> dict[str, np.ndarray]:
        raise WorkloadError(
            f"the known_answer backend checks one-answer workloads; {self.name} streams tokens "
            "(use --backend onnxruntime or null)"
        )

    def known_payload(self, sample: Mapping[str, np.ndarray]) -> bytes:
        raise WorkloadError(
            f"the known_answer backend checks one-answer workloads; {self.name} streams tokens"
        )


def _checker(name: str, samples: int, targets: AccuracyTargets, *,
             min_queries: tuple[tuple[str, int], ...], scenarios: tuple[str, ...],
             optional: tuple[str, ...] = (), server_bound_ns: int | None) -> CheckerModel:  # fmt: skip
    system_type = "edge" if name.endswith("edge") else "datacenter"
    return CheckerModel(
        name=name,
        folders=(name,),
        performance_sample_count=samples,
        offline_min_samples=samples,
        min_query_count=min_queries,
        server_latency_bound_ns=server_bound_ns,
        # the checker's "datacenter,edge" lists hold both variants with the same scenarios
        required_scenarios=((system_type, scenarios), ("datacenter,edge", scenarios)),
        optional_scenarios=(
            ((system_type, optional), ("datacenter,edge", optional)) if optional else ()
        ),
        accuracy_target=targets.rouge1 * ROUGE_SHARE,
        accuracy_pattern=r".*'rouge1':\s+'?([\d.]+)'?.*",
        accuracy_delta_percent=0.0,
        accuracy_sample_count=samples,
    )


_REFERENCE = ReferenceScript(
    how=(
        "language/llama3.1-8b/evaluation.py computes it: the logged int32 token ids decoded with "
        "the model's tokenizer, ROUGE-1/2/L/Lsum (stemmed, Lsum over sentences joined by "
        "newlines) of each prediction against its reference summary, averaged, x100; gen_len "
        "the predictions' characters, gen_num their count"
    ),
    command=(
        "python3 language/llama3.1-8b/evaluation.py --mlperf-accuracy-file "
        "mlperf_log_accuracy.json --dataset-file cnn_eval.json --dtype int32"
    ),
    why="our log holds the int32 token ids of each output, the script's --dtype int32",
)


LLAMA = Llama31(
    name="llama3.1-8b",
    listing_order=30,
    conf_model_name="llama3_1-8b",
    submission_names=("llama3.1-8b",),
    inputs=INPUTS,
    outputs=OUTPUTS,
    performance_sample_count=13368,
    server_latency_bound_ms=20000.0,  # the checker's end-to-end Server bound (20 s)
    offline_min_samples=13368,
    accuracy_metric="rouge1",
    accuracy_target=ROUGE_SHARE * TARGETS.rouge1,
    required_audits=("TEST06",),
    official_weights="meta-llama/Llama-3.1-8B-Instruct",
    checker_models=(
        _checker(
            "llama3.1-8b",
            13368,
            TARGETS,
            min_queries=(("SingleStream", 1024), ("Server", 270336), ("Offline", 1)),
            scenarios=("Offline",),
            optional=(INTERACTIVE, SERVER),
            server_bound_ns=20_000_000_000,
        ),
    ),
    reference_script=_REFERENCE,
    response=RESPONSE,
    loadgen_scenarios=("Offline", SERVER, INTERACTIVE),
    targets=TARGETS,
    ttft_limit_ms=2000.0,
    tpot_limit_ms=100.0,
    interactive_conf_model_name="llama3_1-8b-interactive",
    interactive_ttft_limit_ms=500.0,
    interactive_tpot_limit_ms=30.0,
)

LLAMA_EDGE = Llama31(
    name="llama3.1-8b-edge",
    listing_order=31,
    conf_model_name="llama3_1-8b-edge",
    submission_names=("llama3.1-8b-edge",),
    inputs=INPUTS,
    outputs=OUTPUTS,
    performance_sample_count=5000,
    server_latency_bound_ms=20000.0,  # no Server run; kept for the unified dispatcher's window
    offline_min_samples=5000,
    accuracy_metric="rouge1",
    accuracy_target=ROUGE_SHARE * EDGE_TARGETS.rouge1,
    required_audits=(),
    official_weights="meta-llama/Llama-3.1-8B-Instruct",
    checker_models=(
        _checker(
            "llama3.1-8b-edge",
            5000,
            EDGE_TARGETS,
            min_queries=(("SingleStream", 1024), ("Offline", 1)),
            scenarios=("SingleStream", "Offline"),
            server_bound_ns=None,
        ),
    ),
    reference_script=_REFERENCE,
    response=RESPONSE,
    loadgen_scenarios=("SingleStream", "Offline"),
    targets=EDGE_TARGETS,
)
