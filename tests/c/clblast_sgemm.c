/* A minimal client of CLBlast (Debian's libclblast-dev): SGEMM, C = A * B, on the first
 * device, in two contexts one after the other, printing a checksum of C each time.
 * CLBlast is the OpenCL client here: on its first call it builds its kernels from source,
 * queries the program's binary and keeps it in its in-memory binary cache; in the second
 * context its per-context program cache misses and it makes the program from that cached
 * binary (clCreateProgramWithBinary, then clBuildProgram). This program only gives it
 * something to do. Usage: clblast_sgemm [N] (square matrices, default 64). */
#include "cltest.h" /* first: it asks for the OpenCL 1.2 API that clblast_c.h's headers hide */

#include <clblast_c.h>

static void sgemm_in_new_context(cl_device_id dev, size_t n, const char *label) {
    cl_context ctx = make_context(dev);
    cl_int err;
    cl_command_queue q = clCreateCommandQueue(ctx, dev, 0, &err);
    CHECK(err);

    /* Small integers, so every product and sum is exact in float whatever the kernel's
     * summation order: the checksum is the same on every correct run. */
    float *a = malloc(n * n * sizeof(float)), *b = malloc(n * n * sizeof(float));
    float *c = calloc(n * n, sizeof(float));
    for (size_t i = 0; i < n * n; i++) {
        a[i] = (float)((i * 7) % 5) - 2.0f;
        b[i] = (float)((i * 3) % 7) - 3.0f;
    }
    size_t bytes = n * n * sizeof(float);
    cl_mem da = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes, a, &err);
    CHECK(err);
    cl_mem db = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes, b, &err);
    CHECK(err);
    cl_mem dc = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, c, &err);
    CHECK(err);

    cl_event ev = NULL;
    CLBlastStatusCode st = CLBlastSgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo,
                                        CLBlastTransposeNo, n, n, n, 1.0f, da, 0, n, db, 0, n,
                                        0.0f, dc, 0, n, &q, &ev);
    if (st != CLBlastSuccess) {
        fprintf(stderr, "CLBlastSgemm failed: %d\n", (int)st);
        printf("FAILED CLBlastSgemm %d\n", (int)st);
        exit(1);
    }
    CHECK(clWaitForEvents(1, &ev));
    CHECK(clEnqueueReadBuffer(q, dc, CL_TRUE, 0, bytes, c, 0, NULL, NULL));
    double sum = 0;
    for (size_t i = 0; i < n * n; i++) sum += c[i];
    printf("%s: sgemm n=%zu c[0]=%.1f c[last]=%.1f sum=%.1f fnv=%016llx\n", label, n, c[0], c[n * n - 1],
           sum, (unsigned long long)fnv1a64(c, bytes));
    clReleaseEvent(ev);
    clReleaseMemObject(da);
    clReleaseMemObject(db);
    clReleaseMemObject(dc);
    clReleaseCommandQueue(q);
    clReleaseContext(ctx);
    free(a);
    free(b);
    free(c);
}

int main(int argc, char **argv) {
    size_t n = argc > 1 ? (size_t)atoi(argv[1]) : 64;
    cl_platform_id plat;
    cl_device_id dev;
    pick_device(&plat, &dev);
    sgemm_in_new_context(dev, n, "context 1");
    sgemm_in_new_context(dev, n, "context 2");
    return 0;
}
