/* Graph capture as frameworks run it, with kernel launches, on device 0. Linked against
 * libascendcl only; the launches are AscendCL's (aclrtLaunchKernel) and the single-operator
 * executor's (aclopExecuteV2, whose operator runs two kernels by the runtime's internal
 * path: tasks no entry point shows).
 *
 *   acl_frameworks heavy         one capture forked to 7 side streams (8 streams), 10,000
 *                                launches round-robin over them, then 600 operators on
 *                                the main stream (1,200 tasks on top of its share: one
 *                                cascade stream, made where no hook sees it); checkpoints
 *                                "at launched-N" every 2,000 launches, "at operators" and
 *                                "at ended" (the model made, replayed once)
 *   acl_frameworks npugraph      what torch_npu's NPUGraph does (torch_npu/csrc/core/npu/
 *                                NPUGraph.cpp): Begin, GetInfo says ACTIVE and names the
 *                                model, kernels and a host function captured, End, the
 *                                model's streams checked, three replays (the host function
 *                                runs at each), destroy
 *   acl_frameworks vllm S1 S2 .. captures in the sizes given (vLLM captures the largest
 *                                first): for each size S a PIECEWISE pass (three graphs of
 *                                S/2 side streams, one per layer group) then a FULL one (a
 *                                graph of S side streams), 50 launches per stream
 *   acl_frameworks first J       one capture of J side streams, with no earlier capture
 *
 * A Begin that fails prints "refused-at-begin GRAPH CODE" and the program goes on to
 * the end without that graph (as vLLM-Ascend does at a capture size that cannot fit); a
 * failure after Begin prints "fail WHAT CODE" and exits: the capture failed half-way.
 * At the end: "ok MODE graphs G streams S" (G graphs kept, S the streams they hold by
 * aclmdlRIGetStreams), then it waits for standard input to close, destroys everything,
 * resets and prints "done". */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acl_rt.h"

aclError aclrtBinaryLoadFromData(const void *, size_t, const void *, void **);
aclError aclrtBinaryGetFunction(void *, const char *, void **);
aclError aclrtLaunchKernel(void *, uint32_t, const void *, size_t, aclrtStream);
aclError aclopExecuteV2(const char *, int, void *, void *, int, void *, void *, void *, aclrtStream);

#define MAX_SIDE 64
#define MAX_GRAPHS 256

static aclrtStream main_stream, side[MAX_SIDE];
static aclmdlRI graphs[MAX_GRAPHS];
static int kept;
static void *func;
static int kernel_bytes = 42;
static int host_calls;

static void fail(const char *what, int rc) {
    printf("fail %s %d\n", what, rc);
    fflush(stdout);
    exit(1);
}

#define TRY(call, what)                 \
    do {                                \
        int rc_ = (call);               \
        if (rc_ != 0) fail((what), rc_); \
    } while (0)

static void checkpoint(const char *name) {
    char line[64];
    printf("at %s\n", name);
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin)) fail("stdin closed at a checkpoint", -1);
}

static void launch(aclrtStream s, int i) {
    if (i % 3 == 2) {
        TRY(aclopExecuteV2("Add", 2, NULL, NULL, 1, NULL, NULL, NULL, s), "aclopExecuteV2");
    } else {
        TRY(aclrtLaunchKernel(func, 8, NULL, 0, s), "aclrtLaunchKernel");
    }
}

/* Begins a capture on the main stream; 0 when Begin was refused (said so). */
static int begin(int graph) {
    int rc = aclmdlRICaptureBegin(main_stream, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL);
    if (rc != 0) {
        printf("refused-at-begin %d %d\n", graph, rc);
        fflush(stdout);
        return 0;
    }
    return 1;
}

/* The main stream forks to side streams [0, n): each waits on an event recorded on it. */
static void fork_to(int n) {
    aclrtEvent e = NULL;
    TRY(aclrtCreateEventExWithFlag(&e, ACL_EVENT_SYNC), "aclrtCreateEventExWithFlag");
    TRY(aclrtRecordEvent(e, main_stream), "fork record");
    for (int j = 0; j < n; j++) TRY(aclrtStreamWaitEvent(side[j], e), "fork join");
}

/* Side streams [0, n) join back to the main stream. */
static void join_back(int n) {
    for (int j = 0; j < n; j++) {
        aclrtEvent e = NULL;
        TRY(aclrtCreateEventExWithFlag(&e, ACL_EVENT_SYNC), "aclrtCreateEventExWithFlag");
        TRY(aclrtRecordEvent(e, side[j]), "join record");
        TRY(aclrtStreamWaitEvent(main_stream, e), "join wait");
    }
}

static void end(void) {
    aclmdlRI m = NULL;
    TRY(aclmdlRICaptureEnd(main_stream, &m), "aclmdlRICaptureEnd");
    if (kept < MAX_GRAPHS) graphs[kept++] = m;
}

