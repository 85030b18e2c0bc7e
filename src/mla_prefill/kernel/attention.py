"""Triton kernels for DeepSeek-V3 MLA (weight-absorbed) causal prefill over a paged KV cache.

Math, per sequence and query i (bottom-right aligned causal mask, ``prefix = kv_len - q_len``)::

    s_j   = sm_scale * (q_nope . ckv_j + q_pe . kpe_j)        for j <= prefix + i
    out   = sum_j softmax(s)_j * ckv_j                          (ckv is both K and V)
    lse   = log2(sum_j 2 ** (s_j * log2(e)))                    (base 2, as the definition asks)

Design (FlashAttention-2 style online softmax, Dao 2023, in base 2 as in Triton's
``06-fused-attention`` tutorial):

- The 16 heads of a token share every K/V row, so a program packs ``BLOCK_T`` tokens x 16 heads
  into the ``BLOCK_M`` rows of one MMA tile. Each gathered KV tile is loaded once and used for
  both ``Q K^T`` (as K) and ``P V`` (as V).
- Programs walk a global token tiling (``tile = token // BLOCK_T``), so no host- or device-side
  scan is needed to map programs to sequences: a program binary-searches ``qo_indptr`` for its
  first sequence and loops over every sequence that intersects its tile (a tile straddles at
  most ``BLOCK_T`` sequences), masking the rows of the others.
- Causal masking is split into two ranges: KV blocks every row of the tile may see run without
  a mask; only the diagonal band pays for ``tl.where``; blocks past it are never visited.
- Program 0 takes the last tile (the longest causal range) so long work starts first.
- 1-token tiles (the small batches) wait on a chain of dependent loads, indptr -> page indices
  -> gathered rows, besides their instruction stream: they read the first block of
  ``kv_indices`` beside the indptr loads and use it when their range starts there (one cold
  load, ~0.4 us, off the chain). Their rows share one causal limit, so one masked loop walks
  the whole range (a third less code); larger tiles run an unmasked loop, then the diagonal
  band, which starts on the indices the first loop already loaded.
- Decode-like batches (few query tiles, long KV) split the KV. 1-token tiles pool the causal
  ranges of all tokens and cut the pool into pieces of one size, one program each
  (``_mla_pooled_split_kernel``); larger tiles cut every tile's range into ``num_splits`` equal
  pieces of at least ``MIN_CHUNK`` positions (``_mla_prefill_kernel`` with ``MIN_CHUNK > 0``; no
  program is spent on a range past a sequence's end unless the sequence is short).
  ``_combine_kernel`` merges the normalised partial outputs by their base-2 lse. On sm_90+ it is
  a programmatic dependent launch of the split kernel, so its launch overlaps the split's end
  (ed999c80: 23.6 -> 22.3 us, measured 2026-12-03; docs/design.md).
"""

import os

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait


