/* A fake OpenCL implementation for fault-injection tests of clshim.
 *
 * It is an ICD (cl_khr_icd): register it with OCL_ICD_VENDORS=<dir holding fake.icd> and
 * the ocl-icd loader finds it through clIcdGetPlatformIDsKHR; every object starts with a
 * pointer to its dispatch table. It also exports the core entry points the test clients
 * use, so a client can be linked straight to it, without a loader (needed for the
 * cl_khr_icd 2.0 mode, which ocl-icd 2.3.1 does not understand).
 *
 * It compiles nothing. A "build" parses the kernel names out of the source; a "binary"
 * is "FAKEBIN1 <device> <length>\n" followed by the source. Behaviour is chosen with
 * environment variables, read at every call:
 *
 *   FAKE_ICD_DEVICES=N          devices on the platform, 1 (default) to 4
 *   FAKE_ICD_BUILD_FAIL=1       clBuildProgram/clCompileProgram fail with
 *                               CL_BUILD_PROGRAM_FAILURE / CL_COMPILE_PROGRAM_FAILURE
 *                               and a build log; clLinkProgram with CL_LINK_PROGRAM_FAILURE
 *   FAKE_ICD_LINK_FAIL=1        only clLinkProgram fails (CL_LINK_PROGRAM_FAILURE, no program)
 *   FAKE_ICD_BUILD_MS=N         every build/compile/link takes N ms more
 *   FAKE_ICD_FAIL_SIZES=CODE    CL_PROGRAM_BINARY_SIZES value queries return CODE (e.g. -5)
 *   FAKE_ICD_FAIL_BINARIES=CODE CL_PROGRAM_BINARIES value queries return CODE
 *   FAKE_ICD_ZERO_SIZE_DEVICE=I device I has no binary: size 0, nothing written
 *   FAKE_ICD_QUERY_MS=N         binary value queries (sizes and binaries) sleep N ms
 *   FAKE_ICD_ASYNC=MODE         how a build/compile/link callback runs:
 *                               inline (default): on the calling thread, before return;
 *                               thread: on another thread, after the call has returned
 *                               (the build stays CL_BUILD_IN_PROGRESS until then);
 *                               thread-before: on another thread, and the call waits
 *                               for it before returning
 *   FAKE_ICD_ASYNC_MS=N         delay before a "thread" callback runs (default 100)
 *   FAKE_ICD_ICD2=1             cl_khr_icd 2.0 objects: slot 0 of the table an object
 *                               points to holds CL_ICD2_TAG_KHR, the real table is behind
 *                               the object's second pointer
 *   FAKE_ICD_PLATFORM_NAME=S    the platform's name (default "Fake ICD"), e.g. pocl's, so
 *                               that clshim's pocl device filters select its devices
 *   FAKE_ICD_GPU_DEVICE=I       device I reports CL_DEVICE_TYPE_GPU (the others are CPUs)
 *   FAKE_ICD_NULL_BINARY_FAILS=1  a NULL entry in a CL_PROGRAM_BINARIES value query fails
 *                               it with CL_INVALID_VALUE instead of being skipped, as a
 *                               driver that reads every entry would (pocl 3.1 crashes)
 *   FAKE_ICD_LOG=FILE           append one line per program call received (entry point
 *                               and result), so a test can see what reached the driver
 *
 * Only the system <CL/cl.h>/<CL/cl_icd.h> headers are used, for the types and the layout
 * of the dispatch table. Entry points the fake does not implement abort with a message
 * naming the dispatch slot. */
#define _GNU_SOURCE
#define CL_TARGET_OPENCL_VERSION 300
#define CL_USE_DEPRECATED_OPENCL_1_0_APIS
#define CL_USE_DEPRECATED_OPENCL_1_1_APIS
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#define CL_USE_DEPRECATED_OPENCL_2_0_APIS
#include <CL/cl.h>
#include <CL/cl_ext.h>
#include <CL/cl_icd.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define FAKE_ICD2_TAG ((void *)(intptr_t)0x4F50454E434C3331LL)
#define MAX_DEV 4

/* ---- configuration ---------------------------------------------------------------- */

static long env_long(const char *name, long dflt) {
    const char *v = getenv(name);
    return v && *v ? strtol(v, NULL, 0) : dflt;
}

static int num_devices(void) {
    long n = env_long("FAKE_ICD_DEVICES", 1);
    return n < 1 ? 1 : n > MAX_DEV ? MAX_DEV : (int)n;
}

static void sleep_ms(long ms) {
    if (ms > 0) usleep((useconds_t)ms * 1000);
}

static void flog(const char *fmt, ...) {
    const char *path = getenv("FAKE_ICD_LOG");
    if (!path || !*path) return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (n > (int)sizeof line - 2) n = sizeof line - 2;
    line[n++] = '\n';
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0) return;
    ssize_t w = write(fd, line, (size_t)n); /* one write: lines from threads never mix */
    (void)w;
    close(fd);
}

/* ---- objects ------------------------------------------------------------------------ */

/* Every object starts with the two ICD pointers: the dispatch table, and (ICD 2.0) the
 * loader's dispatch data, which here is the real table. */
#define ICD_HEADER \
    void *disp;    \
    void *disp_data

