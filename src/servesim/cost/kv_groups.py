"""vLLM's hybrid KV cache manager as it sizes a pool for a model with full-attention layers beside sliding-window or
linear-attention (Mamba-like) ones.

vLLM 0.33 (`vllm/v1/core/kv_cache_utils.py`, `_get_kv_cache_groups_uniform_page_size`; docs/design/
hybrid_kv_cache_manager.md): the attention layers are split into KV cache groups of one layer kind each, all of
`group_size` layers, the smallest count of any kind (the last group of a kind padded); every group's block has the
same page, `group_size` layers x `block_size` tokens x a layer's KV bytes per token, and one pool of
`num_gpu_blocks = available // (page per layer x group_size)` blocks serves them all. A request holds, in each
full-attention group, a block per `block_size` tokens; in each sliding-window group only the blocks that still hold
a position of its window (`SlidingWindowManager.remove_skipped_blocks` frees the others), at most
cdiv(sliding_window - 1, block_size) + 1 of them.

servesim's pools count a request's full-attention blocks by its length (one block = a block of every full group)
and its sliding-window blocks as a constant held from its first allocation (`servesim.engine.kv`'s `per_request`):
the most the window takes, which it holds once past the window (shorter requests hold fewer; a prefill chunk's
blocks beyond the window, which vLLM frees the next step, are not counted).

A linear-attention layer's state (`MambaSpec`) takes one block a request in each of its groups (vLLM's
`mamba_cache_mode` none, prefix caching off for such models): the attention block size grows until an attention
page holds a layer's state (`HybridAttentionMambaModelConfig.verify_and_update_config`: block_size = 16 x
cdiv(state bytes, 16 x a layer's KV bytes a token), the state padded to the page), so one block is one layer's
state and `num_gpu_blocks` is the same formula.
"""

from __future__ import annotations

from dataclasses import dataclass

from servesim.errors import ConfigError


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True, slots=True)
class KVGroups:
    """A model's KV cache groups under vLLM's hybrid manager."""

    group_size: int  # layers per group: the fewest layers of any kind
    full_groups: int
    other_groups: int  # the other kind's: sliding-window or linear-attention layers

    @classmethod
    def of(cls, num_full_layers: int, num_other_layers: int) -> KVGroups:
        if num_full_layers < 1 or num_other_layers < 0:
            raise ConfigError(f"KV cache groups: expected >= 1 full-attention layer and >= 0 others, got "
                              f"{num_full_layers} and {num_other_layers}")
        size = min(num_full_layers, num_other_layers) if num_other_layers else num_full_layers
        return cls(size, cdiv(num_full_layers, size), cdiv(num_other_layers, size))

    def num_gpu_blocks(self, available_bytes: float, block_size: int, layer_bytes_per_token: int) -> int:
        """vLLM's pool: the memory over one block's page in every layer of a group (its `num_blocks`)."""
        return int(available_bytes // (block_size * layer_bytes_per_token * self.group_size))

    def pool_blocks(self, available_bytes: float, block_size: int, layer_bytes_per_token: int) -> int:
        """The pool in servesim's blocks, each a block of every full-attention group."""
        return self.num_gpu_blocks(available_bytes, block_size, layer_bytes_per_token) // self.full_groups

    def per_request(self, sliding_window: int, block_size: int) -> int:
        """servesim's blocks a request holds in the sliding-window groups: each group's most, over the full
        groups' count (one of servesim's blocks is a block of each full group)."""
        return cdiv(self.other_groups * window_blocks(sliding_window, block_size), self.full_groups)

    def state_per_request(self) -> int:
        """servesim's blocks a request holds in the linear-attention groups: one each."""
        return cdiv(self.other_groups, self.full_groups)


def state_block_size(block_size: int, state_bytes: int, layer_bytes_per_token: int) -> int:
    """The attention block size vLLM sets beside linear-attention layers: the user's, or, when its page is smaller
    than one layer's state, 16 x cdiv(state, 16 x a layer's KV bytes a token) (the kernels' multiple of 16)."""
    needed = 16 * cdiv(state_bytes, 16 * layer_bytes_per_token)
    return max(block_size, needed)


def window_blocks(sliding_window: int, block_size: int) -> int:
    """The most blocks one sliding-window group holds for a request: those covering its last sliding_window - 1
    positions and the new one (`SlidingWindowManager`: blocks wholly before position num_computed_tokens -
    sliding_window + 1 are freed)."""
    return cdiv(sliding_window - 1, block_size) + 1
