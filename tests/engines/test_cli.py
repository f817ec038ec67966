"""`mlperf-mig build` and `mlperf-mig backends`: what is printed, and one line + exit 2 on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

from mlperf_mig import cli
from mlperf_mig.engines import EngineSpec, backend_info, generate_model
from mlperf_mig.engines import cli as engines_cli
from mlperf_mig.workloads import get_workload


def _build(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(["build", *args])
    out, err = capsys.readouterr()
    return code, out, err


def _assert_one_line_error(result: tuple[int, str, str], *fragments: str) -> None:
    code, out, err = result
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("mlperf-mig: error: ")
    for fragment in fragments:
        assert fragment in err


def test_build_then_reuse(capsys: pytest.CaptureFixture[str], cache_dir: Path) -> None:
    """The first build says "built" and the path; the second says "reused" and the same path."""
    args = ("--benchmark", "resnet50", "--variant", "tiny", "--cache-dir", str(cache_dir))
    code, first, _ = _build(capsys, *args)
    assert code == 0 and first.startswith("built resnet50 fp32 onnxruntime engine for CPU")
    code, second, _ = _build(capsys, *args)
    assert code == 0 and second.startswith("reused ")
    path = first.rsplit(": ", 1)[1].strip()
    assert Path(path).is_file() and second.rsplit(": ", 1)[1].strip() == path


def test_unknown_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown benchmark is one line naming the known ones, exit 2."""
    _assert_one_line_error(_build(capsys, "--benchmark", "gpt-j"), "resnet50, bert")


def test_missing_model_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A --model path that does not exist is one line, exit 2."""
    missing = tmp_path / "resnet50_v1.onnx"
    _assert_one_line_error(
        _build(capsys, "--benchmark", "resnet50", "--model", str(missing)), "does not exist"
    )


def test_corrupt_model_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A truncated --model file is one line, exit 2."""
    path = tmp_path / "resnet50_v1.onnx"
    path.write_bytes(
        generate_model(
            get_workload("resnet50"), variant="tiny", precision="fp32"
        ).SerializeToString()[:999]
    )
    _assert_one_line_error(
        _build(capsys, "--benchmark", "resnet50", "--model", str(path)), "corrupt"
    )


def test_wrong_interface(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A BERT file offered for ResNet50 is one line listing expected and found tensors, exit 2."""
    path = tmp_path / "model.onnx"
    onnx.save(generate_model(get_workload("bert"), variant="tiny", precision="fp32"), str(path))
    _assert_one_line_error(
        _build(capsys, "--benchmark", "resnet50", "--model", str(path)),
        "expected inputs input_tensor:0",
        "found inputs input_ids",
    )


def test_precision_the_backend_cannot_do(
    capsys: pytest.CaptureFixture[str], cache_dir: Path
) -> None:
    """fp16 on ONNX Runtime's CPU provider is one line, exit 2."""
    _assert_one_line_error(
        _build(
            capsys, "--benchmark", "resnet50", "--backend", "onnxruntime", "--precision", "fp16"
        ),
        "cannot compute fp16",
    )


@pytest.mark.skipif(backend_info("tensorrt").available, reason="TensorRT and a GPU are usable here")
def test_tensorrt_where_it_cannot_run(capsys: pytest.CaptureFixture[str]) -> None:
    """--backend tensorrt without TensorRT or a GPU is one line saying why, exit 2."""
    _assert_one_line_error(
        _build(capsys, "--benchmark", "resnet50", "--backend", "tensorrt"), "tensorrt"
    )


def test_profile_without_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    """A MIG profile without its GPU is one line, exit 2 (profile names differ between GPUs)."""
    _assert_one_line_error(_build(capsys, "--benchmark", "bert", "--profile", "1g.10gb"), "--gpu")


def test_backends_lists_every_backend(capsys: pytest.CaptureFixture[str]) -> None:
    """`mlperf-mig backends` prints one row per registered backend."""
    assert cli.main(["backends"]) == 0
    rows = capsys.readouterr().out.splitlines()[2:]
    assert [r.split()[0] for r in rows] == [
        "tensorrt",
        "onnxruntime",
        "vllm",
        "null",
        "known_answer",
    ]


def test_negative_seed(capsys: pytest.CaptureFixture[str]) -> None:
    """A negative --seed is one line asking for a seed >= 0, exit 2 (not numpy's traceback)."""
    _assert_one_line_error(_build(capsys, "--benchmark", "resnet50", "--seed", "-1"), ">= 0")


def test_backends_json(capsys: pytest.CaptureFixture[str]) -> None:
    """`backends --json` lists every backend with whether it can run and why not."""
    assert cli.main(["backends", "--json"]) == 0
    infos = {info["name"]: info for info in json.loads(capsys.readouterr().out)}
    assert list(infos) == ["tensorrt", "onnxruntime", "vllm", "null", "known_answer"]
    assert infos["null"]["available"] is True and infos["null"]["reason"] is None
    assert infos["tensorrt"]["available"] == (infos["tensorrt"]["reason"] is None)


def test_build_labels_an_inferred_batch_size(
    capsys: pytest.CaptureFixture[str], cache_dir: Path
) -> None:
    """The CPU batch size is ours, and the build line says so."""
    code, out, _ = _build(
        capsys, "--benchmark", "resnet50", "--variant", "tiny", "--cache-dir", str(cache_dir)
    )
    assert code == 0 and "(batch 8 [inferred: ours, not NVIDIA's]," in out


@pytest.mark.parametrize(("profile", "inferred"), [("1g.10gb", False), ("2g.20gb", True)])
def test_profile_batch_sizes_are_labelled_by_the_recipe(profile: str, inferred: bool) -> None:
    """NVIDIA's 1g Offline size is not labelled; the interpolated 2g size is."""
    spec = EngineSpec(
        benchmark="resnet50",
        backend="tensorrt",
        precision="int8",
        gpu="A100-SXM4-80GB",
        mig_profile=profile,
    )
    assert engines_cli._batch_is_inferred(spec, "Offline") is inferred


def test_empty_cache_dir(capsys: pytest.CaptureFixture[str]) -> None:
    """--cache-dir '' is one line, exit 2, instead of filling the current folder."""
    _assert_one_line_error(
        _build(capsys, "--benchmark", "resnet50", "--variant", "tiny", "--cache-dir", ""),
        "empty name",
    )


def test_model_folder(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A folder given as --model is named a folder, not a missing file, exit 2."""
    _assert_one_line_error(
        _build(capsys, "--benchmark", "resnet50", "--model", str(tmp_path)), "is a folder"
    )
