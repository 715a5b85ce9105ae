"""What a command does with its arguments, for runner/expr/_shellscan.py: whether a ``${{ }}`` value
in one is text that is parsed again as shell code (the script of ``sh -c``, arguments of
``eval``, ``ssh``, ``su -c``), or a name or arithmetic bash evaluates (``read``, ``let``,
``declare -a``, an array subscript, operands of ``[[ -eq ]]``: a subscript in them runs its
``$( )``), or the program of another interpreter (``python -c``, ``perl -e``, ``node -e``, the
program of ``awk``, ``sed`` and ``jq``). Quoting cannot keep a value data there, so such a value
is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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
# Interpreters and the short options whose argument is a program (`perl -ne CODE` too).
_INTERPRETERS: dict[str, str] = {
    **dict.fromkeys(("python", "python3", "python2", "pypy", "pypy3"), "c"),
    **dict.fromkeys(("perl", "ruby", "lua", "Rscript", "julia", "osascript"), "eE"),
    **dict.fromkeys(("node", "nodejs"), "ep"),
    "php": "r",
    **dict.fromkeys(("pwsh", "powershell"), "cC"),
}
_LONG_CODE = frozenset({"--eval", "--print", "--command", "-Command", "-command"})


@dataclass(frozen=True)
class _Tool:
    """A tool whose first operand is a program, unless a file flag gave it one."""

    code: frozenset[str]  # options whose argument is a program
    files: frozenset[str]  # options naming a program file (no operand is the program then)
    with_args: dict[str, int]  # other options and how many words they take


_TOOLS: dict[str, _Tool] = {
    **dict.fromkeys(
        ("awk", "gawk", "mawk", "nawk"),
        _Tool(
            frozenset({"-e", "--source"}),
            frozenset({"-f", "--file"}),
            {"-F": 1, "-v": 1, "--field-separator": 1, "--assign": 1},
        ),
    ),
    "sed": _Tool(
        frozenset({"-e", "--expression"}),
        frozenset({"-f", "--file"}),
        {"-l": 1, "--line-length": 1},
    ),
    "jq": _Tool(
        frozenset(),
        frozenset({"-f", "--from-file"}),
        {"--arg": 2, "--argjson": 2, "--slurpfile": 2, "--rawfile": 2, "--indent": 1, "-L": 1},
    ),
}


# Commands that run the command in their arguments (`env sh`, `exec sh`, `timeout 5 sh`), with
# how many operands they take before it; their options are skipped too.
_WRAPPERS = {"env": 0, "exec": 0, "command": 0, "builtin": 0, "nice": 0, "nohup": 0}
_WRAPPERS |= {"time": 0, "stdbuf": 0, "setsid": 0, "chrt": 1, "ionice": 0, "timeout": 1}


def unwrapped(names: list[str]) -> list[str]:
    """``names`` without the commands in front that only run the rest (``env A=1 exec sh``:
    ``sh``); an option or assignment of theirs is dropped with them."""
    i = 0
    while i < len(names) and names[i] in _WRAPPERS:
        skip = _WRAPPERS[names[i]]
        i += 1
        while i < len(names) and (names[i][:1] == "-" or "=" in names[i]):
            i += 1
        i += skip
    return names[i:] if i else names


def runs_input(names: list[str]) -> bool:
    """Whether the simple command ``names`` runs what it reads on its input as code
    (``| sh``, ``| env sh``, ``| xargs sh -c``, ``bash <<< text``)."""
    names = unwrapped(names)
    first = names[0] if names else ""
    if first in _SHELLS or first in _RUNS_ARGS:
        return True
    if first in _INTERPRETERS and names[1:] in ([], ["-"]):
        return True
    return first in ("xargs", "parallel") and any(n in _SHELLS for n in names[1:])


def reparsed(words: list[str | None], holder: str) -> str | None:
    """Why a value in the word after ``words`` (the simple command so far, None for a word
    with an expansion), whose text before the value is ``holder``, would be evaluated as code,
    or None. ``sh -c 'script' name args``: the script would be; the args are not."""
    names = [w.rsplit("/", 1)[-1] if w is not None else None for w in words]
    if names and names[0] is not None and names[0] in _WRAPPERS and None not in names:
        plain = [n for n in names if n is not None]
        names = names[len(plain) - len(unwrapped(plain)) :]
    last = len(names)
    if _SUBSCRIPT.match(holder):
        return "is inside an array subscript, which bash evaluates as arithmetic (running $( ))"
    if names and names[0] is None and any(n in _RUNS_FLAGS or n == "-c" for n in names[1:]):
        return "follows -c of a command named by an expansion ($SHELL -c), which may be a shell"
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
        if name in _INTERPRETERS and _code_flag(names[last - 1], holder, _INTERPRETERS[name]):
            return f"is part of the program of `{name}`, which runs it as code"
        if name in _TOOLS and _is_program(names, i + 1, last, _TOOLS[name]):
            return f"is part of the program of `{name}`, which reads it as code"
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


def _code_flag(before: str | None, holder: str, letters: str) -> bool:
    """Whether a value follows an option whose argument is a program (``-c``, ``-ne``,
    ``--eval``), or is glued to one in its own word (``-e'print ...'``)."""
    if before in _LONG_CODE:
        return True
    if before and before[:1] == "-" and before[1:].isalpha() and before[-1] in letters:
        return True
    return holder[:1] == "-" and holder[1:2] != "" and holder[1:2] in letters


def _is_program(names: list[str | None], start: int, last: int, tool: _Tool) -> bool:
    """Whether the word at ``last`` is ``tool``'s program: after one of its code options, or
    its first operand when no option gave it a program."""
    j, given = start, False
    while j < last:
        name = names[j]
        if name is None:
            return False  # a word with an expansion: an operand, the program or not
        if name == "--":
            j += 1
            break
        if name in tool.code or name in tool.files:
            if name in tool.code and j + 1 == last:
                return True
            given, j = True, j + 2
            continue
        if name in tool.with_args:
            j += 1 + tool.with_args[name]
            continue
        if name.startswith("-") and name != "-":
            j += 1
            continue
        break
    return not given and j == last
