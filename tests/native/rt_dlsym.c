/* A program that reaches the runtime layer only by looking it up in a handle, the way a
 * framework that loads the vendor's libraries itself does (MindSpore and GE plugins
 * dlopen with RTLD_LOCAL, where RTLD_NEXT finds nothing): it links no vendor library.
 *
 *   rt_dlsym STREAMS
 *
 * Before anything is loaded, no runtime-layer name may be found through RTLD_DEFAULT
 * ("If the symbol is not found ... dlsym() returns NULL", dlsym(3)). Then it loads
 * libruntime.so from the directory of the library ACL_APP_LIBRARY names, RTLD_LOCAL, and
 * through dlsym(handle, name) sets device 0 with rtSetDevice and creates STREAMS streams
 * with rtStreamCreateWithFlags; prints "ok STREAMS" (or "fail WHAT"), holds them until
 * standard input closes, then destroys them with rtStreamDestroy, resets the device with
 * rtDeviceReset and prints "done". */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define MAX_STREAMS 64

typedef int (*device_fn)(int32_t);
typedef int (*create_fn)(void **, int32_t, uint32_t);
typedef int (*destroy_fn)(void *);

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 0;
    CHECK(n > 0 && n <= MAX_STREAMS, "usage: rt_dlsym STREAMS (1-64)");
    CHECK(dlsym(RTLD_DEFAULT, "rtStreamCreateWithFlags") == NULL, "rtStreamCreateWithFlags found before loading");
    CHECK(dlsym(RTLD_DEFAULT, "rtSetDevice") == NULL, "rtSetDevice found before loading");

    const char *acl = getenv("ACL_APP_LIBRARY");
    CHECK(acl != NULL && strlen(acl) < 4000, "ACL_APP_LIBRARY");
    static char path[4096];
    strcpy(path, acl);
    char *slash = strrchr(path, '/');
    CHECK(slash != NULL, "a directory in ACL_APP_LIBRARY");
    strcpy(slash + 1, "libruntime.so");
    void *rt = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    CHECK(rt != NULL, "loading libruntime.so");

    device_fn set_device = (device_fn)dlsym(rt, "rtSetDevice");
    device_fn reset = (device_fn)dlsym(rt, "rtDeviceReset");
    create_fn create = (create_fn)dlsym(rt, "rtStreamCreateWithFlags");
    destroy_fn destroy = (destroy_fn)dlsym(rt, "rtStreamDestroy");
    CHECK(set_device && reset && create && destroy, "the runtime layer's names");
    CHECK(set_device(0) == 0, "rtSetDevice");
    void *streams[MAX_STREAMS];
    for (int i = 0; i < n; i++) CHECK(create(&streams[i], 0, 0x200) == 0, "rtStreamCreateWithFlags");
    printf("ok %d\n", n);
    fflush(stdout);
    while (getchar() != EOF) {
    }
    for (int i = 0; i < n; i++) CHECK(destroy(streams[i]) == 0, "rtStreamDestroy");
    CHECK(reset(0) == 0, "rtDeviceReset");
    printf("done\n");
    return 0;
}
