// SPDX-License-Identifier: MIT
/*
 * jitring._jitring: perf profiling of Python functions through libjitring,
 * for CPython >= 3.12, GIL and free-threaded builds, without an interpreter
 * patch.
 *
 * A PEP 523 eval-frame function calls every code object through its own
 * copy of the runtime kit's built-in trampoline, described to perf as
 * "py::<co_qualname>:<co_filename>" (CPython's own perf trampoline names),
 * so perf names the Python function on every sample taken inside it, and
 * --call-graph dwarf unwinds through the copy with the CFI the kit writes.
 *
 * The copy of each code object is cached in a map keyed by the code
 * object's address (see "Code map" below): lock-free lookups on every call,
 * a shard mutex only to claim a code object's copy and publish it (once
 * each per code object and session) and when one is destroyed, and
 * exactly one copy (one CODE_LOAD) per code object and session however many
 * threads enter it at once.  PyUnstable_Code_SetExtra() is not used:
 * it reallocates co_extra without a lock, so two threads entering the same
 * new code object race on it under free threading.
 *
 * A session is one start() .. stop(): one writer (jit-<pid>.dump) and one
 * tag.  Map values carry the tag of the session that described them, so a
 * later session (or a fork child, which gets its own dump) never trusts a
 * copy described in another session's dump.
 *
 * What outlives sessions, made once per process and never given back (a
 * thread may still run in a copy after stop(), and CPython's code watcher
 * registry may not be changed while other threads fire it):
 *  - the trampoline set, handed to each new session's writer
 *    (jitring_trampolines_rebind());
 *  - the copies: a code object keeps its copy from session to session (a
 *    new session describes it again in its own dump,
 *    jitring_trampolines_reuse_parts()), and the copy of a destroyed code
 *    object goes to the free list for the next new one, so the
 *    copies in use never exceed the code objects alive at once;
 *  - the code watcher, which keeps the map and the free list right
 *    whether or not a session runs.
 * So a process that starts and stops profiling thousands of times keeps
 * the address space, mappings and descriptors of its first session.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <sys/mman.h>
#include <unistd.h>

#include <jitring.h>

#include "codemap.h"

#if PY_VERSION_HEX < 0x030C0000
#error "jitring needs CPython 3.12 or later (PEP 523 frame API, code watchers)"
#endif

/* likely(), unlikely() and COLD come with codemap.h. */

#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield" ::: "memory")
#else
#define cpu_relax() do { } while (0)
#endif

/* The built-in trampoline: calls its 4th argument with the first three. */
typedef PyObject *(*trampoline_fn)(PyThreadState *,
				   struct _PyInterpreterFrame *, int,
				   _PyFrameEvalFunction);

/* ------------------------------------------------------------------ */
/* Linked frame records ($JITRING_FP_LINK=1, x86_64).                   */

/*
 * perf's kernel unwinder follows the frame-pointer chain for at most
 * kernel.perf_event_max_stack (127) entries, and every Python call puts
 * several native frames on it (the caller's _PyEval_EvalFrameDefault,
 * CPython's call path, the trampoline), so deep programs are cut.  The
 * linked trampoline gives the kernel one entry per Python frame.  Each
 * copy keeps a record {link, its own return site} on its frame and calls
 * the function with %rbp = link, where link is the record of the
 * enclosing Python call of this thread if one is live, else the copy's
 * own ordinary frame record {caller's %rbp, return address} (push %rbp).
 * The callee (_PyEval_EvalFrameDefault) saves that %rbp in its frame, so
 * the kernel goes from the callee's return address (this copy) to the
 * enclosing copy's return site, then to its enclosing one, and from the
 * outermost on down its native callers.  The native frames inside the
 * innermost Python frame stay on the chain; those between two Python
 * frames (a builtin calling a key function, a C extension calling back)
 * do not.  The real saved %rbp and return address stay where the CFI
 * says (CFA-16, CFA-8), so DWARF unwinders see today's stack.
 *
 * fp_link (initial-exec TLS, its %fs offset baked into the copies) holds
 * the innermost live record.  A copy replaces it with its own and, on
 * return, puts back its record's link, or 0 where the link was its own
 * frame record: LIFO through nesting, generators and re-entry from C.
 * The copy never dereferences fp_link: a record left behind by a frame
 * unwound without the epilogue (longjmp, a greenlet switch) only makes
 * the chain wrong, never the program, and one at or below %rsp (dead for
 * sure) is not linked to.
 *
 * Frame at the call (CFA = %rsp + 32): the record {link, ip} at %rsp,
 * the caller's %rbp at CFA-16, the return address at CFA-8.
 *
 *   0x00 push %rbp                 0x2a mov %rsp,%fs:REC
 *   0x01 sub $16,%rsp              0x33 mov %rax,%rbp
 *   0x05 mov %fs:REC,%rax          0x36 call *%rcx
 *   0x0e lea 16(%rsp),%r8          0x38 mov (%rsp),%rdx
 *   0x13 cmp %rsp,%rax             0x3c lea 16(%rsp),%rcx
 *   0x16 cmovbe %r8,%rax           0x41 xor %esi,%esi
 *   0x1a mov %rax,(%rsp)           0x43 cmp %rcx,%rdx
 *   0x1e lea 0x38(%rip),%r8        0x46 cmove %rsi,%rdx
 *   0x25 mov %r8,8(%rsp)           0x4a mov %rdx,%fs:REC
 *                                  0x53 add $16,%rsp; 0x57 pop %rbp
 *                                  0x58 ret
 * then 8 bytes of salt room (int3).
 */
#if defined(__x86_64__)
/* The innermost live record of this thread, or 0. */
static __thread uintptr_t fp_link __attribute__((tls_model("initial-exec")));

#define FPL_SIZE 0x59
/* Where the 32-bit %fs displacement of fp_link goes. */
static const uint8_t fpl_rec_at[] = { 0x0a, 0x2f, 0x4f };

/* clang-format off */
static const uint8_t fpl_code[FPL_SIZE + 8] = {
	0x55, 0x48, 0x83, 0xec, 0x10,
	0x64, 0x48, 0x8b, 0x04, 0x25, 0, 0, 0, 0,
	0x4c, 0x8d, 0x44, 0x24, 0x10,
	0x48, 0x39, 0xe0,
	0x49, 0x0f, 0x46, 0xc0,
	0x48, 0x89, 0x04, 0x24,
	0x4c, 0x8d, 0x05, 0x13, 0x00, 0x00, 0x00,
	0x4c, 0x89, 0x44, 0x24, 0x08,
	0x64, 0x48, 0x89, 0x24, 0x25, 0, 0, 0, 0,
	0x48, 0x89, 0xc5,
	0xff, 0xd1,
	0x48, 0x8b, 0x14, 0x24,
	0x48, 0x8d, 0x4c, 0x24, 0x10,
	0x31, 0xf6,
	0x48, 0x39, 0xca,
	0x48, 0x0f, 0x44, 0xd6,
	0x64, 0x48, 0x89, 0x14, 0x25, 0, 0, 0, 0,
	0x48, 0x83, 0xc4, 0x10,
	0x5d,
	0xc3,
	0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc,
};
/* clang-format on */

