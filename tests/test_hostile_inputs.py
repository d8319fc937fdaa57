"""Hostile input files: each is refused with one line (`FILE:LINE: field: what was expected`), never a traceback.

Conformance scenarios and traces, measured CSVs for `servesim calibrate`, Hugging Face config.json, GPU TOML,
calibrated profiles, and the toy/unit/roofline cost models' parameters.
"""

from __future__ import annotations

import gzip
import json
import math
import re
from pathlib import Path

import pytest
from helpers import SHARED, cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servesim.cost import CostParams, Roofline, StepShape, ToyCost, UnitCost
from servesim.cost.calibrate import read_measurements
from servesim.cost.profile import load_profile, profile_dict
from servesim.cost.specs import builtin_models, load_gpu, load_model
from servesim.engines.vllm.conformance import first_difference, load_scenario, load_trace, scenario_requests
from servesim.errors import ConfigError, ServesimError, WorkloadError

ROOT = Path(__file__).resolve().parents[1]


def refused(exc: pytest.ExceptionInfo, path: Path | str | None, *fragments: str, line: int | None = None) -> str:
    """The message is one line, starts with the file (and line) and holds every fragment (the field first)."""
    msg = str(exc.value)
    assert "\n" not in msg and "\r" not in msg, msg
    if path is not None:
        assert msg.startswith(f"{path}:" if line is None else f"{path}:{line}:"), msg
    for fragment in fragments:
        assert fragment in msg, (fragment, msg)
    return msg


# -- conformance scenarios -------------------------------------------------------------------------------------

SCENARIO = {
    "name": "tiny",
    "config": {"max_num_batched_tokens": 64, "max_num_seqs": 4, "enable_chunked_prefill": True, "block_size": 16,
               "num_gpu_blocks": 100, "long_prefill_token_threshold": 0, "policy": "fcfs"},
    "requests": [{"id": "a", "arrival_step": 0, "prompt_len": 10, "output_len": 5},
                 {"id": "b", "arrival_step": 1, "prompt_len": 20, "output_len": 3},
                 {"id": "c", "arrival_step": 1, "prompt_len": 30, "output_len": 2},
                 {"id": "d", "arrival_step": 4, "prompt_len": 40, "output_len": 1}],
}


def write_scenario(tmp_path: Path, mutate=None) -> Path:
    data = json.loads(json.dumps(SCENARIO))
    if mutate:
        mutate(data)
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(data, indent=1))  # one value a line: every field has its own line
    return path


def line_of(path: Path, needle: str, after: str | None = None) -> int:
    """1-based line of the first `needle` (after the first `after`) in the file."""
    lines = path.read_text().split("\n")
    start = next(i for i, s in enumerate(lines) if after in s) if after else 0
    return next(i for i, s in enumerate(lines) if i >= start and needle in s) + 1


def test_the_tiny_scenario_is_valid(tmp_path):
    assert load_scenario(write_scenario(tmp_path))["name"] == "tiny"


SCENARIO_CASES = [
    # (mutation, error class, field named, fragment of the expectation)
    (lambda d: d.update(requests=[]), WorkloadError, "requests:", "a non-empty list"),
    (lambda d: d["requests"][3].pop("prompt_len"), WorkloadError, "requests[3].prompt_len:", "missing field"),
    (lambda d: d["requests"][0].pop("id"), WorkloadError, "requests[0].id:", "missing field"),
    (lambda d: d["requests"][2].pop("arrival_step"), WorkloadError, "requests[2].arrival_step:",
     "exactly one of arrival_step and arrival_time"),
    (lambda d: d["requests"][2].update(arrival_time=1.5), WorkloadError, "requests[2].arrival_time:",
     "exactly one of"),
    (lambda d: d["requests"][1].update(prompt_len="20"), WorkloadError, "requests[1].prompt_len:",
     'an integer >= 1, got "20"'),
    (lambda d: d["requests"][1].update(output_len=True), WorkloadError, "requests[1].output_len:", "got true"),
    (lambda d: d["requests"][1].update(prompt_len=20.0), WorkloadError, "requests[1].prompt_len:", "got 20.0"),
    (lambda d: d["requests"][2].update(prompt_len=0), WorkloadError, "requests[2].prompt_len:", "got 0"),
    (lambda d: d["requests"][2].update(output_len=-4), WorkloadError, "requests[2].output_len:", "got -4"),
    (lambda d: d["requests"][0].update(arrival_step=-1), WorkloadError, "requests[0].arrival_step:", "got -1"),
    (lambda d: d["requests"][0].update(arrival_step=math.nan), WorkloadError, "requests[0].arrival_step:",
     "got NaN"),
    (lambda d: d["requests"][0].update(arrival_step=10**400), WorkloadError, "requests[0].arrival_step:",
     "a finite number"),
    (lambda d: (d["config"].update(step_duration=0.1), d["requests"][0].pop("arrival_step"),
                d["requests"][0].update(arrival_time=1e308)), WorkloadError, "requests[0].arrival_time:",
     "arrival_time / step_duration, is finite"),
    (lambda d: d["requests"][0].update(priority="high"), WorkloadError, "requests[0].priority:", "an integer"),
    (lambda d: d["requests"][0].update(prio=1), WorkloadError, "requests[0].prio:", "unknown key"),
    (lambda d: d["requests"][3].update(id="a"), WorkloadError, "requests[3].id:", "every id once"),
    (lambda d: d["requests"].append(7), WorkloadError, "requests[4]:", "a request object"),
    (lambda d: d.update(requests={"a": 1}), WorkloadError, "requests:", "a non-empty list"),
    (lambda d: d.pop("requests"), WorkloadError, "requests:", "missing field"),
    (lambda d: d.update(extra=1), WorkloadError, "extra:", "unknown key"),
    (lambda d: d["config"].update(max_num_seq=4), ConfigError, "config.max_num_seq:", "unknown key"),
    (lambda d: d["config"].pop("block_size"), ConfigError, "config.block_size:", "missing field"),
    (lambda d: d["config"].update(max_num_seqs="4"), ConfigError, "config.max_num_seqs:", 'got "4"'),
    (lambda d: d["config"].update(block_size=True), ConfigError, "config.block_size:", "got true"),
    (lambda d: d["config"].update(block_size=0), ConfigError, "config.block_size:", "an integer >= 1"),
    (lambda d: d["config"].update(num_gpu_blocks=1), ConfigError, "config.num_gpu_blocks:", "an integer >= 2"),
    (lambda d: d["config"].update(long_prefill_token_threshold=-1), ConfigError,
     "config.long_prefill_token_threshold:", "got -1"),
    (lambda d: d["config"].update(enable_chunked_prefill="yes"), ConfigError, "config.enable_chunked_prefill:",
     "true or false"),
    (lambda d: d["config"].update(policy="lifo"), ConfigError, "config.policy:", '"fcfs" or "priority"'),
    (lambda d: d["config"].update(watermark=math.inf), ConfigError, "config.watermark:", "in [0, 1)"),
    (lambda d: d["config"].update(step_duration=0), ConfigError, "config.step_duration:", "> 0"),
    (lambda d: d["config"].update(enable_prefix_caching="on"), ConfigError, "config.enable_prefix_caching:",
     "true or false"),
    # what the engine refuses, with the file named
    (lambda d: d["config"].update(max_num_batched_tokens=2), ConfigError, "config:", "must be >= max_num_seqs"),
    (lambda d: d["config"].update(num_gpu_blocks=2), ConfigError, "config:", "KV blocks"),
    (lambda d: d.update(config=[1]), ConfigError, "config:", "an object"),
]


