/*
 * stepscope CUPTI buffer shim: the two activity-buffer callbacks CUPTI calls, written in C so
 * that they never need the Python GIL.
 *
 * Why: CUPTI calls the buffer-completed callback from its own thread while holding an internal
 * lock. A Python callback would have to take the GIL there, while a Python thread holding the GIL
 * may be inside a CUDA call waiting for that same lock: a deadlock. These callbacks only move
 * buffers between three lists under a pthread mutex; Python takes completed buffers with
 * ss_take() (through ctypes, which releases the GIL during the call), decodes them and hands
 * them back with ss_release().
 *
 * Memory is bounded: when the buffers handed out reach `max_bytes`, ss_buffer_requested returns
 * no buffer and CUPTI drops records (it counts them; cuptiActivityGetNumDroppedRecords).
 *
 * Buffers are handed to CUPTI zero-filled, so that CUPTI need not zero them itself
 * (CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER = 1, set by the capture): left to CUPTI, each
 * buffer is zeroed in the program's thread that asks for it ("stalls in the critical path",
 * cupti_activity.h), which CUPTI's own overhead records put at 2-6 ms per 8 MB buffer on the
 * H100 (activity_buffer_request, docs/data/capture-2026-11-25e). Here a new buffer is fresh
 * anonymous memory (zero pages from the kernel; ss_prepare makes a few ahead, their pages
 * already mapped), and a buffer given back (ss_release, on the thread that drains buffers) has
 * its written bytes cleared there and the rest of its pages dropped (madvise MADV_DONTNEED:
 * zero again on the next touch) before it is handed out again.
 *
 * Also here: ss_walk, the record walk (kind + offset of every record of a buffer) given the
 * record size of each activity kind, so that decoding can be vectorised in numpy; and what a
 * capture needs to keep the raw records instead of decoding them in the profiled process (see
 * capture/cupti/spill.py): ss_scan (records per kind, and the string pointers not seen before:
 * kernel and NVTX names live in CUPTI's memory, so they must be read in this process) and
 * ss_write_frame (append a buffer to a file). All run without the GIL. And the detach of CUPTI
 * once a capture has ended: ss_detach_callback calls cuptiFinalize at the exit of the program's
 * next CUDA call, as NVIDIA documents it (CUPTI left attached keeps its hooks in every CUDA
 * call of the rest of the program). And the runtime/driver call records taken from CUPTI's
 * Callback API for the calls that matter only (ss_callback, ss_api_begin/ss_api_end): written
 * into the same buffers, in the layout of CUPTI's own API records; a driver call made inside a
 * recorded runtime call on the same thread (the runtime's own cuLaunchKernel) is not written.
 *
 * Built as a plain shared library (no Python.h), loaded with ctypes.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* MAP_ANONYMOUS, MAP_POPULATE, MADV_DONTNEED under a strict -std */
#endif
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define SS_MAX_KIND 64
#ifndef MAP_POPULATE
#define MAP_POPULATE 0 /* not Linux: pages mapped at their first touch */
#endif

typedef struct ss_node {
    uint8_t *data;
    size_t valid;
    struct ss_node *next;
} ss_node;

static pthread_mutex_t ss_lock = PTHREAD_MUTEX_INITIALIZER;
static size_t ss_buf_size = 8u << 20;
static size_t ss_max_bytes = (size_t)1 << 30;
static size_t ss_allocated = 0;    /* bytes of buffers that exist (handed out, completed, free) */
static ss_node *ss_free_head = NULL; /* nodes whose data is a free, zero-filled buffer */
static ss_node *ss_done_head = NULL; /* completed buffers, FIFO */
static ss_node *ss_done_tail = NULL;
static ss_node *ss_spare = NULL;   /* empty nodes kept for reuse */
static uint64_t ss_n_requested = 0, ss_n_completed = 0, ss_n_refused = 0, ss_n_empty = 0;
static uint64_t ss_done_bytes = 0, ss_peak_done_bytes = 0;

static ss_node *node_get(void) {
    ss_node *n = ss_spare;
    if (n) { ss_spare = n->next; return n; }
    return (ss_node *)malloc(sizeof(ss_node));
}

static void node_put(ss_node *n) { n->data = NULL; n->next = ss_spare; ss_spare = n; }

/* A new buffer of `size` bytes, zero-filled (anonymous memory); `populate`: its pages mapped now
 * rather than at their first touch. NULL when the system has no memory for it. */
