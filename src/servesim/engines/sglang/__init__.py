"""SGLang (pinned: SGLang 0.5.23, the non-overlap event loop), laid out as SGLang's `srt/` is: `scheduler`
(managers/scheduler.py: prefill first, decode, retraction), `schedule_policy` (the waiting queue's order) and
`prefill_adder` (PrefillAdder: who goes into a prefill batch), `ratio` (new_token_ratio's decay), `radix_cache`
and `memory_pool` (mem_cache/: the radix prefix cache and the token-level KV pool), `server_args` (its options
under its own names), `config` (resolved once), `flags`, `conformance`. See docs/sglang.md."""
