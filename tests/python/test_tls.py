"""TLS of the control plane through hora_init's options (HORA_TLS_CERT, HORA_TLS_KEY,
HORA_TLS_CA; docs/options.md): real ranks through horarun, certificates made here with the
openssl command line (tools/setup.sh installs it; its absence fails the test).
The coordinator-level cases (plaintext refused, a rogue client certificate, server-only
mode) are tests/coordinator/tls_test.cc."""

import os
import shutil
import socket
import subprocess

import pytest

import harness

NP = 2
START_TIMEOUT_S = 10  # a refused rank never joins: rank 0 gives up after this


def sh(d, cmd):
    subprocess.run(cmd, shell=True, cwd=d, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    assert shutil.which("openssl"), "openssl is required (tools/setup.sh installs it)"
    d = str(tmp_path_factory.mktemp("tls"))
    ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
    for ca in ("ca", "other_ca"):
        sh(d, "openssl req -x509 %s -keyout %s.key -out %s.pem -days 1 -subj /CN=%s"
           % (ec, ca, ca, ca))
    # The ranks connect to the address horarun publishes: this host, by name or loopback.
    with open(os.path.join(d, "san.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:%s\n" % socket.gethostname())
    for r in range(NP):
        sh(d, "openssl req %s -keyout rank%d.key -out rank%d.csr -subj /CN=rank%d && "
              "openssl x509 -req -in rank%d.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
              "-out rank%d.pem -days 1 -extfile san.ext" % (ec, r, r, r, r, r))
    return d


def run(mode, d):
    return harness.run_job(NP, "tls_worker.py", args=(mode, d), timeout=180,
                           extra_env={"HORA_START_TIMEOUT_SECONDS": str(START_TIMEOUT_S)})


def init_failure(job, rank):
    for line in job.lines.get(rank, []):
        if line.startswith("INIT_FAILED "):
            return line
    return None


def test_mutual_tls_job_works(certs):
    job = run("mutual", certs)
    assert job.rc == 0, job.tail()
    job.assert_case("tls_allreduce")


def assert_rank1_cannot_join(job):
    """Rank 1's TLS handshake fails: it names TLS, rank 0 says rank 1 did not join, and no
    collective ran."""
    assert job.rc not in (0, None), job.tail()
    line = init_failure(job, 1)
    assert line and "cannot connect to the coordinator" in line and "TLS is on" in line, \
        job.tail()
    assert "rank 1 of 2 did not join" in (init_failure(job, 0) or ""), job.tail()
    assert "tls_allreduce" not in job.cases, job.tail()


def test_rank_that_trusts_another_ca_cannot_join(certs):
    assert_rank1_cannot_join(run("wrong_ca", certs))


def test_rank_without_a_client_certificate_is_refused(certs):
    assert_rank1_cannot_join(run("no_client_cert", certs))


def test_certificate_without_key_is_an_invalid_argument(certs):
    job = run("cert_without_key", certs)
    assert job.rc not in (0, None), job.tail()
    line = init_failure(job, 1)
    assert line and "HORA_TLS_CERT" in line and "HORA_TLS_KEY" in line, job.tail()