/* DWARF: rbp 6, rsp 7, return address 16. */
static const struct jitring_cfi_op fpl_ops[] = {
	{ 0, JITRING_CFI_DEF_CFA, 7, 8 },
	{ 0, JITRING_CFI_OFFSET, 16, -8 },
	{ 0x01, JITRING_CFI_DEF_CFA_OFFSET, 0, 16 },
	{ 0x01, JITRING_CFI_OFFSET, 6, -16 },
	{ 0x05, JITRING_CFI_DEF_CFA_OFFSET, 0, 32 },
	{ 0x57, JITRING_CFI_DEF_CFA_OFFSET, 0, 16 },
	{ 0x58, JITRING_CFI_DEF_CFA_OFFSET, 0, 8 },
	{ 0x58, JITRING_CFI_RESTORE, 6, 0 },
};

static const struct jitring_cfi fpl_cfi = {
	.code_align = 1,
	.data_align = -8,
	.ra_reg = 16,
	.nr_init = 2,
	.nr_ops = sizeof(fpl_ops) / sizeof(fpl_ops[0]),
	.ops = fpl_ops,
};

static uint8_t fpl_bytes[sizeof(fpl_code)];

static void put_disp(uint8_t *at, int32_t d)
{
	memcpy(at, &d, sizeof(d));
}

/*
 * The linked template into @tt, its %fs displacements those of fp_link
 * (the same in every thread: static TLS).  0, or -ERANGE where they do
 * not fit in 32 bits.
 */
static int fp_link_template(struct jitring_trampoline_template *tt)
{
	uintptr_t tp;
	intptr_t off;
	size_t i;

	__asm__("mov %%fs:0, %0" : "=r"(tp));
	off = (intptr_t)((uintptr_t)&fp_link - tp);
	if (off < INT32_MIN || off > INT32_MAX)
		return -ERANGE;
	memcpy(fpl_bytes, fpl_code, sizeof(fpl_code));
	for (i = 0; i < sizeof(fpl_rec_at); i++)
		put_disp(fpl_bytes + fpl_rec_at[i], (int32_t)off);
	memset(tt, 0, sizeof(*tt));
	tt->struct_size = sizeof(*tt);
	tt->code_size = sizeof(fpl_bytes);
	tt->code = fpl_bytes;
	tt->cfi = &fpl_cfi;
	tt->salt_offset = FPL_SIZE;
	return 0;
}
#else
static int fp_link_template(struct jitring_trampoline_template *tt)
{
	(void)tt;
	return -EOPNOTSUPP;
}
#endif

/* Whether the process's set is the linked one (made once, see start()). */
static int proc_tr_linked;

/* ------------------------------------------------------------------ */
/* Counters of the module itself (stats() reports them with "py_").     */

struct py_counters {
	_Atomic uint64_t copies;	/* copies made and cached */
	_Atomic uint64_t copy_waits;	/* ring-full waits (thread state released) */
	_Atomic uint64_t copy_drops;	/* gave up after the bounded wait */
	_Atomic uint64_t copy_errors;	/* copies refused for good this session */
	_Atomic uint64_t pending_races;	/* ran unnamed: another thread was
					 * making the same code object's copy */
	_Atomic uint64_t copies_reused;	/* copies described again (a new
					 * session, or a new code object) */
};

static struct py_counters pyc;

static inline void count(_Atomic uint64_t *c)
{
	atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

/* ------------------------------------------------------------------ */
/* Sessions.                                                            */

/*
 * Value layout of a map slot: the session tag in the top 16 bits, the
 * copy's address (or VAL_PENDING / VAL_FAILED) in the low 48.  Trampoline
 * arenas come from mmap(2) without a hint, below 2^47 on x86_64 and 2^48 on
 * aarch64 (4-level tables; 52-bit aarch64 only hands out high addresses on
 * request).  A copy above 2^48 is refused and counted as an error.
 */
#define TAG_SHIFT 48
#define ADDR_MASK ((UINT64_C(1) << TAG_SHIFT) - 1)
#define VAL_PENDING UINT64_C(1)
#define VAL_FAILED UINT64_C(2)

struct session {
	struct jitring *jr;
	struct jitring_trampolines *tr;
	uint64_t tag;		/* 1..0xffff: set before the session is
				 * published, changed only in a fork child */
	int engine;
};

/* The process's trampoline set (see above); under state_mu.  Its copies'
 * addresses stay valid for the life of the process. */
static struct jitring_trampolines *proc_tr;
/* The code watcher's id, -1 until the first start(); under state_mu. */
static int watcher_id = -1;

/* The running session, NULL when inactive.  Written under state_mu. */
static struct session *_Atomic cur_session;
/* The last session started (stats() after stop()).  Under state_mu. */
static struct session *last_session;
/* Next session tag; under state_mu, or in a fork child (one thread). */
static uint64_t next_tag = 1;
/* Serialises start, stop and stats against each other. */
static pthread_mutex_t state_mu = PTHREAD_MUTEX_INITIALIZER;

static uint64_t take_tag(void)
{
	uint64_t t = next_tag++;

	if (next_tag > 0xffff)	/* wraps: see docs (an old copy may be
				 * reused, never a wrong name in the dump) */
		next_tag = 1;
	return t;
}

/*
 * Wait for state_mu without holding the thread state: the holder may need
 * it back (a stop-the-world, or the GIL) before it can unlock.
 */
static void state_lock(void)
{
	if (pthread_mutex_trylock(&state_mu) == 0)
		return;
	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&state_mu);
	Py_END_ALLOW_THREADS
}

static void state_unlock(void)
{
	pthread_mutex_unlock(&state_mu);
}

/* ------------------------------------------------------------------ */
/* Code map (codemap.h).                                                */

/*
 * Code watcher, registered once for the life of the process: forget a
 * code object before its memory is freed, and keep its copy for the next.
 */
static int code_watcher(PyCodeEvent ev, PyCodeObject *co)
{
	uint64_t v;

	if (ev != PY_CODE_EVENT_DESTROY)
		return 0;
	/* Nobody else can insert this key now: nobody else holds the
	 * object.  A copy (of any session): nobody calls this code again.
	 * PENDING cannot be here: its maker runs this code. */
	if (map_forget((uintptr_t)co, &v) && (v & ADDR_MASK) > VAL_FAILED)
		free_push((void *)(uintptr_t)(v & ADDR_MASK));
	return 0;
}

