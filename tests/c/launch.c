/* Kernel launches for tests/driver/launches.rs: first launches with and without the shim.
 *
 *   launch accuracy   a cold kernel: launch A (global 64, local 16: pocl compiles), B (global
 *                     128, local 16: a new configuration pocl does not compile again), A again
 *                     (compiles nothing); prints each one's enqueue-to-clFinish seconds
 *   launch events     first launches with the application's event and without one; prints
 *                     what the application can see of its event and of the queue's references
 *   launch threads N  N threads launch one kernel and configuration at once, each on its own queue
 *   launch recreate   a kernel released with its program and another made at the same address
 *                     from another program (in as many rounds as that takes); then a kernel
 *                     made again from the same program
 *   launch task       clEnqueueTask, then clEnqueueNDRangeKernel of one work-item
 *   launch unseen     program and kernel made through dlsym'd loader functions (which preload
 *                     mode does not see), launched through the ordinary symbol
 *   launch inprogram  kernels made by clCreateKernelsInProgram and clCloneKernel
 *   launch released   a first launch whose kernel, program and memory are released before it
 *                     completes
 *   launch exit       a first launch that completes while the process exits
 *   launch refused    a first launch the implementation refuses (arguments unset), then the
 *                     same configuration with its arguments set
 *   launch misaligned two-dimensional launches whose offset, global and local size arrays
 *                     lie one byte off a size_t boundary (first launches, then the same ones
 *                     again); prints what the kernel wrote
 *   launch gated      six first launches held back by one user event, set 0.3 s later: all
 *                     in flight together
 * Every kernel has a unique constant, so pocl's kernel cache never serves it (run with a
 * fresh POCL_CACHE_DIR). Prints "ok" last when everything the mode checks held. */
#define _GNU_SOURCE
#include "cltest.h"
#include <dlfcn.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static cl_platform_id plat;
static cl_device_id dev;
static cl_context ctx;

/* A one-statement kernel `name` writing out[i] = i + tag, built from source unique to this
 * process and `tag`. */
static cl_program tiny_program(const char *name, int tag) {
    char src[512];
    snprintf(src, sizeof src,
             "__kernel void %s(__global int *out) { out[get_global_id(0)] = (int)get_global_id(0) + %d; }\n"
             "__constant int uniq_%ld_%d = 0;\n",
             name, tag, (long)getpid(), tag);
    const char *s = src;
    cl_int err;
    cl_program p = clCreateProgramWithSource(ctx, 1, &s, NULL, &err);
    CHECK(err);
    build_or_die(p, dev, NULL);
    return p;
}

static cl_mem out_buf(void) {
    cl_int err;
    cl_mem b = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 4096 * sizeof(cl_int), NULL, &err);
    CHECK(err);
    return b;
}

static cl_kernel kernel_on(cl_program p, const char *name, cl_mem out) {
    cl_int err;
    cl_kernel k = clCreateKernel(p, name, &err);
    CHECK(err);
    CHECK(clSetKernelArg(k, 0, sizeof out, &out));
    return k;
}

static cl_command_queue new_queue(void) {
    cl_int err;
    cl_command_queue q = clCreateCommandQueue(ctx, dev, 0, &err);
    CHECK(err);
    return q;
}

/* Enqueue-to-clFinish seconds of one launch. */
static double timed_launch(cl_command_queue q, cl_kernel k, size_t global, size_t local) {
    double t0 = now();
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 0, NULL, NULL));
    CHECK(clFinish(q));
    return now() - t0;
}

static cl_uint ref_count(cl_int (*info)(void *, cl_uint, size_t, void *, size_t *), void *obj,
                         cl_uint param) {
    cl_uint n = 0;
    CHECK(info(obj, param, sizeof n, &n, NULL));
    return n;
}
#define EVENT_REFS(e) ref_count((cl_int(*)(void *, cl_uint, size_t, void *, size_t *))clGetEventInfo, e, CL_EVENT_REFERENCE_COUNT)
#define QUEUE_REFS(q) ref_count((cl_int(*)(void *, cl_uint, size_t, void *, size_t *))clGetCommandQueueInfo, q, CL_QUEUE_REFERENCE_COUNT)
#define CONTEXT_REFS(c) ref_count((cl_int(*)(void *, cl_uint, size_t, void *, size_t *))clGetContextInfo, c, CL_CONTEXT_REFERENCE_COUNT)

