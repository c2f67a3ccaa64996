// Scale searches shared by the K-quant reference quantizers (declared in quants_impl.h).
// Each follows the corresponding ggml helper operation for operation so that the chosen levels,
// and therefore the output bytes, are identical; the comments give the objective in math.
#include <cmath>

#include "gguf/quants_impl.h"

namespace sluice::quant_ref {
namespace {

// Below this max |x| a group counts as all zero (ggml's GROUP_MAX_EPS).
constexpr float kGroupMaxEps = 1e-15f;

// The value of largest magnitude (the first one on ties), sign kept.
float signed_absmax(int n, const float* x) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  return max;
}

}  // namespace

// Weighted least squares with weights w_i = x_i^2 (large values matter most):
//   levels l_i = clamp(round(x_i * iscale), -nmax, nmax - 1)
//   best scale for fixed levels = sum w x l / sum w l^2, error falls as (sum w x l)^2 / sum w l^2
// The max |x| maps to -nmax (so the sign of the scale is that of -max); the sweep tries
// iscale = -(nmax + 0.1 k) / max for k = -9..9 and keeps the levels with the smallest error.
float fit_symmetric(int n, int nmax, const float* x, int8_t* L) {
  const float max = signed_absmax(n, x);
  if (std::fabs(max) < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.0f;
  }
  auto level = [nmax](float v) { return clamp_int(nearest_int(v), -nmax, nmax - 1); };

  float iscale = float(-nmax) / max;
  float sumlx = 0.0f, suml2 = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = level(iscale * x[i]);
    L[i] = int8_t(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * float(l);
    suml2 += w * float(l) * float(l);
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int k = -9; k <= 9; ++k) {
    if (k == 0) continue;
    iscale = -(float(nmax) + 0.1f * float(k)) / max;
    sumlx = suml2 = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = level(iscale * x[i]);
      const float w = x[i] * x[i];
      sumlx += w * x[i] * float(l);
      suml2 += w * float(l) * float(l);
    }
    if (suml2 > 0.0f && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) L[i] = int8_t(level(iscale * x[i]) + nmax);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Same objective as fit_symmetric, starting from iscale = -nmax / max, then up to 5 passes of
// coordinate descent: for each i, the level that is optimal for x_i given the others' fit
// (x_i * sum_{j!=i} w l^2 / sum_{j!=i} w x l) is taken if it raises (sum w x l)^2 / sum w l^2.
float fit_symmetric_descent(int n, int nmax, const float* x, int8_t* L) {
  const float max = signed_absmax(n, x);
  if (std::fabs(max) < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.0f;
  }
  const float iscale = float(-nmax) / max;
  float sumlx = 0.0f, suml2 = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = int8_t(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * float(l);
    suml2 += w * float(l) * float(l);
  }
  for (int pass = 0; pass < 5; ++pass) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * float(L[i]);
      if (!(slx > 0.0f)) continue;
      float sl2 = suml2 - w * float(L[i]) * float(L[i]);
      const int l = clamp_int(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
      if (l == L[i]) continue;
      slx += w * x[i] * float(l);
      sl2 += w * float(l) * float(l);
      if (sl2 > 0.0f && slx * slx * suml2 > sumlx * sumlx * sl2) {
        L[i] = int8_t(l);
        sumlx = slx;
        suml2 = sl2;
        ++n_changed;
      }
    }
    if (n_changed == 0) break;
  }
  for (int i = 0; i < n; ++i) L[i] = int8_t(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Affine fit x_i ~ scale * l_i + min with min <= 0 (returned negated in *min_out):
//   start: min = min(x, 0), scale = (max - min) / nmax, levels by rounding;
//   for each trial iscale, round the levels against the current best min, then solve the
//   weighted 2x2 least-squares system for (scale, min) in closed form
//     D = Sw Sl2 - Sl^2,  scale = (Sw Sxl - Sx Sl) / D,  min = (Sl2 Sx - Sl Sxl) / D
//   (min clamped to 0, refitting scale alone), keeping the fit with the lowest weighted error.
// Later trials round against the min of the best fit so far, as in ggml.
float fit_affine(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* min_out,
                 const AffineSearch& search) {
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0.0f) min = 0.0f;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *min_out = -min;
    return 0.0f;
  }
  auto error_of = [&](float scale_, float min_, const uint8_t* levels) {
    float err = 0.0f;
    for (int i = 0; i < n; ++i) {
      float diff = scale_ * float(levels[i]) + min_ - x[i];
      diff = search.use_mad ? std::fabs(diff) : diff * diff;
      err += weights[i] * diff;
    }
    return err;
  };

  float iscale = float(nmax) / (max - min);
  float scale = 1.0f / iscale;
  for (int i = 0; i < n; ++i) {
    L[i] = uint8_t(clamp_int(nearest_int(iscale * (x[i] - min)), 0, nmax));
  }
  float best_error = error_of(scale, min, L);
  if (search.nstep < 1) {
    *min_out = -min;
    return scale;
  }

  uint8_t trial[256];  // levels of the current trial; n <= 256
  for (int k = 0; k <= search.nstep; ++k) {
    iscale = (search.rmin + search.rdelta * float(k) + float(nmax)) / (max - min);
    float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = clamp_int(nearest_int(iscale * (x[i] - min)), 0, nmax);
      trial[i] = uint8_t(l);
      const float w = weights[i];
      sum_l += w * float(l);
      sum_l2 += w * float(l) * float(l);
      sum_xl += w * float(l) * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (!(det > 0.0f)) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (this_min > 0.0f) {
      this_min = 0.0f;
      this_scale = sum_xl / sum_l2;
    }
    const float err = error_of(this_scale, this_min, trial);
    if (err < best_error) {
      for (int i = 0; i < n; ++i) L[i] = trial[i];
      best_error = err;
      scale = this_scale;
      min = this_min;
    }
  }
  *min_out = -min;
  return scale;
}

}  // namespace sluice::quant_ref
