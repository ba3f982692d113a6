"""List-delta helpers (this module holds no tests): chains of list values, messages of a
given size, an encrypting serializer."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

from tests.saver_support import Api

ENCRYPTED = EncryptedSerializer.from_pycryptodome_aes(key=b"0123456789abcdef" * 2)


class Chain:
    """Checkpoints put one after another on one thread: ``messages`` grows, ``other`` stays."""

    def __init__(self, api: Api, thread_id: str = "t") -> None:
        self.api, self.thread_id = api, thread_id
        self.config: dict[str, Any] = {"configurable": {"thread_id": thread_id}}
        self.values: dict[str, Any] = {"messages": [], "other": ["fixed"]}
        self.versions: dict[str, Any] = {}
        self.n = 0

    async def put(self, messages: list[Any], *, changed: tuple[str, ...] = ("messages",)) -> Any:
        self.values = {**self.values, "messages": messages}
        saver = self.api.saver
        new = {ch: saver.get_next_version(self.versions.get(ch), None) for ch in changed}
        if not self.versions:
            new["other"] = saver.get_next_version(None, None)
        self.versions = {**self.versions, **new}
        self.n += 1
        checkpoint = {
            **empty_checkpoint(),
            "id": f"1ef{self.n:012d}",
            "channel_values": self.values,
            "channel_versions": dict(self.versions),
        }
        metadata = {"source": "loop", "step": self.n, "parents": {}}
        self.config = await self.api.put(self.config, checkpoint, metadata, new)
        return self.config


def message(i: int, size: int = 1000) -> HumanMessage:
    return HumanMessage(f"{i:06d}" + "x" * size, id=f"m{i}")
