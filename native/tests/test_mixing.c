/* test_mixing.c - ig_mixing_lambdas (native/src/mixing.c) under the sanitizers:
 *
 *  - λ of a one-layer and a two-layer net equals the formula written out here, feature by
 *    feature (an empty row, a single-token row, an inactive row);
 *  - malformed nets and offsets are refused with IG_ERR_ARG and a message, nothing written.
 */
#include <math.h>
#include <string.h>

#include "infinigram.h"

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

    printf("test_mixing: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
