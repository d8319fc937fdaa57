"""vLLM's --speculative-config and servesim's --acceptance-rate on the command line: honoured under --policy vllm,
refused in one line (exit 2) under every other policy, and every option vLLM 0.33 does not have refused."""

import json

import pytest
from helpers import cli

SPEC = '{"method": "eagle3", "num_speculative_tokens": 3}'
# 8 requests of 64 + 33 tokens at once, unit cost: every step 1 s
WORKLOAD = ("--workload", "random", "--num-prompts", "8", "--random-input-len", "64", "--random-output-len", "33",
            "--cost", "unit")


def _steps(monkeypatch, capsys, tmp_path, *flags):
    out = tmp_path / "r.json"
    code, _, err = cli(monkeypatch, capsys, "run", *WORKLOAD, "--json", str(out), *flags)
    assert code == 0, err
    return json.loads(out.read_text())["num_steps"]


def test_speculative_config_is_honoured_under_vllm(monkeypatch, capsys, tmp_path):
    # 33 outputs: one from the prefill step, then 32 one a step without speculation (33 steps); with K = 3 and
    # every draft accepted, 4 a step: 1 + 32 / 4 = 9 steps; none accepted: 33 again, 4 tokens scheduled each
    assert _steps(monkeypatch, capsys, tmp_path) == 33
    assert _steps(monkeypatch, capsys, tmp_path, "--speculative-config", SPEC, "--acceptance-rate", "1") == 9
    assert _steps(monkeypatch, capsys, tmp_path, "--speculative-config", SPEC, "--acceptance-rate", "0") == 33


@pytest.mark.parametrize(("flags", "words"), [
    (("--policy", "sglang"), "speculative_config is a vLLM knob with no meaning under policy sglang"),
    (("--policy", "vllm-v0"), "has no effect under policy vllm-v0"),
    (("--policy", "static"), "has no effect under policy static"),
    (("--policy", "continuous"), "has no effect under policy continuous"),
])
def test_speculation_is_refused_under_other_policies(monkeypatch, capsys, flags, words):
    code, _, err = cli(monkeypatch, capsys, "run", *WORKLOAD, "--speculative-config", SPEC, "--acceptance-rate",
                       "0.8", *flags)
    assert code == 2 and words in err and "Traceback" not in err
    assert [line for line in err.splitlines() if line.startswith("servesim: error")] == [err.strip().splitlines()[-1]]


@pytest.mark.parametrize(("flags", "words"), [
    (("--speculative-config", '{"method": "eagle3", "num_speculative_tokens": 3, "foo": 1}',
      "--acceptance-rate", "0.8"), "--speculative-config.foo: not an option of vLLM 0.33's speculative config"),
    (("--speculative-config", '{"method": "eagle3", "num_speculative_tokens": 3, "disable_padded_drafter_batch": '
      'true}', "--acceptance-rate", "0.8"), "--speculative-config.disable_padded_drafter_batch: a vLLM 0.33 option"),
    (("--speculative-config", '{"method": "suffix", "num_speculative_tokens": 3}', "--acceptance-rate", "0.8"),
     "method 'suffix': not modelled yet"),
    (("--speculative-config", '{"method": "eagle3"}', "--acceptance-rate", "0.8"),
     "--speculative-config.num_speculative_tokens: missing"),
    (("--speculative-config", "{method", "--acceptance-rate", "0.8"), "--speculative-config: not JSON"),
    (("--speculative-config", SPEC), "has no acceptance"),
    (("--acceptance-rate", "0.8"), "has no effect without speculative_config"),
    (("--speculative-config", SPEC, "--acceptance-rate", "1.5"), "--acceptance-rate 1.5: each rate must be"),
    (("--speculative-config", SPEC, "--acceptance-rate", "0.9,x"), "--acceptance-rate 0.9,x: expected"),
])
def test_bad_speculation_flags_are_one_line_naming_the_field(monkeypatch, capsys, flags, words):
    code, _, err = cli(monkeypatch, capsys, "run", *WORKLOAD, *flags)
    assert code == 2 and words in err and "Traceback" not in err, err
