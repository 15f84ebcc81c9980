/* clshim.h: what C and C++ programs can rely on about clshim, written by this project.
 *
 * 1. The clshim binary: what CLSHIM_BINARIES=substitute hands an application in place of
 *    pocl's program binary. Tools that inspect binary caches can recognise one with
 *    clshim_binary_parse(). Layout, every integer little-endian:
 *      offset  0  magic "CLSHIMB\0"                          8 bytes
 *      offset  8  format version (1 or 2)                     uint32
 *      offset 12  flags (0)                                   uint32
 *      offset 16  device fingerprint                          uint64
 *      offset 24  body length n                               uint64
 *      offset 32  body                                        n bytes
 *      offset 32+n FNV-1a 64 of bytes [0, 32+n)               uint64
 *    The fingerprint is FNV-1a 64 over platform name, platform version, device name,
 *    driver version and device version, each followed by one NUL byte.
 *    Version 1: the body is a program's source text (never empty, no NUL byte), rebuilt
 *    with whatever options the application passes.
 *    Version 2: the body is one recipe node, which says how to make the program again:
 *      kind u32       1 executable built from source or IL (clBuildProgram),
 *                     2 compiled object (clCompileProgram), 3 library
 *                     (clLinkProgram -create-library), 4 linked executable
 *      text kind u32  0 none (links), 1 source, 2 IL
 *      options length u32, options (no NUL byte): the build, compile or link options
 *      text length u64, text (kinds 1 and 2: never empty; source holds no NUL byte)
 *      header count u32 (compiled objects only), per header: include name length u32,
 *                     include name, source length u64, source (neither empty nor NUL)
 *      input count u32 (links only, at least one), then each input node (a compiled
 *                     object or a library), nested at most CLSHIM_RECIPE_MAX_DEPTH deep
 *    A library's options name -create-library and a linked executable's do not. Nothing
 *    follows the top node. clshim refuses a binary that breaks any rule, as a whole.
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
#define CLSHIM_BINARY_VERSION 2u        /* the version clshim writes */
#define CLSHIM_BINARY_VERSION_SOURCE 1u /* source only; still read */
#define CLSHIM_RECIPE_EXECUTABLE 1u
#define CLSHIM_RECIPE_COMPILED_OBJECT 2u
#define CLSHIM_RECIPE_LIBRARY 3u
#define CLSHIM_RECIPE_LINKED 4u
#define CLSHIM_RECIPE_MAX_DEPTH 8
#define CLSHIM_RECIPE_MAX_PARTS 4096u
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

/* A parsed clshim binary; every pointer points into the buffer that was parsed. For
 * version 1, kind is CLSHIM_RECIPE_EXECUTABLE, text_kind 1 and options NULL. For a link
 * (kinds 3 and 4) source is NULL; its inputs are nested recipe nodes in the body. */
typedef struct {
    uint32_t version;
    uint64_t fingerprint;
    uint32_t kind;
    uint32_t text_kind;
    const char *source; /* the text: source or IL (text_kind 2) */
    size_t source_length;
    const char *options;
    size_t options_length;
    uint32_t num_headers;
    uint32_t num_inputs;
} clshim_binary;

/* Checks the recipe node at p[0, n) (depth: its nesting level), filling *out with the
 * node's own fields when out is non-NULL; returns the node's length, or 0 if it breaks a
 * rule. *parts counts nodes and headers against CLSHIM_RECIPE_MAX_PARTS. */
