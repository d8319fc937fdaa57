"""Collectives on a GPU fabric: an NVLink domain (8 GPUs on an HGX board, 72 on an NVL72 rack) and, between
domains, each GPU's network link (its InfiniBand/RoCE NIC). Every collective is a latency plus bytes over the
slowest link it crosses, at that link's efficiency:

- **all-reduce** of S bytes on n GPUs, ring: each GPU sends and receives 2 (n-1)/n S. Inside the domain it is
  `allreduce_time` (the GPU file's NCCL protocols, the engine's custom kernel where allowed); across nodes the
  ring's bytes go over the NIC, and the latency is the domain's plus the network's per level of NCCL's tree over
  the nodes: alpha_nvlink + alpha_net x ceil(log2 nodes) + 2 (n-1)/n S / (NIC x efficiency).
- **all-gather** (S: the gathered bytes each GPU ends with) and **reduce-scatter** (S: the bytes each GPU starts
  with): (n-1)/n S per GPU over the slowest link, the same latencies.
- **all-to-all** (S: the bytes each GPU sends, its own share included, spread evenly over the n ranks): S (m-1)/n
  go over NVLink to the m - 1 other GPUs of its domain (m = min(n, domain)), S (n-m)/n over the NIC to the other
  nodes, at once on the two links: latency + max(NVLink part, network part). DeepEP's kernels
  (`A2A_KERNELS`) have their own latency and efficiencies.

Bandwidths are per GPU, one direction (datasheets give NVLink for both directions together: halved here). The
constants: NVLink's from the GPU file's `[efficiency]`/`[allreduce]`, the network's from NCCL send/recv between
two DGX H100 nodes (`servesim.cost.specs`, 19.1 us, 0.72 of a 400 Gb/s NIC), DeepEP's from its README's tables.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from servesim.cost.specs import GpuSpec


@dataclass(frozen=True, slots=True)
class A2aKernel:
    """An all-to-all kernel's constants: latency (None: the fabric's own), the fraction of NVLink's and the
    network's one-way bandwidth it reaches."""

    name: str
    latency: float | None
    nvlink_efficiency: float
    network_efficiency: float


# DeepEP V1's tables (deepseek-ai/DeepEP, docs/legacy.md, "Performance"; H800: NVLink 200 GB/s one way, one
# ConnectX-7 400 Gb/s NIC per GPU, 7,168 hidden, top-8, FP8 dispatch (7,168 + 56 x 4 scale bytes a copy), BF16
# combine):
# - normal kernels (4,096 tokens a batch): intranode EP 8 dispatch 153 GB/s, combine 158 GB/s over NVLink: mean
#   0.78 of 200; internode EP 16 43 GB/s over RDMA: 0.86 of 50. Their latency is not in the table: the fabric's.
# - low-latency kernels (128 tokens a rank): dispatch / combine 118 / 195 us at EP 16, 155 / 273 at 32, 173 / 314
#   at 64, 192 / 369 at 128, 194 / 360 at 256. The bytes leaving the node, (EP - 8) / EP of 128 x 8 x 7,392 and
#   of 128 x 8 x 14,336, against the time, least squares on relative error: 27 us + bytes / 43.5 GB/s (0.87 of
#   50 GB/s), every point within 7 %; EP 8 (one node, NVLink): 77 / 114 us less 27 us for 7/8 of the bytes,
#   0.66 / 0.74 of 200 GB/s, mean 0.70.
A2A_KERNELS = {
    "deepep_normal": A2aKernel("deepep_normal", None, 0.78, 0.86),
    "deepep_low_latency": A2aKernel("deepep_low_latency", 27e-6, 0.70, 0.87),
}


