"""Zephon from Python: mount a packed dataset and read elastically deterministic batches.

- :func:`zephon.mount` mounts a dataset, or a mixture of datasets (a spec file, with
  ``weights=`` and ``validation=``), for the length of a ``with`` block.
- :func:`zephon.node_mount` mounts once per node while the node's other processes wait.
- :mod:`zephon.torch` (needs PyTorch) has :class:`zephon.torch.ZephonLoader`, an iterable
  over one data-parallel rank's token batches whose ``state_dict()`` restores at any
  data-parallel degree and global batch size, and
  :class:`zephon.torch.ZephonValidationLoader` over the mount's validation split.

The package runs the ``zephon`` executable, found through an explicit ``zephon=``
argument, the ``ZEPHON`` environment variable, the executable installed with the package
(the wheel's), or ``PATH``, in that order (:func:`zephon.find_executable`).
"""
from ._exe import ZephonError, find_executable, require_fuse, run
from .mount import Mount, MountWaiter, mount, node_mount, read_status

__all__ = ["ZephonError", "find_executable", "require_fuse", "run", "Mount", "MountWaiter",
           "mount", "node_mount", "read_status", "__version__"]
# meson.build's project version, which the wheel's metadata and `zephon --version` carry
# (tests/python/test_package.py checks that the three agree)
__version__ = "0.1.0"
