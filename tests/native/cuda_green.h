/* The green-context declarations of cuda.h (CUDA 12.4+) that the green-context programs
 * share, so that no program here needs the CUDA toolkit to build. */
#ifndef NPUD_CUDA_GREEN_H
#define NPUD_CUDA_GREEN_H

typedef unsigned int CUresult;
typedef void *CUstream;
typedef void *CUcontext;
typedef void *CUgreenCtx;
typedef void *CUdevResourceDesc;
/* cuda.h's CUdevResource: its type, 92 bytes the driver keeps, then the SM figures. */
typedef struct {
    int type;
    unsigned char internal[92];
    union {
        struct {
            unsigned int smCount;
        } sm;
        unsigned char oversize[48];
    };
} CUdevResource;
#define CU_DEV_RESOURCE_TYPE_SM 1
#define CU_GREEN_CTX_DEFAULT_STREAM 0x1u
#define CU_STREAM_NON_BLOCKING 0x1u

#endif
