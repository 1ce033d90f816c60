"""Kernels and ops of NEW paired with BASE's: by name, by normalised name and configuration."""

from __future__ import annotations

from stepscope.compare.matching import BY_CONFIG, BY_FORM, BY_NAME, match, normalise
from stepscope.compare.sides import Use

G64 = (64, 1, 1, 128, 1, 1)
G128 = (128, 1, 1, 128, 1, 1)


def test_normalise_drops_numbers_and_hashes() -> None:
    assert normalise("triton_poi_fused_add_0") == normalise("triton_poi_fused_add_17")
    assert normalise("void at::native::kernel<4, float>(int)") == "at::native::kernel<#, float>(int)"
    assert (normalise("sm90_xmma_gemm_bf16_tilesize128x64_0x1a2b3c4d")
            == normalise("sm90_xmma_gemm_bf16_tilesize256x64_0xdeadbeef"))
    assert normalise("fused_kernel_9f86d081884c7d65") == normalise("fused_kernel_2c26b46b68ffc68f")
    # a plain word of hex letters only is no hash
    assert normalise("deadbeefcafe_kernel") == "deadbeefcafe_kernel"
    assert normalise("gemm") != normalise("gemv")


def test_match_by_name_then_configuration_then_the_one_left() -> None:
    base = {
        "gemm": Use(10, 5.0, G128),
        "triton_poi_fused_add_0": Use(1, 1.0, G64),
        "triton_poi_fused_add_1": Use(1, 2.0, G128),
        "triton_red_fused_sum_3": Use(2, 0.5, G64),
        "old_kernel": Use(1, 0.25, G64),
    }
    new = {
        "gemm": Use(10, 4.0, G128),
        "triton_poi_fused_add_5": Use(1, 2.5, G128),  # the one with grid 128
        "triton_poi_fused_add_4": Use(1, 1.0, G64),  # the one with grid 64
        "triton_red_fused_sum_7": Use(2, 0.75, G128),  # config changed, but alone in its form
        "brand_new": Use(3, 0.3, G64),
    }
    rows = {(c.base_name, c.new_name): c for c in match(base, new)}
    assert rows[("gemm", "gemm")].matched_by == BY_NAME
    assert rows[("gemm", "gemm")].delta_ms == -1.0
    assert rows[("triton_poi_fused_add_1", "triton_poi_fused_add_5")].matched_by == BY_CONFIG
    assert rows[("triton_poi_fused_add_0", "triton_poi_fused_add_4")].matched_by == BY_CONFIG
    assert rows[("triton_red_fused_sum_3", "triton_red_fused_sum_7")].matched_by == BY_FORM
    assert rows[("old_kernel", None)].status == "gone"
    assert rows[(None, "brand_new")].status == "new"
    assert len(rows) == 6
    order = [abs(c.delta_ms) for c in match(base, new)]
    assert order == sorted(order, reverse=True)


def test_two_candidates_without_a_matching_configuration_stay_apart() -> None:
    base = {"k_1": Use(1, 1.0, G64), "k_2": Use(1, 1.0, G64)}
    new = {"k_3": Use(1, 1.0, G128), "k_4": Use(1, 1.0, G128)}
    statuses = sorted(c.status for c in match(base, new))
    assert statuses == ["gone", "gone", "new", "new"]


def test_ops_without_configuration_pair_only_one_to_one() -> None:
    rows = match({"aten::mm": Use(2, 1.0), "step_0": Use(1, 1.0)},
                 {"aten::mm": Use(2, 1.0), "step_1": Use(1, 3.0)})
    by = {c.name: c for c in rows}
    assert by["step_1"].matched_by == BY_FORM and by["step_1"].delta_ms == 2.0
    assert by["aten::mm"].delta_ms == 0.0
