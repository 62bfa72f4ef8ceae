/* dvpipe.backends._native: the CPU backend's one compiled kernel.
 *
 * normalise_planes(src, dst, order, mean, inv_std, shrink)
 * yuv420_normalise(...): decoded video planes straight to the same output (further down)
 * yuv420_bgr24_normalise(...): the same through FFmpeg's own bgr24 arithmetic (further down)
 * chroma_blur(...): the chroma filter a 1/2-scale JPEG decode needs to match the reference (further down)
 * normalise_chroma(...): normalise_planes with that filter fused in (further down)
 *
 *   src      uint8 HxWx3 (HWC, any row stride; channel order as decoded, BGR)
 *   dst      float32 3xhxw (CHW, any plane and row stride: the camera's slot of the batch buffer)
 *   order    output plane c reads source channel order[c]  ((2, 1, 0): BGR -> RGB)
 *   mean     per output plane, in grey levels (0..255)
 *   inv_std  per output plane, 1 / std
 *   shrink   1: h == H, w == W:    dst[c, y, x] = (src[y, x, order[c]] - mean[c]) * inv_std[c]
 *            2: H == 2h, W == 2w:  dst[c, y, x] = (S / 4 - mean[c]) * inv_std[c], S the exact
 *                                  integer sum of the 2x2 block src[2y:2y+2, 2x:2x+2, order[c]]
 *
 * One pass over the input, every output byte written once, float32 arithmetic in the order
 * written above (built with -ffp-contract=off: no fused multiply-add). Against mmcv's
 * imnormalize, shrink 1 is bit-identical when std = 1 and within 1 ulp otherwise (see DV_NORM).
 * shrink 2 is the 2x2 mean that OpenCV's INTER_LINEAR computes at exactly 1/2, taken before the
 * per-channel affine normalisation (they commute up to float rounding: a few 1e-7).
 *
 * This is what replaces the OpenCV path (cv2.split + one cv2.addWeighted per plane), which makes
 * two passes and runs its uint8 -> float conversion at about half the speed of a plain store
 * (docs/performance.md). The loops are plain C for the compiler to vectorise: NEON on aarch64,
 * and on x86-64 with GCC an x86-64-v4 (AVX-512) and an AVX2 clone chosen at load time next to the SSE2
 * baseline. Every clone computes the same float32 operations in the same order (no FMA): the bytes
 * are identical whichever one the CPU picks.
 * The GIL is released for the whole call, so the pipeline's camera threads run in parallel.
 * src and dst must not overlap, nor dst's rows and planes each other (checked: ValueError).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#if __GNUC__ >= 11 /* x86-64-v4 (AVX-512 F/BW/DQ/VL): the shrink-2 YUV kernel runs ~20% faster than with AVX2 */
#define DV_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define DV_CLONES __attribute__((target_clones("avx2", "default")))
#endif
#else
#define DV_CLONES
#endif

#define DV_ABS(x) ((x) < 0 ? -(x) : (x))

typedef struct {
    int order[3];
    float mean[3], k[3];
} coef_t;

/* (v - mean) * (1/std), all in float32. mmcv's imnormalize subtracts in float32 too (OpenCV
 * rounds the float64 mean to float32) but multiplies in double and rounds once; doing that here
 * doubles the kernel's time, for at most 1 ulp (<= 2.4e-7 in normalised units). With std = 1
 * (bevformer-base) both are exact: the output is bit-identical. */
#define DV_NORM(v, m, k) (((float)(v) - (m)) * (k))

/* One output row from one input row (shrink 1). The two loops let the common channel orders
 * compile to fixed-stride loads the vectoriser turns into shuffles. */
DV_CLONES static void row1(const uint8_t *s, float *restrict d0, float *restrict d1, float *restrict d2,
                           Py_ssize_t n, const coef_t *cf) {
    const float m0 = cf->mean[0], m1 = cf->mean[1], m2 = cf->mean[2];
    const float k0 = cf->k[0], k1 = cf->k[1], k2 = cf->k[2];
    if (cf->order[0] == 2 && cf->order[1] == 1 && cf->order[2] == 0) {
        for (Py_ssize_t x = 0; x < n; x++) {
            d0[x] = DV_NORM(s[3 * x + 2], m0, k0);
            d1[x] = DV_NORM(s[3 * x + 1], m1, k1);
            d2[x] = DV_NORM(s[3 * x], m2, k2);
        }
    } else if (cf->order[0] == 0 && cf->order[1] == 1 && cf->order[2] == 2) {
        for (Py_ssize_t x = 0; x < n; x++) {
            d0[x] = DV_NORM(s[3 * x], m0, k0);
            d1[x] = DV_NORM(s[3 * x + 1], m1, k1);
            d2[x] = DV_NORM(s[3 * x + 2], m2, k2);
        }
    } else {
        const int c0 = cf->order[0], c1 = cf->order[1], c2 = cf->order[2];
        for (Py_ssize_t x = 0; x < n; x++) {
            d0[x] = DV_NORM(s[3 * x + c0], m0, k0);
            d1[x] = DV_NORM(s[3 * x + c1], m1, k1);
            d2[x] = DV_NORM(s[3 * x + c2], m2, k2);
        }
    }
}

/* The exact sum of the 2x2 block at column pair x of rows a and b (an integer <= 1020). Each row's
 * pair is one 16-bit load (either byte order), which vectorises better than four byte loads
 * (measured: the YUV kernel ~7% faster). */
static inline uint16_t sum2x2(const uint8_t *a, const uint8_t *b, Py_ssize_t x) {
    uint16_t pa, pb;
    memcpy(&pa, a + 2 * x, 2);
    memcpy(&pb, b + 2 * x, 2);
    return (uint16_t)((pa & 0xff) + (pb & 0xff) + (pa >> 8) + (pb >> 8));
}

/* Shrink 2, first half: one input row split into its three channels' planes (2w samples each;
 * fixed-stride loads the vectoriser turns into shuffles). Splitting the bytes first and summing
 * the planes after is ~40% faster than summing interleaved rows into float scratch. */
DV_CLONES static void split3(const uint8_t *a, uint8_t *restrict p0, uint8_t *restrict p1, uint8_t *restrict p2,
                             Py_ssize_t n2) {
    for (Py_ssize_t x = 0; x < n2; x++) {
        p0[x] = a[3 * x];
        p1[x] = a[3 * x + 1];
        p2[x] = a[3 * x + 2];
    }
}

