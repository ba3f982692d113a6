"""Calls mypy ``--strict`` must refuse (test_typing.py): each line marked ``# refused``."""

from __future__ import annotations

from pymongo import AsyncMongoClient, MongoClient

from mongo_ckpt import AsyncMongoDBSaver, MongoDBSaver
from mongo_ckpt.cache import MongoDBCache
from mongo_ckpt.store import AsyncMongoDBStore, MongoDBStore


def wrong_clients(uri: str) -> None:
    MongoDBSaver(AsyncMongoClient(uri))  # refused
    AsyncMongoDBSaver(MongoClient(uri))  # refused
    MongoDBStore(AsyncMongoClient(uri))  # refused
    AsyncMongoDBStore(MongoClient(uri)["db"]["store"])  # refused
    MongoDBCache[str](uri)  # refused


def wrong_arguments(uri: str) -> None:
    MongoDBSaver.from_conn_string(uri, dbname="agents")  # refused
    MongoDBStore.from_conn_string(uri, ttl=5)  # refused

