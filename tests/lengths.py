"""How long a generative or model-based test runs (this module holds no tests).

A test that takes the ``length`` fixture (tests/conftest.py) runs twice: ``fixed`` in the
default tier, the same runs every time at the size that found its bugs, and ``long`` in the
exhaustive tier, ``LONG`` times as many runs, drawn anew each time (a backend-parametrized
one on the servers with PyMongo only: ``conftest._long_run_elsewhere``).
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import HealthCheck, settings

LONG = 5


@dataclass(frozen=True)
class Length:
    long: bool

    def times(self, n: int) -> int:
        """``n`` runs (or seeds) in the fixed run, ``LONG`` times ``n`` in the long one."""
        return n * LONG if self.long else n

    def settings(self, examples: int, **kwargs: object) -> settings:
        """Hypothesis settings for ``examples`` examples at this length: derandomized (and
        without the example database, which workers would share) in the fixed run."""
        return settings(
            max_examples=self.times(examples),
            derandomize=not self.long,
            database=None,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            **kwargs,  # type: ignore[arg-type]
        )


FIXED = Length(long=False)
LONG_RUN = Length(long=True)
