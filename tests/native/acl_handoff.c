/* An AscendCL program with no npud code in it whose process ends while another process
 * still holds every descriptor it had: it creates N streams on device 0, then starts a
 * child with a raw clone(2), which runs no fork handlers (glibc's own fork would), so the
 * child shares nothing with the runtime but a copy of the descriptors. The child never
 * touches AscendCL: it holds until standard input closes. The parent then returns from
 * main still holding its streams, which the driver frees when a process exits.
 *
 *   acl_handoff N
 *
 * Prints "ready child PID" (the child, once started) and "ready parent PID" (the parent,
 * just before it exits); "fail WHAT" on any error. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "acl_rt.h"
#include "check.h"

#define MAX_STREAMS 1024

/* The child: async-signal-safe calls only, since it is a copy of a threaded process. */
static void child(int ready) {
    char line[64];
    int len = snprintf(line, sizeof line, "ready child %d\n", (int)syscall(SYS_getpid));
    if (write(STDOUT_FILENO, line, (size_t)len) != len || write(ready, "r", 1) != 1) _exit(1);
    char byte;
    while (read(STDIN_FILENO, &byte, 1) > 0) {
    }
    _exit(0);
}

int main(int argc, char **argv) {
    static aclrtStream streams[MAX_STREAMS];
    int n = argc > 1 ? atoi(argv[1]) : 0;
    CHECK(n > 0 && n <= MAX_STREAMS, "usage: acl_handoff N (1..1024)");
    CHECK(aclInit(NULL) == 0, "aclInit");
    CHECK(aclrtSetDevice(0) == 0, "aclrtSetDevice");
    for (int i = 0; i < n; i++) CHECK(aclrtCreateStream(&streams[i]) == 0, "aclrtCreateStream");
    int ready[2];
    CHECK(pipe(ready) == 0, "pipe");
    fflush(stdout);
    /* clone(SIGCHLD) with no stack: a fork the C library does not know of. The arguments
     * after the flags are zero in every architecture's order. */
    long pid = syscall(SYS_clone, (long)SIGCHLD, 0L, 0L, 0L, 0L);
    CHECK(pid >= 0, "clone");
    if (pid == 0) child(ready[1]);
    char byte;
    CHECK(read(ready[0], &byte, 1) == 1, "the child did not start");
    printf("ready parent %d\n", (int)getpid());
    return 0;
}