@pytest.mark.parametrize("mutate, error, field, expected", SCENARIO_CASES)
def test_bad_scenario_is_one_line_naming_file_line_and_field(tmp_path, mutate, error, field, expected):
    path = write_scenario(tmp_path, mutate)
    with pytest.raises(error) as exc:
        load_scenario(path)
    msg = refused(exc, path, field, expected)
    assert re.match(re.escape(str(path)) + r"(:\d+)?: ", msg)


def test_scenario_field_errors_give_the_line_of_the_value_or_of_the_request(tmp_path):
    path = write_scenario(tmp_path, lambda d: d["requests"][2].update(prompt_len="30"))
    with pytest.raises(WorkloadError) as exc:
        load_scenario(path)
    refused(exc, path, "requests[2].prompt_len:", line=line_of(path, '"30"'))
    # a missing field: the line where its request object starts
    path = write_scenario(tmp_path, lambda d: d["requests"][3].pop("output_len"))
    with pytest.raises(WorkloadError) as exc:
        load_scenario(path)
    text = path.read_text()
    start = text.index('"id": "d"')
    refused(exc, path, "requests[3].output_len:", line=text.count("\n", 0, text.rindex("{", 0, start)) + 1)
    path = write_scenario(tmp_path, lambda d: d["config"].update(max_num_seq=3))
    with pytest.raises(ConfigError) as exc:
        load_scenario(path)
    refused(exc, path, "config.max_num_seq:", line=line_of(path, '"max_num_seq"'))


@pytest.mark.parametrize("content, fragment", [
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "binary content"),
    (b'{"name": "caf\xe9"}', "binary content, not UTF-8"),
    (b"{config: 1}", "not valid JSON"),
    (b'{"config": {}, "requests": [}', "not valid JSON"),
    (b"", "not valid JSON"),
    (b"[1, 2, 3]", "expected a JSON object with 'config' and 'requests', got [1, 2, 3]"),
    (b'"a string"', "expected a JSON object"),
    (b"[" * 100_000, "nested too deeply"),
    (b'{"config": ' + b"9" * 5000 + b"}", "not readable JSON"),
])
def test_unreadable_scenario_files(tmp_path, content, fragment):
    path = tmp_path / "s.json"
    path.write_bytes(content)
    with pytest.raises(WorkloadError) as exc:
        load_scenario(path)
    refused(exc, path, fragment)


def test_json_syntax_error_names_its_line(tmp_path):
    path = tmp_path / "s.json"
    path.write_text('{\n "config": {},\n "requests": [\n  {"id": "a",,}\n ]\n}\n')
    with pytest.raises(WorkloadError) as exc:
        load_scenario(path)
    refused(exc, path, "not valid JSON", line=4)


def test_scenario_path_that_is_a_directory_or_missing(tmp_path):
    with pytest.raises(WorkloadError) as exc:
        load_scenario(tmp_path)
    refused(exc, tmp_path, "is a directory")
    with pytest.raises(WorkloadError) as exc:
        load_scenario(tmp_path / "nope.json")
    refused(exc, tmp_path / "nope.json", "no such file")


def test_step_duration_scales_arrival_times_onto_the_step_clock(tmp_path):
    def timed(d):
        d["config"]["step_duration"] = 0.5
        for r, t in zip(d["requests"], (0.0, 0.2, 1.2, 3.0)):
            del r["arrival_step"]
            r["arrival_time"] = t

    reqs = scenario_requests(load_scenario(write_scenario(tmp_path, timed)))
    assert [r.arrival_time for r in reqs] == [0.0, 1.0, 3.0, 6.0]  # ceil(arrival_time / step_duration)


