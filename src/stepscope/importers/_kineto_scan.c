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
 * (strings in integer fields, integers beyond int64, non-finite numbers). Numbers become doubles
 * as msgspec makes them (correctly rounded: Clinger's exact path, else Python's own
 * PyOS_string_to_double).
 *
 * Files: _kineto_json.h (the JSON lexer), _kineto_event.h (one event's fields), this file
 * (category dispatch, interned names, the column buffers, the module).
 */
#include "_kineto_json.h"
#include "_kineto_event.h"

enum { K_SKIP = 0, K_PY = 1, K_OP = 2, K_MEM = 3, K_FULL = 4, K_OBJ = 5 };
enum { MAX_CATS = 64 };

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

enum { B_CAT, B_PH, B_POS, B_NAME, B_INT, B_IST, B_FLT, B_XYZ, B_XST, B_SYNC, B_OBJ, B_COMM, N_BUF };

/* Bytes per row of each column buffer (B_OBJ and B_COMM are appended to on their own: the
 * spans of events for msgspec, and of communication calls' events, which are also rows). */
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
    if (ncats > MAX_CATS || PyTuple_Size(cats) != ncats || start < 0 || stop > view.len ||
        start > stop) {
        PyErr_SetString(PyExc_ValueError, "scan: bad arguments");
        goto done;
    }
    for (Py_ssize_t i = 0; i < ncats; i++) {
        catp[i] = PyUnicode_AsUTF8AndSize(PyTuple_GetItem(cats, i), &catl[i]);
        if (!catp[i]) goto done;
    }
    if (stop - start > INT32_MAX) goto fallback; /* string offsets and positions are int32 */
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
        /* a communication call's arguments ("Collective name": a record_param_comms op, an
         * NCCL kernel of torch >= 2.4): its span too, for kineto/comms.py */
        if (rc == 0 && e.comm && kinds[cat] != K_SKIP) {
            int64_t span[3] = {ev_start - base, s.p - base, pos};
            if (put(&o.b[B_COMM], span, sizeof span)) goto nomem;
        }
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
        PyObject *items[N_BUF + 6];
        items[0] = PyLong_FromSsize_t(pos);
        items[1] = PyBytes_FromStringAndSize((const char *)o.counts, (Py_ssize_t)(8 * ncats));
        items[2] = PyLong_FromSsize_t(o.rows);
        for (int i = 0; i < N_BUF; i++) items[3 + i] = bytes_of(&o.b[i]);
        items[3 + N_BUF] = bytes_of(&o.str.off);
        items[4 + N_BUF] = bytes_of(&o.str.data);
        items[5 + N_BUF] = PyLong_FromSsize_t(s.p - base);
        result = PyTuple_New(N_BUF + 6);
        int bad = !result;
        for (int i = 0; i < N_BUF + 6; i++) {
            PyObject *item = items[i];
            if (!item) {
                bad = 1;
            } else if (!result) {
                Py_DECREF(item);
            } else if (PyTuple_SetItem(result, i, item)) { /* steals item, even on failure */
                bad = 1;
            }
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
    json_init();
    if (event_init()) {
        PyErr_SetString(PyExc_RuntimeError, "_ss_kineto: key table too small");
        return NULL;
    }
    return PyModule_Create(&MODULE);
}