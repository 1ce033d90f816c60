/* Columns from a run of Kineto trace events, without a Python object per event.
 *
 * scan(buffer, start, stop, categories, kinds, tail) reads the JSON events in buffer[start:stop]
 * (comma-separated objects; with tail, the rest of the file: events, then the array's ']') and
 * returns their fields as packed column buffers (see kineto_native.py), or None when anything is
 * not exactly what this scanner reproduces; the caller then decodes the chunk with msgspec.
 *
 * The rule that keeps both paths equal: this scanner is at least as strict as msgspec and never
 * guesses. It validates the whole text as RFC 8259 JSON (UTF-8 included, nesting <= 64) and gives
 * up (None) on: a key with an escape, a repeated known key, an event that is not an object, a
 * category not in `categories`, and in the events whose fields it fills: a phase that is not a
 * Chrome phase literal, a used field of a type msgspec would reject or that needs Python's rules
 * (strings in integer fields, integers beyond int64, non-finite numbers). Numbers become doubles as msgspec makes them (correctly rounded:
 * Clinger's exact path, else Python's own PyOS_string_to_double).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

typedef unsigned char uchar;

enum { K_SKIP = 0, K_PY = 1, K_OP = 2, K_MEM = 3, K_FULL = 4, K_OBJ = 5 };
enum { N_ARGI = 19, N_INT = 2 + N_ARGI, MAX_DEPTH = 64, MAX_CATS = 64 };

/* The integer args, in kineto_events.Args order (column 2 + index in the ints matrix). */
static const char *const ARG_INT_KEYS[N_ARGI] = {
    "External id", "Sequence number", "queued", "device", "stream", "cbid", "correlation",
    "registers per thread", "shared memory", "bytes", "toDevice", "graph id",
    "wait_on_cuda_event_id", "Total Reserved", "Total Allocated", "Bytes", "Device Id",
    "Device Type", "Addr"};
enum { A_EXT = 0, A_SEQ = 1, A_TOTAL_RES = 13, A_TOTAL_ALLOC = 14, A_MEMBYTES = 15,
       A_DEVID = 16, A_DEVTYPE = 17, A_ADDR = 18 };
/* The other Args keys (index N_ARGI + i in the 'seen' mask). */
enum { X_GRID = 0, X_BLOCK = 1, X_OCC = 2, X_SYNC = 3, X_NAME = 4, X_LABELS = 5, N_ARGX = 6 };
static const char *const ARG_X_KEYS[N_ARGX] = {
    "grid", "block", "est. achieved occupancy %", "cuda_sync_kind", "name", "labels"};

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
static uchar IS_PHASE[256];

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

/* The fields of one event, as read. States: 0 absent or null, 1 set, 2 a type this
 * scanner does not reproduce (the event's kind decides whether that matters). */
typedef struct {
    const uchar *cat; Py_ssize_t catlen;
    int ph, ph_bad;
    const uchar *name; Py_ssize_t namelen; int name_esc, name_st;
    int64_t ints[N_INT]; uchar ist[N_INT];
    double ts, dur; int ts_st, dur_st;
    int args_st; /* 0 absent, 1 an object, 2 something else */
    int64_t xyz[6]; uchar xst[2];
    double occ; int occ_st;
    const uchar *sync; Py_ssize_t synclen; int sync_esc, sync_st;
    int strx_st; /* args name / labels */
    uint32_t seen;
    uint64_t aseen;
} Ev;

enum { MAX_KEY = 32, PER_LEN = 6 };
/* The Args keys by length: indices (integer args first, then ARG_X_KEYS), -1 after the last. */
static signed char BY_LEN[MAX_KEY][PER_LEN];

static const char *arg_name(int i) { return i < N_ARGI ? ARG_INT_KEYS[i] : ARG_X_KEYS[i - N_ARGI]; }

static int arg_key(const uchar *k, Py_ssize_t kl) {
    if (kl >= MAX_KEY) return -1;
    for (const signed char *c = BY_LEN[kl]; *c >= 0; c++) {
        const char *want = arg_name(*c);
        if (want[0] == (char)k[0] && !memcmp(k, want, (size_t)kl)) return *c;
    }
    return -1;
}

