"""Exceptions raised by hora. Every runtime failure carries the status code and the
runtime's own message (hora_last_error), never a generic text."""

# Status codes of hora.h (numbers are stable).
OK = 0
ERR_INVALID_ARGUMENT = 1
ERR_FAILED_PRECONDITION = 2
ERR_ALREADY_EXISTS = 3
ERR_NOT_FOUND = 4
ERR_DEADLINE_EXCEEDED = 5
ERR_MISMATCH = 6
ERR_PEER_FAILURE = 7
ERR_UNAUTHENTICATED = 8
ERR_UNAVAILABLE = 9
ERR_INTERNAL = 10
ERR_ABORTED = 11
IN_PROGRESS = 12

STATUS_NAMES = {
    OK: "OK",
    ERR_INVALID_ARGUMENT: "INVALID_ARGUMENT",
    ERR_FAILED_PRECONDITION: "FAILED_PRECONDITION",
    ERR_ALREADY_EXISTS: "ALREADY_EXISTS",
    ERR_NOT_FOUND: "NOT_FOUND",
    ERR_DEADLINE_EXCEEDED: "DEADLINE_EXCEEDED",
    ERR_MISMATCH: "MISMATCH",
    ERR_PEER_FAILURE: "PEER_FAILURE",
    ERR_UNAUTHENTICATED: "UNAUTHENTICATED",
    ERR_UNAVAILABLE: "UNAVAILABLE",
    ERR_INTERNAL: "INTERNAL",
    ERR_ABORTED: "ABORTED",
    IN_PROGRESS: "IN_PROGRESS",
}


class HorovodInternalError(RuntimeError):
    """Horovod's exception for a collective that failed while the job ran: hora.torch raises
    it (through its subclasses below) for a mismatch across ranks and for a failed peer, as
    horovod.torch's synchronize() does for every failure it reports."""


class HostsUpdatedInterrupt(RuntimeError):
    """Horovod's signal that the job's hosts changed: raised by hora.torch.elastic's
    State.commit under horarun's elastic mode when the driver decided a newer generation
    (hosts added or removed)."""

    def __init__(self, skip_sync=False):
        super().__init__("the job's hosts changed")
        self.skip_sync = skip_sync


class HoraError(RuntimeError):
    """A failed Hora call. `status` is the hora_status_t code, `message` the runtime's text."""

    def __init__(self, status, message, operation=None):
        self.status = int(status)
        self.message = message or ""
        self.operation = operation
        code = STATUS_NAMES.get(self.status, str(self.status))
        # The runtime's messages name the tensor already; say which call failed otherwise.
        name = operation.split("(")[-1].rstrip(")") if operation else ""
        prefix = "%s: " % operation if operation and name not in self.message else ""
        super().__init__("%s%s (HORA_ERR_%s)" % (prefix, self.message, code))


class HoraPeerFailureError(HoraError, HorovodInternalError):
    """Another rank or the coordinator failed, the runtime was shut down while the
    operation was pending, or the coordinator aborted the job (a stall timeout:
    HORA_ERR_ABORTED, "stall timeout: ..."). The job cannot go on; a HorovodInternalError."""


class HoraMismatchError(HoraError, HorovodInternalError):
    """Ranks submitted different signatures (shape, dtype, op, root...) for one name; the
    operation failed on every rank (a HorovodInternalError, as in Horovod)."""


class HoraInvalidArgumentError(HoraError, ValueError):
    """A call refused at once: a bad argument, or a name already in flight on this rank
    (HORA_ERR_ALREADY_EXISTS). A ValueError, as horovod.torch raises for these."""


class HoraTimeoutError(HoraError):
    """A wait with a timeout passed before the operation finished (it may still finish)."""


class HoraPreconditionError(HoraError, ValueError):
    """Not initialized, already initialized, or shut down (a ValueError, as in horovod)."""


def error_class(status):
    if status in (ERR_PEER_FAILURE, ERR_ABORTED):
        return HoraPeerFailureError
    if status == ERR_MISMATCH:
        return HoraMismatchError
    if status in (ERR_INVALID_ARGUMENT, ERR_ALREADY_EXISTS):
        return HoraInvalidArgumentError
    if status == ERR_DEADLINE_EXCEEDED:
        return HoraTimeoutError
    if status == ERR_FAILED_PRECONDITION:
        return HoraPreconditionError
    return HoraError
