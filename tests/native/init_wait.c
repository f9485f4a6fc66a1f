/* An ordinary program with no npud code in it that initialises its vendor runtime long
 * before it uses a device, as a framework process does (it imports and builds its model
 * in between): AscendCL's aclInit, or with -DUSE_CUDA the CUDA driver's cuInit (with
 * -DUSE_PROC_ADDRESS fetched as a static cudart does: dlopen the driver RTLD_LOCAL and
 * look cuInit up through cuGetProcAddress_v2). Prints "ready RC", waits until standard
 * input closes, prints "done" and exits without touching a device. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef USE_CUDA
#ifdef USE_PROC_ADDRESS
#include <dlfcn.h>
static int init(void) {
    const char *path = getenv("CUDA_APP_LIBRARY");
    void *h = dlopen(path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        exit(3);
    }
    unsigned (*get)(const char *, void **, int, uint64_t, int *);
    *(void **)&get = dlsym(h, "cuGetProcAddress_v2");
    unsigned (*cu_init)(unsigned) = 0;
    int status = 0;
    if (!get || get("cuInit", (void **)&cu_init, 12000, 0, &status) != 0 || !cu_init) {
        fprintf(stderr, "no cuInit\n");
        exit(3);
    }
    return (int)cu_init(0);
}
#else
unsigned cuInit(unsigned);
static int init(void) { return (int)cuInit(0); }
#endif
#else
int aclInit(const char *);
static int init(void) { return aclInit(NULL); }
#endif

int main(void) {
    printf("ready %d\n", init());
    fflush(stdout);
    while (getchar() != EOF) {
    }
    printf("done\n");
    return 0;
}
