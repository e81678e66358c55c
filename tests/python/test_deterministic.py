"""HORA_DETERMINISTIC through hora.torch in real processes at 3 ranks on one host: float32
(and float64, float16) allreduces equal numpy's left-to-right rank-order sum, grouped and one
tensor at a time, with hvd.init(deterministic=True) on shm and with the variable on gloo
without fusion; with the option off the same comparison misses somewhere. Bad values fail
init naming the variable."""

import os
import subprocess

import pytest

import harness

NP = 3
ON_CASES = ["float32_sum_grouped", "float32_sum_per_tensor", "float32_average_grouped",
            "float32_average_per_tensor", "float64_sum_grouped", "float16_sum_per_tensor"]
JOBS = {
    "arg_shm": ("arg", {"HORA_CPU_OPERATIONS": "shm"}),
    "env_gloo_nofusion": ("env", {"HORA_DETERMINISTIC": "1", "HORA_CPU_OPERATIONS": "gloo",
                                  "HORA_FUSION_THRESHOLD": "0"}),
    "off_shm": ("off", {"HORA_DETERMINISTIC": "0", "HORA_CPU_OPERATIONS": "shm"}),
}


@pytest.fixture(scope="module", params=sorted(JOBS))
def job(request):
    mode, env = JOBS[request.param]
    return mode, harness.run_job(NP, "deterministic_worker.py", args=[mode], timeout=300,
                                 extra_env=env)


def test_job(job):
    mode, result = job
    assert result.rc == 0, result.tail()
    for name in (["without_the_option_some_bits_differ"] if mode == "off" else ON_CASES):
        result.assert_case(name)


def _init_alone(env, code):
    """A single-rank hora.torch init in a fresh interpreter; returns (rc, output)."""
    full = harness.job_env(env)
    full.pop("HORA_RANK", None)
    full.pop("HORA_SIZE", None)
    p = subprocess.run([harness.PYTHON, "-c", code], env=full, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, universal_newlines=True, timeout=120)
    return p.returncode, p.stdout


def test_bad_variable_names_it():
    rc, out = _init_alone({"HORA_DETERMINISTIC": "yes"},
                          "import hora.torch as hvd; hvd.init()")
    assert rc != 0
    assert "HORA_DETERMINISTIC='yes' is not 0, 1, true or false" in out, out


def test_bad_argument_names_it():
    rc, out = _init_alone({}, "import hora.torch as hvd; hvd.init(deterministic='yes')")
    assert rc != 0
    assert "deterministic (HORA_DETERMINISTIC) must be True, False or None" in out, out


def test_argument_wins_over_variable():
    # The variable is still parsed (a bad value refused); the argument decides.
    rc, out = _init_alone({"HORA_DETERMINISTIC": "1", "HORA_LOG_LEVEL": "info"},
                          "import hora.torch as hvd; hvd.init(deterministic=False); "
                          "hvd.shutdown()")
    assert rc == 0, out
    assert "deterministic=off" in out, out