/* The queue's reference count once the implementation has dropped its own references to
 * finished commands (it may do so just after clFinish returns): an event nobody released
 * keeps one for good. */
static cl_uint settled_queue_refs(cl_command_queue q) {
    cl_uint n = QUEUE_REFS(q);
    for (int i = 0; i < 200 && n > 1; i++) {
        usleep(5000);
        n = QUEUE_REFS(q);
    }
    return n;
}

/* An event's reference count once the implementation has dropped the command's own
 * reference (pocl does so just after completion, possibly after clFinish returned); pocl
 * keeps one more while the event is its queue's last. */
static cl_uint settled_event_refs(cl_event e) {
    cl_uint n = EVENT_REFS(e);
    for (int i = 0; i < 200 && n > 2; i++) {
        usleep(5000);
        n = EVENT_REFS(e);
    }
    return n;
}

static cl_event callback_event;
static cl_int callback_status = 1;
static void CL_CALLBACK app_callback(cl_event e, cl_int status, void *data) {
    callback_event = e;
    callback_status = status;
    *(int *)data += 1;
}

static int mode_events(void) {
    cl_program p = tiny_program("ev", 1);
    cl_mem out = out_buf();
    cl_kernel k = kernel_on(p, "ev", out);
    cl_command_queue q = new_queue();
    size_t g = 64, l = 16, g2 = 32;
    /* With the application's event. */
    cl_event e = NULL;
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, &l, 0, NULL, &e));
    printf("event refs after enqueue: %u\n", EVENT_REFS(e));
    int fired = 0;
    CHECK(clSetEventCallback(e, CL_COMPLETE, app_callback, &fired));
    CHECK(clWaitForEvents(1, &e));
    CHECK(clFinish(q));
    cl_int status = 1;
    CHECK(clGetEventInfo(e, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL));
    cl_command_type type = 0;
    CHECK(clGetEventInfo(e, CL_EVENT_COMMAND_TYPE, sizeof type, &type, NULL));
    cl_command_queue eq = NULL;
    CHECK(clGetEventInfo(e, CL_EVENT_COMMAND_QUEUE, sizeof eq, &eq, NULL));
    for (int i = 0; i < 200 && !fired; i++) usleep(5000);
    printf("event status %d type 0x%x own queue %d; its callback fired %d time(s) with this event: %d, status %d\n",
           status, type, eq == q, fired, callback_event == e, callback_status);
    printf("event refs after finish, settled: %u\n", settled_event_refs(e));
    CHECK(clReleaseEvent(e));
    /* Without one (clshim passes its own and releases it), and a launch already seen. */
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &g2, &l, 0, NULL, NULL));
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, &l, 0, NULL, NULL));
    CHECK(clFinish(q));
    printf("queue refs settled: %u, context refs: %u\n", settled_queue_refs(q), CONTEXT_REFS(ctx));
    cl_int host[64];
    CHECK(clEnqueueReadBuffer(q, out, CL_TRUE, 0, sizeof host, host, 0, NULL, NULL));
    long sum = 0;
    for (int i = 0; i < 64; i++) sum += host[i];
    printf("sum %ld\n", sum);
    CHECK(clReleaseKernel(k));
    CHECK(clReleaseProgram(p));
    CHECK(clReleaseMemObject(out));
    CHECK(clReleaseCommandQueue(q));
    return 0;
}