struct _cl_platform_id {
    ICD_HEADER;
};
struct _cl_device_id {
    ICD_HEADER;
    int index;
};
struct _cl_context {
    ICD_HEADER;
    atomic_int refs;
    int ndev;
    cl_device_id devs[MAX_DEV];
};
struct _cl_program {
    ICD_HEADER;
    atomic_int refs;
    cl_context ctx;
    int ndev;
    cl_device_id devs[MAX_DEV];
    char *source; /* NUL-terminated; for IL programs, the IL bytes */
    size_t srclen;
    int is_il;
    atomic_int status; /* cl_build_status */
    cl_program_binary_type btype;
    char options[256];
    char log[256];
    char kernels[256]; /* ';'-separated, set by a successful build */
    int nkernels;
};

/* The tables have room for 200 slots, more than any header version defines: a client
 * that knows newer entry points finds a stub that names the slot, not a stray pointer. */
union dispatch {
    struct _cl_icd_dispatch d;
    void *slots[200];
};
static union dispatch table_u; /* the real entry points */
static union dispatch tag_u;   /* ICD 2.0: slot 0 = tag, the rest abort */
#define table (table_u.d)
#define tag_table (tag_u.d)
static struct _cl_platform_id platform;
static struct _cl_device_id devices[MAX_DEV];
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void set_header(void *obj) {
    void **o = obj;
    if (env_long("FAKE_ICD_ICD2", 0)) {
        o[0] = &tag_table;
        o[1] = &table;
    } else {
        o[0] = &table;
        o[1] = NULL;
    }
}

static int valid_device(cl_device_id d) {
    for (int i = 0; i < num_devices(); i++)
        if (d == &devices[i]) return 1;
    return 0;
}

/* ---- info helper ---------------------------------------------------------------------- */

static cl_int put(size_t size, void *value, size_t *size_ret, const void *src, size_t len) {
    if (value) {
        if (size < len) return CL_INVALID_VALUE;
        memcpy(value, src, len);
    }
    if (size_ret) *size_ret = len;
    return CL_SUCCESS;
}
#define PUT_VAL(v) put(param_value_size, param_value, param_value_size_ret, &(v), sizeof(v))
#define PUT_STR(s) put(param_value_size, param_value, param_value_size_ret, (s), strlen(s) + 1)

/* ---- platform and devices ----------------------------------------------------------- */

static cl_int f_GetPlatformIDs(cl_uint n, cl_platform_id *p, cl_uint *np) {
    if ((n == 0 && p) || (!p && !np)) return CL_INVALID_VALUE;
    if (p) p[0] = &platform;
    if (np) *np = 1;
    return CL_SUCCESS;
}

static cl_int f_GetPlatformInfo(cl_platform_id p, cl_platform_info param, size_t param_value_size,
                                void *param_value, size_t *param_value_size_ret) {
    if (p && p != &platform) return CL_INVALID_PLATFORM;
    switch (param) {
    case CL_PLATFORM_PROFILE: return PUT_STR("FULL_PROFILE");
    case CL_PLATFORM_VERSION: return PUT_STR("OpenCL 3.0 fake");
    case CL_PLATFORM_NAME: {
        const char *name = getenv("FAKE_ICD_PLATFORM_NAME");
        return PUT_STR(name && *name ? name : "Fake ICD");
    }
    case CL_PLATFORM_VENDOR: return PUT_STR("clshim tests");
    case CL_PLATFORM_EXTENSIONS: return PUT_STR("cl_khr_icd");
    case CL_PLATFORM_ICD_SUFFIX_KHR: return PUT_STR("FAKE");
    case CL_PLATFORM_NUMERIC_VERSION: {
        cl_version v = CL_MAKE_VERSION(3, 0, 0);
        return PUT_VAL(v);
    }
    default: return CL_INVALID_VALUE;
    }
}

static cl_int f_GetDeviceIDs(cl_platform_id p, cl_device_type type, cl_uint n, cl_device_id *d,
                             cl_uint *nd) {
    if (p && p != &platform) return CL_INVALID_PLATFORM;
    if ((n == 0 && d) || (!d && !nd)) return CL_INVALID_VALUE;
    if (!(type & (CL_DEVICE_TYPE_CPU | CL_DEVICE_TYPE_DEFAULT)) && type != CL_DEVICE_TYPE_ALL)
        return CL_DEVICE_NOT_FOUND;
    cl_uint count = (cl_uint)num_devices();
    if (type == CL_DEVICE_TYPE_DEFAULT) count = 1;
    for (cl_uint i = 0; d && i < n && i < count; i++) d[i] = &devices[i];
    if (nd) *nd = count;
    return CL_SUCCESS;
}

