/* query_internal.h - range primitives of query.c shared by the other query files (batch calls,
   document search, smoothing). Not part of the public API. */
#ifndef IG_QUERY_INTERNAL_H
#define IG_QUERY_INTERNAL_H

#include "common.h"

typedef struct {
    int64_t lo, hi;
} ig_range;

/* Per-call scratch for per-shard ranges: on the stack for the usual few shards. */
#define IG_STACK_SHARDS 16
typedef struct {
    ig_range stack[3 * IG_STACK_SHARDS];
    ig_range *a, *b, *c;
    ig_range *heap;
} ig_scratch;

int ig_scratch_init(ig_scratch *sc, int n, char *err, size_t errlen);
void ig_scratch_free(ig_scratch *sc);

/* ValueError-style check of query ids (`what` names the argument in the message). */
int ig_check_ids(const ig_index *ix, const uint32_t *q, int64_t len, const char *what, char *err, size_t errlen);

/* Token at depth d of the suffix ranked r. */
static inline uint32_t tok_rank(const ig_shard *s, int w, int64_t r, int64_t d) {
    return ig_tok(s, w, ig_sa(s, r) + d);
}

/* Sub-range of r (all sharing a prefix of length d) continuing with t / with q[0..m). */
ig_range ig_narrow1(const ig_shard *s, int w, ig_range r, int64_t d, uint32_t t);
ig_range ig_narrow(const ig_shard *s, int w, ig_range r, int64_t d, const uint32_t *q, int64_t m);
ig_range ig_first_token_range(const ig_shard *s, int w, uint32_t t);
ig_range ig_find_in_shard(const ig_shard *s, int w, const uint32_t *q, int64_t len);
/* Ranges of context + t in every shard from the context's ranges rs at depth d (the whole
   corpus at depth 0 takes the unigram table); returns their total count. */
uint64_t ig_extend_ranges(const ig_index *ix, const ig_range *rs, int64_t d, uint32_t t, ig_range *next);
/* Ranges of q in every shard (out has n_shards entries); returns the total count. */
uint64_t ig_find_all(const ig_index *ix, const uint32_t *q, int64_t len, ig_range *out);

/* Distinct next tokens at depth d over a range, with counts (returns how many; writes <= cap). */
int64_t ig_walk_range(const ig_shard *s, int w, ig_range r, int64_t d, uint32_t *toks, uint64_t *cnts, int64_t cap);
/* Sort (toks, cnts)[0..n) by token, adding up equal tokens: the new length (-1: out of memory). */
int64_t ig_sort_merge_tc(uint32_t *toks, uint64_t *cnts, int64_t n);
/* The same summed over shards. */
int ig_ntd_ranges(const ig_index *ix, const ig_range *rs, int64_t d, uint32_t *toks, uint64_t *cnts,
               int64_t cap, int64_t *n_out, char *err, size_t errlen);

/* Longest suffix (<= max_len) of p[0..len) with a non-zero count; its ranges land in best. */
int64_t ig_longest_suffix(const ig_index *ix, const uint32_t *p, int64_t len, int64_t max_len, ig_range *best,
                       ig_range *tmp);
int ig_is_sparse(const ig_index *ix, const ig_range *rs, int64_t d);
/* count(context + token) / count(context) from the context's ranges at depth d. */
void ig_prob_from_ranges(const ig_index *ix, const ig_range *rs, int64_t d, uint32_t token, ig_range *next,
                      ig_prob *out);
/* Dense scoring of ids[begin..end) given ids[0..begin) (outputs indexed like ids; sparse may be
   NULL); sc holds three range arrays of n_shards. IG_OK, or IG_ERR_CANCELLED once *cancel (may
   be NULL) is set by another thread. */
int ig_score_span(const ig_index *ix, const uint32_t *ids, int64_t begin, int64_t end, uint64_t *num,
               uint64_t *den, int64_t *suffix_len, uint8_t *sparse, ig_scratch *sc, const int *cancel);

#endif
