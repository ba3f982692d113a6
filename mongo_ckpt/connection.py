"""What the savers and stores share about their client: owning one made from a URI,
and, for the async classes, the event loop they run on."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from pymongo import AsyncMongoClient, MongoClient
from typing_extensions import Self

from mongo_ckpt.drivers import run_on_loop

DEFAULT_DB_NAME = "checkpointing_db"


class SyncClientOwner:
    """``from_conn_string`` for classes built as ``cls(client, db_name, **kwargs)``."""

    @classmethod
    @contextmanager
    def from_conn_string(
        cls, conn_string: str, db_name: str = DEFAULT_DB_NAME, *args: Any, **kwargs: Any
    ) -> Iterator[Self]:
        """An instance on a new ``MongoClient`` that is closed when the context exits."""
        client: MongoClient = MongoClient(conn_string)
        try:
            yield cls(client, db_name, *args, **kwargs)  # type: ignore[call-arg]
        finally:
            client.close()


class AsyncClientOwner:
    """``from_conn_string`` on ``AsyncMongoClient``, and the loop sync calls are sent to."""

    loop: asyncio.AbstractEventLoop | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        try:  # built inside the application's loop: sync calls from other threads work at once
            self.loop = asyncio.get_running_loop()
        except RuntimeError:
            self.loop = None

    @classmethod
    @asynccontextmanager
    async def from_conn_string(
        cls, conn_string: str, db_name: str = DEFAULT_DB_NAME, *args: Any, **kwargs: Any
    ) -> AsyncIterator[Self]:
        """An instance on a new ``AsyncMongoClient`` that is closed when the context exits."""
        client: AsyncMongoClient = AsyncMongoClient(conn_string)
        try:
            yield cls(client, db_name, *args, **kwargs)  # type: ignore[call-arg]
        finally:
            await client.close()

    def _bind_running_loop(self) -> None:
        self.loop = asyncio.get_running_loop()

    def _on_loop(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return run_on_loop(coro, self.loop, type(self).__name__)
