#!/bin/sh
# Fuzz the surfaces around the loaders (issue #28): damaged run directories resumed,
# concurrent runs, kill-and-resume, faulty engine plug-ins, option garbage. Prints each
# failure and one summary line; exit 0 iff every case passed.
# Usage: scripts/fuzz_surfaces.sh [--examples N] [--seed S] [--no-subprocess]
set -e
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec python -m tests.property.fuzz_surfaces "$@"