def test_cli_conform_refuses_a_bad_scenario_in_one_line_with_exit_2(monkeypatch, capsys, tmp_path):
    path = write_scenario(tmp_path, lambda d: d["requests"][1].update(prompt_len=-1))
    code, out, err = cli(monkeypatch, capsys, "conform", str(path))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and str(path) in err and "requests[1].prompt_len" in err


# -- conformance traces ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("content, fragment", [
    (b"\x00\x01\x02", "binary content"),
    (b"\x1f\x8b\x08junk", "not a readable gzip file"),
    (b"[1]", "expected a JSON object with 'steps'"),
    (b'{"steps": 3}', "steps: expected a list of step objects"),
    (b'{"steps": [{"step": 0, "scheduled": []}]}', "steps[0].preempted: missing field"),
    (b'{"steps": [{"step": 0, "scheduled": [{"id": "a"}], "preempted": [], "finished": [],'
     b' "free_blocks_after_schedule": 1, "free_blocks_after_step": 1}]}', "steps[0].scheduled[0].num_scheduled_tokens"),
])
def test_bad_trace_files(tmp_path, content, fragment):
    path = tmp_path / "t.json"
    path.write_bytes(content)
    with pytest.raises(WorkloadError) as exc:
        load_trace(path)
    refused(exc, path, fragment)
    with pytest.raises(WorkloadError) as exc:
        load_trace(tmp_path)
    refused(exc, tmp_path, "is a directory")


def test_gzipped_trace_reads_and_first_difference_refuses_a_malformed_one(tmp_path):
    trace = {"steps": [{"step": 0, "scheduled": [], "preempted": [], "finished": [], "free_blocks_after_schedule": 1,
                        "free_blocks_after_step": 1}]}
    (tmp_path / "t.json.gz").write_bytes(gzip.compress(json.dumps(trace).encode()))
    assert load_trace(tmp_path / "t.json.gz") == trace
    with pytest.raises(WorkloadError) as exc:
        first_difference({"steps": [{"step": 0}]}, trace)
    refused(exc, None, "steps[0].scheduled: missing field")


def test_round1_traces_load(shared):
    for path in sorted((shared / "conformance" / "traces").glob("*.json")):
        assert load_trace(path)["steps"]


# -- calibrate's measured CSV ----------------------------------------------------------------------------------

HEADER = "operator,tp,num_tokens,size_bytes,decodes,context,prefill,time_ms\n"


@pytest.mark.parametrize("body, line, fragments", [
    (HEADER + "qkv_proj,1,512,,,,,0.2\nqkv_proj,1,512,,,,,abc\n", 3, ["time_ms:", 'got "abc"']),
    (HEADER + "qkv_proj,1,512,,,,,nan\n", 2, ["time_ms:", "a finite number > 0", '"nan"']),
    (HEADER + "qkv_proj,1,512,,,,,inf\n", 2, ["time_ms:", '"inf"']),
    (HEADER + "qkv_proj,1,512,,,,,-0.5\n", 2, ["time_ms:", '"-0.5"']),
    (HEADER + "qkv_proj,1,512,,,,,0\n", 2, ["time_ms:", '"0"']),
    (HEADER + "qkv_proj,1,512,,,,,\n", 2, ["time_ms:", "empty"]),
    (HEADER + "qkv_proj,x,512,,,,,0.2\n", 2, ["tp:", 'got "x"']),
    (HEADER + "qkv_proj,1,51.5,,,,,0.2\n", 2, ["num_tokens:", "an integer", '"51.5"']),
    (HEADER + "qkv_proj,1,,,,,,0.2\n", 2, ["num_tokens:", "empty"]),
    (HEADER + "qkv_proj,1,1e12,,,,,0.2\n", 2, ["num_tokens:", "an integer in 1.."]),
    (HEADER + "all_reduce,2,,nan,,,,0.2\n", 2, ["size_bytes:", '"nan"']),
    (HEADER + "all_reduce,1,,1024,,,,0.2\n", 2, ["tp:", "tp >= 2"]),
    (HEADER + "step,1,,,-3,100,,1.0\n", 2, ["decodes:", '"-3"']),
    (HEADER + "step,1,,,4,100,512x,1.0\n", 2, ["prefill:", "TOKENS@CONTEXT"]),
    (HEADER + "step,1,,,,,,1.0\n", 2, ["decodes:", "a step row needs"]),
    (HEADER + "matmul,1,8,,,,,0.1\n", 2, ["operator:", "expected one of qkv_proj", '"matmul"']),
    (HEADER + "qkv_proj,1,512,,,,,0.2,9\n", 2, ["9 values for the header's 8 columns"]),
    ("operator,tp,num_tokens\nqkv_proj,1,5\n", 1, ["header: missing column time_ms", HEADER.strip()]),
    ("tp,num_tokens\n1,5\n", 1, ["header: missing columns operator, time_ms", HEADER.strip()]),
    ("operator,tp,time_ms\nqkv_proj,1,0.3\n", 2, ["num_tokens:", "need the column 'num_tokens'", HEADER.strip()]),
    ("operator,time_ms,time_ms\n", 1, ["header: column 'time_ms' twice"]),
    ("# nothing but a comment\n\n", None, ["no header and no measurements"]),
    (HEADER, None, ["a header and no measurements"]),
])
def test_bad_measured_csv(tmp_path, body, line, fragments):
    path = tmp_path / "m.csv"
    path.write_text(body)
    with pytest.raises(ConfigError) as exc:
        read_measurements(path)
    refused(exc, path, *fragments, line=line)


