"""Agreement with the original tools on public traces (issue 19; tests/data/external).

Each file is the test or sample trace of another tool, copied unchanged from
``../shared/fixtures/external`` (PROVENANCE.md); :data:`EXPECT` holds, per file, what its own
tool concluded (from that folder's README: kineto tb_plugin's recommendations reproduced with
its own code, HTA 0.5.0's temporal breakdown, TraceLens's committed ``gpu_timeline.csv`` and
its IdleTimeAnalyser test) and what stepscope must say for it to agree. Each file is imported
(``stepscope import``) and reported (``reporters.report.build_report``), once per session.

What agreeing means, check by check (the README's criterion):

* a GPU busy figure: stepscope's GPU busy share of the steady steps within
  ``max(5 points, 20%)`` of the tool's;
* tb_plugin's input verdict (DataLoader share of the step): above 5% (its threshold for "high
  time cost on input data loading") an ``input_bound`` finding whose share of the step is
  within the same tolerance; at most 5% no ``input_bound`` finding at all;
* tb_plugin's AMP recommendation (TC-eligible ops, no tensor cores): a ``no_tensor_cores``
  finding;
* TraceLens's MEMORY_ALLOC-dominated idle gaps: ``memory_pressure`` (allocator churn) ranked
  first;
* a named top finding where the issue found a different one ranked first.

A file agrees when every check it has passes. Two kinds of verdict are not counted, each with
its reason in the row: communication verdicts (exposed or un-overlapped collectives) are the
multi-GPU issue's (issue 20): stepscope has no communication rule yet
(:func:`test_no_rule_is_about_communication_yet` fails when one is added, to turn them into
checks); and a figure measured over another span, where stepscope is right not to follow it
(evidence in docs/accuracy.md, "Public traces of other tools").

Measured before the fixes of issue 19 (main at 17a58df): 16 of the 24 diagnosed files agreed
(the old tb_plugin samples imported without GPU activity or steps, PARAM's resnet lost its
DataLoader stalls as outliers, the vLLM graph trace crashed ``report``); after: 24 of 24.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from stepscope.advisor.rules import RULES
from stepscope.analysis.summary import summarize
from stepscope.importers import import_traces
from stepscope.reporters.report import Report, build_report
from stepscope.store.run import Run

EXTERNAL = Path(__file__).parent / "data" / "external"
MIN_AGREEING = 23
ISSUE_20 = ("communication: the multi-GPU issue's (issue 20); stepscope measures it (breakdown "
            "'communication') but has no communication rule yet")


@dataclass(frozen=True)
class Expect:
    tool: str  # the original tool
    says: str  # its figure / verdict, as the fixtures README gives it
    busy: float | None = None  # its GPU busy %
    input_pct: float | None = None  # tb_plugin: DataLoader share of the step, %
    amp: bool = False  # tb_plugin recommends AMP (TC-eligible ops, no tensor cores)
    top: str = ""  # the finding stepscope must rank first
    comm: str = ""  # a communication verdict, not counted: why
    busy_not_compared: str = ""  # why the busy figure measures something else (docs/accuracy.md)


TB, HTA, TL = "kineto tb_plugin", "HTA 0.5.0", "TraceLens"
EXPECT: dict[str, Expect] = {
    "hta_df_index_resolver_df_index_resolver.json.gz": Expect(
        HTA, "idle 46.1% (busy 53.9%); AllReduce 31.6% of kernel time, 0% comm-comp overlap",
        busy=53.9, comm=ISSUE_20),
    "hta_negative_queue_length_values_check_rank0.json.gz": Expect(
        HTA, "idle 69.4% (busy 30.6%); SendRecv 43% of kernel time, comm-comp overlap 1.4%",
        busy=30.6, comm=ISSUE_20),
    "hta_ns_resolution_trace_rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz": Expect(
        f"{HTA} / {TB}", "idle 2.6% (busy 97.4%); AMP: TC-eligible ops, no tensor cores",
        busy=97.4, amp=True),
    "hta_trace_diff_control_control.json.gz": Expect(
        HTA, "idle 16.2% (busy 83.8%); communication 21.5% of kernel time not overlapped",
        busy=83.8, comm=ISSUE_20),
    "hta_trace_diff_test_test.json.gz": Expect(
        HTA, "idle 7.5% (busy 92.5%); comm-comp overlap 69%", busy=92.5, comm=ISSUE_20),
    "kineto_old_resnet50_profiler_api_num_workers_0.pt.trace.json.gz": Expect(
        TB, "input data loading 21.0% of the step; GPU utilization 67.82%",
        busy=67.82, input_pct=21.0),
    "kineto_old_resnet50_profiler_api_num_workers_4.pt.trace.json.gz": Expect(
        TB, "no recommendation (DataLoader 0.01%); GPU utilization 83.63%",
        busy=83.63, input_pct=0.01),
    "kineto_resnet50_num_workers_0_worker0.1623143089861.pt.trace.json.gz": Expect(
        TB, "input data loading 33.4% of the step; GPU utilization 55.51%; AMP",
        busy=55.51, input_pct=33.4, amp=True),
    "kineto_resnet50_num_workers_0_worker0.1623143566756.pt.trace.json.gz": Expect(
        TB, "input data loading 22.9% of the step; GPU utilization 63.61%; AMP",
        busy=63.61, input_pct=22.9, amp=True),
    "kineto_resnet50_num_workers_4_worker0.1623212756351.pt.trace.json.gz": Expect(
        TB, "no data-loading recommendation (DataLoader 0.84%); GPU utilization 70.27%; AMP",
        busy=70.27, input_pct=0.84, amp=True),
    "kineto_resnet50_num_workers_4_worker0.1623213129365.pt.trace.json.gz": Expect(
        TB, "no data-loading recommendation (DataLoader 0.2%); GPU utilization 69.35%; AMP",
        busy=69.35, input_pct=0.2, amp=True),
    "param_resnet_kineto.json.gz": Expect(
        TB, "input data loading 45.9% of the traced time (one step); GPU low utilization (28%)",
        busy=28.0, input_pct=45.9, top="input_bound",
        busy_not_compared=(
            "tb_plugin's 28% is over the whole 16.2 s trace, one step for want of markers: "
            "4.4 s of start-up before the first kernel (the DataLoader's first batch 1.9 s, the "
            "first cuDNN convolution 2.1 s) and 1.6 s after the last; stepscope's 28 steps run "
            "from the first kernel to the last (kernels 4.10 s / 16.17 s = 25.4% reproduces "
            "tb_plugin's figure)")),
    "tracelens_h100_Falconsai_nsfw_image_detection__1016002.json.gz": Expect(
        TL, "GPU busy 16.2%, idle 83.8%", busy=16.2),
    "tracelens_h100_Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz": Expect(
        TL, "GPU busy 91.4%", busy=91.4),
    "tracelens_h100_facebook_timesformer-base-finetuned-k400__1016002.json.gz": Expect(
        f"{TB} / {TL}", "GPU utilization 40.5% of the step (tb_plugin; TraceLens: 99.0% of the "
        "GPU-active span, which starts 220 ms into the step)", busy=40.5),
    "tracelens_h100_gaunernst_bert-small-uncased__1016001.json.gz": Expect(
        TL, "GPU busy 7.9%, idle 92.1%", busy=7.9),
    "tracelens_h100_google_owlv2-large-patch14-ensemble__1016001.json.gz": Expect(
        f"{TB} / {TL}", "input data loading 51.1% of the step (tb_plugin); GPU busy 52.6% "
        "(TraceLens)", busy=52.6, input_pct=51.1),
    "tracelens_inference_sglang_decode_sglang_Qwen3-8B_decode.json.gz": Expect(
        TL, "GPU busy 2.1%, idle 97.9%", busy=2.1),
    "tracelens_inference_sglang_prefilldecode_sglang_Qwen3-8B_prefilldecode.json.gz": Expect(
        TL, "GPU busy 49.9%, idle 50.1%", busy=49.9),
    "tracelens_inference_vllm_decode_full_graph_execution.json.gz": Expect(
        TL, "GPU busy 99.8% (HIP graph replay)", busy=99.8),
    "tracelens_mi210_gpu_only_trace_gpu_only_trace.json.gz": Expect(
        TL, "GPU busy 89.4%, idle 10.6%", busy=89.4),
    "tracelens_mi300_ddp_resnet18_no_pool_train_resnet18.json.gz": Expect(
        f"{TL} IdleTimeAnalyser", "idle gaps RUNTIME_DOMINATED by MEMORY_ALLOC (hipMalloc/"
        "hipFree: no caching allocator pool)", top="memory_pressure"),
    "tracelens_mi300_resnet_act_checkpoint.json.gz": Expect(
        f"{TL} / {TB}", "busy 97.4%, exposed communication 67.8% of GPU time (TraceLens); GPU "
        "utilization 96.5% of the steps (tb_plugin)", busy=97.4, comm=ISSUE_20),
    "tracelens_torch_compile_triton_trace.json.gz": Expect(TL, "GPU busy 100%", busy=100.0),
}


def close(ours: float, theirs: float) -> bool:
    """Within max(5 points, 20%) of the original figure."""
    return abs(ours - theirs) <= max(5.0, 0.2 * theirs)


def checks(e: Expect, rep: Report) -> list[tuple[str, bool]]:
    """(what was checked, with stepscope's figure; whether it agrees), per counted verdict."""
    s = summarize(rep.analysis)
    findings = rep.advice.findings
    by_id = {f.id: f for f in reversed(findings)}  # the first (largest) of each rule
    out: list[tuple[str, bool]] = []
    if e.busy is not None and not e.busy_not_compared:
        out.append((f"GPU busy {s.gpu_busy_pct:.1f}% vs {e.busy}%", close(s.gpu_busy_pct, e.busy)))
    if e.input_pct is not None:
        f = by_id.get("input_bound")
        if e.input_pct > 5:
            got = f.est_saving_pct if f else 0.0
            out.append((f"input_bound {got:.1f}% vs {e.input_pct}%",
                        f is not None and close(got, e.input_pct)))
        else:
            out.append(("no input_bound" if f is None else
                        f"input_bound {f.est_saving_pct:.1f}% (tb_plugin: none)", f is None))
    if e.amp:
        out.append(("no_tensor_cores", "no_tensor_cores" in by_id))
    if e.top:
        first = findings[0].id if findings else "nothing"
        out.append((f"top finding {first}", first == e.top))
    return out


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """name -> Report, imported and reported once (lazily: ``-k`` on one file reads one)."""
    cache: dict[str, Report] = {}

    def get(name: str) -> Report:
        if name not in cache:
            out = import_traces([EXTERNAL / name], tmp_path_factory.mktemp("ext") / "run")
            cache[name] = build_report(Run(out))
        return cache[name]
    return get


def test_every_file_is_there_and_every_row_has_a_check() -> None:
    assert sorted(p.name for p in EXTERNAL.glob("*.json.gz")) == sorted(EXPECT)
    for name, e in EXPECT.items():
        counted = (e.busy is not None and not e.busy_not_compared) or e.input_pct is not None \
            or e.amp or e.top
        assert counted, f"{name}: nothing to check"


@pytest.mark.parametrize("name", sorted(EXPECT), ids=lambda n: n.split(".")[0][:48])
def test_agrees_with_the_original_tool(name: str, reports: Any) -> None:
    got = checks(EXPECT[name], reports(name))
    assert all(ok for _, ok in got), f"{EXPECT[name].tool} says {EXPECT[name].says}; {got}"


def test_agreement_over_all_files(reports: Any) -> None:
    agree = [n for n in EXPECT if all(ok for _, ok in checks(EXPECT[n], reports(n)))]
    assert len(agree) >= MIN_AGREEING, sorted(set(EXPECT) - set(agree))


def test_no_rule_is_about_communication_yet() -> None:
    # the communication verdicts above are left out of the count because no rule could say
    # them; a communication rule (issue 20) must turn them into checks
    assert not any(getattr(r, "category", "") == "communication" for r in RULES)


def test_measured_communication_is_there(reports: Any) -> None:
    # what issue 20 will build on: the exposed collectives are measured per step already
    for name in ("tracelens_mi300_resnet_act_checkpoint.json.gz",
                 "hta_df_index_resolver_df_index_resolver.json.gz"):
        assert summarize(reports(name).analysis).breakdown_ms["communication"] > 0, name
