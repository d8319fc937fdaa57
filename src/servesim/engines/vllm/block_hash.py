"""Block identities for vLLM's prefix cache (rule P1 of ../shared/conformance/round2/README.md): a request's full
blocks each get a 64-bit chained hash, computed for a run of blocks at once.

A block's content is its prompt id (if any; `split_hash_ids`' id at the block size: an int, an (id, k) pair of a
split block, a tuple of grouped ids, or any other object) and how many generated tokens fill it (generated tokens
are all one token id, never a prompt token). Each content at each position j becomes a 64-bit code
`c_j = code(content) + POS[j]`, and the chain is a polynomial hash mod 2^64:

    h_j = h_(j-1) * B + c_j  (h_-1 = 0),  that is  h_j = B^j * sum_(i<=j) c_i * B^-i

(B odd, so invertible mod 2^64): over a run of blocks a cumulative sum in uint64 numpy arithmetic, which wraps mod
2^64. Equal prefixes give equal chains. Collisions: codes are splitmix64 mixes of the content (ints as themselves,
tuples of ints element by element) or, for anything else, Python's 64-bit hash of its text (SipHash; the text, so
that ints whose own hashes collide, `hash(-1) == hash(-2)`, stay apart), plus a mixed position key. Taking the codes
of distinct (content, position) pairs as independent uniform 64-bit values, two different prefixes differ at some
position (or one is longer) by an odd multiple (a power of B) of a uniform value, so they collide with chance 2^-64:
about n^2 / 2^65 for n blocks, as with vLLM's own hashes and the Python tuple hashes this replaced.

Short extensions (a decode filling its next block) are computed in Python with the same arithmetic; both ways
give the same integers (tests/test_block_hash.py checks it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import cache
from itertools import repeat

import numpy as np

from servesim.engine.kv import IdView

MASK = (1 << 64) - 1
_B = 0x9E3779B97F4A7C15  # odd: invertible mod 2^64
_B_INV = pow(_B, -1, 1 << 64)
_M1, _M2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB  # splitmix64's finalizer
_T_INT, _T_TUP, _T_OBJ, _T_GEN, _T_POS, _T_RANK = (0x243F6A8885A308D3, 0x13198A2E03707344, 0xA4093822299F31D0,
                                                   0x082EFA98EC4E6C89, 0x452821E638D01377, 0xBE5466CF34E90C6C)
_K_GEN = 0xC0AC29B7C97C50DD  # per generated token in a block
_VECTOR = 8  # runs of at least this many blocks are hashed in numpy


def _mix(z: int) -> int:
    z = ((z ^ (z >> 30)) * _M1) & MASK
    z = ((z ^ (z >> 27)) * _M2) & MASK
    return z ^ (z >> 31)


def _mix_np(z: np.ndarray) -> np.ndarray:
    z = z ^ (z >> np.uint64(30))
    z *= np.uint64(_M1)
    z ^= z >> np.uint64(27)
    z *= np.uint64(_M2)
    z ^= z >> np.uint64(31)
    return z


class _Tables:
    """B^j, B^-j, the position keys and the tuple ranks' multipliers, grown on demand (as numpy arrays, and the
    position keys as ints too, for the Python path)."""

    def __init__(self) -> None:
        self.pow = self.inv = self.pos = self.rank = np.zeros(0, np.uint64)
        self.pos_list: list[int] = []
        self.grow(1024)

    def grow(self, n: int) -> None:
        if n <= len(self.pos):
            return
        n = max(n, 2 * len(self.pos))
        self.pow, self.inv = _powers(_B, n + 1), _powers(_B_INV, n)  # (uint64 products wrap mod 2^64)
        j = np.arange(n, dtype=np.uint64)
        self.pos = _mix_np(j + np.uint64(_T_POS))
        self.pos_list = self.pos.tolist()
        self.rank = _mix_np(j + np.uint64(_T_RANK)) | np.uint64(1)


def _powers(base: int, n: int) -> np.ndarray:
    """base^0 .. base^(n-1) mod 2^64."""
    factors = np.full(n, base, np.uint64)
    factors[0] = 1
    return np.cumprod(factors, dtype=np.uint64)


_TABLES = _Tables()


def _int_code(x: int) -> int:
    return _mix((x + _T_INT) & MASK)


def _tuple_code(t: tuple) -> int:
    """A tuple of ints in [0, 2^64): its elements' codes times their ranks' multipliers, summed, with its length."""
    _TABLES.grow(len(t))
    rank = _TABLES.rank
    total = (len(t) * _T_TUP) & MASK
    for r, x in enumerate(t):
        total = (total + _int_code(x) * int(rank[r])) & MASK
    return _mix(total)


def _is_uint64(x: object) -> bool:
    return type(x) is int and 0 <= x <= MASK


def content_code(hid: object) -> int:
    """A prompt block's id as a 64-bit code (see the module's docstring)."""
    if _is_uint64(hid):
        return _int_code(hid)
    if type(hid) is tuple and hid and _is_uint64(hid[0]) and all(_is_uint64(x) for x in hid):
        return _tuple_code(hid)
    return (hash(repr(hid)) + _T_OBJ) & MASK  # (a string's hash: already 64 bits of SipHash)


def _with_generated(code: int, generated: int) -> int:
    """The code of a block holding a prompt id's tokens (`code`) and then `generated` generated tokens."""
    return code if not generated else _mix((code + generated * _K_GEN) & MASK)


