"""Run machinery shared by every runner (the suite, the cohort, ``replayverify evaluate``).

- :mod:`replayverify.runs.executors`: where tasks run (``ProcessPool`` on this machine, a
  Dask cluster), results in task order, per-task time limits (``time_limit``);
- :mod:`replayverify.runs.journal`: the run directory's journal, lock and ``--resume``
  (the rules for users are in docs/run-directories.md);
- :mod:`replayverify.runs.fingerprint`: the digest of the package's source that tags
  tasks and evaluation results.

This package imports nothing of replayverify's above ``untrusted``: runners import it,
never the reverse. The submodules are imported on use (``import replayverify.runs`` is free).
"""
