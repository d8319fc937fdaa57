"""Measured runs: what a benchmark client recorded of a real deployment (`run`), read from its own files
(`vllm_result`, `aiperf_export`), and replayed through servesim request by request (`replay`), for
`servesim diff` and `servesim validate`."""