static int init_keys(void) {
    memset(BY_LEN, -1, sizeof BY_LEN);
    for (int i = 0; i < N_ARGI + N_ARGX; i++) {
        size_t n = strlen(arg_name(i));
        int j = 0;
        if (n >= MAX_KEY) return -1;
        while (BY_LEN[n][j] >= 0) j++;
        if (j >= PER_LEN - 1) return -1;
        BY_LEN[n][j] = (signed char)i;
    }
    return 0;
}

/* An integer field (int | str | None in msgspec): int64 or null, else state 2. */
static int int_field(Scan *s, int64_t *v, uchar *st, int depth) {
    const uchar *p = s->p, *end = s->end;
    if (p < end && *p == 'n') { *st = 0; return literal(s, "null", 4); }
    int neg = p < end && *p == '-';
    p += neg;
    if (p >= end || !is_digit(*p)) {
        if (neg) return -1;
        *st = 2;
        return value(s, depth);
    }
    uint64_t m = 0;
    int nd = 0;
    if (*p == '0') {
        p++;
    } else {
        while (p < end && is_digit(*p) && nd < 18) { m = m * 10 + (uint64_t)(*p - '0'); nd++; p++; }
    }
    if (p < end && (is_digit(*p) || *p == '.' || *p == 'e' || *p == 'E')) {
        Num n; /* long, fractional or malformed: the full reader decides */
        if (number(s, &n, 0)) return -1;
        if (n.is_int && n.fits) { *v = n.iv; *st = 1; } else { *st = 2; }
        return 0;
    }
    /* at most 18 digits: fits in int64 either sign */
    *v = neg ? -(int64_t)m : (int64_t)m;
    *st = 1;
    s->p = p;
    return 0;
}

/* A float field (float in msgspec): a finite double, else state 2. */
static int float_field(Scan *s, double *v, int *st, int depth, int null_ok) {
    if (null_ok && s->p < s->end && *s->p == 'n') { *st = 0; return literal(s, "null", 4); }
    if (s->p < s->end && (*s->p == '-' || (*s->p >= '0' && *s->p <= '9'))) {
        Num n;
        if (number(s, &n, 1)) return -1;
        if (n.dok) { *v = n.dv; *st = 1; } else { *st = 2; }
        return 0;
    }
    *st = 2;
    return value(s, depth);
}

/* A string field (str, or str | None): its span, else state 2. */
static int str_field(Scan *s, const uchar **v, Py_ssize_t *len, int *esc, int *st, int depth,
                     int null_ok) {
    if (s->p < s->end && *s->p == '"') {
        *st = 1;
        return string(s, v, len, esc);
    }
    if (null_ok && s->p < s->end && *s->p == 'n') { *st = 0; return literal(s, "null", 4); }
    *st = 2;
    return value(s, depth);
}

/* grid / block (list[int] | str | None): 3 ints -> state 1; other lists of ints, strings and
 * null -> 0 (a null column value); anything else, or ints beyond int64 -> 2. */
static int xyz_field(Scan *s, int64_t *v, uchar *st, int depth) {
    if (s->p >= s->end) return -1;
    if (*s->p == '"' || *s->p == 'n') {
        *st = 0;
        return value(s, depth);
    }
    if (*s->p != '[') { *st = 2; return value(s, depth); }
    const uchar *save = s->p;
    s->p++;
    ws(s);
    int count = 0, ok = 1;
    if (s->p < s->end && *s->p == ']') {
        s->p++;
    } else {
        for (;;) {
            if (s->p < s->end && (*s->p == '-' || (*s->p >= '0' && *s->p <= '9'))) {
                Num n;
                if (number(s, &n, 0)) return -1;
                if (!(n.is_int && n.fits)) ok = 0;
                else if (count < 3) v[count] = n.iv;
                count++;
            } else {
                ok = 0;
                break;
            }
            ws(s);
            if (s->p < s->end && *s->p == ',') { s->p++; ws(s); continue; }
            if (s->p < s->end && *s->p == ']') { s->p++; break; }
            return -1;
        }
    }
    if (!ok) { /* re-read it as any value, for the syntax check */
        s->p = save;
        *st = 2;
        return value(s, depth);
    }
    *st = count == 3 ? 1 : 0;
    return 0;
}