/* ------------------------------------------------------------------ */
/* Making a copy.                                                       */

/*
 * The name, "py::<co_qualname>:<co_filename>", goes to the library in four
 * pieces (jitring_trampolines_get_parts()), copied straight into the
 * record: the two strings' UTF-8 is used where it is, nothing is formatted.
 */
#define NAME_PARTS 4

/*
 * @s's UTF-8 into @out, without copying: a compact ASCII string's UTF-8 is
 * its data, and PyUnicode_AsUTF8AndSize() returns that (it cannot fail for
 * one); other strings get their cached UTF-8, made on first use.  A string
 * without UTF-8 (lone surrogates, e.g. an undecodable path) is encoded
 * with backslashreplace into *@tmp, which the caller releases.  An
 * exception already set (a frame entered with throwflag) is kept.
 */
static void utf8_piece(PyObject *s, struct jitring_str *out, PyObject **tmp)
{
	PyObject *exc;
	Py_ssize_t len;
	const char *u;

	*tmp = NULL;
	if (likely(s && PyUnicode_Check(s) && PyUnicode_IS_ASCII(s))) {
		u = PyUnicode_AsUTF8AndSize(s, &len);
		if (likely(u)) {
			out->ptr = u;
			out->len = (size_t)len;
			return;
		}
	}
	exc = PyErr_GetRaisedException();
	u = NULL;
	if (s && PyUnicode_Check(s)) {
		u = PyUnicode_AsUTF8AndSize(s, &len);
		if (!u) {
			PyErr_Clear();
			*tmp = PyUnicode_AsEncodedString(s, "utf-8",
							 "backslashreplace");
			if (*tmp) {
				u = PyBytes_AS_STRING(*tmp);
				len = PyBytes_GET_SIZE(*tmp);
			} else {
				PyErr_Clear();
			}
		}
	}
	if (!u) {
		u = "?";
		len = 1;
	}
	PyErr_SetRaisedException(exc);
	out->ptr = u;
	out->len = (size_t)len;
}

/* Cut @p to at most @max bytes, not inside a UTF-8 sequence. */
static void utf8_cut(struct jitring_str *p, size_t max)
{
	size_t n = max;

	if (p->len <= max)
		return;
	/* Back to the start of the sequence that byte n belongs to. */
	while (n > 0 && ((unsigned char)p->ptr[n] & 0xc0) == 0x80)
		n--;
	p->len = n;
}

/* The pieces of @co's name, at most JITRING_NAME_MAX bytes in all (the
 * file name is cut first, then the qualified name). */
static void name_parts(PyCodeObject *co, struct jitring_str p[NAME_PARTS],
		       PyObject *tmp[2])
{
	size_t fixed = 5;	/* "py::" and ":" */

	p[0].ptr = "py::";
	p[0].len = 4;
	utf8_piece(co->co_qualname, &p[1], &tmp[0]);
	p[2].ptr = ":";
	p[2].len = 1;
	utf8_piece(co->co_filename, &p[3], &tmp[1]);
	if (unlikely(fixed + p[1].len + p[3].len > JITRING_NAME_MAX)) {
		utf8_cut(&p[1], JITRING_NAME_MAX - fixed);
		utf8_cut(&p[3], JITRING_NAME_MAX - fixed - p[1].len);
	}
}

/*
 * The escape of the character at @s[0] (@n bytes left in its piece) into
 * @esc, as jitring._flame.escape() writes it: a control character (C0,
 * DEL, C1, which is C2 80..C2 9F in UTF-8) as \t \n \r or \xNN, and
 * U+2028/U+2029 (E2 80 A8/A9) as \u2028/\u2029.  Returns the escape's
 * length and its UTF-8 length in *@used, or 0 for a character kept.
 */
static size_t escape_char(const unsigned char *s, size_t n, char esc[8],
			  size_t *used)
{
	unsigned int c;

	if (s[0] < 0x20 || s[0] == 0x7f) {
		c = s[0];
		*used = 1;
	} else if (s[0] == 0xc2 && n >= 2 && s[1] >= 0x80 && s[1] <= 0x9f) {
		c = s[1];
		*used = 2;
	} else if (s[0] == 0xe2 && n >= 3 && s[1] == 0x80 &&
		   (s[2] == 0xa8 || s[2] == 0xa9)) {
		*used = 3;
		return (size_t)snprintf(esc, 8, "\\u%04x",
					s[2] == 0xa8 ? 0x2028u : 0x2029u);
	} else {
		return 0;
	}
	if (c == '\t' || c == '\n' || c == '\r') {
		esc[0] = '\\';
		esc[1] = c == '\t' ? 't' : c == '\n' ? 'n' : 'r';
		return 2;
	}
	return (size_t)snprintf(esc, 8, "\\x%02x", c);
}

/* Whether a piece of @p holds a character escape_char() escapes. */
static bool name_needs_escape(const struct jitring_str *p)
{
	for (unsigned int i = 0; i < NAME_PARTS; i++) {
		const unsigned char *s = (const unsigned char *)p[i].ptr;

		for (size_t j = 0; j < p[i].len; j++) {
			if (unlikely(s[j] < 0x20 || s[j] == 0x7f ||
				     s[j] == 0xc2 || s[j] == 0xe2))
				return true;
		}
	}
	return false;
}

/* The length of the UTF-8 sequence that starts with byte @b. */
static size_t utf8_len(unsigned char b)
{
	if (b < 0xc0)
		return 1;
	return b < 0xe0 ? 2 : b < 0xf0 ? 3 : 4;
}

/*
 * A name is data: perf script prints it as the dump holds it, one line
 * per frame, so a newline in it would forge lines of its own (samples,
 * processes), and a terminal acts on ESC and BEL.  A name with such a
 * character (NUL too, which the library refuses: -EINVAL) is given in
 * one piece, each escaped by escape_char(), cut to JITRING_NAME_MAX bytes
 * between two characters.  @buf has room for JITRING_NAME_MAX bytes.
 */
static COLD size_t name_escaped(const struct jitring_str *p, char *buf)
{
	size_t n = 0, used, k;
	char esc[8];

	for (unsigned int i = 0; i < NAME_PARTS; i++) {
		const unsigned char *s = (const unsigned char *)p[i].ptr;

		for (size_t j = 0; j < p[i].len; j += used) {
			k = escape_char(s + j, p[i].len - j, esc, &used);
			if (!k) {
				/* A whole UTF-8 sequence, never half. */
				used = utf8_len(s[j]);
				if (used > p[i].len - j)
					used = p[i].len - j;
				memcpy(esc, s + j, used);
				k = used;
			}
			if (n + k > JITRING_NAME_MAX)
				return n;
			memcpy(buf + n, esc, k);
			n += k;
		}
	}
	return n;
}

