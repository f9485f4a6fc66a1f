/* The priorities of the streams an ordinary CUDA driver program makes, as it reads them
 * back with cuStreamGetPriority (a lower number is more urgent; the fake's range is 0,
 * the least, to -5, the greatest, an H100's):
 *
 *   cuda_priorities
 *
 * Makes four streams on device 0's primary context: cuStreamCreate, and
 * cuStreamCreateWithPriority at -5, -1 and -100 (clamped by the driver to -5). Prints "ok
 * priorities P1 .. P4" (alone on the device: 0 -5 -1 -5; npud raises each to the
 * tenant's limit) or "fail WHAT", waits for standard input to close, frees everything,
 * prints "done". */
#include <stdio.h>

#include "check.h"

typedef unsigned int CUresult;
typedef void *CUcontext;
typedef void *CUstream;

CUresult cuInit(unsigned);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, int);
CUresult cuDevicePrimaryCtxRelease(int);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuStreamCreate(CUstream *, unsigned);
CUresult cuStreamCreateWithPriority(CUstream *, unsigned, int);
CUresult cuStreamGetPriority(CUstream, int *);
CUresult cuStreamDestroy_v2(CUstream);

int main(void) {
    CUcontext ctx = NULL;
    CUstream s[4];
    int asked[3] = {-5, -1, -100}, p[4];
    CHECK(cuInit(0) == 0, "cuInit");
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0) == 0 && cuCtxSetCurrent(ctx) == 0, "primary context");
    CHECK(cuStreamCreate(&s[0], 0) == 0, "cuStreamCreate");
    for (int i = 0; i < 3; i++) CHECK(cuStreamCreateWithPriority(&s[i + 1], 0, asked[i]) == 0, "with priority");
    for (int i = 0; i < 4; i++) CHECK(cuStreamGetPriority(s[i], &p[i]) == 0, "cuStreamGetPriority");
    printf("ok priorities %d %d %d %d\n", p[0], p[1], p[2], p[3]);
    fflush(stdout);

    char line[64];
    while (fgets(line, sizeof line, stdin)) {
    }
    for (int i = 0; i < 4; i++) CHECK(cuStreamDestroy_v2(s[i]) == 0, "cuStreamDestroy_v2");
    CHECK(cuDevicePrimaryCtxRelease(0) == 0, "cuDevicePrimaryCtxRelease");
    printf("done\n");
    return 0;
}
