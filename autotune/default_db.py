"""Which tuning database a compile, a tune or the CLI uses when told nothing.

`db="default"` (the default of kiln.compile, kiln.tune and every `kiln` command) is the user's
own log layered over the records shipped with Kiln: reads see both, new measurements go to
the user's log, never into the installed package. `db=None` means no database at all, and a
path (or a Database) means exactly that log, read and written (a developer adds records to
the committed log with `--db tuning_logs/kiln.db`).

The user's log is `KILN_TUNING_DB` when set, else `$XDG_DATA_HOME/kiln/tuning.db`
(`~/.local/share/kiln/tuning.db`).
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

from ..codegen.runtime_config import data_home, tuning_db_setting
from .database import Database

DEFAULT = "default"
SHIPPED_NAME = "kiln.db"


def shipped_db_path() -> Path | None:
    """The tuning log shipped with Kiln (tuning_logs/kiln.db, package `kiln.tuning_logs`),
    or None when this installation has none."""
    spec = importlib.util.find_spec("kiln.tuning_logs")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        path = Path(folder) / SHIPPED_NAME
        if path.is_file():
            return path
    return None


def user_db_path() -> Path:
    """Where new measurements go by default."""
    if tuning_db_setting():
        return Path(tuning_db_setting()).expanduser()
    data = data_home() or Path.home() / ".local" / "share"
    return Path(data) / "kiln" / "tuning.db"


def open_database(db) -> Database | None:
    """A Database for `db`: None (none), "default" (see the module docstring), a path or a
    Database (itself)."""
    if db is None or isinstance(db, Database):
        return db
    if isinstance(db, str) and db == DEFAULT:
        user, shipped = user_db_path(), shipped_db_path()
        # opened on first use: a compile from the model cache needs only the files' identity
        if shipped is not None and shipped.resolve() != user.resolve():
            return Database(user, base=shipped, lazy=True)
        return Database(user, lazy=True)
    return Database(db)


def describe(db: Database | None) -> str:
    """`db` as the CLI names it: where records are written, and what they are layered on."""
    if db is None:
        return "no tuning database"
    over = f", over the shipped records {db.base}" if db.base is not None else ""
    return f"tuning database {db.path}{over}"
