"""Horovod's own PyTorch examples (examples/horovod/: only the import changed) under
`horarun`, on small data sets in their own formats made here by examples/horovod/make_data.py
(MNIST's IDX files, an ImageFolder tree of JPEGs; nothing is downloaded).

The ranks run /opt/hora/examples/bin/python (tools/setup_examples.sh: Debian's torch 1.13 and
torchvision 0.14, with tensorboard, tqdm and filelock, which the examples import). torch 2.x
has no torchvision here (PyPI's newest torchvision is built for an older torch), so these run
on torch 1.13 only.
"""

import math
import os
import re
import subprocess

import pytest

import harness

EXAMPLES = os.path.join(harness.REPO, "examples", "horovod")
VENV = os.environ.get("HORA_EXAMPLES_VENV", "/opt/hora/examples")
PYTHON = os.path.join(VENV, "bin", "python")


def python():
    if not os.path.exists(PYTHON):
        raise RuntimeError("%s is missing: run tools/setup.sh (tools/setup_examples.sh)" % PYTHON)
    return PYTHON


def make_data(what, root, *args):
    subprocess.run([python(), os.path.join(EXAMPLES, "make_data.py"), what, root] + list(args),
                   check=True, stdout=subprocess.PIPE, universal_newlines=True)


def run(np, script, args, home, timeout=300):
    """`home`: $HOME of the ranks (pytorch_mnist.py locks ~/.horovod_lock; under Bazel's
    sandbox, or CI's HOME=/nonexistent, the real one is not writable)."""
    return harness.run_job(np, os.path.join(EXAMPLES, script), args, timeout=timeout,
                           python=python(), extra_env={"HOME": str(home)})


def ok(job):
    assert job.rc == 0 and not job.timed_out, "rc=%s timed_out=%s\n%s" % (
        job.rc, job.timed_out, job.tail())
    for r in range(job.np):
        assert not any("Traceback" in l for l in job.lines.get(r, [])), job.tail()


_TRAIN = re.compile(r"^Train Epoch: (\d+) \[\d+/(\d+) \(\d+%\)\]\tLoss: (\S+)")
_TEST = re.compile(r"^Test set: Average loss: (\S+), Accuracy: (\S+)%")


@pytest.mark.parametrize("np,flags", [(2, []), (3, []),
                                      (2, ["--fp16-allreduce", "--use-adasum"])],
                         ids=["np2", "np3", "np2-fp16-adasum"])
def test_pytorch_mnist(np, flags, tmp_path):
    """pytorch_mnist.py reads the IDX files through torchvision.datasets.MNIST (its download
    skipped: the files are there), trains 4 epochs: every rank prints finite training losses
    over its 1/np of the 600 images, rank 0's test loss (averaged over ranks by hvd.allreduce)
    falls from the first epoch to the last and its accuracy beats chance (10 %)."""
    data = str(tmp_path / "data")
    make_data("mnist", data, "--train", "600", "--test", "200")
    job = run(np, "pytorch_mnist.py", ["--data-dir", data, "--epochs", "4", "--batch-size", "16",
                                       "--lr", "0.05", "--log-interval", "5", "--no-cuda"]
              + flags, tmp_path)
    ok(job)
    for r in range(np):
        train = [_TRAIN.match(l) for l in job.lines.get(r, [])]
        train = [m for m in train if m]
        epochs = sorted({int(m.group(1)) for m in train})
        assert epochs == [1, 2, 3, 4], "rank %d: epochs %s\n%s" % (r, epochs, job.tail())
        # DistributedSampler: each rank sees ceil(600 / np) images
        assert {int(m.group(2)) for m in train} == {math.ceil(600 / np)}, job.tail()
        assert all(math.isfinite(float(m.group(3))) for m in train), job.tail()
    tests = [m for m in map(_TEST.match, job.lines.get(0, [])) if m]
    assert len(tests) == 4, job.tail()
    losses = [float(m.group(1)) for m in tests]
    accuracy = [float(m.group(2)) for m in tests]
    assert all(math.isfinite(l) for l in losses), losses
    assert losses[-1] < losses[0], "test loss did not fall: %s" % losses
    assert accuracy[-1] > 20.0, "accuracy %s" % accuracy


