"""Trace loaders: every format, detection, gzip, column mappings. Tiny files whose numbers are read off the text."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from servesim.workloads import load_trace, load_workload, make_table
from servesim.workloads.table import RequestTable


def write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


AZURE = (
    "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    "2023-11-16 18:17:03.9799600,4808,10\n"
    "2023-11-16 18:17:04.0319600,3180,8\n"
    "2023-11-16 18:17:05.0000001,110,27\n"
)


def test_azure_timestamps_become_seconds_from_the_first_request(tmp_path):
    t = load_trace(write(tmp_path, "a.csv", AZURE))
    assert len(t) == 3
    # 04.0319600 - 03.9799600 = 0.052 s; 05.0000001 - 03.9799600 = 1.0200401 s (7th digit kept)
    assert t.arrival_time.tolist() == pytest.approx([0.0, 0.052, 1.0200401], abs=1e-9)
    assert t.prompt_len.tolist() == [4808, 3180, 110]
    assert t.output_len.tolist() == [10, 8, 27]
    assert t.request_ids == ["0", "1", "2"]
    assert t.notes == ()


def test_azure_2025_multimodal_reports_and_ignores_num_images(tmp_path):
    text = (
        "TIMESTAMP,NumImages,ContextTokens,GeneratedTokens\n"
        "2025-01-01 00:00:00.0,2,100,5\n"
        "2025-01-01 00:00:01.0,0,50,6\n"
    )
    t = load_trace(write(tmp_path, "mm.csv", text))
    assert t.prompt_len.tolist() == [100, 50]
    assert t.notes == ("ignored column NumImages (1 requests carry images; only text tokens are simulated)",)


BURSTGPT = (
    "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
    "5,ChatGPT,472,18,490,Conversation log\n"
    "45,ChatGPT,1087,0,1087,Conversation log\n"
    "118,GPT-4,417,276,693,API log\n"
    "131,ChatGPT,1360,165,1525,API log\n"
)


def test_burstgpt_drops_failed_requests_and_counts_them(tmp_path):
    t = load_trace(write(tmp_path, "b.csv", BURSTGPT))
    assert t.arrival_time.tolist() == [0.0, 113.0, 126.0]  # 5, 118, 131 re-based to the first request
    assert t.prompt_len.tolist() == [472, 417, 1360]
    assert t.request_ids == ["0", "2", "3"]  # the file's data rows: row 1 failed
    assert t.notes == ("dropped 1 failed requests (0 response tokens); --keep-failed makes them an error",)


def test_burstgpt_keep_failed_makes_zero_output_an_error(tmp_path):
    from servesim.errors import WorkloadError

    with pytest.raises(WorkloadError, match=r"line 3, column 'Response tokens': got '0'"):
        load_trace(write(tmp_path, "b.csv", BURSTGPT), keep_failed=True)


def test_burstgpt_filters_by_model_and_log_type(tmp_path):
    path = write(tmp_path, "b.csv", BURSTGPT)
    gpt4 = load_trace(path, trace_model="GPT-4")
    assert gpt4.prompt_len.tolist() == [417]
    api = load_trace(path, log_type="API log")
    assert api.prompt_len.tolist() == [417, 1360]
    both = load_trace(path, trace_model="ChatGPT", log_type="Conversation log")
    assert both.prompt_len.tolist() == [472]  # the other Conversation-log ChatGPT row failed
    assert both.notes[0] == "kept 3 of 4 requests with Model = 'ChatGPT'"


def test_burstgpt_newer_release_session_ids(tmp_path):
    text = "Timestamp,Session ID,Model,Request tokens,Response tokens,Total tokens,Log Type,Elapsed time\n"
    text += "0,abc,ChatGPT,10,5,15,API log,1.0\n1,xyz,ChatGPT,11,6,17,API log,1.0\n2,abc,ChatGPT,12,7,19,API log,1.0\n"
    t = load_trace(write(tmp_path, "b.csv", text))
    assert t.session_id.tolist() == [0, 1, 0]  # numbered in order of first appearance


def test_mooncake_keeps_hash_ids_and_converts_ms(tmp_path):
    lines = [
        {"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]},
        {"timestamp": 1500, "input_length": 100, "output_length": 7, "hash_ids": [0]},
        {"timestamp": 3000, "input_length": 1100, "output_length": 1, "hash_ids": [0, 2, 3]},
    ]
    t = load_trace(write(tmp_path, "m.jsonl", "\n".join(json.dumps(x) for x in lines) + "\n"))
    assert t.arrival_time.tolist() == [0.0, 1.5, 3.0]
    assert t.hash_block_size == 512
    assert [t.hashes(i).tolist() for i in range(3)] == [[0, 1], [0], [0, 2, 3]]


def test_vidur_and_splitwise_alias(tmp_path):
    path = write(tmp_path, "v.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,4808,10\n0.052,3180,8\n")
    for fmt in (None, "vidur", "splitwise"):
        t = load_trace(path, format=fmt)
        assert t.arrival_time.tolist() == [0.0, 0.052]
        assert t.prompt_len.tolist() == [4808, 3180]


def test_length_only_file_needs_a_request_rate(tmp_path):
    from servesim.errors import WorkloadError

    path = write(
        tmp_path, "l.csv", "num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n100,10,110,10\n50,5,55,10\n"
    )
    with pytest.raises(WorkloadError, match="no arrival times; give --request-rate"):
        make_table(str(path))
    t = make_table(str(path), request_rate=2.0, burstiness=float("inf"))
    assert t.arrival_time.tolist() == [0.5, 1.0]  # fixed interval 1/2 s; the last at n / rate = 1 s
    assert t.prompt_len.tolist() == [100, 50]


def test_generic_columns_with_time_units(tmp_path):
    csv = write(tmp_path, "g.csv", "ts,in,out,who\n1000,5,6,x\n3500,7,8,y\n")
    t = load_trace(csv, columns="arrival=ts,prompt=in,output=out,id=who", time_unit="ms")
    assert t.arrival_time.tolist() == [0.0, 2.5]
    assert t.request_ids == ["x", "y"]
    jsonl = write(tmp_path, "g.jsonl", '{"t": 10, "p": 3, "o": 4}\n{"t": 12, "p": 5, "o": 6}\n')
    t = load_trace(jsonl, format="jsonl", columns="arrival=t,prompt=p,output=o", time_unit="s")
    assert t.arrival_time.tolist() == [0.0, 2.0]
    dt = write(tmp_path, "d.csv", "when,p,o\n2024-05-01T10:00:00,1,1\n2024-05-01T10:01:30,2,2\n")
    assert load_trace(dt, columns="arrival=when,prompt=p,output=o", time_unit="datetime").arrival_time[1] == 90.0


def test_generic_parquet(tmp_path):
    pl = pytest.importorskip("polars")
    path = tmp_path / "g.parquet"
    pl.DataFrame({"us": [0, 250_000, 500_000], "p": [1, 2, 3], "o": [4, 5, 6]}).write_parquet(path)
    t = load_trace(path, format="parquet", columns="arrival=us,prompt=p,output=o", time_unit="us")
    assert t.arrival_time.tolist() == [0.0, 0.25, 0.5]
    assert t.output_len.tolist() == [4, 5, 6]


def test_gzip_is_transparent_whatever_the_name(tmp_path):
    plain = load_trace(write(tmp_path, "a.csv", AZURE))
    for name in ("a.csv.gz", "a.gz", "a.csv"):
        t = load_trace(write(tmp_path, name, gzip.compress(AZURE.encode())))
        assert t.prompt_len.tolist() == plain.prompt_len.tolist()


def test_whole_numbers_written_as_floats_are_accepted(tmp_path):
    t = load_trace(write(tmp_path, "v.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n0,512.0,1e2\n"))
    assert (t.prompt_len[0], t.output_len[0]) == (512, 100)


def test_blank_lines_are_skipped_and_line_numbers_stay_right(tmp_path):
    from servesim.errors import WorkloadError

    text = "arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,5\n\n1,6,6\n\n"
    assert load_trace(write(tmp_path, "v.csv", text)).prompt_len.tolist() == [5, 6]
    with pytest.raises(WorkloadError, match=r"line 6, column 'num_prefill_tokens': got 'x'"):
        load_trace(write(tmp_path, "w.csv", text + "2,x,5\n"))


def test_servesim_csv_round_trip_with_hashes_and_ids(tmp_path):
    t = RequestTable.from_columns(
        [0.5, 0.0],
        [600, 10],
        [3, 4],
        priority=[1, 2],
        hash_ids=np.array([7, 8, 9]),
        hash_offsets=np.array([0, 2, 3]),
        request_id=np.array(["b", "a"], dtype=object),
    )
    assert t.request_ids == ["a", "b"]  # sorted by arrival, everything moves with its row
    assert t.hashes(1).tolist() == [7, 8]
    path = tmp_path / "t.csv"
    t.write_csv(path)
    back = load_trace(path)
    assert back.arrival_time.tolist() == [0.0, 0.5]
    assert back.priority.tolist() == [2, 1]
    assert [back.hashes(i).tolist() for i in range(2)] == [[9], [7, 8]]
    assert back.request_ids == ["a", "b"]


def test_load_workload_one_argument_still_gives_sorted_requests(tmp_path):
    path = write(tmp_path, "v.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n2,5,5\n1,6,6\n")
    with pytest.warns(UserWarning, match="1 timestamps were earlier than the line before them"):
        reqs = load_workload(str(path))
    assert [(r.request_id, r.arrival_time, r.prompt_len) for r in reqs] == [("1", 0.0, 6), ("0", 1.0, 5)]
