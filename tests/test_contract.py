"""The producers' contract: every source writes the tables the advisor's rules require.

For each source — ``stepscope import`` of Kineto traces (the real files of tests/data), ``record``
with the default ``cupti`` backend (the real capture path: session, C shim, raw records decoded
at merge; a stand-in libcupti and CUDA driver, as CI has no GPU) and with ``--backend torch``
(a recorded torch.profiler trace through the backend's export-and-import) — the run it writes is
checked against what each rule declares it ``requires``: no rule may be skipped for a missing
table on a GPU source, except a table that only some programs fill (``PROGRAM_TABLES``). The runs
come from the real producers, never from ``tests.builder`` (whose ``devices`` row hid that
captured runs had none). Each run also meets the table requirements of its kind of source
(``schema.CONTRACTS``, checked by the one assembler, ``store.produce``), and the sources give one
program the same shape (``test_every_source_gives_the_same_shape``).
"""

from __future__ import annotations

import ctypes
import gzip
import shutil
from pathlib import Path
from typing import Any

import pytest
from tests.capture.cupti.fake_cupti import FakeCupti
from tests.capture.cupti.records import kernel, record
from tests.capture.fake_cuda import FakeCuda
from tests.capture.test_bootstrap import FakeClock, FakeHost

from stepscope.advisor.engine import advise
from stepscope.advisor.rules import RULES
from stepscope.analysis import analyze
from stepscope.analysis.graph import rank_graph
from stepscope.analysis.kernels import kernel_frame
from stepscope.capture.bootstrap import CaptureConfig, Session
from stepscope.capture.cuda_driver import CudaDriver
from stepscope.capture.cupti import capture as capture_mod
from stepscope.capture.cupti import layouts as L
from stepscope.capture.cupti.native import build_shim, load_shim
from stepscope.capture.gpu import GpuSlot
from stepscope.capture.partitions import merge, source_kind
from stepscope.capture.schedule import make_schedule
from stepscope.capture.staging import PartitionMeta, StagingPartition
from stepscope.capture.torch_backend import TorchCapture
from stepscope.importers import import_traces, parse_kineto
from stepscope.schema_enums import SourceKind
from stepscope.store.produce.bundle import contract_gaps
from stepscope.store.run import Run

DATA = Path(__file__).parent / "data"
# tables that only programs doing that thing fill: a rule needing them may be skipped
PROGRAM_TABLES = {"memcpy": "host/device copies", "input_waits": "a data loader the hooks see",
                  "collectives": "communication between ranks (NCCL/RCCL)"}
REQUIRED = sorted({t for rule in RULES for t in rule.requires})
DEVICE_RULES = {"small_grid", "low_occupancy", "no_tensor_cores", "tc_misaligned"}
needs_cc = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                              reason="no C compiler for the CUPTI buffer shim")


def missing_tables(run: Run) -> dict[str, list[str]]:
    """Rule id -> required tables the run lacks (the advisor's own test, ``engine.advise``);
    opt-in rules (Nsight Compute's kernel_*: data the user adds on purpose) left out."""
    out = {rule.id: [t for t in rule.requires if not run.has(t)] for rule in RULES
           if not getattr(rule, "opt_in", False)}
    return {k: v for k, v in out.items() if v}


def check_contract(run: Run, *, program_has: tuple[str, ...] = ()) -> None:
    """No rule lacks a table, but for the tables of ``PROGRAM_TABLES`` the program did not fill;
    and the advisor agrees (its skips for a missing table are exactly those)."""
    assert "devices" in REQUIRED and "kernels" in REQUIRED  # the rules still need them
    missing = missing_tables(run)
    allowed = set(PROGRAM_TABLES) - set(program_has)
    assert {t for ts in missing.values() for t in ts} <= allowed, missing
    check_source_contract(run)
    advice = advise(analyze(run))
    skipped = {s.id for s in advice.skipped if s.reason.endswith("(the run has none)")}
    assert skipped == set(missing)
    assert not (DEVICE_RULES & {s.id for s in advice.skipped}), advice.skipped


# -- Kineto import -----------------------------------------------------------------------------
@pytest.mark.parametrize("name", [
    "cnn_fp32_sync.pt.trace.json.gz", "h200_healthy_bf16.pt.trace.json.gz",
    "gpt_bf16_adamw.pt.trace.json.gz",
    "critical_path_alexnet_benchmark_result_2869224_1695835535_trace.json.gz",
    "amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz",
])
def test_kineto_import(tmp_path: Path, name: str) -> None:
    run = Run(import_traces([DATA / name], tmp_path / "run"))
    check_contract(run, program_has=("memcpy",))