/* One graph of n side streams with `per` launches on each stream. */
static void graph(int g, int n, int per) {
    if (!begin(g)) return;
    fork_to(n);
    for (int i = 0; i < per; i++) {
        launch(main_stream, i);
        for (int j = 0; j < n; j++) launch(side[j], i);
    }
    join_back(n);
    end();
}

static void counted(void *arg) {
    (void)arg;
    host_calls++;
}

static void heavy(void) {
    if (!begin(0)) return;
    fork_to(7);
    char name[32];
    for (int i = 0; i < 10000; i++) {
        aclrtStream s = i % 8 == 0 ? main_stream : side[i % 8 - 1];
        launch(s, i / 8);
        if ((i + 1) % 2000 == 0) {
            snprintf(name, sizeof name, "launched-%d", i + 1);
            checkpoint(name);
        }
    }
    for (int i = 0; i < 600; i++) TRY(aclopExecuteV2("MatMul", 2, NULL, NULL, 1, NULL, NULL, NULL, main_stream), "op");
    checkpoint("operators");
    join_back(7);
    end();
    TRY(aclmdlRIExecuteAsync(graphs[kept - 1], main_stream), "aclmdlRIExecuteAsync");
    TRY(aclrtSynchronizeStream(main_stream), "aclrtSynchronizeStream");
    checkpoint("ended");
}

static void npugraph(void) {
    if (!begin(0)) return;
    uint32_t status = 0;
    aclmdlRI model = NULL;
    TRY(aclmdlRICaptureGetInfo(main_stream, &status, &model), "aclmdlRICaptureGetInfo");
    if (status != 1 || model == NULL) fail("capture status not ACTIVE", (int)status);
    fork_to(2);
    for (int i = 0; i < 200; i++) launch(i % 2 ? side[0] : side[1], i);
    TRY(aclrtLaunchHostFunc(main_stream, counted, NULL), "aclrtLaunchHostFunc");
    join_back(2);
    end();
    uint32_t n = 0;
    TRY(aclmdlRIGetStreams(graphs[kept - 1], NULL, &n), "aclmdlRIGetStreams");
    if (n < 3) fail("the model holds fewer streams than it captured", (int)n);
    for (int r = 0; r < 3; r++) {
        TRY(aclmdlRIExecuteAsync(graphs[kept - 1], main_stream), "replay");
        TRY(aclrtSynchronizeStream(main_stream), "replay sync");
    }
    if (host_calls != 3) fail("the captured host function ran at each replay", host_calls);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s heavy|npugraph|vllm S..|first J\n", argv[0]);
        return 2;
    }
    const char *mode = argv[1];
    TRY(aclInit(NULL), "aclInit");
    TRY(aclrtSetDevice(0), "aclrtSetDevice");
    void *bin = NULL;
    TRY(aclrtBinaryLoadFromData(&kernel_bytes, sizeof kernel_bytes, NULL, &bin), "aclrtBinaryLoadFromData");
    TRY(aclrtBinaryGetFunction(bin, "fused_layer", &func), "aclrtBinaryGetFunction");
    int sides = 8;
    for (int a = 2; a < argc; a++) sides = atoi(argv[a]) > sides ? atoi(argv[a]) : sides;
    if (sides > MAX_SIDE) sides = MAX_SIDE;
    TRY(aclrtCreateStream(&main_stream), "aclrtCreateStream");
    for (int j = 0; j < sides; j++) TRY(aclrtCreateStream(&side[j]), "aclrtCreateStream");
    if (strcmp(mode, "heavy") == 0) {
        heavy();
    } else if (strcmp(mode, "npugraph") == 0) {
        npugraph();
    } else if (strcmp(mode, "vllm") == 0) {
        int g = 0;
        for (int a = 2; a < argc; a++) {
            int s = atoi(argv[a]);
            for (int p = 0; p < 3; p++) graph(g++, s / 2, 50);
            graph(g++, s, 50);
        }
    } else if (strcmp(mode, "first") == 0) {
        graph(0, argc > 2 ? atoi(argv[2]) : 1, 10);
    } else {
        fail("unknown mode", 2);
    }
    uint32_t streams = 0;
    for (int g = 0; g < kept; g++) {
        uint32_t n = 0;
        TRY(aclmdlRIGetStreams(graphs[g], NULL, &n), "aclmdlRIGetStreams");
        streams += n;
    }
    printf("ok %s graphs %d streams %u\n", mode, kept, streams);
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
    }
    for (int g = 0; g < kept; g++) aclmdlRIDestroy(graphs[g]);
    for (int j = 0; j < sides; j++) aclrtDestroyStream(side[j]);
    aclrtDestroyStream(main_stream);
    aclrtResetDevice(0);
    printf("done\n");
    return 0;
}
