/* infinigram_lm.h - the standalone ∞-gram language model's hot loops (scoring, smoothing,
 * sampling), on top of the engine (part of infinigram.h: include that).
 *
 * Everything here walks the forward suffix array only. For every position of a text the
 * ranges of ALL suffixes of its context (lengths 0..max_context) are kept, one row per length:
 * appending a token narrows row L into row L+1 (the range of ctx_L + token is a sub-range of
 * ctx_L's range), so one pass over a text yields every count the methods need.
 *
 * Kneser-Ney continuation counts N1+(. s) (the number of distinct tokens seen just left of s)
 * are exact: they are counted over the occurrences of s (left token = the token before each
 * occurrence; the start of a document counts as one more distinct left context) and cached per
 * string in the ig_lm handle. No reversed index is needed.
 *
 * An ig_lm handle holds scratch memory and that cache: one handle per thread.
 * End of document: with `eod` set, an occurrence that ends its document continues with "end of
 * document" (reported as token id vocab_size in dense distributions, and the separator id in
 * generated output); without it such occurrences are ignored (the post's counting).
 *
 * Over a difference (ig_diff_lm_new, ig_diff_lm_count_of_counts: an index minus an index of a
 * subset of its documents, infinigram_diff.h) every count, continuation count and count-of-counts
 * is the net one, so every call answers as over an index rebuilt without the removed documents
 * (sampling by rank: as that index in one shard). A negative net count met on the way (the
 * removed index is not a subset) fails the call with IG_ERR_ARG.
 */
#ifndef INFINIGRAM_LM_H
#define INFINIGRAM_LM_H
#ifndef INFINIGRAM_H
#error "include infinigram.h, not its area headers"
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define IG_LM_INFGRAM 0 /* the ∞-gram: counts of the longest suffix that continues */
#define IG_LM_BACKOFF 1 /* selective back-off interpolation (levels mixed with decay^i) */
#define IG_LM_SMOOTH 2  /* interpolated Kneser-Ney family (see ig_lm_smooth) */

#define IG_LM_NSTAT 14 /* columns of ig_lm_levels rows */

typedef struct ig_lm ig_lm;

/* Smoothing: for context lengths L = 0..Lmax (Lmax = longest suffix of the context, at most
   max_depth, that has a continuation), starting from the uniform distribution:
     p_L(w) = (max(c_L(w) - D_L(c_L(w)), 0) + (theta_L + d1_L n1 + d2_L n2 + d3_L n3) p_{L-1}(w))
              / (B_L + theta_L)
   c_L(w) is the continuation count N1+(. ctx_L w) (or the raw count cnt(ctx_L w) at raw
   levels), B_L their sum over w, n1/n2/n3 the number of w with c = 1, 2, >= 3, and
   D(c) = d1, d2, d3 for c = 1, 2, >= 3 (0 for c = 0). Witten-Bell instead uses
   p_L(w) = (c_L(w) + T_L p_{L-1}(w)) / (B_L + T_L), T_L = number of distinct w. */
typedef struct {
    int64_t max_depth;   /* longest context used: order - 1 for fixed-order KN */
    int raw_top;         /* the level at depth max_depth uses raw counts (fixed-order KN) */
    int raw_all;         /* every level uses raw counts (absolute discounting) */
    int witten_bell;     /* Witten-Bell instead of discounting (discounts, theta ignored) */
    int64_t n_params;    /* entries in d1, d2, d3, theta (>= 1); deeper levels use the last */
    const double *d1;
    const double *d2;
    const double *d3;
    const double *theta;
} ig_lm_smooth;

typedef struct {
    int method;          /* IG_LM_INFGRAM, IG_LM_BACKOFF or IG_LM_SMOOTH */
    int64_t max_context; /* contexts are cut to their last max_context tokens */
    int eod;             /* end of document is a continuation (see above) */
    int k;               /* back-off: levels to mix (<= 0: all) */
    double decay;        /* back-off: level i (0 = longest) weighs decay^i, on raw counts */
    double floor;        /* scoring: a probability below this is reported as this (0: off) */
    ig_lm_smooth smooth; /* IG_LM_SMOOTH only */
} ig_lm_config;

typedef struct {
    int greedy;          /* argmax (smallest id on ties) */
    double temperature;  /* > 0; 1 = unchanged */
    int64_t top_k;       /* keep the k most likely (0 = off) */
    double top_p;        /* keep the smallest set with this much mass (>= 1 = off) */
} ig_lm_sampling;

