"""The plain-CSV reader (standard library, no polars) against the polars reader: the same table or the same error on
every file, and which files it leaves to polars."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servesim.errors import WorkloadError
from servesim.workloads import loaders
from servesim.workloads.plaincsv import MAX_BYTES, read_plain_csv

AZURE_HEAD = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
VIDUR_HEAD = "arrived_at,num_prefill_tokens,num_decode_tokens\n"
BURSTGPT_HEAD = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"

PLAIN = {  # files the plain reader takes
    "azure": AZURE_HEAD + "2023-11-16 18:17:03.9799600,4808,10\n2023-11-16 18:17:04.0319600,3180,8\n",
    "azure, out of order": AZURE_HEAD + "2023-11-16 18:17:05.5,1,2\n2023-11-16 18:17:04.25,3,4\n"
                           "2023-11-16 18:17:05.5,5,6\n",
    "azure, no fraction, CRLF": AZURE_HEAD.replace("\n", "\r\n") + "2023-11-16 18:17:03,1,2\r\n2023-11-16 18:17:04,3,4",
    "azure, 9 digits": AZURE_HEAD + "2023-11-16 18:17:03.123456789,1,2\n2024-02-29 00:00:00.000000001,3,4\n",
    "vidur": VIDUR_HEAD + "0,512.0,1e2\n1.5e-05,2,3\n-0.25,4,5\n0.1,6,7\n",
    "lengths": "num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n3772,54,3826,69.8\n2015,156,2171,13\n",
    "burstgpt, failed dropped": BURSTGPT_HEAD + "5,ChatGPT,472,18,490,Conversation log\n"
                                "45,ChatGPT,1087,0,1087,Conversation log\n118,GPT-4,417,276,693,API log\n",
    "burstgpt, all failed": BURSTGPT_HEAD + "5,ChatGPT,472,0,472,Conversation log\n",
    "servesim": "arrival_time,prompt_len,output_len\n0.0,10,2\n0.25,20,3\n",
    "unused column with anything in it": "arrival_time,prompt_len,output_len,note\n0.0,10,2, \u00e9 x\n0.5,20,3,\n",
    # values the plain reader accepts and the shared checks then reject: polars names the line
    "zero prompt": VIDUR_HEAD + "0,5,5\n1,0,6\n",
    "fractional output": VIDUR_HEAD + "0,5,5.5\n",
    "negative prompt": VIDUR_HEAD + "0,-5,5\n",
    "beyond 2**53": VIDUR_HEAD + "0,18014398509481985,5\n",
    "infinite arrival": VIDUR_HEAD + "1e999,5,5\n",
}
TO_POLARS = {  # files the plain reader leaves to polars, and what polars makes of them
    "quoted": VIDUR_HEAD + '0,"5",5\n',
    "blank line": VIDUR_HEAD + "0,5,5\n\n1,6,6\n",
    "short row": VIDUR_HEAD + "0,5,5\n1,6\n",
    "long row": VIDUR_HEAD + "0,5,5,9\n",
    "header only": VIDUR_HEAD,
    "spaces": VIDUR_HEAD + "0, 5,5\n",
    "empty value": VIDUR_HEAD + "0,,5\n",
    "word": VIDUR_HEAD + "0,five,5\n",
    "nan": VIDUR_HEAD + "0,nan,5\n",
    "underscore": VIDUR_HEAD + "0,1_000,5\n",
    "unicode digits": VIDUR_HEAD + "0,\u0665,5\n",
    "lone CR": VIDUR_HEAD + "0,5,5\r1,6,6\n",
    "no such day": AZURE_HEAD + "2023-02-29 00:00:00.0,1,2\n",
    "hour 24": AZURE_HEAD + "2023-11-16 24:00:00.0,1,2\n",
    "leap second": AZURE_HEAD + "2016-12-31 23:59:60.5,1,2\n",
    "year 1500": AZURE_HEAD + "1500-01-01 00:00:00.0,1,2\n",
    "ten fractional digits": AZURE_HEAD + "2023-11-16 18:17:03.1234567891,1,2\n",
    "T separator": AZURE_HEAD + "2023-11-16T18:17:03.5,1,2\n",
    "priority column": "arrival_time,prompt_len,output_len,priority\n0,1,2,3\n",
    "duplicate column": "arrival_time,prompt_len,output_len,prompt_len\n0,1,2,3\n",
    "NumImages": "TIMESTAMP,NumImages,ContextTokens,GeneratedTokens\n2025-01-01 00:00:00.0,2,100,5\n",
}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "trace.csv"
    path.write_bytes(text.encode())
    return path


def plain_read(path: Path) -> bool:
    """Whether `load_trace` took the file through the plain reader."""
    read: list[object] = []

    def spy(*args: object) -> object:
        read.append(read_plain_csv(*args))
        return read[-1]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loaders, "read_plain_csv", spy)
        load(path)
    return any(r is not None for r in read)


def load(path: Path, monkeypatch: pytest.MonkeyPatch | None = None, **options: object) -> object:
    """The table, or the error's message; with `monkeypatch`, through the polars reader only."""
    with pytest.MonkeyPatch.context() as mp:
        if monkeypatch is not None:
            mp.setattr(loaders, "read_plain_csv", lambda *args: None)
        try:
            return loaders.load_trace(path, **options)
        except WorkloadError as exc:
            return f"error: {exc}"


