"""The engine: every catalogue rule is registered, ranking, skipping."""

from __future__ import annotations

from pathlib import Path

from builder import TraceBuilder
from stepscope.advisor import Finding, Fix, Severity, advise, rank_findings
from stepscope.advisor.base import Context, Where
from stepscope.advisor.rules import RULE_IDS, RULES
from stepscope.analysis import analyze
from stepscope.model.confidence import Confidence

DOCS = Path(__file__).resolve().parents[2] / "docs" / "rules"


def test_every_catalogue_rule_is_registered_and_documented() -> None:
    assert tuple(r.id for r in RULES) == RULE_IDS
    assert len(RULE_IDS) == 27  # 19 + the 8 kernel_* rules (Nsight Compute counters)
    for r in RULES:
        assert (DOCS / f"{r.id}.md").is_file(), r.id
        assert r.title and r.category


def _f(fid: str, ms: float, sev: Severity) -> Finding:
    return Finding(id=fid, category="x", severity=sev, title=fid, est_saving_ms=ms,
                   est_saving_pct=ms, method="m", evidence=(), fix=Fix(), where=Where(),
                   confidence=Confidence.HIGH)


def test_ranking_by_saving_then_severity() -> None:
    got = rank_findings([_f("a", 1.0, Severity.INFO), _f("b", 3.0, Severity.WARNING),
                         _f("c", 1.0, Severity.CRITICAL)])
    assert [f.id for f in got] == ["b", "c", "a"]


class _NeedsMemory:
    id = "needs_memory"
    title = "t"
    category = "memory"
    requires = ("memory_events",)

    def check(self, ctx: Context) -> list[Finding]:
        raise AssertionError("must not run without memory events")


def test_rules_without_their_tables_are_skipped_with_the_reason(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.step(0, 100).kernel("k", 10, 80)
    run = b.build(tmp_path / "r")
    adv = advise(analyze(run), rules=[_NeedsMemory()])
    assert adv.findings == ()
    assert [(s.id, s.reason) for s in adv.skipped] == [
        ("needs_memory", "needs memory_events (the run has none)")]


def test_healthy_synthetic_run_gets_no_warning(tmp_path: Path) -> None:
    # big kernels back to back, issued well ahead: every rule must stay at most info
    b = TraceBuilder()
    for i in range(6):
        t = i * 10_000.0
        b.step(t, 10_000, step=i)
        for j in range(10):
            b.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1",
                     t + j * 1000 + 1, 998, grid=(1320, 1, 1), block=(128, 1, 1), regs=168,
                     smem=100_000, launch=(t + j * 10, 5))
    run = b.build(tmp_path / "r")
    adv = advise(analyze(run))
    assert [f.id for f in adv.findings if f.severity is not Severity.INFO] == []