static int mode_accuracy(void) {
    cl_program p = tiny_program("acc", 2);
    cl_mem out = out_buf();
    cl_kernel k = kernel_on(p, "acc", out);
    cl_command_queue q = new_queue();
    double a = timed_launch(q, k, 64, 16);
    double b = timed_launch(q, k, 128, 16);
    double again = timed_launch(q, k, 64, 16);
    printf("first %.6f new_global %.6f again %.6f\n", a, b, again);
    clReleaseKernel(k);
    clReleaseProgram(p);
    clReleaseMemObject(out);
    clReleaseCommandQueue(q);
    return 0;
}

struct racer {
    cl_kernel k;
    pthread_barrier_t *barrier;
    cl_int result;
};

static void *race(void *arg) {
    struct racer *r = arg;
    cl_command_queue q = new_queue();
    size_t g = 64, l = 16;
    pthread_barrier_wait(r->barrier);
    r->result = clEnqueueNDRangeKernel(q, r->k, 1, NULL, &g, &l, 0, NULL, NULL);
    clFinish(q);
    clReleaseCommandQueue(q);
    return NULL;
}

static int mode_threads(int n) {
    cl_program p = tiny_program("race", 3);
    cl_mem out = out_buf();
    cl_kernel k = kernel_on(p, "race", out);
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, (unsigned)n);
    pthread_t t[64];
    struct racer r[64];
    for (int i = 0; i < n; i++) {
        r[i] = (struct racer){k, &barrier, 1};
        pthread_create(&t[i], NULL, race, &r[i]);
    }
    int ok = 1;
    for (int i = 0; i < n; i++) {
        pthread_join(t[i], NULL);
        ok &= r[i].result == CL_SUCCESS;
    }
    printf("%d threads launched: %s\n", n, ok ? "all CL_SUCCESS" : "FAILED");
    clReleaseKernel(k);
    clReleaseProgram(p);
    clReleaseMemObject(out);
    return ok ? 0 : 1;
}

/* "recreate": program A's kernel, launched and released with its program, then kernels of
 * program B (another source, the same name) made until one lands at the freed address.
 * Where the allocator puts a block is luck, so each round starts afresh with new programs
 * until one round gets the address (each round's A is a first launch of its own). */
static int mode_recreate(void) {
    cl_mem out = out_buf();
    cl_command_queue q = new_queue();
    for (int round = 0; round < 60; round++) {
        cl_program a = tiny_program("same", 100 + 2 * round);
        cl_kernel ka = kernel_on(a, "same", out);
        timed_launch(q, ka, 64, 16);
        /* Released only once pocl has dropped its own references, so that this thread
         * frees the kernel (a block another thread frees stays in that thread's cache). */
        cl_uint krefs = 0;
        for (int i = 0; i < 200; i++) {
            CHECK(clGetKernelInfo(ka, CL_KERNEL_REFERENCE_COUNT, sizeof krefs, &krefs, NULL));
            if (krefs <= 1) break;
            usleep(5000);
        }
        CHECK(clReleaseKernel(ka));
        CHECK(clReleaseProgram(a));
        cl_program b = tiny_program("same", 101 + 2 * round);
        /* The kernels that miss are kept meanwhile, so each try takes a new block. */
        cl_kernel tries[64];
        int n = 0;
        cl_kernel kb = kernel_on(b, "same", out);
        while (kb != ka && n < 64) {
            tries[n++] = kb;
            kb = kernel_on(b, "same", out);
        }
        for (int i = 0; i < n; i++) CHECK(clReleaseKernel(tries[i]));
        if (kb != ka) {
            CHECK(clReleaseKernel(kb));
            CHECK(clReleaseProgram(b));
            continue;
        }
        printf("same address in round %d\n", round);
        timed_launch(q, kb, 64, 16);
        /* The same kernel of program B made again: not a new kernel. */
        CHECK(clReleaseKernel(kb));
        cl_kernel kb2 = kernel_on(b, "same", out);
        timed_launch(q, kb2, 64, 16);
        cl_int host[64];
        CHECK(clEnqueueReadBuffer(q, out, CL_TRUE, 0, sizeof host, host, 0, NULL, NULL));
        printf("out[3] = %d\n", host[3]);
        CHECK(clReleaseKernel(kb2));
        CHECK(clReleaseProgram(b));
        break;
    }
    CHECK(clReleaseMemObject(out));
    CHECK(clReleaseCommandQueue(q));
    return 0;
}

