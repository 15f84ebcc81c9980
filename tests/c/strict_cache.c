/* An application with a binary cache and no fallback: it keeps two programs' binaries in
 * files under --cache=DIR (one raw, `raw.bin`; one wrapped in its own format,
 * `wrapped.cache`: "STRICT01", a little-endian u64 length, the binary) and, when a cache
 * file is there, loads it with clCreateProgramWithBinary and exits 1 if that or the build
 * fails, as applications that trust their cache do. On a miss it builds from source and
 * writes the file. Prints, per program, where it came from and its kernel's results. */
#include "cltest.h"

static const char *SOURCES[2] = {
    "__kernel void fill(__global int *out) { size_t i = get_global_id(0); out[i] = (int)(i * 3 + 1); }\n",
    "__kernel void fill(__global int *out) { size_t i = get_global_id(0); out[i] = (int)(i * i + 2); }\n",
};
static const char *NAMES[2] = {"raw.bin", "wrapped.cache"};
static const char WRAP_MAGIC[8] = "STRICT01";

static unsigned char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    unsigned char *buf = malloc(cap);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    *len = n;
    return buf;
}

static void write_all(const char *path, const void *a, size_t na, const void *b, size_t nb) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(a, 1, na, f) != na || (nb && fwrite(b, 1, nb, f) != nb) || fclose(f)) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(2);
    }
}

int main(int argc, char **argv) {
    const char *dir = arg_value(argc, argv, "--cache");
    if (!dir) {
        fprintf(stderr, "usage: strict_cache --cache=DIR\n");
        return 2;
    }
    cl_platform_id plat;
    cl_device_id dev;
    pick_device(&plat, &dev);
    cl_context ctx = make_context(dev);
    for (int p = 0; p < 2; p++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, NAMES[p]);
        size_t len = 0;
        unsigned char *file = read_all(path, &len);
        cl_int err;
        cl_program prog;
        if (file) {
            const unsigned char *bin = file;
            size_t n = len;
            if (p == 1) { /* unwrap: magic, length, binary */
                uint64_t declared = 0;
                if (len < 16 || memcmp(file, WRAP_MAGIC, 8) != 0) {
                    fprintf(stderr, "%s: not a cache file\n", path);
                    return 1;
                }
                memcpy(&declared, file + 8, 8);
                if (declared != len - 16) {
                    fprintf(stderr, "%s: damaged cache file\n", path);
                    return 1;
                }
                bin = file + 16;
                n = len - 16;
            }
            cl_int status = CL_SUCCESS;
            prog = clCreateProgramWithBinary(ctx, 1, &dev, &n, &bin, &status, &err);
            CHECK(err); /* no fallback: a refused binary ends the run */
            CHECK(status);
            build_or_die(prog, dev, NULL);
            printf("%s: loaded from the cache\n", NAMES[p]);
        } else {
            prog = clCreateProgramWithSource(ctx, 1, &SOURCES[p], NULL, &err);
            CHECK(err);
            build_or_die(prog, dev, NULL);
            size_t n = 0;
            CHECK(clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof n, &n, NULL));
            unsigned char *bin = malloc(n ? n : 1);
            CHECK(clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL));
            if (p == 0) {
                write_all(path, bin, n, NULL, 0);
            } else {
                unsigned char head[16];
                uint64_t len64 = n;
                memcpy(head, WRAP_MAGIC, 8);
                memcpy(head + 8, &len64, 8);
                write_all(path, head, 16, bin, n);
            }
            free(bin);
            printf("%s: built from source\n", NAMES[p]);
        }
        free(file);
        run_int_kernel(ctx, dev, prog, "fill", 8, NAMES[p]);
        CHECK(clReleaseProgram(prog));
    }
    CHECK(clReleaseContext(ctx));
    return 0;
}
