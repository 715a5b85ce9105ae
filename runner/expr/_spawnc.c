/* The sandbox's spawner loop in C: what runner/expr/_spawner.py does per command, without the
 * interpreter's ~0.5 ms a command (issue 40's cost: the 1,000-step shell chain within 1.15x of
 * unsandboxed).
 *
 * spawnc_serve(FD) is the spawner: its program (_spawnc_main.c) or its Python module
 * (_spawnc_module.c), both built by setup.py where there is a C compiler, call it. It says
 * "ready ABI c PROTOCOL", answers runner's requests on the SOCK_SEQPACKET socket FD until
 * runner's end closes, then kills what still runs and exits. The protocol is _spawner.py's (its
 * module docstring): every message is a list of fields, each a tag byte, a value and a NUL.
 * The first field is "iID" (a request, ID runner's number for it, in decimal) or "kID" (kill
 * the group of request ID's command). A request's other fields are:
 *
 *   c command (for /bin/sh -c)    d working directory   e NAME=VALUE (the shell's environment)
 *   R project root (Landlock on)  r path to read        w file to write   W directory to write
 *   n network allowed             s scratch directory wanted
 *   p direct start: program path  a its argv, in order  E its environment
 *   S the PATH to find p along, as dash does (p without a `/`; the child searches)
 *   o a redirection: "FD FLAGS NAME" (opened after the streams, in order)
 *
 * Each command is started by vfork: the child makes its own session, changes directory,
 * restricts itself with the request's Landlock ruleset (which holds for it and all it starts),
 * opens the redirections and execs; it shares the spawner's memory only until then, and touches
 * nothing but its own locals and `child_errno`. The rulesets come from _spawnc_rules.c.
 */
#include "_spawnc.h"

#define MAX_HEADER (1 << 20)
#define INLINE_MAX 65536
#define SPARE 8

/* -- a request ---------------------------------------------------------------------------- */

static void push(Strings *s, const char *value) {
    s->items = spawnc_grow(s->items, &s->cap, s->n + 2, sizeof(char *));
    s->items[s->n++] = value;
    s->items[s->n] = NULL; /* argv and environments end with NULL */
}

/* An environment's NAME=VALUE, replacing the variable's earlier value (execve's environment
 * keeps the first of two). */
static void set_variable(Strings *s, const char *entry) {
    size_t name = (size_t)(strchr(entry, '=') - entry) + 1;
    for (size_t i = 0; i < s->n; i++) {
        if (strncmp(s->items[i], entry, name) == 0) {
            s->items[i] = entry;
            return;
        }
    }
    push(s, entry);
}

static void terminate(Strings *s) {
    if (s->items == NULL) {
        push(s, NULL);
        s->n = 0;
    }
}

static void request_free(Request *rq) {
    free(rq->header);
    free(rq->env.items);
    free(rq->read.items);
    free(rq->write.items);
    free(rq->write_dirs.items);
    free(rq->argv.items);
    free(rq->direct_env.items);
    free(rq->redirects);
}

static int parse(Request *rq, char *header, size_t size) {
    memset(rq, 0, sizeof *rq);
    rq->header = header;
    if (size == 0 || header[size - 1] != '\0') return -1;
    for (char *at = header; at < header + size;) {
        char tag = *at;
        char *value = at + 1;
        if (value >= header + size) return -1; /* a tag without its value (and NUL) */
        at = value + strlen(value) + 1;
        switch (tag) {
        case 'c': rq->command = value; break;
        case 'd': rq->cwd = value; break;
        case 'R': rq->root = value; break;
        case 'p': rq->path = value; break;
        case 'S': rq->search = value; break;
        case 'n': rq->network = 1; break;
        case 's': rq->scratch = 1; break;
        case 'e': push(&rq->env, value); break;
        case 'r': push(&rq->read, value); break;
        case 'w': push(&rq->write, value); break;
        case 'W': push(&rq->write_dirs, value); break;
        case 'a': push(&rq->argv, value); break;
        case 'E': push(&rq->direct_env, value); break;
        case 'o': {
            char *end;
            long fd = strtol(value, &end, 10);
            if (*end != ' ') return -1;
            long flags = strtol(end + 1, &end, 10);
            if (*end != ' ') return -1;
            rq->redirects = spawnc_grow(rq->redirects, &rq->capredirects,
                                        rq->nredirects + 1, sizeof(Redirect));
            rq->redirects[rq->nredirects++] = (Redirect){(int)fd, (int)flags, end + 1};
            break;
        }
        default: return -1;
        }
    }
    if (rq->command == NULL || rq->cwd == NULL) return -1;
    if (rq->path != NULL && rq->argv.n == 0) rq->path = NULL;
    terminate(&rq->env);
    terminate(&rq->direct_env);
    return 0;
}