static int mode_task(void) {
    cl_program p = tiny_program("one", 6);
    cl_mem out = out_buf();
    cl_kernel k = kernel_on(p, "one", out);
    cl_command_queue q = new_queue();
    cl_event e = NULL;
    CHECK(clEnqueueTask(q, k, 0, NULL, &e));
    CHECK(clFinish(q));
    printf("task event refs, settled: %u\n", settled_event_refs(e));
    CHECK(clReleaseEvent(e));
    size_t one = 1;
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &one, &one, 0, NULL, NULL));
    CHECK(clFinish(q));
    clReleaseKernel(k);
    clReleaseProgram(p);
    clReleaseMemObject(out);
    clReleaseCommandQueue(q);
    return 0;
}

typedef cl_program (*create_src_fn)(cl_context, cl_uint, const char **, const size_t *, cl_int *);
typedef cl_int (*build_fn)(cl_program, cl_uint, const cl_device_id *, const char *, void *, void *);
typedef cl_kernel (*create_kernel_fn)(cl_program, const char *, cl_int *);

static int mode_unseen(void) {
    void *h = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("FAILED dlopen: %s\n", dlerror());
        return 1;
    }
    create_src_fn create = (create_src_fn)dlsym(h, "clCreateProgramWithSource");
    build_fn build = (build_fn)dlsym(h, "clBuildProgram");
    create_kernel_fn create_kernel = (create_kernel_fn)dlsym(h, "clCreateKernel");
    const char *src = "__kernel void hidden(__global int *out) { out[get_global_id(0)] = 7; }\n";
    char uniq[256];
    snprintf(uniq, sizeof uniq, "%s__constant int hidden_%ld = 0;\n", src, (long)getpid());
    const char *s = uniq;
    cl_int err;
    cl_program p = create(ctx, 1, &s, NULL, &err);
    CHECK(err);
    CHECK(build(p, 1, &dev, NULL, NULL, NULL));
    cl_kernel k = create_kernel(p, "hidden", &err);
    CHECK(err);
    cl_mem out = out_buf();
    CHECK(clSetKernelArg(k, 0, sizeof out, &out));
    cl_command_queue q = new_queue();
    timed_launch(q, k, 64, 16);
    clReleaseKernel(k);
    clReleaseProgram(p);
    clReleaseMemObject(out);
    clReleaseCommandQueue(q);
    return 0;
}

/* "inprogram": kernels made by clCreateKernelsInProgram (count not asked for) and by
 * clCloneKernel: identified at their first launch. */
static int mode_inprogram(void) {
    char src[512];
    snprintf(src, sizeof src,
             "__kernel void left(__global int *out) { out[get_global_id(0)] = 1; }\n"
             "__kernel void right(__global int *out) { out[get_global_id(0)] = 2; }\n"
             "__constant int uniq_%ld = 0;\n", (long)getpid());
    const char *s = src;
    cl_int err;
    cl_program p = clCreateProgramWithSource(ctx, 1, &s, NULL, &err);
    CHECK(err);
    build_or_die(p, dev, NULL);
    cl_kernel ks[4] = {NULL, NULL, NULL, NULL};
    CHECK(clCreateKernelsInProgram(p, 4, ks, NULL));
    cl_mem out = out_buf();
    cl_command_queue q = new_queue();
    for (int i = 0; i < 2; i++) {
        CHECK(clSetKernelArg(ks[i], 0, sizeof out, &out));
        timed_launch(q, ks[i], 64, 16);
    }
    cl_kernel clone = clCloneKernel(ks[0], &err);
    CHECK(err);
    timed_launch(q, clone, 64, 16);  /* the same kernel, the same configuration */
    timed_launch(q, clone, 128, 16); /* a new configuration */
    CHECK(clReleaseKernel(clone));
    CHECK(clReleaseKernel(ks[0]));
    CHECK(clReleaseKernel(ks[1]));
    CHECK(clReleaseProgram(p));
    CHECK(clReleaseMemObject(out));
    CHECK(clReleaseCommandQueue(q));
    return 0;
}

