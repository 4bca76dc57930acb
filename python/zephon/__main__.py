"""``python -m zephon ARGS``: the ``zephon`` executable with ``ARGS``, as the ``zephon``
command runs it (:func:`zephon._exe.main`: the executable this package finds)."""
from ._exe import main

if __name__ == "__main__":
    main()
