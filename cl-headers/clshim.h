/* clshim.h: what C and C++ programs can rely on about clshim, written by this project.
 *
 * 1. The clshim binary: what CLSHIM_BINARIES=substitute hands an application in place of
 *    pocl's program binary. Tools that inspect binary caches can recognise one with
 *    clshim_binary_parse(). Layout, every integer little-endian:
 *      offset  0  magic "CLSHIMB\0"                          8 bytes
 *      offset  8  format version (1, 2 or 3)                uint32
 *      offset 12  flags (0)                                   uint32
 *      offset 16  device fingerprint                          uint64
 *      offset 24  body length n                               uint64
 *      offset 32  body                                        n bytes
 *      offset 32+n FNV-1a 64 of bytes [0, 32+n)               uint64
 *    The fingerprint is FNV-1a 64 over platform name, platform version, device name,
 *    driver version and device version, each followed by one NUL byte.
 *    Version 1: the body is a program's source text (never empty, no NUL byte), rebuilt
 *    with whatever options the application passes.
 *    Versions 2 and 3: the body is a recipe, which says how to make the program again,
 *    made of parts (nodes). One part:
 *      kind u32       1 executable built from source or IL (clBuildProgram),
 *                     2 compiled object (clCompileProgram), 3 library
 *                     (clLinkProgram -create-library), 4 linked executable
 *      text kind u32  0 none (links), 1 source, 2 IL
 *      options length u32, options: the build, compile or link options, the bytes the
 *                     application passed (any encoding); no NUL byte, at most
 *                     CLSHIM_RECIPE_MAX_OPTIONS bytes (links: CLSHIM_RECIPE_MAX_LINK_OPTIONS),
 *                     at most CLSHIM_RECIPE_MAX_DEBUG_WORDS words starting with "-g"
 *                     and CLSHIM_RECIPE_MAX_DENORMS_WORDS starting with
 *                     "-cl-denorms-are-zero" (a word starts the options or follows
 *                     whitespace)
 *      text length u64, text (kinds 1 and 2: never empty; source holds no NUL byte)
 *      header count u32 (compiled objects only), per header: include name length u32,
 *                     include name, source length u64, source (not empty, no NUL). An
 *                     include name is 1 to CLSHIM_RECIPE_MAX_NAME bytes, relative (no
 *                     leading '/'), its '/'-separated components neither empty nor "..",
 *                     with no control character (0-31, 127): a driver writes the header
 *                     at that name below a folder of its own, and it must stay there
 *      input count u32 (links only, at least one), then the inputs (each a compiled
 *                     object or a library)
 *    Version 2 (read, no longer written): the body is one part, each input a part nested
 *    in place, at most CLSHIM_RECIPE_MAX_DEPTH deep. Version 3 (written): part count u32,
 *    then the parts in order, each input a part index u32 of an earlier part; the last
 *    part is the program, every other part an input of a later one (a part shared by
 *    several links is written once), and no chain of inputs is longer than
 *    CLSHIM_RECIPE_MAX_DEPTH. In both, parts and headers together number at most
 *    CLSHIM_RECIPE_MAX_PARTS, and nothing follows the recipe. A link is a library (kind 3)
 *    exactly when a word of its options starts with "-create-library", words separated
 *    by spaces only, as pocl reads them (so "-create-library" followed by a tab or a
 *    vertical tab asks for a library); clshim records the kind the driver made, keeps no
 *    recipe when the two disagree, and refuses a binary whose link the driver makes into
 *    another kind than the recipe says. clshim refuses a
 *    binary that breaks any rule, as a whole, and never writes one: a program whose
 *    recipe would break one gets the driver's own binary instead.
 *    The lengths are bounded by what drivers take from a compile (pocl 3.1 builds each
 *    header's path in a 1,024-byte buffer, gathers link options in a 512-byte one, and
 *    has 512 bytes of room for rewriting "-g" and "-cl-denorms-are-zero" into longer
 *    options).
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
#define CLSHIM_BINARY_VERSION 3u        /* the version clshim writes */
#define CLSHIM_BINARY_VERSION_TREE 2u   /* nested recipes; still read */
#define CLSHIM_BINARY_VERSION_SOURCE 1u /* source only; still read */
#define CLSHIM_RECIPE_EXECUTABLE 1u
#define CLSHIM_RECIPE_COMPILED_OBJECT 2u
#define CLSHIM_RECIPE_LIBRARY 3u
#define CLSHIM_RECIPE_LINKED 4u
#define CLSHIM_RECIPE_MAX_DEPTH 8
#define CLSHIM_RECIPE_MAX_PARTS 4096u
#define CLSHIM_RECIPE_MAX_NAME 255u
#define CLSHIM_RECIPE_MAX_OPTIONS 32768u
#define CLSHIM_RECIPE_MAX_LINK_OPTIONS 511u
#define CLSHIM_RECIPE_MAX_DEBUG_WORDS 4u
#define CLSHIM_RECIPE_MAX_DENORMS_WORDS 8u
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
 * (kinds 3 and 4) source is NULL; its inputs are the other parts of the body. num_parts
 * counts the recipe's parts and headers, as CLSHIM_RECIPE_MAX_PARTS bounds them (1 for
 * version 1). */
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
    uint32_t num_parts;
} clshim_binary;

