/* infinigram_state.h - decoding states (part of infinigram.h: include that).
 *
 * A state is the longest suffix of a context that occurs in the corpus, held as
 * ig_state_size(ix) int64 values:
 *     [suffix_len, count, lo_0, hi_0, lo_1, hi_1, ...]   (suffix-array range per shard)
 * It is plain data: copy it, cache it by context, drop it. Extending a state by one token costs
 * one narrowing of its ranges while the match grows, and a backoff search when it does not, so a
 * decoding step costs about one binary search. A state depends only on its context, never on
 * earlier calls, so rolling a context back (rejected drafts, beam reordering) only means using
 * the state of the shorter context again. Every state a call takes is checked (ranges within
 * the shards, count consistent): a forged one is IG_ERR_ARG, never a read out of bounds.
 * Every call that takes a state buffer also takes its length in int64 values (state_len: the
 * buffer's own size, not what the caller believes the index needs): a length other than
 * ig_state_size(ix) (n times it for n states) is IG_ERR_ARG, so a short buffer -- e.g. the state
 * of another index -- is never read or written past its end. Output states (out) hold as many
 * values as the input state.
 * Next-token distributions of states: ig_ntd_batch_states (infinigram_batch.h); drafts from a
 * state: infinigram_draft.h.
 */
#ifndef INFINIGRAM_STATE_H
#define INFINIGRAM_STATE_H
#ifndef INFINIGRAM_H
#error "include infinigram.h, not its area headers"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* int64 values per state: 2 + 2 * number of shards. */
int64_t ig_state_size(const ig_index *ix);
/* State of ctx[0..len) (the empty context gives suffix_len 0 and the whole corpus). */
int ig_state_init(const ig_index *ix, const uint32_t *ctx, int64_t len, int64_t *state, int64_t state_len,
                  char *err, size_t errlen);
/* State of ctx[0..len) from `state`, that of ctx[0..len-1) (len >= 1). ctx may be any tail of
   the context that holds at least suffix_len + 1 tokens. out may alias state. */
int ig_state_extend(const ig_index *ix, const int64_t *state, int64_t state_len, const uint32_t *ctx, int64_t len,
                    int64_t *out, char *err, size_t errlen);
/* P_∞(token | context) from the context's state. */
int ig_state_prob(const ig_index *ix, const int64_t *state, int64_t state_len, uint32_t token, ig_prob *out,
                  char *err, size_t errlen);
/* Batched forms (infinigram_batch.h's threads and checks): n states (n_state_values = n * ig_state_size);
   extension i appends the last token of values[offsets[i] .. offsets[i+1]) (a tail of context
   i, as for ig_state_extend). */
int ig_state_extend_batch(const ig_index *ix, const int64_t *states, int64_t n_state_values,
                          const uint32_t *values, int64_t n_values, const int64_t *offsets, int64_t n,
                          int64_t *out, int n_threads, char *err, size_t errlen);
int ig_state_prob_batch(const ig_index *ix, const int64_t *states, int64_t n_state_values, int64_t n,
                        const uint32_t *tokens, uint64_t *count, uint64_t *prompt_count, int64_t *suffix_len,
                        uint8_t *sparse, int n_threads, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* INFINIGRAM_STATE_H */
