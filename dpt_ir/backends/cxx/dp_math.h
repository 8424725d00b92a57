// dp_math.h - branch-free float32 math for dpt_ir's generated C++ (CPU and CUDA).
//
// Assumes: IEEE binary32/binary64 with round-to-nearest, no fast-math, FMA available
// (Warp's CPU build: clang -march=native; CUDA: NVRTC). Guarantees: every function is
// a straight-line expression (special cases are selects, no early exits, no calls that
// are not inlined), so a plain C++ loop over it vectorises; the same text is
// `static inline` C++ on the CPU and `__device__` code under NVRTC (DP_FN). Accuracy
// (max error in float32 ulps against float64, measured): docs/math.md. float64 code keeps
// libm; the only float64 arithmetic here is pow's internal log2/exp2 and the Payne-Hanek
// reduction of huge trig arguments.
//
// Algorithms: Cephes-style polynomials (exp, log, sin/cos, tanh; S. L. Moshier's
// published coefficients) with Cody-Waite argument reduction written as explicit FMAs;
// expm1, erf and atan use polynomials fitted for this header (least squares on Chebyshev
// nodes in float64, rounded to float32; docs/math.md). sin/cos: a 3-constant FMA
// reduction by pi/2 for |x| < DP_TRIG_FAST_MAX, and an integer Payne-Hanek reduction
// (2/pi to 224 bits) for larger arguments. The *_fast variants OR 1 into `big` when a
// finite |x| >= DP_TRIG_FAST_MAX is seen (their result is then unspecified), so a
// driver can recompute those elements with the precise dp_sin/dp_cos.
#ifndef DP_MATH_H
#define DP_MATH_H

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define DP_CUDA 1
#define DP_FN static __device__ __forceinline__
#define DP_CONST __device__ static const
#define DP_COLD static __device__ __noinline__
#else
#define DP_FN static inline __attribute__((always_inline))
#define DP_CONST static const
#define DP_COLD static __attribute__((noinline))
#endif
// The CPU's floating-point mode around a kernel call (the stubs, per task): with
// DP_FLUSH_DENORMALS (a module compiled with denormals="flush"), x86-64's MXCSR flushes
// denormal results to zero and reads denormal inputs as zero (FTZ | DAZ), as XLA's CPU
// runtime does; the caller's mode is restored after. Otherwise (and on CUDA) nothing changes.
#if defined(DP_FLUSH_DENORMALS) && defined(__x86_64__) && !defined(DP_CUDA)
DP_FN unsigned dp_fp_enter() {
    const unsigned m = __builtin_ia32_stmxcsr();
    __builtin_ia32_ldmxcsr(m | 0x8040u);
    return m;
}
DP_FN void dp_fp_leave(unsigned m) { __builtin_ia32_ldmxcsr(m); }
#else
DP_FN unsigned dp_fp_enter() { return 0u; }
DP_FN void dp_fp_leave(unsigned) {}
#endif
// An index clamped into [lo, hi] (a join's input read at its local index, in bounds).
DP_FN int dp_clampi(int x, int lo, int hi) { return x < lo ? lo : (x > hi ? hi : x); }
// DP_COLD: the edge functions of stencil kernels (per-axis views through their tables),
// called from a few places on a few elements: one out-of-line copy keeps the build small.

// Put before the generated CPU element loops: four vectors in flight per iteration. An element
// function is one dependent chain (chain16's: 22 transcendentals, forward then backward), longer
// than the out-of-order window, so one vector per iteration leaves the units idle on its
// latency; clang's own cost model interleaves such a large body once. Measured A/B on one
// thread at 1024^2 (docs/benchmarks.md): chain16 0.51-0.59x the time, softmax_xent 0.91x,
// beer 0.93x, imaging 0.92-0.96x, normalisation 0.98x; 2 lost to 4, 8 spills. Each element is
// computed as before (same bits). Defined earlier to another pragma by a build that wants one
// (tests/backend/test_vectorised.py builds a variant with vectorisation disabled this way).
// assume_safety: no iteration reads what another writes. A launch never writes a buffer it
// reads (`passes/schedule`: a buffer is reused only after its last reader's kernel; program
// inputs are the caller's, never an output), and an element loop writes only its own
// elements. Without it a loop that reads through a gather (an index loaded from memory) was
// left scalar, its runtime alias check needing bounds that an indirect read has none of
// ("cannot identify array bounds"): the 256² registration step, order 3, 2.56 -> 0.97 ms.
#ifndef DP_VEC_LOOP
#define DP_VEC_LOOP _Pragma("clang loop vectorize(assume_safety) interleave_count(4)")
#endif
// Before the element loop of a body of `drivers.LARGE_BODY` nodes or more: the same, two
// vectors in flight. Four copies of such a body spill (the 281-node order-3 registration
// kernel: 288 vector moves per 64 points); 256² registration step, one thread, that kernel
// 0.387 -> 0.363 ms, while the 86-node order-1 one took 0.094 ms with four and 0.104 with two.
#ifndef DP_LARGE_LOOP
#define DP_LARGE_LOOP _Pragma("clang loop vectorize(assume_safety) interleave_count(2)")
#endif
// Before the element loop of a small group with bounded per-axis views (pads, so stencils; the
// size rule and its measurements: `drivers.BOUNDED_MOST`): two vectors in flight, not four. A
// tap-heavy body holds a value and its float64 image per tap and per vector; four interleaved
// spill. Each element is computed as before (same bits). assume_safety as DP_VEC_LOOP's: the
// wave's (benchmarks/bench_wave.py, 128², 300 steps, one thread) value_and_grad, min of 7 over
// three alternated runs, store-all 9.64-10.66 -> 9.33-9.64 ms, checkpoint=16 12.29-12.91 ->
// 11.22-11.64 ms; the imaging case at 1024² unchanged (3.6-3.9 against 3.5-4.1 ms).
#ifndef DP_BOUNDED_LOOP
#define DP_BOUNDED_LOOP _Pragma("clang loop vectorize(assume_safety) interleave_count(2)")
#endif
// Before the precise rerun of a block with a huge trig argument (CPU only): kept scalar,
// which costs compile time instead of run time on a path taken only for |x| >= 2^19.
#define DP_SCALAR_LOOP _Pragma("clang loop vectorize(disable) interleave(disable)")
// Before the 8-iteration loop over a reduction's lanes, inside the (scalar) loop over a
// block's groups of 8 (CPU only): the lanes become one 8-wide vector operation. Left to
// itself clang unrolls the lane loop and vectorises the group loop 4 wide instead, with a
// shuffle per lane (softmax_xent's row logsumexp + dot: 2.25 ms -> 1.6 ms per 1024^2 on
// one thread, docs/benchmarks.md). Lane l is still element k + l of the block: same sums.
#ifndef DP_LANE_LOOP
#define DP_LANE_LOOP _Pragma("clang loop vectorize(enable) vectorize_width(8) interleave(disable) unroll(disable)")
#endif

#define DP_TRIG_FAST_MAX 524288.0f  // 2^19: the fast reduction stays <= ~1.6 ulp below it

