"""The vLLM backend: its facts, doctor's view, loading on a slice (fake vllm), the batch run, and
the real engine on a GPU (`gpu` tier)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mlperf_mig.engines.backend import Backend
from mlperf_mig.engines.backends import backend_class, resolve_backend
from mlperf_mig.engines.backends.vllm import backend as vllm_backend
from mlperf_mig.engines.backends.vllm.backend import (
    VllmBackend,
    availability_reason,
    generate_batch,
    vllm_install_command,
)
from mlperf_mig.engines.backends.vllm.generator import load_generator
from mlperf_mig.engines.backends.vllm.model import VllmModel
from mlperf_mig.engines.backends.vllm.settings import vllm_settings, worker_environment
from mlperf_mig.engines.spec import EngineSpec
from mlperf_mig.errors import PlacementError, WorkloadError
from mlperf_mig.workloads import Workload, get_workload


@pytest.fixture(name="token_workload")
def fixture_token_workload() -> Workload:
    """The LLM workload: prompts of at most 3072 tokens, answers of at most 128."""
    return get_workload("llama3.1-8b")


def _spec(workload: Workload, **fields: Any) -> EngineSpec:
    options = {"gpu": "H200-SXM5-141GB", "mig_profile": "1g.35gb", "precision": "fp16"}
    return EngineSpec(benchmark=workload, backend="vllm", **{**options, **fields})


@pytest.fixture(name="on_slice")
def fixture_on_slice(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """This process is bound to MIG-test (no driver), its environment is put back after the test,
    and the engine cache is a temp folder."""
    monkeypatch.setattr(vllm_backend, "bind_slice", lambda: "MIG-test")
    for name in worker_environment(None):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MLPERF_MIG_CACHE", str(tmp_path))


def test_facts() -> None:
    """vLLM needs a GPU, generates tokens, and "auto" never picks it."""
    cls = backend_class("vllm")
    assert cls is VllmBackend and issubclass(cls, Backend)
    assert cls.needs_gpu and cls.generates_tokens and not cls.auto_chooses
    assert resolve_backend("auto", on_cpu=True) != "vllm"


def test_not_installed_is_the_reason() -> None:
    """Without the vllm package the backend says so, pointing at doctor."""
    reason = availability_reason(find_spec=lambda name: None, gpu_count=lambda: 1)
    assert reason is not None and "vllm is not installed" in reason and "doctor" in reason


def test_no_gpu_is_the_reason() -> None:
    """With vllm but no GPU the reason is the GPU."""
    reason = availability_reason(find_spec=lambda name: object(), gpu_count=lambda: 0)
    assert reason is not None and "no NVIDIA GPU" in reason


def test_doctor_without_a_gpu_offers_no_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a machine without a GPU, doctor lists vLLM as not installed, with no command."""
    monkeypatch.setattr(vllm_backend, "installed_version", lambda: None)
    status = VllmBackend.install_status(has_gpu=False, gpu_fix="pip install tensorrt")
    assert not status.ok and status.fix is None
    assert status.detail == "not installed; only of use with a GPU"


