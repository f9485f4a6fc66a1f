/* An ordinary AscendCL program with no npud code in it that initialises the runtime and
 * then forks a worker, as Python's multiprocessing does with its "fork" start method in a
 * process that has already imported its framework. Both set device 0 and create N streams.
 *
 *   acl_fork N
 *
 * The child prints "ready child PID", holds its streams until standard input closes, then
 * prints "done", destroys them, resets and exits. The parent waits until the child is
 * ready, prints "ready parent PID", destroys its streams, resets and exits at once without
 * waiting for the child: a parent that finishes first. "fail WHAT" on any error. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"

typedef void *aclrtStream;
int aclInit(const char *);
int aclrtSetDevice(int32_t);
int aclrtResetDevice(int32_t);
int aclrtCreateStream(aclrtStream *);
int aclrtDestroyStream(aclrtStream);

#define MAX_STREAMS 1024

static int hold(int n, aclrtStream *streams) {
    CHECK(aclrtSetDevice(0) == 0, "aclrtSetDevice");
    for (int i = 0; i < n; i++) CHECK(aclrtCreateStream(&streams[i]) == 0, "aclrtCreateStream");
    return 0;
}

static int give_back(int n, aclrtStream *streams) {
    for (int i = 0; i < n; i++) CHECK(aclrtDestroyStream(streams[i]) == 0, "aclrtDestroyStream");
    CHECK(aclrtResetDevice(0) == 0, "aclrtResetDevice");
    return 0;
}

int main(int argc, char **argv) {
    static aclrtStream streams[MAX_STREAMS];
    int n = argc > 1 ? atoi(argv[1]) : 0;
    CHECK(n > 0 && n <= MAX_STREAMS, "usage: acl_fork N (1..1024)");
    CHECK(aclInit(NULL) == 0, "aclInit");
    int ready[2];
    CHECK(pipe(ready) == 0, "pipe");
    fflush(stdout);
    pid_t child = fork();
    CHECK(child >= 0, "fork");
    if (child == 0) {
        if (hold(n, streams) != 0) return 1;
        printf("ready child %d\n", (int)getpid());
        fflush(stdout);
        CHECK(write(ready[1], "r", 1) == 1, "write");
        while (getchar() != EOF) {
        }
        printf("done\n");
        fflush(stdout);
        return give_back(n, streams);
    }
    if (hold(n, streams) != 0) return 1;
    char byte;
    CHECK(read(ready[0], &byte, 1) == 1, "the child did not start");
    printf("ready parent %d\n", (int)getpid());
    fflush(stdout);
    return give_back(n, streams);
}