static uint8_t *buf_new(size_t size, int populate) {
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | (populate ? MAP_POPULATE : 0), -1, 0);
    return p == MAP_FAILED ? NULL : (uint8_t *)p;
}

static void buf_free(uint8_t *p, size_t size) { munmap(p, size); }

/* Zero a buffer CUPTI (or the call records) wrote `valid` bytes of: those bytes cleared, the
 * pages after them dropped (zero at their next touch; nothing should have written there). */
static void buf_clear(uint8_t *p, size_t size, size_t valid) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (valid > size) valid = size;
    size_t keep = (valid + page - 1) / page * page;
    if (keep > size) keep = size;
    memset(p, 0, keep);
    if (keep < size && madvise(p + keep, size - keep, MADV_DONTNEED) != 0)
        memset(p + keep, 0, size - keep);
}

/* Set the buffer size and the memory cap. Only while no buffer exists (before enabling). */
int ss_configure(size_t buf_size, size_t max_bytes) {
    int rc = 0;
    pthread_mutex_lock(&ss_lock);
    if (ss_allocated != 0 && buf_size != ss_buf_size) {
        rc = -1;
    } else {
        if (buf_size >= 4096) ss_buf_size = (buf_size + 4095) & ~(size_t)4095;
        if (max_bytes >= ss_buf_size) ss_max_bytes = max_bytes;
    }
    pthread_mutex_unlock(&ss_lock);
    return rc;
}

/* Make free buffers ahead, their pages mapped, until `n` are free (within the memory cap), so
 * that the first buffers CUPTI asks for during a capture cost it nothing. Call before enabling
 * (it maps n buffers' worth of memory, ~1 ms per 8 MB). Returns how many are free. */
int ss_prepare(int n) {
    int have = 0;
    pthread_mutex_lock(&ss_lock);
    for (ss_node *f = ss_free_head; f; f = f->next) have++;
    size_t size = ss_buf_size;
    while (have < n && ss_allocated + size <= ss_max_bytes) {
        ss_allocated += size; /* reserved while it is made outside the lock */
        pthread_mutex_unlock(&ss_lock);
        uint8_t *data = buf_new(size, 1);
        pthread_mutex_lock(&ss_lock);
        ss_node *node = data ? node_get() : NULL;
        if (!node) {
            ss_allocated -= size;
            if (data) buf_free(data, size);
            break;
        }
        node->data = data;
        node->valid = 0;
        node->next = ss_free_head;
        ss_free_head = node;
        have++;
    }
    pthread_mutex_unlock(&ss_lock);
    return have;
}

void ss_buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    uint8_t *data = NULL;
    int fresh = 0;
    pthread_mutex_lock(&ss_lock);
    ss_n_requested++;
    size_t bytes = ss_buf_size;
    if (ss_free_head) {
        ss_node *n = ss_free_head;
        ss_free_head = n->next;
        data = n->data;
        node_put(n);
    } else if (ss_allocated + bytes <= ss_max_bytes) {
        ss_allocated += bytes; /* reserved while it is made outside the lock */
        fresh = 1;
    }
    pthread_mutex_unlock(&ss_lock);
    if (fresh) {
        data = buf_new(bytes, 0);
        if (!data) {
            pthread_mutex_lock(&ss_lock);
            ss_allocated -= bytes;
            pthread_mutex_unlock(&ss_lock);
        }
    }
    if (!data) {
        pthread_mutex_lock(&ss_lock);
        ss_n_refused++;
        pthread_mutex_unlock(&ss_lock);
    }
    *buffer = data;
    *size = data ? bytes : 0;
    *max_records = 0;
}

void ss_buffer_completed(void *context, uint32_t stream_id, uint8_t *buffer, size_t size,
                         size_t valid) {
    (void)context; (void)stream_id; (void)size;
    if (!buffer) return;
    if (valid == 0) buf_clear(buffer, ss_buf_size, 0); /* back to the free list: zero it */
    pthread_mutex_lock(&ss_lock);
    ss_node *n = node_get();
    if (!n) { /* out of memory for 24 bytes: give the buffer up rather than crash */
        ss_n_empty++;
        pthread_mutex_unlock(&ss_lock);
        return;
    }
    n->data = buffer;
    n->next = NULL;
    if (valid == 0) {
        ss_n_empty++;
        n->valid = 0;
        n->next = ss_free_head;
        ss_free_head = n;
    } else {
        ss_n_completed++;
        n->valid = valid;
        if (ss_done_tail) ss_done_tail->next = n; else ss_done_head = n;
        ss_done_tail = n;
        ss_done_bytes += valid;
        if (ss_done_bytes > ss_peak_done_bytes) ss_peak_done_bytes = ss_done_bytes;
    }
    pthread_mutex_unlock(&ss_lock);
}

