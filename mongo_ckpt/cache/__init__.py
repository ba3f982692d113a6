"""LangGraph's node cache on MongoDB: ``BaseCache`` sync and native async (docs/cache.md)."""

from mongo_ckpt.cache.aio import AsyncMongoDBCache
from mongo_ckpt.cache.documents import CacheInputError, CacheTypeError
from mongo_ckpt.cache.sync import MongoDBCache

__all__ = ["AsyncMongoDBCache", "CacheInputError", "CacheTypeError", "MongoDBCache"]