/*
 * The mutex yardstick (engine="mutex"): the design the benchmark measures
 * against, and that of CPython's own perf trampolines made thread-safe,
 * is ONE process-wide lock around the whole copy acquisition: allocating
 * the trampoline and writing its records.  So with the mutex engine each
 * jitring_trampolines_get_parts() call runs under this lock, a
 * PyThread_type_lock taken with the thread state held, like the map_lock
 * of CPython's perf_jit_trampoline.c.  (The library's mutex engine itself
 * locks only the write; the kit's allocation is lock-free for both
 * engines.)  The rings engine takes no process-wide lock.
 */
static PyThread_type_lock design_lock;

/*
 * A full ring (JITRING_F_DROP gives -EAGAIN) is waited on with the thread
 * state released, in sleeps growing from 20 us to 1 ms, for at most
 * COPY_WAIT_NS; then the call runs without a named frame and a later call
 * of the same code object tries again.
 */
#define COPY_WAIT_NS (50 * 1000 * 1000L)

enum copy_result { COPY_OK, COPY_RETRY, COPY_FAILED };

/*
 * Test hook: $JITRING_PY_TEST_COPY_DELAY_US, read by start(), makes every
 * copy take that long (thread state released), so that tests can make
 * other threads find a copy in the making.  0 (unset) in normal use.
 */
static long copy_delay_ns;

/* A copy of @s's set named by @p: @reuse described again, or a new one. */
static int64_t set_copy(struct session *s, const struct jitring_str *p,
			unsigned int n, void *reuse, void **addr)
{
	int64_t r;

	if (reuse) {
		r = jitring_trampolines_reuse_parts(s->tr, reuse, p, n);
		if (r > 0)
			*addr = reuse;
		return r;
	}
	return jitring_trampolines_get_parts(s->tr, p, n, addr);
}

static int64_t get_copy(struct session *s, const struct jitring_str *p,
			unsigned int n, void *reuse, void **addr)
{
	int64_t r;

	if (s->engine != JITRING_ENGINE_MUTEX)
		return set_copy(s, p, n, reuse, addr);
	PyThread_acquire_lock(design_lock, WAIT_LOCK);
	r = set_copy(s, p, n, reuse, addr);
	PyThread_release_lock(design_lock);
	return r;
}

/*
 * Describe @co's copy in @s's dump: *@reuse (a copy made earlier, or
 * NULL) described again, else a new one.  *@reuse is set to NULL once it
 * is used, or dropped as not a copy of the current set (one made before
 * a set was replaced); what is left there is the caller's to keep.
 */
static COLD enum copy_result make_copy(struct session *s, PyCodeObject *co,
				       void **addr, void **reuse)
{
	struct jitring_str p[NAME_PARTS], one;
	const struct jitring_str *pp = p;
	unsigned int np = NAME_PARTS;
	char buf[JITRING_NAME_MAX];
	PyObject *tmp[2];
	long waited = 0, delay = 20 * 1000;
	enum copy_result res = COPY_OK;
	struct timespec ts;
	int64_t r;

	if (unlikely(copy_delay_ns)) {
		ts.tv_sec = copy_delay_ns / 1000000000L;
		ts.tv_nsec = copy_delay_ns % 1000000000L;
		Py_BEGIN_ALLOW_THREADS
		nanosleep(&ts, NULL);
		Py_END_ALLOW_THREADS
	}
	name_parts(co, p, tmp);
	if (unlikely(name_needs_escape(p))) {
		one.ptr = buf;
		one.len = name_escaped(p, buf);
		pp = &one;
		np = 1;
	}
	for (;;) {
		r = get_copy(s, pp, np, *reuse, addr);
		if (r > 0)
			break;
		if (r == -EINVAL && *reuse) {
			/* The name is fine: the copy is not this set's. */
			*reuse = NULL;
			continue;
		}
		if (r != -EAGAIN && r != -EDEADLK) {
			count(&pyc.copy_errors);
			res = COPY_FAILED;
			goto out;
		}
		if (waited >= COPY_WAIT_NS) {
			count(&pyc.copy_drops);
			res = COPY_RETRY;
			goto out;
		}
		count(&pyc.copy_waits);
		ts.tv_sec = 0;
		ts.tv_nsec = delay;
		Py_BEGIN_ALLOW_THREADS
		nanosleep(&ts, NULL);
		Py_END_ALLOW_THREADS
		waited += delay;
		if (delay < 1000 * 1000)
			delay *= 2;
	}
	if (*reuse) {
		*reuse = NULL;
		count(&pyc.copies_reused);
	} else if ((uintptr_t)*addr & ~(uintptr_t)ADDR_MASK) {
		count(&pyc.copy_errors);
		res = COPY_FAILED;
		goto out;
	} else {
		count(&pyc.copies);
	}
out:
	Py_XDECREF(tmp[0]);
	Py_XDECREF(tmp[1]);
	return res;
}

/*
 * A thread that finds another making the copy spins briefly, then yields,
 * then runs this call unnamed: it never waits without bound while holding
 * its thread state.
 */
#define PENDING_SPINS 256
#define PENDING_YIELDS 64

/* Make @co's copy (the claim is ours: its value is @tag | VAL_PENDING),
 * reusing @reuse if not NULL, and publish it, or what became of it. */
static COLD void *copy_publish(struct session *s, PyObject *co,
			       struct shard *sh, uint64_t h, uint64_t tag,
			       void *reuse)
{
	uintptr_t key = (uintptr_t)co;
	enum copy_result res;
	void *addr = NULL;
	struct slot *sl;
	uint64_t v;

	res = make_copy(s, (PyCodeObject *)co, &addr, &reuse);
	if (res == COPY_OK)
		v = tag | (uint64_t)(uintptr_t)addr;
	else if (res == COPY_RETRY)
		v = 0;		/* unclaimed: the next call tries again */
	else
		v = tag | VAL_FAILED;
	pthread_mutex_lock(&sh->mu);
	if (reuse)	/* not used: for the next new code object */
		free_push(reuse);
	/* Found again (a rehash may have moved it), and only if the claim is
	 * still ours: a session started since then may have claimed it. */
	sl = shard_slot(sh, key, h, false);
	if (sl && atomic_load_explicit(&sl->val, memory_order_relaxed) ==
			  (tag | VAL_PENDING))
		/* Pairs with the acquire load in map_get(): the copy (handed
		 * to us by the kit, already executable) before its address. */
		atomic_store_explicit(&sl->val, v, memory_order_release);
	else if (res == COPY_OK)	/* ours alone: keep it for another */
		free_push(addr);
	pthread_mutex_unlock(&sh->mu);
	return res == COPY_OK ? addr : NULL;
}