/* -- scratch directories ------------------------------------------------------------------ */

static char *scratches; /* this spawner's own directory, made at the first scratch */
static char *spare[SPARE];
static int nspare;
static unsigned made;

static int is_empty(const char *path) {
    DIR *dir = opendir(path);
    if (dir == NULL) return 0;
    struct dirent *entry;
    int empty = 1;
    while ((entry = readdir(dir)) != NULL) {
        if (strcmp(entry->d_name, ".") != 0 && strcmp(entry->d_name, "..") != 0) {
            empty = 0;
            break;
        }
    }
    closedir(dir);
    return empty;
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

static void remove_tree(const char *path) {
    nftw(path, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* An empty scratch directory: one a finished command left empty (still empty now), else new.
 * (A directory made and removed a command cost ext4 ~0.2 ms of wall.) */
static char *take_scratch(void) {
    while (nspare > 0) {
        char *path = spare[--nspare];
        if (is_empty(path)) return path;
        remove_tree(path);
        free(path);
    }
    if (scratches == NULL) {
        const char *parent = getenv("TMPDIR");
        if (parent == NULL || !*parent) parent = "/tmp";
        char path[PATH_MAX];
        for (int attempt = 0; attempt < 100 && scratches == NULL; attempt++) {
            struct timespec t;
            clock_gettime(CLOCK_REALTIME, &t);
            snprintf(path, sizeof path, "%s/runner-scratch-%d-%lld%09ld-%d", parent,
                     (int)getpid(), (long long)t.tv_sec, t.tv_nsec, attempt);
            if (mkdir(path, 0700) == 0)
                scratches = strdup(path);
            else if (errno != EEXIST)
                return NULL;
        }
        if (scratches == NULL) return NULL;
    }
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%u", scratches, ++made);
    if (mkdir(path, 0700) != 0) return NULL;
    return strdup(path);
}

static void give_back(char *scratch) {
    if (scratch == NULL) return;
    if (nspare < SPARE && is_empty(scratch)) {
        spare[nspare++] = scratch;
        return;
    }
    remove_tree(scratch);
    free(scratch);
}

/* -- starting a command ------------------------------------------------------------------- */

static volatile int child_errno;      /* set by a vfork child that could not exec */
static volatile const char *child_at; /* what it was doing */

static const int default_signals[] = {SIGPIPE, SIGXFSZ, SIGINT, SIGQUIT};

/* The descriptor limit the spawner was started with, which its commands get back: the spawner
 * raises its own to the hard limit, so that a root's base grants stay open (a soft limit of
 * 1,024 would have a project beside a thousand entries open each of them for every command). */
static struct rlimit nofile;
static int nofile_raised;

static void raise_nofile(void) {
    if (getrlimit(RLIMIT_NOFILE, &nofile) != 0 || nofile.rlim_cur >= nofile.rlim_max) return;
    struct rlimit raised = nofile;
    raised.rlim_cur = nofile.rlim_max > (1 << 20) ? (1 << 20) : nofile.rlim_max;
    nofile_raised = setrlimit(RLIMIT_NOFILE, &raised) == 0;
}

/* The file dash would execute for `name` along `search` (an empty entry is the working
 * directory): the first regular, executable file, put in `found`; NULL when there is none. In
 * the vfork child (after its chdir and Landlock): system calls and its own buffer only. */
static const char *find_program(const char *search, const char *name, char *found) {
    size_t length = strlen(name);
    for (const char *at = search;; at++) {
        const char *end = at;
        while (*end && *end != ':') end++;
        const char *dir = end == at ? "." : at;
        size_t size = end == at ? 1 : (size_t)(end - at);
        if (size + 1 + length < PATH_MAX) {
            memcpy(found, dir, size);
            found[size] = '/';
            memcpy(found + size + 1, name, length + 1);
            struct stat st;
            if (stat(found, &st) == 0 && S_ISREG(st.st_mode) && access(found, X_OK) == 0)
                return found;
        }
        if (*end == '\0') return NULL;
        at = end;
    }
}

/* The vfork child: in a frame of its own below start's (it shares start's memory until it
 * execs), making only system calls, then exec or _exit. */
__attribute__((noinline, noreturn)) static void child(const Request *rq, int ruleset, int in,
                                                      int out, int err) {
    sigset_t none;
    sigemptyset(&none);
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (size_t i = 0; i < sizeof default_signals / sizeof *default_signals; i++)
        sigaction(default_signals[i], &dfl, NULL);
    if (nofile_raised) setrlimit(RLIMIT_NOFILE, &nofile);
    if (setsid() < 0) {
        child_at = "setsid";
        goto failed;
    }
    if (chdir(rq->cwd) != 0) {
        child_at = rq->cwd;
        goto failed;
    }
    if (ruleset >= 0) {
        if (spawnc_restrict(ruleset) != 0) {
            child_at = "landlock";
            goto failed;
        }
    }
    if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0) {
        child_at = "dup2";
        goto failed;
    }
    sigprocmask(SIG_SETMASK, &none, NULL);
    char found[PATH_MAX];
    const char *program = rq->path;
    if (program != NULL && rq->search != NULL && strchr(program, '/') == NULL)
        program = find_program(rq->search, program, found); /* none: the shell says so */
    if (program != NULL) { /* a simple command, started as dash would */
        size_t i = 0;
        for (; i < rq->nredirects; i++) {
            const Redirect *r = &rq->redirects[i];
            int fd = open(r->name, r->flags, 0666);
            if (fd < 0) break;
            if (fd != r->fd) {
                int moved = dup2(fd, r->fd);
                close(fd);
                if (moved < 0) break;
            }
        }
        if (i == rq->nredirects)
            execve(program, (char *const *)rq->argv.items, (char *const *)rq->direct_env.items);
        /* dash does it again, and says why it fails in its own words */
        for (size_t j = 0; j < i; j++)
            if (rq->redirects[j].fd > 2) close(rq->redirects[j].fd);
        if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0) {
            child_at = "dup2";
            goto failed;
        }
    }
    const char *argv[] = {"/bin/sh", "-c", rq->command, NULL};
    execve("/bin/sh", (char *const *)argv, (char *const *)rq->env.items);
    child_at = "/bin/sh";
failed:
    child_errno = errno ? errno : EINVAL;
    _exit(127);
}

static pid_t start(const Request *rq, int ruleset, int in, int out, int err) {
    sigset_t all, old;
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, &old); /* no handler of the spawner's runs in the child */
    child_errno = 0;
    child_at = NULL;
    pid_t pid = vfork();
    if (pid == 0) child(rq, ruleset, in, out, err);
    int saved = errno;
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (pid < 0) {
        errno = saved;
        child_at = "vfork";
        return -1;
    }
    if (child_errno != 0) {
        waitpid(pid, NULL, 0);
        errno = child_errno;
        return -1;
    }
    return pid;
}

