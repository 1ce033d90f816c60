"""JAX data parallelism in ONE process over every local GPU (``jax.shard_map`` over a 1-D mesh;
no torchrun): an fp32 MLP (4 x 8192x8192 tanh layers, 1.07 GB of parameters, replicated) on a
batch of 1024 rows per GPU, SGD. Planted: after the whole backward all gradients are flattened
into one fp32 vector and ``psum``'ed as ONE collective, which every update waits for and no
compute can overlap. ``--fix``: one ``psum`` per layer in bf16 (half the bytes; XLA can start
each as soon as its gradient is ready). Expected top finding: ``exposed_communication``.

    python3 benchmarks/multigpu/jax_psum.py [--fix] [--compare] [--steps N | --seconds S]

Without JAX it says so and exits 3. Without a GPU it runs on JAX's CPU devices (``--cpu-devices
N`` makes N of them). ``--profile DIR`` writes a ``jax.profiler`` trace (TensorBoard/Perfetto
format; stepscope does not import it). Prints one JSON line like the torch programs.
"""

import os

for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
               ("NVSHMEM_DISABLE_NVLS", "1"), ("XLA_PYTHON_CLIENT_PREALLOCATE", "false")):
    os.environ.setdefault(_k, _v)  # NVLink multicast off, before jax is imported

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

HERE = Path(__file__).resolve().parent
for _p in (str(HERE), str(HERE.parent / "scenarios")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import timing  # noqa: E402  (torch-free)
from registry import EXIT_SKIPPED, HOOK_STEPS, JSON_KEY  # noqa: E402

NAME = "jax_psum"
LR = 1e-4


def load_jax(cpu_devices: int | None) -> Any:
    if cpu_devices:
        flag = f"--xla_force_host_platform_device_count={cpu_devices}"
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + flag).strip()
    try:
        import jax
    except Exception as exc:  # noqa: BLE001 - ImportError or a broken CUDA plugin
        raise timing.SkipScenario(f"needs JAX ({type(exc).__name__}: {exc})") from None
    return jax


def shard_map_fn(jax: Any) -> Any:
    """``jax.shard_map`` (JAX >= 0.6) or ``jax.experimental.shard_map.shard_map``."""
    sm = getattr(jax, "shard_map", None)
    if sm is not None:
        return sm
    from jax.experimental.shard_map import shard_map

    return shard_map


def devices(jax: Any) -> list[Any]:
    try:
        gpus = jax.devices("gpu")
    except Exception:  # noqa: BLE001 - RuntimeError: no GPU backend
        gpus = []
    return list(gpus) if gpus else list(jax.devices())


def loss_fn(jax: Any, ps: list[Any], xb: Any) -> Any:
    h = xb
    for w in ps:
        h = jax.numpy.tanh(h @ w)
    return jax.numpy.mean(h * h)


def step_function(jax: Any, mesh: Any, n: int, fixed: bool) -> Any:
    """The jitted data-parallel SGD step ``(params, x) -> (params, mean loss)``: per device the
    loss and gradients of its shard of the batch, gradients averaged with explicit ``psum``s.

    ``check_vma=False`` (``check_rep=False`` in older JAX): with the check on, differentiating
    w.r.t. the replicated parameters inside ``shard_map`` inserts its own ``psum`` of the
    gradients, and the planted collective would be a second one."""
    import numpy as np
    from jax.sharding import PartitionSpec as P

    jnp = jax.numpy

    def local(ps: list[Any], xb: Any) -> tuple[list[Any], Any]:
        loss, grads = jax.value_and_grad(lambda q, b: loss_fn(jax, q, b))(ps, xb)
        if fixed:  # one psum per layer, bf16: XLA may start each when its gradient is ready
            grads = [jax.lax.psum(g.astype(jnp.bfloat16), "d").astype(jnp.float32) / n
                     for g in grads]
        else:  # the plant: one flat fp32 psum after the whole backward
            flat = jnp.concatenate([g.reshape(-1) for g in grads])
            flat = jax.lax.psum(flat, "d") / n
            offs = np.cumsum([0, *[g.size for g in grads]])
            grads = [flat[int(a):int(b)].reshape(g.shape)
                     for a, b, g in zip(offs[:-1], offs[1:], grads)]
        new = [p - LR * g for p, g in zip(ps, grads)]
        return new, jax.lax.psum(loss, "d") / n

    sm = shard_map_fn(jax)
    kw = dict(mesh=mesh, in_specs=(P(), P("d")), out_specs=(P(), P()))
    try:
        mapped = sm(local, check_vma=False, **kw)
    except TypeError:  # jax.experimental.shard_map: check_rep
        mapped = sm(local, check_rep=False, **kw)
    return jax.jit(mapped, donate_argnums=0)


