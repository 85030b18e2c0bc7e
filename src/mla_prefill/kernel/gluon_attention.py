"""Warp-specialised Hopper kernel (Gluon): 64 query rows (4 tokens x 16 heads), 64-key blocks.

Two partitions of one warpgroup each, in the producer/consumer shape of FlashInfer's fa3 MLA
kernel (``mla_hopper.cuh``: a loader warpgroup that also computes half of ``P V``; design
facts only, no code taken):

- the *softmax* warpgroup (default partition) holds Q in shared memory, computes the full
  ``S = Q K^T`` of every block (contraction 512 + 64, N = 64 keys), the online softmax, writes
  ``P`` (bf16) and the row rescale factor to shared memory, and accumulates output columns
  [256, 512). Per block it is serial, as FlashInfer's consumer is: ``Q K^T``, wait, softmax,
  ``P V``, wait, release (issuing ``Q K^T`` of block j+1 before the softmax of block j was 1.3x
  slower with two stages: it exposes a full gather per block; docs/rejected.md).
- the *loader* warpgroup gathers every KV block with cp.async (page indices loaded one block
  ahead; rows past the range re-read the range's last page, so no copy is predicated), signals
  arrival through an mbarrier (``cp.async.mbarrier.arrive.noinc``, one arrival per thread), and
  accumulates output columns [0, 256) from the ``P`` the softmax warpgroup published.

Shared memory: Q 72 KB, two KV stages of 72 KB (ckv as two 256-column halves + kpe); ``P`` of a
block overwrites that block's kpe slot once every warp's part of its ``Q K^T`` is done (same
shape and layout). The stage is released (``empty``) when the softmax warpgroup's ``P V`` of it
has completed; the loader's own ``P V`` of a stage completes before it refills that stage.

A tile of the global tiling walks its sequences as runs, one KV range each (``_run``; see
``attention._mla_prefill_kernel``). Output: the tile's last run (every tile has one) leaves
through shared memory: each warpgroup writes its normalised half as bf16 into its half of Q
(free once the tile's last ``Q K^T`` is done) and stores whole rows from there in 16-byte
pieces; earlier runs of a tile, split launches (fp32 partials) and a scheduled piece that is
its tile's whole range (bf16, into the output: the combine skips its tokens) store straight
from the MMA layout (``_store_range``).

Semantics, tiling over tokens and sequences, the split of long KV ranges and the output contract
are those of ``attention._mla_prefill_kernel`` (same arguments); see its docstring.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    async_copy,
    fence_async_shared,
    mbarrier,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.language.extra.cuda import gdc_wait

# shared with the Triton kernel (a Gluon function may call a Triton one)
from .attention import (
    REC_FIELDS,  # a scheduled split's record per program
    _next_seq,
    _seq_rows,
)

# Gluon names that moved between the Triton releases this kernel compiles under (3.6-3.9):
# ``thread_barrier`` became ``barrier`` (3.7 has both, 3.9 only the new one), and
# ``async_copy_global_to_shared`` became ``async_load`` (3.8 has both; 3.9 keeps the old name as
# a stub that raises). The same instructions either way (docs/design.md, Triton versions).
_cta_barrier = getattr(gl, "barrier", None) or gl.thread_barrier
_async_load = getattr(async_copy, "async_load", None) or async_copy.async_copy_global_to_shared

HALF = gl.constexpr(256)  # output columns per warpgroup; ckv is stored as two halves
NUM_STAGES = gl.constexpr(2)  # gathered KV blocks in shared memory
LOADER_WARPS = gl.constexpr(4)  # the loader partition: one warpgroup
# every loader thread arrives on a stage's `ready` barrier once its own cp.async copies landed
LOADER_THREADS = gl.constexpr(32 * 4)
# 16-byte cp.async per thread: a warp per 256-column row; 4 rows of 64 columns per warp for kpe
LD_KV = gl.constexpr(gl.BlockedLayout([1, 8], [1, 32], [4, 1], [1, 0]))
LD_PE = gl.constexpr(gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0]))
# the indptr arrays of batches below SCAN sequences, read whole (every warp holds all of it)
SCAN = gl.constexpr(128)
SCAN_L = gl.constexpr(gl.BlockedLayout([4], [32], [4], [0]))
# accumulator of one warpgroup's 64 x 256 output columns (wgmma, N = 256), and its rows
O_LAYOUT = gl.constexpr(
    gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HALF, 16])
)
ROW_O = gl.constexpr(gl.SliceLayout(1, O_LAYOUT))

# Hand-offs between the warpgroups go through named barriers of all 256 threads, each thread
# issuing the instruction itself: `P_SYNC` is met once per KV block by both sides (the softmax
# side after publishing P and alpha, the loader before reading them), so alpha's write comes
# before its read and the loader's read of block g before the write of block g + 2 to its slot;
# the softmax side arrives on `FIN` after writing the row sums, the loader waits there before
# reading them. The non-aligned `barrier` forms: the two sides meet at different instructions,
# which `.aligned` (`bar.sync`) does not allow. Ids 14 and 15: Triton's own named barriers use
# the low ids (0-2 under 3.6; tests/test_gluon_compile.py checks). Against the mbarriers they
# replace (an arrival by one thread after a warpgroup barrier): 1.2% faster on the 38
# (docs/design.md).
BAR_L = gl.constexpr(gl.BlockedLayout([1], [32], [4], [0]))  # one element per thread
P_SYNC = gl.constexpr("barrier.sync 14, 256;")
FIN_ARRIVE = gl.constexpr("barrier.arrive 15, 256;")
FIN_SYNC = gl.constexpr("barrier.sync 15, 256;")


@gluon.jit
def _named_barrier(instr: gl.constexpr):
    """Every thread of the calling warpgroup executes ``instr`` (``barrier.sync``/``.arrive``)."""
    gl.inline_asm_elementwise(
        instr + " mov.b32 $0, $1;", "=r,r", [gl.full([128], 0, gl.int32, layout=BAR_L)],
        dtype=gl.int32, is_pure=False, pack=1,
    )  # fmt: skip


@gluon.jit
def _tile_tokens(table_ptr, total_q, BLOCK_T: gl.constexpr, RECORDS: gl.constexpr):
    """This program's query tokens [tok0, tok_end): its record's with ``RECORDS`` (a tile of one
    sequence, see ``attention._tile_order_kernel`` and ``attention._split_schedule_kernel``),
    else the global tiling's, longest causal range first."""
    if RECORDS:
        rec = table_ptr + 2 * total_q + gl.program_id(0) * REC_FIELDS
        tok0 = gl.load(rec)
        tok_end = gl.load(rec + 1)
    else:
        tok0 = (gl.cdiv(total_q, BLOCK_T) - 1 - gl.program_id(0)) * BLOCK_T
        tok_end = gl.minimum(tok0 + BLOCK_T, total_q)
    return tok0, tok_end


