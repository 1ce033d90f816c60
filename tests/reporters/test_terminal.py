from __future__ import annotations

import json
from pathlib import Path

from builder import TraceBuilder
from stepscope.reporters.json_report import to_json
from stepscope.reporters.report import build_report
from stepscope.reporters.terminal import breakdown_bar, render_text

HOSTILE = "[bold red]<img src=x onerror=alert(1)>[/bold red] \\[x]"


def hostile_run(tmp_path: Path):  # type: ignore[no-untyped-def]
    b = TraceBuilder()
    for i in range(3):
        t = i * 1000.0
        b.step(t, 1000, step=i)
        b.kernel(HOSTILE, t + 10, 900, launch=(t + 1, 5))
    return b.build(tmp_path / "run")


def test_names_render_as_text_and_fit_100_columns(tmp_path: Path) -> None:
    text = render_text(build_report(hostile_run(tmp_path)), width=100)
    assert "[bold red]<img src=x onerror=alert(1)>" in text  # markup shown literally, not applied
    assert all(len(line) <= 100 for line in text.splitlines())
    assert "Steps: 3 from the trace's ProfilerStep markers (3 steady)" in text


def test_json_keeps_names_exactly(tmp_path: Path) -> None:
    rep = json.loads(to_json(build_report(hostile_run(tmp_path))))
    assert rep["kernels"][0]["name"] == HOSTILE
    assert rep["summary"]["gpu_busy_in_steps_ms"] == 2.7  # 3 x 900 us


def test_breakdown_bar_width_is_exact() -> None:
    bar = breakdown_bar({"compute": 1.0, "sync": 1.0, "idle": 1.0}, width=10)
    assert len(bar.plain) == 10
    assert breakdown_bar({}, width=10).plain == "(no steps)"


def test_the_fix_is_in_the_programs_framework() -> None:
    from stepscope.advisor.base import Fix
    from stepscope.reporters.report import fix_for

    fix = Fix(pytorch="torch fix", jax="jax fix", cuda="cuda fix")
    assert fix_for(fix, ("jax",)) == "jax fix"
    assert fix_for(fix, ("pytorch", "triton")) == "torch fix"
    assert fix_for(fix, ("cupy",)) == "cuda fix"
    assert fix_for(fix, ()) == "torch fix"  # the run does not say: PyTorch first, as before
    assert fix_for(Fix(pytorch="torch fix"), ("jax",)) == ""  # never another framework's fix
    assert fix_for(Fix(pytorch="torch fix", cuda="cuda fix"), ("jax",)) == "cuda fix"


def test_the_runs_frameworks_come_from_its_processes() -> None:
    from stepscope.reporters.report import run_frameworks
    from stepscope.store.manifest import Manifest, SourceInfo

    def m(kind: str, ranks: object) -> Manifest:
        return Manifest(source=SourceInfo(kind=kind), ranks=(), settings={"ranks": ranks})

    assert run_frameworks(m("kineto", {})) == ("pytorch",)
    assert run_frameworks(m("capture", {"rank0": {"frameworks": ["jax"]},
                                        "rank1": {"frameworks": ["jax", "triton"]}})) == (
        "jax", "triton")
    assert run_frameworks(m("capture", {"rank0": {"window": "x"}})) == ()
    # a JAX program that imported torch (for its DataLoader): JAX's step hook paced the steps
    jax_steps = {"host": {"samplers": {"steps": {"hook": "jax.profiler.StepTraceAnnotation"}}},
                 "frameworks": ["pytorch", "jax"]}
    assert run_frameworks(m("capture", {"rank0": jax_steps})) == ("jax", "pytorch")


def test_devices_show_their_links_and_numa_nodes(tmp_path: Path) -> None:
    b = TraceBuilder()
    for rank in (0, 1):
        b.gpu(rank, numa_node=rank, numa_cpus=("0-15", "16-31")[rank], nvlink_links=18,
              nvlink_gbs=450.0, pcie_gbs=63.02)
        for i in range(3):
            b.step(i * 1000, 1000, rank=rank)
            b.kernel("k", i * 1000, 500, rank=rank)
    rep = build_report(b.build(tmp_path / "run"))
    text = render_text(rep, width=100)
    assert "(CC 9.0, 132 SMs; NVLink 18 links 450 GB/s, PCIe 63 GB/s per direction)" in text
    assert "GPU NUMA nodes: rank 0 cuda:0 node 0, rank 1 cuda:0 node 1" in text
    devs = json.loads(to_json(rep))["run"]["devices"]
    assert [(d["rank"], d["numa_node"], d["nvlink_gbs"]) for d in devs] == [(0, 0, 450.0),
                                                                          (1, 1, 450.0)]