// -- bits, constants and instructions ------------------------------------------------
DP_FN float dp_as_float(int i) {
#ifdef DP_CUDA
    return __int_as_float(i);
#else
    return __builtin_bit_cast(float, i);
#endif
}
DP_FN int dp_as_int(float f) {
#ifdef DP_CUDA
    return __float_as_int(f);
#else
    return __builtin_bit_cast(int, f);
#endif
}
DP_FN double dp_as_double(long long i) {
#ifdef DP_CUDA
    return __longlong_as_double(i);
#else
    return __builtin_bit_cast(double, i);
#endif
}
DP_FN long long dp_as_i64(double d) {
#ifdef DP_CUDA
    return __double_as_longlong(d);
#else
    return __builtin_bit_cast(long long, d);
#endif
}
DP_FN float dp_fma(float a, float b, float c) {
#ifdef DP_CUDA
    return __fmaf_rn(a, b, c);
#else
    return __builtin_fmaf(a, b, c);
#endif
}
DP_FN double dp_fma_d(double a, double b, double c) {
#ifdef DP_CUDA
    return __fma_rn(a, b, c);
#else
    return __builtin_fma(a, b, c);
#endif
}
DP_FN float dp_rint(float x) {
#ifdef DP_CUDA
    return rintf(x);
#else
    return __builtin_rintf(x);
#endif
}
DP_FN double dp_rint_d(double x) {
#ifdef DP_CUDA
    return rint(x);
#else
    return __builtin_rint(x);
#endif
}
DP_FN float dp_floor(float x) {
#ifdef DP_CUDA
    return floorf(x);
#else
    return __builtin_floorf(x);
#endif
}
DP_FN float dp_ceil(float x) { return -dp_floor(-x); }  // exact; ceil(-0.5) is -0, as in C
// sqrt is the correctly rounded instruction (vsqrtps / sqrt.rn.f32); rsqrt = 1 / sqrt.
DP_FN float dp_sqrt(float x) {
#ifdef DP_CUDA
    return __fsqrt_rn(x);
#else
    return __builtin_sqrtf(x);
#endif
}
DP_FN float dp_rsqrt(float x) { return 1.0f / dp_sqrt(x); }

DP_FN float dp_inf() { return dp_as_float(0x7f800000); }
DP_FN float dp_nan() { return dp_as_float(0x7fc00000); }
DP_FN float dp_abs(float x) { return dp_as_float(dp_as_int(x) & 0x7fffffff); }
DP_FN float dp_copysign(float mag, float sgn) {
    return dp_as_float((dp_as_int(mag) & 0x7fffffff) | (dp_as_int(sgn) & (int)0x80000000));
}
// 1 for inf and NaN, from the bits (an integer OR-able status, not a float reduction).
DP_FN int dp_nonfinite(float x) { return (dp_as_int(x) & 0x7f800000) == 0x7f800000; }
DP_FN float dp_pow2i(int n) { return dp_as_float((n + 127) << 23); }  // 2^n, -126 <= n <= 127

// -- exp, expm1 ----------------------------------------------------------------------
// expm1(r) for |r| <= ln2/2 (Cephes expf polynomial).
DP_FN float dp_expm1_half(float r) {
    float p = 1.9875691500e-4f;
    p = dp_fma(p, r, 1.3981999507e-3f);
    p = dp_fma(p, r, 8.3334519073e-3f);
    p = dp_fma(p, r, 4.1665795894e-2f);
    p = dp_fma(p, r, 1.6666665459e-1f);
    p = dp_fma(p, r, 5.0000001201e-1f);
    return dp_fma(p, r * r, r);
}

DP_FN float dp_exp(float x) {
    float xc = x < 89.0f ? x : 89.0f;  // NaN -> 89 (no UB in the conversions), restored below
    xc = xc > -104.0f ? xc : -104.0f;
    const float n = dp_rint(xc * 1.44269504089f);
    float r = dp_fma(n, -0.693359375f, xc);  // Cody-Waite: ln2 = 0.693359375 - 2.12194440e-4
    r = dp_fma(n, 2.12194440e-4f, r);
    const float y = dp_expm1_half(r) + 1.0f;
    const int ni = (int)n;  // [-150, 128]: two factors 2^n1 2^n2, both normal, one rounding
    const int n1 = ni >> 1;
    const float v = (y * dp_pow2i(n1)) * dp_pow2i(ni - n1);
    return x != x ? x : v;
}

// exp(x) for x in [-87, 88] (no NaN), where the result is normal: dp_exp's arithmetic with
// one scale factor and no clamps or NaN select (the same results, bit for bit). For the
// exp inside tanh and erf, whose arguments the callers bound.
DP_FN float dp_exp_normal(float x) {
    const float n = dp_rint(x * 1.44269504089f);  // [-126, 127]
    float r = dp_fma(n, -0.693359375f, x);
    r = dp_fma(n, 2.12194440e-4f, r);
    return (dp_expm1_half(r) + 1.0f) * dp_pow2i((int)n);
}

// expm1(r) for |r| <= 0.6932 (fitted: relative error <= 2^-24 before rounding).
DP_FN float dp_expm1_ln2(float r) {
    float p = 2.4681765e-05f;
    p = dp_fma(p, r, 2.0096084e-04f);
    p = dp_fma(p, r, 1.3891319e-03f);
    p = dp_fma(p, r, 8.332626e-03f);
    p = dp_fma(p, r, 4.1666597e-02f);
    p = dp_fma(p, r, 1.6666672e-01f);
    p = dp_fma(p, r, 0.5f);
    return dp_fma(p, r * r, r);
}

// n = trunc(x / ln2) keeps r and x of one sign, so 2^n expm1(r) + (2^n - 1) never cancels.
DP_FN float dp_expm1(float x) {
    float xc = x < 89.0f ? x : 89.0f;  // NaN -> 89, restored below; below -30 the result is -1
    xc = xc > -30.0f ? xc : -30.0f;
    const float n = (float)(int)(xc * 1.44269504089f);
    float r = dp_fma(n, -0.693359375f, xc);
    r = dp_fma(n, 2.12194440e-4f, r);
    const float e = dp_expm1_ln2(r);
    const int ni = (int)n;                   // [-43, 128]
    const float s = dp_pow2i(ni < 127 ? ni : 127);
    float v = dp_fma(s, e, s - 1.0f);
    v = ni > 127 ? v * 2.0f : v;             // 2^128 (e + 1): overflows exactly where expm1 does
    v = x == 0.0f ? x : v;                   // keeps -0
    return x != x ? x : v;
}

// -- log, log1p ----------------------------------------------------------------------
// log(2^fe (1 + f)) for f = m - 1 in [sqrt(1/2) - 1, sqrt(2) - 1] (Cephes logf polynomial;
// ln2 in two parts).
DP_FN float dp_log_poly(float f, float fe) {
    const float z = f * f;
    float p = 7.0376836292e-2f;
    p = dp_fma(p, f, -1.1514610310e-1f);
    p = dp_fma(p, f, 1.1676998740e-1f);
    p = dp_fma(p, f, -1.2420140846e-1f);
    p = dp_fma(p, f, 1.4249322787e-1f);
    p = dp_fma(p, f, -1.6668057665e-1f);
    p = dp_fma(p, f, 2.0000714765e-1f);
    p = dp_fma(p, f, -2.4999993993e-1f);
    p = dp_fma(p, f, 3.3333331174e-1f);
    float y = (p * f) * z;
    y = dp_fma(fe, -2.12194440e-4f, y);
    y = dp_fma(-0.5f, z, y);
    return dp_fma(fe, 0.693359375f, f + y);
}

