/* mixing.c - the CPU side of mixing (infinigram_mixing.h): learned mixing weights of a batch of
   rows (the features and a small tanh network, row by row, in one call; the numpy twin:
   infinigram_hf.hf.mixing.HostMixing), and the sparse mixture into float32 log-probabilities
   (the torch twin: infinigram_hf.hf.mixing.mix_sparse on other devices). */
#include <math.h>
#include <stdlib.h>

#include "common.h"

/* The net's shape is checked before anything is written: widths chain, the input codes are
   known, the last layer has one output. Returns the widest layer (> 0) or IG_ERR_ARG. */
static int64_t check_net(const ig_mixing_net *net, char *err, size_t errlen) {
    if (!net || net->n_inputs < 1 || net->n_layers < 1 || !net->codes || !net->widths || !net->params)
        return ig_fail(err, errlen, IG_ERR_ARG, "mixing net: no inputs, no layers or a NULL array");
    if (net->widths[0] != net->n_inputs || net->widths[net->n_layers] != 1)
        return ig_fail(err, errlen, IG_ERR_ARG, "mixing net: widths must start at n_inputs (%lld) and end at 1",
                       (long long)net->n_inputs);
    int64_t widest = 0;
    for (int64_t l = 0; l <= net->n_layers; l++) {
        if (net->widths[l] < 1 || net->widths[l] > (1 << 20))
            return ig_fail(err, errlen, IG_ERR_ARG, "mixing net: layer width %lld out of range",
                           (long long)net->widths[l]);
        if (net->widths[l] > widest) widest = net->widths[l];
    }
    for (int64_t j = 0; j < net->n_inputs; j++)
        if (net->codes[j] < IG_MIX_SPARSE || net->codes[j] > IG_MIX_TOP_PROB)
            return ig_fail(err, errlen, IG_ERR_ARG, "mixing net: unknown feature code %d", (int)net->codes[j]);
    return widest;
}

static double feature(int32_t code, int64_t lo, int64_t hi, const uint64_t *counts, uint64_t total,
                      int64_t suffix_len, uint8_t sparse) {
    switch (code) {
    case IG_MIX_SPARSE: return sparse ? 1.0 : 0.0;
    case IG_MIX_LOG_EFFECTIVE_N: return log(fmax((double)suffix_len + 1.0, 1.0));
    case IG_MIX_LOG_CONTEXT_COUNT: return log1p((double)total);
    case IG_MIX_LOG_NUM_DISTINCT: return log1p((double)(hi - lo));
    default: { /* IG_MIX_TOP_PROB */
        uint64_t top = 0;
        for (int64_t k = lo; k < hi; k++)
            if (counts[k] > top) top = counts[k];
        return hi > lo ? (double)top / fmax((double)total, 1.0) : 0.0;
    }
    }
}

int ig_mixing_lambdas(const ig_mixing_net *net, int64_t n, const int64_t *offsets, const uint64_t *counts,
                      int64_t n_entries, const uint64_t *total, const int64_t *suffix_len,
                      const uint8_t *sparse, const uint8_t *active, double *lambda_out,
                      char *err, size_t errlen) {
    int64_t widest = check_net(net, err, errlen);
    if (widest < 0) return (int)widest;
    if (n < 0 || n_entries < 0 || !offsets || !total || !suffix_len || !sparse || !active || !lambda_out ||
        (n_entries > 0 && !counts))
        return ig_fail(err, errlen, IG_ERR_ARG, "ig_mixing_lambdas: a negative size or a NULL array");
    if (offsets[0] < 0 || offsets[n] > n_entries)
        return ig_fail(err, errlen, IG_ERR_ARG, "ig_mixing_lambdas: offsets outside [0, %lld]", (long long)n_entries);
    for (int64_t i = 0; i < n; i++)
        if (offsets[i] > offsets[i + 1])
            return ig_fail(err, errlen, IG_ERR_ARG, "ig_mixing_lambdas: offsets decrease at row %lld", (long long)i);
    double *a = malloc(2 * (size_t)widest * sizeof(double));
    if (!a) return ig_fail(err, errlen, IG_ERR_NOMEM, "ig_mixing_lambdas: out of memory");
    double *b = a + widest;
    for (int64_t i = 0; i < n; i++) {
        if (!active[i]) {
            lambda_out[i] = 0.0;
            continue;
        }
        for (int64_t j = 0; j < net->n_inputs; j++)
            a[j] = feature(net->codes[j], offsets[i], offsets[i + 1], counts, total[i], suffix_len[i], sparse[i]);
        const double *p = net->params;
        double *in = a, *out = b;
        for (int64_t l = 0; l < net->n_layers; l++) {
            int64_t w_in = net->widths[l], w_out = net->widths[l + 1];
            const double *bias = p + w_out * w_in;
            for (int64_t o = 0; o < w_out; o++) {
                double s = bias[o];
                for (int64_t k = 0; k < w_in; k++) s += p[o * w_in + k] * in[k];
                out[o] = l < net->n_layers - 1 ? tanh(s) : s;
            }
            p = bias + w_out;
            double *t = in;
            in = out;
            out = t;
        }
        lambda_out[i] = 0.5 + 0.5 * tanh(0.5 * in[0]); /* σ(z) without overflow */
    }
    free(a);
    return IG_OK;
}

