"""The package's layers, lowest first: a module imports only from its own layer and those
below it (``tests/unit/test_layers.py`` reads every import, function-level ones included,
and fails on an import that runs up, or on any circle between files).

- ``base``: input limits and one-line refusals (``untrusted``), the version;
- ``programs``: the IR, loading, Philox, the versioned reference interpreter, generators;
- ``runs``: run machinery every runner shares (executors, the run-directory journal, the
  source fingerprint) and the plug-in loader;
- ``engines``: the five engines, policies and mutants;
- ``verifier``: checkers, controls, the suite runner and its reports;
- ``backends``: the planner (needs only profile cards) and the CuPy backend (``gpu``);
- ``studies``: the framework cohort and the executed evaluation (calibration included);
- ``front``: what users import and run: ``replayverify`` itself, ``_api``,
  ``strategies``, and every command line (``cli``, its shared ``cli_common``, each
  package's ``cli``, ``__main__``).

Within a layer, units may import each other (the test still refuses circles).
"""

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("replayverify._layers", "replayverify._version", "replayverify.untrusted")),
    ("programs", ("replayverify.programs",)),
    ("runs", ("replayverify.runs", "replayverify.plugins")),
    ("engines", ("replayverify.engines",)),
    ("verifier", ("replayverify.verifier",)),
    ("backends", ("replayverify.planner", "replayverify.gpu")),
    ("studies", ("replayverify.cohort", "replayverify.evaluate")),
    ("front", ("replayverify", "replayverify._api", "replayverify.strategies",
               "replayverify.cli", "replayverify.cli_common", "replayverify.__main__")),
)


def layer_of(module: str) -> int | None:
    """The index in :data:`LAYERS` of a module of this package (dotted name; a package by
    its own name), or None if no layer names it. A command line module (``*.cli``) is
    ``front``'s wherever it lives; otherwise the longest listed prefix decides."""
    if module.rpartition(".")[2] == "cli":
        return len(LAYERS) - 1
    best, found = -1, None
    for i, (_, units) in enumerate(LAYERS):
        for unit in units:
            if (module == unit or module.startswith(unit + ".")) and len(unit) > best:
                best, found = len(unit), i
    return found