/* The slow path of a call: @co has no copy of this session yet, or one is
 * being made. */
static COLD void *code_copy(struct session *s, PyObject *co, uint64_t v)
{
	const uint64_t tag = s->tag << TAG_SHIFT;
	uintptr_t key = (uintptr_t)co;
	uint64_t h = key_hash(key);
	struct shard *sh = key_shard(h);
	unsigned int waits = 0;
	struct slot *sl;

	/* Already this session's (failed, or another thread making it):
	 * nothing to insert or claim, so no lock. */
	if ((v & ~ADDR_MASK) == tag)
		goto wait;
	pthread_mutex_lock(&sh->mu);
	sl = shard_slot(sh, key, h, true);
	if (!sl) {
		pthread_mutex_unlock(&sh->mu);
		count(&pyc.copy_errors);
		return NULL;
	}
	v = atomic_load_explicit(&sl->val, memory_order_relaxed);
	if ((v & ~ADDR_MASK) != tag) {
		/* Unclaimed, or another session's: ours to make, with the
		 * copy an earlier session made for this code object, else one
		 * a destroyed code object left.  Relaxed: a reader that sees
		 * PENDING does nothing with it. */
		void *reuse = (v & ADDR_MASK) > VAL_FAILED ?
				      (void *)(uintptr_t)(v & ADDR_MASK) :
				      free_pop();

		atomic_store_explicit(&sl->val, tag | VAL_PENDING,
				      memory_order_relaxed);
		pthread_mutex_unlock(&sh->mu);
		return copy_publish(s, co, sh, h, tag, reuse);
	}
	pthread_mutex_unlock(&sh->mu);
wait:
	for (;;) {
		if ((v & ~ADDR_MASK) != tag)	/* given back, or a new session */
			return NULL;
		if ((v & ADDR_MASK) > VAL_FAILED)
			return (void *)(uintptr_t)(v & ADDR_MASK);
		if ((v & ADDR_MASK) == VAL_FAILED)
			return NULL;
		/* VAL_PENDING: another thread is making it. */
		if (++waits > PENDING_SPINS + PENDING_YIELDS) {
			count(&pyc.pending_races);
			return NULL;
		}
		if (waits > PENDING_SPINS)
			sched_yield();
		else
			cpu_relax();
		v = map_get(key);
	}
}

/* ------------------------------------------------------------------ */
/* The eval-frame function.                                             */

/*
 * The frame's code object.  PyUnstable_InterpreterFrame_GetCode() returns
 * a new reference: an atomic increment and decrement per call on a code
 * object that every thread shares, under free threading.  The code object
 * is the frame's first field in 3.12 and 3.13 (f_code, f_executable), and a
 * tagged _PyStackRef in 3.14; the first call checks that reading it
 * directly agrees with the API, and every later call reads it directly if
 * it did (else always through the API).
 */
#define FRAME_TAG_BITS ((uintptr_t)3)

static _Atomic int code_direct = -1;	/* -1 unknown, 0 API, 1 direct */

static inline PyObject *frame_code_direct(struct _PyInterpreterFrame *f)
{
	return (PyObject *)(*(const uintptr_t *)f & ~FRAME_TAG_BITS);
}

static COLD PyObject *frame_code_api(struct _PyInterpreterFrame *f)
{
	PyObject *co = PyUnstable_InterpreterFrame_GetCode(f);
	int unknown = -1;

	/* The frame holds its own strong reference for as long as it runs. */
	Py_DECREF(co);
	atomic_compare_exchange_strong_explicit(&code_direct, &unknown,
						frame_code_direct(f) == co,
						memory_order_relaxed,
						memory_order_relaxed);
	return co;
}

static inline PyObject *frame_code(struct _PyInterpreterFrame *f)
{
	if (likely(atomic_load_explicit(&code_direct, memory_order_relaxed) ==
		   1))
		return frame_code_direct(f);
	return frame_code_api(f);
}

static PyObject *jr_eval(PyThreadState *ts, struct _PyInterpreterFrame *f,
			 int throwflag);

/*
 * jr_eval() runs with no session: stop() has just uninstalled it (a thread
 * that read the old function), or another PEP 523 tool that chained to it
 * while a session ran has put it back after stop().  In the second case
 * nobody would ever uninstall it, so do it here, under state_mu (never
 * waited for: a start() or stop() in progress decides) and only if it is
 * still installed with no session.
 */
static COLD void uninstall_stale(PyThreadState *ts)
{
	PyInterpreterState *interp = ts->interp;

	if (_PyInterpreterState_GetEvalFrameFunc(interp) != jr_eval ||
	    pthread_mutex_trylock(&state_mu))
		return;
	if (!atomic_load_explicit(&cur_session, memory_order_relaxed) &&
	    _PyInterpreterState_GetEvalFrameFunc(interp) == jr_eval)
		_PyInterpreterState_SetEvalFrameFunc(interp,
						     _PyEval_EvalFrameDefault);
	pthread_mutex_unlock(&state_mu);
}

/*
 * The slow path of a call: no session (see uninstall_stale()), or @co has
 * no copy of session @s yet (@v: what the lookup found, 0 for nothing or
 * a lookup that met a rehash).  Out of line, so that the fast path saves
 * no register: it is a leaf that tail-calls.
 */
static COLD PyObject *jr_eval_slow(PyThreadState *ts,
				   struct _PyInterpreterFrame *f,
				   int throwflag, struct session *s,
				   PyObject *co, uint64_t v)
{
	void *t;

	if (!s) {
		uninstall_stale(ts);
	} else if (PyCode_Check(co)) {
		t = code_copy(s, co, v);
		if (t)
			return ((trampoline_fn)t)(ts, f, throwflag,
						  _PyEval_EvalFrameDefault);
	}
	return _PyEval_EvalFrameDefault(ts, f, throwflag);
}

static PyObject *jr_eval(PyThreadState *ts, struct _PyInterpreterFrame *f,
			 int throwflag)
{
	/* Pairs with the release store in start(): the session's fields. */
	struct session *s = atomic_load_explicit(&cur_session,
						 memory_order_acquire);
	PyObject *co = NULL;
	uint64_t v = 0;

	if (likely(s)) {
		co = frame_code(f);
		if (likely(PyCode_Check(co)) &&
		    likely(map_lookup((uintptr_t)co, &v) == LK_FOUND) &&
		    likely((v & ~ADDR_MASK) == s->tag << TAG_SHIFT &&
			   (v & ADDR_MASK) > VAL_FAILED))
			return ((trampoline_fn)(uintptr_t)(v & ADDR_MASK))(
				ts, f, throwflag, _PyEval_EvalFrameDefault);
	}
	return jr_eval_slow(ts, f, throwflag, s, co, v);
}

