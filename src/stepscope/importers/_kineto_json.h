/* JSON lexing for the Kineto scanner (_kineto_scan.c): strict RFC 8259, UTF-8 checked.
 * Every function returns 0 on success and -1 on anything invalid (or deeper than MAX_DEPTH);
 * the scanner then gives the chunk back to msgspec. Included once, by _kineto_scan.c. */
#ifndef SS_KINETO_JSON_H
#define SS_KINETO_JSON_H
#define PY_SSIZE_T_CLEAN
/* The stable ABI of CPython 3.11 (Py_buffer joined it in 3.11): one build, `*.abi3.so`, loads in
 * every CPython >= 3.11 (pyproject.toml: py-limited-api). Only the stable ABI's functions are
 * declared then, so a call outside it does not compile. SS_FULL_API builds against the full C
 * API instead (benchmarks/scanner_abi3.py compares the two). */
#if !defined(Py_LIMITED_API) && !defined(SS_FULL_API)
#define Py_LIMITED_API 0x030B0000
#endif
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

typedef unsigned char uchar;

enum { MAX_DEPTH = 64 };

typedef struct { char *p; Py_ssize_t len, cap; } Buf;

static int grow(Buf *b, Py_ssize_t extra) {
    if (b->len + extra <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra) cap *= 2;
    char *p = realloc(b->p, (size_t)cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

static int put(Buf *b, const void *src, Py_ssize_t n) {
    if (n <= 0) return 0; /* b->p may still be NULL: no memcpy to it */
    if (grow(b, n)) return -1;
    memcpy(b->p + b->len, src, (size_t)n);
    b->len += n;
    return 0;
}

typedef struct {
    const uchar *p, *end;
    Buf scratch;
} Scan;

/* 1 for bytes that may stand in a string as they are (printable ASCII but '"' and '\\'). */
static uchar PLAIN[256];

static uchar IS_WS[256];

static inline void ws(Scan *s) {
    const uchar *p = s->p, *end = s->end;
    while (p < end && IS_WS[*p]) p++;
    s->p = p;
}

static int hexval(uchar c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int hex4(const uchar *p, const uchar *end, unsigned *out) {
    if (end - p < 4) return -1;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p[i]);
        if (h < 0) return -1;
        v = v * 16 + (unsigned)h;
    }
    *out = v;
    return 0;
}

/* Length of the valid UTF-8 sequence at p (a byte >= 0x80), or 0 when invalid. */
static int utf8_len(const uchar *p, const uchar *end) {
    uchar c = p[0];
    Py_ssize_t left = end - p;
    if (c >= 0xC2 && c <= 0xDF) return left >= 2 && (p[1] & 0xC0) == 0x80 ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        if (left < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) return 0;
        if (c == 0xE0 && p[1] < 0xA0) return 0; /* overlong */
        if (c == 0xED && p[1] >= 0xA0) return 0; /* surrogates */
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (left < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80)
            return 0;
        if (c == 0xF0 && p[1] < 0x90) return 0;
        if (c == 0xF4 && p[1] >= 0x90) return 0;
        return 4;
    }
    return 0;
}

/* A string at s->p (its opening quote): its raw span, and whether it holds escapes. */
static int string(Scan *s, const uchar **start, Py_ssize_t *len, int *esc) {
    const uchar *p = s->p + 1, *end = s->end;
    *start = p;
    *esc = 0;
    for (;;) {
#ifdef __SSE2__
        /* 16 bytes at a time to the next '"', '\\', control or non-ASCII byte (signed < 0x20) */
        const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\'),
                      space = _mm_set1_epi8(0x20);
        while (end - p >= 16) {
            __m128i x = _mm_loadu_si128((const __m128i *)p);
            __m128i hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, quote),
                                                    _mm_cmpeq_epi8(x, bslash)),
                                       _mm_cmplt_epi8(x, space));
            int mask = _mm_movemask_epi8(hit);
            if (mask) {
                p += __builtin_ctz((unsigned)mask);
                break;
            }
            p += 16;
        }
