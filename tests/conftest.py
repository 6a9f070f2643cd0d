import os
import tempfile

import numpy as np
import pytest

os.environ.setdefault("KILN_NUM_THREADS", "2")
# the default tuning database's writable layer (kiln.autotune.default_db): never the user's
# own ~/.local/share/kiln/tuning.db from a test run
os.environ["KILN_TUNING_DB"] = os.path.join(tempfile.mkdtemp(prefix="kiln-tests-"), "tuning.db")


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
