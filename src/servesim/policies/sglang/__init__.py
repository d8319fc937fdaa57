"""SGLang's scheduler as a policy (pinned: SGLang 0.5.23): `scheduler` (the iteration: prefill first, decode,
retraction, the radix cache's part, what the fast path may ask), `adder` (PrefillAdder: who goes into a prefill
batch), `order` (the waiting queue's schedule_policy), `ratio` (new_token_ratio's decay). See docs/sglang.md."""

from servesim.policies.sglang.scheduler import SGLangScheduler, resolve_sglang, unchunked_config

__all__ = ["SGLangScheduler", "resolve_sglang", "unchunked_config"]
