/* mixing.c - the CPU side of mixing (infinigram_mixing.h): learned mixing weights of a batch of
   rows (the features and a small tanh network, row by row, in one call; the numpy twin:
   infinigram_hf.hf.mixing.HostMixing), and the sparse mixture into float32 log-probabilities
   (the torch twin: infinigram_hf.hf.mixing.mix_sparse on other devices). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "vec_math.h"

/* The net's shape is checked before anything is written: widths chain from the coded features
   plus n_extra inputs, the input codes are known, the last layer has `outputs` outputs (0: any
   number from 2 up). Returns the widest layer (> 0) or IG_ERR_ARG. */
static int64_t check_net(const char *fn, const ig_mixing_net *net, int64_t n_extra, int64_t outputs, char *err,
                         size_t errlen) {
    if (!net || net->n_inputs < 0 || n_extra < 0 || net->n_inputs + n_extra < 1 || net->n_layers < 1 ||
        (net->n_inputs > 0 && !net->codes) || !net->widths || !net->params)
        return ig_fail(err, errlen, IG_ERR_ARG, "%s: a net with no inputs, no layers or a NULL array", fn);
    int64_t last = net->widths[net->n_layers];
    if (net->widths[0] != net->n_inputs + n_extra || (outputs ? last != outputs : last < 2))
        return ig_fail(err, errlen, IG_ERR_ARG, "%s: the net's widths must start at %lld inputs and end at %lld "
                       "output(s)%s", fn, (long long)(net->n_inputs + n_extra), (long long)(outputs ? outputs : 2),
                       outputs ? "" : " or more");
    int64_t widest = 0;
    for (int64_t l = 0; l <= net->n_layers; l++) {
        if (net->widths[l] < 1 || net->widths[l] > (1 << 20))
            return ig_fail(err, errlen, IG_ERR_ARG, "%s: layer width %lld out of range", fn, (long long)net->widths[l]);
        if (net->widths[l] > widest) widest = net->widths[l];
    }
    for (int64_t j = 0; j < net->n_inputs; j++)
        if (net->codes[j] < IG_MIX_SPARSE || net->codes[j] > IG_MIX_TOP_PROB)
            return ig_fail(err, errlen, IG_ERR_ARG, "%s: unknown feature code %d", fn, (int)net->codes[j]);
    return widest;
}

/* The rows' CSR distributions as both calls read them: sizes, pointers, offsets within the
   entries and non-decreasing. IG_OK or IG_ERR_ARG. */
