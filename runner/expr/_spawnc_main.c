/* The spawner's C loop as a program of its own (built beside the module by setup.py): what
 * bwrap starts, no interpreter at all (~1 ms to start, against ~7 for the module's). Usage:
 * _spawnc_exec FD, FD being the control socket runner passed it. */
#include "_spawnc.h"

int main(int argc, char **argv) {
    char *end = NULL;
    long control = argc == 2 ? strtol(argv[1], &end, 10) : -1;
    if (control < 0 || end == NULL || *end != '\0') {
        fputs("usage: _spawnc_exec FD (the control socket runner passes)\n", stderr);
        return 2;
    }
    spawnc_serve((int)control); /* returns only when it could not start */
    perror("runner spawner");
    return 1;
}
