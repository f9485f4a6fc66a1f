/* The priorities of the streams an ordinary AscendCL program makes, as it reads them back
 * with aclrtStreamGetPriority (0 is the most urgent, 7 the least):
 *
 *   acl_priorities
 *
 * Makes five streams: aclrtCreateStream; aclrtCreateStreamWithConfig with priorities 0, 6
 * and 0xffffffff (-1 as the runtime's int32_t, clamped to 0); and one more at 7 raised to
 * 1 with aclrtSetStreamAttribute(ACL_STREAM_ATTR_PRIORITY). Prints "ok priorities P1 ..
 * P5" (alone on the device: 0 0 6 0 1; npud lowers each to the tenant's limit) or
 * "fail WHAT", waits for standard input to close, frees everything, prints "done". */
#include <stdio.h>
#include <string.h>

#include "acl_rt.h"
#include "check.h"

int main(void) {
    CHECK(aclInit(NULL) == 0, "aclInit");
    CHECK(aclrtSetDevice(0) == 0, "aclrtSetDevice");
    aclrtStream s[5];
    uint32_t p[5];
    CHECK(aclrtCreateStream(&s[0]) == 0, "aclrtCreateStream");
    CHECK(aclrtCreateStreamWithConfig(&s[1], 0, 0) == 0, "priority 0");
    CHECK(aclrtCreateStreamWithConfig(&s[2], 6, 0) == 0, "priority 6");
    CHECK(aclrtCreateStreamWithConfig(&s[3], 0xffffffffu, 0) == 0, "priority -1");
    CHECK(aclrtCreateStreamWithConfig(&s[4], 7, 0) == 0, "priority 7");
    aclrtStreamAttrValue v;
    memset(&v, 0, sizeof v);
    v.streamPriority = 1;
    CHECK(aclrtSetStreamAttribute(s[4], 5, &v) == 0, "aclrtSetStreamAttribute");
    for (int i = 0; i < 5; i++) CHECK(aclrtStreamGetPriority(s[i], &p[i]) == 0, "aclrtStreamGetPriority");
    printf("ok priorities %u %u %u %u %u\n", p[0], p[1], p[2], p[3], p[4]);
    fflush(stdout);

    char line[64];
    while (fgets(line, sizeof line, stdin)) {
    }
    for (int i = 0; i < 5; i++) CHECK(aclrtDestroyStream(s[i]) == 0, "aclrtDestroyStream");
    CHECK(aclrtResetDevice(0) == 0, "aclrtResetDevice");
    CHECK(aclFinalize() == 0, "aclFinalize");
    printf("done\n");
    return 0;
}
