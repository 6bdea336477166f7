/* mix_step.c - one decoding step of the processor's mixture, in one call (infinigram_mixing.h:
   ig_mix_step_f32): the two λs, a learned two-way model, or a model mixing several orders.

   It is the composition of public calls, nothing new in the arithmetic: the levels' suffixes
   (ig_ntd_batch_tails), their entries ready to mix (ig_ntd_batch_probs), the weights
   (ig_mixing_weights, ig_mixing_lambdas, or the two λs) and the mixture (ig_mix_sum_f32). The
   Python path makes the same calls with numpy between them (infinigram_hf.hf.processor); at
   batch 1 those dozens of small numpy and cffi calls cost more than the work, so the step is
   fused here. */
#include <stdlib.h>

#include "common.h"

/* A level's suffix length for a longest match of L tokens (-1: the level does not exist, its
   length would not be below L): rule -1 is L - 1, -2 is ⌊L/2⌋, k >= 1 is k
   (infinigram_hf.lm.orders.level_lengths). */
static int64_t level_length(int64_t rule, int64_t L) {
    int64_t m = rule == -1 ? L - 1 : rule == -2 ? L / 2 : rule;
    return m >= 0 && m < L ? m : -1;
}

typedef struct { /* every array the step allocates, freed together */
    int64_t *which, *lengths, *pair_level, *item, *tok, *row, *tok_all; /* which: each pair's row */
    double *prob, *totals, *level_count, *weights, *w_model, *val, *total_used;
    uint8_t *active;
} step_arrays;

static void free_arrays(step_arrays *a) {
    free(a->which), free(a->lengths), free(a->pair_level), free(a->item), free(a->tok), free(a->tok_all);
    free(a->row), free(a->prob), free(a->totals), free(a->level_count), free(a->weights), free(a->w_model);
    free(a->val), free(a->total_used), free(a->active);
}

static int64_t count_of(const uint32_t *t, const uint64_t *c, int64_t lo, int64_t hi, uint32_t tok) {
    for (int64_t k = lo; k < hi; k++)
        if (t[k] == tok) return (int64_t)c[k];
    return 0;
}

