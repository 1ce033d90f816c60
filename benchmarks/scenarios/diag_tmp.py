"""Temporary diagnostics (device): dataloader steady state; cpu_ops stability."""
import statistics
import sys
import time

sys.path.insert(0, "benchmarks/scenarios")
import common
import cpu_ops_midstep
import dataloader_bound
import torch

dev = "cuda"
def blk(step, m):
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(m): step()
    torch.cuda.synchronize(); return (time.perf_counter() - t) * 1e3 / m
b = common.Runner(common.as_step(cpu_ops_midstep.build(False, dev)), dev, 2)
for _ in range(5): b()
print("cpu_ops untraced blocks", [round(blk(b, 6), 2) for _ in range(8)])
f = common.as_step(dataloader_bound.build(True, dev)); rf = common.Runner(f, dev, 2)
for _ in range(40): rf()
torch.cuda.synchronize(); time.sleep(1)
times = []
for i in range(150):
    t = time.perf_counter(); rf(); times.append((time.perf_counter() - t) * 1e3)
torch.cuda.synchronize()
print("dataloader fixed ms/step: 0-32", round(statistics.mean(times[:32]), 2), "32-70", round(statistics.mean(times[32:70]), 2), "70-150", round(statistics.mean(times[70:]), 2), f.info)
f.close()
