"""The backend table: backends are folders that declare their facts, found without registration."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlperf_mig.engines import backends
from mlperf_mig.engines.backends import backend_class, backend_names, find_backend, resolve_backend
from mlperf_mig.errors import BackendUnavailableError

_ECHO_BACKEND = """
from mlperf_mig.workloads import get_workload
from mlperf_mig.engines.backend import Backend, DeviceReport


class EchoBackend(Backend):
    name = "{name}"
    framework = "Echo"
    runs_model = False
    listing_order = 90

    @classmethod
    def _open(cls, spec, engine_path, *, threads):
        return cls()

    @property
    def benchmark(self):
        return get_workload("resnet50")

    @property
    def device(self):
        return DeviceReport(backend=self.name, provider="echo", device="cpu")

    def run(self, feeds):
        return dict(feeds)


BACKEND = EchoBackend
"""


@pytest.fixture(name="extra_backends")
def fixture_extra_backends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A second folder of backend folders, searched by the table like engines/backends/."""
    monkeypatch.setattr(backends, "__path__", [*backends.__path__, str(tmp_path)])
    backends._table.cache_clear()
    yield tmp_path
    for name in [m for m in sys.modules if m.startswith("mlperf_mig.engines.backends.echo")]:
        del sys.modules[name]
    backends._table.cache_clear()


def _add_backend(folder: Path, name: str, declared: str) -> None:
    (folder / name).mkdir()
    (folder / name / "__init__.py").write_text(textwrap.dedent(_ECHO_BACKEND.format(name=declared)))


def test_a_backend_folder_is_all_it_takes(extra_backends: Path) -> None:
    """A new folder with a `BACKEND` class is listed, resolved and loaded without other edits."""
    _add_backend(extra_backends, "echo", "echo")
    assert backend_names() == ("tensorrt", "onnxruntime", "vllm", "null", "known_answer", "echo")
    assert resolve_backend("echo") == "echo"
    assert backend_class("echo").framework == "Echo"


def test_folder_and_backend_name_must_agree(extra_backends: Path) -> None:
    """A folder whose class declares another name is refused, naming both."""
    _add_backend(extra_backends, "echo_two", "echo2")
    with pytest.raises(TypeError, match="'echo_two' exports a backend named 'echo2'"):
        backend_names()


def test_every_backend_declares_its_facts() -> None:
    """Each shipped backend names its framework for submissions and sits in its own folder."""
    for name in backend_names():
        cls = backend_class(name)
        assert cls.framework and cls.__module__.startswith(f"mlperf_mig.engines.backends.{name}.")


def test_auto_on_cpu_partitions_skips_gpu_backends() -> None:
    """On emulated (CPU) partitions "auto" never chooses a backend that needs a GPU."""
    assert not backend_class(resolve_backend("auto", on_cpu=True)).needs_gpu


def test_gpu_backend_on_cpu_partitions_is_refused() -> None:
    """Asking for TensorRT on CPU partitions raises, naming the backend that can run there."""
    with pytest.raises(
        BackendUnavailableError, match="where TensorRT cannot; use --backend onnxruntime"
    ):
        resolve_backend("tensorrt", on_cpu=True)


def test_unknown_name_has_no_class() -> None:
    """find_backend answers None for a name this installation does not have."""
    assert find_backend("openvino") is None


def test_doctor_lists_a_new_backend_folder(extra_backends: Path) -> None:
    """doctor asks the backend table, so a new backend folder is checked without other edits."""
    from mlperf_mig.doctor.install import check_backends

    _add_backend(extra_backends, "echo", "echo")
    statuses = {s.name: s for s in check_backends(has_gpu=False, cuda_major=None)}
    assert list(statuses) == ["tensorrt", "onnxruntime", "vllm", "null", "known_answer", "echo"]
    assert statuses["echo"].ok and statuses["echo"].detail == "runs here (computes no model)"
