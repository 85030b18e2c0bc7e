"""The kernel against the definition's reference: small workloads, edge cases, random batches."""

import dataclasses
import random
import types

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mla_prefill.accuracy import ATOL, RTOL, close, poisoned_outputs, reference_fast
from mla_prefill.blobs import SMALL_CASES
from mla_prefill.fuzz import ARGS, Batch, check_batch, make_batch_inputs
from mla_prefill.kernel import main
from mla_prefill.kernel.config import (
    MAX_SPLIT_TOKENS,
    KernelConfig,
    choose_config,
    shared_estimate,
)
from mla_prefill.kernel.main import mla_paged_prefill, run
from mla_prefill.kernel.targets import TARGETS


def assert_close(name, out, ref):
    """``accuracy.close`` on every element (flashinfer-bench's rule; NaN never passes; -inf only
    where the reference has it), with the first offending elements in the message."""
    out, ref = out.float().cpu(), ref.float().cpu()
    bad = ~close(out, ref).flatten()
    if bad.any():
        idx = torch.nonzero(bad).flatten()[:5].tolist()
        err = (out - ref).abs().flatten()
        raise AssertionError(
            f"{name}: {int(bad.sum())}/{bad.numel()} elements off (atol {ATOL}, rtol {RTOL}, NaN "
            f"{int(out.isnan().sum())}); first flat positions {idx}: got "
            f"{out.flatten()[idx].tolist()} want {ref.flatten()[idx].tolist()}, abs err "
            f"{err[idx].tolist()}"
        )


def run_case(lengths, device, reference, seed=0, config=None, duplicate_pages=False):
    batch = Batch(list(lengths), sum(k for _, k in lengths) + 23, seed, duplicate_pages)
    inputs = make_batch_inputs(batch, device)
    args = [inputs[k] for k in ARGS]
    T = inputs["q_nope"].shape[0]
    out, lse = poisoned_outputs(T, device)
    mla_paged_prefill(*args, out, lse, validate=True, config=config)
    ref_out, ref_lse = reference(*args)
    assert_close("output", out, ref_out)
    assert_close("lse", lse, ref_lse)
    return out, lse


@pytest.mark.parametrize("name", sorted(SMALL_CASES))
def test_small_workload_shapes(name, device, reference):
    run_case(SMALL_CASES[name], device, reference, seed=len(name))


EDGE_CASES = {
    "one_token_no_prefix": [(1, 1)],
    "q_eq_kv_unaligned": [(19, 19)],
    "odd_q_lens": [(q, q + 3) for q in (1, 3, 5, 7, 9, 11, 13, 15, 17)],
    "empty_sequences": [(0, 0), (3, 3), (0, 9), (2, 0), (0, 0)],
    "no_keys_only": [(4, 0)],
    "tile_straddles_many": [(1, 2), (1, 1), (2, 5), (1, 3), (3, 3)],
    "prefix_not_multiple_of_block": [(6, 6 + 33)],
    # the first-sequence guess (token * batch / total_q) misses both ways here
    "guess_misses": [(0, 0), (12, 12), (1, 5), (1, 1), (1, 9), (0, 4), (9, 9)],
}


@pytest.mark.parametrize("name", sorted(EDGE_CASES))
def test_edge_cases(name, device, reference):
    run_case(EDGE_CASES[name], device, reference, seed=7)


# tile shapes pinned (the interpreter ignores warps/stages): 16-, 32- and 64-row tiles, with and
# without a KV split (pieces down to one 16-position step), so the combine path, empty splits and
# the multi-sequence tile loop all run
def tiles(block_t, block_n, num_splits=1, min_chunk=16):
    return KernelConfig(block_t, block_n, num_splits, min_chunk, num_warps=4, num_stages=2)


PINNED = [tiles(1, 16), tiles(1, 16, 2), tiles(2, 32), tiles(4, 16, 3), tiles(4, 32, 5, 32)]


@pytest.mark.parametrize(
    "config", PINNED, ids=lambda c: f"t{c.block_t}n{c.block_n}s{c.num_splits}c{c.min_chunk}"
)
def test_pinned_configs(config, device, reference):
    lengths = [(1, 40), (3, 3), (0, 5), (2, 0), (7, 30), (5, 21)]
    run_case(lengths, device, reference, seed=3, config=config)


# tiles of the global tiling walk runs of sequences as one KV range: consecutive sequences with
# rows in the tile, across query-less sequences whose KV leaves a gap of at most one KV step;
# a larger gap starts a new run. Each case on 2- and 4-token tiles at 16-position steps.
RUN_CASES = {
    # 4-token tiles of 1-3 tokens per sequence, several sequences per tile
    "short_sequences": [
        (q, k) for q, k in zip([1, 3, 2, 1, 2, 3, 1, 1], [5, 3, 20, 1, 9, 3, 17, 2])
    ],
    # query-less sequences inside tiles: short gaps (walked, masked) and long ones (new run)
    "gaps": [(2, 4), (0, 7), (1, 3), (0, 40), (2, 2), (0, 16), (0, 1), (1, 30), (0, 0), (3, 3)],
    # rows that see no key (kv_len 0) and long sequences ending inside a tile
    "no_keys_and_long": [(3, 0), (2, 2), (5, 70), (1, 1), (3, 50), (2, 0), (2, 2)],
}


@pytest.mark.parametrize("name", sorted(RUN_CASES))
@pytest.mark.parametrize("config", [tiles(2, 16), tiles(4, 16)], ids=["t2", "t4"])
def test_runs_of_sequences(name, config, device, reference):
    run_case(RUN_CASES[name], device, reference, seed=11, config=config)


# 1-token tiles read kv_indices[0, BLOCK_N) before they know their sequence and use it when their
# range starts at position 0 (sequence 0, or a later one after sequences without keys), fetching
# their own block otherwise, then walk the range in one masked loop (indices one step ahead).
# Each case is run on 16-position steps, 32, and a 3-way split.
SPECULATION_CASES = {
    "first_sequence_several_steps": [(1, 40), (2, 7)],
    "starts_at_0_after_empty_ones": [(0, 0), (2, 0), (1, 37), (1, 5)],
    "fewer_indices_than_a_step": [(1, 3), (1, 2)],
    "every_sequence_elsewhere": [(0, 9), (1, 5), (1, 50), (3, 19)],
}