static cl_int f_GetDeviceInfo(cl_device_id d, cl_device_info param, size_t param_value_size,
                              void *param_value, size_t *param_value_size_ret) {
    if (!valid_device(d)) return CL_INVALID_DEVICE;
    char name[32];
    snprintf(name, sizeof name, "fake-device-%d", d->index);
    cl_bool yes = CL_TRUE;
    switch (param) {
    case CL_DEVICE_TYPE: {
        cl_device_type t = env_long("FAKE_ICD_GPU_DEVICE", -1) == d->index ? CL_DEVICE_TYPE_GPU
                                                                            : CL_DEVICE_TYPE_CPU;
        return PUT_VAL(t);
    }
    case CL_DEVICE_NAME: return PUT_STR(name);
    case CL_DEVICE_VENDOR: return PUT_STR("FakeVendor");
    case CL_DEVICE_VERSION: return PUT_STR("OpenCL 3.0 fake");
    case CL_DRIVER_VERSION: return PUT_STR("0.1-fake");
    case CL_DEVICE_OPENCL_C_VERSION: return PUT_STR("OpenCL C 1.2 fake");
    case CL_DEVICE_PROFILE: return PUT_STR("FULL_PROFILE");
    case CL_DEVICE_EXTENSIONS: return PUT_STR("");
    case CL_DEVICE_PLATFORM: {
        cl_platform_id p = &platform;
        return PUT_VAL(p);
    }
    case CL_DEVICE_VENDOR_ID: {
        cl_uint id = 0xfa6e;
        return PUT_VAL(id);
    }
    case CL_DEVICE_AVAILABLE:
    case CL_DEVICE_COMPILER_AVAILABLE:
    case CL_DEVICE_LINKER_AVAILABLE: return PUT_VAL(yes);
    case CL_DEVICE_MAX_COMPUTE_UNITS: {
        cl_uint cu = 1;
        return PUT_VAL(cu);
    }
    default: return CL_INVALID_VALUE;
    }
}

static cl_int f_RetainDevice(cl_device_id d) { return valid_device(d) ? CL_SUCCESS : CL_INVALID_DEVICE; }
static cl_int f_ReleaseDevice(cl_device_id d) { return valid_device(d) ? CL_SUCCESS : CL_INVALID_DEVICE; }

/* ---- contexts ------------------------------------------------------------------------- */

static cl_context new_context(cl_uint n, const cl_device_id *d, cl_int *err) {
    cl_context c = calloc(1, sizeof *c);
    set_header(c);
    atomic_init(&c->refs, 1);
    c->ndev = (int)n;
    for (cl_uint i = 0; i < n; i++) c->devs[i] = d[i];
    if (err) *err = CL_SUCCESS;
    return c;
}

static cl_context f_CreateContext(const cl_context_properties *props, cl_uint n,
                                  const cl_device_id *d,
                                  void(CL_CALLBACK *notify)(const char *, const void *, size_t,
                                                            void *),
                                  void *ud, cl_int *err) {
    (void)props, (void)notify, (void)ud;
    if (n == 0 || !d || n > MAX_DEV) {
        if (err) *err = CL_INVALID_VALUE;
        return NULL;
    }
    for (cl_uint i = 0; i < n; i++)
        if (!valid_device(d[i])) {
            if (err) *err = CL_INVALID_DEVICE;
            return NULL;
        }
    return new_context(n, d, err);
}

static cl_context f_CreateContextFromType(const cl_context_properties *props, cl_device_type t,
                                          void(CL_CALLBACK *notify)(const char *, const void *,
                                                                    size_t, void *),
                                          void *ud, cl_int *err) {
    (void)props, (void)t, (void)notify, (void)ud;
    cl_device_id d[MAX_DEV];
    int n = num_devices();
    for (int i = 0; i < n; i++) d[i] = &devices[i];
    return new_context((cl_uint)n, d, err);
}

static cl_int f_RetainContext(cl_context c) {
    if (!c) return CL_INVALID_CONTEXT;
    atomic_fetch_add(&c->refs, 1);
    return CL_SUCCESS;
}

static cl_int f_ReleaseContext(cl_context c) {
    if (!c) return CL_INVALID_CONTEXT;
    if (atomic_fetch_sub(&c->refs, 1) == 1) free(c);
    return CL_SUCCESS;
}

static cl_int f_GetContextInfo(cl_context c, cl_context_info param, size_t param_value_size,
                               void *param_value, size_t *param_value_size_ret) {
    if (!c) return CL_INVALID_CONTEXT;
    switch (param) {
    case CL_CONTEXT_REFERENCE_COUNT: {
        cl_uint r = (cl_uint)atomic_load(&c->refs);
        return PUT_VAL(r);
    }
    case CL_CONTEXT_NUM_DEVICES: {
        cl_uint n = (cl_uint)c->ndev;
        return PUT_VAL(n);
    }
    case CL_CONTEXT_DEVICES:
        return put(param_value_size, param_value, param_value_size_ret, c->devs,
                   sizeof(cl_device_id) * (size_t)c->ndev);
    case CL_CONTEXT_PROPERTIES:
        return put(param_value_size, param_value, param_value_size_ret, NULL, 0);
    default: return CL_INVALID_VALUE;
    }
}

/* ---- programs ------------------------------------------------------------------------- */

static cl_program new_program(cl_context c, const char *src, size_t len) {
    cl_program p = calloc(1, sizeof *p);
    set_header(p);
    atomic_init(&p->refs, 1);
    f_RetainContext(c);
    p->ctx = c;
    p->ndev = c->ndev;
    memcpy(p->devs, c->devs, sizeof p->devs);
    p->source = malloc(len + 1);
    memcpy(p->source, src, len);
    p->source[len] = 0;
    p->srclen = len;
    atomic_init(&p->status, CL_BUILD_NONE);
    p->btype = CL_PROGRAM_BINARY_TYPE_NONE;
    return p;
}

