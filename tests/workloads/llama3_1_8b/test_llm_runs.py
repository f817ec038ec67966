"""llama3.1-8b end to end on emulated slices: token streams through LoadGen in every mode, the
table's token columns, and what the plan refuses in one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import mlperf_mig
from mlperf_mig.errors import SettingsError, WorkloadError
from mlperf_mig.workloads import get_workload

QUICK_NULL: dict[str, Any] = {"backend": "null", "progress": False, "telemetry": False}


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["independent", "unified"])
def test_singlestream_reports_p90_ttft_and_tpot(tmp_path: Path, mode: str) -> None:
    result = mlperf_mig.run(
        "2g.20gb+1g.10gb", benchmark="llama3.1-8b-edge", loadgen_scenario="SingleStream",
        mode=mode, outdir=tmp_path / "run", settings={"max_tokens": 8, "min_duration": 300},
        **QUICK_NULL,
    )  # fmt: skip
    assert result.ok
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    runs = (
        [saved["layout_result"]]
        if mode == "unified"
        else [i["performance"] for i in saved["instances"]]
    )
    for run in runs:
        tokens = run["tokens"]
        assert tokens["ttft_ns"]["99.00"] > 0 and tokens["tpot_ns"]["99.00"] > 0
        assert tokens["tokens_per_second"] > 0
        assert run["latency_ns"]["90.00"] >= tokens["ttft_ns"]["50.00"]
    header = result.table().splitlines()[1]
    for column in ("tokens/s", "p90 ms", "TTFT p99 ms", "TPOT p99 ms"):
        assert column in header


@pytest.mark.slow
def test_server_run_says_its_ttft_and_tpot_verdict(tmp_path: Path) -> None:
    result = mlperf_mig.run(
        "1g.10gb", benchmark="llama3.1-8b", loadgen_scenario="Server", outdir=tmp_path / "run",
        settings={"max_tokens": 4, "min_duration": 300, "target_qps": 200}, **QUICK_NULL,
    )  # fmt: skip
    instance = result.instances[0].performance
    assert instance.tokens.ttft_limit_ns == 2_000_000_000
    assert instance.tokens.tpot_limit_ns == 100_000_000
    assert "token limits (p99): i0-1g.10gb: TTFT" in result.table()
    assert "<= 2000 ms PASS" in result.table()


@pytest.mark.slow
def test_offline_counts_every_generated_token(tmp_path: Path) -> None:
    """The model-free generator makes exactly max_tokens a request: LoadGen's tokens/s is
    samples/s times max_tokens."""
    result = mlperf_mig.run(
        "1g.10gb", benchmark="llama3.1-8b-edge", loadgen_scenario="Offline",
        outdir=tmp_path / "run", settings={"max_tokens": 6}, accuracy=False, **QUICK_NULL,
    )  # fmt: skip
    performance = result.instances[0].performance
    assert performance.tokens.tokens_per_second == pytest.approx(
        performance.throughput * 6, rel=0.01
    )


def test_a_scenario_mlperf_does_not_run_is_refused() -> None:
    with pytest.raises(WorkloadError, match=r"llama3\.1-8b-edge is not run in the Server scenario"):
        mlperf_mig.plan("1g.10gb", benchmark="llama3.1-8b-edge", loadgen_scenario="Server")
    with pytest.raises(WorkloadError, match="MultiStream"):
        mlperf_mig.plan("1g.10gb", benchmark="llama3.1-8b", loadgen_scenario="MultiStream")


@pytest.mark.parametrize("value", [1, 0, 2.5, 129])
def test_max_tokens_outside_2_to_128_is_refused(value: float) -> None:
    with pytest.raises(SettingsError, match="max_tokens must be a whole number from 2"):
        mlperf_mig.plan(
            "1g.10gb", benchmark="llama3.1-8b-edge", loadgen_scenario="Offline",
            settings={"max_tokens": value},
        )  # fmt: skip


def test_max_tokens_of_a_workload_that_generates_nothing_is_refused() -> None:
    with pytest.raises(SettingsError, match="resnet50 generates none"):
        mlperf_mig.plan("1g.10gb", settings={"max_tokens": 8})


def test_the_plan_notes_how_each_emulated_slice_would_hold_the_model() -> None:
    """On emulated slices the real 8B model's fit is noted, never refused: the 1g.10gb of an
    A100 cannot hold 15 GiB of BF16 weights (the 8B shape's default precision), a 3g.40gb can."""
    plan = mlperf_mig.plan(
        "3g.40gb+1g.10gb", benchmark="llama3.1-8b-edge", loadgen_scenario="Offline",
        backend="onnxruntime",
    )  # fmt: skip
    text = "\n".join(plan.notes())
    assert "fit: 3g.40gb holds llama3.1-8b-edge full: weights 14.96 GiB" in text
    assert "fit: a real 1g.10gb slice of A100-SXM4-80GB would not hold" in text


def test_memory_fit_matches_the_reference_arithmetic() -> None:
    """llm.md section 4: 8B BF16 about 16 GB (15 GiB) of weights, 128 KiB of KV cache a token;
    BF16 fits an H200 1g.35gb and not a 1g.18gb, FP8 fits the 1g.18gb."""
    llama = get_workload("llama3.1-8b")
    bf16 = llama.memory_fit(variant="full", precision="bf16", batch=1, memory_gib=33.0)
    assert bf16 is not None
    assert bf16.kv_cache_bytes == 128 * 1024 * bf16.tokens
    assert 14.9 < bf16.weights_bytes / 2**30 < 15.1
    assert bf16.holds
    small = llama.memory_fit(variant="full", precision="bf16", batch=1, memory_gib=16.5)
    fp8 = llama.memory_fit(variant="full", precision="fp8", batch=1, memory_gib=16.5)
    assert small is not None and not small.holds
    assert fp8 is not None and fp8.holds


FIXTURES = Path(__file__).resolve().parents[2] / "registry" / "fixtures"


def _tokenizer_file(tmp_path: Path, vocab_size: int) -> Path:
    from mlperf_mig.workloads.llama3_1_8b.tokenizer import builtin_tokenizer

    path = tmp_path / f"tokenizer-{vocab_size}.json"
    path.write_text(builtin_tokenizer(vocab_size).to_json())
    return path


def _cli(*args: str) -> tuple[int, str]:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "mlperf_mig", "plan", "--benchmark", "llama3.1-8b-edge",
         "--loadgen-scenario", "Offline", *args],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    return done.returncode, done.stdout + done.stderr


