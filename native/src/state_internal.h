/* state_internal.h - decoding states inside the core (state.c), for the batch and draft code.
   Not part of the public API (the layout of a state: infinigram_state.h). */
#ifndef IG_STATE_INTERNAL_H
#define IG_STATE_INTERNAL_H

#include "query_internal.h"
#include "backoff.h"

/* A state buffer of `got` int64 values where the call needs `want` (ig_state_size, or n times it):
   anything else is IG_ERR_ARG, so that no caller's short buffer is read or written past its end.
   `what` names the buffer, `of` what its states belong to ("index", "difference"). */
int ig_check_state_len(int64_t got, int64_t want, const char *what, const char *of, char *err, size_t errlen);

/* Load a decoding state into per-shard ranges (checked: lengths and ranges in bounds, count
   consistent); returns its suffix length, or a negative error code. `what` names it in messages. */
int64_t ig_state_load(const ig_index *ix, const int64_t *state, ig_range *rs, const char *what, char *err,
                      size_t errlen);
void ig_state_store(const ig_index *ix, int64_t suffix_len, const ig_range *rs, int64_t *state);
/* The start of a call on one state of state_len values: scratch for ix's shards, the state
   checked (its length too) and loaded into sc->a (its suffix length returned). On failure the
   negative code, with nothing left to free. */
int64_t ig_state_begin(const ig_index *ix, const int64_t *state, int64_t state_len, ig_scratch *sc, char *err,
                       size_t errlen);

/* Check n states (n_state_values int64 values: exactly n * ig_state_size) up front, so that
   workers never fail on them (messages name states[i]); with values, also that context i
   (values[offsets[i] .. offsets[i+1])) holds the state's matched suffix plus the new token. */
int ig_check_states(const ig_index *ix, const int64_t *states, int64_t n_state_values, int64_t n,
                    const uint32_t *values, const int64_t *offsets, char *err, size_t errlen);

/* One token of a decoding state: *cur holds the ranges of the matched suffix (length l) of
   ctx[0..len-1), afterwards those of ctx[0..len): one narrowing by ctx[len-1] while the match
   grows, else a back-off (backoff.h; tmp is scratch, *memo its memo for the whole call). Returns
   the new suffix length; *cur and *next (scratch of as many ranges) may be swapped. */
int64_t ig_state_step(const ig_index *ix, const uint32_t *ctx, int64_t len, int64_t l, ig_range **cur,
                      ig_range **next, ig_range *tmp, ig_lce_memo **memo);

#endif
