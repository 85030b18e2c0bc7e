"""Warp-specialised Hopper kernel (Gluon) for tiles of 4 tokens x 16 heads = 64 query rows.

Why a second kernel: Triton lays the fp32 ``[64, 512]`` accumulator over two warpgroups by
splitting N, so every ``Q K^T`` is a thin 64 x 32 MMA per warpgroup, the row max and sum cross
warpgroups through shared memory, and nothing overlaps the softmax with the MMAs (about 300
TFLOP/s on H200 against fa3's 600, NOTES.md). Here the two warpgroups are two Gluon partitions
that split the *contraction* of ``Q K^T`` and the *columns* of ``P V``:

- warpgroup 0 owns ckv columns [0, 256): its Q slice, its half of every gathered KV row, the
  output columns [0, 256);
- warpgroup 1 owns ckv columns [256, 512) and the 64 rope columns (q_pe . kpe);
- each computes a partial ``S`` over its columns, the two swap partials through shared memory
  (fp32, double-buffered, one mbarrier per direction and slot) and both add them in the same
  order, so both hold bit-identical ``S``, row max, sum and ``P``; ``P`` stays in registers as the
  A operand of its own ``P V`` half. No other data crosses warpgroups: each gathers only its own
  columns (cp.async, three stages) into its own buffers.
- inside a warpgroup the MMAs are asynchronous: ``Q K^T`` of block j+1 runs while the softmax of
  block j is computed, and ``P V`` of block j runs during the swap of block j+1's partials.

Semantics, tiling over tokens and sequences, the split of long KV ranges and the output contract
are those of ``attention._mla_prefill_kernel`` (same arguments); see its docstring.

Status (H200, NOTES.md session 3): correct (GPU tests), but no faster than the Triton kernel
(a06f2653 16.2 ms against 15.2-16.3), so ``choose_config`` never picks it; select it with
``KernelConfig(4, 32, kernel="gluon")``. Nsight Compute shows both warpgroups latency-bound on
their own serial chain (wgmma waits, barriers, the swap), ~780 instructions per warp per block.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    async_copy,
    fence_async_shared,
    mbarrier,
    warpgroup_mma,
    warpgroup_mma_init,
    warpgroup_mma_wait,
)

HALF = gl.constexpr(256)  # ckv columns per warpgroup
NUM_STAGES = gl.constexpr(3)  # gathered KV buffers per warpgroup
WG0 = gl.constexpr(0)
WG1 = gl.constexpr(1)
# gathers: 16-byte cp.async per thread, a warp per 256-column row / 4 rows per 64-column kpe row set
LD_KV = gl.constexpr(gl.BlockedLayout([1, 8], [1, 32], [4, 1], [1, 0]))
LD_PE = gl.constexpr(gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0]))


@gluon.jit
def _load_pages(idx_ptr, start, hi, H: gl.constexpr, BLOCK_N: gl.constexpr):
    """Page indices of KV rows [start, start + BLOCK_N) in the layouts of the gathers (0 past hi).

    Loaded one block before their gather is issued: the gather's addresses then come from
    registers and no index load latency sits on the loop's critical path.
    """
    rows = start + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, LD_KV))
    pages = gl.load(idx_ptr + rows, mask=rows < hi, other=0)
    if H == 1:
        rows_pe = start + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, LD_PE))
        pages_pe = gl.load(idx_ptr + rows_pe, mask=rows_pe < hi, other=0)
    else:
        pages_pe = gl.zeros([BLOCK_N], gl.int32, layout=gl.SliceLayout(1, LD_PE))
    return pages, pages_pe


@gluon.jit
def _issue_gather(
    kv_bufs, pe_bufs, stage, ckv_ptr, kpe_ptr, stride_ckv_p, stride_kpe_p, pages, pages_pe,
    start, hi, H: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_KPE: gl.constexpr,
):  # fmt: skip
    """cp.async this warpgroup's columns of KV rows [start, start + BLOCK_N) (rows >= hi: zeros)."""
    rows = start + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, LD_KV))
    cols = H * HALF + gl.arange(0, HALF, layout=gl.SliceLayout(0, LD_KV))
    async_copy.async_copy_global_to_shared(
        kv_bufs.index(stage),
        ckv_ptr + pages.to(gl.int64)[:, None] * stride_ckv_p + cols[None, :],
        mask=(rows < hi)[:, None],
    )
    if H == 1:
        rows_pe = start + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, LD_PE))
        cols_pe = gl.arange(0, HEAD_KPE, layout=gl.SliceLayout(0, LD_PE))
        async_copy.async_copy_global_to_shared(
            pe_bufs.index(stage),
            kpe_ptr + pages_pe.to(gl.int64)[:, None] * stride_kpe_p + cols_pe[None, :],
            mask=(rows_pe < hi)[:, None],
        )
    async_copy.commit_group()


