/* One Kineto event's fields as the scanner reads them (_kineto_scan.c): the top-level keys,
 * the args keys of kineto_events.Args, each with a state saying whether its value is one the
 * scanner reproduces. Included once, by _kineto_scan.c, after _kineto_json.h. */
#ifndef SS_KINETO_EVENT_H
#define SS_KINETO_EVENT_H

enum { N_ARGI = 19, N_INT = 2 + N_ARGI };
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


static uchar IS_PHASE[256];

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
    int comm; /* args has a "Collective name" key: a communication call's event */
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

/* An object key without escapes and its colon; -1 for anything else. */
static int object_key(Scan *s, const uchar **k, Py_ssize_t *kl) {
    int esc;
    if (s->p >= s->end || *s->p != '"' || string(s, k, kl, &esc) || esc) return -1;
    ws(s);
    if (s->p >= s->end || *s->p != ':') return -1;
    s->p++;
    ws(s);
    return 0;
}

static int args_object(Scan *s, Ev *e, int depth) {
    s->p++;
    ws(s);
    if (s->p < s->end && *s->p == '}') { s->p++; return 0; }
    for (;;) {
        const uchar *k;
        Py_ssize_t kl;
        if (object_key(s, &k, &kl)) return -1;
        int which = arg_key(k, kl);
        if (which >= 0) {
            uint64_t bit = 1ULL << which;
            if (e->aseen & bit) return -1; /* a repeated key */
            e->aseen |= bit;
        }
        int rc;
        if (which < 0) {
            if (kl == 15 && !memcmp(k, "Collective name", 15)) e->comm = 1;
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
    e->comm = 0;
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
        if (object_key(s, &k, &kl)) return -1;
        int which = top_key(k, kl);
        if (which >= 0) {
            if (e->seen & (1u << which)) return -1;
            e->seen |= 1u << which;
        }
        int rc = 0, st = 0, esc = 0;
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


/* The key and phase tables (called once, when the module is created); -1: too small. */
static int event_init(void) {
    const char *phases = "XBEiIstfMbneCPONDRcVv()";
    for (const char *p = phases; *p; p++) IS_PHASE[(uchar)*p] = 1;
    return init_keys();
}

#endif