static cl_program f_CreateProgramWithSource(cl_context c, cl_uint count, const char **strings,
                                            const size_t *lengths, cl_int *err) {
    if (!c) {
        if (err) *err = CL_INVALID_CONTEXT;
        return NULL;
    }
    if (count == 0 || !strings) {
        if (err) *err = CL_INVALID_VALUE;
        return NULL;
    }
    size_t total = 0;
    for (cl_uint i = 0; i < count; i++)
        total += lengths && lengths[i] ? lengths[i] : strlen(strings[i]);
    char *all = malloc(total + 1), *w = all;
    for (cl_uint i = 0; i < count; i++) {
        size_t n = lengths && lengths[i] ? lengths[i] : strlen(strings[i]);
        memcpy(w, strings[i], n);
        w += n;
    }
    cl_program p = new_program(c, all, total);
    free(all);
    flog("clCreateProgramWithSource 0");
    if (err) *err = CL_SUCCESS;
    return p;
}

static cl_program f_CreateProgramWithIL(cl_context c, const void *il, size_t len, cl_int *err) {
    if (!c) {
        if (err) *err = CL_INVALID_CONTEXT;
        return NULL;
    }
    if (!il || len == 0) {
        if (err) *err = CL_INVALID_VALUE;
        return NULL;
    }
    cl_program p = new_program(c, il, len);
    p->is_il = 1;
    flog("clCreateProgramWithIL 0");
    if (err) *err = CL_SUCCESS;
    return p;
}

#define BIN_MAGIC "FAKEBIN1 "

/* A fake binary: "FAKEBIN1 <device index> <source length>\n<source>". */
static size_t binary_size(cl_program p, int i) {
    if (p->btype == CL_PROGRAM_BINARY_TYPE_NONE) return 0;
    if (env_long("FAKE_ICD_ZERO_SIZE_DEVICE", -1) == i) return 0;
    char head[64];
    return (size_t)snprintf(head, sizeof head, BIN_MAGIC "%d %zu\n", i, p->srclen) + p->srclen;
}

static void write_binary(cl_program p, int i, unsigned char *out) {
    int n = sprintf((char *)out, BIN_MAGIC "%d %zu\n", i, p->srclen);
    memcpy(out + n, p->source, p->srclen);
}

/* Parses a fake binary; returns the source length and sets *src, or -1 if invalid. */
static long parse_binary(const unsigned char *b, size_t len, const char **src) {
    if (!b || len < strlen(BIN_MAGIC) || memcmp(b, BIN_MAGIC, strlen(BIN_MAGIC)) != 0) return -1;
    const char *nl = memchr(b, '\n', len);
    if (!nl) return -1;
    int dev;
    size_t srclen;
    /* sscanf reads to a NUL, and a binary has none: parse a terminated copy of the header. */
    char header[64];
    size_t hlen = (size_t)(nl - (const char *)b);
    if (hlen >= sizeof header) return -1;
    memcpy(header, b, hlen);
    header[hlen] = 0;
    if (sscanf(header + strlen(BIN_MAGIC), "%d %zu", &dev, &srclen) != 2) return -1;
    size_t head = (size_t)(nl + 1 - (const char *)b);
    if (head + srclen != len) return -1;
    *src = nl + 1;
    return (long)srclen;
}

static cl_program f_CreateProgramWithBinary(cl_context c, cl_uint n, const cl_device_id *d,
                                            const size_t *lengths, const unsigned char **bins,
                                            cl_int *status, cl_int *err) {
    cl_int e = CL_SUCCESS;
    const char *src = NULL;
    long srclen = -1;
    if (!c) e = CL_INVALID_CONTEXT;
    else if (n == 0 || !d || !lengths || !bins || n > MAX_DEV) e = CL_INVALID_VALUE;
    for (cl_uint i = 0; e == CL_SUCCESS && i < n; i++) {
        if (!valid_device(d[i])) e = CL_INVALID_DEVICE;
        else if (lengths[i] == 0 || !bins[i]) e = CL_INVALID_VALUE;
    }
    if (e == CL_SUCCESS) {
        for (cl_uint i = 0; i < n; i++) {
            const char *s;
            long l = parse_binary(bins[i], lengths[i], &s);
            if (status) status[i] = l < 0 ? CL_INVALID_BINARY : CL_SUCCESS;
            if (l < 0) e = CL_INVALID_BINARY;
            else if (!src) src = s, srclen = l;
        }
    }
    flog("clCreateProgramWithBinary %d", e);
    if (err) *err = e;
    if (e != CL_SUCCESS) return NULL;
    cl_program p = new_program(c, src, (size_t)srclen);
    p->ndev = (int)n;
    for (cl_uint i = 0; i < n; i++) p->devs[i] = d[i];
    p->btype = CL_PROGRAM_BINARY_TYPE_EXECUTABLE;
    return p;
}

static cl_int f_RetainProgram(cl_program p) {
    if (!p) return CL_INVALID_PROGRAM;
    atomic_fetch_add(&p->refs, 1);
    return CL_SUCCESS;
}

