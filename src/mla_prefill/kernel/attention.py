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
  first sequence. The sequences of a tile (at most ``BLOCK_T`` with queries) are walked as runs:
  consecutive sequences' KV ranges are adjacent in ``kv_indices``, so a run of them is one range
  of positions in which each row sees its own sequence's (a per-row lower bound joins the causal
  mask). A tile of several short sequences then waits on one chain of dependent loads and one
  pipeline fill instead of one per sequence. A sequence without queries but with KV leaves a gap
  in the range; a gap of more than one KV step starts a new run.
- Causal masking is split into two ranges: KV blocks every row of the tile may see run without
  a mask; only the diagonal band pays for ``tl.where``; blocks past it are never visited.
- Program 0 takes the last tile (the longest causal range) so long work starts first.
- 1-token tiles (the small batches) wait on a chain of dependent loads, indptr -> page indices
  -> gathered rows, besides their instruction stream: they read the first block of
  ``kv_indices`` beside the indptr loads and use it when their range starts there (one cold
  load, ~0.4 us, off the chain). Their rows share one causal limit, so one masked loop walks
  the whole range (a third less code); larger tiles run an unmasked loop, then the diagonal
  band, which starts on the indices the first loop already loaded.
- Decode-like batches (few query tiles, long KV) split the KV into pieces of one size, one
  program each, so long and short ranges cost their length, not an equal share of programs.
  1-token tiles pool the causal ranges of all tokens (``_mla_pooled_split_kernel``, which sizes
  the pieces itself); larger tiles take their pieces from a work table that
  ``_split_schedule_kernel`` writes first (tiles follow the sequences; ``_mla_prefill_kernel``
  with ``SCHEDULED``). ``_combine_kernel`` merges the normalised partial outputs by their
  base-2 lse; a scheduled tile whose range is one piece writes the output itself and the combine
  skips its tokens. On sm_90+ it is a programmatic dependent launch of the split kernel, so its launch
  overlaps the split's end (ed999c80: 23.6 -> 22.3 us, measured 2026-12-03; docs/design.md).
