#!/bin/sh
# Fuzz program files and planner cards (issue #13): 10,000 structurally mutated inputs
# through load_program / load_card and the CLI, each under 5 s and 1 GiB, no traceback,
# no warning, one-line refusals. Prints each failure and one summary line; exit 0 iff
# every input passed.  Usage: scripts/fuzz.sh [--examples N] [--seed S] [--time-limit T]
set -e
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec python -m tests.property.fuzz_inputs "$@"
