"""Long-term memory for LangGraph agents on MongoDB: ``BaseStore`` sync and native async."""

from mongo_ckpt.store.aio import AsyncMongoDBStore
from mongo_ckpt.store.sync import MongoDBStore

__all__ = ["AsyncMongoDBStore", "MongoDBStore"]
