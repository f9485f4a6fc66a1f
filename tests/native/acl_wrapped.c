/* An ordinary AscendCL program run beside another preload library (next_wrapper.c): it
 * creates STREAMS streams with aclrtCreateStream and synchronizes each.
 *
 *   acl_wrapped STREAMS
 *
 * Prints "ok STREAMS wrapped C S", where C and S are the calls the wrapper saw (-1 -1
 * without it), or "fail WHAT"; holds its streams until standard input closes, then
 * destroys them, resets the device and prints "done". */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "acl_rt.h"
#include "check.h"

#define MAX_STREAMS 64

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 0;
    CHECK(n > 0 && n <= MAX_STREAMS, "usage: acl_wrapped STREAMS (1-64)");
    CHECK(aclInit(NULL) == 0, "aclInit");
    CHECK(aclrtSetDevice(0) == 0, "aclrtSetDevice");
    aclrtStream streams[MAX_STREAMS];
    for (int i = 0; i < n; i++) {
        aclError rc = aclrtCreateStream(&streams[i]);
        if (rc != 0) {
            printf("fail aclrtCreateStream %d\n", rc);
            return 1;
        }
        CHECK(aclrtSynchronizeStream(streams[i]) == 0, "aclrtSynchronizeStream");
    }
    int created = -1, synchronized = -1;
    void (*counts)(int *, int *) = (void (*)(int *, int *))dlsym(RTLD_DEFAULT, "next_wrapper_counts");
    if (counts != NULL) counts(&created, &synchronized);
    printf("ok %d wrapped %d %d\n", n, created, synchronized);
    fflush(stdout);
    while (getchar() != EOF) {
    }
    for (int i = 0; i < n; i++) CHECK(aclrtDestroyStream(streams[i]) == 0, "aclrtDestroyStream");
    CHECK(aclrtResetDevice(0) == 0, "aclrtResetDevice");
    CHECK(aclFinalize() == 0, "aclFinalize");
    printf("done\n");
    return 0;
}
