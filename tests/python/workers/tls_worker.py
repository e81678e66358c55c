"""A rank that picks its TLS files (HORA_TLS_*) by mode and rank before hora_init, then
allreduces once. Usage: tls_worker.py MODE DIR (DIR from test_tls.py: ca, other_ca, rankN).
Prints `INIT_FAILED <message>` and exits 3 when init fails, else `CASE tls_allreduce ...`."""

import os
import sys

MODE, DIR = sys.argv[1], sys.argv[2]
RANK = int(os.environ["HORA_RANK"])


def use(leaf, ca, key=True):
    """This rank's HORA_TLS_CERT/KEY (leaf, None: unset) and HORA_TLS_CA (ca, None: unset)."""
    for name in ("HORA_TLS_CERT", "HORA_TLS_KEY", "HORA_TLS_CA"):
        os.environ.pop(name, None)
    if leaf:
        os.environ["HORA_TLS_CERT"] = os.path.join(DIR, leaf + ".pem")
        if key:
            os.environ["HORA_TLS_KEY"] = os.path.join(DIR, leaf + ".key")
    if ca:
        os.environ["HORA_TLS_CA"] = os.path.join(DIR, ca + ".pem")


LEAF = "rank%d" % RANK
if MODE == "mutual":                # every rank: its certificate and the CA
    use(LEAF, "ca")
elif MODE == "wrong_ca":            # rank 1 trusts another CA: it cannot verify rank 0
    use(LEAF, "ca" if RANK == 0 else "other_ca")
elif MODE == "no_client_cert":      # rank 1 has the CA but no certificate of its own
    use(LEAF if RANK == 0 else None, "ca")
elif MODE == "cert_without_key":    # rank 1 names a certificate and no key
    use(LEAF, "ca", key=RANK != 1)
else:
    sys.exit("tls_worker.py: unknown mode %r" % MODE)

import signal  # noqa: E402

import torch  # noqa: E402

import hora.torch as hvd  # noqa: E402

# Both ranks' init deadlines are the same start timeout: the rank that gives up first makes
# horarun stop the other, which must still print its own failure, so SIGTERM waits until init
# has returned (horarun's grace period, 5 s, then kills).
signal.signal(signal.SIGTERM, signal.SIG_IGN)
try:
    hvd.init()
except Exception as e:  # the test reads the message
    print("INIT_FAILED %s: %s" % (type(e).__name__, str(e).replace("\n", " ")), flush=True)
    sys.exit(3)
signal.signal(signal.SIGTERM, signal.SIG_DFL)
x = hvd.allreduce(torch.tensor([float(RANK + 1)]), op=hvd.Sum)
want = hvd.size() * (hvd.size() + 1) / 2
if x.item() == want:
    print("CASE tls_allreduce PASS", flush=True)
else:
    print("CASE tls_allreduce FAIL got %r, want %r" % (x.item(), want), flush=True)
hvd.shutdown()
