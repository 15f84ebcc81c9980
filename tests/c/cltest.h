/* Small helpers shared by the C test programs: error names, fatal checks, picking a
 * device, running a one-argument kernel and printing a checksum of its output. */
#ifndef CLTEST_H
#define CLTEST_H

#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline const char *cl_err_name(cl_int e) {
    switch (e) {
#define N(x) case x: return #x;
        N(CL_SUCCESS) N(CL_DEVICE_NOT_FOUND) N(CL_DEVICE_NOT_AVAILABLE)
        N(CL_COMPILER_NOT_AVAILABLE) N(CL_MEM_OBJECT_ALLOCATION_FAILURE)
        N(CL_OUT_OF_RESOURCES) N(CL_OUT_OF_HOST_MEMORY) N(CL_PROFILING_INFO_NOT_AVAILABLE)
        N(CL_MEM_COPY_OVERLAP) N(CL_IMAGE_FORMAT_MISMATCH) N(CL_IMAGE_FORMAT_NOT_SUPPORTED)
        N(CL_BUILD_PROGRAM_FAILURE) N(CL_MAP_FAILURE) N(CL_COMPILE_PROGRAM_FAILURE)
        N(CL_LINKER_NOT_AVAILABLE) N(CL_LINK_PROGRAM_FAILURE) N(CL_INVALID_VALUE)
        N(CL_INVALID_DEVICE_TYPE) N(CL_INVALID_PLATFORM) N(CL_INVALID_DEVICE)
        N(CL_INVALID_CONTEXT) N(CL_INVALID_QUEUE_PROPERTIES) N(CL_INVALID_COMMAND_QUEUE)
        N(CL_INVALID_HOST_PTR) N(CL_INVALID_MEM_OBJECT) N(CL_INVALID_BINARY)
        N(CL_INVALID_BUILD_OPTIONS) N(CL_INVALID_PROGRAM) N(CL_INVALID_PROGRAM_EXECUTABLE)
        N(CL_INVALID_KERNEL_NAME) N(CL_INVALID_KERNEL_DEFINITION) N(CL_INVALID_KERNEL)
        N(CL_INVALID_ARG_INDEX) N(CL_INVALID_ARG_VALUE) N(CL_INVALID_ARG_SIZE)
        N(CL_INVALID_KERNEL_ARGS) N(CL_INVALID_WORK_DIMENSION) N(CL_INVALID_WORK_GROUP_SIZE)
        N(CL_INVALID_WORK_ITEM_SIZE) N(CL_INVALID_GLOBAL_OFFSET) N(CL_INVALID_EVENT_WAIT_LIST)
        N(CL_INVALID_EVENT) N(CL_INVALID_OPERATION) N(CL_INVALID_BUFFER_SIZE)
        N(CL_INVALID_GLOBAL_WORK_SIZE) N(CL_INVALID_COMPILER_OPTIONS)
        N(CL_INVALID_LINKER_OPTIONS) N(CL_INVALID_DEVICE_PARTITION_COUNT)
        N(CL_KERNEL_ARG_INFO_NOT_AVAILABLE)
#undef N
    case -1001: return "CL_PLATFORM_NOT_FOUND_KHR";
    default: return "CL_UNKNOWN_ERROR";
    }
}