@pytest.mark.parametrize("content, fragment", [
    (b"PK\x03\x04\x14\x00\x00\x00", "binary content"),
    (HEADER.encode() + b"qkv_proj,1,512,,,,,0.\xff\n", "binary content, not UTF-8"),
    (HEADER.encode() + b'qkv_proj,1,"512\n', None),  # an unterminated quote: a line, refused or read
])
def test_binary_measured_csv(tmp_path, content, fragment):
    path = tmp_path / "m.csv"
    path.write_bytes(content)
    try:
        read_measurements(path)
    except ConfigError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(f"{path}:")
        assert fragment is None or fragment in str(exc)
    else:
        assert fragment is None


def test_measured_csv_directory_and_missing_file(tmp_path):
    with pytest.raises(ConfigError) as exc:
        read_measurements(tmp_path)
    refused(exc, tmp_path, "is a directory")
    with pytest.raises(ConfigError) as exc:
        read_measurements(tmp_path / "nope.csv")
    refused(exc, tmp_path / "nope.csv", "no such file")


def documented_csv_blocks() -> list[str]:
    """The measured-CSV examples the docs show: docs/cost-models.md's and calibrate.py's docstring."""
    blocks = re.findall(r"```\n(operator,tp,.*?)```", (ROOT / "docs" / "cost-models.md").read_text(), re.S)
    doc = (ROOT / "src" / "servesim" / "cost" / "calibrate.py").read_text()
    blocks.append("\n".join(s.strip() for s in doc[doc.index("    operator,tp,"):].split("\n\n")[0].split("\n")))
    return blocks


@pytest.mark.parametrize("block", documented_csv_blocks())
def test_the_documented_csv_example_with_comments_reads(tmp_path, block):
    assert "#" in block  # the docs comment their rows
    path = tmp_path / "m.csv"
    path.write_text("# measured on one A100\n\n" + block)
    rows = read_measurements(path)
    assert [r.operator for r in rows] == ["qkv_proj", "all_reduce", "step"]
    assert rows[0].num_tokens == 512 and rows[1].size_bytes == 1048576 and rows[2].shape.num_decodes == 32
    assert rows[2].time == pytest.approx(0.0142)


def test_csv_errors_after_comment_lines_count_physical_lines(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("# header next\n" + HEADER + "# a comment\n\nqkv_proj,1,512,,,,,oops  # bad\n")
    with pytest.raises(ConfigError) as exc:
        read_measurements(path)
    refused(exc, path, "time_ms:", '"oops"', line=5)


def test_cli_calibrate_refuses_a_bad_csv_with_exit_2(monkeypatch, capsys, tmp_path):
    path = tmp_path / "m.csv"
    path.write_bytes(b"\x00\xff binary")
    code, _, err = cli(monkeypatch, capsys, "calibrate", str(path), "--model", "llama-2-7b", "--gpu", "a100")
    assert code == 2 and err.count("\n") == 1 and str(path) in err and "binary content" in err


# -- model config.json -----------------------------------------------------------------------------------------

TINY_MODEL = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 8,
              "num_key_value_heads": 4, "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 2048}


def write_model(tmp_path: Path, **fields) -> Path:
    config = {k: v for k, v in (TINY_MODEL | fields).items() if v is not ...}  # `...` drops a field
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config, indent=2))  # json.dumps writes NaN and Infinity, as some tools do
    return path


@pytest.mark.parametrize("fields, field, expected", [
    ({"num_attention_heads": 0}, "num_attention_heads", "an integer >= 1, got 0"),
    ({"num_attention_heads": -8}, "num_attention_heads", "got -8"),
    ({"hidden_size": 0}, "hidden_size", "got 0"),
    ({"hidden_size": -64}, "hidden_size", "got -64"),
    ({"num_hidden_layers": 0}, "num_hidden_layers", "got 0"),
    ({"num_key_value_heads": 3}, "num_key_value_heads", "a divisor of num_attention_heads (8), got 3"),
    ({"num_key_value_heads": 0}, "num_key_value_heads", "got 0"),
    ({"vocab_size": "100"}, "vocab_size", 'got "100"'),
    ({"hidden_size": "sixty-four"}, "hidden_size", 'got "sixty-four"'),
    ({"intermediate_size": 128.0}, "intermediate_size", "got 128.0"),
    ({"hidden_size": math.nan}, "hidden_size", "got NaN"),
    ({"num_hidden_layers": math.inf}, "num_hidden_layers", "got Infinity"),
    ({"vocab_size": -math.inf}, "vocab_size", "got -Infinity"),
    ({"num_hidden_layers": True}, "num_hidden_layers", "got true"),
    ({"num_attention_heads": False}, "num_attention_heads", "got false"),
    ({"num_attention_heads": 128}, "num_attention_heads", "at most hidden_size (64)"),
    ({"hidden_size": 10**40}, "hidden_size", "an integer in 1..2147483647"),
    ({"max_position_embeddings": 0}, "max_position_embeddings", "got 0"),
    ({"max_position_embeddings": -1}, "max_position_embeddings", "got -1"),
    ({"max_position_embeddings": 4096.5}, "max_position_embeddings", "got 4096.5"),
    ({"max_position_embeddings": math.nan}, "max_position_embeddings", "got NaN"),
    ({"max_position_embeddings": "4k"}, "max_position_embeddings", 'got "4k"'),
    ({"max_position_embeddings": True}, "max_position_embeddings", "got true"),
    ({"tie_word_embeddings": "false"}, "tie_word_embeddings", "true or false"),
    ({"torch_dtype": "int3"}, "torch_dtype", "one of float16"),
    ({"torch_dtype": 16}, "torch_dtype", "got 16"),
    ({"model_type": ["llama"]}, "model_type", "a string"),
    ({"num_local_experts": 8}, "num_experts_per_tok", "missing field; expected an integer in 1..num_local_experts"),
    ({"num_local_experts": 8, "num_experts_per_tok": 9}, "num_experts_per_tok", "got 9"),
])
def test_bad_model_config_is_one_line_with_line_and_field(tmp_path, fields, field, expected):
    path = write_model(tmp_path, **fields)
    with pytest.raises(ConfigError) as exc:
        load_model(str(path))
    key = field if field in fields else None
    refused(exc, path, f"{field}: ", expected, line=line_of(path, f'"{key}"') if key else None)


