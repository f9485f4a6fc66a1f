/* Streams synchronised through device memory (the Stream memory operation pages:
 * aclrtValueWrite, aclrtValueWait), as a program with no npud code in it uses them:
 *
 *   acl_value_ops supported|unsupported
 *
 * supported (an A2/A3 part): a stream waiting for a value (ACL_STREAM_WAIT_VALUE_EQ 42)
 * holds its later work (a host function) while another stream writes 41, and lets it run
 * once that stream writes 42; waits already met (GEQ, AND, NOR) hold nothing; the value
 * written reads back. Then what the runtime refuses: a NULL address (100000, AscendCL's);
 * a write's flag other than 0, a wait's flag past NOR, an unaligned write, host memory and
 * a stack address (107000, ACL_ERROR_RT_PARAM_INVALID). Prints "ok values".
 * unsupported (a part without value tasks): both calls are
 * ACL_ERROR_RT_FEATURE_NOT_SUPPORT (207000). Prints "ok unsupported".
 *
 * Or "fail WHAT"; then waits for standard input to close, frees everything, prints
 * "done". */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "acl_rt.h"
#include "check.h"

#define INVALID_PARAM 100000
#define RT_PARAM_INVALID 107000
#define FEATURE_NOT_SUPPORT 207000
#define NOT_READY 1u

static volatile int g_ran;

static void mark(void *unused) {
    (void)unused;
    g_ran = 1;
}

/* Whether `stream` still holds work back: not complete, and the host function not run. */
static int held(aclrtStream stream) {
    uint32_t status = 0;
    return aclrtStreamQuery(stream, &status) == 0 && status == NOT_READY && !g_ran;
}

static int supported(aclrtStream a, aclrtStream b, void *flag) {
    CHECK(aclrtMemset(flag, 64, 0, 64) == 0, "aclrtMemset");
    CHECK(aclrtValueWait(flag, 42, ACL_STREAM_WAIT_VALUE_EQ, a) == 0, "aclrtValueWait");
    CHECK(aclrtLaunchHostFunc(a, mark, NULL) == 0, "aclrtLaunchHostFunc");
    usleep(50000);
    CHECK(held(a), "the wait holds the stream's later work");
    CHECK(aclrtValueWrite(flag, 41, 0, b) == 0 && aclrtSynchronizeStream(b) == 0, "writing 41");
    usleep(50000);
    CHECK(held(a), "41 is not 42: still held");
    CHECK(aclrtValueWrite(flag, 42, 0, b) == 0 && aclrtSynchronizeStream(b) == 0, "writing 42");
    CHECK(aclrtSynchronizeStream(a) == 0 && g_ran, "42 lets the stream go on");

    CHECK(aclrtValueWrite(flag, 50, 0, b) == 0 && aclrtSynchronizeStream(b) == 0, "writing 50");
    CHECK(aclrtValueWait(flag, 45, ACL_STREAM_WAIT_VALUE_GEQ, a) == 0, "GEQ 45");
    CHECK(aclrtValueWait(flag, 0x2, ACL_STREAM_WAIT_VALUE_AND, a) == 0, "AND 0x2");
    CHECK(aclrtValueWait(flag, 0, ACL_STREAM_WAIT_VALUE_NOR, a) == 0, "NOR 0");
    CHECK(aclrtSynchronizeStream(a) == 0, "waits already met hold nothing");
    uint64_t back = 0;
    CHECK(aclrtMemcpy(&back, sizeof back, flag, sizeof back, ACL_MEMCPY_DEVICE_TO_HOST) == 0 && back == 50,
          "the value written reads back");

    void *host = NULL;
    uint64_t local = 0;
    CHECK(aclrtMallocHost(&host, 64) == 0, "aclrtMallocHost");
    CHECK(aclrtValueWrite(NULL, 1, 0, a) == INVALID_PARAM, "a NULL address to write");
    CHECK(aclrtValueWait(NULL, 1, ACL_STREAM_WAIT_VALUE_EQ, a) == INVALID_PARAM, "a NULL address to wait on");
    CHECK(aclrtValueWrite(flag, 1, 1, a) == RT_PARAM_INVALID, "a write's flag other than 0");
    CHECK(aclrtValueWait(flag, 1, 4, a) == RT_PARAM_INVALID, "a wait's flag past NOR");
    CHECK(aclrtValueWrite((char *)flag + 4, 1, 0, a) == RT_PARAM_INVALID, "an unaligned write");
    CHECK(aclrtValueWrite(host, 1, 0, a) == RT_PARAM_INVALID, "a write to host memory");
    CHECK(aclrtValueWait(host, 1, ACL_STREAM_WAIT_VALUE_EQ, a) == RT_PARAM_INVALID, "a wait on host memory");
    CHECK(aclrtValueWait(&local, 1, ACL_STREAM_WAIT_VALUE_EQ, a) == RT_PARAM_INVALID, "a wait on the stack");
    CHECK(aclrtSynchronizeStream(a) == 0, "nothing refused was issued");
    CHECK(aclrtFreeHost(host) == 0, "aclrtFreeHost");
    printf("ok values\n");
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2 || (strcmp(argv[1], "supported") != 0 && strcmp(argv[1], "unsupported") != 0)) {
        fprintf(stderr, "usage: %s supported|unsupported\n", argv[0]);
        return 2;
    }
    CHECK(aclInit(NULL) == 0, "aclInit");
    CHECK(aclrtSetDevice(0) == 0, "aclrtSetDevice");
    aclrtStream a = NULL, b = NULL;
    void *flag = NULL;
    CHECK(aclrtCreateStream(&a) == 0 && aclrtCreateStream(&b) == 0, "aclrtCreateStream");
    CHECK(aclrtMalloc(&flag, 64, ACL_MEM_MALLOC_HUGE_FIRST) == 0, "aclrtMalloc");
    if (strcmp(argv[1], "supported") == 0) {
        if (supported(a, b, flag) != 0) return 1;
    } else {
        CHECK(aclrtValueWrite(flag, 1, 0, a) == FEATURE_NOT_SUPPORT, "aclrtValueWrite without the feature");
        CHECK(aclrtValueWait(flag, 1, ACL_STREAM_WAIT_VALUE_EQ, a) == FEATURE_NOT_SUPPORT,
              "aclrtValueWait without the feature");
        printf("ok unsupported\n");
    }
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
    }
    CHECK(aclrtFree(flag) == 0, "aclrtFree");
    CHECK(aclrtDestroyStream(a) == 0 && aclrtDestroyStream(b) == 0, "aclrtDestroyStream");
    CHECK(aclrtResetDevice(0) == 0 && aclFinalize() == 0, "teardown");
    printf("done\n");
    return 0;
}