"""

import os

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from .plan import REC_FIELDS as _REC_FIELDS

# a scheduled split's work table (int32): per token its first partial row and piece count (the
# combine's), then one record per program of the attention launch: tok0, tok_end, q_start,
# q_end, kv_start, kv_end, lo, hi
REC_FIELDS = tl.constexpr(_REC_FIELDS)


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
    row_lo,
    causal_lim,
    qk_scale,
    HEAD_CKV: tl.constexpr,
    HEAD_KPE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    MASKED: tl.constexpr,  # constexpr so the mask code is compiled out of the bulk loop
    RUNS: tl.constexpr,  # rows may belong to several sequences: each sees keys from row_lo on
    OFFS32: tl.constexpr,  # page * stride fits int32 for every page of the caches (host-checked)
    INTERPRET: tl.constexpr,  # the interpreter's bf16 tl.dot is wrong: compute in fp32 there
):
    """Online-softmax update of (acc, m_i, l_i) over KV positions [lo, hi) of ``kv_indices``
    (``idx_ptr``): row r sees position j when ``row_lo[r] <= j <= causal_lim[r]`` (``row_lo``
    only with ``RUNS``; the range is then one run of sequences, see ``_mla_prefill_kernel``).

    ``pages`` holds the page indices of positions [lo, lo + BLOCK_N) (0 at or past ``idx_hi``,
    the end of the range's indices); the pages of [hi, hi + BLOCK_N) are returned the same way,
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
            if RUNS:
                keep = keep & (cols[None, :] >= row_lo[:, None])
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
def _token_seqs(qo_indptr_ptr, kv_indptr_ptr, toks, tok_ok, batch, total_q, GUESS32: tl.constexpr):
    """Per token of the vector ``toks`` (``tok_ok`` masks lanes): its sequence's
    (q_start, q_end, kv_start, kv_end), found by the proportional guess, else a binary search of
    ``qo_indptr`` (the largest b with qo_indptr[b] <= token), all lanes at once."""
    guess, g_q0, g_q1, g_k0, g_k1 = _guess_seq(
        qo_indptr_ptr, kv_indptr_ptr, toks, tok_ok, batch, total_q, GUESS32
    )
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
    return q_start, q_end, kv_start, kv_end


@triton.jit
def _piece_size(work, num_pieces, BLOCK_N: tl.constexpr, MIN_CHUNK: tl.constexpr):
    """(piece size C, pieces per range ``ceil(work / C)``) for the KV ranges ``work`` (a vector;
    0: no range): the smallest C, a multiple of ``BLOCK_N`` and at least ``MIN_CHUNK`` and
    ``sum(work) / num_pieces``, whose pieces fit ``num_pieces`` (there are at most
    ``num_pieces`` non-empty ranges, so one piece per range always does)."""
    total = tl.sum(work.to(tl.int64), 0)
    chunk = tl.cdiv(tl.cdiv(total, num_pieces), BLOCK_N) * BLOCK_N
    chunk = tl.maximum(chunk, MIN_CHUNK).to(tl.int32)  # <= the longest range + BLOCK_N
    count = tl.cdiv(work, chunk)
    if tl.sum(count, 0) > num_pieces:
        # the ranges' tails take more pieces than the budget: bisect (in BLOCK_N steps) for the
        # smallest piece within it
        lo_c = chunk
        hi_c = tl.cdiv(tl.max(work, 0), BLOCK_N) * BLOCK_N
        while hi_c - lo_c > BLOCK_N:
            mid = (lo_c + hi_c) // (2 * BLOCK_N) * BLOCK_N
            over = tl.sum(tl.cdiv(work, mid), 0) > num_pieces
            lo_c = tl.where(over, mid, lo_c)
            hi_c = tl.where(over, hi_c, mid)
        chunk = hi_c
        count = tl.cdiv(work, chunk)
    return chunk, count


@triton.jit
def _seq_rows(row_lo, causal_lim, row_tok, q_start, q_end, kv_start, kv_end, tok_end):
    """Adds a sequence to a run: the rows of its tokens see KV positions [kv_start, kv_start +
    prefix + i] of ``kv_indices`` (i: the token's index in the sequence). Returns the rows'
    bounds and the end of the positions the tile's rows of the sequence see."""
    prefix = (kv_end - kv_start) - (q_end - q_start)
    in_seq = (row_tok >= q_start) & (row_tok < q_end)
    row_lo = tl.where(in_seq, kv_start, row_lo)
    causal_lim = tl.where(in_seq, kv_start + prefix + (row_tok - q_start), causal_lim)
    i_last = tl.minimum(tok_end, q_end) - 1 - q_start
    return (
        row_lo,
        causal_lim,
        kv_start + tl.maximum(tl.minimum(kv_end - kv_start, prefix + i_last + 1), 0),
    )


@triton.jit
def _next_seq(qo_indptr_ptr, kv_indptr_ptr, b, q_end, kv_end, batch):
    """Sequence b + 1: (b + 1, q_start, q_end, kv_start, kv_end); its starts are sequence b's
    ends, and its ends are read masked off past the last sequence."""
    b += 1
    more = b < batch
    q_next = tl.load(qo_indptr_ptr + b + 1, mask=more, other=0)
    kv_next = tl.load(kv_indptr_ptr + b + 1, mask=more, other=0)
    return b, q_end, q_next, kv_end, kv_next


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
    table_ptr,
    dst_o_ptr,
    dst_lse_ptr,
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
    stride_do_t,
    stride_do_h,
    stride_dl_t,
    stride_dl_h,
    total_q,
    batch,
    qk_scale,
    num_kv_indices,
    NUM_HEADS: tl.constexpr,
    HEAD_CKV: tl.constexpr,
    HEAD_KPE: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SCHEDULED: tl.constexpr,  # a split: program q attends the piece of record q (see below)
    RECORDS: tl.constexpr,  # program q's tile is record q's (SCHEDULED, or tiles in work order)
    WAIT_TABLE: tl.constexpr,  # a programmatic dependent launch of the table kernel: wait for it
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
    # tiles of the global tiling may hold several sequences: they walk runs of them (below)
    RUNS: tl.constexpr = not ONE_TOKEN and not RECORDS
    RUN_GAP: tl.constexpr = BLOCK_N  # KV positions of query-less sequences a run walks over
    # a split of 1-token tiles pools the ranges of all tokens instead (_mla_pooled_split_kernel)
    tl.static_assert(BLOCK_T > 1 or not RECORDS, "1-token tiles are split by the pooled kernel")
    tl.static_assert(RECORDS or not SCHEDULED, "a scheduled split reads its pieces' records")
    if RECORDS:
        # one tile of one sequence (_tile_order_kernel, _split_schedule_kernel) and, in a
        # split, a piece [lo, hi) of its KV; a split's partial rows start at slot * BLOCK_T
        # (o_base), or, when the piece is the tile's whole range, at the rows of dst_o /
        # dst_lse (the destinations themselves)
        if WAIT_TABLE:
            gdc_wait()  # the table kernel has finished and its records are visible
        rec = table_ptr + 2 * total_q + tl.program_id(0) * REC_FIELDS
        tok0 = tl.load(rec)
        tok_end = tl.load(rec + 1)
        rec_q0 = tl.load(rec + 2)
        rec_q1 = tl.load(rec + 3)
        rec_k0 = tl.load(rec + 4)
        rec_k1 = tl.load(rec + 5)
        rec_lo = tl.load(rec + 6)
        rec_hi = tl.load(rec + 7)
    else:
        tok0 = (tl.cdiv(total_q, BLOCK_T) - 1 - tl.program_id(0)) * BLOCK_T  # longest range first
        tok_end = tl.minimum(tok0 + BLOCK_T, total_q)
    if SCHEDULED:
        o_base = tl.program_id(0).to(tl.int64) * stride_o_s - tok0.to(tl.int64) * stride_o_t
        l_base = tl.program_id(0).to(tl.int64) * stride_l_s - tok0.to(tl.int64) * stride_l_t
    else:
        o_base = 0
        l_base = 0

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
    if RECORDS:
        guess, g_q0, g_q1, g_k0, g_k1 = tok0 * 0, rec_q0, rec_q1, rec_k0, rec_k1
    else:
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
    if RECORDS:
        b = guess  # the record's sequence; its tile ends within it, so the loop runs once
    else:
        b_lo, b_hi = _search_bounds(guess, g_q0, g_q1, tok0, batch)
        while b_lo < b_hi:
            mid = (b_lo + b_hi + 1) // 2
            if tl.load(qo_indptr_ptr + mid) <= tok0:
                b_lo = mid
            else:
                b_hi = mid - 1
        b = b_lo
    if b == guess:
        q_start, q_end, kv_start, kv_end = g_q0, g_q1, g_k0, g_k1
    else:
        q_start = tl.load(qo_indptr_ptr + b)
        q_end = tl.load(qo_indptr_ptr + b + 1)
        kv_start = tl.load(kv_indptr_ptr + b)
        kv_end = tl.load(kv_indptr_ptr + b + 1)
    while (q_start < tok_end) & (b < batch):
        # one run: this sequence and the next ones with rows in the tile while each starts
        # within RUN_GAP positions of the run's end in kv_indices (consecutive sequences' KV
        # ranges are adjacent there; only sequences without queries leave gaps), walked as one
        # range of KV positions in which row r sees [row_lo[r], causal_lim[r]]. A tile of
        # several short sequences then waits on one chain of loads, not one per sequence.
        row_lo = tl.full([BLOCK_M], 2147483647, tl.int32)  # rows outside the run see nothing
        causal_lim = tl.full([BLOCK_M], -1, tl.int32)
        run_q0 = q_start
        prefix = (kv_end - kv_start) - (q_end - q_start)
        # keys every row of the sequence sees (when the run is this sequence alone)
        k_unmasked = kv_start + tl.maximum(prefix + tl.maximum(tok0, q_start) - q_start + 1, 0)
        row_lo, causal_lim, k1 = _seq_rows(
            row_lo, causal_lim, row_tok, q_start, q_end, kv_start, kv_end, tok_end
        )
        kv_hi = k1 - kv_start  # the sequence's range that rows of this tile see
        if SCHEDULED:
            k0 = kv_start + rec_lo
            k1 = kv_start + rec_hi
        else:
            k0 = kv_start
        run_q1 = q_end
        more_seqs = tok0 * 0  # sequences of the run after the first
        if RECORDS:
            q_start = tok_end  # one tile of one sequence: this run is the only one
        else:
            b, q_start, q_end, kv_start, kv_end = _next_seq(
                qo_indptr_ptr, kv_indptr_ptr, b, q_end, kv_end, batch
            )
            if not ONE_TOKEN:
                # sequences without queries join the run (they add no rows); the gap their KV
                # leaves is gathered and masked as long as it stays within RUN_GAP
                while (
                    (q_start < tok_end)
                    & (b < batch)
                    & ((q_end == q_start) | (kv_start - k1 <= RUN_GAP))
                ):
                    if q_end > q_start:
                        row_lo, causal_lim, k1 = _seq_rows(
                            row_lo, causal_lim, row_tok, q_start, q_end, kv_start, kv_end,
                            tok_end,
                        )  # fmt: skip
                        run_q1 = q_end
                        more_seqs += 1
                    b, q_start, q_end, kv_start, kv_end = _next_seq(
                        qo_indptr_ptr, kv_indptr_ptr, b, q_end, kv_end, batch
                    )
        in_run = (row_tok >= run_q0) & (row_tok < run_q1)
        acc = tl.zeros([BLOCK_M, HEAD_CKV], dtype=tl.float32)
        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        if ONE_TOKEN:
            if k0 == 0:
                pages = tl.where(offs_n < k1, spec_pages, 0)
            else:
                pages = tl.load(kv_indices_ptr + k0 + offs_n, mask=(k0 + offs_n) < k1, other=0)
            mid_n = k0
        else:
            pages = tl.load(kv_indices_ptr + k0 + offs_n, mask=(k0 + offs_n) < k1, other=0)
            # a run of one sequence: the blocks every row sees run unmasked, then the diagonal
            # band, which starts on the indices the first loop already loaded (loaded one step
            # ahead up to k1); a run of several sequences is masked throughout (a select, not an
            # `if`: Triton 3.5's TritonGPUCoalesce pass fails on the branch in 2-token tiles)
            unmasked = tl.maximum(tl.minimum(k_unmasked, k1) - k0, 0) // BLOCK_N * BLOCK_N
            mid_n = k0 + tl.where(more_seqs == 0, unmasked, 0)
            acc, m_i, l_i, pages = _attend_kv_range(
                acc, m_i, l_i, pages, q_n, q_p, ckv_ptr, kpe_ptr, kv_indices_ptr, stride_ckv_p,
                stride_kpe_p, k0, mid_n, k1, row_lo, causal_lim, qk_scale,
                HEAD_CKV, HEAD_KPE, BLOCK_N, False, RUNS, OFFS32, INTERPRET,
            )  # fmt: skip
        acc, m_i, l_i, pages = _attend_kv_range(
            acc, m_i, l_i, pages, q_n, q_p, ckv_ptr, kpe_ptr, kv_indices_ptr, stride_ckv_p,
            stride_kpe_p, mid_n, k1, k1, row_lo, causal_lim, qk_scale,
            HEAD_CKV, HEAD_KPE, BLOCK_N, True, RUNS, OFFS32, INTERPRET,
        )  # fmt: skip

        seen = l_i > 0.0
        l_div = tl.where(seen, l_i, 1.0)
        o = acc * (1.0 / l_div)[:, None]  # one division per row, not per element
        lse = tl.where(seen, m_i + tl.math.log2(l_div), float("-inf"))
        o_rows = row_tok64[:, None] * stride_o_t + row_head[:, None] * stride_o_h
        o_ptrs = out_ptr + o_base + o_rows + offs_ckv[None, :]
        l_ptrs = lse_ptr + l_base + row_tok64 * stride_l_t + row_head * stride_l_h
        if SCHEDULED:
            if (rec_lo == 0) & (rec_hi == kv_hi):
                # the tile's only piece (the combine skips its tokens): straight to the output
                d_rows = row_tok64[:, None] * stride_do_t + row_head[:, None] * stride_do_h
                d_ptrs = dst_o_ptr + d_rows + offs_ckv[None, :]
                tl.store(d_ptrs, o.to(dst_o_ptr.dtype.element_ty), mask=in_run[:, None])
                d_lse = dst_lse_ptr + row_tok64 * stride_dl_t + row_head * stride_dl_h
                tl.store(d_lse, lse, mask=in_run)
            else:
                # a piece a row sees no key of writes only lse = -inf; the combine never reads
                # its output
                tl.store(o_ptrs, o.to(out_ptr.dtype.element_ty), mask=(in_run & seen)[:, None])
                tl.store(l_ptrs, lse, mask=in_run)
        else:
            tl.store(o_ptrs, o.to(out_ptr.dtype.element_ty), mask=in_run[:, None])
            tl.store(l_ptrs, lse, mask=in_run)


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
    q_start, q_end, kv_start, kv_end = _token_seqs(
        qo_indptr_ptr, kv_indptr_ptr, toks, tok_ok, batch, total_q, GUESS32
    )
    # token t = query i of its sequence sees KV positions [0, prefix + i + 1)
    work = (kv_end - kv_start) - (q_end - q_start) + (toks - q_start) + 1
    work = tl.where(tok_ok, tl.maximum(work, 0), 0)
    chunk, count = _piece_size(work, num_pieces, BLOCK_N, MIN_CHUNK)
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
            lo, hi, hi, causal_lim, causal_lim, qk_scale,
            HEAD_CKV, HEAD_KPE, BLOCK_N, True, False, OFFS32, INTERPRET,
        )  # fmt: skip
        l_div = tl.where(l_i > 0.0, l_i, 1.0)  # a piece is never empty: l > 0 always
        o = acc * (1.0 / l_div)[:, None]
        slot = q.to(tl.int64) * NUM_HEADS + rows
        offs_ckv = tl.arange(0, HEAD_CKV)
        tl.store(part_o_ptr + slot[:, None] * HEAD_CKV + offs_ckv[None, :], o)
        tl.store(part_lse_ptr + slot, m_i + tl.math.log2(l_div))


@triton.jit
def _slot_owner(ends, slots, LAST: tl.constexpr):
    """Per slot, the first index i in [0, LAST] with ``ends[i] > slot`` (``ends``: a running
    total of slots per item): the item whose slots hold it, a vectorised binary search."""
    lo_i = tl.zeros(slots.shape, dtype=tl.int32)
    hi_i = tl.zeros(slots.shape, dtype=tl.int32) + LAST
    while tl.max(hi_i - lo_i, 0) > 0:
        mid = (lo_i + hi_i) // 2
        past = tl.gather(ends, mid, 0) > slots
        hi_i = tl.where(past, mid, hi_i)
        lo_i = tl.where(past, lo_i, mid + 1)
    return lo_i


@triton.jit
def _store_records(table_ptr, total_q, slots, num_slots, used, fields):
    """Each slot's record at ``2 * total_q + REC_FIELDS * slot``: ``fields`` (tok0, tok_end,
    q_start, q_end, kv_start, kv_end, lo, hi) where ``used``, else an empty tile (tok0 = tok_end
    = q_start = q_end = total_q, the rest 0)."""
    tok0, tok_end, q_start, q_end, kv_start, kv_end, lo, hi = fields
    empty = tl.zeros(slots.shape, dtype=tl.int32) + total_q
    rec = table_ptr + 2 * total_q + slots * REC_FIELDS
    ok = slots < num_slots
    tl.store(rec, tl.where(used, tok0, empty), mask=ok)
    tl.store(rec + 1, tl.where(used, tok_end, empty), mask=ok)
    tl.store(rec + 2, tl.where(used, q_start, empty), mask=ok)
    tl.store(rec + 3, tl.where(used, q_end, empty), mask=ok)
    tl.store(rec + 4, tl.where(used, kv_start, 0), mask=ok)
    tl.store(rec + 5, tl.where(used, kv_end, 0), mask=ok)
    tl.store(rec + 6, tl.where(used, lo, 0), mask=ok)
    tl.store(rec + 7, tl.where(used, hi, 0), mask=ok)


