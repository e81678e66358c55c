"""horovod.common.util's helpers that scripts and Horovod's own tests import."""

import contextlib
import os


@contextlib.contextmanager
def env(**kwargs):
    """Sets the environment variables given (str(value) each) for the body of the with
    statement, then restores each to what it was (unset if it was unset)."""
    saved = {key: os.environ.get(key) for key in kwargs}
    os.environ.update({key: str(value) for key, value in kwargs.items()})
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
