/* infinigram_diff.h - index difference (the paper's subtractive property, Sec. 3 / App. A.3):
 * answers for "plus minus minus", where `minus` indexes a subset of the documents of `plus`
 * (e.g. documents to remove without re-indexing). Every count is cnt_plus - cnt_minus; the
 * ∞-gram backs off to the longest suffix whose NET count is positive; the sparse flag and the
 * next-token distributions are those of the net counts. Each of plus / minus may itself be a
 * union of several shards or index directories. Drafts over a difference: ig_diff_draft_*
 * (infinigram_draft.h). (Part of infinigram.h: include that.)
 *
 * The subset property cannot be checked cheaply in full: ig_diff_check compares the unigram
 * counts (O(vocab)), and any query that meets a negative net count fails with IG_ERR_ARG
 * ("not a subset") instead of answering.
 */
#ifndef INFINIGRAM_DIFF_H
#define INFINIGRAM_DIFF_H
#ifndef INFINIGRAM_H
#error "include infinigram.h, not its area headers"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Same token width and vocabulary; every token's count in minus <= its count in plus; no more
   documents in minus than in plus. */
int ig_diff_check(const ig_index *plus, const ig_index *minus, char *err, size_t errlen);

int ig_diff_count(const ig_index *plus, const ig_index *minus, const uint32_t *q, int64_t len,
                  uint64_t *count, char *err, size_t errlen);
/* Net next-token distribution after q (same contract as ig_ntd; tokens with net count 0 are
   left out). */
int ig_diff_ntd(const ig_index *plus, const ig_index *minus, const uint32_t *q, int64_t len,
                uint32_t *tokens, uint64_t *counts, int64_t cap, int64_t *n_out, uint64_t *total,
                char *err, size_t errlen);
int ig_diff_infgram_suffix(const ig_index *plus, const ig_index *minus, const uint32_t *prompt,
                           int64_t len, int64_t *suffix_len, char *err, size_t errlen);
int ig_diff_infgram_prob(const ig_index *plus, const ig_index *minus, const uint32_t *prompt,
                         int64_t len, uint32_t token, ig_prob *out, char *err, size_t errlen);
int ig_diff_ngram_prob(const ig_index *plus, const ig_index *minus, const uint32_t *prompt,
                       int64_t len, uint32_t token, ig_prob *out, char *err, size_t errlen);
/* Dense scoring with net counts (same contract as ig_score; linear in n whatever the corpus).
   cancel (may be NULL): once another thread sets *cancel, returns IG_ERR_CANCELLED. */
int ig_diff_score(const ig_index *plus, const ig_index *minus, const uint32_t *ids, int64_t n,
                  uint64_t *num, uint64_t *den, int64_t *suffix_len, uint8_t *sparse,
                  const int *cancel, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* INFINIGRAM_DIFF_H */
