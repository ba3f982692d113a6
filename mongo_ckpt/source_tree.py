"""``mongo_ckpt.store`` when the package is imported from a clone's source folder.

The store's source is the clone's ``store/`` folder, installed as ``mongo_ckpt.store`` (a
wheel and a strict editable install hold it inside the package). Run from the clone's root
(``python -m pytest``, a script), Python imports the ``mongo_ckpt/`` folder itself, which
holds no ``store/``: this finder supplies that one package from the clone.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from importlib.util import spec_from_file_location
from pathlib import Path
from types import ModuleType

STORE = "mongo_ckpt.store"


class _CloneStore(MetaPathFinder):
    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != STORE:
            return None
        return spec_from_file_location(
            fullname, self.folder / "__init__.py", submodule_search_locations=[str(self.folder)]
        )


def find_store_beside(package: Path) -> None:
    """Let ``mongo_ckpt.store`` be found in the clone when ``package`` (the folder
    ``mongo_ckpt`` was imported from) holds no ``store/`` and its clone does."""
    folder = package.parent / "store"
    wanted = not (package / "store").is_dir() and (folder / "__init__.py").is_file()
    if wanted and not any(isinstance(finder, _CloneStore) for finder in sys.meta_path):
        sys.meta_path.append(_CloneStore(folder))
