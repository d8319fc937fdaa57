"""TensorRT-LLM's paged KV cache as its schedulers count it (pinned: TensorRT-LLM 1.2,
`cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp`, `scheduledBlocksManager.cpp`; beam width 1, no sink
tokens). A sliding-window model's request also holds its window's blocks in those layers from its first context
chunk on, whatever its length (`per_request`, `servesim.engine.kv`; servesim's reading of TensorRT-LLM's
variable-window pools, which it sizes apart per window: not modelled).

Blocks of `tokens_per_block` tokens. A request's whole context gets its blocks when its first context chunk is
scheduled (`addSequence`); each generation step adds one token, and a block when it starts one (`addToken`).
With `enable_block_reuse` full blocks are kept for reuse and matched by content at `addSequence`; they count as
free until evicted (least recently used first). servesim keeps the reuse books in vLLM's block pool (a full
block's identity is its chained hash; `servesim.engines.vllm.block_pool`), with TensorRT-LLM's timing: a block
becomes reusable after the step that computed it (`storeContextBlocks`), never in the step that allocates it.
"""

from __future__ import annotations

from servesim.engine.kv import blocks_for
from servesim.engine.request import RequestState, RequestStatus
from servesim.engines.vllm.kv_cache_manager import PrefixCachingKV


def lifetime_tokens(s: RequestState, max_seq_len: int) -> int:
    """mPromptLen + mMaxNewTokens: the prompt and the max_tokens the client sent (servesim's output length), or,
    sent without max_tokens, max_seq_len (`trtllm-serve`'s default max_tokens is max_seq_len - prompt). A pause
    moves the outputs into the prompt and takes them off max_new_tokens: the sum stays."""
    r = s.request
    return r.prompt_len + r.output_len if r.sends_max_tokens else max_seq_len


def get_remaining_blocks_to_completion(s: RequestState, tokens_per_block: int, max_seq_len: int,
                                       per_request: int = 0) -> int:
    """KVCacheManager::getRemainingBlocksToCompletion: the blocks of its whole lifetime, ceil((prompt +
    max_new_tokens) / tokens_per_block), less those it holds (beam width 1: both of the source's branches come
    to this)."""
    return blocks_for(lifetime_tokens(s, max_seq_len), tokens_per_block) + per_request - s.num_blocks


def get_needed_blocks_one_step(s: RequestState, tokens_per_block: int, per_request: int = 0) -> int:
    """KVCacheManager::getNeededBlocksOneStep: a first context chunk needs every block of its context (the prompt,
    with a paused request's outputs); a generation step needs one block when its token starts a block; a later
    context chunk needs none (its blocks came with the first)."""
    if s.status is RequestStatus.WAITING:  # context, first chunk
        return blocks_for(s.num_tokens, tokens_per_block) + per_request
    if s.sampled_since_admission:  # generation in progress: the KV holds num_computed_tokens
        n = s.num_computed_tokens
        return blocks_for(n + 1, tokens_per_block) - blocks_for(n, tokens_per_block)
    return 0


class ReuseKV(PrefixCachingKV):
    """The pool with `enable_block_reuse`: `allocate` takes blocks (evicting reusable ones, oldest first) without
    making them reusable; `store_context_blocks` does that after the step computed them."""

    __slots__ = ()

    def allocate(self, state: RequestState, num_tokens_after: int, lookahead: int = 0,
                 num_tokens: int | None = None) -> bool:
        need = blocks_for(num_tokens_after, self.block_size) + self.per_request - state.num_blocks
        if need <= 0:
            return True
        if need > self.free_blocks:
            return False
        if state.block_ids is None:
            state.block_ids = []
        ids = self.pool.allocate(need)
        if self.per_request and state.index not in self.window:
            self.window[state.index], ids = ids[:self.per_request], ids[self.per_request:]
        state.block_ids += ids
        state.num_blocks += need
        self.free_blocks = self.pool.num_free
        return True

    def store_context_blocks(self, state: RequestState) -> None:
        """Its full blocks computed so far become reusable (storeContextBlocks after a context step; a generation
        step's full blocks too, which TensorRT-LLM stores when the request is released)."""
        self.cache_upto(state, state.num_computed_tokens)

    def find_new_context_block(self, state: RequestState) -> object | None:
        """BlockManager::findNewContextBlock: the key (chained hash) of the first full context block not in the
        cache; None when every full block is (or it has none, or no block identities)."""
        hashes = self.hashes(state, state.num_tokens)
        n = self.pool.cached_prefix(hashes)
        return hashes[n] if n < len(hashes) else None

    def scheduling_remove_sequence(self, state: RequestState) -> int:
        """schedulingRemoveSequence: the blocks a paused request would give back for this step's books (those no
        other request holds)."""
        ref = self.pool.ref_cnt
        return sum(ref[b] == 1 for b in state.block_ids or ())