static inline size_t clshim_recipe_node(const unsigned char *p, size_t n, int depth,
                                        uint32_t *parts, clshim_binary *out) {
    size_t at = 0;
#define CLSHIM_NEED(k) do { if ((uint64_t)(k) > (uint64_t)(n - at)) return 0; } while (0)
    if (depth > CLSHIM_RECIPE_MAX_DEPTH || ++*parts > CLSHIM_RECIPE_MAX_PARTS) return 0;
    CLSHIM_NEED(12);
    uint32_t kind = clshim_le32(p), text_kind = clshim_le32(p + 4), olen = clshim_le32(p + 8);
    at = 12;
    if (kind < 1 || kind > 4 || text_kind > 2) return 0;
    CLSHIM_NEED(olen);
    const unsigned char *opts = p + at;
    if (memchr(opts, 0, olen)) return 0;
    at += olen;
    CLSHIM_NEED(8);
    uint64_t tlen = clshim_le64(p + at);
    at += 8;
    CLSHIM_NEED(tlen);
    const unsigned char *text = p + at;
    at += (size_t)tlen;
    int link = kind >= 3;
    if (link ? (text_kind != 0 || tlen != 0) : (text_kind == 0 || tlen == 0)) return 0;
    if (text_kind == 1 && memchr(text, 0, (size_t)tlen)) return 0;
    CLSHIM_NEED(4);
    uint32_t nh = clshim_le32(p + at);
    at += 4;
    if (nh && kind != CLSHIM_RECIPE_COMPILED_OBJECT) return 0;
    for (uint32_t i = 0; i < nh; i++) {
        if (++*parts > CLSHIM_RECIPE_MAX_PARTS) return 0;
        CLSHIM_NEED(4);
        uint32_t nl = clshim_le32(p + at);
        at += 4;
        CLSHIM_NEED(nl);
        if (nl == 0 || memchr(p + at, 0, nl)) return 0;
        at += nl;
        CLSHIM_NEED(8);
        uint64_t sl = clshim_le64(p + at);
        at += 8;
        CLSHIM_NEED(sl);
        if (sl == 0 || memchr(p + at, 0, (size_t)sl)) return 0;
        at += (size_t)sl;
    }
    CLSHIM_NEED(4);
    uint32_t ni = clshim_le32(p + at);
    at += 4;
    if (link != (ni > 0)) return 0;
    /* -create-library among the link options, as a whole word (separated by space, tab,
     * newline, form feed or carriage return), exactly for libraries */
#define CLSHIM_SPACE(c) ((c) == ' ' || (c) == '\t' || (c) == '\n' || (c) == '\f' || (c) == '\r')
    int library = 0;
    for (size_t i = 0; i < olen;) {
        while (i < olen && CLSHIM_SPACE(opts[i])) i++;
        size_t w = i;
        while (i < olen && !CLSHIM_SPACE(opts[i])) i++;
        if (i - w == 15 && memcmp(opts + w, "-create-library", 15) == 0) library = 1;
    }
    if (link && library != (kind == CLSHIM_RECIPE_LIBRARY)) return 0;
    for (uint32_t i = 0; i < ni; i++) {
        CLSHIM_NEED(4);
        uint32_t k = clshim_le32(p + at);
        if (k != CLSHIM_RECIPE_COMPILED_OBJECT && k != CLSHIM_RECIPE_LIBRARY) return 0;
        size_t used = clshim_recipe_node(p + at, n - at, depth + 1, parts, NULL);
        if (!used) return 0;
        at += used;
    }
#undef CLSHIM_NEED
#undef CLSHIM_SPACE
    if (out) {
        out->kind = kind;
        out->text_kind = text_kind;
        out->source = tlen ? (const char *)text : NULL;
        out->source_length = (size_t)tlen;
        out->options = (const char *)opts;
        out->options_length = olen;
        out->num_headers = nh;
        out->num_inputs = ni;
    }
    return at;
}

/* 1 if bytes [0, length) are a well-formed clshim binary of a version this header reads
 * (magic, version, flags, length and checksum all check out, and the body keeps every
 * rule of its version), filling *out; 0 otherwise. Every length is checked against the
 * buffer before it is used. */
static inline int clshim_binary_parse(const unsigned char *bytes, size_t length, clshim_binary *out) {
    if (!bytes || length < CLSHIM_BINARY_HEADER_SIZE + CLSHIM_BINARY_TRAILER_SIZE) return 0;
    if (memcmp(bytes, CLSHIM_BINARY_MAGIC, CLSHIM_BINARY_MAGIC_SIZE) != 0) return 0;
    uint32_t version = clshim_le32(bytes + 8);
    if ((version != CLSHIM_BINARY_VERSION && version != CLSHIM_BINARY_VERSION_SOURCE) ||
        clshim_le32(bytes + 12) != 0)
        return 0;
    uint64_t n = clshim_le64(bytes + 24);
    if (n == 0 || n > CLSHIM_BINARY_MAX_SOURCE ||
        n != length - CLSHIM_BINARY_HEADER_SIZE - CLSHIM_BINARY_TRAILER_SIZE)
        return 0;
    size_t body = CLSHIM_BINARY_HEADER_SIZE + (size_t)n;
    if (clshim_fnv1a64(bytes, body) != clshim_le64(bytes + body)) return 0;
    const unsigned char *b = bytes + CLSHIM_BINARY_HEADER_SIZE;
    clshim_binary r;
    memset(&r, 0, sizeof r);
    if (version == CLSHIM_BINARY_VERSION_SOURCE) {
        if (memchr(b, 0, (size_t)n) != NULL) return 0;
        r.kind = CLSHIM_RECIPE_EXECUTABLE;
        r.text_kind = 1;
        r.source = (const char *)b;
        r.source_length = (size_t)n;
    } else {
        uint32_t parts = 0;
        if (clshim_recipe_node(b, (size_t)n, 0, &parts, &r) != (size_t)n) return 0;
    }
    r.version = version;
    r.fingerprint = clshim_le64(bytes + 16);
    if (out) *out = r;
    return 1;
}

#ifdef __cplusplus
}
#endif

#endif /* CLSHIM_H */
