/* The sandbox spawner's Landlock rules (runner/expr/landlock.py's, in C): all of / but the
 * project readable, the temporary directories writable, /dev whole, then a request's own
 * paths. Landlock has no "deny": "all but the project" is the siblings of the project's
 * ancestors, opened once per root and granted beneath their open descriptors. */
#include "_spawnc.h"

/* Landlock: system call numbers and layouts from the kernel's include/uapi/linux/landlock.h
 * (the same numbers on every architecture that has them). */
#define LL_CREATE_RULESET 444
#define LL_ADD_RULE 445
#define LL_RESTRICT_SELF 446
#define LL_CREATE_RULESET_VERSION 1u
#define LL_RULE_PATH_BENEATH 1
#define LL_EXECUTE (1ull << 0)
#define LL_WRITE_FILE (1ull << 1)
#define LL_READ_FILE (1ull << 2)
#define LL_READ_DIR (1ull << 3)
#define LL_TRUNCATE (1ull << 14)
#define LL_IOCTL_DEV (1ull << 15)
#define LL_EVERYTHING ((1ull << 16) - 1)
#define LL_READ (LL_READ_FILE | LL_READ_DIR | LL_EXECUTE)
#define LL_FILE_RIGHTS (LL_EXECUTE | LL_WRITE_FILE | LL_READ_FILE | LL_TRUNCATE | LL_IOCTL_DEV)
#define LL_NET_BIND_TCP (1ull << 0)
#define LL_NET_CONNECT_TCP (1ull << 1)
#define LL_SCOPES 3ull /* abstract unix sockets, signals (ABI 6) */

struct ll_ruleset_attr {
    uint64_t fs, net, scoped;
};
struct ll_path_beneath {
    uint64_t allowed;
    int32_t parent_fd;
} __attribute__((packed));

#define BASE_SECONDS 5.0
#define ROOTS 4

int spawnc_abi;

static uint64_t fs_rights(int abi) {
    if (abi >= 5) return (1ull << 16) - 1;
    if (abi >= 3) return (1ull << 15) - 1;
    if (abi >= 2) return (1ull << 14) - 1;
    return (1ull << 13) - 1;
}

double spawnc_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

void *spawnc_grow(void *items, size_t *cap, size_t need, size_t size) {
    if (need <= *cap) return items;
    size_t cap2 = *cap ? *cap * 2 : 16;
    while (cap2 < need) cap2 *= 2;
    void *moved = realloc(items, cap2 * size);
    if (moved == NULL) {
        fputs("runner spawner: out of memory\n", stderr);
        _exit(70);
    }
    *cap = cap2;
    return moved;
}

typedef struct {
    char *path;
    uint64_t rights;
    int fd; /* O_PATH, or -1: opened for each ruleset (beyond the descriptor budget) */
    int is_dir;
} Grant;

typedef struct {
    char *root;
    Grant *grants;
    size_t n, cap;
    double made;
} Base;

static Base bases[ROOTS];

static int new_ruleset(int network) {
    struct ll_ruleset_attr attr = {
        fs_rights(spawnc_abi),
        (network || spawnc_abi < 4) ? 0 : (LL_NET_BIND_TCP | LL_NET_CONNECT_TCP),
        spawnc_abi >= 6 ? LL_SCOPES : 0,
    };
    size_t size = spawnc_abi >= 6 ? 24 : spawnc_abi >= 4 ? 16 : 8;
    return (int)syscall(LL_CREATE_RULESET, &attr, size, 0u);
}

static int grant_fd(int ruleset, int fd, uint64_t rights, int is_dir) {
    uint64_t known = fs_rights(spawnc_abi);
    rights &= is_dir ? known : (known & LL_FILE_RIGHTS);
    if (rights == 0) return 0;
    struct ll_path_beneath rule = {rights, fd};
    return (int)syscall(LL_ADD_RULE, ruleset, LL_RULE_PATH_BENEATH, &rule, 0u);
}

/* Grant beneath a path: nothing (and no error) when it does not exist. */
static int grant_path(int ruleset, const char *path, uint64_t rights, int follow) {
    int fd = open(path, O_PATH | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW));
    if (fd < 0) return 0;
    struct stat st;
    int done = fstat(fd, &st) == 0 ? grant_fd(ruleset, fd, rights, S_ISDIR(st.st_mode)) : 0;
    int saved = errno;
    close(fd);
    errno = saved;
    return done;
}