static cl_int f_ReleaseProgram(cl_program p) {
    if (!p) return CL_INVALID_PROGRAM;
    if (atomic_fetch_sub(&p->refs, 1) == 1) {
        f_ReleaseContext(p->ctx);
        free(p->source);
        free(p);
    }
    return CL_SUCCESS;
}

/* Kernel names: the identifiers after "kernel void" / "__kernel void". */
static void find_kernels(cl_program p) {
    p->kernels[0] = 0;
    p->nkernels = 0;
    if (p->is_il) return;
    const char *s = p->source;
    while ((s = strstr(s, "kernel void ")) != NULL) {
        s += strlen("kernel void ");
        size_t n = strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
        size_t used = strlen(p->kernels);
        if (n && used + n + 2 < sizeof p->kernels) {
            if (used) strcat(p->kernels, ";");
            strncat(p->kernels, s, n);
            p->nkernels++;
        }
    }
}

typedef void(CL_CALLBACK *notify_fn)(cl_program, void *);

struct async_job {
    cl_program prog;
    notify_fn notify;
    void *user_data;
    cl_build_status final_status;
    atomic_int returned; /* the API call has returned to its caller */
    atomic_int done;     /* the callback has run */
    int wait_for_return;
};

static void *async_main(void *arg) {
    struct async_job *j = arg;
    if (j->wait_for_return) {
        while (!atomic_load(&j->returned)) usleep(1000);
        sleep_ms(env_long("FAKE_ICD_ASYNC_MS", 100));
    }
    atomic_store(&j->prog->status, j->final_status);
    j->notify(j->prog, j->user_data);
    atomic_store(&j->done, 1);
    if (j->wait_for_return) {
        f_ReleaseProgram(j->prog);
        free(j);
    }
    return NULL;
}

/* Finishes a build-like call: sets the final status now, or later on another thread,
 * and runs the callback as FAKE_ICD_ASYNC says. Returns what the call should return. */
static cl_int finish(cl_program p, cl_build_status final_status, notify_fn notify, void *ud,
                     cl_int result) {
    const char *mode = getenv("FAKE_ICD_ASYNC");
    if (!notify || !mode || !*mode || strcmp(mode, "inline") == 0) {
        atomic_store(&p->status, final_status);
        if (notify) notify(p, ud);
        return result;
    }
    struct async_job *j = calloc(1, sizeof *j);
    j->prog = p;
    j->notify = notify;
    j->user_data = ud;
    j->final_status = final_status;
    pthread_t th;
    if (strcmp(mode, "thread") == 0) {
        /* The spec: with a callback, the call may return before the build completes. */
        j->wait_for_return = 1;
        f_RetainProgram(p);
        atomic_store(&p->status, CL_BUILD_IN_PROGRESS);
        if (pthread_create(&th, NULL, async_main, j) != 0) abort();
        pthread_detach(th);
        atomic_store(&j->returned, 1);
        return CL_SUCCESS;
    }
    /* thread-before */
    if (pthread_create(&th, NULL, async_main, j) != 0) abort();
    pthread_join(th, NULL);
    free(j);
    return result;
}

static cl_int check_devices(cl_program p, cl_uint n, const cl_device_id *d) {
    if ((n == 0) != (d == NULL)) return CL_INVALID_VALUE;
    for (cl_uint i = 0; i < n; i++) {
        int found = 0;
        for (int k = 0; k < p->ndev; k++) found |= p->devs[k] == d[i];
        if (!found) return CL_INVALID_DEVICE;
    }
    return CL_SUCCESS;
}

static cl_int build_like(const char *call, cl_program p, cl_uint n, const cl_device_id *d,
                         const char *options, notify_fn notify, void *ud,
                         cl_program_binary_type type_ok, cl_int fail_code) {
    if (!p) return CL_INVALID_PROGRAM;
    cl_int e = check_devices(p, n, d);
    if (e == CL_SUCCESS && !notify && ud) e = CL_INVALID_VALUE;
    if (e != CL_SUCCESS) {
        flog("%s %d", call, e);
        return e;
    }
    snprintf(p->options, sizeof p->options, "%s", options ? options : "");
    sleep_ms(env_long("FAKE_ICD_BUILD_MS", 0));
    int fail = env_long("FAKE_ICD_BUILD_FAIL", 0) != 0 ||
               (strcmp(call, "clLinkProgram") == 0 && env_long("FAKE_ICD_LINK_FAIL", 0) != 0);
    if (fail) {
        snprintf(p->log, sizeof p->log,
                 "fake.cl:1:1: error: build failed on purpose (FAKE_ICD_BUILD_FAIL)\n");
        p->btype = CL_PROGRAM_BINARY_TYPE_NONE;
        p->kernels[0] = 0;
        p->nkernels = 0;
    } else {
        snprintf(p->log, sizeof p->log, "fake: %s ok\n", call);
        p->btype = type_ok;
        if (type_ok == CL_PROGRAM_BINARY_TYPE_EXECUTABLE) find_kernels(p);
    }
    cl_int r = finish(p, fail ? CL_BUILD_ERROR : CL_BUILD_SUCCESS, notify, ud,
                      fail ? fail_code : CL_SUCCESS);
    flog("%s %d", call, r);
    return r;
}

