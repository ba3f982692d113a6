"""The root of every exception mongo-ckpt raises.

Each error of the checkpointer, the store, the cache and the command line subclasses
``MongoCkptError`` and keeps the built-in base callers catch (``LookupError`` for what is
missing, ``ValueError`` for a value refused, ``TypeError`` for an argument of the wrong
type, ``RuntimeError`` for a state to change first), so ``except MongoCkptError`` catches
all of them and ``except LookupError`` still works. Each error is defined, and importable,
beside the code that raises it.

An argument of the wrong type is a ``TypeError`` everywhere (an identifier that is not a
``str``, a ``limit`` or ``offset`` that is not an ``int``); one of the right type but out
of range is a ``ValueError`` (a ``limit`` beyond ``2**63 - 1``, a negative offset).
"""

from __future__ import annotations


class MongoCkptError(Exception):
    """Raised by mongo-ckpt: the saver, the store, the cache and the command line."""
