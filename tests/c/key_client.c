/* A client that builds programs from source, as applications without a binary cache do
 * (pyopencl 2024.2.3 and later on pocl), for the program cache's key tests: its kernel
 * `val` writes VAL, which the source, a header on disk, the options or the driver's
 * environment define. `--source=FILE` takes the source from FILE, byte for byte (BOMs, lone
 * CRs, NULs and all: its length is the file's); `--options=OPTS` are the build options;
 * `--then-env=NAME=VALUE` builds once, sets NAME=VALUE in the process's environment, and
 * builds the same source again (a new program object); `--context-then-env=NAME=VALUE`
 * sets it after the context is made (the driver started) and before the first build;
 * `--start-env=NAME=VALUE` sets it before the first OpenCL call; `--then-wait-for=PATH
 * --then-source=FILE` builds once, makes the empty file PATH.built, waits (up to 60 s) for
 * PATH to exist, and builds FILE's source (one long process, for a test to change what is on
 * disk between its builds). Prints "VAL=<n>" for each build,
 * or "build: CL_..." when one fails, and exits 0 either way, so outputs compare. */
#include <unistd.h>
#include "cltest.h"

static int run_val(cl_context ctx, cl_device_id dev, cl_program prog) {
    cl_int err;
    cl_kernel k = clCreateKernel(prog, "val", &err);
    CHECK(err);
    cl_mem buf = clCreateBuffer(ctx, CL_MEM_WRITE_ONLY, sizeof(cl_int), NULL, &err);
    CHECK(err);
    CHECK(clSetKernelArg(k, 0, sizeof buf, &buf));
    cl_command_queue q = clCreateCommandQueue(ctx, dev, 0, &err);
    CHECK(err);
    size_t one = 1;
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &one, NULL, 0, NULL, NULL));
    cl_int v = -1;
    CHECK(clEnqueueReadBuffer(q, buf, CL_TRUE, 0, sizeof v, &v, 0, NULL, NULL));
    CHECK(clReleaseCommandQueue(q));
    CHECK(clReleaseMemObject(buf));
    CHECK(clReleaseKernel(k));
    return v;
}

static void build_and_print(cl_context ctx, cl_device_id dev, const char *src, size_t len,
                            const char *options) {
    cl_int err;
    cl_program prog = clCreateProgramWithSource(ctx, 1, &src, &len, &err);
    CHECK(err);
    err = clBuildProgram(prog, 1, &dev, options, NULL, NULL);
    if (err != CL_SUCCESS) {
        printf("build: %s\n", cl_err_name(err));
    } else {
        printf("VAL=%d\n", run_val(ctx, dev, prog));
    }
    CHECK(clReleaseProgram(prog));
}

int main(int argc, char **argv) {
    const char *source_file = arg_value(argc, argv, "--source");
    const char *options = arg_value(argc, argv, "--options");
    const char *then_env = arg_value(argc, argv, "--then-env");
    const char *context_env = arg_value(argc, argv, "--context-then-env");
    if (!options) options = "";
    const char *src =
        "#include \"val.h\"\n"
        "__kernel void val(__global int *out) { out[0] = VAL; }\n";
    size_t len = strlen(src);
    unsigned char *from_file = NULL;
    if (source_file) {
        from_file = read_file(source_file, &len);
        if (!from_file) {
            printf("FAILED cannot read %s\n", source_file);
            return 1;
        }
        src = (const char *)from_file;
    }
    const char *start_env = arg_value(argc, argv, "--start-env");
    if (start_env) {
        char *pair = strdup(start_env);
        char *eq = strchr(pair, '=');
        if (!eq) return 2;
        *eq = 0;
        setenv(pair, eq + 1, 1);
    }
    cl_platform_id plat;
    cl_device_id dev;
    pick_device(&plat, &dev);
    cl_context ctx = make_context(dev);
    if (context_env) {
        char *pair = strdup(context_env);
        char *eq = strchr(pair, '=');
        if (!eq) return 2;
        *eq = 0;
        setenv(pair, eq + 1, 1);
    }
    build_and_print(ctx, dev, src, len, options);
    const char *wait_for = arg_value(argc, argv, "--then-wait-for");
    const char *then_source = arg_value(argc, argv, "--then-source");
    if (wait_for && then_source) {
        char built[4096];
        snprintf(built, sizeof built, "%s.built", wait_for);
        fclose(fopen(built, "w"));
        for (int i = 0; i < 6000 && access(wait_for, F_OK) != 0; i++) usleep(10000);
        size_t len2;
        unsigned char *src2 = read_file(then_source, &len2);
        if (!src2) {
            printf("FAILED cannot read %s\n", then_source);
            return 1;
        }
        build_and_print(ctx, dev, (const char *)src2, len2, options);
        free(src2);
    }
    if (then_env) {
        char *pair = strdup(then_env);
        char *eq = strchr(pair, '=');
        if (!eq) return 2;
        *eq = 0;
        setenv(pair, eq + 1, 1);
        build_and_print(ctx, dev, src, len, options);
        free(pair);
    }
    CHECK(clReleaseContext(ctx));
    free(from_file);
    return 0;
}