DP_FN float dp_log(float x) {
    const bool sub = x < 1.17549435e-38f;  // subnormals (and the lanes fixed up below)
    const float xs = sub ? x * 8388608.0f : x;
    const int b = dp_as_int(xs);
    int e = ((b >> 23) & 0xff) - 126 - (sub ? 23 : 0);
    const float m = dp_as_float((b & 0x007fffff) | 0x3f000000);  // [0.5, 1)
    const bool lo = m < 0.707106781f;
    e = lo ? e - 1 : e;
    const float f = lo ? (m + m) - 1.0f : m - 1.0f;  // exact (Sterbenz)
    float v = dp_log_poly(f, (float)e);
    v = x == dp_inf() ? x : v;
    v = x == 0.0f ? -dp_inf() : v;
    return (x < 0.0f || x != x) ? dp_nan() : v;
}

// log1p(x) = log(u) + c / u with u = 1 + x and c its exact rounding error (Fast2Sum).
DP_FN float dp_log1p(float x) {
    const float u = 1.0f + x;
    const float c = dp_abs(x) <= 1.0f ? x - (u - 1.0f) : 1.0f - (u - x);
    float v = dp_log(u) + c / u;
    v = x == dp_inf() ? x : v;
    v = x == -1.0f ? -dp_inf() : v;
    v = x == 0.0f ? x : v;  // keeps -0
    return (x < -1.0f || x != x) ? dp_nan() : v;
}

// -- sin, cos --------------------------------------------------------------------------
// sin(r + q pi/2) for |r| <= pi/4 (Cephes sinf/cosf polynomials).
DP_FN float dp_trig_eval(float r, int q) {
    const float z = r * r;
    float s = -1.9515295891e-4f;
    s = dp_fma(s, z, 8.3321608736e-3f);
    s = dp_fma(s, z, -1.6666654611e-1f);
    s = dp_fma(s * z, r, r);
    float c = 2.443315711809948e-5f;
    c = dp_fma(c, z, -1.388731625493765e-3f);
    c = dp_fma(c, z, 4.166664568298827e-2f);
    c = dp_fma(c * z, z, dp_fma(-0.5f, z, 1.0f));
    const float v = (q & 1) ? c : s;
    return dp_as_float(dp_as_int(v) ^ (int)((unsigned int)(q & 2) << 30));
}

// x = q pi/2 + r for |x| < DP_TRIG_FAST_MAX (pi/2 split in three floats, FMA).
// Other lanes give q = 0, r = 0.
DP_FN float dp_trig_reduce_fast(float x, int& q) {
    const float xs = dp_abs(x) < DP_TRIG_FAST_MAX ? x : 0.0f;
    const float j = dp_rint(xs * 0.636619772f);
    float r = dp_fma(j, -1.57079637f, xs);
    r = dp_fma(j, 4.37113883e-8f, r);
    r = dp_fma(j, 1.71512451e-15f, r);
    q = (int)j;
    return r;
}

// 2/pi in 32-bit words after the binary point, behind one zero word (224 bits).
DP_CONST unsigned int dp_two_over_pi[8] = {0x00000000u, 0xa2f9836eu, 0x4e441529u, 0xfc2757d1u,
                                           0xf534ddc0u, 0xdb629599u, 0x3c439041u, 0xfe5163abu};

DP_FN unsigned int dp_tpi_window(int k, int sh) {
    const unsigned long long w =
        ((unsigned long long)dp_two_over_pi[k] << 32) | (unsigned long long)dp_two_over_pi[k + 1];
    return (unsigned int)(w >> (32 - sh));
}

// Payne-Hanek: x = q pi/2 + r for finite |x| >= DP_TRIG_FAST_MAX, from the 24-bit mantissa
// m (x = m 2^e) times the 96 bits of 2/pi that matter mod 4; r is computed in float64
// from a 62-bit fraction. Other lanes give an unspecified (q, r) without UB.
DP_FN float dp_trig_reduce_huge(float x, int& q) {
    const int ix = dp_as_int(x) & 0x7fffffff;
    int be = ix >> 23;
    be = be < 146 ? 146 : (be > 254 ? 254 : be);
    const unsigned long long m = (unsigned long long)((ix & 0x007fffff) | 0x00800000);
    const int i = be - 150 + 30;  // first bit needed: weight 2^-(e-1), table bit i
    const int k = i >> 5, sh = i & 31;
    const unsigned long long lo = m * dp_tpi_window(k + 2, sh);
    const unsigned long long mid = m * dp_tpi_window(k + 1, sh) + (lo >> 32);
    const unsigned long long hi = m * dp_tpi_window(k, sh) + (mid >> 32);
    const unsigned long long top = (hi << 32) | (mid & 0xffffffffull);  // x 2/pi mod 4, 2.62 fixed
    const unsigned long long qq = (top + (1ull << 61)) >> 62;
    const long long f = (long long)(top - (qq << 62));               // [-2^61, 2^61)
    float r = (float)((double)f * 3.4061215800865545e-19);          // pi/2 2^-62
    int qi = (int)qq;
    const bool neg = x < 0.0f;
    q = neg ? -qi : qi;
    return neg ? -r : r;
}

DP_FN float dp_trig_reduce(float x, int& q) {
    int qf, qh;
    const float rf = dp_trig_reduce_fast(x, qf);
    const float rh = dp_trig_reduce_huge(x, qh);
    const bool huge = dp_abs(x) >= DP_TRIG_FAST_MAX;
    q = huge ? qh : qf;
    return huge ? rh : rf;
}

DP_FN bool dp_trig_big(float x) {
    const float a = dp_abs(x);
    return a >= DP_TRIG_FAST_MAX && a <= 3.40282347e38f;
}

DP_FN float dp_sin_fast(float x, bool& big) {
    int q;
    const float r = dp_trig_reduce_fast(x, q);
    big |= dp_trig_big(x);
    const float v = x == 0.0f ? x : dp_trig_eval(r, q);
    return dp_nonfinite(x) ? dp_nan() : v;
}
DP_FN float dp_cos_fast(float x, bool& big) {
    int q;
    const float r = dp_trig_reduce_fast(x, q);
    big |= dp_trig_big(x);
    const float v = dp_trig_eval(r, q + 1);
    return dp_nonfinite(x) ? dp_nan() : v;
}
DP_FN float dp_sin(float x) {
    int q;
    const float r = dp_trig_reduce(x, q);
    const float v = dp_trig_eval(r, q);
    return dp_nonfinite(x) ? dp_nan() : (x == 0.0f ? x : v);
}
DP_FN float dp_cos(float x) {
    int q;
    const float r = dp_trig_reduce(x, q);
    const float v = dp_trig_eval(r, q + 1);
    return dp_nonfinite(x) ? dp_nan() : v;
}
// The precise functions as calls on the CPU (not inlined into every element function that
// reruns a block: the rerun is rare and scalar, and inlining Payne-Hanek per trig op is what
// made modules slow to build); inlined under NVRTC.
#ifdef DP_CUDA
DP_FN float dp_sin_precise(float x) { return dp_sin(x); }
DP_FN float dp_cos_precise(float x) { return dp_cos(x); }
#else
static __attribute__((noinline)) float dp_sin_precise(float x) { return dp_sin(x); }
static __attribute__((noinline)) float dp_cos_precise(float x) { return dp_cos(x); }
#endif
// P = false: the fast path and its flag (what element loops use); P = true: the precise
// rerun of a block whose flag was set.
template <bool P> DP_FN float dp_sin_t(float x, bool& big) { return P ? dp_sin_precise(x) : dp_sin_fast(x, big); }
template <bool P> DP_FN float dp_cos_t(float x, bool& big) { return P ? dp_cos_precise(x) : dp_cos_fast(x, big); }

