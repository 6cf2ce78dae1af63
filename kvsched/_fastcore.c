/* The simulation loop of kvsched's first engine in C, for the runs it covers.
 *
 * Why: the Python loop costs 50-100 us per event; a day of traffic has millions. This file
 * runs the same rules as kvsched.simulator.run_loop with kvsched.engine.Engine and
 * kvsched.scheduler.Scheduler under one configuration family: decode-first steps, FCFS,
 * every request's prompt blocks taken at admission (chunked or not), constant or linear
 * step times, no prefix cache, no admission gate. Anything those rules would meet that this
 * file does not carry (a preemption, a running batch larger than the budget, max_steps)
 * makes it give up: it returns None and the caller runs the Python engine from the start. kvsched/fastcore.py decides
 * which runs come here, and tests/test_fastcore.py compares both engines' records.
 *
 * The Python code is the reference: every float is computed with the same operations in
 * the same order, every record, step row, stretch and event is handed back in the order the
 * Python loop makes them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define MAX_STRETCH (1 << 14)
/* kvsched.turns.ARRIVAL_SLACK: an arrival this close after a time is due at it */
#define ARRIVAL_SLACK 1e-9
#define MAX_EXACT 4096

enum { WAITING = 1, PREFILLING = 2, RUNNING = 3, FINISHED = 4 };

typedef struct {
    int64_t k;            /* arrival index */
    int64_t prompt, output, blocks, prefill_left, admit_seq, base, join_step;
    int64_t run_tick;
    double first_sched, last_time, run_first_gap, first_gap, max_gap;
    int has_max_gap, state;
    long long id_number;  /* its request_id is r<id_number> */
    PyObject *id;
} Seq;

/* -- growable arrays ---------------------------------------------------------------- */
/* Room for `need` items in `*v` (`*cap` of them, items of `size` bytes), doubling. */
static int grow_to(void **v, Py_ssize_t need, Py_ssize_t *cap, size_t size) {
    if (need <= *cap) return 0;
    Py_ssize_t more = *cap ? *cap * 2 : 64;
    while (more < need) more *= 2;
    void *bigger = PyMem_Realloc(*v, more * size);
    if (!bigger) { PyErr_NoMemory(); return -1; }
    *v = bigger;
    *cap = more;
    return 0;
}

/* Room for one more item in `*v` (`n` used). */
static int grow(void **v, Py_ssize_t n, Py_ssize_t *cap, size_t size) {
    return n < *cap ? 0 : grow_to(v, n + 1, cap, size);
}

typedef struct { int64_t *v; Py_ssize_t n, cap; } Vec;
typedef struct { double *v; Py_ssize_t n, cap; } DVec;

static int vec_push(Vec *a, int64_t x) {
    if (grow((void **)&a->v, a->n, &a->cap, sizeof *a->v) < 0) return -1;
    a->v[a->n++] = x;
    return 0;
}

static int dvec_push(DVec *a, double x) {
    if (grow((void **)&a->v, a->n, &a->cap, sizeof *a->v) < 0) return -1;
    a->v[a->n++] = x;
    return 0;
}

/* -- CSV text, as the csv module and Python's "%.10g" write it ------------------------- */
typedef struct { char *v; Py_ssize_t n, cap; } Text;

static int text_reserve(Text *t, Py_ssize_t more) {
    if (t->n + more <= t->cap) return 0;
    Py_ssize_t cap = t->cap ? t->cap : 1 << 16;
    while (cap < t->n + more) cap *= 2;
    char *v = PyMem_Realloc(t->v, cap);
    if (!v) { PyErr_NoMemory(); return -1; }
    t->v = v; t->cap = cap;
    return 0;
}

static int text_put(Text *t, const char *s, Py_ssize_t len) {
    if (text_reserve(t, len) < 0) return -1;
    memcpy(t->v + t->n, s, len);
    t->n += len;
    return 0;
}

/* The digits of x at o (24 bytes reserved), and the end of them. */
static const char PAIRS[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

static char *emit_int(char *o, long long x) {
    unsigned long long v = x < 0 ? 0ULL - (unsigned long long)x : (unsigned long long)x;
    if (x < 0) *o++ = '-';
    if (v < 10) { *o++ = (char)('0' + v); return o; }
    int len = 2;  /* its digits' count (at most 20), then written from the last one back */
    for (unsigned long long p = 100; len < 20 && v >= p; p *= 10) len++;
    char *end = o + len;
    while (v >= 100) {
        unsigned r = (unsigned)(v % 100);
        v /= 100;
        *--end = PAIRS[2 * r + 1];
        *--end = PAIRS[2 * r];
    }
    if (v >= 10) { *--end = PAIRS[2 * v + 1]; *--end = PAIRS[2 * v]; }
    else *--end = (char)('0' + v);
    return o + len;
}

static int text_int(Text *t, long long x) {
    if (text_reserve(t, 24) < 0) return -1;
    t->n = emit_int(t->v + t->n, x) - t->v;
    return 0;
}

/* Python's "%.10g" % x. Most values take the fast path of kvsched/floatfmt.py (its
 * docstring says why it is exact): |x| in [1e-4, 1e10), times 10**(9 - X) for its decimal
 * exponent X, is within 1e-6 of the exact product, so rounding gives the ten digits unless
 * the fraction is within 1e-5 of one half; those, zeros, non-finite values and the
 * exponent notation go through Python's own formatter. */
static const double DECADE[14] = {1e-4, 1e-3, 1e-2, 1e-1, 1e0, 1e1, 1e2, 1e3, 1e4, 1e5,
                                  1e6, 1e7, 1e8, 1e9};
static const double POW10[14] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
                                 1e11, 1e12, 1e13};

/* "%.10g" of x at o (32 bytes reserved), and the end of it; NULL if out of memory. */
static char *emit_float(char *o, double x) {
    double a = fabs(x);
    if (a >= 1e-4 && a < 1e10) {
        /* the decimal exponent (a guess the digits' count checks below): the largest e in
         * [-4, 9] with DECADE[e + 4] <= a, from the binary exponent's floor(b * log10 2),
         * which is it or one less */
        uint64_t bits;
        memcpy(&bits, &a, sizeof bits);
        int e = ((int)((bits >> 52) & 0x7ff) - 1023) * 1233 >> 12;
        if (e < -4) e = -4;
        if (e > 9) e = 9;
        while (e > -4 && a < DECADE[e + 4]) e--;
        while (e < 9 && a >= DECADE[e + 5]) e++;
        double scaled = a * POW10[9 - e];
        double m = rint(scaled);
        if (fabs(scaled - floor(scaled) - 0.5) > 1e-5 && m > 1e9 && m < 1e10) {
            char digits[10];
            long long v = (long long)m;
            unsigned low = (unsigned)(v % 100000000), high = (unsigned)(v / 100000000);
            for (int i = 8; i >= 2; i -= 2) {  /* two digits at a time, in 32 bits */
                unsigned r = low % 100;
                low /= 100;
                digits[i] = PAIRS[2 * r];
                digits[i + 1] = PAIRS[2 * r + 1];
            }
            digits[0] = PAIRS[2 * high];
            digits[1] = PAIRS[2 * high + 1];
            int last = 9;  /* the last digit kept: trailing zeros go */
            while (last > 0 && digits[last] == '0') last--;
            if (x < 0) *o++ = '-';
            if (e >= 0) {
                memcpy(o, digits, e + 1);
                o += e + 1;
                if (last > e) {
                    *o++ = '.';
                    memcpy(o, digits + e + 1, last - e);
                    o += last - e;
                }
            } else {
                *o++ = '0';
                *o++ = '.';
                for (int i = 0; i < -e - 1; i++) *o++ = '0';
                memcpy(o, digits, last + 1);
                o += last + 1;
            }
            return o;
        }
    }
    char *text = PyOS_double_to_string(x, 'g', 10, 0, NULL);
    if (!text) return NULL;
    size_t len = strlen(text);  /* at most 17: "-1.234567891e+308" */
    memcpy(o, text, len);
    PyMem_Free(text);
    return o + len;
}

static int text_float(Text *t, double x) {
    if (text_reserve(t, 32) < 0) return -1;
    char *o = emit_float(t->v + t->n, x);
    if (!o) return -1;
    t->n = o - t->v;
    return 0;
}

/* A text cell: quoted (quotes doubled) when it holds a comma, a quote or a newline, as
 * csv.QUOTE_MINIMAL; 1 for a carriage return (left to the csv module). */
static int text_cell(Text *t, const char *s, Py_ssize_t len) {
    int quote = 0;
    for (Py_ssize_t i = 0; i < len; i++) {
        char ch = s[i];
        if (ch == '\r') return 1;
        if (ch == ',' || ch == '"' || ch == '\n') quote = 1;
    }
    if (!quote) return text_put(t, s, len);
    if (text_reserve(t, 2 * len + 2) < 0) return -1;
    t->v[t->n++] = '"';
    for (Py_ssize_t i = 0; i < len; i++) {
        if (s[i] == '"') t->v[t->n++] = '"';
        t->v[t->n++] = s[i];
    }
    t->v[t->n++] = '"';
    return 0;
}

static void vec_remove_at(Vec *a, Py_ssize_t i) {
    memmove(a->v + i, a->v + i + 1, (a->n - i - 1) * sizeof(int64_t));
    a->n--;
}

/* -- a min-heap of (key, order, slot, k): k, the request's arrival index, tells an entry
 * left by a finished request (its slot reused) from its new owner's ------------------ */
typedef struct { int64_t key, order, slot, k; } Entry;
typedef struct { Entry *v; Py_ssize_t n, cap; } Heap;

static int entry_less(const Entry *a, const Entry *b) {
    return a->key < b->key || (a->key == b->key && a->order < b->order);
}

