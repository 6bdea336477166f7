/* ntd_batch.h - internal pieces shared by batch.c, ntd_batch.c and state.c. */
#ifndef IG_NTD_BATCH_H
#define IG_NTD_BATCH_H

#include "query_internal.h"

/* Check a ragged batch: offsets within [0, n_values] and non-decreasing, ids valid. `what`
   names the queries in messages ("prompts[3]: id ..."). */
int ig_check_batch(const ig_index *ix, const uint32_t *values, int64_t n_values, const int64_t *offsets,
                int64_t n, const char *what, char *err, size_t errlen);

/* Load a decoding state into per-shard ranges (checked: lengths and ranges in bounds, count
   consistent); returns its suffix length, or a negative error code. */
int64_t ig_state_load(const ig_index *ix, const int64_t *state, ig_range *rs, const char *what, char *err,
                   size_t errlen);
void ig_state_store(const ig_index *ix, int64_t suffix_len, const ig_range *rs, int64_t *state);

#endif