@triton.jit
def _split_schedule_kernel(
    qo_indptr_ptr,
    kv_indptr_ptr,
    table_ptr,
    total_q,
    batch,
    num_slots,
    BLOCK_T: tl.constexpr,
    BLOCK_N: tl.constexpr,
    MIN_CHUNK: tl.constexpr,
    BLOCK_TQ: tl.constexpr,  # >= total_q
    BLOCK_SL: tl.constexpr,  # >= num_slots
    GUESS32: tl.constexpr,
    USE_PDL: tl.constexpr,  # sm_90+: the attention launch may start while this program runs
):
    """The work of a scheduled split (one program): the KV ranges of all query tiles cut into
    pieces of one size, one attention program (slot) each.

    Tiles follow the sequences: sequence b's queries in tiles of ``BLOCK_T`` tokens from its
    first, so a tile is one sequence's and sees KV ``[0, min(kv_len, prefix + i_last + 1))``.
    The ranges of all tiles are cut into pieces of one size ``C`` (``_piece_size``: at most
    ``num_slots`` pieces) and numbered tile by tile; slots past the last piece get an empty
    record (``tok0 = tok_end = q_start = total_q``). Equal pieces cost the same however unequal
    the ranges, where equal fractions of each range (a per-tile split) cost the longest range's
    fraction: batches of 1-4 new tokens over 2-32K cached positions ran at 1.4-2.0 TB/s that way.

    Writes ``table[t]`` = the partial row of token t's first piece (slot * BLOCK_T + its place
    in the tile), ``table[total_q + t]`` = its tile's piece count (rows of later pieces follow
    ``BLOCK_T`` apart), and at ``2 * total_q + REC_FIELDS * slot`` each slot's record.
    """
    if USE_PDL:
        gdc_launch_dependents()  # one program: the attention programs wait in gdc_wait
    toks = tl.arange(0, BLOCK_TQ)
    tok_ok = toks < total_q
    q_start, q_end, kv_start, kv_end = _token_seqs(
        qo_indptr_ptr, kv_indptr_ptr, toks, tok_ok, batch, total_q, GUESS32
    )
    within = tl.where(tok_ok, (toks - q_start) % BLOCK_T, 0)  # place in its tile
    first_tok = tok_ok & (within == 0)  # a tile starts here: the tile's work sits on this lane
    tile_end = tl.minimum(toks + BLOCK_T, q_end)
    kv_len = kv_end - kv_start
    work = tl.minimum(kv_len, kv_len - (q_end - q_start) + (tile_end - q_start))
    work = tl.where(first_tok, tl.maximum(work, 0), 0)
    chunk, count = _piece_size(work, num_slots, BLOCK_N, MIN_CHUNK)
    ends = tl.cumsum(count, 0)
    starts = ends - count
    # per token, from its tile's first token: the combine's first row and piece count
    lead = toks - within
    tl.store(table_ptr + toks, tl.gather(starts, lead, 0) * BLOCK_T + within, mask=tok_ok)
    tl.store(table_ptr + total_q + toks, tl.gather(count, lead, 0), mask=tok_ok)
    # per slot: the tile whose pieces hold it (a binary search of ``ends``) and its piece
    slots = tl.arange(0, BLOCK_SL)
    lo_t = _slot_owner(ends, slots, BLOCK_TQ - 1)  # the first token whose pieces end past it
    used = slots < tl.sum(count, 0)
    lo = (slots - tl.gather(starts, lo_t, 0)) * chunk
    hi = tl.minimum(lo + chunk, tl.gather(work, lo_t, 0))
    fields = (lo_t, tl.gather(tile_end, lo_t, 0), tl.gather(q_start, lo_t, 0),
              tl.gather(q_end, lo_t, 0), tl.gather(kv_start, lo_t, 0), tl.gather(kv_end, lo_t, 0),
              lo, hi)  # fmt: skip
    _store_records(table_ptr, total_q, slots, num_slots, used, fields)