static int args_object(Scan *s, Ev *e, int depth) {
    s->p++;
    ws(s);
    if (s->p < s->end && *s->p == '}') { s->p++; return 0; }
    for (;;) {
        const uchar *k;
        Py_ssize_t kl;
        int esc;
        if (s->p >= s->end || *s->p != '"' || string(s, &k, &kl, &esc)) return -1;
        if (esc) return -1;
        ws(s);
        if (s->p >= s->end || *s->p != ':') return -1;
        s->p++;
        ws(s);
        int which = arg_key(k, kl);
        if (which >= 0) {
            uint64_t bit = 1ULL << which;
            if (e->aseen & bit) return -1; /* a repeated key */
            e->aseen |= bit;
        }
        int rc;
        if (which < 0) {
            rc = value(s, depth + 1);
        } else if (which < N_ARGI) {
            rc = int_field(s, &e->ints[2 + which], &e->ist[2 + which], depth + 1);
        } else {
            int x = which - N_ARGI, st = 0, esc2;
            const uchar *sv;
            Py_ssize_t sl;
            switch (x) {
            case X_GRID: case X_BLOCK:
                rc = xyz_field(s, &e->xyz[3 * x], &e->xst[x], depth + 1);
                break;
            case X_OCC:
                rc = float_field(s, &e->occ, &e->occ_st, depth + 1, 1);
                break;
            case X_SYNC:
                rc = str_field(s, &e->sync, &e->synclen, &e->sync_esc, &e->sync_st, depth + 1, 1);
                break;
            default:
                rc = str_field(s, &sv, &sl, &esc2, &st, depth + 1, 1);
                if (st == 2) e->strx_st = 2;
            }
        }
        if (rc) return -1;
        ws(s);
        if (s->p >= s->end) return -1;
        if (*s->p == ',') { s->p++; ws(s); continue; }
        if (*s->p == '}') { s->p++; return 0; }
        return -1;
    }
}

enum { T_PH, T_CAT, T_NAME, T_PID, T_TID, T_TS, T_DUR, T_ARGS, N_TOP };

static int top_key(const uchar *k, Py_ssize_t kl) {
    switch (kl) {
    case 2:
        if (k[0] == 'p' && k[1] == 'h') return T_PH;
        if (k[0] == 't' && k[1] == 's') return T_TS;
        return -1;
    case 3:
        if (!memcmp(k, "cat", 3)) return T_CAT;
        if (!memcmp(k, "pid", 3)) return T_PID;
        if (!memcmp(k, "tid", 3)) return T_TID;
        if (!memcmp(k, "dur", 3)) return T_DUR;
        return -1;
    case 4:
        if (!memcmp(k, "name", 4)) return T_NAME;
        if (!memcmp(k, "args", 4)) return T_ARGS;
        return -1;
    default:
        return -1;
    }
}

