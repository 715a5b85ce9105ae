"""Where each ``${{ }}`` stands in a /bin/sh command: the scanner behind runner/expr/shellquote.py.

It reads the literal text around the values as the shell's parser would, far enough to know the
quoting at each gap: words, quotes, ``$( )``, ``( )`` subshells, ``case`` arms (whose ``)`` does
not close a ``$(``), ``$(( ))`` and ``(( ))`` arithmetic, ``[[ ]]``, here-documents, comments,
escapes and line continuations, backticks, ``${ }``. The shell is dash on Debian, bash elsewhere,
so a construct the two read differently, or one this scanner does not model, is not guessed at:
every value after it is refused ("lost"). A value is also refused where the text it lands in is
parsed again as shell code (``sh -c '...'``, ``eval``, ``ssh host ...``, piped into ``sh``).
"""

from __future__ import annotations

import re

from ._shellcode import TEST_ARITH, reparsed, runs_input, unwrapped
from ._shellgrammar import (
    ARITH_CHARS,
    ARITH_OPS,
    DOUBLE_RUN,
    END_WORDS,
    HEREDOC_OP,
    HEREDOC_WORD,
    KEEP_START,
    NAME,
    RESERVED,
    SPECIAL_PARAMS,
    WORD_RUN,
    Frame,
    Kind,
    Place,
    Unquotable,
    Word,
)


