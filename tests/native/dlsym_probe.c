/* A program that finds the vendor's functions only by looking them up, the way
 * torch_npu does when LD_PRELOAD is set (dlsym(RTLD_DEFAULT, name) first): it links no
 * vendor library.
 *
 *   dlsym_probe STREAMS
 *
 * Before it loads AscendCL, no AscendCL or CUDA driver name may be found ("If the symbol
 * is not found ... dlsym() returns NULL", dlsym(3)): a program that probes for a function
 * to choose a path must not be told that one exists when it does not. Then it loads the
 * library its ACL_APP_LIBRARY names with RTLD_GLOBAL, as a program linked against it
 * has it; now the AscendCL names are found and the CUDA driver's still are not. Through
 * the pointers RTLD_DEFAULT gave, it sets device 0 and creates STREAMS streams, prints
 * "ok STREAMS" (or "fail WHAT"), holds them until standard input closes, then destroys
 * them, resets the device and prints "done". */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"

#define MAX_STREAMS 64

/* Names npud's interposer defines, of both vendors. */
static const char *const acl_names[] = {"aclInit", "aclrtSetDevice", "aclrtCreateStream",
                                        "aclrtCreateStreamWithConfig", "aclrtCreateEventExWithFlag",
                                        "aclrtGetStreamAvailableNum", "aclmdlRICaptureBegin", "aclmdlRIDestroy"};
static const char *const cuda_names[] = {"cuInit", "cuStreamCreate", "cuDevicePrimaryCtxRetain",
                                         "cuGetProcAddress_v2"};
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* The first of `names` RTLD_DEFAULT finds (`found` 1) or misses (`found` 0), or NULL. */
static const char *first(const char *const *names, size_t n, int found) {
    for (size_t i = 0; i < n; i++)
        if ((dlsym(RTLD_DEFAULT, names[i]) != NULL) == found) return names[i];
    return NULL;
}

typedef int (*init_fn)(const char *);
typedef int (*device_fn)(int32_t);
typedef int (*create_fn)(void **, uint32_t, uint32_t);
typedef int (*destroy_fn)(void *);
typedef int (*finalize_fn)(void);

int main(int argc, char **argv) {
    static char what[160];
    int n = argc > 1 ? atoi(argv[1]) : 0;
    CHECK(n > 0 && n <= MAX_STREAMS, "usage: dlsym_probe STREAMS (1-64)");
    const char *name = first(acl_names, COUNT(acl_names), 1);
    if (name == NULL) name = first(cuda_names, COUNT(cuda_names), 1);
    snprintf(what, sizeof what, "%s found before any vendor library is loaded", name ? name : "");
    CHECK(name == NULL, what);

    const char *path = getenv("ACL_APP_LIBRARY");
    CHECK(path != NULL && dlopen(path, RTLD_NOW | RTLD_GLOBAL) != NULL, "loading ACL_APP_LIBRARY");
    name = first(acl_names, COUNT(acl_names), 0);
    snprintf(what, sizeof what, "%s not found once AscendCL is loaded", name ? name : "");
    CHECK(name == NULL, what);
    name = first(cuda_names, COUNT(cuda_names), 1);
    snprintf(what, sizeof what, "%s found with no CUDA driver loaded", name ? name : "");
    CHECK(name == NULL, what);

    init_fn init = (init_fn)dlsym(RTLD_DEFAULT, "aclInit");
    device_fn set_device = (device_fn)dlsym(RTLD_DEFAULT, "aclrtSetDevice");
    device_fn reset_device = (device_fn)dlsym(RTLD_DEFAULT, "aclrtResetDevice");
    create_fn create = (create_fn)dlsym(RTLD_DEFAULT, "aclrtCreateStreamWithConfig");
    destroy_fn destroy = (destroy_fn)dlsym(RTLD_DEFAULT, "aclrtDestroyStream");
    finalize_fn finalize = (finalize_fn)dlsym(RTLD_DEFAULT, "aclFinalize");
    CHECK(reset_device && destroy && finalize, "the rest of AscendCL");
    CHECK(init(NULL) == 0, "aclInit");
    CHECK(set_device(0) == 0, "aclrtSetDevice");
    void *streams[MAX_STREAMS];
    for (int i = 0; i < n; i++) CHECK(create(&streams[i], 0, 0) == 0, "aclrtCreateStreamWithConfig");
    printf("ok %d\n", n);
    fflush(stdout);
    while (getchar() != EOF) {
    }
    for (int i = 0; i < n; i++) CHECK(destroy(streams[i]) == 0, "aclrtDestroyStream");
    CHECK(reset_device(0) == 0, "aclrtResetDevice");
    CHECK(finalize() == 0, "aclFinalize");
    printf("done\n");
    return 0;
}
