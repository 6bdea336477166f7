/* ntd_cache.h - precomputed next-token distributions of short, frequent contexts (internal).
 *
 * A shard may carry ntdcache.bin: the exact distributions of the 1- to 3-token contexts whose
 * walk over run boundaries would be expensive (many distinct next tokens in a large range).
 * The writer computes them in one pass over the suffix array; queries look them up by
 * (depth, range) and fall back to walking when a context is not there. The file is optional:
 * an index without it answers the same, only slower for those contexts.
 *
 * Frequent contexts are stored as well, whatever their walk costs: narrowing one by a token is
 * then a binary search in its entries (a few KB, cache-resident) instead of in the suffix array.
 *
 * Layout after the 64-byte header (magic "IGHF-NTC", width 32, count = contexts,
 * aux1 = entries, aux2 = min_count: every context of depth 1..3 with at least that many
 * occurrences is stored):
 *   count records  {int64 depth, lo, hi, first_entry}   sorted by (depth, lo)
 *   aux1 entries   {uint32 token, uint32 start}          each context's next tokens in increasing
 *                                                        order; start = its first rank - lo, so a
 *                                                        count is the next start - this start
 */
#ifndef IG_NTD_CACHE_H
#define IG_NTD_CACHE_H

#include "query_internal.h"

#define IG_NTC_FILE "ntdcache.bin"
#define IG_NTC_MAX_DEPTH IG_NTC_DEPTHS /* 3 (common.h) */
/* Default: cache a context when walking it would take about this many suffix-array probes. */
#define IG_NTC_DEFAULT_MIN_COST 2048
/* ... and every context occurring at least this often (see the header's aux2). */
#define IG_NTC_MIN_COUNT(min_cost) (2 * (min_cost))

/* Write dir/ntdcache.bin for a shard being finished: `view` holds its tokens (total_len set),
   sa its first n_tok suffix-array ranks. min_cost <= 0 writes nothing. */
int ig_ntc_write(const ig_shard *view, int width, const int32_t *sa, int64_t n_tok, int64_t min_cost,
                 const char *dir, char *err, size_t errlen);

/* Map and validate ntdcache.bin of the shard directory dirfd (named `dir` in messages) into s
   (num_tokens already set) if present (absent is fine). O(records): the records must be sorted by
   (depth, lo) with disjoint ranges per depth, and are found by binary search (a hash table
   here once let crafted keys make open quadratic). */
int ig_ntc_open(ig_shard *s, int dirfd, const char *dir, int width, uint32_t vocab, char *err, size_t errlen);
void ig_ntc_close(ig_shard *s);

/* The cached entries of the context whose range at depth d is r, as *n (token, start) uint32
   pairs; NULL when it is not cached. */
const uint32_t *ig_ntc_find(const ig_shard *s, int64_t d, ig_range r, int64_t *n);
/* Entries -> (token, count) lists (writes min(n, cap)); returns n. */
int64_t ig_ntc_copy(const uint32_t *e, int64_t n, ig_range r, uint32_t *toks, uint64_t *cnts, int64_t cap);
/* Narrow the cached context r (depth d) by token t into *out; 0 when r is not cached. An empty
   result sits where t would be inserted. */
int ig_ntc_narrow(const ig_shard *s, int64_t d, ig_range r, uint32_t t, ig_range *out);

/* ig_ntc_narrow in steps, for many lookups interleaved (find_many.c): prefetch what ig_ntc_find
   reads first (the bucket, then the record it points to), call ig_ntc_find, search its entries
   for the first one with token >= t (at a, 0 <= a <= n), and ig_ntc_pick gives the range. */
void ig_ntc_prefetch_bucket(const ig_shard *s, int64_t d, ig_range r);
void ig_ntc_prefetch_record(const ig_shard *s, int64_t d, ig_range r);
void ig_ntc_pick(const uint32_t *e, int64_t n, int64_t a, ig_range r, uint32_t t, ig_range *out);

#endif
