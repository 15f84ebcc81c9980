/* A client with its own binary cache whose kernel writes VAL, which a header on disk (or
 * the driver's environment) defines: for the native store's key tests. `--save=FILE`
 * builds the program from source with `--options=OPTS`, runs it, prints "VAL=<n>" and
 * writes its binary to FILE; `--load=FILE` makes the program from FILE's binary, builds
 * it with the same options, runs it and prints "VAL=<n>". A failed build prints its
 * status ("build: CL_...") and exits 0, so a run's output is always comparable.
 * --macro-include names the header as hashcat does, `#include M2S(INCLUDE_PATH/val.h)`,
 * for options that define M2S, XM2S and INCLUDE_PATH. */
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

int main(int argc, char **argv) {
    const char *save = arg_value(argc, argv, "--save");
    const char *load = arg_value(argc, argv, "--load");
    const char *options = arg_value(argc, argv, "--options");
    if (!options) options = "";
    const char *src_macro =
        "#include M2S(INCLUDE_PATH/val.h)\n"
        "__kernel void val(__global int *out) { out[0] = VAL; }\n";
    const char *src = has_arg(argc, argv, "--macro-include") ? src_macro :
        "#include \"val.h\"\n"
        "#ifndef VAL\n"
        "#define VAL 1\n"
        "#endif\n"
        "__kernel void val(__global int *out) { out[0] = VAL; }\n";
    cl_platform_id plat;
    cl_device_id dev;
    pick_device(&plat, &dev);
    cl_context ctx = make_context(dev);
    cl_int err;
    if (save) {
        cl_program prog = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
        CHECK(err);
        err = clBuildProgram(prog, 1, &dev, options, NULL, NULL);
        if (err != CL_SUCCESS) {
            printf("build: %s\n", cl_err_name(err));
            return 0;
        }
        printf("VAL=%d\n", run_val(ctx, dev, prog));
        if (write_binary(prog, save) != 0) return 1;
        CHECK(clReleaseProgram(prog));
    }
    if (load) {
        size_t size = 0;
        unsigned char *bin = read_file(load, &size);
        if (!bin) {
            printf("FAILED cannot read %s\n", load);
            return 1;
        }
        const unsigned char *bins[] = {bin};
        cl_int status;
        cl_program prog = clCreateProgramWithBinary(ctx, 1, &dev, &size, bins, &status, &err);
        CHECK(err);
        err = clBuildProgram(prog, 1, &dev, options, NULL, NULL);
        if (err != CL_SUCCESS) {
            printf("build: %s\n", cl_err_name(err));
            return 0;
        }
        printf("VAL=%d\n", run_val(ctx, dev, prog));
        CHECK(clReleaseProgram(prog));
        free(bin);
    }
    return 0;
}
