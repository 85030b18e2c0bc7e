"""Launch planning is a pure function of shapes, strides and tiles: checked here without tensors."""

import dataclasses

from mla_prefill.kernel.config import KernelConfig, choose_config
from mla_prefill.kernel.main import plan_call
from mla_prefill.kernel.plan import CallShape, partial_elements, plan_launches
from mla_prefill.kernel.targets import target_named

H200 = target_named("h200")


def shape(total_q, batch, num_kv, num_pages=1000, out_strides=(16 * 512, 512)):
    return CallShape(total_q, batch, num_kv, num_pages, (16 * 512, 512), (16 * 64, 64), 512, 64,
                     out_strides, (16, 1))  # fmt: skip


def test_one_tile_launch_writes_the_output_with_its_strides():
    s = shape(2048, 4, 2048, out_strides=(16 * 1024, 1024))  # a strided output
    plan = plan_launches(s, choose_config(2048, 4, 2048, H200), 90, False)
    (launch,) = plan.launches
    assert launch.kernel == "gluon" and launch.grid == (512, 1)
    assert plan.partials == () and partial_elements(plan) is None
    # destinations, then q/pe/cache strides, then (split, token, head) strides of out and lse
    i = launch.args.index("output")
    assert launch.args[i : i + 2] == ("output", "lse")
    assert launch.args[i + 8 : i + 14] == (0, 16 * 1024, 1024, 0, 16, 1)


def test_per_tile_split_plans_partials_and_a_combine():
    cfg = choose_config(400, 1, 4000, H200)
    assert cfg.split and not cfg.pooled
    plan = plan_launches(shape(400, 1, 4000), cfg, 90, False)
    main, combine = plan.launches
    assert plan.partials == (cfg.num_splits, 400)
    assert main.grid == (100, cfg.num_splits) and "part_o" in main.args
    assert combine.kernel == "combine" and combine.grid[0] == 400 * 16
    assert dict(combine.options)["launch_pdl"] is True  # sm_90: programmatic dependent launch


def test_pooled_split_of_a_decode_batch():
    cfg = choose_config(22, 22, 17759, H200)
    assert cfg.pooled
    plan = plan_launches(shape(22, 22, 17759, num_pages=989_669), cfg, 90, False)
    pooled, combine = plan.launches
    slots = cfg.num_splits * 22  # the kernel sizes the pieces to fit these programs
    assert pooled.kernel == "pooled" and pooled.grid == (slots,) and plan.table == 44
    assert partial_elements(plan) == (slots * 16 * 512, slots * 16, 44)
    assert dict(pooled.consts)["OFFS32"] is True


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