@triton.jit
def _tile_order_kernel(
    qo_indptr_ptr,
    kv_indptr_ptr,
    table_ptr,
    total_q,
    batch,
    num_slots,
    BLOCK_T: tl.constexpr,
    BLOCK_N: tl.constexpr,
    LOG_B: tl.constexpr,  # 2 ** LOG_B >= batch
    BLOCK_SL: tl.constexpr,  # >= num_slots
    USE_PDL: tl.constexpr,  # sm_90+: the attention launch may start while this program runs
):
    """The tiles of a batch in work order (one program), one attention program (slot) each:
    sequence b's queries in tiles of ``BLOCK_T`` tokens from its first (a tile is one
    sequence's and sees KV ``[0, min(kv_len, prefix + i_last + 1))``), the sequences by
    descending KV length (their longest tile's range), each sequence's tiles together, from its
    last (longest range) back.

    The hardware starts a grid's programs in order as SMs free up, so the longest tiles start
    first and the last wave holds short ones; unequal batches (long and short sequences, long
    prefixes) otherwise end on a wave of the longest. A sequence's tiles stay side by side, so
    they read its KV rows while they are in L2 (a sort of all tiles by range measured 1.2x
    slower, ``docs/rejected.md``). Only the sequences are sorted: ``BLOCK_B`` lanes.

    Writes, at ``2 * total_q + REC_FIELDS * slot``, each slot's record (the fields of
    ``_split_schedule_kernel``'s, ``[lo, hi)`` the tile's whole range); slots past the last tile
    get an empty record (``tok0 = tok_end = q_start = total_q``).
    """
    if USE_PDL:
        gdc_launch_dependents()  # one program: the attention programs wait in gdc_wait
    BLOCK_B: tl.constexpr = 1 << LOG_B
    seqs = tl.arange(0, BLOCK_B)
    seq_ok = seqs < batch
    q0 = tl.load(qo_indptr_ptr + seqs, mask=seq_ok, other=0)
    q1 = tl.load(qo_indptr_ptr + seqs + 1, mask=seq_ok, other=0)
    k0 = tl.load(kv_indptr_ptr + seqs, mask=seq_ok, other=0)
    k1 = tl.load(kv_indptr_ptr + seqs + 1, mask=seq_ok, other=0)
    ntiles = tl.where(seq_ok, tl.cdiv(tl.maximum(q1 - q0, 0), BLOCK_T), 0)
    # descending (KV blocks + 1, sequence) in one int32; a sequence with tiles has a key >= 1
    KEY_CAP: tl.constexpr = (1 << (30 - LOG_B)) - 1
    blocks = tl.minimum(tl.cdiv(tl.maximum(k1 - k0, 0), BLOCK_N), KEY_CAP - 1)
    key = tl.where(ntiles > 0, blocks + 1, 0)
    seq_of = tl.sort((key << LOG_B) | seqs, descending=True) & (BLOCK_B - 1)  # rank -> sequence
    n_r = tl.gather(ntiles, seq_of, 0)
    ends = tl.cumsum(n_r, 0)
    # per slot: its rank (the first whose tiles end past it), its sequence and its tile
    slots = tl.arange(0, BLOCK_SL)
    lo_r = _slot_owner(ends, slots, BLOCK_B - 1)
    used = slots < tl.sum(ntiles, 0)
    b = tl.gather(seq_of, lo_r, 0)
    s_q0 = tl.gather(q0, b, 0)
    s_q1 = tl.gather(q1, b, 0)
    # tiles from the sequence's last back: the j-th slot of its run takes tile ntiles - 1 - j
    tok0 = s_q0 + (tl.gather(ends, lo_r, 0) - 1 - slots) * BLOCK_T
    tok_end = tl.minimum(tok0 + BLOCK_T, s_q1)
    s_k0 = tl.gather(k0, b, 0)
    s_k1 = tl.gather(k1, b, 0)
    kv_len = s_k1 - s_k0
    work = tl.maximum(tl.minimum(kv_len, kv_len - (s_q1 - s_q0) + (tok_end - s_q0)), 0)
    fields = (tok0, tok_end, s_q0, s_q1, s_k0, s_k1, work * 0, work)  # the tile's whole range
    _store_records(table_ptr, total_q, slots, num_slots, used, fields)


