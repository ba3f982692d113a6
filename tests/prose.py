"""Deterministic text that compresses about as poorly as prose: words of pseudo-random
letters. Tests that weigh stored bytes use it, so that compressed values
gain on it what they gain on real messages, not what they gain on a repeated filler."""

import random

_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def prose(seed: object, size: int, head: str = "") -> str:
    """``size`` characters: ``head``, then words of 2 to 9 letters drawn from ``seed``."""
    rng = random.Random(str(seed))
    words = [head] if head else []
    length = len(head)
    while length < size:
        word = "".join(rng.choice(_LETTERS) for _ in range(rng.randint(2, 9)))
        words.append(word)
        length += len(word) + 1
    return " ".join(words)[:size]