/* -- the loop ----------------------------------------------------------------------------- */

typedef struct {
    pid_t pid;
    unsigned long long id; /* runner's number for the request */
    char *scratch;
} Job;

static Job *jobs;
static size_t njobs, capjobs;
static int control_fd;

static void kill_group(pid_t pid) { kill(-pid, SIGKILL); }

/* One answer on the control socket: "exit ID STATUS" or "error ID WHY". Blocking: runner reads
 * its answers as they come, and no more of them wait than commands it started. */
static void answer(const char *text) { send(control_fd, text, strlen(text), MSG_NOSIGNAL); }

static void answer_error(unsigned long long id, const char *what, int error) {
    char text[PATH_MAX + 256];
    if (what != NULL && what[0] == '/')
        snprintf(text, sizeof text, "error %llu [Errno %d] %s: '%s'", id, error, strerror(error),
                 what);
    else
        snprintf(text, sizeof text, "error %llu [Errno %d] %s%s%s", id, error, strerror(error),
                 what ? " in " : "", what ? what : "");
    answer(text);
}

static void answer_malformed(unsigned long long id) {
    char text[64];
    snprintf(text, sizeof text, "error %llu malformed request", id);
    answer(text);
}

static Job *job_of(pid_t pid) {
    for (size_t i = 0; i < njobs; i++)
        if (jobs[i].pid == pid) return &jobs[i];
    return NULL;
}

