"""Block hashes as arrays (`servesim.engines.vllm.block_hash`): the vectorised chains and the one-by-one ones give
the same integers."""

from hypothesis import given
from hypothesis import strategies as st

from servesim.engines.vllm.block_hash import (
    _TABLES,
    _chain,
    _chain_np,
    _codes,
    _codes_np,
    block_hashes,
    extend_generated,
)

BS = 4


@given(st.lists(st.integers(0, 50), min_size=1, max_size=40), st.integers(0, 3), st.integers(0, 3))
def test_chains_are_the_same_in_numpy_and_in_python(ids, short, generated):
    # the vectorised hashing (runs of blocks) and the one-by-one path give the same integers, prefix by prefix
    n = len(ids) * BS - short
    num_tokens = n + generated * BS
    end = num_tokens // BS
    _TABLES.grow(end)
    slow = _chain(_codes(ids, n, BS, 0, end), 0, 0)
    assert _chain_np(_codes_np(ids, n, BS, 0, end), 0, 0) == slow
    assert block_hashes(ids, n, num_tokens, BS) == slow
    assert block_hashes(ids, n, num_tokens, BS, known=slow[:end // 2]) == slow
    prompt = block_hashes(ids, n, -(-n // BS) * BS, BS)  # every block holding a prompt token
    if prompt and len(prompt) <= end:
        extend_generated(prompt, end, BS)  # then generated tokens only, as a decode extends it
        assert prompt == slow


def test_split_and_grouped_ids_hash_alike_in_numpy_and_in_python():
    # Mooncake's 512-token ids split into (id, k) blocks, and 1-token ids grouped into tuples: the same chains
    # either way; a negative id (hashed by its text) mixed in keeps block 0's identity
    from servesim import Request
    from servesim.engine.kv import split_hash_ids

    for r in (Request("m", 0.0, 1100, 4, hash_ids=(7, 8, 9), hash_block_size=512),
              Request("t", 0.0, 70, 4, hash_ids=tuple(range(100, 170)), hash_block_size=1)):
        ids = split_hash_ids(r, 16)
        end = r.prompt_len // 16
        assert block_hashes(ids, r.prompt_len, r.prompt_len, 16) == _chain(_codes(ids, r.prompt_len, 16, 0, end), 0, 0)
    assert block_hashes([5, -1], 8, 8, BS)[0] == block_hashes([5, 6], 8, 8, BS)[0]
    assert block_hashes([5, -1], 8, 8, BS)[1] != block_hashes([5, 6], 8, 8, BS)[1]