/* ------------------------------------------------------------------ */
/* Fork.                                                                */

/*
 * The library gives the child its own jit-<childpid>.dump through the same
 * writer.  Copies made before the fork are described in the parent's dump
 * only, so the child's session takes a new tag and makes its own.  Only
 * the forking thread exists here.
 */
static void atfork_child(void)
{
	struct session *s = atomic_load_explicit(&cur_session,
						 memory_order_relaxed);

	pthread_mutex_init(&state_mu, NULL);
	map_init();
	/* Free at the fork when the forking thread ran Python (holders keep
	 * their thread state), but fork(2) may come from anywhere: a fresh
	 * one (the old one is left). */
	{
		PyThread_type_lock l = PyThread_allocate_lock();

		if (l)
			design_lock = l;
	}
	if (s)
		s->tag = take_tag();
}

/* ------------------------------------------------------------------ */
/* Python API.                                                          */

/* OSError(err, "what: strerror", path): errno is the error's own. */
static PyObject *raise_errno(int err, const char *what, PyObject *path)
{
	char msg[256];
	PyObject *e;

	snprintf(msg, sizeof(msg), "%s: %s", what, strerror(err));
	e = Py_BuildValue("(isO)", err, msg, path ? path : Py_None);
	if (e) {
		PyErr_SetObject(PyExc_OSError, e);
		Py_DECREF(e);
	}
	return NULL;
}

/*
 * OSError(err, "...", directory) for a dump that could not be made: the
 * directory as given, else the one the library chose ($JITRING_DIR, else
 * /tmp).
 */
static void dir_error(int err, PyObject *dir_obj)
{
	char what[96];
	PyObject *path;

	if (dir_obj == Py_None) {
		const char *e = getenv("JITRING_DIR");

		path = PyUnicode_DecodeFSDefault(e && *e ? e : "/tmp");
		if (!path)
			return;
	} else {
		path = Py_NewRef(dir_obj);
	}
	snprintf(what, sizeof(what),
		 "jitring: cannot create jit-%d.dump in directory",
		 (int)getpid());
	raise_errno(err, what, path);
	Py_DECREF(path);
}

static PyObject *jr_start(PyObject *mod, PyObject *args, PyObject *kw)
{
	static const char *const kwlist[] = { "dir",	     "engine",
					      "perf_map",    "ready_rings",
					      "ready_copies", "release",
					      "trampoline_elf", NULL };
	PyObject *dir_obj = Py_None, *dir_bytes = NULL;
	const char *engine = "rings";
	int perf_map = 0, release = 0, trampoline_elf = 0, ret, opened;
	int linked;
	Py_ssize_t ready_rings = 0, ready_copies = 0;
	struct jitring_config cfg;
	struct jitring_trampoline_template tt;
	struct jitring *jr = NULL;
	struct jitring_trampolines *tr = NULL;
	struct session *s = NULL;
	PyInterpreterState *interp = PyInterpreterState_Get();
	_PyFrameEvalFunction old;

	(void)mod;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|Ospnnpp:start",
					 (char **)kwlist, &dir_obj, &engine,
					 &perf_map, &ready_rings, &ready_copies,
					 &release, &trampoline_elf))
		return NULL;
	if (ready_rings < 0 || ready_rings > UINT32_MAX || ready_copies < 0 ||
	    ready_copies > UINT32_MAX) {
		PyErr_SetString(PyExc_ValueError,
				"ready_rings and ready_copies must be in "
				"[0, 2**32)");
		return NULL;
	}
	if (interp != PyInterpreterState_Main()) {
		PyErr_SetString(PyExc_RuntimeError,
				"jitring runs in the main interpreter only");
		return NULL;
	}
	jitring_config_init(&cfg);
	if (!strcmp(engine, "rings")) {
		cfg.engine = JITRING_ENGINE_RINGS;
		/* Never wait on a full ring with the thread state held:
		 * make_copy() waits with it released, for a bounded time. */
		cfg.flags |= JITRING_F_DROP;
	} else if (!strcmp(engine, "mutex")) {
		cfg.engine = JITRING_ENGINE_MUTEX;
	} else {
		PyErr_Format(PyExc_ValueError,
			     "engine must be 'rings' or 'mutex', not '%s'",
			     engine);
		return NULL;
	}
	if (perf_map)
		cfg.flags |= JITRING_F_PERF_MAP;
	if (release)
		cfg.flags |= JITRING_F_RELEASE;
	/* perf's DWARF unwinding through the copies without perf inject
	 * (record in dwarf mode); the set is made once per process, so the
	 * first start() decides. */
	if (trampoline_elf)
		cfg.flags |= JITRING_F_TRAMPOLINE_ELF;
	/* A program that starts many threads at once may say so (0: the
	 * library's defaults; see jitring_config). */
	cfg.ready_rings = (uint32_t)ready_rings;
	cfg.ready_copies = (uint32_t)ready_copies;
	{
		const char *d = getenv("JITRING_PY_TEST_COPY_DELAY_US");

		copy_delay_ns = d ? strtol(d, NULL, 10) * 1000L : 0;
	}
	if (dir_obj != Py_None) {
		if (!PyUnicode_FSConverter(dir_obj, &dir_bytes))
			return NULL;
		if (!PyBytes_GET_SIZE(dir_bytes)) {
			Py_DECREF(dir_bytes);
			PyErr_SetString(PyExc_ValueError,
					"dir must name a directory, not ''");
			return NULL;
		}
		cfg.dir = PyBytes_AS_STRING(dir_bytes);
	}

	state_lock();
	if (atomic_load_explicit(&cur_session, memory_order_relaxed)) {
		PyErr_SetString(PyExc_RuntimeError, "jitring is already active");
		goto err;
	}
	old = _PyInterpreterState_GetEvalFrameFunc(interp);
	/* jr_eval installed with no session is not another tool's: one that
	 * chained to it put it back after our stop(). */
	if (old != _PyEval_EvalFrameDefault && old != jr_eval) {
		PyErr_SetString(PyExc_RuntimeError,
				"another eval-frame function is installed "
				"(a debugger, or -X perf / -X perf_jit)");
		goto err;
	}
	s = calloc(1, sizeof(*s));
	if (!s) {
		PyErr_NoMemory();
		goto err;
	}
	{
		/* The process's set is made once: the first start() decides. */
		const char *l = getenv("JITRING_FP_LINK");

		linked = proc_tr ? proc_tr_linked : l && !strcmp(l, "1");
	}
	/* Where the linked set cannot be made (not x86_64), the default. */
	if (linked && fp_link_template(&tt) < 0)
		linked = 0;
	ret = linked ? 0 : jitring_trampoline_builtin(&tt);
	if (ret < 0) {
		PyErr_SetString(PyExc_NotImplementedError,
				"jitring has no built-in trampoline for this "
				"architecture");
		goto err;
	}
	/* For the life of the process (see the top of this file). */
	if (watcher_id < 0) {
		watcher_id = PyCode_AddWatcher(code_watcher);
		if (watcher_id < 0)
			goto err;
	}
	Py_BEGIN_ALLOW_THREADS
	ret = jitring_open(&cfg, &jr);
	opened = !ret;
	if (!ret) {
		/* The process's set, unless its writer is somehow still
		 * open: then a new one (the old copies are dropped as not
		 * this set's when they come back). */
		if (proc_tr && !jitring_trampolines_rebind(proc_tr, jr))
			tr = proc_tr;
		else
			ret = jitring_trampolines_new(jr, &tt, &tr);
	}
	Py_END_ALLOW_THREADS
	if (ret < 0) {
		if (opened)
			raise_errno(-ret, "jitring_trampolines_new", NULL);
		else
			dir_error(-ret, dir_obj);
		goto err;
	}
	proc_tr = tr;
	proc_tr_linked = linked;
	s->jr = jr;
	s->tr = tr;
	s->engine = (int)cfg.engine;
	s->tag = take_tag();
	last_session = s;
	/* Pairs with the acquire load in jr_eval(). */
	atomic_store_explicit(&cur_session, s, memory_order_release);
	_PyInterpreterState_SetEvalFrameFunc(interp, jr_eval);
	state_unlock();
	Py_XDECREF(dir_bytes);
	Py_RETURN_NONE;

