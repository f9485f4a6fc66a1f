/* The harness the driver edge-case programs share: each case runs in a child process of
 * its own, so one answer cannot disturb the next, and a case that crashes its process
 * fails instead of ending the program. */
#ifndef NPUD_TEST_EDGES_H
#define NPUD_TEST_EDGES_H
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#define NONE 99 /* no value to check */

/* Case N: in a child, `setup` (if any), then `run(N)`, which must answer WANT and leave
 * WANT_V in *V unless WANT_V is NONE. Returns 1 when the case failed, having printed
 * "fail NAME got RC value V" (or "fail NAME crashed"), else 0. */
static int edge_case(int n, void (*setup)(void), unsigned (*run)(int), const int *v, const char *name,
                     unsigned want, int want_v) {
    pid_t child = fork();
    if (child == 0) {
        if (setup) setup();
        unsigned rc = run(n);
        int good = rc == want && (want_v == NONE || *v == want_v);
        if (!good) printf("fail %s got %u value %d\n", name, rc, *v);
        fflush(stdout);
        _exit(good ? 0 : 1);
    }
    int status = 0;
    waitpid(child, &status, 0);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
    if (!WIFEXITED(status)) printf("fail %s crashed\n", name);
    return 1;
}

#endif
