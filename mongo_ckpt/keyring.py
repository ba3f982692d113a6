"""Encryption under several keys, so that a key can be rotated: ``KeyRing``.

A ``KeyRing`` is a LangGraph ``CipherProtocol`` for ``EncryptedSerializer``: AES in EAX
mode, as ``EncryptedSerializer.from_pycryptodome_aes`` (same nonce, tag and ciphertext
layout), except that the cipher name it records is ``aes:<key id>``, so a stored type tag
reads ``msgpack+aes:k2`` and says which key wrote the value. It encrypts with the current
key and decrypts with whichever key a value names; a value whose key it does not hold
raises ``MissingKeyError`` naming that key id. A reader with a single-key
``EncryptedSerializer`` refuses ``aes:<key id>`` values (LangGraph's cipher accepts only
``aes``) rather than misreading them. Values written with ``from_pycryptodome_aes`` (cipher
name ``aes``, no key id) are read with the key named ``legacy``. With ``bind``, a value is
encrypted with its place (``places``) as associated data, cipher name ``aesb:<key id>``: it
decrypts only at that place.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Mapping
from typing import Any

from langgraph.checkpoint.serde.base import CipherProtocol, SerializerProtocol
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from mongo_ckpt import places
from mongo_ckpt.errors import MongoCkptError

CIPHER = "aes"
BOUND = "aesb"  # the cipher name of a value bound to its place (``places``)
BOUND_TAG = rf"\+{BOUND}:"  # matches the stored type tag of a bound value
STRICT = "strict"  # ``bind=STRICT``: at a place, unbound values are refused
KEY_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")
KEY_SIZES = (16, 24, 32)


class MissingKeyError(MongoCkptError, LookupError):
    """A value was encrypted with a key the ``KeyRing`` does not hold."""

    def __init__(self, key_id: str | None, held: list[str]) -> None:
        which = (
            f"key {key_id!r}"
            if key_id is not None
            else "a key without an id (EncryptedSerializer.from_pycryptodome_aes)"
        )
        hint = "" if key_id is not None else "; pass legacy=<the id you give that key>"
        super().__init__(
            f"this value was encrypted with {which}, which the KeyRing does not hold (it "
            f"holds {', '.join(map(repr, held))}): add that key to keys={{...}}{hint}"
        )
        self.key_id = key_id


class BoundValueError(MongoCkptError, ValueError):
    """A value bound to its place (``KeyRing(bind=True)``) read or copied elsewhere, or an
    unbound one where a strict ring reads only bound ones."""


class KeyRing(CipherProtocol):
    """AES-EAX under several keys: ``keys`` by id (16, 24 or 32 bytes each), ``current``
    the one new values are encrypted with, ``legacy`` the id of the key that wrote values
    without a key id (``EncryptedSerializer.from_pycryptodome_aes``); ``bind``: each value
    bound to its place (``"strict"``: and unbound values refused at a place)."""

    def __init__(
        self,
        keys: Mapping[str, bytes],
        current: str,
        *,
        legacy: str | None = None,
        bind: bool | str = False,
    ) -> None:
        try:
            from Crypto.Cipher import AES
        except ImportError:
            raise ImportError("KeyRing needs pycryptodome: pip install pycryptodome") from None
        self._aes: Any = AES
        for key_id, key in keys.items():
            if not isinstance(key_id, str) or not KEY_ID.fullmatch(key_id):
                raise ValueError(
                    f"key id {key_id!r}: use 1 to 64 letters, digits, '_', '.' or '-'"
                )
            if not isinstance(key, (bytes, bytearray, memoryview)):
                raise ValueError(f"key {key_id!r} must be bytes, got {type(key).__name__}")
            if len(bytes(key)) not in KEY_SIZES:
                raise ValueError(f"key {key_id!r} must be 16, 24 or 32 bytes (AES)")
        for role, named in (("current", current), ("legacy", legacy)):
            if named is not None and named not in keys:
                raise ValueError(f"{role}={named!r} is not one of the keys' ids: {list(keys)}")
        if bind not in (False, True, STRICT):
            raise ValueError(f"bind is True, False or {STRICT!r}, got {bind!r}")
        self.keys = {key_id: bytes(key) for key_id, key in keys.items()}
        self.current, self.legacy = current, legacy
        self.bind, self.strict = bool(bind), bind == STRICT

    def encrypt(
        self, plaintext: bytes, nonce: bytes | None = None, bind: bool | None = None
    ) -> tuple[str, bytes]:
        place = places.current() if (self.bind if bind is None else bind) else None
        cipher = self._aes.new(self.keys[self.current], self._aes.MODE_EAX, nonce=nonce)
        if place is not None:
            cipher.update(place)
        ciphertext, tag = cipher.encrypt_and_digest(plaintext)
        name = CIPHER if place is None else BOUND
        return f"{name}:{self.current}", cipher.nonce + tag + ciphertext

    def decrypt(self, ciphername: str, ciphertext: bytes) -> bytes:
        return self._decrypt(ciphername, ciphertext, self.strict)

    def _decrypt(self, ciphername: str, ciphertext: bytes, strict: bool) -> bytes:
        name, _, key_id = ciphername.partition(":")
        if name not in (CIPHER, BOUND):
            raise ValueError(f"cipher {ciphername!r} is not one KeyRing reads ({CIPHER}:<key id>)")
        key = self.keys.get(key_id or self.legacy or "")
        if key is None:
            raise MissingKeyError(key_id or None, list(self.keys))
        nonce, tag, body = ciphertext[:16], ciphertext[16:32], ciphertext[32:]
        cipher = self._aes.new(key, self._aes.MODE_EAX, nonce=nonce)
        place = places.current()
        if name == BOUND:
            if place is None:
                raise BoundValueError(
                    f"a value bound to its place ({ciphername}) read without it: read it "
                    "through the saver or store that wrote it"
                )
            cipher.update(place)
        elif place is not None and strict:
            raise BoundValueError(
                f"an unbound value ({ciphername}) where this ring (bind='strict') reads only "
                "bound ones: it was written before binding (run rekey with bind=True first) "
                "or planted here"
            )
        try:
            plaintext: bytes = cipher.decrypt_and_verify(body, tag)
        except ValueError:
            if name == BOUND:
                raise BoundValueError(
                    "a value bound to its place does not decrypt here: it was written at "
                    "another place (thread, namespace, channel, version, checkpoint, task "
                    "or store key) and copied here, or altered"
                ) from None
            raise
        return plaintext

    def reencrypt(
        self, ciphername: str, ciphertext: bytes, into: bytes | None = None
    ) -> tuple[str, bytes]:
        """``ciphertext`` (at the current place) under the current key instead, at place
        ``into`` (default: the current one; bound if it was, or if the ring binds),
        decrypted again and compared.

        The nonce is a digest of the old ciphertext and the new place, so the same value
        re-encrypted twice (a run cut and run again) gives the same bytes, and two values
        share a nonce only if they are the same ciphertext, thus the same plaintext.
        """
        plaintext = self._decrypt(ciphername, ciphertext, False)  # strict reads only
        bound = self.bind or ciphername.startswith(f"{BOUND}:")  # a bound value stays bound
        target = places.current() if into is None else into
        seed = hashlib.blake2b(ciphername.encode() + b"\0" + ciphertext, digest_size=16)
        seed.update(target or b"")
        with places.exactly(target):
            name, new = self.encrypt(plaintext, seed.digest(), bound)
            if self.decrypt(name, new) != plaintext:
                raise AssertionError(f"a value re-encrypted under {name!r} did not decrypt back")
        return name, new


def ring_in(serde: SerializerProtocol | None) -> KeyRing | None:
    """The ``KeyRing`` ``serde`` encrypts with, if any."""
    cipher = serde.cipher if isinstance(serde, EncryptedSerializer) else None
    return cipher if isinstance(cipher, KeyRing) else None


def is_bound(type_: str) -> bool:
    """Whether a value of this stored type tag is bound to its place."""
    return re.search(BOUND_TAG, type_) is not None


def keyring_serializer(
    keys: Mapping[str, bytes],
    current: str,
    *,
    legacy: str | None = None,
    bind: bool | str = False,
    serde: SerializerProtocol | None = None,
) -> EncryptedSerializer:
    """An ``EncryptedSerializer`` on a ``KeyRing``: pass it as a saver's, store's or
    cache's ``serde``; rotate by adding a key and making it ``current``. ``bind``: each
    value encrypted with its place as associated data (``places``); ``"strict"``: and
    unbound values refused where a place is known."""
    ring = KeyRing(keys, current, legacy=legacy, bind=bind)
    return EncryptedSerializer(ring, serde or JsonPlusSerializer())


KEYS_VARIABLE = "MONGO_CKPT_KEYS"
CURRENT_VARIABLE = "MONGO_CKPT_CURRENT_KEY"
BIND_VARIABLE = "MONGO_CKPT_BIND"
LEGACY_ID = "LANGGRAPH_AES_KEY"


def keyring_from_env(env: Mapping[str, str]) -> EncryptedSerializer | None:
    """The ``keyring_serializer`` an environment describes, ``None`` without
    ``MONGO_CKPT_KEYS``: ``id:<base64 key>`` pairs separated by commas; the current key is
    ``MONGO_CKPT_CURRENT_KEY``, else the last one listed. With ``LANGGRAPH_AES_KEY`` set too,
    the ring holds that key as ``LANGGRAPH_AES_KEY``, the ``legacy`` key; ``MONGO_CKPT_BIND``
    (``true``, ``false``, ``strict``) is its ``bind``. ``ValueError`` says what is wrong."""
    listed = env.get(KEYS_VARIABLE, "").strip()
    if not listed:
        return None
    keys: dict[str, bytes] = {}
    for pair in listed.split(","):
        key_id, sep, encoded = pair.strip().partition(":")
        try:
            keys[key_id] = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            sep = ""
        if not sep:
            raise ValueError(
                f"{KEYS_VARIABLE}: {pair.strip()!r} is not <key id>:<base64 key> "
                "(pairs separated by commas)"
            )
    current = env.get(CURRENT_VARIABLE) or [*keys][-1]
    legacy = env.get(LEGACY_ID)
    if legacy:
        keys.setdefault(LEGACY_ID, legacy.encode())
    choices: dict[str, bool | str] = {"": False, "false": False, "true": True, STRICT: STRICT}
    bind = choices.get(env.get(BIND_VARIABLE, "").strip().lower())
    if bind is None:
        raise ValueError(f"{BIND_VARIABLE} is true, false or strict, got {env[BIND_VARIABLE]!r}")
    return keyring_serializer(keys, current, legacy=LEGACY_ID if legacy else None, bind=bind)
