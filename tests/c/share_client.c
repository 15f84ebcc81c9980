/* A client for the tests of ranks sharing compiles (tests/policy/shared_builds.rs): builds a
 * small kernel `add` (after `--pad=BYTES` of comments, a program of a few lines under much
 * text; with `--pad-disabled` that text is declarations inside `#if 0`) and launches it
 * in one of three ways, each of which once made a rank under the
 * sharing wait, or a folder grow, far beyond its own compile:
 *   --gate=FILE   the launch waits for a user event that is set once FILE exists, as a
 *                 command whose inputs come from another rank (MPI) after the enqueue;
 *   --self        the same source built as two programs in this process; the first's
 *                 launch waits behind a user event, the second is launched before it is set;
 *   --sizes=N     the kernel launched with N global sizes (7, 14, ... 7N), local size left
 *                 to the driver, as an application whose arrays change size.
 * Without any, the kernel is launched once. Prints "enqueue=<seconds> out=<value>", the
 * seconds the enqueue calls took (clEnqueueNDRangeKernel does not wait for a compile
 * without clshim: pocl compiles on its worker threads). */
#include "cltest.h"
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    const char *pad_arg = arg_value(argc, argv, "--pad");
    const char *gate_file = arg_value(argc, argv, "--gate");
    const char *sizes_arg = arg_value(argc, argv, "--sizes");
    int self = has_arg(argc, argv, "--self");
    int disabled = has_arg(argc, argv, "--pad-disabled");
    size_t pad = pad_arg ? (size_t)atol(pad_arg) : 0;
    char *src = malloc(pad + 256);
    char *p = src;
    if (disabled) p += sprintf(p, "#if 0\n");
    for (size_t i = 0; i + 64 <= pad; i += 64)
        p += sprintf(p, disabled
                            ? "int padding_padding_padding_padding_padding_padding_padding_x;\n"
                            : "// padding, padding, padding, padding, padding, padding, pad.\n");
    if (disabled) p += sprintf(p, "#endif\n");
    sprintf(p, "__kernel void add(__global int *out) { out[get_global_id(0)] += 3; }\n");

    cl_platform_id plat;
    cl_device_id dev;
    pick_device(&plat, &dev);
    cl_context ctx = make_context(dev);
    cl_int err;
    cl_command_queue q = clCreateCommandQueue(ctx, dev, 0, &err);
    CHECK(err);
    size_t most = sizes_arg ? 7 * (size_t)atol(sizes_arg) : 64;
    cl_mem buf = clCreateBuffer(ctx, CL_MEM_READ_WRITE, most * sizeof(cl_int), NULL, &err);
    CHECK(err);
    cl_int zero = 0;
    CHECK(clEnqueueFillBuffer(q, buf, &zero, sizeof zero, 0, most * sizeof(cl_int), 0, NULL, NULL));
    CHECK(clFinish(q));
    const char *s = src;
    cl_program prog[2];
    cl_kernel k[2];
    for (int i = 0; i < (self ? 2 : 1); i++) {
        prog[i] = clCreateProgramWithSource(ctx, 1, &s, NULL, &err);
        CHECK(err);
        build_or_die(prog[i], dev, "");
        k[i] = clCreateKernel(prog[i], "add", &err);
        CHECK(err);
        CHECK(clSetKernelArg(k[i], 0, sizeof buf, &buf));
    }

    double enqueue = 0;
    size_t g = 16;
    if (gate_file || self) {
        cl_event gate = clCreateUserEvent(ctx, &err);
        CHECK(err);
        double t = now();
        CHECK(clEnqueueNDRangeKernel(q, k[0], 1, NULL, &g, NULL, 1, &gate, NULL));
        if (self)
            CHECK(clEnqueueNDRangeKernel(q, k[1], 1, NULL, &g, NULL, 0, NULL, NULL));
        enqueue = now() - t;
        printf("enqueued\n");
        fflush(stdout);
        /* A test that failed before opening the gate leaves no client waiting. */
        pid_t parent = getppid();
        while (gate_file && access(gate_file, F_OK) != 0 && getppid() == parent)
            usleep(10000);
        CHECK(clSetUserEventStatus(gate, CL_COMPLETE));
        CHECK(clReleaseEvent(gate));
    } else if (sizes_arg) {
        for (size_t n = 1; n <= (size_t)atol(sizes_arg); n++) {
            size_t gn = 7 * n;
            double t = now();
            CHECK(clEnqueueNDRangeKernel(q, k[0], 1, NULL, &gn, NULL, 0, NULL, NULL));
            enqueue += now() - t;
        }
    } else {
        double t = now();
        CHECK(clEnqueueNDRangeKernel(q, k[0], 1, NULL, &g, NULL, 0, NULL, NULL));
        enqueue = now() - t;
    }
    cl_int out = -1;
    CHECK(clEnqueueReadBuffer(q, buf, CL_TRUE, 0, sizeof out, &out, 0, NULL, NULL));
    printf("enqueue=%.3f out=%d\n", enqueue, out);
    for (int i = 0; i < (self ? 2 : 1); i++) {
        CHECK(clReleaseKernel(k[i]));
        CHECK(clReleaseProgram(prog[i]));
    }
    CHECK(clReleaseMemObject(buf));
    CHECK(clReleaseCommandQueue(q));
    CHECK(clReleaseContext(ctx));
    free(src);
    return 0;
}