def is_interpreter() -> bool:
    """True under ``TRITON_INTERPRET=1`` (the CPU test path)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


@triton.jit
def _attend_kv_range(
    acc,
    m_i,
    l_i,
    pages,
    q_n,
    q_p,
    ckv_ptr,
    kpe_ptr,
    idx_ptr,
    stride_ckv_p,
    stride_kpe_p,
    lo,
    hi,
    idx_hi,
    causal_lim,
    qk_scale,
    HEAD_CKV: tl.constexpr,
    HEAD_KPE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    MASKED: tl.constexpr,  # constexpr so the mask code is compiled out of the bulk loop
    OFFS32: tl.constexpr,  # page * stride fits int32 for every page of the caches (host-checked)
    INTERPRET: tl.constexpr,  # the interpreter's bf16 tl.dot is wrong: compute in fp32 there
):
    """Online-softmax update of (acc, m_i, l_i) over KV positions [lo, hi) of one sequence.

    ``pages`` holds the page indices of positions [lo, lo + BLOCK_N) (0 at or past ``idx_hi``,
    the end of the sequence's range); the pages of [hi, hi + BLOCK_N) are returned the same way,
    so a following range that starts at ``hi`` begins without an index load on its chain.
    The page indices of a step are loaded one step ahead, so the gather's addresses come from a
    loop-carried value: Triton's pipeliner then gives the gathered rows ``num_stages - 1``
    buffers in flight. Loaded in the same step (index -> rows), it kept one buffer and waited for
    every gather (measured 2026-12-02; docs/design.md).
    """
    offs_n = tl.arange(0, BLOCK_N)
    offs_ckv = tl.arange(0, HEAD_CKV)
    offs_kpe = tl.arange(0, HEAD_KPE)
    for start in range(lo, hi, BLOCK_N):
        cols = start + offs_n
        pg = pages if OFFS32 else pages.to(tl.int64)  # 32-bit: ~7% fewer instructions
        if MASKED:
            col_ok = cols < hi
            kc = tl.load(
                ckv_ptr + pg[:, None] * stride_ckv_p + offs_ckv[None, :],
                mask=col_ok[:, None],
                other=0.0,
            )
            kp = tl.load(
                kpe_ptr + pg[:, None] * stride_kpe_p + offs_kpe[None, :],
                mask=col_ok[:, None],
                other=0.0,
            )
        else:
            kc = tl.load(ckv_ptr + pg[:, None] * stride_ckv_p + offs_ckv[None, :])
            kp = tl.load(kpe_ptr + pg[:, None] * stride_kpe_p + offs_kpe[None, :])
        # scalar base + constant offsets: the per-element address folds into the load
        nxt = start + BLOCK_N
        pages = tl.load(idx_ptr + nxt + offs_n, mask=offs_n < idx_hi - nxt, other=0)
        if INTERPRET:
            kc = kc.to(tl.float32)
            kp = kp.to(tl.float32)
        s = tl.dot(q_n, tl.trans(kc))
        s = tl.dot(q_p, tl.trans(kp), s)
        s = s * qk_scale
        if MASKED:
            keep = (cols[None, :] <= causal_lim[:, None]) & col_ok[None, :]
            s = tl.where(keep, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            # a row that has seen no key yet keeps m = -inf; use 0 so exp2 gives 0, not NaN
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        else:
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_use = m_new
        alpha = tl.math.exp2(m_i - m_use)
        p = tl.math.exp2(s - m_use[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(kc.dtype), kc, acc)
        m_i = m_new
    return acc, m_i, l_i, pages


@triton.jit
def _load_q(
    q_nope_ptr,
    q_pe_ptr,
    row_tok64,
    row_head,
    mask,
    stride_qn_t,
    stride_qn_h,
    stride_qp_t,
    stride_qp_h,
    HEAD_CKV: tl.constexpr,
    HEAD_KPE: tl.constexpr,
    INTERPRET: tl.constexpr,
):
    """The tile's query rows (token-major, 16 heads each): nope [BLOCK_M, 512], pe [BLOCK_M, 64]."""
    offs_ckv = tl.arange(0, HEAD_CKV)
    offs_kpe = tl.arange(0, HEAD_KPE)
    q_n = tl.load(
        q_nope_ptr
        + row_tok64[:, None] * stride_qn_t
        + row_head[:, None] * stride_qn_h
        + offs_ckv[None, :],
        mask=mask[:, None],
        other=0.0,
    )
    q_p = tl.load(
        q_pe_ptr
        + row_tok64[:, None] * stride_qp_t
        + row_head[:, None] * stride_qp_h
        + offs_kpe[None, :],
        mask=mask[:, None],
        other=0.0,
    )
    if INTERPRET:
        q_n = q_n.to(tl.float32)
        q_p = q_p.to(tl.float32)
    return q_n, q_p


@triton.jit
def _guess_seq(qo_indptr_ptr, kv_indptr_ptr, toks, ok, batch, total_q, GUESS32: tl.constexpr):
    """The sequence of token(s) ``toks`` guessed by proportion (exact for batches of equal q_len:
    decode, a single sequence) and the guess's indptr entries, read side by side:
    (guess, qo[g], qo[g + 1], kv[g], kv[g + 1]). Scalar or vector ``toks`` (``ok`` masks lanes)."""
    if GUESS32:
        guess = toks * batch // total_q  # a 64-bit division is a slow subroutine call
    else:
        guess = (toks.to(tl.int64) * batch // total_q).to(tl.int32)
    guess = tl.maximum(tl.minimum(guess, batch - 1), 0)
    g_q0 = tl.load(qo_indptr_ptr + guess, mask=ok, other=0)
    g_q1 = tl.load(qo_indptr_ptr + guess + 1, mask=ok, other=1)
    g_k0 = tl.load(kv_indptr_ptr + guess, mask=ok, other=0)
    g_k1 = tl.load(kv_indptr_ptr + guess + 1, mask=ok, other=0)
    return guess, g_q0, g_q1, g_k0, g_k1


@triton.jit
def _search_bounds(guess, g_q0, g_q1, toks, batch):
    """[lo, hi] holding each token's sequence (the largest b with qo_indptr[b] <= token) after
    the guess: the guess itself when it holds the token, else the side of it that does."""
    b_lo = tl.where(g_q0 <= toks, guess, 0)
    b_hi = tl.where(g_q0 <= toks, tl.where(g_q1 > toks, guess, batch - 1), guess - 1)
    return b_lo, b_hi


@triton.jit
def _mla_prefill_kernel(
    q_nope_ptr,
    q_pe_ptr,
    ckv_ptr,
    kpe_ptr,
    qo_indptr_ptr,
    kv_indptr_ptr,
    kv_indices_ptr,
    out_ptr,
    lse_ptr,
    stride_qn_t,
    stride_qn_h,
    stride_qp_t,
    stride_qp_h,
    stride_ckv_p,
    stride_kpe_p,
    stride_o_s,
    stride_o_t,
    stride_o_h,
    stride_l_s,
    stride_l_t,
    stride_l_h,
    total_q,
    batch,
    qk_scale,
    num_kv_indices,
    NUM_HEADS: tl.constexpr,
    HEAD_CKV: tl.constexpr,
    HEAD_KPE: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_N: tl.constexpr,
    MIN_CHUNK: tl.constexpr,  # 0: one program per tile; else split KV over program_id(1), see below
    OFFS32: tl.constexpr,  # num_pages * page stride < 2**31 for both caches: 32-bit gather offsets
    GUESS32: tl.constexpr,  # total_q * batch < 2**31: the first-sequence guess in 32 bits
    INTERPRET: tl.constexpr,
):
    BLOCK_M: tl.constexpr = BLOCK_T * NUM_HEADS
    # 1-token tiles: (a) the first index block is read early (their load chain is short, every
    # round trip on it shows); 64-row tiles have no registers to spare for it. (b) All 16 rows
    # share one causal limit, so the only mask is the range's end and one masked loop does the
    # whole range; the kernel's code shrinks by a third (2072 -> 1304 SASS instructions at 32-key
    # steps), measured 0.3-1 us faster (2026-12-03)
    ONE_TOKEN: tl.constexpr = BLOCK_T == 1
    # a split of 1-token tiles pools the ranges of all tokens instead (_mla_pooled_split_kernel)
    tl.static_assert(BLOCK_T > 1 or MIN_CHUNK == 0, "1-token tiles are split by the pooled kernel")
    num_tiles = tl.cdiv(total_q, BLOCK_T)
    tile = num_tiles - 1 - tl.program_id(0)  # longest causal range first
    split = tl.program_id(1)
    num_splits = tl.num_programs(1)
    tok0 = tile * BLOCK_T
    tok_end = tl.minimum(tok0 + BLOCK_T, total_q)

    offs_m = tl.arange(0, BLOCK_M)
    offs_ckv = tl.arange(0, HEAD_CKV)
    row_tok = tok0 + offs_m // NUM_HEADS
    row_head = offs_m % NUM_HEADS
    row_ok = row_tok < total_q
    row_tok64 = row_tok.to(tl.int64)

    offs_n = tl.arange(0, BLOCK_N)
    if ONE_TOKEN:
        # the first BLOCK_N entries of kv_indices, read beside the indptr loads: a range that
        # starts there (the first sequence's, when kv_indptr[0] is 0) skips one dependent load
        spec_pages = tl.load(kv_indices_ptr + offs_n, mask=offs_n < num_kv_indices, other=0)

    # first sequence of this tile: the largest b in [0, batch) with qo_indptr[b] <= tok0
    guess, g_q0, g_q1, g_k0, g_k1 = _guess_seq(
        qo_indptr_ptr, kv_indptr_ptr, tok0, True, batch, total_q, GUESS32
    )
    # Q does not depend on the sequence: its load is issued beside the index loads, after them,
    # so that its copy to shared memory (placed right after the load) waits on one round trip
    # together with them instead of before they are issued
    q_n, q_p = _load_q(
        q_nope_ptr, q_pe_ptr, row_tok64, row_head, row_ok,
        stride_qn_t, stride_qn_h, stride_qp_t, stride_qp_h, HEAD_CKV, HEAD_KPE, INTERPRET,
    )  # fmt: skip
    b_lo, b_hi = _search_bounds(guess, g_q0, g_q1, tok0, batch)
    while b_lo < b_hi:
        mid = (b_lo + b_hi + 1) // 2
        if tl.load(qo_indptr_ptr + mid) <= tok0:
            b_lo = mid
        else:
            b_hi = mid - 1

    b = b_lo
    if b == guess:
        q_start = g_q0
    else:
        q_start = tl.load(qo_indptr_ptr + b)
    while (q_start < tok_end) & (b < batch):
        if b == guess:
            q_end = g_q1
            kv_start = g_k0
            kv_len = g_k1 - g_k0
        else:
            q_end = tl.load(qo_indptr_ptr + b + 1)
            kv_start = tl.load(kv_indptr_ptr + b)
            kv_len = tl.load(kv_indptr_ptr + b + 1) - kv_start
        prefix = kv_len - (q_end - q_start)
        in_seq = (row_tok >= q_start) & (row_tok < q_end)
        # last KV position each row may see; -1 hides every key from rows of other sequences
        causal_lim = tl.where(in_seq, prefix + (row_tok - q_start), -1)
        i_first = tl.maximum(tok0, q_start) - q_start
        i_last = tl.minimum(tok_end, q_end) - 1 - q_start
        kv_hi = tl.maximum(tl.minimum(kv_len, prefix + i_last + 1), 0)
        if MIN_CHUNK > 0:
            # this (tile, sequence)'s KV range [0, kv_hi) in num_splits equal BLOCK_N-aligned
            # pieces of at least MIN_CHUNK: short ranges use the first few splits, the rest are
            # empty, so the splits that see a key form a prefix (the combine relies on it)
            chunk = tl.maximum(tl.cdiv(tl.cdiv(kv_hi, num_splits), BLOCK_N) * BLOCK_N, MIN_CHUNK)
            lo = tl.minimum(split * chunk, kv_hi)
            hi = tl.minimum(lo + chunk, kv_hi)
        else:
            lo = kv_hi * 0
            hi = kv_hi
        acc = tl.zeros([BLOCK_M, HEAD_CKV], dtype=tl.float32)
        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        idx_ptr = kv_indices_ptr + kv_start
        if ONE_TOKEN:
            if kv_start + lo == 0:
                pages = tl.where(offs_n < hi, spec_pages, 0)
            else:
                pages = tl.load(idx_ptr + lo + offs_n, mask=(lo + offs_n) < hi, other=0)
        else:
            pages = tl.load(idx_ptr + lo + offs_n, mask=(lo + offs_n) < hi, other=0)
        if ONE_TOKEN:
            mid_n = lo
        else:
            # the unmasked blocks, then the diagonal band; the band's first indices come from
            # the first loop (loaded one step ahead up to hi)
            kv_unmasked = tl.minimum(tl.maximum(prefix + i_first + 1, 0), kv_hi)
            mid_n = lo + tl.maximum(tl.minimum(kv_unmasked, hi) - lo, 0) // BLOCK_N * BLOCK_N
            acc, m_i, l_i, pages = _attend_kv_range(
                acc, m_i, l_i, pages, q_n, q_p, ckv_ptr, kpe_ptr, idx_ptr, stride_ckv_p,
                stride_kpe_p, lo, mid_n, hi, causal_lim, qk_scale,
                HEAD_CKV, HEAD_KPE, BLOCK_N, False, OFFS32, INTERPRET,
            )  # fmt: skip
        acc, m_i, l_i, pages = _attend_kv_range(
            acc, m_i, l_i, pages, q_n, q_p, ckv_ptr, kpe_ptr, idx_ptr, stride_ckv_p, stride_kpe_p,
            mid_n, hi, hi, causal_lim, qk_scale,
            HEAD_CKV, HEAD_KPE, BLOCK_N, True, OFFS32, INTERPRET,
        )  # fmt: skip

        seen = l_i > 0.0
        l_div = tl.where(seen, l_i, 1.0)
        o = acc * (1.0 / l_div)[:, None]  # one division per row, not per element
        lse = tl.where(seen, m_i + tl.math.log2(l_div), float("-inf"))
        o_ptrs = (
            out_ptr
            + split * stride_o_s
            + row_tok64[:, None] * stride_o_t
            + row_head[:, None] * stride_o_h
            + offs_ckv[None, :]
        )
        if MIN_CHUNK > 0:
            # a split that saw no key writes only lse = -inf; the combine never reads its output
            tl.store(o_ptrs, o.to(out_ptr.dtype.element_ty), mask=(in_seq & seen)[:, None])
        else:
            tl.store(o_ptrs, o.to(out_ptr.dtype.element_ty), mask=in_seq[:, None])
        l_ptrs = lse_ptr + split * stride_l_s + row_tok64 * stride_l_t + row_head * stride_l_h
        tl.store(l_ptrs, lse, mask=in_seq)

        b += 1
        q_start = q_end


@triton.jit
def _mla_pooled_split_kernel(
    q_nope_ptr,
    q_pe_ptr,
    ckv_ptr,
    kpe_ptr,
    qo_indptr_ptr,
    kv_indptr_ptr,
    kv_indices_ptr,
    part_o_ptr,
    part_lse_ptr,
    table_ptr,
    stride_qn_t,
    stride_qn_h,
    stride_qp_t,
    stride_qp_h,
    stride_ckv_p,
    stride_kpe_p,
    total_q,
    batch,
    qk_scale,
    num_pieces,
    NUM_HEADS: tl.constexpr,
    HEAD_CKV: tl.constexpr,
    HEAD_KPE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    MIN_CHUNK: tl.constexpr,
    BLOCK_TQ: tl.constexpr,  # >= total_q: every token's range is sized in one vector
    OFFS32: tl.constexpr,
    GUESS32: tl.constexpr,
    INTERPRET: tl.constexpr,
    USE_PDL: tl.constexpr,  # sm_90+: let the combine launch early (it waits for this grid's end)
):
    """1-token tiles, KV split over a pool: the causal KV ranges of all tokens are cut into
    pieces of one size, so every program does about the same work whatever the lengths.

    Every program sizes every token's range ``W_t`` (its sequence by the same proportional guess
    and binary search as the main kernel, vectorised), takes the smallest piece size ``C`` (a
    multiple of ``BLOCK_N``, at least ``MIN_CHUNK`` and ``sum W / num_pieces``) whose pieces
    ``sum ceil(W_t / C)`` fit the ``num_pieces`` programs of the grid (whole waves: the plan's
    choice), and numbers the pieces token by token: token t owns ``ceil(W_t / C)`` consecutive
    slots from ``start_t = sum_{t' < t} ceil(W_t' / C)``.
    Program ``q`` attends its slot's piece and writes the normalised partial output and base-2
    lse there; program 0 also writes ``start_t`` and the count per token to ``table`` for the
    combine. Pieces cost the same, unlike equal fractions of unequal ranges (ed999c80: 82-2103
    keys per token).
    """
    if USE_PDL:
        # every program of this grid is resident once all have passed here, so the combine's
        # programs (waiting in gdc_wait) can never hold back one of ours
        gdc_launch_dependents()
    q = tl.program_id(0)
    toks = tl.arange(0, BLOCK_TQ)
    tok_ok = toks < total_q
    guess, g_q0, g_q1, g_k0, g_k1 = _guess_seq(
        qo_indptr_ptr, kv_indptr_ptr, toks, tok_ok, batch, total_q, GUESS32
    )
    # each token's sequence: the largest b with qo_indptr[b] <= token (the guess, or a search)
    b_lo, b_hi = _search_bounds(guess, g_q0, g_q1, toks, batch)
    b_hi = tl.where(tok_ok, b_hi, b_lo)
    while tl.max(b_hi - b_lo, 0) > 0:
        active = b_hi > b_lo
        mid = (b_lo + b_hi + 1) // 2
        below = tl.load(qo_indptr_ptr + mid, mask=active, other=0) <= toks
        b_lo = tl.where(active & below, mid, b_lo)
        b_hi = tl.where(active & (~below), mid - 1, b_hi)
    miss = tok_ok & (b_lo != guess)
    q_start = tl.where(miss, tl.load(qo_indptr_ptr + b_lo, mask=miss, other=0), g_q0)
    q_end = tl.where(miss, tl.load(qo_indptr_ptr + b_lo + 1, mask=miss, other=0), g_q1)
    kv_start = tl.where(miss, tl.load(kv_indptr_ptr + b_lo, mask=miss, other=0), g_k0)
    kv_end = tl.where(miss, tl.load(kv_indptr_ptr + b_lo + 1, mask=miss, other=0), g_k1)
    # token t = query i of its sequence sees KV positions [0, prefix + i + 1)
    work = (kv_end - kv_start) - (q_end - q_start) + (toks - q_start) + 1
    work = tl.where(tok_ok, tl.maximum(work, 0), 0)
    total = tl.sum(work.to(tl.int64), 0)
    chunk = tl.cdiv(tl.cdiv(total, num_pieces), BLOCK_N) * BLOCK_N
    chunk = tl.maximum(chunk, MIN_CHUNK).to(tl.int32)  # <= the longest range + BLOCK_N
    count = tl.cdiv(work, chunk)
    if tl.sum(count, 0) > num_pieces:
        # the ranges' tails take more slots than the budget: bisect (in BLOCK_N steps) for the
        # smallest piece within it. One piece per range always is (num_pieces >= total_q)
        lo_c = chunk
        hi_c = tl.cdiv(tl.max(work, 0), BLOCK_N) * BLOCK_N
        while hi_c - lo_c > BLOCK_N:
            mid = (lo_c + hi_c) // (2 * BLOCK_N) * BLOCK_N
            over = tl.sum(tl.cdiv(work, mid), 0) > num_pieces
            lo_c = tl.where(over, mid, lo_c)
            hi_c = tl.where(over, hi_c, mid)
        chunk = hi_c
        count = tl.cdiv(work, chunk)
    ends = tl.cumsum(count, 0)
    starts = ends - count
    if q == 0:
        tl.store(table_ptr + toks, starts, mask=tok_ok)
        tl.store(table_ptr + total_q + toks, count, mask=tok_ok)
    if q < tl.sum(count, 0):
        mine = (starts <= q) & (ends > q)  # one token: the pieces of a token are consecutive
        tok = tl.sum(tl.where(mine, toks, 0), 0)
        lo = (q - tl.sum(tl.where(mine, starts, 0), 0)) * chunk
        hi = tl.minimum(lo + chunk, tl.sum(tl.where(mine, work, 0), 0))
        idx_ptr = kv_indices_ptr + tl.sum(tl.where(mine, kv_start, 0), 0)

        offs_n = tl.arange(0, BLOCK_N)
        rows = tl.arange(0, NUM_HEADS)
        row_tok64 = tl.zeros([NUM_HEADS], dtype=tl.int64) + tok
        pages = tl.load(idx_ptr + lo + offs_n, mask=(lo + offs_n) < hi, other=0)
        q_n, q_p = _load_q(
            q_nope_ptr, q_pe_ptr, row_tok64, rows, rows < NUM_HEADS,
            stride_qn_t, stride_qn_h, stride_qp_t, stride_qp_h, HEAD_CKV, HEAD_KPE, INTERPRET,
        )  # fmt: skip
        acc = tl.zeros([NUM_HEADS, HEAD_CKV], dtype=tl.float32)
        m_i = tl.full([NUM_HEADS], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([NUM_HEADS], dtype=tl.float32)
        causal_lim = tl.zeros([NUM_HEADS], dtype=tl.int32) + (hi - 1)  # hi ends the range
        acc, m_i, l_i, pages = _attend_kv_range(
            acc, m_i, l_i, pages, q_n, q_p, ckv_ptr, kpe_ptr, idx_ptr, stride_ckv_p, stride_kpe_p,
            lo, hi, hi, causal_lim, qk_scale,
            HEAD_CKV, HEAD_KPE, BLOCK_N, True, OFFS32, INTERPRET,
        )  # fmt: skip
        l_div = tl.where(l_i > 0.0, l_i, 1.0)  # a piece is never empty: l > 0 always
        o = acc * (1.0 / l_div)[:, None]
        slot = q.to(tl.int64) * NUM_HEADS + rows
        offs_ckv = tl.arange(0, HEAD_CKV)
        tl.store(part_o_ptr + slot[:, None] * HEAD_CKV + offs_ckv[None, :], o)
        tl.store(part_lse_ptr + slot, m_i + tl.math.log2(l_div))


@triton.jit
def _merge_slots(
    acc, den, m_i, part_o_ptr, part_lse_ptr, first, k0, n, step, head, offs_s, offs_d,
    NUM_HEADS: tl.constexpr, HEAD_CKV: tl.constexpr, FIRST: tl.constexpr,
):  # fmt: skip
    """Merge a row's slots ``first + k0 + offs_s * step`` (``k0 + offs_s < n``; ``k0 > 0`` only
    with step 1) into the running (acc, den, m_i): one load of their lse, then one of the
    outputs of those that saw a key (lse > -inf). ``FIRST``: the row's first block (``acc``,
    ``den``, ``m_i`` unused); later blocks need a finite ``m_i`` (pooled pieces are never
    empty)."""
    lse_at = (first + k0 + offs_s * step) * NUM_HEADS + head
    part = tl.load(part_lse_ptr + lse_at, mask=k0 + offs_s < n, other=float("-inf"))
    if FIRST:
        m_new = tl.max(part, 0)
        m_new = tl.where(m_new == float("-inf"), 0.0, m_new)  # no slot saw a key
        w = tl.math.exp2(part - m_new)  # 0 for splits that saw no key
        den = tl.sum(w, 0)
    else:
        m_new = tl.maximum(m_i, tl.max(part, 0))
        alpha = tl.math.exp2(m_i - m_new)
        w = tl.math.exp2(part - m_new)
    o_s = tl.load(
        part_o_ptr + lse_at[:, None] * HEAD_CKV + offs_d[None, :],
        mask=(part > float("-inf"))[:, None],
        other=0.0,
    )  # the outputs of empty splits are never read
    if FIRST:
        acc = tl.sum(w[:, None] * o_s, 0)
    else:
        acc = acc * alpha + tl.sum(w[:, None] * o_s, 0)
        den = den * alpha + tl.sum(w, 0)
    return acc, den, m_new


@triton.jit
def _combine_kernel(
    part_o_ptr,
    part_lse_ptr,
    table_ptr,
    out_ptr,
    lse_ptr,
    num_splits,
    total_q,
    stride_o_t,
    stride_o_h,
    stride_l_t,
    stride_l_h,
    NUM_HEADS: tl.constexpr,
    HEAD_CKV: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_S: tl.constexpr,
    POOLED: tl.constexpr,
    USE_PDL: tl.constexpr,  # launched as a programmatic dependent of the split kernel
):
    """Merge the normalised partial outputs of one (token, head) row by their base-2 lse.

    Partials are ``[slot, head, HEAD_CKV]`` (fp32) and ``[slot, head]``. A row's slots are
    ``first + k * step`` for ``k < n``: per-tile splits (``POOLED`` off) have ``first`` = token,
    ``step`` = total_q, ``n`` = num_splits (``BLOCK_S >= num_splits``: one load); pooled pieces
    (``_mla_pooled_split_kernel``) read ``first`` and ``n`` from ``table`` and have step 1, any
    ``n`` (merged online, ``BLOCK_S`` slots at a time).

    Program (row, D block), per block of slots: one load of their lse, then one load of the
    outputs of the slots that saw a key (two dependent memory round trips, three with the table).
    ``[BLOCK_S, BLOCK_D]`` with ``BLOCK_D = 8192 / BLOCK_S`` (capped at 512): up to 16 slots a
    thread holds all slots of its 4 columns, so the merge is a sum in registers (no shuffles, no
    barriers); above 16 the warps share the slots again.
    """
    if USE_PDL:
        gdc_wait()  # the split kernel has finished and its partials are visible
    row = tl.program_id(0).to(tl.int64)
    tok = row // NUM_HEADS
    head = row % NUM_HEADS
    offs_d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    offs_s = tl.arange(0, BLOCK_S)
    if POOLED:
        first = tl.load(table_ptr + tok).to(tl.int64)
        n = tl.load(table_ptr + total_q + tok)
        step = 1
    else:
        first = tok
        n = num_splits
        step = total_q
    # the first block straight-line (every load of it in flight at once; in a loop, ptxas issues
    # them a few slots at a time), later ones (pooled pieces only) online
    acc, den, m_i = _merge_slots(
        0.0, 0.0, 0.0, part_o_ptr, part_lse_ptr,
        first, 0, n, step, head, offs_s, offs_d, NUM_HEADS, HEAD_CKV, True,
    )  # fmt: skip
    if POOLED:
        for k0 in range(BLOCK_S, n, BLOCK_S):
            acc, den, m_i = _merge_slots(
                acc, den, m_i, part_o_ptr, part_lse_ptr,
                first, k0, n, step, head, offs_s, offs_d, NUM_HEADS, HEAD_CKV, False,
            )  # fmt: skip
    seen = den > 0.0
    den_div = tl.where(seen, den, 1.0)
    o = acc * (1.0 / den_div)
    tl.store(
        out_ptr + tok * stride_o_t + head * stride_o_h + offs_d, o.to(out_ptr.dtype.element_ty)
    )
    if tl.program_id(1) == 0:
        lse = tl.where(seen, m_i + tl.math.log2(den_div), float("-inf"))
        tl.store(lse_ptr + tok * stride_l_t + head * stride_l_h, lse)