err:
	if (jr) {
		Py_BEGIN_ALLOW_THREADS
		jitring_close(jr);
		Py_END_ALLOW_THREADS
		/* A new set that no copy came from yet; the process's set
		 * stays, and is rebound by the next start(). */
		if (tr != proc_tr)
			jitring_trampolines_free(tr);
	}
	free(s);
	state_unlock();
	Py_XDECREF(dir_bytes);
	return NULL;
}

static PyObject *jr_stop(PyObject *mod, PyObject *unused)
{
	PyInterpreterState *interp = PyInterpreterState_Get();
	struct session *s;
	int ret = 0;

	(void)mod;
	(void)unused;
	state_lock();
	s = atomic_load_explicit(&cur_session, memory_order_relaxed);
	if (!s) {
		state_unlock();
		Py_RETURN_FALSE;
	}
	if (_PyInterpreterState_GetEvalFrameFunc(interp) == jr_eval)
		_PyInterpreterState_SetEvalFrameFunc(interp,
						     _PyEval_EvalFrameDefault);
	/* Threads already inside jr_eval() finish with the session they
	 * read: the writer's handle and the copies stay valid forever.  The
	 * code watcher stays: other threads may be firing it. */
	atomic_store_explicit(&cur_session, NULL, memory_order_release);
	Py_BEGIN_ALLOW_THREADS
	ret = jitring_close(s->jr);
	Py_END_ALLOW_THREADS
	state_unlock();
	if (ret < 0)
		return raise_errno(-ret, "jitring_close", NULL);
	Py_RETURN_TRUE;
}

static PyObject *jr_is_active(PyObject *mod, PyObject *unused)
{
	(void)mod;
	(void)unused;
	return PyBool_FromLong(atomic_load_explicit(&cur_session,
						    memory_order_relaxed) !=
			       NULL);
}

static PyObject *jr_flush(PyObject *mod, PyObject *unused)
{
	struct session *s = atomic_load_explicit(&cur_session,
						 memory_order_acquire);
	int ret;

	(void)mod;
	(void)unused;
	if (!s)
		Py_RETURN_NONE;
	Py_BEGIN_ALLOW_THREADS
	ret = jitring_flush(s->jr);
	Py_END_ALLOW_THREADS
	if (ret < 0 && ret != -ESHUTDOWN)
		return raise_errno(-ret, "jitring_flush", NULL);
	Py_RETURN_NONE;
}

static int put_u64(PyObject *d, const char *k, uint64_t v)
{
	PyObject *o = PyLong_FromUnsignedLongLong(v);
	int r;

	if (!o)
		return -1;
	r = PyDict_SetItemString(d, k, o);
	Py_DECREF(o);
	return r;
}

static PyObject *jr_stats(PyObject *mod, PyObject *unused)
{
	struct jitring_stats st = { .struct_size = sizeof(st) };
	struct session *s;
	PyObject *d = PyDict_New();
	int ok = 0, have;

	(void)mod;
	(void)unused;
	if (!d)
		return NULL;
	state_lock();
	s = last_session;
	have = s != NULL;
	if (have)
		jitring_stats(s->jr, &st);
	state_unlock();
	if (have) {
		const char *eng = st.engine == JITRING_ENGINE_MUTEX ? "mutex" :
								       "rings";
		PyObject *e = PyUnicode_FromString(eng);

		if (!e || PyDict_SetItemString(d, "engine", e) < 0) {
			Py_XDECREF(e);
			goto out;
		}
		Py_DECREF(e);
#define U(f) if (put_u64(d, #f, st.f) < 0) goto out
		U(entries_written); U(records_written); U(bytes_written);
		U(refused_invalid); U(refused_nomem); U(refused_dropped);
		U(refused_shutdown); U(refused_io); U(lost_io); U(flushes);
		U(ring_full_waits); U(refills_ahead); U(refills_waited);
		U(batches); U(late_entries); U(holdback_max_ns);
		U(threads_attached); U(threads_total); U(rings_grown);
		U(trampoline_copies); U(trampoline_arenas_ahead); U(trampoline_arenas_waited);
		U(rings_grown_waited);
#undef U
		{
			PyObject *io = PyLong_FromLong(st.io_error);

			if (!io || PyDict_SetItemString(d, "io_error", io) < 0) {
				Py_XDECREF(io);
				goto out;
			}
			Py_DECREF(io);
		}
	}
#define P(f) \
	if (put_u64(d, "py_" #f, atomic_load_explicit(&pyc.f, \
			memory_order_relaxed)) < 0) goto out
	P(copies); P(copy_waits); P(copy_drops); P(copy_errors);
	P(pending_races); P(copies_reused);
#undef P
	if (put_u64(d, "py_fp_link", (uint64_t)proc_tr_linked) < 0)
		goto out;
#define P(f) \
	if (put_u64(d, "py_" #f, atomic_load_explicit(&codemap_ctr.f, \
			memory_order_relaxed)) < 0) goto out
	P(map_tables); P(map_bytes); P(map_forgotten); P(copies_freed);
#undef P
	ok = 1;
out:
	if (!ok) {
		Py_DECREF(d);
		return NULL;
	}
	return d;
}