static void base_add(Base *b, const char *path, uint64_t rights) {
    b->grants = spawnc_grow(b->grants, &b->cap, b->n + 1, sizeof(Grant));
    b->grants[b->n++] = (Grant){strdup(path), rights, -1, 0};
}

static char *join(const char *dir, const char *name) {
    size_t a = strlen(dir), c = strlen(name);
    char *path = malloc(a + c + 2);
    if (path == NULL) _exit(70);
    memcpy(path, dir, a);
    size_t at = a;
    if (a == 0 || dir[a - 1] != '/') path[at++] = '/';
    memcpy(path + at, name, c + 1);
    return path;
}

/* All of `within` but `root` (landlock.outside): the entries of each directory from `within`
 * down to root's parent, but the one on the way. */
static void outside(Base *b, const char *root, const char *within, uint64_t rights) {
    size_t w = strlen(within);
    while (w > 1 && within[w - 1] == '/') w--;
    if (strlen(root) == w && strncmp(root, within, w) == 0) return;
    if (!(w == 1 && within[0] == '/') && !(strncmp(root, within, w) == 0 && root[w] == '/')) {
        char *whole = strndup(within, w);
        base_add(b, whole, rights);
        free(whole);
        return;
    }
    char *here = strndup(within, w);
    const char *rest = root + (w == 1 ? 0 : w);
    while (*rest) {
        while (*rest == '/') rest++;
        if (!*rest) break;
        const char *slash = strchr(rest, '/');
        size_t len = slash ? (size_t)(slash - rest) : strlen(rest);
        DIR *dir = opendir(here);
        if (dir != NULL) {
            struct dirent *entry;
            while ((entry = readdir(dir)) != NULL) {
                const char *name = entry->d_name;
                if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0) continue;
                if (strlen(name) == len && strncmp(name, rest, len) == 0) continue;
                char *path = join(here, name);
                base_add(b, path, rights);
                free(path);
            }
            closedir(dir);
        }
        char *part = strndup(rest, len);
        char *next = join(here, part);
        free(part);
        free(here);
        here = next;
        rest += len;
    }
    free(here);
}

static int by_path(const void *a, const void *b) {
    return strcmp(((const Grant *)a)->path, ((const Grant *)b)->path);
}

static void base_close(Base *b) {
    for (size_t i = 0; i < b->n; i++) {
        if (b->grants[i].fd >= 0) close(b->grants[i].fd);
        free(b->grants[i].path);
    }
    free(b->grants);
    free(b->root);
    memset(b, 0, sizeof *b);
}

/* The grants every command beneath `root` has, opened once (and again after BASE_SECONDS: a
 * long-lived runner sees directories made beside the project's ancestors since). */
static Base *base_of(const char *root) {
    double t = spawnc_now();
    Base *free_slot = NULL, *oldest = &bases[0];
    for (int i = 0; i < ROOTS; i++) {
        Base *b = &bases[i];
        if (b->root == NULL) {
            if (free_slot == NULL) free_slot = b;
            continue;
        }
        if (strcmp(b->root, root) == 0) {
            if (t - b->made <= BASE_SECONDS) return b;
            base_close(b);
            free_slot = b;
            break;
        }
        if (b->made < oldest->made) oldest = b;
    }
    Base *b = free_slot;
    if (b == NULL) {
        base_close(oldest);
        b = oldest;
    }
    b->root = strdup(root);
    b->made = t;
    outside(b, root, "/", LL_READ);
    static const char *writable[] = {"/tmp", "/var/tmp", "/dev/shm"};
    for (size_t i = 0; i < sizeof writable / sizeof *writable; i++) {
        char real[PATH_MAX];
        if (realpath(writable[i], real) != NULL)
            outside(b, root, real, LL_EVERYTHING & ~LL_IOCTL_DEV);
    }
    base_add(b, "/dev", LL_EVERYTHING);
    /* one grant a path (a project in /tmp: read and write alike) */
    qsort(b->grants, b->n, sizeof(Grant), by_path);
    size_t kept = 0;
    for (size_t i = 0; i < b->n; i++) {
        if (kept > 0 && strcmp(b->grants[kept - 1].path, b->grants[i].path) == 0) {
            b->grants[kept - 1].rights |= b->grants[i].rights;
            free(b->grants[i].path);
        } else {
            b->grants[kept++] = b->grants[i];
        }
    }
    b->n = kept;
    /* Within a share of the descriptor limit (1,024 on many systems; a project beside a
     * thousand entries), paths stay open; beyond it they are opened for each ruleset. */
    struct rlimit limit;
    size_t budget = 256;
    if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
        budget = (size_t)limit.rlim_cur / (4 * ROOTS);
    size_t open_now = 0;
    for (size_t i = 0; i < b->n && open_now < budget; i++) {
        int fd = open(b->grants[i].path, O_PATH | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0) continue;
        struct stat st;
        if (fstat(fd, &st) != 0) {
            close(fd);
            continue;
        }
        b->grants[i].fd = fd;
        b->grants[i].is_dir = S_ISDIR(st.st_mode);
        open_now++;
    }
    return b;
}

