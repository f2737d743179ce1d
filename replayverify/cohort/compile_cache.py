"""One persistent JAX compilation cache shared by the processes of a cohort run.

Its own module, not ``isolated.py``: ``runner`` imports it, the package imports
``runner``, and ``isolated`` is run as ``python -m`` in the children (a module the
package has already imported would be run a second time, with a warning).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

CACHE_ENV = ("JAX_COMPILATION_CACHE_DIR", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS",
             "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES")


@contextmanager
def shared_compile_cache() -> Iterator[str | None]:
    """One persistent JAX compilation cache, in a temporary directory, for every process
    a cohort run starts while this is open (its directory, or None).

    The workers and their children inherit the variables, and JAX reads them at import:
    a primitive or program compiled in one process (a ``jax-state`` child) is loaded, not
    compiled again, in the others (the other worker's, ``jax-remat3``'s, ``keras-jax``'s
    when they lower to the same module with the same XLA_FLAGS, both part of the key).
    A user's own ``JAX_COMPILATION_CACHE_DIR`` is left as it is. The directory goes
    when the run ends.
    """
    if os.environ.get(CACHE_ENV[0]):
        yield os.environ[CACHE_ENV[0]]
        return
    saved = {k: os.environ.get(k) for k in CACHE_ENV}
    with tempfile.TemporaryDirectory(prefix="replayverify-jax-cache-") as path:
        # every compile (even a 10 ms one) and every entry, whatever its size
        os.environ.update(zip(CACHE_ENV, (path, "0", "-1")))
        try:
            yield path
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
