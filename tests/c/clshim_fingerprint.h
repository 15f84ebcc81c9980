/* The device fingerprint a clshim binary is tied to (cl-headers/clshim.h, section 1): FNV-1a
 * 64 over platform name, platform version, device name, driver version and device
 * version, each trimmed of surrounding white space as clshim reads them, each followed by
 * one NUL byte. Lets the C tests make clshim binaries clshim will take. */
#ifndef CLSHIM_FINGERPRINT_H
#define CLSHIM_FINGERPRINT_H

#include "cltest.h"

static inline void clshim_fp_trim(char *s) {
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r'))
        s[--n] = 0;
    size_t lead = strspn(s, " \t\n\r");
    memmove(s, s + lead, strlen(s + lead) + 1);
}

static inline uint64_t clshim_fingerprint(cl_device_id d) {
    char pname[256] = "", pver[256] = "", dname[256] = "", drv[256] = "", dver[256] = "";
    cl_platform_id p;
    CHECK(clGetDeviceInfo(d, CL_DEVICE_PLATFORM, sizeof p, &p, NULL));
    CHECK(clGetPlatformInfo(p, CL_PLATFORM_NAME, sizeof pname, pname, NULL));
    CHECK(clGetPlatformInfo(p, CL_PLATFORM_VERSION, sizeof pver, pver, NULL));
    CHECK(clGetDeviceInfo(d, CL_DEVICE_NAME, sizeof dname, dname, NULL));
    CHECK(clGetDeviceInfo(d, CL_DRIVER_VERSION, sizeof drv, drv, NULL));
    CHECK(clGetDeviceInfo(d, CL_DEVICE_VERSION, sizeof dver, dver, NULL));
    char *parts[] = {pname, pver, dname, drv, dver};
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < 5; i++) {
        clshim_fp_trim(parts[i]);
        for (const unsigned char *c = (const unsigned char *)parts[i];; c++) {
            h ^= *c;
            h *= 0x100000001b3ull;
            if (!*c) break;
        }
    }
    return h;
}

static inline void clshim_le(unsigned char *p, uint64_t v, int n) {
    for (int i = 0; i < n; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* A clshim binary carrying `src` (n bytes) for device d, in a malloc'd buffer of its size
 * plus `pad` bytes of slack. */
static inline unsigned char *clshim_make_binary(cl_device_id d, const char *src, size_t n,
                                                size_t pad, size_t *len) {
    *len = 32 + n + 8;
    unsigned char *b = calloc(1, *len + pad);
    memcpy(b, "CLSHIMB", 8);
    clshim_le(b + 8, 1, 4);
    clshim_le(b + 12, 0, 4);
    clshim_le(b + 16, clshim_fingerprint(d), 8);
    clshim_le(b + 24, n, 8);
    memcpy(b + 32, src, n);
    clshim_le(b + 32 + n, fnv1a64(b, 32 + n), 8);
    return b;
}

#endif
