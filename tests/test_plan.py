"""Launch planning is a pure function of shapes, strides and tiles: checked here without tensors."""

import dataclasses

from mla_prefill.kernel.config import KernelConfig, choose_config
from mla_prefill.kernel.main import plan_call
from mla_prefill.kernel.plan import (
    MAX_SLOTS,
    REC_FIELDS,
    CallShape,
    partial_elements,
    plan_launches,
    split_layout,
    split_slots,
    table_launch,
)
from mla_prefill.kernel.targets import target_named

H200 = target_named("h200")


def shape(total_q, batch, num_kv, num_pages=1000, out_strides=(16 * 512, 512)):
    return CallShape(total_q, batch, num_kv, num_pages, (16 * 512, 512), (16 * 64, 64), 512, 64,
                     out_strides, (16, 1))  # fmt: skip


def test_one_tile_launch_writes_the_output_with_its_strides():
    s = shape(2048, 4, 2048, out_strides=(16 * 1024, 1024))  # a strided output
    plan = plan_launches(s, choose_config(2048, 4, 2048, H200), 90, False)
    (launch,) = plan.launches
    assert launch.kernel == "gluon" and launch.grid == (512,)
    assert plan.partials == () and partial_elements(plan) is None
    # destinations (and the unread table pointer), the output again (a split's tiles of one
    # piece write there), then q/pe/cache strides, (piece, token, head) strides of out and lse,
    # and (token, head) strides of the output and lse
    i = launch.args.index("output")
    assert launch.args[i : i + 5] == ("output", "lse", "qo_indptr", "output", "lse")
    assert launch.args[i + 11 : i + 21] == (0, 16 * 1024, 1024, 0, 16, 1, 16 * 1024, 1024, 16, 1)
    assert dict(launch.consts)["SCHEDULED"] is False
    assert not dict(launch.consts)["WAIT_TABLE"] and not dict(launch.options)["launch_pdl"]


def test_scheduled_split_plans_a_schedule_partials_and_a_combine():
    cfg = choose_config(400, 1, 4000, H200)
    assert cfg.split and not cfg.pooled and cfg.block_t == 4
    plan = plan_launches(shape(400, 1, 4000), cfg, 90, False)
    schedule, main, combine = plan.launches
    slots = split_slots(cfg, 400, 1)
    # 100 tiles: two pieces each would be 1.5 waves, so the programs are one wave of 132
    assert cfg.num_splits == 2 and cfg.max_slots == H200.num_sms and slots == 132
    assert schedule.kernel == "schedule" and schedule.grid == (1,) and schedule.args[-1] == slots
    assert dict(schedule.consts)["BLOCK_SL"] >= slots and dict(schedule.consts)["BLOCK_TQ"] == 512
    # one program per piece, partial rows [slot, 4 tokens, 16 heads]
    assert plan.partials == (slots, 4) and plan.table == 2 * 400 + REC_FIELDS * slots
    assert main.grid == (slots,) and "part_o" in main.args and dict(main.consts)["SCHEDULED"]
    i = main.args.index("part_o")
    assert main.args[i : i + 5] == ("part_o", "part_lse", "table", "output", "lse")
    assert main.args[i + 11 : i + 21] == (
        4 * 16 * 512, 16 * 512, 512, 4 * 16, 16, 1, 16 * 512, 512, 16, 1,
    )  # fmt: skip
    assert combine.kernel == "combine" and combine.grid[0] == 400 * 16
    # a tile of one piece wrote its tokens' output: the combine skips them
    assert dict(combine.consts)["ROWS"] == 4 and dict(combine.consts)["DIRECT"] is True
    assert dict(combine.options)["launch_pdl"] is True  # sm_90: programmatic dependent launch
    # the attention launch overlaps the schedule's: it waits for the table in the kernel
    assert dict(schedule.consts)["USE_PDL"] is True
    assert dict(main.options)["launch_pdl"] is True and dict(main.consts)["WAIT_TABLE"] is True
    # without a GPU (the interpreter) nothing is a dependent launch
    cpu = plan_launches(shape(400, 1, 4000), cfg, 0, True)
    assert not dict(cpu.launches[1].options)["launch_pdl"]
    assert not dict(cpu.launches[1].consts)["WAIT_TABLE"]