@gluon.jit
def _out_base(tok0, stride_s, stride_t, SCHEDULED: gl.constexpr):
    """Offset of this program's partial rows: a scheduled split's piece q holds the rows of its
    tile's tokens from ``q * stride_s`` (token tok0 at row 0); 0 without a split."""
    if SCHEDULED:
        base = gl.program_id(0).to(gl.int64) * stride_s - tok0.to(gl.int64) * stride_t
    else:
        base = tok0.to(gl.int64) * 0
    return base


@gluon.jit
def _first_seq(qo_indptr_ptr, kv_indptr_ptr, table_ptr, tok0, total_q, batch,
               RECORDS: gl.constexpr):  # fmt: skip
    """The tile's first sequence b (largest b with qo_indptr[b] <= tok0), its q / kv bounds and
    the KV piece [lo, hi) of a scheduled split (with ``RECORDS``, its record's; the sequence's
    index b is then unused and 0, and the tile ends within the sequence).

    Up to SCAN - 1 sequences this is one round trip: both indptr arrays are read whole, side by
    side, and searched in registers; beyond that, a binary search (a chain of dependent loads).
    """
    if RECORDS:
        rec = table_ptr + 2 * total_q + gl.program_id(0) * REC_FIELDS
        b = tok0 * 0
        q_start = gl.load(rec + 2)
        q_end = gl.load(rec + 3)
        kv_start = gl.load(rec + 4)
        kv_end = gl.load(rec + 5)
        lo = gl.load(rec + 6)
        hi = gl.load(rec + 7)
    elif batch < SCAN:
        idx = gl.arange(0, SCAN, layout=SCAN_L)
        qo = gl.load(qo_indptr_ptr + idx, mask=idx <= batch, other=0)
        kv = gl.load(kv_indptr_ptr + idx, mask=idx <= batch, other=0)
        b = gl.sum(((qo <= tok0) & (idx < batch)).to(gl.int32), 0) - 1
        q_start = gl.sum(gl.where(idx == b, qo, 0), 0)
        q_end = gl.sum(gl.where(idx == b + 1, qo, 0), 0)
        kv_start = gl.sum(gl.where(idx == b, kv, 0), 0)
        kv_end = gl.sum(gl.where(idx == b + 1, kv, 0), 0)
    else:
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
        q_end = gl.load(qo_indptr_ptr + b + 1)
        kv_start = gl.load(kv_indptr_ptr + b)
        kv_end = gl.load(kv_indptr_ptr + b + 1)
    if not RECORDS:
        lo = b * 0
        hi = b * 0
    return b, q_start, q_end, kv_start, kv_end, lo, hi


