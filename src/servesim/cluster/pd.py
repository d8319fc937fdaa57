"""Prefill/decode disaggregation: the KV link from a prefill replica to the decode replicas.

A request prefills on a prefill replica and samples its first token there (TTFT ends there, as DistServe counts
it); its prompt's KV then moves to its decode replica. Each prefill replica has one outgoing link: transfers go
over it one at a time in the order their prefills finished, each taking `prompt_len x kv_bytes_per_token /
bandwidth` seconds on the link, and land `latency` seconds after they leave it. The prefill replica keeps the
request's blocks until the transfer lands; the decode replica gets the request then, with its prompt computed and
its first token known (vLLM's P/D connectors: the remote prefill's tokens count as computed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from servesim.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Transfer:
    """One request's KV move: when its prefill finished, when the link took it, when it landed."""

    request_id: str
    prefill: int  # replica indices in the cluster
    decode: int
    num_bytes: int
    ready: float  # the prefill's last step ended (its first token)
    start: float  # the link took it (after any transfer ahead of it)
    end: float  # landed on the decode replica: start + bytes / bandwidth + latency

    @property
    def seconds(self) -> float:
        """From the first token to the KV on the decode replica (queueing on the link included)."""
        return self.end - self.ready


@dataclass(slots=True)
class Link:
    """A prefill replica's outgoing link: bytes/s, seconds of latency, busy until `free_at`."""

    bandwidth: float
    latency: float
    free_at: float = 0.0
    busy: float = 0.0  # seconds spent sending

    def send(self, ready: float, num_bytes: int) -> tuple[float, float]:
        """(start, landed) of a transfer of `num_bytes` ready at `ready`."""
        start = max(ready, self.free_at)
        seconds = num_bytes / self.bandwidth
        self.free_at = start + seconds
        self.busy += seconds
        return start, start + seconds + self.latency


def check_link(bandwidth: float, latency: float) -> None:
    if isinstance(bandwidth, bool) or not isinstance(bandwidth, int | float) or not 0 < bandwidth < math.inf:
        raise ConfigError(f"--kv-transfer-bandwidth {bandwidth!r}: expected bytes/s > 0")
    if isinstance(latency, bool) or not isinstance(latency, int | float) or not 0 <= latency < math.inf:
        raise ConfigError(f"--kv-transfer-latency-ms: got {latency!r} s; expected a finite number >= 0")
