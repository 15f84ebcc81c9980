/* Runs one small kernel on the first device of every platform the loader lists (pocl and
 * Intel's CPU runtime under the Khronos loader): builds it from source, runs it, queries
 * its binary (CL_PROGRAM_BINARY_SIZES, CL_PROGRAM_BINARIES), creates a second program from
 * that binary, builds and runs it, and checks both results.
 * Built twice: linked to libOpenCL (the loader LD_LIBRARY_PATH picks), and with
 * -DUSE_DLOPEN, taking every entry point with dlsym(dlopen("libOpenCL.so.1")).
 * Prints which libOpenCL.so.1 is mapped, then one line per step and platform.
 * Flags: --save=DIR  write each platform's binary to DIR/<pocl|intel|other>.bin
 *        --dlclose   (dlopen build) dlclose the loader at the end, then print "closed"
 *        --seed=N    a constant in the kernel source */
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ALL(X)                                                                               \
    X(clGetPlatformIDs) X(clGetPlatformInfo) X(clGetDeviceIDs) X(clCreateContext)            \
    X(clCreateProgramWithSource) X(clCreateProgramWithBinary) X(clBuildProgram)               \
    X(clGetProgramInfo) X(clCreateKernel) X(clCreateBuffer) X(clSetKernelArg)                 \
    X(clCreateCommandQueue) X(clEnqueueNDRangeKernel) X(clEnqueueReadBuffer)                  \
    X(clReleaseCommandQueue) X(clReleaseMemObject) X(clReleaseKernel) X(clReleaseProgram)     \
    X(clReleaseContext)

#ifdef USE_DLOPEN
static void *lib;
#define FN(name) static __typeof__(&name) p_##name;
#define LOAD(name)                                                  \
    if (!(p_##name = (__typeof__(&name))dlsym(lib, #name))) {       \
        printf("FAILED dlsym %s\n", #name);                         \
        exit(1);                                                    \
    }
ALL(FN)
#else
#define FN(name) static __typeof__(&name) p_##name = name;
ALL(FN)
#endif

#define CHECK(call)                                                          \
    do {                                                                     \
        cl_int e_ = (call);                                                  \
        if (e_ != CL_SUCCESS) {                                              \
            printf("FAILED %s -> %d\n", #call, e_);                          \
            fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #call, e_); \
            exit(1);                                                         \
        }                                                                    \
    } while (0)

static const char *arg_value(int argc, char **argv, const char *flag) {
    size_t n = strlen(flag);
    for (int i = 1; i < argc; i++)
        if (strncmp(argv[i], flag, n) == 0 && argv[i][n] == '=') return argv[i] + n + 1;
    return NULL;
}

static int has_arg(int argc, char **argv, const char *flag) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], flag) == 0) return 1;
    return 0;
}

/* The libOpenCL.so.1 this process has mapped, from /proc/self/maps. */
static void print_loader(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096];
    while (f && fgets(line, sizeof line, f)) {
        char *p = strchr(line, '/');
        if (p && strstr(p, "libOpenCL.so")) {
            p[strcspn(p, "\n")] = 0;
            printf("loader: %s\n", p);
            break;
        }
    }
    if (f) fclose(f);
}

/* Runs `prog`'s kernel on 8 items and checks out[i] == i*i + seed. */
static void run(cl_context ctx, cl_device_id dev, cl_program prog, int seed, const char *label,
                const char *what) {
    cl_int err;
    cl_kernel k = p_clCreateKernel(prog, "sq", &err);
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
    for (size_t i = 0; i < n; i++) {
        if (out[i] != (cl_int)(i * i) + seed) {
            printf("FAILED %s %s: out[%zu] = %d\n", label, what, i, out[i]);
            exit(1);
        }
    }
    printf("%s %s: ok (%d..%d)\n", label, what, out[0], out[7]);
    CHECK(p_clReleaseCommandQueue(q));
    CHECK(p_clReleaseMemObject(buf));
    CHECK(p_clReleaseKernel(k));
}

int main(int argc, char **argv) {
    const char *seed_s = arg_value(argc, argv, "--seed");
    const char *save = arg_value(argc, argv, "--save");
    int seed = seed_s ? atoi(seed_s) : 5;
#ifdef USE_DLOPEN
    lib = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        printf("FAILED dlopen: %s\n", dlerror());
        return 1;
    }
    ALL(LOAD)
#endif
    print_loader();
    char src[256];
    snprintf(src, sizeof src,
             "__kernel void sq(__global int *out) {\n"
             "    int i = get_global_id(0);\n"
             "    out[i] = i * i + %d;\n"
             "}\n",
             seed);
    cl_platform_id plats[8];
    cl_uint np = 0;
    CHECK(p_clGetPlatformIDs(8, plats, &np));
    for (cl_uint pi = 0; pi < np && pi < 8; pi++) {
        char name[256] = "";
        CHECK(p_clGetPlatformInfo(plats[pi], CL_PLATFORM_NAME, sizeof name, name, NULL));
        const char *label = strstr(name, "Portable Computing Language") ? "pocl"
                            : strstr(name, "Intel")                      ? "intel"
                                                                         : "other";
        printf("platform: %s (%s)\n", label, name);
        cl_device_id dev;
        CHECK(p_clGetDeviceIDs(plats[pi], CL_DEVICE_TYPE_ALL, 1, &dev, NULL));
        cl_int err;
        cl_context ctx = p_clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
        CHECK(err);
        const char *srcs[] = {src};
        cl_program prog = p_clCreateProgramWithSource(ctx, 1, srcs, NULL, &err);
        CHECK(err);
        CHECK(p_clBuildProgram(prog, 1, &dev, NULL, NULL, NULL));
        run(ctx, dev, prog, seed, label, "source");
        size_t size = 0;
        CHECK(p_clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL));
        unsigned char *bin = malloc(size ? size : 1);
        unsigned char *bins[] = {bin};
        CHECK(p_clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bins, bins, NULL));
        printf("%s binary: %s\n", label, size ? "nonzero" : "zero");
        if (save) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s.bin", save, label);
            FILE *f = fopen(path, "wb");
            if (!f || fwrite(bin, 1, size, f) != size || fclose(f) != 0) {
                printf("FAILED cannot write %s\n", path);
                return 1;
            }
        }
        CHECK(p_clReleaseProgram(prog));
        const unsigned char *cbins[] = {bin};
        cl_int status = 0;
        cl_program again = p_clCreateProgramWithBinary(ctx, 1, &dev, &size, cbins, &status, &err);
        CHECK(err);
        CHECK(status);
        CHECK(p_clBuildProgram(again, 1, &dev, NULL, NULL, NULL));
        run(ctx, dev, again, seed, label, "from binary");
        CHECK(p_clReleaseProgram(again));
        CHECK(p_clReleaseContext(ctx));
        free(bin);
    }
#ifdef USE_DLOPEN
    if (has_arg(argc, argv, "--dlclose")) {
        dlclose(lib);
        printf("closed\n");
    }
#else
    (void)has_arg;
#endif
    printf("ok\n");
    return 0;
}