@gluon.jit
def _run(qo_indptr_ptr, kv_indptr_ptr, b, q_start, q_end, kv_start, kv_end, batch, tok_end,
         rec_lo, rec_hi, row_tok, BLOCK_N: gl.constexpr, SCHEDULED: gl.constexpr,
         RECORDS: gl.constexpr):  # fmt: skip
    """The run of sequences that starts at sequence b (see ``attention._mla_prefill_kernel``):
    b and the next ones with rows in the tile, while each starts within ``BLOCK_N`` positions
    of the run's end in ``kv_indices`` (query-less sequences join it and add no rows).

    Returns the next run's first sequence (b, q_start, q_end, kv_start, kv_end), the run's KV
    positions [k0, k1) (a scheduled split's piece: its record's), its tokens [q0, q1), whether
    the range is all its rows see (a scheduled piece that is its tile's whole range: the output
    is final), and per row of ``row_tok`` the positions it sees, [row_lo, causal_lim] (rows
    outside the run: none)."""
    row_lo = row_tok * 0 + 2147483647
    causal_lim = row_tok * 0 - 1
    q0 = q_start
    row_lo, causal_lim, k1 = _seq_rows(
        row_lo, causal_lim, row_tok, q_start, q_end, kv_start, kv_end, tok_end
    )
    if SCHEDULED:
        final = (rec_lo == 0) & (rec_hi == k1 - kv_start)
        k0 = kv_start + rec_lo
        k1 = kv_start + rec_hi
    else:
        final = k1 == k1
        k0 = kv_start
    q1 = q_end
    if RECORDS:
        q_start = tok_end  # one tile of one sequence: the only run
    else:
        b, q_start, q_end, kv_start, kv_end = _next_seq(
            qo_indptr_ptr, kv_indptr_ptr, b, q_end, kv_end, batch
        )
        while (q_start < tok_end) & (b < batch) & ((q_end == q_start) | (kv_start - k1 <= BLOCK_N)):
            if q_end > q_start:
                row_lo, causal_lim, k1 = _seq_rows(
                    row_lo, causal_lim, row_tok, q_start, q_end, kv_start, kv_end, tok_end
                )
                q1 = q_end
            b, q_start, q_end, kv_start, kv_end = _next_seq(
                qo_indptr_ptr, kv_indptr_ptr, b, q_end, kv_end, batch
            )
    return b, q_start, q_end, kv_start, kv_end, k0, k1, q0, q1, final, row_lo, causal_lim


@gluon.jit
def _store_rows(out_ptr, o, l_i, row_tok, offs_m, offs_d, q_start, q_end, o_base,
                stride_o_t, stride_o_h, NUM_HEADS: gl.constexpr, SCHEDULED: gl.constexpr):  # fmt: skip
    """Normalise and store this warpgroup's output columns of the rows of one run. Split
    launches leave rows that saw no key unwritten (the combine reads their lse of -inf)."""
    seen = l_i > 0.0
    o = o * (1.0 / gl.where(seen, l_i, 1.0))[:, None]  # one division per row
    in_seq = (row_tok >= q_start) & (row_tok < q_end)
    rows = o_base + row_tok.to(gl.int64) * stride_o_t + (offs_m % NUM_HEADS) * stride_o_h
    keep = (in_seq & seen) if SCHEDULED else in_seq
    gl.store(out_ptr + rows[:, None] + offs_d[None, :], o.to(out_ptr.dtype.element_ty),
             mask=keep[:, None])  # fmt: skip


@gluon.jit
def _store_range(buf, staged, out, final, o, l_i, tok0, row_tok, offs_m, offs_d, q_start, q_end,
                 col0, o_base, NUM_HEADS: gl.constexpr, SCHEDULED: gl.constexpr):  # fmt: skip
    """Store one range's output columns [col0, col0 + 256) of this warpgroup (``out``: see
    ``_loader_partition``): through ``buf`` when ``staged`` (the tile's last range, ``buf`` free
    by then) in a launch without split, otherwise straight from the MMA layout: split partials
    (fp32), and a scheduled piece that is its tile's whole range (``final``) into the output
    (not staged: staging it too spilled 48 B)."""
    out_ptr, stride_o_s, stride_o_t, stride_o_h, dst_ptr, stride_do_t, stride_do_h = out
    if SCHEDULED:
        if final:
            _store_rows(dst_ptr, o, l_i, row_tok, offs_m, offs_d, q_start, q_end, o_base * 0,
                        stride_do_t, stride_do_h, NUM_HEADS, False)  # fmt: skip
        else:
            _store_rows(out_ptr, o, l_i, row_tok, offs_m, offs_d, q_start, q_end, o_base,
                        stride_o_t, stride_o_h, NUM_HEADS, SCHEDULED)  # fmt: skip
    else:
        if staged:
            _store_rows_staged(buf, out_ptr, o, l_i, tok0, q_start, q_end, col0, stride_o_t,
                               stride_o_h, NUM_HEADS)  # fmt: skip
        else:
            _store_rows(out_ptr, o, l_i, row_tok, offs_m, offs_d, q_start, q_end, o_base,
                        stride_o_t, stride_o_h, NUM_HEADS, SCHEDULED)  # fmt: skip