@gluon.jit
def _issue_qk(q_smem, qpe_smem, kv_bufs, pe_bufs, stage, H: gl.constexpr, s_layout: gl.constexpr):
    """Asynchronous partial S = Q[:, own cols] . K[:, own cols]^T of one gathered block."""
    BLOCK_M: gl.constexpr = q_smem.shape[0]
    BLOCK_N: gl.constexpr = kv_bufs.shape[1]
    zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, layout=s_layout)
    s = warpgroup_mma(
        q_smem, kv_bufs.index(stage).permute((1, 0)), zero, use_acc=False, is_async=True
    )
    if H == 1:
        s = warpgroup_mma(qpe_smem, pe_bufs.index(stage).permute((1, 0)), s, is_async=True)
    return s


@gluon.jit
def _swap_partials(s_part, xbuf, xbar, g, H: gl.constexpr, s_layout: gl.constexpr):
    """Full S of block g: publish this warpgroup's partial, read the other's, add (same order)."""
    slot = g % 2
    phase = (g // 2) & 1
    xbuf.index(H * 2 + slot).store(s_part)
    gl.thread_barrier()
    mbarrier.arrive(xbar.index(H * 2 + slot), count=1)
    mbarrier.wait(xbar.index((1 - H) * 2 + slot), phase)
    other = xbuf.index((1 - H) * 2 + slot).load(s_layout)
    if H == 0:
        return s_part + other
    else:
        return other + s_part


@gluon.jit
def _softmax_step(s, m_i, l_i, cols, causal_lim, hi, qk_scale):
    """Masked online-softmax step in base 2: (p, alpha, m_new, l_new)."""
    s = s * qk_scale
    keep = (cols[None, :] <= causal_lim[:, None]) & (cols[None, :] < hi)
    s = gl.where(keep, s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, 1))
    # a row that has seen no key yet keeps m = -inf; use 0 so exp2 gives 0, not NaN
    m_use = gl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = gl.exp2(m_i - m_use)
    p = gl.exp2(s - m_use[:, None])
    l_new = l_i * alpha + gl.sum(p, 1)
    return p, alpha, m_new, l_new


