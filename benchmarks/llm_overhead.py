"""What the harness costs a generative workload (llama3.1-8b, the tiny generated decoder, ONNX
Runtime on the CPU), against a bare loop over the same ONNX Runtime session.

1. Tokens/s: LoadGen Offline through the harness's token SUT (TokenStreamSUT, KvCacheGenerator,
   TokenCompleter) against a bare greedy loop (prefill the batch, then one session run a token,
   argmax in numpy) over the same graph, the same prompts and the same batch. Target: >= 0.95.
   Both use one ONNX Runtime thread, and both end a prompt at an end token made after the
   first MIN_NEW_TOKENS, or at `--new-tokens` (the bare loop runs a batch until its every row
   ended, the harness refills a freed row: continuous batching), so both make the same tokens
   at batch 1; each line shows both counts. Beside tokens/s, each line shows the CPU time a
   token took (the process's, while the bare loop ran or LoadGen's test ran), which a busy
   machine disturbs far less than wall-clock rates, and the part of it inside ONNX Runtime's
   calls (the rest is the loop's, or the harness's and LoadGen's).
2. TTFT added by the harness: LoadGen SingleStream's p50 time to first token against the bare
   loop's p50 time from a prompt to its first token (one prefill step). Target: < 1 ms.
3. Memory per extra tiny instance: the resident memory a worker process adds by loading the
   decoder session and generating (VmRSS after against before, in a fresh process).

Every LoadGen test runs in its own process (LoadGen is process-global). Run it alone; it prints
the load average.

    .venv/bin/python benchmarks/llm_overhead.py [--batch 8] [--prompts 64] [--new-tokens 64]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

RATIO_TARGET = 0.95
TTFT_TARGET_MS = 1.0


def _session(tmp: Path) -> Any:
    import onnx
    import onnxruntime as ort

    from mlperf_mig.workloads.llama3_1_8b.decoder import build_decoder
    from mlperf_mig.workloads.llama3_1_8b.shape import TINY

    path = tmp / "tiny.onnx"
    if not path.exists():
        onnx.save(build_decoder(TINY, seed=0), path)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


class _Model:
    """The session's run as the decoder interface, keeping the CPU time its calls took (the
    calling thread's), so that each side's CPU per token splits into ONNX Runtime's and the
    rest (the loop, or the harness and LoadGen)."""

    def __init__(self, session: Any) -> None:
        self._session = session
        self._names = [o.name for o in session.get_outputs()]
        self.cpu_s = 0.0

    def __call__(self, feeds: Any) -> dict[str, np.ndarray]:
        began = time.thread_time()
        outputs = self._session.run(self._names, dict(feeds))
        self.cpu_s += time.thread_time() - began
        return dict(zip(self._names, outputs, strict=True))


def _end_ids() -> frozenset[int]:
    from mlperf_mig.workloads.llama3_1_8b.shape import TINY

    return frozenset(TINY.end_ids)


def _prompts(count: int) -> list[np.ndarray]:
    from mlperf_mig.workloads.llama3_1_8b.cnn_dailymail import SyntheticPrompts

    source = SyntheticPrompts(seed=0, max_prompt_tokens=192)
    return [source.prompt_ids(i) for i in range(count)]


# --- the bare loop --------------------------------------------------------------------------
def bare_generate(run: Any, prompts: list[np.ndarray], new_tokens: int) -> tuple[int, list[float]]:
    """Greedy generation of one batch: left-padded prefill, then one run a token, a row ending
    at an end token made after its first MIN_NEW_TOKENS as the workload's generator does (the
    batch runs until every row ended: a static batch); the tokens made and each prompt's time
    to its first token (s)."""
    from mlperf_mig.workloads.llama3_1_8b.decoder import past_key, past_value
    from mlperf_mig.workloads.llama3_1_8b.generate import MIN_NEW_TOKENS
    from mlperf_mig.workloads.llama3_1_8b.shape import TINY

    batch = len(prompts)
    width = max(len(p) for p in prompts)
    ids = np.zeros((batch, width), dtype=np.int64)
    mask = np.zeros((batch, width), dtype=np.int64)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = prompt
        mask[row, width - len(prompt) :] = 1
    positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0)
    empty = np.zeros((batch, TINY.kv_heads, 0, TINY.head_dim), dtype=np.float32)
    feeds: dict[str, np.ndarray] = {
        "input_ids": ids,
        "position_ids": positions,
        "attention_mask": mask,
    }
    for layer in range(TINY.layers):
        feeds[past_key(layer)] = empty
        feeds[past_value(layer)] = empty
    start = time.perf_counter()
    out = run(feeds)
    token = out["logits"][:, -1, :].argmax(axis=-1)
    first = [time.perf_counter() - start] * batch
    made = batch
    ends = _end_ids()
    ended = [False] * batch
    last = positions[:, -1]
    for step in range(1, new_tokens):
        mask = np.concatenate([mask, np.ones((batch, 1), dtype=np.int64)], axis=1)
        last = last + 1
        feeds = {"input_ids": token[:, None].astype(np.int64), "position_ids": last[:, None],
                 "attention_mask": mask}  # fmt: skip
        for layer in range(TINY.layers):
            feeds[past_key(layer)] = out[f"present.{layer}.key"]
            feeds[past_value(layer)] = out[f"present.{layer}.value"]
        out = run(feeds)
        token = out["logits"][:, -1, :].argmax(axis=-1)
        for row, value in enumerate(token.tolist()):
            if not ended[row]:
                made += 1
                ended[row] = step + 1 >= MIN_NEW_TOKENS and value in ends
        if all(ended):
            break
    return made, first


def part_bare(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    run = _Model(_session(tmp))
    prompts = _prompts(args.prompts)
    bare_generate(run, prompts[: args.batch], 4)  # warm
    start, cpu_start, run.cpu_s = time.perf_counter(), time.process_time(), 0.0
    tokens = 0
    for first in range(0, len(prompts), args.batch):
        made, _ = bare_generate(run, prompts[first : first + args.batch], args.new_tokens)
        tokens += made
    seconds, cpu, model_cpu = (
        time.perf_counter() - start,
        time.process_time() - cpu_start,
        run.cpu_s,
    )
    firsts = [bare_generate(run, [p], 1)[1][0] for p in prompts[:32]]
    return {
        "tokens_per_s": tokens / seconds,
        "tokens": tokens,
        "cpu_us_per_token": cpu / tokens * 1e6,
        "model_cpu_us_per_token": model_cpu / tokens * 1e6,
        "ttft_p50_ms": statistics.median(firsts) * 1e3,
    }


# --- the harness through LoadGen -------------------------------------------------------------
def part_harness(args: argparse.Namespace, tmp: Path, scenario: str) -> dict[str, Any]:
    import mlperf_loadgen as lg

    from mlperf_mig.harness.samples import InputLayout, SampleLibrary
    from mlperf_mig.harness.token_sut import (
        PROMPT_IDS,
        PROMPT_LENGTH,
        TokenCompleter,
        TokenStreamSUT,
    )  # fmt: skip
    from mlperf_mig.workloads.llama3_1_8b.generate import KvCacheGenerator
    from mlperf_mig.workloads.llama3_1_8b.shape import TINY

    prompts = _prompts(args.prompts)
    width = max(len(p) for p in prompts)
    library = SampleLibrary.allocate(
        (InputLayout(name=PROMPT_IDS, shape=(width,), dtype="int32"),
         InputLayout(name=PROMPT_LENGTH, shape=(), dtype="int32")),
        capacity=len(prompts), total_count=len(prompts),
    )  # fmt: skip

    class Source:
        total_count = performance_count = len(prompts)
        synthetic, description = True, "synthetic prompts"

        def fill(self, indices: Any, out: Any) -> None:
            for row, index in enumerate(indices):
                out[PROMPT_IDS][row, : len(prompts[index])] = prompts[index]
                out[PROMPT_LENGTH][row] = len(prompts[index])

    run = _Model(_session(tmp))
    batch = args.batch if scenario == "Offline" else 1
    generator = KvCacheGenerator(run, TINY, max_new_tokens=args.new_tokens, max_batch=batch)
    # warm, as the bare loop is
    generator.add(-1, prompts[0])
    while generator.pending:
        generator.step()
    completer = TokenCompleter(lg, needs_first_token=scenario != "Offline")
    sut = TokenStreamSUT(completer=completer, generator=generator, library=library, name="tiny")
    settings = lg.TestSettings()
    settings.scenario = getattr(lg.TestScenario, scenario)
    settings.mode = lg.TestMode.PerformanceOnly
    settings.use_token_latencies = True
    settings.min_duration_ms = 0
    # Offline: one query of every prompt (its min_query_count counts samples); SingleStream: 32
    settings.min_query_count = len(prompts) if scenario == "Offline" else 32
    settings.max_query_count = 0 if scenario == "Offline" else 32
    settings.offline_expected_qps = len(prompts) / 10
    settings.single_stream_expected_latency_ns = 50_000_000
    settings.performance_sample_count_override = len(prompts)
    log = lg.LogSettings()
    log.log_output.outdir = str(tmp)
    log.log_output.copy_summary_to_stdout = False
    qsl = lg.ConstructQSL(len(prompts), len(prompts), lambda i: library.load(i, Source()),
                          library.unload)  # fmt: skip
    lg_sut = lg.ConstructFastSUT(sut.issue, sut.flush)
    sut.start()
    cpu_start, run.cpu_s = time.process_time(), 0.0
    lg.StartTestWithLogSettings(lg_sut, qsl, settings, log)
    sut.stop()
    cpu = time.process_time() - cpu_start
    lg.DestroyQSL(qsl)
    lg.DestroyFastSUT(lg_sut)
    from mlperf_mig.harness.logs import parse_detail_log

    records = parse_detail_log(tmp)
    return {
        "tokens_per_s": records.get("result_tokens_per_second"),
        "tokens": completer.tokens,
        "cpu_us_per_token": cpu / max(completer.tokens, 1) * 1e6,
        "model_cpu_us_per_token": run.cpu_s / max(completer.tokens, 1) * 1e6,
        "ttft_p50_ms": (records.get("result_first_token_50.00_percentile_latency_ns") or 0) / 1e6,
        "samples": sut.completed,
        "error": sut.error,
    }


def part_memory(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    import onnxruntime  # noqa: F401 - the baseline holds the library, as a worker does

    before = _rss_kib()
    from mlperf_mig.workloads.llama3_1_8b.generate import KvCacheGenerator
    from mlperf_mig.workloads.llama3_1_8b.shape import TINY

    generator = KvCacheGenerator(_Model(_session(tmp)), TINY, max_new_tokens=args.new_tokens,
                                 max_batch=args.batch)  # fmt: skip
    for request, prompt in enumerate(_prompts(args.batch)):
        generator.add(request, prompt)
    while generator.pending:
        generator.step()
    return {"rss_added_mib": (_rss_kib() - before) / 1024}


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _child(part: str, args: argparse.Namespace) -> dict[str, Any]:
    command = [sys.executable, __file__, "--part", part, "--batch", str(args.batch),
               "--prompts", str(args.prompts), "--new-tokens", str(args.new_tokens)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=True, timeout=900)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--part", choices=("bare", "offline", "singlestream", "memory"))
    args = parser.parse_args()
    if args.part is not None:
        with tempfile.TemporaryDirectory() as folder:
            tmp = Path(folder)
            if args.part == "bare":
                out = part_bare(args, tmp)
            elif args.part == "memory":
                out = part_memory(args, tmp)
            else:
                out = part_harness(
                    args, tmp, "Offline" if args.part == "offline" else "SingleStream"
                )
        print(json.dumps(out))
        return 0
    print(f"load average before: {os.getloadavg()}")
    ratios, cpu_ratios, added = [], [], []
    for round_ in range(args.rounds):  # alternating, in the same conditions
        bare = _child("bare", args)
        harness = _child("offline", args)
        stream = _child("singlestream", args)
        ratio = harness["tokens_per_s"] / bare["tokens_per_s"]
        ratios.append(ratio)
        cpu_ratio = bare["cpu_us_per_token"] / harness["cpu_us_per_token"]
        cpu_ratios.append(cpu_ratio)
        added.append(stream["ttft_p50_ms"] - bare["ttft_p50_ms"])
        print(f"round {round_ + 1}: bare {bare['tokens_per_s']:.0f} tokens/s, harness "
              f"{harness['tokens_per_s']:.0f} tokens/s (x{ratio:.3f}); CPU per token bare "
              f"{bare['cpu_us_per_token']:.1f} us, harness {harness['cpu_us_per_token']:.1f} us "
              f"(x{cpu_ratio:.3f}), of which in ONNX Runtime bare "
              f"{bare['model_cpu_us_per_token']:.1f} us, harness "
              f"{harness['model_cpu_us_per_token']:.1f} us; tokens bare {bare['tokens']}, harness {harness['tokens']}; "
              f"TTFT p50 bare {bare['ttft_p50_ms']:.3f} ms, harness "
              f"{stream['ttft_p50_ms']:.3f} ms")  # fmt: skip
    memory = _child("memory", args)
    print(f"tokens/s harness / bare (batch {args.batch}, {args.new_tokens} new tokens): median "
          f"x{statistics.median(ratios):.3f} (target >= {RATIO_TARGET}); by CPU time per token "
          f"x{statistics.median(cpu_ratios):.3f}")  # fmt: skip
    print(f"TTFT added by the harness at p50: median {statistics.median(added):.3f} ms "
          f"(target < {TTFT_TARGET_MS} ms)")  # fmt: skip
    print(f"memory per extra tiny instance: {memory['rss_added_mib']:.1f} MiB resident")
    print(f"load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
