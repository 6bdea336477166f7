/* lm_internal.h - shared pieces of lm.c (scoring, sampling), lm_stats.c (statistics of
   contexts, their cache), lm_net.c (what only a difference needs) and lm_coc.c (count-of-counts).
   Not part of the public API.

   The LM reads its corpus through an ig_src (source.h): an index, or an index minus an index of
   a subset of its documents. A row of ranges then holds the index's shards, then the removed
   index's, and every count read from it is the net count, so every statistic is the one of an
   index rebuilt without the removed documents. */
#ifndef IG_LM_INTERNAL_H
#define IG_LM_INTERNAL_H

#include "source.h"

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
    ig_src src;         /* the corpus; src.fail records a negative net count (not a subset) */
    const ig_index *ix; /* src.P: ids, vocabulary and separator */
    const ig_shard **shard; /* S: the source's shards in range order (P's, then M's) */
    int S, SP, w;       /* shards in a row; P's of them; token width */
    uint32_t sep, V;
    int64_t maxc;
    ig_range *rows_a, *rows_b; /* (maxc + 2) * S ranges each: scoring / generation state */
    uint32_t *stamp_a, *stamp_b; /* V + 1 entries: distinct-left counting */
    uint32_t gen_a, gen_b;
    int64_t *cnt_a, *cnt_b; /* V + 1 entries, over a difference only: net left-token counts */
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

/* Net occurrences over a row of a difference: the index's shards add, the removed index's
   subtract (a negative count records the failure and reads as 0). */
uint64_t ig_lm_net(ig_lm *lm, const ig_range *rs);

/* Net occurrences over a row. (Over an index, the plain sum: this is on every hot path.) */
static inline uint64_t rows_total(ig_lm *lm, const ig_range *rs) {
    if (lm->src.M) return ig_lm_net(lm, rs);
    uint64_t t = 0;
    for (int s = 0; s < lm->S; s++) t += (uint64_t)(rs[s].hi - rs[s].lo);
    return t;
}

/* Occurrences in a row of both indexes together (what a scan of it costs): over an index, its
   net total `net`. */
static inline int64_t rows_gross(const ig_lm *lm, const ig_range *rs, uint64_t net) {
    return lm->src.M ? ig_src_gross(&lm->src, rs) : (int64_t)net;
}

/* Whether the removed index has occurrences in the row (only then can net counts differ from
   the index's). */
static inline int rows_removed(const ig_lm *lm, const ig_range *rs) {
    for (int s = lm->SP; s < lm->S; s++)
        if (rs[s].hi > rs[s].lo) return 1;
    return 0;
}

/* Slot of a token in dense arrays: the separator (end of document / start of document as a
   left context) maps to V, and so does any id >= V (only a corrupt tokens.bin holds one: it must
   not index past the V + 1 slots). */
static inline uint32_t lm_slot(const ig_lm *lm, uint32_t t) { return t >= lm->V ? lm->V : t; }

/* Distinct left tokens of a group of occurrences (N1+(. s)). Over an index a stamp marks a token
   seen; over a difference (cnt set) a token counts while its net occurrences in the group are
   positive, cnt holding them where the stamp is current. Occurrences may come in any order. */
typedef struct {
    uint32_t *stamp;
    int64_t *cnt; /* NULL over an index */
    uint32_t gen;
    uint64_t n;   /* tokens with a positive count */
    int neg;      /* a count fell below zero (with the index's occurrences first: not a subset) */
} lm_tally;

/* Over an index (no cnt): stamp x seen. */
static inline void tally_mark(lm_tally *t, uint32_t x) {
    if (t->stamp[x] != t->gen) {
        t->stamp[x] = t->gen;
        t->n++;
    }
}

static inline void tally_add(lm_tally *t, uint32_t x, int sign) {
    if (!t->cnt) {
        tally_mark(t, x);
        return;
    }
    int64_t c = t->stamp[x] == t->gen ? t->cnt[x] : 0;
    t->stamp[x] = t->gen;
    t->cnt[x] = c + sign;
    if (c + sign < 0) t->neg = 1;
    if (c == 0 && sign > 0) t->n++;
    else if (c == 1 && sign < 0) t->n--;
}

/* A fresh stamp value for n slots: marks "seen in this group" without clearing per group. */
static inline uint32_t lm_next_gen(uint32_t *stamp, uint32_t *gen, uint64_t n) {
    if (++*gen == 0) {
        memset(stamp, 0, (size_t)n * sizeof *stamp);
        *gen = 1;
    }
    return *gen;
}

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
uint64_t ig_lm_cont_total(ig_lm *lm, const ig_range *rs, int64_t d, int eod);
/* End of the continuing part of shard s's range r at depth d (the separator run sorts last). */
int64_t ig_lm_cont_hi(const ig_lm *lm, int s, ig_range r, int64_t d, int eod);

/* lm_net.c: over a difference (rows_removed), what the index's ranges alone cannot tell. */
/* Exactly one distinct continuation with a positive net count (end of document with eod). */
int ig_lm_single_net(ig_lm *lm, const ig_range *rs, int64_t d, int eod);
/* The continuation at net rank r (< the net continuing total) in token order: the token an
   index rebuilt without the removed documents, in one shard, holds at that rank. */
uint32_t ig_lm_token_at_net(ig_lm *lm, const ig_range *rs, int64_t d, int eod, uint64_t r);

#endif