static inline int clshim_space(unsigned char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* 1 if name[0, n) is an include name the format allows (see section 1). */
static inline int clshim_name_ok(const unsigned char *name, size_t n) {
    if (n == 0 || n > CLSHIM_RECIPE_MAX_NAME || name[0] == '/') return 0;
    size_t start = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && (name[i] < 0x20 || name[i] == 0x7f)) return 0;
        if (i == n || name[i] == '/') {
            size_t len = i - start;
            if (len == 0 || (len == 2 && name[start] == '.' && name[start + 1] == '.')) return 0;
            start = i + 1;
        }
    }
    return 1;
}

/* Checks the fields of the recipe part at p[0, n) up to its input count, filling *out
 * with them; returns their length, or 0 if they break a rule. *parts counts the part
 * and its headers against CLSHIM_RECIPE_MAX_PARTS. */
static inline size_t clshim_recipe_fields(const unsigned char *p, size_t n, uint32_t *parts,
                                          clshim_binary *out) {
    size_t at = 0;
#define CLSHIM_NEED(k) do { if ((uint64_t)(k) > (uint64_t)(n - at)) return 0; } while (0)
    if (++*parts > CLSHIM_RECIPE_MAX_PARTS) return 0;
    CLSHIM_NEED(12);
    uint32_t kind = clshim_le32(p), text_kind = clshim_le32(p + 4), olen = clshim_le32(p + 8);
    at = 12;
    if (kind < 1 || kind > 4 || text_kind > 2) return 0;
    int link = kind >= 3;
    CLSHIM_NEED(olen);
    const unsigned char *opts = p + at;
    if (olen > (link ? CLSHIM_RECIPE_MAX_LINK_OPTIONS : CLSHIM_RECIPE_MAX_OPTIONS)) return 0;
    if (memchr(opts, 0, olen)) return 0;
    uint32_t debug = 0, denorms = 0;
    for (uint32_t i = 0; i + 1 < olen; i++) {
        if (i > 0 && !clshim_space(opts[i - 1])) continue;
        if (opts[i] == '-' && opts[i + 1] == 'g') debug++;
        if (olen - i >= 20 && memcmp(opts + i, "-cl-denorms-are-zero", 20) == 0) denorms++;
    }
    if (debug > CLSHIM_RECIPE_MAX_DEBUG_WORDS || denorms > CLSHIM_RECIPE_MAX_DENORMS_WORDS)
        return 0;
    at += olen;
    CLSHIM_NEED(8);
    uint64_t tlen = clshim_le64(p + at);
    at += 8;
    CLSHIM_NEED(tlen);
    const unsigned char *text = p + at;
    at += (size_t)tlen;
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
        if (!clshim_name_ok(p + at, nl)) return 0;
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
    if (link != (ni > 0) || ni > CLSHIM_RECIPE_MAX_PARTS) return 0;
    /* a library exactly when a space-separated word of the options starts with
     * -create-library */
    int library = 0;
    for (size_t i = 0; i + 15 <= olen; i++)
        if ((i == 0 || opts[i - 1] == ' ') && memcmp(opts + i, "-create-library", 15) == 0)
            library = 1;
    if (link && library != (kind == CLSHIM_RECIPE_LIBRARY)) return 0;
#undef CLSHIM_NEED
    out->kind = kind;
    out->text_kind = text_kind;
    out->source = tlen ? (const char *)text : NULL;
    out->source_length = (size_t)tlen;
    out->options = (const char *)opts;
    out->options_length = olen;
    out->num_headers = nh;
    out->num_inputs = ni;
    return at;
}

