"""Helpers under Horovod's module path (horovod.common), for scripts and tests that use them."""
