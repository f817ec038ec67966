"""What a workload is: an MLPerf Inference benchmark's model interface, its rules, and the parts
that differ from one benchmark to the next (reference/mlperf.md section 2).

Each workload is a folder, `workloads/<name>/`, whose `__init__.py` exports its `WORKLOAD` (a
subclass of `Workload` with its facts filled in); `workloads/__init__.py` is the table that finds
them. The rest of the library asks the workload object, which travels resolved in the plan,
engine requests and instance tasks: the graph builders generate models with its tensors, the
backends check user-supplied models against them, the harness shapes samples and responses from
them, the accuracy run asks it to score, and the submission writer takes its folder names from it.
Nothing outside a workload folder compares a workload's name.
"""

from __future__ import annotations

import abc
import zlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import numpy as np

from mlperf_mig._paths import data_dir
from mlperf_mig.errors import WorkloadError

if TYPE_CHECKING:
    import onnx

    from mlperf_mig.workloads.generation import TokenGenerator


class SampleSource(Protocol):
    """Where samples come from: writes preprocessed samples into the library's rows (the
    synthetic source every workload has is workloads/samples.py's; `open_dataset` gives one).

    Read-only members: a source may be a frozen record or compute them."""

    @property
    def benchmark(self) -> Workload: ...
    @property
    def total_count(self) -> int: ...
    @property
    def performance_count(self) -> int: ...
    @property
    def synthetic(self) -> bool: ...
    @property
    def description(self) -> str: ...

    def fill(self, indices: Sequence[int], out: Mapping[str, np.ndarray]) -> None:
        """Write sample `indices[i]` into row i of every `out[input name]`."""


@attrs.frozen(kw_only=True)
class TensorSpec:
    """One model input or output; `None` in `shape` is the dynamic batch dimension."""

    name: str
    dtype: str
    shape: tuple[int | None, ...]

    @property
    def sample_shape(self) -> tuple[int, ...]:
        """The shape of one sample: `shape` without its batch axis, the only dynamic one."""
        fixed = tuple(int(d) for d in self.shape[1:] if d is not None)
        if len(fixed) != len(self.shape[1:]):
            raise WorkloadError(
                f"tensor {self.name!r} has shape {self.shape}: only the first (batch) axis may be "
                "None; give the other axes their sizes"
            )
        return fixed


ONE_ANSWER = "one answer"  # one payload per sample, at once (ResNet50, BERT)
TOKEN_STREAM = "token stream"  # int32 token ids, the first reported as soon as it exists (LLMs)
LOADGEN_SCENARIOS = ("Offline", "Server", "SingleStream", "MultiStream")
# MLPerf's Interactive scenario is no LoadGen scenario: a Server run under the workload's
# interactive conf model name (tighter TTFT and TPOT limits), filed in an Interactive/ folder.
INTERACTIVE = "Interactive"
SERVER = "Server"


@attrs.frozen(kw_only=True)
class ResponseFormat:
    """What LoadGen gets for one sample: its kind, and the shape and dtype of its payload.

    `kind` is ONE_ANSWER (the whole answer in one QuerySampleResponse; `shape` and `dtype` are
    one answer's) or TOKEN_STREAM (int32 token ids, the first reported to LoadGen on its own
    before the whole output; `shape` is the longest output). A SUT that cannot serve a kind
    refuses it by name before LoadGen starts.
    """

    kind: str
    shape: tuple[int, ...]
    dtype: str


