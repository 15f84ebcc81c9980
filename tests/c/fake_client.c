/* A client for fault-injection runs: performs the steps named on the command line, in
 * order, on one program over every device of the first platform (or the first whose name
 * contains $CLTEST_PLATFORM), and prints each step's OpenCL result code by name. Failing
 * steps are reported, not fatal: the output is what a test compares with and without the
 * shim. Runs no kernels, so it works against the fake ICD as well as against pocl.
 *
 * Steps: build, build-async (with a callback; reports how the callback ran), compile,
 * link (the linked program replaces the current one), sizes-only, sizes, binaries,
 * load (a new program from the last binaries), il (a new program from IL bytes),
 * kernels, log, status. Option: --seed=N changes the source.
 * Steps for the binary-policy tests:
 *   sizes-small, binaries-small  the value query with a buffer one byte too small
 *   binaries-null0               like binaries, with a NULL entry for device 0
 *   save:PATH                    write each device's last binary to PATH.<device index>
 *   read:PATH                    take PATH.<device index> as the last binaries (for load)
 *   load-swap                    like load, with the binaries in reverse device order
 *   load-last                    a new program for the last device only, from its binary
 *   num-devices                  the program's CL_PROGRAM_NUM_DEVICES */
#define _GNU_SOURCE
#include "cltest.h"
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#define MAXD 4
static cl_uint ndev;
static cl_device_id devs[MAXD];
static atomic_int cb_calls, cb_bad_user_data, cb_other_thread, cb_during_call;
static atomic_int in_call;
static pthread_t main_thread;
static int marker;

static void CL_CALLBACK notify(cl_program p, void *ud) {
    (void)p;
    if (ud != &marker) atomic_fetch_add(&cb_bad_user_data, 1);
    if (!pthread_equal(pthread_self(), main_thread)) atomic_store(&cb_other_thread, 1);
    if (atomic_load(&in_call)) atomic_store(&cb_during_call, 1);
    atomic_fetch_add(&cb_calls, 1);
}

static void print_code(const char *step, cl_int e) { printf("%s: %s\n", step, cl_err_name(e)); }