/* Shrink 2, second half: the 2x2 means of one channel's planes from rows a and b, normalised. */
DV_CLONES static void mean2x2(const uint8_t *a, const uint8_t *b, float *restrict d, Py_ssize_t n, float m, float k) {
    for (Py_ssize_t x = 0; x < n; x++) d[x] = DV_NORM((float)sum2x2(a, b, x) * 0.25f, m, k);
}

static int parse_triple(PyObject *seq, const char *what, double out[3]) {
    PyObject *fast = PySequence_Fast(seq, what);
    if (fast == NULL) return -1;
    if (PySequence_Fast_GET_SIZE(fast) != 3) {
        Py_DECREF(fast);
        PyErr_Format(PyExc_ValueError, "%s needs 3 values, one per output plane", what);
        return -1;
    }
    for (int i = 0; i < 3; i++) {
        out[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(fast, i));
        if (out[i] == -1.0 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return -1;
        }
    }
    Py_DECREF(fast);
    return 0;
}

static int parse_order(PyObject *seq, int out[3]) {
    PyObject *fast = PySequence_Fast(seq, "order must be a sequence of 3 source channels");
    if (fast == NULL) return -1;
    int ok = PySequence_Fast_GET_SIZE(fast) == 3;
    for (int i = 0; ok && i < 3; i++) {
        PyObject *index = PyNumber_Index(PySequence_Fast_GET_ITEM(fast, i));
        if (index == NULL) {
            Py_DECREF(fast);
            return -1;
        }
        long v = PyLong_AsLong(index);
        Py_DECREF(index);
        ok = v >= 0 && v <= 2;
        out[i] = (int)v;
    }
    Py_DECREF(fast);
    if (!ok) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "order holds 3 source channels, each 0, 1 or 2");
        return -1;
    }
    return 0;
}

/* [lo, hi) byte range a strided buffer spans (empty when any dimension is 0). */
static void extent(const Py_buffer *b, const char **lo, const char **hi) {
    Py_ssize_t first = 0, last = 0;
    for (int d = 0; d < b->ndim; d++) {
        if (b->shape[d] == 0) {
            *lo = *hi = (const char *)b->buf;
            return;
        }
        Py_ssize_t span = (b->shape[d] - 1) * b->strides[d];
        if (span < 0) first += span; else last += span;
    }
    *lo = (const char *)b->buf + first;
    *hi = (const char *)b->buf + last + b->itemsize;
}

/* The buffer checks of the HxWx3 uint8 -> 3xhxw float32 kernels: NULL when usable, else the error.
 * shrink >= 1: src is exactly shrink times dst's size; 0: the same size. The loops promise the
 * compiler (restrict) that the planes and the input never overlap, so overlaps are refused. */
static const char *check_hwc_to_chw(const Py_buffer *src, const Py_buffer *dst, Py_ssize_t shrink) {
    if (src->ndim != 3 || src->shape[2] != 3 || src->itemsize != 1 || (src->format && strcmp(src->format, "B") != 0))
        return "src must be an HxWx3 uint8 array";
    if (src->strides[2] != 1 || src->strides[1] != 3)
        return "src pixels must be packed (3 bytes per pixel, rows may be strided)";
    if (dst->ndim != 3 || dst->shape[0] != 3 || dst->itemsize != 4 || (dst->format && strcmp(dst->format, "f") != 0))
        return "dst must be a 3xhxw float32 array";
    if (dst->strides[2] != 4)
        return "dst rows must be contiguous (planes and rows may be strided)";
    if (shrink == 0 && (src->shape[0] != dst->shape[1] || src->shape[1] != dst->shape[2]))
        return "src and dst must be the same size";
    if (shrink > 0 && (src->shape[0] / shrink != dst->shape[1] || src->shape[0] % shrink ||
                       src->shape[1] / shrink != dst->shape[2] || src->shape[1] % shrink))
        return "src must be exactly shrink times the size of dst";
    if (dst->shape[1] > 0 && dst->shape[2] > 0) {
        const Py_ssize_t row_bytes = dst->shape[2] * 4;
        const Py_ssize_t plane_bytes = (dst->shape[1] - 1) * DV_ABS(dst->strides[1]) + row_bytes;
        const char *slo, *shi, *dlo, *dhi;
        extent(src, &slo, &shi);
        extent(dst, &dlo, &dhi);
        if ((dst->shape[1] > 1 && DV_ABS(dst->strides[1]) < row_bytes) || DV_ABS(dst->strides[0]) < plane_bytes)
            return "dst rows and planes must not overlap";
        if (slo < dhi && dlo < shi)
            return "src and dst must not overlap";
    }
    return NULL;
}

/* Release both buffers and raise: ValueError(err), or MemoryError when err is NULL (a malloc failed). */
static PyObject *release_and_raise(Py_buffer *src, Py_buffer *dst, const char *err) {
    PyBuffer_Release(src);
    PyBuffer_Release(dst);
    if (err == NULL) return PyErr_NoMemory();
    PyErr_SetString(PyExc_ValueError, err);
    return NULL;
}