@cache
def _generated_code(block_size: int) -> int:
    """The code of a block of generated tokens only."""
    return _with_generated(_T_GEN, block_size)


def extend_generated(known: list[int], end: int, block_size: int) -> None:
    """`block_hashes` past the prompt: blocks len(known)..end-1 hold generated tokens only (a decode's next)."""
    _TABLES.grow(end)
    pos, code, parent = _TABLES.pos_list, _generated_code(block_size), known[-1]
    for j in range(len(known), end):
        parent = (parent * _B + code + pos[j]) & MASK
        known.append(parent)


def block_hashes(hash_ids: Sequence[object], prompt_len: int, num_tokens: int, block_size: int,
                 known: list[int] | None = None) -> list[int]:
    """The chained identities of a request's full blocks, over its first `num_tokens` tokens (prompt, then
    generated tokens). `hash_ids`: one id per `block_size` prompt tokens, the last block possibly partial. (For
    hash_ids that cover prompt and outputs, `Request.hash_scope` "sequence", `prompt_len` is their whole length:
    every block is then known by its id.)
    `known`: the chain so far, extended in place (a decode adds one block every `block_size` steps); once it
    covers the prompt, `hash_ids` is not read (and may be empty)."""
    out: list[int] = [] if known is None else known
    if len(out) * block_size < prompt_len and len(hash_ids) != -(-prompt_len // block_size):  # (past the prompt,
        raise ValueError(f"{len(hash_ids)} hash_ids for a {prompt_len}-token prompt in blocks of {block_size}; "
                         f"expected {-(-prompt_len // block_size)}")
    start, end = len(out), num_tokens // block_size
    if end <= start:
        return out
    _TABLES.grow(end)
    parent = out[-1] if out else 0
    if start * block_size >= prompt_len and end - start < _VECTOR:  # generated tokens only (a decode)
        out += _chain(repeat(_generated_code(block_size), end - start), parent, start)
    elif end - start < _VECTOR:
        out += _chain(_codes(hash_ids, prompt_len, block_size, start, end), parent, start)
    else:
        out += _chain_np(_codes_np(hash_ids, prompt_len, block_size, start, end), parent, start)
    return out


def _codes(hash_ids: Sequence[object], prompt_len: int, block_size: int, start: int, end: int) -> list[int]:
    """Blocks start..end-1's content codes, one by one."""
    get = getattr(hash_ids, "item", None) or hash_ids.__getitem__  # (a view's ids without its index checks)
    out = []
    for i in range(start, end):
        prompt_here = prompt_len - i * block_size  # prompt tokens from this block on
        if prompt_here >= block_size:
            out.append(content_code(get(i)))
        elif prompt_here > 0:  # the prompt's last ids, then generated tokens
            out.append(_with_generated(content_code(get(i)), block_size - prompt_here))
        else:
            out.append(_generated_code(block_size))
    return out


def _chain(codes: Iterable[int], parent: int, start: int) -> list[int]:
    pos, out = _TABLES.pos_list, []
    for j, c in enumerate(codes, start):
        parent = (parent * _B + c + pos[j]) & MASK
        out.append(parent)
    return out


def _chain_np(codes: np.ndarray, parent: int, start: int) -> list[int]:
    """`_chain` as a cumulative sum: h_j = parent * B^(j+1) + B^j * sum_(i<=j) c_i B^-i (j from the run's start)."""
    t, n = _TABLES, len(codes)
    c = codes + t.pos[start:start + n]
    h = np.cumsum(c * t.inv[:n]) * t.pow[:n] + np.uint64(parent) * t.pow[1:n + 1]
    return h.tolist()


def _codes_np(hash_ids: Sequence[object], prompt_len: int, block_size: int, start: int, end: int) -> np.ndarray:
    """`_codes` as an array: the whole-prompt blocks vectorised where their ids are ints (or split or grouped
    ints), the few others (the prompt's last block, generated tokens) one by one."""
    whole = max(start, min(end, prompt_len // block_size))
    head = _id_codes_np(hash_ids, start, whole) if whole > start else np.zeros(0, np.uint64)
    if head is None:
        head = np.array(_codes(hash_ids, prompt_len, block_size, start, whole), np.uint64)
    if whole == end:
        return head
    tail = _codes(hash_ids, prompt_len, block_size, whole, end)
    return np.concatenate((head, np.array(tail, np.uint64)))


def _id_codes_np(hash_ids: Sequence[object], start: int, stop: int) -> np.ndarray | None:
    """`content_code` of ids start..stop-1, vectorised; None where they are not all ints in [0, 2^64)."""
    split = getattr(hash_ids, "split", None)
    if split is None:  # a plain sequence of ids (or a view of other ids: one by one)
        ids = None if isinstance(hash_ids, IdView) else _uint64s(hash_ids[start:stop])
        return None if ids is None else _int_codes_np(ids)
    ids, per = _uint64s(hash_ids.ids), hash_ids.per
    if ids is None:
        return None
    if not split:
        return _grouped_codes_np(ids, per, start, stop)
    first = start // per  # block j is the pair (ids[j // per], j % per): each id's term plus each k's
    a = _int_codes_np(ids[first:-(-stop // per)]) * _TABLES.rank[0]
    pairs = (a[:, None] + _split_terms(per)[None, :]).ravel()
    return _mix_np(pairs[start - first * per:stop - first * per])


@cache
def _split_terms(per: int) -> np.ndarray:
    """The (id, k) pair's code less its id's term: k's term and the length's, for k in 0..per-1."""
    k = _int_codes_np(np.arange(per, dtype=np.uint64)) * _TABLES.rank[1]
    return k + np.uint64((2 * _T_TUP) & MASK)


def _grouped_codes_np(ids: np.ndarray, per: int, start: int, stop: int) -> np.ndarray:
    """Block j is the tuple ids[j * per : (j + 1) * per] (the last one possibly shorter)."""
    _TABLES.grow(per)
    rows = ids[start * per:stop * per]
    lengths = np.minimum(per, len(ids) - per * np.arange(start, stop)).astype(np.uint64)
    padded = np.zeros((stop - start) * per, np.uint64)
    padded[:len(rows)] = _int_codes_np(rows)
    terms = padded.reshape(stop - start, per) * _TABLES.rank[:per]
    return _mix_np(lengths * np.uint64(_T_TUP) + terms.sum(axis=1, dtype=np.uint64))


def _int_codes_np(ids: np.ndarray) -> np.ndarray:
    return _mix_np(ids + np.uint64(_T_INT))


def _uint64s(ids: Sequence[object]) -> np.ndarray | None:
    """`ids` as uint64 when they are all ints in [0, 2^63) (not bools, not numpy's ints), else None."""
    if isinstance(ids, IdView) or not len(ids) or set(map(type, ids)) != {int}:
        return None
    try:
        arr = np.array(ids, np.int64)
    except OverflowError:  # (ids of 2^63 and more: one by one)
        return None
    if arr.min() < 0:
        return None
    return arr.astype(np.uint64, copy=False)