def same(a: object, b: object) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            if x is None or y is None or x.dtype != y.dtype or not np.array_equal(x, y):
                return False
        elif x != y:
            return False
    return True


@pytest.mark.parametrize("name", sorted(PLAIN))
def test_plain_files_give_what_polars_gives(tmp_path, monkeypatch, name):
    path = write(tmp_path, PLAIN[name])
    assert plain_read(path)
    for options in ({}, {"keep_failed": True}) if name.startswith("burstgpt") else ({},):
        plain, polars = load(path, **options), load(path, monkeypatch, **options)
        assert same(plain, polars), (plain, polars)


@pytest.mark.parametrize("name", sorted(TO_POLARS))
def test_files_needing_judgement_go_to_polars(tmp_path, monkeypatch, name):
    path = write(tmp_path, TO_POLARS[name])
    assert not plain_read(path)
    assert same(load(path), load(path, monkeypatch))


def test_large_files_go_to_polars(tmp_path):
    rows = MAX_BYTES // len("0.0,1,1\n") + 1
    path = write(tmp_path, "arrival_time,prompt_len,output_len\n" + "0.0,1,1\n" * rows)
    assert not plain_read(path)
    assert len(loaders.load_trace(path)) == rows


def test_the_plain_reader_reports_nothing_itself(tmp_path, monkeypatch):
    """A bad value in a plain file is named by the polars reader, line and column, as for any other file."""
    msg = load(write(tmp_path, PLAIN["zero prompt"]))
    assert msg.endswith("line 3, column 'num_prefill_tokens': got '0'; expected a whole number >= 1 "
                        "(a request has at least one token each way)")


NUMBER_CELLS = ["0", "1", "7", "007", "12.0", "1e2", "2E-1", "-3", "1.5", "", " 4", "nan", "inf", "1_0", "+5",
                "\u0665", "9007199254740993", "1e999", "-0", ".5", "5."]
STAMP_CELLS = ["2023-11-16 18:17:03.9799600", "2023-11-16 18:17:03", "2023-11-16 18:17:04.5", "2023-02-30 00:00:00.1",
               "2023-11-16T18:17:03.5", "2023-11-16 18:17:03.1234567891", " 2023-11-16 18:17:03.1", "x"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(head=st.sampled_from([AZURE_HEAD, VIDUR_HEAD]), rows=st.lists(st.tuples(
    st.sampled_from(STAMP_CELLS + NUMBER_CELLS), st.sampled_from(NUMBER_CELLS), st.sampled_from(NUMBER_CELLS)),
    min_size=1, max_size=6), eol=st.sampled_from(["\n", "\r\n"]), last_eol=st.booleans())
def test_any_file_gives_what_polars_gives(tmp_path, monkeypatch, head, rows, eol, last_eol):
    text = head.replace("\n", eol) + eol.join(",".join(r) for r in rows) + (eol if last_eol else "")
    path = write(tmp_path, text)
    assert same(load(path), load(path, monkeypatch))
