"""``python -m mongo_ckpt``: the ``mongo-ckpt`` command line (see ``mongo_ckpt.cli``)."""

from __future__ import annotations

import sys

from mongo_ckpt.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