static PyObject *normalise_planes(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *src_obj, *dst_obj, *order_obj, *mean_obj, *istd_obj;
    int shrink;
    if (!PyArg_ParseTuple(args, "OOOOOi:normalise_planes", &src_obj, &dst_obj, &order_obj, &mean_obj, &istd_obj,
                          &shrink))
        return NULL;
    if (shrink != 1 && shrink != 2) return PyErr_Format(PyExc_ValueError, "shrink must be 1 or 2, got %d", shrink);
    coef_t cf;
    double mean_d[3], istd_d[3];
    if (parse_order(order_obj, cf.order) || parse_triple(mean_obj, "mean", mean_d) ||
        parse_triple(istd_obj, "inv_std", istd_d))
        return NULL;
    for (int c = 0; c < 3; c++) {
        cf.mean[c] = (float)mean_d[c];
        cf.k[c] = (float)istd_d[c];
    }

    Py_buffer src, dst;
    if (PyObject_GetBuffer(src_obj, &src, PyBUF_STRIDES | PyBUF_FORMAT) < 0) return NULL;
    if (PyObject_GetBuffer(dst_obj, &dst, PyBUF_STRIDES | PyBUF_FORMAT | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&src);
        return NULL;
    }
    const char *err = check_hwc_to_chw(&src, &dst, shrink);
    if (err != NULL) return release_and_raise(&src, &dst, err);

    const Py_ssize_t h = dst.shape[1], w = dst.shape[2];
    if (h == 0 || w == 0) {
        PyBuffer_Release(&src);
        PyBuffer_Release(&dst);
        Py_RETURN_NONE;
    }
    const Py_ssize_t sstride = src.strides[0], plane = dst.strides[0], drow = dst.strides[1];
    const uint8_t *sbase = (const uint8_t *)src.buf;
    char *dbase = (char *)dst.buf;
    uint8_t *pbuf = NULL; /* shrink 2: the three channel planes (2w samples) of two input rows */
    if (shrink == 2 && (pbuf = (uint8_t *)malloc((size_t)w * 12)) == NULL) {
        return release_and_raise(&src, &dst, NULL);
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t y = 0; y < h; y++) {
        float *d0 = (float *)(dbase + y * drow);
        float *d1 = (float *)((char *)d0 + plane), *d2 = (float *)((char *)d0 + 2 * plane);
        if (shrink == 1) {
            row1(sbase + y * sstride, d0, d1, d2, w, &cf);
        } else {
            const uint8_t *a = sbase + 2 * y * sstride;
            uint8_t *pa = pbuf, *pb = pbuf + 6 * w; /* channel c of row a at pa + 2wc, of row b at pb + 2wc */
            split3(a, pa, pa + 2 * w, pa + 4 * w, 2 * w);
            split3(a + sstride, pb, pb + 2 * w, pb + 4 * w, 2 * w);
            float *d[3] = {d0, d1, d2};
            for (int c = 0; c < 3; c++)
                mean2x2(pa + 2 * w * cf.order[c], pb + 2 * w * cf.order[c], d[c], w, cf.mean[c], cf.k[c]);
        }
    }
    Py_END_ALLOW_THREADS
    free(pbuf);
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    Py_RETURN_NONE;
}

/* ---------------------------------------------------------------------------------------------
 * yuv420_normalise(y, y_stride, u, v, c_stride, width, height, dst, order, mean, inv_std, shrink, coef)
 *
 *   y           luma plane, uint8, `height` rows of `width` samples, rows `y_stride` bytes apart
 *   u, v        chroma planes (Cb, Cr), uint8, ceil(height/2) rows of ceil(width/2) samples, rows
 *               `c_stride` bytes apart: 8-bit 4:2:0 as FFmpeg decodes it (yuv420p / yuvj420p)
 *   dst         float32 3xhxw (CHW, any plane and row stride): h = height / shrink, w = width / shrink
 *   order       output plane c is colour order[c] of (B, G, R): (2, 1, 0) writes RGB
 *   coef        (ky, y0, crv, cgu, cgv, cbu): the Y'CbCr -> R'G'B' matrix in grey levels,
 *               Yl = (Y - y0) * ky, R = Yl + crv (Cr - 128), G = Yl - cgu (Cb - 128) - cgv (Cr - 128),
 *               B = Yl + cbu (Cb - 128), each clipped to [0, 255] (BT.601 / BT.709 / BT.2020,
 *               limited or full range: the caller picks the numbers, dvpipe.video.yuv_matrix)
 *   shrink      1: every luma sample, chroma of its 2x2 block (nearest: what swscale's unscaled
 *                  yuv420p -> bgr24 converter uses)
 *               2: width, height even; Y the exact mean of each 2x2 luma block, chroma the one
 *                  sample of that block (4:2:0 chroma is already at the half-size grid)
 *   then dst[c, y, x] = (colour[order[c]] - mean[c]) * inv_std[c] in float32.
 *
 * The colour conversion is the standard's, in float32, rounded only into the float output; the
 * reference fidelity instead takes FFmpeg's bgr24 (fixed-point, rounded to uint8) and 2x2-averages
 * it, so this is fidelity `fast` (docs/performance.md gives the measured deviation).
 * The GIL is released for the whole call.
 */
typedef struct {
    float ky, y0, crv, cgu, cgv, cbu;
} yuvcoef_t;

/* Shrink 1: the luma of one output row in grey levels, (Y - y0) * ky. */
DV_CLONES static void yuv_luma(const uint8_t *a, float *restrict ty, Py_ssize_t w, float y0, float ky) {
    for (Py_ssize_t x = 0; x < w; x++) ty[x] = ((float)a[x] - y0) * ky;
}

/* The chroma terms of n chroma samples: B += cbu Cb', G -= cgu Cb' + cgv Cr', R += crv Cr'. */
DV_CLONES static void yuv_chroma(const uint8_t *u, const uint8_t *v, float *restrict tb, float *restrict tg,
                                 float *restrict tr, Py_ssize_t n, const yuvcoef_t *yc) {
    const float crv = yc->crv, cgu = yc->cgu, cgv = yc->cgv, cbu = yc->cbu;
    for (Py_ssize_t x = 0; x < n; x++) {
        const float cb = (float)u[x] - 128.f, cr = (float)v[x] - 128.f;
        tb[x] = cbu * cb;
        tg[x] = -(cgu * cb) - cgv * cr;
        tr[x] = crv * cr;
    }
}

/* Shrink 1: each chroma term serves two luma columns (nearest, as swscale's unscaled converter). */
DV_CLONES static void yuv_widen(const float *s, float *restrict d, Py_ssize_t w) {
    for (Py_ssize_t j = 0; j < w / 2; j++) {
        d[2 * j] = s[j];
        d[2 * j + 1] = s[j];
    }
    if (w & 1) d[w - 1] = s[w / 2];
}

/* From here to the end of yuv_row2, GCC may assume no NaN and no signed zero: only then does it turn the
 * clip below into one maxps and one minps (otherwise a compare and a blend each: measured 16% slower on
 * cache-resident rows, 3-4% into memory). The same values either way: the operands are finite (uint8
 * samples, Normalise refuses non-finite mean and std) and a sum here is never -0 (the luma term is +0 or
 * nonzero); tests/backends/test_native_kernel.py checks this kernel bit for bit against its arithmetic
 * written again in numpy float32. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("finite-math-only", "no-signed-zeros")
#endif

/* clip to [0, 255] in the form x86 computes with one maxps and one minps (the same values as the
 * compare chain for every number; inputs here are never NaN) */
static inline float dv_clip255(float x) {
    x = x > 0.f ? x : 0.f;
    return x < 255.f ? x : 255.f;
}
#define DV_CLIP255(x) dv_clip255(x)