static int event(Scan *s, Ev *e) {
    /* Only the states and spans: a value is read only when its state says it is set. */
    e->cat = NULL;
    e->ph = e->ph_bad = 0;
    e->name_st = e->name_esc = 0;
    memset(e->ist, 0, sizeof e->ist);
    e->ts = e->dur = e->occ = NAN;
    e->ts_st = e->dur_st = e->args_st = e->occ_st = e->sync_st = e->sync_esc = e->strx_st = 0;
    e->xst[0] = e->xst[1] = 0;
    e->seen = 0;
    e->aseen = 0;
    if (s->p >= s->end || *s->p != '{') return -1;
    s->p++;
    ws(s);
    if (s->p < s->end && *s->p == '}') { s->p++; return 0; }
    for (;;) {
        const uchar *k;
        Py_ssize_t kl;
        int esc;
        if (s->p >= s->end || *s->p != '"' || string(s, &k, &kl, &esc)) return -1;
        if (esc) return -1;
        ws(s);
        if (s->p >= s->end || *s->p != ':') return -1;
        s->p++;
        ws(s);
        int which = top_key(k, kl);
        if (which >= 0) {
            if (e->seen & (1u << which)) return -1;
            e->seen |= 1u << which;
        }
        int rc = 0, st = 0;
        const uchar *sv;
        Py_ssize_t sl;
        switch (which) {
        case T_PH:
            rc = str_field(s, &sv, &sl, &esc, &st, 1, 0);
            if (st != 1 || esc || sl > 1 || (sl == 1 && !IS_PHASE[sv[0]])) e->ph_bad = 1;
            else e->ph = sl ? sv[0] : 0;
            break;
        case T_CAT:
            rc = str_field(s, &e->cat, &e->catlen, &esc, &st, 1, 0);
            if (st != 1 || esc) return -1;
            break;
        case T_NAME:
            rc = str_field(s, &e->name, &e->namelen, &e->name_esc, &e->name_st, 1, 0);
            break;
        case T_PID: case T_TID:
            rc = int_field(s, &e->ints[which - T_PID], &e->ist[which - T_PID], 1);
            break;
        case T_TS:
            rc = float_field(s, &e->ts, &e->ts_st, 1, 0);
            break;
        case T_DUR:
            rc = float_field(s, &e->dur, &e->dur_st, 1, 0);
            break;
        case T_ARGS:
            if (s->p < s->end && *s->p == '{') {
                e->args_st = 1;
                rc = args_object(s, e, 1);
            } else {
                e->args_st = 2;
                rc = value(s, 1);
            }
            break;
        default:
            rc = value(s, 1);
        }
        if (rc) return -1;
        ws(s);
        if (s->p >= s->end) return -1;
        if (*s->p == ',') { s->p++; ws(s); continue; }
        if (*s->p == '}') { s->p++; return 0; }
        return -1;
    }
}

/* Interned strings: offsets/data as an Arrow string array, an open-addressing index. */
typedef struct {
    Buf off, data;
    int32_t *slots; uint64_t *hashes; Py_ssize_t cap, n;
} Strings;

static uint64_t hash_bytes(const char *p, Py_ssize_t n) {
    const uint64_t k = 0x9E3779B97F4A7C15ULL;
    uint64_t h = (uint64_t)n * k, w;
    for (; n >= 8; n -= 8, p += 8) {
        memcpy(&w, p, 8);
        h = (h ^ w) * k;
        h ^= h >> 32;
    }
    w = 0;
    memcpy(&w, p, (size_t)n);
    h ^= w; /* murmur3's finaliser: every input bit reaches the low (slot) bits */
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDULL;
    h ^= h >> 33;
    h *= 0xC4CEB9FE1A85EC53ULL;
    return h ^ (h >> 33);
}

static int strings_rehash(Strings *t, Py_ssize_t cap) {
    int32_t *slots = malloc(sizeof(int32_t) * (size_t)cap);
    uint64_t *hashes = malloc(sizeof(uint64_t) * (size_t)cap);
    if (!slots || !hashes) { free(slots); free(hashes); return -1; }
    for (Py_ssize_t i = 0; i < cap; i++) slots[i] = -1;
    for (Py_ssize_t i = 0; i < t->cap; i++) {
        if (t->slots[i] < 0) continue;
        Py_ssize_t j = (Py_ssize_t)(t->hashes[i] & (uint64_t)(cap - 1));
        while (slots[j] >= 0) j = (j + 1) & (cap - 1);
        slots[j] = t->slots[i];
        hashes[j] = t->hashes[i];
    }
    free(t->slots);
    free(t->hashes);
    t->slots = slots;
    t->hashes = hashes;
    t->cap = cap;
    return 0;
}

