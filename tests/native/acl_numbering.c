/* An ordinary AscendCL program that maps every device it sees through the runtime's three
 * numberings, as the vendor's device-identity sample does: user id (what aclrtSetDevice
 * takes, after ASCEND_RT_VISIBLE_DEVICES), logical id (the container's view) and physical
 * id (the host's), each mapped there and back.
 *
 *   acl_numbering
 *
 * Prints "device U logical L physical P" for each device, then "ok" when every round
 * trip holds, else "fail <what>" (exit 1). */
#include <stdint.h>
#include "check.h"
#include <stdio.h>

typedef int aclError;

aclError aclInit(const char *);
aclError aclFinalize(void);
aclError aclrtGetDeviceCount(uint32_t *);
aclError aclrtGetLogicDevIdByUserDevId(int32_t, int32_t *);
aclError aclrtGetUserDevIdByLogicDevId(int32_t, int32_t *);
aclError aclrtGetPhyDevIdByUserDevId(int32_t, int32_t *);
aclError aclrtGetUserDevIdByPhyDevId(int32_t, int32_t *);
aclError aclrtGetLogicDevIdByPhyDevId(int32_t, int32_t *);
aclError aclrtGetPhyDevIdByLogicDevId(int32_t, int32_t *);

int main(void) {
    uint32_t count = 0;
    CHECK(aclInit(NULL) == 0, "aclInit");
    CHECK(aclrtGetDeviceCount(&count) == 0, "aclrtGetDeviceCount");
    for (int32_t user = 0; user < (int32_t)count; user++) {
        int32_t logical = -1, phys = -1, back = -1, logical_of_phys = -1, phys_by_logic = -1;
        CHECK(aclrtGetLogicDevIdByUserDevId(user, &logical) == 0, "user -> logical");
        CHECK(aclrtGetUserDevIdByLogicDevId(logical, &back) == 0 && back == user, "logical -> user");
        CHECK(aclrtGetPhyDevIdByUserDevId(user, &phys) == 0, "user -> physical");
        CHECK(aclrtGetUserDevIdByPhyDevId(phys, &back) == 0 && back == user, "physical -> user");
        CHECK(aclrtGetLogicDevIdByPhyDevId(phys, &logical_of_phys) == 0 && logical_of_phys == logical,
              "physical -> logical");
        /* The vendor's note: this call's "logical" id is in fact the user id. */
        CHECK(aclrtGetPhyDevIdByLogicDevId(user, &phys_by_logic) == 0 && phys_by_logic == phys,
              "aclrtGetPhyDevIdByLogicDevId takes the user id");
        printf("device %d logical %d physical %d\n", user, logical, phys);
    }
    int32_t none = -1;
    CHECK(aclrtGetPhyDevIdByUserDevId((int32_t)count, &none) != 0, "a user id past the count names no device");
    CHECK(aclFinalize() == 0, "aclFinalize");
    printf("ok\n");
    return 0;
}
