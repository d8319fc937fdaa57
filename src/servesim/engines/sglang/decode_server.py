"""SGLang's decode server in a P/D deployment (pinned: SGLang 0.5.23, `srt/disaggregation/decode.py`): a request
whose prompt a prefill server computed reaches the decode server's waiting queue when its KV has arrived; the next
iteration takes the queue's head into a prebuilt batch, as many as `max_running_requests` leaves rows for
(`get_new_prebuilt_batch`), which runs no forward ("skip the prefill forward but only populate metadata") and
joins the running batch, decoded in the same iteration (`get_next_disagg_decode_batch_to_run`).

Its KV is the one the prefill server sent: SGLang preallocates it when the request bootstraps, before the
transfer; servesim's cluster hands the request over when the transfer lands, so its pages are taken here, and a
request whose pages do not fit waits in the queue (the preallocation's gate, moved to the landing). The decode
server runs without its radix cache unless `--disaggregation-decode-enable-radix-cache` (SGLang's default):
`sglang.disable_radix_cache` is required on a decode pool.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.engine.request import RequestState, RequestStatus
from servesim.errors import ConfigError

if TYPE_CHECKING:
    from servesim.engines.sglang.scheduler import SGLangScheduler


def prefilled_remotely(s: RequestState) -> bool:
    """A request handed over by a P/D cluster: its prompt computed elsewhere, its first token known."""
    return s.num_computed_tokens >= s.request.prompt_len and s.num_output_tokens > 0


def take_prebuilt(sched: SGLangScheduler) -> None:
    """The waiting queue's remotely prefilled requests, in order, into the running batch while rows and pages
    allow (the rest wait)."""
    if sched.radix is not None:
        raise ConfigError("an SGLang decode pool runs without the radix cache, as SGLang's decode server does by "
                          "default: set sglang.disable_radix_cache")
    rows = sched.sg.max_running_requests - len(sched.running) - len(sched.finishing)
    kept, ps = [], sched.sg.page_size
    for s in sched.waiting:
        if rows > 0 and prefilled_remotely(s) and sched.kv.grow(s, -(-s.num_computed_tokens // ps)):
            s.status = RequestStatus.RUNNING
            sched.running.append(s)
            rows -= 1
        else:
            kept.append(s)
    sched.waiting[:] = kept