def test_scheduled_split_has_a_program_for_every_tile():
    # 300 sequences of 1 token: 75 global tiles but 300 tiles that follow the sequences
    cfg = KernelConfig(4, 64, 2, 128, kernel="gluon")
    assert split_slots(cfg, 300, 300) == 300
    assert split_slots(cfg, 300, 1) == 150
    assert split_slots(KernelConfig(4, 64, 64, 128), 1000, 1) == MAX_SLOTS
    # a cap of programs never takes a tile's own piece away
    capped = dataclasses.replace(cfg, max_slots=132)
    assert split_slots(capped, 300, 1) == 132
    assert split_slots(capped, 300, 300) == 300
    assert split_slots(dataclasses.replace(cfg, max_slots=4000), 300, 1) == 150


def test_scheduled_splits_are_one_wave_of_programs():
    """From half a wave of tiles up, two pieces per tile would leave a partial second wave:
    the chooser caps the programs at the SM count, below that ``num_splits`` per tile fill it."""
    for total_q, batch, num_kv in [(331, 3, 4007), (331, 7, 2284), (165, 2, 1022), (400, 1, 4000),
                                   (132, 53, 560_000), (39, 16, 174_593)]:  # fmt: skip
        cfg = choose_config(total_q, batch, num_kv, H200)
        assert cfg.split and not cfg.pooled and cfg.max_slots == H200.num_sms
        tiles = min(total_q, -(-total_q // 4) + batch)
        assert split_slots(cfg, total_q, batch) == max(min(cfg.num_splits * -(-total_q // 4),
                                                           132), tiles)  # fmt: skip
    assert choose_config(22, 22, 17759, H200).max_slots == 0  # pooled: whole waves of its own
    assert choose_config(2048, 4, 2048, H200).max_slots == 0  # no split


def test_a_table_written_before_the_call_leaves_only_attention_and_the_combine():
    """``table_ready`` (the serving plan wrote the work table): the same attention launch, not
    waiting for a table kernel, and the same buffers."""
    for cfg, T, B, N in [(choose_config(400, 1, 4000, H200), 400, 1, 4000),
                         (choose_config(1492, 11, 9249, H200), 1492, 11, 9249)]:  # fmt: skip
        full = plan_launches(shape(T, B, N), cfg, 90, False)
        ready = plan_launches(shape(T, B, N), cfg, 90, False, table_ready=True)
        assert full.launches[0].kernel == ("order" if cfg.ordered else "schedule")
        assert full.launches[0] == table_launch(cfg, T, B, True)
        assert [ln.kernel for ln in ready.launches] == [ln.kernel for ln in full.launches[1:]]
        main, main_ready = full.launches[1], ready.launches[0]
        assert (main_ready.grid, main_ready.args) == (main.grid, main.args)
        assert dict(main.consts)["WAIT_TABLE"] and not dict(main_ready.consts)["WAIT_TABLE"]
        assert not dict(main_ready.options)["launch_pdl"]
        assert (ready.partials, ready.table) == (full.partials, full.table)
        assert (full.partials, full.table) == split_layout(cfg, T, B)
        assert ready.launches[1:] == full.launches[2:]  # the combine, if any, unchanged
    # no table kernel: nothing to leave out
    cfg = choose_config(22, 22, 17759, H200)
    assert table_launch(cfg, 22, 22, True) is None
    assert plan_launches(shape(22, 22, 17759), cfg, 90, False, table_ready=True) == plan_launches(
        shape(22, 22, 17759), cfg, 90, False
    )


def test_pooled_split_of_a_decode_batch():
    cfg = choose_config(22, 22, 17759, H200)
    assert cfg.pooled
    plan = plan_launches(shape(22, 22, 17759, num_pages=989_669), cfg, 90, False)
    pooled, combine = plan.launches
    slots = cfg.num_splits * 22  # the kernel sizes the pieces to fit these programs
    assert pooled.kernel == "pooled" and pooled.grid == (slots,) and plan.table == 44
    assert partial_elements(plan) == (slots * 16 * 512, slots * 16, 44)
    assert dict(pooled.consts)["OFFS32"] is True
    assert dict(combine.consts)["ROWS"] == 1 and dict(combine.consts)["DIRECT"] is False


def test_64bit_offsets_and_no_pdl_without_a_gpu():
    cfg = choose_config(8, 1, 100, H200)
    plan = plan_launches(shape(8, 1, 100, num_pages=5_000_000), cfg, 0, True)
    (launch,) = plan.launches
    consts = dict(launch.consts)
    assert launch.kernel == "tile" and consts["OFFS32"] is False and consts["INTERPRET"] is True


def test_plans_are_cached_per_shape_and_config():
    s = shape(64, 8, 512)
    cfg = KernelConfig(1, 16)
    assert plan_call(s, None, True, cfg) is plan_call(dataclasses.replace(s), None, True, cfg)
    assert plan_call(s, None, True, cfg) is not plan_call(s, None, True, KernelConfig(1, 32))
