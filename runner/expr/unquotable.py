"""The error of a value that no quoting keeps data: a leaf, so that a command without values
(the common case) reaches it without loading the shell's grammar and scanner."""

from __future__ import annotations


class Unquotable(ValueError):
    """A value stands where no quoting keeps it data; ``reason`` says where."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
