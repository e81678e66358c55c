"""horovod.common.exceptions' two exceptions, which elastic scripts catch."""

from ..errors import HorovodInternalError, HostsUpdatedInterrupt  # noqa: F401