/*
 * Before os.fork(): a single-threaded program that forks must not look
 * multi-threaded to CPython (which warns, counting the process's threads in
 * /proc/self/stat) just because of jitring's flusher.  jitring_pause()
 * flushes, lets the flusher exit and returns once the kernel no longer
 * counts it; the engine starts it again at the next call that needs it.
 *
 * jitring/__init__.py calls this only when threading knows one Python
 * thread (the forking one); here /proc/self/stat must show at most two
 * more (the flusher and, under heavy load on 4+ CPUs, its write thread;
 * or native threads that never write to our writer).  With more threads
 * CPython warns anyway, and jitring_pause() could wait for them to pause
 * writing.  The wait is with the thread state released.
 */
static int other_threads(void)
{
	char buf[512], *p;
	FILE *f = fopen("/proc/self/stat", "r");
	size_t n;
	int field = 0;
	long nthreads = -1;

	if (!f)
		return -1;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	p = strrchr(buf, ')');	/* comm may hold spaces */
	if (!p)
		return -1;
	/* After ')': field 3 (state) ... field 20 (num_threads). */
	for (field = 2; p && field < 20; field++)
		p = strchr(p + 1, ' ');
	if (p)
		nthreads = strtol(p + 1, NULL, 10);
	return nthreads < 1 ? -1 : (int)(nthreads - 1);
}

static PyObject *jr_before_fork(PyObject *mod, PyObject *unused)
{
	struct session *s = atomic_load_explicit(&cur_session,
						 memory_order_acquire);
	int others, ret = 0;

	(void)mod;
	(void)unused;
	if (!s || s->engine != JITRING_ENGINE_RINGS)
		Py_RETURN_FALSE;
	others = other_threads();
	if (others < 0 || others > 2)
		Py_RETURN_FALSE;
	Py_BEGIN_ALLOW_THREADS
	ret = jitring_pause(s->jr);
	Py_END_ALLOW_THREADS
	/* A failed file is reported by flush() and stop(); fork goes on. */
	return PyBool_FromLong(ret == 0);
}

/* Test hook: this call's own frame address, to measure the C stack that
 * one profiled Python call takes (python/tests/test_sessions.py). */
static PyObject *jr_stack_address(PyObject *mod, PyObject *unused)
{
	(void)mod;
	(void)unused;
	return PyLong_FromVoidPtr(__builtin_frame_address(0));
}

/*
 * Test hook: the linked records of the calling thread, as perf's kernel
 * unwinder follows them: each record's ip (its trampoline's return site),
 * innermost first, up to the outermost (the one linked to its own frame
 * record, 16 bytes above it).  Empty in the default mode.  It reads the
 * links, which the trampolines never do: not for a thread whose fp_link
 * was set to a foreign address (python/tests/test_fplink.py).
 */
static PyObject *jr_fp_links(PyObject *mod, PyObject *unused)
{
	PyObject *l = PyList_New(0);

	(void)mod;
	(void)unused;
#if defined(__x86_64__)
	{
		const uintptr_t *r = (const uintptr_t *)fp_link;
		int n = 0;

		while (l && r && n++ < 100000) {
			PyObject *v = PyLong_FromVoidPtr((void *)r[1]);

			if (!v || PyList_Append(l, v) < 0) {
				Py_XDECREF(v);
				Py_CLEAR(l);
				break;
			}
			Py_DECREF(v);
			if (r[0] == (uintptr_t)(r + 2))
				break;
			r = (const uintptr_t *)r[0];
		}
	}
#endif
	return l;
}

/* Test hook: set the calling thread's fp_link, as a frame unwound
 * without its epilogue (longjmp, a greenlet switch) leaves it. */
static PyObject *jr_fp_link_set(PyObject *mod, PyObject *args)
{
	unsigned long long rec;

	(void)mod;
	if (!PyArg_ParseTuple(args, "K:_fp_link_set", &rec))
		return NULL;
#if defined(__x86_64__)
	fp_link = (uintptr_t)rec;
#endif
	Py_RETURN_NONE;
}

static PyMethodDef jr_methods[] = {
	{ "start", (PyCFunction)(void (*)(void))jr_start,
	  METH_VARARGS | METH_KEYWORDS,
	  "start(dir=None, engine='rings', perf_map=False, ready_rings=0, "
	  "ready_copies=0, release=False)\n--\n\n"
	  "Open jit-<pid>.dump in dir and profile every Python function." },
	{ "stop", jr_stop, METH_NOARGS,
	  "stop()\n--\n\nStop profiling and close the dump; True if it was "
	  "active." },
	{ "is_active", jr_is_active, METH_NOARGS,
	  "is_active()\n--\n\nTrue between start() and stop()." },
	{ "flush", jr_flush, METH_NOARGS,
	  "flush()\n--\n\nWait until every function described so far is in "
	  "the dump." },
	{ "stats", jr_stats, METH_NOARGS,
	  "stats()\n--\n\nThe writer's counters (struct jitring_stats) and "
	  "the module's (py_*), as a dict." },
	{ "_before_fork", jr_before_fork, METH_NOARGS, NULL },
	{ "_stack_address", jr_stack_address, METH_NOARGS, NULL },
	{ "_fp_links", jr_fp_links, METH_NOARGS, NULL },
	{ "_fp_link_set", jr_fp_link_set, METH_VARARGS, NULL },
	{ NULL, NULL, 0, NULL },
};

static int jr_exec(PyObject *m)
{
	static int atfork_done;

	if (!atfork_done) {
		map_init();
		design_lock = PyThread_allocate_lock();
		if (!design_lock) {
			PyErr_NoMemory();
			return -1;
		}
		if (pthread_atfork(NULL, NULL, atfork_child)) {
			PyErr_SetString(PyExc_RuntimeError,
					"pthread_atfork failed");
			return -1;
		}
		atfork_done = 1;
	}
	return PyModule_AddIntConstant(m, "NAME_MAX", JITRING_NAME_MAX);
}

static PyModuleDef_Slot jr_slots[] = {
	{ Py_mod_exec, jr_exec },
	{ Py_mod_multiple_interpreters,
	  Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED },
#ifdef Py_mod_gil
	{ Py_mod_gil, Py_MOD_GIL_NOT_USED },
#endif
	{ 0, NULL },
};

static struct PyModuleDef jr_module = {
	PyModuleDef_HEAD_INIT,
	.m_name = "jitring._jitring",
	.m_doc = "perf profiling of Python functions through libjitring",
	.m_size = 0,
	.m_methods = jr_methods,
	.m_slots = jr_slots,
};

PyMODINIT_FUNC PyInit__jitring(void);

PyMODINIT_FUNC PyInit__jitring(void)
{
	return PyModuleDef_Init(&jr_module);
}
