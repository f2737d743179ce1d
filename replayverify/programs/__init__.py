"""The programs layer: IR, file format, Philox, the versioned interpreter, generators."""

from replayverify.programs.format import (
    canonical_json,
    load_program,
    program_from_dict,
    program_sha256,
    program_to_dict,
    save_program,
)
from replayverify.programs.generate import FAMILIES, generate, generate_with_attempts
from replayverify.programs.interpreter import (
    FORWARD,
    REVERSE,
    Admission,
    Execution,
    OpValues,
    execute,
    execute_op,
    loss_of,
    run_forward,
)
from replayverify.programs.model import (
    OP_SPECS,
    Buffer,
    Init,
    Loss,
    Op,
    OpKind,
    Program,
    ProgramError,
    Rng,
    View,
)
from replayverify.programs.philox import RngState
from replayverify.programs.state import Snapshot, State, initial_state, layouts

__all__ = [
    "FAMILIES",
    "FORWARD",
    "OP_SPECS",
    "REVERSE",
    "Admission",
    "Buffer",
    "Execution",
    "Init",
    "Loss",
    "Op",
    "OpValues",
    "OpKind",
    "Program",
    "ProgramError",
    "Rng",
    "RngState",
    "Snapshot",
    "State",
    "View",
    "canonical_json",
    "execute",
    "execute_op",
    "generate",
    "generate_with_attempts",
    "initial_state",
    "layouts",
    "load_program",
    "loss_of",
    "program_from_dict",
    "program_sha256",
    "program_to_dict",
    "run_forward",
    "save_program",
]
