"""Long-term memory for LangGraph agents on MongoDB: ``BaseStore`` sync and native async."""

from store.aio import AsyncMongoDBStore
from store.sync import MongoDBStore

__all__ = ["AsyncMongoDBStore", "MongoDBStore"]
