/* source.h - the corpus a query reads: an index, or an index minus an index of a subset of its
   documents (infinigram_diff.h). Ranges over a source hold the index's shards, then the removed
   index's; a count over them is the net count (the index's minus the removed index's), which is
   the count of an index rebuilt without the removed documents. The drafts (draft.c) and the
   standalone LM (lm*.c) read their corpus through one. Not part of the public API. */
#ifndef IG_SOURCE_H
#define IG_SOURCE_H

#include "diff_internal.h"

/* An index (M == NULL), or P minus M. `fail` records what went wrong on the way (IG_ERR_ARG: a
   negative net count, M is not a subset; IG_ERR_NOMEM): the public calls turn it into their
   error (ig_src_failed). */
typedef struct {
    const ig_index *P, *M;
    int SP, ns; /* P's shards; all shards (P's, then M's) */
    int fail;
} ig_src;

static inline ig_src ig_src_of(const ig_index *P, const ig_index *M) {
    int SP = P ? P->n_shards : 1;
    return (ig_src){P, M, SP, SP + (M ? M->n_shards : 0), 0};
}

static inline const ig_shard *ig_src_shard(const ig_src *x, int i) {
    return i < x->SP ? &x->P->shards[i] : &x->M->shards[i - x->SP];
}

/* Net occurrences over the ranges (negative: M is not a subset). */
static inline int64_t ig_src_total(const ig_src *x, const ig_range *rs) {
    int64_t c = 0;
    for (int i = 0; i < x->SP; i++) c += rs[i].hi > rs[i].lo ? rs[i].hi - rs[i].lo : 0;
    for (int i = x->SP; i < x->ns; i++) c -= rs[i].hi > rs[i].lo ? rs[i].hi - rs[i].lo : 0;
    return c;
}

/* Occurrences over the ranges of both indexes together: the work a scan of them costs. */
static inline int64_t ig_src_gross(const ig_src *x, const ig_range *rs) {
    int64_t c = 0;
    for (int i = 0; i < x->ns; i++) c += rs[i].hi > rs[i].lo ? rs[i].hi - rs[i].lo : 0;
    return c;
}

/* Ranges of context + t from the context's ranges rs at depth d; the net count (0 when negative,
   which is recorded). */
static inline int64_t ig_src_extend(ig_src *x, const ig_range *rs, int64_t d, uint32_t t, ig_range *next) {
    int64_t c = (int64_t)ig_extend_ranges(x->P, rs, d, t, next);
    if (!x->M) return c;
    c -= (int64_t)ig_extend_ranges(x->M, rs + x->SP, d, t, next + x->SP);
    if (c < 0) {
        x->fail = IG_ERR_ARG;
        return 0;
    }
    return c;
}

/* Ranges of q[0..len) in every shard; the net count (0 when negative, which is recorded). */
static inline int64_t ig_src_find(ig_src *x, const uint32_t *q, int64_t len, ig_range *rs) {
    int64_t c = (int64_t)ig_find_all(x->P, q, len, rs);
    if (!x->M) return c;
    c -= (int64_t)ig_find_all(x->M, q, len, rs + x->SP);
    if (c < 0) {
        x->fail = IG_ERR_ARG;
        return 0;
    }
    return c;
}

/* The ranges of the empty context (the whole corpus). */
static inline void ig_src_full(const ig_src *x, ig_range *rs) {
    for (int i = 0; i < x->ns; i++) rs[i] = (ig_range){0, ig_src_shard(x, i)->num_tokens};
}

/* The failure a call met on the way, as its error (IG_OK: none). */
static inline int ig_src_failed(const ig_src *x, char *err, size_t errlen) {
    if (x->fail == IG_ERR_NOMEM) return ig_fail(err, errlen, IG_ERR_NOMEM, "out of memory");
    return x->fail ? ig_diff_not_subset(err, errlen) : IG_OK;
}

#endif
