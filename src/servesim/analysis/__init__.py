"""Readers of a run's results: everything here reads step records, timelines and the step log, and changes nothing.

- `benchmark`: `vllm bench serve`'s "Serving Benchmark Result" (TTFT, TPOT, ITL, E2EL, throughput, goodput);
- `breakdown`: the server side (queue, prefill, preempted time, recompute tax, KV use, batch sizes);
- `metrics`: per-request metrics as a table; `overload`: the OVERLOADED verdict with its evidence;
- `explain`: sentences about a request or a run; `compare`: runs side by side;
- `weighted`: order statistics of weighted values read in chunks (pooled ITLs).
"""
