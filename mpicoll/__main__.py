"""``python -m mpicoll``: see :mod:`mpicoll.cli`."""

from .tools.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
