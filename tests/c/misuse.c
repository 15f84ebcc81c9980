/* API misuse around the calls clshim intercepts, for tests/driver/misuse.rs: each case prints
 * one line with what the application received (return value, errcode, binary_status,
 * handles made), so a run with clshim can be compared line by line with a run without.
 * The first two devices of the first platform are used (POCL_DEVICES="pthread pthread"
 * gives pocl two); a clshim binary is made by hand from the format in cl-headers/clshim.h,
 * with the fingerprint of device 0, so clshim would accept it where the arguments allow.
 *
 *   misuse matrix             every argument-misuse case, one line each
 *   misuse callback MODE      a build whose callback MODE: release | rebuild | exit |
 *                             compile-release | link-release
 *   misuse release-loop N     N builds whose callback releases the program */
#define _GNU_SOURCE
#include "clshim_fingerprint.h"
#include <stdint.h>
#include <unistd.h>

static cl_platform_id plat;
static cl_device_id devs[2];
static cl_uint ndev;
static cl_context ctx;

static const char *SRC = "__kernel void k(__global int *a) { a[get_global_id(0)] = 7; }";

/* A clshim binary carrying `src` (length n) for device d, in a buffer of exactly its size. */
static unsigned char *clshim_binary(cl_device_id d, const char *src, size_t n, size_t *len) {
    return clshim_make_binary(d, src, n, 0, len);
}

#define SENTINEL 12345

static void show_load(const char *name, cl_program p, cl_int err, const cl_int *status, int n) {
    printf("load %s: err=%s program=%s status=[", name, cl_err_name(err), p ? "made" : "null");
    for (int i = 0; i < n; i++)
        printf("%s%s", i ? "," : "", status[i] == SENTINEL ? "untouched" : cl_err_name(status[i]));
    printf("]\n");
    fflush(stdout);
    if (p) clReleaseProgram(p);
}

/* One clCreateProgramWithBinary case: n devices, the given arrays, a 4-entry status array
 * filled with a sentinel. */
static void load(const char *name, cl_context c, cl_uint n, const cl_device_id *d,
                 const size_t *lens, const unsigned char **bins) {
    cl_int status[4] = {SENTINEL, SENTINEL, SENTINEL, SENTINEL};
    cl_int err = SENTINEL;
    cl_program p = clCreateProgramWithBinary(c, n, d, lens, bins, status, &err);
    show_load(name, p, err, status, n < 4 ? (int)n : 4);
}

static cl_program built(const char *src) {
    cl_int err;
    cl_program p = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    CHECK(err);
    CHECK(clBuildProgram(p, 0, NULL, NULL, NULL, NULL));
    return p;
}

static void matrix(void) {
    size_t blen, elen;
    unsigned char *bin = clshim_binary(devs[0], SRC, strlen(SRC), &blen);
    unsigned char *empty = clshim_binary(devs[0], "", 0, &elen);
    const unsigned char *b2[2] = {bin, bin}, *bnull[2] = {bin, NULL};
    size_t l2[2] = {blen, blen}, lzero[2] = {blen, 0}, lmax[2] = {SIZE_MAX, blen};
    cl_device_id dup[2] = {devs[0], devs[0]}, dnull[2] = {devs[0], NULL};
    cl_device_id three[3] = {devs[0], devs[1], devs[0]};
    const unsigned char *b3[3] = {bin, bin, bin};
    size_t l3[3] = {blen, blen, blen};
    cl_context one = make_context(devs[0]);

    load("null-entry", ctx, 2, devs, l2, bnull);
    load("duplicate-device", ctx, 2, dup, l2, b2);
    load("null-device", ctx, 2, dnull, l2, b2);
    load("more-devices-than-context", ctx, 3, three, l3, b3);
    load("zero-length", ctx, 2, devs, lzero, b2);
    load("null-lengths", ctx, 2, devs, NULL, b2);
    /* (binaries == NULL is left out: pocl 3.1 itself crashes on it.) */
    load("no-devices", ctx, 0, devs, l2, b2);
    load("null-device-list", ctx, 2, NULL, l2, b2);
    load("device-not-in-context", one, 1, &devs[1], l2, b2);
    load("length-size-max", ctx, 2, devs, lmax, b2);
    {
        const unsigned char *e2[2] = {empty, empty};
        size_t el[2] = {elen, elen};
        load("empty-source", ctx, 2, devs, el, e2);
        load("empty-source-one-device", one, 1, devs, el, e2);
    }
    {
        /* A truncated clshim binary (the length says less than the header declares). */
        size_t cut[2] = {blen - 1, blen - 1};
        load("truncated", ctx, 2, devs, cut, b2);
    }
    {
        /* A huge num_devices with short arrays: the driver decides before reading them. */
        cl_int status[4] = {SENTINEL, SENTINEL, SENTINEL, SENTINEL};
        cl_int err = SENTINEL;
        cl_program p = clCreateProgramWithBinary(ctx, 1u << 29, devs, l2, b2, NULL, &err);
        show_load("huge-num-devices", p, err, status, 0);
    }

    /* Builds, compiles and links with bad arguments. */
    cl_int err;
    cl_program p = clCreateProgramWithSource(ctx, 1, &SRC, NULL, &err);
    CHECK(err);
    int marker = 0;
    /* (A NULL device in the list is left out: pocl 3.1 itself crashes on it.) */
    printf("build device-list-without-count: %s\n",
           cl_err_name(clBuildProgram(p, 0, devs, NULL, NULL, NULL)));
    printf("build count-without-device-list: %s\n",
           cl_err_name(clBuildProgram(p, 1, NULL, NULL, NULL, NULL)));
    printf("build user-data-without-callback: %s\n",
           cl_err_name(clBuildProgram(p, 0, NULL, NULL, NULL, &marker)));
    {
        cl_program q = clCreateProgramWithSource(one, 1, &SRC, NULL, &err);
        CHECK(err);
        printf("build device-not-in-program: %s\n",
               cl_err_name(clBuildProgram(q, 1, &devs[1], NULL, NULL, NULL)));
        clReleaseProgram(q);
    }
    /* (A header count without headers is left out: pocl 3.1 itself crashes on it.) */
    cl_program obj = clCreateProgramWithSource(ctx, 1, &SRC, NULL, &err);
    CHECK(err);
    CHECK(clCompileProgram(obj, 0, NULL, NULL, 0, NULL, NULL, NULL, NULL));
    cl_program ins[1] = {obj};
    cl_program l;
    err = SENTINEL;
    l = clLinkProgram(ctx, 0, NULL, NULL, 1u << 29, ins, NULL, NULL, &err);
    printf("link huge-input-count: err=%s program=%s\n", cl_err_name(err), l ? "made" : "null");
    /* (A NULL input program is left out: pocl 3.1 itself crashes on it.) */
    err = SENTINEL;
    l = clLinkProgram(ctx, 0, NULL, NULL, 0, ins, NULL, NULL, &err);
    printf("link no-inputs: err=%s program=%s\n", cl_err_name(err), l ? "made" : "null");
    /* (A device count beyond the list is left out: pocl 3.1 itself reads the whole list.) */

    /* Binary queries with a buffer too small, on a built program. */
    cl_program b = built(SRC);
    size_t sizes[2] = {0, 0};
    printf("query sizes-too-small: %s\n",
           cl_err_name(clGetProgramInfo(b, CL_PROGRAM_BINARY_SIZES, sizeof(size_t), sizes, NULL)));
    unsigned char *out[2] = {NULL, NULL};
    printf("query binaries-too-small: %s\n",
           cl_err_name(clGetProgramInfo(b, CL_PROGRAM_BINARIES, sizeof(void *), out, NULL)));
    printf("matrix done\n");
    fflush(stdout);
}