def test_devices_without_topology_show_none(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.step(0, 1000).kernel("k", 0, 500)
    text = render_text(build_report(b.build(tmp_path / "run")), width=100)
    assert "NVLink" not in text and "NUMA" not in text and "(CC 9.0, 132 SMs)" in text


def test_an_xspace_runs_framework_comes_from_its_planes() -> None:
    from stepscope.reporters.report import run_frameworks
    from stepscope.store.manifest import Manifest, SourceInfo

    def m(*fws: str) -> Manifest:
        files = [{"file": f"h{i}.xplane.pb", "framework": fw} for i, fw in enumerate(fws)]
        return Manifest(source=SourceInfo(kind="xspace", details={"files": files}), ranks=())

    assert run_frameworks(m("jax", "jax")) == ("jax",)
    assert run_frameworks(m("tensorflow")) == ("tensorflow",)
    assert run_frameworks(m("unknown")) == ()


def input_run(tmp_path: Path, idle_us: float):  # type: ignore[no-untyped-def]
    """Three 1 ms steps, each waiting ``idle_us`` for its batch with the GPU idle, then a
    kernel: the input-bound share is idle_us / 1000."""
    b = TraceBuilder()
    for i in range(3):
        t = i * 1000.0
        b.step(t, 1000, step=i).input_wait(t, idle_us)
        b.kernel("k", t + idle_us + 10, 100, launch=(t + idle_us + 1, 5))
    return b.build(tmp_path / "run")


def test_the_input_pipeline_verdict_in_every_report(tmp_path: Path) -> None:
    rep = build_report(input_run(tmp_path, 250))  # 25% of the step: highly input-bound
    text = render_text(rep, width=100)
    assert ("Input pipeline: highly input-bound (25.0% of the step waiting for input; >20% "
            "highly, 5-20% moderately)") in " ".join(text.split())
    js = json.loads(to_json(rep))
    assert js["input_pipeline"]["verdict"] == "highly"
    assert js["input_pipeline"]["input_bound_pct"] == 25.0
    assert js["input"]["0"]["verdict"] == "highly"


def test_no_input_waits_no_verdict_line(tmp_path: Path) -> None:
    rep = build_report(hostile_run(tmp_path))
    assert "Input pipeline" not in render_text(rep, width=100)
    assert json.loads(to_json(rep))["input_pipeline"] is None


def test_step_hook_names_match_the_capture() -> None:
    from stepscope.capture.hooks.jax_steps import JAX_STEP
    from stepscope.capture.hooks.optimizer import TORCH_STEP
    from stepscope.capture.hooks.tf_steps import TF_STEP
    from stepscope.store.frameworks import STEP_HOOK_FRAMEWORK
    assert STEP_HOOK_FRAMEWORK == {JAX_STEP: "jax", TF_STEP: "tensorflow", TORCH_STEP: "pytorch"}


def test_a_finding_shows_the_remedies_that_answer_it_as_replayed(tmp_path: Path) -> None:
    """The finding's own estimate is the symptom's (the fp32 kernels' time at the TF32 ratio);
    beside it, the remedies that answer it with their overlap-free savings, as the remedies
    section lists them (the H100 conv net, whose fixed steps the host limits)."""
    from stepscope.importers import import_traces
    from stepscope.store import Run

    data = Path(__file__).resolve().parents[1] / "data"
    rep = build_report(Run(import_traces([data / "h100_conv_fp32.pt.trace.json.gz"],
                                         tmp_path / "run")), workers=1)
    assert rep.advice.remedies is not None
    answering = [r for r in rep.advice.remedies.remedies if "no_tensor_cores" in r.finding_ids]
    assert len(answering) == 2  # tf32 and bf16_amp, largest saving first
    lines = render_text(rep, width=100).splitlines()
    at = next(i for i, x in enumerate(lines) if "fp32 matrix math without tensor cores" in x)
    said = " ".join(" ".join(lines[at:at + 6]).split())  # the wrapped lines, one space apart
    assert "as fixes, replayed with the rest of the step (savings do not add up):" in said
    first, second = answering
    assert said.index(first.title.split(" (")[0]) < said.index(second.title.split(" (")[0])
    for r in answering:
        assert f"save {r.est_saving_ms:.2f} ms ({r.est_saving_pct:.0f}%)" in said


def test_replayed_fixes_none_without_an_answering_remedy() -> None:
    from types import SimpleNamespace as NS

    from stepscope.reporters.remedies_view import fixes_for, replayed_fixes

    assert replayed_fixes(None, "x") is None
    r = NS(title="Keep values on the GPU (no .item())", option="o", options=("o",),
           predicted_step_ms=1.0, est_saving_ms=0.5, est_saving_pct=33.0, finding_ids=("a",))
    ra = NS(remedies=(r,) * 5)
    assert replayed_fixes(ra, "b") is None  # type: ignore[arg-type]
    assert len(fixes_for(ra, "a")) == 3  # type: ignore[arg-type]
    assert replayed_fixes(NS(remedies=(r,)), "a") == (  # type: ignore[arg-type]
        "as a fix, replayed with the rest of the step: Keep values on the GPU -> 1.00 ms/step, "
        "save 0.50 ms (33%)")
