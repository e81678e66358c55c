"""hvd.elastic on a job of fixed membership: the first sync, recovery from a collective that
failed on every rank (restore the last commit, restart Hora, run again), the reset limit, and
ElasticSampler. Runs on each rank."""

import os
import sys

import torch

import hora.torch as hvd
import cases
from cases import case, check, raises


def _mismatch(tag):
    """A collective that fails on every rank: rank 0 offers 3 elements, the others 4."""
    hvd.allreduce(torch.ones(3 if hvd.rank() == 0 else 4), name="elastic.mismatch." + tag)


def _model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


def _flat(model):
    return torch.cat([p.detach().flatten() for p in model.state_dict().values()])


@case
def sync_takes_rank_0s_state():
    model = _model(seed=100 + hvd.rank())  # every rank starts different
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    state = hvd.elastic.TorchState(model, opt, epoch=hvd.rank() * 10, note="rank%d" % hvd.rank())

    @hvd.elastic.run
    def first(state):
        return _flat(state.model), state.epoch, state.note

    params, epoch, note = first(state)
    check((epoch, note) == (0, "rank0"), "attributes after sync: %r %r" % (epoch, note))
    check(torch.equal(params, _flat(_model(seed=100))), "parameters are not rank 0's")
    every = hvd.allgather_object(params.tolist())
    check(all(p == every[0] for p in every), "ranks differ after sync")


@case
def recovers_from_a_failed_collective():
    model = _model(seed=7)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    sampler = hvd.elastic.ElasticSampler(list(range(40)), shuffle=True, seed=3)
    state = hvd.elastic.TorchState(model, opt, train_sampler=sampler, batch=0, attempts=0)
    resets = []
    state.register_reset_callbacks([lambda: resets.append(hvd.size())])
    seen_at_start = []
    commits = []

    @hvd.elastic.run
    def train(state):
        seen_at_start.append((state.batch, _flat(state.model).clone()))
        attempt = len(seen_at_start)
        for state.batch in range(state.batch, 8):
            x = torch.randn(4, 4, generator=torch.Generator().manual_seed(state.batch))
            state.optimizer.zero_grad()
            state.model(x).pow(2).mean().backward()
            state.optimizer.step()
            state.train_sampler.record_batch(state.batch, 4)
            if attempt == 1 and state.batch == 5:
                # Uncommitted work: batch 5's step. The restore must undo it.
                _mismatch("train")
            state.batch += 1
            state.commit()
            commits.append(_flat(state.model).clone())
        return state.batch

    done = train(state)
    check(done == 8, "finished at batch %r" % done)
    check(len(seen_at_start) == 2, "attempts: %d" % len(seen_at_start))
    check(resets == [hvd.size()], "reset callbacks: %r" % resets)
    batch2, params2 = seen_at_start[1]
    check(batch2 == 5, "second attempt started at batch %d, not the committed 5" % batch2)
    check(torch.equal(params2, commits[4]), "second attempt did not start from the last commit")
    every = hvd.allgather_object(_flat(state.model).tolist())
    check(all(p == every[0] for p in every), "ranks differ after recovery")
    check(state.train_sampler.processed_num == 8 * 4 * hvd.size(),
          "sampler counted %d" % state.train_sampler.processed_num)
    check(hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == hvd.size(), "Hora after restart")


def _train(state, steps, fail_at, step):
    """Runs step(state, fail) for state.step in [state.step, steps) under hvd.elastic.run,
    committing after each; `fail` is True once: in the first attempt, at step fail_at.
    Returns (the step it ended at, the step each attempt started at)."""
    attempts = []

    @hvd.elastic.run
    def train(state):
        attempts.append(state.step)
        for state.step in range(state.step, steps):
            step(state, len(attempts) == 1 and state.step == fail_at)
            state.step += 1
            state.commit()
        return state.step

    return train(state), attempts


def _sgd_step(state, before_step=None):
    """One optimizer step on a batch fixed by state.step; before_step() runs between
    backward and step."""
    x = torch.randn(4, 4, generator=torch.Generator().manual_seed(state.step))
    state.optimizer.zero_grad()
    state.model(x).pow(2).mean().backward()
    if before_step is not None:
        before_step()
    state.optimizer.step()


def _recover_in_flight(compression, tag):
    """The failure comes between backward (the gradient allreduces enqueued by the hooks)
    and step: the restart must leave DistributedOptimizer usable (no stale handles)."""
    model = _model(seed=9)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                   named_parameters=model.named_parameters(),
                                   compression=compression)
    state = hvd.elastic.TorchState(model, opt, step=0)
    done, attempts = _train(state, 4, 2, lambda state, fail: _sgd_step(
        state, (lambda: _mismatch("in_flight." + tag)) if fail else None))
    check(done == 4 and attempts == [0, 2], "attempts %r" % attempts)
    every = hvd.allgather_object(_flat(model).tolist())
    check(all(p == every[0] for p in every), "ranks differ after recovery")


@case
def recovers_with_gradient_buckets_in_flight():
    _recover_in_flight(hvd.Compression.none, "buckets")  # the bucket path


@case
def recovers_with_per_parameter_gradients_in_flight():
    _recover_in_flight(hvd.Compression.fp16, "fp16")  # compression: one allreduce each