def build(fixed: bool, jax: Any, args: argparse.Namespace) -> tuple[timing.Step, Any]:
    """The step, and what returns its latest loss (to wait for the step before)."""
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    devs = devices(jax)[:args.devices] if args.devices else devices(jax)
    gpu = devs[0].platform == "gpu"
    n = len(devs)
    batch, width, layers = (1024, 8192, 4) if gpu else (16, 64, 2)
    batch, width, layers = args.batch or batch, args.width or width, args.layers or layers
    mesh = Mesh(np.array(devs), ("d",))
    rep, shard = NamedSharding(mesh, P()), NamedSharding(mesh, P("d"))
    rng = np.random.default_rng(17)
    scale = np.float32(1.0 / np.sqrt(width))
    params = [jax.device_put(rng.standard_normal((width, width), dtype=np.float32) * scale, rep)
              for _ in range(layers)]
    x = jax.device_put(rng.standard_normal((batch * n, width), dtype=np.float32), shard)

    step_fn = step_function(jax, mesh, n, fixed)
    state: dict[str, Any] = {"params": params, "loss": None}

    def step() -> None:
        state["params"], state["loss"] = step_fn(state["params"], x)

    def sync() -> None:
        jax.block_until_ready(state["params"])

    def lag() -> Any:
        return state["loss"]

    step()  # compile outside any timing
    sync()
    return timing.Step(step, sync=sync, info={
        "devices": n, "platform": devs[0].platform, "batch_per_device": batch, "width": width,
        "layers": layers, "grad_mb": round(layers * width * width * 4 / 2**20, 1),
        "psum": "per layer, bf16" if fixed else "one flat fp32"}), lag


def _times(jax: Any, sv: tuple[timing.Step, Any], n: int | None,
           seconds: float | None) -> list[float]:
    """Per-step times (ms) with one step in flight: after step i is dispatched the host waits
    for step i-1's loss (JAX dispatches asynchronously; the queue stays one step deep, as the
    torch programs' in-flight bound keeps it two)."""
    step, lag = sv
    out: list[float] = []
    end = time.perf_counter() + seconds if seconds is not None else None
    assert step.sync is not None
    step.sync()
    t0 = time.perf_counter()
    while (n is not None and len(out) < n) or (end is not None and time.perf_counter() < end):
        prev = lag()
        step()
        jax.block_until_ready(prev)
        t1 = time.perf_counter()
        out.append((t1 - t0) * 1e3)
        t0 = t1
    step.sync()
    return out[1:] if len(out) > 1 else out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=NAME, description=__doc__.split("\n\n")[0])
    ap.add_argument("--fix", action="store_true", help="run the fixed variant")
    ap.add_argument("--steps", type=int, default=None,
                    help=f"steps to time (default {HOOK_STEPS}); --compare: per block (10)")
    ap.add_argument("--seconds", type=float, default=None, help="run for S seconds instead")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first (5)")
    ap.add_argument("--compare", action="store_true",
                    help="time baseline and fixed interleaved in this process")
    ap.add_argument("--rounds", type=int, default=3, help="--compare: rounds (3)")
    ap.add_argument("--profile", default=None, metavar="DIR",
                    help="then trace 5 steps with jax.profiler into DIR")
    ap.add_argument("--cpu-devices", type=int, default=None,
                    help="without a GPU: make N JAX CPU devices")
    ap.add_argument("--devices", type=int, default=None,
                    help="use the first N devices (default: all local GPUs)")
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--width", type=int, default=None)
    ap.add_argument("--layers", type=int, default=None)
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    try:
        jax = load_jax(args.cpu_devices)
        base_sv = build(args.fix if not args.compare else False, jax, args)
        fix_sv = build(True, jax, args) if args.compare else None
    except timing.SkipScenario as exc:
        print(f"{NAME}: cannot run here: {exc}", file=sys.stderr, flush=True)
        return EXIT_SKIPPED
    base, fix = base_sv[0], (fix_sv[0] if fix_sv else None)
    line: dict[str, Any] = {JSON_KEY: 1, "program": NAME, "world_size": base.info["devices"],
                            "backend": "xla", "device": base.info["platform"],
                            "jax": jax.__version__}
    if fix is not None:
        t = timing.time_plain(base, fix, rounds=args.rounds, steps=args.steps or 10,
                              warmup=args.warmup,
                              log=lambda s: print(f"{NAME}: {s.strip()}", flush=True))
        line.update(variant="compare", base_ms=round(t.baseline_ms, 4),
                    fix_ms=round(t.fixed_ms, 4), saving_ms=round(t.saving_ms, 4),
                    saving_pct=round(t.saving_pct, 2), median_step_ms=round(t.baseline_ms, 4),
                    timing=t.to_dict(), info={"baseline": base.info, "fixed": fix.info})
    else:
        n = args.steps if args.steps is not None or args.seconds is not None else HOOK_STEPS
        _times(jax, base_sv, args.warmup, None)
        ts = _times(jax, base_sv, n, args.seconds)
        line.update(variant="fix" if args.fix else "base", steps=len(ts),
                    median_step_ms=round(statistics.median(ts), 4) if ts else None,
                    mean_step_ms=round(statistics.fmean(ts), 4) if ts else None,
                    info=base.info)
    if args.profile:
        traced = fix_sv if (args.fix and fix_sv is not None) else base_sv
        out = Path(args.profile) / f"{NAME}.process0"
        out.mkdir(parents=True, exist_ok=True)
        with jax.profiler.trace(str(out)):
            _times(jax, traced, 5, None)
        line["profile"] = {"dir": str(out), "format": "jax.profiler (xplane)"}
    line["wall_s"] = round(time.perf_counter() - t_start, 2)
    print(json.dumps(line, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