/* One output row: colour = clip(luma + chroma term), normalised into its plane. */
DV_CLONES static void yuv_out(const float *ty, const float *tb, const float *tg, const float *tr,
                              float *restrict db, float *restrict dg, float *restrict dr, Py_ssize_t w,
                              const float m[3], const float k[3]) {
    const float mb = m[0], mg = m[1], mr = m[2], kb = k[0], kg = k[1], kr = k[2];
    for (Py_ssize_t x = 0; x < w; x++) {
        const float yl = ty[x];
        const float B = yl + tb[x], G = yl + tg[x], R = yl + tr[x];
        db[x] = DV_NORM(DV_CLIP255(B), mb, kb);
        dg[x] = DV_NORM(DV_CLIP255(G), mg, kg);
        dr[x] = DV_NORM(DV_CLIP255(R), mr, kr);
    }
}

/* Shrink 2, one pass per output row: luma the exact 2x2 sum of rows a and b (an integer <= 1020)
 * * 0.25, chroma the block's one Cb, Cr sample; then the colour, clipped and normalised as yuv_out
 * does (one loop with no scratch rows: ~15% faster than the shrink-1 path's four passes). */
DV_CLONES static void yuv_row2(const uint8_t *a, const uint8_t *b, const uint8_t *u, const uint8_t *v,
                               float *restrict db, float *restrict dg, float *restrict dr, Py_ssize_t w,
                               const yuvcoef_t *yc, const float m[3], const float k[3]) {
    const float y0 = yc->y0, ky = yc->ky, crv = yc->crv, cgu = yc->cgu, cgv = yc->cgv, cbu = yc->cbu;
    const float mb = m[0], mg = m[1], mr = m[2], kb = k[0], kg = k[1], kr = k[2];
    for (Py_ssize_t x = 0; x < w; x++) {
        const float yl = ((float)sum2x2(a, b, x) * 0.25f - y0) * ky;
        const float cb = (float)u[x] - 128.f, cr = (float)v[x] - 128.f;
        const float B = yl + cbu * cb, G = yl + (-(cgu * cb) - cgv * cr), R = yl + crv * cr;
        db[x] = DV_NORM(DV_CLIP255(B), mb, kb);
        dg[x] = DV_NORM(DV_CLIP255(G), mg, kg);
        dr[x] = DV_NORM(DV_CLIP255(R), mr, kr);
    }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

/* ---------------------------------------------------------------------------------------------
 * yuv420_bgr24_normalise(y, y_stride, u, v, c_stride, width, height, dst, order, mean, inv_std, shrink, icoef)
 *
 * yuv420_normalise's arguments, with icoef = (y_coeff, y_offset, vr, ub, vg, ug): the integers of
 * FFmpeg's unscaled yuv420p -> bgr24 conversion (libswscale's yuv2rgb; dvpipe.video.swscale_bgr24_coef
 * derives them as swscale does). Each pixel's B, G, R is computed as that converter computes it:
 *   Yt = ((Y << 3) - y_offset) * y_coeff >> 16,  Ut = (Cb << 3) - 1024,  Vt = (Cr << 3) - 1024,
 *   B = clip(Yt + (Ut * ub >> 16)),  R = clip(Yt + (Vt * vr >> 16)),
 *   G = clip(Yt + (Ut * ug >> 16) + (Vt * vg >> 16)),   (>> 16 floors; clip to 0..255)
 * with each 2x2 block's one Cb, Cr -- the same bytes as FFmpeg's bgr24 picture (checked against it
 * for every Y, Cb, Cr combination in tests/backends/test_swscale_exact.py), never stored: shrink 1
 * normalises them, shrink 2 the exact 2x2 sums * 0.25, as normalise_planes does from that picture.
 * So the output is bit-identical to normalise_planes(FFmpeg's bgr24 picture), without the picture.
 */
typedef struct {
    int32_t yc, yo, vr, ub, vg, ug;
} swscoef_t;

#define SWS_LUMA(Y) ((((int32_t)(Y) << 3) - yo) * yc >> 16)

static inline int32_t dv_clip_u8(int32_t v) { return v < 0 ? 0 : (v > 255 ? 255 : v); }

/* Shrink 1: one output row from one luma row and its chroma row. */
DV_CLONES static void sws_row1(const uint8_t *a, const uint8_t *u, const uint8_t *v, float *restrict db,
                               float *restrict dg, float *restrict dr, Py_ssize_t w, const swscoef_t *sc,
                               const float m[3], const float k[3]) {
    const int32_t yc = sc->yc, yo = sc->yo, vr = sc->vr, ub = sc->ub, vg = sc->vg, ug = sc->ug;
    const float mb = m[0], mg = m[1], mr = m[2], kb = k[0], kg = k[1], kr = k[2];
    for (Py_ssize_t x = 0; x < w; x++) {
        const int32_t ut = ((int32_t)u[x >> 1] << 3) - 1024, vt = ((int32_t)v[x >> 1] << 3) - 1024;
        const int32_t yt = SWS_LUMA(a[x]);
        db[x] = DV_NORM(dv_clip_u8(yt + (ut * ub >> 16)), mb, kb);
        dg[x] = DV_NORM(dv_clip_u8(yt + (ut * ug >> 16) + (vt * vg >> 16)), mg, kg);
        dr[x] = DV_NORM(dv_clip_u8(yt + (vt * vr >> 16)), mr, kr);
    }
}

/* Shrink 2: one output row from luma rows a, b; the 2x2 block shares one Cb, Cr. */
DV_CLONES static void sws_row2(const uint8_t *a, const uint8_t *b, const uint8_t *u, const uint8_t *v,
                               float *restrict db, float *restrict dg, float *restrict dr, Py_ssize_t w,
                               const swscoef_t *sc, const float m[3], const float k[3]) {
    const int32_t yc = sc->yc, yo = sc->yo, vr = sc->vr, ub = sc->ub, vg = sc->vg, ug = sc->ug;
    const float mb = m[0], mg = m[1], mr = m[2], kb = k[0], kg = k[1], kr = k[2];
    for (Py_ssize_t x = 0; x < w; x++) {
        const int32_t ut = ((int32_t)u[x] << 3) - 1024, vt = ((int32_t)v[x] << 3) - 1024;
        const int32_t tb = ut * ub >> 16, tr = vt * vr >> 16, tg = (ut * ug >> 16) + (vt * vg >> 16);
        const int32_t y0 = SWS_LUMA(a[2 * x]), y1 = SWS_LUMA(a[2 * x + 1]), y2 = SWS_LUMA(b[2 * x]),
                      y3 = SWS_LUMA(b[2 * x + 1]);
        const int32_t B = dv_clip_u8(y0 + tb) + dv_clip_u8(y1 + tb) + dv_clip_u8(y2 + tb) + dv_clip_u8(y3 + tb);
        const int32_t G = dv_clip_u8(y0 + tg) + dv_clip_u8(y1 + tg) + dv_clip_u8(y2 + tg) + dv_clip_u8(y3 + tg);
        const int32_t R = dv_clip_u8(y0 + tr) + dv_clip_u8(y1 + tr) + dv_clip_u8(y2 + tr) + dv_clip_u8(y3 + tr);
        db[x] = DV_NORM((float)B * 0.25f, mb, kb);
        dg[x] = DV_NORM((float)G * 0.25f, mg, kg);
        dr[x] = DV_NORM((float)R * 0.25f, mr, kr);
    }
}

/* Six numbers from a sequence of 6 (``what`` names them in the errors). */
static int parse_six(PyObject *seq, const char *what, double out[6]) {
    PyObject *fast = PySequence_Fast(seq, what);
    if (fast == NULL) return -1;
    if (PySequence_Fast_GET_SIZE(fast) != 6) {
        Py_DECREF(fast);
        PyErr_Format(PyExc_ValueError, "%s: needs 6 numbers", what);
        return -1;
    }
    for (int i = 0; i < 6; i++) {
        out[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(fast, i));
        if (out[i] == -1.0 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return -1;
        }
    }
    Py_DECREF(fast);
    return 0;
}

static int parse_coef(PyObject *seq, yuvcoef_t *yc) {
    double v[6];
    if (parse_six(seq, "coef (ky, y0, crv, cgu, cgv, cbu)", v)) return -1;
    float *out[6] = {&yc->ky, &yc->y0, &yc->crv, &yc->cgu, &yc->cgv, &yc->cbu};
    for (int i = 0; i < 6; i++) *out[i] = (float)v[i];
    return 0;
}

static int parse_icoef(PyObject *seq, swscoef_t *sc) {
    double v[6];
    if (parse_six(seq, "icoef (y_coeff, y_offset, vr, ub, vg, ug)", v)) return -1;
    int32_t *out[6] = {&sc->yc, &sc->yo, &sc->vr, &sc->ub, &sc->vg, &sc->ug};
    for (int i = 0; i < 6; i++) {
        if (!(v[i] >= -32768 && v[i] <= 32767) || v[i] != (double)(int32_t)v[i]) { /* NaN fails the first */
            PyErr_SetString(PyExc_ValueError, "icoef values are 16-bit integers");
            return -1;
        }
        *out[i] = (int32_t)v[i];
    }
    return 0;
}

/* yuv420_normalise (sws 0: the standard's matrix in float) and yuv420_bgr24_normalise (sws 1:
 * swscale's integer arithmetic): the same arguments, checks and loop */
static PyObject *yuv420_common(PyObject *args, int sws) {
    Py_buffer yb, ub, vb;
    PyObject *dst_obj, *order_obj, *mean_obj, *istd_obj, *coef_obj;
    Py_ssize_t ystride, cstride, width, height;
    int shrink;
    if (!PyArg_ParseTuple(args, sws ? "y*ny*y*nnnOOOOiO:yuv420_bgr24_normalise" : "y*ny*y*nnnOOOOiO:yuv420_normalise",
                          &yb, &ystride, &ub, &vb, &cstride, &width, &height, &dst_obj, &order_obj, &mean_obj,
                          &istd_obj, &shrink, &coef_obj))
        return NULL;
    coef_t cf;
    yuvcoef_t yc;
    swscoef_t sc;
    double mean_d[3], istd_d[3];
    Py_buffer dst;
    int have_dst = 0;
    const char *err = NULL;
    if (parse_order(order_obj, cf.order) || parse_triple(mean_obj, "mean", mean_d) ||
        parse_triple(istd_obj, "inv_std", istd_d) || (sws ? parse_icoef(coef_obj, &sc) : parse_coef(coef_obj, &yc)))
        goto fail;
    for (int c = 0; c < 3; c++) {
        cf.mean[c] = (float)mean_d[c];
        cf.k[c] = (float)istd_d[c];
    }
    if (PyObject_GetBuffer(dst_obj, &dst, PyBUF_STRIDES | PyBUF_FORMAT | PyBUF_WRITABLE) < 0) goto fail;
    have_dst = 1;
    const Py_ssize_t cw = (width + 1) / 2, ch = (height + 1) / 2;
    if (shrink != 1 && shrink != 2)
        err = "shrink must be 1 or 2";
    else if (width <= 0 || height <= 0 || ystride < width || cstride < cw)
        err = "width, height must be positive and the strides at least a row";
    else if (yb.len < ystride * (height - 1) + width)
        err = "the luma buffer is smaller than height rows of y_stride";
    else if (ub.len < cstride * (ch - 1) + cw || vb.len < cstride * (ch - 1) + cw)
        err = "a chroma buffer is smaller than ceil(height/2) rows of c_stride";
    else if (shrink == 2 && (width % 2 || height % 2))
        err = "shrink 2 needs an even width and height";
    else if (dst.ndim != 3 || dst.shape[0] != 3 || dst.itemsize != 4 || (dst.format && strcmp(dst.format, "f") != 0))
        err = "dst must be a 3xhxw float32 array";
    else if (dst.strides[2] != 4)
        err = "dst rows must be contiguous (planes and rows may be strided)";
    else if (dst.shape[1] != height / shrink || dst.shape[2] != width / shrink)
        err = "dst must be (3, height / shrink, width / shrink)";
    else {
        const Py_ssize_t row_bytes = dst.shape[2] * 4, plane_bytes = (dst.shape[1] - 1) * DV_ABS(dst.strides[1]) + row_bytes;
        if ((dst.shape[1] > 1 && DV_ABS(dst.strides[1]) < row_bytes) || DV_ABS(dst.strides[0]) < plane_bytes)
            err = "dst rows and planes must not overlap";
    }
    if (err != NULL) {
        PyErr_SetString(PyExc_ValueError, err);
        goto fail;
    }
    {
        const Py_ssize_t h = dst.shape[1], w = dst.shape[2], plane = dst.strides[0], drow = dst.strides[1];
        const uint8_t *Y = (const uint8_t *)yb.buf, *U = (const uint8_t *)ub.buf, *V = (const uint8_t *)vb.buf;
        char *dbase = (char *)dst.buf;
        /* the output plane of each colour (B, G, R) and its coefficients */
        int plane_of[3] = {-1, -1, -1};
        for (int c = 0; c < 3; c++) plane_of[cf.order[c]] = c;
        if (plane_of[0] < 0 || plane_of[1] < 0 || plane_of[2] < 0) {
            PyErr_SetString(PyExc_ValueError, "order must be a permutation of (0, 1, 2)");
            goto fail;
        }
        float m[3], k[3];
        for (int col = 0; col < 3; col++) {
            m[col] = cf.mean[plane_of[col]];
            k[col] = cf.k[plane_of[col]];
        }
        /* scratch for the float matrix at shrink 1 only: luma, three chroma-term rows and their half-width
         * source (the other paths write each output row in one loop) */
        float *buf = NULL, *ty = NULL, *tb = NULL, *tg = NULL, *tr = NULL, *hc = NULL;
        if (shrink == 1 && !sws) {
            buf = (float *)malloc((size_t)(4 * w + 3 * cw) * sizeof(float));
            if (buf == NULL) {
                PyErr_NoMemory();
                goto fail;
            }
            ty = buf, tb = buf + w, tg = buf + 2 * w, tr = buf + 3 * w, hc = buf + 4 * w;
        }
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t r = 0; r < h; r++) {
            char *row = dbase + r * drow;
            float *dcol[3] = {(float *)(row + plane_of[0] * plane), (float *)(row + plane_of[1] * plane),
                              (float *)(row + plane_of[2] * plane)};
            const Py_ssize_t yr = shrink == 2 ? 2 * r : r, cr = shrink == 2 ? r : r >> 1;
            const uint8_t *y0p = Y + yr * ystride;
            if (sws) {
                if (shrink == 2)
                    sws_row2(y0p, y0p + ystride, U + cr * cstride, V + cr * cstride, dcol[0], dcol[1], dcol[2], w, &sc, m, k);
                else
                    sws_row1(y0p, U + cr * cstride, V + cr * cstride, dcol[0], dcol[1], dcol[2], w, &sc, m, k);
                continue;
            }
            if (shrink == 2) {
                yuv_row2(y0p, y0p + ystride, U + cr * cstride, V + cr * cstride, dcol[0], dcol[1], dcol[2], w, &yc, m, k);
                continue;
            }
            yuv_luma(y0p, ty, w, yc.y0, yc.ky);
            if ((r & 1) == 0) { /* a chroma row serves two luma rows */
                yuv_chroma(U + cr * cstride, V + cr * cstride, hc, hc + cw, hc + 2 * cw, cw, &yc);
                yuv_widen(hc, tb, w);
                yuv_widen(hc + cw, tg, w);
                yuv_widen(hc + 2 * cw, tr, w);
            }
            yuv_out(ty, tb, tg, tr, dcol[0], dcol[1], dcol[2], w, m, k);
        }
        Py_END_ALLOW_THREADS
        free(buf);
    }
    PyBuffer_Release(&dst);
    PyBuffer_Release(&yb);
    PyBuffer_Release(&ub);
    PyBuffer_Release(&vb);
    Py_RETURN_NONE;
fail:
    if (have_dst) PyBuffer_Release(&dst);
    PyBuffer_Release(&yb);
    PyBuffer_Release(&ub);
    PyBuffer_Release(&vb);
    return NULL;
}