/* The id of string p[:n] (offsets hold 0 first: string i is data[off[i]:off[i + 1]]). */
static int32_t intern(Strings *t, const char *p, Py_ssize_t n) {
    if (!t->off.len) {
        int32_t zero = 0;
        if (put(&t->off, &zero, sizeof zero)) return -1;
    }
    if (2 * (t->n + 1) > t->cap && strings_rehash(t, t->cap ? 2 * t->cap : 1024)) return -1;
    uint64_t h = hash_bytes(p, n);
    const int32_t *off = (const int32_t *)t->off.p;
    Py_ssize_t j = (Py_ssize_t)(h & (uint64_t)(t->cap - 1));
    while (t->slots[j] >= 0) {
        int32_t id = t->slots[j];
        if (t->hashes[j] == h && off[id + 1] - off[id] == n && !memcmp(t->data.p + off[id], p, (size_t)n))
            return id;
        j = (j + 1) & (t->cap - 1);
    }
    if (t->data.len + n > INT32_MAX) return -1;
    if (put(&t->data, p, n)) return -1;
    int32_t end = (int32_t)t->data.len, id = (int32_t)t->n;
    if (put(&t->off, &end, sizeof end)) return -1;
    t->slots[j] = id;
    t->hashes[j] = h;
    t->n++;
    return id;
}

static int32_t intern_span(Scan *s, Strings *t, const uchar *p, Py_ssize_t n, int esc) {
    if (!esc) return intern(t, (const char *)p, n);
    const char *v;
    Py_ssize_t vl;
    if (unescape(s, p, n, &v, &vl)) return -1;
    return intern(t, v, vl);
}

enum { B_CAT, B_PH, B_POS, B_NAME, B_INT, B_IST, B_FLT, B_XYZ, B_XST, B_SYNC, B_OBJ, N_BUF };

/* Bytes per row of each column buffer (B_OBJ is appended to on its own). */
static const Py_ssize_t ROW_BYTES[B_OBJ] = {1, 1, 4, 4, 8 * N_INT, N_INT, 8 * 3, 8 * 6, 2, 4};

typedef struct {
    Buf b[N_BUF];
    Strings str;
    int64_t counts[MAX_CATS];
    Py_ssize_t rows, cap;
} Out;

/* Room for ``rows`` rows in every column buffer. */
static int reserve(Out *o, Py_ssize_t rows) {
    if (rows <= o->cap) return 0;
    Py_ssize_t cap = o->cap ? 2 * o->cap : 1024;
    while (cap < rows) cap *= 2;
    for (int i = 0; i < B_OBJ; i++)
        if (grow(&o->b[i], (cap - o->rows) * ROW_BYTES[i])) return -1;
    o->cap = cap;
    return 0;
}

/* Which integer args each kind type-checks (msgspec validates every field of its Struct). */
static int ints_ok(const Ev *e, int kind) {
    if (kind == K_FULL) {
        for (int i = 0; i < N_ARGI; i++)
            if (e->ist[2 + i] == 2) return 0;
        return e->xst[0] != 2 && e->xst[1] != 2 && e->occ_st != 2 && e->sync_st != 2 &&
               e->strx_st != 2;
    }
    if (kind == K_OP) return e->ist[2 + A_EXT] != 2 && e->ist[2 + A_SEQ] != 2;
    /* K_MEM */
    static const int mem[6] = {A_TOTAL_RES, A_TOTAL_ALLOC, A_MEMBYTES, A_DEVID, A_DEVTYPE, A_ADDR};
    for (int i = 0; i < 6; i++)
        if (e->ist[2 + mem[i]] == 2) return 0;
    return 1;
}

/* One event into the columns: 0 done (or only counted), 1 an event for msgspec (the caller
 * records its span), -1 not reproducible here (fall back), -2 out of memory. */
