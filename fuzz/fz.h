/* fz.h - what the fuzz targets (fuzz/fuzz_*.c) share: a byte reader that never runs out
 * (exhausted input reads as zeros) and the invariant check that aborts. Corpora, the temporary
 * directory and the brute-force references are the C tests' too: native/tests/reference.h.
 *
 * Everything is header-only (static functions) so that each target is one translation unit plus
 * the engine's sources; see fuzz/build.sh.
 */
#ifndef FZ_H
#define FZ_H

#include "reference.h"

/* A failed invariant: print and abort, so libFuzzer (or the standalone driver) saves the input. */
#define FZ_CHECK(cond, ...)                                                          \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "fuzz invariant failed at %s:%d: %s\n  ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                            \
            fputc('\n', stderr);                                                     \
            abort();                                                                 \
        }                                                                            \
    } while (0)

/* ------------------------------------------------------------------ input reader */

typedef struct {
    const uint8_t *p;
    size_t n, i;
} fz_in;

static inline int fz_more(const fz_in *in) { return in->i < in->n; }
static inline uint8_t fz_u8(fz_in *in) { return in->i < in->n ? in->p[in->i++] : 0; }
/* Little-endian; the low part is read first in its own statement (the two operands of `|` may
   be evaluated in either order: gcc read these lengths byte-swapped, so no seed of the open
   target opened in gcc builds). */
static inline uint16_t fz_u16(fz_in *in) { uint16_t lo = fz_u8(in); return (uint16_t)(lo | (fz_u8(in) << 8)); }
static inline uint32_t fz_u32(fz_in *in) { uint32_t lo = fz_u16(in); return lo | ((uint32_t)fz_u16(in) << 16); }
static inline uint64_t fz_u64(fz_in *in) { uint64_t lo = fz_u32(in); return lo | ((uint64_t)fz_u32(in) << 32); }

/* A "length" or "index": mostly small, sometimes anything (negative and huge included). */
static inline int64_t fz_len(fz_in *in, int64_t small) {
    uint8_t k = fz_u8(in);
    if (k < 240) return small > 0 ? (int64_t)(k % (uint8_t)(small < 255 ? small + 1 : 255)) : 0;
    switch (k & 7) {
    case 0: return -1;
    case 1: return -(int64_t)fz_u32(in);
    case 2: return (int64_t)fz_u64(in);
    case 3: return INT64_MAX;
    case 4: return INT64_MIN;
    default: return (int64_t)fz_u16(in);
    }
}

/* A token id: mostly inside a small alphabet so n-grams occur, sometimes anything. */
static inline uint32_t fz_tok(fz_in *in, uint32_t vocab) {
    uint8_t k = fz_u8(in);
    if (k < 200) return (uint32_t)(k % 8) % vocab;
    if (k < 240) return (uint32_t)fz_u16(in) % vocab;
    if (k < 250) return fz_u32(in);
    return vocab - 1 + (k & 3); /* the edge: last id, vocab, vocab + 1 (maybe the separator) */
}

/* A double: mostly reasonable, sometimes NaN, infinities, negatives, huge. */
static inline double fz_double(fz_in *in) {
    uint8_t k = fz_u8(in);
    if (k < 200) return (double)k / 100.0;
    uint64_t bits = fz_u64(in);
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

#endif