static PyObject *yuv420_normalise(PyObject *self, PyObject *args) {
    (void)self;
    return yuv420_common(args, 0);
}

static PyObject *yuv420_bgr24_normalise(PyObject *self, PyObject *args) {
    (void)self;
    return yuv420_common(args, 1);
}

/* ---------------------------------------------------------------------------------------------
 * chroma_blur(src, dst, hblur, vblur)
 *
 *   src, dst   uint8 HxWx3 (BGR, packed pixels, rows may be strided; must not overlap)
 *   hblur      1: filter the chroma horizontally, 0: not;  vblur: the same vertically
 *
 * dst = clip(round(F * src + (Y(src) - Y(F * src)))), per pixel and channel, where F is the
 * [1, 6, 1] / 8 filter along each chosen axis (edges replicated) and Y = 0.299 R + 0.587 G +
 * 0.114 B (JFIF's luma): the luma is kept, the chroma replaced by its F-filtered self.
 *
 * Why: at 1/2 scale libjpeg decodes 4:2:0 chroma at its native resolution, which is the 1/2
 * output grid, and converts without upsampling. The reference decodes at full size, upsamples
 * the chroma with libjpeg's "fancy" triangle filter (3/4, 1/4) and then takes 2x2 means; along each
 * subsampled axis that is (C[j-1] + 6 C[j] + C[j+1]) / 8 of the native chroma. Colour conversion
 * is affine, so filtering the decoded image's chroma (the image minus its luma) by F gives what
 * the reference sees, up to the reference's per-pixel rounding and clipping (docs/performance.md).
 * The GIL is released for the whole call.
 */