class Scanner:
    """Feed the literal texts in order; ask ``place`` at each gap; ``finish`` at the end."""

    def __init__(self) -> None:
        self.stack: list[Frame] = [Frame(Kind.CMD)]
        self.lost: str | None = None
        self.pending = ""  # text held back: "$", "\\", "<<", ")" of arithmetic at an end
        self.comment = False
        # (delimiter, strip tabs, quoted): bodies to read after the next newline
        self.heredocs: list[tuple[str, bool, bool]] = []
        self.in_heredoc: tuple[str, bool, bool] | None = None
        self.line = ""
        self.late: list[str] = []  # refusals learnt after the value (a pipe into sh)

    # -- the gaps -------------------------------------------------------------------------

    def place(self, ordinal: int) -> Place:
        where = f"${{{{ }}}} number {ordinal} of the command"
        if self.lost is not None:
            raise Unquotable(f"{where} comes after {self.lost}, which shells read differently")
        if self.in_heredoc is not None:
            if self.in_heredoc[2]:
                raise Unquotable(f"{where} is inside a quoted here-document, which expands nothing")
            if self.line.endswith("$") or (len(self.line) - len(self.line.rstrip("\\"))) % 2:
                raise Unquotable(f"{where} follows a '$' or '\\' in a here-document")
            if "$(" in self.line or "`" in self.line or "${" in self.line:
                # (inside $(( )) bash evaluates it as arithmetic, running a subscript's $( ))
                raise Unquotable(f"{where} follows $( ), ` or ${{ }} on its here-document line")
            self.line += "\x00"  # the value's place: this line is no delimiter
            return Place.HEREDOC
        if self.comment:
            raise Unquotable(f"{where} is inside a comment")
        if self.pending:
            raise Unquotable(f"{where} follows {self.pending[:2]!r}, whose meaning depends on it")
        top = self.stack[-1]
        if top.kind is Kind.CMD and top.depth:
            raise Unquotable(f"{where} is inside (( )) arithmetic")
        if top.kind is not Kind.CMD:
            under = self.stack[-2]
            if top.kind not in (Kind.SINGLE, Kind.DOUBLE):
                raise Unquotable(f"{where} is inside {top.kind.value}")
            if under.kind is not Kind.CMD:
                raise Unquotable(f"{where} is inside {under.kind.value}")
        cmd = self._cmd()
        if cmd.cases and cmd.cases[-1] == "in":
            raise Unquotable(f"{where} stands where `in` of a case is expected")
        for frame in self.stack:
            if frame.kind is not Kind.CMD:
                continue
            if frame.word is None:
                frame.word = Word()
            frame.word.holds, frame.word.plain, frame.word.literal = True, False, False
            names = [w.text if w.literal else None for w in frame.words]
            reason = reparsed(names, frame.word.text)
            if reason:
                raise Unquotable(f"{where} {reason}")
            frame.pipe_holds = True
        if cmd.target and cmd.redirect == "<<<":
            cmd.stdin_holds = True
        if top.kind is Kind.CMD:
            return Place.QUOTED if top.dbracket else Place.BARE
        return Place.SINGLE if top.kind is Kind.SINGLE else Place.DOUBLE

    def finish(self) -> None:
        top = self.stack[-1]
        if top.kind is Kind.CMD and not top.depth and not self.comment and not self.pending:
            self._end_word()  # the last word: `... | sh` at the very end
        for frame in self.stack:
            if frame.kind is Kind.CMD:
                self._command_end(frame)
        if self.late:
            raise Unquotable(self.late[0])

    def _cmd(self) -> Frame:
        return next(f for f in reversed(self.stack) if f.kind is Kind.CMD)

    def _lose(self, what: str) -> None:
        if self.lost is None:
            self.lost = what

    # -- the text -------------------------------------------------------------------------

    def feed(self, text: str) -> None:
        text, self.pending = self.pending + text, ""
        i = 0
        while i < len(text):
            i = self._step(text, i)

    def _step(self, text: str, i: int) -> int:
        c = text[i]
        if self.in_heredoc is not None or self.comment:  # a line at a time
            end = text.find("\n", i)
            if self.in_heredoc is not None:
                self.line += text[i:] if end < 0 else text[i:end]
                return len(text) if end < 0 else self._heredoc_char("\n", end)
            if end < 0:
                return len(text)
            self.comment = False
            return self._newline(end)
        top = self.stack[-1]
        kind = top.kind
        if kind is Kind.SINGLE:  # up to the closing quote at once
            end = text.find("'", i)
            self._quoted_text(text[i:] if end < 0 else text[i:end])
            if end < 0:
                return len(text)
            self.stack.pop()
            return end + 1
        if kind is Kind.DOUBLE and c not in '"\\$`':
            run = DOUBLE_RUN.match(text, i)
            assert run is not None
            self._quoted_text(run.group())
            return run.end()
        if kind is Kind.ANSI:
            if c == "\\":
                if text[i + 1 : i + 2] == "'":
                    self._lose("$'...' with \\' inside")
                return self._escape(text, i)
            if c == "'":
                self.stack.pop()
            return i + 1
        if kind is Kind.BACKTICK:
            if c == "\\":
                return self._escape(text, i)
            if c == "`":
                self.stack.pop()
            return i + 1
        if c == "\\":
            if text[i + 1 : i + 2] == "\n":
                return i + 2  # a line continuation: gone before the shell reads words
            if kind is Kind.CMD:  # `s\h` is the word sh: the escaped letter is kept
                self._word(plain=False, char=text[i + 1 : i + 2])
            return self._escape(text, i)
        if c == "`":
            self._word(plain=False, literal=False)
            self.stack.append(Frame(Kind.BACKTICK))
            return i + 1
        if c == "$":
            return self._dollar(text, i)
        if kind is Kind.DOUBLE:
            if c == '"':
                self.stack.pop()
            else:
                self._quoted_text(c)
            return i + 1
        if kind is Kind.PARAM:
            return self._param_char(c, i)
        if kind is Kind.ARITH:
            return self._arith_char(text, i)
        if top.depth:  # (( )): arithmetic too
            return self._arith_char(text, i)
        return self._cmd_char(text, i)

    def _escape(self, text: str, i: int) -> int:
        if i + 1 == len(text):
            self.pending = "\\"
            return i + 1
        return i + 2

    def _dollar(self, text: str, i: int) -> int:
        nxt = text[i + 1 : i + 3]
        if i + 1 == len(text) or (nxt == "(" and i + 2 == len(text)):
            self.pending = text[i:]  # "$" or "$(" at the end: decided by what follows
            return len(text)
        top = self.stack[-1]
        if top.kind is Kind.CMD and not top.depth:
            self._word(plain=False, literal=False)
        if nxt == "((":
            self.stack.append(Frame(Kind.ARITH))
            return i + 3
        if nxt.startswith("("):
            self.stack.append(Frame(Kind.CMD, closer=")"))
            return i + 2
        if nxt.startswith("{"):
            self.stack.append(Frame(Kind.PARAM, in_double=self._in_double()))
            return i + 2
        if nxt.startswith("[") and top.kind is not Kind.ARITH:
            self._lose("$[ ] (bash arithmetic)")
        elif nxt.startswith("'") and top.kind is Kind.CMD and not top.depth:
            self.stack.append(Frame(Kind.ANSI))
            return i + 2
        name = NAME.match(text, i + 1)
        if name:
            return name.end()
        return i + 2 if nxt[:1] in SPECIAL_PARAMS else i + 1

    def _in_double(self) -> bool:
        for frame in reversed(self.stack):
            if frame.kind is Kind.DOUBLE:
                return True
            if frame.kind is Kind.CMD:
                return False
        return False

    def _param_char(self, c: str, i: int) -> int:
        top = self.stack[-1]
        if c == "}":
            self.stack.pop()
        elif c == "{":
            self._lose("a { inside ${...}")
        elif c == "@":  # ${x@P}: bash expands a variable's value as a prompt, running $( )
            self.late.append(
                "a ${...@...} transformation: bash may expand a variable's value as a prompt "
                "(${x@P} runs its $( )), a value in the command could reach it"
            )
        elif c in "'\"" and top.in_double:
            self._lose('a quote inside "${...}"')
        elif c == "'":
            self.stack.append(Frame(Kind.SINGLE))
        elif c == '"':
            self.stack.append(Frame(Kind.DOUBLE))
        return i + 1

    def _arith_char(self, text: str, i: int) -> int:
        c = text[i]
        top = self.stack[-1]
        if c == "(":
            top.depth += 1
        elif c == ")":
            floor = 1 if top.kind is Kind.CMD else 0
            if top.depth > floor:
                top.depth -= 1
            elif i + 1 == len(text):
                self.pending = ")"
                self._lose("an arithmetic ')' at the end of a text")
            elif text[i + 1] != ")":
                self._lose("$(( or (( closed by a single ')'")
            else:
                if top.kind is Kind.ARITH:
                    self.stack.pop()
                else:
                    top.depth, top.cmd_start = 0, False
                return i + 2
        elif c not in ARITH_CHARS and c not in ARITH_OPS:
            self._lose(f"{c!r} inside arithmetic")
        elif top.kind is Kind.CMD and text.startswith("<<", i):
            self._lose("<< inside (( )), a here-document to dash")
        return i + 1

    # -- a command ------------------------------------------------------------------------

    def _quoted_text(self, c: str) -> None:
        """A quoted character: part of its word's text (`'sh' -c`, `"X=1"`), never a keyword."""
        under = self.stack[-2]
        if under.kind is Kind.CMD and under.word is not None:
            under.word.text += c

    def _word(self, *, plain: bool = True, literal: bool = True, char: str = "") -> None:
        top = self._cmd()
        if top.word is None:
            top.word = Word()
        top.word.text += char
        top.word.plain = top.word.plain and plain
        top.word.literal = top.word.literal and literal

    def _cmd_char(self, text: str, i: int) -> int:
        c = text[i]
        top = self.stack[-1]
        if c in " \t":
            self._end_word()
            return i + 1
        if c == "\n":
            self._end_word()
            return self._newline(i)
        if c == "'":
            self._word(plain=False)
            self.stack.append(Frame(Kind.SINGLE))
            return i + 1
        if c == '"':
            self._word(plain=False)
            self.stack.append(Frame(Kind.DOUBLE))
            return i + 1
        if c == "#" and top.word is None:
            if top.dbracket:
                self._lose("# inside [[ ]]")
            self.comment = True
            return i + 1
        if c in ";&|":
            self._end_word()
            return self._operator(text, i)
        if c in "<>":
            return self._redirect(text, i)
        if c == "(":
            return self._open_paren(text, i)
        if c == ")":
            self._end_word()
            return self._close_paren(i)
        run = WORD_RUN.match(text, i)
        assert run is not None
        self._word(char=run.group())
        return run.end()

    def _end_word(self) -> None:
        top = self.stack[-1]
        word, top.word = top.word, None
        if word is None:
            return
        if top.target:
            top.target = False
            return
        self._end_command_word(word.text if word.plain else None, word)

    def _end_command_word(self, text: str | None, word: Word | None = None) -> None:
        top = self.stack[-1]
        cases = top.cases
        state = cases[-1] if cases else "body"
        if state == "word":
            cases[-1] = "in"
            return
        if state == "in":
            if text == "in":
                cases[-1] = "pattern"
                top.pattern_start = True
            else:
                self._lose("a case without `in`")
            return
        if state == "pattern":
            if top.pattern_start and text == "esac":
                cases.pop()
                top.cmd_start = False
            top.pattern_start = False
            return
        if top.dbracket:
            if text == "]]":
                top.dbracket = False
                top.cmd_start = False
            elif top.after_andor and text in RESERVED:
                self._lose("a reserved word after && or || inside [[ ]]")
            top.after_andor = False
            if word is not None:
                self._dbracket_operand(top, word, text)
            return
        if top.cmd_start and text is not None and text in RESERVED:
            if top.prefix:
                self._lose(f"`{text}` after a redirection or assignment")
            elif text == "case":
                cases.append("word")
                top.cmd_start = False
            elif text == "esac" and cases:
                cases.pop()
                top.cmd_start = False
            elif text == "[[":
                top.dbracket = True
                top.cmd_start = False
                top.last_operand = ("", False)
            elif text in KEEP_START:
                top.cmd_start = True
            elif text in END_WORDS:
                top.cmd_start = False
            elif text == "for":
                top.cmd_start = False
                top.words = [Word("for")]
            else:
                self._lose(f"`{text}`")
            return
        assigned = word.text.split("=", 1)[0] if word is not None and "=" in word.text else ""
        if top.cmd_start and NAME.fullmatch(assigned):
            top.prefix = True  # an assignment: the command name is still to come
            return
        if word is not None:
            top.after_pipe = False
            top.words.append(word)
        top.cmd_start = False

    def _dbracket_operand(self, top: Frame, word: Word, text: str | None) -> None:
        """bash evaluates the operands of [[ -eq ]] (-lt, ...) and [[ -v ]] as arithmetic, so a
        subscript in a value would run its $( ): a value beside one is refused."""
        before, before_holds = top.last_operand
        if (word.holds and before in TEST_ARITH) or (text in TEST_ARITH and before_holds):
            self.late.append(
                f"a ${{{{ }}}} value is an operand of `[[ ... {before or text} ... ]]`, which "
                "bash evaluates as arithmetic (running any $( ) in a subscript)"
            )
        top.last_operand = (text or "", word.holds)

    def _separator(self, *, pipe: bool = False) -> None:
        top = self.stack[-1]
        self._command_end(top)
        top.cmd_start, top.prefix, top.words, top.stdin_holds = True, False, [], False
        top.after_pipe = top.piped = pipe
        if not pipe:
            top.pipe_holds = False

    def _command_end(self, frame: Frame) -> None:
        """A simple command ends: refuse it if it runs as shell code a value it reads on its
        input (``echo value | sh``, ``sh <<< value``, ``| xargs sh -c``)."""
        names = [w.text.rsplit("/", 1)[-1] if w.literal else "" for w in frame.words]
        if not names or not (frame.stdin_holds or (frame.piped and frame.pipe_holds)):
            return
        if runs_input(names):
            how = "given on the input of" if frame.stdin_holds else "piped into"
            name = (unwrapped(names) or names)[0]
            self.late.append(f"a ${{{{ }}}} value is {how} `{name}`, which runs it as code")

    def _operator(self, text: str, i: int) -> int:
        top = self.stack[-1]
        two = text[i : i + 2]
        if top.dbracket:
            if two in ("&&", "||"):
                top.after_andor = True
                return i + 2
            self._lose(f"{text[i]!r} inside [[ ]]")
            return i + 1
        state = top.cases[-1] if top.cases else "body"
        if state == "pattern" and text[i] == "|" and two != "||":
            return i + 1
        if state != "body":
            self._lose(f"{text[i]!r} in a case pattern")
            return i + 1
        if two == ";;":
            if not top.cases or text[i + 2 : i + 3] == "&":
                self._lose("';;' outside a case arm, or ';;&'")
                return i + 2
            top.cases[-1] = "pattern"
            top.pattern_start = True
            top.cmd_start, top.words = False, []
            return i + 2
        if two in (";&", "|&", "&>"):
            self._lose(repr(two))
            return i + 2
        if two in ("&&", "||"):
            self._separator()
            return i + 2
        self._separator(pipe=text[i] == "|")
        return i + 1

    def _redirect(self, text: str, i: int) -> int:
        top = self.stack[-1]
        if top.dbracket:
            if text[i : i + 2] in ("<<", ">>"):
                self._lose("<< or >> inside [[ ]]")
            self._end_word()
            return i + 1
        if top.word is not None and top.word.plain and top.word.text.isdigit():
            top.word = None  # 2>file: the digits name a descriptor, not a word
        self._end_word()
        if top.cases and top.cases[-1] != "body":
            self._lose("a redirection in a case pattern")
        if text[i + 1 : i + 2] == "(":  # <( ) and >( ): bash's process substitution
            # bash's alone (a syntax error to dash), and what it feeds may run a value given
            # anywhere in the command (`echo v | tee >(sh)`): refused wherever the value is.
            self.late.append("<( ) or >( ) (process substitution) in a command with a ${{ }} value")
            self._word(plain=False, literal=False)
            self.stack.append(Frame(Kind.CMD, closer=")"))
            return i + 2
        if text.startswith("<<", i) and not text.startswith("<<<", i):
            return self._heredoc_op(text, i)
        op = re.match(r"<<<|<>|<&|>&|>>|>\||[<>]", text[i:])
        assert op is not None
        top.target, top.redirect = True, op.group()
        if top.cmd_start:
            top.prefix = True
        return i + op.end()

    def _heredoc_op(self, text: str, i: int) -> int:
        m = HEREDOC_OP.match(text, i)
        assert m is not None
        word = HEREDOC_WORD.match(text, m.end())
        if word is None or word.end() == len(text):
            self.pending = text[i:]  # the delimiter may go on in the next literal
            return len(text)
        delimiter = re.sub(r"""['"\\]""", "", word.group(0))
        self.heredocs.append((delimiter, m.group(1) == "-", delimiter != word.group(0)))
        if self.stack[-1].cmd_start:
            self.stack[-1].prefix = True
        return word.end()

    def _open_paren(self, text: str, i: int) -> int:
        top = self.stack[-1]
        state = top.cases[-1] if top.cases else "body"
        if state == "pattern" and top.pattern_start and top.word is None:
            return i + 1  # case x in (a) ...: the optional ( of a pattern
        if top.dbracket:
            self._lose("( inside [[ ]]")
            return i + 1
        if top.word is None and top.cmd_start and not top.prefix and state == "body":
            if text[i + 1 : i + 2] == "(":
                top.depth = 1  # (( )): bash's arithmetic command, dash's two subshells
                return i + 2
            # A subshell reads the pipe its command reads: `| (sh)` runs a value piped in.
            inner = Frame(Kind.CMD, closer=")", piped=top.piped, pipe_holds=top.pipe_holds)
            self.stack.append(inner)
            return i + 1
        self._end_word()
        rest = text[i + 1 :].lstrip(" \t")
        if len(top.words) == 1 and top.words[0].plain and rest.startswith(")"):
            top.words, top.cmd_start = [], True  # name(): a function's body follows
            return len(text) - len(rest) + 1
        self._lose("a '(' inside a command")
        return i + 1

    def _close_paren(self, i: int) -> int:
        top = self.stack[-1]
        if top.cases and top.cases[-1] == "pattern":
            top.cases[-1] = "body"
            top.cmd_start, top.words, top.prefix = True, [], False
            return i + 1
        if top.closer == ")" and not top.cases and not top.dbracket:
            if self.heredocs:
                self._lose("a here-document still open at ')'")
            self._command_end(top)
            self.stack.pop()
            outer = self.stack[-1]
            if outer.kind is Kind.CMD and outer.word is None:  # ( ): a compound command ends
                outer.cmd_start = False
            return i + 1
        self._lose("a ')' that closes nothing the scanner knows")
        return i + 1

    def _newline(self, i: int) -> int:
        top = self.stack[-1]
        if top.dbracket:
            self._lose("a newline inside [[ ]]")
        state = top.cases[-1] if top.cases else "body"
        if state == "body" and not (top.after_pipe and top.cmd_start and not top.words):
            self._separator()
        if self.heredocs:
            self.in_heredoc = self.heredocs.pop(0)
            self.line = ""
        return i + 1

    def _heredoc_char(self, c: str, i: int) -> int:
        assert self.in_heredoc is not None
        if c != "\n":
            self.line += c
            return i + 1
        delimiter, strip, quoted = self.in_heredoc
        line = self.line.lstrip("\t") if strip else self.line
        self.line = ""
        if not quoted and ("$(" in line or "`" in line or "${" in line or line.endswith("\\")):
            # dash parses a body's $( ) as it reads, past the delimiter line if unclosed
            self._lose("$( ), ` or ${ } in a here-document's body")
        if line == delimiter:
            self.in_heredoc = self.heredocs.pop(0) if self.heredocs else None
        return i + 1