int ig_mix_step_f32(const ig_index *ix, const ig_mixing_net *net, double lambda_sparse, double lambda_dense,
                    const int64_t *rows, int64_t n_rows, int64_t width, const int64_t *offsets, const uint32_t *tokens,
                    const uint64_t *counts, int64_t n_entries, const uint64_t *total, const int64_t *suffix_len,
                    const uint8_t *sparse, int64_t min_effective_n, int64_t n_levels, const int64_t *level_rules,
                    int64_t separator, int64_t eos, float *logp, int64_t vocab, char *err, size_t errlen) {
    if (n_rows < 0 || n_levels < 0 || n_levels > 64 || !offsets || !total || !suffix_len || !sparse ||
        (n_entries > 0 && (!tokens || !counts)) || n_entries < 0)
        return ig_fail(err, errlen, IG_ERR_ARG, "ig_mix_step_f32: a negative size, more than 64 levels, or a NULL array");
    if (n_levels > 0 && (!ix || !net || !level_rules || (n_rows > 0 && !rows)))
        return ig_fail(err, errlen, IG_ERR_ARG, "ig_mix_step_f32: levels need an open index, a net, rules and the rows");
    if (!net && !(lambda_sparse >= 0.0 && lambda_sparse <= 1.0 && lambda_dense >= 0.0 && lambda_dense <= 1.0))
        return ig_fail(err, errlen, IG_ERR_ARG, "ig_mix_step_f32: the two λs must be in [0, 1], got %g and %g",
                       lambda_sparse, lambda_dense);
    if (separator < 0 || separator > (int64_t)UINT32_MAX)
        return ig_fail(err, errlen, IG_ERR_ARG, "ig_mix_step_f32: separator %lld is not a token id", (long long)separator);
    if (eos >= vocab)
        return ig_fail(err, errlen, IG_ERR_ARG, "ig_mix_step_f32: eos %lld is outside the rows' %lld columns",
                       (long long)eos, (long long)vocab);
    for (int64_t j = 0; j < n_levels; j++)
        if (level_rules[j] < -2 || level_rules[j] == 0)
            return ig_fail(err, errlen, IG_ERR_ARG, "ig_mix_step_f32: unknown level rule %lld", (long long)level_rules[j]);
    if (offsets[0] < 0 || offsets[n_rows] > n_entries)
        return ig_fail(err, errlen, IG_ERR_ARG, "ig_mix_step_f32: offsets outside [0, %lld]", (long long)n_entries);
    for (int64_t i = 0; i < n_rows; i++)
        if (offsets[i] > offsets[i + 1])
            return ig_fail(err, errlen, IG_ERR_ARG, "ig_mix_step_f32: offsets decrease at row %lld", (long long)i);
    const int64_t k_out = 2 + n_levels, sep = separator;
    size_t n1 = n_rows > 0 ? (size_t)n_rows : 1, pairs_max = n1 * (size_t)(n_levels > 0 ? n_levels : 1);
    step_arrays a = {0};
    a.which = malloc(pairs_max * sizeof(int64_t));
    a.lengths = malloc(pairs_max * sizeof(int64_t));
    a.pair_level = malloc(pairs_max * sizeof(int64_t));
    a.totals = malloc(pairs_max * sizeof(double));
    a.level_count = calloc(pairs_max, sizeof(double));
    a.weights = malloc(n1 * (size_t)k_out * sizeof(double));
    a.w_model = malloc(n1 * sizeof(double));
    a.total_used = malloc(n1 * sizeof(double));
    a.active = malloc(n1);
    if (!a.which || !a.lengths || !a.pair_level || !a.totals || !a.level_count || !a.weights ||
        !a.w_model || !a.total_used || !a.active) {
        free_arrays(&a);
        return ig_fail(err, errlen, IG_ERR_NOMEM, "ig_mix_step_f32: out of memory");
    }
    /* the rows that mix: an estimate after end-of-document handling (dropped without an EOS id),
       from a context long enough for min_effective_n (the processor's _entries and _active) */
    for (int64_t i = 0; i < n_rows; i++) {
        int64_t t = (int64_t)total[i];
        if (eos < 0) t -= count_of(tokens, counts, offsets[i], offsets[i + 1], (uint32_t)sep);
        a.total_used[i] = (double)t;
        a.active[i] = suffix_len[i] + 1 >= min_effective_n && t > 0;
    }
    /* every (row, level) that exists, and all their suffixes in one batch */
    int64_t n_pairs = 0;
    for (int64_t i = 0; i < n_rows; i++)
        for (int64_t j = 0; j < n_levels && a.active[i]; j++) {
            int64_t m = level_length(level_rules[j], suffix_len[i]);
            if (m < 0) continue;
            a.which[n_pairs] = i, a.lengths[n_pairs] = m, a.pair_level[n_pairs++] = j;
        }
    int64_t n_level_entries = 0;
    int rc = IG_OK;
    if (n_pairs) {
        ig_ntd_batch *b = NULL;
        rc = ig_ntd_batch_tails(ix, rows, n_rows, width, a.which, a.lengths, n_pairs, IG_NTD_NGRAM, 0, 0, 0, &b,
                                err, errlen);
        if (rc == IG_OK) {
            int64_t m = ig_ntd_batch_entries(b);
            size_t m1 = m > 0 ? (size_t)m : 1;
            a.item = malloc(m1 * sizeof(int64_t));
            a.tok = malloc(m1 * sizeof(int64_t));
            a.prob = malloc(m1 * sizeof(double));
            rc = a.item && a.tok && a.prob
                     ? ig_ntd_batch_probs(b, sep, eos, a.item, a.tok, a.prob, m, &n_level_entries, a.totals, err, errlen)
                     : ig_fail(err, errlen, IG_ERR_NOMEM, "ig_mix_step_f32: out of memory");
        }
        ig_ntd_batch_free(b);
        for (int64_t p = 0; rc == IG_OK && p < n_pairs; p++)
            a.level_count[a.which[p] * n_levels + a.pair_level[p]] = a.totals[p];
    }
    if (rc == IG_OK && n_levels > 0) {
        rc = ig_mixing_weights(net, n_rows, offsets, counts, n_entries, total, suffix_len, sparse, a.active, n_levels,
                               a.level_count, a.weights, err, errlen);
    } else if (rc == IG_OK) { /* λ per row: the net's (ig_mixing_lambdas), or the two λs by sparsity */
        if (net)
            rc = ig_mixing_lambdas(net, n_rows, offsets, counts, n_entries, total, suffix_len, sparse, a.active,
                                   a.w_model, err, errlen);
        for (int64_t i = 0; rc == IG_OK && i < n_rows; i++) {
            double lam = !a.active[i] ? 0.0 : net ? a.w_model[i] : sparse[i] ? lambda_sparse : lambda_dense;
            a.weights[2 * i] = 1.0 - lam, a.weights[2 * i + 1] = lam;
        }
    }
    /* the mixture's entries: the ∞-gram's (end-of-document given to eos or dropped; a real eos
       entry and the moved one add up in the mixture) and the levels' */
    int64_t m_all = (offsets[n_rows] - offsets[0]) + n_level_entries, k = 0;
    size_t mm = m_all > 0 ? (size_t)m_all : 1;
    if (rc == IG_OK) {
        a.row = malloc(mm * sizeof(int64_t));
        a.val = malloc(mm * sizeof(double));
        a.tok_all = malloc(mm * sizeof(int64_t));
        if (!a.row || !a.val || !a.tok_all) {
            rc = ig_fail(err, errlen, IG_ERR_NOMEM, "ig_mix_step_f32: out of memory");
        } else {
            for (int64_t i = 0; i < n_rows; i++) {
                a.w_model[i] = a.weights[i * k_out];
                if (!a.active[i] || a.weights[i * k_out + 1] == 0.0) continue; /* (no mass to add) */
                const double scale = a.weights[i * k_out + 1] / a.total_used[i];
                for (int64_t e = offsets[i]; e < offsets[i + 1]; e++) {
                    int64_t t = tokens[e];
                    if (t == sep) {
                        if (eos < 0) continue;
                        t = eos;
                    }
                    a.row[k] = i, a.tok_all[k] = t, a.val[k++] = (double)counts[e] * scale;
                }
            }
            for (int64_t e = 0; e < n_level_entries; e++) {
                int64_t p = a.item[e], i = a.which[p];
                a.row[k] = i, a.tok_all[k] = a.tok[e], a.val[k++] = a.weights[i * k_out + 2 + a.pair_level[p]] * a.prob[e];
            }
            rc = ig_mix_sum_f32(logp, n_rows, vocab, k, a.row, a.tok_all, a.val, a.w_model, err, errlen);
        }
    }
    free_arrays(&a);
    return rc;
}