@pytest.mark.parametrize("name", sorted(SPECULATION_CASES))
@pytest.mark.parametrize(
    "config", [tiles(1, 16), tiles(1, 32), tiles(1, 16, 3, 16)], ids=["n16", "n32", "split3"]
)
def test_first_index_block_read_early(name, config, device, reference):
    run_case(SPECULATION_CASES[name], device, reference, seed=9, config=config)


class Force64:
    """Stands in for a kernel: records the 32-bit flags the shapes chose, launches with them off."""

    def __init__(self, kernel, seen):
        self.kernel, self.seen = kernel, seen

    def __getitem__(self, grid):
        def launch(*args, **kw):
            flags = {k: False for k in ("OFFS32", "GUESS32") if k in kw}
            self.seen.append(tuple(kw[k] for k in flags))
            return self.kernel[grid](*args, **{**kw, **flags})

        return launch


# 32-bit gather offsets and first-sequence guess are taken when the shapes allow (every cache
# and batch here); the 64-bit paths, for caches of >= 2**31 elements or total_q * batch >=
# 2**31, are forced through a launcher that overrides both flags (checked to fail with the 64-bit
# gather off by one page; a wrong guess only costs the binary search, so that path can only fail
# by crashing or hanging).
@pytest.mark.parametrize(
    "config", [tiles(1, 16), tiles(1, 16, 3, 16), tiles(4, 16, 3)], ids=["t1", "t1split3", "t4"]
)
def test_64bit_offsets_and_guess(config, device, reference, monkeypatch):
    seen = []
    # 1-token split tiles launch the pooled kernel, the others the main kernel (a split of them
    # after the schedule's)
    for name in ("_mla_prefill_kernel", "_mla_pooled_split_kernel", "_split_schedule_kernel"):
        monkeypatch.setattr(main, name, Force64(getattr(main, name), seen))
    run_case(EDGE_CASES["guess_misses"] + [(1, 40), (3, 3)], device, reference, 5, config)
    # what the shapes chose, before the override: both flags on the attention launch
    assert seen[-1] == (True, True) and all(all(flags) for flags in seen)


def test_split_one_long_many_short(device, reference):
    """Splits sized per sequence: a long range uses every split, short ones only the first."""
    lengths = [(1, 200), (1, 3), (2, 17), (1, 1), (3, 90)]
    run_case(lengths, device, reference, seed=4, config=tiles(1, 16, 6, 16))


# 1-token split tiles pool every token's causal range and cut the pool into pieces of one size:
# a long range owns many consecutive slots (more than the combine's 16 per load), short ones one,
# tokens without keys none (output 0, lse -inf); tokens of prefill sequences have ranges of
# their own causal length
POOLED_CASES = {
    "one_long_range_38_pieces": ([(1, 600)], 40),
    "mixed_lengths_and_empty": ([(1, 200), (0, 0), (1, 3), (4, 0), (2, 17), (1, 1), (3, 90)], 6),
    "guess_misses": (EDGE_CASES["guess_misses"], 3),
    # 8 programs: pieces of sum / 8 (128 positions) would take 10 slots; bisected to 160 (7)
    "tails_over_budget": ([(1, 300), (1, 300), (1, 300), (1, 50)], 2),
}


@pytest.mark.parametrize("name", sorted(POOLED_CASES))
def test_pooled_split(name, device, reference):
    lengths, num_splits = POOLED_CASES[name]
    run_case(lengths, device, reference, seed=6, config=tiles(1, 16, num_splits, 16))


# larger tiles split on a schedule: tiles follow the sequences, and their KV ranges are cut into
# pieces of one size (``_split_schedule_kernel``): a long range takes more pieces than the
# combine merges per load, sequences of several tiles end in a partial tile, sequences without
# keys take no piece, and the budget's bisection and unused programs both occur
SCHEDULED_CASES = {
    "one_long_range_many_pieces": ([(3, 700)], 4, 40),
    "several_tiles_per_sequence": ([(11, 300), (6, 6), (9, 40)], 4, 3),
    "no_keys_and_empty": ([(0, 0), (7, 9), (4, 0), (2, 97), (0, 5), (5, 260)], 4, 2),
    "unequal_prefixes": ([(2, 231), (3, 475), (1, 1432), (4, 2956), (2, 503), (1, 99)], 4, 3),
    "two_token_tiles": ([(3, 180), (1, 17), (5, 600), (2, 2)], 2, 4),
    # 7 programs: pieces of sum / 7 take 9; bisected to fit
    "tails_over_budget": ([(1, 300), (1, 300), (1, 300), (1, 50)], 4, 2),
    # tiles whose range is one piece write the output themselves (the combine skips them),
    # beside a range cut into 7 pieces and a sequence without keys (no piece)
    "single_and_cut_pieces": ([(4, 20), (2, 900), (4, 0), (3, 10)], 4, 3),
}


def scheduled_config(block_t, num_splits, device):
    """A scheduled split of ``block_t``-token tiles: the Gluon kernel's where it runs (64-key
    steps), else the Triton kernel's with 16-key steps and 16-position pieces."""
    if device == "cuda" and block_t == 4 and main.gluon_available():
        if torch.cuda.get_device_capability()[0] == 9:
            return KernelConfig(4, 64, num_splits, 64, kernel="gluon")
    return tiles(block_t, 16, num_splits, 16)


@pytest.mark.parametrize("name", sorted(SCHEDULED_CASES))
def test_scheduled_split(name, device, reference):
    lengths, block_t, num_splits = SCHEDULED_CASES[name]
    cfg = scheduled_config(block_t, num_splits, device)
    run_case(lengths, device, reference, seed=8, config=cfg)


