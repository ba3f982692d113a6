"""Every exception mongo-ckpt defines has one root, ``MongoCkptError``, and keeps the
built-in base callers catch; one kind of mistake is one exception type on the saver and
on the store."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import mongo_ckpt
import mongo_ckpt.store as store
from mongo_ckpt import MongoCkptError, MongoDBSaver
from mongo_ckpt.errors import MongoCkptError as Root
from mongo_ckpt.store import MongoDBStore
from tests.backends import sync_client

BUILT_IN = (LookupError, ValueError, TypeError, RuntimeError)


def _defined_exceptions() -> list[type[BaseException]]:
    found = []
    packages = [(mongo_ckpt.__path__, "mongo_ckpt."), (store.__path__, "mongo_ckpt.store.")]
    infos = [info for path, prefix in packages for info in pkgutil.walk_packages(path, prefix)]
    for info in infos:
        module = importlib.import_module(info.name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, BaseException) and obj.__module__ == module.__name__:
                found.append(obj)
    return found


def test_every_exception_has_the_root_and_a_built_in_base() -> None:
    defined = _defined_exceptions()
    assert MongoCkptError is Root
    names = {e.__name__ for e in defined}
    assert {"StaleParentError", "MissingValueError", "ForeignCollectionError"} <= names
    assert {"CacheInputError", "CacheTypeError", "ThreadExistsError"} <= names
    for error in defined:
        if error is Root:
            continue
        assert issubclass(error, Root), error
        assert issubclass(error, BUILT_IN), error


def test_errors_are_importable_where_they_were() -> None:
    from mongo_ckpt import StaleParentError, ThreadExistsError
    from mongo_ckpt.reading import MissingValueError

    assert issubclass(StaleParentError, LookupError)
    assert issubclass(MissingValueError, LookupError)
    assert issubclass(ThreadExistsError, ValueError)


def test_a_limit_of_the_wrong_type_or_range_is_one_type_on_saver_and_store() -> None:
    client = sync_client("mock")
    saver = MongoDBSaver(client, "errors_db")
    store = MongoDBStore(client, "errors_db")
    for limit, error in (("10", TypeError), (1.5, TypeError), (2**63, ValueError)):
        with pytest.raises(error, match="limit"):
            list(saver.list(None, limit=limit))  # type: ignore[arg-type]
        with pytest.raises(error, match="limit"):
            store.search(("a",), limit=limit)  # type: ignore[arg-type]
        with pytest.raises(error, match="limit"):
            store.list_namespaces(limit=limit)  # type: ignore[arg-type]
