"""The warm server: `runner apply` forked from a process that has already imported runner.

Most of a short apply's CPU is the interpreter importing runner and the standard library it uses
(issue 43: a fresh one-step apply spent ~90 ms importing, ~45 ms applying). A server process per
interpreter set-up imports them once and then only forks: each `runner apply` connects, hands
over what makes it the process it is (its argv, environment, working directory, standard streams,
umask, signal dispositions and mask, resource limits), and the forked child runs the apply as the
command would have, with the command's streams. The command waits, relays the signals it gets
(Ctrl-C, Ctrl-Z, a terminal's hang-up or resize) to the child, and leaves with its status.

The server is used only where the child cannot tell it apart from the command itself:

- the same interpreter, paths, flags and locale, user and groups, namespaces, cgroup and security
  label (``fit.identity``: the socket's name is a digest of it and the server checks it whole);
- the command is not confined or watched (no_new_privs, seccomp, a tracer: a sandboxed step's
  own `runner` never reaches a server outside its sandbox, and `strace runner ...` traces the
  apply);
- every environment variable the server's imports read has the command's value (the reads are
  recorded while importing, not predicted), and no module file or directory it imported has
  changed since (an upgrade or an edit starts a new server);
- the command's resource limits and niceness can be taken by the child (only lowered).

Anything else, or no server yet (one is started in the background for the next command), and
the command runs in its own process as before. ``RUNNER_SERVER=0`` turns it off; `runner server
status` and `runner server stop` show and end the servers. A server ends itself after
``RUNNER_SERVER_IDLE`` seconds (default 900) without a command.

Modules: ``fit`` (what must match, where the socket is), ``wire`` (the messages), ``client``
(the command's side), ``server`` (imports, listens, forks), ``child`` (the forked child becoming
the command's process).
"""