static int heap_push(Heap *h, Entry e) {
    if (grow((void **)&h->v, h->n, &h->cap, sizeof *h->v) < 0) return -1;
    Py_ssize_t i = h->n++;
    while (i > 0) {
        Py_ssize_t p = (i - 1) / 2;
        if (!entry_less(&e, &h->v[p])) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = e;
    return 0;
}

static Entry heap_pop(Heap *h) {
    Entry top = h->v[0], last = h->v[--h->n];
    Py_ssize_t i = 0;
    for (;;) {
        Py_ssize_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && entry_less(&h->v[c + 1], &h->v[c])) c++;
        if (!entry_less(&h->v[c], &last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n) h->v[i] = last;
    return top;
}

/* -- the block boundaries ahead: a ring of buckets, one per decode pass. A running request
 * crosses its next boundary at most block_size passes ahead, so block_size + 1 buckets
 * keep each pass's crossings apart, each bucket in the order they were queued (what a heap
 * keyed by (pass, push order) gives, without its sifting: pops were a sixth of the loop). */
typedef struct { Py_ssize_t slot; int64_t k; } Due;
typedef struct { Due *v; Py_ssize_t n, cap; } Bucket;
typedef struct { Bucket *b; int64_t w; Py_ssize_t total; } Ring;

static int ring_push(Ring *r, int64_t now, int64_t key, Py_ssize_t slot, int64_t k) {
    if (key <= now || key - now >= r->w) {
        PyErr_Format(PyExc_RuntimeError, "internal: a block boundary %lld passes ahead",
                     (long long)(key - now));
        return -1;
    }
    Bucket *b = &r->b[key % r->w];
    if (grow((void **)&b->v, b->n, &b->cap, sizeof *b->v) < 0) return -1;
    b->v[b->n++] = (Due){slot, k};
    r->total++;
    return 0;
}

static Bucket *ring_at(Ring *r, int64_t key) { return &r->b[key % r->w]; }

static void ring_clear(Ring *r, Bucket *b) {
    r->total -= b->n;
    b->n = 0;
}

static void ring_free(Ring *r) {
    if (r->b)
        for (int64_t i = 0; i < r->w; i++) PyMem_Free(r->b[i].v);
    PyMem_Free(r->b);
}

/* -- the inter-token gap histogram: kvsched.histogram.GapHistogram's exact counts --------- */
typedef struct { uint64_t key; int64_t count; int used; } Slot;
typedef struct {
    Slot *t; Py_ssize_t cap, filled;  /* open addressing; an entry at count 0 is absent */
    Py_ssize_t distinct;
    int64_t count;
    double total;
    int bucketed;  /* more than MAX_EXACT distinct values were held at once */
    int on;
} Hist;

static uint64_t hash64(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL; x ^= x >> 33;
    return x;
}

static int hist_grow(Hist *h) {
    Py_ssize_t cap = h->cap ? h->cap * 2 : 1024;
    Slot *t = PyMem_Calloc(cap, sizeof(Slot));
    if (!t) { PyErr_NoMemory(); return -1; }
    for (Py_ssize_t i = 0; i < h->cap; i++) {
        if (!h->t[i].used) continue;
        uint64_t j = hash64(h->t[i].key) & (cap - 1);
        while (t[j].used) j = (j + 1) & (cap - 1);
        t[j] = h->t[i];
    }
    PyMem_Free(h->t);
    h->t = t; h->cap = cap;
    return 0;
}

/* `count` more gaps of `value` in the counts only (not in `count` and `total`). */
static int hist_count(Hist *h, double value, int64_t count) {
    if (value == 0.0) value = 0.0;  /* -0.0 and 0.0 are one dict key */
    uint64_t key;
    memcpy(&key, &value, sizeof key);
    if (2 * (h->filled + 1) > h->cap && hist_grow(h) < 0) return -1;
    uint64_t j = hash64(key) & (h->cap - 1);
    while (h->t[j].used && h->t[j].key != key) j = (j + 1) & (h->cap - 1);
    Slot *s = &h->t[j];
    if (!s->used) { s->used = 1; s->key = key; s->count = 0; h->filled++; }
    int was = s->count != 0;
    s->count += count;
    if (!was && s->count) h->distinct++;
    else if (was && !s->count) h->distinct--;
    if (h->distinct > MAX_EXACT) h->bucketed = 1;
    return 0;
}

/* GapHistogram.add(value, count): count and total as Python sums them, then the count. */
static int hist_add(Hist *h, double value, int64_t count) {
    if (!h->on || !count) return 0;
    h->count += count;
    h->total += value * (double)count;
    return hist_count(h, value, count);
}

/* -- the engine ------------------------------------------------------------------------ */
typedef struct {
    /* configuration */
    int64_t budget, max_num_seqs, block_size, num_blocks, watermark, chunk_cap, max_steps;
    int chunked, whole_steps, stretches, dry;
    double t_base, t_prefill, t_decode, t_kv;  /* kvsched.timing.LinearStep (constant: base) */
    double last_duration;
    /* the requests, in arrival order */
    const double *arrival; const int64_t *prompt, *output, *order, *id_numbers;
    Py_ssize_t n;
    Py_ssize_t next;  /* arrivals taken */
    /* run state */
    Seq *seqs; Py_ssize_t nseqs, capseqs; Vec free_slots;
    Vec waiting; Py_ssize_t waiting_head;  /* FIFO of slots */
    Vec running, prefilling;  /* slots in admission order */
    Heap finish_due;
    Ring block_due;
    int64_t free, tick, kv_tokens, admissions, pushes;
    double last_end;  /* end of the latest decode pass */
    int steady;
    Py_ssize_t hol_slot, hol_behind;  /* the head blocking the request behind it, or -1 */
    int64_t hol_k;
    int hol_kind;
    Hist itl;
    /* outputs */
    double *rec_first_sched, *rec_first_token, *rec_finish, *rec_max_gap, *rec_arrival;
    int64_t *rec_ttft_steps;
    int32_t *rec_generated, *rec_hit;
    uint8_t *rec_status;
    PyObject *log_block, *events, *drain, *progress, *event_text;
    Text etext;  /* events as CSV lines, for a sink that writes text (event_text) */
    /* the step records of the chunk under way, as columns (see SEG_* and flush_block) */
    Vec seg, step_used; DVec seg_sum, step_start, step_duration;
    /* StepStats' sums and the Timeline's buckets (kvsched.steplog), over every step */
    int64_t stat_steps, stat_prefill, stat_decode, stat_used_sum, stat_peak;
    double stat_end, stat_busy;
    double tl_start, tl_end, tl_width;
    Py_ssize_t tl_size;
    double *tl_busy; int64_t *tl_waiting, *tl_count;
    Py_ssize_t drain_at;
    PyObject *s_arrive, *s_admit, *s_finish, *s_hol_block, *s_hol_release, *s_empty;
    PyObject *kept;  /* with event_text: where the events the diagnosis reads go too */
} Core;

static Py_ssize_t num_waiting(Core *c) { return c->waiting.n - c->waiting_head; }

static int64_t blocks_for(int64_t tokens, int64_t bs) { return (tokens + bs - 1) / bs; }

/* LinearStep.duration (a constant step is its base), its additions in its order; a swapped
 * block never happens here (its price times 0 adds 0.0). */
static double duration_of(Core *c, int64_t prefill, int64_t decodes, int64_t kv_read) {
    return c->t_base + c->t_prefill * (double)prefill + c->t_decode * (double)decodes
        + c->t_kv * (double)kv_read;
}

enum { EV_ARRIVE, EV_ADMIT, EV_FINISH, EV_HOL_BLOCK, EV_HOL_RELEASE };

static int flush_events(Core *c) {
    if (!c->etext.n) return 0;
    PyObject *out = PyObject_CallFunction(c->event_text, "y#", c->etext.v, c->etext.n);
    c->etext.n = 0;
    if (!out) return -1;
    Py_DECREF(out);
    return 0;
}

/* An event as the Python loop's tuple, appended to `list`. */
static int append_event(Core *c, PyObject *list, int64_t step, double time, Seq *s, int kind,
                        long long a, long long b) {
    PyObject *detail, *name;
    if (kind == EV_ARRIVE || kind == EV_HOL_RELEASE) detail = Py_NewRef(c->s_empty);
    else if (kind == EV_FINISH) detail = PyUnicode_FromFormat("%lld tokens", a);
    else if (kind == EV_HOL_BLOCK)
        detail = PyUnicode_FromFormat(
            "needs %lld %s, %lld tokens and %lld blocks left; r%lld behind it would fit", a,
            c->hol_kind == 1 ? "tokens" : "blocks", b, (long long)c->free,
            c->seqs[c->hol_behind].id_number);
    else if (b < a)
        detail = PyUnicode_FromFormat("prefill %lld tokens, first chunk %lld", a, b);
    else detail = PyUnicode_FromFormat("prefill %lld tokens", a);
    if (!detail) return -1;
    switch (kind) {
    case EV_ARRIVE: name = c->s_arrive; break;
    case EV_ADMIT: name = c->s_admit; break;
    case EV_FINISH: name = c->s_finish; break;
    case EV_HOL_BLOCK: name = c->s_hol_block; break;
    default: name = c->s_hol_release; break;
    }
    if (!s->id) {
        s->id = PyUnicode_FromFormat("r%lld", s->id_number);
        if (!s->id) { Py_DECREF(detail); return -1; }
    }
    PyObject *e = Py_BuildValue("(LdOON)", (long long)step, time, s->id, name, detail);
    if (!e) return -1;
    int r = PyList_Append(list, e);
    Py_DECREF(e);
    return r;
}

/* The diagnosis reads head-of-line events: kept as tuples beside the CSV lines. */
static int kept_event(Core *c, int64_t step, double time, Seq *s, int kind, long long a,
                      long long b) {
    return append_event(c, c->kept, step, time, s, kind, a, b);
}

/* An event (step, time, request_id, event, detail): a tuple in `events`, or a CSV line. */
static int event(Core *c, int64_t step, double time, Seq *s, int kind, long long a,
                 long long b) {
    if (c->dry) return 0;
    if (c->event_text != Py_None) {
        Text *t = &c->etext;
#define PUT(lit) text_put(t, lit, (Py_ssize_t)sizeof(lit) - 1)
        if (text_int(t, step) < 0 || PUT(",") < 0 || text_float(t, time) < 0 || PUT(",r") < 0
                || text_int(t, s->id_number) < 0)
            return -1;
        int r;
        if (kind == EV_ARRIVE) r = PUT(",arrive,\n");
        else if (kind == EV_FINISH)
            r = (PUT(",finish,") < 0 || text_int(t, a) < 0) ? -1 : PUT(" tokens\n");
        else if (kind == EV_HOL_RELEASE) r = PUT(",hol_release,\n");
        else if (kind == EV_HOL_BLOCK)
            r = (PUT(",hol_block,\"needs ") < 0 || text_int(t, a) < 0
                 || (c->hol_kind == 1 ? PUT(" tokens, ") : PUT(" blocks, ")) < 0
                 || text_int(t, b) < 0 || PUT(" tokens and ") < 0 || text_int(t, c->free) < 0
                 || PUT(" blocks left; r") < 0
                 || text_int(t, c->seqs[c->hol_behind].id_number) < 0)
                ? -1 : PUT(" behind it would fit\"\n");
        else if (b < a)
            r = (PUT(",admit,\"prefill ") < 0 || text_int(t, a) < 0
                 || PUT(" tokens, first chunk ") < 0 || text_int(t, b) < 0) ? -1 : PUT("\"\n");
        else r = (PUT(",admit,prefill ") < 0 || text_int(t, a) < 0) ? -1 : PUT(" tokens\n");
#undef PUT
        if (r < 0) return -1;
        if ((kind == EV_HOL_BLOCK || kind == EV_HOL_RELEASE) && kept_event(c, step, time, s, kind,
                                                                       a, b) < 0)
            return -1;
        return t->n >= (1 << 20) ? flush_events(c) : 0;
    }
    return append_event(c, c->events, step, time, s, kind, a, b);
}

static Py_ssize_t new_slot(Core *c) {
    if (c->free_slots.n) return (Py_ssize_t)c->free_slots.v[--c->free_slots.n];
    if (grow((void **)&c->seqs, c->nseqs, &c->capseqs, sizeof *c->seqs) < 0) return -1;
    return c->nseqs++;
}

/* A request arrives (Scheduler.add): queued, its arrive event. */
static int arrive(Core *c, int64_t step) {
    Py_ssize_t k = c->next++;
    Py_ssize_t slot = new_slot(c);
    if (slot < 0) return -1;
    Seq *s = &c->seqs[slot];
    memset(s, 0, sizeof *s);
    s->k = k;
    s->prompt = c->prompt[k];
    s->output = c->output[k];
    s->join_step = step;
    s->state = WAITING;
    s->id_number = c->id_numbers ? (long long)c->id_numbers[k] : (long long)c->order[k];
    if (vec_push(&c->waiting, slot) < 0) return -1;
    return event(c, step, c->arrival[k], s, EV_ARRIVE, 0, 0);
}

/* The step's plan, as much of StepPlan as these rules fill. */
typedef struct {
    int64_t tick, num_decodes, num_prefills, prefill_tokens, num_admitted, num_finished;
    double end, gap;  /* the step's end; its decode pass's gap from the pass before */
    int64_t kv_read;  /* KV tokens the decodes read */
    Vec produced;  /* slots whose prefill completed this step */
    int stopped;   /* admissions stopped at the head: 1 on tokens, 2 on blocks */
    int64_t stop_budget, stop_need;  /* the budget left then; the tokens or blocks it needs */
} Plan;

static int insert_running(Core *c, Py_ssize_t slot) {
    /* the running list stays in admission order (a chunked prefill may finish late) */
    Vec *r = &c->running;
    if (vec_push(r, slot) < 0) return -1;
    Py_ssize_t i = r->n - 1;
    int64_t a = c->seqs[slot].admit_seq;
    while (i > 0 && c->seqs[r->v[i - 1]].admit_seq > a) { r->v[i] = r->v[i - 1]; i--; }
    r->v[i] = slot;
    return 0;
}

/* Scheduler._prefill_chunk */
static int prefill_chunk(Core *c, Plan *p, Py_ssize_t slot, int64_t chunk, int in_prefilling) {
    Seq *s = &c->seqs[slot];
    s->prefill_left -= chunk;
    p->num_prefills++;
    p->prefill_tokens += chunk;
    if (s->prefill_left) {
        s->state = PREFILLING;
        if (!in_prefilling) return vec_push(&c->prefilling, slot);
        return 0;
    }
    if (in_prefilling) {
        for (Py_ssize_t i = 0; i < c->prefilling.n; i++)
            if (c->prefilling.v[i] == slot) { vec_remove_at(&c->prefilling, i); break; }
    }
    s->state = RUNNING;
    if (insert_running(c, slot) < 0) return -1;
    c->kv_tokens += s->prompt;
    return vec_push(&p->produced, slot);
}

/* Scheduler._fits for the request behind a head that stopped admissions. */
static int fits(Core *c, Seq *s, int64_t budget) {
    int64_t need = blocks_for(s->prompt, c->block_size);
    int64_t tokens = c->chunked ? 1 : s->prompt;
    return tokens <= budget && c->free - need >= c->watermark;
}

/* Scheduler._track_head_of_line: a head that stops admissions while the request behind it
 * would fit blocks it; only the changes are events (hol_block, hol_release). */
static int track_head_of_line(Core *c, Plan *p, int64_t step, double now) {
    Py_ssize_t head = -1, behind = -1;
    if (p->stopped && num_waiting(c) >= 2) {
        Py_ssize_t second = c->waiting.v[c->waiting_head + 1];
        if (fits(c, &c->seqs[second], p->stop_budget)) {
            head = c->waiting.v[c->waiting_head];
            behind = second;
        }
    }
    if (head >= 0 && head == c->hol_slot && c->seqs[head].k == c->hol_k) return 0;
    if (c->hol_slot >= 0) {
        if (event(c, step, now, &c->seqs[c->hol_slot], EV_HOL_RELEASE, 0, 0) < 0) return -1;
        c->hol_slot = -1;
    }
    if (head < 0) return 0;
    c->hol_slot = head;
    c->hol_k = c->seqs[head].k;
    c->hol_behind = behind;
    c->hol_kind = p->stopped;
    return event(c, step, now, &c->seqs[head], EV_HOL_BLOCK, p->stop_need, p->stop_budget);
}

/* Scheduler.hol_floor: while a head blocks, what the request behind it needs must stay
 * free (with the watermark) for the state not to change. */
static int64_t hol_floor(Core *c) {
    if (c->hol_slot < 0 || num_waiting(c) < 2) return 0;
    Seq *behind = &c->seqs[c->waiting.v[c->waiting_head + 1]];
    return blocks_for(behind->prompt, c->block_size) + c->watermark;
}

/* Whether a queued crossing is still its request's (not left by a finished one whose slot
 * was reused, and the request still decoding). */
static int due_live(Core *c, Due e) {
    Seq *s = &c->seqs[e.slot];
    return s->k == e.k && s->state == RUNNING;
}

/* Every live request due at pass `t` takes its next block (and is due again a block of
 * passes later); the bucket is emptied. The number that grew, or -1. */
static int64_t cross_pass(Core *c, int64_t t) {
    Bucket *due = ring_at(&c->block_due, t);
    int64_t grown = 0;
    for (Py_ssize_t i = 0; i < due->n; i++) {
        Due e = due->v[i];
        if (!due_live(c, e)) continue;
        grown++;
        c->seqs[e.slot].blocks++;
        if (ring_push(&c->block_due, t, t + c->block_size, e.slot, e.k) < 0) return -1;
    }
    ring_clear(&c->block_due, due);
    return grown;
}

/* Scheduler._decode_first without preemption: 1 = done, 0 = give up, -1 = error. */
static int schedule(Core *c, Plan *p, int64_t step, double now) {
    int64_t budget = c->budget;
    Py_ssize_t n = c->running.n;
    if (n) {  /* _decode, in bulk */
        int64_t tick = ++c->tick;
        p->tick = tick;
        int64_t growing = cross_pass(c, tick);
        if (growing < 0) return -1;
        if (n > budget || growing > c->free) return 0;  /* the exact pass: not carried */
        c->free -= growing;
        p->num_decodes = n;
        p->kv_read = c->kv_tokens + n;
        c->kv_tokens += n;
        budget -= n;
    }
    /* _continue_prefills, in admission order (a completed prompt leaves the list) */
    Py_ssize_t i = 0;
    while (i < c->prefilling.n) {
        if (budget < 1) break;
        Py_ssize_t slot = c->prefilling.v[i];
        Seq *s = &c->seqs[slot];
        int64_t chunk = s->prefill_left;
        if (budget < chunk) chunk = budget;
        if (c->chunk_cap < chunk) chunk = c->chunk_cap;
        budget -= chunk;
        Py_ssize_t before = c->prefilling.n;
        if (prefill_chunk(c, p, slot, chunk, 1) < 0) return -1;
        if (c->prefilling.n == before) i++;
    }
    /* _admit */
    while (budget > 0 && (int64_t)(c->running.n + c->prefilling.n) < c->max_num_seqs) {
        if (!num_waiting(c)) break;
        Py_ssize_t slot = c->waiting.v[c->waiting_head];
        Seq *s = &c->seqs[slot];
        int64_t tokens = s->prompt;
        int64_t need = blocks_for(tokens, c->block_size);
        int64_t chunk;
        if (c->chunked) {
            chunk = tokens;
            if (budget < chunk) chunk = budget;
            if (c->chunk_cap < chunk) chunk = c->chunk_cap;
        } else if (tokens > budget) {
            p->stopped = 1; p->stop_budget = budget; p->stop_need = tokens;
            break;
        } else {
            chunk = tokens;
        }
        if (!(c->free - need >= c->watermark)) {
            p->stopped = 2; p->stop_budget = budget; p->stop_need = need;
            break;
        }
        c->waiting_head++;
        c->free -= need;
        s->blocks = need;
        s->admit_seq = ++c->admissions;
        p->num_admitted++;
        s->prefill_left = tokens;
        s->first_sched = now;
        int r = event(c, step, now, s, EV_ADMIT, tokens, chunk);
        if (r < 0) return -1;
        budget -= chunk;
        if (prefill_chunk(c, p, slot, chunk, 0) < 0) return -1;
    }
    if (c->waiting_head > 4096 && 2 * c->waiting_head > c->waiting.n) {  /* compact the FIFO */
        Py_ssize_t left = num_waiting(c);
        memmove(c->waiting.v, c->waiting.v + c->waiting_head, left * sizeof(int64_t));
        c->waiting.n = left;
        c->waiting_head = 0;
    }
    return track_head_of_line(c, p, step, now) < 0 ? -1 : 1;
}


/* A segment's columns, in this order (kvsched.steplog.SegmentBlock reads them so). */
enum { SEG_STEP, SEG_NUM_STEPS, SEG_IS_ROW, SEG_RUNNING, SEG_WAITING, SEG_PREFILLS,
       SEG_PREFILL_TOKENS, SEG_DECODES, SEG_TOKENS, SEG_ADMITTED, SEG_FINISHED, SEG_KV_FIRST,
       SEG_ROW_FREE, SEG_FIELDS };
#define BLOCK_SEGMENTS (1 << 15)
#define BLOCK_STEPS (1 << 18)

/* Timeline.add_row / add_stretch: busy time, queue and count by bucket of start time; a
 * run of steps in one bucket adds its sum (summed from 0, as Python's sum of a list). */
static int64_t tl_key(Core *c, double t) {
    if (t < c->tl_start) return -1;
    if (t >= c->tl_end) return c->tl_size;
    int64_t k = (int64_t)((t - c->tl_start) / c->tl_width);
    return k < c->tl_size - 1 ? k : c->tl_size - 1;
}

static void timeline_add(Core *c, const double *starts, const double *durations, int64_t k,
                         int64_t waiting) {
    if (!c->tl_size || !(c->tl_width != 0.0)) return;
    if (starts[k - 1] < c->tl_start || starts[0] >= c->tl_end) return;
    int64_t lo = 0;
    while (lo < k) {
        int64_t key = tl_key(c, starts[lo]);
        if (key == c->tl_size) break;
        int64_t hi = lo + 1;
        double sum = durations[lo];
        while (hi < k && tl_key(c, starts[hi]) == key) sum += durations[hi++];
        if (key >= 0) {
            c->tl_busy[key] += sum;
            c->tl_waiting[key] += waiting * (hi - lo);
            c->tl_count[key] += hi - lo;
        }
        lo = hi;
    }
}

static int flush_block(Core *c);

/* One segment (an exact step's row, or a stretch) into the chunk and the sums. */
static int add_segment(Core *c, const int64_t *fields, const double *starts,
                       const double *durations, const int64_t *used, int64_t k) {
    if (c->dry) return 0;
    double sum = 0.0;
    Py_ssize_t at = c->step_used.n;  /* the three step columns have the same length */
    if (grow_to((void **)&c->step_start.v, at + k, &c->step_start.cap, sizeof(double)) < 0
            || grow_to((void **)&c->step_used.v, at + k, &c->step_used.cap, sizeof(int64_t)) < 0
            || grow_to((void **)&c->step_duration.v, at + k, &c->step_duration.cap,
                       sizeof(double)) < 0
            || grow_to((void **)&c->seg.v, c->seg.n + SEG_FIELDS, &c->seg.cap,
                       sizeof(int64_t)) < 0)
        return -1;
    for (int64_t j = 0; j < k; j++) {
        sum += durations[j];
        c->stat_busy += durations[j];
        c->stat_used_sum += used[j];
        if (used[j] > c->stat_peak) c->stat_peak = used[j];
    }
    memcpy(c->step_start.v + at, starts, k * sizeof(double));
    memcpy(c->step_used.v + at, used, k * sizeof(int64_t));
    memcpy(c->step_duration.v + at, durations, k * sizeof(double));
    c->step_start.n = c->step_used.n = c->step_duration.n = at + k;
    c->stat_steps += k;
    c->stat_end = starts[k - 1] + durations[k - 1];
    c->stat_prefill += fields[SEG_PREFILL_TOKENS];
    c->stat_decode += fields[SEG_DECODES] * k;
    timeline_add(c, starts, durations, k, fields[SEG_WAITING]);
    memcpy(c->seg.v + c->seg.n, fields, SEG_FIELDS * sizeof(int64_t));
    c->seg.n += SEG_FIELDS;
    if (dvec_push(&c->seg_sum, sum) < 0) return -1;
    if (c->seg_sum.n >= BLOCK_SEGMENTS || c->step_used.n >= BLOCK_STEPS) return flush_block(c);
    return 0;
}

/* Hand the chunk to the step log: log_block(segment ints, segment duration sums, starts,
 * durations, blocks used), each as bytes (int64 or float64, native order). */
static int flush_block(Core *c) {
    if (!c->seg_sum.n) return 0;
    PyObject *out = PyObject_CallFunction(
        c->log_block, "y#y#y#y#y#", (const char *)c->seg.v,
        c->seg.n * (Py_ssize_t)sizeof(int64_t),
        (const char *)c->seg_sum.v, c->seg_sum.n * (Py_ssize_t)sizeof(double),
        (const char *)c->step_start.v, c->step_start.n * (Py_ssize_t)sizeof(double),
        (const char *)c->step_duration.v, c->step_duration.n * (Py_ssize_t)sizeof(double),
        (const char *)c->step_used.v, c->step_used.n * (Py_ssize_t)sizeof(int64_t));
    c->seg.n = c->seg_sum.n = c->step_start.n = c->step_used.n = c->step_duration.n = 0;
    if (!out) return -1;
    Py_DECREF(out);
    return 0;
}

/* A finished request's record (simulator._put through RecordTable.put). */
static void record(Core *c, Seq *s, double finish) {
    int64_t i = c->order[s->k];
    if (c->rec_arrival) c->rec_arrival[i] = c->arrival[s->k];
    c->rec_status[i] = 0;  /* finished */
    c->rec_first_sched[i] = s->first_sched;
    c->rec_finish[i] = finish;
    if (s->has_max_gap) c->rec_max_gap[i] = s->max_gap;
    c->rec_generated[i] = (int32_t)s->output;
    c->rec_hit[i] = 0;
}

/* Scheduler._finish (after _close_run for a request that decoded). */
static int finish(Core *c, Py_ssize_t slot, int64_t step, double end) {
    Seq *s = &c->seqs[slot];
    s->state = FINISHED;
    c->free += s->blocks;
    c->kv_tokens -= s->prompt + s->output - 1;
    for (Py_ssize_t i = 0; i < c->running.n; i++)
        if (c->running.v[i] == slot) { vec_remove_at(&c->running, i); break; }
    int r = event(c, step, end, s, EV_FINISH, s->output, 0);
    if (r < 0) return -1;
    record(c, s, end);
    Py_CLEAR(s->id);
    return vec_push(&c->free_slots, slot);
}

/* Scheduler._close_run: the run's first gap replaces the pass gap counted for it. */
static int close_run(Core *c, Seq *s) {
    if (hist_add(&c->itl, s->run_first_gap, -1) < 0) return -1;
    return hist_add(&c->itl, s->first_gap, 1);
}

static int push_run(Core *c, Py_ssize_t slot) {
    /* a request has its first token: when it crosses its next block boundary, when it ends */
    Seq *s = &c->seqs[slot];
    int64_t crossing = s->blocks * c->block_size - s->prompt + 2 - s->base;
    Entry done = {s->output - s->base, c->pushes++, slot, s->k};
    if (ring_push(&c->block_due, c->tick, crossing, slot, s->k) < 0) return -1;
    return heap_push(&c->finish_due, done);
}

/* The requests due to finish at pass `tick`, in the order they were queued. */
static int finish_due(Core *c, int64_t tick, int64_t step, double end, int64_t *count) {
    while (c->finish_due.n && c->finish_due.v[0].key == tick) {
        Entry e = heap_pop(&c->finish_due);
        Seq *s = &c->seqs[e.slot];
        if (s->k != e.k || s->state != RUNNING) continue;
        if (close_run(c, s) < 0 || finish(c, e.slot, step, end) < 0) return -1;
        (*count)++;
    }
    return 0;
}

/* Scheduler.postprocess */
static int postprocess(Core *c, Plan *p, int64_t step) {
    double end = p->end;
    if (p->tick) {
        c->last_end = end;
        if (hist_add(&c->itl, p->gap, p->num_decodes) < 0) return -1;
        if (finish_due(c, p->tick, step, end, &p->num_finished) < 0) return -1;
    }
    for (Py_ssize_t i = 0; i < p->produced.n; i++) {
        Py_ssize_t slot = p->produced.v[i];
        Seq *s = &c->seqs[slot];
        int64_t row = c->order[s->k];
        c->rec_first_token[row] = end;
        c->rec_ttft_steps[row] = step - s->join_step + 1;
        s->last_time = end;
        if (s->output <= 1) {
            if (finish(c, slot, step, end) < 0) return -1;
            p->num_finished++;
            continue;
        }
        s->base = 1 - c->tick;
        s->run_tick = c->tick + 1;
        if (push_run(c, slot) < 0) return -1;
    }
    return 0;
}

/* Engine.step: 1 a row was logged, 0 nothing could run, 2 give up, -1 error. */
static int step_once(Core *c, int64_t step, double now) {
    Plan p;
    memset(&p, 0, sizeof p);
    int r = schedule(c, &p, step, now);
    if (r <= 0) { PyMem_Free(p.produced.v); return r < 0 ? -1 : 2; }
    if (!p.tick && !p.num_prefills) {  /* idle */
        c->steady = 0;
        PyMem_Free(p.produced.v);
        return 0;
    }
    double duration = duration_of(c, p.prefill_tokens, p.num_decodes, p.kv_read);
    c->last_duration = duration;
    p.end = now + duration;
    if (p.tick) {
        /* each request's gaps: its run's first (from its first token), then the passes';
         * a request whose prefill completed in this step did not decode in it */
        double end = p.end, gap = p.gap = end - c->last_end;
        for (Py_ssize_t i = 0; i < c->running.n; i++) {
            Seq *s = &c->seqs[c->running.v[i]];
            if (!s->run_tick || s->run_tick > p.tick) continue;  /* (its first token is new) */
            if (s->run_tick == p.tick) {
                s->run_first_gap = gap;
                s->first_gap = s->max_gap = end - s->last_time;
                s->has_max_gap = 1;
            } else if (gap > s->max_gap) {
                s->max_gap = gap;
            }
        }
    }
    Py_ssize_t num_running = c->running.n + c->prefilling.n;
    Py_ssize_t waiting = num_waiting(c);
    int64_t blocks_free = c->free;
    r = postprocess(c, &p, step);
    PyMem_Free(p.produced.v);
    if (r < 0) return -1;
    int pure = !p.num_prefills && !p.num_admitted && !p.num_finished && p.num_decodes > 0;
    int settled = !num_waiting(c) && !c->prefilling.n && c->hol_slot < 0;
    c->steady = c->stretches && ((pure && p.num_decodes == (int64_t)c->running.n) || settled);
    int64_t fields[SEG_FIELDS] = {
        step, 1, 1, (int64_t)num_running, (int64_t)waiting, p.num_prefills, p.prefill_tokens,
        p.num_decodes, p.prefill_tokens + p.num_decodes, p.num_admitted, p.num_finished, 0,
        blocks_free};
    int64_t used = c->num_blocks - blocks_free;
    if (add_segment(c, fields, &now, &duration, &used, 1) < 0) return -1;
    return 1;
}

/* Engine.stretch + Scheduler.decode_stretch: the number of steps run (0: none), -1 error. */
static int64_t stretch_once(Core *c, int64_t step, double now, double next_arrival,
                            int64_t steps_left, double *end_out, double *ends, int64_t *grown,
                            double *durations) {
    if (!c->steady) return 0;
    int64_t n = (int64_t)c->running.n;
    if (!n || n > c->budget) return 0;
    int64_t limit = steps_left < MAX_STRETCH ? steps_left : MAX_STRETCH;
    int64_t finish_tick = -1;
    if (c->finish_due.n) {
        finish_tick = c->finish_due.v[0].key;
        if (finish_tick - c->tick < limit) limit = finish_tick - c->tick;
    }
    int64_t kv = c->kv_tokens;
    double first_duration = duration_of(c, 0, n, kv + n);
    int arriving = !isinf(next_arrival);
    if (arriving && first_duration > 0) {  /* steps never get shorter: an arrival bounds them */
        double x = (next_arrival - now) / first_duration;
        if (x < (double)limit) {
            int64_t v = (int64_t)x + 2;
            if (v < limit) limit = v;
        }
    }
    ends[0] = now;
    for (int64_t j = 1; j <= limit; j++) {
        durations[j - 1] = duration_of(c, 0, n, kv + n + (j - 1) * n);
        ends[j] = ends[j - 1] + durations[j - 1];
    }
    if (arriving) {  /* bisect_left over [1, limit): the first step that starts at an arrival */
        int64_t lo = 1, hi = limit;
        while (lo < hi) {
            int64_t mid = (lo + hi) / 2;
            double t = ends[mid];
            if (next_arrival <= t + ARRIVAL_SLACK * (1.0 + t)) hi = mid; else lo = mid + 1;
        }
        limit = lo;
    }
    int64_t spare = c->free - hol_floor(c);
    if (spare < 0) return 0;
    int64_t tick = c->tick, horizon = tick + limit;
    memset(grown, 0, limit * sizeof(int64_t));
    /* block boundaries, pass by pass: the stretch ends before a pass short of blocks */
    for (int64_t t = tick + 1; t <= horizon && c->block_due.total; t++) {
        Bucket *due = ring_at(&c->block_due, t);
        int64_t count = 0;
        for (Py_ssize_t i = 0; i < due->n; i++) count += due_live(c, due->v[i]);
        if (count > spare) {  /* left as they are: the next step meets the shortage */
            horizon = t - 1;
            break;
        }
        spare -= count;
        grown[t - tick - 1] += count;
        if (cross_pass(c, t) < 0) return -1;
    }
    int64_t k = horizon - tick;
    if (k <= 0) return 0;
    /* apply it: `grown` becomes the blocks in use as each step runs */
    int64_t used = c->num_blocks - c->free;
    for (int64_t j = 0; j < k; j++) {
        used += grown[j];
        grown[j] = used;
    }
    c->free = c->num_blocks - used;
    int64_t first = tick + 1;
    c->tick = horizon;
    c->kv_tokens = kv + n * k;
    /* the gaps: the first pass's from the pass before, then each one's */
    double g1 = ends[1] - c->last_end, top = -INFINITY;
    c->last_end = ends[k];
    if (hist_add(&c->itl, g1, n) < 0) goto fail;
    /* the later passes' gaps: the total step by step, the counts a run of equal gaps at a
     * time (counts are sums of whole numbers: any grouping gives them) */
    Hist *h = &c->itl;
    double run_value = 0.0;
    int64_t run_length = 0;
    for (int64_t j = 1; j < k; j++) {
        double g = ends[j + 1] - ends[j];
        if (g > top) top = g;
        if (!h->on) continue;
        h->count += n;
        h->total += g * (double)n;
        if (run_length && g == run_value && !(g == 0.0)) { run_length++; continue; }
        if (run_length && hist_count(h, run_value, n * run_length) < 0) goto fail;
        run_value = g;
        run_length = 1;
    }
    if (run_length && hist_count(h, run_value, n * run_length) < 0) goto fail;
    for (int64_t i = 0; i < n; i++) {
        Seq *s = &c->seqs[c->running.v[i]];
        if (s->run_tick == first) {
            s->run_first_gap = g1;
            s->first_gap = s->max_gap = ends[1] - s->last_time;
            s->has_max_gap = 1;
        } else if (g1 > s->max_gap) {
            s->max_gap = g1;
        }
        if (top > s->max_gap) s->max_gap = top;
    }
    int64_t num_finished = 0;
    if (horizon == finish_tick
            && finish_due(c, finish_tick, step + k - 1, ends[k], &num_finished) < 0) goto fail;
    int64_t fields[SEG_FIELDS] = {
        step, k, 0, n + (int64_t)c->prefilling.n, (int64_t)num_waiting(c), 0, 0, n, n, 0,
        num_finished, kv + n, 0};
    if (add_segment(c, fields, ends, durations, grown, k) < 0) return -1;
    if (num_finished) c->steady = !num_waiting(c) && !c->prefilling.n && c->hol_slot < 0;
    *end_out = ends[k];
    return k;
fail:
    return -1;
}

/* simulator.run_loop: 1 done, 0 give up, -1 error. */
static int run_loop(Core *c) {
    int64_t step = 0, executed = 0;
    double now = 0.0;
    uint64_t turns = 0;
    double *ends = PyMem_Malloc((MAX_STRETCH + 1) * sizeof(double));
    double *durations = PyMem_Malloc(MAX_STRETCH * sizeof(double));
    int64_t *grown = PyMem_Malloc(MAX_STRETCH * sizeof(int64_t));
    int result = -1;
    if (!ends || !grown || !durations) { PyErr_NoMemory(); goto done; }
    for (;;) {
        if (!c->dry && c->drain != Py_None && PyList_GET_SIZE(c->events) >= c->drain_at) {
            PyObject *out = PyObject_CallNoArgs(c->drain);
            if (!out) goto done;
            Py_DECREF(out);
        }
        turns++;
        if (!(turns & 4095) && PyErr_CheckSignals() < 0) goto done;  /* Ctrl-C, SIGTERM */
        if (!c->dry && c->progress != Py_None && !(turns & 4095)) {
            PyObject *out = PyObject_CallFunction(c->progress, "nd", c->next, now);
            if (!out) goto done;
            Py_DECREF(out);
        }
        double horizon = now + ARRIVAL_SLACK * (1.0 + now);
        double upcoming = c->next < c->n ? c->arrival[c->next] : INFINITY;
        while (upcoming <= horizon) {
            while (c->next < c->n && c->arrival[c->next] <= horizon) {
                double at = c->arrival[c->next];
                if (at > now) now = at;
                c->steady = 0;
                if (arrive(c, step) < 0) goto done;
            }
            upcoming = c->next < c->n ? c->arrival[c->next] : INFINITY;
        }
        double end = 0.0;
        int64_t k = stretch_once(c, step, now, upcoming, c->max_steps - executed, &end, ends,
                                 grown, durations);
        if (k < 0) goto done;
        if (k > 0) {
            step += k;
            executed += k;
            now = end;
        } else {
            int r = step_once(c, step, now);
            if (r < 0) goto done;
            if (r == 2) { result = 0; goto done; }
            if (r == 0) {
                if (isinf(upcoming)) {
                    result = !num_waiting(c) && !c->running.n && !c->prefilling.n;
                    goto done;
                }
                if (c->whole_steps) {
                    step = (int64_t)ceil(upcoming);
                    now = (double)step;
                } else {
                    now = upcoming;
                }
                continue;
            }
            step += 1;
            executed += 1;
            now = now + c->last_duration;
        }
        if (executed >= c->max_steps) { result = 0; goto done; }
    }
done:
    if (result == 1 && (flush_block(c) < 0 || flush_events(c) < 0)) result = -1;
    PyMem_Free(ends);
    PyMem_Free(grown);
    PyMem_Free(durations);
    return result;
}

static void core_free(Core *c) {
    for (Py_ssize_t i = 0; i < c->nseqs; i++) Py_CLEAR(c->seqs[i].id);
    PyMem_Free(c->seqs); PyMem_Free(c->free_slots.v); PyMem_Free(c->waiting.v);
    PyMem_Free(c->running.v); PyMem_Free(c->prefilling.v);
    PyMem_Free(c->finish_due.v); ring_free(&c->block_due); PyMem_Free(c->itl.t);
    PyMem_Free(c->etext.v);
    PyMem_Free(c->seg.v); PyMem_Free(c->seg_sum.v); PyMem_Free(c->step_start.v);
    PyMem_Free(c->step_used.v); PyMem_Free(c->step_duration.v);
    PyMem_Free(c->tl_busy); PyMem_Free(c->tl_waiting); PyMem_Free(c->tl_count);
    Py_XDECREF(c->s_arrive); Py_XDECREF(c->s_admit); Py_XDECREF(c->s_finish);
    Py_XDECREF(c->s_hol_block); Py_XDECREF(c->s_hol_release);
    Py_XDECREF(c->s_empty);
}

static int want(Py_buffer *b, Py_ssize_t n, Py_ssize_t itemsize, const char *name) {
    if (b->len != n * itemsize) {
        PyErr_Format(PyExc_ValueError, "%s: expected %zd items of %zd bytes", name, n, itemsize);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(run_doc,
"run(config, arrivals, records, callbacks) -> (free blocks, itl) or None\n\n"
"config: (budget, max_num_seqs, block_size, num_blocks, watermark_blocks, chunked,\n"
"chunk_cap, (base, per_prefill_token, per_decode, per_kv_token), whole_steps, max_steps,\n"
"stretches, itl, dry);\n"
"arrivals: (arrival float64, prompt int64, output int64, input index int64, id numbers\n"
"int64 or None), in arrival order; records: writable RecordTable columns (arrival or\n"
"None, status u8, first_scheduled, first_token, finish, max_gap f64, ttft_steps i64,\n"
"generated i32, prefix_hit i32), by input index; callbacks: (log_block, events list,\n"
"drain or None, drain_at, progress or None, event_text or None: then the events go to\n"
"it as CSV lines, bytes, instead of the list, and the head-of-line ones also to the list\n"
"kept); timeline: (start, end, num_buckets).\n"
"Returns (free blocks, (itl count, total, bucketed, {gap: count}), (steps, end, busy,\n"
"prefill tokens, decode tokens, blocks used summed, peak), (timeline busy, waiting,\n"
"count)).\n"
"None: the run met what this core does not carry (run the Python engine). `dry`:\n"
"only find that out: no rows, stretches or events are made.");

static PyObject *core_run(PyObject *self, PyObject *args) {
    Core c;
    memset(&c, 0, sizeof c);
    long long budget, max_num_seqs, block_size, num_blocks, watermark, chunk_cap, max_steps;
    int chunked, whole_steps, stretches, itl;
    double t_base, t_prefill, t_decode, t_kv;
    Py_buffer arrival = {0}, prompt = {0}, output = {0}, order = {0}, ids = {0};
    Py_buffer r_arrival = {0}, r_status = {0}, r_sched = {0}, r_token = {0}, r_finish = {0};
    Py_buffer r_gap = {0}, r_ttft = {0}, r_gen = {0}, r_hit = {0};
    PyObject *ids_obj, *r_arrival_obj;
    Py_ssize_t drain_at;
    if (!PyArg_ParseTuple(args, "(LLLLLpL(dddd)pLppp)(y*y*y*y*O)(Ow*w*w*w*w*w*w*w*)(OOOnOOO)(ddn)",
                          &budget, &max_num_seqs, &block_size, &num_blocks, &watermark,
                          &chunked, &chunk_cap, &t_base, &t_prefill, &t_decode, &t_kv, &whole_steps, &max_steps,
                          &stretches, &itl, &c.dry, &arrival, &prompt, &output, &order, &ids_obj,
                          &r_arrival_obj, &r_status, &r_sched, &r_token, &r_finish, &r_gap,
                          &r_ttft, &r_gen, &r_hit, &c.log_block, &c.events, &c.drain,
                          &drain_at, &c.progress, &c.event_text, &c.kept, &c.tl_start, &c.tl_end, &c.tl_size))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = arrival.len / (Py_ssize_t)sizeof(double);
    if (ids_obj != Py_None && PyObject_GetBuffer(ids_obj, &ids, PyBUF_SIMPLE) < 0) goto out;
    if (r_arrival_obj != Py_None
            && PyObject_GetBuffer(r_arrival_obj, &r_arrival, PyBUF_WRITABLE) < 0) goto out;
    if (want(&prompt, n, 8, "prompt") || want(&output, n, 8, "output")
            || want(&order, n, 8, "order") || (ids.buf && want(&ids, n, 8, "ids"))
            || (r_arrival.buf && want(&r_arrival, n, 8, "arrival record"))
            || want(&r_status, n, 1, "status") || want(&r_sched, n, 8, "first_scheduled")
            || want(&r_token, n, 8, "first_token") || want(&r_finish, n, 8, "finish")
            || want(&r_gap, n, 8, "max_gap") || want(&r_ttft, n, 8, "ttft_steps")
            || want(&r_gen, n, 4, "generated") || want(&r_hit, n, 4, "prefix_hit"))
        goto out;
    if (!PyList_Check(c.events) || !PyList_Check(c.kept)) {
        PyErr_SetString(PyExc_TypeError, "events and kept must be lists");
        goto out;
    }
    c.budget = budget; c.max_num_seqs = max_num_seqs; c.block_size = block_size;
    c.num_blocks = num_blocks; c.watermark = watermark; c.chunked = chunked;
    c.chunk_cap = chunk_cap; c.t_base = t_base; c.t_prefill = t_prefill;
    c.t_decode = t_decode; c.t_kv = t_kv; c.whole_steps = whole_steps;
    c.max_steps = max_steps; c.stretches = stretches; c.itl.on = itl;
    c.arrival = arrival.buf; c.prompt = prompt.buf; c.output = output.buf; c.order = order.buf;
    c.id_numbers = ids.buf; c.n = n;
    c.rec_arrival = r_arrival.buf; c.rec_status = r_status.buf; c.rec_first_sched = r_sched.buf;
    c.rec_first_token = r_token.buf; c.rec_finish = r_finish.buf; c.rec_max_gap = r_gap.buf;
    c.rec_ttft_steps = r_ttft.buf; c.rec_generated = r_gen.buf; c.rec_hit = r_hit.buf;
    c.free = num_blocks;
    c.block_due.w = block_size + 1;
    c.block_due.b = PyMem_Calloc((size_t)c.block_due.w, sizeof(Bucket));
    if (!c.block_due.b) { PyErr_NoMemory(); goto out; }
    c.hol_slot = c.hol_behind = -1;
    c.drain_at = drain_at;
    if (c.tl_size < 0) c.tl_size = 0;
    /* Timeline: `num_buckets` equal buckets over [start, end], none when end == start */
    c.tl_width = c.tl_end > c.tl_start ? (c.tl_end - c.tl_start) / (double)c.tl_size : 0.0;
    if (!(c.tl_end > c.tl_start)) c.tl_size = 0;
    c.tl_busy = PyMem_Calloc(c.tl_size + 1, sizeof(double));
    c.tl_waiting = PyMem_Calloc(c.tl_size + 1, sizeof(int64_t));
    c.tl_count = PyMem_Calloc(c.tl_size + 1, sizeof(int64_t));
    if (!c.tl_busy || !c.tl_waiting || !c.tl_count) { PyErr_NoMemory(); goto out; }
    c.s_arrive = PyUnicode_InternFromString("arrive");
    c.s_admit = PyUnicode_InternFromString("admit");
    c.s_finish = PyUnicode_InternFromString("finish");
    c.s_hol_block = PyUnicode_InternFromString("hol_block");
    c.s_hol_release = PyUnicode_InternFromString("hol_release");
    c.s_empty = PyUnicode_FromString("");
    if (!c.s_arrive || !c.s_admit || !c.s_finish || !c.s_empty || !c.s_hol_block
            || !c.s_hol_release)
        goto out;
    int r = run_loop(&c);
    if (r < 0) goto out;
    if (r == 0) { result = Py_NewRef(Py_None); goto out; }
    /* the histogram: count, total, bucketed, and its values with their counts */
    PyObject *values = PyDict_New();
    if (!values) goto out;
    for (Py_ssize_t i = 0; i < c.itl.cap; i++) {
        Slot *s = &c.itl.t[i];
        if (!s->used || !s->count) continue;
        double v;
        memcpy(&v, &s->key, sizeof v);
        PyObject *key = PyFloat_FromDouble(v), *val = PyLong_FromLongLong(s->count);
        if (!key || !val || PyDict_SetItem(values, key, val) < 0) {
            Py_XDECREF(key); Py_XDECREF(val); Py_DECREF(values);
            goto out;
        }
        Py_DECREF(key); Py_DECREF(val);
    }
    PyObject *busy = PyList_New(c.tl_size), *queued = PyList_New(c.tl_size);
    PyObject *counted = PyList_New(c.tl_size);
    if (!busy || !queued || !counted) {
        Py_XDECREF(busy); Py_XDECREF(queued); Py_XDECREF(counted); Py_DECREF(values);
        goto out;
    }
    for (Py_ssize_t i = 0; i < c.tl_size; i++) {
        PyObject *b = PyFloat_FromDouble(c.tl_busy[i]), *q = PyLong_FromLongLong(c.tl_waiting[i]);
        PyObject *k = PyLong_FromLongLong(c.tl_count[i]);
        if (!b || !q || !k) {
            Py_XDECREF(b); Py_XDECREF(q); Py_XDECREF(k);
            Py_DECREF(busy); Py_DECREF(queued); Py_DECREF(counted); Py_DECREF(values);
            goto out;
        }
        PyList_SET_ITEM(busy, i, b);
        PyList_SET_ITEM(queued, i, q);
        PyList_SET_ITEM(counted, i, k);
    }
    result = Py_BuildValue("(L(LdiN)(LddLLLL)(NNN))", (long long)c.free,
                           (long long)c.itl.count, c.itl.total, c.itl.bucketed, values,
                           (long long)c.stat_steps, c.stat_end, c.stat_busy,
                           (long long)c.stat_prefill, (long long)c.stat_decode,
                           (long long)c.stat_used_sum, (long long)c.stat_peak,
                           busy, queued, counted);
out:
    core_free(&c);
    PyBuffer_Release(&arrival); PyBuffer_Release(&prompt); PyBuffer_Release(&output);
    PyBuffer_Release(&order);
    if (ids.buf) PyBuffer_Release(&ids);
    if (r_arrival.buf) PyBuffer_Release(&r_arrival);
    PyBuffer_Release(&r_status); PyBuffer_Release(&r_sched); PyBuffer_Release(&r_token);
    PyBuffer_Release(&r_finish); PyBuffer_Release(&r_gap); PyBuffer_Release(&r_ttft);
    PyBuffer_Release(&r_gen); PyBuffer_Release(&r_hit);
    return result;
}


/* -- format_csv: columns to CSV lines --------------------------------------------------- */
PyDoc_STRVAR(format_csv_doc,
"format_csv(columns, n) -> bytes or None\n\n"
"`n` CSV lines, a cell per column, as csv.writer (minimal quoting, \\n) writes the values\n"
"Python's '%.10g' formats. A column is (kind, values[, names]): 'i' int64 buffer;\n"
"'I' the same, a negative one empty; 'f' float64 buffer, NaN empty; 'F' the same, NaN\n"
"'nan'; 'r' int64 buffer, written r<value>; 'k' int64 codes into the tuple `names`, a\n"
"negative one empty; 's' a list of str or None. None: a text holds a carriage return\n"
"(left to the csv module).");

static PyObject *format_csv(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *columns;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "On", &columns, &n)) return NULL;
    PyObject *cols = PySequence_Fast(columns, "columns must be a sequence");
    if (!cols) return NULL;
    Py_ssize_t m = PySequence_Fast_GET_SIZE(cols);
    Py_buffer *views = PyMem_Calloc(m ? m : 1, sizeof(Py_buffer));
    char *kinds = PyMem_Calloc(m ? m : 1, 1);
    PyObject **lists = PyMem_Calloc(m ? m : 1, sizeof(PyObject *));
    Text t = {0};
    PyObject *result = NULL;
    if (!views || !kinds || !lists) { PyErr_NoMemory(); goto out; }
    for (Py_ssize_t j = 0; j < m; j++) {
        PyObject *spec = PySequence_Fast_GET_ITEM(cols, j);
        const char *kind;
        PyObject *values, *names = NULL;
        if (!PyArg_ParseTuple(spec, "sO|O", &kind, &values, &names)) goto out;
        kinds[j] = kind[0];
        if (!kind[0] || kind[1] || !strchr("iIfFrks", kind[0])) {
            PyErr_Format(PyExc_ValueError, "unknown column kind '%s'", kind);
            goto out;
        }
        if (kind[0] == 's' || kind[0] == 'k') lists[j] = kind[0] == 's' ? values : names;
        if (kind[0] == 's') {
            if (!PyList_Check(values) || PyList_GET_SIZE(values) != n) {
                PyErr_SetString(PyExc_ValueError, "an 's' column needs a list of n texts");
                goto out;
            }
            continue;
        }
        if (kind[0] == 'k' && (!names || !PyTuple_Check(names))) {
            PyErr_SetString(PyExc_ValueError, "a 'k' column needs a tuple of names");
            goto out;
        }
        if (PyObject_GetBuffer(values, &views[j], PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
            goto out;
        const char *format = views[j].format ? views[j].format : "B";
        int is_float = (kind[0] == 'f' || kind[0] == 'F');
        int wrong = is_float ? strcmp(format, "d") != 0
                             : strcmp(format, "q") != 0 && strcmp(format, "l") != 0;
        if (views[j].len != n * 8 || views[j].itemsize != 8 || wrong) {
            PyErr_SetString(PyExc_ValueError,
                            "a column needs n float64 ('f', 'F') or int64 values");
            goto out;
        }
    }
    /* Each row reserves room for its numbers (32 bytes a cell), then writes them unchecked;
     * a text cell reserves its own. */
    for (Py_ssize_t i = 0; i < n; i++) {
        if (text_reserve(&t, 32 * m + 1) < 0) goto out;
        char *o = t.v + t.n;
        for (Py_ssize_t j = 0; j < m; j++) {
            if (j) *o++ = ',';
            char kind = kinds[j];
            if (kind == 'f' || kind == 'F') {
                double x = ((const double *)views[j].buf)[i];
                if (isnan(x) && kind == 'f') continue;
                if (!(o = emit_float(o, x))) goto out;
                continue;
            }
            PyObject *text = NULL;
            if (kind == 's') {
                text = PyList_GET_ITEM(lists[j], i);
                if (text == Py_None) continue;
            } else {
                long long x = ((const int64_t *)views[j].buf)[i];
                if (kind == 'i') { o = emit_int(o, x); continue; }
                if (kind == 'I') { if (x >= 0) o = emit_int(o, x); continue; }
                if (kind == 'r') { *o++ = 'r'; o = emit_int(o, x); continue; }
                if (x < 0) continue;  /* 'k' */
                if (x >= PyTuple_GET_SIZE(lists[j])) {
                    PyErr_SetString(PyExc_IndexError, "a code beyond its names");
                    goto out;
                }
                text = PyTuple_GET_ITEM(lists[j], x);
            }
            Py_ssize_t len;
            const char *utf8 = PyUnicode_AsUTF8AndSize(text, &len);
            if (!utf8) goto out;
            t.n = o - t.v;
            int r = text_cell(&t, utf8, len);
            if (r < 0) goto out;
            if (r == 1) { result = Py_NewRef(Py_None); goto out; }
            if (text_reserve(&t, 32 * (m - j) + 1) < 0) goto out;
            o = t.v + t.n;
        }
        *o++ = '\n';
        t.n = o - t.v;
    }
    result = PyBytes_FromStringAndSize(t.v ? t.v : "", t.n);
out:
    for (Py_ssize_t j = 0; views && j < m; j++) if (views[j].buf) PyBuffer_Release(&views[j]);
    PyMem_Free(views); PyMem_Free(kinds); PyMem_Free(lists); PyMem_Free(t.v);
    Py_DECREF(cols);
    return result;
}

PyDoc_STRVAR(format_runs_doc,
"format_runs(columns, counts) -> bytes\n\n"
"CSV lines of segments (runs of rows): segment i makes counts[i] rows. A column is\n"
"(how, kind, values): how 'S' a value per row, 'E' a value per segment on each of its\n"
"rows, 'C' a value per segment plus the row's place in it (0, 1, ...), 'L' a value per\n"
"segment on its last row and 0 on the others, 'K' the text `values` (bytes) on every\n"
"row; kind 'i' int64, 'F' float64 written '%.10g' (for 'K', ignored).");

typedef struct { uint64_t bits; int len; char text[32]; } Cell;  /* a float and its text */

static PyObject *format_runs(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *columns, *counts_obj;
    if (!PyArg_ParseTuple(args, "OO", &columns, &counts_obj)) return NULL;
    PyObject *cols = PySequence_Fast(columns, "columns must be a sequence");
    if (!cols) return NULL;
    Py_ssize_t m = PySequence_Fast_GET_SIZE(cols), segments = 0, rows = 0;
    Py_buffer counts = {0};
    Py_buffer *views = PyMem_Calloc(m ? m : 1, sizeof(Py_buffer));
    char *hows = PyMem_Calloc(m ? m : 1, 1), *kinds = PyMem_Calloc(m ? m : 1, 1);
    Text t = {0};
    Cell *last = NULL;
    PyObject *result = NULL;
    if (!views || !hows || !kinds) { PyErr_NoMemory(); goto out; }
    if (PyObject_GetBuffer(counts_obj, &counts, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
        goto out;
    if (counts.itemsize != 8 || !counts.format || (strcmp(counts.format, "q")
                                                   && strcmp(counts.format, "l"))) {
        PyErr_SetString(PyExc_ValueError, "counts must be int64");
        goto out;
    }
    segments = counts.len / 8;
    const int64_t *k = counts.buf;
    for (Py_ssize_t i = 0; i < segments; i++) {
        if (k[i] < 0) { PyErr_SetString(PyExc_ValueError, "a negative count"); goto out; }
        rows += k[i];
    }
    for (Py_ssize_t j = 0; j < m; j++) {
        const char *how, *kind;
        PyObject *values;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(cols, j), "ssO", &how, &kind, &values))
            goto out;
        if (!how[0] || how[1] || !strchr("SECLK", how[0]) || !kind[0] || kind[1]
                || !strchr("iF", kind[0])) {
            PyErr_Format(PyExc_ValueError, "unknown column (%s, %s)", how, kind);
            goto out;
        }
        hows[j] = how[0], kinds[j] = kind[0];
        if (PyObject_GetBuffer(values, &views[j], how[0] == 'K' ? PyBUF_SIMPLE
                               : PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
            goto out;
        if (how[0] == 'K') {
            if (views[j].len > 32) {
                PyErr_SetString(PyExc_ValueError, "a constant text past 32 bytes");
                goto out;
            }
            continue;
        }
        const char *format = views[j].format ? views[j].format : "B";
        int wrong = kind[0] == 'F' ? strcmp(format, "d") != 0
                                   : strcmp(format, "q") != 0 && strcmp(format, "l") != 0;
        Py_ssize_t want = how[0] == 'S' ? rows : segments;
        if (wrong || views[j].itemsize != 8 || views[j].len != want * 8) {
            PyErr_SetString(PyExc_ValueError, "a column needs a float64 ('F') or int64 ('i') "
                            "value per row ('S') or per segment");
            goto out;
        }
    }
    Py_ssize_t room = m + 1;  /* a row's most bytes: commas, newline, cells */
    for (Py_ssize_t j = 0; j < m; j++) room += hows[j] == 'K' ? views[j].len : 32;
    /* a float column's latest value and its text: a step's duration mostly repeats */
    last = PyMem_Calloc(m ? m : 1, sizeof *last);
    if (!last) { PyErr_NoMemory(); goto out; }
    Py_ssize_t r = 0;
    for (Py_ssize_t i = 0; i < segments; i++) {
        for (int64_t step = 0; step < k[i]; step++, r++) {
            if (text_reserve(&t, room) < 0) goto out;
            char *o = t.v + t.n;
            for (Py_ssize_t j = 0; j < m; j++) {
                if (j) *o++ = ',';
                char how = hows[j];
                if (how == 'K') {
                    if (views[j].len == 1) *o++ = *(const char *)views[j].buf;
                    else {
                        memcpy(o, views[j].buf, views[j].len);
                        o += views[j].len;
                    }
                    continue;
                }
                Py_ssize_t at = how == 'S' ? r : i;
                if (kinds[j] == 'F') {
                    double x = ((const double *)views[j].buf)[at];
                    if (how == 'L' && step + 1 < k[i]) x = 0.0;
                    uint64_t bits;
                    memcpy(&bits, &x, sizeof bits);
                    Cell *cell = &last[j];
                    if (cell->len && cell->bits == bits) {
                        memcpy(o, cell->text, cell->len);
                        o += cell->len;
                        continue;
                    }
                    char *start = o;
                    if (!(o = emit_float(o, x))) goto out;
                    cell->bits = bits;
                    cell->len = (int)(o - start);
                    memcpy(cell->text, start, cell->len);
                    continue;
                }
                long long x = ((const int64_t *)views[j].buf)[at];
                if (how == 'C')  /* (wraps past 2**63 rather than overflow: never in a run) */
                    x = (long long)((unsigned long long)x + (unsigned long long)step);
                else if (how == 'L' && step + 1 < k[i]) x = 0;
                o = emit_int(o, x);
            }
            *o++ = '\n';
            t.n = o - t.v;
        }
    }
    result = PyBytes_FromStringAndSize(t.v ? t.v : "", t.n);
out:
    for (Py_ssize_t j = 0; views && j < m; j++) if (views[j].buf) PyBuffer_Release(&views[j]);
    if (counts.buf) PyBuffer_Release(&counts);
    PyMem_Free(views); PyMem_Free(hows); PyMem_Free(kinds); PyMem_Free(t.v); PyMem_Free(last);
    Py_DECREF(cols);
    return result;
}

/* -- a plainly clean CSV trace, as pyarrow reads it ---------------------------------------
 * A strict subset of what pyarrow.csv reads, so that whatever this accepts pyarrow reads to
 * the same numbers: printable ASCII without quotes, lines ending in \n or \r\n, no empty
 * line but a final one, no line past MAX_LINE, every row as many fields as the header. A
 * wanted number column holds plain integers ("-"? and at most 18 digits, no leading zero),
 * which pyarrow infers as int64; a wanted time column holds "YYYY-MM-DD HH:MM:SS[.fraction]"
 * (or a T), a valid date from 1900 to 2199 and at most 9 fraction digits, which it infers
 * as a zone-less timestamp: here its nanoseconds since 1970. Anything else is None, and
 * kvsched.workload.trace_csv asks pyarrow. */

/* pyarrow reads in blocks of 1 MiB and refuses a row longer than one: lines past this
 * are left to it (and then to pandas). */
#define MAX_LINE (1 << 16)

static int64_t days_from_civil(int64_t y, int64_t m, int64_t d) {
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static int digits_at(const char *s, int n, int64_t *out) {
    int64_t v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return 0;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 1;
}

/* The cell [s, e) as an integer (1) or not (0). */
static int cell_int(const char *s, const char *e, int64_t *out) {
    int negative = s < e && *s == '-';
    if (negative) s++;
    Py_ssize_t n = e - s;
    if (n < 1 || n > 18 || (n > 1 && *s == '0') || (negative && n == 1 && *s == '0')) return 0;
    int64_t v;
    if (!digits_at(s, (int)n, &v)) return 0;
    *out = negative ? -v : v;
    return 1;
}

/* The cell [s, e) as a time stamp in nanoseconds since 1970 (1) or not (0). */
static int cell_stamp(const char *s, const char *e, int64_t *out) {
    Py_ssize_t n = e - s;
    if (n < 19 || s[4] != '-' || s[7] != '-' || (s[10] != ' ' && s[10] != 'T')
            || s[13] != ':' || s[16] != ':')
        return 0;
    int64_t y, mo, d, h, mi, sec, fraction = 0;
    if (!digits_at(s, 4, &y) || !digits_at(s + 5, 2, &mo) || !digits_at(s + 8, 2, &d)
            || !digits_at(s + 11, 2, &h) || !digits_at(s + 14, 2, &mi)
            || !digits_at(s + 17, 2, &sec))
        return 0;
    static const int DAYS[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    if (y < 1900 || y > 2199 || mo < 1 || mo > 12 || d < 1
            || d > DAYS[mo - 1] + (mo == 2 && leap) || h > 23 || mi > 59 || sec > 59)
        return 0;
    if (n > 19) {
        int places = (int)(n - 20);
        if (s[19] != '.' || places < 1 || places > 9 || !digits_at(s + 20, places, &fraction))
            return 0;
        for (int i = places; i < 9; i++) fraction *= 10;
    }
    *out = ((days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec) * 1000000000LL
            + fraction);
    return 1;
}

PyDoc_STRVAR(read_csv_doc,
"read_csv(data, wanted, kinds) -> tuple of int64 buffers (bytes), or None\n\n"
"The columns named in `wanted` of the CSV text `data` when it is plainly clean, each as\n"
"int64 values: integers for kind 'n', nanoseconds since 1970 for kind 't'.");

static PyObject *read_csv(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer data;
    PyObject *wanted;
    const char *kinds;
    if (!PyArg_ParseTuple(args, "y*O!s", &data, &PyTuple_Type, &wanted, &kinds)) return NULL;
    Py_ssize_t w = PyTuple_GET_SIZE(wanted), fields = 0, rows = 0;
    PyObject *result = NULL;
    Py_ssize_t *where = PyMem_Calloc(w ? w : 1, sizeof(Py_ssize_t));
    Py_ssize_t *of_field = NULL;
    Vec *values = PyMem_Calloc(w ? w : 1, sizeof(Vec));
    if (!where || !values) { PyErr_NoMemory(); goto out; }
    if ((Py_ssize_t)strlen(kinds) != w) {
        PyErr_SetString(PyExc_ValueError, "one kind per wanted column");
        goto out;
    }
    const char *p = data.buf, *end = p + data.len;
    for (const char *c = p; c < end; c++)  /* printable ASCII, no quote, \r only in \r\n */
        if (*c == '"' || (*c != '\n' && (*c < 0x20 || *c > 0x7e)
                          && !(*c == '\r' && c + 1 < end && c[1] == '\n')))
            goto clean_no;
    /* The header: each wanted name exactly once, no empty name. */
    for (Py_ssize_t k = 0; k < w; k++) {
        where[k] = -1;
        for (Py_ssize_t q = 0; q < k; q++)
            if (PyUnicode_Compare(PyTuple_GET_ITEM(wanted, k), PyTuple_GET_ITEM(wanted, q)) == 0) {
                PyErr_SetString(PyExc_ValueError, "a column wanted twice");
                goto out;
            }
        if (PyErr_Occurred()) goto out;
    }
    const char *line_end = memchr(p, '\n', end - p);
    if (!line_end) goto clean_no;
    const char *stop = line_end > p && line_end[-1] == '\r' ? line_end - 1 : line_end;
    if (stop - p > MAX_LINE) goto clean_no;
    for (const char *f = p;; fields++) {
        const char *comma = memchr(f, ',', stop - f);
        const char *fe = comma ? comma : stop;
        if (fe == f) goto clean_no;
        for (Py_ssize_t k = 0; k < w; k++) {
            Py_ssize_t len;
            const char *name = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(wanted, k), &len);
            if (!name) goto out;
            if (len == fe - f && !memcmp(name, f, len)) {
                if (where[k] >= 0) goto clean_no;
                where[k] = fields;
            }
        }
        if (!comma) { fields++; break; }
        f = comma + 1;
    }
    for (Py_ssize_t k = 0; k < w; k++) if (where[k] < 0) goto clean_no;
    of_field = PyMem_Malloc(fields * sizeof(Py_ssize_t));
    if (!of_field) { PyErr_NoMemory(); goto out; }
    for (Py_ssize_t j = 0; j < fields; j++) of_field[j] = -1;
    for (Py_ssize_t k = 0; k < w; k++) of_field[where[k]] = k;
    /* The rows. */
    for (p = line_end + 1; p < end; p = line_end + 1, rows++) {
        line_end = memchr(p, '\n', end - p);
        if (!line_end) line_end = end;
        stop = line_end > p && line_end[-1] == '\r' ? line_end - 1 : line_end;
        if (stop == p || stop - p > MAX_LINE) goto clean_no;  /* empty, or past MAX_LINE */
        const char *f = p;
        for (Py_ssize_t j = 0; j < fields; j++) {
            const char *comma = memchr(f, ',', stop - f);
            if ((j + 1 < fields) != (comma != NULL)) goto clean_no;  /* too few or many */
            const char *fe = comma ? comma : stop;
            if (of_field[j] >= 0) {
                Py_ssize_t k = of_field[j];
                int64_t v;
                if (!(kinds[k] == 't' ? cell_stamp(f, fe, &v) : cell_int(f, fe, &v)))
                    goto clean_no;
                if (vec_push(&values[k], v) < 0) goto out;
            }
            f = fe + 1;
        }
    }
    if (!rows) goto clean_no;
    result = PyTuple_New(w);
    if (!result) goto out;
    for (Py_ssize_t k = 0; k < w; k++) {
        PyObject *column = PyBytes_FromStringAndSize((const char *)values[k].v,
                                                     values[k].n * (Py_ssize_t)sizeof(int64_t));
        if (!column) { Py_CLEAR(result); goto out; }
        PyTuple_SET_ITEM(result, k, column);
    }
    goto out;
clean_no:
    result = Py_NewRef(Py_None);
out:
    for (Py_ssize_t k = 0; values && k < w; k++) PyMem_Free(values[k].v);
    PyMem_Free(values); PyMem_Free(where); PyMem_Free(of_field);
    PyBuffer_Release(&data);
    return result;
}

static PyMethodDef methods[] = {
    {"run", core_run, METH_VARARGS, run_doc},
    {"format_csv", format_csv, METH_VARARGS, format_csv_doc},
    {"format_runs", format_runs, METH_VARARGS, format_runs_doc},
    {"read_csv", read_csv, METH_VARARGS, read_csv_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "kvsched._fastcore",
    "kvsched's first engine in C, for the runs kvsched.fastcore sends it.", -1, methods,
};

PyMODINIT_FUNC PyInit__fastcore(void) { return PyModule_Create(&module); }
