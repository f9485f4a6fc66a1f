/* A preload library of the kind users already run (tracers, profilers, compatibility
 * shims): it defines functions of another library and calls the definition that comes
 * after its own, found with dlsym(RTLD_NEXT, name) ("the next occurrence of the desired
 * symbol in the search order after the current object", dlsym(3)).
 *
 * It wraps aclrtCreateStream, which npud's interposer hooks too, and aclrtSynchronizeStream,
 * which it does not, and counts the calls; next_wrapper_counts() reports them. Where the
 * next definition is its own (the lookup was answered as if made by another object), it
 * refuses with 507000 instead of calling itself until the stack runs out. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stddef.h>

typedef int (*create_fn)(void **);
typedef int (*sync_fn)(void *);

static atomic_int creates;
static atomic_int syncs;

/* Each wrapper is a static function exported under the wrapped name, so that comparing
 * with it means this very definition (the exported name may resolve to another's). */
static int create(void **stream) {
    static create_fn next;
    if (next == NULL) next = (create_fn)dlsym(RTLD_NEXT, "aclrtCreateStream");
    if (next == NULL || next == create) return 507000;
    atomic_fetch_add(&creates, 1);
    return next(stream);
}

static int synchronize(void *stream) {
    static sync_fn next;
    if (next == NULL) next = (sync_fn)dlsym(RTLD_NEXT, "aclrtSynchronizeStream");
    if (next == NULL || next == synchronize) return 507000;
    atomic_fetch_add(&syncs, 1);
    return next(stream);
}

int aclrtCreateStream(void **stream) __attribute__((alias("create")));
int aclrtSynchronizeStream(void *stream) __attribute__((alias("synchronize")));

void next_wrapper_counts(int *created, int *synchronized) {
    *created = atomic_load(&creates);
    *synchronized = atomic_load(&syncs);
}