/* ---- callbacks ----------------------------------------------------------------------- */

static const char *cb_mode;
static volatile int cb_calls;

static void CL_CALLBACK on_done(cl_program p, void *ud) {
    (void)ud;
    cb_calls++;
    if (strcmp(cb_mode, "exit") == 0) {
        printf("callback exits\n");
        fflush(stdout);
        exit(0);
    }
    if (strcmp(cb_mode, "rebuild") == 0) {
        cl_int r = clBuildProgram(p, 0, NULL, NULL, NULL, NULL);
        printf("rebuild in callback: %s\n", cl_err_name(r));
        return;
    }
    /* release, compile-release, link-release: the program's last reference goes here. */
    CHECK(clReleaseProgram(p));
}

static void callback(const char *mode) {
    cb_mode = mode;
    cl_int err;
    cl_program p = clCreateProgramWithSource(ctx, 1, &SRC, NULL, &err);
    CHECK(err);
    cl_int r;
    if (strcmp(mode, "compile-release") == 0) {
        r = clCompileProgram(p, 0, NULL, NULL, 0, NULL, NULL, on_done, NULL);
    } else if (strcmp(mode, "link-release") == 0) {
        CHECK(clCompileProgram(p, 0, NULL, NULL, 0, NULL, NULL, NULL, NULL));
        cl_program l = clLinkProgram(ctx, 0, NULL, NULL, 1, &p, on_done, NULL, &r);
        (void)l; /* released by the callback */
        CHECK(clReleaseProgram(p));
    } else {
        r = clBuildProgram(p, 0, NULL, NULL, on_done, NULL);
    }
    printf("%s: returned %s\n", mode, cl_err_name(r));
    /* An asynchronous driver may still be building: wait for the callback. */
    for (int i = 0; i < 3000 && !cb_calls; i++) usleep(1000);
    if (strcmp(mode, "rebuild") == 0) CHECK(clReleaseProgram(p));
    printf("%s: callback ran %d time(s)\n", mode, cb_calls);
    fflush(stdout);
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    setvbuf(stdout, NULL, _IOLBF, 0);
    cl_platform_id plats[4];
    cl_uint np = 0;
    CHECK(clGetPlatformIDs(4, plats, &np));
    plat = plats[0];
    CHECK(clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 2, devs, &ndev));
    if (ndev < 2) {
        fprintf(stderr, "misuse needs two devices (POCL_DEVICES=\"pthread pthread\")\n");
        printf("FAILED one device\n");
        return 1;
    }
    cl_int err;
    ctx = clCreateContext(NULL, 2, devs, NULL, NULL, &err);
    CHECK(err);
    if (strcmp(argv[1], "matrix") == 0) {
        matrix();
    } else if (strcmp(argv[1], "callback") == 0 && argc > 2) {
        callback(argv[2]);
    } else if (strcmp(argv[1], "release-loop") == 0 && argc > 2) {
        int n = atoi(argv[2]);
        for (int i = 0; i < n; i++) {
            cb_calls = 0;
            callback("release");
        }
    } else {
        return 2;
    }
    return 0;
}
