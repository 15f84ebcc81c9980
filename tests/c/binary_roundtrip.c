/* Build from source, read the binary back (CL_PROGRAM_BINARY_SIZES, CL_PROGRAM_BINARIES),
 * create a second program from it with clCreateProgramWithBinary, build and run that.
 * Flags:
 *   --corrupt=flip|truncate|empty  damage the binary before loading it (the codes are
 *                                  printed, and a failure to load is not an error).
 *                                  Note: pocl 3.1 crashes on a truncated poclbinary, so
 *                                  `truncate` is for the fake ICD only.
 *   --save=FILE                    also write the binary to FILE
 *   --load=FILE                    skip the source build: load the binary from FILE
 *   --seed=N, --no-run */
#include "cltest.h"

int main(int argc, char **argv) {
    const char *seed = arg_value(argc, argv, "--seed");
    const char *corrupt = arg_value(argc, argv, "--corrupt");
    const char *save = arg_value(argc, argv, "--save");
    const char *load = arg_value(argc, argv, "--load");
    if (corrupt && strcmp(corrupt, "none") == 0) corrupt = NULL;
    char src[512];
    snprintf(src, sizeof src,
             "__kernel void cube(__global int *out) {\n"
             "    int i = get_global_id(0);\n"
             "    out[i] = i * i * i + %s;\n"
             "}\n",
             seed ? seed : "2");
    cl_platform_id plat;
    cl_device_id dev;
    pick_device(&plat, &dev);
    cl_context ctx = make_context(dev);
    cl_int err;
    size_t size = 0;
    unsigned char *bin = NULL;
    if (load) {
        bin = read_file(load, &size);
        if (!bin) {
            printf("FAILED cannot read %s\n", load);
            return 1;
        }
        printf("loaded binary: %s\n", size ? "nonzero" : "zero");
    } else {
        const char *srcs[] = {src};
        cl_program prog = clCreateProgramWithSource(ctx, 1, srcs, NULL, &err);
        CHECK(err);
        build_or_die(prog, dev, NULL);
        printf("built from source\n");
        if (!has_arg(argc, argv, "--no-run")) run_int_kernel(ctx, dev, prog, "cube", 6, "source");
        CHECK(clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL));
        printf("binary size: %s\n", size ? "nonzero" : "zero");
        bin = malloc(size ? size : 1);
        unsigned char *bins[] = {bin};
        CHECK(clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bins, bins, NULL));
        CHECK(clReleaseProgram(prog));
        if (save) {
            FILE *f = fopen(save, "wb");
            if (!f || fwrite(bin, 1, size, f) != size || fclose(f) != 0) {
                printf("FAILED cannot write %s\n", save);
                return 1;
            }
        }
    }
    if (corrupt && strcmp(corrupt, "flip") == 0) {
        for (size_t i = 0; i < size && i < 16; i++) bin[i] ^= 0xA5;
    } else if (corrupt && strcmp(corrupt, "truncate") == 0) {
        size /= 3;
    } else if (corrupt && strcmp(corrupt, "empty") == 0) {
        size = 0;
    }
    if (corrupt) printf("corrupted: %s\n", corrupt);
    cl_int status = 12345;
    const unsigned char *cbins[] = {bin};
    cl_program prog2 = clCreateProgramWithBinary(ctx, 1, &dev, &size, cbins, &status, &err);
    printf("clCreateProgramWithBinary: %s (%d)\n", cl_err_name(err), err);
    printf("binary_status: %s (%d)\n", status == 12345 ? "unset" : cl_err_name(status),
           status);
    int rc = 0;
    if (err == CL_SUCCESS) {
        cl_int berr = clBuildProgram(prog2, 1, &dev, NULL, NULL, NULL);
        printf("clBuildProgram from binary: %s (%d)\n", cl_err_name(berr), berr);
        if (berr == CL_SUCCESS && !has_arg(argc, argv, "--no-run"))
            run_int_kernel(ctx, dev, prog2, "cube", 6, "binary");
        if (berr != CL_SUCCESS && !corrupt) rc = 1;
        CHECK(clReleaseProgram(prog2));
    } else if (!corrupt) {
        rc = 1;
    }
    free(bin);
    CHECK(clReleaseContext(ctx));
    printf("%s\n", rc ? "FAILED" : "ok");
    return rc;
}
