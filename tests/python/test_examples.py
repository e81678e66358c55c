"""The examples run end to end under horarun (shortened by their flags)."""

import os

import pytest

import harness

EXAMPLES = os.path.join(harness.REPO, "examples")


def run_example(np, script, args, timeout=300):
    path = os.path.join(EXAMPLES, script)
    return harness.run_job(np, path, args, timeout=timeout)


def rank0(job):
    return "\n".join(job.lines.get(0, []))


def check_trained_and_identical(job):
    """Every rank's loss on its fixed validation batch fell, and every rank printed the same
    parameter digest (read here from each rank's own output, apart from the job's check)."""
    digests = {}
    for r in range(job.np):
        lines = job.lines.get(r, [])
        assert any("validation loss of this rank's batch" in l and "it fell" in l
                   for l in lines), "rank %d: loss did not fall\n%s" % (r, job.tail())
        d = [l.split()[-1] for l in lines if l.startswith("parameters sha256 ")]
        assert len(d) == 1, "rank %d: %d digest lines\n%s" % (r, len(d), job.tail())
        digests[r] = d[0]
    assert len(set(digests.values())) == 1, "parameters differ across ranks: %s" % digests


@pytest.mark.parametrize("np", [2, 3])
def test_gpt_char_lm(np):
    job = run_example(np, "gpt_char_lm.py", ["--steps", "6", "--log-every", "3",
                                             "--sample-chars", "40", "--batch-size", "4"])
    out = rank0(job)
    assert job.rc == 0, job.tail()
    assert "step    6/6  loss" in out and "samples/s" in out, out
    assert "---- sample ----" in out, out
    assert "PASS: every rank holds identical parameters" in out, out
    check_trained_and_identical(job)


def test_gpt_char_lm_fp16_and_accumulation():
    job = run_example(2, "gpt_char_lm.py", ["--steps", "4", "--log-every", "2",
                                            "--sample-chars", "10", "--batch-size", "4",
                                            "--fp16-allreduce", "--backward-passes-per-step",
                                            "2"])
    assert job.rc == 0 and "PASS: every rank" in rank0(job), job.tail()
    check_trained_and_identical(job)


def test_synthetic_benchmark():
    job = run_example(2, "pytorch_synthetic_benchmark.py", [
        "--no-cuda", "--model", "resnet18", "--batch-size", "2", "--image-size", "32",
        "--num-warmup-batches", "1", "--num-batches-per-iter", "1", "--num-iters", "2",
        "--fp16-allreduce"])
    out = rank0(job)
    assert job.rc == 0, job.tail()
    for text in ("Model: resnet18", "Batch size: 2", "Number of CPUs: 2", "Iter #1:",
                 "Img/sec per CPU: ", "Total img/sec on 2 CPU(s): "):
        assert text in out, out


def test_synthetic_benchmark_with_adasum():
    job = run_example(2, "pytorch_synthetic_benchmark.py",
                      ["--no-cuda", "--use-adasum", "--model", "resnet18", "--batch-size", "2",
                       "--image-size", "32", "--num-warmup-batches", "1",
                       "--num-batches-per-iter", "1", "--num-iters", "2"], timeout=240)
    out = rank0(job)
    assert job.rc == 0, job.tail()
    assert "Total img/sec on 2 CPU(s): " in out, out