static int mode_released(void) {
    cl_program p = tiny_program("gone", 7);
    cl_mem out = out_buf();
    cl_kernel k = kernel_on(p, "gone", out);
    cl_command_queue q = new_queue();
    size_t g = 64, l = 16;
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, &l, 0, NULL, NULL));
    /* Released while pocl is still compiling the launch's kernel. */
    CHECK(clReleaseKernel(k));
    CHECK(clReleaseProgram(p));
    CHECK(clReleaseMemObject(out));
    CHECK(clFinish(q));
    CHECK(clReleaseCommandQueue(q));
    return 0;
}

/* "exit": the handler the application registered before its first OpenCL call runs after
 * clshim's own exit handler (registered at that call); only then does it let a first launch
 * run, so clshim's callback comes while the process is exiting. The configuration is one
 * pocl already compiled (the same local size), so nothing needs the compiler then. */
static cl_command_queue exit_queue;
static cl_event exit_gate;
static void at_exit_release_gate(void) {
    clSetUserEventStatus(exit_gate, CL_COMPLETE);
    clFinish(exit_queue);
    printf("exit handler: launch completed\n");
    fflush(stdout);
}

static int mode_exit(void) {
    cl_program p = tiny_program("bye", 8);
    cl_mem out = out_buf();
    cl_kernel k = kernel_on(p, "bye", out);
    exit_queue = new_queue();
    timed_launch(exit_queue, k, 64, 16);
    cl_int err;
    exit_gate = clCreateUserEvent(ctx, &err);
    CHECK(err);
    size_t g = 128, l = 16;
    CHECK(clEnqueueNDRangeKernel(exit_queue, k, 1, NULL, &g, &l, 1, &exit_gate, NULL));
    CHECK(clFlush(exit_queue));
    printf("ok\n");
    fflush(stdout);
    exit(0);
}

static int mode_refused(void) {
    cl_program p = tiny_program("unset", 9);
    cl_int err;
    cl_kernel k = clCreateKernel(p, "unset", &err);
    CHECK(err);
    cl_command_queue q = new_queue();
    size_t g = 64, l = 16;
    cl_int r1 = clEnqueueNDRangeKernel(q, k, 1, NULL, &g, &l, 0, NULL, NULL);
    cl_int r2 = clEnqueueNDRangeKernel(q, k, 1, NULL, &g, &l, 0, NULL, NULL);
    printf("refused: %s, %s\n", cl_err_name(r1), cl_err_name(r2));
    cl_mem out = out_buf();
    CHECK(clSetKernelArg(k, 0, sizeof out, &out));
    timed_launch(q, k, 64, 16);
    clReleaseKernel(k);
    clReleaseProgram(p);
    clReleaseMemObject(out);
    clReleaseCommandQueue(q);
    return 0;
}

/* A copy of `v` (n sizes) one byte into `bytes`: misaligned for size_t, as an application's
 * packed struct or byte buffer may hold it. */
static const size_t *misaligned(unsigned char *bytes, const size_t *v, int n) {
    memcpy(bytes + 1, v, n * sizeof *v);
    return (const size_t *)(void *)(bytes + 1);
}

