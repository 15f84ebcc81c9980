/* A build that fails (syntax error): prints the code clBuildProgram returned, the build
 * status and the build log. Exits 0 when the build failed as expected. Flags: --seed=N. */
#include "cltest.h"

int main(int argc, char **argv) {
    const char *seed = arg_value(argc, argv, "--seed");
    char src[512];
    snprintf(src, sizeof src,
             "__kernel void broken(__global int *out) {\n"
             "    out[get_global_id(0)] = %s +;\n"
             "}\n",
             seed ? seed : "3");
    cl_platform_id plat;
    cl_device_id dev;
    pick_device(&plat, &dev);
    cl_context ctx = make_context(dev);
    cl_int err;
    const char *srcs[] = {src};
    cl_program prog = clCreateProgramWithSource(ctx, 1, srcs, NULL, &err);
    CHECK(err);
    err = clBuildProgram(prog, 1, &dev, NULL, NULL, NULL);
    printf("clBuildProgram: %s (%d)\n", cl_err_name(err), err);
    cl_build_status st = 0;
    CHECK(clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_STATUS, sizeof st, &st, NULL));
    printf("status: %s\n", st == CL_BUILD_ERROR     ? "CL_BUILD_ERROR"
                           : st == CL_BUILD_SUCCESS ? "CL_BUILD_SUCCESS"
                                                    : "other");
    size_t n = 0;
    CHECK(clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, 0, NULL, &n));
    char *log = calloc(n + 1, 1);
    CHECK(clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, n, log, NULL));
    printf("log begin\n%s\nlog end\n", log);
    free(log);
    CHECK(clReleaseProgram(prog));
    CHECK(clReleaseContext(ctx));
    return err == CL_BUILD_PROGRAM_FAILURE ? 0 : 1;
}
