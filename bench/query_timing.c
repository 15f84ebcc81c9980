/* Times a source build and the binary queries that follow it on one OpenCL device, and
 * prints a hash of the binary the application receives.
 *
 *   query_timing [--platform=SUBSTR] [--kernels=N] [--statements=S] [--seed=N]
 *                [--elements=E] [--no-run] [--info]
 *
 * The device is the first device of the first platform whose CL_PLATFORM_NAME contains
 * SUBSTR (default: the first platform). For each kernel k (0..N-1) it builds the bench
 * workload's kernel sum_k (S statements, bench/workload.py's kernel_source, plus a
 * `seed` constant so a new seed defeats driver caches), then times
 *   CL_PROGRAM_BINARY_SIZES (with a value buffer) and CL_PROGRAM_BINARIES,
 * hashes the binary (fnv1a64) and, unless --no-run, runs the kernel once on E elements
 * and checks c == a + b + k. One line per kernel:
 *
 *   query platform=... device=... kernel=0 statements=300 build_s=... sizes_s=...
 *         binaries_s=... run_s=... size=... hash=fnv1a64:... result=ok
 *
 * --info prints the platform and device versions first. Exit 1 on a wrong result or a
 * failed call. Build: cc -O1 -g -Wall -DCL_TARGET_OPENCL_VERSION=300 -o query_timing
 *                     query_timing.c -lOpenCL */
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(call)                                                                  \
    do {                                                                             \
        cl_int e_ = (call);                                                          \
        if (e_ != CL_SUCCESS) {                                                      \
            fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #call, e_);     \
            printf("FAILED %s -> %d\n", #call, e_);                                  \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t fnv1a64(const unsigned char *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

static const char *arg(int argc, char **argv, const char *name, const char *def) {
    size_t n = strlen(name);
    for (int i = 1; i < argc; i++)
        if (strncmp(argv[i], name, n) == 0 && argv[i][n] == '=') return argv[i] + n + 1;
    return def;
}

static int flag(int argc, char **argv, const char *name) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], name) == 0) return 1;
    return 0;
}

/* No spaces in printed names. */
static void squash(char *s) {
    for (; *s; s++)
        if (*s == ' ') *s = '_';
}

static char *kernel_source(int k, int statements, const char *seed) {
    const char *stmt = "  c[gid] = a[gid] + b[gid];\n";
    size_t cap = 512 + (size_t)statements * strlen(stmt);
    char *s = malloc(cap);
    int n = snprintf(s, cap,
                     "__kernel void sum_%d(__global const float *a, __global const float *b,\n"
                     "                      __global float *c)\n"
                     "{\n"
                     "  int gid = get_global_id(0);\n",
                     k);
    for (int i = 0; i < statements - 1; i++) n += snprintf(s + n, cap - n, "%s", stmt);
    snprintf(s + n, cap - n, "  c[gid] = a[gid] + b[gid] + %d.0f;\n}\n__constant int query_timing_seed = %s;\n", k,
             seed);
    return s;
}

