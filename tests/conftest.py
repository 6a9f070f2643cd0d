import atexit
import os
import shutil
import tempfile

import numpy as np
import pytest
from hypothesis import settings

os.environ.setdefault("KILN_NUM_THREADS", "2")
# kiln.compile is tiered by default; the tests compile untiered unless they ask for tiers
# (tests/graph/test_tiers.py, tests/graph/generic): they read the compiled model's plan
os.environ.setdefault("KILN_TIERED", "0")
# the default tuning database's writable layer (kiln.autotune.default_db): never the user's
# own ~/.local/share/kiln/tuning.db from a test run
os.environ["KILN_TUNING_DB"] = os.path.join(tempfile.mkdtemp(prefix="kiln-tests-"), "tuning.db")
# One kernel cache for the whole session (and the worker processes it starts): tests that
# build the same kernels or models reuse them, and nothing is written to ~/.cache.
# KILN_TEST_CACHE_DIR=path keeps the cache in `path` across runs instead; =off disables it.
# The folder goes into the environment, so pytest-xdist's workers (started after this runs in
# the controlling process) share it: the cache is safe for concurrent processes.
_CACHE = os.environ.get("KILN_TEST_CACHE_DIR")
if _CACHE is None:
    _CACHE = tempfile.mkdtemp(prefix="kiln-test-cache-")
    os.environ["KILN_TEST_CACHE_DIR"] = _CACHE
    atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
os.environ["KILN_CACHE_DIR"] = _CACHE
# the generic kernel library (codegen/generic/library.py) is per machine, not per cache:
# the tests build it into the session's cache folder, never into ~/.cache
os.environ.setdefault("KILN_GENERIC_DIR", os.path.join(_CACHE, "generic"))
# ... and a tiered compile builds the units it lacks at once (not in a background process),
# so a test's first tier does not depend on what another test built before it
os.environ.setdefault("KILN_GENERIC_BUILD", "now")


# Property tests draw the same examples on every run (seeded from each test), so a commit
# that passed stays green in CI. KILN_HYPOTHESIS=explore draws fresh examples each run: use it
# when hunting bugs, and turn what it finds into a fixed regression test.
settings.register_profile("repeatable", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("KILN_HYPOTHESIS", "repeatable"))


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture
def cache_root(tmp_path, monkeypatch):
    """A fresh, empty kernel and model cache for one test (KILN_CACHE_DIR), not the session's."""
    root = tmp_path / "kcache"
    monkeypatch.setenv("KILN_CACHE_DIR", str(root))
    return root
