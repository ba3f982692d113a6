"""A pytest plugin (``-p tests.collection_counts``): after collection, one line
``SKIPPED {"reason": count, ...}`` with how many tests are marked to be skipped, by reason
(what the README says of a run without ``MONGODB_URI``; tests/test_docs_figures.py)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any


def pytest_collection_finish(session: Any) -> None:
    marks = [mark for item in session.items for mark in item.iter_markers("skip")]
    reasons = Counter(mark.kwargs.get("reason", "") for mark in marks)
    print("SKIPPED " + json.dumps(dict(reasons)))
