"""The lesson layer: the functions of `../shared/spec/lesson.txt` (`functions`) and its questions answered with
them and with the engine (`questions`)."""

from servesim.lesson.functions import (
    DECODE_MS,
    PREFILL_TOKEN_MS,
    SlotRows,
    chunk_size,
    chunked_iteration_time,
    continuous_slots,
    plan_chunks,
    static_slots,
    tokens_processed,
    utilization,
    worst_stall,
)

__all__ = ["DECODE_MS", "PREFILL_TOKEN_MS", "SlotRows", "chunk_size", "chunked_iteration_time", "continuous_slots",
           "plan_chunks", "static_slots", "tokens_processed", "utilization", "worst_stall"]