DV_CLONES static void cb_vrow(const uint8_t *a, const uint8_t *b, const uint8_t *c, float *restrict t, Py_ssize_t n,
                              int vblur) {
    if (vblur)
        for (Py_ssize_t i = 0; i < n; i++) t[i] = ((float)a[i] + 6.f * (float)b[i] + (float)c[i]) * 0.125f;
    else
        for (Py_ssize_t i = 0; i < n; i++) t[i] = (float)b[i];
}

DV_CLONES static void cb_hrow(const float *t, const uint8_t *s, uint8_t *restrict d, Py_ssize_t w, int hblur,
                              float *restrict f) {
    /* f: the F-filtered row (3w floats) */
    if (hblur && w > 1) {
        for (int ch = 0; ch < 3; ch++) {
            f[ch] = (7.f * t[ch] + t[3 + ch]) * 0.125f;
            f[3 * (w - 1) + ch] = (t[3 * (w - 2) + ch] + 7.f * t[3 * (w - 1) + ch]) * 0.125f;
        }
        for (Py_ssize_t i = 3; i < 3 * (w - 1); i++) f[i] = (t[i - 3] + 6.f * t[i] + t[i + 3]) * 0.125f;
    } else {
        for (Py_ssize_t i = 0; i < 3 * w; i++) f[i] = t[i];
    }
    for (Py_ssize_t x = 0; x < w; x++) {
        const float f0 = f[3 * x], f1 = f[3 * x + 1], f2 = f[3 * x + 2];
        const float dy = 0.114f * ((float)s[3 * x] - f0) + 0.587f * ((float)s[3 * x + 1] - f1) +
                         0.299f * ((float)s[3 * x + 2] - f2);
        const float v0 = f0 + dy + 0.5f, v1 = f1 + dy + 0.5f, v2 = f2 + dy + 0.5f;
        d[3 * x] = (uint8_t)(int)DV_CLIP255(v0);
        d[3 * x + 1] = (uint8_t)(int)DV_CLIP255(v1);
        d[3 * x + 2] = (uint8_t)(int)DV_CLIP255(v2);
    }
}