def _tqdm_losses(job, phase):
    """{epoch: the last loss tqdm showed} for 'Train' or 'Validate' (only rank 0 shows tqdm's
    bars; their carriage-return updates are not split into prefixed lines, so read it all)."""
    out = job.stdout + "\n" + job.stderr
    found = {}
    for epoch, loss in re.findall(phase + r" Epoch +#(\d+):[^\r\n]*?loss=([-+0-9.einaf]+)", out):
        found[int(epoch)] = float(loss)
    return found


def test_pytorch_imagenet_resnet50(tmp_path):
    """pytorch_imagenet_resnet50.py on an ImageFolder tree (2 classes, 2 JPEGs each in train/
    and val/): ResNet-50, 1 epoch with batch 2; rank 0 writes the checkpoint and TensorBoard
    events. A second run with --epochs 2 resumes from that checkpoint (rank 0 loads it,
    hvd.broadcast sends the epoch, broadcast_parameters and broadcast_optimizer_state send the
    model and the momentum buffers), trains epoch 2, whose training loss is below epoch 1's
    (ImageNet's 1000-way head learns quickly that only 2 classes occur)."""
    data, ck = str(tmp_path / "imagenet"), tmp_path / "ck"
    make_data("imagenet", data, "--classes", "2", "--train", "2", "--val", "2")
    ck.mkdir()
    args = ["--train-dir", os.path.join(data, "train"), "--val-dir", os.path.join(data, "val"),
            "--log-dir", str(ck / "logs"), "--checkpoint-format",
            str(ck / "checkpoint-{epoch}.pth.tar"), "--batch-size", "2", "--val-batch-size", "2",
            "--no-cuda"]
    first = run(2, "pytorch_imagenet_resnet50.py", args + ["--epochs", "1"], tmp_path)
    ok(first)
    assert (ck / "checkpoint-1.pth.tar").exists(), first.tail()
    assert any(n.startswith("events.out.tfevents") for n in os.listdir(ck / "logs"))
    loss1 = _tqdm_losses(first, "Train")
    assert list(loss1) == [1] and math.isfinite(loss1[1]), first.tail()
    val1 = _tqdm_losses(first, "Validate")
    assert list(val1) == [1] and math.isfinite(val1[1]), first.tail()

    second = run(2, "pytorch_imagenet_resnet50.py", args + ["--epochs", "2"], tmp_path)
    ok(second)
    loss2 = _tqdm_losses(second, "Train")
    assert list(loss2) == [2], "did not resume at epoch 2: %s\n%s" % (loss2, second.tail())
    assert (ck / "checkpoint-2.pth.tar").exists(), second.tail()
    assert math.isfinite(loss2[2]) and loss2[2] < loss1[1], (loss1, loss2)


def test_pytorch_synthetic_benchmark(tmp_path):
    """Horovod's pytorch_synthetic_benchmark.py (torchvision's ResNet-18, random images)."""
    job = run(2, "pytorch_synthetic_benchmark.py", [
        "--no-cuda", "--model", "resnet18", "--batch-size", "2", "--num-warmup-batches", "1",
        "--num-batches-per-iter", "1", "--num-iters", "2", "--fp16-allreduce"], tmp_path)
    ok(job)
    out = "\n".join(job.lines.get(0, []))
    for text in ("Model: resnet18", "Batch size: 2", "Number of CPUs: 2", "Iter #0:", "Iter #1:"):
        assert text in out, out
    m = re.search(r"Total img/sec on 2 CPU\(s\): (\S+) \+-(\S+)", out)
    assert m and float(m.group(1)) > 0, out
