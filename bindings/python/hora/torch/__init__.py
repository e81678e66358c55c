"""horovod.torch's API on Hora: `import hora.torch as hvd` ports a Horovod PyTorch script."""

from .. import errors as _errors
from ..errors import (HoraError, HoraPeerFailureError, HoraMismatchError, HoraTimeoutError,
                      HoraPreconditionError, HoraInvalidArgumentError)
from .compression import Compression
from .mpi_ops import *  # noqa: F401,F403 - horovod.torch.mpi_ops's names, as horovod.torch
from .mpi_ops import __all__ as _mpi_ops_all
from .functions import (broadcast_parameters, broadcast_optimizer_state, broadcast_object,
                        allgather_object)
from .optimizer import DistributedOptimizer
from .zero import ZeroOptimizer
from .tensor_parallel import *  # noqa: F401,F403 - tensor_parallel.__all__
from .tensor_parallel import __all__ as _tensor_parallel_all
from .sequence_parallel import *  # noqa: F401,F403 - sequence_parallel.__all__
from .sequence_parallel import __all__ as _sequence_parallel_all
from .vocab_parallel_loss import vocab_parallel_cross_entropy
from .pipeline import Pipeline, split_sequential
from .sync_batch_norm import SyncBatchNorm
from . import elastic
from .elastic import HostsUpdatedInterrupt


__all__ = sorted(set(_mpi_ops_all) | {
    "HoraError", "HoraPeerFailureError", "HoraMismatchError", "HoraTimeoutError",
    "HoraPreconditionError", "HoraInvalidArgumentError", "Compression",
    "broadcast_parameters", "broadcast_optimizer_state", "broadcast_object",
    "allgather_object", "DistributedOptimizer", "SyncBatchNorm", "HostsUpdatedInterrupt",
    "ZeroOptimizer", "Pipeline", "split_sequential", "elastic",
    "vocab_parallel_cross_entropy"} | set(_tensor_parallel_all) | set(_sequence_parallel_all))
