/* clshim.h: what C and C++ programs can rely on about clshim, written by this project.
 *
 * 1. The clshim binary: what CLSHIM_BINARIES=substitute hands an application in place of
 *    pocl's program binary. Tools that inspect binary caches can recognise one with
 *    clshim_binary_parse(). Layout, every integer little-endian:
 *      offset  0  magic "CLSHIMB\0"                          8 bytes
 *      offset  8  format version (1)                          uint32
 *      offset 12  flags (0)                                   uint32
 *      offset 16  device fingerprint                          uint64
 *      offset 24  source length n                             uint64
 *      offset 32  source text                                 n bytes
 *      offset 32+n FNV-1a 64 of bytes [0, 32+n)               uint64
 *    The fingerprint is FNV-1a 64 over platform name, platform version, device name,
 *    driver version and device version, each followed by one NUL byte. The source is
 *    never empty and holds no NUL byte; clshim refuses a binary that breaks any rule.
 * 2. The loader-layer entry points libclshim.so exports (clGetLayerInfo, clInitLayer,
 *    clInitLayerWithProperties, clDeinitLayer) follow the cl_loader_layers extension;
 *    clshim answers CL_LAYER_API_VERSION with CLSHIM_LAYER_API_VERSION.
 * 3. The trace schema version its JSON Lines records carry in "schema".
 */
#ifndef CLSHIM_H
#define CLSHIM_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define CLSHIM_BINARY_MAGIC "CLSHIMB"       /* plus its terminating NUL: 8 bytes */
#define CLSHIM_BINARY_MAGIC_SIZE 8
#define CLSHIM_BINARY_VERSION 1u
#define CLSHIM_BINARY_HEADER_SIZE 32
#define CLSHIM_BINARY_TRAILER_SIZE 8
#define CLSHIM_BINARY_MAX_SOURCE (256u << 20)
#define CLSHIM_LAYER_API_VERSION 100
#define CLSHIM_TRACE_SCHEMA 1

#ifdef __cplusplus
extern "C" {
#endif

static inline uint64_t clshim_fnv1a64(const unsigned char *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static inline uint64_t clshim_le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static inline uint32_t clshim_le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* A parsed clshim binary: the source points into the buffer that was parsed. */
typedef struct {
    uint32_t version;
    uint64_t fingerprint;
    const char *source;
    size_t source_length;
} clshim_binary;

/* 1 if bytes [0, length) are a well-formed clshim binary of a version this header reads
 * (magic, version, flags, length and checksum all check out, and the source is neither
 * empty nor holds a NUL byte), filling *out; 0 otherwise. Every length is checked against
 * the buffer before it is used. */
static inline int clshim_binary_parse(const unsigned char *bytes, size_t length, clshim_binary *out) {
    if (!bytes || length < CLSHIM_BINARY_HEADER_SIZE + CLSHIM_BINARY_TRAILER_SIZE) return 0;
    if (memcmp(bytes, CLSHIM_BINARY_MAGIC, CLSHIM_BINARY_MAGIC_SIZE) != 0) return 0;
    uint32_t version = clshim_le32(bytes + 8);
    if (version != CLSHIM_BINARY_VERSION || clshim_le32(bytes + 12) != 0) return 0;
    uint64_t n = clshim_le64(bytes + 24);
    if (n == 0 || n > CLSHIM_BINARY_MAX_SOURCE ||
        n != length - CLSHIM_BINARY_HEADER_SIZE - CLSHIM_BINARY_TRAILER_SIZE)
        return 0;
    size_t body = CLSHIM_BINARY_HEADER_SIZE + (size_t)n;
    if (clshim_fnv1a64(bytes, body) != clshim_le64(bytes + body)) return 0;
    if (memchr(bytes + CLSHIM_BINARY_HEADER_SIZE, 0, (size_t)n) != NULL) return 0;
    if (out) {
        out->version = version;
        out->fingerprint = clshim_le64(bytes + 16);
        out->source = (const char *)bytes + CLSHIM_BINARY_HEADER_SIZE;
        out->source_length = (size_t)n;
    }
    return 1;
}

#ifdef __cplusplus
}
#endif

#endif /* CLSHIM_H */