@triton.jit
def _merge_slots(
    acc, den, m_i, part_o_ptr, part_lse_ptr, first, k0, n, head, offs_s, offs_d,
    NUM_HEADS: tl.constexpr, HEAD_CKV: tl.constexpr, ROWS: tl.constexpr, FIRST: tl.constexpr,
):  # fmt: skip
    """Merge a row's pieces ``k0 + offs_s`` (``< n``; partial row ``first + k * ROWS``) into the
    running (acc, den, m_i): one load of their lse, then one of the outputs of those that saw a
    key (lse > -inf). ``FIRST``: the row's first block (``acc``, ``den``, ``m_i`` unused)."""
    lse_at = (first + (k0 + offs_s) * ROWS) * NUM_HEADS + head
    part = tl.load(part_lse_ptr + lse_at, mask=k0 + offs_s < n, other=float("-inf"))
    if FIRST:
        m_new = tl.max(part, 0)
        m_new = tl.where(m_new == float("-inf"), 0.0, m_new)  # no piece saw a key
        w = tl.math.exp2(part - m_new)  # 0 for pieces that saw no key
        den = tl.sum(w, 0)
    else:
        # m_i is finite (0 where no piece so far saw a key), so exp2 never sees inf - inf
        m_new = tl.maximum(m_i, tl.max(part, 0))
        alpha = tl.math.exp2(m_i - m_new)
        w = tl.math.exp2(part - m_new)
    o_s = tl.load(
        part_o_ptr + lse_at[:, None] * HEAD_CKV + offs_d[None, :],
        mask=(part > float("-inf"))[:, None],
        other=0.0,
    )  # the outputs of pieces that saw no key are never read
    if FIRST:
        acc = tl.sum(w[:, None] * o_s, 0)
    else:
        acc = acc * alpha + tl.sum(w[:, None] * o_s, 0)
        den = den * alpha + tl.sum(w, 0)
    return acc, den, m_new