# -- Nsight Systems import ----------------------------------------------------------------------
@pytest.mark.parametrize("name", ["hopper_matmul_h200.sqlite.gz", "saxpy_mpi_a100.sqlite.gz",
                                  "train_2xh100_before_cut.sqlite.gz"])
def test_nsys_import(tmp_path: Path, name: str) -> None:
    run = Run(import_traces([DATA / "nsys" / name], tmp_path / "run"))
    assert {kind_of(run, r) for r in run.ranks} == {SourceKind.NSYS}
    check_contract(run, program_has=("memcpy",))


# -- record, default backend (cupti) -----------------------------------------------------------
@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    return load_shim(build_shim(tmp_path_factory.mktemp("shim")))  # a private copy: shim state


def use_driver(monkeypatch: pytest.MonkeyPatch, fake: FakeCuda) -> None:
    """The stand-in driver is the one "already in the process" for every capture of the test."""
    monkeypatch.setattr(CudaDriver, "attach",
                        classmethod(lambda cls, load=False, path="": fake.driver()))


def recorded_cupti_run(tmp_path: Path, shim: ctypes.CDLL, monkeypatch: pytest.MonkeyPatch,
                       cuda: FakeCuda) -> Run:
    """``stepscope record`` of a loop of fp32 GEMMs (cuBLAS's SIMT sgemm, small grids) with a
    host-to-device copy per step, through the default backend: CUPTI's records kept raw in the
    process and decoded at merge, as on a GPU."""
    fake = FakeCupti(shim)
    monkeypatch.setattr(capture_mod, "load_libcupti", lambda path: fake)
    monkeypatch.setattr(capture_mod, "find_libcupti", lambda: "fake-libcupti.so")
    monkeypatch.setattr(capture_mod, "load_shim", lambda: shim)
    use_driver(monkeypatch, cuda)
    clock = FakeClock()
    cfg = CaptureConfig(staging=str(tmp_path / "staging"), schedule=make_schedule("3-10"))
    s = Session(cfg, clock=clock, environ={}, host_factory=lambda c, r, clk: FakeHost(clk))
    s.begin()
    gemm = fake.name("ampere_sgemm_128x64_nn")
    for i in range(14):
        s.step()
        t = clock.t
        corr = 2 * i + 1
        fake.clock = t + 100_000  # CUPTI's clock for the call records (callbacks)
        fake.call(L.DOMAIN_RUNTIME_API, 211, correlation=corr)  # cudaLaunchKernel
        fake.emit(record(L.MEMCPY, start=t + 200_000, end=t + 1_000_000, copy_kind=1,
                         src_kind=1, dst_kind=3, bytes=4 << 20, device=0, stream=7,
                         correlation=corr + 1),
                  kernel(t + 1_000_000, t + 9_000_000, name=gemm, corr=corr, grid=(8, 1, 1),
                         block=(256, 1, 1), regs=120, smem=(32768, 0)))
        fake.clock = 0
        clock.t += 10_000_000
    s.finish()
    return Run(merge(tmp_path / "staging", tmp_path / "run", command=["train.py"], returncode=0))


@needs_cc
def test_cupti_capture(tmp_path: Path, shim: ctypes.CDLL, monkeypatch: pytest.MonkeyPatch) -> None:
    cuda = FakeCuda(devices=2, active={0})  # the program used GPU 0 of two
    run = recorded_cupti_run(tmp_path, shim, monkeypatch, cuda)
    assert run.table("kernels").num_rows == 8  # steps 3..10
    devices = run.table("devices").to_pylist()
    assert [(d["rank"], d["device"], d["name"], d["sm_count"]) for d in devices] == [
        (0, 0, "NVIDIA H100 80GB HBM3", 132)]
    assert devices[0]["memory_bandwidth_gbs"] == pytest.approx(3352.32)
    check_contract(run, program_has=("memcpy",))
    # theoretical occupancy from the driver's limits: 256 threads x 120 registers -> 30720
    # registers a block (allocated per warp in 256s: 8 warps x 3840), 2 blocks of 65536 per SM:
    # 16 of 64 warps = 25%
    occ = kernel_frame(rank_graph(run, None)).column("occupancy").to_pylist()
    assert occ == [pytest.approx(0.25)] * 8
    found = {f.id for f in advise(analyze(run)).findings}
    assert {"no_tensor_cores", "small_grid"} <= found  # fp32 SIMT GEMM; 8 blocks on 132 SMs
    assert "cuInit" not in cuda.log


