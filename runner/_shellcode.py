"""What a command does with its arguments, for runner/_shellscan.py: whether a ``${{ }}`` value
in one is text that is parsed again as shell code (the script of ``sh -c``, arguments of
``eval``, ``ssh``, ``su -c``), or a name or arithmetic bash evaluates (``read``, ``let``,
``declare -a``, an array subscript, operands of ``[[ -eq ]]``: a subscript in them runs its
``$( )``). Quoting cannot keep a value data there, so such a value is refused.
"""

from __future__ import annotations

import re

_SHELLS = frozenset(
    {"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "yash", "posh", "busybox", "fish", "csh"}
    | {"tcsh", "rbash", "lksh", "oksh", "pdksh"}
)
_RUNS_ARGS = frozenset({"eval", "trap", "ssh", "watch", "parallel", "alias"})
# bash builtins that take a word as a variable name (a subscript in it is arithmetic, which runs
# $( )), or evaluate it as arithmetic, or, with -a/-A/-i, evaluate an assigned value.
_NAMES_VARIABLE = frozenset({"read", "mapfile", "readarray", "getopts", "let"})
_DECLARES = frozenset({"declare", "typeset", "local", "readonly", "export"})
TEST_ARITH = frozenset({"-eq", "-ne", "-lt", "-le", "-gt", "-ge", "-v"})
_SUBSCRIPT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\[[^\]]*\Z")
_RUNS_OPTION = frozenset({"su", "runuser", "flock", "script", "sudo", "doas"})
_RUNS_FLAGS = frozenset({"-c", "--command", "-s", "--shell", "-i", "--login"})


def runs_input(names: list[str]) -> bool:
    """Whether the simple command ``names`` runs what it reads on its input as code
    (``| sh``, ``| xargs sh -c``, ``bash <<< text``)."""
    first = names[0] if names else ""
    if first in _SHELLS or first in _RUNS_ARGS:
        return True
    return first in ("xargs", "parallel") and any(n in _SHELLS for n in names[1:])


def reparsed(words: list[str | None], holder: str) -> str | None:
    """Why a value in the word after ``words`` (the simple command so far, None for a word
    with an expansion), whose text before the value is ``holder``, would be evaluated as code,
    or None. ``sh -c 'script' name args``: the script would be; the args are not."""
    names = [w.rsplit("/", 1)[-1] if w is not None else None for w in words]
    last = len(words)
    if _SUBSCRIPT.match(holder):
        return "is inside an array subscript, which bash evaluates as arithmetic (running $( ))"
    for i, name in enumerate(names[:last]):
        if name in _RUNS_ARGS:
            return f"is an argument of `{name}`, which runs its arguments as shell code"
        if name in _NAMES_VARIABLE or (name == "printf" and names[last - 1] == "-v"):
            return f"is an argument of `{name}`, which bash evaluates (a subscript runs $( ))"
        if name in ("test", "[") and names[last - 1] == "-v":
            return f"is the operand of `{name} -v`, which bash evaluates (a subscript runs $( ))"
        if name in _DECLARES:
            flags = "".join(n[1:] for n in names[i + 1 : last] if n and n[:1] in "-+")
            if set(flags) & set("aAi") or "=" not in holder:
                return f"is an argument of `{name}`, which bash may evaluate as code or arithmetic"
        if name in _RUNS_OPTION and any(n in _RUNS_FLAGS for n in names[i + 1 : last]):
            return f"is an argument of `{name}` with a command to run as shell code"
        if name in _SHELLS:
            j, has_c = i + 1, False
            while j < last and (names[j] or "").startswith(("-", "+")) and names[j] != "--":
                flag = names[j] or ""
                has_c = has_c or (not flag.startswith("--") and "c" in flag[1:])
                j += 1 + (flag in ("-o", "+o", "-O", "+O"))
            unknown = j < last and names[j] is None and j + 1 >= last  # sh $FLAGS value
            if (has_c and j >= last) or (not has_c and unknown):
                return f"is part of the script of `{name} -c`, which runs it as shell code"
    return None
