/* What a CUDA program pays per stream: ROUNDS times, create N streams with
 * cuStreamCreateWithPriority and destroy them; prints the median cost of one create and
 * of one destroy over the rounds. Run it plainly and under `npuctl run` to see what the
 * interposer adds on the hardware (scripts/gpu-check.sh).
 *
 *   cuda_create_cost N ROUNDS
 *
 * Prints "create_ns <median> destroy_ns <median> streams <N> rounds <ROUNDS>", or
 * "fail <code> ..." (exit 1). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef unsigned int CUresult;
typedef void *CUcontext;
typedef void *CUstream;
#define CU_STREAM_NON_BLOCKING 0x1u

CUresult cuInit(unsigned);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, int);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuStreamCreateWithPriority(CUstream *, unsigned, int);
CUresult cuStreamDestroy_v2(CUstream);

/* Leave main with the failing call's code, as the other programs' "fail" lines do. */
#define CU(call, what)                                          \
    do {                                                        \
        CUresult rc_ = (call);                                  \
        if (rc_ != 0) {                                         \
            printf("fail %u at %s\n", rc_, what);               \
            return 1;                                           \
        }                                                       \
    } while (0)

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s STREAMS ROUNDS\n", argv[0]);
        return 2;
    }
    int n = atoi(argv[1]), rounds = atoi(argv[2]);
    if (n < 1 || rounds < 1) {
        fprintf(stderr, "STREAMS and ROUNDS must be positive\n");
        return 2;
    }
    CUstream *s = calloc((size_t)n, sizeof *s);
    uint64_t *create = calloc((size_t)rounds, sizeof *create);
    uint64_t *destroy = calloc((size_t)rounds, sizeof *destroy);
    CUcontext ctx = 0;
    CU(cuInit(0), "cuInit");
    CU(cuDevicePrimaryCtxRetain(&ctx, 0), "cuDevicePrimaryCtxRetain");
    CU(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    for (int r = 0; r < rounds; r++) {
        uint64_t t0 = now_ns();
        for (int i = 0; i < n; i++) CU(cuStreamCreateWithPriority(&s[i], CU_STREAM_NON_BLOCKING, 0), "create");
        uint64_t t1 = now_ns();
        for (int i = 0; i < n; i++) CU(cuStreamDestroy_v2(s[i]), "destroy");
        uint64_t t2 = now_ns();
        create[r] = (t1 - t0) / (uint64_t)n;
        destroy[r] = (t2 - t1) / (uint64_t)n;
    }
    qsort(create, (size_t)rounds, sizeof *create, cmp);
    qsort(destroy, (size_t)rounds, sizeof *destroy, cmp);
    printf("create_ns %llu destroy_ns %llu streams %d rounds %d\n", (unsigned long long)create[rounds / 2],
           (unsigned long long)destroy[rounds / 2], n, rounds);
    return 0;
}