@gluon.jit
def _store_rows_staged(buf, out_ptr, o, l_i, tok0, q_start, q_end, col0, stride_o_t, stride_o_h,
                       NUM_HEADS: gl.constexpr):  # fmt: skip
    """_store_rows for a launch without split, through shared memory: ``buf`` (a free 64 x 256
    bf16 buffer: this warpgroup's half of Q once the tile's last Q K^T is done) turns the MMA
    layout (4-byte pieces of 8 rows per store) into 16-byte pieces of whole rows."""
    seen = l_i > 0.0
    o = o * (1.0 / gl.where(seen, l_i, 1.0))[:, None]  # one division per row
    buf.store(o.to(out_ptr.dtype.element_ty))
    _cta_barrier()
    v = buf.load(LD_KV)
    offs_m = gl.arange(0, buf.shape[0], layout=gl.SliceLayout(1, LD_KV))
    row_tok = tok0 + offs_m // NUM_HEADS
    in_seq = (row_tok >= q_start) & (row_tok < q_end)
    rows = row_tok.to(gl.int64) * stride_o_t + (offs_m % NUM_HEADS) * stride_o_h
    cols = col0 + gl.arange(0, buf.shape[1], layout=gl.SliceLayout(0, LD_KV))
    gl.store(out_ptr + rows[:, None] + cols[None, :], v, mask=in_seq[:, None])


# ---------------------------------------------------------------------------------------------
# loader warpgroup: gathers, and P V for output columns [0, 256)
# ---------------------------------------------------------------------------------------------


@gluon.jit
def _load_pages(idx_ptr, start, hi, BLOCK_N: gl.constexpr):
    """Page indices of KV rows [start, start + BLOCK_N) in the layouts of the two gathers; rows
    at or past hi take row hi - 1's page (a page the sequence reads, so its values are finite)."""
    rows = gl.minimum(start + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, LD_KV)), hi - 1)
    rows_pe = gl.minimum(start + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, LD_PE)), hi - 1)
    return gl.load(idx_ptr + rows), gl.load(idx_ptr + rows_pe)


@gluon.jit
def _issue_gather(kv_lo, kv_hi, pe_bufs, st, ckv_ptr, kpe_ptr, stride_ckv_p, stride_kpe_p, pages,
                  pages_pe, HEAD_KPE: gl.constexpr, OFFS32: gl.constexpr):  # fmt: skip
    """cp.async of block ``pages`` into stage ``st``. ``OFFS32`` (host-checked: page * stride
    fits int32 for both caches): row offsets in 32 bits, one pointer per row (113 -> 49 SASS
    instructions for the ckv addresses, 34 -> 18 for kpe)."""
    if not OFFS32:
        pages = pages.to(gl.int64)
        pages_pe = pages_pe.to(gl.int64)
    cols = gl.arange(0, HALF, layout=gl.SliceLayout(0, LD_KV))
    base = (ckv_ptr + pages * stride_ckv_p)[:, None] + cols[None, :]
    _async_load(kv_lo.index(st), base)
    _async_load(kv_hi.index(st), base + HALF)
    cols_pe = gl.arange(0, HEAD_KPE, layout=gl.SliceLayout(0, LD_PE))
    _async_load(
        pe_bufs.index(st),
        (kpe_ptr + pages_pe * stride_kpe_p)[:, None] + cols_pe[None, :],
    )


@gluon.jit
def _pv_lo(acc, g, kv_lo, pe_bufs, alpha_s):
    """acc = acc * alpha + P . V[:, 0:256] for block g, once the softmax warpgroup published P."""
    st = g % NUM_STAGES
    _named_barrier(P_SYNC)
    alpha = alpha_s.index(st).load(ROW_O)
    acc = warpgroup_mma(pe_bufs.index(st), kv_lo.index(st), acc * alpha[:, None], is_async=True)
    acc = warpgroup_mma_wait(0, deps=[acc])
    _cta_barrier()  # each warp's wait covers its own part: all done before a refill
    return acc


