/* sais.h - linear-time suffix-array construction (SA-IS induced sorting), internal to the core.
 *
 * Each function fills SA[0..n) with the starting positions of all suffixes of T[0..n) in
 * lexicographic order: tokens compare as unsigned numbers and a suffix that is a prefix of a
 * longer one sorts first (a virtual sentinel smaller than every symbol ends the text).
 *
 *   T, SA  must be non-NULL (even when n == 0) and must not overlap.
 *   n      0 <= n <= INT32_MAX - 1.
 *   K      alphabet bound: every T[i] < K (checked).
 *
 * Returns IG_OK (0) on success, IG_ERR_ARG on a bad argument (n out of range, NULL pointer, a
 * symbol >= K, a width other than 1, 2, 4), IG_ERR_NOMEM when memory runs out (infinigram.h).
 * Never writes outside SA[0..n) and its own allocations; keeps no global state, so concurrent
 * calls on different buffers are safe. On Linux, large T and SA are advised into transparent
 * huge pages (madvise; contents untouched, failures ignored). With more than one CPU and one
 * of them idle (load average), texts of 2^20 symbols or more get a second thread: the stage-3
 * passes and the plain stage-1 passes run block by block on two threads, the placement split
 * between them; the naming passes get a thread that fetches symbols ahead
 * (INFINIGRAM_SAIS_THREADS=1 / =2 turns it off / on whatever the load). The result is the
 * same either way.
 *
 * Extra memory beyond SA, in bytes (details at the top of sais.c), Ke = max symbol + 1:
 *   u8 / u16: <= max(2n, 512 KiB); typically < 0.1n on text, ~1.2n on i.i.d. Zipf tokens.
 *   u32:      <= max(2n, 4*Ke, 512 KiB), plus 4n when Ke > max(n, 65536) (alphabet remap).
 *   Two threads: + 512 KiB of block cache while a pass runs.
 */
#ifndef IG_SAIS_H
#define IG_SAIS_H

#include <stdint.h>

#include "infinigram.h" /* IG_OK, IG_ERR_* */

#ifdef __cplusplus
extern "C" {
#endif

int ig_sais_u8 (const uint8_t  *T, int32_t *SA, int64_t n, uint32_t K);
int ig_sais_u16(const uint16_t *T, int32_t *SA, int64_t n, uint32_t K);
int ig_sais_u32(const uint32_t *T, int32_t *SA, int64_t n, uint32_t K);
/* Told that SA[lo..hi) holds its final values (ranges come in decreasing order, cover [0, n)
   once, each at most 2^22 long except the last); the callee may read them, not write. */
typedef void (*ig_sais_progress_fn)(void *ctx, int64_t lo, int64_t hi);

/* ig_sais_u8/16/32 for w = 1, 2, 4, calling done (if not NULL) as the last pass finalizes SA
   from its end, so the caller can write the first ranges out while the rest is computed. */
int ig_sais_final(const void *T, int w, int32_t *SA, int64_t n, uint32_t K, ig_sais_progress_fn done,
                  void *ctx);

/* Tests only: ig_sais_final with paths forced at every level: mode 1 = no per-bucket arrays
   beyond the pointers and counts, 2 = names by comparing substrings (as for texts of 2^30
   symbols or more), 3 = a second thread on every pass with tiny blocks, frequent reports,
   4 = modes 2 and 3 together (every induction pass block-parallel); the output is the same. */
int ig_sais_mode(const void *T, int w, int32_t *SA, int64_t n, uint32_t K, int mode, ig_sais_progress_fn done,
                 void *ctx);

#ifdef __cplusplus
}
#endif

#endif /* IG_SAIS_H */