/* A handle for `ix` (which must outlive it). max_context caps every config's max_context and
   max_depth; cache_entries caps the continuation-count cache, which grows as it fills
   (0 = default, 2^18 entries). */
int ig_lm_new(ig_lm **out, const ig_index *ix, int64_t max_context, int64_t cache_entries,
              char *err, size_t errlen);
/* The same over plus minus minus (see above); both must outlive the handle. */
int ig_diff_lm_new(ig_lm **out, const ig_index *plus, const ig_index *minus, int64_t max_context,
                   int64_t cache_entries, char *err, size_t errlen);
void ig_lm_free(ig_lm *lm);
/* Drop cached statistics (they never go stale: an index is read-only). */
void ig_lm_clear_cache(ig_lm *lm);

/* prob[i] = P(ids[i] | ids[0..i)) for i in [0, n), the context cut to cfg->max_context.
   suffix_len[i] (may be NULL): length of the longest context suffix used (back-off: that of
   level 0; 0 when there is no level). sparse[i] (may be NULL): that context has exactly one
   distinct continuation. Back-off with no level scores 0 (then floored). */
int ig_lm_score(ig_lm *lm, const ig_lm_config *cfg, const uint32_t *ids, int64_t n,
                double *prob, int64_t *suffix_len, uint8_t *sparse, char *err, size_t errlen);

/* The per-level statistics behind every method, for positions [begin, end) of ids (context
   = ids[0..i) cut to max_depth). One row of IG_LM_NSTAT int64 per (position, level L = 0..Lmax):
     0 position i, 1 L, 2 raw total (continuations of ctx_L), 3 raw cnt(ctx_L ids[i]),
     4 distinct continuations, 5/6/7 of them seen once / twice / 3+ times,
     8 sum of continuation counts B, 9 N1+(. ctx_L ids[i]), 10 distinct continuations,
     11/12/13 of them with continuation count 1 / 2 / 3+.
   Columns 8..13 are computed only with `with_cont` (else 0). Writes whole positions while
   they fit in cap rows: *rows_out rows, *next_pos the first position not written. */
int ig_lm_levels(ig_lm *lm, const uint32_t *ids, int64_t n, int64_t begin, int64_t end,
                 int64_t max_depth, int eod, int with_cont, int64_t *out, int64_t cap,
                 int64_t *rows_out, int64_t *next_pos, char *err, size_t errlen);

/* Dense next-token distribution after ctx: probs has vocab_size + 1 entries, the last being
   end of document (0 without eod). Back-off with no level (and ∞-gram on an empty index)
   falls back to the unigram. Sums to 1. */
int ig_lm_distribution(ig_lm *lm, const ig_lm_config *cfg, const uint32_t *ctx, int64_t n,
                       double *probs, char *err, size_t errlen);

/* Sample up to max_new tokens after ctx. rng: 4 words of xoshiro256** state, advanced in
   place (so generating in chunks gives the same tokens as in one call). Stops after a token of
   stop_ids (kept in out) or at end of document (not kept; *ended = 1; *ended = 2 for a stop
   id, 0 otherwise). Per token, suffix_len / matches (may be NULL): depth and count of the
   longest context level used. With plain sampling (temperature 1, no top-k / top-p) ∞-gram and
   back-off draw a uniform suffix-array rank inside a range: exact, nothing materialised. */
int ig_lm_generate(ig_lm *lm, const ig_lm_config *cfg, const ig_lm_sampling *smp,
                   const uint32_t *ctx, int64_t n_ctx, int64_t max_new, uint64_t *rng,
                   const uint32_t *stop_ids, int64_t n_stop, uint32_t *out, int64_t *suffix_len,
                   uint64_t *matches, int64_t *n_out, int *ended, char *err, size_t errlen);

/* Count-of-counts over the whole index for n = 1..max_n: raw[(n-1)*kmax + (k-1)] = number of
   distinct n-grams occurring exactly k times (k = 1..kmax), cont[...] = number of n-grams g
   with N1+(. g) = k. types[n-1] (may be NULL) = distinct n-grams. O(tokens * max_n). */
int ig_lm_count_of_counts(const ig_index *ix, int64_t max_n, int64_t kmax, uint64_t *raw,
                          uint64_t *cont, uint64_t *types, char *err, size_t errlen);
/* The same on the net counts of plus minus minus. */
int ig_diff_lm_count_of_counts(const ig_index *plus, const ig_index *minus, int64_t max_n, int64_t kmax,
                               uint64_t *raw, uint64_t *cont, uint64_t *types, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* INFINIGRAM_LM_H */