int main(int argc, char **argv) {
    main_thread = pthread_self();
    const char *seed = arg_value(argc, argv, "--seed");
    char src[512];
    snprintf(src, sizeof src,
             "__kernel void fake_a(__global int *o) { o[0] = %s; }\n"
             "__kernel void fake_b(__global int *o) { o[1] = 2; }\n",
             seed ? seed : "1");
    cl_platform_id plats[8];
    cl_uint np = 0;
    CHECK(clGetPlatformIDs(8, plats, &np));
    const char *want = getenv("CLTEST_PLATFORM");
    cl_platform_id plat = NULL;
    for (cl_uint i = 0; i < np && i < 8 && !plat; i++) {
        char name[256] = "";
        CHECK(clGetPlatformInfo(plats[i], CL_PLATFORM_NAME, sizeof name, name, NULL));
        if (!want || strstr(name, want)) plat = plats[i];
    }
    if (!plat) {
        printf("FAILED no platform\n");
        return 1;
    }
    CHECK(clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, MAXD, devs, &ndev));
    if (ndev > MAXD) ndev = MAXD;
    printf("devices: %u\n", ndev);
    cl_int err;
    cl_context ctx = clCreateContext(NULL, ndev, devs, NULL, NULL, &err);
    CHECK(err);
    const char *srcs[] = {src};
    cl_program prog = clCreateProgramWithSource(ctx, 1, srcs, NULL, &err);
    CHECK(err);

    size_t sizes[MAXD] = {0};
    unsigned char *bins[MAXD] = {0};
    int have_bins = 0;
    for (int a = 1; a < argc; a++) {
        const char *s = argv[a];
        if (strncmp(s, "--", 2) == 0) continue;
        if (strcmp(s, "build") == 0) {
            print_code(s, clBuildProgram(prog, 0, NULL, NULL, NULL, NULL));
        } else if (strcmp(s, "build-async") == 0) {
            atomic_store(&cb_calls, 0);
            atomic_store(&in_call, 1);
            cl_int e = clBuildProgram(prog, 0, NULL, "-DASYNC", notify, &marker);
            atomic_store(&in_call, 0);
            print_code(s, e);
            for (int i = 0; i < 1000 && atomic_load(&cb_calls) == 0; i++) usleep(5000);
            usleep(200000);
            printf("callback: calls=%d user_data=%s thread=%s when=%s\n", atomic_load(&cb_calls),
                   atomic_load(&cb_bad_user_data) ? "wrong" : "ok",
                   atomic_load(&cb_other_thread) ? "other" : "same",
                   atomic_load(&cb_during_call) ? "during-call" : "after-return");
        } else if (strcmp(s, "compile") == 0) {
            print_code(s, clCompileProgram(prog, 0, NULL, NULL, 0, NULL, NULL, NULL, NULL));
        } else if (strcmp(s, "link") == 0) {
            cl_program linked = clLinkProgram(ctx, 0, NULL, NULL, 1, &prog, NULL, NULL, &err);
            print_code(s, err);
            printf("link: program %s\n", linked ? "made" : "none");
            if (linked) {
                CHECK(clReleaseProgram(prog));
                prog = linked;
            }
        } else if (strcmp(s, "sizes-only") == 0) {
            size_t ret = 0;
            cl_int e = clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, 0, NULL, &ret);
            printf("%s: %s ret=%zu\n", s, cl_err_name(e), ret);
        } else if (strcmp(s, "sizes") == 0) {
            for (cl_uint i = 0; i < ndev; i++) sizes[i] = 77777;
            cl_int e = clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof(size_t) * ndev,
                                        sizes, NULL);
            printf("%s: %s [", s, cl_err_name(e));
            for (cl_uint i = 0; i < ndev; i++) printf("%s%zu", i ? ", " : "", sizes[i]);
            printf("]\n");
        } else if (strcmp(s, "sizes-small") == 0 || strcmp(s, "binaries-small") == 0) {
            /* Room for every device but one byte short: must be CL_INVALID_VALUE. */
            union {
                size_t sizes[MAXD];
                unsigned char *bins[MAXD];
            } small;
            memset(&small, 0, sizeof small);
            size_t ret = 4242;
            cl_program_info param =
                s[0] == 's' ? CL_PROGRAM_BINARY_SIZES : CL_PROGRAM_BINARIES;
            cl_int e = clGetProgramInfo(prog, param, sizeof(size_t) * ndev - 1, &small, &ret);
            printf("%s: %s\n", s, cl_err_name(e));
        } else if (strcmp(s, "binaries") == 0 || strcmp(s, "binaries-null0") == 0) {
            int null0 = strcmp(s, "binaries-null0") == 0;
            for (cl_uint i = 0; i < ndev; i++) {
                free(bins[i]);
                bins[i] = sizes[i] && sizes[i] != 77777 && !(null0 && i == 0)
                              ? calloc(sizes[i], 1)
                              : NULL;
            }
            cl_int e = clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof(bins[0]) * ndev, bins,
                                        NULL);
            printf("%s: %s [", s, cl_err_name(e));
            for (cl_uint i = 0; i < ndev; i++)
                printf("%s%016llx", i ? ", " : "",
                       bins[i] ? (unsigned long long)fnv1a64(bins[i], sizes[i]) : 0ULL);
            printf("]\n");
            have_bins = e == CL_SUCCESS;
        } else if (strncmp(s, "save:", 5) == 0 || strncmp(s, "read:", 5) == 0) {
            int save = s[0] == 's';
            for (cl_uint i = 0; i < ndev; i++) {
                char path[4096];
                snprintf(path, sizeof path, "%s.%u", s + 5, i);
                FILE *f = fopen(path, save ? "wb" : "rb");
                if (!f) {
                    printf("FAILED cannot open %s\n", path);
                    return 1;
                }
                if (save) {
                    if (bins[i] && fwrite(bins[i], 1, sizes[i], f) != sizes[i]) return 1;
                } else {
                    fseek(f, 0, SEEK_END);
                    long n = ftell(f);
                    fseek(f, 0, SEEK_SET);
                    free(bins[i]);
                    bins[i] = malloc(n > 0 ? (size_t)n : 1);
                    sizes[i] = fread(bins[i], 1, (size_t)n, f);
                }
                fclose(f);
            }
            if (!save) have_bins = 1;
            printf("%s: ok\n", save ? "save" : "read");
        } else if (strcmp(s, "load-last") == 0) {
            if (!have_bins) {
                printf("%s: no binaries\n", s);
                continue;
            }
            cl_int st = 12345;
            const unsigned char *b = bins[ndev - 1];
            cl_program p2 =
                clCreateProgramWithBinary(ctx, 1, &devs[ndev - 1], &sizes[ndev - 1], &b, &st, &err);
            printf("%s: %s status=[%s]\n", s, cl_err_name(err),
                   st == 12345 ? "unset" : cl_err_name(st));
            if (p2) {
                CHECK(clReleaseProgram(prog));
                prog = p2;
            }
        } else if (strcmp(s, "num-devices") == 0) {
            cl_uint n = 0;
            cl_int e = clGetProgramInfo(prog, CL_PROGRAM_NUM_DEVICES, sizeof n, &n, NULL);
            printf("%s: %s %u\n", s, cl_err_name(e), n);
        } else if (strcmp(s, "load") == 0 || strcmp(s, "load-swap") == 0) {
            if (!have_bins) {
                printf("%s: no binaries\n", s);
                continue;
            }
            cl_int st[MAXD];
            size_t lens[MAXD];
            const unsigned char *order[MAXD];
            int swap = strcmp(s, "load-swap") == 0;
            for (cl_uint i = 0; i < ndev; i++) {
                st[i] = 12345;
                lens[i] = sizes[swap ? ndev - 1 - i : i];
                order[i] = bins[swap ? ndev - 1 - i : i];
            }
            cl_program p2 = clCreateProgramWithBinary(ctx, ndev, devs, lens, order, st, &err);
            printf("%s: %s status=[", s, cl_err_name(err));
            for (cl_uint i = 0; i < ndev; i++)
                printf("%s%s", i ? ", " : "", st[i] == 12345 ? "unset" : cl_err_name(st[i]));
            printf("]\n");
            if (p2) {
                CHECK(clReleaseProgram(prog));
                prog = p2;
            }
        } else if (strcmp(s, "il") == 0) {
            static const char il[] = "FAKE-IL-BYTES";
            cl_program p2 = clCreateProgramWithIL(ctx, il, sizeof il, &err);
            print_code(s, err);
            if (p2) {
                CHECK(clReleaseProgram(prog));
                prog = p2;
            }
        } else if (strcmp(s, "kernels") == 0) {
            char names[256] = "";
            cl_int e = clGetProgramInfo(prog, CL_PROGRAM_KERNEL_NAMES, sizeof names, names, NULL);
            printf("%s: %s %s\n", s, cl_err_name(e), names);
        } else if (strcmp(s, "log") == 0) {
            char log[1024] = "";
            cl_int e = clGetProgramBuildInfo(prog, devs[0], CL_PROGRAM_BUILD_LOG, sizeof log - 1,
                                             log, NULL);
            printf("%s: %s\n%s\n", s, cl_err_name(e), log);
        } else if (strcmp(s, "status") == 0) {
            cl_build_status st = 99;
            cl_int e = clGetProgramBuildInfo(prog, devs[0], CL_PROGRAM_BUILD_STATUS, sizeof st,
                                             &st, NULL);
            printf("%s: %s %d\n", s, cl_err_name(e), (int)st);
        } else {
            printf("FAILED unknown step %s\n", s);
            return 2;
        }
        fflush(stdout);
    }
    for (cl_uint i = 0; i < ndev; i++) free(bins[i]);
    CHECK(clReleaseProgram(prog));
    CHECK(clReleaseContext(ctx));
    printf("done\n");
    return 0;
}
