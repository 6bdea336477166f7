/* infinigram_mixing.h - mixing the ∞-gram into a model's next-token log-probabilities on the CPU:
 * learned mixing weights (issue 20) and the sparse mixture itself. (Part of infinigram.h: include
 * that.)
 *
 * ig_mixing_lambdas: λ of every row of a batch of ∞-gram next-token distributions, from a small
 * network over the row's ∞-gram features, in one call.
 *
 * A decoding step at batch 1 spends more on dispatching a dozen tiny numpy operations (the
 * features, then each layer) than on the arithmetic; this call does the same work in one pass.
 * It computes exactly what the package's numpy path computes (infinigram_hf.hf.mixing.HostMixing):
 *
 *   feature of row i, by code (its distribution is counts[offsets[i] .. offsets[i+1])):
 *     IG_MIX_SPARSE             sparse[i] (0 or 1)
 *     IG_MIX_LOG_EFFECTIVE_N    ln(max(suffix_len[i] + 1, 1))
 *     IG_MIX_LOG_CONTEXT_COUNT  ln(1 + total[i])
 *     IG_MIX_LOG_NUM_DISTINCT   ln(1 + offsets[i+1] - offsets[i])
 *     IG_MIX_TOP_PROB           max count / max(total[i], 1)  (0 for an empty row)
 *   h_0 = the features; h_{l+1} = W_l h_l + b_l, tanh between layers (not after the last);
 *   λ_i = σ(h_L) (one output) where active[i], else 0.
 *
 * Standardisation, if any, is folded into the first layer by the caller.
 *
 * ig_mixing_weights: the same for a model mixing several orders: the net reads the coded features
 * and then, per level, ln(1 + the count of the level's suffix), and its 2 + levels outputs are the
 * logits of a softmax over the components (the model, the ∞-gram, each level), taken over the
 * components a row has (the numpy twin: MixingModel.weights_from_inputs).
 */
#ifndef INFINIGRAM_MIXING_H
#define INFINIGRAM_MIXING_H
#ifndef INFINIGRAM_H
#error "include infinigram.h, not its area headers"
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define IG_MIX_SPARSE 0
#define IG_MIX_LOG_EFFECTIVE_N 1
#define IG_MIX_LOG_CONTEXT_COUNT 2
#define IG_MIX_LOG_NUM_DISTINCT 3
#define IG_MIX_TOP_PROB 4

typedef struct {
    int64_t n_inputs;       /* coded features: codes[0 .. n_inputs), each an IG_MIX_* above */
    const int32_t *codes;
    int64_t n_layers;       /* >= 1 */
    const int64_t *widths;  /* n_layers + 1 widths: widths[0] = n_inputs (+ n_levels for
                               ig_mixing_weights), widths[n_layers] = 1 (λ) or K (weights) */
    const double *params;   /* layer by layer: its weight (out x in, row-major), then its bias (out) */
} ig_mixing_net;

/* λ of n rows into lambda_out[0 .. n). offsets: n + 1 non-decreasing entries within
   [0, n_entries] (the rows' CSR offsets into counts); sparse and active: 0/1 per row.
   IG_ERR_ARG for a malformed net or offsets (nothing written), IG_ERR_NOMEM. */
int ig_mixing_lambdas(const ig_mixing_net *net, int64_t n, const int64_t *offsets, const uint64_t *counts,
                      int64_t n_entries, const uint64_t *total, const int64_t *suffix_len,
                      const uint8_t *sparse, const uint8_t *active, double *lambda_out,
                      char *err, size_t errlen);

/* Mixture weights of n rows into weights_out (n x (2 + n_levels), row-major). Row i's inputs are
   its coded features then ln(1 + max(level_count[i·n_levels + j], 0)) for each level j; its
   weights are the softmax of the net's outputs over the components it has: the model always,
   the ∞-gram where active[i], level j where active[i] and level_count[i·n_levels + j] > 0 (0
   elsewhere; an inactive row gets [1, 0, ...] without running the net). The net must end at
   2 + n_levels outputs. Offsets etc. as for ig_mixing_lambdas.
   IG_ERR_ARG for a malformed net or offsets (nothing written), IG_ERR_NOMEM. */
