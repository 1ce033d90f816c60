"""Which frameworks a run's program used, from its manifest: what each captured process had
imported, the step hook that paced its steps, or what an imported trace's source says."""

from __future__ import annotations

from typing import Any

from stepscope.store.manifest import Manifest

# the frameworks a run can name (what a captured process imported that has fixes of its own)
KNOWN = ("pytorch", "jax", "tensorflow", "cupy", "triton", "numba")

# the step hooks of a recorded run (capture.hooks) that tell which framework drove the steps: a
# JAX program that imported torch for its DataLoader still reads the JAX fixes
STEP_HOOK_FRAMEWORK = {"jax.profiler.StepTraceAnnotation": "jax",
                       "tf.profiler.experimental.Trace(step_num=...)": "tensorflow",
                       "torch.optim.Optimizer.step": "pytorch"}


def _dig(node: Any, *keys: str) -> Any:
    for k in keys:
        node = node.get(k) if isinstance(node, dict) else None
    return node


def run_frameworks(manifest: Manifest) -> tuple[str, ...]:
    """The frameworks the run's program used: what each captured process had imported
    (``settings.ranks.rank<N>.frameworks``; first the one whose step hook paced the steps),
    PyTorch for a torch.profiler (Kineto) trace, JAX or TensorFlow for an XSpace profile (what
    its planes showed: ``source.details.files[].framework``); empty where the source does not
    say."""
    if manifest.source.kind == "kineto":
        return ("pytorch",)
    out: list[str] = []
    files = manifest.source.details.get("files") if manifest.source.kind == "xspace" else None
    for f in files if isinstance(files, list) else ():
        fw = f.get("framework") if isinstance(f, dict) else None
        if fw in ("jax", "tensorflow") and fw not in out:
            out.append(fw)
    ranks = manifest.settings.get("ranks")
    if isinstance(ranks, dict):
        for v in ranks.values():  # the framework whose step hook paced the steps goes first
            fw = STEP_HOOK_FRAMEWORK.get(str(_dig(v, "host", "samplers", "steps", "hook")))
            if fw is not None and fw not in out:
                out.append(fw)
        for v in ranks.values():
            fws = v.get("frameworks") if isinstance(v, dict) else None
            for fw in fws if isinstance(fws, list) else ():
                if isinstance(fw, str) and fw in KNOWN and fw not in out:
                    out.append(fw)
    return tuple(out)


__all__ = ["KNOWN", "STEP_HOOK_FRAMEWORK", "run_frameworks"]
