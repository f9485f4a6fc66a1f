/* An ordinary CUDA driver program that uses the NULL stream (0) as most CUDA code does
 * (cudaEventRecord(ev) and cudaStreamSynchronize(0) end there), with the ordering the
 * seed gives it: a stream made without CU_STREAM_NON_BLOCKING synchronizes with stream 0,
 * a non-blocking one does not, and "If hStream is 0 (the NULL stream) any future work
 * submitted in any stream will wait for hEvent". Work is held back with host functions
 * that wait for a gate this program opens, so nothing here depends on timing.
 *
 *   cuda_default_stream
 *
 * Prints "ok" when every check holds, else "fail <what>" (exit 1). */
#include <stdint.h>
#include <unistd.h>
#include "check.h"
#include <stdio.h>

typedef unsigned int CUresult;
typedef void *CUcontext;
typedef void *CUstream;
typedef void *CUevent;
typedef void (*CUhostFn)(void *);
typedef void (*CUstreamCallback)(CUstream, CUresult, void *);
#define CU_STREAM_NON_BLOCKING 0x1u
#define CU_STREAM_LEGACY ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)
#define NOT_READY 600u

CUresult cuInit(unsigned);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, int);
CUresult cuDevicePrimaryCtxRelease(int);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuStreamCreate(CUstream *, unsigned);
CUresult cuStreamDestroy_v2(CUstream);
CUresult cuStreamSynchronize(CUstream);
CUresult cuStreamQuery(CUstream);
CUresult cuStreamWaitEvent(CUstream, CUevent, unsigned);
CUresult cuStreamAddCallback(CUstream, CUstreamCallback, void *, unsigned);
CUresult cuLaunchHostFunc(CUstream, CUhostFn, void *);
CUresult cuEventCreate(CUevent *, unsigned);
CUresult cuEventDestroy_v2(CUevent);
CUresult cuEventRecord(CUevent, CUstream);
CUresult cuEventQuery(CUevent);

static int gate;
static int ran[8];
static int runs;

/* Holds its stream until the program opens the gate. */
static void wait_for_gate(void *data) {
    (void)data;
    while (!__atomic_load_n(&gate, __ATOMIC_ACQUIRE)) usleep(1000);
}

static void mark(void *data) {
    if (runs < 8) ran[runs] = (int)(intptr_t)data;
    runs++;
}

static CUstream seen = (CUstream)0x77;
static void on_done(CUstream s, CUresult status, void *data) {
    (void)status;
    seen = s;
    mark(data);
}

static void open_gate(void) { __atomic_store_n(&gate, 1, __ATOMIC_RELEASE); }

int main(void) {
    CUcontext ctx;
    CUstream plain, nonblocking;
    CUevent ev, other;
    CHECK(cuInit(0) == 0, "cuInit");
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0) == 0 && cuCtxSetCurrent(ctx) == 0, "context");
    CHECK(cuStreamSynchronize(0) == 0 && cuStreamQuery(0) == 0, "the NULL stream, idle");
    CHECK(cuStreamSynchronize(CU_STREAM_LEGACY) == 0 && cuStreamSynchronize(CU_STREAM_PER_THREAD) == 0,
          "CU_STREAM_LEGACY and CU_STREAM_PER_THREAD");
    CHECK(cuStreamCreate(&plain, 0) == 0 && cuStreamCreate(&nonblocking, CU_STREAM_NON_BLOCKING) == 0, "streams");
    CHECK(cuEventCreate(&ev, 0) == 0 && cuEventCreate(&other, 0) == 0, "events");

    /* Work on the NULL stream waits for a blocking stream's earlier work, not for a
     * non-blocking one's. */
    gate = 0;
    CHECK(cuLaunchHostFunc(plain, wait_for_gate, NULL) == 0, "held work on the blocking stream");
    CHECK(cuEventRecord(ev, 0) == 0, "cuEventRecord on the NULL stream");
    CHECK(cuEventQuery(ev) == NOT_READY, "the NULL stream's event waits for the blocking stream");
    CHECK(cuStreamQuery(0) == NOT_READY, "the NULL stream is busy behind the blocking stream");
    /* (An event, not a host function: the held one occupies the library's host thread. A
     * device takes a moment to reach a record, so it is polled, for at most a second.) */
    CHECK(cuEventRecord(other, nonblocking) == 0, "record on the non-blocking stream");
    int polls = 0;
    while (cuEventQuery(other) == NOT_READY && polls++ < 1000) usleep(1000);
    CHECK(cuEventQuery(other) == 0 && cuStreamQuery(nonblocking) == 0,
          "the non-blocking stream's work runs while the others wait");
    open_gate();
    CHECK(cuStreamSynchronize(0) == 0 && cuEventQuery(ev) == 0, "the NULL stream drains once the gate opens");

    /* A blocking stream's later work waits for the NULL stream's. */
    gate = 0;
    CHECK(cuLaunchHostFunc(0, wait_for_gate, NULL) == 0, "held work on the NULL stream");
    CHECK(cuLaunchHostFunc(plain, mark, (void *)2) == 0, "work on the blocking stream after it");
    CHECK(cuStreamQuery(plain) == NOT_READY && runs == 0, "the blocking stream waits for the NULL stream");
    open_gate();
    CHECK(cuStreamSynchronize(plain) == 0 && runs == 1 && ran[0] == 2, "and runs once the NULL stream moved on");

    /* A wait on the NULL stream holds back future work in the blocking streams. */
    gate = 0;
    CHECK(cuLaunchHostFunc(nonblocking, wait_for_gate, NULL) == 0, "held work on the non-blocking stream");
    CHECK(cuEventRecord(other, nonblocking) == 0, "its event");
    CHECK(cuStreamWaitEvent(0, other, 0) == 0, "the NULL stream waits on it");
    CHECK(cuLaunchHostFunc(plain, mark, (void *)3) == 0, "later work on the blocking stream");
    CHECK(cuStreamQuery(plain) == NOT_READY && runs == 1, "a barrier for the blocking stream");
    open_gate();
    CHECK(cuStreamSynchronize(plain) == 0 && runs == 2 && ran[1] == 3, "released with the event");

    /* Host calls on the NULL stream and the thread's default stream. */
    CHECK(cuStreamAddCallback(0, on_done, (void *)4, 0) == 0 && cuStreamSynchronize(0) == 0, "callback on 0");
    CHECK(runs == 3 && ran[2] == 4 && seen == NULL, "the callback ran and got the stream it was given");
    CHECK(cuLaunchHostFunc(CU_STREAM_PER_THREAD, mark, (void *)5) == 0, "host function on the thread's stream");
    CHECK(cuStreamSynchronize(CU_STREAM_PER_THREAD) == 0 && runs == 4 && ran[3] == 5, "ran before its sync returned");
    CHECK(cuStreamDestroy_v2(0) != 0, "the NULL stream cannot be destroyed");

    CHECK(cuEventDestroy_v2(ev) == 0 && cuEventDestroy_v2(other) == 0, "destroy events");
    CHECK(cuStreamDestroy_v2(plain) == 0 && cuStreamDestroy_v2(nonblocking) == 0, "destroy streams");
    CHECK(cuDevicePrimaryCtxRelease(0) == 0, "release");
    printf("ok\n");
    return 0;
}
