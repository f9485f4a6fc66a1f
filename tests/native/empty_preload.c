/* A library with nothing in it, preloaded (LD_PRELOAD) by npud-bench's start-up
 * decomposition: what loading any preloaded library costs a process, against which the
 * interposer's own cost is read. */
int npud_bench_empty_preload;