static int base_ruleset(Base *b, int network) {
    int ruleset = new_ruleset(network);
    if (ruleset < 0) return -1;
    for (size_t i = 0; i < b->n; i++) {
        Grant *g = &b->grants[i];
        int done = g->fd >= 0 ? grant_fd(ruleset, g->fd, g->rights, g->is_dir)
                              : grant_path(ruleset, g->path, g->rights, 0);
        if (done < 0) {
            int saved = errno;
            close(ruleset);
            errno = saved;
            return -1;
        }
    }
    return ruleset;
}

/* The next command's base ruleset, made once the last one is answered (while runner stores
 * what it made): spawnc_prebuild. */
static struct {
    int fd;
    char *root;
    int network;
    double made;
} prebuilt = {-1, NULL, 0, 0};
static char *wanted_root;
static int wanted_network;

/* One path of a request, opened as its grant is made: the inode a rule binds to. */
typedef struct {
    int fd; /* -1: not there (nothing granted) */
    uint64_t rights, dev, ino;
    int is_dir;
} Opened;

static void open_grant(Opened *o, const char *path, uint64_t rights) {
    *o = (Opened){-1, 0, 0, 0, 0};
    int fd = open(path, O_PATH | O_CLOEXEC);
    if (fd < 0) return;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return;
    }
    uint64_t known = fs_rights(spawnc_abi);
    o->is_dir = S_ISDIR(st.st_mode);
    o->rights = rights & (o->is_dir ? known : (known & LL_FILE_RIGHTS));
    o->fd = fd;
    o->dev = (uint64_t)st.st_dev;
    o->ino = (uint64_t)st.st_ino;
}

/* Rulesets made for earlier requests, kept by what they grant: the base they were made from
 * and each of the request's paths as the inode it opened (a rule holds its inode: the same
 * number is the same file while the ruleset lives). A request granting the same (a fan-out's
 * leaves: the same inputs, their outputs made in one granted directory) restricts its command
 * with the kept ruleset, which Landlock lets restrict any number of processes, instead of one
 * made anew: ~1 us a base rule, ~1,300 for a project beside the entries of a busy /tmp. */
#define KEPT 8
typedef struct {
    int fd;
    char *root; /* NULL: a free slot */
    int network;
    double base_made;
    Opened *paths; /* (fd unused: -1, or 0 where the path was there) */
    size_t n;
    unsigned long used;
} Kept;
static Kept kept[KEPT];
static unsigned long kept_clock;

static int same_grants(const Kept *k, const Request *rq, double base_made, const Opened *op,
                       size_t n) {
    if (k->root == NULL || k->n != n || k->network != rq->network || k->base_made != base_made ||
        strcmp(k->root, rq->root) != 0)
        return 0;
    for (size_t i = 0; i < n; i++) {
        const Opened *a = &k->paths[i], *b = &op[i];
        if ((a->fd < 0) != (b->fd < 0)) return 0;
        if (b->fd >= 0 && (a->dev != b->dev || a->ino != b->ino || a->rights != b->rights ||
                           a->is_dir != b->is_dir))
            return 0;
    }
    return 1;
}