/* Checks the version-2 recipe node at p[0, n) (depth: its nesting level) with its nested
 * inputs, filling *out with the node's own fields when out is non-NULL; returns the
 * node's length, or 0 if it breaks a rule. */
static inline size_t clshim_recipe_node(const unsigned char *p, size_t n, int depth,
                                        uint32_t *parts, clshim_binary *out) {
    clshim_binary f;
    if (depth > CLSHIM_RECIPE_MAX_DEPTH) return 0;
    size_t at = clshim_recipe_fields(p, n, parts, &f);
    if (!at) return 0;
    for (uint32_t i = 0; i < f.num_inputs; i++) {
        if (n - at < 4) return 0;
        uint32_t k = clshim_le32(p + at);
        if (k != CLSHIM_RECIPE_COMPILED_OBJECT && k != CLSHIM_RECIPE_LIBRARY) return 0;
        size_t used = clshim_recipe_node(p + at, n - at, depth + 1, parts, NULL);
        if (!used) return 0;
        at += used;
    }
    if (out) *out = f;
    return at;
}

/* Checks a version-3 recipe body p[0, n) (every part, index and limit), filling *out
 * with the last part's fields; 1 if it keeps every rule, else 0. */
static inline int clshim_recipe_parts(const unsigned char *p, size_t n, clshim_binary *out) {
    unsigned char kind[CLSHIM_RECIPE_MAX_PARTS], depth[CLSHIM_RECIPE_MAX_PARTS],
        used[CLSHIM_RECIPE_MAX_PARTS];
    if (n < 4) return 0;
    uint32_t count = clshim_le32(p), parts = 0;
    size_t at = 4;
    if (count == 0 || count > CLSHIM_RECIPE_MAX_PARTS) return 0;
    clshim_binary f;
    memset(&f, 0, sizeof f);
    for (uint32_t i = 0; i < count; i++) {
        size_t len = clshim_recipe_fields(p + at, n - at, &parts, &f);
        if (!len) return 0;
        at += len;
        unsigned d = 0;
        for (uint32_t j = 0; j < f.num_inputs; j++) {
            if (n - at < 4) return 0;
            uint32_t x = clshim_le32(p + at);
            at += 4;
            if (x >= i) return 0;
            if (kind[x] != CLSHIM_RECIPE_COMPILED_OBJECT && kind[x] != CLSHIM_RECIPE_LIBRARY)
                return 0;
            used[x] = 1;
            if (depth[x] + 1u > d) d = depth[x] + 1u;
        }
        if (d > CLSHIM_RECIPE_MAX_DEPTH) return 0;
        kind[i] = (unsigned char)f.kind;
        depth[i] = (unsigned char)d;
        used[i] = 0;
    }
    if (at != n) return 0;
    for (uint32_t i = 0; i + 1 < count; i++)
        if (!used[i]) return 0;
    f.num_parts = parts;
    *out = f;
    return 1;
}

/* 1 if bytes [0, length) are a well-formed clshim binary of a version this header reads
 * (magic, version, flags, length and checksum all check out, and the body keeps every
 * rule of its version), filling *out; 0 otherwise. Every length is checked against the
 * buffer before it is used. */
static inline int clshim_binary_parse(const unsigned char *bytes, size_t length, clshim_binary *out) {
    if (!bytes || length < CLSHIM_BINARY_HEADER_SIZE + CLSHIM_BINARY_TRAILER_SIZE) return 0;
    if (memcmp(bytes, CLSHIM_BINARY_MAGIC, CLSHIM_BINARY_MAGIC_SIZE) != 0) return 0;
    uint32_t version = clshim_le32(bytes + 8);
    if (version < CLSHIM_BINARY_VERSION_SOURCE || version > CLSHIM_BINARY_VERSION ||
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
        r.num_parts = 1;
    } else if (version == CLSHIM_BINARY_VERSION_TREE) {
        uint32_t parts = 0;
        if (clshim_recipe_node(b, (size_t)n, 0, &parts, &r) != (size_t)n) return 0;
        r.num_parts = parts;
    } else {
        if (!clshim_recipe_parts(b, (size_t)n, &r)) return 0;
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