static cl_int f_BuildProgram(cl_program p, cl_uint n, const cl_device_id *d, const char *options,
                             notify_fn notify, void *ud) {
    return build_like("clBuildProgram", p, n, d, options, notify, ud,
                      CL_PROGRAM_BINARY_TYPE_EXECUTABLE, CL_BUILD_PROGRAM_FAILURE);
}

static cl_int f_CompileProgram(cl_program p, cl_uint n, const cl_device_id *d,
                               const char *options, cl_uint nh, const cl_program *headers,
                               const char **names, notify_fn notify, void *ud) {
    if (nh && (!headers || !names)) return CL_INVALID_VALUE;
    return build_like("clCompileProgram", p, n, d, options, notify, ud,
                      CL_PROGRAM_BINARY_TYPE_COMPILED_OBJECT, CL_COMPILE_PROGRAM_FAILURE);
}

static cl_program f_LinkProgram(cl_context c, cl_uint n, const cl_device_id *d,
                                const char *options, cl_uint ni, const cl_program *inputs,
                                notify_fn notify, void *ud, cl_int *err) {
    cl_int e = CL_SUCCESS;
    if (!c) e = CL_INVALID_CONTEXT;
    else if (ni == 0 || !inputs || (n == 0) != (d == NULL)) e = CL_INVALID_VALUE;
    for (cl_uint i = 0; e == CL_SUCCESS && i < ni; i++)
        if (!inputs[i] || inputs[i]->btype == CL_PROGRAM_BINARY_TYPE_NONE)
            e = CL_INVALID_OPERATION;
    if (e != CL_SUCCESS) {
        flog("clLinkProgram %d", e);
        if (err) *err = e;
        return NULL;
    }
    size_t total = 0;
    for (cl_uint i = 0; i < ni; i++) total += inputs[i]->srclen + 1;
    char *all = calloc(total + 1, 1);
    for (cl_uint i = 0; i < ni; i++) {
        strcat(all, inputs[i]->source);
        strcat(all, "\n");
    }
    cl_program p = new_program(c, all, strlen(all));
    free(all);
    if (n) {
        p->ndev = (int)n;
        for (cl_uint i = 0; i < n; i++) p->devs[i] = d[i];
    }
    /* A library, as pocl reads link options: a space-separated word starting with
     * -create-library. */
    int library = 0;
    for (const char *o = options; o && (o = strstr(o, "-create-library")) != NULL; o++)
        if (o == options || o[-1] == ' ') library = 1;
    cl_int r = build_like("clLinkProgram", p, 0, NULL, options, notify, ud,
                          library ? CL_PROGRAM_BINARY_TYPE_LIBRARY
                                  : CL_PROGRAM_BINARY_TYPE_EXECUTABLE,
                          CL_LINK_PROGRAM_FAILURE);
    if (err) *err = r;
    if (r == CL_LINK_PROGRAM_FAILURE) {
        /* The spec allows returning a program whose log says why; keep it simple: none. */
        f_ReleaseProgram(p);
        return NULL;
    }
    return p;
}