@triton.jit
def _combine_row(
    part_o_ptr, part_lse_ptr, out_ptr, lse_ptr, first, n, tok, head, offs_d,
    stride_o_t, stride_o_h, stride_l_t, stride_l_h,
    NUM_HEADS: tl.constexpr, HEAD_CKV: tl.constexpr, BLOCK_S: tl.constexpr, ROWS: tl.constexpr,
):  # fmt: skip
    """Merge the ``n`` pieces of one (token, head) row from partial row ``first`` and store the
    row's output columns ``offs_d`` (and its lse from the first column block)."""
    offs_s = tl.arange(0, BLOCK_S)
    # the first block straight-line (every load of it in flight at once; in a loop, ptxas issues
    # them a few slots at a time), later ones online
    acc, den, m_i = _merge_slots(
        0.0, 0.0, 0.0, part_o_ptr, part_lse_ptr,
        first, 0, n, head, offs_s, offs_d, NUM_HEADS, HEAD_CKV, ROWS, True,
    )  # fmt: skip
    for k0 in range(BLOCK_S, n, BLOCK_S):
        acc, den, m_i = _merge_slots(
            acc, den, m_i, part_o_ptr, part_lse_ptr,
            first, k0, n, head, offs_s, offs_d, NUM_HEADS, HEAD_CKV, ROWS, False,
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


@triton.jit
def _combine_kernel(
    part_o_ptr,
    part_lse_ptr,
    table_ptr,
    out_ptr,
    lse_ptr,
    total_q,
    stride_o_t,
    stride_o_h,
    stride_l_t,
    stride_l_h,
    NUM_HEADS: tl.constexpr,
    HEAD_CKV: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_S: tl.constexpr,
    ROWS: tl.constexpr,  # partial rows (of 16 heads) per piece: the split's tile, in tokens
    DIRECT: tl.constexpr,  # a scheduled split: a token of one piece was written by its piece
    USE_PDL: tl.constexpr,  # launched as a programmatic dependent of the split kernel
):
    """Merge the normalised partial outputs of one (token, head) row by their base-2 lse.

    Partials are ``[row, head, HEAD_CKV]`` (fp32) and ``[row, head]``; token t's pieces are at
    rows ``table[t] + k * ROWS`` for ``k < table[total_q + t]`` (the pooled kernel's table:
    ``ROWS`` 1; a scheduled split's: its tile). ``BLOCK_S`` pieces at a time, merged online.
    With ``DIRECT``, a token whose tile took one piece is left alone: that piece stored the
    final output and lse (``_mla_prefill_kernel``); a token of no piece (no key) gets 0 and -inf.

    Program (row, D block), per block of pieces: one load of their lse, then one load of the
    outputs of the pieces that saw a key (with the table's, three dependent memory round
    trips). ``[BLOCK_S, BLOCK_D]`` with ``BLOCK_D = 8192 / BLOCK_S`` (capped at 512): a thread
    holds all pieces of its 4 columns, so the merge is a sum in registers (no shuffles, no
    barriers).
    """
    if USE_PDL:
        gdc_wait()  # the split kernel has finished and its partials are visible
    row = tl.program_id(0).to(tl.int64)
    tok = row // NUM_HEADS
    head = row % NUM_HEADS
    offs_d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    first = tl.load(table_ptr + tok).to(tl.int64)
    n = tl.load(table_ptr + total_q + tok)
    # with DIRECT, a token of one piece is done; piece counts are never negative
    ONE_PIECE: tl.constexpr = 1 if DIRECT else -1
    if n != ONE_PIECE:
        _combine_row(
            part_o_ptr, part_lse_ptr, out_ptr, lse_ptr, first, n, tok, head, offs_d,
            stride_o_t, stride_o_h, stride_l_t, stride_l_h,
            NUM_HEADS, HEAD_CKV, BLOCK_S, ROWS,
        )  # fmt: skip
