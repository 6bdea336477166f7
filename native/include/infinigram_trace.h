/* infinigram_trace.h - tracing a text back to the corpus: the longest corpus match at every
 * position (creativity) and the verbatim spans a text shares with the corpus (attribution).
 * (Part of infinigram.h: include that.)
 *
 * Both take a ragged batch of texts as the batch calls do (infinigram_batch.h: text i is
 * values[offsets[i] .. offsets[i+1]), threads across texts) and cost one pass of ∞-gram states
 * over each text (about one binary search per token, as dense scoring), plus, for attribution,
 * one count per span reported.
 *
 * cancel (may be NULL), as ig_score_batch's: once another thread sets *cancel to nonzero, the
 * call stops within about a thousand tokens (or located occurrences) per thread and returns
 * IG_ERR_CANCELLED, its outputs partly written.
 *
 * Definitions, for a text x[0..m):
 *   match_len[l] = the length of the longest prefix of x[l..m) that occurs in the corpus.
 *   A candidate span starts at every l (with word_start: only where word_start[x[l]]):
 *     r = l + match_len[l];
 *     delimiters: the span may end with a delimiter but holds none before its last token
 *       (r = p + 1 for the first delimiter position p in [l, r - 1));
 *     word_start: r backs off to the largest r' in (l, r] with r' == m or word_start[x[r']]
 *       (the token after a span starts a word), or the span is empty;
 *   A candidate is reported when r - l >= min_len, count(x[l..r)) <= max_count and r is greater
 *   than the end of every span reported before it (spans are scanned by increasing l). Without
 *   delimiters and word_start, the reported spans are exactly the maximal spans of x that occur
 *   (extending one either way makes it unseen) filtered by min_len and max_count. These are the
 *   official engine's attribute() rules (infini-gram 2.6.0: delim_ids, enforce_bow with a bow-id
 *   set, min_len, max_cnt), without its miss of a match that sorts before every suffix.
 */
#ifndef INFINIGRAM_TRACE_H
#define INFINIGRAM_TRACE_H
#ifndef INFINIGRAM_H
#error "include infinigram.h, not its area headers"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* match_len[j] (aligned with values) for j in [offsets[0], offsets[n]): the longest corpus match
   starting at j inside its text. */
int ig_creativity_batch(const ig_index *ix, const uint32_t *values, int64_t n_values,
                        const int64_t *offsets, int64_t n, int64_t *match_len, int n_threads,
                        const int *cancel, char *err, size_t errlen);

typedef struct {
    int64_t min_len;           /* >= 1 */
    uint64_t max_count;        /* >= 1 */
    const uint8_t *delimiter;  /* NULL (none) or vocab_size flags: delimiter tokens */
    const uint8_t *word_start; /* NULL (no word rule) or vocab_size flags: word-start tokens */
} ig_attribute_opts;

/* Spans of every text. A text of m tokens has at most m spans; those of text i are written at
   slots offsets[i] - offsets[0] .. + n_spans[i] of the span arrays (n_values - offsets[0]
   slots suffice): start and end (positions inside the text), count, and, when lo / hi are not
   NULL, the suffix-array ranges of the span in every shard (n_shards entries per slot). */
int ig_attribute_batch(const ig_index *ix, const uint32_t *values, int64_t n_values,
                       const int64_t *offsets, int64_t n, const ig_attribute_opts *opts,
                       int64_t *n_spans, int64_t *span_l, int64_t *span_r, uint64_t *span_count,
                       int64_t *lo, int64_t *hi, int n_threads, const int *cancel, char *err,
                       size_t errlen);

/* Occurrences of ranges: for range k (lo / hi: n_shards entries each, as ig_attribute_batch
   writes them), its first `max_per` occurrences in shard order, suffix-array order inside a
   shard, as (shard, document inside the shard, offset inside the document) at slots
   k * max_per .. + n_out[k]. */
int ig_locate_ranges(const ig_index *ix, const int64_t *lo, const int64_t *hi, int64_t n_ranges,
                     int64_t max_per, int32_t *shard, int64_t *doc, int64_t *offset, int64_t *n_out,
                     const int *cancel, char *err, size_t errlen);

/* Tokens [begin, end) of document `doc` of `shard`, clamped to the document: *len_out tokens
   written to out[0..cap) and *begin_out = the clamped begin (IG_ERR_CAPACITY if cap is short). */
int ig_doc_window(const ig_index *ix, int shard, int64_t doc, int64_t begin, int64_t end,
                  uint32_t *out, int64_t cap, int64_t *begin_out, int64_t *len_out, char *err,
                  size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* INFINIGRAM_TRACE_H */
