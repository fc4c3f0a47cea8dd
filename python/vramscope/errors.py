"""The exceptions of vramscope's Python API (docs/guide/python.md).

Every failure of a call is a :class:`VramscopeError` carrying the one line the command would have
printed (what, where, what to do) and the command's exit status. Ctrl-C is not an error: the call
stops its work and raises :class:`KeyboardInterrupt`, as any Python call does, leaving the
interpreter (a notebook's kernel) alive and no half-written output behind.
"""

from __future__ import annotations


class VramscopeError(Exception):
    """A call that failed. ``message`` is the one-line reason; ``exit_code`` the command's status
    (docs/guide/README.md, "Exit statuses")."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


class InputError(VramscopeError):
    """The input is unreadable, damaged or not what the call needs (exit status 1): a file that is
    not a recording, a report database that is not one, a failed check."""


class UsageError(VramscopeError, ValueError):
    """The call's arguments are wrong (exit status 2): an unknown option, a value out of range, a
    model that is neither a preset nor a file. Also a :class:`ValueError`."""


class InternalError(VramscopeError):
    """A bug in vramscope (exit status 3). Please report it with the message."""


class EngineNotFound(VramscopeError, FileNotFoundError):
    """The ``vramscope`` program the package drives is not installed where it looks."""


def error_for(exit_code: int, message: str) -> VramscopeError:
    """The exception for a command that exited with ``exit_code`` after printing ``message``."""
    kinds: dict[int, type[VramscopeError]] = {1: InputError, 2: UsageError, 3: InternalError}
    return kinds.get(exit_code, VramscopeError)(message, exit_code)
