/* An ordinary CUDA driver program that moves between devices the way libraries layered on
 * the driver API do: it pushes another device's context, works there, and pops back
 * (cuCtxPushCurrent / cuCtxPopCurrent), makes a context of its own (cuCtxCreate pushes
 * it) and destroys it (which pops it), and unbinds its thread (cuCtxSetCurrent(NULL)).
 * Streams go to whichever device is current when they are made.
 *
 *   cuda_contexts ON0 ON1       (needs two visible devices)
 *
 * Prints "ok" once ON0 streams exist on device 0 and ON1 on device 1 and every stack
 * check holds (else "fail <what>", exit 1), holds them until standard input closes,
 * destroys them, prints "done". */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "check.h"

typedef unsigned int CUresult;
typedef void *CUcontext;
typedef void *CUstream;
#define INVALID_CONTEXT 201u

CUresult cuInit(unsigned);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, int);
CUresult cuDevicePrimaryCtxRelease(int);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuCtxGetCurrent(CUcontext *);
CUresult cuCtxGetDevice(int *);
CUresult cuCtxPushCurrent_v2(CUcontext);
CUresult cuCtxPopCurrent_v2(CUcontext *);
CUresult cuCtxCreate_v2(CUcontext *, unsigned, int);
CUresult cuCtxDestroy_v2(CUcontext);
CUresult cuStreamCreate(CUstream *, unsigned);
CUresult cuStreamDestroy_v2(CUstream);

static int current_device(void) {
    int d = -1;
    return cuCtxGetDevice(&d) == 0 ? d : -1;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s ON0 ON1\n", argv[0]);
        return 2;
    }
    int on0 = atoi(argv[1]), on1 = atoi(argv[2]);
    CUstream *s0 = calloc(on0 > 0 ? on0 : 1, sizeof(CUstream)), *s1 = calloc(on1 > 0 ? on1 : 1, sizeof(CUstream));
    CUcontext p0, p1, own, got;
    CHECK(cuInit(0) == 0, "cuInit");
    CHECK(cuDevicePrimaryCtxRetain(&p0, 0) == 0 && cuDevicePrimaryCtxRetain(&p1, 1) == 0, "primary contexts");
    CHECK(cuCtxSetCurrent(p0) == 0 && current_device() == 0, "device 0 current");

    /* Device 1's streams, made with its context pushed over device 0's. */
    CHECK(cuCtxPushCurrent_v2(p1) == 0 && current_device() == 1, "push device 1");
    for (int i = 0; i < on1; i++) CHECK(cuStreamCreate(&s1[i], 0) == 0, "stream on device 1");
    CHECK(cuCtxPopCurrent_v2(&got) == 0 && got == p1, "pop gives back the pushed context");
    CHECK(current_device() == 0, "device 0 current again after the pop");
    for (int i = 0; i < on0; i++) CHECK(cuStreamCreate(&s0[i], 0) == 0, "stream on device 0");

    /* A context of its own is pushed by its creation and popped by its destruction. */
    CHECK(cuCtxCreate_v2(&own, 0, 1) == 0 && current_device() == 1, "cuCtxCreate pushes the new context");
    CHECK(cuCtxDestroy_v2(own) == 0 && cuCtxGetCurrent(&got) == 0 && got == p0, "its destruction pops it");

    /* NULL unbinds the thread; popping an empty stack is refused. */
    CHECK(cuCtxSetCurrent(NULL) == 0 && cuCtxGetCurrent(&got) == 0 && got == NULL, "cuCtxSetCurrent(NULL)");
    CHECK(current_device() == -1, "no context, no device");
    CHECK(cuCtxPopCurrent_v2(&got) == INVALID_CONTEXT, "nothing to pop: CUDA_ERROR_INVALID_CONTEXT");
    CHECK(cuCtxPushCurrent_v2(NULL) == 1, "pushing NULL: CUDA_ERROR_INVALID_VALUE");
    CHECK(cuCtxSetCurrent(NULL) == 0, "NULL on an empty stack is a no-op");
    printf("ok\n");
    fflush(stdout);

    char line[64];
    while (fgets(line, sizeof line, stdin)) {
    }
    CHECK(cuCtxSetCurrent(p1) == 0, "device 1 for its streams");
    for (int i = 0; i < on1; i++) CHECK(cuStreamDestroy_v2(s1[i]) == 0, "destroy on device 1");
    CHECK(cuCtxSetCurrent(p0) == 0, "device 0 for its streams");
    for (int i = 0; i < on0; i++) CHECK(cuStreamDestroy_v2(s0[i]) == 0, "destroy on device 0");
    CHECK(cuDevicePrimaryCtxRelease(1) == 0 && cuDevicePrimaryCtxRelease(0) == 0, "release");
    printf("done\n");
    return 0;
}