static int commit(Scan *s, Out *o, const Ev *e, int kind, uchar cat, int32_t pos) {
    o->counts[cat]++;
    if (kind == K_SKIP) return 0;
    if (kind == K_OBJ) return 1;
    if (e->ph_bad || e->name_st == 2 || e->ist[0] == 2 || e->ist[1] == 2 || e->ts_st == 2 ||
        e->dur_st == 2)
        return -1;
    if (kind != K_PY) {
        if (e->args_st == 2) return -1;
        if (!ints_ok(e, kind)) return -1;
    }
    int32_t name = e->name_st == 1 ? intern_span(s, &o->str, e->name, e->namelen, e->name_esc)
                                   : intern(&o->str, "", 0);
    int32_t sync = -1;
    if (kind == K_FULL && e->sync_st == 1)
        sync = intern_span(s, &o->str, e->sync, e->synclen, e->sync_esc);
    if (name < 0 || (kind == K_FULL && e->sync_st == 1 && sync < 0)) return -2;
    if (reserve(o, o->rows + 1)) return -2;
    Py_ssize_t r = o->rows;
    ((uchar *)o->b[B_CAT].p)[r] = cat;
    ((uchar *)o->b[B_PH].p)[r] = (uchar)e->ph;
    ((int32_t *)o->b[B_POS].p)[r] = pos;
    ((int32_t *)o->b[B_NAME].p)[r] = name;
    ((int32_t *)o->b[B_SYNC].p)[r] = sync;
    int64_t *ints = (int64_t *)o->b[B_INT].p + r * N_INT;
    uchar *ist = (uchar *)o->b[B_IST].p + r * N_INT;
    for (int i = 0; i < N_INT; i++) {
        ist[i] = e->ist[i];
        ints[i] = e->ist[i] == 1 ? e->ints[i] : 0;
    }
    double *f = (double *)o->b[B_FLT].p + r * 3;
    f[0] = e->ts;
    f[1] = e->dur;
    f[2] = e->occ;
    int64_t *xyz = (int64_t *)o->b[B_XYZ].p + r * 6;
    uchar *xst = (uchar *)o->b[B_XST].p + r * 2;
    for (int i = 0; i < 2; i++) {
        xst[i] = e->xst[i];
        for (int j = 0; j < 3; j++) xyz[3 * i + j] = e->xst[i] == 1 ? e->xyz[3 * i + j] : 0;
    }
    o->rows++;
    for (int i = 0; i < B_OBJ; i++) o->b[i].len += ROW_BYTES[i];
    return 0;
}

static void out_free(Out *o, Scan *s) {
    for (int i = 0; i < N_BUF; i++) free(o->b[i].p);
    free(o->str.off.p);
    free(o->str.data.p);
    free(o->str.slots);
    free(o->str.hashes);
    free(s->scratch.p);
}

static PyObject *bytes_of(const Buf *b) {
    return PyBytes_FromStringAndSize(b->p ? b->p : "", b->len);
}

