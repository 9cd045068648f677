import os
from pathlib import Path

import numpy as np
import pytest

_REPO = Path(__file__).resolve().parents[1]
_SHARED = _REPO.parent / "shared" / "datasets"

# Tests read real data through the library's loader: MARGINDIST_DATA wins, else the shared
# data directory beside the checkout (when present).
if not os.environ.get("MARGINDIST_DATA") and _SHARED.is_dir():
    os.environ["MARGINDIST_DATA"] = str(_SHARED)


def shared_data_dir():
    """The data directory with the full CSV collection, or None."""
    for part in os.environ.get("MARGINDIST_DATA", "").split(os.pathsep):
        p = Path(part)
        if part and (p / "manifest.json").is_file():
            return p
    return None


@pytest.fixture
def data_dir():
    d = shared_data_dir()
    if d is None:
        pytest.skip("no data directory with manifest.json (set MARGINDIST_DATA)")
    return d


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture(scope="module")
def single_blas_thread():
    """One BLAS / OpenMP thread for a module of many small fits: on a busy machine the threads of
    a BLAS call on a few-hundred-row matrix wait for each other (seconds instead of
    milliseconds). Use it as ``pytestmark = pytest.mark.usefixtures("single_blas_thread")``."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        yield


@pytest.fixture(scope="module")
def single_torch_thread():
    """One PyTorch CPU thread for a module of small tensor operations (the same reason as
    :func:`single_blas_thread`); skips the module without PyTorch. Use it as
    ``pytestmark = pytest.mark.usefixtures("single_torch_thread")``."""
    torch = pytest.importorskip("torch")
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
