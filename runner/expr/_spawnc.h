/* What the sandbox spawner's C files share: _spawnc.c (requests and the loop), _spawnc_rules.c
 * (Landlock rules), and its two ways of starting: _spawnc_main.c (a program) and
 * _spawnc_module.c (a Python module). */
#ifndef RUNNER_SPAWNC_H
#define RUNNER_SPAWNC_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>


#define HIDDEN __attribute__((visibility("hidden")))

/* The protocol's version, said in the spawner's first word (confined.PROTOCOL, _spawner.py's):
 * a loop built before a change of it is told apart, not sent requests it misreads. */
#define SPAWNC_PROTOCOL 2

typedef struct {
    const char **items;
    size_t n, cap;
} Strings;

typedef struct {
    int fd, flags;
    const char *name;
} Redirect;

typedef struct {
    char *header; /* owns the strings below */
    const char *command, *cwd, *root, *path, *search;
    int network, scratch;
    Strings env, read, write, write_dirs, argv, direct_env;
    Redirect *redirects;
    size_t nredirects, capredirects;
} Request;

/* the kernel's Landlock ABI version (0: none), set by serve() */
extern HIDDEN int spawnc_abi;

HIDDEN double spawnc_now(void);
HIDDEN void *spawnc_grow(void *items, size_t *cap, size_t need, size_t size);
/* A command's ruleset: its root's base grants and the request's paths (and scratch); -1 and
 * errno when Landlock refuses. */
HIDDEN int spawnc_ruleset_for(const Request *rq, const char *scratch);
/* The next command's base ruleset, made ahead (called once a command is answered). */
HIDDEN void spawnc_prebuild(void);
/* Restrict the calling process to `ruleset` (in the vfork child: system calls only). */
HIDDEN int spawnc_restrict(int ruleset);
HIDDEN long spawnc_probe_abi(void);
/* Say "ready ABI c" on the control socket, then answer runner's requests until its end closes
 * (then exit): returns -1 (errno set) only when it could not start. */
HIDDEN int spawnc_serve(int control);

#endif
