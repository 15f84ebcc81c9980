/* Mutation fuzzer of clshim binaries, through clCreateProgramWithBinary under clshim.
 *
 *   fuzz_binaries N SEED    N mutated clshim binaries for the first device, each loaded
 *
 * Each case starts from a valid clshim binary for the device (version 1, a version-2
 * recipe: an executable built with options, a compiled object with a header, a linked
 * executable of an object and a library; or a version-3 recipe whose parts are shared by
 * index) and applies one to four
 * mutations (bit flips, byte writes, truncation, extension, edited length, version, flags
 * or fingerprint fields, an empty source, a NUL in the source, a claimed length other
 * than the buffer's), then, half the time, recomputes the checksum so that the fields
 * behind it are reached. The oracle is the format as cl-headers/clshim.h documents it:
 * the bytes the claimed length covers, if its parser accepts them with the device's
 * fingerprint, must become a program (CL_SUCCESS, binary_status CL_SUCCESS) whose source
 * is the binary's (for a program made from source text); anything else must be refused
 * with CL_INVALID_BINARY and no program.
 * Prints each case answered otherwise, then "fuzz N cases: A accepted, R rejected,
 * W wrong". Run it on the fake ICD (any binary that is not its own is refused there, and
 * a source program costs nothing). */
#define _GNU_SOURCE
#include "clshim_fingerprint.h"
#include "clshim.h"
#include <stdint.h>

static uint64_t rng;
static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

#define PAD 64

static const char *SRC = "__kernel void fz(__global int *a) { a[get_global_id(0)] = 5; }";

/* Appends one recipe node (cl-headers/clshim.h's layout) to b at *at. */
static void node(unsigned char *b, size_t *at, uint32_t kind, const char *text, const char *opts,
                 const char *hname, const char *hsrc, int ninputs, const unsigned char *inputs,
                 size_t inputs_len) {
    size_t o = strlen(opts), t = text ? strlen(text) : 0;
    clshim_le(b + *at, kind, 4);
    clshim_le(b + *at + 4, text ? 1 : 0, 4);
    clshim_le(b + *at + 8, o, 4);
    *at += 12;
    memcpy(b + *at, opts, o);
    *at += o;
    clshim_le(b + *at, t, 8);
    *at += 8;
    memcpy(b + *at, text ? text : "", t);
    *at += t;
    clshim_le(b + *at, hname ? 1 : 0, 4);
    *at += 4;
    if (hname) {
        size_t n = strlen(hname), s = strlen(hsrc);
        clshim_le(b + *at, n, 4);
        memcpy(b + *at + 4, hname, n);
        *at += 4 + n;
        clshim_le(b + *at, s, 8);
        memcpy(b + *at + 8, hsrc, s);
        *at += 8 + s;
    }
    clshim_le(b + *at, (uint64_t)ninputs, 4);
    *at += 4;
    memcpy(b + *at, inputs, inputs_len);
    *at += inputs_len;
}

/* A sealed clshim binary of `version` for the device with fingerprint fp. */
static unsigned char *sealed(uint32_t version, uint64_t fp, const unsigned char *body, size_t n,
                             size_t *len) {
    *len = 32 + n + 8;
    unsigned char *b = calloc(1, *len);
    memcpy(b, "CLSHIMB", 8);
    clshim_le(b + 8, version, 4);
    clshim_le(b + 12, 0, 4);
    clshim_le(b + 16, fp, 8);
    clshim_le(b + 24, n, 8);
    memcpy(b + 32, body, n);
    clshim_le(b + 32 + n, fnv1a64(b, 32 + n), 8);
    return b;
}

static unsigned char *recipe_binary(uint64_t fp, const unsigned char *body, size_t n, size_t *len) {
    return sealed(2, fp, body, n, len);
}