@gluon.jit
def _loader_partition(
    seqs, cache, out, smem, bars,
    NUM_HEADS: gl.constexpr, HEAD_KPE: gl.constexpr, BLOCK_T: gl.constexpr,
    BLOCK_N: gl.constexpr, SCHEDULED: gl.constexpr, RECORDS: gl.constexpr, OFFS32: gl.constexpr,
):  # fmt: skip
    """``seqs``: (qo_indptr, kv_indptr, work table, total_q, batch); ``cache``: (ckv, kpe,
    kv_indices, ckv and kpe page strides); ``out``: (output or split partials, their piece,
    token and head strides, the output and its token and head strides); ``smem`` and ``bars``:
    the kernel's shared buffers and barriers (``_mla_prefill_ws_kernel``)."""
    qo_indptr_ptr, kv_indptr_ptr, table_ptr, total_q, batch = seqs
    ckv_ptr, kpe_ptr, kv_indices_ptr, stride_ckv_p, stride_kpe_p = cache
    stride_o_s = out[1]
    stride_o_t = out[2]
    q_lo, q_hi, q_pe, kv_lo, kv_hi, pe_bufs, alpha_s, l_s = smem
    ready, empty = bars
    BLOCK_M: gl.constexpr = BLOCK_T * NUM_HEADS
    offs_m = gl.arange(0, BLOCK_M, layout=ROW_O)
    offs_d = gl.arange(0, HALF, layout=gl.SliceLayout(0, O_LAYOUT))

    tok0, tok_end = _tile_tokens(table_ptr, total_q, BLOCK_T, RECORDS)
    b, q_start, q_end, kv_start, kv_end, rec_lo, rec_hi = _first_seq(
        qo_indptr_ptr, kv_indptr_ptr, table_ptr, tok0, total_q, batch, RECORDS
    )
    o_base = _out_base(tok0, stride_o_s, stride_o_t, SCHEDULED)
    row_tok = tok0 + offs_m // NUM_HEADS
    it = tok0 * 0  # KV blocks of this program so far: stage and phase bookkeeping
    while (q_start < tok_end) & (b < batch):
        b, q_start, q_end, kv_start, kv_end, lo, hi, q0, q1, final, _, _ = _run(
            qo_indptr_ptr, kv_indptr_ptr, b, q_start, q_end, kv_start, kv_end, batch, tok_end,
            rec_lo, rec_hi, row_tok, BLOCK_N, SCHEDULED, RECORDS,
        )  # fmt: skip
        n = gl.cdiv(hi - lo, BLOCK_N)
        idx_ptr = kv_indices_ptr
        acc = gl.zeros([BLOCK_M, HALF], gl.float32, layout=O_LAYOUT)
        l_i = gl.zeros([BLOCK_M], gl.float32, layout=ROW_O)
        if n > 0:
            pages, pages_pe = _load_pages(idx_ptr, lo, hi, BLOCK_N)
            for k in range(0, n):
                g = it + k
                st = g % NUM_STAGES
                # the softmax warpgroup is done with block g - 2 (this warpgroup already is)
                mbarrier.wait(empty.index(st), ((g // NUM_STAGES) + 1) & 1, pred=g >= NUM_STAGES)
                _issue_gather(kv_lo, kv_hi, pe_bufs, st, ckv_ptr, kpe_ptr, stride_ckv_p,
                              stride_kpe_p, pages, pages_pe, HEAD_KPE, OFFS32)  # fmt: skip
                async_copy.mbarrier_arrive(ready.index(st), increment_count=False)
                pages, pages_pe = _load_pages(idx_ptr, lo + (k + 1) * BLOCK_N, hi, BLOCK_N)
                if k > 0:
                    acc = _pv_lo(acc, g - 1, kv_lo, pe_bufs, alpha_s)
            acc = _pv_lo(acc, it + n - 1, kv_lo, pe_bufs, alpha_s)
            _named_barrier(FIN_SYNC)
            l_i = l_s.load(ROW_O)
        it += n
        # the tile's last range: the softmax warpgroup has done every Q K^T (`FIN`), so its half
        # of Q can stage the store (a range without keys did not wait: Q may still be landing)
        _store_range(q_hi, (n > 0) & (q1 >= tok_end), out, final, acc, l_i, tok0, row_tok,
                     offs_m, offs_d, q0, q1, 0, o_base, NUM_HEADS, SCHEDULED)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# softmax warpgroup: Q K^T, online softmax, P V for output columns [256, 512)
# ---------------------------------------------------------------------------------------------


@gluon.jit
def _issue_qk(q_lo, q_hi, q_pe, kv_lo, kv_hi, pe_bufs, ready, g, s_layout: gl.constexpr):
    """Wait for block g's gather, then start S = Q . K^T over all 576 columns (asynchronous)."""
    st = g % NUM_STAGES
    mbarrier.wait(ready.index(st), (g // NUM_STAGES) & 1)
    fence_async_shared()  # cp.async writes (generic proxy) before wgmma reads (async proxy)
    BLOCK_M: gl.constexpr = q_lo.shape[0]
    BLOCK_N: gl.constexpr = kv_lo.shape[1]
    zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, layout=s_layout)
    s = warpgroup_mma(q_lo, kv_lo.index(st).permute((1, 0)), zero, use_acc=False, is_async=True)
    s = warpgroup_mma(q_hi, kv_hi.index(st).permute((1, 0)), s, is_async=True)
    return warpgroup_mma(q_pe, pe_bufs.index(st).permute((1, 0)), s, is_async=True)


@gluon.jit
def _softmax_step(s, m_i, l_i, start, bounds, hi, qk_scale, BLOCK_N: gl.constexpr,
                  RUNS: gl.constexpr):  # fmt: skip
    """Online-softmax step in base 2 over keys [start, start + BLOCK_N): (p, alpha, m, l).
    ``bounds``: (row_lo, causal_lim, their max and min); row r sees key j when ``row_lo[r] <= j
    <= causal_lim[r]`` (row_lo only with ``RUNS``). The mask is applied only where some key of
    the block is outside a row's bounds or past hi."""
    row_lo, causal_lim, max_lo, min_lim = bounds
    s = s * qk_scale
    if (start + BLOCK_N - 1 > min_lim) | (start + BLOCK_N > hi) | (start < max_lo):
        cols = start + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s.type.layout))
        keep = (cols[None, :] <= causal_lim[:, None]) & (cols[None, :] < hi)
        if RUNS:
            keep = keep & (cols[None, :] >= row_lo[:, None])
        s = gl.where(keep, s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, 1))
    # a row that has seen no key yet keeps m = -inf; use 0 so exp2 gives 0, not NaN
    m_use = gl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = gl.exp2(m_i - m_use)
    p = gl.exp2(s - m_use[:, None])
    return p, alpha, m_new, l_i * alpha + gl.sum(p, 1)


@gluon.jit
def _publish_p(p, alpha, g, pe_bufs, alpha_s):
    """P (bf16) of block g into its stage's kpe slot (its Q K^T is done), alpha beside it; then
    meet the loader at `P_SYNC`."""
    st = g % NUM_STAGES
    pe_bufs.index(st).store(p)
    alpha_s.index(st).store(alpha)
    fence_async_shared()  # generic-proxy stores of P before the loader's wgmma reads it
    _named_barrier(P_SYNC)


@gluon.jit
def _softmax_partition(
    seqs, queries, out, lse_out, qk_scale, smem, bars,
    NUM_HEADS: gl.constexpr, HEAD_KPE: gl.constexpr, BLOCK_T: gl.constexpr,
    BLOCK_N: gl.constexpr, SCHEDULED: gl.constexpr, RECORDS: gl.constexpr,
):  # fmt: skip
    """``seqs``: (qo_indptr, kv_indptr, work table, total_q, batch); ``queries``: (q_nope, q_pe, their token
    and head strides); ``out``/``lse_out``: each destination (output or split partials) with its
    piece, token and head strides, then the output itself with its token and head strides (a
    scheduled tile of one piece writes there); ``smem`` and ``bars``: as the loader's."""
    qo_indptr_ptr, kv_indptr_ptr, table_ptr, total_q, batch = seqs
    q_nope_ptr, q_pe_ptr, stride_qn_t, stride_qn_h, stride_qp_t, stride_qp_h = queries
    stride_o_s = out[1]
    stride_o_t = out[2]
    lse_ptr, stride_l_s, stride_l_t, stride_l_h, dst_lse_ptr, stride_dl_t, stride_dl_h = lse_out
    q_lo, q_hi, q_pe, kv_lo, kv_hi, pe_bufs, alpha_s, l_s = smem
    ready, empty = bars
    BLOCK_M: gl.constexpr = BLOCK_T * NUM_HEADS
    RUNS: gl.constexpr = not RECORDS  # tiles of the global tiling walk runs of sequences
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16]
    )
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=O_LAYOUT, k_width=2)

    tok0, tok_end = _tile_tokens(table_ptr, total_q, BLOCK_T, RECORDS)

    # Q into shared memory once (cp.async; rows past total_q read as zeros), in flight during the
    # search for the tile's first sequence
    offs_qm = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, LD_KV))
    q_ok = (tok0 + offs_qm // NUM_HEADS) < total_q
    q_row = (tok0 + offs_qm // NUM_HEADS).to(gl.int64) * stride_qn_t + (
        offs_qm % NUM_HEADS
    ) * stride_qn_h
    q_ptrs = (
        q_nope_ptr + q_row[:, None] + gl.arange(0, HALF, layout=gl.SliceLayout(0, LD_KV))[None, :]
    )
    _async_load(q_lo, q_ptrs, mask=q_ok[:, None])
    _async_load(q_hi, q_ptrs + HALF, mask=q_ok[:, None])
    offs_pm = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, LD_PE))
    pe_ok = (tok0 + offs_pm // NUM_HEADS) < total_q
    pe_row = (tok0 + offs_pm // NUM_HEADS).to(gl.int64) * stride_qp_t + (
        offs_pm % NUM_HEADS
    ) * stride_qp_h
    pe_cols = gl.arange(0, HEAD_KPE, layout=gl.SliceLayout(0, LD_PE))
    _async_load(q_pe, q_pe_ptr + pe_row[:, None] + pe_cols[None, :], mask=pe_ok[:, None])
    async_copy.commit_group()
    b, q_start, q_end, kv_start, kv_end, rec_lo, rec_hi = _first_seq(
        qo_indptr_ptr, kv_indptr_ptr, table_ptr, tok0, total_q, batch, RECORDS
    )
    o_base = _out_base(tok0, stride_o_s, stride_o_t, SCHEDULED)
    l_base = _out_base(tok0, stride_l_s, stride_l_t, SCHEDULED)
    async_copy.wait_group(0)
    fence_async_shared()
    _cta_barrier()

    offs_m = gl.arange(0, BLOCK_M, layout=row_s)
    row_tok = tok0 + offs_m // NUM_HEADS
    offs_mo = gl.arange(0, BLOCK_M, layout=ROW_O)
    row_tok_o = tok0 + offs_mo // NUM_HEADS
    offs_d = HALF + gl.arange(0, HALF, layout=gl.SliceLayout(0, O_LAYOUT))

    it = tok0 * 0
    while (q_start < tok_end) & (b < batch):
        b, q_start, q_end, kv_start, kv_end, lo, hi, q0, q1, final, row_lo, causal_lim = _run(
            qo_indptr_ptr, kv_indptr_ptr, b, q_start, q_end, kv_start, kv_end, batch, tok_end,
            rec_lo, rec_hi, row_tok, BLOCK_N, SCHEDULED, RECORDS,
        )  # fmt: skip
        n = gl.cdiv(hi - lo, BLOCK_N)
        in_seq = (row_tok >= q0) & (row_tok < q1)
        bounds = (row_lo, causal_lim, gl.max(row_lo, 0), gl.min(causal_lim, 0))
        acc = gl.zeros([BLOCK_M, HALF], gl.float32, layout=O_LAYOUT)
        m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, layout=row_s)
        l_i = gl.zeros([BLOCK_M], gl.float32, layout=row_s)
        if n > 0:
            for k in range(0, n):
                g = it + k
                st = g % NUM_STAGES
                s = warpgroup_mma_wait(
                    0, deps=[_issue_qk(q_lo, q_hi, q_pe, kv_lo, kv_hi, pe_bufs, ready, g, s_layout)]
                )
                _cta_barrier()  # every warp's part of Q K^T is done: P may take the kpe slot
                p, alpha, m_i, l_i = _softmax_step(
                    s, m_i, l_i, lo + k * BLOCK_N, bounds, hi, qk_scale, BLOCK_N, RUNS
                )
                acc = acc * gl.convert_layout(alpha, ROW_O)[:, None]
                p = p.to(gl.bfloat16)
                # own half of P V from registers; P to shared memory for the loader's half meanwhile
                acc = warpgroup_mma(
                    gl.convert_layout(p, p_layout), kv_hi.index(st), acc, is_async=True
                )
                _publish_p(p, alpha, g, pe_bufs, alpha_s)
                acc = warpgroup_mma_wait(0, deps=[acc])
                _cta_barrier()  # every warp's part of the MMA is done, not just the arriver's
                mbarrier.arrive(empty.index(st), count=1)  # block g is done with its stage
            # the row sums to the loader warpgroup, for its half of the output
            l_s.store(l_i)
            _named_barrier(FIN_ARRIVE)
        it += n

        l_o = gl.convert_layout(l_i, ROW_O)
        # the tile's last range: every Q K^T is done, so Q's shared memory is free
        _store_range(q_lo, q1 >= tok_end, out, final, acc, l_o, tok0, row_tok_o, offs_mo,
                     offs_d, q0, q1, HALF, o_base, NUM_HEADS, SCHEDULED)  # fmt: skip
        seen = l_i > 0.0
        lse = gl.where(seen, m_i + gl.log2(gl.where(seen, l_i, 1.0)), float("-inf"))
        row_tok64 = row_tok.to(gl.int64)
        heads = offs_m % NUM_HEADS
        l_ptrs = lse_ptr + l_base + row_tok64 * stride_l_t + heads * stride_l_h
        if SCHEDULED:
            if final:  # the tile's whole range: the output's lse (the combine skips the tile)
                l_ptrs = dst_lse_ptr + row_tok64 * stride_dl_t + heads * stride_dl_h
        gl.store(l_ptrs, lse, mask=in_seq)


