/* find_many.h - many suffix-array searches at once, interleaved so that their cache misses
   overlap (internal).
 *
 * One binary search is a chain of dependent loads (suffix-array entry, then the token it points
 * to), each a likely cache miss on a large index: alone it runs at the latency of memory. The
 * searches of a batch are independent, so ig_find_many keeps IG_FIND_LANES of them in flight and
 * advances them round-robin, prefetching each one's next load before turning to the others: the
 * misses of different searches overlap, and a batch runs at the rate the memory system can serve
 * independent misses instead of one at a time.
 *
 * Answers are exactly ig_find_in_shard's (query.c), empty ranges included (they sit where the
 * query would be inserted).
 */
#ifndef IG_FIND_MANY_H
#define IG_FIND_MANY_H

#include "query_internal.h"

/* Searches kept in flight; enough to cover memory latency with the few loads each one issues
   per step, small enough that all their state stays in L1. */
#ifndef IG_FIND_LANES
#define IG_FIND_LANES 16
/* ig_extend_ranges for n rows at once: row i's ranges rs[i * n_shards ..] (its context, of
   length ds[i]) extended by ts[i] into next[i * n_shards ..]; counts[i] their total. */
void ig_extend_many(const ig_index *ix, const ig_range *rs, const int64_t *ds, const uint32_t *ts, int64_t n,
                    ig_range *next, uint64_t *counts);

#endif

typedef struct {
    const uint32_t *q; /* the query's ids (checked by the caller) */
    int64_t len;
} ig_query;

/* out[i * stride] = ig_find_in_shard(s, w, qs[i].q, qs[i].len) for i in [0, n). */
void ig_find_many(const ig_shard *s, int w, const ig_query *qs, int64_t n, ig_range *out, int64_t stride);

/* The same over all shards: out[i * ix->n_shards + shard]; counts (may be NULL) gets each
   query's total over shards. */
void ig_find_many_all(const ig_index *ix, const ig_query *qs, int64_t n, ig_range *out, uint64_t *counts);

/* ig_extend_ranges for n rows at once: row i's ranges rs[i * n_shards ..] (its context, of
   length ds[i]) extended by ts[i] into next[i * n_shards ..]; counts[i] their total. */
void ig_extend_many(const ig_index *ix, const ig_range *rs, const int64_t *ds, const uint32_t *ts, int64_t n,
                    ig_range *next, uint64_t *counts);

#endif
