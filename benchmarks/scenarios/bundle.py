"""record_suite.py's bundle: what a GPU suite sends back to be re-scored anywhere.

``bundle.tar.gz`` (then ``bundle-2.tar.gz``, ... up to ``parts``): per-scenario results, the
report JSONs of both paths and the logs first, then the torch.profiler traces, the JAX
XSpace traces (where record_suite keeps them, ``xplane/``) and the recorded runs while each file stays under ``limit_mb`` (the device machine returns at most 8
files of 16 MiB); what does not fit is listed in ``left_out``. ``unpack`` lays the parts out
again as the suite folder had them (``rescore_remedies.py`` re-advises the traces and runs).
"""

from __future__ import annotations

import tarfile
from pathlib import Path
from typing import Any


def tree_bytes(path: Path) -> int:
    if not path.exists():
        return 0
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def part_name(i: int) -> str:
    return "bundle.tar.gz" if i == 1 else f"bundle-{i}.tar.gz"


def bundle_items(out: Path, names: list[str]) -> tuple[list[Path], list[tuple[str, Path]]]:
    """(small files always packed, (label, path) of traces and runs packed while they fit)."""
    first: list[Path] = [out / "scenarios" / f"{n}.json" for n in names]
    for n in names:
        first += [out / "rec" / f"{n}{s}" for s in (".report.json", ".log", ".report.advise.log")]
        first.append(out / "torch" / "runs" / f"{n}.report.json")
        first += sorted((out / "programs").glob(f"{n}.*.log"))  # --program-timing's runs
    later: list[tuple[str, Path]] = [(f"trace {n}", out / "torch" / "traces" /
                                      f"{n}.pt.trace.json.gz") for n in names]
    later += [(f"xplane {n}", out / "xplane" / f"{n}.xplane.pb.gz") for n in names]  # JAX
    later += [(f"run {n}", out / "rec" / n) for n in names]
    return [p for p in first if p.is_file()], [(lb, p) for lb, p in later if p.exists()]


def pack_bundle(out: Path, results: list[dict[str, Any]], limit_mb: float,
                parts: int = 1) -> dict[str, Any]:
    """Pack ``out`` into at most ``parts`` tarballs of at most ``limit_mb`` each (sizes before
    compression), small files first (module doc)."""
    limit = int(limit_mb * 2**20)
    first, later = bundle_items(out, [r["scenario"] for r in results])
    for i in range(1, 64):  # stale parts of an earlier pack
        (out / part_name(i)).unlink(missing_ok=True)
    paths = [out / part_name(1)]
    tar = tarfile.open(paths[0], "w:gz", compresslevel=6)  # noqa: SIM115 - closed below
    total = used = 0
    included: list[str] = []
    left_out: list[str] = []
    try:
        for p in first:
            tar.add(p, arcname=str(p.relative_to(out)))
            used += p.stat().st_size
        for label, p in later:
            size = tree_bytes(p)
            if used + size > limit and used > 0 and len(paths) < parts and size <= limit:
                tar.close()
                paths.append(out / part_name(len(paths) + 1))
                tar = tarfile.open(paths[-1], "w:gz", compresslevel=6)  # noqa: SIM115
                total += used
                used = 0
            if used + size > limit:
                left_out.append(label)
                continue
            tar.add(p, arcname=str(p.relative_to(out)))
            used += size
            included.append(label)
    finally:
        tar.close()
    total += used
    return {"path": str(paths[0]), "parts": [str(p) for p in paths],
            "bytes": sum(p.stat().st_size for p in paths), "unpacked_bytes": total,
            "included": included, "left_out": left_out}


def unpack(sources: list[Path], dest: Path) -> list[Path]:
    """Every bundle part found in ``sources`` (tarballs, or folders holding ``bundle*.tar.gz``)
    extracted into ``dest``; returns the parts read."""
    found: list[Path] = []
    for s in sources:
        found += sorted(s.glob("bundle*.tar.gz")) if s.is_dir() else [s]
    dest.mkdir(parents=True, exist_ok=True)
    for f in found:
        with tarfile.open(f) as tar:
            tar.extractall(dest, filter="data")
    return found
