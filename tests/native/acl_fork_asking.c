/* An ordinary AscendCL program with no npud code in it that forks a worker while another
 * of its threads is still setting device 0, as a framework process may start its
 * data-loader workers (Python's multiprocessing "fork" start method) while its device
 * thread waits for the device. The child never touches the device.
 *
 *   acl_fork_asking
 *
 * It initialises AscendCL, starts a thread that calls aclrtSetDevice(0) (printing
 * "set RC" if that ever returns), and prints "started". On a line from standard input it
 * forks: the child prints "child PID" and waits until standard input closes, then exits;
 * the parent then prints "parent PID" and exits at once with _exit, whatever the thread
 * is doing. "fail WHAT" on any error. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include "check.h"

int aclInit(const char *);
int aclrtSetDevice(int32_t);

static void *set_device(void *unused) {
    (void)unused;
    int rc = aclrtSetDevice(0);
    printf("set %d\n", rc);
    fflush(stdout);
    return NULL;
}

int main(void) {
    CHECK(aclInit(NULL) == 0, "aclInit");
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, set_device, NULL) == 0, "pthread_create");
    printf("started\n");
    fflush(stdout);
    char line[64];
    CHECK(fgets(line, sizeof line, stdin) != NULL, "no line to fork on");
    int ready[2];
    CHECK(pipe(ready) == 0, "pipe");
    pid_t child = fork();
    CHECK(child >= 0, "fork");
    if (child == 0) {
        printf("child %d\n", (int)getpid());
        fflush(stdout);
        CHECK(write(ready[1], "r", 1) == 1, "write");
        while (getchar() != EOF) {
        }
        _exit(0);
    }
    char byte;
    CHECK(read(ready[0], &byte, 1) == 1, "the child did not start");
    printf("parent %d\n", (int)getpid());
    fflush(stdout);
    _exit(0);
}