@attrs.frozen(kw_only=True)
class Score:
    """A workload's accuracy metric over the logged answers: the value, how many samples (for
    SQuAD, questions) it rests on, and what else the metric reports."""

    value: float
    count: int
    extra: Mapping[str, float] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class CheckerModel:
    """One model class of MLCommons' submission checker, as it judges a result folder of a
    workload (its constants.py and configuration.py; reference/mlperf.md section 3). The checker
    is the judge: these values follow it, not our taste."""

    name: str  # the checker's model class: "resnet", "bert-99"
    folders: tuple[str, ...]  # result folder names the checker reads as this model
    performance_sample_count: int
    offline_min_samples: int  # the least samples of an Offline query
    # the least queries per LoadGen scenario (scenarios it does not name have no minimum)
    min_query_count: tuple[tuple[str, int], ...]
    server_latency_bound_ns: int | None  # None: the checker sets no Server bound
    # closed division: the LoadGen scenarios each system type must have
    required_scenarios: tuple[tuple[str, tuple[str, ...]], ...]
    accuracy_target: float
    accuracy_pattern: str  # the regex the checker reads accuracy.txt's figure with (ACC_PATTERN)
    accuracy_delta_percent: float  # TEST01: how far the audit's sampled accuracy may move
    # the samples an accuracy run must cover (the checker's accuracy-sample-count and its
    # dataset_check); None: not checked by mlperf-mig for this model
    accuracy_sample_count: int | None = None
    # closed division: the scenarios each system type may add (the checker's optional scenarios;
    # where Server and Interactive both are, one of them is required)
    optional_scenarios: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def min_queries(self, loadgen_scenario: str) -> int | None:
        return dict(self.min_query_count).get(loadgen_scenario)

    def scenarios_required(self, system_type: str) -> tuple[str, ...] | None:
        return dict(self.required_scenarios).get(system_type)

    def scenarios_optional(self, system_type: str) -> tuple[str, ...]:
        return dict(self.optional_scenarios).get(system_type, ())


@attrs.frozen(kw_only=True)
class MemoryFit:
    """What a model needs of a slice's memory, and whether the slice holds it (a generative
    workload's weights at a precision plus its KV cache for a batch of full-length requests)."""

    weights_bytes: int
    kv_cache_bytes: int
    overhead_bytes: int  # runtime, activations, CUDA context (inferred)
    batch: int
    tokens: int  # per request: the longest prompt plus the new tokens
    memory_gib: float  # what the slice holds

    @property
    def need_bytes(self) -> int:
        return self.weights_bytes + self.kv_cache_bytes + self.overhead_bytes

    @property
    def holds(self) -> bool:
        return self.need_bytes <= self.memory_gib * 2**30

    def text(self) -> str:
        return (
            f"weights {_size(self.weights_bytes)} + KV cache {_size(self.kv_cache_bytes)} (batch "
            f"{self.batch} x {self.tokens} tokens) + {_size(self.overhead_bytes)} runtime = "
            f"{_size(self.need_bytes)} of {self.memory_gib:g} GiB"
        )


def _size(count: int) -> str:
    """Bytes in GiB, or MiB below a tenth of a GiB."""
    return f"{count / 2**30:.2f} GiB" if count >= 2**30 / 10 else f"{count / 2**20:.1f} MiB"


@attrs.frozen(kw_only=True)
class ReferenceScript:
    """How mlperf-mig computed a workload's accuracy figure, the MLCommons script's command line
    for our log, and why its flags are what they are (accuracy.txt and a result's README)."""

    how: str
    command: str
    why: str