#endif
        while (p < end && PLAIN[*p]) p++;
        if (p >= end) return -1;
        uchar c = *p;
        if (c == '"') {
            *len = p - *start;
            s->p = p + 1;
            return 0;
        }
        if (c == '\\') {
            *esc = 1;
            if (++p >= end) return -1;
            switch (*p) {
            case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
                p++;
                break;
            case 'u': {
                unsigned u;
                if (hex4(p + 1, end, &u)) return -1;
                p += 5;
                if (u >= 0xDC00 && u <= 0xDFFF) return -1; /* a lone low surrogate */
                if (u >= 0xD800 && u <= 0xDBFF) {          /* must pair with a low one */
                    unsigned lo;
                    if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || hex4(p + 2, end, &lo))
                        return -1;
                    if (lo < 0xDC00 || lo > 0xDFFF) return -1;
                    p += 6;
                }
                break;
            }
            default:
                return -1;
            }
            continue;
        }
        if (c < 0x20) return -1;
        int n = utf8_len(p, end);
        if (!n) return -1;
        p += n;
    }
}

static void utf8_put(char **o, unsigned cp) {
    uchar *q = (uchar *)*o;
    if (cp < 0x80) {
        *q++ = (uchar)cp;
    } else if (cp < 0x800) {
        *q++ = (uchar)(0xC0 | (cp >> 6));
        *q++ = (uchar)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        *q++ = (uchar)(0xE0 | (cp >> 12));
        *q++ = (uchar)(0x80 | ((cp >> 6) & 0x3F));
        *q++ = (uchar)(0x80 | (cp & 0x3F));
    } else {
        *q++ = (uchar)(0xF0 | (cp >> 18));
        *q++ = (uchar)(0x80 | ((cp >> 12) & 0x3F));
        *q++ = (uchar)(0x80 | ((cp >> 6) & 0x3F));
        *q++ = (uchar)(0x80 | (cp & 0x3F));
    }
    *o = (char *)q;
}

/* The value of a (validated) string with escapes, into s->scratch (never longer than raw). */
static int unescape(Scan *s, const uchar *p, Py_ssize_t n, const char **out, Py_ssize_t *outlen) {
    s->scratch.len = 0;
    if (grow(&s->scratch, n + 1)) return -1;
    char *o = s->scratch.p;
    const uchar *end = p + n;
    while (p < end) {
        if (*p != '\\') {
            *o++ = (char)*p++;
            continue;
        }
        p++;
        switch (*p++) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '/': *o++ = '/'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        default: { /* 'u', checked by string() */
            unsigned u = 0, lo = 0xDC00;
            hex4(p, end, &u);
            p += 4;
            if (u >= 0xD800 && u <= 0xDBFF) {
                hex4(p + 2, end, &lo);
                p += 6;
                u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
            }
            utf8_put(&o, u);
        }
        }
    }
    *out = s->scratch.p;
    *outlen = o - s->scratch.p;
    return 0;
}

/* A number at s->p. *is_int: a plain integer literal; *iv its value when it fits in int64
 * (*fits). *dv: the double msgspec makes of it (*dok: computed and finite). */
typedef struct { int is_int, fits, dok; int64_t iv; double dv; } Num;

static const double POW10[23] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                                 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