def sequence_tiles(lengths, block_t):
    """Each sequence's tiles of ``block_t`` tokens from its first, as the schedule and order
    kernels cut them: per sequence, its tiles (tok0, tok_end, q_start, q_end, kv_start, kv_end,
    range end); and the batch's token count."""
    seqs, q0, k0 = [], 0, 0
    for q, k in lengths:
        tiles_ = []
        for t in range(q0, q0 + q, block_t):
            end = min(t + block_t, q0 + q)
            tiles_.append((t, end, q0, q0 + q, k0, k0 + k, max(min(k, k - q + end - q0), 0)))
        seqs.append(tiles_)
        q0, k0 = q0 + q, k0 + k
    return seqs, q0


def schedule_model(lengths, block_t, block_n, min_chunk, slots):
    """What ``_split_schedule_kernel`` writes, in Python: per token (first row, piece count),
    then per slot (tok0, tok_end, q_start, q_end, kv_start, kv_end, lo, hi)."""
    seqs, q0 = sequence_tiles(lengths, block_t)
    tiles_ = [t for seq in seqs for t in seq]
    total = sum(w[-1] for w in tiles_)
    chunk = max(-(-(-(-total // slots)) // block_n) * block_n, min_chunk)
    while sum(-(-w[-1] // chunk) for w in tiles_) > slots:
        chunk += block_n  # the kernel bisects; the smallest fitting multiple is the same
    first, count, recs = [0] * q0, [0] * q0, []
    for t0, t1, *seq, work in tiles_:
        n = -(-work // chunk)
        for t in range(t0, t1):
            first[t], count[t] = len(recs) * block_t + t - t0, n
        recs += [(t0, t1, *seq, i * chunk, min((i + 1) * chunk, work)) for i in range(n)]
    recs += [(q0, q0, q0, q0, 0, 0, 0, 0)] * (slots - len(recs))
    return first + count + [x for r in recs for x in r]


def written_table(lengths, cfg, device):
    """(plan, table) for a batch of ``lengths`` under ``cfg``: the int32 table as the plan's
    first launch (the schedule or order kernel) writes it over a table of -7s."""
    inputs = make_batch_inputs(Batch(lengths, sum(k for _, k in lengths) + 1, 0), device)
    shape = main.CallShape.of(inputs["q_nope"], inputs["q_pe"], inputs["ckv_cache"],
                              inputs["kpe_cache"], inputs["q_nope"], inputs["q_pe"][..., 0],
                              len(lengths), inputs["kv_indices"].shape[0])  # fmt: skip
    plan = main.plan_launches(shape, cfg, 0, device != "cuda")
    first = plan.launches[0]
    table = torch.full((plan.table,), -7, dtype=torch.int32, device=device)
    slots = {"qo_indptr": inputs["qo_indptr"], "kv_indptr": inputs["kv_indptr"], "table": table}
    args = tuple(slots[a] if isinstance(a, str) else a for a in first.args)
    main._kernel(first.kernel)[first.grid](*args, **dict(first.consts))
    return plan, table


@pytest.mark.parametrize("name", sorted(SCHEDULED_CASES))
def test_schedule_table(name, device):
    """The work table against ``schedule_model``: every tile's range in pieces of one size,
    numbered tile by tile, and the combine's rows and counts per token."""
    lengths, block_t, num_splits = SCHEDULED_CASES[name]
    plan, table = written_table(lengths, tiles(block_t, 16, num_splits, 16), device)
    schedule = plan.launches[0]
    assert schedule.kernel == "schedule"
    num_slots = schedule.args[-1]
    assert table.tolist() == schedule_model(lengths, block_t, 16, 16, num_slots)


# tiles in work order (``_tile_order_kernel``): tiles follow the sequences, the longest
# sequences' first; sequences of several tiles end in a partial tile, sequences without tokens
# take no tile, tokens that see no key get 0 and -inf, programs past the last tile do nothing
ORDERED_CASES = {
    "unequal_prefixes": ([(2, 231), (3, 475), (1, 1432), (4, 2956), (2, 503), (1, 99)], 4),
    "several_tiles_and_empty": ([(11, 300), (0, 0), (6, 6), (3, 0), (9, 40), (0, 5)], 4),
    "one_token_sequences": ([(1, 700), (1, 3), (1, 90), (1, 1), (2, 2)], 4),
    "two_token_tiles": ([(3, 180), (1, 17), (5, 600), (2, 2), (7, 7)], 2),
    # more sequences than the sort's 16 lanes, equal KV lengths among them
    "many_sequences_equal_lengths": ([(1 + b % 5, 40 + 30 * (b % 4)) for b in range(21)], 4),
}


def ordered_config(block_t, device):
    """Tiles in work order: the Gluon kernel's where it runs, else the Triton kernel's with
    16-key steps."""
    cfg = scheduled_config(block_t, 2, device)
    return dataclasses.replace(cfg, num_splits=1, ordered=True)


@pytest.mark.parametrize("name", sorted(ORDERED_CASES))
def test_ordered_tiles(name, device, reference):
    lengths, block_t = ORDERED_CASES[name]
    run_case(lengths, device, reference, seed=9, config=ordered_config(block_t, device))


def order_model(lengths, block_t, block_n, slots):
    """What ``_tile_order_kernel`` writes after the table's ``2 * total_q`` unused entries, in
    Python: per slot (tok0, tok_end, q_start, q_end, kv_start, kv_end, 0, range end), the
    sequences by descending KV blocks (ties: the later sequence first), each one's tiles from
    its last back, then empty records."""
    seqs, q0 = sequence_tiles(lengths, block_t)
    ranked = sorted(((-(-k // block_n), b) for b, (_, k) in enumerate(lengths)), reverse=True)
    recs = [(*tile[:6], 0, tile[6]) for _, b in ranked for tile in reversed(seqs[b])]
    recs += [(q0, q0, q0, q0, 0, 0, 0, 0)] * (slots - len(recs))
    return [x for r in recs for x in r]


@pytest.mark.parametrize("name", sorted(ORDERED_CASES))
def test_order_table(name, device):
    """The order kernel's records against ``order_model``: every tile of every sequence once,
    the longest sequences' first, then empty records up to the grid."""
    lengths, block_t = ORDERED_CASES[name]
    plan, table = written_table(lengths, dataclasses.replace(tiles(block_t, 16), ordered=True),
                                device)  # fmt: skip
    order, attend = plan.launches
    assert order.kernel == "order" and attend.grid == (order.args[-1],)
    assert dict(attend.consts)["RECORDS"] and not dict(attend.consts)["SCHEDULED"]
    T = sum(q for q, _ in lengths)
    assert table[2 * T :].tolist() == order_model(lengths, block_t, 16, order.args[-1])


UNEQUAL_Q = (2, 3, 1, 4, 2, 4, 3, 1, 4, 4)
UNEQUAL_KV = (2311, 4759, 14328, 29567, 5037, 9928, 3266, 2324, 32064, 2588)
# heavy prefix-dominated batches on Hopper: the default plan gives them 4-token Gluon tiles on a
# scheduled split, here with fewer tokens than one tile holds and with several sequences
HEAVY_PREFIX_CASES = {
    "one_token_over_300k": [(1, 300_000)],
    "three_tokens_two_sequences": [(2, 140_000), (1, 140_001)],
    "tiles_span_sequences": [(1, 9000), (3, 9001), (2, 9000), (1, 8999)] * 8,
    # 1-4 new tokens over 2-32K cached positions (a batch of the random benchmark's kind)
    "unequal_prefixes": 3 * list(zip(UNEQUAL_Q, UNEQUAL_KV)),
}


@pytest.mark.parametrize("name", sorted(HEAVY_PREFIX_CASES))
def test_heavy_prefix_default_tiles(name, device, reference):
    if device != "cuda":
        pytest.skip("the Gluon kernel runs on a GPU (the interpreter plans 1-token tiles)")
    lengths = HEAVY_PREFIX_CASES[name]
    T, K = sum(q for q, _ in lengths), sum(k for _, k in lengths)
    cfg = main.default_config(T, len(lengths), K, torch.device("cuda"))
    if main.gluon_available() and torch.cuda.get_device_capability()[0] == 9:
        assert (cfg.kernel, cfg.block_t) == ("gluon", 4) and cfg.split, cfg
    run_case(lengths, device, reference, seed=13)


@pytest.mark.parametrize("block_t", [1, 4])
def test_split_refuses_too_many_tokens(block_t, device):
    inputs = make_batch_inputs(
        Batch([(MAX_SPLIT_TOKENS + 1, MAX_SPLIT_TOKENS + 1)], 1100, 0), device
    )
    with pytest.raises(ValueError, match="at most 1024 tokens"):
        mla_paged_prefill(*[inputs[k] for k in ARGS], config=tiles(block_t, 16, 2, 16))


@pytest.mark.parametrize(
    "bad,match",
    [
        (KernelConfig(1, 16, 2, 24), "min_chunk"),
        (KernelConfig(1, 24), "block_n"),
        (KernelConfig(3, 16), "block_t"),
        (KernelConfig(1, 16, 0), "num_splits"),
    ],
)
def test_bad_config_refused(bad, match, device):
    inputs = make_batch_inputs(Batch([(2, 40)], 60, 0), device)
    with pytest.raises(ValueError, match=match):
        mla_paged_prefill(*[inputs[k] for k in ARGS], config=bad)


def test_duplicated_pages_and_last_page(device, reference):
    run_case([(9, 40), (4, 33)], device, reference, seed=11, duplicate_pages=True)


def test_reference_fast_matches_definition(reference):
    """reference_fast (used by the sweeps) is pinned to the definition's own reference."""
    for seed, lengths in enumerate([[(5, 37)], [(3, 3), (0, 5), (4, 0), (9, 70)], [(1, 300)]]):
        inputs = make_batch_inputs(Batch(lengths, 400, seed), "cpu")
        args = [inputs[k] for k in ARGS]
        fo, fl = reference_fast(*args)
        ro, rl = reference(*args)
        assert_close("reference_fast output", fo, ro)
        assert_close("reference_fast lse", fl, rl)


def test_every_output_element_written(device, reference):
    """Poisoned outputs (NaN) are fully overwritten, including rows of empty-KV sequences."""
    out, lse = run_case([(2, 0), (3, 3)], device, reference, seed=5)
    assert not out.isnan().any() and not lse.isnan().any()
    assert (out[:2].float() == 0).all() and torch.isinf(lse[:2]).all()


def test_deterministic(device, reference):
    """Two runs on the same input give bit-identical output and lse."""
    a_out, a_lse = run_case([(6, 40), (2, 9)], device, reference, seed=2)
    b_out, b_lse = run_case([(6, 40), (2, 9)], device, reference, seed=2)
    assert torch.equal(a_out, b_out) and torch.equal(a_lse, b_lse)


def test_dps_entry_point_signature(device, reference):
    """``run`` is exactly inputs then outputs (flashinfer-bench's DPS signature check)."""
    import inspect

    params = list(inspect.signature(run).parameters)
    assert params == list(ARGS) + ["output", "lse"]
    inputs = make_batch_inputs(Batch([(4, 10)], 30, 1), device)
    out = torch.full((4, 16, 512), float("nan"), dtype=torch.bfloat16, device=device)
    lse = torch.full((4, 16), float("nan"), dtype=torch.float32, device=device)
    assert run(*[inputs[k] for k in ARGS], out, lse) is None
    ref_out, ref_lse = reference(*[inputs[k] for k in ARGS])
    assert_close("output", out, ref_out)
    assert_close("lse", lse, ref_lse)


@pytest.mark.gpu
def test_launches_on_the_inputs_device_not_the_current_one(device, reference, monkeypatch):
    """Triton launches on the current device; the call makes the inputs' device current for its
    launches and restores the previous one. One GPU here, so another current index is faked."""
    inputs = make_batch_inputs(Batch([(3, 20), (1, 9)], 60, 4), device)
    args = [inputs[k] for k in ARGS]
    out = torch.full((4, 16, 512), float("nan"), dtype=torch.bfloat16, device=device)
    lse = torch.full((4, 16), float("nan"), dtype=torch.float32, device=device)
    mla_paged_prefill(*args, out, lse)  # compiled and Triton's driver set up before faking
    out.fill_(float("nan"))
    lse.fill_(float("nan"))
    current, entered = [5], []  # index 5: any device that is not the inputs'

    class Switch:
        def __init__(self, dev):
            self.index = torch.device(dev).index

        def __enter__(self):
            entered.append(self.index)
            current.append(self.index)

        def __exit__(self, *exc):
            current.pop()

    monkeypatch.setattr(torch.cuda, "current_device", lambda: current[-1])
    monkeypatch.setattr(torch.cuda, "device", Switch)
    mla_paged_prefill(*args, out, lse)
    monkeypatch.undo()
    torch.cuda.synchronize()
    assert entered == [inputs["q_nope"].device.index] and current == [5]
    ref_out, ref_lse = reference(*args)
    assert_close("output", out, ref_out)
    assert_close("lse", lse, ref_lse)


@pytest.mark.parametrize("gluon_api", [True, False])
def test_default_config_on_hopper_needs_the_gluon_api(gluon_api, monkeypatch):
    """On an sm_90 device the 64-row tiles go to the Gluon kernel only when this Triton has the
    Gluon API it is written against; otherwise the Triton kernel (no compile error at run time)."""
    from mla_prefill.kernel import main

    monkeypatch.setattr(main, "is_interpreter", lambda: False)
    monkeypatch.setattr(main, "device_target", lambda index: TARGETS["h200"])
    monkeypatch.setattr(main, "gluon_available", lambda: gluon_api)
    cfg = main.default_config(16384, 1, 16387, torch.device("cuda", 0))
    assert cfg.kernel == ("gluon" if gluon_api else "triton")
    assert cfg.block_t == (4 if gluon_api else 2)
    # a target override plans another GPU's tiles on this one
    b200 = main.default_config(16384, 1, 16387, torch.device("cuda", 0), target="b200")
    assert (b200.kernel, b200.block_t) == ("triton", 2)


H200, B200, A100, GENERIC = (TARGETS[n] for n in ("h200", "b200", "a100", "generic"))


def test_choose_config_from_shapes_only():
    assert choose_config(1, 1, 34).block_t == 1

    def knobs(*shape, target=H200):
        c = choose_config(*shape, target)
        return c.block_n, c.num_warps, c.num_stages

    assert knobs(3, 1, 5) == (16, 4, 2)  # a short single sequence: 2 stages, 4 warps
    # one wave of tiles: 8 warps share a tile's instructions; one step when the range fits
    assert knobs(17, 1, 19) == (32, 8, 2)
    assert knobs(1, 1, 34) == (64, 8, 2)  # 2 stages even for one step (measured)
    assert knobs(96, 1, 98) == (64, 8, 2)
    assert knobs(26, 2, 32) == (32, 8, 2)  # several sequences averaging 16 keys
    assert knobs(4, 4, 121) == (64, 8, 2)  # ... averaging 30: some are longer than 32
    assert knobs(138, 4, 151) == (32, 8, 3)  # more than one wave: 8 warps (4 spill)
    decode = choose_config(22, 22, 17759, H200)  # decode-like: split the long KV ranges
    assert decode.split and 22 * decode.num_splits <= 3 * 132 and not decode.problems()
    # split decode: 8 warps too, one wave of pooled pieces at 3 stages where they fit
    assert decode.num_stages == 3 and decode.num_splits == 6
    # pooled 1-token pieces (where the Gluon kernel does not run): 64 x 1 token over 16,700
    # positions, one wave of halves (128 programs), not two of thirds
    assert choose_config(64, 64, 64 * 16_700, H200, gluon_api=False).num_splits == 2
    # 90 tokens: three waves of quarters (one of whole ranges or two of halves take longer)
    assert choose_config(90, 90, 90 * 10_000, H200, gluon_api=False).num_splits == 4
    assert choose_config(120, 120, 120 * 1000, H200).pooled  # light: 1-token tiles, pooled
    # heavy and prefix-dominated, where the Gluon kernel runs: 4-token tiles split per tile in
    # one wave (a range is read once per tile, not once per token)
    heavy = choose_config(64, 64, 64 * 16_700, H200)
    assert (heavy.kernel, heavy.block_t, heavy.num_splits) == ("gluon", 4, 8) and not heavy.pooled
    # one wave where 2 pieces per tile fit in one (31 tiles: 124 programs, not 155), else 2
    assert choose_config(122, 51, 51 * 3000, H200).num_splits == 4
    assert choose_config(400, 1, 4000, H200).num_splits == 2
    assert choose_config(132, 53, 560_071, H200).kernel == "gluon"
    assert choose_config(101, 6, 5117, H200).kernel == "gluon"  # >= 4 new tokens per sequence
    assert choose_config(18, 10, 74_716, H200).pooled  # light: 18 x 7.5K rows, 1.8 per sequence
    assert choose_config(64, 64, 64 * 16_700, B200).pooled  # no Gluon kernel there
    # not on an A100 (167,936 B > 166,912) nor on sm_100 (3 stages spill there)
    assert knobs(22, 22, 17759, target=A100) == (64, 8, 2)
    assert knobs(22, 22, 17759, target=B200) == (64, 8, 2)
    one_sm = dataclasses.replace(H200, num_sms=1)
    assert choose_config(22, 22, 17759, one_sm).num_splits == 1
    # which kernel a split launches: pooled pieces for 1-token Triton tiles, per tile otherwise
    assert decode.pooled and not choose_config(22, 22, 17759, one_sm).pooled
    assert not choose_config(400, 1, 4000, H200).pooled  # split, but 64-row tiles
    assert not KernelConfig(1, 64, 6, kernel="gluon").pooled
    big = choose_config(16384, 1, 16387, H200)
    assert (big.kernel, big.block_m, big.num_splits) == ("gluon", 64, 1)
    assert (
        main.default_config(16384, 1, 16387, torch.device("cpu"), interpret=True).kernel == "triton"
    )
    assert choose_config(16384, 1, 16387, H200, gluon_api=False).block_t == 2
    assert choose_config(100, 1, 100, H200).kernel == "triton"  # 16-row tiles
    assert choose_config(165, 1, 165, H200).block_t == 1  # up to 1.25 waves with Gluon
    assert choose_config(166, 1, 166, H200).kernel == "gluon"
    assert choose_config(270, 1, 270, A100).block_t == 1  # up to 2.5 waves of 16-row tiles
    assert choose_config(271, 1, 271, A100).block_t == 2  # (108 SMs)
    assert choose_config(370, 1, 370, B200).block_t == 1 and B200.num_sms == 148
    assert choose_config(371, 1, 371, B200).block_t == 2
    # a causal sequence without a long prefix is not split (fp32 partials cost more than idle SMs)
    assert choose_config(376, 1, 381, H200).num_splits == 1
    assert choose_config(200, 1, 4000, H200, gluon_api=False).num_splits == 1  # 200 16-row tiles
    assert choose_config(400, 1, 4000, H200).num_splits > 1  # 100 64-row tiles, a long prefix
    # past one wave of tiles, batches of several sequences over long prefixes start the longest
    # tiles first; single sequences (last tile first already is) and causal batches do not
    unequal = choose_config(946, 15, 15301, H200)
    assert (unequal.kernel, unequal.num_splits, unequal.ordered) == ("gluon", 1, True)
    assert choose_config(946, 15, 15301, B200).ordered  # 473 2-token tiles on 148 SMs
    assert not choose_config(946, 1, 15301, H200).ordered
    assert not choose_config(4097, 3, 11691, H200).ordered  # from 4 sequences
    assert choose_config(4097, 4, 11691, H200).ordered
    assert not choose_config(1954, 28, 2044, H200).ordered  # 892d1b8f: no prefix
    assert not choose_config(400, 4, 4000, H200).ordered  # 100 tiles: split instead
    assert choose_config(8000, 20, 200_000, H200).ordered  # 2,000 tiles + 20: 2,020 slots
    assert not choose_config(8120, 20, 200_000, H200).ordered  # 2,050 slots: over 2,048
    assert not choose_config(2000, 257, 200_000, H200).ordered  # the sort takes 256 sequences
    with pytest.raises(ValueError, match="total_q"):
        choose_config(0, 1, 1)


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_every_triton_tile_fits_the_targets_shared_memory(target):
    """The chooser's fit rule: every Triton tile it picks for a target is within that target's
    shared memory by ``shared_estimate`` (``mla-prefill portability`` checks the compiled
    figures against the limit)."""
    t = TARGETS[target]
    for total_q, batch, num_kv in [(1, 1, 34), (22, 22, 17759), (138, 4, 151), (376, 1, 381),
                                   (400, 1, 4000), (16384, 1, 16387), (1024, 256, 300_000)]:  # fmt: skip
        c = choose_config(total_q, batch, num_kv, t, gluon_api=False)
        assert shared_estimate(c.block_t, c.block_n, c.num_stages, t.capability) <= t.max_shared
        assert c.block_t in (1, 2), c  # 64-row tl.dot tiles spill off Hopper's Gluon kernel


def test_heavy_prefix_rule_leaves_the_38_workloads_tiles(monkeypatch):
    """The 4-token prefix path changes no tile of the 38 upstream workloads on any target, so
    their H200 timings of the kernel before it (``benchmarks/results/h200.json``) still time
    the launches made today; it does change the heavy decode-like shapes."""
    import json

    from mla_prefill.blobs import LENGTHS_FILE
    from mla_prefill.io import repo_root
    from mla_prefill.kernel import config

    lengths = json.loads((repo_root() / LENGTHS_FILE).read_text())
    shapes = [(sum(q for q, _ in v), len(v), sum(k for _, k in v)) for v in lengths.values()]
    assert len(shapes) == 38
    targets = [TARGETS[t] for t in sorted(TARGETS)]
    today = [choose_config(*s, t) for s in shapes for t in targets]
    assert not any(c.ordered for c in today)  # no long prefix among them
    # no scheduled split either: the one-wave cap (max_slots) and the serving plan's table
    # leave their launches as they were
    assert not any(c.split and not c.pooled for c in today)
    heavy = choose_config(64, 64, 64 * 16_700, H200)
    monkeypatch.setattr(config, "HEAVY_GATHER_ROWS", float("inf"))
    assert [choose_config(*s, t) for s in shapes for t in targets] == today
    assert choose_config(64, 64, 64 * 16_700, H200) != heavy


def test_wide_tiles_follow_the_targets_shared_memory():
    """Deepest pipeline that fits: 4 stages of 32 keys on B200 and A100, 2 on a 99 KB GPU, and
    an error (not a launch) where nothing fits."""
    wide = [choose_config(16384, 1, 16387, t) for t in (B200, A100, GENERIC)]
    assert [(c.block_t, c.block_n, c.num_warps, c.num_stages) for c in wide] == [
        (2, 32, 8, 4), (2, 32, 8, 4), (2, 32, 8, 2)]  # fmt: skip
    tiny = dataclasses.replace(GENERIC, max_shared=48 * 1024)
    with pytest.raises(ValueError, match="no tile of the Triton kernel fits"):
        choose_config(16384, 1, 16387, tiny)


def test_shared_estimate_bounds_the_compiled_figures():
    """Compiled with Triton 3.6 (``mla-prefill portability``): the estimate is exact for
    ``mma.sync`` tiles and an upper bound for the 64-row ``wgmma`` / ``tcgen05`` ones."""
    assert shared_estimate(2, 32, 4, 100) == 149_504
    assert shared_estimate(1, 64, 2, 90) == 149_504  # Triton 3.9's figure (3.6: 94,208)
    assert shared_estimate(4, 64, 2, 90) >= 221_440
    assert shared_estimate(4, 64, 2, 100) >= 353_280 > B200.max_shared


def test_device_target_reads_the_devices_properties(monkeypatch):
    """A real device plans with its own SM count and shared memory, named after the table's
    entry when it is one of them."""
    from mla_prefill.kernel import targets

    props = types.SimpleNamespace(name="NVIDIA B200", major=10, minor=0,
                                  multi_processor_count=148,
                                  shared_memory_per_block_optin=232_448)  # fmt: skip
    monkeypatch.setattr(targets.torch.cuda, "get_device_properties", lambda i: props)
    targets.device_target.cache_clear()
    try:
        t = targets.device_target(0)
        assert (t.name, t.capability, t.num_sms, t.max_shared) == ("b200", 100, 148, 232_448)
        props.name, props.multi_processor_count = "NVIDIA RTX PRO 6000", 188
        props.major, props.minor, props.shared_memory_per_block_optin = 12, 0, 101_376
        targets.device_target.cache_clear()
        t = targets.device_target(0)
        assert (t.name, t.num_sms, t.max_shared) == ("sm_120", 188, 101_376)
        assert choose_config(16384, 1, 16387, t).num_stages == 2
    finally:
        targets.device_target.cache_clear()
    with pytest.raises(ValueError, match="known: h200"):
        targets.target_named("b300")


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    lengths=st.lists(
        st.tuples(st.integers(0, 12), st.integers(0, 40)).map(
            lambda t: (t[0], t[0] + t[1] if t[0] else t[1])
        ),
        min_size=1,
        max_size=6,
    ),
    seed=st.integers(0, 2**16),
    num_splits=st.sampled_from([1, 2, 3]),
    block_t=st.sampled_from([1, 2, 4]),
)
def test_property_random_batches(lengths, seed, num_splits, block_t, device, reference):
    """Any valid batch (empty sequences, kv_len 0, prefixes, tiles over several sequences)."""
    if sum(q for q, _ in lengths) == 0:
        lengths = lengths + [(1, 1)]
    run_case(lengths, device, reference, seed=seed, config=tiles(block_t, 16, num_splits))


@pytest.mark.gpu
@pytest.mark.parametrize(
    "config", [None, tiles(1, 32, 4, 32), tiles(4, 16, 3)], ids=["default", "pooled", "per_tile"]
)
def test_cuda_graph_replay_on_new_batches(config, device, reference):
    """The call captured in a CUDA graph (no host sync on its path; the split kernels' combine is
    a programmatic dependent launch on sm_90) replays correctly on new values written into the
    same buffers: new data, then another batch of the same sizes (lengths and pages)."""
    lengths = [(1, 200), (1, 37), (1, 5), (1, 120), (3, 40)]
    inputs = make_batch_inputs(Batch(lengths, 500, 11), device)
    args = [inputs[k] for k in ARGS]
    T = inputs["q_nope"].shape[0]
    out = torch.empty((T, 16, 512), dtype=torch.bfloat16, device=device)
    lse = torch.empty((T, 16), dtype=torch.float32, device=device)
    mla_paged_prefill(*args, out, lse, config=config)  # compiles outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        mla_paged_prefill(*args, out, lse, config=config)
    for seed, new_lengths in ((12, lengths), (13, [(3, 40), (1, 120), (1, 5), (1, 37), (1, 200)])):
        fresh = make_batch_inputs(Batch(new_lengths, 500, seed), device)
        for k in ARGS[:-1]:  # every tensor input, in place (sm_scale is baked into the graph)
            inputs[k].copy_(fresh[k])
        out.fill_(float("nan"))
        lse.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        ref_out, ref_lse = reference(*args)
        assert_close("output", out, ref_out)
        assert_close("lse", lse, ref_lse)


@pytest.mark.gpu
def test_gpu_random_sweep(device):
    """Seeded sweep of larger shapes on the GPU (sizes beyond the interpreter's reach)."""
    rng = random.Random(5)
    from mla_prefill.fuzz import random_batch

    for i in range(20):
        res = check_batch(random_batch(rng, 1000 + i, 4096, 2048, 4096), device)
        assert res["ok"], res


def test_fuzz_coverage_counts_each_split_path():
    from mla_prefill.fuzz import coverage

    base = dict(empty_seqs=0, max_q_len=1, max_kv_len=10, batch_size=1, duplicate_pages=[])
    tiled = dict(base, total_q=9, kernel="gluon", block_t=4, num_splits=1)  # the global tiling
    runs = [
        dict(base, total_q=22, kernel="triton", block_t=1, num_splits=6),  # pooled
        dict(base, total_q=400, kernel="gluon", block_t=4, num_splits=3),  # per-tile, Gluon
        dict(base, total_q=400, kernel="triton", block_t=4, num_splits=3),  # per-tile, Triton
        dict(base, total_q=5, kernel="triton", block_t=1, num_splits=1),  # no split
        dict(base, total_q=900, kernel="gluon", block_t=4, num_splits=1, ordered=True),
        dict(tiled, multi_seq_tiles=2, run_gap_tiles=1),  # runs, one with a gap
        dict(tiled, multi_seq_tiles=1, run_gap_tiles=0),
    ]
    cov = coverage(runs)
    paths = ("kv_split_path", "gluon_kv_split_path", "pooled_kv_split_path", "ordered_tiles",
             "multi_sequence_tiles", "run_gaps")  # fmt: skip
    assert [cov[k] for k in paths] == [3, 1, 1, 1, 2, 1]


def test_fuzz_counts_tiles_that_walk_runs():
    """``fuzz.tile_runs`` on the run cases: tiles of several sequences, and those with a
    query-less sequence with KV between two of them."""
    from mla_prefill.fuzz import tile_runs

    # 4-token tiles of "gaps": [0, 4) holds sequences 0, 2, 4 (gaps of 7 and 40 positions),
    # [4, 8) sequences 4, 7, 9 (a gap of 17), [8, 9) sequence 9 alone
    assert tile_runs(RUN_CASES["gaps"], 4) == (2, 2)
    assert tile_runs(RUN_CASES["gaps"], 2) == (2, 2)  # [2, 4) and [4, 6), both with a gap
    assert tile_runs([(8, 8)], 4) == (0, 0)
    assert tile_runs([(1, 1)] * 9, 4) == (2, 0)
    assert tile_runs([(5, 5), (0, 9), (0, 0), (3, 3)], 4) == (1, 1)


def test_fuzz_resume_continues_the_same_batches(tmp_path, device):
    """An interrupted sweep resumes where it stopped and draws the same batches as one full run."""
    import json

    from mla_prefill import fuzz

    small = ["--max-tokens", "12", "--max-q", "6", "--max-prefix", "10", "--seed", "3"]
    full, part = tmp_path / "full.json", tmp_path / "part.json"
    assert fuzz.main(["--n", "4", *small, "--output", str(full)]) == 0
    doc = json.loads(full.read_text())
    doc["results"] = doc["results"][:2]
    part.write_text(json.dumps(doc))
    assert fuzz.main(["--n", "4", *small, "--output", str(part), "--resume"]) == 0
    resumed = json.loads(part.read_text())
    assert resumed["complete"] and resumed["batches"] == 4 and len(resumed["commands"]) == 2
    assert [r["seed"] for r in resumed["results"]] == [r["seed"] for r in doc["results"]] + [
        r["seed"] for r in json.loads(full.read_text())["results"][2:]
    ]
    with pytest.raises(SystemExit):  # another seed than the recorded run: refused
        fuzz.main(["--n", "4", *small[:-1], "4", "--output", str(part), "--resume"])


# the warp-specialised Gluon kernel (64-row tiles, GPU only): every shape family above, with and
# without a split; on the CPU path only its refusal under the interpreter is checked
GLUON = [
    KernelConfig(4, 64, kernel="gluon"),
    KernelConfig(4, 64, 3, 128, kernel="gluon"),
    KernelConfig(4, 64, 5, 64, kernel="gluon"),
]
GLUON_LENGTHS = {
    **EDGE_CASES,
    "pinned": [(1, 40), (3, 3), (0, 5), (2, 0), (7, 30), (5, 21)],
    "long_prefix": [(70, 900), (1, 1), (9, 300)],
    "single_causal": [(333, 333)],
    "many_blocks_one_tile": [(2, 1000), (1, 77), (1, 64)],
}


@pytest.mark.gpu
@pytest.mark.parametrize(
    "config", GLUON, ids=lambda c: f"n{c.block_n}s{c.num_splits}c{c.min_chunk}"
)
@pytest.mark.parametrize("name", sorted(GLUON_LENGTHS))
def test_gluon_kernel(name, config, device, reference):
    run_case(GLUON_LENGTHS[name], device, reference, seed=13, config=config)


@pytest.mark.gpu
@pytest.mark.parametrize("config", GLUON[:2], ids=["whole", "split3"])
def test_gluon_64bit_offsets(config, device, reference, monkeypatch):
    """The Gluon loader's 64-bit gather path (caches of >= 2**31 elements), forced."""
    from mla_prefill.kernel import gluon_attention  # imported at launch, so patched there

    seen = []
    kernel = gluon_attention._mla_prefill_ws_kernel
    monkeypatch.setattr(gluon_attention, "_mla_prefill_ws_kernel", Force64(kernel, seen))
    run_case(GLUON_LENGTHS["long_prefix"] + [(1, 40), (3, 3)], device, reference, 5, config)
    assert seen == [(True,)]


@pytest.mark.gpu
def test_gluon_deterministic_and_duplicated_pages(device, reference):
    cfg = GLUON[0]
    a = run_case([(9, 40), (4, 33), (50, 260)], device, reference, 11, cfg, duplicate_pages=True)
    b = run_case([(9, 40), (4, 33), (50, 260)], device, reference, 11, cfg, duplicate_pages=True)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


@pytest.mark.parametrize(
    "config",
    [None, tiles(1, 16), tiles(1, 32), tiles(1, 16, 3, 16), tiles(2, 32), tiles(4, 16, 3), "gluon"],
    ids=["default", "t1n16", "t1n32", "t1split3", "t2n32", "t4n16split3", "gluon"],
)
def test_unreferenced_pages_are_never_read(config, device, reference):
    """Pages no sequence references hold NaN, page 0 included (the masked-off lanes' index): a
    kernel that reads one (a gather past a range's end, a masked-off row) turns the output NaN.
    The gluon kernel re-reads a referenced page instead. Every tile size and the split path."""
    if config == "gluon" and device == "cpu":
        pytest.skip("the gluon kernel needs a Hopper GPU")
    lengths = [(5, 70), (1, 1), (6, 6), (3, 130), (0, 3), (2, 19), (1, 5)]
    inputs = make_batch_inputs(Batch(lengths, 4 * 207, 3), device)
    idx, ckv, kpe = inputs["kv_indices"], inputs["ckv_cache"], inputs["kpe_cache"]
    unused = torch.ones(ckv.shape[0], dtype=torch.bool, device=device)
    unused[idx.long()] = False
    spare = int(torch.nonzero(unused)[-1])  # page 0's data moves here: page 0 becomes unused
    ckv[spare], kpe[spare] = ckv[0], kpe[0]
    idx[idx == 0] = spare
    unused[spare], unused[0] = False, True
    ckv[unused], kpe[unused] = float("nan"), float("nan")
    args = [inputs[k] for k in ARGS]
    out, lse = mla_paged_prefill(*args, config=GLUON[0] if config == "gluon" else config)
    ref_out, ref_lse = reference(*args)
    assert_close("output", out, ref_out)
    assert_close("lse", lse, ref_lse)


def test_gluon_refused_by_interpreter_or_bad_tiles(device):
    inputs = make_batch_inputs(Batch([(2, 40)], 60, 0), device)
    args = [inputs[k] for k in ARGS]
    with pytest.raises(ValueError, match="gluon"):
        mla_paged_prefill(*args, config=KernelConfig(1, 32, kernel="gluon"))
    if device == "cpu":
        with pytest.raises(ValueError, match="TRITON_INTERPRET"):
            mla_paged_prefill(*args, config=GLUON[0])