// -- tanh, sigmoid, softplus -----------------------------------------------------------
DP_FN float dp_tanh(float x) {
    const float a = dp_abs(x);
    const float z = x * x;
    float p = -5.70498872745e-3f;  // Cephes tanhf, |x| < 0.625
    p = dp_fma(p, z, 2.06390887954e-2f);
    p = dp_fma(p, z, -5.37397155531e-2f);
    p = dp_fma(p, z, 1.33314422036e-1f);
    p = dp_fma(p, z, -3.33332819422e-1f);
    const float small = dp_fma(p * z, x, x);
    const float e = dp_exp_normal(2.0f * (a < 20.0f ? a : 20.0f));  // NaN -> 20, restored below
    const float large = dp_copysign(1.0f - 2.0f / (e + 1.0f), x);
    const float v = a < 0.625f ? small : large;
    return (x != x || x == 0.0f) ? x : v;  // NaN, and the sign of -0
}

// 1 / (1 + e^-x) from e = exp(-|x|) <= 1: no overflow, subnormal results kept for x < 0.
DP_FN float dp_sigmoid(float x) {
    const float e = dp_exp(-dp_abs(x));
    return (x >= 0.0f ? 1.0f : e) / (1.0f + e);
}

// log(1 + e^x) = max(x, 0) + log1p(e) with e = exp(-|x|) in [0, 1]. 1 + e lies in [1, 2],
// so log1p(e) is dp_log's polynomial at f = e (1 + e < sqrt 2: exact) or at f = (e - 1)/2
// (else). d = e - 1 is exact for e >= 1/2 (Sterbenz); for e in [sqrt 2 - 1, 1/2) its
// rounding error de (exact: Fast2Sum) enters as de/2 / (1 + f) ~ 0.6875 de (1 + f in
// [0.707, 0.75]). No rounded 1 + e, no division, and none of dp_log's selects for
// subnormal, negative, zero or infinite arguments.
DP_FN float dp_softplus(float x) {
    const float e = dp_exp(-dp_abs(x));
    const bool hi = e >= 0.414213562f;
    const float d = e - 1.0f;
    const float de = e - (d + 1.0f);
    const float l = dp_log_poly(hi ? 0.5f * d : e, hi ? 1.0f : 0.0f);
    const float v = (x > 0.0f ? x : 0.0f) + (hi ? dp_fma(de, 0.6875f, l) : l);
    return x != x ? x : v;
}

// -- erf -------------------------------------------------------------------------------
// |x| < 0.875: x + x Q(x^2); 0.875 <= |x|: 1 - exp(P(min(|x|, 4))), P fitted to log(erfc)
// (erfc(4) < 2^-25, so erf rounds to 1 from there on).
DP_FN float dp_erf(float x) {
    const float a = dp_abs(x);
    const float z = x * x;
    float q = 8.714052e-05f;
    q = dp_fma(q, z, -8.220516e-04f);
    q = dp_fma(q, z, 5.2076215e-03f);
    q = dp_fma(q, z, -2.686197e-02f);
    q = dp_fma(q, z, 1.1283741e-01f);
    q = dp_fma(q, z, -3.7612638e-01f);
    q = dp_fma(q, z, 1.2837917e-01f);
    const float small = dp_fma(x, q, x);
    const float t = a < 4.0f ? a : 4.0f;  // NaN -> 4, restored below
    float p = -7.5579624e-07f;
    p = dp_fma(p, t, -1.09269895e-05f);
    p = dp_fma(p, t, 3.7580918e-04f);
    p = dp_fma(p, t, -3.981554e-03f);
    p = dp_fma(p, t, 2.474422e-02f);
    p = dp_fma(p, t, -1.07813805e-01f);
    p = dp_fma(p, t, -6.337022e-01f);
    p = dp_fma(p, t, -1.1293631f);
    p = dp_fma(p, t, 1.4679505e-04f);
    const float large = dp_copysign(1.0f - dp_exp_normal(p), x);  // p in [-18, 0.0002]
    const float v = a < 0.875f ? small : large;
    return x != x ? x : v;
}

// -- pow -------------------------------------------------------------------------------
// log2(a) for a positive normal double (a float widened), to ~2^-40 relative; exact
// (the exponent) for powers of two.
DP_FN double dp_log2_d(double a) {
    const long long b = dp_as_i64(a);
    int e = (int)((b >> 52) & 0x7ff) - 1023;
    double m = dp_as_double((b & 0x000fffffffffffffLL) | 0x3ff0000000000000LL);  // [1, 2)
    const bool hi = m > 1.4142135623730951;
    m = hi ? m * 0.5 : m;
    e = hi ? e + 1 : e;
    const double f = m - 1.0;
    const double s = f / (2.0 + f);  // log m = 2 atanh(s), |s| <= 0.1716
    const double z = s * s;
    double p = 1.0 / 15.0;
    p = dp_fma_d(p, z, 1.0 / 13.0);
    p = dp_fma_d(p, z, 1.0 / 11.0);
    p = dp_fma_d(p, z, 1.0 / 9.0);
    p = dp_fma_d(p, z, 1.0 / 7.0);
    p = dp_fma_d(p, z, 1.0 / 5.0);
    p = dp_fma_d(p, z, 1.0 / 3.0);
    const double s2 = s + s;
    return dp_fma_d(dp_fma_d(s2 * z, p, s2), 1.4426950408889634, (double)e);
}

// Horner steps of exp's Taylor series from ``p`` (the r^11 coefficient's part so far) down
// to the r^2 coefficient 1/2: ``((p r + 1/10!) r + ...) r + 1/2``.
DP_FN double dp_exp_taylor_to2_d(double p, double r) {
    p = dp_fma_d(p, r, 1.0 / 3628800.0);
    p = dp_fma_d(p, r, 1.0 / 362880.0);
    p = dp_fma_d(p, r, 1.0 / 40320.0);
    p = dp_fma_d(p, r, 1.0 / 5040.0);
    p = dp_fma_d(p, r, 1.0 / 720.0);
    p = dp_fma_d(p, r, 1.0 / 120.0);
    p = dp_fma_d(p, r, 1.0 / 24.0);
    p = dp_fma_d(p, r, 1.0 / 6.0);
    return dp_fma_d(p, r, 0.5);
}

// 2^t in float64 to ~2^-45 relative, exact for integer t; t is clamped to [-400, 400]
// (NaN -> 400: callers select NaN results themselves).
DP_FN double dp_exp2_d(double t) {
    double tc = t < 400.0 ? t : 400.0;
    tc = tc > -400.0 ? tc : -400.0;
    const double n = dp_rint_d(tc);
    const double r = (tc - n) * 0.6931471805599453;       // tc - n is exact, |r| <= ln2 / 2
    double p = dp_exp_taylor_to2_d(1.0 / 39916800.0, r);  // exp(r): Taylor to r^11
    p = dp_fma_d(p, r, 1.0);
    p = dp_fma_d(p, r, 1.0);
    const long long ni = (long long)n;  // [-400, 400]: 2^n is a normal double
    return p * dp_as_double((ni + 1023) << 52);
}

