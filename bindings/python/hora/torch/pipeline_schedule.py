"""The order in which a pipeline stage runs its micro-batches' forwards and backwards.

A stage holds v chunks (v = 1 but for "interleaved"); global chunk g = k * S + s is local chunk
k of stage s (S stages), so a micro-batch visits stage 0, 1, ..., S-1, 0, 1, ... v times. A
task is (kind, micro_batch, local_chunk), kind "F" or "B". Every schedule runs each task once;
F(i, g) needs F(i, g-1)'s output, B(i, g) needs B(i, g+1)'s input gradient.

  gpipe:       every F, then every B (in reverse). Holds M micro-batches' activations.
  1f1b:        stage s runs min(S-s-1, M) F first, then alternates F and B, then the last B
               (PipeDream-flush). Holds at most S-s micro-batches' activations.
  interleaved: Megatron-LM's virtual stages: forwards go in groups of S micro-batches per
               chunk (chunk 0 for micro-batches 0..S-1, chunk 1 for the same ones, ...,
               then the next S micro-batches), backwards likewise with the chunks reversed;
               stage s runs 2(S-s-1) + (v-1)S forwards first, then alternates. M must be a
               multiple of S. The bubble falls from (S-1)/(M+S-1) to (S-1)/(vM+S-1) of the
               step, for v times the messages.

simulate() replays the stages' task lists with blocking receives and sends that never block
(as Pipeline runs them), and returns the makespan and each stage's idle fraction for given
forward/backward costs; it raises if the lists would deadlock. The tests run it over many
(S, v, M); the docs' theory figures come from it.
"""

SCHEDULES = ("gpipe", "1f1b", "interleaved")


def _check(schedule, stages, micro_batches, chunks):
    if schedule not in SCHEDULES:
        raise ValueError("Pipeline: schedule must be one of %s, got %r" % (SCHEDULES, schedule))
    if (chunks > 1) != (schedule == "interleaved"):
        raise ValueError("Pipeline: %d chunks per stage with schedule %r: the interleaved "
                         "schedule, and only it, takes several chunks (virtual stages)"
                         % (chunks, schedule))
    if schedule == "interleaved":
        if stages < 2:
            raise ValueError("Pipeline: the interleaved schedule needs at least 2 stages")
        if micro_batches % stages:
            raise ValueError("Pipeline: the interleaved schedule needs micro_batches a multiple "
                             "of the %d stages, got %d" % (stages, micro_batches))


def tasks(schedule, stage, stages, micro_batches, chunks=1):
    """Stage `stage`'s ordered tasks: a list of (kind, micro_batch, local_chunk)."""
    _check(schedule, stages, micro_batches, chunks)
    m = micro_batches
    if schedule == "gpipe":
        return [("F", i, 0) for i in range(m)] + [("B", i, 0) for i in range(m)]
    if schedule == "1f1b":
        fwd = [("F", i, 0) for i in range(m)]
        bwd = [("B", i, 0) for i in range(m)]
        warmup = min(stages - stage - 1, m)
    else:
        group = stages * chunks

        def pick(k, backward):
            chunk = (k % group) // stages
            return (("B" if backward else "F"), (k // group) * stages + k % stages,
                    chunks - 1 - chunk if backward else chunk)

        total = m * chunks
        fwd = [pick(k, False) for k in range(total)]
        bwd = [pick(k, True) for k in range(total)]
        warmup = min(2 * (stages - stage - 1) + (chunks - 1) * stages, total)
    out = fwd[:warmup]
    for j in range(len(fwd) - warmup):
        out += [fwd[warmup + j], bwd[j]]
    return out + bwd[len(fwd) - warmup:]


def simulate(schedule, stages, micro_batches, chunks=1, forward=1.0, backward=2.0):
    """(makespan, [idle fraction per stage]) of the schedule with every chunk's forward
    costing `forward` / chunks and backward `backward` / chunks, transfers free; or, given
    lists of S * chunks costs, global chunk g's forward costing forward[g] (a cut's measured
    imbalance). Raises RuntimeError naming the stuck stages if the task lists deadlock."""
    per_chunk = isinstance(forward, (list, tuple))
    if per_chunk and not (len(forward) == len(backward) == stages * chunks):
        raise ValueError("simulate: %d forward and %d backward costs for %d chunks" % (
            len(forward), len(backward), stages * chunks))
    lists = [tasks(schedule, s, stages, micro_batches, chunks) for s in range(stages)]
    last = stages * chunks - 1
    done = {}                        # (kind, micro, global chunk) -> finish time
    pos, clock = [0] * stages, [0.0] * stages
    busy = [0.0] * stages
    remaining = sum(len(t) for t in lists)
    while remaining:
        moved = False
        for s in range(stages):
            while pos[s] < len(lists[s]):
                kind, i, k = lists[s][pos[s]]
                g = k * stages + s
                if kind == "F":
                    need = [("F", i, g - 1)] if g > 0 else []
                else:
                    need = [("F", i, g)] + ([("B", i, g + 1)] if g < last else [])
                if any(n not in done for n in need):
                    break
                start = max([clock[s]] + [done[n] for n in need])
                cost = forward if kind == "F" else backward
                cost = cost[g] if per_chunk else cost / chunks
                clock[s] = done[(kind, i, g)] = start + cost
                busy[s] += cost
                pos[s] += 1
                remaining -= 1
                moved = True
        if not moved:
            raise RuntimeError("pipeline schedule %s deadlocks (S=%d, M=%d, v=%d) at %s" % (
                schedule, stages, micro_batches, chunks,
                ["stage %d: %s" % (s, lists[s][pos[s]]) for s in range(stages)
                 if pos[s] < len(lists[s])]))
    span = max(clock)
    return span, [1.0 - b / span for b in busy]


def ideal_bubble(schedule, stages, micro_batches, chunks=1):
    """The schedule's bubble in theory: (S-1)/(vM+S-1) of the step."""
    return (stages - 1.0) / (chunks * micro_batches + stages - 1)
