"""One rank's bad input fails the call on every rank of the set.

hora.torch checks its inputs in Python before anything reaches the C API. Without more, a
rank whose input is bad would raise alone while the others wait for it until the stall
timeout. `refusing` wraps a call's checks and submission: a bad-input error (ValueError,
TypeError, NotImplementedError; HoraInvalidArgumentError is a ValueError) raised before the
call took its name refuses that name (hora_refuse), so the same call fails on every rank with
this rank's message, and the unnamed-call counters stay in step (the refused call takes its
number as a submitted one would). An error after the name was taken is the C API's, which
refuses by itself."""

import contextlib

from .. import core
from .. import errors

_BAD_INPUT = (ValueError, TypeError, NotImplementedError)


@contextlib.contextmanager
def refusing(kind, name, set_id, parts=None):
    """kind/name/set_id: as given to core.op_name; parts: a grouped call's tensor count (its
    names are "<base>.<i>")."""
    token = core.begin_call()
    try:
        yield
    except _BAD_INPUT as e:
        if core.is_initialized() and not core.name_taken(token):
            base = core.op_name(kind, name, set_id)
            names = [base] if parts is None else ["%s.%d" % (base, i) for i in range(parts)]
            message = e.message if isinstance(e, errors.HoraError) else str(e)
            for n in names:
                try:
                    core.refuse(n, set_id, message)
                except errors.HoraError:
                    pass  # the local error below is what this rank reports
        raise