// x^y = 2^(y log2|x|) in float64, rounded once to float32 (exact powers such as 2^-150
// round to even like a correctly rounded pow); the C99/IEEE special cases (NumPy's float32
// power) as selects.
DP_FN float dp_pow(float x, float y) {
    const float ax = dp_abs(x);
    const double inf_d = dp_as_double(0x7ff0000000000000LL);
    double la = dp_log2_d(ax > 0.0f ? (double)ax : 1.0);
    la = ax == 0.0f ? -inf_d : (ax == dp_inf() ? inf_d : la);
    float v = (float)dp_exp2_d((double)y * la);  // y * la is exact for powers of two
    const bool yint = dp_floor(y) == y;  // true for +-inf, false for NaN
    const float ay = dp_abs(y);
    const int yi = (int)(ay < 16777216.0f ? y : 0.0f);
    const bool yodd = yint && ay < 16777216.0f && (yi & 1);
    v = (dp_as_int(x) < 0 && yodd) ? -v : v;
    v = (x < 0.0f && x > -dp_inf() && !yint) ? dp_nan() : v;
    v = (x != x || y != y) ? x + y : v;
    v = (ax == 1.0f && ay == dp_inf()) ? 1.0f : v;
    return (y == 0.0f || x == 1.0f) ? 1.0f : v;
}

// -- atan2 -----------------------------------------------------------------------------
// atan(w) on w = min/max(|x|, |y|) in [0, 1] (odd polynomial, degree 17, fitted), then
// atan2 = k pi/2 + s atan(w) with one final rounding (pi/2 in two floats, k <= 2 exact).
DP_FN float dp_atan2(float y, float x) {
    const float ax = dp_abs(x), ay = dp_abs(y);
    const bool swap = ay > ax;
    const float mn = swap ? ax : ay, mx = swap ? ay : ax;
    const float w = mx == 0.0f ? 0.0f : (mn == dp_inf() ? 1.0f : mn / mx);  // both inf: pi/4
    const float z = w * w;
    float p = -1.7892655e-03f;
    p = dp_fma(p, z, 1.089883e-02f);
    p = dp_fma(p, z, -3.1156866e-02f);
    p = dp_fma(p, z, 5.794697e-02f);
    p = dp_fma(p, z, -8.4035985e-02f);
    p = dp_fma(p, z, 1.0952576e-01f);
    p = dp_fma(p, z, -1.4264402e-01f);
    p = dp_fma(p, z, 1.9998574e-01f);
    p = dp_fma(p, z, -3.3333302e-01f);
    const float at = dp_fma(p * z, w, w);
    const bool xneg = dp_as_int(x) < 0;
    const float s = swap != xneg ? -1.0f : 1.0f;
    const float kf = swap ? 1.0f : (xneg ? 2.0f : 0.0f);
    const float v = dp_fma(kf, 1.57079637f, dp_fma(kf, -4.37113883e-8f, s * at));
    const float r = dp_as_float(dp_as_int(v) | (dp_as_int(y) & (int)0x80000000));
    return (x != x || y != y) ? x + y : r;
}

// -- reduction lanes (the op table's cxx_reduce templates) -------------------------------
// Generated drivers fold elements into 8 lanes fixed by element index; these merge the
// lanes in one fixed tree ((0+1)+(2+3))+((4+5)+(6+7)) and fold partials in order, so a
// result never depends on vector width, thread count or compiler. Max/min lanes carry NaN
// flags beside the values (a select-max vectorises; a NaN-propagating one does not).
template <class T> struct dp_limits;
template <> struct dp_limits<float> {
    DP_FN float lowest() { return -dp_inf(); }
    DP_FN float highest() { return dp_inf(); }
};
template <> struct dp_limits<int> {
    DP_FN int lowest() { return (int)0x80000000; }
    DP_FN int highest() { return 0x7fffffff; }
};
template <> struct dp_limits<unsigned char> {
    DP_FN unsigned char lowest() { return 0; }
    DP_FN unsigned char highest() { return 255; }
};
template <class T> DP_FN T dp_sel_gt(T x, T m) { return x > m ? x : m; }
template <class T> DP_FN T dp_sel_lt(T x, T m) { return x < m ? x : m; }
template <class T> DP_FN T dp_lanes_sum(const T* a) {
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}
template <class T> DP_FN T dp_lanes_gt(const T* a, const int* nan) {
    const T m = dp_sel_gt(dp_sel_gt(dp_sel_gt(a[1], a[0]), dp_sel_gt(a[3], a[2])),
                          dp_sel_gt(dp_sel_gt(a[5], a[4]), dp_sel_gt(a[7], a[6])));
    const int n = ((nan[0] | nan[1]) | (nan[2] | nan[3])) | ((nan[4] | nan[5]) | (nan[6] | nan[7]));
    return n ? (T)dp_nan() : m;
}
template <class T> DP_FN T dp_lanes_lt(const T* a, const int* nan) {
    const T m = dp_sel_lt(dp_sel_lt(dp_sel_lt(a[1], a[0]), dp_sel_lt(a[3], a[2])),
                          dp_sel_lt(dp_sel_lt(a[5], a[4]), dp_sel_lt(a[7], a[6])));
    const int n = ((nan[0] | nan[1]) | (nan[2] | nan[3])) | ((nan[4] | nan[5]) | (nan[6] | nan[7]));
    return n ? (T)dp_nan() : m;
}
// NaN-propagating max/min of two partials (the earlier wins ties).
template <class T> DP_FN T dp_nan_gt(T a, T b) { return a != a ? a : (b != b ? b : (b > a ? b : a)); }
template <class T> DP_FN T dp_nan_lt(T a, T b) { return a != a ? a : (b != b ? b : (b < a ? b : a)); }
// argmax/argmin order: NaN beats every number (NumPy), then the larger (smaller) value,
// then the smaller index: a total order, so lanes and partials merge in any fixed tree.
template <class T> DP_FN bool dp_arg_better_gt(T x, int r, T v, int i) {
    const bool xn = x != x, vn = v != v;
    return (xn && !vn) || (!xn && !vn && x > v) || (((xn && vn) || x == v) && r < i);
}
template <class T> DP_FN bool dp_arg_better_lt(T x, int r, T v, int i) {
    const bool xn = x != x, vn = v != v;
    return (xn && !vn) || (!xn && !vn && x < v) || (((xn && vn) || x == v) && r < i);
}
template <class T> DP_FN void dp_arg_fold_gt(T& v, int& i, T ov, int oi) {
    const bool u = dp_arg_better_gt(ov, oi, v, i);
    v = u ? ov : v;
    i = u ? oi : i;
}
template <class T> DP_FN void dp_arg_fold_lt(T& v, int& i, T ov, int oi) {
    const bool u = dp_arg_better_lt(ov, oi, v, i);
    v = u ? ov : v;
    i = u ? oi : i;
}
template <class T> DP_FN void dp_arg_lanes_gt(const T* a, const int* ai, T& v, int& i) {
    v = a[0];
    i = ai[0];
    for (int l = 1; l < 8; ++l) dp_arg_fold_gt(v, i, a[l], ai[l]);
}
template <class T> DP_FN void dp_arg_lanes_lt(const T* a, const int* ai, T& v, int& i) {
    v = a[0];
    i = ai[0];
    for (int l = 1; l < 8; ++l) dp_arg_fold_lt(v, i, a[l], ai[l]);
}
// logsumexp: a partial is (m, s) with m finite (the shift) and s = sum exp(x - m).
DP_FN float dp_finite_or_zero(float m) { return dp_nonfinite(m) ? 0.0f : m; }
DP_FN void dp_lse_fold(float& m, double& s, float om, double os) {
    const float top = om > m ? om : m;
    s = s * (double)dp_exp(m - top) + os * (double)dp_exp(om - top);
    m = top;
}

// -- float64 -------------------------------------------------------------------------
// Overloads of the float32 functions for double, so one op-table template serves both
// types (C++ picks by argument type). floor, ceil and sqrt are builtins (one instruction
// each); pow and the precise variants of sin and cos call libm (CPU: clang's
// __builtin_* lower to the libm symbols; CUDA: the CUDA math library), which is within ~1 ulp
// and keeps C99's special values, but whose calls do not vectorise. The rest are written out
// below. sigmoid and softplus use the float32 functions' formulas.
#ifdef DP_CUDA
#define DP_LIBM(f) ::f
#else
#define DP_LIBM(f) __builtin_##f
#endif
DP_FN double dp_floor(double x) { return DP_LIBM(floor)(x); }
DP_FN double dp_ceil(double x) { return DP_LIBM(ceil)(x); }
DP_FN double dp_sqrt(double x) { return DP_LIBM(sqrt)(x); }
DP_FN double dp_rsqrt(double x) { return 1.0 / dp_sqrt(x); }
DP_FN double dp_abs(double x) { return dp_as_double(dp_as_i64(x) & 0x7fffffffffffffffLL); }
DP_FN double dp_copysign(double mag, double sgn) {
    return dp_as_double((dp_as_i64(mag) & 0x7fffffffffffffffLL) | (dp_as_i64(sgn) & (long long)0x8000000000000000ULL));
}
DP_FN int dp_nonfinite(double x) {
    return (dp_as_i64(x) & 0x7ff0000000000000LL) == 0x7ff0000000000000LL;
}
// exp, expm1, tanh, log, log1p, sin, cos, atan2 and erf are plain arithmetic instead (docs/math.md), so
// the element loops that call them vectorise: in a float64 MLP layer's forward kernel
// (bias, tanh, the loss) libm's tanh took 4.1 of its 20.6 ms (2026-12-04).
DP_FN double dp_pow2i_d(long long n) { return dp_as_double((n + 1023) << 52); }  // -1022 <= n <= 1023

// expm1(r) by Horner from the coefficient ``p`` of r^13 (the sum of the higher terms' part
// there) down to r^2: Taylor's coefficients 1/k!.
DP_FN double dp_expm1_from13_d(double p, double r) {
    p = dp_fma_d(p, r, 1.0 / 479001600.0);
    p = dp_fma_d(p, r, 1.0 / 39916800.0);
    return dp_fma_d(dp_exp_taylor_to2_d(p, r), r * r, r);
}

// expm1(r) for |r| <= ln2/2 (+ rounding): Taylor to r^13, truncation below 2^-57 relative.
DP_FN double dp_expm1_half_d(double r) { return dp_expm1_from13_d(1.0 / 6227020800.0, r); }

// dp_exp's float32 scheme in double: Cody-Waite with fdlibm's ln2 split (the high part's low
// 32 bits are zero, so n * ln2_hi is exact), 2^n as two normal factors (n in [-1076, 1024]):
// one rounding, subnormal results included; overflow and underflow where libm's are.
DP_FN double dp_exp(double x) {
    double xc = x < 710.0 ? x : 710.0;  // NaN -> 710 (no UB in the conversions), restored below
    xc = xc > -746.0 ? xc : -746.0;
    const double n = dp_rint_d(xc * 1.4426950408889634);
    double r = dp_fma_d(n, -6.93147180369123816490e-01, xc);
    r = dp_fma_d(n, -1.90821492927058770002e-10, r);
    const double y = dp_expm1_half_d(r) + 1.0;
    const long long ni = (long long)n;
    const long long n1 = ni >> 1;
    const double v = (y * dp_pow2i_d(n1)) * dp_pow2i_d(ni - n1);
    return x != x ? x : v;
}

// expm1(r) for |r| <= ln2 (+ rounding): Taylor to r^17, truncation below 2^-56 relative.
DP_FN double dp_expm1_ln2_d(double r) {
    double p = 1.0 / 355687428096000.0;
    p = dp_fma_d(p, r, 1.0 / 20922789888000.0);
    p = dp_fma_d(p, r, 1.0 / 1307674368000.0);
    p = dp_fma_d(p, r, 1.0 / 87178291200.0);
    return dp_expm1_from13_d(dp_fma_d(p, r, 1.0 / 6227020800.0), r);
}

// float32 dp_expm1's scheme in double: n = trunc(x / ln2) keeps r and x of one sign, so
// 2^n expm1(r) + (2^n - 1) never cancels; below -40 the result rounds to -1.
DP_FN double dp_expm1(double x) {
    double xc = x < 710.0 ? x : 710.0;  // NaN -> 710, restored below
    xc = xc > -40.0 ? xc : -40.0;
    const double n = (double)(long long)(xc * 1.4426950408889634);
    double r = dp_fma_d(n, -6.93147180369123816490e-01, xc);
    r = dp_fma_d(n, -1.90821492927058770002e-10, r);
    const double e = dp_expm1_ln2_d(r);
    const long long ni = (long long)n;  // [-57, 1024]
    const double s = dp_pow2i_d(ni < 1023 ? ni : 1023);
    double v = dp_fma_d(s, e, s - 1.0);
    v = ni > 1023 ? v * 2.0 : v;  // 2^1024 (e + 1): overflows exactly where expm1 does
    v = x == 0.0 ? x : v;         // keeps -0
    return x != x ? x : v;
}
// fdlibm's log: x = 2^k m with m in [sqrt(1/2), sqrt(2)) (subnormals scaled by 2^54 first),
// log m = f - f^2/2 + s (f^2/2 + R(s^2)) for f = m - 1, s = f / (2 + f); k ln2 in two parts.
DP_FN double dp_log(double x) {
    const bool sub = x < 2.2250738585072014e-308;  // and 0, negatives, selected below
    const long long b = dp_as_i64(sub ? x * 18014398509481984.0 : x);
    long long hx = (b >> 32) + (0x3ff00000LL - 0x3fe6a09eLL);
    const long long k = (hx >> 20) - 0x3ff - (sub ? 54 : 0);
    hx = (hx & 0x000fffffLL) + 0x3fe6a09eLL;
    const double f = dp_as_double((hx << 32) | (b & 0xffffffffLL)) - 1.0;
    const double hfsq = 0.5 * f * f;
    const double s = f / (2.0 + f);
    const double z = s * s;
    const double w = z * z;
    const double t1 = w * (3.999999999940941908e-01 + w * (2.222219843214978396e-01 + w * 1.531383769920937332e-01));
    const double t2 =
        z * (6.666666666666735130e-01 + w * (2.857142874366239149e-01 + w * (1.818357216161805012e-01 + w * 1.479819860511658591e-01)));
    const double dk = (double)k;
    const double v = s * (hfsq + t1 + t2) + dk * 1.90821492927058770002e-10 - hfsq + f + dk * 6.93147180369123816490e-01;
    const double inf = (double)dp_inf();
    double out = x == inf ? x : v;
    out = x == 0.0 ? -inf : out;
    out = x < 0.0 ? (double)dp_nan() : out;
    return x != x ? x : out;
}
// log(1 + x) as log(u) for u = 1 + x, plus the rounding of u relative to u: below 2^-53,
// u = 1 and the result is x; -1 -> -inf, below -1 NaN, inf, -0 and NaN as libm.
DP_FN double dp_log1p(double x) {
    const double u = 1.0 + x;
    const double v = dp_log(u) + (x - (u - 1.0)) / u;
    const double inf = (double)dp_inf();
    double out = x == -1.0 ? -inf : v;
    out = (x == inf || x == 0.0) ? x : out;
    return x != x ? x : out;
}
// sin and cos: for |x| < 2^20, x = q pi/2 + r by Cody-Waite in three FMA steps (pi/2 as three
// doubles: each step's difference is exact there but for its last rounding), fdlibm's kernels
// on |r| <= pi/4 (sin: x + x^3 (S1 + z R(z)); cos: musl's 1 - z/2 + z^2 C(z) with the
// compensated 1 - z/2). A finite |x| >= 2^20 raises `big`, and the precise variant
// (P: the driver's rerun of the block) is libm's.
DP_FN double dp_trig_reduce_fast_d(double x, long long& q) {
    const double xs = dp_abs(x) < 1048576.0 ? x : 0.0;  // NaN, inf and huge -> 0, selected later
    const double j = dp_rint_d(xs * 0.63661977236758134);
    double r = dp_fma_d(j, -1.5707963267948966, xs);
    r = dp_fma_d(j, -6.123233995736766e-17, r);
    r = dp_fma_d(j, 1.4973849048591698e-33, r);
    q = (long long)j;
    return r;
}
DP_FN double dp_trig_eval_d(double r, long long q) {
    const double z = r * r;
    const double sr = 8.33333333332248946124e-03 +
                      z * (-1.98412698298579493134e-04 +
                           z * (2.75573137070700676789e-06 + z * (-2.50507602534068634195e-08 + z * 1.58969099521155010221e-10)));
    const double s = r + (z * r) * (-1.66666666666666324348e-01 + z * sr);
    const double cr =
        z * (4.16666666666666019037e-02 +
             z * (-1.38888888888741095749e-03 +
                  z * (2.48015872894767294178e-05 +
                       z * (-2.75573143513906633035e-07 + z * (2.08757232129817482790e-09 + z * -1.13596475577881948265e-11)))));
    const double hz = 0.5 * z;
    const double w = 1.0 - hz;
    const double c = w + (((1.0 - w) - hz) + z * cr);
    const double v = (q & 1) ? c : s;
    return (q & 2) ? -v : v;
}
DP_FN bool dp_trig_big_d(double x) {
    const double a = dp_abs(x);
    return a >= 1048576.0 && a <= 1.7976931348623157e308;
}
DP_FN double dp_sin_fast_d(double x, bool& big) {
    long long q;
    const double r = dp_trig_reduce_fast_d(x, q);
    big |= dp_trig_big_d(x);
    const double v = x == 0.0 ? x : dp_trig_eval_d(r, q);
    return dp_nonfinite(x) ? (double)dp_nan() : v;
}
DP_FN double dp_cos_fast_d(double x, bool& big) {
    long long q;
    const double r = dp_trig_reduce_fast_d(x, q);
    big |= dp_trig_big_d(x);
    const double v = dp_trig_eval_d(r, q + 1);
    return dp_nonfinite(x) ? (double)dp_nan() : v;
}
template <bool P> DP_FN double dp_sin_t(double x, bool& big) { return P ? DP_LIBM(sin)(x) : dp_sin_fast_d(x, big); }
template <bool P> DP_FN double dp_cos_t(double x, bool& big) { return P ? DP_LIBM(cos)(x) : dp_cos_fast_d(x, big); }
// Cephes tanh: x + x^3 P(x^2)/Q(x^2) below 0.625, else 1 - 2/(e^2|x| + 1) (1 at |x| >= 20:
// 2/(e^40 + 1) < 2^-56).
DP_FN double dp_tanh(double x) {
    const double a = dp_abs(x);
    const double z = x * x;
    const double p = ((-9.64399179425052238628e-1 * z - 9.92877231001918586564e1) * z - 1.61468768441708447952e3) * z;
    const double q = ((z + 1.12811678491632931402e2) * z + 2.23548839060100448583e3) * z + 4.84406305325125486048e3;
    const double small = dp_fma_d(x, p / q, x);
    const double e = dp_exp(2.0 * (a < 20.0 ? a : 20.0));  // NaN -> 20, restored below
    const double m = 1.0 - 2.0 / (e + 1.0);
    const double large = dp_copysign(m, x);
    const double v = a < 0.625 ? small : large;
    return (x != x || x == 0.0) ? x : v;  // NaN, and the sign of -0
}
DP_FN double dp_sigmoid(double x) {
    const double e = dp_exp(-dp_abs(x));
    return (x >= 0.0 ? 1.0 : e) / (1.0 + e);
}
DP_FN double dp_softplus(double x) {
    const double v = (x > 0.0 ? x : 0.0) + dp_log1p(dp_exp(-dp_abs(x)));
    return x != x ? x : v;
}
// Cephes erf: x T(x^2)/U(x^2) below 1, else 1 - exp(-x^2) P(|x|)/Q(|x|) with |x| clamped to 6
// (erfc(6) < 2^-55: the result is +-1 there).
DP_FN double dp_erf(double x) {
    const double a = dp_abs(x);
    const double z = x * x;
    const double t = (((9.60497373987051638749e0 * z + 9.00260197203842689217e1) * z + 2.23200534594684319226e3) * z +
                      7.00332514112805075473e3) * z + 5.55923013010394962768e4;
    const double u = ((((z + 3.35617141647503099647e1) * z + 5.21357949780152679795e2) * z + 4.59432382970980127987e3) * z +
                      2.26290000613890934246e4) * z + 4.92673942608635921086e4;
    const double small = x * (t / u);
    const double c = a < 6.0 ? a : 6.0;  // NaN -> 6, restored below
    const double p =
        (((((((2.46196981473530512524e-10 * c + 5.64189564831068821977e-1) * c + 7.46321056442269912687e0) * c +
             4.86371970985681366614e1) * c + 1.96520832956077098242e2) * c + 5.26445194995477358631e2) * c +
          9.34528527171957607540e2) * c + 1.02755188689515710272e3) * c + 5.57535335369399327526e2;
    const double q =
        (((((((c + 1.32281951154744992508e1) * c + 8.67072140885989742329e1) * c + 3.54937778887819891062e2) * c +
            9.75708501743205489753e2) * c + 1.82390916687909736289e3) * c + 2.24633760818710981792e3) * c +
         1.65666309194161350182e3) * c + 5.57535340817727675546e2;
    const double m = 1.0 - dp_exp(-(c * c)) * (p / q);
    const double large = dp_copysign(m, x);
    const double v = a < 1.0 ? small : large;
    return x != x ? x : v;
}
DP_FN double dp_pow(double x, double y) { return DP_LIBM(pow)(x, y); }
// float32 dp_atan2's folding (w = min/max of |x|, |y| in [0, 1], the quadrant by selects, pi/2
// in two parts) around Cephes' atan: t + t^3 P(t^2)/Q(t^2), above 0.66 as pi/4 + atan((w - 1)
// / (w + 1)) with pi/4's low part.
DP_FN double dp_atan2(double y, double x) {
    const double ax = dp_abs(x), ay = dp_abs(y);
    const bool swap = ay > ax;
    const double mn = swap ? ax : ay, mx = swap ? ay : ax;
    const double w = mx == 0.0 ? 0.0 : (mn == (double)dp_inf() ? 1.0 : mn / mx);  // both inf: pi/4
    const bool mid = w > 0.66;
    const double t = mid ? (w - 1.0) / (w + 1.0) : w;
    const double z = t * t;
    const double num =
        ((((-8.750608600031904122785e-1 * z - 1.615753718733365076637e1) * z - 7.500855792314704667340e1) * z -
          1.228866684490136173410e2) * z - 6.485021904942025371773e1) * z;
    const double den = ((((z + 2.485846490142306297962e1) * z + 1.650270098316988542046e2) * z + 4.328810604912902668951e2) * z +
                        4.853903996359136964868e2) * z + 1.945506571482613964425e2;
    const double at = (mid ? 7.85398163397448309616e-1 : 0.0) + ((t + t * (num / den)) + (mid ? 3.061616997868382943065e-17 : 0.0));
    const bool xneg = dp_as_i64(x) < 0;
    const double s = swap != xneg ? -1.0 : 1.0;
    const double kf = swap ? 1.0 : (xneg ? 2.0 : 0.0);
    const double v = dp_fma_d(kf, 1.5707963267948966, dp_fma_d(kf, 6.123233995736766e-17, s * at));
    const double r = dp_copysign(v, y);
    return (x != x || y != y) ? x + y : r;
}
template <> struct dp_limits<double> {
    DP_FN double lowest() { return -(double)dp_inf(); }
    DP_FN double highest() { return (double)dp_inf(); }
};
DP_FN double dp_finite_or_zero(double m) { return dp_nonfinite(m) ? 0.0 : m; }
DP_FN void dp_lse_fold(double& m, double& s, double om, double os) {
    const double top = om > m ? om : m;
    s = s * dp_exp(m - top) + os * dp_exp(om - top);
    m = top;
}

