"""``stepscope kernels RUN -- CMD`` (and ``record --kernels``) with a stand-in ``ncu`` on PATH:
the command line it is given, the report it writes, the raw page it exports (a hand-written
CSV of the CNN fixture's top kernel), and the counters refused."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from tests.importers.ncu.synth import raw_csv

from stepscope.capture.ncu import COUNTERS_REFUSED
from stepscope.cli.main import main
from stepscope.store.run import Run

DATA = Path(__file__).parent.parent / "data"
GEMM = ("sm80_xmma_gemm_cf32cf32_f32f32_cf32_nt_n_tilesize64x64x8_stage3_warpsize2x2x1_ffma_"
        "aligna8_alignc8_execute_kernel__5x_cublas")

FAKE = r'''#!{python}
import json, os, subprocess, sys
args = sys.argv[1:]
if "--import" in args:
    sys.stdout.write(open(os.environ["FAKE_NCU_CSV"]).read())
    sys.exit(0)
with open(os.environ["FAKE_NCU_ARGS"], "w") as f:
    json.dump(args, f)
if os.environ.get("FAKE_NCU_REFUSE"):
    print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU "
          "Performance Counters on the target device 0.")
    sys.exit(1)
open(args[args.index("--export") + 1], "w").write("report")
sys.exit(subprocess.call(args[args.index("--") + 1:]))
'''


@pytest.fixture()
def fake_ncu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "ncu"
    exe.write_text(FAKE.replace("{python}", sys.executable))
    exe.chmod(0o755)
    csv = tmp_path / "gemm.csv"
    units = {"gpu__time_duration.sum": "us",
             "sm__throughput.avg.pct_of_peak_sustained_elapsed": "%",
             "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": "%",
             "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": "inst"}
    csv.write_text(raw_csv([{"Kernel Name": GEMM, "Grid Size": "(1, 2, 544)",
                             "Block Size": "(128, 1, 1)", "gpu__time_duration.sum": "740",
                             "sm__throughput.avg.pct_of_peak_sustained_elapsed": "88",
                             "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed":
                                 "50",
                             "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": "1e9"}],
                           units))
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_NCU_CSV", str(csv))
    monkeypatch.setenv("FAKE_NCU_ARGS", str(tmp_path / "args.json"))
    return tmp_path


def test_kernels_profiles_the_top_kernels_and_attaches(fake_ncu: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = fake_ncu / "cnn.stepscope"
    assert main(["import", str(DATA / "cnn_fp32_sync.pt.trace.json.gz"), "-o", str(run_dir),
                 "--quiet"]) == 0
    before = Run(run_dir).table("kernels")
    prog = fake_ncu / "prog.py"
    prog.write_text("print('trained')\n")
    assert main(["kernels", "--top", "3", str(run_dir), "--", sys.executable, str(prog)]) == 0
    args = json.loads((fake_ncu / "args.json").read_text())
    assert args[args.index("--set") + 1] == "full"
    assert args[args.index("--kernel-name-base") + 1] == "function"
    regex = args[args.index("--kernel-name") + 1]
    assert regex.startswith("regex:^(") and "pointwise_mult_and_sum_complex" in regex
    assert "sm80_xmma_gemm" in regex
    assert int(args[args.index("--launch-count") + 1]) >= 1
    assert args[-2:] == [sys.executable, str(prog)]
    assert (fake_ncu / "cnn.stepscope.kernels.ncu-rep").is_file()  # beside the run, not in it
    run = Run(run_dir)
    assert run.table("kernels").equals(before)
    assert run.table("kernel_metrics").column("name").to_pylist() == [GEMM]
    out = capsys.readouterr()
    assert "profiling 3 kernel(s)" in out.err and "added Nsight Compute counters" in out.out
    from stepscope.advisor.engine import advise
    from stepscope.analysis import analyze

    fs = [f for f in advise(analyze(run)).findings if f.id == "kernel_no_tensor_cores"]
    assert len(fs) == 1 and fs[0].est_saving_ms > 0  # joined to the run: ms per step


def test_counters_refused_is_one_line_and_the_run_is_unchanged(
        fake_ncu: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = fake_ncu / "cnn.stepscope"
    assert main(["import", str(DATA / "cnn_fp32_sync.pt.trace.json.gz"), "-o", str(run_dir),
                 "--quiet"]) == 0
    monkeypatch.setenv("FAKE_NCU_REFUSE", "1")
    assert main(["kernels", str(run_dir), "--", "true"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("stepscope: profiling 5 kernel(s)")
    assert err[1:] == [f"stepscope: error: {COUNTERS_REFUSED}"]
    assert not Run(run_dir).has("kernel_metrics")


def test_no_ncu_and_no_program(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = tmp_path / "cnn.stepscope"
    assert main(["import", str(DATA / "cnn_fp32_sync.pt.trace.json.gz"), "-o", str(run_dir),
                 "--quiet"]) == 0
    assert main(["kernels", str(run_dir)]) == 2
    assert "no program given" in capsys.readouterr().err
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main(["kernels", str(run_dir), "--", "true"]) == 2
    assert "not installed or not on PATH" in capsys.readouterr().err


def test_record_kernels_option() -> None:
    import argparse

    from stepscope.cli.record import _top

    assert _top("top:3") == 3
    for bad in ("3", "top:", "top:0", "best:3"):
        with pytest.raises(argparse.ArgumentTypeError):
            _top(bad)


def test_record_kernels_failing_keeps_the_programs_exit_status(
        fake_ncu: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a program that ran no kernel: there is nothing for ncu to profile. The run is written and
    # the exit status is the program's (0), with the reason in one line
    run = fake_ncu / "r.stepscope"
    code = main(["record", "-o", str(run), "--kernels", "top:2", "--",
                 sys.executable, "-c", "pass"])
    assert code == 0
    assert (run / "manifest.json").exists()
    out = capsys.readouterr()
    said = (out.out + out.err).splitlines()
    assert len([ln for ln in said if ln.startswith("stepscope: --kernels:")]) == 1