@dataclass(frozen=True, slots=True)
class Fabric:
    """One GPU's links: NVLink inside its domain, the network beyond it."""

    domain: int  # GPUs per NVLink domain
    nvlink: float  # bytes/s one way
    nvlink_latency: float  # seconds: a collective's floor inside the domain
    nvlink_efficiency: float
    network: float  # bytes/s one way, the GPU's NIC
    network_latency: float
    network_efficiency: float
    protocols: tuple[tuple[float, float], ...] = ()  # NCCL's protocols inside the domain at `size` GPUs
    size: int = 0
    by_size: tuple = ()  # the GPU file's NCCL protocols per group size ([allreduce]); others get `protocols`'
    # default, (allreduce_latency, interconnect efficiency)

    @classmethod
    def of(cls, gpu: GpuSpec, protocols: tuple[tuple[float, float], ...] = (), size: int = 0) -> Fabric:
        """`protocols`: those of a group of `size` GPUs (a calibrated profile's at its TP size)."""
        default = ((gpu.allreduce_latency, gpu.interconnect_efficiency),)
        return cls(gpu.nvlink_domain, gpu.interconnect_bandwidth / 2, gpu.allreduce_latency,
                   gpu.interconnect_efficiency, gpu.network_bandwidth, gpu.network_latency, gpu.network_efficiency,
                   protocols or default, size, gpu.allreduce_by_tp)

    def _protocols(self, n: int) -> tuple[tuple[float, float], ...]:
        if n == self.size or not self.by_size:
            return self.protocols
        return dict(self.by_size).get(n, ((self.nvlink_latency, self.nvlink_efficiency),))

    def nodes(self, span: int) -> int:
        """NVLink domains `span` GPUs fill (a layout fills each before the next)."""
        return -(-span // self.domain)

    def _across(self, span: int) -> float:
        """The latency of a collective over nodes: the domain's, and the network's per level of a tree."""
        return self.nvlink_latency + self.network_latency * math.ceil(math.log2(self.nodes(span)))

    def all_reduce(self, size: float, n: int, custom: tuple[float, float, int] | None = None,
                   span: int | None = None) -> float:
        """`size` bytes on n GPUs, spread evenly over `span` GPUs (the group's own n when not given)."""
        span = span or n
        if n <= 1:
            return 0.0
        if span <= self.domain:
            return allreduce_time(size, n, self.nvlink, self._protocols(n), custom)
        return self._across(span) + 2.0 * (n - 1) / n * size / (self.network * self.network_efficiency)

    def all_gather(self, size: float, n: int, span: int | None = None) -> float:
        """`size`: the bytes each GPU holds once gathered. (A reduce-scatter of `size` bytes costs the same.)"""
        span = span or n
        if n <= 1:
            return 0.0
        wire = (n - 1) / n * size
        if span <= self.domain:
            return min(lat + wire / (self.nvlink * eff) for lat, eff in self._protocols(n))
        return self._across(span) + wire / (self.network * self.network_efficiency)

    reduce_scatter = all_gather

    def a2a_split(self, size: float, n: int) -> tuple[float, float]:
        """(bytes over NVLink, bytes over the network) of `size` bytes a GPU sends evenly to n ranks: m = n / nodes
        of them share its node (itself among them)."""
        m = n / self.nodes(n)
        return size * (m - 1) / n, size * (n - m) / n

    def all_to_all(self, size: float, n: int, kernel: A2aKernel | None = None) -> float:
        """`size` bytes a GPU sends evenly over n ranks (its own share included): NCCL's all-to-all, or `kernel`."""
        if n <= 1 or size <= 0:
            return 0.0
        nvl, net = self.a2a_split(size, n)
        ke = kernel.nvlink_efficiency if kernel else self.nvlink_efficiency
        ne = kernel.network_efficiency if kernel else self.network_efficiency
        lat = kernel.latency if kernel and kernel.latency is not None else \
            self.network_latency if net else self.nvlink_latency
        return lat + max(nvl / (self.nvlink * ke), net / (self.network * ne))


def allreduce_time(size_bytes: float, num_gpus: int, link_bandwidth: float,
                   protocols: tuple[tuple[float, float], ...],
                   custom: tuple[float, float, int] | None = None) -> float:
    """Ring all-reduce inside one NVLink domain: each GPU sends and receives 2 (n-1)/n of the message over its
    per-direction bandwidth. `custom` (latency, efficiency, largest message): an engine's own kernel, taken where
    faster and allowed."""
    if num_gpus <= 1:
        return 0.0
    wire = 2.0 * (num_gpus - 1) / num_gpus * size_bytes / link_bandwidth
    t = min(lat + wire / eff for lat, eff in protocols)
    if custom is not None and size_bytes <= custom[2]:
        c = custom[0] + wire / custom[1]
        if c < t:
            t = c
    return t