static cl_int f_GetProgramInfo(cl_program p, cl_program_info param, size_t param_value_size,
                               void *param_value, size_t *param_value_size_ret) {
    if (!p) return CL_INVALID_PROGRAM;
    cl_int r;
    switch (param) {
    case CL_PROGRAM_REFERENCE_COUNT: {
        cl_uint v = (cl_uint)atomic_load(&p->refs);
        return PUT_VAL(v);
    }
    case CL_PROGRAM_CONTEXT: return PUT_VAL(p->ctx);
    case CL_PROGRAM_NUM_DEVICES: {
        cl_uint v = (cl_uint)p->ndev;
        return PUT_VAL(v);
    }
    case CL_PROGRAM_DEVICES:
        return put(param_value_size, param_value, param_value_size_ret, p->devs,
                   sizeof(cl_device_id) * (size_t)p->ndev);
    case CL_PROGRAM_SOURCE:
        if (p->is_il) return put(param_value_size, param_value, param_value_size_ret, "", 1);
        return put(param_value_size, param_value, param_value_size_ret, p->source,
                   p->srclen + 1);
    case CL_PROGRAM_IL:
        if (!p->is_il) return put(param_value_size, param_value, param_value_size_ret, NULL, 0);
        return put(param_value_size, param_value, param_value_size_ret, p->source, p->srclen);
    case CL_PROGRAM_NUM_KERNELS:
    case CL_PROGRAM_KERNEL_NAMES:
        if (p->btype != CL_PROGRAM_BINARY_TYPE_EXECUTABLE ||
            atomic_load(&p->status) != CL_BUILD_SUCCESS)
            return CL_INVALID_PROGRAM_EXECUTABLE;
        if (param == CL_PROGRAM_KERNEL_NAMES) return PUT_STR(p->kernels);
        {
            size_t nk = (size_t)p->nkernels;
            return PUT_VAL(nk);
        }
    case CL_PROGRAM_BINARY_SIZES: {
        size_t need = sizeof(size_t) * (size_t)p->ndev;
        if (param_value) {
            sleep_ms(env_long("FAKE_ICD_QUERY_MS", 0));
            long fail = env_long("FAKE_ICD_FAIL_SIZES", 0);
            if (fail) {
                flog("clGetProgramInfo(CL_PROGRAM_BINARY_SIZES) %ld", fail);
                return (cl_int)fail;
            }
            if (param_value_size < need) r = CL_INVALID_VALUE;
            else {
                for (int i = 0; i < p->ndev; i++)
                    ((size_t *)param_value)[i] = binary_size(p, p->devs[i]->index);
                r = CL_SUCCESS;
            }
            flog("clGetProgramInfo(CL_PROGRAM_BINARY_SIZES) %d", r);
        } else {
            r = CL_SUCCESS;
            flog("clGetProgramInfo(CL_PROGRAM_BINARY_SIZES, NULL) 0");
        }
        if (r == CL_SUCCESS && param_value_size_ret) *param_value_size_ret = need;
        return r;
    }
    case CL_PROGRAM_BINARIES: {
        size_t need = sizeof(unsigned char *) * (size_t)p->ndev;
        if (param_value) {
            sleep_ms(env_long("FAKE_ICD_QUERY_MS", 0));
            long fail = env_long("FAKE_ICD_FAIL_BINARIES", 0);
            if (fail) {
                flog("clGetProgramInfo(CL_PROGRAM_BINARIES) %ld", fail);
                return (cl_int)fail;
            }
            unsigned char **nulls = param_value;
            int has_null = 0;
            for (int i = 0; param_value_size >= need && i < p->ndev; i++) has_null |= !nulls[i];
            if (param_value_size < need) r = CL_INVALID_VALUE;
            else if (has_null && env_long("FAKE_ICD_NULL_BINARY_FAILS", 0)) r = CL_INVALID_VALUE;
            else {
                unsigned char **out = param_value;
                for (int i = 0; i < p->ndev; i++)
                    if (out[i] && binary_size(p, p->devs[i]->index))
                        write_binary(p, p->devs[i]->index, out[i]);
                r = CL_SUCCESS;
            }
            flog("clGetProgramInfo(CL_PROGRAM_BINARIES) %d", r);
        } else {
            r = CL_SUCCESS;
            flog("clGetProgramInfo(CL_PROGRAM_BINARIES, NULL) 0");
        }
        if (r == CL_SUCCESS && param_value_size_ret) *param_value_size_ret = need;
        return r;
    }
    default: return CL_INVALID_VALUE;
    }
}

static cl_int f_GetProgramBuildInfo(cl_program p, cl_device_id d, cl_program_build_info param,
                                    size_t param_value_size, void *param_value,
                                    size_t *param_value_size_ret) {
    if (!p) return CL_INVALID_PROGRAM;
    if (check_devices(p, 1, &d) != CL_SUCCESS) return CL_INVALID_DEVICE;
    switch (param) {
    case CL_PROGRAM_BUILD_STATUS: {
        cl_build_status s = atomic_load(&p->status);
        return PUT_VAL(s);
    }
    case CL_PROGRAM_BUILD_OPTIONS: return PUT_STR(p->options);
    case CL_PROGRAM_BUILD_LOG: return PUT_STR(p->log);
    case CL_PROGRAM_BINARY_TYPE: return PUT_VAL(p->btype);
    default: return CL_INVALID_VALUE;
    }
}

/* ---- the dispatch tables ------------------------------------------------------------- */

static void unimplemented(int slot) {
    fprintf(stderr, "fake_icd: dispatch slot %d is not implemented\n", slot);
    abort();
}

/* One stub per slot, so the message names the slot that was called. */
#define STUB(a, b) \
    static cl_int stub_##a##b(void) { unimplemented(a * 10 + b); return CL_INVALID_OPERATION; }
#define STUB10(a) STUB(a, 0) STUB(a, 1) STUB(a, 2) STUB(a, 3) STUB(a, 4) \
                  STUB(a, 5) STUB(a, 6) STUB(a, 7) STUB(a, 8) STUB(a, 9)
#define REF(a, b) (void *)stub_##a##b,
#define REF10(a) REF(a, 0) REF(a, 1) REF(a, 2) REF(a, 3) REF(a, 4) \
                 REF(a, 5) REF(a, 6) REF(a, 7) REF(a, 8) REF(a, 9)
#define ALL20(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) \
                 X(10) X(11) X(12) X(13) X(14) X(15) X(16) X(17) X(18) X(19)
ALL20(STUB10)
static void *const stubs[200] = {ALL20(REF10)};

_Static_assert(sizeof(struct _cl_icd_dispatch) / sizeof(void *) >= 140 &&
                   sizeof(struct _cl_icd_dispatch) <= sizeof(union dispatch),
               "unexpected cl_icd_dispatch size");