def test_doctor_with_a_gpu_gives_the_pip_line_for_the_driver(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a GPU machine without vLLM, the fix is vLLM's own pip line, not TensorRT's."""
    monkeypatch.setattr(vllm_backend, "installed_version", lambda: None)
    monkeypatch.setattr(vllm_backend, "availability_reason", lambda: "vllm is not installed")
    monkeypatch.setattr(vllm_backend, "driver_cuda_major", lambda: 13)
    status = VllmBackend.install_status(has_gpu=True, gpu_fix="pip install tensorrt")
    assert not status.ok
    assert status.fix == "pip install vllm --extra-index-url https://download.pytorch.org/whl/cu129"


def test_a_driver_older_than_cuda_12_gets_no_pip_line() -> None:
    """vLLM's wheels need CUDA 12.9: a CUDA 11 driver gets no install command."""
    assert vllm_install_command(11) is None and vllm_install_command(12) is not None


def test_precisions_are_those_a_spec_can_name(token_workload: Workload) -> None:
    """Of bf16, fp8 and fp16, the backend offers those the engine spec knows."""
    from mlperf_mig.engines.spec import PRECISIONS

    offered = VllmBackend.precisions(_spec(token_workload))
    assert offered and set(offered) <= set(PRECISIONS) & {"bf16", "fp8", "fp16"}


def test_a_workload_without_token_streams_is_refused(on_slice: None) -> None:
    """ResNet50 answers in one piece: vLLM refuses it naming the backends that run it."""
    with pytest.raises(WorkloadError, match="resnet50 answers in one piece"):
        VllmBackend.load(_spec(get_workload("resnet50")), None)


def test_a_request_without_a_gpu_is_refused(token_workload: Workload, on_slice: None) -> None:
    """Without a named GPU there is no slice to size the limits from."""
    with pytest.raises(PlacementError, match="names no GPU"):
        VllmBackend.load(_spec(token_workload, gpu=None, mig_profile=None), None)


def test_a_slice_too_small_is_refused_before_vllm_starts(
    token_workload: Workload, on_slice: None, fake_vllm: list[Any]
) -> None:
    """fp16 8B on an H200 1g.18gb is refused before any engine is created."""
    with pytest.raises(PlacementError, match=r"does not fit H200-SXM5-141GB 1g\.18gb"):
        VllmBackend.load(_spec(token_workload, mig_profile="1g.18gb"), None)
    assert fake_vllm == []


def test_load_binds_the_slice_and_starts_no_engine(
    token_workload: Workload, on_slice: None, fake_vllm: list[Any]
) -> None:
    """Loading sets the process up for vLLM and binds the slice (its UUID is the device), but
    starts no engine yet."""
    with VllmBackend.load(_spec(token_workload), None) as backend:
        assert backend.device.device == "MIG-test" and backend.device.provider == "vllm"
        assert fake_vllm == []
    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:False"


def test_token_generator_sizes_the_engine_for_the_test(
    token_workload: Workload, on_slice: None, fake_vllm: list[Any]
) -> None:
    """The engine gets the test's batch as max_num_seqs and room for the longest prompt plus
    the test's new tokens; its generator makes that many tokens."""
    with VllmBackend.load(_spec(token_workload), None) as backend:
        generator = backend.token_generator(max_new_tokens=16, max_batch=8)
        args = fake_vllm[0].args.kwargs
        assert args["load_format"] == "dummy" and args["dtype"] == "float16"
        assert (args["max_num_seqs"], args["max_model_len"]) == (8, 3072 + 16)
        assert generator.max_new_tokens == 16
    assert fake_vllm[0].engine_core.shutdown_calls == 1


def test_a_second_generator_shuts_the_first_engine_down(
    token_workload: Workload, on_slice: None, fake_vllm: list[Any]
) -> None:
    """One engine per process: asking again closes the engine before starting the next."""
    with VllmBackend.load(_spec(token_workload), None) as backend:
        backend.token_generator(max_new_tokens=16, max_batch=8)
        backend.token_generator(max_new_tokens=32, max_batch=8)
        assert [e.engine_core.shutdown_calls for e in fake_vllm] == [1, 0]


def test_the_tiny_variant_is_left_to_onnx_runtime(token_workload: Workload, on_slice: None) -> None:
    """vLLM runs the full 8B shape: the tiny variant is refused naming ONNX Runtime."""
    with pytest.raises(WorkloadError, match="ONNX Runtime runs"):
        VllmBackend.load(_spec(token_workload, variant="tiny"), None)


def test_run_generates_a_whole_batch(
    token_workload: Workload, on_slice: None, fake_vllm: list[Any]
) -> None:
    """run() answers every padded prompt of a batch with the workload's 128 new tokens."""
    feeds = {
        "input_ids": np.array([[5, 6, 0], [7, 0, 0]], dtype=np.int32),
        "input_length": np.array([2, 1], dtype=np.int32),
    }
    with VllmBackend.load(_spec(token_workload), None) as backend:
        out = backend.run(feeds)
    assert out["output_ids"].shape == (2, 128) and out["output_ids"].dtype == np.int32
    assert out["output_ids"][:, :3].tolist() == [[1005, 1006, 1007], [1007, 1008, 1009]]
    assert [a[1]["prompt_token_ids"] for a in fake_vllm[0].added] == [[5, 6], [7]]


def test_a_batch_with_bad_lengths_is_refused(fake_vllm: list[Any], tmp_path: Path) -> None:
    """Prompt lengths outside 1..width are one line, before any request is added."""
    generator = load_generator(
        VllmModel.generated(cache_dir=tmp_path),
        vllm_settings(memory_gib=32.25, compute_slices=1),
        max_new_tokens=4,
    )
    feeds = {"input_ids": np.ones((1, 2), np.int32), "input_length": np.array([3], np.int32)}
    with pytest.raises(WorkloadError, match=r"must lie in 1\.\.2"):
        generate_batch(generator, feeds)
    assert fake_vllm[0].added == []


_REAL_ENGINE = textwrap.dedent(
    """
    import json, sys
    from mlperf_mig.engines.backends.vllm import (
        VllmModel, apply_worker_environment, bind_slice, load_generator, vllm_settings,
    )
    from mlperf_mig.workloads.llama3_1_8b.shape import DecoderShape
    import numpy as np

    apply_worker_environment()
    device = bind_slice()
    import torch

    free, total = torch.cuda.mem_get_info()
    shape = DecoderShape(vocab_size=1024, hidden=256, layers=2, heads=4, kv_heads=2, head_dim=64,
                         intermediate=512, max_positions=1024, rope_theta=10000.0,
                         bos_token_id=0, eos_token_id=1)
    model = VllmModel.generated(shape, cache_dir=sys.argv[1])
    settings = vllm_settings(memory_gib=total / 2**30, compute_slices=1, shape=shape,
                             max_model_len=512, max_num_seqs=4)
    with load_generator(model, settings, max_new_tokens=8) as generator:
        generator.add(1, np.arange(1, 20, dtype=np.int32))
        generator.add(2, np.arange(5, 9, dtype=np.int32))
        events = []
        while generator.pending:
            events.extend(generator.step())
    done = {e.request: e.tokens.tolist() for e in events if e.finished}
    firsts = sorted(e.request for e in events if e.first)
    print(json.dumps({"device": device, "done": done, "firsts": firsts}))
    """
)


@pytest.mark.gpu
def test_real_vllm_generates_on_this_gpu(tmp_path: Path) -> None:
    """A real vLLM engine on this GPU (or the slice in CUDA_VISIBLE_DEVICES), dummy weights of a
    small Llama: two requests finish with 8 tokens each, each first token flagged once.
    Runs in a child process, so that no CUDA context lives in the test process."""
    pytest.importorskip("vllm")
    done = subprocess.run(
        [sys.executable, "-c", _REAL_ENGINE, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["firsts"] == [1, 2]
    assert sorted(result["done"]) == ["1", "2"]
    assert all(len(tokens) == 8 for tokens in result["done"].values())