/* Move up to `cap` completed buffers (oldest first) to the caller. Returns how many. */
int ss_take(uint8_t **buffers, size_t *valid, int cap) {
    int k = 0;
    pthread_mutex_lock(&ss_lock);
    while (k < cap && ss_done_head) {
        ss_node *n = ss_done_head;
        ss_done_head = n->next;
        if (!ss_done_head) ss_done_tail = NULL;
        buffers[k] = n->data;
        valid[k] = n->valid;
        ss_done_bytes -= n->valid;
        node_put(n);
        k++;
    }
    pthread_mutex_unlock(&ss_lock);
    return k;
}

/* Give a buffer taken with ss_take back for reuse: `valid` is the byte count ss_take gave with
 * it (cleared here, on the caller's thread, so that it goes back zero-filled). */
void ss_release(uint8_t *buffer, size_t valid) {
    if (!buffer) return;
    buf_clear(buffer, ss_buf_size, valid);
    pthread_mutex_lock(&ss_lock);
    ss_node *n = node_get();
    if (n) {
        n->data = buffer;
        n->valid = 0;
        n->next = ss_free_head;
        ss_free_head = n;
    } else {
        buf_free(buffer, ss_buf_size);
        ss_allocated -= ss_buf_size;
    }
    pthread_mutex_unlock(&ss_lock);
}

/* Free the buffers on the free list (call after activities are disabled and flushed). */
void ss_trim(void) {
    pthread_mutex_lock(&ss_lock);
    while (ss_free_head) {
        ss_node *n = ss_free_head;
        ss_free_head = n->next;
        buf_free(n->data, ss_buf_size);
        ss_allocated -= ss_buf_size;
        node_put(n);
    }
    pthread_mutex_unlock(&ss_lock);
}

/* requested, completed, refused, empty, allocated bytes, pending bytes, peak pending, buf size */
void ss_stats(uint64_t *out) {
    pthread_mutex_lock(&ss_lock);
    out[0] = ss_n_requested; out[1] = ss_n_completed; out[2] = ss_n_refused; out[3] = ss_n_empty;
    out[4] = ss_allocated; out[5] = ss_done_bytes; out[6] = ss_peak_done_bytes; out[7] = ss_buf_size;
    pthread_mutex_unlock(&ss_lock);
}

/*
 * Walk the records of one buffer: `sizes[kind]` is the record size of each activity kind (0 for
 * a kind whose layout is unknown). Writes each record's kind and offset; returns the number of
 * records and sets *stop to the offset where the walk ended (== valid when it reached the end;
 * less when it met an unknown kind, a record overrunning the buffer, or `cap`).
 */
size_t ss_walk(const uint8_t *buf, size_t valid, const uint32_t *sizes, uint32_t *kinds,
               uint64_t *offsets, size_t cap, size_t *stop) {
    size_t off = 0, n = 0;
    while (off + 4 <= valid && n < cap) {
        uint32_t kind;
        memcpy(&kind, buf + off, 4);
        if (kind >= SS_MAX_KIND || sizes[kind] == 0 || off + sizes[kind] > valid) break;
        kinds[n] = kind;
        offsets[n] = off;
        n++;
        off += sizes[kind];
    }
    *stop = off;
    return n;
}

/* Bumped whenever a function's signature changes: a stale prebuilt library is then rebuilt.
 * 6: ss_release takes the valid bytes, ss_prepare, ss_api_begin's keep_nested, ss_api_stats 4. */
int ss_abi_version(void) { return 8; }

typedef int (*ss_next_fn)(uint8_t *buffer, size_t valid, void **record);

/*
 * Check the size table against CUPTI's own iterator (cuptiActivityGetNextRecord) on one buffer.
 * A kind the table does not know (size 0) is learnt from CUPTI's stride (the last record of the
 * buffer: from where the valid bytes end), so that its records can be stepped over; *learnt
 * counts the kinds learnt. Returns -1 when every record of a known kind starts where the table
 * says, else the index of the first record where they disagree (its kind in *bad_kind and
 * CUPTI's stride in *bad_stride).
 */