/* ln(e^a + e^b) without overflow; -inf + -inf stays -inf */
static double log_add_exp(double a, double b) {
    double hi = a > b ? a : b, lo = a > b ? b : a;
    if (isinf(hi) && hi < 0) return hi;
    return hi + log1p(exp(lo - hi));
}

/* The checks both mixtures make before writing anything: sizes, pointers, every entry inside
   the rows, and (mass given) no negative mass. IG_OK or IG_ERR_ARG with a message naming `fn`. */
static int check_entries(const char *fn, const float *logp, int64_t n_rows, int64_t width, int64_t m,
                         const int64_t *row, const int64_t *tok, const double *values, const double *per_row,
                         int mass, char *err, size_t errlen) {
    if (n_rows < 0 || width < 0 || m < 0 || (n_rows > 0 && (!logp || !per_row)) || (m > 0 && (!row || !tok || !values)))
        return ig_fail(err, errlen, IG_ERR_ARG, "%s: a negative size or a NULL array", fn);
    for (int64_t k = 0; k < m; k++)
        if (row[k] < 0 || row[k] >= n_rows || tok[k] < 0 || tok[k] >= width || (mass && !(values[k] >= 0.0)))
            return ig_fail(err, errlen, IG_ERR_ARG, "%s: entry %lld at (%lld, %lld) is outside the %lld x %lld rows%s",
                           fn, (long long)k, (long long)row[k], (long long)tok[k], (long long)n_rows,
                           (long long)width, mass ? " or has a negative mass" : "");
    return IG_OK;
}

int ig_mix_sparse_f32(float *logp, int64_t n_rows, int64_t width, int64_t m, const int64_t *row,
                      const int64_t *tok, const double *logv, const double *shift, char *err, size_t errlen) {
    int rc = check_entries("ig_mix_sparse_f32", logp, n_rows, width, m, row, tok, logv, shift, 0, err, errlen);
    if (rc != IG_OK) return rc;
    /* the entries' mixed values first (they read the unshifted rows), then the shift, then the writes */
    float *mixed = malloc((m > 0 ? (size_t)m : 1) * sizeof(float));
    if (!mixed) return ig_fail(err, errlen, IG_ERR_NOMEM, "ig_mix_sparse_f32: out of memory");
    for (int64_t k = 0; k < m; k++) {
        float orig = logp[row[k] * width + tok[k]];
        mixed[k] = isinf(orig) && orig < 0 ? orig : (float)log_add_exp((double)orig + shift[row[k]], logv[k]);
    }
    for (int64_t r = 0; r < n_rows; r++) {
        if (shift[r] == 0.0) continue;
        float s = (float)shift[r], *p = logp + r * width;
        for (int64_t j = 0; j < width; j++) p[j] += s;
    }
    for (int64_t k = 0; k < m; k++) logp[row[k] * width + tok[k]] = mixed[k];
    free(mixed);
    return IG_OK;
}

int ig_mix_sum_f32(float *logp, int64_t n_rows, int64_t width, int64_t m, const int64_t *row,
                   const int64_t *tok, const double *val, const double *w_model, char *err, size_t errlen) {
    int rc = check_entries("ig_mix_sum_f32", logp, n_rows, width, m, row, tok, val, w_model, 1, err, errlen);
    if (rc != IG_OK) return rc;
    /* the entries' masses summed per cell, then one pass over the rows */
    double *mass = calloc(n_rows * width > 0 ? (size_t)(n_rows * width) : 1, sizeof(double));
    if (!mass) return ig_fail(err, errlen, IG_ERR_NOMEM, "ig_mix_sum_f32: out of memory");
    for (int64_t k = 0; k < m; k++) mass[row[k] * width + tok[k]] += val[k];
    for (int64_t r = 0; r < n_rows; r++) {
        float *p = logp + r * width;
        const double *a = mass + r * width, w = w_model[r];
        if (w == 1.0 && m == 0) continue;
        float shift = (float)log(w), wf = (float)w;
        /* single precision in the loop: the rows are float32, and expf/logf cost half of exp/log
           where a short suffix brings thousands of entries per row (1.5 vs 2.7 ms per batch-8
           step of a several-orders model, measured on recorded steps) */
        for (int64_t j = 0; j < width; j++) {
            if (isinf(p[j]) && p[j] < 0) continue;
            p[j] = a[j] > 0.0 ? logf(wf * expf(p[j]) + (float)a[j]) : p[j] + shift;
        }
    }
    free(mass);
    return IG_OK;
}