int ig_mixing_weights(const ig_mixing_net *net, int64_t n, const int64_t *offsets, const uint64_t *counts,
                      int64_t n_entries, const uint64_t *total, const int64_t *suffix_len, const uint8_t *sparse,
                      const uint8_t *active, int64_t n_levels, const double *level_count, double *weights_out,
                      char *err, size_t errlen);

/* The mixture log((1 - λ_r)·p + e^{logv_k}) in place in logp, n_rows rows of `width` float
   log-probabilities (row-major): every row r is shifted by shift[r] = ln(1 - λ_r) (0: unchanged),
   and entry k, at (row[k], tok[k]), becomes logaddexp(original + shift[row[k]], logv[k]); an entry
   whose original value is -inf (a token forbidden before) stays -inf. The m entries name distinct
   (row, token) pairs. IG_ERR_ARG (nothing written) for a row or token out of range, IG_ERR_NOMEM. */
int ig_mix_sparse_f32(float *logp, int64_t n_rows, int64_t width, int64_t m, const int64_t *row,
                      const int64_t *tok, const double *logv, const double *shift, char *err, size_t errlen);

/* A mixture of several components in place in logp (n_rows rows of `width` floats): cell (r, t)
   becomes log(w_model[r]·e^{logp[r, t]} + Σ val[k] over the entries k at (r, t)) -- entries may
   repeat a cell (one per component: their masses add up) -- and stays -inf where it was -inf.
   val are probability masses (already weighted), w_model in [0, 1]. Only the entries' cells pay
   for an exp and a log (vectorized, within 3e-7 of libm's; libm itself where a value is below
   e^-87 or a mass below FLT_MIN); every other cell of a row is shifted by ln w_model. IG_ERR_ARG (nothing
   written) for an entry out of range or a negative mass, IG_ERR_NOMEM. */
int ig_mix_sum_f32(float *logp, int64_t n_rows, int64_t width, int64_t m, const int64_t *row,
                   const int64_t *tok, const double *val, const double *w_model, char *err, size_t errlen);

/* One decoding step of the processor's mixture, in place in logp (n_rows rows of `vocab` floats),
   in one call. Given each row's ∞-gram distribution as the index gives it (CSR, as for
   ig_mixing_lambdas, with its tokens; end-of-document listed under `separator`), it computes
   what these calls compute one after the other:
     - a row mixes when suffix_len[i] + 1 >= min_effective_n and its total is above 0 after
       end-of-document is handled: given to the id eos, or, when eos < 0, dropped and the row
       renormalized;
     - the weights of the model and the ∞-gram, and of each level:
         n_levels = 0, net NULL: the two λs, λ = lambda_sparse where sparse[i], else lambda_dense;
         n_levels = 0, a net: λ from ig_mixing_lambdas;
         n_levels > 0 (up to 64): ig_mixing_weights over the rows' distributions and the levels'
           counts. Level j of a row that mixes is the fixed-n distribution of its last m ids in
           rows (n_rows x width) -- m from level_rules[j] and L = suffix_len[i]: -1 gives L - 1,
           -2 gives ⌊L/2⌋, k >= 1 gives k; the level exists when 0 <= m < L (ig_ntd_batch_tails
           on the open index ix, then ig_ntd_batch_probs);
     - the mixture: ig_mix_sum_f32 of the ∞-gram's entries (weight 1, or λ) and the levels'
       (weight 2 + j), the model's share weight 0 (or 1 − λ).
   ix and rows are read only for levels. IG_ERR_ARG (nothing written) for malformed arguments, λs
   outside [0, 1], an eos outside the rows, ids outside the vocabulary in a level's suffix or
   entries outside logp; IG_ERR_NOMEM. */
int ig_mix_step_f32(const ig_index *ix, const ig_mixing_net *net, double lambda_sparse, double lambda_dense,
                    const int64_t *rows, int64_t n_rows, int64_t width, const int64_t *offsets,
                    const uint32_t *tokens, const uint64_t *counts, int64_t n_entries, const uint64_t *total,
                    const int64_t *suffix_len, const uint8_t *sparse, int64_t min_effective_n, int64_t n_levels,
                    const int64_t *level_rules, int64_t separator, int64_t eos, float *logp, int64_t vocab,
                    char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* INFINIGRAM_MIXING_H */
