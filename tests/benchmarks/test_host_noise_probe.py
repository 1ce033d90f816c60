"""benchmarks/scenarios/host_noise_probe.py: the host's steadiness, from /proc and timings."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

SCEN = Path(__file__).resolve().parents[2] / "benchmarks" / "scenarios"
if str(SCEN) not in sys.path:
    sys.path.insert(0, str(SCEN))

import host_noise_probe as hn

STAT = ("cpu  100 0 50 800 10 0 0 40 0 0\n"
        "cpu0 60 0 20 400 5 0 0 15 0 0\n"
        "cpu1 40 0 30 400 5 0 0 25 0 0\n"
        "intr 12345\n")


def test_stat_lines_of_the_machine_and_of_one_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hn, "read", lambda path: STAT)
    assert hn.stat_totals() == [100, 0, 50, 800, 10, 0, 0, 40]
    assert hn.stat_totals(1) == [40, 0, 30, 400, 5, 0, 0, 25]
    assert hn.stat_totals(7) == []


def test_shares_of_the_jiffies_between_two_reads() -> None:
    a = [100, 0, 50, 800, 10, 0, 0, 40]
    b = [130, 0, 60, 850, 10, 0, 0, 50]  # +100 jiffies: 30 user, 10 system, 50 idle, 10 steal
    got = hn.shares(a, b)
    assert got["user"] == 30.0 and got["system"] == 10.0
    assert got["idle"] == 50.0 and got["steal"] == 10.0
    assert hn.shares([], b) == {}


def test_the_core_a_process_last_ran_on(monkeypatch: pytest.MonkeyPatch) -> None:
    # /proc/PID/stat: field 39 (processor) is the 37th after the ")" that ends the name,
    # which may itself hold spaces and parentheses
    tail = " ".join(["S"] + [str(i) for i in range(4, 39)] + ["11", "0"])  # fields 3-40
    monkeypatch.setattr(hn, "read", lambda path: f"4242 (py (x) y) {tail}")
    assert hn.cores_of(4242) == {11}
    monkeypatch.setattr(hn, "read", lambda path: "")
    assert hn.cores_of(4242) == set()


def test_spread_and_pins() -> None:
    assert hn.spread([2.0, 1.0, 1.5]) == {"median": 1.5, "min": 1.0, "max": 2.0,
                                          "max_over_min": 2.0}
    assert hn.spread([]) == {}
    assert hn.parse_pin("2-5") == {2, 3, 4, 5}
    assert hn.parse_pin("3") == {3}


def test_a_run_without_programs_writes_its_host_facts(tmp_path: Path, capsys: Any) -> None:
    out = tmp_path / "o"
    assert hn.main(["--out", str(out), "--programs", "", "--core-rounds", "1",
                    "--series-seconds", "0.3", "--series-cpu", "0"]) == 0
    import json

    got = json.loads((out / "host_noise.json").read_text())
    assert got["host"]["cpus"] and got["programs"] == {}
    assert all(len(v) == 1 and v[0][0] > 0 for v in got["core_loop_s_steal"].values())
    assert got["series"] and all(x[1] > 0 for x in got["series"])