static int number(Scan *s, Num *n, int want_double) {
    const uchar *p = s->p, *end = s->end, *start = p;
    int neg = 0, digits = 0, frac = 0;
    uint64_t m = 0;
    long exp = 0;
    if (p < end && *p == '-') { neg = 1; p++; }
    if (p >= end) return -1;
    if (*p == '0') {
        p++;
        digits = 1;
    } else if (*p >= '1' && *p <= '9') {
        while (p < end && *p >= '0' && *p <= '9') {
            if (digits < 19) m = m * 10 + (uint64_t)(*p - '0');
            digits++;
            p++;
        }
    } else {
        return -1;
    }
    int intdigits = digits;
    n->is_int = 1;
    if (p < end && *p == '.') {
        n->is_int = 0;
        p++;
        if (p >= end || *p < '0' || *p > '9') return -1;
        while (p < end && *p >= '0' && *p <= '9') {
            if (digits < 19) { m = m * 10 + (uint64_t)(*p - '0'); frac++; }
            digits++;
            p++;
        }
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        n->is_int = 0;
        p++;
        int eneg = 0;
        if (p < end && (*p == '+' || *p == '-')) { eneg = *p == '-'; p++; }
        if (p >= end || *p < '0' || *p > '9') return -1;
        while (p < end && *p >= '0' && *p <= '9') {
            if (exp < 100000) exp = exp * 10 + (*p - '0');
            p++;
        }
        if (eneg) exp = -exp;
    }
    s->p = p;
    n->fits = 0;
    if (n->is_int && intdigits <= 19) {
        /* m holds all the digits (at most 19: < 10^19 < 2^64) */
        if (!neg && m <= (uint64_t)INT64_MAX) { n->fits = 1; n->iv = (int64_t)m; }
        if (neg && m <= (uint64_t)INT64_MAX + 1) {
            n->fits = 1;
            n->iv = m == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)m;
        }
    }
    n->dok = 0;
    if (!want_double) return 0;
    long e10 = exp - frac;
    if (digits <= 19 && m <= (1ULL << 53) && e10 >= -22 && e10 <= 22) {
        double d = (double)m;
        d = e10 < 0 ? d / POW10[-e10] : d * POW10[e10];
        n->dv = neg ? -d : d;
        n->dok = 1;
        return 0;
    }
    Py_ssize_t len = p - start;
    s->scratch.len = 0;
    if (grow(&s->scratch, len + 1)) return -1;
    memcpy(s->scratch.p, start, (size_t)len);
    s->scratch.p[len] = 0;
    double d = PyOS_string_to_double(s->scratch.p, NULL, NULL);
    if (d == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    if (isfinite(d)) { n->dv = d; n->dok = 1; }
    return 0;
}

static int value(Scan *s, int depth);

static inline int is_digit(uchar c) { return c >= '0' && c <= '9'; }

/* Validate and skip a number (RFC 8259 grammar). */
static int skip_number(Scan *s) {
    const uchar *p = s->p, *end = s->end;
    if (p < end && *p == '-') p++;
    if (p >= end) return -1;
    if (*p == '0') p++;
    else if (is_digit(*p)) while (p < end && is_digit(*p)) p++;
    else return -1;
    if (p < end && *p == '.') {
        p++;
        if (p >= end || !is_digit(*p)) return -1;
        while (p < end && is_digit(*p)) p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || !is_digit(*p)) return -1;
        while (p < end && is_digit(*p)) p++;
    }
    s->p = p;
    return 0;
}

static int container(Scan *s, int depth) {
    uchar open = *s->p, close = open == '{' ? '}' : ']';
    if (depth >= MAX_DEPTH) return -1;
    s->p++;
    ws(s);
    if (s->p < s->end && *s->p == close) { s->p++; return 0; }
    for (;;) {
        if (open == '{') {
            const uchar *k;
            Py_ssize_t kl;
            int esc;
            if (s->p >= s->end || *s->p != '"' || string(s, &k, &kl, &esc)) return -1;
            ws(s);
            if (s->p >= s->end || *s->p != ':') return -1;
            s->p++;
            ws(s);
        }
        if (value(s, depth + 1)) return -1;
        ws(s);
        if (s->p >= s->end) return -1;
        if (*s->p == ',') { s->p++; ws(s); continue; }
        if (*s->p == close) { s->p++; return 0; }
        return -1;
    }
}

static int literal(Scan *s, const char *word, size_t n) {
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n)) return -1;
    s->p += n;
    return 0;
}

/* Validate and skip any value. */
static int value(Scan *s, int depth) {
    if (s->p >= s->end) return -1;
    const uchar *k;
    Py_ssize_t kl;
    int esc;
    switch (*s->p) {
    case '{': case '[': return container(s, depth);
    case '"': return string(s, &k, &kl, &esc);
    case 't': return literal(s, "true", 4);
    case 'f': return literal(s, "false", 5);
    case 'n': return literal(s, "null", 4);
    default: return skip_number(s);
    }
}


/* The lexer's byte tables (called once, when the module is created). */
static void json_init(void) {
    for (int c = 0x20; c < 0x80; c++) PLAIN[c] = c != '"' && c != '\\';
    IS_WS[' '] = IS_WS['\n'] = IS_WS['\r'] = IS_WS['\t'] = 1;
}

#endif
