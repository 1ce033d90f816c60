"""Two more steps for the capture-overhead benchmarks (``overhead.make_workload``: ``rnn`` and
``conv``), the two kinds of program issue 17 measured ``stepscope record`` on:

  rnn   launch-heavy: an LSTM cell written out in small ops (two matmuls, adds, sigmoids,
        tanhs, products per time step), 100 time steps, batch 64, hidden 256, forward and
        backward and an SGD step: roughly 4,000 small kernels per step (an estimate;
        api_records_check.py counts them). The host's launches are the step; nothing is read
        back. (Issue 17: "launch-heavy RNN cell", 34.9 ms plain on an
        H100, x1.27 under ``stepscope record``, x1.53 under torch.profiler CUDA only.)
  conv  GPU-bound: an fp32 conv net (cuDNN, its TF32 default) of 11 convolutions with batch
        norm, training with SGD and momentum, the loss read every step; the batch is the
        smallest of a list whose step reaches ``target_ms`` (as ``gpt_step`` picks its
        batch). (Issue 17: "GPU-bound conv net", 32.3 ms plain, x1.006 under record.)
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any


def _device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"  # cpu: a smoke test of the script


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def rnn_step(seq: int = 100, batch: int = 64, hidden: int = 256) -> Callable[[], None]:
    """One training step of an LSTM cell unrolled over ``seq`` time steps, in small ops."""
    import torch

    torch.manual_seed(0)
    dev = _device()
    wx = torch.nn.Parameter(torch.randn(hidden, 4 * hidden, device=dev) * 0.02)
    wh = torch.nn.Parameter(torch.randn(hidden, 4 * hidden, device=dev) * 0.02)
    bias = torch.nn.Parameter(torch.zeros(4 * hidden, device=dev))
    head = torch.nn.Linear(hidden, 1).to(dev)
    opt = torch.optim.SGD([wx, wh, bias, *head.parameters()], lr=1e-3)
    xs = torch.randn(seq, batch, hidden, device=dev)

    def step() -> None:
        h = torch.zeros(batch, hidden, device=dev)
        c = torch.zeros(batch, hidden, device=dev)
        for t in range(seq):
            gates = xs[t] @ wx + h @ wh + bias
            i, f, g, o = gates.chunk(4, 1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
        loss = head(h).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def conv_step(target_ms: float = 25.0, batch: int = 0) -> tuple[Callable[[], None], int]:
    """A GPU-bound fp32 conv-net training step and its batch (``batch`` 0: the smallest reaching
    ``target_ms``)."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    dev = _device()

    def block(cin: int, cout: int, stride: int = 1) -> list[torch.nn.Module]:
        return [torch.nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False),
                torch.nn.BatchNorm2d(cout), torch.nn.ReLU(inplace=True)]

    layers: list[Any] = [*block(3, 64), *block(64, 64), *block(64, 128, 2), *block(128, 128),
                         *block(128, 128), *block(128, 256, 2), *block(256, 256),
                         *block(256, 256), *block(256, 512, 2), *block(512, 512),
                         *block(512, 512)]
    model = torch.nn.Sequential(*layers, torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                torch.nn.Linear(512, 1000)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def make(n: int) -> Callable[[], None]:
        x = torch.randn(n, 3, 96, 96, device=dev)
        y = torch.randint(0, 1000, (n,), device=dev)

        def step() -> None:
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            loss.item()

        return step

    ms = 0.0
    for n in ((batch,) if batch else (8, 16, 32, 48, 64, 96, 128, 192, 256)):
        fn = make(n)
        for _ in range(3):
            fn()
        _sync()
        t0 = time.perf_counter()
        for _ in range(5):
            fn()
        _sync()
        ms = (time.perf_counter() - t0) / 5 * 1e3
        if ms >= target_ms or dev == "cpu":
            break
    print(f"conv: batch {n}, {ms:.1f} ms/step", file=sys.stderr)
    return fn, n
