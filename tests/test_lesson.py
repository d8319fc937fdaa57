"""Every number of ../shared/spec/lesson.txt, from the lesson functions."""

import math

import pytest

from servesim.lesson import (
    chunk_size,
    chunked_iteration_time,
    continuous_slots,
    plan_chunks,
    static_slots,
    tokens_processed,
    utilization,
    worst_stall,
)


def test_budget_256_with_4_decodes_leaves_252_prompt_tokens():
    assert chunk_size(256, 4) == 252


def test_chunk_size_never_negative():
    assert chunk_size(3, 4) == 0


def test_2000_tokens_in_chunks_of_252_take_8_iterations():
    plan = plan_chunks(2000, 252)
    assert plan == [252] * 7 + [236]
    assert len(plan) == 8


def test_plan_chunks_edges():
    assert plan_chunks(0, 252) == []
    assert plan_chunks(504, 252) == [252, 252]
    with pytest.raises(ValueError, match="chunk must be an integer >= 1"):
        plan_chunks(10, 0)


def test_full_chunk_iteration_is_29_2_ms_and_unchunked_stall_is_204_ms():
    assert chunked_iteration_time(4, 252) == 29.2
    assert worst_stall(4, 252) == 29.2
    assert worst_stall(4, 2000) == 204.0


def test_costs_can_be_overridden():
    assert chunked_iteration_time(2, 100, decode_ms=2.0, prefill_token_ms=0.5) == 54.0


def test_2000_tokens_processed_either_way():
    assert tokens_processed(plan_chunks(2000, 252)) == 2000 == tokens_processed([2000])


def test_worked_example_slot_rows_and_utilization():
    static = static_slots([2, 1, 2], 2)
    cont = continuous_slots([2, 1, 2], 2)
    assert static == [["A", "B"], ["A", None], ["C", None], ["C", None]]
    assert cont == [["A", "B"], ["A", "C"], ["C", None]]
    assert utilization(static) == 0.625
    assert math.isclose(utilization(cont), 5 / 6)
    assert round(utilization(cont) * 100, 2) == 83.33


@pytest.mark.parametrize("call, exc, text", [
    (lambda: chunk_size(-1, 0), ValueError, "token_budget must be an integer >= 0"),
    (lambda: chunk_size(256, 1.5), TypeError, "decodes must be an integer"),
    (lambda: chunk_size(True, 4), TypeError, "token_budget must be an integer"),
    (lambda: plan_chunks(-5, 10), ValueError, "prompt_tokens must be an integer >= 0"),
    (lambda: plan_chunks(10, False), TypeError, "chunk must be an integer >= 1"),
    (lambda: chunked_iteration_time(4, -1), ValueError, "chunk must be an integer >= 0"),
    (lambda: chunked_iteration_time(4, 2, decode_ms=-1), ValueError, "decode_ms must be a number"),
    (lambda: tokens_processed([252, -1]), ValueError, "chunk must be an integer >= 0"),
    (lambda: static_slots([2, 0], 2), ValueError, "output length must be an integer >= 1"),
    (lambda: continuous_slots([2, 1], 0), ValueError, "slots must be an integer >= 1"),
])
def test_bad_input_says_what_was_expected(call, exc, text):
    with pytest.raises(exc, match=text):
        call()
