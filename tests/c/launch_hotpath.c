/* Allocations on the path of a kernel launch already seen (tests/driver/launches.rs): the program
 * launches one kernel once (its first launch), then points the queue's dispatch entry for
 * clEnqueueNDRangeKernel at a function that returns at once, so that N more launches of the
 * same kernel and configuration run nothing but the path to the driver (the loader's, or
 * clshim's with LD_PRELOAD), and counts the malloc/calloc/realloc calls this thread makes
 * meanwhile. This executable defines malloc and friends, so every library's calls come here
 * first (they forward to glibc's own). Prints both counts and "ok". */
#include "cltest.h"
#include <stddef.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);

static __thread int counting;
static __thread long allocations;

void *malloc(size_t n) {
    if (counting) allocations++;
    return __libc_malloc(n);
}
void *calloc(size_t n, size_t m) {
    if (counting) allocations++;
    return __libc_calloc(n, m);
}
void *realloc(void *p, size_t n) {
    if (counting) allocations++;
    return __libc_realloc(p, n);
}
void free(void *p) { __libc_free(p); }

static cl_int CL_API_CALL no_enqueue(cl_command_queue q, cl_kernel k, cl_uint d, const size_t *o,
                                     const size_t *g, const size_t *l, cl_uint n,
                                     const cl_event *w, cl_event *e) {
    (void)q; (void)k; (void)d; (void)o; (void)g; (void)l; (void)n; (void)w; (void)e;
    return CL_SUCCESS;
}

/* cl_khr_icd: slot of clEnqueueNDRangeKernel, and the entries copied from the driver. */
#define SLOT_ENQUEUE_ND_RANGE_KERNEL 59
#define TABLE_ENTRIES 149

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 10000;
    cl_platform_id plat;
    cl_device_id dev;
    pick_device(&plat, &dev);
    cl_context ctx = make_context(dev);
    const char *src = "__kernel void hot(__global int *out) { out[get_global_id(0)] = 1; }\n";
    cl_int err;
    cl_program p = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    CHECK(err);
    build_or_die(p, dev, NULL);
    cl_kernel k = clCreateKernel(p, "hot", &err);
    CHECK(err);
    cl_mem out = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 64 * sizeof(cl_int), NULL, &err);
    CHECK(err);
    CHECK(clSetKernelArg(k, 0, sizeof out, &out));
    cl_command_queue q = clCreateCommandQueue(ctx, dev, 0, &err);
    CHECK(err);
    size_t g = 64, l = 16;
    /* The first launch allocates (the driver's command; clshim's record): the counter's
     * own check. */
    counting = 1;
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, &l, 0, NULL, NULL));
    counting = 0;
    printf("allocations in the first launch: %ld\n", allocations);
    allocations = 0;
    CHECK(clFinish(q));
    void **obj = (void **)q;
    void **real_table = (void **)obj[0];
    void *table[TABLE_ENTRIES];
    memcpy(table, real_table, sizeof table);
    table[SLOT_ENQUEUE_ND_RANGE_KERNEL] = (void *)no_enqueue;
    obj[0] = table;
    counting = 1;
    for (long i = 0; i < n; i++) CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, &l, 0, NULL, NULL));
    counting = 0;
    obj[0] = real_table;
    printf("allocations in %ld launches already seen: %ld\n", n, allocations);
    CHECK(clReleaseCommandQueue(q));
    CHECK(clReleaseMemObject(out));
    CHECK(clReleaseKernel(k));
    CHECK(clReleaseProgram(p));
    CHECK(clReleaseContext(ctx));
    printf("ok\n");
    return 0;
}