static void init(void) {
    for (size_t i = 0; i < 200; i++) table_u.slots[i] = tag_u.slots[i] = stubs[i];
    tag_u.slots[0] = FAKE_ICD2_TAG;
#define SET(name) table.cl##name = (void *)f_##name;
    SET(GetPlatformIDs) SET(GetPlatformInfo) SET(GetDeviceIDs) SET(GetDeviceInfo)
    SET(RetainDevice) SET(ReleaseDevice) SET(CreateContext) SET(CreateContextFromType)
    SET(RetainContext) SET(ReleaseContext) SET(GetContextInfo)
    SET(CreateProgramWithSource) SET(CreateProgramWithBinary) SET(CreateProgramWithIL)
    SET(RetainProgram) SET(ReleaseProgram) SET(BuildProgram) SET(CompileProgram)
    SET(LinkProgram) SET(GetProgramInfo) SET(GetProgramBuildInfo)
#undef SET
    set_header(&platform);
    for (int i = 0; i < MAX_DEV; i++) {
        set_header(&devices[i]);
        devices[i].index = i;
    }
}

static void ensure_init(void) { pthread_once(&init_once, init); }

/* ---- exported entry points ------------------------------------------------------------ */

EXPORT cl_int clIcdGetPlatformIDsKHR(cl_uint n, cl_platform_id *p, cl_uint *np) {
    ensure_init();
    return f_GetPlatformIDs(n, p, np);
}

EXPORT void *clGetExtensionFunctionAddress(const char *name) {
    ensure_init();
    if (name && strcmp(name, "clIcdGetPlatformIDsKHR") == 0) return (void *)clIcdGetPlatformIDsKHR;
    return NULL;
}

EXPORT void *clGetExtensionFunctionAddressForPlatform(cl_platform_id p, const char *name) {
    (void)p;
    return clGetExtensionFunctionAddress(name);
}

/* The core API, for clients linked straight to this library. */
EXPORT cl_int clGetPlatformIDs(cl_uint n, cl_platform_id *p, cl_uint *np) {
    ensure_init();
    return f_GetPlatformIDs(n, p, np);
}
EXPORT cl_int clGetPlatformInfo(cl_platform_id p, cl_platform_info param, size_t s, void *v,
                                size_t *r) {
    ensure_init();
    return f_GetPlatformInfo(p, param, s, v, r);
}
EXPORT cl_int clGetDeviceIDs(cl_platform_id p, cl_device_type t, cl_uint n, cl_device_id *d,
                             cl_uint *nd) {
    ensure_init();
    return f_GetDeviceIDs(p, t, n, d, nd);
}
EXPORT cl_int clGetDeviceInfo(cl_device_id d, cl_device_info param, size_t s, void *v, size_t *r) {
    return f_GetDeviceInfo(d, param, s, v, r);
}
EXPORT cl_context clCreateContext(const cl_context_properties *props, cl_uint n,
                                  const cl_device_id *d,
                                  void(CL_CALLBACK *notify)(const char *, const void *, size_t,
                                                            void *),
                                  void *ud, cl_int *err) {
    ensure_init();
    return f_CreateContext(props, n, d, notify, ud, err);
}
EXPORT cl_int clReleaseContext(cl_context c) { return f_ReleaseContext(c); }
EXPORT cl_int clGetContextInfo(cl_context c, cl_context_info param, size_t s, void *v,
                               size_t *r) {
    return f_GetContextInfo(c, param, s, v, r);
}
EXPORT cl_program clCreateProgramWithSource(cl_context c, cl_uint n, const char **s,
                                            const size_t *l, cl_int *err) {
    return f_CreateProgramWithSource(c, n, s, l, err);
}
EXPORT cl_program clCreateProgramWithBinary(cl_context c, cl_uint n, const cl_device_id *d,
                                            const size_t *l, const unsigned char **b,
                                            cl_int *st, cl_int *err) {
    return f_CreateProgramWithBinary(c, n, d, l, b, st, err);
}
EXPORT cl_program clCreateProgramWithIL(cl_context c, const void *il, size_t len, cl_int *err) {
    return f_CreateProgramWithIL(c, il, len, err);
}
EXPORT cl_int clRetainProgram(cl_program p) { return f_RetainProgram(p); }
EXPORT cl_int clReleaseProgram(cl_program p) { return f_ReleaseProgram(p); }
EXPORT cl_int clBuildProgram(cl_program p, cl_uint n, const cl_device_id *d, const char *o,
                             notify_fn f, void *ud) {
    return f_BuildProgram(p, n, d, o, f, ud);
}
EXPORT cl_int clCompileProgram(cl_program p, cl_uint n, const cl_device_id *d, const char *o,
                               cl_uint nh, const cl_program *h, const char **names, notify_fn f,
                               void *ud) {
    return f_CompileProgram(p, n, d, o, nh, h, names, f, ud);
}
EXPORT cl_program clLinkProgram(cl_context c, cl_uint n, const cl_device_id *d, const char *o,
                                cl_uint ni, const cl_program *in, notify_fn f, void *ud,
                                cl_int *err) {
    return f_LinkProgram(c, n, d, o, ni, in, f, ud, err);
}
EXPORT cl_int clGetProgramInfo(cl_program p, cl_program_info param, size_t s, void *v,
                               size_t *r) {
    return f_GetProgramInfo(p, param, s, v, r);
}
EXPORT cl_int clGetProgramBuildInfo(cl_program p, cl_device_id d, cl_program_build_info param,
                                    size_t s, void *v, size_t *r) {
    return f_GetProgramBuildInfo(p, d, param, s, v, r);
}
