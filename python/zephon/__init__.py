"""Zephon from Python: mount a packed dataset and read elastically deterministic batches.

- :func:`zephon.mount` mounts a dataset, or a mixture of datasets (a spec file, with
  ``weights=`` and ``validation=``), for the length of a ``with`` block.
- :func:`zephon.node_mount` mounts once per node while the node's other processes wait.
- :mod:`zephon.torch` (needs PyTorch) has :class:`zephon.torch.ZephonLoader`, an iterable
  over one data-parallel rank's token batches whose ``state_dict()`` restores at any
  data-parallel degree and global batch size, and
  :class:`zephon.torch.ZephonValidationLoader` over the mount's validation split.

Nothing here is compiled: the package runs the ``zephon`` executable, found through an
explicit ``zephon=`` argument, the ``ZEPHON`` environment variable, or ``PATH``.
"""
from ._exe import ZephonError, find_executable, run
from .mount import Mount, MountWaiter, mount, node_mount, read_status

__all__ = ["ZephonError", "find_executable", "run", "Mount", "MountWaiter", "mount",
           "node_mount", "read_status", "__version__"]
# the one place of the version: python/pyproject.toml reads it from here
__version__ = "0.1.0"