@pytest.mark.parametrize("missing", ["hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"])
def test_model_config_missing_required_field(tmp_path, missing):
    path = write_model(tmp_path, **{missing: ...})
    with pytest.raises(ConfigError) as exc:
        load_model(str(path))
    refused(exc, path, f"{missing}: missing field")


@pytest.mark.parametrize("content, fragment", [
    (b"\x7fELF\x02\x01\x01\x00", "binary content"),
    (b"\xff\xfe{\x00", "binary content"),
    (b"{'hidden_size': 64}", "not valid JSON"),
    (b"[64, 2, 8]", "expected a JSON object (a Hugging Face config.json), got [64, 2, 8]"),
    (b"null", "expected a JSON object"),
])
def test_unreadable_model_config(tmp_path, content, fragment):
    path = tmp_path / "config.json"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as exc:
        load_model(str(path))
    refused(exc, path, fragment)


def test_model_path_that_is_a_directory(tmp_path):
    with pytest.raises(ConfigError) as exc:
        load_model(str(tmp_path))
    refused(exc, tmp_path, "is a directory", "config.json")


def test_max_position_embeddings_is_read_and_none_when_absent(tmp_path):
    assert load_model(str(write_model(tmp_path))).max_position_embeddings == 2048
    assert load_model(str(write_model(tmp_path, max_position_embeddings=None))).max_position_embeddings is None
    assert load_model(str(write_model(tmp_path, max_position_embeddings=...))).max_position_embeddings is None


def test_builtin_models_load_with_their_max_position_embeddings():
    values = {name: load_model(name).max_position_embeddings for name in builtin_models()}
    assert values == {"bloom-176b": None,  # BLOOM's config.json has none (ALiBi positions)
                      "llama-2-70b": 4096, "llama-2-7b": 4096, "llama-3-70b": 8192, "llama-3-8b": 8192,
                      "mistral-7b": 32768, "mixtral-8x7b": 32768, "qwen2.5-72b": 131072, "qwen2.5-7b": 131072,
                      "llama-3.1-70b": 131072, "llama-3.1-8b": 131072, "qwen3-32b": 40960,
                      "llama-3.1-405b": 131072, "minimax-m2.5": 196608, "qwen3-235b-a22b": 40960,
                      "qwen3-30b-a3b": 40960, "deepseek-v3": 163840, "deepseek-r1": 163840,
                      "qwen3-235b-a22b-fp8": 40960, "kimi-k2.5": 262144, "gpt-oss-120b": 131072,
                      "qwen3.5-397b-a17b": 262144, "qwen3.5-397b-a17b-nvfp4": 262144, "glm-5": 202752,
                      "glm-5-fp8": 202752}


def test_modelspec_built_in_python_refuses_nan_and_bools():
    from servesim.cost.specs import ModelSpec

    good = dict(name="m", hidden_size=64, num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=8,
                head_dim=8, intermediate_size=128, vocab_size=100)
    for field, value in [("hidden_size", math.nan), ("vocab_size", True), ("max_position_embeddings", 0),
                         ("num_key_value_heads", 3), ("torch_dtype", ["bf16"])]:
        with pytest.raises(ConfigError, match=f"model m: {field}: expected"):
            ModelSpec(**(good | {field: value}))


# -- GPU TOML --------------------------------------------------------------------------------------------------

GPU = ('name = "mygpu"\ndense_bf16_tflops = 100.0\nmemory_bandwidth_gb_s = 1000.0\nmemory_gib = 24\n'
       'interconnect_gb_s = 64\npcie_gb_s = 64\n\n[efficiency]\ncompute = 0.5\nkernel_latency_us = 4.0\n')


@pytest.mark.parametrize("old, new, field, expected", [
    ("dense_bf16_tflops = 100.0", "dense_bf16_tflops = nan", "dense_bf16_tflops", "got NaN"),
    ("dense_bf16_tflops = 100.0", "dense_bf16_tflops = inf", "dense_bf16_tflops", "got Infinity"),
    ("dense_bf16_tflops = 100.0", "dense_bf16_tflops = 0", "dense_bf16_tflops", "> 0, got 0"),
    ("memory_bandwidth_gb_s = 1000.0", "memory_bandwidth_gb_s = -1.0", "memory_bandwidth_gb_s", "got -1.0"),
    ("memory_gib = 24", 'memory_gib = "24"', "memory_gib", 'got "24"'),
    ("memory_gib = 24", "memory_gib = true", "memory_gib", "got true"),
    ("pcie_gb_s = 64", "", "pcie_gb_s", "missing field"),
    ("compute = 0.5", "compute = 1.5", "efficiency.compute", "a fraction in (0, 1], got 1.5"),
    ("compute = 0.5", "compute = nan", "efficiency.compute", "got NaN"),
    ("compute = 0.5", "compute = 0", "efficiency.compute", "got 0"),
    ("kernel_latency_us = 4.0", "kernel_latency_us = -4.0", "efficiency.kernel_latency_us", "got -4.0"),
    ("kernel_latency_us = 4.0", "kernel_latency_us = inf", "efficiency.kernel_latency_us", "got Infinity"),
    ("compute = 0.5", "computee = 0.5", "efficiency.computee", "unknown key"),
    ('name = "mygpu"', 'name = "mygpu"\nmemory_gb = 24', "memory_gb", "unknown key"),
    ('name = "mygpu"', "name = 7", "name", "a string"),
    ('name = "mygpu"', 'aliases = "g"', "aliases", "a list of strings"),
])
def test_bad_gpu_toml(tmp_path, old, new, field, expected):
    path = tmp_path / "mygpu.toml"
    path.write_text(GPU.replace(old, new))
    with pytest.raises(ConfigError) as exc:
        load_gpu(str(path))
    key = new.split("\n")[-1].split(" =")[0] if new else None
    line = line_of(path, f"{key} =", after="[efficiency]" if field.startswith("efficiency.") else None) if key else None
    refused(exc, path, f"{field}: ", expected, line=line)


