"""The words of /bin/sh the scanner (_shellscan.py) reads by: where a value may stand
(``Place``), the frames it keeps (a command, quotes, ``${ }``, arithmetic), the simple words so
far, and the reserved words and character classes of the shell's grammar."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field

from .unquotable import Unquotable as Unquotable  # where the scanner and tests take it from


class Place(enum.Enum):
    BARE = "bare"
    QUOTED = "quoted"  # bare, but always in quotes: inside [[ ]], where -n or -f is an operator
    SINGLE = "single"
    DOUBLE = "double"
    HEREDOC = "heredoc"  # the body of an unquoted here-document: expanded, never split


class Kind(enum.Enum):
    CMD = "a command"
    SINGLE = "'...'"
    DOUBLE = '"..."'
    ANSI = "$'...'"
    BACKTICK = "backticks"
    PARAM = "${...}"
    ARITH = "arithmetic"


# Words that change the grammar when they start a command (the rest only need cmd_start kept).
KEEP_START = frozenset({"if", "then", "else", "elif", "do", "while", "until", "!", "{", "time"})
END_WORDS = frozenset({"fi", "done", "}", "esac", "]]"})
LOST_WORDS = frozenset({"function", "coproc", "select", "in", "{", "}"})
RESERVED = frozenset(
    {"case", "esac", "for", "in", "[[", "]]", "((", "))"} | KEEP_START | END_WORDS | LOST_WORDS
)
ARITH_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_ \t")
ARITH_OPS = frozenset("+-*/%<>=!&|^~?:,[]")
DOUBLE_RUN = re.compile(r'[^"\\$`]+')  # text inside "..." with no meaning to the shell
WORD_RUN = re.compile(r"[^ \t\n'\"\\`$;&|<>()]+")  # the rest of a word, up to a special
SPECIAL_PARAMS = frozenset("#?$!@*-0123456789")
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
HEREDOC_OP = re.compile(r"<<(-?)[ \t]*")
HEREDOC_WORD = re.compile(r"""(?:'[^']*'|"[^"]*"|\\.|[^\s;&|<>()'"\\])+""")


@dataclass
class Word:
    text: str = ""
    plain: bool = True  # no quote, escape or expansion: may be a reserved word
    literal: bool = True  # no expansion: ``text`` is what the command receives
    holds: bool = False  # holds a ${{ }} value


@dataclass
class Frame:
    kind: Kind
    closer: str = ""  # a CMD frame: ")" for $( ), ( ) and <( ); "" for the command itself
    word: Word | None = None
    words: list[Word] = field(default_factory=list)  # the simple command so far
    cmd_start: bool = True  # a reserved word would be recognised here
    prefix: bool = False  # a redirection or assignment came first: a keyword now is unclear
    target: bool = False  # the next word is a redirection's target
    cases: list[str] = field(default_factory=list)  # per open `case`: word, in, pattern, body
    pattern_start: bool = False
    dbracket: bool = False
    after_pipe: bool = False
    piped: bool = False  # this simple command reads a pipe
    redirect: str = ""  # the operator whose target is the next word
    stdin_holds: bool = False  # a value is this command's input (<<< value)
    after_andor: bool = False
    pipe_holds: bool = False  # a value went into this pipeline
    depth: int = 0  # ARITH: open ( inside; CMD: 1 inside `(( ))`
    in_double: bool = False  # PARAM: inside "..."
    last_operand: tuple[str, bool] = ("", False)  # in [[ ]]: the last word, and if it holds a value
