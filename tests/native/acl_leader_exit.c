/* An AscendCL program with no npud code in it whose main thread leaves with pthread_exit
 * once it has started a worker, as some C programs and language runtimes do. The process
 * lives on in the worker: it sets device 0, creates N streams, prints "ok N", holds them
 * until standard input closes, then destroys them, resets the device, prints "done" and
 * ends the process with exit(3) (the runtime's own threads would keep it alive otherwise:
 * a process ends when its last thread does, pthread_exit(3)). Its streams stay until then,
 * though the kernel shows the leader as a zombie meanwhile.
 *
 *   acl_leader_exit N
 *
 * "fail WHAT" on any error. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "acl_rt.h"

#define MAX_STREAMS 1024

static int n;

static void *worker(void *arg) {
    static aclrtStream streams[MAX_STREAMS];
    (void)arg;
    const char *failed = NULL;
    if (aclrtSetDevice(0) != 0) failed = "aclrtSetDevice";
    for (int i = 0; !failed && i < n; i++)
        if (aclrtCreateStream(&streams[i]) != 0) failed = "aclrtCreateStream";
    if (failed) {
        printf("fail %s\n", failed);
        fflush(stdout);
        _exit(1);
    }
    printf("ok %d\n", n);
    fflush(stdout);
    while (getchar() != EOF) {
    }
    for (int i = 0; !failed && i < n; i++)
        if (aclrtDestroyStream(streams[i]) != 0) failed = "aclrtDestroyStream";
    if (!failed && aclrtResetDevice(0) != 0) failed = "aclrtResetDevice";
    if (failed)
        printf("fail %s\n", failed);
    else
        printf("done\n");
    fflush(stdout);
    exit(failed ? 1 : 0);
}

int main(int argc, char **argv) {
    n = argc > 1 ? atoi(argv[1]) : 0;
    if (n <= 0 || n > MAX_STREAMS) {
        printf("fail usage: acl_leader_exit N (1..1024)\n");
        return 1;
    }
    if (aclInit(NULL) != 0) {
        printf("fail aclInit\n");
        return 1;
    }
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL) != 0) {
        printf("fail pthread_create\n");
        return 1;
    }
    pthread_exit(NULL);
}
