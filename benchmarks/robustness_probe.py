"""Bad input and user mistakes against the ``stepscope`` command line (issue 19).

Each case builds what it needs in a fresh temporary folder, runs ``python -m stepscope ...`` in a
subprocess there and classifies the outcome:

clean error      exit 2, one line on stderr naming the file, no traceback, nothing left behind
correct          exit 0 (or the expected code) and the result checks out
traceback        a Python traceback on stderr
wrong exit       an exit code other than the expected one (a valid input refused, 1 for 2 ...)
unclear error    exit 2 without a traceback, but not one line, or the line does not name the file
silently wrong   exit 0 with a result that should have been an error (or a wrong result)
leftover         files left behind that should not be (a temp file, a half-written output)
lost file        a file outside the output path deleted or changed (or an output's old content
                 lost on an error)

    python benchmarks/robustness_probe.py [-k SUBSTRING] [-j 2] [--src DIR] [-v]

Prints one row per case and the totals; exit 1 when any case is not clean or correct.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import gzip
import hashlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
CNN = DATA / "cnn_fp32_sync.pt.trace.json.gz"
SMALL = DATA / "cpu_only_rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
PY = sys.executable
OK, CLEAN = "correct", "clean error"
ORDER = [OK, CLEAN, "traceback", "wrong exit", "unclear error", "silently wrong", "leftover",
         "lost file", "hang"]


@dataclass
class Setup:
    argv: list[str]
    expect: str = "error"  # "error" | "ok" | "either"
    outputs: tuple[str, ...] = ()  # paths (relative) a successful run may create or change
    names: tuple[str, ...] = ()  # one of these must be in an error line (the file it is about)
    check: Callable[[Path, subprocess.CompletedProcess[str]], str | None] | None = None
    stdout: str | None = None  # a file to send stdout to (e.g. /dev/full)
    fsize: int | None = None  # RLIMIT_FSIZE: writes past it fail (EFBIG), like a full disk
    codes: tuple[int, ...] = (0,)  # exit codes that count as success
    umask: int = 0o022
    interrupt: tuple[float, int] | None = None  # (after s, signal) sent to stepscope
    twice: bool = False  # run the same command twice concurrently
    program_traceback: bool = False  # the recorded program's own traceback is expected


@dataclass
class Case:
    name: str
    make: Callable[[Path], Setup]


@dataclass
class Outcome:
    name: str
    verdict: str
    code: int
    detail: str = ""
    seconds: float = 0.0
    extra: list[str] = field(default_factory=list)


# -- building inputs -----------------------------------------------------------------------------

def trace_doc(events: list[dict[str, object]] | None = None, **top: object) -> dict[str, object]:
    ev = events if events is not None else [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10.0,
         "dur": 5.0, "args": {"External id": 1}},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
         "ts": 0.0, "dur": 100.0},
        {"ph": "X", "cat": "kernel", "name": "sgemm", "pid": 0, "tid": 7, "ts": 20.0, "dur": 30.0,
         "args": {"device": 0, "stream": 7, "correlation": 5, "grid": [1, 1, 1],
                  "block": [128, 1, 1]}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
         "ts": 12.0, "dur": 3.0, "args": {"correlation": 5, "External id": 1}},
    ]
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}],
            "traceEvents": ev, **top}


def write_json(path: Path, doc: object, gz: bool = False) -> Path:
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def kernel_named(name: str) -> dict[str, object]:
    ev = trace_doc()["traceEvents"]
    assert isinstance(ev, list)
    ev[2] = {**ev[2], "name": name}
    return trace_doc(ev)


def make_run(tmp: Path, name: str = "run", trace: Path = CNN) -> Path:
    out = tmp / name
    subprocess.run([PY, "-m", "stepscope", "import", str(trace), "-o", str(out)], check=True,
                   capture_output=True, env=env())
    return out


def edit_manifest(run: Path, change: Callable[[dict[str, object]], object]) -> None:
    path = run / "manifest.json"
    m = json.loads(path.read_text())
    change(m)
    path.write_text(json.dumps(m))


SOURCES = [ROOT / "src"]  # the stepscope under test (--src)


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(SOURCES[0]) + os.pathsep + e.get("PYTHONPATH", "")
    e.pop("FORCE_COLOR", None)
    e["COLUMNS"] = "120"
    return e


def no_escapes(tmp: Path, proc: subprocess.CompletedProcess[str]) -> str | None:
    if "\x1b" in proc.stdout or "\x07" in proc.stdout or "\x1b" in proc.stderr:
        return "a raw escape sequence reached the terminal"
    return None


def json_parses(tmp: Path, proc: subprocess.CompletedProcess[str]) -> str | None:
    try:
        json.loads(proc.stdout, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    except ValueError as exc:
        return f"stdout is not valid JSON ({exc})"
    return None


def file_mode(rel: str, want: int) -> Callable[[Path, subprocess.CompletedProcess[str]], str | None]:
    def check(tmp: Path, proc: subprocess.CompletedProcess[str]) -> str | None:
        p = tmp / rel
        if p.is_symlink():
            return f"{rel} became/is a symlink"
        mode = p.stat().st_mode & 0o777
        return None if mode == want else f"{rel} written {mode:o}, expected {want:o}"
    return check


def diag_mentions(run: str, *words: str) -> Callable[[Path, subprocess.CompletedProcess[str]],
                                                      str | None]:
    def check(tmp: Path, proc: subprocess.CompletedProcess[str]) -> str | None:
        m = json.loads((tmp / run / "manifest.json").read_text())
        text = json.dumps(m["diagnostics"]).lower()
        if any(w.lower() in text for w in words):
            return None
        return f"no diagnostic mentions {words}"
    return check


def symlink_kept(link: str, target: str) -> Callable[[Path, subprocess.CompletedProcess[str]],
                                                     str | None]:
    def check(tmp: Path, proc: subprocess.CompletedProcess[str]) -> str | None:
        p = tmp / link
        if not p.is_symlink():
            return f"{link} was a symlink and was replaced by a file"
        if (tmp / target).stat().st_size == 0:
            return f"{target} (the link's target) not written"
        return None
    return check


# -- the cases -----------------------------------------------------------------------------------

def imp(tmp: Path, trace: Path, expect: str = "error", **kw: object) -> Setup:
    return Setup(["import", str(trace), "-o", str(tmp / "out")], expect=expect, outputs=("out",),
                 names=(trace.name,), **kw)  # type: ignore[arg-type]


def deep(n: int) -> bytes:
    return b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "x", "ts": 1, "dur": 1, ' \
           b'"args": {"a": ' + b"[" * n + b"]" * n + b"}}]}"


def broken_run(tmp: Path, damage: Callable[[Path], object], verb: str = "report") -> Setup:
    run = make_run(tmp)
    damage(run)
    argv = {"report": ["report", str(run)], "query": ["query", str(run),
                                                         "SELECT count(*) FROM kernels"],
            "export": ["export", str(run), "-o", str(tmp / "t.json")]}[verb]
    return Setup(argv, names=(str(run),), outputs=("t.json",))


def swap(a: Path, b: Path) -> None:
    t = a.with_name("swap.tmp")
    os.replace(a, t)
    os.replace(b, a)
    os.replace(t, b)


def truncate(p: Path, keep: float = 0.5) -> None:
    data = p.read_bytes()
    p.write_bytes(data[: int(len(data) * keep)])


def rank_folder(tmp: Path) -> Setup:
    d = tmp / "ranks"
    d.mkdir()
    shutil.copy(DATA / "trace_filter_sampled_rank-0.json.gz", d / "rank-0.json.gz")
    data = (DATA / "trace_filter_sampled_rank-1.json.gz").read_bytes()
    (d / "rank-1.json.gz").write_bytes(data[: len(data) // 2])
    return Setup(["import", str(d), "-o", str(tmp / "out")], outputs=("out",),
                 names=("rank-1.json.gz",))


def user_folder(tmp: Path) -> Path:
    d = tmp / "mine"
    d.mkdir()
    (d / "train.py").write_text("print(1)\n")
    shutil.copy(SMALL, d / SMALL.name)
    return d


def record(tmp: Path, *flags: str, prog: str = "pass", **kw: object) -> Setup:
    return Setup(["record", "--backend", "none", "--quiet", *flags, "--", PY, "-c", prog],
                 **kw)  # type: ignore[arg-type]


def fifo(tmp: Path) -> Path:
    p = tmp / "pipe.json"
    os.mkfifo(p)
    return p


CASES: list[Case] = [
    # --- traces that cannot be read
    Case("import: missing file", lambda t: imp(t, t / "absent.json")),
    Case("import: empty file", lambda t: imp(t, write_bytes(t / "e.json", b""))),
    Case("import: not JSON", lambda t: imp(t, write_text(t / "x.json", "hello"))),
    Case("import: JSON array", lambda t: imp(t, write_text(t / "x.json", "[1, 2]"))),
    Case("import: invalid JSON", lambda t: imp(t, write_text(t / "x.json", '{"traceEvents": [}'))),
    Case("import: truncated gz", lambda t: imp(t, cut(CNN, t / "c.json.gz", 0.5))),
    Case("import: truncated gz (tail)", lambda t: imp(t, cut(CNN, t / "c.json.gz", 0.97))),
    Case("import: corrupt gz", lambda t: imp(t, flip(CNN, t / "c.json.gz", 200))),
    Case("import: truncated JSON", lambda t: imp(t, cut_plain(t / "c.json", 0.6))),
    Case("import: invalid UTF-8 name", lambda t: imp(t, bad_utf8(t / "u.json"))),
    Case("import: invalid UTF-8 name (gz)", lambda t: imp(t, bad_utf8(t / "u.json.gz", gz=True))),
    Case("import: invalid UTF-8 in a key", lambda t: imp(t, write_bytes(
        t / "u.json", json.dumps(trace_doc()).replace('"name"', '"n\xffame"', 1).encode(
            "latin-1")))),
    Case("import: deep nesting in args", lambda t: imp(t, write_bytes(t / "d.json", deep(100000)))),
    Case("import: deep nesting (gz)",
         lambda t: imp(t, write_bytes(t / "d.json.gz", gzip.compress(deep(100000))))),
    Case("import: deep nesting at top",
         lambda t: imp(t, write_bytes(t / "d.json", b'{"x": ' + b"[" * 100000 + b"]" * 100000
                                      + b', "traceEvents": []}'))),
    Case("import: rank beyond int64", lambda t: imp(t, write_json(
        t / "r.json", trace_doc(distributedInfo={"rank": 2**70, "world_size": 2})))),
    Case("import: rank negative", lambda t: imp(t, write_json(
        t / "r.json", trace_doc(distributedInfo={"rank": -3, "world_size": 2})))),
    Case("import: rank beyond int32", lambda t: imp(t, write_json(
        t / "r.json", trace_doc(distributedInfo={"rank": 2**40, "world_size": 2})))),
    Case("import: baseTimeNanoseconds beyond int64", lambda t: imp(t, write_json(
        t / "b.json", trace_doc(baseTimeNanoseconds=2**70)))),
    Case("import: baseTimeNanoseconds negative huge", lambda t: imp(t, write_json(
        t / "b.json", trace_doc(baseTimeNanoseconds=-(2**63))))),
    Case("import: pid beyond int64", lambda t: imp(t, write_json(t / "p.json", trace_doc(
        [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 2**70, "tid": 1, "ts": 1, "dur": 1}])),
        expect="either")),
    Case("import: External id beyond uint64", lambda t: imp(t, write_json(t / "p.json", trace_doc(
        [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1,
          "args": {"External id": 2**80}}])), expect="either")),
    Case("import: duration 1e30", lambda t: imp(t, write_json(t / "d.json", trace_doc(
        [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.0, "dur": 1e30,
          "args": {"device": 0, "stream": 7}}])), expect="either",
        check=diag_mentions("out", "dur", "duration"))),
    Case("import: timestamp 1e30", lambda t: imp(t, write_json(t / "d.json", trace_doc(
        [{"ph": "X", "cat": "cpu_op", "name": "k", "pid": 1, "tid": 7, "ts": 1e30, "dur": 1.0}])),
        expect="either", check=diag_mentions("out", "ts", "time"))),
    Case("import: NaN literal", lambda t: imp(t, write_text(t / "n.json", json.dumps(trace_doc(
        [{"ph": "X", "cat": "cpu_op", "name": "k", "pid": 1, "tid": 7, "ts": float("nan"),
          "dur": 1.0}]))), expect="either")),
    Case("import: events without ph", lambda t: imp(t, write_json(t / "p.json", trace_doc(
        [{k: v for k, v in e.items() if k != "ph"} for e in trace_doc()["traceEvents"]]
        + [trace_doc()["traceEvents"][1]])),  # type: ignore[union-attr,index,operator]
        expect="either", check=diag_mentions("out", "ph", "phase"))),
    Case("import: traceEvents not a list", lambda t: imp(t, write_json(
        t / "x.json", {"schemaVersion": 1, "traceEvents": {"a": 1}}))),
    Case("import: deviceProperties wrong type", lambda t: imp(t, write_json(
        t / "x.json", trace_doc(deviceProperties="H100")), expect="either")),
    Case("import: a FIFO", lambda t: imp(t, fifo(t))),
    Case("import: a folder with no traces", lambda t: imp(t, (t / "d").mkdir() or t / "d")),
    Case("import: a truncated rank file in a folder", rank_folder),
    Case("import: two files of one rank", lambda t: Setup(
        ["import", str(CNN), str(write_json(t / "b.json", trace_doc())), "-o", str(t / "out")],
        expect="either", outputs=("out",), names=("b.json", CNN.name))),
    Case("import: valid trace", lambda t: imp(t, CNN, expect="ok")),
    # --- names reaching the terminal
    Case("report: escape sequence in a kernel name", lambda t: Setup(
        ["report", str(make_run(t, trace=write_json(t / "k.json", kernel_named(
            "evil\x1b]0;owned\x07\x1b[2J\x1b[31mkern"))))],
        expect="ok", check=no_escapes)),
    Case("report: rich markup in a kernel name", lambda t: Setup(
        ["report", str(make_run(t, trace=write_json(t / "k.json", kernel_named(
            "[bold red]sgemm[/] [link=http://x]y"))))], expect="ok",
        check=lambda tmp, p: None if "[bold red]sgemm[/]" in p.stdout
        else "markup in a name was interpreted (or the name is missing)")),
    Case("query: escape sequence in a value", lambda t: Setup(
        ["query", str(make_run(t)), "SELECT chr(27) || '[31mred' AS x"], expect="ok",
        check=no_escapes)),
    Case("import: escape sequence in a file name", lambda t: Setup(
        ["import", str(t / "\x1b[31mred.json"), "-o", str(t / "out")], names=("red.json",),
        check=no_escapes)),
    # --- damaged runs
    Case("report: manifest rank null", lambda t: broken_run(
        t, lambda r: edit_manifest(r, lambda m: m["ranks"][0].update(rank=None)))),  # type: ignore[index]
    Case("report: manifest rank 'zero'", lambda t: broken_run(
        t, lambda r: edit_manifest(r, lambda m: m["ranks"][0].update(rank="zero")))),  # type: ignore[index]
    Case("report: manifest rank '0' (string)", lambda t: broken_run(
        t, lambda r: edit_manifest(r, lambda m: m["ranks"][0].update(rank="0")))),  # type: ignore[index]
    Case("report: manifest rank beyond int64", lambda t: broken_run(
        t, lambda r: edit_manifest(r, lambda m: m["ranks"][0].update(rank=2**70)))),  # type: ignore[index]
    Case("report: manifest rank -1", lambda t: broken_run(
        t, lambda r: edit_manifest(r, lambda m: m["ranks"][0].update(rank=-1)))),  # type: ignore[index]
    Case("report: manifest rank 1.5", lambda t: broken_run(
        t, lambda r: edit_manifest(r, lambda m: m["ranks"][0].update(rank=1.5)))),  # type: ignore[index]
    Case("report: manifest ranks duplicated", lambda t: broken_run(
        t, lambda r: edit_manifest(r, lambda m: m.update(ranks=m["ranks"] * 2)))),  # type: ignore[operator]
    Case("report: manifest ranks empty", lambda t: broken_run(
        t, lambda r: edit_manifest(r, lambda m: m.update(ranks=[]))), ),
    Case("report: manifest table count wrong", lambda t: broken_run(
        t, lambda r: edit_manifest(r, lambda m: m["tables"].update(kernels=5)))),  # type: ignore[union-attr]
    Case("report: manifest tables not a dict", lambda t: broken_run(
        t, lambda r: edit_manifest(r, lambda m: m.update(tables=[1, 2])))),
    Case("report: manifest diagnostics wrong", lambda t: broken_run(
        t, lambda r: edit_manifest(r, lambda m: m.update(diagnostics=[{"x": 1}])))),
    Case("report: manifest schema_version huge", lambda t: broken_run(
        t, lambda r: edit_manifest(r, lambda m: m.update(schema_version=10**30)))),
    Case("report: manifest clock_offset huge", lambda t: broken_run(
        t, lambda r: edit_manifest(r, lambda m: m.update(clock_offset_ns=10**30)))),
    Case("report: manifest invalid UTF-8", lambda t: broken_run(
        t, lambda r: (r / "manifest.json").write_bytes(
            (r / "manifest.json").read_bytes().replace(b'"kineto"', b'"kin\xffeto"')))),
    Case("report: manifest deeply nested", lambda t: broken_run(
        t, lambda r: (r / "manifest.json").write_bytes(
            b'{"settings": ' + b"[" * 100000 + b"]" * 100000 + b"}"))),
    Case("report: manifest deleted", lambda t: broken_run(
        t, lambda r: (r / "manifest.json").unlink())),
    Case("report: manifest is a list", lambda t: broken_run(
        t, lambda r: (r / "manifest.json").write_text("[]"))),
    Case("report: manifest is a folder", lambda t: broken_run(
        t, lambda r: ((r / "manifest.json").unlink(), (r / "manifest.json").mkdir()))),
    Case("report: kernels Parquet deleted", lambda t: broken_run(
        t, lambda r: (r / "kernels" / "rank-0.parquet").unlink())),
    Case("query: kernels Parquet deleted", lambda t: broken_run(
        t, lambda r: (r / "kernels" / "rank-0.parquet").unlink(), "query")),
    Case("export: kernels Parquet deleted", lambda t: broken_run(
        t, lambda r: (r / "kernels" / "rank-0.parquet").unlink(), "export")),
    Case("report: kernels/cpu_ops Parquet swapped", lambda t: broken_run(
        t, lambda r: swap(r / "kernels" / "rank-0.parquet", r / "cpu_ops" / "rank-0.parquet"))),
    Case("report: kernels/api_calls swapped", lambda t: broken_run(
        t, lambda r: swap(r / "kernels" / "rank-0.parquet",
                          r / "api_calls" / "rank-0.parquet"))),
    Case("report: kernels Parquet truncated", lambda t: broken_run(
        t, lambda r: truncate(r / "kernels" / "rank-0.parquet"))),
    Case("query: kernels Parquet truncated", lambda t: broken_run(
        t, lambda r: truncate(r / "kernels" / "rank-0.parquet"), "query")),
    Case("report: kernels Parquet empty", lambda t: broken_run(
        t, lambda r: truncate(r / "kernels" / "rank-0.parquet", 0))),
    Case("report: kernels Parquet renamed to rank-3", lambda t: broken_run(
        t, lambda r: os.replace(r / "kernels" / "rank-0.parquet", r / "kernels" / "rank-3.parquet"))),
    Case("report: extra rank file", lambda t: broken_run(
        t, lambda r: shutil.copy(r / "kernels" / "rank-0.parquet", r / "kernels" / "rank-1.parquet"))),
    Case("report: a table folder is a file", lambda t: broken_run(
        t, lambda r: (shutil.rmtree(r / "kernels"), (r / "kernels").write_text("x")))),
    Case("report: run is a file", lambda t: Setup(["report", write_text(t / "f", "x").as_posix()],
                                                  names=("f",))),
    Case("report: run missing", lambda t: Setup(["report", str(t / "nope")], names=("nope",))),
    Case("report: a trace instead of a run", lambda t: Setup(["report", str(CNN)],
                                                            names=(CNN.name,))),
    Case("report: valid run", lambda t: Setup(["report", str(make_run(t))], expect="ok")),
    # --- outputs
    Case("report -o /dev/full", lambda t: Setup(["report", str(make_run(t)), "-o", "/dev/full"],
                                                names=("/dev/full",))),
    Case("report --format json -o /dev/full", lambda t: Setup(
        ["report", str(make_run(t)), "--format", "json", "-o", "/dev/full"],
        names=("/dev/full",))),
    Case("report > /dev/full", lambda t: Setup(["report", str(make_run(t))], stdout="/dev/full",
                                               names=("stdout",))),
    Case("report json > /dev/full", lambda t: Setup(
        ["report", str(make_run(t)), "--format", "json"], stdout="/dev/full", names=("stdout",))),
    Case("query > /dev/full", lambda t: Setup(
        ["query", str(make_run(t)), "SELECT * FROM kernels", "--format", "csv"],
        stdout="/dev/full", names=("stdout",))),
    Case("query json > /dev/full", lambda t: Setup(
        ["query", str(make_run(t)), "SELECT * FROM kernels", "--format", "json"],
        stdout="/dev/full", names=("stdout",))),
    Case("export > /dev/full (link)", lambda t: Setup(
        ["export", str(make_run(t)), "-o", str(link(t / "full.json", "/dev/full"))],
        names=("full.json", "/dev/full"))),
    Case("report -o disk full", lambda t: Setup(
        ["report", str(make_run(t)), "-o", str(t / "r.html")], fsize=200_000, names=("r.html",))),
    Case("export -o disk full", lambda t: Setup(
        ["export", str(make_run(t)), "-o", str(t / "t.json")], fsize=200_000, names=("t.json",))),
    Case("import disk full", lambda t: Setup(
        ["import", str(CNN), "-o", str(t / "out")], fsize=3_000, names=("out",))),
    Case("demo disk full", lambda t: Setup(["demo", "-o", str(t / "demo")], fsize=100_000,
                                           names=("demo",))),
    Case("demo > /dev/full", lambda t: Setup(["demo", "-o", str(t / "demo")], stdout="/dev/full",
                                             names=("stdout",))),
    Case("demo -o over a file", lambda t: Setup(["demo", "-o", write_text(t / "f", "x").as_posix()],
                                                names=("f",))),
    Case("report -o RUN/manifest.json", lambda t: Setup(
        ["report", str(make_run(t)), "-o", str(t / "run" / "manifest.json")],
        names=("manifest.json",))),
    Case("export -o RUN/manifest.json", lambda t: Setup(
        ["export", str(make_run(t)), "-o", str(t / "run" / "manifest.json")],
        names=("manifest.json",))),
    Case("report -o into a missing folder", lambda t: Setup(
        ["report", str(make_run(t)), "-o", str(t / "no" / "r.json")], names=("r.json", "no"))),
    Case("report -o a folder", lambda t: Setup(
        ["report", str(make_run(t)), "-o", str((t / "d.json").mkdir() or t / "d.json")],
        names=("d.json",))),
    Case("export -o a folder", lambda t: Setup(
        ["export", str(make_run(t)), "-o", str((t / "d.json").mkdir() or t / "d.json")],
        names=("d.json",))),
    Case("export: file mode with umask 022", lambda t: Setup(
        ["export", str(make_run(t)), "-o", str(t / "t.json")], expect="ok", outputs=("t.json",),
        check=file_mode("t.json", 0o644))),
    Case("export: file mode with umask 002", lambda t: Setup(
        ["export", str(make_run(t)), "-o", str(t / "t.json")], expect="ok", outputs=("t.json",),
        umask=0o002, check=file_mode("t.json", 0o664))),
    Case("report: file mode with umask 022", lambda t: Setup(
        ["report", str(make_run(t)), "-o", str(t / "r.json")], expect="ok", outputs=("r.json",),
        check=file_mode("r.json", 0o644))),
    Case("export -o a symlink", lambda t: Setup(
        ["export", str(make_run(t)), "-o", str(link(t / "t.json", write_text(t / "real.json", "")))],
        expect="ok", outputs=("real.json",), check=symlink_kept("t.json", "real.json"))),
    Case("report -o a symlink", lambda t: Setup(
        ["report", str(make_run(t)), "-o", str(link(t / "r.json", write_text(t / "real.json", "")))],
        expect="ok", outputs=("real.json",), check=symlink_kept("r.json", "real.json"))),
    Case("query --format json: BLOB column", lambda t: Setup(
        ["query", str(make_run(t)), "SELECT 'ab'::BLOB AS b, 1 AS n", "--format", "json"],
        expect="ok", check=json_parses)),
    Case("query --format json: NaN and inf", lambda t: Setup(
        ["query", str(make_run(t)), "SELECT 'nan'::DOUBLE AS a, 'inf'::DOUBLE AS b",
         "--format", "json"], expect="ok", check=json_parses)),
    Case("query --format json: odd types", lambda t: Setup(
        ["query", str(make_run(t)), "SELECT INTERVAL 1 DAY AS i, 1.5::DECIMAL(10,2) AS d, "
         "170141183460469231731687303715884105727::HUGEINT AS h, [1,2] AS l, "
         "{'a': 1} AS s, TIMESTAMP '2020-01-01' AS t, UUID '00000000-0000-0000-0000-000000000000'"
         " AS u", "--format", "json"], expect="ok", check=json_parses)),
    Case("query --format csv: BLOB column", lambda t: Setup(
        ["query", str(make_run(t)), "SELECT 'ab'::BLOB AS b", "--format", "csv"], expect="ok")),
    Case("query: bad SQL", lambda t: Setup(["query", str(make_run(t)), "SELEC x"],
                                           names=("query",))),
    Case("query: --limit -1", lambda t: Setup(
        ["query", str(make_run(t)), "SELECT 1", "--limit", "-1"], names=("--limit",))),
    # --- --force and overwriting
    Case("import --force over a user folder", lambda t: Setup(
        ["import", str(CNN), "-o", str(user_folder(t)), "--force"], names=("mine",))),
    Case("import --force over the input's folder", lambda t: Setup(
        ["import", str(user_folder(t) / SMALL.name), "-o", str(t / "mine"), "--force"],
        names=("mine",))),
    Case("import --force over an empty folder", lambda t: Setup(
        ["import", str(CNN), "-o", str((t / "e").mkdir() or t / "e"), "--force"], names=("e",))),
    Case("import --force over a file", lambda t: Setup(
        ["import", str(CNN), "-o", write_text(t / "f", "x").as_posix(), "--force"], names=("f",))),
    Case("import --force over '.'", lambda t: Setup(
        ["import", str(CNN), "-o", ".", "--force"], names=(".",))),
    Case("import --force over a run", lambda t: Setup(
        ["import", str(CNN), "-o", str(make_run(t)), "--force"], expect="ok", outputs=("run",))),
    Case("import --force over a symlink to a run", lambda t: Setup(
        ["import", str(CNN), "-o", str(link(t / "l", make_run(t))), "--force"], names=("l",))),
    Case("import over an existing run (no --force)", lambda t: Setup(
        ["import", str(CNN), "-o", str(make_run(t))], names=("run",))),
    Case("import: two imports to one -o", lambda t: Setup(
        ["import", str(CNN), "-o", str(t / "out")], expect="ok", outputs=("out",), twice=True)),
    Case("record --force over a user folder", lambda t: record(
        t, "-o", str(user_folder(t)), "--force", names=("mine",))),
    Case("record -o an existing file", lambda t: record(
        t, "-o", write_text(t / "f", "x").as_posix(), names=("f",))),
    # --- flags
    Case("record --delay 1e308", lambda t: record(t, "--delay", "1e308", "-o", str(t / "r"),
                                                  names=("--delay",))),
    Case("record --delay nan", lambda t: record(t, "--delay", "nan", "-o", str(t / "r"),
                                                names=("--delay",))),
    Case("record --delay -1", lambda t: record(t, "--delay", "-1", "-o", str(t / "r"),
                                               names=("--delay",))),
    Case("record --duration inf", lambda t: record(t, "--duration", "inf", "-o", str(t / "r"),
                                                   names=("--duration",))),
    Case("record --duration 0", lambda t: record(t, "--duration", "0", "-o", str(t / "r"),
                                                 names=("--duration",))),
    Case("record --sample-hz nan", lambda t: record(t, "--sample-hz", "nan", "-o", str(t / "r"),
                                                    names=("--sample-hz",))),
    Case("record --sample-hz inf", lambda t: record(t, "--sample-hz", "inf", "-o", str(t / "r"),
                                                    names=("--sample-hz",))),
    Case("record --sample-hz 1e9", lambda t: record(t, "--sample-hz", "1e9", "-o", str(t / "r"),
                                                    names=("--sample-hz",))),
    Case("record --warmup nan", lambda t: record(t, "--warmup", "nan", "-o", str(t / "r"),
                                                 names=("--warmup",))),
    Case("record --steps 5-2", lambda t: record(t, "--steps", "5-2", "-o", str(t / "r"),
                                                names=("--steps", "5-2"))),
    Case("record --steps huge", lambda t: record(
        t, "--steps", "1-99999999999999999999999", "-o", str(t / "r"), expect="either",
        outputs=("r",), names=("--steps", "99999999999999999999999"))),
    Case("record: no command", lambda t: Setup(["record", "-o", str(t / "r")],
                                               names=("command", "CMD"))),
    Case("record: missing script", lambda t: Setup(
        ["record", "-o", str(t / "r"), "--", str(t / "nope.py")], names=("nope.py",))),
    Case("record: valid", lambda t: record(t, "-o", str(t / "r"), expect="ok", outputs=("r",))),
    Case("record: program exits 3", lambda t: record(t, "-o", str(t / "r"), prog="raise SystemExit(3)",
                                                     expect="ok", outputs=("r",), codes=(3,))),
    Case("record: Ctrl-C", lambda t: record(
        t, "-o", str(t / "r"), expect="ok", outputs=("r",),
        prog="import signal, sys, time\n"
             "signal.signal(signal.SIGINT, lambda *a: sys.exit(130))\ntime.sleep(30)",
        codes=(130, -2), interrupt=(4.0, signal.SIGINT))),
    Case("record: Ctrl-C (program's default handler)", lambda t: record(
        t, "-o", str(t / "r"), expect="ok", outputs=("r",), prog="import time; time.sleep(30)",
        codes=(130, -2), interrupt=(4.0, signal.SIGINT), program_traceback=True)),
    Case("record: two records to one -o", lambda t: record(
        t, "-o", str(t / "r"), prog="import time; time.sleep(1)", expect="ok", outputs=("r",),
        twice=True)),
]


def write_text(p: Path, s: str) -> Path:
    p.write_text(s)
    return p


def write_bytes(p: Path, b: bytes) -> Path:
    p.write_bytes(b)
    return p


def cut(src: Path, dst: Path, keep: float) -> Path:
    data = src.read_bytes()
    return write_bytes(dst, data[: int(len(data) * keep)])


def cut_plain(dst: Path, keep: float) -> Path:
    data = gzip.decompress(CNN.read_bytes())
    return write_bytes(dst, data[: int(len(data) * keep)])


def flip(src: Path, dst: Path, at: int) -> Path:
    data = bytearray(src.read_bytes())
    for i in range(at, at + 64):
        data[i] ^= 0x5A
    return write_bytes(dst, bytes(data))


def bad_utf8(p: Path, gz: bool = False) -> Path:
    raw = json.dumps(kernel_named("ker\udcffnel"), ensure_ascii=False).encode(
        "utf-8", "surrogateescape")
    return write_bytes(p, gzip.compress(raw) if gz else raw)


def link(p: Path, target: str | Path) -> Path:
    p.symlink_to(target)
    return p


# -- running and judging -------------------------------------------------------------------------

def snapshot(root: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = Path(dirpath) / n
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = "link:" + os.readlink(p)
            elif p.is_dir():
                out[rel] = "dir"
            elif p.is_fifo():
                out[rel] = "fifo"
            else:
                st = p.stat()
                out[rel] = f"{hashlib.sha1(p.read_bytes()).hexdigest()}:{st.st_mode & 0o777:o}"
    return out


def under(rel: str, outputs: tuple[str, ...]) -> bool:
    return any(rel == o or rel.startswith(o + "/") for o in outputs)


def launch(s: Setup, cwd: Path) -> subprocess.Popen[str]:
    def pre() -> None:
        os.umask(s.umask)
        if s.fsize is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (s.fsize, s.fsize))

    out = open(s.stdout, "w") if s.stdout else subprocess.PIPE  # noqa: SIM115
    return subprocess.Popen([PY, "-m", "stepscope", *s.argv], cwd=cwd, env=env(), text=True,
                            stdout=out, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            preexec_fn=pre, errors="replace")


def run_case(case: Case, timeout: float = 120.0) -> Outcome:
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ss-probe-") as d:
        tmp = Path(d)
        try:
            s = case.make(tmp)
        except Exception as exc:  # the probe's own setup failed
            return Outcome(case.name, "setup failed", -1, repr(exc))
        before = snapshot(tmp)
        procs = [launch(s, tmp) for _ in range(2 if s.twice else 1)]
        results: list[subprocess.CompletedProcess[str]] = []
        try:
            if s.interrupt is not None:
                time.sleep(s.interrupt[0])
                procs[0].send_signal(s.interrupt[1])
            for p in procs:
                o, e = p.communicate(timeout=timeout)
                results.append(subprocess.CompletedProcess(p.args, p.returncode, o or "", e or ""))
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            return Outcome(case.name, "hang", -9, "", time.perf_counter() - t0)
        after = snapshot(tmp)
        verdict, detail = judge(s, tmp, results, before, after)
        codes = [r.returncode for r in results]
        return Outcome(case.name, verdict, codes[0], detail, time.perf_counter() - t0,
                       [str(c) for c in codes[1:]])


def judge(s: Setup, tmp: Path, results: list[subprocess.CompletedProcess[str]],
          before: dict[str, str], after: dict[str, str]) -> tuple[str, str]:
    for r in results:
        if "Traceback (most recent call last)" in r.stderr and not s.program_traceback:
            last = [ln for ln in r.stderr.strip().splitlines() if ln.strip()][-1]
            return "traceback", last[:100]
    succeeded = [r for r in results if r.returncode in s.codes]
    if s.twice:  # two concurrent runs to one output: one may win, the other must fail cleanly
        if len(succeeded) == 2:
            return "silently wrong", "both runs to one output exited with success"
        if len(succeeded) == 1:
            s = Setup(s.argv, "error", s.outputs, s.names, None, codes=s.codes)
            before = {**before, **{k: v for k, v in after.items() if under(k, s.outputs)}}
        results = [r for r in results if r not in succeeded] or results
    r = results[0]
    changed = [k for k in before if k not in after or after[k] != before[k]]
    lost = [k for k in changed if not under(k, s.outputs) or (r.returncode not in s.codes)]
    # an output that fails keeps its old content, so any change on failure is a loss
    if lost:
        return "lost file", ", ".join(lost[:3])
    err_lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    new = [k for k in after if k not in before]
    allowed = [] if r.returncode not in s.codes or s.expect == "error" else s.outputs
    if s.twice and succeeded:
        allowed = s.outputs
    leftover = [k for k in new if not under(k, tuple(allowed))]
    if r.returncode in s.codes:
        if s.expect == "error":
            return "silently wrong", f"exit {r.returncode}: " + (err_lines[-1][:80] if err_lines
                                                                else r.stdout[-80:].strip())
        problem = s.check(tmp, r) if s.check else None
        if problem:
            return "silently wrong", problem
        if leftover:
            return "leftover", ", ".join(leftover[:3])
        return OK, ""
    if r.returncode != 2:
        return "wrong exit", f"exit {r.returncode}: " + (err_lines[-1][:80] if err_lines else "")
    if s.expect == "ok":
        return "wrong exit", f"refused: {err_lines[-1][:80] if err_lines else ''}"
    if leftover:
        return "leftover", ", ".join(leftover[:3])
    if len(err_lines) != 1 or not err_lines[0].startswith("stepscope: error:"):
        return "unclear error", " | ".join(err_lines)[:100]
    if "\x1b" in err_lines[0]:
        return "unclear error", "a raw escape sequence in the error line"
    if s.names and not any(n in err_lines[0] for n in s.names):
        return "unclear error", f"does not name {s.names[0]}: {err_lines[0][:80]}"
    return CLEAN, err_lines[0][:100]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-k", default="", help="only cases whose name contains this")
    ap.add_argument("-j", type=int, default=2, help="cases run at once")
    ap.add_argument("-v", action="store_true", help="show the detail of clean/correct cases too")
    ap.add_argument("--src", type=Path, default=SOURCES[0],
                    help="the stepscope sources to probe (default: this checkout's src)")
    a = ap.parse_args(argv)
    SOURCES[0] = a.src.resolve()
    cases = [c for c in CASES if a.k.lower() in c.name.lower()]
    with cf.ThreadPoolExecutor(a.j) as pool:
        outcomes = list(pool.map(run_case, cases))
    width = max(len(c.name) for c in cases)
    for o in outcomes:
        detail = o.detail if a.v or o.verdict not in (OK, CLEAN) else ""
        shown = detail.encode("unicode_escape").decode("ascii")
        print(f"{o.name:<{width}}  {o.verdict:<14} {o.code:>4}  {shown}")
    totals = Counter(o.verdict for o in outcomes)
    print()
    print(f"{len(outcomes)} cases: " + ", ".join(
        f"{totals[k]} {k}" for k in [*ORDER, *sorted(set(totals) - set(ORDER))] if totals[k]))
    return 0 if set(totals) <= {OK, CLEAN} else 1


if __name__ == "__main__":
    sys.exit(main())