int main(int argc, char **argv) {
    const char *want = arg(argc, argv, "--platform", NULL);
    int kernels = atoi(arg(argc, argv, "--kernels", "1"));
    int statements = atoi(arg(argc, argv, "--statements", "300"));
    const char *seed = arg(argc, argv, "--seed", "0");
    size_t elements = (size_t)atol(arg(argc, argv, "--elements", "50000"));
    int run = !flag(argc, argv, "--no-run");
    if (kernels < 1 || statements < 1 || elements < 1) {
        fprintf(stderr, "--kernels, --statements and --elements must be at least 1\n");
        return 2;
    }

    cl_platform_id plats[16], plat = NULL;
    cl_uint np = 0;
    CHECK(clGetPlatformIDs(16, plats, &np));
    char pname[256] = "", pver[256] = "", dname[256] = "", dver[256] = "", cver[256] = "";
    cl_device_id dev = NULL;
    for (cl_uint i = 0; i < np && i < 16; i++) {
        CHECK(clGetPlatformInfo(plats[i], CL_PLATFORM_NAME, sizeof pname, pname, NULL));
        if (want && !strstr(pname, want)) continue;
        cl_uint nd = 0;
        if (clGetDeviceIDs(plats[i], CL_DEVICE_TYPE_ALL, 1, &dev, &nd) == CL_SUCCESS && nd) {
            plat = plats[i];
            break;
        }
    }
    if (!plat) {
        printf("FAILED no platform matching '%s'\n", want ? want : "");
        return 1;
    }
    CHECK(clGetPlatformInfo(plat, CL_PLATFORM_VERSION, sizeof pver, pver, NULL));
    CHECK(clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof dname, dname, NULL));
    CHECK(clGetDeviceInfo(dev, CL_DRIVER_VERSION, sizeof dver, dver, NULL));
    CHECK(clGetDeviceInfo(dev, CL_DEVICE_VERSION, sizeof cver, cver, NULL));
    if (flag(argc, argv, "--info"))
        printf("info platform_name=\"%s\" platform_version=\"%s\" device=\"%s\" "
               "driver_version=\"%s\" device_version=\"%s\"\n",
               pname, pver, dname, dver, cver);
    squash(pname);
    squash(dname);

    cl_int err;
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    CHECK(err);
    cl_command_queue q = clCreateCommandQueue(ctx, dev, 0, &err);
    CHECK(err);
    float *a = malloc(elements * sizeof(float)), *b = malloc(elements * sizeof(float)),
          *c = malloc(elements * sizeof(float));
    for (size_t i = 0; i < elements; i++) {
        a[i] = (float)(i % 1000) * 0.5f;
        b[i] = (float)(i % 77) * 0.25f;
    }
    cl_mem abuf = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, elements * 4, a, &err);
    CHECK(err);
    cl_mem bbuf = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, elements * 4, b, &err);
    CHECK(err);
    cl_mem cbuf = clCreateBuffer(ctx, CL_MEM_WRITE_ONLY, elements * 4, NULL, &err);
    CHECK(err);

    int rc = 0;
    for (int k = 0; k < kernels; k++) {
        char *src = kernel_source(k, statements, seed);
        const char *srcs[] = {src};
        cl_program prog = clCreateProgramWithSource(ctx, 1, srcs, NULL, &err);
        CHECK(err);
        double t0 = now();
        err = clBuildProgram(prog, 1, &dev, NULL, NULL, NULL);
        double t1 = now();
        if (err != CL_SUCCESS) {
            char log[8192] = "";
            clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
            fprintf(stderr, "build log:\n%s\n", log);
        }
        CHECK(err);
        size_t size = 0;
        CHECK(clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL));
        double t2 = now();
        unsigned char *bin = malloc(size ? size : 1);
        unsigned char *bins[] = {bin};
        CHECK(clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bins, bins, NULL));
        double t3 = now();
        uint64_t h = fnv1a64(bin, size);
        double run_s = 0;
        const char *result = "not-run";
        if (run) {
            char name[32];
            snprintf(name, sizeof name, "sum_%d", k);
            double r0 = now();
            cl_kernel kn = clCreateKernel(prog, name, &err);
            CHECK(err);
            CHECK(clSetKernelArg(kn, 0, sizeof abuf, &abuf));
            CHECK(clSetKernelArg(kn, 1, sizeof bbuf, &bbuf));
            CHECK(clSetKernelArg(kn, 2, sizeof cbuf, &cbuf));
            CHECK(clEnqueueNDRangeKernel(q, kn, 1, NULL, &elements, NULL, 0, NULL, NULL));
            CHECK(clEnqueueReadBuffer(q, cbuf, CL_TRUE, 0, elements * 4, c, 0, NULL, NULL));
            run_s = now() - r0;
            result = "ok";
            for (size_t i = 0; i < elements; i++) {
                float want_c = a[i] + b[i] + (float)k;
                float d = c[i] - want_c;
                if (d > 1e-4f * (1 + want_c) || d < -1e-4f * (1 + want_c)) {
                    result = "WRONG";
                    rc = 1;
                    break;
                }
            }
            CHECK(clReleaseKernel(kn));
        }
        printf("query platform=%s device=%s kernel=%d statements=%d build_s=%.4f sizes_s=%.4f "
               "binaries_s=%.4f run_s=%.4f size=%zu hash=fnv1a64:%016llx result=%s\n",
               pname, dname, k, statements, t1 - t0, t2 - t1, t3 - t2, run_s, size,
               (unsigned long long)h, result);
        fflush(stdout);
        free(bin);
        free(src);
        CHECK(clReleaseProgram(prog));
    }
    CHECK(clReleaseMemObject(abuf));
    CHECK(clReleaseMemObject(bbuf));
    CHECK(clReleaseMemObject(cbuf));
    CHECK(clReleaseCommandQueue(q));
    CHECK(clReleaseContext(ctx));
    free(a);
    free(b);
    free(c);
    return rc;
}
