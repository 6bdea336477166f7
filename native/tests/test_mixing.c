/* test_mixing.c - ig_mixing_lambdas (native/src/mixing.c) under the sanitizers:
 *
 *  - λ of a one-layer and a two-layer net equals the formula written out here, feature by
 *    feature (an empty row, a single-token row, an inactive row);
 *  - malformed nets and offsets are refused with IG_ERR_ARG and a message, nothing written;
 *  - ig_mixing_weights (several orders): the softmax of a two-layer net over coded features and
 *    the levels' ln(1 + count), taken over the components a row has, written out here; an
 *    inactive row gets [1, 0, 0], a level of count 0 (or negative) weight 0; a net with one
 *    output, missing level counts, a level count that does not chain and negative levels are
 *    refused;
 *  - ig_mix_sparse_f32 equals log((1 - λ)·p + v) written out per entry: a row left alone
 *    (λ = 0), λ = 1, a forbidden (-inf) token kept forbidden; an entry out of range is refused
 *    before anything is written;
 *  - ig_mix_sum_f32 adds the masses of entries that repeat a cell, mixes them with the model's
 *    weight, keeps -inf, and refuses entries out of range or with a negative mass; on a random
 *    batch (repeated cells, weights 0 and 1, values below e^-87 and masses below FLT_MIN, which
 *    take libm's path) it equals the formula in double precision;
 *  - vec_math.h's e^x and ln y stay within 3e-7 of libm's over their ranges.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "infinigram.h"
#include "vec_math.h"

#include "check.h"

static double sigmoid(double z) { return 1.0 / (1.0 + exp(-z)); }

int main(void) {
    /* three rows: {5, 3} (two tokens), {} (empty), {7} (sparse) */
    const int64_t offsets[] = {0, 2, 2, 3};
    const uint64_t counts[] = {5, 3, 7}, total[] = {8, 0, 7};
    const int64_t suffix_len[] = {4, 0, 9};
    const uint8_t sparse[] = {0, 0, 1}, active[] = {1, 0, 1}, all[] = {1, 1, 1};
    double lam[3];

    /* one layer over every feature: z = b + Σ w_j x_j */
    const int32_t codes[] = {IG_MIX_SPARSE, IG_MIX_LOG_EFFECTIVE_N, IG_MIX_LOG_CONTEXT_COUNT,
                             IG_MIX_LOG_NUM_DISTINCT, IG_MIX_TOP_PROB};
    const int64_t widths1[] = {5, 1};
    const double params1[] = {0.5, -0.25, 0.125, 1.0, -2.0, 0.3};
    ig_mixing_net net1 = {5, codes, 1, widths1, params1};
    CHECK(ig_mixing_lambdas(&net1, 3, offsets, counts, 3, total, suffix_len, sparse, active, lam, err,
                            sizeof err) == IG_OK, "%s", err);
    double x0[] = {0.0, log(5.0), log1p(8.0), log1p(2.0), 5.0 / 8.0};
    double x2[] = {1.0, log(10.0), log1p(7.0), log1p(1.0), 1.0};
    double z0 = 0.3, z2 = 0.3;
    for (int j = 0; j < 5; j++) z0 += params1[j] * x0[j], z2 += params1[j] * x2[j];
    CHECK(fabs(lam[0] - sigmoid(z0)) < 1e-14, "row 0: %.17g vs %.17g", lam[0], sigmoid(z0));
    CHECK(lam[1] == 0.0, "an inactive row gets 0, got %g", lam[1]);
    CHECK(fabs(lam[2] - sigmoid(z2)) < 1e-14, "row 2: %.17g vs %.17g", lam[2], sigmoid(z2));
    /* the empty row, active: top probability 0, ln(1 + 0) counts */
    CHECK(ig_mixing_lambdas(&net1, 3, offsets, counts, 3, total, suffix_len, sparse, all, lam, err,
                            sizeof err) == IG_OK, "%s", err);
    CHECK(fabs(lam[1] - sigmoid(0.3)) < 1e-14, "empty row (every feature 0): %.17g", lam[1]);

    /* two layers: 2 inputs -> 2 tanh units -> 1 */
    const int32_t codes2[] = {IG_MIX_TOP_PROB, IG_MIX_SPARSE};
    const int64_t widths2[] = {2, 2, 1};
    const double params2[] = {1.0, 2.0, -1.0, 0.5, /* W0 */ 0.1, -0.2, /* b0 */ 1.5, -0.75, /* W1 */ 0.05};
    ig_mixing_net net2 = {2, codes2, 2, widths2, params2};
    CHECK(ig_mixing_lambdas(&net2, 3, offsets, counts, 3, total, suffix_len, sparse, all, lam, err,
                            sizeof err) == IG_OK, "%s", err);
    const double in[3][2] = {{5.0 / 8.0, 0.0}, {0.0, 0.0}, {1.0, 1.0}};
    for (int i = 0; i < 3; i++) {
        double h0 = tanh(0.1 + 1.0 * in[i][0] + 2.0 * in[i][1]);
        double h1 = tanh(-0.2 - 1.0 * in[i][0] + 0.5 * in[i][1]);
        double want = sigmoid(0.05 + 1.5 * h0 - 0.75 * h1);
        CHECK(fabs(lam[i] - want) < 1e-14, "two layers, row %d: %.17g vs %.17g", i, lam[i], want);
    }

    /* refused: widths that do not chain, an unknown code, no layers, bad offsets */
    lam[0] = -1.0;
    const int64_t bad_widths[] = {2, 2, 3};
    ig_mixing_net bad = {2, codes2, 2, bad_widths, params2};
    CHECK(ig_mixing_lambdas(&bad, 3, offsets, counts, 3, total, suffix_len, sparse, all, lam, err, sizeof err) ==
              IG_ERR_ARG && strstr(err, "widths") && lam[0] == -1.0, "widths: %s", err);
    const int32_t bad_codes[] = {IG_MIX_TOP_PROB, 99};
    bad = (ig_mixing_net){2, bad_codes, 2, widths2, params2};
    CHECK(ig_mixing_lambdas(&bad, 3, offsets, counts, 3, total, suffix_len, sparse, all, lam, err, sizeof err) ==
              IG_ERR_ARG && strstr(err, "code"), "codes: %s", err);
    bad = (ig_mixing_net){2, codes2, 0, widths2, params2};
    CHECK(ig_mixing_lambdas(&bad, 3, offsets, counts, 3, total, suffix_len, sparse, all, lam, err, sizeof err) ==
              IG_ERR_ARG, "no layers: %s", err);
    CHECK(ig_mixing_lambdas(NULL, 3, offsets, counts, 3, total, suffix_len, sparse, all, lam, err, sizeof err) ==
              IG_ERR_ARG, "NULL net");
    const int64_t past_end[] = {0, 2, 2, 4}, decreasing[] = {0, 2, 1, 3};
    CHECK(ig_mixing_lambdas(&net2, 3, past_end, counts, 3, total, suffix_len, sparse, all, lam, err, sizeof err) ==
              IG_ERR_ARG && strstr(err, "outside"), "past the end: %s", err);
    CHECK(ig_mixing_lambdas(&net2, 3, decreasing, counts, 3, total, suffix_len, sparse, all, lam, err, sizeof err) ==
              IG_ERR_ARG && strstr(err, "decrease"), "decreasing: %s", err);
    CHECK(lam[0] == -1.0, "nothing written on refusal, got %g", lam[0]);
    /* no rows: nothing to do */
    CHECK(ig_mixing_lambdas(&net2, 0, offsets, NULL, 0, total, suffix_len, sparse, all, lam, err, sizeof err) ==
              IG_OK, "no rows: %s", err);

    /* several orders: 1 coded feature + 1 extra input -> 2 tanh units -> 3 outputs (softmax) */
    const int32_t codes3[] = {IG_MIX_TOP_PROB};
    const int64_t widths3[] = {2, 2, 3};
    const double params3[] = {1.0, -0.5, 0.25, 2.0, /* W0 */ 0.1, -0.3, /* b0 */
                              0.5, -1.0, 1.5, 0.2, -0.7, 0.9, /* W1 */ 0.0, 0.4, -0.2 /* b1 */};
    ig_mixing_net net3 = {1, codes3, 2, widths3, params3};
    /* levels: row 0 has its level (count e^0.5 - 1: input 0.5), row 1 is inactive (its count
       ignored), row 2 has none (count 0: input 0, weight 0), row 3 a negative count (read as 0) */
    const int64_t offsets4[] = {0, 2, 2, 3, 3};
    const uint64_t total4[] = {8, 0, 7, 0};
    const int64_t suffix_len4[] = {4, 0, 9, 1};
    const uint8_t sparse4[] = {0, 0, 1, 0}, active4[] = {1, 0, 1, 1};
    const double level_count[4] = {exp(0.5) - 1.0, 5.0, 0.0, -3.0};
    const double extra[4] = {0.5, 0.0, 0.0, 0.0};
    const uint8_t avail[12] = {1, 1, 1, /* all */ 1, 0, 0, /* the model alone */ 1, 1, 0, /* no level */ 1, 1, 0};
    double wts[12];
    CHECK(ig_mixing_weights(&net3, 4, offsets4, counts, 3, total4, suffix_len4, sparse4, active4, 1, level_count, wts,
                            err, sizeof err) == IG_OK, "%s", err);
    const double top3[4] = {5.0 / 8.0, 0.0, 1.0, 0.0};
    for (int i = 0; i < 4; i++) {
        if (i == 1) continue;
        double h0 = tanh(0.1 + 1.0 * top3[i] - 0.5 * extra[i]), h1 = tanh(-0.3 + 0.25 * top3[i] + 2.0 * extra[i]);
        double z[3] = {0.5 * h0 - 1.0 * h1, 0.4 + 1.5 * h0 + 0.2 * h1, -0.2 - 0.7 * h0 + 0.9 * h1}, e[3], sum = 0;
        for (int j = 0; j < 3; j++) sum += e[j] = avail[3 * i + j] ? exp(z[j]) : 0.0;
        for (int j = 0; j < 3; j++)
            CHECK(fabs(wts[3 * i + j] - e[j] / sum) < 1e-14, "weights row %d col %d: %.17g vs %.17g", i, j,
                  wts[3 * i + j], e[j] / sum);
    }
    CHECK(wts[3] == 1.0 && wts[4] == 0.0 && wts[5] == 0.0, "the model alone: %g %g %g", wts[3], wts[4], wts[5]);
    wts[0] = -1.0;
    CHECK(ig_mixing_weights(&net2, 4, offsets4, counts, 3, total4, suffix_len4, sparse4, active4, 0, NULL, wts, err,
                            sizeof err) == IG_ERR_ARG && strstr(err, "output") && wts[0] == -1.0, "one output: %s", err);
    CHECK(ig_mixing_weights(&net3, 4, offsets4, counts, 3, total4, suffix_len4, sparse4, active4, 1, NULL, wts, err,
                            sizeof err) == IG_ERR_ARG, "no level counts: %s", err);
    CHECK(ig_mixing_weights(&net3, 4, offsets4, counts, 3, total4, suffix_len4, sparse4, active4, 2, level_count, wts,
                            err, sizeof err) == IG_ERR_ARG && strstr(err, "widths"), "inputs that do not chain: %s", err);
    CHECK(ig_mixing_weights(&net3, 4, offsets4, counts, 3, total4, suffix_len4, sparse4, active4, -1, level_count,
                            wts, err, sizeof err) == IG_ERR_ARG && strstr(err, "levels"), "negative levels: %s", err);
    CHECK(wts[0] == -1.0, "nothing written on refusal, got %g", wts[0]);

    /* the sparse mixture: two rows of four log-probabilities */
    float logp[8];
    const double probs[8] = {0.1, 0.2, 0.3, 0.4, 0.5, 0.25, 0.25, 0.0};
    for (int j = 0; j < 8; j++) logp[j] = (float)log(probs[j]); /* logp[7] = -inf: forbidden */
    const int64_t row[] = {0, 0, 1, 1}, tok[] = {1, 3, 0, 3};
    const double v[] = {0.05, 0.15, 0.6, 0.3};
    double logv[4];
    for (int k = 0; k < 4; k++) logv[k] = log(v[k]);
    const double lam_rows[] = {0.4, 0.0};
    double shift[2];
    for (int r = 0; r < 2; r++) shift[r] = log1p(-lam_rows[r]);
    CHECK(ig_mix_sparse_f32(logp, 2, 4, 4, row, tok, logv, shift, err, sizeof err) == IG_OK, "%s", err);
    double want[8];
    for (int j = 0; j < 8; j++) want[j] = (1.0 - lam_rows[j / 4]) * probs[j];
    for (int k = 0; k < 3; k++) want[row[k] * 4 + tok[k]] += v[k]; /* (entry 3 lands on the forbidden token) */
    for (int j = 0; j < 7; j++)
        CHECK(fabs(exp(logp[j]) - want[j]) < 1e-6, "mixed entry %d: %g vs %g", j, exp(logp[j]), want[j]);
    CHECK(isinf(logp[7]) && logp[7] < 0, "a forbidden token stays -inf, got %g", logp[7]);
    float one[2] = {(float)log(0.5), (float)log(0.5)};
    const int64_t r0[] = {0}, t1[] = {1};
    const double lv[] = {0.0}, all_in[] = {-INFINITY}; /* λ = 1: only the ∞-gram's mass is left */
    CHECK(ig_mix_sparse_f32(one, 1, 2, 1, r0, t1, lv, all_in, err, sizeof err) == IG_OK, "%s", err);
    CHECK(isinf(one[0]) && one[0] < 0 && one[1] == 0.0f, "λ = 1: %g %g", one[0], one[1]);
    float keep[2] = {-1.0f, -2.0f};
    const int64_t bad_row[] = {1}, bad_tok[] = {2};
    CHECK(ig_mix_sparse_f32(keep, 1, 2, 1, bad_row, t1, lv, shift, err, sizeof err) == IG_ERR_ARG &&
              strstr(err, "outside") && keep[0] == -1.0f, "a row out of range: %s", err);
    CHECK(ig_mix_sparse_f32(keep, 1, 2, 1, r0, bad_tok, lv, shift, err, sizeof err) == IG_ERR_ARG &&
              keep[1] == -2.0f, "a token out of range: %s", err);

    /* several components: cell (0, 1) gets two masses, row 1 keeps the model alone (weight 1) */
    const double base[6] = {0.5, 0.3, 0.2, 0.0, 0.6, 0.4};
    float lp[6];
    for (int j = 0; j < 6; j++) lp[j] = (float)log(base[j]); /* lp[3] = -inf */
    const int64_t srow[] = {0, 0, 0, 1}, stok[] = {1, 1, 2, 0};
    const double sval[] = {0.1, 0.2, 0.05, 0.0}, wm[] = {0.5, 1.0};
    CHECK(ig_mix_sum_f32(lp, 2, 3, 4, srow, stok, sval, wm, err, sizeof err) == IG_OK, "%s", err);
    const double swant[6] = {0.25, 0.15 + 0.3, 0.1 + 0.05, 0.0, 0.6, 0.4};
    for (int j = 0; j < 6; j++)
        if (j != 3) CHECK(fabs(exp(lp[j]) - swant[j]) < 1e-6, "summed cell %d: %g vs %g", j, exp(lp[j]), swant[j]);
    CHECK(isinf(lp[3]) && lp[3] < 0, "-inf stays -inf, got %g", lp[3]);
    const double neg[] = {-0.5};
    float lp2[2] = {-1.0f, -1.0f};
    CHECK(ig_mix_sum_f32(lp2, 1, 2, 1, r0, t1, neg, wm, err, sizeof err) == IG_ERR_ARG && lp2[1] == -1.0f,
          "a negative mass: %s", err);
    CHECK(ig_mix_sum_f32(lp2, 1, 2, 1, r0, bad_tok, sval, wm, err, sizeof err) == IG_ERR_ARG && lp2[0] == -1.0f,
          "a token out of range: %s", err);

    /* vec_math.h against libm (double) over the ranges the mixture uses them on */
    double worst_exp = 0.0, worst_log = 0.0;
    for (float x = IG_VEC_EXP_MIN; x <= IG_VEC_EXP_MAX; x += 0.001953125f) {
        double e = fabs(ig_vexp(x) - exp(x)) / exp(x);
        worst_exp = e > worst_exp ? e : worst_exp;
    }
    for (double ly = log(FLT_MIN); ly < 80.0; ly += 0.0009765625) {
        float y = (float)exp(ly);
        if (!(y >= FLT_MIN)) continue;
        double e = fabs(ig_vlog(y) - log(y)) / fmax(1.0, fabs(log(y)));
        worst_log = e > worst_log ? e : worst_log;
    }
    CHECK(worst_exp < 3e-7, "ig_vexp: worst relative error %g", worst_exp);
    CHECK(worst_log < 3e-7, "ig_vlog: worst error %g", worst_log);

    /* a random batch against the formula in double precision: 4 rows (weights 0.3, 0, 1, 0.7) of
       500 tokens, 3000 entries over 300 cells per row (so cells repeat), values from -100 to 0
       (below -87: libm's path), one mass in ten below FLT_MIN (libm's path too), some -inf */
    enum { R = 4, W = 500, M = 3000 };
    static float big[R * W], before[R * W];
    static int64_t brow[M], btok[M];
    static double bval[M], sum[R * W];
    const double bw[R] = {0.3, 0.0, 1.0, 0.7};
    srand(7);
    for (int j = 0; j < R * W; j++) big[j] = before[j] = j % 97 == 0 ? -INFINITY : -100.0f * (float)rand() / RAND_MAX;
    for (int k = 0; k < M; k++) {
        brow[k] = rand() % R, btok[k] = rand() % 300;
        bval[k] = k % 10 == 0 ? 1e-42 : 0.01 * rand() / RAND_MAX;
        sum[brow[k] * W + btok[k]] += bval[k];
    }
    CHECK(ig_mix_sum_f32(big, R, W, M, brow, btok, bval, bw, err, sizeof err) == IG_OK, "%s", err);
    double worst_mix = 0.0;
    int kept_inf = 1;
    for (int j = 0; j < R * W; j++) {
        double x = before[j], want = isinf(x) ? x : log(bw[j / W] * exp(x) + sum[j]);
        if (isinf(want) || isinf(big[j])) {
            kept_inf &= isinf(want) && isinf(big[j]) && big[j] < 0;
            continue;
        }
        double e = fabs(big[j] - want) / fmax(1.0, fabs(want));
        worst_mix = e > worst_mix ? e : worst_mix;
    }
    CHECK(kept_inf, "-inf exactly where the formula gives it");
    CHECK(worst_mix < 1e-6, "a random batch: worst error %g against the formula", worst_mix);

    printf("test_mixing: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