long ss_check_walk(ss_next_fn next, uint8_t *buf, size_t valid, uint32_t *sizes,
                   uint32_t *bad_kind, uint64_t *bad_stride, uint32_t *learnt) {
    void *rec = NULL, *prev = NULL;
    uint32_t prev_kind = 0;
    long i = 0;
    *learnt = 0;
    while (next(buf, valid, &rec) == 0 && rec) {
        if (prev) {
            uint64_t stride = (uint64_t)((uint8_t *)rec - (uint8_t *)prev);
            if (prev_kind < SS_MAX_KIND && sizes[prev_kind] == 0 && stride > 0 && stride < (1u << 20)) {
                sizes[prev_kind] = (uint32_t)stride;
                (*learnt)++;
            }
            if (prev_kind >= SS_MAX_KIND || sizes[prev_kind] != stride) {
                *bad_kind = prev_kind;
                *bad_stride = stride;
                return i - 1;
            }
        }
        memcpy(&prev_kind, rec, 4);
        prev = rec;
        i++;
    }
    if (prev && prev_kind < SS_MAX_KIND && sizes[prev_kind] == 0) {
        uint64_t rest = (uint64_t)(buf + valid - (uint8_t *)prev);
        if (rest > 0 && rest < (1u << 20)) {
            sizes[prev_kind] = (uint32_t)rest;
            (*learnt)++;
        }
    }
    return -1;
}

/* ---- raw records: string pointers seen, record counts, framed writes ---------------------- */

/* Pointers already reported by ss_scan: an open-addressing set (0 = empty slot). One capture at a
 * time uses it (the caller serialises; the mutex guards against misuse only). */
static pthread_mutex_t ss_seen_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t *ss_seen = NULL;
static size_t ss_seen_cap = 0, ss_seen_n = 0;

static size_t seen_slot(const uint64_t *tab, size_t cap, uint64_t p) {
    size_t i = (size_t)((p * 0x9E3779B97F4A7C15ull) >> 20) & (cap - 1);
    while (tab[i] && tab[i] != p) i = (i + 1) & (cap - 1);
    return i;
}

static int seen_grow(void) {
    size_t cap = ss_seen_cap ? ss_seen_cap * 2 : 1024;
    uint64_t *tab = (uint64_t *)calloc(cap, sizeof(uint64_t));
    if (!tab) return -1;
    for (size_t i = 0; i < ss_seen_cap; i++)
        if (ss_seen[i]) tab[seen_slot(tab, cap, ss_seen[i])] = ss_seen[i];
    free(ss_seen);
    ss_seen = tab;
    ss_seen_cap = cap;
    return 0;
}

/* 1: p is new (and now seen); 0: seen before; -1: out of memory (reported as new, not kept). */
static int seen_add(uint64_t p) {
    if ((ss_seen_n + 1) * 2 > ss_seen_cap && seen_grow() != 0) return -1;
    size_t i = seen_slot(ss_seen, ss_seen_cap, p);
    if (ss_seen[i]) return 0;
    ss_seen[i] = p;
    ss_seen_n++;
    return 1;
}

/* Forget every pointer seen (a new capture). */
void ss_seen_reset(void) {
    pthread_mutex_lock(&ss_seen_lock);
    free(ss_seen);
    ss_seen = NULL;
    ss_seen_cap = ss_seen_n = 0;
    pthread_mutex_unlock(&ss_seen_lock);
}

/*
 * Scan the records of one buffer from byte `start`: counts[kind] += 1 for every record, and every
 * non-null pointer in a string field (str_a[kind], str_b[kind]: byte offsets of char* fields of
 * that kind, 0 = none) not seen before goes to new_ptrs. Stops at the end, at a record ss_walk
 * would stop at, or before a record whose new pointers would not fit in `cap` (call again from
 * *stop). Returns the records scanned; *n_new the pointers written.
 */