static PyObject *scan(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer view;
    Py_ssize_t start, stop, ncats;
    PyObject *cats;
    const char *kinds;
    int tail;
    if (!PyArg_ParseTuple(args, "y*nnO!y#p", &view, &start, &stop, &PyTuple_Type, &cats, &kinds,
                          &ncats, &tail))
        return NULL;
    PyObject *result = NULL;
    Scan s = {0};
    Out o;
    memset(&o, 0, sizeof o);
    const uchar *base = view.buf;
    const char *catp[MAX_CATS];
    Py_ssize_t catl[MAX_CATS];
    if (ncats > MAX_CATS || PyTuple_GET_SIZE(cats) != ncats || start < 0 || stop > view.len ||
        start > stop) {
        PyErr_SetString(PyExc_ValueError, "scan: bad arguments");
        goto done;
    }
    for (Py_ssize_t i = 0; i < ncats; i++) {
        catp[i] = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(cats, i), &catl[i]);
        if (!catp[i]) goto done;
    }
    s.p = base + start;
    s.end = base + stop;
    if (reserve(&o, (stop - start) / 256 + 16)) goto nomem; /* Kineto events: ~200-2000 bytes */
    int32_t pos = 0;
    Ev e;
    int last = -1; /* the previous event's category: runs of one category are common */
    ws(&s);
    int empty = tail ? (s.p < s.end && *s.p == ']') : s.p == s.end;
    while (!empty) {
        const uchar *ev_start = s.p;
        if (event(&s, &e)) goto fallback;
        if (!e.cat) goto fallback; /* no category: metadata, global instants */
        int cat = -1;
        if (last >= 0 && catl[last] == e.catlen && !memcmp(catp[last], e.cat, (size_t)e.catlen))
            cat = last;
        for (Py_ssize_t i = 0; i < ncats && cat < 0; i++)
            if (catl[i] == e.catlen && !memcmp(catp[i], e.cat, (size_t)e.catlen)) cat = (int)i;
        if (cat < 0) goto fallback;
        last = cat;
        int rc = commit(&s, &o, &e, (uchar)kinds[cat], (uchar)cat, pos);
        if (rc == 1) {
            int64_t span[3] = {ev_start - base, s.p - base, pos};
            if (put(&o.b[B_OBJ], span, sizeof span)) goto nomem;
        } else if (rc == -1) {
            goto fallback;
        } else if (rc == -2) {
            goto nomem;
        }
        pos++;
        ws(&s);
        if (s.p < s.end && *s.p == ',') {
            s.p++;
            ws(&s);
            continue;
        }
        break;
    }
    if (tail) {
        if (s.p >= s.end || *s.p != ']') goto fallback;
        s.p++;
    } else if (s.p != s.end) {
        goto fallback;
    }
    if (!o.str.n && intern(&o.str, "", 0) < 0) goto nomem; /* an empty table still has off[0] */
    {
        PyObject *items[N_BUF + 5];
        items[0] = PyLong_FromSsize_t(pos);
        items[1] = PyBytes_FromStringAndSize((const char *)o.counts, (Py_ssize_t)(8 * ncats));
        items[2] = PyLong_FromSsize_t(o.rows);
        for (int i = 0; i < N_BUF; i++) items[3 + i] = bytes_of(&o.b[i]);
        items[3 + N_BUF] = bytes_of(&o.str.off);
        items[4 + N_BUF] = bytes_of(&o.str.data);
        result = PyTuple_New(N_BUF + 6);
        int bad = !result;
        for (int i = 0; i < N_BUF + 5; i++) {
            if (!items[i]) bad = 1;
            if (result) PyTuple_SET_ITEM(result, i, items[i] ? items[i] : (Py_INCREF(Py_None), Py_None));
            else Py_XDECREF(items[i]);
        }
        if (result) {
            PyObject *endpos = PyLong_FromSsize_t(s.p - base);
            if (!endpos) bad = 1;
            PyTuple_SET_ITEM(result, N_BUF + 5, endpos ? endpos : (Py_INCREF(Py_None), Py_None));
        }
        if (bad) Py_CLEAR(result);
    }
    goto done;
fallback:
    Py_INCREF(Py_None);
    result = Py_None;
    goto done;
nomem:
    PyErr_NoMemory();
done:
    out_free(&o, &s);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef METHODS[] = {
    {"scan", scan, METH_VARARGS,
     "scan(buffer, start, stop, categories, kinds, tail) -> tuple of column buffers, or None"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef MODULE = {
    PyModuleDef_HEAD_INIT, "_ss_kineto", "Kineto events to column buffers (see kineto_native.py).",
    -1, METHODS, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__ss_kineto(void) {
    for (int c = 0x20; c < 0x80; c++) PLAIN[c] = c != '"' && c != '\\';
    IS_WS[' '] = IS_WS['\n'] = IS_WS['\r'] = IS_WS['\t'] = 1;
    if (init_keys()) {
        PyErr_SetString(PyExc_RuntimeError, "_ss_kineto: key table too small");
        return NULL;
    }
    const char *phases = "XBEiIstfMbneCPONDRcVv()";
    for (const char *p = phases; *p; p++) IS_PHASE[(uchar)*p] = 1;
    return PyModule_Create(&MODULE);
}