def test_a_tokenizer_of_another_vocabulary_is_one_line(tmp_path: Path) -> None:
    code, out = _cli("--variant", "tiny", "--vocab", str(_tokenizer_file(tmp_path, 512)))
    assert code == 2 and "Traceback" not in out
    assert "has 512 tokens but the model's vocabulary has 1024" in out
    code, _ = _cli("--variant", "tiny", "--vocab", str(_tokenizer_file(tmp_path, 1024)))
    assert code == 0


def test_a_model_folder_for_another_backend_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    code, out = _cli("--model", str(tmp_path / "model"))
    assert code == 2 and "Traceback" not in out
    assert "is a Hugging Face model, which the vllm backend runs; pass --backend vllm" in out


def test_a_model_folder_without_weights_is_one_line(tmp_path: Path) -> None:
    from mlperf_mig.engines.backends.vllm.model import VllmModel
    from mlperf_mig.errors import ModelFileError

    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    with pytest.raises(ModelFileError, match=r"lacks \*\.safetensors \(the weights\), tokenizer"):
        VllmModel.from_dir(tmp_path / "model")


def test_a_dataset_record_without_output_is_one_line(tmp_path: Path) -> None:
    dataset = tmp_path / "cnn_eval.json"
    dataset.write_text(json.dumps([{"input": "An article.", "tok_input": [5, 6, 7]}]))
    code, out = _cli(
        "--variant", "tiny", "--dataset", str(dataset),
        "--vocab", str(_tokenizer_file(tmp_path, 1024)),
    )  # fmt: skip
    assert code == 2 and "Traceback" not in out
    assert "record 0" in out and "output" in out


def test_a_slice_that_cannot_hold_the_model_is_refused_naming_those_that_can() -> None:
    """A replayed H200 with 7x1g.18gb: 8B BF16 with a batch of 16 full-length requests needs
    22.7 GiB, more than a 1g.18gb's 16. FP8 (embeddings and head kept in 16 bits) needs 16.2 GiB
    at that batch, so it is refused with the batch hint alone; at batch 8 it fits."""
    state = str(FIXTURES / "h200-7x1g.json")
    code, out = _cli("--scenario", "7x1g.18gb", "--nvml-state", state, "--backend", "onnxruntime")
    assert code == 2 and "Traceback" not in out
    assert "does not fit a 1g.18gb slice of H200-SXM5-141GB" in out
    assert "profiles that hold it: 2g.35gb, 3g.71gb, 4g.71gb, 7g.141gb, 1g.35gb" in out
    assert "(or a --batch-size below 16 or --precision fp8)" in out
    fp8 = ("--scenario", "7x1g.18gb", "--nvml-state", state, "--backend", "onnxruntime",
           "--precision", "fp8")  # fmt: skip
    code, out = _cli(*fp8)
    assert code == 2 and "(or a --batch-size below 16)" in out, out
    code, out = _cli(*fp8, "--batch-size", "8")
    assert code == 0, out
    assert "fit: 1g.18gb holds llama3.1-8b-edge full" in out
    assert "(batch 8 x 3200 tokens)" in out


def test_the_verdict_checks_every_rouge_and_gen_len() -> None:
    """A meaningful accuracy run of llama passes only when ROUGE-1/2/L/Lsum are each at least
    99% of the reference's and gen_len within 90-110%, as the checker rules."""
    edge = get_workload("llama3.1-8b-edge")
    good = {"rouge2": 16.1147, "rougeL": 24.6375, "rougeLsum": 36.124, "gen_len": 3_051_113,
            "gen_num": 5000}  # fmt: skip
    assert edge.accuracy_passes(39.06 * 0.99, good)
    assert not edge.accuracy_passes(39.06 * 0.98, good)
    assert not edge.accuracy_passes(39.06, {**good, "rougeLsum": 36.124 * 0.98})
    assert not edge.accuracy_passes(39.06, {**good, "gen_len": 3_051_113 * 1.11})
    assert edge.accuracy_passes(39.06, {**good, "gen_len": 2_746_002})  # 90.0% (whole chars)
    assert not edge.accuracy_passes(39.06, {**good, "gen_len": 2_746_001})
