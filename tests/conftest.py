import os

import numpy as np
import pytest

os.environ.setdefault("KILN_NUM_THREADS", "2")


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