@attrs.frozen(kw_only=True)
class Workload(abc.ABC):
    """An MLPerf Inference benchmark: the model interface, the rules that depend on it, and what
    differs per benchmark (graphs, samples, datasets, responses, scoring).

    A subclass per workload folder implements the abstract methods; instances are immutable and picklable
    (the plan sends them to every worker).
    """

    name: str
    listing_order: int  # where the workload stands in lists, help texts and errors
    aliases: tuple[str, ...] = ()  # other names a user may type ("bert-99" for bert)
    conf_model_name: (
        str  # the model name LoadGen's mlperf.conf uses (trap 3: "bert", not "bert-99")
    )
    submission_names: tuple[str, ...]  # result folder names the submission checker accepts
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    performance_sample_count: int
    server_latency_bound_ms: float
    offline_min_samples: int
    accuracy_metric: str
    accuracy_target: float
    required_audits: tuple[str, ...]  # the compliance audits a closed-division result needs
    official_weights: str  # the reference model file a submission's measurements.json names
    checker_models: tuple[CheckerModel, ...]  # the checker's classes of this workload (bert: 2)
    reference_script: ReferenceScript
    response: ResponseFormat
    # ONNX Runtime's CPU provider computes int8 fast for this graph (BERT: its Q/DQ matmuls fuse
    # into integer GEMMs; ResNet50's Q/DQ convolutions run slower than fp32 on the CPU).
    int8_on_cpu: bool = False
    # The scenarios MLPerf allows the workload (llama3.1-8b-edge: SingleStream, Offline), in
    # LoadGen's names, and Interactive where MLPerf has it (llama3.1-8b).
    loadgen_scenarios: tuple[str, ...] = LOADGEN_SCENARIOS
    # The MLPerf scenario this workload's LoadGen Server runs are reported and filed under:
    # Server, or Interactive for the variant that `run_as(INTERACTIVE)` gives.
    server_scenario: str = SERVER

    def __str__(self) -> str:
        return self.name  # how messages, file names and tables name it

    @property
    def generates_tokens(self) -> bool:
        """Its answers are token streams (TTFT and TPOT are measured)."""
        return self.response.kind == TOKEN_STREAM

    def check_scenario(self, loadgen_scenario: str) -> None:
        """Refuse a LoadGen scenario MLPerf does not run this workload in, in one line."""
        if loadgen_scenario not in self.loadgen_scenarios:
            raise WorkloadError(
                f"{self.name} is not run in the {loadgen_scenario} scenario; MLPerf runs it in "
                f"{', '.join(self.loadgen_scenarios)}: pass --loadgen-scenario with one of them"
            )

    def run_as(self, scenario: str) -> tuple[Workload, str]:
        """The workload and the LoadGen scenario that run MLPerf scenario `scenario`, refused in
        one line where MLPerf does not run the workload in it: Interactive is LoadGen's Server
        run by the workload's interactive variant (its conf model name and token limits)."""
        self.check_scenario(scenario)
        if scenario != INTERACTIVE:
            return self, scenario
        return self.interactive_variant(), SERVER

    def interactive_variant(self) -> Workload:
        """The workload as its Interactive scenario runs it (`run_as`); only a workload that
        lists Interactive among its scenarios has one."""
        raise WorkloadError(
            f"{self.name} has no Interactive scenario; MLPerf runs it in "
            f"{', '.join(self.loadgen_scenarios)}"
        )

    def mlperf_scenario(self, loadgen_scenario: str) -> str:
        """The MLPerf scenario a LoadGen test of this workload is reported and filed under: the
        LoadGen scenario itself, but Interactive for the interactive variant's Server test."""
        return self.server_scenario if loadgen_scenario == SERVER else loadgen_scenario

    def token_limits_ms(self) -> tuple[float, float] | None:
        """The p99 TTFT and TPOT limits (ms) of its Server test; None: none (a workload that
        generates no tokens, or one without a Server run)."""
        return None

    def conf_model_names(self) -> tuple[str, ...]:
        """Every conf model name a user.conf of this workload may use (llama3.1-8b: also
        llama3_1-8b-interactive)."""
        names = [self.conf_model_name]
        if INTERACTIVE in self.loadgen_scenarios:
            names.append(self.interactive_variant().conf_model_name)
        return tuple(names)

    def input_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.inputs)

    def output_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.outputs)

    def settings_path(self) -> Path:
        """Its LoadGen settings (presets, targets per profile): harness/<name>.toml of the
        shipped data folders; a workload folder may ship its own instead."""
        return data_dir("harness") / f"{self.name}.toml"

    def recipe_path(self, folder: Path | None = None) -> Path:
        """Its engine recipe (batch sizes per profile, workspace): engines/<name>.toml of the
        shipped data folders, or of `folder`."""
        return (folder if folder is not None else data_dir("engines")) / f"{self.name}.toml"

    # -- models ------------------------------------------------------------------------------

    @abc.abstractmethod
    def build_graph(
        self,
        *,
        variant: str,
        precision: str,
        seed: int,
        act_amax: Mapping[str, float] | None = None,
    ) -> tuple[onnx.ModelProto, list[str]]:
        """The generated graph (synthetic weights) and the tensors its int8 version quantizes."""

    @abc.abstractmethod
    def calibration_feeds(self, batch: int, seed: int) -> dict[str, np.ndarray]:
        """Synthetic inputs shaped like the real ones, for calibrating an int8 graph."""

    def token_generator(
        self,
        run: Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]],
        *,
        variant: str,
        max_new_tokens: int,
        max_batch: int,
    ) -> TokenGenerator:
        """The generator that runs this workload's decoder graph through `run` (a loaded
        backend's), for a generative workload; others generate no tokens."""
        raise WorkloadError(f"{self.name} generates no tokens; it answers each sample at once")

    def check_tokenizer(  # noqa: B027 - a workload that generates no tokens has nothing to check
        self, path: str, *, variant: str, vocab_size: int | None
    ) -> None:
        """Refuse a tokenizer file that does not load or whose vocabulary is not the model's
        (`vocab_size`: a user model's; None: the generated `variant`'s); a workload that
        generates no tokens reads its vocabulary in `check_dataset`."""

    def end_token_ids(self, variant: str) -> tuple[int, ...]:
        """The ids that end a generated output (TEST06's EOS check); () for a workload that
        generates no tokens."""
        return ()

    def memory_fit(
        self, *, variant: str, precision: str | None, batch: int, memory_gib: float
    ) -> MemoryFit | None:
        """What the model needs of a slice of `memory_gib` (a generative workload sizes its
        weights and KV cache); None: the workload does not size its memory."""
        return None

    # -- samples -----------------------------------------------------------------------------

    @abc.abstractmethod
    def fill_synthetic(
        self,
        *,
        seed: int,
        total_count: int,
        indices: Sequence[int],
        out: Mapping[str, np.ndarray],
        scratch: dict[str, Any],
    ) -> None:
        """Write deterministic synthetic sample `indices[i]` into row i of every `out[input]`;
        each sample depends only on (seed, index). `scratch` is the source's to keep draws in."""

    @abc.abstractmethod
    def check_dataset(self, dataset: str, vocab: str | None) -> None:
        """Raise DatasetError when `dataset` (and a vocabulary where the workload needs one) is
        missing or malformed; cheap enough to run before any worker starts."""

    @abc.abstractmethod
    def open_dataset(self, dataset: str, *, vocab: str | None, limit: int | None) -> SampleSource:
        """The dataset's samples (its first `limit` when given), ready to fill a library."""

    # -- responses and accuracy --------------------------------------------------------------

    @abc.abstractmethod
    def write_payload(self, outputs: Mapping[str, np.ndarray], payload: np.ndarray) -> None:
        """Write each sample's response payload (reference format) into the rows of `payload`
        (shaped `[batch, *response.shape]`) from the model's outputs for the batch."""

    @abc.abstractmethod
    def score(self, source: SampleSource, answers: Mapping[int, bytes]) -> Score:
        """The accuracy metric over each logged sample's first answer, by sample index, as
        MLCommons' reference script computes it; `source` holds the ground truth."""

    def accuracy_passes(self, value: float, extra: Mapping[str, float]) -> bool:
        """The verdict of a meaningful accuracy run: the metric at least its target (a workload
        with more than one figure checks them all)."""
        return value >= self.accuracy_target

    @abc.abstractmethod
    def accuracy_figures(
        self, value: float, count: int, extra: Mapping[str, float]
    ) -> dict[str, float]:
        """The figures the reference accuracy script prints, from a scored accuracy run (the
        metric's value, the samples it rests on, what else it reported)."""

    @abc.abstractmethod
    def accuracy_line(self, figures: Mapping[str, float]) -> str:
        """The line the reference accuracy script prints for `figures` (what the checker's
        `accuracy_pattern` reads)."""

    # -- known answers (the known_answer backend) -------------------------------------------

    def sample_code(self, sample: Mapping[str, np.ndarray]) -> int:
        """CRC-32 of one sample's bytes, every input in the workload's input order."""
        code = 0
        for name in self.input_names():
            code = zlib.crc32(np.ascontiguousarray(sample[name]).data, code)
        return code

    @abc.abstractmethod
    def known_outputs(
        self, samples: Sequence[Mapping[str, np.ndarray]], codes: Sequence[int]
    ) -> dict[str, np.ndarray]:
        """Model outputs for a batch that carry each sample's code (the known_answer backend)."""

    @abc.abstractmethod
    def known_payload(self, sample: Mapping[str, np.ndarray]) -> bytes:
        """The response payload the known_answer backend's answer to `sample` must give, built
        straight from the sample without the harness's code, to check a log against."""