@pytest.mark.parametrize("content, fragment, line", [
    (b"\x00\x01\x02", "binary content", 1),
    (b"dense_bf16_tflops = 1.0\nmemory_gib = = 3\n", "not valid TOML", 2),
    (b"efficiency = 3\n", "efficiency: expected a table [efficiency], got 3", None),
])
def test_unreadable_gpu_toml(tmp_path, content, fragment, line):
    path = tmp_path / "g.toml"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as exc:
        load_gpu(str(path))
    refused(exc, path, fragment, line=line)


# -- profiles ----------------------------------------------------------------------------------------------------


def write_profile(tmp_path: Path, mutate=None) -> Path:
    params = CostParams(0.8, 0.6, 3e-6, 1e-3, ((2e-5, 0.5),))
    data = profile_dict("llama-2-7b", "a100-80gb", 1, params, {2: ((2e-5, 0.5),)})
    if mutate:
        mutate(data)
    path = tmp_path / "fit.json"
    path.write_text(json.dumps(data, indent=2))
    return path


@pytest.mark.parametrize("key, value, expected", [
    ("compute_efficiency", math.nan, "a fraction in (0, 1], got NaN"),
    ("compute_efficiency", 0.0, "got 0.0"),
    ("memory_efficiency", -0.5, "got -0.5"),
    ("memory_efficiency", math.inf, "got Infinity"),
    ("memory_efficiency", 1.5, "got 1.5"),
    ("kernel_latency_s", -1e-6, "a finite number of seconds >= 0, got -1e-06"),
    ("kernel_latency_s", math.nan, "got NaN"),
    ("step_overhead_s", math.inf, "got Infinity"),
    ("step_overhead_s", "1ms", 'got "1ms"'),
    ("step_overhead_s", True, "got true"),
    ("step_overhead_s", 10**400, "a finite number of seconds >= 0"),
])
def test_bad_profile_params(tmp_path, key, value, expected):
    path = write_profile(tmp_path, lambda d: d["params"].update({key: value}))
    with pytest.raises(ConfigError) as exc:
        load_profile(path)
    refused(exc, path, f"params.{key}: ", expected, line=line_of(path, f'"{key}"'))


def test_a_zero_latency_from_the_fit_bounds_is_a_valid_profile(tmp_path):
    path = write_profile(tmp_path, lambda d: d["params"].update(kernel_latency_s=0.0, step_overhead_s=0.0))
    assert load_profile(path).params.kernel_latency == 0.0


@pytest.mark.parametrize("mutate, field, expected", [
    (lambda d: d["params"]["allreduce"].update({"2": [[1e-5, 0.0]]}), "params.allreduce.2[0]", "(0, 1]"),
    (lambda d: d["params"]["allreduce"].update({"2": [[math.nan, 0.5]]}), "params.allreduce.2[0]", "NaN"),
    (lambda d: d["params"]["allreduce"].update({"2": [[-1.0, 0.5]]}), "params.allreduce.2[0]", "got -1.0"),
    (lambda d: d["params"]["allreduce"].update({"two": [[1e-5, 0.5]]}), "params.allreduce.two", "size >= 2"),
    (lambda d: d["params"]["allreduce"].update({"2": []}), "params.allreduce.2", "non-empty list"),
    (lambda d: d["params"].update(allreduce=[1]), "params.allreduce", "an object"),
    (lambda d: d["params"].update(extra=1), "params.extra", "unknown key"),
    (lambda d: d["params"].pop("memory_efficiency"), "params.memory_efficiency", "missing field"),
    (lambda d: d.pop("params"), "params", "missing"),
    (lambda d: d.update(tp="2"), "tp", 'got "2"'),
    (lambda d: d.update(tp=0), "tp", "got 0"),
    (lambda d: d.update(gpu="tpu-v5e"), "gpu", "unknown GPU 'tpu-v5e'"),
    (lambda d: d.update(gpu=3), "gpu", "got 3"),
    (lambda d: d.update(model="gpt-9"), "model", "unknown model 'gpt-9'"),
    (lambda d: d.update(servesim_profile=2), "servesim_profile", "got 2"),
    (lambda d: d.update(tp=3), "tp=3", "must divide"),
])
def test_bad_profile_fields(tmp_path, mutate, field, expected):
    path = write_profile(tmp_path, mutate)
    with pytest.raises(ConfigError) as exc:
        load_profile(path)
    refused(exc, path, f"{field}: ", expected)


