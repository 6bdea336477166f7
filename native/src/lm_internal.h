/* lm_internal.h - shared pieces of lm.c (scoring, sampling) and lm_stats.c (statistics of
   contexts, their cache, count-of-counts). Not part of the public API. */
#ifndef IG_LM_INTERNAL_H
#define IG_LM_INTERNAL_H

#include "query_internal.h"

/* Ranges at most this large are handled by linear scans and never cached. */
#define LM_TINY 16

/* What one context string s knows about its continuations (end of document kept apart so
   that both counting conventions derive from one entry). */
typedef struct {
    uint64_t total;     /* occurrences of s followed by a token */
    uint64_t ctotal;    /* sum over tokens w of N1+(. s w) */
    uint64_t sep_raw;   /* occurrences of s that end their document */
    uint64_t sep_cont;  /* distinct left tokens of those */
    uint64_t nleft;     /* N1+(. s) */
    uint32_t types, r1, r2, r3; /* distinct w; with cnt(s w) = 1, 2, >= 3 */
    uint32_t c1, c2, c3;        /* w with N1+(. s w) = 1, 2, >= 3 */
} lm_stats;

typedef struct {
    int64_t lo;
    int32_t depth; /* -1: empty slot */
    int32_t shard;
    int32_t flags; /* LM_HAVE_* */
    lm_stats st;
} lm_centry;

#define LM_HAVE_NLEFT 1
#define LM_HAVE_STATS 2

/* Memo of narrowings of large ranges (the short contexts that recur at every position). */
typedef struct {
    int64_t lo, hi;   /* the range narrowed (hi = 0: empty slot) */
    int64_t d;
    uint32_t t;
    int32_t shard;
    ig_range out;
} lm_nmemo;

#define LM_NMEMO_BITS 14
#define LM_NMEMO_MIN 256 /* ranges at least this large are memoised */

struct ig_lm {
    const ig_index *ix;
    int S, w;
    uint32_t sep, V;
    int64_t maxc;
    ig_range *rows_a, *rows_b; /* (maxc + 2) * S ranges each: scoring / generation state */
    uint32_t *stamp_a, *stamp_b; /* V + 1 entries: distinct-left counting */
    uint32_t gen_a, gen_b;
    lm_centry *cache;
    int64_t cache_cap, cache_used, cache_max; /* the table doubles (emptied) up to cache_max */
    double *dense;      /* V + 1: materialised distributions */
    uint32_t *idx;      /* V + 1: indices for sorting */
    int64_t *cursor, *cursor2; /* S each: merged follower walks (two, as walks nest) */
    ig_range *child, *child2;  /* S each */
    lm_nmemo *nmemo;    /* 2^LM_NMEMO_BITS entries */
    int64_t *lv_L;      /* maxc + 1: back-off levels (context length, continuations) */
    uint64_t *lv_T;
};

/* Range row L of a (maxc + 2) x S table. */
static inline ig_range *lm_row(const ig_lm *lm, ig_range *rows, int64_t L) { return rows + L * lm->S; }

static inline uint64_t rows_total(const ig_lm *lm, const ig_range *rs) {
    uint64_t t = 0;
    for (int s = 0; s < lm->S; s++) t += (uint64_t)(rs[s].hi - rs[s].lo);
    return t;
}

/* Slot of a token in dense arrays: the separator (end of document / start of document as a
   left context) maps to V, and so does any id >= V (only a corrupt tokens.bin holds one: it must
   not index past the V + 1 slots). */
static inline uint32_t lm_slot(const ig_lm *lm, uint32_t t) { return t >= lm->V ? lm->V : t; }

/* lm_stats.c */
int ig_lm_cache_init(ig_lm *lm, int64_t entries);
/* Stats of the string whose ranges are rs at depth d (cached when large). */
void ig_lm_context_stats(ig_lm *lm, const ig_range *rs, int64_t d, lm_stats *out);
/* N1+(. s) for the string whose ranges are rs (depth d). */
uint64_t ig_lm_nleft(ig_lm *lm, const ig_range *rs, int64_t d);
/* Next distinct continuation token of rs at depth d (merged over shards), advancing cursor
   (S entries, set to the range starts first); its sub-ranges land in child (S entries). */
int ig_lm_next_follower(const ig_lm *lm, const ig_range *rs, int64_t d, int64_t *cursor,
                     ig_range *child, uint32_t *tok);
/* Occurrences in rs (depth d) that continue; end-of-document ones only with eod. */
uint64_t ig_lm_cont_total(const ig_lm *lm, const ig_range *rs, int64_t d, int eod);
/* End of the continuing part of shard s's range r at depth d (the separator run sorts last). */
int64_t ig_lm_cont_hi(const ig_lm *lm, int s, ig_range r, int64_t d, int eod);

#endif