# -- record --backend torch --------------------------------------------------------------------
class ExportOnly:
    """A stopped torch.profiler whose export is a trace recorded on a GPU."""

    def __init__(self, trace: Path) -> None:
        self.trace = trace

    def stop(self) -> None:
        pass

    def export_chrome_trace(self, path: str) -> None:
        Path(path).write_bytes(gzip.decompress(self.trace.read_bytes()))


class RecordedTorch(TorchCapture):
    """``--backend torch`` whose profiler recorded ``trace`` (stop and export are the backend's
    own; the merge reads the exported trace with the Kineto importer's reader)."""

    def __init__(self, trace: Path, spill_dir: Path) -> None:
        super().__init__(spill_dir)
        self.trace = trace

    def start(self) -> None:
        self._prof = ExportOnly(self.trace)


def recorded_torch_run(tmp_path: Path, trace: Path, cuda: FakeCuda | None) -> Run:
    part = StagingPartition(tmp_path / "staging" / "p1-1")
    slot = GpuSlot("torch", "filtered", lambda b, a: RecordedTorch(trace, part.path),
                   driver=lambda: cuda.driver() if cuda else None)
    assert slot.start() is None
    tables, diags = slot.data(final=True)
    assert set(tables) <= {"devices"}  # the trace's tables come at the merge
    # the host side's steps (the optimizer hook's): the trace's own ProfilerStep ranges
    tables["steps"] = parse_kineto(trace, default_rank=0).tables["steps"]
    part.write_chunk(tables)
    part.write_meta(PartitionMeta(pid=1, start_ns=1, ended="exit",
                                  settings={"gpu": slot.status}, diagnostics=tuple(diags)))
    return Run(merge(tmp_path / "staging", tmp_path / "run", command=["train.py"], returncode=0,
                     read_trace=parse_kineto))


@pytest.mark.parametrize("with_driver", [True, False])
def test_torch_backend(tmp_path: Path, with_driver: bool) -> None:
    """The fp32 conv net of issue 17: its tensor-core finding comes through --backend torch too.
    With the driver, its row replaces Kineto's (and adds clocks, bandwidth, L2); without it,
    Kineto's row stands."""
    cuda = FakeCuda(devices=1, active={0}) if with_driver else None
    run = recorded_torch_run(tmp_path, DATA / "cnn_fp32_sync.pt.trace.json.gz", cuda)
    devices = run.table("devices").to_pylist()
    assert [(d["device"], d["name"], d["sm_count"]) for d in devices] == [
        (0, "NVIDIA H100 80GB HBM3", 132)]
    bandwidth: Any = pytest.approx(3352.32) if with_driver else None
    assert devices[0]["memory_bandwidth_gbs"] == bandwidth
    check_contract(run, program_has=("memcpy",))
    assert "no_tensor_cores" in {f.id for f in advise(analyze(run)).findings}


def test_a_run_recorded_on_an_h100_skips_no_rule_for_a_missing_table() -> None:
    """A real `stepscope record` run (tests/data/recorded/h100_healthy, PROVENANCE.md): the
    devices table comes from the driver, GPU memory from the NVML samples, and no rule is
    skipped for want of a table the capture should have made (input waits: the program has no
    DataLoader). Before, `memory_underused` was skipped: it looked for a sample name the NVML
    sampler never wrote."""
    from stepscope.reporters.report import build_report
    from stepscope.store.run import Run

    run = Run(Path(__file__).parent / "data" / "recorded" / "h100_healthy")
    assert run.manifest.source.kind == "capture"
    (dev,) = run.table("devices").to_pylist()
    assert (dev["name"], dev["sm_count"], dev["compute_major"]) == ("NVIDIA H100 80GB HBM3", 132, 9)
    rep = build_report(run)
    # a one-GPU program: no DataLoader, no collectives
    assert [s.id for s in rep.advice.skipped] == ["input_bound", "straggler", "slow_collectives"]
    assert not [f for f in rep.advice.findings if f.severity.value != "info"]  # healthy



# -- every source, one shape -------------------------------------------------------------------
RECORDED = DATA / "recorded" / "h100_healthy"
CORE = {"devices", "kernels", "api_calls", "steps", "memcpy"}  # what every GPU source of the
# program below gives (a GEMM loop with a host-to-device copy per step)
KERNEL_COLUMNS = {"ts_ns", "dur_ns", "device", "stream", "correlation", "name", "grid_x", "grid_y",
                  "grid_z", "block_x", "block_y", "block_z", "registers", "shared_memory"}
