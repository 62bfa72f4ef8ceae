/* dvpipe.backends._native: the CPU backend's one compiled kernel.
 *
 * normalise_planes(src, dst, order, mean, inv_std, shrink)
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
 * and on x86-64 with GCC an AVX2 clone chosen at load time next to the SSE2 baseline.
 * The GIL is released for the whole call, so the pipeline's camera threads run in parallel.
 * src and dst must not overlap, nor dst's rows and planes each other (checked: ValueError).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define DV_CLONES __attribute__((target_clones("avx2", "default")))
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

/* Shrink 2, first half: the vertical pair sums of two input rows (2w pixels), exact integers
 * <= 510 held in float, one plane per source channel (fixed offsets: the loop vectorises). */
DV_CLONES static void vsum(const uint8_t *a, const uint8_t *b, float *restrict t0, float *restrict t1,
                           float *restrict t2, Py_ssize_t n2) {
    for (Py_ssize_t x = 0; x < n2; x++) {
        t0[x] = (float)(a[3 * x] + b[3 * x]);
        t1[x] = (float)(a[3 * x + 1] + b[3 * x + 1]);
        t2[x] = (float)(a[3 * x + 2] + b[3 * x + 2]);
    }
}

/* Shrink 2, second half: horizontal pairs of one plane's vertical sums (the exact 2x2 sum, <= 1020),
 * their mean, normalised. */
DV_CLONES static void hmean(const float *t, float *restrict d, Py_ssize_t n, float m, float k) {
    for (Py_ssize_t x = 0; x < n; x++) d[x] = DV_NORM((t[2 * x] + t[2 * x + 1]) * 0.25f, m, k);
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
    const char *err = NULL;
    if (src.ndim != 3 || src.shape[2] != 3 || src.itemsize != 1 || (src.format && strcmp(src.format, "B") != 0))
        err = "src must be an HxWx3 uint8 array";
    else if (src.strides[2] != 1 || src.strides[1] != 3)
        err = "src pixels must be packed (3 bytes per pixel, rows may be strided)";
    else if (dst.ndim != 3 || dst.shape[0] != 3 || dst.itemsize != 4 || (dst.format && strcmp(dst.format, "f") != 0))
        err = "dst must be a 3xhxw float32 array";
    else if (dst.strides[2] != 4)
        err = "dst rows must be contiguous (planes and rows may be strided)";
    else if (src.shape[0] / shrink != dst.shape[1] || src.shape[0] % shrink || src.shape[1] / shrink != dst.shape[2] ||
             src.shape[1] % shrink)
        err = "src must be exactly shrink times the size of dst";
    else if (dst.shape[1] > 0 && dst.shape[2] > 0) {
        /* the loops promise the compiler (restrict) that the planes and the input never overlap */
        const Py_ssize_t row_bytes = dst.shape[2] * 4, plane_bytes = (dst.shape[1] - 1) * DV_ABS(dst.strides[1]) + row_bytes;
        const char *slo, *shi, *dlo, *dhi;
        extent(&src, &slo, &shi);
        extent(&dst, &dlo, &dhi);
        if ((dst.shape[1] > 1 && DV_ABS(dst.strides[1]) < row_bytes) || DV_ABS(dst.strides[0]) < plane_bytes)
            err = "dst rows and planes must not overlap";
        else if (slo < dhi && dlo < shi)
            err = "src and dst must not overlap";
    }
    if (err != NULL) {
        PyBuffer_Release(&src);
        PyBuffer_Release(&dst);
        PyErr_SetString(PyExc_ValueError, err);
        return NULL;
    }

    const Py_ssize_t h = dst.shape[1], w = dst.shape[2];
    if (h == 0 || w == 0) {
        PyBuffer_Release(&src);
        PyBuffer_Release(&dst);
        Py_RETURN_NONE;
    }
    const Py_ssize_t sstride = src.strides[0], plane = dst.strides[0], drow = dst.strides[1];
    const uint8_t *sbase = (const uint8_t *)src.buf;
    char *dbase = (char *)dst.buf;
    float *vbuf = NULL; /* shrink 2: three planes of 2w vertical sums */
    if (shrink == 2 && (vbuf = (float *)malloc((size_t)w * 6 * sizeof(float))) == NULL) {
        PyBuffer_Release(&src);
        PyBuffer_Release(&dst);
        return PyErr_NoMemory();
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t y = 0; y < h; y++) {
        float *d0 = (float *)(dbase + y * drow);
        float *d1 = (float *)((char *)d0 + plane), *d2 = (float *)((char *)d0 + 2 * plane);
        if (shrink == 1) {
            row1(sbase + y * sstride, d0, d1, d2, w, &cf);
        } else {
            const uint8_t *a = sbase + 2 * y * sstride;
            float *t[3] = {vbuf, vbuf + 2 * w, vbuf + 4 * w};
            vsum(a, a + sstride, t[0], t[1], t[2], 2 * w);
            hmean(t[cf.order[0]], d0, w, cf.mean[0], cf.k[0]);
            hmean(t[cf.order[1]], d1, w, cf.mean[1], cf.k[1]);
            hmean(t[cf.order[2]], d2, w, cf.mean[2], cf.k[2]);
        }
    }
    Py_END_ALLOW_THREADS
    free(vbuf);
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"normalise_planes", normalise_planes, METH_VARARGS,
     "normalise_planes(src, dst, order, mean, inv_std, shrink)\n\n"
     "uint8 HxWx3 -> float32 3xhxw, (x - mean) * inv_std per output plane; shrink 2 takes 2x2 means first.\n"
     "See the module source for the exact arithmetic. Releases the GIL."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_native",
    .m_doc = "dvpipe's compiled CPU kernel (see normalise_planes).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }
