"""The HTML timeline's track order and names for a recorded run (GPU streams, then named host
threads with their sampled stacks, then folded sample groups), for an imported Kineto trace, and
the escaping of hostile thread and frame names."""

from __future__ import annotations

import re
import zlib
from pathlib import Path
from typing import Any

import pytest
from tests.reporters.test_html import _data, decode

from builder import TraceBuilder, imported
from stepscope.reporters.html import render_html
from stepscope.reporters.report import build_report
from stepscope.reporters.timeline_build import build_timeline, thread_names
from stepscope.reporters.timeline_data import K
from stepscope.reporters.timeline_host import leaf_label
from stepscope.store.run import Run

PID, MAIN, AUTOGRAD, PIN, WORKER = 4242, 4242, 4300, 4400, 5000
FRAMES = ["/w/train.py:30 <module>", "/w/train.py:12 train_step",
          "/venv/torch/nn/modules/module.py:1736 _call_impl"]
FRAMES_B = [*FRAMES[:2], "/venv/torch/optim/sgd.py:127 step"]


def recorded_run(tmp_path: Path, *, main_name: str = "MainThread",
                 frame: str | None = None) -> Run:
    """What `stepscope record` writes for a 16-core box with one GPU: kernels, CUDA calls on
    the main thread and on autograd's thread, one unnamed thread, a DataLoader worker, stacks of
    the main thread and psutil/NVML samples."""
    b = TraceBuilder(pid=PID, tid=MAIN)
    b.thread(main_name, MAIN).thread("pt_autograd_0", AUTOGRAD)
    b.process("train.py", PID).process("DataLoader worker 0", WORKER)
    for i in range(4):
        t = 1000.0 * i
        b.step(t, 1000, step=i)
        b.kernel("fwd_kernel", t + 100, 200, launch=(t + 10, 5))
        for j in range(3):  # backward: more calls on autograd's thread than on the main one
            b.kernel("bwd_kernel", t + 400 + 100 * j, 50, launch=(t + 300 + 20 * j, 5), tid=AUTOGRAD)
        b.api("cudaMemcpyAsync", t + 900, 3, tid=PIN)
    b.pid = WORKER
    b.cpu_op("collate", 50, 100, tid=WORKER)
    b.pid = PID
    # stacks every 250 µs: the same stack twice (merged), then another, then the first again
    top = frame if frame is not None else FRAMES[-1]
    for n, frames in enumerate([FRAMES, FRAMES, FRAMES_B, FRAMES]):
        b.stack(250.0 * n, [*frames[:-1], top] if frames is FRAMES else frames)
    for k, t in enumerate((500.0, 1500.0, 2500.0)):
        cores = [10.0 * ((c + k) % 10) for c in range(16)]
        for c, v in enumerate(cores):
            b.sample(f"cpu.core{c}.util_pct", t, v, unit="%")
        b.sample("cpu.util_pct", t, sum(cores) / 16, unit="%")
        b.sample("process.cpu_pct", t, 100.0 + k, unit="%")
        b.sample("process.rss_bytes", t, 1e9 + k, unit="B")
        b.sample("gpu.util_pct", t, 50.0 + k, device=0, unit="%")
        b.sample("gpu.mem_util_pct", t, 20.0, device=0, unit="%")
        b.sample("gpu.power_w", t, 300.0, device=0, unit="W")
        b.sample("disk.read_bytes_per_s", t, 1000.0 * k, unit="B/s")
    b.sample("disk.write_bytes_per_s", 1000.0, 7.0, unit="B/s")  # sampled at another time
    return b.build(tmp_path / "run")


def _meta(run: Run) -> dict[str, Any]:
    return build_timeline(run, build_report(run).analysis).meta


def _visible(meta: dict[str, Any]) -> list[str]:
    """Track labels as the page lists them before any click (member counters folded)."""
    out = []
    for t in meta["tracks"]:
        if t["type"] == "counter" and meta["counters"][t["counter"]]["role"] == "member":
            continue
        out.append(t["label"])
    return out


def test_recorded_run_shows_gpu_then_named_threads_then_folded_samples(tmp_path: Path) -> None:
    meta = _meta(recorded_run(tmp_path))
    assert _visible(meta) == [
        "Steps", "GPU 0 · stream 7",
        "MainThread", "MainThread · sampled stacks",  # main first, though autograd has more
        "pt_autograd_0", "thread 4400", "DataLoader worker 0",
        "CPU (all cores)", "process.cpu_pct", "process.rss_bytes", "GPU 0 (NVML)",
        "Disk and network"]
    threads = [t for t in meta["tracks"] if t["type"] in ("thread", "stacks")]
    assert [(t["pid"], t["tid"], t["main"]) for t in threads] == [
        (PID, MAIN, True), (PID, MAIN, True), (PID, AUTOGRAD, False), (PID, PIN, False),
        (WORKER, WORKER, False)]
    # 5 counter rows first instead of 24 (16 cores, cpu.util_pct, 7 more metrics)
    roles = [c["role"] for c in meta["counters"]]
    assert roles.count("summary") == 3 and roles.count("member") == 16 + 3 + 2