@case
def recovers_from_a_stall_timeout():
    """Attempt 1: rank 0 submits a tensor the others never submit; the stall timeout
    (HORA_STALL_TIMEOUT_SECONDS, 2 s in this job) aborts the job on every rank (a
    HorovodInternalError), and the restarted job runs the function to its end."""
    def step(state, fail):
        if fail:
            name = "elastic.stall.only0" if hvd.rank() == 0 else "elastic.stall.others"
            hvd.allreduce(torch.ones(2), name=name)
        hvd.allreduce(torch.ones(2), name="elastic.stall.step")

    done, attempts = _train(hvd.elastic.ObjectState(step=0), 3, 1, step)
    check(done == 3 and attempts == [0, 1], "attempts %r" % attempts)


@case
def restart_keeps_the_static_process_sets():
    """A job started with hvd.init(process_sets=[...]): after the restart the same
    ProcessSet objects are registered again and a DistributedOptimizer on one still works."""
    members = [0, 1] if hvd.size() > 2 else [1]  # not the global set (that one is a clone)
    hvd.shutdown()
    pair = hvd.ProcessSet(members)
    hvd.init(process_sets=[pair])
    try:
        model = _model(seed=5)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       named_parameters=model.named_parameters(),
                                       process_set=pair)
        state = hvd.elastic.TorchState(model, opt, step=0)

        def step(state, fail):
            if fail:
                _mismatch("sets")
            if pair.included():
                _sgd_step(state)

        done, attempts = _train(state, 3, 1, step)
        check(done == 3 and attempts == [0, 1], "attempts %r" % attempts)
        check(pair.size() == len(members) and pair.included() == (hvd.rank() in members),
              "the set after restart")
        if pair.included():
            s = hvd.allreduce(torch.ones(1), op=hvd.Sum, process_set=pair, name="sets.after")
            check(s.item() == len(members), "allreduce on the set after restart: %r" % s)
        every = hvd.allgather_object(_flat(model).tolist())
        check(all(every[r] == every[members[0]] for r in members),
              "the set's ranks differ after recovery")
    finally:
        hvd.shutdown()
        hvd.init()


@case
def restore_undoes_uncommitted_changes():
    model = _model(seed=11)
    state = hvd.elastic.TorchState(model, None, step=1)
    committed = _flat(model).clone()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    state.step = 99
    state.restore()
    check(state.step == 1 and torch.equal(_flat(model), committed), "restore kept changes")
    state.step = 2
    state.commit()
    state.step = 3
    state.restore()
    check(state.step == 2, "restore went past the last commit")


@case
def gives_up_after_the_reset_limit():
    os.environ[hvd.elastic.RESET_LIMIT_VAR] = "1"
    attempts = []
    state = hvd.elastic.ObjectState(n=0)

    @hvd.elastic.run
    def always_fails(state):
        attempts.append(1)
        _mismatch("limit.%d" % len(attempts))

    try:
        e = raises(hvd.HorovodInternalError, always_fails, state, contains="giving up after 1")
    finally:
        del os.environ[hvd.elastic.RESET_LIMIT_VAR]
    check(len(attempts) == 2, "ran %d times" % len(attempts))
    check(hvd.elastic.RESET_LIMIT_VAR in str(e), str(e))
    hvd.shutdown()
    hvd.init()  # the job goes on after the refusal


@case
def bad_reset_limit_is_refused():
    os.environ[hvd.elastic.RESET_LIMIT_VAR] = "many"
    try:
        raises(ValueError, hvd.elastic.run(lambda s: None), hvd.elastic.ObjectState(),
               contains=hvd.elastic.RESET_LIMIT_VAR)
    finally:
        del os.environ[hvd.elastic.RESET_LIMIT_VAR]


@case
def sampler_partitions_and_resumes():
    n = hvd.size()
    data = list(range(11))
    s = hvd.elastic.ElasticSampler(data, shuffle=True, seed=5)
    mine = list(s)
    check(len(s) == len(mine) == -(-11 // n), "len %d, %d indices" % (len(s), len(mine)))
    every = hvd.allgather_object(mine)
    union = sorted(i for part in every for i in part)
    check(set(union) == set(data), "indices covered: %r" % union)
    check(len(union) - len(set(union)) == n * len(mine) - 11, "more repeats than padding")
    order = list(s.remaining_indices)  # the epoch's permutation, the same on every rank
    check(hvd.allgather_object(order) == [order] * n, "ranks shuffle differently")
    s.record_batch(0, 2)
    check(s.state_dict() == {"epoch": 0, "processed_num": 2 * n}, str(s.state_dict()))
    t = hvd.elastic.ElasticSampler(data, shuffle=True, seed=5)
    t.load_state_dict(s.state_dict())
    check(t.remaining_indices == order[2 * n:], "resumed at %r" % t.remaining_indices)
    left = {i for part in hvd.allgather_object(list(t)) for i in part}
    check(left == set(order[2 * n:]), "after loading the ranks cover %r" % sorted(left))
    t.set_epoch(1)
    check(t.processed_num == 0 and sorted(t.remaining_indices) == data, "set_epoch")
    check(t.remaining_indices != order, "epoch 1 is shuffled like epoch 0")
    plain = hvd.elastic.ElasticSampler(data, shuffle=False)
    check(list(plain) == (data + data)[hvd.rank():len(plain) * n:n], "unshuffled order")


if __name__ == "__main__":
    cases.run_all(hvd.init, hvd.shutdown, only=sys.argv[1:])