OCCUPANCY_INPUTS = {"device", "name", "sm_count", "warp_size", "max_threads_per_sm",
                    "regs_per_block", "regs_per_sm", "smem_per_sm", "compute_major"}


def shape(run: Run) -> dict[str, set[str]]:
    """Table -> its columns that hold a value, for the tables with rows."""
    out = {}
    for name in run.manifest.tables:
        t = run.table(name)
        if t.num_rows:
            out[name] = {c for c in t.column_names if t.column(c).null_count < t.num_rows}
    return out


def kind_of(run: Run, rank: int) -> SourceKind:
    """The kind of source a rank of ``run`` came from (as the import or the merge decided)."""
    if run.manifest.source.kind in (SourceKind.KINETO.value, SourceKind.NSYS.value):
        return SourceKind(run.manifest.source.kind)
    settings = run.manifest.settings["ranks"][f"rank{rank}"]
    return source_kind(PartitionMeta(pid=0, start_ns=0, settings=settings))


def check_source_contract(run: Run) -> None:
    """Each rank provides the tables its kind of source must, and the manifest says no gap."""
    assert "missing_tables" not in {d.code for d in run.manifest.diagnostics}
    for rank in run.ranks:
        rows = {name: run.table(name, rank=rank).num_rows for name in run.manifest.tables}
        assert contract_gaps(kind_of(run, rank), rows) == (), rank


@needs_cc
def test_every_source_gives_the_same_shape(tmp_path: Path, shim: ctypes.CDLL,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """One program's shape through every source: the Kineto import of a trace, the same trace
    through ``--backend torch``, the default ``cupti`` capture (stand-in CUPTI and driver) and a
    real ``record`` on an H100. Each passes its kind's table requirements; all have the core
    tables with the columns the analyses use; the torch backend's tables are the import's."""
    trace = DATA / "cnn_fp32_sync.pt.trace.json.gz"
    runs = {
        "kineto": Run(import_traces([trace], tmp_path / "imported")),
        "torch": recorded_torch_run(tmp_path / "t", trace, FakeCuda(devices=1, active={0})),
        "cupti": recorded_cupti_run(tmp_path / "c", shim, monkeypatch,
                                    FakeCuda(devices=2, active={0})),
        "recorded": Run(RECORDED),
    }
    assert [kind_of(r, 0) for r in runs.values()] == [
        SourceKind.KINETO, SourceKind.TORCH, SourceKind.CUPTI, SourceKind.CUPTI]
    shapes = {k: shape(r) for k, r in runs.items()}
    for name, run in runs.items():
        check_source_contract(run)
        assert CORE <= set(shapes[name]), name
        assert KERNEL_COLUMNS <= shapes[name]["kernels"], name
        assert OCCUPANCY_INPUTS <= shapes[name]["devices"], name
    # the torch backend reads its trace with the importer: the same tables, but the host
    # capture's own (processes) and the driver's richer devices row
    imported, torch = shapes["kineto"], shapes["torch"]
    assert set(imported) - set(torch) == {"processes"} and set(torch) <= set(imported)
    assert {k: v for k, v in torch.items() if k != "devices"} == {
        k: v for k, v in imported.items() if k not in ("devices", "processes")}
    assert imported["devices"] < torch["devices"]
    for table in ("kernels", "memcpy", "memset", "api_calls", "cpu_ops", "annotations"):
        assert runs["torch"].table(table).equals(runs["kineto"].table(table)), table
    # the captures give the same device columns, whichever backend
    assert torch["devices"] == shapes["cupti"]["devices"] == shapes["recorded"]["devices"]


def test_a_captured_gpu_rank_without_devices_is_said(tmp_path: Path) -> None:
    """The merge's bundles go through the contract check: a CUPTI partition whose process
    recorded kernels but no devices rows (no driver found) gets a missing_tables diagnostic."""
    part = StagingPartition(tmp_path / "staging" / "p1-1")
    part.write_chunk({"kernels": {"ts_ns": [5], "dur_ns": [1], "name": ["k"], "device": [0]},
                      "api_calls": {"ts_ns": [4], "dur_ns": [1], "name": ["cudaLaunchKernel"]}})
    part.write_meta(PartitionMeta(pid=1, start_ns=1, ended="exit",
                                  settings={"gpu": {"backend": "cupti", "state": "stopped"}}))
    run = Run(merge(tmp_path / "staging", tmp_path / "run", command=["x.py"], returncode=0))
    (gap,) = [d for d in run.manifest.diagnostics if d.code == "missing_tables"]
    assert gap.file == "rank 0" and "no devices table" in gap.message
    assert kind_of(run, 0) is SourceKind.CUPTI