/* Appends an input index (a version-3 part's input) to b at *at. */
static void index_of(unsigned char *b, size_t *at, uint32_t i) {
    clshim_le(b + *at, i, 4);
    *at += 4;
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    long n = atol(argv[1]);
    rng = strtoull(argv[2], NULL, 0) | 1;
    cl_platform_id plat;
    cl_device_id dev;
    pick_device(&plat, &dev);
    cl_context ctx = make_context(dev);
    uint64_t fp = clshim_fingerprint(dev);
    unsigned char *bases[5];
    size_t lens[5];
    bases[0] = clshim_make_binary(dev, SRC, strlen(SRC), 0, &lens[0]);
    static unsigned char body[4096], obj[1024], lib[1024], ins[2048];
    size_t at = 0, no = 0, nl = 0, ni = 0;
    node(body, &at, 1, SRC, "-DVAL=7", NULL, NULL, 0, NULL, 0);
    bases[1] = recipe_binary(fp, body, at, &lens[1]);
    node(obj, &no, 2, "#include \"h.h\"\n__kernel void fz(__global int *a) { a[0] = X; }",
         "-cl-std=CL1.2", "h.h", "#define X 3\n", 0, NULL, 0);
    bases[2] = recipe_binary(fp, obj, no, &lens[2]);
    size_t nh = 0;
    static unsigned char helper[512];
    node(helper, &nh, 2, "int helper(int x) { return x; }", "", NULL, NULL, 0, NULL, 0);
    node(lib, &nl, 3, NULL, "-create-library", NULL, NULL, 1, helper, nh);
    memcpy(ins, obj, no);
    memcpy(ins + no, lib, nl);
    ni = no + nl;
    at = 0;
    node(body, &at, 4, NULL, "", NULL, NULL, 2, ins, ni);
    bases[3] = recipe_binary(fp, body, at, &lens[3]);
    /* Version 3: the helper object is a part of its own, shared by the library and the
     * executable (parts: helper, library of it, object, executable of all three). */
    static unsigned char v3[4096];
    at = 0;
    clshim_le(v3, 4, 4);
    at = 4;
    memcpy(v3 + at, helper, nh - 4); /* the helper without its input count */
    at += nh - 4;
    clshim_le(v3 + at, 0, 4);
    at += 4;
    node(v3, &at, 3, NULL, "-create-library", NULL, NULL, 1, (const unsigned char *)"", 0);
    index_of(v3, &at, 0);
    memcpy(v3 + at, obj, no);
    at += no;
    node(v3, &at, 4, NULL, "", NULL, NULL, 3, (const unsigned char *)"", 0);
    index_of(v3, &at, 2);
    index_of(v3, &at, 1);
    index_of(v3, &at, 0);
    bases[4] = sealed(3, fp, v3, at, &lens[4]);
    clshim_binary check;
    if (!clshim_binary_parse(bases[4], lens[4], &check) || check.num_parts != 5) {
        printf("the version-3 base does not parse\n");
        return 1;
    }
    size_t cap = lens[3] + 4096 + PAD;
    unsigned char *buf = malloc(cap);
    long accepted = 0, rejected = 0, wrong = 0, by_base[5] = {0, 0, 0, 0, 0};
    for (long c = 0; c < n; c++) {
        int which = (int)(next() % 5);
        const unsigned char *base = bases[which];
        size_t base_len = lens[which];
        memcpy(buf, base, base_len);
        memset(buf + base_len, 0, cap - base_len);
        size_t len = base_len;
        size_t claim_extra = 0; /* nonzero: claim a length other than the buffer's */
        int claim_max = 0;      /* claim SIZE_MAX */
        int muts = 1 + (int)(next() % 4);
        for (int m = 0; m < muts; m++) {
            uint64_t r = next();
            size_t at = len ? (size_t)(r >> 16) % len : 0;
            switch (r % 12) {
            case 0: if (len) buf[at] ^= (unsigned char)(1u << (r >> 8 & 7)); break;
            case 1: if (len) buf[at] = (unsigned char)(r >> 24); break;
            case 2: if (len) buf[at] = (r >> 8 & 1) ? 0xff : 0; break;
            case 3: len = 1 + (size_t)(r >> 20) % (len ? len : 1); break; /* truncate */
            case 4: { /* extend with random bytes */
                size_t add = 1 + (size_t)(r >> 20) % 64;
                if (len + add + PAD <= cap)
                    for (size_t i = 0; i < add; i++) buf[len++] = (unsigned char)next();
                break;
            }
            case 5: if (len >= 32) { /* the declared length */
                static const uint64_t odd[] = {0, 1, 39, 40, 41, 256u << 20, (256u << 20) + 1,
                                               UINT64_MAX, UINT64_MAX / 2};
                uint64_t v = (r >> 8 & 1) ? odd[(r >> 12) % 9] : (uint64_t)(len - 40 + (r >> 16) % 5 - 2);
                clshim_le(buf + 24, v, 8);
            } break;
            case 6: if (len >= 16) clshim_le(buf + 8 + 4 * (r >> 8 & 1), (r >> 12) % 5, 4); break;
            case 7: if (len >= 24) clshim_le(buf + 16, (r >> 8 & 1) ? fp : next(), 8); break;
            case 8: { /* an empty source, declared so */
                len = 40;
                clshim_le(buf + 24, 0, 8);
                break;
            }
            case 9: if (len > 41) buf[32 + (size_t)(r >> 16) % (len - 40)] = 0; break;
            case 10: /* a claimed length other than the buffer's */
                claim_max = r >> 8 & 1;
                claim_extra = 1 + (size_t)(r >> 16) % 1000;
                break;
            case 11: if (len > 41) { /* drop a source byte and fix the declared length */
                size_t i = 32 + (size_t)(r >> 16) % (len - 40);
                memmove(buf + i, buf + i + 1, len - i - 1);
                len--;
                clshim_le(buf + 24, len - 40, 8);
            } break;
            }
        }
        if (next() & 1 && len >= 40) {
            uint64_t sum = fnv1a64(buf, len - 8);
            clshim_le(buf + len - 8, sum, 8);
        }
        /* A claimed length beyond the buffer is only ever read as far as its header. */
        if (len < 40) claim_extra = 0, claim_max = 0;
        size_t claim = claim_max ? SIZE_MAX : len + claim_extra;
        clshim_binary parsed;
        /* The bytes a claim covers are all defined when it stays within the buffer (earlier
         * mutations may have left a whole binary beyond `len`); a claim beyond it must be
         * refused from the header alone. */
        int expect = claim <= cap && clshim_binary_parse(buf, claim, &parsed) &&
                     parsed.fingerprint == fp;
        const unsigned char *bins[1] = {buf};
        cl_int status = 12345, err = 12345;
        cl_program p = clCreateProgramWithBinary(ctx, 1, &dev, &claim, bins, &status, &err);
        int ok;
        if (expect) {
            char got[4096] = "";
            ok = p && err == CL_SUCCESS && status == CL_SUCCESS;
            if (ok && parsed.source && parsed.text_kind == 1)
                ok = clGetProgramInfo(p, CL_PROGRAM_SOURCE, sizeof got, got, NULL) == CL_SUCCESS &&
                     strlen(got) == parsed.source_length &&
                     memcmp(got, parsed.source, parsed.source_length) == 0;
            accepted += ok;
            by_base[which] += ok;
        } else {
            ok = !p && err == CL_INVALID_BINARY;
            rejected += ok;
        }
        if (!ok) {
            wrong++;
            printf("wrong: base %d case %ld len %zu claim %zu expected %s, got %s status %s program %s\n", which, c,
                   len, claim, expect ? "a program" : "CL_INVALID_BINARY", cl_err_name(err),
                   cl_err_name(status), p ? "made" : "none");
        }
        if (p) clReleaseProgram(p);
    }
    printf("accepted by base: v1 %ld, executable %ld, object %ld, linked %ld, v3 linked %ld\n",
           by_base[0], by_base[1], by_base[2], by_base[3], by_base[4]);
    printf("fuzz %ld cases: %ld accepted, %ld rejected, %ld wrong\n", n, accepted, rejected, wrong);
    return wrong != 0;
}