static void finish(Job *job, int status) {
    kill_group(job->pid); /* what it left running in the background goes with it */
    char text[64];
    snprintf(text, sizeof text, "exit %llu %d", job->id, status);
    answer(text); /* runner goes on first; the spawner tidies after */
    give_back(job->scratch);
    *job = jobs[--njobs];
    spawnc_prebuild();
}

static void shut_down(void) {
    for (size_t i = 0; i < njobs; i++) kill_group(jobs[i].pid);
    for (size_t i = 0; i < njobs; i++) waitpid(jobs[i].pid, NULL, 0);
    if (scratches != NULL) remove_tree(scratches);
    _exit(0);
}

static void reap(void) {
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid <= 0) return;
        Job *job = job_of(pid);
        if (job != NULL) finish(job, status);
    }
}

/* A message's first field, "iID" or "kID": its tag, and the ID and the field's length through
 * `id` and `used`; 0 when it is neither. */
static char first_field(const char *message, size_t size, unsigned long long *id, size_t *used) {
    if (size < 3 || (message[0] != 'i' && message[0] != 'k')) return 0;
    const char *end = memchr(message, '\0', size);
    if (end == NULL || end == message + 1) return 0;
    unsigned long long value = 0;
    for (const char *at = message + 1; at < end; at++) {
        if (*at < '0' || *at > '9' || value > (~0ULL - 9) / 10) return 0;
        value = value * 10 + (unsigned long long)(*at - '0');
    }
    *id = value;
    *used = (size_t)(end - message) + 1;
    return message[0];
}

static void kill_request(unsigned long long id) {
    for (size_t i = 0; i < njobs; i++)
        if (jobs[i].id == id) kill_group(jobs[i].pid); /* its exit is said when it is reaped */
}