/* Aborts the program (exit 1) when an OpenCL call fails, naming the call and the error. */
#define CHECK(call)                                                                   \
    do {                                                                              \
        cl_int check_err_ = (call);                                                   \
        if (check_err_ != CL_SUCCESS) {                                               \
            fprintf(stderr, "%s:%d: %s -> %s (%d)\n", __FILE__, __LINE__, #call,        \
                    cl_err_name(check_err_), check_err_);                             \
            printf("FAILED %s -> %s\n", #call, cl_err_name(check_err_));              \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

static inline uint64_t fnv1a64(const void *data, size_t n) {
    const unsigned char *p = data;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

/* The first device of the first platform (any type), or the first platform whose name
 * contains $CLTEST_PLATFORM. */
static inline void pick_device(cl_platform_id *plat_out, cl_device_id *dev_out) {
    cl_platform_id plats[16];
    cl_uint np = 0;
    CHECK(clGetPlatformIDs(16, plats, &np));
    const char *want = getenv("CLTEST_PLATFORM");
    for (cl_uint i = 0; i < np && i < 16; i++) {
        char name[256] = "";
        CHECK(clGetPlatformInfo(plats[i], CL_PLATFORM_NAME, sizeof name, name, NULL));
        if (want && !strstr(name, want)) continue;
        cl_uint nd = 0;
        cl_device_id dev;
        if (clGetDeviceIDs(plats[i], CL_DEVICE_TYPE_ALL, 1, &dev, &nd) != CL_SUCCESS || nd == 0)
            continue;
        *plat_out = plats[i];
        *dev_out = dev;
        return;
    }
    fprintf(stderr, "no OpenCL device found\n");
    printf("FAILED no device\n");
    exit(1);
}

static inline cl_context make_context(cl_device_id dev) {
    cl_int err;
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    CHECK(err);
    return ctx;
}

/* Runs kernel `name` of `prog` (signature: __global int *out) over n items and prints
 * "<label>: <n values> sum=<sum>". Returns the sum. */
static inline long run_int_kernel(cl_context ctx, cl_device_id dev, cl_program prog, const char *name,
                           size_t n, const char *label) {
    cl_int err;
    cl_kernel k = clCreateKernel(prog, name, &err);
    CHECK(err);
    cl_mem buf = clCreateBuffer(ctx, CL_MEM_WRITE_ONLY, n * sizeof(cl_int), NULL, &err);
    CHECK(err);
    CHECK(clSetKernelArg(k, 0, sizeof buf, &buf));
    cl_command_queue q = clCreateCommandQueue(ctx, dev, 0, &err);
    CHECK(err);
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &n, NULL, 0, NULL, NULL));
    cl_int *out = calloc(n, sizeof(cl_int));
    CHECK(clEnqueueReadBuffer(q, buf, CL_TRUE, 0, n * sizeof(cl_int), out, 0, NULL, NULL));
    long sum = 0;
    printf("%s:", label);
    for (size_t i = 0; i < n; i++) {
        printf(" %d", out[i]);
        sum += out[i];
    }
    printf(" sum=%ld\n", sum);
    free(out);
    CHECK(clReleaseCommandQueue(q));
    CHECK(clReleaseMemObject(buf));
    CHECK(clReleaseKernel(k));
    return sum;
}

/* Builds `prog` for `dev`; on failure prints the build log to stderr and exits. */
static inline void build_or_die(cl_program prog, cl_device_id dev, const char *options) {
    cl_int err = clBuildProgram(prog, 1, &dev, options, NULL, NULL);
    if (err != CL_SUCCESS) {
        char log[8192] = "";
        clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
        fprintf(stderr, "build log:\n%s\n", log);
    }
    CHECK(err);
}

/* Value of "--name=value" in argv, or NULL. */
static inline const char *arg_value(int argc, char **argv, const char *name) {
    size_t n = strlen(name);
    for (int i = 1; i < argc; i++)
        if (strncmp(argv[i], name, n) == 0 && argv[i][n] == '=') return argv[i] + n + 1;
    return NULL;
}

static inline int has_arg(int argc, char **argv, const char *flag) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], flag) == 0) return 1;
    return 0;
}

/* Writes the binary of a program of one device to `path`, as a binary cache saves it:
 * 0, or 1 after printing why it could not. */
static inline int write_binary(cl_program prog, const char *path) {
    size_t size = 0;
    CHECK(clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL));
    unsigned char *bin = malloc(size ? size : 1);
    unsigned char *bins[] = {bin};
    CHECK(clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bins, bins, NULL));
    FILE *f = fopen(path, "wb");
    int failed = !f || fwrite(bin, 1, size, f) != size || fclose(f) != 0;
    if (failed) printf("FAILED cannot write %s\n", path);
    free(bin);
    return failed;
}

/* The whole of a file (a cache file a client saved), its length in *len; NULL if it
 * cannot be opened. */
static inline unsigned char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc(n > 0 ? n : 1);
    *len = fread(buf, 1, n, f);
    fclose(f);
    return buf;
}

#endif
