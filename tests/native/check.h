/* The test programs' one way to fail: print "fail <what>" (the line the Rust tests read)
 * and leave main with 1. */
#ifndef NPUD_TEST_CHECK_H
#define NPUD_TEST_CHECK_H
#include <stdio.h>

#define CHECK(cond, what)              \
    do {                               \
        if (!(cond)) {                 \
            printf("fail %s\n", what); \
            return 1;                  \
        }                              \
    } while (0)

#endif
