"""User-supplied model files: loaded, hashed, and checked against the benchmark interface."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from mlperf_mig.engines import build_engine, generate_model, resolve_spec, user_model
from mlperf_mig.errors import ModelFileError, PrecisionError
from mlperf_mig.workloads import get_workload


@pytest.fixture(name="resnet_file")
def fixture_resnet_file(tmp_path: Path) -> Path:
    """A tiny ResNet50 saved where a user would keep the official resnet50_v1.onnx."""
    path = tmp_path / "resnet50_v1.onnx"
    onnx.save(generate_model(get_workload("resnet50"), variant="tiny", precision="fp32"), str(path))
    return path


def test_official_interface_is_accepted(resnet_file: Path) -> None:
    """A file with the official names, dtypes and shapes is accepted and hashed."""
    model = user_model(resnet_file, get_workload("resnet50"))
    assert not model.generated and len(model.sha256) == 64 and model.precision == "fp32"


def test_missing_file_is_one_error(tmp_path: Path) -> None:
    """A missing file raises ModelFileError naming the path."""
    with pytest.raises(ModelFileError, match="does not exist"):
        user_model(tmp_path / "absent.onnx", get_workload("resnet50"))


def test_corrupt_file_is_one_error(resnet_file: Path) -> None:
    """A truncated ONNX file is reported as unreadable, not as a protobuf traceback."""
    resnet_file.write_bytes(resnet_file.read_bytes()[:5000])
    with pytest.raises(ModelFileError, match=r"truncated or corrupt|no ONNX graph"):
        user_model(resnet_file, get_workload("resnet50"))


def test_non_onnx_file_is_one_error(tmp_path: Path) -> None:
    """A text file is not mistaken for an empty model."""
    path = tmp_path / "notes.onnx"
    path.write_text("this is not a model\n")
    with pytest.raises(ModelFileError, match=r"notes\.onnx"):
        user_model(path, get_workload("bert"))


def test_wrong_interface_lists_expected_and_found(resnet_file: Path) -> None:
    """A ResNet50 file offered as BERT fails with one message listing both interfaces."""
    with pytest.raises(ModelFileError) as excinfo:
        user_model(resnet_file, get_workload("bert"))
    message = str(excinfo.value)
    assert "\n" not in message
    assert "expected inputs input_ids int64 [N,384]" in message
    assert "found inputs input_tensor:0 float32 [N,3,224,224]" in message


def test_wrong_dtype_is_rejected(tmp_path: Path) -> None:
    """An input with the right name but another dtype does not match."""
    model = generate_model(get_workload("resnet50"), variant="tiny", precision="fp32")
    model.graph.input[0].type.tensor_type.elem_type = onnx.TensorProto.FLOAT16
    path = tmp_path / "fp16_input.onnx"
    onnx.save(model, str(path))
    with pytest.raises(ModelFileError, match="float16"):
        user_model(path, get_workload("resnet50"))


def test_user_file_precision_must_match_request(resnet_file: Path, cache_dir: Path) -> None:
    """Asking for int8 from an fp32 file is refused: the precision lives in the graph."""
    with pytest.raises(PrecisionError, match="fp32 graph"):
        resolve_spec(
            get_workload("resnet50"),
            backend="null",
            precision="int8",
            model_path=resnet_file,
            cache_dir=cache_dir,
        )


def test_user_file_spec_records_path_and_hash(resnet_file: Path, cache_dir: Path) -> None:
    """A spec from a user file names the file and its content hash, and does not generate."""
    spec = resolve_spec(
        get_workload("resnet50"), backend="onnxruntime", model_path=resnet_file, cache_dir=cache_dir
    )
    assert spec.model_path == str(resnet_file)
    assert spec.model == user_model(resnet_file, get_workload("resnet50")).sha256
    assert not (cache_dir / "models").exists()


def test_user_file_changed_after_spec_is_refused(resnet_file: Path, cache_dir: Path) -> None:
    """Building from a user file that changed since its spec was made raises ModelFileError."""
    spec = resolve_spec(
        get_workload("resnet50"), backend="onnxruntime", model_path=resnet_file, cache_dir=cache_dir
    )
    onnx.save(
        generate_model(get_workload("resnet50"), variant="tiny", precision="fp32", seed=7),
        str(resnet_file),
    )
    with pytest.raises(ModelFileError, match="changed since the spec was created"):
        build_engine(spec, cache_dir)


def test_the_fork_servers_preload_does_not_import_onnx() -> None:
    """The modules every worker is forked with leave onnx (and ml_dtypes) unimported: a run whose
    models are cached never needs them, and their import cost every run ~0.5 s of CPU."""
    import subprocess
    import sys

    from mlperf_mig.runner.supervisor import PRELOAD

    code = f"import sys; import {', '.join(PRELOAD)}; print('onnx' in sys.modules, 'ml_dtypes' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "False"]