static void keep(int ruleset, const Request *rq, double base_made, const Opened *op, size_t n) {
    Kept *slot = &kept[0];
    for (int i = 0; i < KEPT; i++) {
        if (kept[i].root == NULL) {
            slot = &kept[i];
            break;
        }
        if (kept[i].used < slot->used) slot = &kept[i];
    }
    int fd = fcntl(ruleset, F_DUPFD_CLOEXEC, 0);
    Opened *paths = malloc((n ? n : 1) * sizeof *paths);
    char *root = strdup(rq->root);
    if (fd < 0 || paths == NULL || root == NULL) { /* nothing kept: made anew next time */
        if (fd >= 0) close(fd);
        free(paths);
        free(root);
        return;
    }
    if (slot->root != NULL) close(slot->fd);
    free(slot->paths);
    free(slot->root);
    for (size_t i = 0; i < n; i++) {
        paths[i] = op[i];
        paths[i].fd = op[i].fd < 0 ? -1 : 0;
    }
    *slot = (Kept){fd, root, rq->network, base_made, paths, n, ++kept_clock};
}

int spawnc_ruleset_for(const Request *rq, const char *scratch) {
    Base *b = base_of(rq->root);
    size_t n = rq->read.n + rq->write.n + rq->write_dirs.n + (scratch != NULL ? 1 : 0);
    Opened *op = malloc((n ? n : 1) * sizeof *op);
    if (op == NULL) _exit(70);
    size_t at = 0;
    for (size_t i = 0; i < rq->read.n; i++) open_grant(&op[at++], rq->read.items[i], LL_READ);
    for (size_t i = 0; i < rq->write.n; i++)
        open_grant(&op[at++], rq->write.items[i], LL_READ_FILE | LL_WRITE_FILE | LL_TRUNCATE);
    for (size_t i = 0; i < rq->write_dirs.n; i++)
        open_grant(&op[at++], rq->write_dirs.items[i], LL_EVERYTHING & ~LL_IOCTL_DEV);
    if (scratch != NULL) open_grant(&op[at++], scratch, LL_EVERYTHING & ~LL_IOCTL_DEV);
    int ruleset = -1;
    for (int i = 0; i < KEPT && ruleset < 0; i++) {
        if (same_grants(&kept[i], rq, b->made, op, n)) {
            ruleset = fcntl(kept[i].fd, F_DUPFD_CLOEXEC, 0);
            if (ruleset >= 0) kept[i].used = ++kept_clock;
        }
    }
    int made = 0, failed = 0;
    if (ruleset < 0) {
        if (prebuilt.fd >= 0) {
            if (strcmp(prebuilt.root, rq->root) == 0 && prebuilt.network == rq->network &&
                prebuilt.made >= b->made)
                ruleset = prebuilt.fd;
            else
                close(prebuilt.fd);
            prebuilt.fd = -1;
        }
        if (ruleset < 0) ruleset = base_ruleset(b, rq->network);
        made = ruleset >= 0;
        for (size_t i = 0; i < n && made && !failed; i++)
            if (op[i].fd >= 0 && op[i].rights != 0)
                failed = grant_fd(ruleset, op[i].fd, op[i].rights, op[i].is_dir) < 0;
    }
    int saved = errno;
    if (made && !failed) keep(ruleset, rq, b->made, op, n);
    for (size_t i = 0; i < n; i++)
        if (op[i].fd >= 0) close(op[i].fd);
    free(op);
    if (ruleset < 0 || failed) {
        if (ruleset >= 0) close(ruleset);
        errno = saved;
        return -1;
    }
    if (made) { /* the next command's base is made ahead only after one made anew */
        free(wanted_root);
        wanted_root = strdup(rq->root);
        wanted_network = rq->network;
    }
    errno = saved;
    return ruleset;
}

void spawnc_prebuild(void) {
    if (wanted_root == NULL || prebuilt.fd >= 0) return;
    Base *b = base_of(wanted_root);
    int fd = base_ruleset(b, wanted_network);
    if (fd < 0) return;
    free(prebuilt.root);
    prebuilt.fd = fd;
    prebuilt.root = strdup(wanted_root);
    prebuilt.network = wanted_network;
    prebuilt.made = spawnc_now();
}


int spawnc_restrict(int ruleset) {
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
    return (int)syscall(LL_RESTRICT_SELF, ruleset, 0u);
}

long spawnc_probe_abi(void) {
    long version = syscall(LL_CREATE_RULESET, NULL, (size_t)0, LL_CREATE_RULESET_VERSION);
    return version < 0 ? 0 : version;
}
