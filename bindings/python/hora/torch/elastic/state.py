"""horovod.torch.elastic.state's names, for scripts that import them from there."""

from . import ObjectState, State, TorchState  # noqa: F401