def test_bad_toml_profile(tmp_path):
    path = tmp_path / "fit.toml"
    path.write_text('model = "llama-2-7b"\ngpu = "a100"\n\n[params]\ncompute_efficiency = nan\n'
                    "memory_efficiency = 0.5\nkernel_latency_s = 0.0\nstep_overhead_s = 0.001\n")
    with pytest.raises(ConfigError) as exc:
        load_profile(path)
    refused(exc, path, "params.compute_efficiency: ", "got NaN", line=5)
    path.write_bytes(b"\x00")
    with pytest.raises(ConfigError) as exc:
        load_profile(path)
    refused(exc, path, "binary content")


# -- cost models' parameters -----------------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["decode_ms", "prefill_token_ms", "overhead_ms"])
@pytest.mark.parametrize("value", [-1.0, math.nan, math.inf, -math.inf, 10**400, "1", None, True])
def test_toy_cost_refuses_negative_nan_inf_and_non_numbers(field, value):
    with pytest.raises(ConfigError) as exc:
        ToyCost(**{field: value})
    refused(exc, None, f"{field}: expected a finite number of milliseconds >= 0")


def test_toy_cost_refuses_parameters_whose_steps_overflow():
    with pytest.raises(ConfigError) as exc:
        ToyCost(decode_ms=1e300)
    refused(exc, None, "decode_ms: ", "stay finite")
    assert ToyCost(decode_ms=0.0, prefill_token_ms=0.0).step_time(StepShape.of(decodes=[1])) == 0.0


@pytest.mark.parametrize("value", [0.0, -1.0, math.nan, math.inf])
def test_unit_cost_refuses_non_positive_and_non_finite(value):
    with pytest.raises(ConfigError) as exc:
        UnitCost(value)
    refused(exc, None, "step_duration: ")


@pytest.mark.parametrize("args, field", [
    ((math.nan, 0.5, 0.0, 0.0, ((0.0, 0.5),)), "compute_efficiency"),
    ((0.5, 0.0, 0.0, 0.0, ((0.0, 0.5),)), "memory_efficiency"),
    ((0.5, 0.5, math.nan, 0.0, ((0.0, 0.5),)), "kernel_latency"),
    ((0.5, 0.5, 0.0, math.inf, ((0.0, 0.5),)), "step_overhead"),
    ((0.5, 0.5, 0.0, -1.0, ((0.0, 0.5),)), "step_overhead"),
    ((0.5, 0.5, 0.0, 0.0, ()), "allreduce"),
    ((0.5, 0.5, 0.0, 0.0, ((math.inf, 0.5),)), "allreduce[0]"),
])
def test_cost_params_refuse_nan_inf_negative(args, field):
    with pytest.raises(ConfigError) as exc:
        CostParams(*args)
    refused(exc, None, f"{field}: expected")


def test_roofline_refuses_numbers_whose_step_times_overflow(tmp_path):
    path = tmp_path / "slow.toml"
    path.write_text(GPU.replace("dense_bf16_tflops = 100.0", "dense_bf16_tflops = 1e-300"))
    with pytest.raises(ConfigError) as exc:
        Roofline("llama-3-8b", str(path))
    refused(exc, None, "roofline: ", "step times overflow")
    with pytest.raises(ConfigError, match="tp: expected a positive integer"):
        Roofline("llama-3-8b", "h100", "2")


def test_roofline_build_check_leaves_no_cached_steps():
    roof = Roofline("mixtral-8x7b", "h100", 2)
    assert roof._by_tokens == {} and roof._by_sampled == {}
    assert 0 < roof.step_time(StepShape.of(decodes=[100] * 4)) < 1


# -- random input: only ServesimError comes out, in one line ---------------------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def maybe(valid, absent: bool = True):
    """Mostly a valid value, else any JSON value or (a dict's value) absent, `...`: a file is mostly refused for
    one field, and some are valid, so the checks after the first are reached too. (The branch is drawn as an
    integer, valid on the small ones Hypothesis favours: `one_of` would favour the simple `just(...)`.)"""
    other = st.one_of(JSON_VALUES, st.just(...)) if absent else JSON_VALUES
    return st.integers(0, 24).flatmap(lambda n: valid if n < 23 else other)


def drop_absent(d: dict) -> dict:
    return {k: v for k, v in d.items() if v is not ...}


SCENARIOS = st.builds(
    lambda config, requests, extra: drop_absent({"config": config, "requests": requests} | extra),
    maybe(st.builds(drop_absent, st.fixed_dictionaries({
        "max_num_batched_tokens": maybe(st.integers(1, 4096)), "max_num_seqs": maybe(st.integers(1, 64)),
        "enable_chunked_prefill": maybe(st.booleans()), "block_size": maybe(st.sampled_from([1, 16, 32])),
        "num_gpu_blocks": maybe(st.integers(2, 1000)), "long_prefill_token_threshold": maybe(st.integers(0, 512)),
        "policy": maybe(st.sampled_from(["fcfs", "priority"])),
    }, optional={"watermark": maybe(st.floats(0, 0.99)), "step_duration": maybe(st.floats(0.1, 2)),
                 "async_scheduling": maybe(st.booleans())}))),
    maybe(st.lists(maybe(absent=False, valid=st.builds(drop_absent, st.fixed_dictionaries({
        "id": maybe(st.text(min_size=1, max_size=3)), "arrival_step": maybe(st.integers(0, 20)),
        "prompt_len": maybe(st.integers(1, 300)), "output_len": maybe(st.integers(1, 50)),
    }, optional={"priority": maybe(st.integers(-3, 3))}))), min_size=1, max_size=5)),
    st.one_of(st.builds(lambda n: {"name": n}, st.text(max_size=5)),
              st.dictionaries(st.sampled_from(["name", "description", "bogus"]), JSON_VALUES, max_size=1)),
)

