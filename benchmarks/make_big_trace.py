#!/usr/bin/env python3
"""Build a big Kineto (PyTorch profiler) trace by tiling a real fixture's events.

Example (about 1 GB of uncompressed JSON, ~3.4M events)::

    python3 benchmarks/make_big_trace.py \\
        --fixture /work/shared/fixtures/h100/gpt_bf16_adamw.pt.trace.json.gz \\
        --copies 120 -o /tmp/bench/x120/gpt_x120.pt.trace.json

What a "copy" is: every event of the fixture, with

* ``ts`` shifted by ``copy * shift`` where ``shift`` is the fixture's event span
  (first ``ts`` to last ``ts + dur``, rounded up to a whole microsecond) plus ``--gap-us``;
* ``ProfilerStep#k`` renamed to ``ProfilerStep#(k + copy * n_steps)``, so steps stay unique
  and increasing across copies (the CPU ``user_annotation`` and the GPU
  ``gpu_user_annotation`` of a step keep the same number);
* the link ids shifted per family by ``copy * (max id in the fixture + 1)``, so links stay
  unique per copy and never cross copies: ``correlation`` together with the ids of the
  ``ac2g`` flows (same id space), ``External id``, ``fwdbwd`` (and any other) flow ids,
  ``Ev Idx``, ``Python id`` / ``Python parent id``, ``Sequence number``.

Emitted once rather than per copy: metadata events (``ph == "M"``: process/thread names and
sort indices) and the profiler-window markers (the ``cat == "Trace"`` span, ``Iteration
Start``, ``Record Window End``), whose duration / timestamp are stretched to cover all copies.

All top-level keys (``deviceProperties``, ``baseTimeNanoseconds``, ``traceName``, ...) are kept
in their order. ``"distributedInfo": {"rank": 0}`` is added right after ``schemaVersion`` when
the fixture has none: Holistic Trace Analysis needs a rank, and it finds it by scanning the file
line by line with the regex ``"rank":\\s+(\\d+)`` (note: a space after the colon is required).

Layout: like Kineto's own writer, one event per line (compact JSON within the line). That keeps
line-oriented readers (HTA's rank scan above) from having to hold a 1 GB single line.

Streaming: the fixture is parsed once; each copy's events are built from it, serialised and
written, then dropped, so memory stays at about one fixture's worth whatever ``--copies`` is.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import re
import sys
import time
from collections.abc import Callable, Iterable
from typing import IO, Any

_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")

# args keys that carry link ids, and the id family each belongs to.
_ARG_ID_FAMILIES: dict[str, str] = {
    "correlation": "correlation",
    "External id": "external",
    "Ev Idx": "ev_idx",
    "Python id": "python",
    "Python parent id": "python",
    "Sequence number": "sequence",
}
# flow-event categories whose ``id`` shares a family with an args key.
_FLOW_CAT_FAMILIES: dict[str, str] = {"ac2g": "correlation"}

_GLOBAL_INSTANT_NAMES = ("Iteration Start", "Record Window End")


def _dumps_fn() -> Callable[[Any], bytes]:
    """Fastest available compact JSON encoder (orjson, then msgspec, then stdlib)."""
    try:
        import orjson  # type: ignore[import-not-found,unused-ignore]

        dumps: Callable[[Any], bytes] = orjson.dumps
        return dumps
    except ImportError:
        pass
    try:
        import msgspec

        return msgspec.json.encode
    except ImportError:
        pass

    def _std(obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()

    return _std


def _loads(data: bytes) -> Any:
    try:
        import orjson  # type: ignore[import-not-found,unused-ignore]

        return orjson.loads(data)
    except ImportError:
        return json.loads(data)


def read_fixture(path: str) -> dict[str, Any]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as fh:
        doc = _loads(fh.read())
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise SystemExit(f"{path}: not a Kineto trace (no top-level traceEvents list)")
    return doc


def _is_global(ev: dict[str, Any]) -> bool:
    """Events that describe the profiling window as a whole: emitted once, stretched."""
    if ev.get("ph") == "M":
        return True
    if ev.get("cat") == "Trace":
        return True
    name = ev.get("name")
    return ev.get("ph") == "i" and isinstance(name, str) and name.startswith(_GLOBAL_INSTANT_NAMES)


def _flow_family(ev: dict[str, Any]) -> str | None:
    if ev.get("ph") not in ("s", "t", "f") or not isinstance(ev.get("id"), int):
        return None
    cat = str(ev.get("cat", ""))
    return _FLOW_CAT_FAMILIES.get(cat, "flow:" + cat)


class Tiler:
    """Holds one fixture and yields shifted copies of its events."""

    def __init__(self, doc: dict[str, Any], gap_us: float) -> None:
        events: list[dict[str, Any]] = doc["traceEvents"]
        self.global_events = [e for e in events if _is_global(e)]
        self.tiled_events = [e for e in events if not _is_global(e)]

        ts_vals = [e["ts"] for e in self.tiled_events if isinstance(e.get("ts"), (int, float))]
        if not ts_vals:
            raise SystemExit("fixture has no timestamped events to tile")
        t0 = min(ts_vals)
        t1 = max(
            e["ts"] + (e.get("dur") or 0)
            for e in self.tiled_events
            if isinstance(e.get("ts"), (int, float))
        )
        self.span_us = t1 - t0
        # A whole number of microseconds: adding an integer to the fixture's float timestamps
        # (same binade) is exact, so the shifted values keep their short decimal form.
        self.shift_us = math.ceil(self.span_us + gap_us)

        # id strides: max id of each family + 1 (ints only; other ids are left alone).
        maxima: dict[str, int] = {}

        def _see(family: str, value: Any) -> None:
            if isinstance(value, int) and not isinstance(value, bool):
                maxima[family] = max(maxima.get(family, 0), value)

        steps: list[int] = []
        for e in self.tiled_events:
            fam = _flow_family(e)
            if fam is not None:
                _see(fam, e["id"])
            args = e.get("args")
            if isinstance(args, dict):
                for key, family in _ARG_ID_FAMILIES.items():
                    if key in args:
                        _see(family, args[key])
            name = e.get("name")
            if isinstance(name, str):
                m = _STEP_RE.match(name)
                if m:
                    steps.append(int(m.group(1)))
        self.strides = {fam: mx + 1 for fam, mx in maxima.items()}
        self.n_steps = (max(steps) - min(steps) + 1) if steps else 0
        self.steps = sorted(set(steps))

    def copy(self, c: int) -> Iterable[dict[str, Any]]:
        """Events of copy ``c`` (copy 0 is the fixture itself plus the global events)."""
        dt = c * self.shift_us
        offs = {fam: c * stride for fam, stride in self.strides.items()}
        step_off = c * self.n_steps
        for e in self.tiled_events:
            e2 = dict(e)
            ts = e.get("ts")
            if isinstance(ts, (int, float)):
                e2["ts"] = ts + dt
            fam = _flow_family(e)
            if fam is not None:
                e2["id"] = e["id"] + offs[fam]
            args = e.get("args")
            if isinstance(args, dict):
                a2 = None
                for key, family in _ARG_ID_FAMILIES.items():
                    v = args.get(key)
                    if isinstance(v, int) and not isinstance(v, bool):
                        if a2 is None:
                            a2 = dict(args)
                        a2[key] = v + offs[family]
                if a2 is not None:
                    e2["args"] = a2
            if step_off:
                name = e.get("name")
                if isinstance(name, str) and name.startswith("ProfilerStep#"):
                    m = _STEP_RE.match(name)
                    if m:
                        e2["name"] = f"ProfilerStep#{int(m.group(1)) + step_off}"
            yield e2

    def stretched_globals(self, copies: int) -> list[dict[str, Any]]:
        """Window-level events, stretched so the window covers every copy."""
        extra = (copies - 1) * self.shift_us
        out = []
        for e in self.global_events:
            e2 = dict(e)
            if e.get("cat") == "Trace" and isinstance(e.get("dur"), (int, float)):
                e2["dur"] = e["dur"] + extra
            elif str(e.get("name", "")).startswith("Record Window End") and isinstance(
                e.get("ts"), (int, float)
            ):
                e2["ts"] = e["ts"] + extra
            out.append(e2)
        return out


def _header_value(value: Any) -> str:
    # stdlib json with its default ", " / ": " separators: keeps `"rank": 0` greppable by HTA.
    return json.dumps(value, ensure_ascii=False)


def write_tiled(doc: dict[str, Any], copies: int, out: IO[bytes], gap_us: float) -> dict[str, Any]:
    tiler = Tiler(doc, gap_us)
    dumps = _dumps_fn()

    top = [(k, v) for k, v in doc.items()]
    if "distributedInfo" not in doc:
        pos = next((i + 1 for i, (k, _) in enumerate(top) if k == "schemaVersion"), 0)
        top.insert(pos, ("distributedInfo", {"rank": 0}))

    n_events = 0
    first_key = True
    out.write(b"{\n")
    for key, value in top:
        if not first_key:
            out.write(b",\n")
        first_key = False
        out.write(f"  {json.dumps(key)}: ".encode())
        if key != "traceEvents":
            out.write(_header_value(value).encode())
            continue
        out.write(b"[\n")
        first_ev = True
        for c in range(copies):
            evs = list(tiler.copy(c))
            if c == 0:
                evs.extend(tiler.stretched_globals(copies))
            if not evs:
                continue
            chunk = b",\n".join(dumps(e) for e in evs)
            if not first_ev:
                out.write(b",\n")
            out.write(chunk)
            first_ev = False
            n_events += len(evs)
        out.write(b"\n  ]")
    out.write(b"\n}\n")
    return {
        "copies": copies,
        "events": n_events,
        "fixture_events": len(doc["traceEvents"]),
        "span_us": tiler.span_us,
        "shift_us": tiler.shift_us,
        "id_strides": tiler.strides,
        "fixture_steps": tiler.steps,
        "last_step": (max(tiler.steps) + (copies - 1) * tiler.n_steps) if tiler.steps else None,
    }


class _CountingWriter:
    def __init__(self, fh: IO[bytes]) -> None:
        self.fh = fh
        self.n = 0

    def write(self, b: bytes) -> int:
        self.n += len(b)
        return self.fh.write(b)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--fixture", required=True, help="Kineto trace (.json or .json.gz) to tile")
    p.add_argument("--copies", type=int, required=True, help="number of copies (120 ~ 1 GB)")
    p.add_argument("-o", "--output", required=True, help="output .json or .json.gz")
    p.add_argument("--gap-us", type=float, default=1000.0, help="gap between copies (us)")
    p.add_argument("--gzip-level", type=int, default=6, help="gzip level for .gz output")
    ns = p.parse_args(argv)
    if ns.copies < 1:
        p.error("--copies must be >= 1")

    t0 = time.perf_counter()
    doc = read_fixture(ns.fixture)
    if ns.output.endswith(".gz"):
        raw: IO[bytes] = gzip.open(ns.output, "wb", compresslevel=ns.gzip_level)  # noqa: SIM115
    else:
        raw = open(ns.output, "wb")  # noqa: SIM115
    with raw:
        w = _CountingWriter(raw)
        info = write_tiled(doc, ns.copies, w, ns.gap_us)  # type: ignore[arg-type]
    info["uncompressed_bytes"] = w.n
    info["output"] = ns.output
    info["seconds"] = round(time.perf_counter() - t0, 2)
    print(json.dumps(info, indent=2), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
