/* batch_internal.h - what batch.c shares with the other batch calls (state.c, ntd_batch.c): the
   check of a ragged batch, where a row's context comes from, and the probability worker. Not
   part of the public API (the batch conventions: infinigram_batch.h). */
#ifndef IG_BATCH_INTERNAL_H
#define IG_BATCH_INTERNAL_H

#include "query_internal.h"

/* Check a ragged batch: offsets within [0, n_values] and non-decreasing, ids valid. `what`
   names the queries in messages ("prompts[3]: id ..."). */
int ig_check_batch(const ig_index *ix, const uint32_t *values, int64_t n_values, const int64_t *offsets,
                   int64_t n, const char *what, char *err, size_t errlen);

/* The contexts of a batch's rows: decoding states (states != NULL: ig_state_size values each),
   or queries values[offsets[i] .. offsets[i+1]) taken whole (infinite = 0) or by their longest
   occurring suffix (infinite = 1). */
typedef struct {
    const int64_t *states;
    const uint32_t *values;
    const int64_t *offsets;
    int infinite;
} ig_rows;

/* The ranges of row i's context into rs (tmp: scratch of as many); returns its length. The
   rows must have been checked (ig_check_batch, ig_check_states). */
int64_t ig_row_ranges(const ig_index *ix, const ig_rows *rows, int64_t i, ig_range *rs, ig_range *tmp);

/* P(tokens[i] | context of row i) for n checked rows (tokens checked too), spread over
   n_threads threads as the batch calls do; sparse may be NULL. */
int ig_prob_rows(const ig_index *ix, const ig_rows *rows, int64_t n, const uint32_t *tokens, uint64_t *count,
                 uint64_t *prompt_count, int64_t *suffix_len, uint8_t *sparse, int n_threads, char *err,
                 size_t errlen);

#endif
