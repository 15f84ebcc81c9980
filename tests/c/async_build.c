/* clBuildProgram with a pfn_notify callback and user_data: the callback must run exactly
 * once, with the user_data given, and the program must be built when it runs.
 * Flags: --seed=N, --no-run. */
#include "cltest.h"
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

static atomic_int calls;
static atomic_int bad_user_data;
static atomic_int status_in_callback = -100;
static int marker;

static void CL_CALLBACK notify(cl_program prog, void *user_data) {
    if (user_data != &marker) atomic_fetch_add(&bad_user_data, 1);
    cl_build_status st = CL_BUILD_NONE;
    cl_uint nd = 0;
    cl_device_id dev;
    if (clGetProgramInfo(prog, CL_PROGRAM_DEVICES, sizeof dev, &dev, NULL) == CL_SUCCESS &&
        clGetProgramInfo(prog, CL_PROGRAM_NUM_DEVICES, sizeof nd, &nd, NULL) == CL_SUCCESS &&
        clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_STATUS, sizeof st, &st, NULL) ==
            CL_SUCCESS)
        atomic_store(&status_in_callback, st);
    atomic_fetch_add(&calls, 1);
}

int main(int argc, char **argv) {
    const char *seed = arg_value(argc, argv, "--seed");
    char src[512];
    snprintf(src, sizeof src,
             "__kernel void triple(__global int *out) {\n"
             "    int i = get_global_id(0);\n"
             "    out[i] = 3 * i + %s;\n"
             "}\n",
             seed ? seed : "1");
    cl_platform_id plat;
    cl_device_id dev;
    pick_device(&plat, &dev);
    cl_context ctx = make_context(dev);
    cl_int err;
    const char *srcs[] = {src};
    cl_program prog = clCreateProgramWithSource(ctx, 1, srcs, NULL, &err);
    CHECK(err);
    CHECK(clBuildProgram(prog, 1, &dev, NULL, notify, &marker));
    printf("clBuildProgram returned CL_SUCCESS\n");
    /* The callback may run before clBuildProgram returns or later, on another thread. */
    for (int i = 0; i < 2000 && atomic_load(&calls) == 0; i++) usleep(5000);
    usleep(100000); /* a second, wrong call would most likely show up by now */
    printf("callback calls: %d\n", atomic_load(&calls));
    printf("callback user_data ok: %s\n", atomic_load(&bad_user_data) == 0 ? "yes" : "no");
    printf("status in callback: %s\n",
           atomic_load(&status_in_callback) == CL_BUILD_SUCCESS ? "CL_BUILD_SUCCESS" : "other");
    cl_build_status st;
    CHECK(clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_STATUS, sizeof st, &st, NULL));
    printf("status after: %s\n", st == CL_BUILD_SUCCESS ? "CL_BUILD_SUCCESS" : "other");
    if (!has_arg(argc, argv, "--no-run")) run_int_kernel(ctx, dev, prog, "triple", 8, "triple");
    CHECK(clReleaseProgram(prog));
    CHECK(clReleaseContext(ctx));
    int ok = atomic_load(&calls) == 1 && atomic_load(&bad_user_data) == 0 &&
             st == CL_BUILD_SUCCESS;
    printf("%s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