MODEL_CONFIGS = st.builds(drop_absent, st.fixed_dictionaries({
    "hidden_size": maybe(st.sampled_from([64, 128])), "num_hidden_layers": maybe(st.integers(1, 4)),
    "num_attention_heads": maybe(st.sampled_from([1, 2, 4, 8])), "vocab_size": maybe(st.integers(1, 1000)),
}, optional={"num_key_value_heads": maybe(st.sampled_from([1, 2, 3, 4])), "head_dim": maybe(st.integers(1, 64)),
             "intermediate_size": maybe(st.integers(1, 512)), "max_position_embeddings": maybe(st.integers(1, 10**6)),
             "torch_dtype": maybe(st.sampled_from(["bfloat16", "float16", "fp8"])),
             "num_local_experts": maybe(st.integers(0, 8)), "num_experts_per_tok": maybe(st.integers(0, 3)),
             "tie_word_embeddings": maybe(st.booleans()), "model_type": maybe(st.sampled_from(["llama", "bloom"]))}))

CSV_CELLS = st.one_of(st.sampled_from(["qkv_proj", "o_proj", "all_reduce", "step", "1", "2", "512", "0.25", "-1",
                                       "nan", "inf", "1e400", "", "8@16", "x@y", "#", '"', "1.5", "1e12"]),
                      st.text(max_size=5))
TIMES = st.floats(0.001, 100).map(repr)
CSV_ROWS = st.one_of(
    st.tuples(st.sampled_from(["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]), st.sampled_from(["1", "2", ""]),
              st.integers(1, 4096).map(str), st.just(""), st.just(""), st.just(""), st.just(""), TIMES),
    st.tuples(st.just("all_reduce"), st.sampled_from(["2", "4", "8"]), st.just(""),
              st.integers(1, 2**24).map(str), st.just(""), st.just(""), st.just(""), TIMES),
    st.tuples(st.just("step"), st.just("1"), st.just(""), st.just(""), st.integers(0, 64).map(str),
              st.integers(0, 4096).map(str), st.sampled_from(["", "512@0", "64@128 8@0"]), TIMES),
).map(list)


@st.composite
def csv_rows(draw) -> list[str]:
    """A valid row, often with one cell replaced by junk, or cells at random."""
    if draw(st.integers(0, 4)) == 0:
        return draw(st.lists(CSV_CELLS, max_size=9))
    row = draw(CSV_ROWS)
    if draw(st.booleans()):
        row[draw(st.integers(0, len(row) - 1))] = draw(CSV_CELLS)
    return row


CSV_TEXT = st.builds(
    lambda header, rows: "\n".join([",".join(header)] + [",".join(r) for r in rows]),
    st.one_of(*[st.just(HEADER.strip().split(","))] * 4,
              st.lists(st.sampled_from(HEADER.strip().split(",") + ["x"]), max_size=9)),
    st.lists(csv_rows(), max_size=5),
)

FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def only_servesim_errors(read, path: Path) -> None:
    try:
        read(path)
    except ServesimError as exc:
        msg = str(exc)
        assert msg and "\n" not in msg and "\r" not in msg, msg
        assert msg.startswith(str(path)) or msg.startswith("roofline") or msg.startswith("model "), msg


READERS = {
    "scenario": load_scenario,
    "model": lambda p: load_model(str(p)),
    "csv": read_measurements,
    "trace": load_trace,
    "gpu": lambda p: load_gpu(str(p)),
    "profile": load_profile,
}


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@pytest.mark.parametrize("reader", sorted(READERS))
@FUZZ
@given(data=st.binary(max_size=200))
def test_random_bytes_give_only_one_line_servesim_errors(fuzz_dir, reader, data):
    path = fuzz_dir / {"gpu": "g.toml", "csv": "m.csv"}.get(reader, "f.json")
    path.write_bytes(data)
    only_servesim_errors(READERS[reader], path)


@pytest.mark.parametrize("reader", ["scenario", "model", "trace", "profile"])
@FUZZ
@given(value=JSON_VALUES)
def test_random_json_values_give_only_one_line_servesim_errors(fuzz_dir, reader, value):
    path = fuzz_dir / "v.json"
    path.write_text(json.dumps(value))
    only_servesim_errors(READERS[reader], path)


@FUZZ
@given(scenario=SCENARIOS)
def test_nearly_valid_scenarios_give_only_one_line_servesim_errors(fuzz_dir, scenario):
    path = fuzz_dir / "s.json"
    path.write_text(json.dumps(scenario, indent=1))
    only_servesim_errors(load_scenario, path)


@FUZZ
@given(config=MODEL_CONFIGS)
def test_nearly_valid_model_configs_give_only_one_line_servesim_errors(fuzz_dir, config):
    path = fuzz_dir / "config.json"
    path.write_text(json.dumps(config, indent=2))
    only_servesim_errors(lambda p: Roofline(load_model(str(p)), "h100"), path)


@FUZZ
@given(text=CSV_TEXT)
def test_random_measured_csvs_give_only_one_line_servesim_errors(fuzz_dir, text):
    path = fuzz_dir / "m.csv"
    path.write_text(text)
    only_servesim_errors(read_measurements, path)


def test_shared_fixtures_still_load():
    if not SHARED.is_dir():
        pytest.skip("no ../shared")
    for path in sorted((SHARED / "conformance" / "scenarios").glob("*.json")):
        assert load_scenario(path)["requests"]