static PyObject *chroma_blur(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *src_obj, *dst_obj;
    int hblur, vblur;
    if (!PyArg_ParseTuple(args, "OOpp:chroma_blur", &src_obj, &dst_obj, &hblur, &vblur)) return NULL;
    Py_buffer src, dst;
    if (PyObject_GetBuffer(src_obj, &src, PyBUF_STRIDES | PyBUF_FORMAT) < 0) return NULL;
    if (PyObject_GetBuffer(dst_obj, &dst, PyBUF_STRIDES | PyBUF_FORMAT | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&src);
        return NULL;
    }
    const char *err = NULL;
    for (int i = 0; i < 2 && err == NULL; i++) {
        const Py_buffer *b = i ? &dst : &src;
        if (b->ndim != 3 || b->shape[2] != 3 || b->itemsize != 1 || (b->format && strcmp(b->format, "B") != 0))
            err = "src and dst must be HxWx3 uint8 arrays";
        else if (b->strides[2] != 1 || b->strides[1] != 3 || b->strides[0] < 3 * b->shape[1])
            err = "src and dst pixels must be packed (3 bytes per pixel, rows may be strided)";
    }
    if (err == NULL && (src.shape[0] != dst.shape[0] || src.shape[1] != dst.shape[1])) err = "src and dst differ in size";
    if (err == NULL) {
        const char *slo, *shi, *dlo, *dhi;
        extent(&src, &slo, &shi);
        extent(&dst, &dlo, &dhi);
        if (slo < dhi && dlo < shi) err = "src and dst must not overlap";
    }
    const Py_ssize_t h = src.shape[0], w = src.shape[1];
    float *buf = NULL;
    if (err == NULL && h > 0 && w > 0 && (buf = (float *)malloc((size_t)w * 6 * sizeof(float))) == NULL) {
        return release_and_raise(&src, &dst, NULL);
    }
    if (err != NULL) return release_and_raise(&src, &dst, err);
    if (h > 0 && w > 0) {
        const uint8_t *S = (const uint8_t *)src.buf;
        uint8_t *D = (uint8_t *)dst.buf;
        const Py_ssize_t ss = src.strides[0], ds = dst.strides[0];
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t y = 0; y < h; y++) {
            const uint8_t *b = S + y * ss;
            const uint8_t *a = y > 0 ? b - ss : b, *c = y + 1 < h ? b + ss : b;
            cb_vrow(a, b, c, buf, 3 * w, vblur);
            cb_hrow(buf, b, D + y * ds, w, hblur, buf + 3 * w);
        }
        Py_END_ALLOW_THREADS
    }
    free(buf);
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    Py_RETURN_NONE;
}

/* ---------------------------------------------------------------------------------------------
 * normalise_chroma(src, dst, order, mean, inv_std, hblur, vblur)
 *
 * normalise_planes at shrink 1 with chroma_blur's filter fused in, without rounding to uint8:
 * dst[c, y, x] = (clip(F * src + (Y(src) - Y(F * src)), 0, 255)[order[c]] - mean[c]) * inv_std[c],
 * F the [1, 6, 1] / 8 filter along the chosen axes (edges replicated), Y JFIF's luma. Source rows
 * are split into float planes once (a ring of three), then every step is a contiguous float loop.
 */
/* One source row as luma and two colour differences: Y = 0.299 R + 0.587 G + 0.114 B, B - Y, R - Y
 * (G - Y follows from them: -(0.114 (B - Y) + 0.299 (R - Y)) / 0.587). Filtering the differences is
 * filtering the chroma; two planes instead of three colours. */
DV_CLONES static void nc_split(const uint8_t *s, float *restrict yl, float *restrict db, float *restrict dr,
                               Py_ssize_t w) {
    for (Py_ssize_t x = 0; x < w; x++) {
        const float b = (float)s[3 * x], g = (float)s[3 * x + 1], r = (float)s[3 * x + 2];
        const float y = 0.114f * b + 0.587f * g + 0.299f * r;
        yl[x] = y;
        db[x] = b - y;
        dr[x] = r - y;
    }
}

DV_CLONES static void nc_v(const float *a, const float *b, const float *c, float *restrict t, Py_ssize_t w) {
    for (Py_ssize_t x = 0; x < w; x++) t[x] = (a[x] + 6.f * b[x] + c[x]) * 0.125f;
}

/* Output columns [x0, x1): the differences filtered horizontally (hblur; tb/tr hold one column of
 * replicated edge on each side) and added back to the luma, clipped, normalised. */
DV_CLONES static void nc_out(const float *yl, const float *tb, const float *tr, float *restrict db, float *restrict dg,
                             float *restrict dr, Py_ssize_t w, int hblur, const float m[3], const float k[3]) {
    const float mb = m[0], mg = m[1], mr = m[2], kb = k[0], kg = k[1], kr = k[2];
    const float gb = -0.114f / 0.587f, gr = -0.299f / 0.587f;
    if (hblur) {
        for (Py_ssize_t x = 0; x < w; x++) {
            const float cb = (tb[x - 1] + 6.f * tb[x] + tb[x + 1]) * 0.125f;
            const float cr = (tr[x - 1] + 6.f * tr[x] + tr[x + 1]) * 0.125f;
            const float y = yl[x], B = y + cb, R = y + cr, G = y + gb * cb + gr * cr;
            db[x] = DV_NORM(DV_CLIP255(B), mb, kb);
            dg[x] = DV_NORM(DV_CLIP255(G), mg, kg);
            dr[x] = DV_NORM(DV_CLIP255(R), mr, kr);
        }
    } else {
        for (Py_ssize_t x = 0; x < w; x++) {
            const float cb = tb[x], cr = tr[x];
            const float y = yl[x], B = y + cb, R = y + cr, G = y + gb * cb + gr * cr;
            db[x] = DV_NORM(DV_CLIP255(B), mb, kb);
            dg[x] = DV_NORM(DV_CLIP255(G), mg, kg);
            dr[x] = DV_NORM(DV_CLIP255(R), mr, kr);
        }
    }
}