#ifndef DP_CUDA
// Line transposes (CPU only) for the recurrences whose lines are rows (`recurrence.py`): a
// task's work line holds 32 lines lane-interleaved (w[j * L + l]), so filling it from rows, or
// storing it back, moves an 8 x 8 block at a time through registers: eight 8-float loads of
// eight rows, an in-register transpose (three rounds of shuffles), eight 8-double stores of
// eight entries. Element by element (a gather or scatter of 32 rows per entry) the moves cost
// as much as the recursion. Pure data movement: a float32 value converts to double exactly and
// back with the scalar cast's rounding.
// DP_NO_VECTOR_SHUFFLES: the fallback below (tests/backend/test_row_tiles.py builds both).
#if !defined(DP_NO_VECTOR_SHUFFLES) && (defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 12))
typedef float dp_f8 __attribute__((vector_size(32)));
typedef double dp_d8 __attribute__((vector_size(64)));
typedef int dp_i8 __attribute__((vector_size(32)));
typedef long long dp_l8 __attribute__((vector_size(64)));
template <typename V>
DP_FN void dp_transpose8(V* v) {  // v[r][k] -> v[k][r], 8 x 8 of float or double
    V t[8], u[8];
    for (int r = 0; r < 8; r += 2) {
        t[r] = __builtin_shufflevector(v[r], v[r + 1], 0, 8, 1, 9, 4, 12, 5, 13);
        t[r + 1] = __builtin_shufflevector(v[r], v[r + 1], 2, 10, 3, 11, 6, 14, 7, 15);
    }
    for (int r = 0; r < 8; r += 4) {
        u[r] = __builtin_shufflevector(t[r], t[r + 2], 0, 1, 8, 9, 4, 5, 12, 13);
        u[r + 1] = __builtin_shufflevector(t[r], t[r + 2], 2, 3, 10, 11, 6, 7, 14, 15);
        u[r + 2] = __builtin_shufflevector(t[r + 1], t[r + 3], 0, 1, 8, 9, 4, 5, 12, 13);
        u[r + 3] = __builtin_shufflevector(t[r + 1], t[r + 3], 2, 3, 10, 11, 6, 7, 14, 15);
    }
    for (int k = 0; k < 4; ++k) {
        v[k] = __builtin_shufflevector(u[k], u[k + 4], 0, 1, 2, 3, 8, 9, 10, 11);
        v[k + 4] = __builtin_shufflevector(u[k], u[k + 4], 4, 5, 6, 7, 12, 13, 14, 15);
    }
}
// w[k * L + r] = x[b[r] + j + k] for r, k < 8 (rows b[0..7] of x, entries j .. j + 7).
DP_FN void dp_rows_to_lanes8(const float* x, const int* b, int j, double* w, int L) {
    dp_f8 v[8];
    for (int r = 0; r < 8; ++r) __builtin_memcpy(&v[r], x + b[r] + j, sizeof(dp_f8));
    dp_transpose8(v);
    for (int k = 0; k < 8; ++k) {
        const dp_d8 d = __builtin_convertvector(v[k], dp_d8);
        __builtin_memcpy(w + k * L, &d, sizeof(dp_d8));
    }
}
DP_FN void dp_rows_to_lanes8(const double* x, const int* b, int j, double* w, int L) {
    dp_d8 v[8];
    for (int r = 0; r < 8; ++r) __builtin_memcpy(&v[r], x + b[r] + j, sizeof(dp_d8));
    dp_transpose8(v);
    for (int k = 0; k < 8; ++k) __builtin_memcpy(w + k * L, &v[k], sizeof(dp_d8));
}
// y[b[r] + i + k] = w[k * L + r] (rounded to y's type) for r, k < 8; bad[r] |= whether one of
// lane r's is not finite.
DP_FN void dp_lanes_to_rows8(const double* w, int L, float* y, const int* b, int i, int* bad) {
    dp_f8 v[8];
    dp_i8 any = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int k = 0; k < 8; ++k) {
        dp_d8 d;
        __builtin_memcpy(&d, w + k * L, sizeof(dp_d8));
        v[k] = __builtin_convertvector(d, dp_f8);
        dp_i8 bits;
        __builtin_memcpy(&bits, &v[k], sizeof(dp_i8));
        any |= (bits & 0x7f800000) == 0x7f800000;
    }
    for (int r = 0; r < 8; ++r) bad[r] |= any[r] != 0;
    dp_transpose8(v);
    for (int r = 0; r < 8; ++r) __builtin_memcpy(y + b[r] + i, &v[r], sizeof(dp_f8));
}
DP_FN void dp_lanes_to_rows8(const double* w, int L, double* y, const int* b, int i, int* bad) {
    dp_d8 v[8];
    dp_l8 any = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int k = 0; k < 8; ++k) {
        __builtin_memcpy(&v[k], w + k * L, sizeof(dp_d8));
        dp_l8 bits;
        __builtin_memcpy(&bits, &v[k], sizeof(dp_l8));
        any |= (bits & 0x7ff0000000000000LL) == 0x7ff0000000000000LL;
    }
    for (int r = 0; r < 8; ++r) bad[r] |= any[r] != 0;
    dp_transpose8(v);
    for (int r = 0; r < 8; ++r) __builtin_memcpy(y + b[r] + i, &v[r], sizeof(dp_d8));
}
#else  // a compiler without vector shuffles (a bundle's host replay): the same moves one by one
template <typename T>
DP_FN void dp_rows_to_lanes8(const T* x, const int* b, int j, double* w, int L) {
    for (int k = 0; k < 8; ++k) for (int r = 0; r < 8; ++r) w[k * L + r] = (double)x[b[r] + j + k];
}
template <typename T>
DP_FN void dp_lanes_to_rows8(const double* w, int L, T* y, const int* b, int i, int* bad) {
    for (int k = 0; k < 8; ++k) for (int r = 0; r < 8; ++r) {
        y[b[r] + i + k] = (T)w[k * L + r];
        bad[r] |= dp_nonfinite(y[b[r] + i + k]);
    }
}
#endif  // DP_NO_VECTOR_SHUFFLES
#endif  // DP_CUDA

#endif  // DP_MATH_H
