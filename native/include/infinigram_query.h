/* infinigram_query.h - one query at a time, answered exactly (part of infinigram.h: include
 * that). Many queries at once: infinigram_batch.h; a context that grows token by token:
 * infinigram_state.h.
 */
#ifndef INFINIGRAM_QUERY_H
#define INFINIGRAM_QUERY_H
#ifndef INFINIGRAM_H
#error "include infinigram.h, not its area headers"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Suffix-array range [lo[s], hi[s]) of the n-gram in every shard s (arrays of n_shards). */
int ig_find(const ig_index *ix, const uint32_t *q, int64_t len, int64_t *lo, int64_t *hi,
            char *err, size_t errlen);
int ig_count(const ig_index *ix, const uint32_t *q, int64_t len, uint64_t *count, char *err,
             size_t errlen);
/* count of q, or a negative IG_ERR_* code (call ig_count for the message). No output buffers:
   the cheapest call from Python. */
int64_t ig_count_fast(const ig_index *ix, const uint32_t *q, int64_t len);

/* Next-token distribution after the n-gram q (fixed n = len + 1). Writes up to `cap` distinct
   next tokens in increasing id order with their counts; an occurrence that ends its document
   is counted under the separator id (last, as it is the largest id). *n_out = number written,
   *total = count of q. With cap too small returns IG_ERR_CAPACITY and *n_out = entries needed.
   vocab_size + 1 entries always suffice. (Many contexts, or the ∞-gram's: ig_ntd_batch_run.) */
int ig_ntd(const ig_index *ix, const uint32_t *q, int64_t len, uint32_t *tokens,
           uint64_t *counts, int64_t cap, int64_t *n_out, uint64_t *total, char *err,
           size_t errlen);

/* ∞-gram: the longest suffix of the prompt with a non-zero count (0 = empty suffix, which
   gives the unigram over all tokens). */
int ig_infgram_suffix(const ig_index *ix, const uint32_t *prompt, int64_t len,
                      int64_t *suffix_len, char *err, size_t errlen);
/* P_∞(token | prompt): backs off to the longest suffix of the prompt that occurs. */
int ig_infgram_prob(const ig_index *ix, const uint32_t *prompt, int64_t len, uint32_t token,
                    ig_prob *out, char *err, size_t errlen);
/* Fixed-n probability (no backoff): suffix_len = len. */
int ig_ngram_prob(const ig_index *ix, const uint32_t *prompt, int64_t len, uint32_t token,
                  ig_prob *out, char *err, size_t errlen);

/* Dense scoring: for every position i of ids[0..n), P_∞(ids[i] | ids[0..i)) as the pair
   num[i] / den[i], the suffix length (effective n - 1) and the sparse flag. Amortized: about
   one narrowing search per token. Outputs are arrays of n entries (sparse may be NULL). */
int ig_score(const ig_index *ix, const uint32_t *ids, int64_t n, uint64_t *num, uint64_t *den,
             int64_t *suffix_len, uint8_t *sparse, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* INFINIGRAM_QUERY_H */