size_t ss_scan(const uint8_t *buf, size_t valid, size_t start, const uint32_t *sizes,
               const uint32_t *str_a, const uint32_t *str_b, uint64_t *counts,
               uint64_t *new_ptrs, size_t cap, size_t *n_new, size_t *stop) {
    size_t off = start, n = 0, k = 0;
    pthread_mutex_lock(&ss_seen_lock);
    while (off + 4 <= valid) {
        uint32_t kind;
        memcpy(&kind, buf + off, 4);
        if (kind >= SS_MAX_KIND || sizes[kind] == 0 || off + sizes[kind] > valid) break;
        if (str_a[kind] || str_b[kind]) {
            if (k + 2 > cap) break;
            const uint32_t fields[2] = {str_a[kind], str_b[kind]};
            for (int f = 0; f < 2; f++) {
                uint64_t p;
                if (!fields[f] || fields[f] + 8 > sizes[kind]) continue;
                memcpy(&p, buf + off + fields[f], 8);
                if (p && seen_add(p) != 0) new_ptrs[k++] = p;
            }
        }
        counts[kind]++;
        n++;
        off += sizes[kind];
    }
    pthread_mutex_unlock(&ss_seen_lock);
    *n_new = k;
    *stop = off;
    return n;
}

/*
 * Append one buffer to the file `fd` as a frame: 8 bytes "SSCUPTI1", the length as a
 * little-endian uint64, then the bytes. Returns 0, or -errno (the file may then hold a partial
 * frame at its end, which readers skip).
 */
long ss_write_frame(int fd, const uint8_t *buf, uint64_t valid) {
    uint8_t head[16] = {'S', 'S', 'C', 'U', 'P', 'T', 'I', '1'};
    for (int i = 0; i < 8; i++) head[8 + i] = (uint8_t)(valid >> (8 * i));
    const uint8_t *parts[2] = {head, buf};
    const uint64_t lens[2] = {16, valid};
    for (int j = 0; j < 2; j++) {
        uint64_t done = 0;
        while (done < lens[j]) {
            ssize_t w = write(fd, parts[j] + done, (size_t)(lens[j] - done));
            if (w < 0) {
                if (errno == EINTR) continue;
                return -(long)errno;
            }
            if (w == 0) return -(long)EIO;
            done += (uint64_t)w;
        }
    }
    return 0;
}

/* ---- detaching CUPTI after a capture ------------------------------------------------------- */

/* 0 idle, 1 armed (detach at the next CUDA API exit), 2 detaching, 3 detached, 4 failed */
static int ss_detach_state = 0;
static int ss_detach_rc = 0;
static int (*ss_finalize)(void) = NULL;
static void *ss_detach_sub = NULL;

/* Arm the detach: `finalize` is cuptiFinalize, `subscriber` the handle whose callback is
 * ss_detach_callback (subscribed to the runtime and driver domains by the caller, after this). */
void ss_detach_arm(int (*finalize)(void), void *subscriber) {
    ss_finalize = finalize;
    ss_detach_sub = subscriber;
    __atomic_store_n(&ss_detach_state, 1, __ATOMIC_SEQ_CST);
}

/* The CUPTI callback (CUpti_CallbackFunc): on the first API exit after arming, on whichever
 * thread, cuptiFinalize. The site is the first field of CUpti_CallbackData (1 = CUPTI_API_EXIT). */
