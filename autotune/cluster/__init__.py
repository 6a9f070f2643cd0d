"""Tuning on a Dask cluster: `kiln worker` processes measure, the tuner stays the single
writer of the SQLite log (see runner.py for the loop, worker.py for the worker side,
fingerprint.py for which workers may measure for a target).

dask and distributed are an optional extra (`pip install "tensorkiln[cluster]"`); nothing
here imports them at module level, so the rest of Kiln works without them."""
from __future__ import annotations

from ...te.errors import KilnError

INSTALL_HINT = ('tuning on a cluster needs dask and distributed: pip install "tensorkiln[cluster]" '
                '(or pip install "dask>=2024" "distributed>=2024")')


def require_distributed():
    """The `distributed` module, or a KilnError saying what to install."""
    try:
        import distributed
    except ImportError as exc:
        raise KilnError(f"{INSTALL_HINT} ({exc})") from None
    return distributed