static PyObject *normalise_chroma(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *src_obj, *dst_obj, *order_obj, *mean_obj, *istd_obj;
    int hblur, vblur;
    if (!PyArg_ParseTuple(args, "OOOOOpp:normalise_chroma", &src_obj, &dst_obj, &order_obj, &mean_obj, &istd_obj,
                          &hblur, &vblur))
        return NULL;
    coef_t cf;
    double mean_d[3], istd_d[3];
    if (parse_order(order_obj, cf.order) || parse_triple(mean_obj, "mean", mean_d) ||
        parse_triple(istd_obj, "inv_std", istd_d))
        return NULL;
    int plane_of[3] = {-1, -1, -1};
    for (int c = 0; c < 3; c++) plane_of[cf.order[c]] = c;
    if (plane_of[0] < 0 || plane_of[1] < 0 || plane_of[2] < 0) {
        PyErr_SetString(PyExc_ValueError, "order must be a permutation of (0, 1, 2)");
        return NULL;
    }
    float m[3], k[3];
    for (int col = 0; col < 3; col++) {
        m[col] = (float)mean_d[plane_of[col]];
        k[col] = (float)istd_d[plane_of[col]];
    }
    Py_buffer src, dst;
    if (PyObject_GetBuffer(src_obj, &src, PyBUF_STRIDES | PyBUF_FORMAT) < 0) return NULL;
    if (PyObject_GetBuffer(dst_obj, &dst, PyBUF_STRIDES | PyBUF_FORMAT | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&src);
        return NULL;
    }
    const char *err = check_hwc_to_chw(&src, &dst, 0);
    const Py_ssize_t h = dst.shape[1], w = dst.shape[2];
    float *buf = NULL;
    if (err == NULL && h > 0 && w > 0 && (buf = (float *)malloc((size_t)(11 * w + 4) * sizeof(float))) == NULL) {
        return release_and_raise(&src, &dst, NULL);
    }
    if (err != NULL) return release_and_raise(&src, &dst, err);
    if (h > 0 && w > 0) {
        const uint8_t *S = (const uint8_t *)src.buf;
        const Py_ssize_t ss = src.strides[0], plane = dst.strides[0], drow = dst.strides[1];
        char *dbase = (char *)dst.buf;
        /* ring: split rows y-1, y, y+1 (slot row % 3), each Y | B-Y | R-Y of w floats;
         * t: the vertically filtered differences, each with one replicated column either side */
        float *ring = buf, *tb = buf + 9 * w + 1, *tr = buf + 10 * w + 3;
        Py_BEGIN_ALLOW_THREADS
        nc_split(S, ring, ring + w, ring + 2 * w, w);
        if (h > 1) nc_split(S + ss, ring + 3 * w, ring + 4 * w, ring + 5 * w, w);
        for (Py_ssize_t y = 0; y < h; y++) {
            if (y >= 1 && y + 1 < h) { /* row y + 1 into its slot (rows 0 and 1 are split above) */
                float *r1 = ring + 3 * w * ((y + 1) % 3);
                nc_split(S + (y + 1) * ss, r1, r1 + w, r1 + 2 * w, w);
            }
            const float *cur = ring + 3 * w * (y % 3);
            const float *up = ring + 3 * w * ((y > 0 ? y - 1 : 0) % 3);
            const float *dn = ring + 3 * w * ((y + 1 < h ? y + 1 : y) % 3);
            if (vblur) {
                nc_v(up + w, cur + w, dn + w, tb, w);
                nc_v(up + 2 * w, cur + 2 * w, dn + 2 * w, tr, w);
            } else {
                memcpy(tb, cur + w, (size_t)w * sizeof(float));
                memcpy(tr, cur + 2 * w, (size_t)w * sizeof(float));
            }
            tb[-1] = tb[0], tb[w] = tb[w - 1], tr[-1] = tr[0], tr[w] = tr[w - 1];
            char *row = dbase + y * drow;
            nc_out(cur, tb, tr, (float *)(row + plane_of[0] * plane), (float *)(row + plane_of[1] * plane),
                   (float *)(row + plane_of[2] * plane), w, hblur, m, k);
        }
        Py_END_ALLOW_THREADS
    }
    free(buf);
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"normalise_planes", normalise_planes, METH_VARARGS,
     "normalise_planes(src, dst, order, mean, inv_std, shrink)\n\n"
     "uint8 HxWx3 -> float32 3xhxw, (x - mean) * inv_std per output plane; shrink 2 takes 2x2 means first.\n"
     "See the module source for the exact arithmetic. Releases the GIL."},
    {"chroma_blur", chroma_blur, METH_VARARGS,
     "chroma_blur(src, dst, hblur, vblur)\n\n"
     "uint8 HxWx3 BGR -> dst: the luma kept, the chroma filtered by [1, 6, 1] / 8 along the chosen axes.\n"
     "What a 1/2-scale JPEG decode needs to match a full decode's fancy upsampling + 2x2 means. Releases the GIL."},
    {"normalise_chroma", normalise_chroma, METH_VARARGS,
     "normalise_chroma(src, dst, order, mean, inv_std, hblur, vblur)\n\n"
     "normalise_planes (shrink 1) with chroma_blur's chroma filter fused in, in float (no uint8 rounding).\n"
     "Releases the GIL."},
    {"yuv420_normalise", yuv420_normalise, METH_VARARGS,
     "yuv420_normalise(y, y_stride, u, v, c_stride, width, height, dst, order, mean, inv_std, shrink, coef)\n\n"
     "8-bit 4:2:0 planes -> float32 3xhxw: Y'CbCr -> BGR by coef, clipped, then (x - mean) * inv_std per output\n"
     "plane; shrink 2 takes 2x2 luma means. See the module source. Releases the GIL."},
    {"yuv420_bgr24_normalise", yuv420_bgr24_normalise, METH_VARARGS,
     "yuv420_bgr24_normalise(y, y_stride, u, v, c_stride, width, height, dst, order, mean, inv_std, shrink, icoef)\n\n"
     "yuv420_normalise with FFmpeg's bgr24 conversion (swscale's integer arithmetic, icoef) instead of the\n"
     "standard's matrix: bit-identical to normalise_planes of FFmpeg's bgr24 picture. Releases the GIL."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_native",
    .m_doc = "dvpipe's compiled CPU kernels (see normalise_planes, yuv420_normalise, yuv420_bgr24_normalise, "
              "chroma_blur, normalise_chroma).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }
