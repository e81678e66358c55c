"""A tiny case runner for worker scripts that run on every rank of a Hora job."""

import sys
import traceback

CASES = []


def case(fn):
    CASES.append(fn)
    return fn


def check(cond, msg="check failed"):
    if not cond:
        raise AssertionError(msg)


def close(a, b, atol=1e-5, rtol=1e-5, msg=""):
    import torch
    a = torch.as_tensor(a).double()
    b = torch.as_tensor(b).double()
    if a.shape != b.shape or not torch.allclose(a, b, atol=atol, rtol=rtol):
        raise AssertionError("%s: %s != %s" % (msg or "values differ", a.flatten()[:8].tolist(),
                                               b.flatten()[:8].tolist()))


def raises(exc_type, fn, *args, contains=None, **kwargs):
    try:
        fn(*args, **kwargs)
    except exc_type as e:
        if contains and not any(c.lower() in str(e).lower() for c in
                                ([contains] if isinstance(contains, str) else contains)):
            raise AssertionError("%s raised %r, expected text %r" % (fn.__name__, e, contains))
        return e
    raise AssertionError("%s did not raise %s" % (getattr(fn, "__name__", fn),
                                                  exc_type.__name__))


def run_all(init, shutdown, only=None):
    """Runs every registered case (or those named in `only`); exit code 1 if one failed."""
    init()
    failed = 0
    for fn in CASES:
        if only and fn.__name__ not in only:
            continue
        try:
            fn()
            print("CASE %s PASS" % fn.__name__, flush=True)
        except Exception as e:
            failed += 1
            reason = ("%s: %s" % (type(e).__name__, e)).replace("\n", " | ")
            print("CASE %s FAIL %s" % (fn.__name__, reason[:2000]), flush=True)
            traceback.print_exc()
            sys.stderr.flush()
    shutdown()
    print("WORKER DONE failed=%d" % failed, flush=True)
    sys.exit(1 if failed else 0)