static int mode_misaligned(void) {
    cl_program p = tiny_program("packed", 10);
    cl_mem out = out_buf();
    cl_kernel k = kernel_on(p, "packed", out);
    cl_command_queue q = new_queue();
    static const cl_int zero[4096];
    CHECK(clEnqueueWriteBuffer(q, out, CL_TRUE, 0, sizeof zero, zero, 0, NULL, NULL));
    const size_t offsets[2][2] = {{8, 0}, {0, 0}}, globals[2][2] = {{48, 2}, {32, 4}},
                 locals[2][2] = {{16, 1}, {8, 2}};
    unsigned char o_bytes[1 + 2 * sizeof(size_t)], g_bytes[1 + 2 * sizeof(size_t)],
        l_bytes[1 + 2 * sizeof(size_t)];
    for (int round = 0; round < 2; round++) /* first launches, then launches already seen */
        for (int c = 0; c < 2; c++) {
            CHECK(clEnqueueNDRangeKernel(q, k, 2, misaligned(o_bytes, offsets[c], 2),
                                         misaligned(g_bytes, globals[c], 2),
                                         misaligned(l_bytes, locals[c], 2), 0, NULL, NULL));
            /* Without a local size too, and as a one-dimensional launch. */
            CHECK(clEnqueueNDRangeKernel(q, k, 2, NULL, misaligned(g_bytes, globals[c], 2), NULL,
                                         0, NULL, NULL));
            CHECK(clEnqueueNDRangeKernel(q, k, 1, misaligned(o_bytes, offsets[c], 1),
                                         misaligned(g_bytes, globals[c], 1),
                                         misaligned(l_bytes, locals[c], 1), 0, NULL, NULL));
        }
    CHECK(clFinish(q));
    static cl_int got[4096];
    CHECK(clEnqueueReadBuffer(q, out, CL_TRUE, 0, sizeof got, got, 0, NULL, NULL));
    long sum = 0;
    int written = 0;
    for (int i = 0; i < 4096; i++) {
        sum += got[i];
        written += got[i] != 0;
    }
    printf("misaligned: %d written, sum %ld, out[8] %d, out[55] %d\n", written, sum, got[8], got[55]);
    clReleaseKernel(k);
    clReleaseProgram(p);
    clReleaseMemObject(out);
    clReleaseCommandQueue(q);
    return 0;
}

static int mode_gated(void) {
    cl_program p = tiny_program("gated", 11);
    cl_mem out = out_buf();
    cl_kernel k = kernel_on(p, "gated", out);
    cl_command_queue q = new_queue();
    cl_int err;
    cl_event gate = clCreateUserEvent(ctx, &err);
    CHECK(err);
    for (size_t g = 1; g <= 6; g++)
        CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, NULL, 1, &gate, NULL));
    usleep(300000);
    CHECK(clSetUserEventStatus(gate, CL_COMPLETE));
    CHECK(clFinish(q));
    clReleaseEvent(gate);
    clReleaseKernel(k);
    clReleaseProgram(p);
    clReleaseMemObject(out);
    clReleaseCommandQueue(q);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: launch accuracy|events|threads N|recreate|task|unseen|inprogram|released|exit|refused|misaligned|gated\n");
        return 2;
    }
    if (!strcmp(argv[1], "exit")) atexit(at_exit_release_gate); /* before any OpenCL call */
    pick_device(&plat, &dev);
    ctx = make_context(dev);
    const char *m = argv[1];
    int rc;
    if (!strcmp(m, "accuracy")) rc = mode_accuracy();
    else if (!strcmp(m, "events")) rc = mode_events();
    else if (!strcmp(m, "threads")) rc = mode_threads(argc > 2 ? atoi(argv[2]) : 8);
    else if (!strcmp(m, "recreate")) rc = mode_recreate();
    else if (!strcmp(m, "task")) rc = mode_task();
    else if (!strcmp(m, "unseen")) rc = mode_unseen();
    else if (!strcmp(m, "released")) rc = mode_released();
    else if (!strcmp(m, "inprogram")) rc = mode_inprogram();
    else if (!strcmp(m, "exit")) rc = mode_exit();
    else if (!strcmp(m, "refused")) rc = mode_refused();
    else if (!strcmp(m, "misaligned")) rc = mode_misaligned();
    else if (!strcmp(m, "gated")) rc = mode_gated();
    else {
        fprintf(stderr, "unknown mode %s\n", m);
        return 2;
    }
    clReleaseContext(ctx);
    if (rc == 0) printf("ok\n");
    return rc;
}
