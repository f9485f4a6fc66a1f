/* An ordinary AscendCL program with no npud code in it that creates and destroys streams
 * as it goes, as a serving process grows and shrinks its pools: it sets device 0, then
 * reads commands from standard input, one per line:
 *
 *   +N   create N more streams
 *   -N   destroy the N made last
 *   stop stop itself (SIGSTOP) until continued, as a debugger or a starved machine would
 *
 * and prints "held K" (the streams it made and holds, the default stream not counted)
 * after each. At the end of its input it destroys the rest, resets the device and prints
 * "done". A creation or destruction that fails prints "fail WHAT CODE MESSAGE" (MESSAGE:
 * aclGetRecentErrMsg's, as a framework logs it) and exits. */
#include <stdint.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>

#include "check.h"

typedef void *aclrtStream;
int aclInit(const char *);
int aclrtSetDevice(int32_t);
int aclrtResetDevice(int32_t);
int aclrtCreateStream(aclrtStream *);
int aclrtDestroyStream(aclrtStream);
const char *aclGetRecentErrMsg(void);

#define MAX_STREAMS 2048

static aclrtStream streams[MAX_STREAMS];

int main(void) {
    CHECK(aclInit(NULL) == 0, "aclInit");
    CHECK(aclrtSetDevice(0) == 0, "aclrtSetDevice");
    int held = 0;
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        if (line[0] == 's') {
            /* Every thread stops, the interposer's too: nothing it has not said yet is said
             * until the program is continued. */
            raise(SIGSTOP);
            printf("continued\n");
            fflush(stdout);
            continue;
        }
        char op = line[0];
        int n = atoi(line + 1);
        if ((op != '+' && op != '-') || n <= 0 || (op == '+' && n > MAX_STREAMS - held) || (op == '-' && n > held)) {
            printf("fail bad-command 0\n");
            return 2;
        }
        for (int i = 0; i < n; i++) {
            int rc = op == '+' ? aclrtCreateStream(&streams[held]) : aclrtDestroyStream(streams[held - 1]);
            if (rc != 0) {
                const char *why = aclGetRecentErrMsg();
                printf("fail %s %d %s\n", op == '+' ? "aclrtCreateStream" : "aclrtDestroyStream", rc, why ? why : "");
                return 1;
            }
            held += op == '+' ? 1 : -1;
        }
        printf("held %d\n", held);
        fflush(stdout);
    }
    while (held > 0) CHECK(aclrtDestroyStream(streams[--held]) == 0, "aclrtDestroyStream");
    CHECK(aclrtResetDevice(0) == 0, "aclrtResetDevice");
    printf("done\n");
    return 0;
}