static void take_request(int control) {
    char *buffer = malloc(INLINE_MAX);
    if (buffer == NULL) _exit(70);
    union {
        char space[CMSG_SPACE(5 * sizeof(int))];
        struct cmsghdr align;
    } control_data;
    struct iovec iov = {buffer, INLINE_MAX};
    struct msghdr msg = {0};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control_data.space;
    msg.msg_controllen = sizeof control_data.space;
    ssize_t got = recvmsg(control, &msg, MSG_CMSG_CLOEXEC);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) {
        free(buffer);
        return;
    }
    if (got <= 0) shut_down(); /* runner is gone: nothing it started may outlive it */
    int truncated = (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0; /* (runner never sends such) */
    int fds[4], nfds = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
            if (nfds < 4)
                fds[nfds++] = fd;
            else
                close(fd);
        }
    }
    unsigned long long id = 0;
    size_t used = 0;
    char tag = first_field(buffer, (size_t)got, &id, &used);
    if (tag == 'k' && !truncated) {
        for (int i = 0; i < nfds; i++) close(fds[i]);
        free(buffer);
        kill_request(id);
        return;
    }
    if (tag != 'i' || nfds < 3 || truncated) {
        for (int i = 0; i < nfds; i++) close(fds[i]);
        free(buffer);
        answer_malformed(tag == 'i' ? id : 0);
        return;
    }
    char *header = buffer;
    size_t size = (size_t)got;
    if (nfds > 3) { /* a large request's fields travel in a memory file */
        struct stat st;
        free(buffer);
        header = NULL;
        if (fstat(fds[3], &st) == 0 && st.st_size > 0 && st.st_size <= MAX_HEADER) {
            header = malloc((size_t)st.st_size);
            if (header == NULL) _exit(70);
            size = 0;
            while (size < (size_t)st.st_size) {
                ssize_t n = pread(fds[3], header + size, (size_t)st.st_size - size, (off_t)size);
                if (n <= 0) break;
                size += (size_t)n;
            }
        }
        close(fds[3]);
    } else {
        memmove(header, header + used, size - used);
        size -= used;
    }
    Request rq;
    char *scratch = NULL;
    int ruleset = -1;
    pid_t pid = -1;
    if (header == NULL || parse(&rq, header, size) != 0) {
        if (header == NULL) memset(&rq, 0, sizeof rq);
        answer_malformed(id);
        goto done;
    }
    if (rq.scratch) {
        scratch = take_scratch();
        if (scratch == NULL) {
            answer_error(id, "scratch directory", errno);
            goto done;
        }
    }
    char tmpdir[PATH_MAX + 8];
    if (scratch != NULL) {
        snprintf(tmpdir, sizeof tmpdir, "TMPDIR=%s", scratch);
        set_variable(&rq.env, tmpdir);
        if (rq.path != NULL) set_variable(&rq.direct_env, tmpdir);
    }
    if (rq.root != NULL && *rq.root && spawnc_abi > 0) {
        ruleset = spawnc_ruleset_for(&rq, scratch);
        if (ruleset < 0) {
            answer_error(id, "landlock", errno);
            goto done;
        }
    }
    pid = start(&rq, ruleset, fds[0], fds[1], fds[2]);
    if (pid < 0) answer_error(id, (const char *)child_at, errno);
done:
    if (ruleset >= 0) close(ruleset);
    for (int i = 0; i < 3; i++) close(fds[i]);
    request_free(&rq);
    if (pid < 0) {
        give_back(scratch);
        return;
    }
    jobs = spawnc_grow(jobs, &capjobs, njobs + 1, sizeof(Job));
    jobs[njobs++] = (Job){pid, id, scratch};
}

int spawnc_serve(int control) {
    signal(SIGINT, SIG_IGN); /* runner's ^C is runner's to handle */
    fcntl(control, F_SETFD, FD_CLOEXEC);
    control_fd = control;
    raise_nofile();
    spawnc_abi = (int)spawnc_probe_abi();
    char hello[32];
    snprintf(hello, sizeof hello, "ready %d c %d", spawnc_abi, SPAWNC_PROTOCOL);
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    int children = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    int epfd = epoll_create1(EPOLL_CLOEXEC);
    if (children < 0 || epfd < 0) return -1;
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 0};
    epoll_ctl(epfd, EPOLL_CTL_ADD, control, &ev);
    ev.data.u64 = 1;
    epoll_ctl(epfd, EPOLL_CTL_ADD, children, &ev);
    answer(hello);
    struct epoll_event ready[4];
    for (;;) {
        int n = epoll_wait(epfd, ready, 4, -1);
        if (n < 0) {
            if (errno == EINTR) continue;
            _exit(71);
        }
        for (int i = 0; i < n; i++) {
            if (ready[i].data.u64 == 0) {
                take_request(control);
            } else {
                struct signalfd_siginfo info;
                while (read(children, &info, sizeof info) > 0) {
                }
                reap();
            }
        }
    }
}
