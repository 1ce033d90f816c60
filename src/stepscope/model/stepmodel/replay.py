"""Replay a step model: a small discrete-event pass that predicts the step time.

The step is replayed ``COPIES`` times back to back, as a training loop runs it: every host
thread of copy ``k`` starts when the host threads of copy ``k-1`` ended, and the GPU streams
carry on from where copy ``k-1`` left them (the host may run ahead of the GPU). Within a copy
the host events are taken in their measured order (a causal order: an op's launch, its stream
predecessor and the ops a sync waits for all come before it):

* a host event starts when its thread is free (and, for the first event after another
  thread's, that event has ended) plus its ``pre`` host work;
* each GPU op it issues starts at ``max(launch start + lat, stream predecessor end + gap,
  end of its cross-stream dependency)`` and lasts its duration;
* a ``BLOCK`` event ends at ``max(start, end of the awaited stream(s)' last op so far) + own``
  (or, waiting ``back`` steps back, at the end of that copy's GPU work);
  any other event ends at ``start + own``;
* each thread ends ``tail`` after its last event; the copy ends when its host threads and its
  GPU ops have all ended.

The predicted step is the copies' steady period: ``(end of the last copy - end of copy
FIRST_STEADY) / (COPIES - 1 - FIRST_STEADY)`` (0-based), so a host that runs ahead settles
before the period is measured. Busy time per resource is taken on the last copy.
"""

from __future__ import annotations

from dataclasses import dataclass

from stepscope.model.stepmodel.steps import WAIT_ALL, WAIT_NONE, HostKind, StepModel

COPIES = 6
FIRST_STEADY = 2  # copies 0..1 let the host run ahead and the streams fill


@dataclass(frozen=True)
class Replay:
    step_ns: float  # the predicted step (the steady period of the copies)
    host_busy_ns: tuple[int, ...]  # per thread: host work and call costs (no waits)
    host_wait_ns: tuple[int, ...]  # per thread: time blocked on the GPU or on input
    stream_busy_ns: tuple[int, ...]  # per stream: sum of op durations
    gpu_busy_ns: int  # union over streams, last copy

    @property
    def step_ms(self) -> float:
        return self.step_ns / 1e6


def replay(m: StepModel, copies: int = COPIES) -> Replay:
    """The predicted step time and per-resource busy time of ``m`` (module docstring)."""
    h, o = m.host, m.ops
    n_threads, n_streams = max(len(m.threads), 1), max(len(m.streams), 1)
    thread, kind, pre, own = (h.thread.tolist(), h.kind.tolist(), h.pre.tolist(),
                              h.own.tolist())
    wait, back, after = h.wait.tolist(), h.back.tolist(), h.after.tolist()
    ev_end = [0.0] * len(kind)
    trig, stream, dur = o.trigger.tolist(), o.stream.tolist(), o.dur.tolist()
    lat, gap, dep = o.lat.tolist(), o.gap.tolist(), o.dep.tolist()
    tail = m.tail.tolist() + [0] * (n_threads - len(m.tail))
    # the ops each event issues: a range of the op arrays (sorted by trigger)
    first = [0] * (len(kind) + 1)
    for t in trig:
        first[t + 1] += 1
    for i in range(len(kind)):
        first[i + 1] += first[i]
    stream_end = [0.0] * n_streams
    op_start = [0.0] * len(dur)
    op_end = [0.0] * len(dur)
    ends: list[float] = []
    gpu_ends: list[float] = []  # per copy: when its last GPU op ended
    origin = 0.0
    busy = [0] * n_threads
    waited = [0] * n_threads
    BLOCK, INPUT = int(HostKind.BLOCK), int(HostKind.INPUT)
    blocking = [k == BLOCK and w != WAIT_NONE for k, w in zip(kind, wait)]
    is_input = [k == INPUT for k in kind]
    n_ev = len(kind)
    for c in range(copies):
        last = c == copies - 1
        clock = [origin] * n_threads
        gpu_end = origin
        for e in range(n_ev):
            t = thread[e]
            start = clock[t]
            a = after[e]
            if a >= 0 and ev_end[a] > start:
                start = ev_end[a]
            start += pre[e]
            for j in range(first[e], first[e + 1]):
                st = stream[j]
                s = start + lat[j]
                q = stream_end[st] + gap[j]
                if q > s:
                    s = q
                d = dep[j]
                if d >= 0 and op_end[d] > s:
                    s = op_end[d]
                op_start[j] = s
                fin = s + dur[j]
                op_end[j] = fin
                stream_end[st] = fin
                if fin > gpu_end:
                    gpu_end = fin
            end = start + own[e]
            if blocking[e]:
                b = back[e]
                if b > 0:
                    w = gpu_ends[c - b] if c - b >= 0 else 0.0
                else:
                    w = max(stream_end) if wait[e] == WAIT_ALL else stream_end[wait[e]]
                if w > start:
                    end = w + own[e]
            if last:
                if is_input[e]:
                    busy[t] += pre[e]
                    waited[t] += own[e]
                else:
                    busy[t] += pre[e] + own[e]
                    waited[t] += int(end - start - own[e])
            clock[t] = end
            ev_end[e] = end
        for t in range(n_threads):
            clock[t] += tail[t]
            if last:
                busy[t] += tail[t]
        origin = max(clock)
        gpu_ends.append(gpu_end)
        ends.append(max(origin, gpu_end))
    per = copies - 1 - FIRST_STEADY
    step = (ends[-1] - ends[FIRST_STEADY]) / per if per > 0 else ends[-1]
    sb = [0] * n_streams
    for j in range(len(dur)):
        sb[stream[j]] += dur[j]
    return Replay(step_ns=step, host_busy_ns=tuple(busy), host_wait_ns=tuple(waited),
                  stream_busy_ns=tuple(sb), gpu_busy_ns=_union(op_start, op_end))


def _union(s: list[float], e: list[float]) -> int:
    total, cur_s, cur_e = 0.0, None, 0.0
    for a, b in sorted(zip(s, e)):
        if cur_s is None or a > cur_e:
            if cur_s is not None:
                total += cur_e - cur_s
            cur_s, cur_e = a, b
        else:
            cur_e = max(cur_e, b)
    if cur_s is not None:
        total += cur_e - cur_s
    return int(total)


__all__ = ["COPIES", "Replay", "replay"]
