/* infinigram_batch.h - many queries in one call (part of infinigram.h: include that).
 *
 * Query i of a batch is values[offsets[i] .. offsets[i+1]): `offsets` has n + 1 non-decreasing
 * entries inside [0, n_values] (a ragged batch: one flat array plus offsets, as numpy holds it).
 * The loop over queries runs in C, spread over `n_threads` threads (0 = automatic: as many as
 * the CPUs this process may run on, fewer for small batches; 1 = the calling thread only;
 * k > 1 = up to k threads). Every id is checked before any work starts; the message names the
 * query and the position of a bad one. Results are identical whatever the number of threads.
 * The batched forms of decoding states follow the same rules (infinigram_state.h).
 */
#ifndef INFINIGRAM_BATCH_H
#define INFINIGRAM_BATCH_H
#ifndef INFINIGRAM_H
#error "include infinigram.h, not its area headers"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Threads an automatic n_threads = 0 would use at most (CPUs this process may run on). */
int ig_cpu_count(void);

/* counts[i] = occurrences of query i. */
int ig_count_batch(const ig_index *ix, const uint32_t *values, int64_t n_values,
                   const int64_t *offsets, int64_t n, uint64_t *counts, int n_threads, char *err,
                   size_t errlen);

/* P(tokens[i] | query i): ∞-gram (backoff to the longest occurring suffix) when infinite != 0,
   else fixed n = len + 1. Outputs have n entries; sparse may be NULL. */
int ig_prob_batch(const ig_index *ix, const uint32_t *values, int64_t n_values,
                  const int64_t *offsets, int64_t n, const uint32_t *tokens, int infinite,
                  uint64_t *count, uint64_t *prompt_count, int64_t *suffix_len, uint8_t *sparse,
                  int n_threads, char *err, size_t errlen);

/* Dense scoring of every query: outputs are aligned with `values` (n_values entries); entry j
   of query i (j in offsets[i] .. offsets[i+1]) is about values[j] given the query's earlier
   tokens. Entries outside [offsets[0], offsets[n]) are left untouched. Long queries are split
   into pieces scored in parallel (each piece starts from the exact state at its start). Time is
   linear in the tokens scored, whatever the corpus. cancel (may be NULL): once another thread
   sets *cancel to nonzero, the call stops within about a thousand tokens per thread and returns
   IG_ERR_CANCELLED (the outputs are then partly written). */
int ig_score_batch(const ig_index *ix, const uint32_t *values, int64_t n_values,
                   const int64_t *offsets, int64_t n, uint64_t *num, uint64_t *den,
                   int64_t *suffix_len, uint8_t *sparse, int n_threads, const int *cancel,
                   char *err, size_t errlen);

/* Next-token distributions of a batch, computed and held in C until copied out: run (from
   queries, or from decoding states), then size the outputs from ig_ntd_batch_entries, copy, free.
   Nothing is ever computed twice and no buffer can overflow.
   mode: IG_NTD_INFGRAM (longest occurring suffix of each query), IG_NTD_NGRAM (the whole query).
   max_support: 0 = exact. Otherwise a context with more than max_support occurrences that is
   not precomputed is sampled at a fixed stride (counts are estimates that still add up to the
   total) and its row is flagged approximate.
   max_entries: a cap on the batch's size (0 = none). A row holds up to vocab_size + 1 entries,
   so a batch of short contexts can ask for rows x vocabulary of them; once the rows computed
   hold more than max_entries entries in all, the run stops with IG_ERR_LIMIT. */
typedef struct ig_ntd_batch ig_ntd_batch;
#define IG_NTD_NGRAM 0
#define IG_NTD_INFGRAM 1
int ig_ntd_batch_run(const ig_index *ix, const uint32_t *values, int64_t n_values, const int64_t *offsets,
                     int64_t n, int mode, int64_t max_support, int64_t max_entries, int n_threads,
                     ig_ntd_batch **out, char *err, size_t errlen);
/* The same (∞-gram) for n decoding states (n_state_values = n * ig_state_size(ix) values). */
int ig_ntd_batch_states(const ig_index *ix, const int64_t *states, int64_t n_state_values, int64_t n,
                        int64_t max_support, int64_t max_entries, int n_threads, ig_ntd_batch **out, char *err,
                        size_t errlen);
/* The same (fixed n or ∞-gram) for n suffixes of the rows of a (n_rows x width) int64 matrix:
   query i is the last lengths[i] ids of row which[i] (the levels of a decoding step's rows,
   without gathering them first). Ids outside the vocabulary are refused (IG_ERR_ARG). */
int ig_ntd_batch_tails(const ig_index *ix, const int64_t *rows, int64_t n_rows, int64_t width,
                       const int64_t *which, const int64_t *lengths, int64_t n, int mode,
                       int64_t max_support, int64_t max_entries, int n_threads, ig_ntd_batch **out,
                       char *err, size_t errlen);
int64_t ig_ntd_batch_rows(const ig_ntd_batch *b);
int64_t ig_ntd_batch_entries(const ig_ntd_batch *b);
/* Rows as CSR: row i's distinct next tokens (increasing ids) and counts are
   tokens/counts[row_offsets[i] .. row_offsets[i+1]) (row_offsets: rows + 1 entries). Per row:
   the suffix length used, total = count of that suffix, sparse (exactly one distinct next
   token), approximate (sampled). Any per-row output may be NULL. IG_ERR_CAPACITY when cap is
   below ig_ntd_batch_entries. */
int ig_ntd_batch_copy(const ig_ntd_batch *b, int64_t *row_offsets, uint32_t *tokens,
                      uint64_t *counts, int64_t cap, int64_t *suffix_len, uint64_t *total,
                      uint8_t *sparse, uint8_t *approximate, char *err, size_t errlen);
/* The rows as the (row, token, probability) entries a mixture adds up (ig_mix_sum_f32), with
   P = count / the row's total and end-of-document (listed under `separator`) given to the id
   eos -- merged with eos's own entry when eos is also a real next token of the row -- or, when
   eos < 0, dropped and the row renormalized over its real tokens. Rows come in order, each
   row's tokens in increasing ids (eos where end-of-document was). totals (rows values, may be
   NULL): each row's total after that (0: no entries). *n_out: the entries written, at most
   ig_ntd_batch_entries; IG_ERR_CAPACITY when cap is below that. */
int ig_ntd_batch_probs(const ig_ntd_batch *b, int64_t separator, int64_t eos, int64_t *rows,
                       int64_t *tokens, double *probs, int64_t cap, int64_t *n_out, double *totals,
                       char *err, size_t errlen);
void ig_ntd_batch_free(ig_ntd_batch *b);

#ifdef __cplusplus
}
#endif

#endif /* INFINIGRAM_BATCH_H */