static int check_rows(const char *fn, int64_t n, const int64_t *offsets, const uint64_t *counts, int64_t n_entries,
                      const uint64_t *total, const int64_t *suffix_len, const uint8_t *sparse, char *err, size_t errlen) {
    if (n < 0 || n_entries < 0 || !offsets || !total || !suffix_len || !sparse || (n_entries > 0 && !counts))
        return ig_fail(err, errlen, IG_ERR_ARG, "%s: a negative size or a NULL array", fn);
    if (offsets[0] < 0 || offsets[n] > n_entries)
        return ig_fail(err, errlen, IG_ERR_ARG, "%s: offsets outside [0, %lld]", fn, (long long)n_entries);
    for (int64_t i = 0; i < n; i++)
        if (offsets[i] > offsets[i + 1])
            return ig_fail(err, errlen, IG_ERR_ARG, "%s: offsets decrease at row %lld", fn, (long long)i);
    return IG_OK;
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

/* The net on the inputs in a (its widest layer's room; b the same): the last layer's outputs,
   in a or b. tanh between layers, not after the last. */
static const double *forward(const ig_mixing_net *net, double *a, double *b) {
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
    return in;
}

/* Row i's inputs into a: its coded features, then ln(1 + count) of each of its n_levels levels'
   suffixes (a negative count read as 0). */
static void row_inputs(const ig_mixing_net *net, int64_t i, const int64_t *offsets, const uint64_t *counts,
                       const uint64_t *total, const int64_t *suffix_len, const uint8_t *sparse, int64_t n_levels,
                       const double *level_count, double *a) {
    for (int64_t j = 0; j < net->n_inputs; j++)
        a[j] = feature(net->codes[j], offsets[i], offsets[i + 1], counts, total[i], suffix_len[i], sparse[i]);
    for (int64_t j = 0; j < n_levels; j++) a[net->n_inputs + j] = log1p(fmax(level_count[i * n_levels + j], 0.0));
}

int ig_mixing_lambdas(const ig_mixing_net *net, int64_t n, const int64_t *offsets, const uint64_t *counts,
                      int64_t n_entries, const uint64_t *total, const int64_t *suffix_len,
                      const uint8_t *sparse, const uint8_t *active, double *lambda_out,
                      char *err, size_t errlen) {
    int64_t widest = check_net("ig_mixing_lambdas", net, 0, 1, err, errlen);
    if (widest < 0) return (int)widest;
    int rc = check_rows("ig_mixing_lambdas", n, offsets, counts, n_entries, total, suffix_len, sparse, err, errlen);
    if (rc != IG_OK) return rc;
    if (!active || !lambda_out) return ig_fail(err, errlen, IG_ERR_ARG, "ig_mixing_lambdas: a NULL array");
    double *a = malloc(2 * (size_t)widest * sizeof(double));
    if (!a) return ig_fail(err, errlen, IG_ERR_NOMEM, "ig_mixing_lambdas: out of memory");
    for (int64_t i = 0; i < n; i++) {
        if (!active[i]) {
            lambda_out[i] = 0.0;
            continue;
        }
        row_inputs(net, i, offsets, counts, total, suffix_len, sparse, 0, NULL, a);
        lambda_out[i] = 0.5 + 0.5 * tanh(0.5 * forward(net, a, a + widest)[0]); /* σ(z) without overflow */
    }
    free(a);
    return IG_OK;
}

int ig_mixing_weights(const ig_mixing_net *net, int64_t n, const int64_t *offsets, const uint64_t *counts,
                      int64_t n_entries, const uint64_t *total, const int64_t *suffix_len, const uint8_t *sparse,
                      const uint8_t *active, int64_t n_levels, const double *level_count, double *weights_out,
                      char *err, size_t errlen) {
    if (n_levels < 0 || n_levels > (1 << 20))
        return ig_fail(err, errlen, IG_ERR_ARG, "ig_mixing_weights: %lld levels", (long long)n_levels);
    const int64_t k_out = 2 + n_levels;
    int64_t widest = check_net("ig_mixing_weights", net, n_levels, k_out, err, errlen);
    if (widest < 0) return (int)widest;
    int rc = check_rows("ig_mixing_weights", n, offsets, counts, n_entries, total, suffix_len, sparse, err, errlen);
    if (rc != IG_OK) return rc;
    if (!active || !weights_out || (n_levels > 0 && n > 0 && !level_count))
        return ig_fail(err, errlen, IG_ERR_ARG, "ig_mixing_weights: a NULL array");
    double *a = malloc(2 * (size_t)widest * sizeof(double));
    if (!a) return ig_fail(err, errlen, IG_ERR_NOMEM, "ig_mixing_weights: out of memory");
    for (int64_t i = 0; i < n; i++) {
        const double *lc = level_count + i * n_levels;
        double *w = weights_out + i * k_out;
        w[0] = 1.0; /* the model alone (an inactive row): no net to run */
        for (int64_t j = 1; j < k_out; j++) w[j] = 0.0;
        if (!active[i]) continue;
        row_inputs(net, i, offsets, counts, total, suffix_len, sparse, n_levels, level_count, a);
        const double *z = forward(net, a, a + widest);
        /* the softmax over the model, the ∞-gram and the levels that exist (count > 0) */
        double top = z[0] > z[1] ? z[0] : z[1], sum = 0.0;
        for (int64_t j = 0; j < n_levels; j++)
            if (lc[j] > 0 && z[2 + j] > top) top = z[2 + j];
        for (int64_t j = 0; j < k_out; j++) sum += w[j] = j < 2 || lc[j - 2] > 0 ? exp(z[j] - top) : 0.0;
        for (int64_t j = 0; j < k_out; j++) w[j] /= sum;
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

/* p[j] += s over a row (vectorized: the mixture's shift of every cell) */
static IG_VECTORIZE void add_to_row(float *p, int64_t n, float s) {
    for (int64_t j = 0; j < n; j++) p[j] += s;
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
    for (int64_t r = 0; r < n_rows; r++)
        if (shift[r] != 0.0) add_to_row(logp + r * width, width, (float)shift[r]);
    for (int64_t k = 0; k < m; k++) logp[row[k] * width + tok[k]] = mixed[k];
    free(mixed);
    return IG_OK;
}

/* x[i] <- ln(w[i]·e^{x[i]} + mass[i]), x already within [IG_VEC_EXP_MIN, IG_VEC_EXP_MAX] (no
   branch: the loop vectorizes). */
static IG_VECTORIZE void mix_cells_fast(float *x, const double *mass, const float *w, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = ig_vlog(w[i] * ig_vexp(x[i]) + (float)mass[i]);
}

/* mixed[i] <- ln(w[i]·e^{orig[i]} + mass[i]) (mass > 0; -inf stays -inf): vec_math.h where its
   functions hold, libm in double precision for the rest (orig outside [-87, 88], or a mass
   below FLT_MIN, where float would lose its digits). */
static void mix_cells(float *mixed, const float *orig, const double *mass, const float *w, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        mixed[i] = orig[i] < IG_VEC_EXP_MIN ? IG_VEC_EXP_MIN : (orig[i] > IG_VEC_EXP_MAX ? IG_VEC_EXP_MAX : orig[i]);
    mix_cells_fast(mixed, mass, w, n);
    for (int64_t i = 0; i < n; i++) {
        if (isinf(orig[i]) && orig[i] < 0) mixed[i] = orig[i]; /* forbidden before: stays so */
        else if (!(orig[i] >= IG_VEC_EXP_MIN && orig[i] <= IG_VEC_EXP_MAX && mass[i] >= FLT_MIN))
            mixed[i] = (float)log((double)w[i] * exp((double)orig[i]) + mass[i]);
    }
}

int ig_mix_sum_f32(float *logp, int64_t n_rows, int64_t width, int64_t m, const int64_t *row,
                   const int64_t *tok, const double *val, const double *w_model, char *err, size_t errlen) {
    int rc = check_entries("ig_mix_sum_f32", logp, n_rows, width, m, row, tok, val, w_model, 1, err, errlen);
    if (rc != IG_OK) return rc;
    /* Each touched cell gets a slot (its original value saved, its masses summed), the slots'
       mixed values are computed at once (mix_cells), every row is shifted by ln w_model, and the
       mixed values are written. Only the touched cells pay for exp and log (a dense pass with a
       branch per cell cost several times the arithmetic at batch 1), and the scratch is a bit
       per cell plus a few numbers per entry: a dense scratch of the rows' size cost more in page
       faults than the mixing. While the cells are gathered, a touched cell holds its slot number
       (its value is saved, and it is overwritten at the end). */
    if (m > (int64_t)UINT32_MAX) /* slots are numbered in 32 bits (a cell holds one) */
        return ig_fail(err, errlen, IG_ERR_ARG, "ig_mix_sum_f32: more than 2^32 - 1 entries");
    size_t m1 = m > 0 ? (size_t)m : 1;
    int64_t *cell = malloc(m1 * sizeof(int64_t));
    double *mass = malloc(m1 * sizeof(double));
    float *mixed = malloc(3 * m1 * sizeof(float)), *orig = mixed + m1, *w = orig + m1;
    uint64_t *seen = calloc((size_t)(n_rows * width / 64 + 1), sizeof(uint64_t));
    if (!cell || !mass || !mixed || !seen) {
        free(cell), free(mass), free(mixed), free(seen);
        return ig_fail(err, errlen, IG_ERR_NOMEM, "ig_mix_sum_f32: out of memory");
    }
    uint32_t n_cells = 0, slot;
    for (int64_t k = 0; k < m; k++) {
        int64_t c = row[k] * width + tok[k];
        if (seen[c >> 6] >> (c & 63) & 1) {
            memcpy(&slot, logp + c, sizeof slot);
        } else {
            seen[c >> 6] |= 1ull << (c & 63);
            slot = n_cells++;
            cell[slot] = c, orig[slot] = logp[c], mass[slot] = 0.0, w[slot] = (float)w_model[row[k]];
            memcpy(logp + c, &slot, sizeof slot);
        }
        mass[slot] += val[k];
    }
    mix_cells(mixed, orig, mass, w, n_cells);
    for (int64_t r = 0; r < n_rows; r++) /* w = 0: ln 0 = -inf, every cell but the entries' */
        if (w_model[r] != 1.0) add_to_row(logp + r * width, width, (float)log(w_model[r]));
    for (uint32_t i = 0; i < n_cells; i++) logp[cell[i]] = mixed[i];
    free(cell), free(mass), free(mixed), free(seen);
    return IG_OK;
}