@gluon.jit
def _mla_prefill_ws_kernel(
    q_nope_ptr, q_pe_ptr, ckv_ptr, kpe_ptr, qo_indptr_ptr, kv_indptr_ptr, kv_indices_ptr,
    out_ptr, lse_ptr, table_ptr, dst_o_ptr, dst_lse_ptr,
    stride_qn_t, stride_qn_h, stride_qp_t, stride_qp_h, stride_ckv_p, stride_kpe_p,
    stride_o_s, stride_o_t, stride_o_h, stride_l_s, stride_l_t, stride_l_h,
    stride_do_t, stride_do_h, stride_dl_t, stride_dl_h,
    total_q, batch, qk_scale,
    NUM_HEADS: gl.constexpr, HEAD_CKV: gl.constexpr, HEAD_KPE: gl.constexpr,
    BLOCK_T: gl.constexpr, BLOCK_N: gl.constexpr, SCHEDULED: gl.constexpr, RECORDS: gl.constexpr,
    WAIT_TABLE: gl.constexpr, OFFS32: gl.constexpr,
):  # fmt: skip
    """Same arguments and contract as ``attention._mla_prefill_kernel``; launch with num_warps=4
    (the softmax warpgroup); the loader warpgroup is the worker partition."""
    gl.static_assert(HEAD_CKV == 2 * HALF)
    BLOCK_M: gl.constexpr = BLOCK_T * NUM_HEADS
    gl.static_assert(BLOCK_M == 64)
    gl.static_assert(BLOCK_N == HEAD_KPE)  # P (BLOCK_M x BLOCK_N) reuses a kpe slot
    dt: gl.constexpr = q_nope_ptr.dtype.element_ty
    q_l: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, HALF], dt)
    qpe_l: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, HEAD_KPE], dt)
    kv_l: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, HALF], dt)
    pe_l: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, HEAD_KPE], dt)
    vec_l: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    q_lo = gl.allocate_shared_memory(dt, [BLOCK_M, HALF], q_l)
    q_hi = gl.allocate_shared_memory(dt, [BLOCK_M, HALF], q_l)
    q_pe = gl.allocate_shared_memory(dt, [BLOCK_M, HEAD_KPE], qpe_l)
    kv_lo = gl.allocate_shared_memory(dt, [NUM_STAGES, BLOCK_N, HALF], kv_l)
    kv_hi = gl.allocate_shared_memory(dt, [NUM_STAGES, BLOCK_N, HALF], kv_l)
    pe_bufs = gl.allocate_shared_memory(dt, [NUM_STAGES, BLOCK_N, HEAD_KPE], pe_l)
    alpha_s = gl.allocate_shared_memory(gl.float32, [NUM_STAGES, BLOCK_M], vec_l)
    l_s = gl.allocate_shared_memory(gl.float32, [BLOCK_M], vec_l)
    ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(ready.index(i), count=LOADER_THREADS)  # one cp.async arrival per thread
        mbarrier.init(empty.index(i), count=1)
    if WAIT_TABLE:
        gdc_wait()  # launched while the table kernel ran: its records are visible from here

    smem = (q_lo, q_hi, q_pe, kv_lo, kv_hi, pe_bufs, alpha_s, l_s)
    bars = (ready, empty)
    seqs = (qo_indptr_ptr, kv_indptr_ptr, table_ptr, total_q, batch)
    out = (out_ptr, stride_o_s, stride_o_t, stride_o_h, dst_o_ptr, stride_do_t, stride_do_h)
    queries = (q_nope_ptr, q_pe_ptr, stride_qn_t, stride_qn_h, stride_qp_t, stride_qp_h)
    lse_out = (lse_ptr, stride_l_s, stride_l_t, stride_l_h, dst_lse_ptr, stride_dl_t, stride_dl_h)
    cache = (ckv_ptr, kpe_ptr, kv_indices_ptr, stride_ckv_p, stride_kpe_p)
    gl.warp_specialize(
        [
            (_softmax_partition, (seqs, queries, out, lse_out, qk_scale, smem, bars,
                                  NUM_HEADS, HEAD_KPE, BLOCK_T, BLOCK_N, SCHEDULED,
                                  RECORDS)),
            (_loader_partition, (seqs, cache, out, smem, bars,
                                 NUM_HEADS, HEAD_KPE, BLOCK_T, BLOCK_N, SCHEDULED, RECORDS,
                                 OFFS32)),
        ],
        [LOADER_WARPS],
        [256],  # registers per loader thread
    )  # fmt: skip