def test_cpu_summary_is_the_mean_and_the_busiest_core(tmp_path: Path) -> None:
    meta = _meta(recorded_run(tmp_path))
    cs = meta["counters"]
    cpu = next(c for c in cs if c["label"] == "CPU (all cores)")
    members = [cs[i] for i in cpu["members"]]
    assert [m["metric"] for m in members] == [f"cpu.core{c}.util_pct" for c in range(16)]
    assert all(m["parent"] == cs.index(cpu) and m["role"] == "member" for m in members)
    # per tick k, core c reads 10 * ((c + k) % 10): mean over the 16 cores and the busiest one
    means = [sum(10.0 * ((c + k) % 10) for c in range(16)) / 16 for k in range(3)]
    assert cpu["series"]["mean"] == pytest.approx(means)
    assert cpu["series"]["max core"] == [90.0, 90.0, 90.0]
    assert cpu["unit"] == "%" and cpu["kind"] == "summary" and cpu["events"] == 3 * 17
    assert cpu["t_us"] == [500.0, 1500.0, 2500.0]  # relative to t0 = the first event (0 µs)
    gpu = next(c for c in cs if c["label"] == "GPU 0 (NVML)")
    assert gpu["series"] == {"util": [50.0, 51.0, 52.0], "memory util": [20.0, 20.0, 20.0]}
    assert gpu["unit"] == "%"  # of the summary's series; the members keep theirs (W)
    assert [cs[i]["metric"] for i in gpu["members"]] == ["gpu.util_pct", "gpu.mem_util_pct",
                                                         "gpu.power_w"]
    io = next(c for c in cs if c["label"] == "Disk and network")
    # read at 500/1500/2500 µs, write only at 1000 µs: it holds 7 from then on
    assert io["t_us"] == [500.0, 1000.0, 1500.0, 2500.0]
    assert io["series"]["disk"] == [0.0, 7.0, 1007.0, 2007.0]


def test_stack_lane_names_the_innermost_frame_and_keeps_the_stack(tmp_path: Path) -> None:
    run = recorded_run(tmp_path)
    tl = build_timeline(run, build_report(run).analysis)
    ev = decode(tl.meta, zlib.decompress(tl.blob))
    sel = [i for i, k in enumerate(ev["kind"]) if k == K["stack"]]
    names = [ev["name"][i] for i in sel]
    assert names == ["_call_impl (module.py:1736)", "step (sgd.py:127)", "_call_impl (module.py:1736)"]
    arr = ev["arrays"]
    assert arr["s_n"].tolist() == [2, 1, 1]  # the first two samples had the same stack
    strings = tl.meta["strings"]
    assert [strings[int(x)] for x in arr["s_stack"]] == [
        "\n".join(FRAMES), "\n".join(FRAMES_B), "\n".join(FRAMES)]
    # a sample lasts until the next one; the last one, one period (the median gap, 250 µs)
    assert ev["dur"][sel].tolist() == [500_000, 250_000, 250_000]
    lane = {int(ev["lane"][i]) for i in sel}
    track = next(t for t in tl.meta["tracks"] if t["type"] == "stacks")
    assert lane == {track["lane0"]} and track["lanes"] == 1


def test_leaf_label() -> None:
    assert leaf_label("a.py:1 f\n/x/y/b.py:20 g") == "g (b.py:20)"
    assert leaf_label("C:\\w\\c.py:3 h") == "h (c.py:3)"
    assert leaf_label("") == "(no Python frame)"
    assert leaf_label("... (truncated)\nm.py:2 <module>") == "<module> (m.py:2)"


def test_thread_names_fall_back_to_the_process_then_the_tid(tmp_path: Path) -> None:
    b = TraceBuilder(pid=7, tid=7)
    b.thread("loader", 9).process("python3", 7).process("DataLoader worker 1", 8)
    names = thread_names(b.build(tmp_path / "run"))
    assert names.label(0, 7, 9) == ("loader", False)
    assert names.label(0, 7, 7) == ("main thread", True)  # tid = pid of the main process
    assert names.label(0, 7, 11) == ("thread 11", False)
    assert names.label(0, 8, 8) == ("DataLoader worker 1", False)
    assert names.label(0, 8, 12) == ("DataLoader worker 1 · thread 12", False)
    assert names.label(0, -1, -1) == ("thread ?", False)


def test_kineto_trace_keeps_gpu_first_then_threads_main_first(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    run = imported("gpt_bf16_adamw.pt.trace.json.gz", tmp_path_factory)
    tl = build_timeline(run, build_report(run).analysis)
    types = [t["type"] for t in tl.meta["tracks"]]
    assert types[:3] == ["steps", "gpu_annotations", "stream"]
    assert types[3:] == ["thread"] * 7 + ["counter"]
    labels = [t["label"] for t in tl.meta["tracks"] if t["type"] == "thread"]
    assert labels[:3] == ["thread 2352 (python3)", "thread 2394 (pt_autograd_0)",
                          "thread 2381 (pt_data_pin)"]  # main, then by events: 8.1k, 0.8k
    assert tl.meta["tracks"][3]["main"] is True


HOSTILE_THREAD = "</script><img src=x onerror=window.__pwned=1>"
HOSTILE_FRAME = "/w/<b>x.py:1 </script><script>window.__pwned=2</script>"


def test_hostile_thread_and_frame_names_stay_data(tmp_path: Path) -> None:
    run = recorded_run(tmp_path, main_name=HOSTILE_THREAD, frame=HOSTILE_FRAME)
    html = render_html(build_report(run, page=True)).text
    assert len(re.findall(r"<script", html, re.IGNORECASE)) == 3
    assert len(re.findall(r"</script", html, re.IGNORECASE)) == 3
    assert "<img" not in html and "<b>" not in html
    meta = _data(html)["timeline"]
    labels = [t["label"] for t in meta["tracks"]]
    assert HOSTILE_THREAD in labels and f"{HOSTILE_THREAD} · sampled stacks" in labels
    leaf = "</script><script>window.__pwned=2</script> (<b>x.py:1)"
    assert leaf in meta["strings"]
    assert "\n".join([*FRAMES[:-1], HOSTILE_FRAME]) in meta["strings"]
