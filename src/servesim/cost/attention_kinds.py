"""The attention kinds beside full attention, as `Roofline` prices them (a mixin of it): sliding-window layers and
DSA's top-k (each query attends to at most W positions), Gated DeltaNet linear attention (a constant state per
sequence), DSA's lightning indexer. docs/cost-models.md, "Attention kinds"."""

from __future__ import annotations

from servesim.cost.base import OpCost, StepShape
from servesim.cost.specs import ModelSpec

# Gated DeltaNet's chunk in the chunked gated delta rule (flash-linear-attention's `chunk_gated_delta_rule`, 64)
GDN_CHUNK = 64


def window_pairs(c: int, q: int, w: int) -> int:
    """Query-key pairs of q queries after c cached tokens in a sliding-window layer of window w: the query at
    position j (from 1) attends to min(j, w) positions, summed over j = c + 1 .. c + q."""
    def upto(n: int) -> int:  # sum of min(j, w) for j = 1 .. n
        return n * (n + 1) // 2 if n <= w else w * (w + 1) // 2 + (n - w) * w
    return upto(c + q) - upto(c)


class AttentionKinds:
    """`Roofline`'s methods for the attention kinds beside full attention; they read its attributes (`_W`, `_Ls`,
    `_Ll`, `_gdn`, `_index`, the seconds per FLOP and per byte)."""

    __slots__ = ()

    def _window_sums(self, num_decodes: int, decode_context_sum: int, shape: StepShape) -> tuple[int, ...]:
        """`_attention`'s sums in a sliding-window layer: a query at position j (counted from 1) attends to
        min(j, W) positions; a row of q queries after c cached tokens reads min(c + q, W + q - 1) positions. The
        decode cohort's n decodes, known by their context sum only, read min(sum + n, n x W): exact when every
        context is past the window or none is, an upper bound else."""
        w, pq, pkv, ppairs = self._W, 0, 0, 0
        dq, dkv = num_decodes, min(decode_context_sum + num_decodes, num_decodes * w)
        dpairs = dkv
        for q, c, dec in zip(shape.num_new_tokens, shape.num_context_tokens, shape.is_decode):
            kv, pairs = min(c + q, w + q - 1), window_pairs(c, q, w)
            if dec:
                dq, dkv, dpairs = dq + q, dkv + kv, dpairs + pairs
            else:
                pq, pkv, ppairs = pq + q, pkv + kv, ppairs + pairs
        return pq, pkv, ppairs, dq, dkv, dpairs

    def _attention_ops(self, shape: StepShape) -> list[OpCost]:
        """The breakdown's attention lines: prefill and decode rows, in the full-attention layers and (a line of
        their own) the sliding-window ones."""
        out = []
        capped = f", top-k {self._W}" if self._index is not None else f", sliding window {self._W}"
        kinds = ([("", self._La, None)] if self._La else []) + ([(capped, self._Ls, self._W)] if self._Ls else [])
        for suffix, layers, w in kinds:
            for label, want in (("attention (prefill", False), ("attention (decode", True)):
                rows = [(q, cx) for q, cx, dec in zip(shape.num_new_tokens, shape.num_context_tokens,
                                                      shape.is_decode) if dec == want]
                if not rows:
                    continue
                fp, fkv, bkv, bq = ((self._attn_flops, 0.0, self._attn_bytes_kv, self._attn_bytes_q) if want
                                    else self._attn_prefill)
                pairs = sum(window_pairs(cx, q, w) if w else q * cx + q * (q + 1) // 2 for q, cx in rows)
                kv = sum(min(cx + q, w + q - 1) if w else cx + q for q, cx in rows)
                flops = fp * pairs + fkv * kv
                nbytes = bkv * kv + bq * sum(q for q, _ in rows)
                if want:
                    cp, mem, floor = self._ad
                    fc = flops * cp
                else:
                    cp, per_q, floor, mem = self._ap
                    fc = flops * cp + per_q * sum(q for q, _ in rows)
                fm = nbytes * mem
                out.append(OpCost(f"{label}{suffix})", layers * (max(fc, fm) + floor),
                                  "compute" if fc > fm else "memory", layers * flops, layers * nbytes))
        return out

    def _gated_deltanet(self, m: ModelSpec, tp: int, d: int) -> None:
        """A hybrid model's Gated DeltaNet layers (Qwen3-Next / Qwen3.5, `Qwen3NextGatedDeltaNet`; heads split by
        TP): the attention GEMMs move to the full-attention layers alone, each linear layer has in_proj_qkvz
        (hidden -> q, k, v, z), in_proj_ba (hidden -> a decay and a beta per value head) and out_proj. Its kernels
        per layer (`_linear_time`): the causal conv (2 x kernel FLOPs a channel a token) and the gated delta rule:
        a decode updates each value head's key x value state (about 6 x dk x dv FLOPs: k^T S, the rank-1 update,
        S q), reading and writing the state once a sequence; a prefill chunk runs the chunked form (fla's chunks of
        64: intra-chunk QK^T, the WY terms and PV, 2 x 64 x (2 dk + dv) FLOPs a token a head, beside the state's
        6 dk dv), reading and writing the state once. Per token, the conv's q, k, v in and out, the v-sized output
        and the per-head scalars move once."""
        h = m.hidden_size
        nv, dk, dv = m.linear_num_value_heads // tp, m.linear_key_head_dim, m.linear_value_head_dim
        conv, vd = m.linear_conv_dim // tp, nv * dv
        La, Ll = self._La, self._Ll
        self._kind_gemms = [(name, k, n, La) for name, k, n in self._gemms] + [
            ("in_proj_qkvz", h, conv + vd, Ll), ("in_proj_ba", h, 2 * nv, Ll), ("out_proj", vd, h, Ll)]
        self._gemms = []
        conv_flops = 2.0 * conv * m.linear_conv_kernel_dim
        decode = conv_flops + 6.0 * nv * dk * dv
        prefill = decode + 2.0 * GDN_CHUNK * nv * (2 * dk + dv)
        state = m.linear_state_bytes(tp)
        self._gdn = (prefill, decode, (3 * conv + 2 * vd + 2 * nv) * d, 2 * state)
        self.state_bytes_per_request = Ll * state

    def _linear_time(self, pq: int, p_seqs: int, dq: int, d_seqs: int) -> float:
        """One Gated DeltaNet layer's seconds: the prefill rows' kernel (pq tokens of p_seqs sequences) and the
        decode rows' (dq tokens of d_seqs), each max(FLOPs, bytes) at the GPU's roofline plus a kernel floor."""
        prefill, decode, per_token, per_seq = self._gdn
        t = 0.0
        for tokens, seqs, flops in ((pq, p_seqs, prefill), (dq, d_seqs, decode)):
            if tokens:
                fc, fm = flops * tokens * self._c, (per_token * tokens + per_seq * seqs) * self._m
                t += (fc if fc > fm else fm) + self._kl
        return t

    def _linear_ops(self, shape: StepShape) -> list[OpCost]:
        """The breakdown's Gated DeltaNet lines, prefill and decode rows apart (`_linear_time`)."""
        prefill, decode, per_token, per_seq = self._gdn
        out = []
        for label, want, flops in (("linear attention (prefill)", False, prefill),
                                   ("linear attention (decode)", True, decode)):
            qs = [q for q, dec in zip(shape.num_new_tokens, shape.is_decode) if dec == want]
            if qs:
                f, b = flops * sum(qs), per_token * sum(qs) + per_seq * len(qs)
                fc, fm = f * self._c, b * self._m
                out.append(OpCost(label, self._Ll * (max(fc, fm) + self._kl), "compute" if fc > fm else "memory",
                                  self._Ll * f, self._Ll * b))
        return out

    @staticmethod
    def _latent_bytes(m: ModelSpec, dkv: int) -> int:
        """MLA's cached latent a token a layer: kv_lora_rank + rope dims in the KV dtype; a DSA model's FP8 cache
        keeps its rope dims in 16 bits and a 4-byte scale per 128 of the rank (SGLang's `calculate_mla_kv_cache_dim`
        for DSA models, vLLM's FlashMLA sparse layout: 512 + 16 + 128 = 656 bytes for GLM-5)."""
        r, rope = m.kv_lora_rank, m.qk_rope_head_dim
        if m.index_topk and dkv == 1:
            return r + r // 128 * 4 + rope * 2
        return (r + rope) * dkv

    def _indexer(self, m: ModelSpec) -> None:
        """DSA's lightning indexer in every layer (replicated on each GPU, as vLLM and SGLang build it): its GEMMs
        (wq_b from the query latent, wk and weights_proj from the hidden states), and its scoring (`_index_time`):
        each query against every cached token's key, 2 x heads x head dim FLOPs a pair in FP8 (DeepGEMM's
        fp8_mqa_logits: at the FP8 peak where the GPU has one), the keys read once a row, the float32 logits
        written and read again by the top-k kernel."""
        h, n, dh = m.hidden_size, m.index_n_heads, m.index_head_dim
        self._gemms += [("indexer.wq_b", m.q_lora_rank or h, n * dh), ("indexer.wk", h, dh),
                        ("indexer.weights_proj", h, n)]
        c = 1.0 / (self.gpu.fp8_flops * self.params.compute_efficiency) if self.gpu.fp8_flops else self._c
        self._index = (2.0 * n * dh, c, m.index_key_bytes, 2 * 4, n * dh * 2)

    def _index_time(self, pq: int, pkv: int, ppairs: int, dq: int, dkv: int, dpairs: int) -> float:
        """One layer's indexer seconds: per row kind, max(pairs x FLOPs a pair, (positions read x key bytes + pairs
        x logit bytes + queries x q bytes) / bandwidth) plus a kernel floor."""
        flops, c, key, logit, q = self._index
        t = 0.0
        for rows, kv, pairs in ((pq, pkv, ppairs), (dq, dkv, dpairs)):
            if rows:
                fc, fm = pairs * flops * c, (kv * key + pairs * logit + rows * q) * self._m
                t += (fc if fc > fm else fm) + self._kl
        return t

    def _index_ops(self, shape: StepShape) -> list[OpCost]:
        """The breakdown's DSA indexer lines (`_index_time`), prefill and decode rows apart."""
        per_pair, c, key, logit, q = self._index
        out = []
        for label, want in (("indexer (prefill)", False), ("indexer (decode)", True)):
            rows = [(n, cx) for n, cx, dec in zip(shape.num_new_tokens, shape.num_context_tokens, shape.is_decode)
                    if dec == want]
            if rows:
                pairs = sum(n * cx + n * (n + 1) // 2 for n, cx in rows)
                nbytes = sum(cx + n for n, cx in rows) * key + pairs * logit + sum(n for n, _ in rows) * q
                flops = pairs * per_pair
                fc, fm = flops * c, nbytes * self._m
                out.append(OpCost(label, self._L * (max(fc, fm) + self._kl), "compute" if fc > fm else "memory",
                                  self._L * flops, self._L * nbytes))
        return out