void ss_detach_callback(void *userdata, int domain, uint32_t cbid, const void *cbdata) {
    (void)userdata; (void)domain; (void)cbid;
    if (__atomic_load_n(&ss_detach_state, __ATOMIC_ACQUIRE) != 1 || !cbdata) return;
    int site;
    memcpy(&site, cbdata, sizeof site);
    if (site != 1) return;
    int armed = 1;
    if (!__atomic_compare_exchange_n(&ss_detach_state, &armed, 2, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
        return;
    ss_detach_rc = ss_finalize ? ss_finalize() : -1;
    __atomic_store_n(&ss_detach_state, ss_detach_rc == 0 ? 3 : 4, __ATOMIC_RELEASE);
}

/* The state (see above); *rc the result of cuptiFinalize once it ran. */
int ss_detach_state_get(int *rc) {
    int st = __atomic_load_n(&ss_detach_state, __ATOMIC_ACQUIRE);
    if (rc) *rc = ss_detach_rc;
    return st;
}

/* Before a new capture: an armed detach that has not started is called off and its subscriber
 * handed back (to unsubscribe); a finished one is forgotten. Returns the state it found (2: one
 * is running now: wait for it and call again). */
int ss_detach_reset(void **subscriber) {
    int armed = 1;
    *subscriber = NULL;
    if (__atomic_compare_exchange_n(&ss_detach_state, &armed, 0, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE)) {
        *subscriber = ss_detach_sub;
        ss_detach_sub = NULL;
        return 1;
    }
    int st = __atomic_load_n(&ss_detach_state, __ATOMIC_ACQUIRE);
    if (st == 3 || st == 4) {
        __atomic_store_n(&ss_detach_state, 0, __ATOMIC_RELEASE);
        ss_detach_sub = NULL;
    }
    return st;
}

/* ---- runtime/driver call records from CUPTI's Callback API --------------------------------- */

/*
 * Why: CUPTI's RUNTIME/DRIVER activity kinds hook every call of their domain, whichever calls
 * are switched off for records (cuptiActivityEnableRuntimeApi); with its SYNCHRONIZATION kind,
 * which does the same, that hook was most of what a capture cost on the H100 (docs/benchmarks.md,
 * 2026-11-25 fifth session). The
 * Callback API is switched on per call (cuptiEnableCallback): only the calls whose records are
 * kept pay. ss_callback takes the start time at the call's entry (kept in the call's
 * correlationData slot) and writes one record at its exit, laid out as CUpti_ActivityAPI
 * (kind, cbid, start, end, processId, threadId, correlationId, returnValue: 40 bytes) into
 * buffers of the pool above, which are completed like CUPTI's own: ss_take sees both.
 *
 * Nested driver calls. A runtime call runs the driver's own call inside it (cudaLaunchKernel ->
 * cuLaunchKernel, cudaMemcpyAsync -> cuMemcpy...), and CUPTI calls back for that driver call too
 * when its callback is on (it is: cuBLASLt, Triton, JAX and CuPy launch through the driver
 * directly). Its record was written and then dropped at decode (decode.drop_nested): on the
 * H100, 1,668 records written for 902 kept. Now a driver call made while this thread is inside
 * a runtime call being recorded is not timed or written. The kernel, copy and memset records
 * carry the runtime call's correlation id (CUPTI's activity kinds write no record for the
 * nested driver call, and the GPU records link to the runtime record; tests/data/cupti), which
 * is the id the runtime call's callback gets (CUpti_CallbackData.correlationId equals that of
 * the call's API activity record). A driver call made outside any recorded runtime call (JAX,
 * CuPy, cuBLASLt, Triton) is recorded as before. Per thread, the runtime calls entered while
 * recording are counted (depth) under the capture's generation (bumped by each ss_api_begin),
 * so a call whose exit was never seen (recording stopped inside it) cannot leave a thread
 * marked as inside a call in a later capture. ss_api_begin(..., keep_nested = 1) writes them
 * all, as before.
 *
 * CUpti_CallbackData (cupti_callbacks.h, unchanged since CUPTI 4.1): callbackSite at byte 0,
 * functionReturnValue (a pointer) at 24, correlationData (uint64_t *) at 56, correlationId at 64.
 */
#define SS_CB_RETURN 24
#define SS_CB_CORR_DATA 56
#define SS_CB_CORR_ID 64
#define SS_API_RECORD 40
#define SS_DOMAIN_DRIVER 1
#define SS_DOMAIN_RUNTIME 2

static pthread_mutex_t ss_api_lock = PTHREAD_MUTEX_INITIALIZER;
static int ss_api_on = 0;
static int (*ss_api_clock)(uint64_t *) = NULL; /* cuptiGetTimestamp: the clock of CUPTI's records */
static uint32_t ss_api_pid = 0;
static uint8_t *ss_api_buf = NULL;
static size_t ss_api_cap = 0, ss_api_used = 0;
static uint64_t ss_api_n = 0, ss_api_lost = 0;
static uint32_t ss_api_gen = 0;         /* bumped by ss_api_begin */
static int ss_api_keep_nested = 0;      /* 1: driver calls inside runtime calls are written too */
static uint64_t ss_api_nested = 0;      /* driver calls not written: inside a runtime call */
static uint64_t ss_api_nested_other = 0; /* of those, with another correlation id than it */
/* CUDA graph launches seen while recording, over the process's life (never reset): detaching
 * CUPTI (cuptiFinalize) after a graph was launched under it makes later launches of that graph
 * fail (CUDA_ERROR_LAUNCH_FAILED, seen with XLA's command buffers; PyTorch's profiler keeps
 * CUPTI for CUDA graphs too), so the capture does not detach then. */
static uint64_t ss_api_graph_calls = 0;
static uint8_t ss_graph_cbids[2][128]; /* per domain (driver, runtime): a bit per cbid < 1024 */

/* Mark a callback id of the driver (1) or runtime (2) domain as a graph launch. */
void ss_api_mark_graph(int domain, uint32_t cbid) {
    if ((domain == SS_DOMAIN_DRIVER || domain == SS_DOMAIN_RUNTIME) && cbid < 1024)
        ss_graph_cbids[domain - 1][cbid >> 3] |= (uint8_t)(1u << (cbid & 7));
}

uint64_t ss_api_graph_launches(void) {
    return __atomic_load_n(&ss_api_graph_calls, __ATOMIC_RELAXED);
}

/* For tests only (one process runs many captures with stand-ins): forget the graph launches. */
void ss_api_graph_forget(void) {
    __atomic_store_n(&ss_api_graph_calls, 0, __ATOMIC_RELAXED);
}

/* This thread's runtime calls entered while recording (see above). */
typedef struct { uint32_t gen, depth, corr; } ss_thread_calls;
static __thread ss_thread_calls ss_tl_calls;

/* This thread's system thread id (gettid), the id the host side of a capture (threads, stacks,
 * input waits) and CUPTI's records with CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM use. Cached per
 * thread with the process id it was read in: a forked child's copy of the thread reads its own. */
static __thread uint32_t ss_tl_tid = 0, ss_tl_tid_pid = 0;

static uint32_t thread_id(void) {
    if (ss_tl_tid_pid != ss_api_pid || ss_tl_tid == 0) {
        ss_tl_tid = (uint32_t)syscall(SYS_gettid);
        ss_tl_tid_pid = ss_api_pid;
    }
    return ss_tl_tid;
}

/* Hand the current API buffer over as a completed buffer (caller holds ss_api_lock). */
static void api_complete(void) {
    if (!ss_api_buf) return;
    ss_buffer_completed(NULL, 0, ss_api_buf, ss_api_cap, ss_api_used);
    ss_api_buf = NULL;
    ss_api_used = ss_api_cap = 0;
}

static int pool_has_room(void) {
    pthread_mutex_lock(&ss_lock);
    int room = ss_free_head != NULL || ss_allocated + ss_buf_size <= ss_max_bytes;
    pthread_mutex_unlock(&ss_lock);
    return room;
}

static void api_write(const uint8_t *rec) {
    pthread_mutex_lock(&ss_api_lock);
    if (ss_api_buf && ss_api_used + SS_API_RECORD > ss_api_cap) api_complete();
    if (!ss_api_buf && pool_has_room()) { /* a full pool: the record is lost, not a refusal */
        size_t size = 0, max_records = 0;
        ss_buffer_requested(&ss_api_buf, &size, &max_records);
        ss_api_cap = ss_api_buf ? size : 0;
        ss_api_used = 0;
    }
    if (ss_api_buf && ss_api_cap >= SS_API_RECORD) {
        memcpy(ss_api_buf + ss_api_used, rec, SS_API_RECORD);
        ss_api_used += SS_API_RECORD;
        ss_api_n++;
    } else {
        ss_api_lost++;
    }
    pthread_mutex_unlock(&ss_api_lock);
}

/* Start recording the calls whose callbacks are enabled: `clock` is cuptiGetTimestamp, `pid`
 * the process id written into the records, `keep_nested` 1 to write the driver calls made
 * inside recorded runtime calls too (see above). */
void ss_api_begin(int (*clock)(uint64_t *), uint32_t pid, int keep_nested) {
    pthread_mutex_lock(&ss_api_lock);
    ss_api_clock = clock;
    ss_api_pid = pid;
    ss_api_keep_nested = keep_nested;
    __atomic_add_fetch(&ss_api_gen, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&ss_api_lock);
    __atomic_store_n(&ss_api_on, 1, __ATOMIC_RELEASE);
}

/* Stop recording (after the callbacks are disabled) and complete the current buffer. A call
 * already inside the callback may still write one record: it goes into a new buffer, completed
 * at the next ss_api_end (the caller calls it again after its final flush). */
void ss_api_end(void) {
    __atomic_store_n(&ss_api_on, 0, __ATOMIC_RELEASE);
    pthread_mutex_lock(&ss_api_lock);
    api_complete();
    pthread_mutex_unlock(&ss_api_lock);
}

/* Complete the buffer being written (a forced flush), recording on. */
void ss_api_complete(void) {
    pthread_mutex_lock(&ss_api_lock);
    api_complete();
    pthread_mutex_unlock(&ss_api_lock);
}

/* records written, records lost (no buffer: the memory cap), nested driver calls not written,
 * and of those the ones whose correlation id was not their runtime call's */
void ss_api_stats(uint64_t *out) {
    pthread_mutex_lock(&ss_api_lock);
    out[0] = ss_api_n;
    out[1] = ss_api_lost;
    pthread_mutex_unlock(&ss_api_lock);
    out[2] = __atomic_load_n(&ss_api_nested, __ATOMIC_RELAXED);
    out[3] = __atomic_load_n(&ss_api_nested_other, __ATOMIC_RELAXED);
}

/* One site of a recorded call: the start time at the entry, the record at the exit. */
static void api_site(int domain, uint32_t cbid, const uint8_t *cb, int site) {
    uint64_t *slot;
    memcpy(&slot, cb + SS_CB_CORR_DATA, sizeof slot);
    if (site == 0) {
        if (slot) {
            uint64_t t = 0;
            ss_api_clock(&t);
            *slot = t;
        }
        return;
    }
    uint64_t end = 0, start = slot ? *slot : 0;
    ss_api_clock(&end);
    uint32_t corr, ret = 0;
    const void *retp;
    memcpy(&corr, cb + SS_CB_CORR_ID, sizeof corr);
    memcpy(&retp, cb + SS_CB_RETURN, sizeof retp);
    if (retp) memcpy(&ret, retp, sizeof ret);
    uint8_t rec[SS_API_RECORD];
    uint32_t kind = domain == SS_DOMAIN_DRIVER ? 4u : 5u; /* CUPTI_ACTIVITY_KIND_DRIVER, _RUNTIME */
    uint32_t tid = thread_id(); /* the system id, as the host tables have it */
    memcpy(rec, &kind, 4);
    memcpy(rec + 4, &cbid, 4);
    memcpy(rec + 8, &start, 8);
    memcpy(rec + 16, &end, 8);
    memcpy(rec + 24, &ss_api_pid, 4);
    memcpy(rec + 28, &tid, 4);
    memcpy(rec + 32, &corr, 4);
    memcpy(rec + 36, &ret, 4);
    api_write(rec);
}

/* A call of the runtime or driver domain while recording: its record, unless it is a driver
 * call inside a runtime call of this thread (see above). */
static void api_call(int domain, uint32_t cbid, const uint8_t *cb) {
    int site;
    memcpy(&site, cb, sizeof site);
    if (site != 0 && site != 1) return;
    if (site == 0 && cbid < 1024 && (ss_graph_cbids[domain - 1][cbid >> 3] >> (cbid & 7)) & 1u)
        __atomic_add_fetch(&ss_api_graph_calls, 1, __ATOMIC_RELAXED);
    ss_thread_calls *tc = &ss_tl_calls;
    uint32_t gen = __atomic_load_n(&ss_api_gen, __ATOMIC_ACQUIRE);
    if (tc->gen != gen) { /* first call of this thread in this capture */
        tc->gen = gen;
        tc->depth = 0;
    }
    if (domain == SS_DOMAIN_DRIVER && tc->depth && !ss_api_keep_nested) {
        if (site == 0) {
            uint32_t corr;
            memcpy(&corr, cb + SS_CB_CORR_ID, sizeof corr);
            __atomic_add_fetch(&ss_api_nested, 1, __ATOMIC_RELAXED);
            if (corr != tc->corr) __atomic_add_fetch(&ss_api_nested_other, 1, __ATOMIC_RELAXED);
        }
        return;
    }
    if (domain == SS_DOMAIN_RUNTIME) {
        if (site == 0) {
            tc->depth++;
            memcpy(&tc->corr, cb + SS_CB_CORR_ID, sizeof tc->corr);
        } else if (tc->depth) {
            tc->depth--;
        }
    }
    api_site(domain, cbid, cb, site);
}

/* The one CUPTI callback of this library (CUPTI allows one subscriber per process): call
 * records while ss_api_begin is in force, and the detach once it is armed. */
void ss_callback(void *userdata, int domain, uint32_t cbid, const void *cbdata) {
    if (!cbdata) return;
    if ((domain == SS_DOMAIN_DRIVER || domain == SS_DOMAIN_RUNTIME)
        && __atomic_load_n(&ss_api_on, __ATOMIC_ACQUIRE) && ss_api_clock)
        api_call(domain, cbid, (const uint8_t *)cbdata);
    ss_detach_callback(userdata, domain, cbid, cbdata);
}