@gluon.jit
def _half_partition(
    q_nope_ptr, q_pe_ptr, ckv_ptr, kpe_ptr, qo_indptr_ptr, kv_indptr_ptr, kv_indices_ptr,
    out_ptr, lse_ptr,
    stride_qn_t, stride_qn_h, stride_qp_t, stride_qp_h, stride_ckv_p, stride_kpe_p,
    stride_o_s, stride_o_t, stride_o_h, stride_l_s, stride_l_t, stride_l_h,
    total_q, batch, qk_scale,
    q_smem, qpe_smem, kv_bufs, pe_bufs, xbuf, xbar,
    H: gl.constexpr, NUM_HEADS: gl.constexpr, HEAD_KPE: gl.constexpr, BLOCK_T: gl.constexpr,
    BLOCK_N: gl.constexpr, MIN_CHUNK: gl.constexpr,
):  # fmt: skip
    BLOCK_M: gl.constexpr = BLOCK_T * NUM_HEADS
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16]
    )
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HALF, 16]
    )
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    q_ld: gl.constexpr = LD_KV

    num_tiles = gl.cdiv(total_q, BLOCK_T)
    tile = num_tiles - 1 - gl.program_id(0)  # longest causal range first
    split = gl.program_id(1)
    num_splits = gl.num_programs(1)
    tok0 = tile * BLOCK_T
    tok_end = gl.minimum(tok0 + BLOCK_T, total_q)

    # this warpgroup's Q columns, into shared memory once (A operand of every Q K^T)
    offs_qm = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, q_ld))
    q_tok = (tok0 + offs_qm // NUM_HEADS).to(gl.int64)
    q_ok = (tok0 + offs_qm // NUM_HEADS) < total_q
    q_row = q_tok * stride_qn_t + (offs_qm % NUM_HEADS) * stride_qn_h
    q_cols = H * HALF + gl.arange(0, HALF, layout=gl.SliceLayout(0, q_ld))
    q = gl.load(q_nope_ptr + q_row[:, None] + q_cols[None, :], mask=q_ok[:, None], other=0.0)
    q_smem.store(q)
    if H == 1:
        pe_ld: gl.constexpr = LD_PE
        offs_pm = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, pe_ld))
        p_tok = (tok0 + offs_pm // NUM_HEADS).to(gl.int64)
        p_ok = (tok0 + offs_pm // NUM_HEADS) < total_q
        p_row = p_tok * stride_qp_t + (offs_pm % NUM_HEADS) * stride_qp_h
        pe_cols = gl.arange(0, HEAD_KPE, layout=gl.SliceLayout(0, pe_ld))
        qpe = gl.load(q_pe_ptr + p_row[:, None] + pe_cols[None, :], mask=p_ok[:, None], other=0.0)
        qpe_smem.store(qpe)
    fence_async_shared()
    gl.thread_barrier()

    # rows of the MMA tiles: token-major, 16 heads each
    offs_m = gl.arange(0, BLOCK_M, layout=row_s)
    row_tok = tok0 + offs_m // NUM_HEADS
    offs_n = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
    offs_mo = gl.arange(0, BLOCK_M, layout=row_o)
    row_tok_o = tok0 + offs_mo // NUM_HEADS
    offs_d = H * HALF + gl.arange(0, HALF, layout=gl.SliceLayout(0, o_layout))

    # first sequence of this tile (largest b with qo_indptr[b] <= tok0), by binary search
    b_lo = tok0 * 0
    b_hi = batch - 1
    while b_lo < b_hi:
        mid = (b_lo + b_hi + 1) // 2
        if gl.load(qo_indptr_ptr + mid) <= tok0:
            b_lo = mid
        else:
            b_hi = mid - 1
    b = b_lo
    q_start = gl.load(qo_indptr_ptr + b)
    it = tok0 * 0  # KV blocks consumed so far: stage and swap-slot bookkeeping of both halves
    while (q_start < tok_end) & (b < batch):
        q_end = gl.load(qo_indptr_ptr + b + 1)
        kv_start = gl.load(kv_indptr_ptr + b)
        kv_len = gl.load(kv_indptr_ptr + b + 1) - kv_start
        prefix = kv_len - (q_end - q_start)
        in_seq = (row_tok >= q_start) & (row_tok < q_end)
        causal_lim = gl.where(in_seq, prefix + (row_tok - q_start), -1)
        i_last = gl.minimum(tok_end, q_end) - 1 - q_start
        kv_hi = gl.maximum(gl.minimum(kv_len, prefix + i_last + 1), 0)
        if MIN_CHUNK > 0:
            chunk = gl.maximum(gl.cdiv(gl.cdiv(kv_hi, num_splits), BLOCK_N) * BLOCK_N, MIN_CHUNK)
            lo = gl.minimum(split * chunk, kv_hi)
            hi = gl.minimum(lo + chunk, kv_hi)
        else:
            lo = kv_hi * 0
            hi = kv_hi
        idx_ptr = kv_indices_ptr + kv_start
        n = gl.cdiv(hi - lo, BLOCK_N)

        acc = gl.zeros([BLOCK_M, HALF], gl.float32, layout=o_layout)
        m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, layout=row_s)
        l_i = gl.zeros([BLOCK_M], gl.float32, layout=row_s)
        if n > 0:
            # prologue: blocks 0 and 1 in flight, S of block 0
            for k in gl.static_range(NUM_STAGES - 1):
                pg, pg_pe = _load_pages(idx_ptr, lo + k * BLOCK_N, hi, H, BLOCK_N)
                _issue_gather(
                    kv_bufs, pe_bufs, (it + k) % NUM_STAGES, ckv_ptr, kpe_ptr, stride_ckv_p,
                    stride_kpe_p, pg, pg_pe, lo + k * BLOCK_N, hi, H, BLOCK_N, HEAD_KPE,
                )  # fmt: skip
            pg, pg_pe = _load_pages(idx_ptr, lo + (NUM_STAGES - 1) * BLOCK_N, hi, H, BLOCK_N)
            async_copy.wait_group(NUM_STAGES - 2)
            gl.thread_barrier()
            fence_async_shared()
            s_tok = _issue_qk(q_smem, qpe_smem, kv_bufs, pe_bufs, it % NUM_STAGES, H, s_layout)
            s_part = warpgroup_mma_wait(0, deps=[s_tok])
            s = _swap_partials(s_part, xbuf, xbar, it, H, s_layout)
            acc = warpgroup_mma_init(acc)  # loop-carried as an in-flight accumulator
            for j in range(0, n - 1):
                g = it + j
                cols = lo + j * BLOCK_N + offs_n
                # block j-1's P V is done: its buffer takes block j + 2
                acc = warpgroup_mma_wait(0, deps=[acc])
                gl.thread_barrier()
                _issue_gather(
                    kv_bufs, pe_bufs, (g + 2) % NUM_STAGES, ckv_ptr, kpe_ptr, stride_ckv_p,
                    stride_kpe_p, pg, pg_pe, lo + (j + 2) * BLOCK_N, hi, H, BLOCK_N, HEAD_KPE,
                )  # fmt: skip
                pg, pg_pe = _load_pages(idx_ptr, lo + (j + 3) * BLOCK_N, hi, H, BLOCK_N)
                async_copy.wait_group(NUM_STAGES - 2)  # block j + 1 has landed
                gl.thread_barrier()
                fence_async_shared()
                s_tok = _issue_qk(
                    q_smem, qpe_smem, kv_bufs, pe_bufs, (g + 1) % NUM_STAGES, H, s_layout
                )
                p, alpha, m_i, l_i = _softmax_step(s, m_i, l_i, cols, causal_lim, hi, qk_scale)
                acc = acc * gl.convert_layout(alpha, row_o)[:, None]
                p_op = gl.convert_layout(p.to(gl.bfloat16), p_layout)
                acc = warpgroup_mma(p_op, kv_bufs.index(g % NUM_STAGES), acc, is_async=True)
                s_part = warpgroup_mma_wait(1, deps=[s_tok])  # Q K^T of block j + 1
                s = _swap_partials(s_part, xbuf, xbar, g + 1, H, s_layout)
            # last block
            g = it + n - 1
            cols = lo + (n - 1) * BLOCK_N + offs_n
            p, alpha, m_i, l_i = _softmax_step(s, m_i, l_i, cols, causal_lim, hi, qk_scale)
            acc = warpgroup_mma_wait(0, deps=[acc])
            acc = acc * gl.convert_layout(alpha, row_o)[:, None]
            p_op = gl.convert_layout(p.to(gl.bfloat16), p_layout)
            acc = warpgroup_mma(p_op, kv_bufs.index(g % NUM_STAGES), acc, is_async=True)
            acc = warpgroup_mma_wait(0, deps=[acc])
            async_copy.wait_group(0)  # the zero-filled prefetches past the range
            gl.thread_barrier()
        it += n

        seen = l_i > 0.0
        l_div = gl.where(seen, l_i, 1.0)
        o = acc / gl.convert_layout(l_div, row_o)[:, None]
        in_seq_o = (row_tok_o >= q_start) & (row_tok_o < q_end)
        o_rows = (
            split * stride_o_s
            + row_tok_o.to(gl.int64) * stride_o_t
            + (offs_mo % NUM_HEADS) * stride_o_h
        )
        o_ptrs = out_ptr + o_rows[:, None] + offs_d[None, :]
        if MIN_CHUNK > 0:
            seen_o = gl.convert_layout(seen, row_o)
            gl.store(o_ptrs, o.to(out_ptr.dtype.element_ty), mask=(in_seq_o & seen_o)[:, None])
        else:
            gl.store(o_ptrs, o.to(out_ptr.dtype.element_ty), mask=in_seq_o[:, None])
        if H == 0:
            lse = gl.where(seen, m_i + gl.log2(l_div), float("-inf"))
            l_ptrs = (
                lse_ptr
                + split * stride_l_s
                + row_tok.to(gl.int64) * stride_l_t
                + (offs_m % NUM_HEADS) * stride_l_h
            )
            gl.store(l_ptrs, lse, mask=in_seq)
        b += 1
        q_start = q_end


@gluon.jit
def _mla_prefill_ws_kernel(
    q_nope_ptr, q_pe_ptr, ckv_ptr, kpe_ptr, qo_indptr_ptr, kv_indptr_ptr, kv_indices_ptr,
    out_ptr, lse_ptr,
    stride_qn_t, stride_qn_h, stride_qp_t, stride_qp_h, stride_ckv_p, stride_kpe_p,
    stride_o_s, stride_o_t, stride_o_h, stride_l_s, stride_l_t, stride_l_h,
    total_q, batch, qk_scale,
    NUM_HEADS: gl.constexpr, HEAD_CKV: gl.constexpr, HEAD_KPE: gl.constexpr,
    BLOCK_T: gl.constexpr, BLOCK_N: gl.constexpr, MIN_CHUNK: gl.constexpr,
):  # fmt: skip
    """Same arguments and contract as ``attention._mla_prefill_kernel``; launch with num_warps=4
    (the default partition) - the second warpgroup is the worker partition."""
    gl.static_assert(HEAD_CKV == 2 * HALF)
    BLOCK_M: gl.constexpr = BLOCK_T * NUM_HEADS
    gl.static_assert(BLOCK_M == 64)
    dt: gl.constexpr = q_nope_ptr.dtype.element_ty
    q_l: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, HALF], dt)
    qpe_l: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, HEAD_KPE], dt)
    kv_l: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, HALF], dt)
    pe_l: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, HEAD_KPE], dt)
    x_l: gl.constexpr = gl.SwizzledSharedLayout(2, 1, 8, [1, 0])
    q0_smem = gl.allocate_shared_memory(dt, [BLOCK_M, HALF], q_l)
    q1_smem = gl.allocate_shared_memory(dt, [BLOCK_M, HALF], q_l)
    qpe_smem = gl.allocate_shared_memory(dt, [BLOCK_M, HEAD_KPE], qpe_l)
    kv0_bufs = gl.allocate_shared_memory(dt, [NUM_STAGES, BLOCK_N, HALF], kv_l)
    kv1_bufs = gl.allocate_shared_memory(dt, [NUM_STAGES, BLOCK_N, HALF], kv_l)
    pe_bufs = gl.allocate_shared_memory(dt, [NUM_STAGES, BLOCK_N, HEAD_KPE], pe_l)
    xbuf = gl.allocate_shared_memory(gl.float32, [4, BLOCK_M, BLOCK_N], x_l)
    xbar = gl.allocate_shared_memory(gl.int64, [4, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(4):
        mbarrier.init(xbar.index(i), count=1)

    gl.warp_specialize(
        [
            (_half_partition, (
                q_nope_ptr, q_pe_ptr, ckv_ptr, kpe_ptr, qo_indptr_ptr, kv_indptr_ptr,
                kv_indices_ptr, out_ptr, lse_ptr,
                stride_qn_t, stride_qn_h, stride_qp_t, stride_qp_h, stride_ckv_p, stride_kpe_p,
                stride_o_s, stride_o_t, stride_o_h, stride_l_s, stride_l_t, stride_l_h,
                total_q, batch, qk_scale,
                q0_smem, qpe_smem, kv0_bufs, pe_bufs, xbuf, xbar,
                WG0, NUM_HEADS, HEAD_KPE, BLOCK_T, BLOCK_N, MIN_CHUNK,
            )),
            (_half_partition, (
                q_nope_ptr, q_pe_ptr, ckv_ptr, kpe_ptr, qo_indptr_ptr, kv_indptr_ptr,
                kv_indices_ptr, out_ptr, lse_ptr,
                stride_qn_t, stride_qn_h, stride_qp_t, stride_qp_h, stride_ckv_p, stride_kpe_p,
                stride_o_s, stride_o_t, stride_o_h, stride_l_s, stride_l_t, stride_l_h,
                total_q, batch, qk_scale,
                q1_smem, qpe_smem, kv1_bufs, pe_bufs, xbuf, xbar,
                WG1, NUM_HEADS, HEAD_KPE, BLOCK_T, BLOCK_N, MIN_CHUNK,
            )),
        ],
        [4],
        [256],  # both warpgroups run the same code: no register moves between them
    )  # fmt: skip
