/* Like a client that loads the OpenCL loader itself: dlopen("libOpenCL.so.1",
 * RTLD_NOW|RTLD_LOCAL) and take every entry point with dlsym(handle, ...), so LD_PRELOAD
 * never sees the calls (a loader layer does). Builds, queries the binary, runs the kernel.
 * Not linked to libOpenCL. Flags: --seed=N, --no-query, --no-run. */
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *lib;

static void *sym(const char *name) {
    void *p = dlsym(lib, name);
    if (!p) {
        printf("FAILED dlsym %s\n", name);
        exit(1);
    }
    return p;
}

#define FN(name) static __typeof__(&name) p_##name;
#define LOAD(name) p_##name = (__typeof__(&name))sym(#name);
#define ALL(X)                                                                              \
    X(clGetPlatformIDs) X(clGetDeviceIDs) X(clCreateContext) X(clCreateProgramWithSource)   \
    X(clBuildProgram) X(clGetProgramInfo) X(clGetProgramBuildInfo) X(clCreateKernel)         \
    X(clCreateBuffer) X(clSetKernelArg) X(clCreateCommandQueue) X(clEnqueueNDRangeKernel)    \
    X(clEnqueueReadBuffer) X(clReleaseCommandQueue) X(clReleaseMemObject) X(clReleaseKernel) \
    X(clReleaseProgram) X(clReleaseContext)
ALL(FN)

#define CHECK(call)                                                                     \
    do {                                                                                \
        cl_int e_ = (call);                                                             \
        if (e_ != CL_SUCCESS) {                                                         \
            printf("FAILED %s -> %d\n", #call, e_);                                     \
            fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #call, e_);         \
            exit(1);                                                                    \
        }                                                                               \
    } while (0)

static int has_arg(int argc, char **argv, const char *flag) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], flag) == 0) return 1;
    return 0;
}

int main(int argc, char **argv) {
    const char *seed = NULL;
    for (int i = 1; i < argc; i++)
        if (strncmp(argv[i], "--seed=", 7) == 0) seed = argv[i] + 7;
    lib = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        printf("FAILED dlopen: %s\n", dlerror());
        return 1;
    }
    ALL(LOAD)
    char src[512];
    snprintf(src, sizeof src,
             "__kernel void twice(__global int *out) {\n"
             "    int i = get_global_id(0);\n"
             "    out[i] = 2 * i + %s;\n"
             "}\n",
             seed ? seed : "9");
    cl_platform_id plat;
    cl_uint np = 0;
    CHECK(p_clGetPlatformIDs(1, &plat, &np));
    cl_device_id dev;
    CHECK(p_clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 1, &dev, NULL));
    cl_int err;
    cl_context ctx = p_clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    CHECK(err);
    const char *srcs[] = {src};
    cl_program prog = p_clCreateProgramWithSource(ctx, 1, srcs, NULL, &err);
    CHECK(err);
    CHECK(p_clBuildProgram(prog, 1, &dev, NULL, NULL, NULL));
    printf("built\n");
    if (!has_arg(argc, argv, "--no-query")) {
        size_t size = 0;
        CHECK(p_clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL));
        unsigned char *bin = malloc(size ? size : 1);
        unsigned char *bins[] = {bin};
        CHECK(p_clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bins, bins, NULL));
        printf("binary: %s\n", size ? "nonzero" : "zero");
        free(bin);
    }
    if (!has_arg(argc, argv, "--no-run")) {
        cl_kernel k = p_clCreateKernel(prog, "twice", &err);
        CHECK(err);
        size_t n = 8;
        cl_mem buf = p_clCreateBuffer(ctx, CL_MEM_WRITE_ONLY, n * sizeof(cl_int), NULL, &err);
        CHECK(err);
        CHECK(p_clSetKernelArg(k, 0, sizeof buf, &buf));
        cl_command_queue q = p_clCreateCommandQueue(ctx, dev, 0, &err);
        CHECK(err);
        CHECK(p_clEnqueueNDRangeKernel(q, k, 1, NULL, &n, NULL, 0, NULL, NULL));
        cl_int out[8];
        CHECK(p_clEnqueueReadBuffer(q, buf, CL_TRUE, 0, sizeof out, out, 0, NULL, NULL));
        printf("twice:");
        for (size_t i = 0; i < n; i++) printf(" %d", out[i]);
        printf("\n");
        CHECK(p_clReleaseCommandQueue(q));
        CHECK(p_clReleaseMemObject(buf));
        CHECK(p_clReleaseKernel(k));
    }
    CHECK(p_clReleaseProgram(prog));
    CHECK(p_clReleaseContext(ctx));
    printf("ok\n");
    return 0;
}
