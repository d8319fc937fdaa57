from __future__ import annotations

from pathlib import Path

from servesim.engine import simulate
from servesim.engine.request import Request
from servesim.engines.config import EngineConfig

SHARED = Path(__file__).resolve().parents[2] / "shared"


def reqs(*specs) -> list[Request]:
    """(id, arrival, prompt, output[, priority]) tuples -> requests."""
    return [Request(str(s[0]), float(s[1]), s[2], s[3], *(s[4:] or ())) for s in specs]


def run(requests, sched="vllm", cost="unit", **cfg):
    """Simulate on the unit step clock; `cfg` are EngineConfig fields (max_num_seqs defaults to 8 here)."""
    cfg.setdefault("max_num_seqs", 8)
    return simulate(requests, EngineConfig(**cfg), sched, cost, check_invariants=True)


def tokens(result) -> list[list[tuple[str, int]]]:
    """Per step: (id, num_scheduled_tokens) in schedule order."""
    return [[(e.id, e.num_scheduled_tokens) for e in s.scheduled] for s in result.steps]


def rows(result, step: int) -> list[tuple[str, int]]:
    """One step's (id, num_scheduled_tokens) in schedule order."""
    return [(e.id, e.num_scheduled_tokens) for e in result.steps[step].scheduled]


def first_step(result, rid: str) -> int:
    """The first step that scheduled `rid`."""
    return next(s.step for s in result.steps if any(e.id == rid for e in s.scheduled))


def why(result, step: int, rid: str) -> tuple:
    """(reason, detail) of `rid` waiting at `step`."""
    return next((w.reason, w.detail) for w in result.steps[step].waiting if w.id == rid)


def trtllm_run(requests, overlap: bool = False, **trt):
    """`--policy trtllm` on the unit step clock, blocks of 4 tokens; `trt` are TrtllmConfig fields; `overlap`:
    its overlap scheduler (off: `_executor_loop`, each step's outputs processed before the next is scheduled)."""
    from servesim.engines.trtllm.llm_args import TrtllmConfig

    trt = {"tokens_per_block": 4, "disable_overlap_scheduler": not overlap} | trt
    return simulate(requests, EngineConfig(trtllm=TrtllmConfig(**trt)), "trtllm", "unit", check_invariants=True)




def cli(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """Run the real entry point (errors become exit 2) in-process; (exit status, stdout, stderr)."""
    import sys

    from servesim.cli import main

    monkeypatch.setattr(sys, "argv", ["servesim", *args])
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code or 0
    out, err = capsys.readouterr()
    return code, out, err


def write_file(tmp_path: Path, name: str, text: str | bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def load_error(path: Path, **kw: object) -> str:
    """`load_trace(path)` must fail with one WorkloadError line that starts with the path; returns it."""
    import pytest

    from servesim.errors import WorkloadError
    from servesim.workloads import load_trace

    with pytest.raises(WorkloadError) as exc:
        load_trace(path, **kw)  # type: ignore[arg-type]
    msg = str(exc.value)
    assert msg.startswith(f"{path}: ") and "\n" not in msg and "\r" not in msg, msg
    return msg


def assert_same_schedule(expected: dict, actual: dict) -> None:
    """A recorded trace and servesim's agree (conformance/README.md, "What a match means"): every step, the
    preemption count, and each request's first scheduled, first token and finish steps and preemptions."""
    from servesim.engines.vllm.conformance import first_difference

    assert first_difference(expected, actual) is None
    assert actual["summary"]["total_preemptions"] == expected["summary"]["total_preemptions"]
    for rid, want in expected["requests"].items():
        got = actual["requests"][rid]
        for key in ("first_scheduled_step", "first_token_step", "finish_step", "num_preemptions"):
            assert got[key] == want[key], (rid, key)


def sglang_speculation(draw, reqs, sg):
    """SGLang's speculative decoding drawn onto a workload (Hypothesis): an algorithm, a chain of 1-4 drafts, and
    each request's accept list or the run's rates; returns the requests, the config section and the rates."""
    from dataclasses import replace

    from hypothesis import strategies as st

    algo = draw(st.sampled_from(["EAGLE", "EAGLE3", "NEXTN", "STANDALONE"]))
    k = draw(st.integers(1, 4))
    sg = replace(sg, speculative_algorithm=algo, speculative_num_steps=k, speculative_eagle_topk=1,
                 speculative_draft_model_path="llama-2-7b" if algo == "STANDALONE" else None)
    rates = None
    if draw(st.booleans()):
        rates = tuple(draw(st.lists(st.sampled_from([0.0, 0.3, 0.7, 1.0]), min_size=1, max_size=k)))
    else:
        reqs = [replace(r, accept=tuple(draw(st.lists(st.integers(0, k), min_size=1, max_size=3)))) for r in reqs]
    return reqs, sg, rates
