/* SPDX-License-Identifier: MIT */
/*
 * Shared harness of the stress programs; see stress_common.h.
 *
 * The verifier deliberately relies on the project's independent reader
 * (src/reader/reader.h), never on the encoder, and recomputes every field from
 * what the producers themselves recorded: the code_index each write
 * returned, the thread's tid, and the (seed, thread, seq) shape.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "reader/reader.h"
#include "stress_common.h"

#define ST_STACK_SIZE (512u << 10)
#define ST_VERIFY_PRINT_MAX 30

/* ------------------------------------------------------------------ */
/* Small helpers.                                                       */

uint64_t st_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t st_mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

int st_thread_create(pthread_t *t, void *(*fn)(void *), void *arg)
{
	pthread_attr_t attr;
	int ret;

	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, ST_STACK_SIZE);
	ret = pthread_create(t, &attr, fn, arg);
	pthread_attr_destroy(&attr);
	return ret;
}

void st_gate_wait(struct st_gate *g)
{
	pthread_mutex_lock(&g->lock);
	while (!g->open)
		pthread_cond_wait(&g->cond, &g->lock);
	pthread_mutex_unlock(&g->lock);
}

void st_gate_open(struct st_gate *g)
{
	pthread_mutex_lock(&g->lock);
	g->open = true;
	pthread_cond_broadcast(&g->cond);
	pthread_mutex_unlock(&g->lock);
}

void st_dump_path(const char *dir, pid_t pid, char *out, size_t len)
{
	snprintf(out, len, "%s/jit-%d.dump", dir, (int)pid);
}

int st_subdir(const char *parent, const char *name, char *out, size_t len)
{
	int n = snprintf(out, len, "%s/%s", parent, name);

	if (n < 0 || (size_t)n >= len)
		return -ENAMETOOLONG;
	if (mkdir(out, 0700) && errno != EEXIST)
		return -errno;
	return 0;
}

/* ------------------------------------------------------------------ */
/* Command line.                                                        */

static void usage(const char *prog)
{
	fprintf(stderr,
		"usage: %s [--threads N] [--seconds S] [--entries K] "
		"[--count N] [--alive N] [--mode NAME] [--seed X] "
		"[--engine rings|mutex] [--dir D]\n",
		prog);
	exit(T_EXIT_FAIL);
}

static uint64_t parse_u64(const char *prog, const char *s)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || end == s || *end)
		usage(prog);
	return v;
}

void st_setup(int argc, char **argv, struct st_opts *o, const char *prog)
{
	bool seeded = false;
	const char *env;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!v)
			usage(prog);
		i++;
		if (!strcmp(a, "--threads")) {
			o->threads = (unsigned)parse_u64(prog, v);
		} else if (!strcmp(a, "--seconds")) {
			char *end;

			o->seconds = strtod(v, &end);
			if (end == v || *end || o->seconds < 0)
				usage(prog);
		} else if (!strcmp(a, "--entries")) {
			o->entries = parse_u64(prog, v);
		} else if (!strcmp(a, "--count")) {
			o->count = parse_u64(prog, v);
		} else if (!strcmp(a, "--alive")) {
			o->alive = (unsigned)parse_u64(prog, v);
		} else if (!strcmp(a, "--seed")) {
			o->seed = parse_u64(prog, v);
			seeded = true;
		} else if (!strcmp(a, "--engine")) {
			if (!strcmp(v, "rings"))
				o->engine = JITRING_ENGINE_RINGS;
			else if (!strcmp(v, "mutex"))
				o->engine = JITRING_ENGINE_MUTEX;
			else
				usage(prog);
		} else if (!strcmp(a, "--mode")) {
			snprintf(o->mode, sizeof(o->mode), "%s", v);
		} else if (!strcmp(a, "--dir")) {
			snprintf(o->dir, sizeof(o->dir), "%s", v);
		} else {
			usage(prog);
		}
	}
	if (!seeded)
		o->seed = st_mix(st_now_ns() ^ ((uint64_t)getpid() << 32));
	/* The seed comes first, so a failing run can always be replayed. */
	printf("seed: %" PRIu64 "\n", o->seed);
	env = getenv("JITRING_STRESS_SECONDS");
	if (env && *env) {
		double s = strtod(env, NULL);

		if (s > 0)
			o->seconds = s;
	}
	if (!o->engine)
		o->engine = JITRING_ENGINE_RINGS;
	if (!st_spec_init()) {
		printf("skipped: no call frame preset for this architecture\n");
		exit(T_EXIT_SKIP);
	}
	if (o->dir[0]) {
		if (mkdir(o->dir, 0700) && errno != EEXIST) {
			fprintf(stderr, "mkdir %s: %s\n", o->dir,
				strerror(errno));
			exit(T_EXIT_FAIL);
		}
		o->own_dir = false;
	} else {
		const char *tmp = getenv("TMPDIR");

		snprintf(o->dir, sizeof(o->dir), "%s/jitring-%s-XXXXXX",
			 tmp && *tmp ? tmp : "/tmp", prog);
		if (!mkdtemp(o->dir)) {
			fprintf(stderr, "mkdtemp %s: %s\n", o->dir,
				strerror(errno));
			exit(T_EXIT_FAIL);
		}
		o->own_dir = true;
	}
	printf("replay: %s --threads %u --seconds %g --entries %" PRIu64
	       " --count %" PRIu64 " --alive %u%s%s --seed %" PRIu64
	       " --engine %s\n",
	       prog, o->threads, o->seconds, o->entries, o->count, o->alive,
	       o->mode[0] ? " --mode " : "", o->mode, o->seed,
	       o->engine == JITRING_ENGINE_MUTEX ? "mutex" : "rings");
	printf("dumps in %s\n", o->dir);
	fflush(stdout);
}

void st_cleanup(const struct st_opts *o, bool passed)
{
	if (!o->own_dir)
		return;
	if (!passed) {
		printf("dumps kept in %s\n", o->dir);
		return;
	}
	t_rmtree(o->dir);
}

/* ------------------------------------------------------------------ */
/* Entry shapes.                                                        */

static const uint64_t sizes[] = { 16, 24, 40, 64, 100, 128, 200, 256,
				   40000 };
#define NSIZES_SMALL 8u
#define SIZE_JUMBO 8u
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static struct {
	uint8_t buf[256];
	uint32_t len;
	uint32_t pc_begin_off;
} eh[NSIZES];
static bool eh_ok;

bool st_spec_init(void)
{
	for (unsigned i = 0; i < NSIZES; i++) {
		int n = t_eh_frame(sizes[i], eh[i].buf, sizeof(eh[i].buf));

		/* No preset for this architecture: -EINVAL. */
		if (n <= 0 || n > (int)sizeof(eh[i].buf))
			return false;
		eh[i].len = (uint32_t)n;
		/* FDE: length, CIE pointer, then pc_begin. */
		eh[i].pc_begin_off = 4 + t_rd32(eh[i].buf) + 8;
	}
	eh_ok = true;
	return true;
}

struct shape {
	unsigned size_idx;
	uint64_t code_size;
	uint64_t code_addr;
	bool unw;
	bool dbg;
};

static void shape_of(const struct st_spec *spec, unsigned thread,
		     uint64_t seq, struct shape *s)
{
	uint64_t h = st_mix(spec->seed ^ st_mix(((uint64_t)thread << 40) ^
						seq));

	s->size_idx = (unsigned)(h % NSIZES_SMALL);
	if ((spec->flags & ST_F_JUMBO) && (h >> 8) % 1000 == 0)
		s->size_idx = SIZE_JUMBO;
	s->code_size = sizes[s->size_idx];
	s->unw = (spec->flags & ST_F_UNW) && eh_ok;
	s->dbg = (spec->flags & ST_F_DBG) && (h >> 20) % 4 == 0;
	s->code_addr = 0x100000000000ull + ((uint64_t)thread << 32) +
		       ((seq & 0x3ffffffu) << 6);
}

static inline uint8_t code_byte(unsigned thread, uint64_t seq, uint64_t i)
{
	return (uint8_t)(i + seq * 7 + thread * 13);
}

static const char line_file[] = "stress.c";

static inline int32_t line_no(uint64_t seq)
{
	return (int32_t)(seq % 100000) + 1;
}

/* ------------------------------------------------------------------ */
/* Producer logs.                                                       */

void st_log_init(struct st_log *log, unsigned thread, uint64_t cap_hint)
{
	memset(log, 0, sizeof(*log));
	log->thread = thread;
	if (cap_hint && cap_hint <= ST_LOG_INLINE) {
		log->ret = log->inl;
		log->cap = ST_LOG_INLINE;
	} else if (cap_hint) {
		log->ret = malloc(sizeof(*log->ret) * cap_hint);
		log->cap = log->ret ? cap_hint : 0;
	}
}

void st_log_fini(struct st_log *log)
{
	if (log->ret != log->inl)
		free(log->ret);
	log->ret = NULL;
	log->cap = 0;
}

static void log_grow(struct st_log *log)
{
	uint64_t cap = log->cap ? log->cap * 2 : 64;
	int64_t *p;

	if (log->ret == log->inl) {
		p = malloc(sizeof(*p) * cap);
		if (p)
			memcpy(p, log->inl, sizeof(log->inl));
	} else {
		p = realloc(log->ret, sizeof(*p) * cap);
	}
	if (!p) {
		fprintf(stderr, "out of memory for the log\n");
		abort();
	}
	log->ret = p;
	log->cap = cap;
}

int64_t st_write(struct jitring *jr, const struct st_spec *spec,
		 struct st_log *log)
{
	uint8_t small[256], *code = small;
	struct jitring_line lines[2];
	uint64_t seq = log->n;
	struct shape s;
	char name[96];
	int64_t ret;

	if (!log->tid)
		log->tid = (uint32_t)syscall(SYS_gettid);
	if (seq >= log->cap)
		log_grow(log);
	shape_of(spec, log->thread, seq, &s);
	snprintf(name, sizeof(name), "%st%u_s%" PRIu64, spec->prefix,
		 log->thread, seq);
	if (s.code_size > sizeof(small)) {
		code = malloc(s.code_size);
		if (!code) {
			fprintf(stderr, "out of memory for a jumbo entry\n");
			abort();
		}
	}
	for (uint64_t i = 0; i < s.code_size; i++)
		code[i] = code_byte(log->thread, seq, i);

	struct jitring_entry e = {
		.name = name,
		.code_addr = (const void *)(uintptr_t)s.code_addr,
		.code_size = s.code_size,
		.code_bytes = code,
	};
	if (s.unw) {
		e.eh_frame = eh[s.size_idx].buf;
		e.eh_frame_size = eh[s.size_idx].len;
	}
	if (s.dbg) {
		lines[0] = (struct jitring_line){ s.code_addr, line_no(seq), 0,
						  line_file };
		lines[1] = (struct jitring_line){ s.code_addr + 8,
						  line_no(seq) + 1, 1,
						  line_file };
		e.nr_lines = 2;
		e.lines = lines;
	}
	ret = jitring_write(jr, &e);
	if (code != small)
		free(code);
	log->ret[seq] = ret;
	/* ret[seq] before n: the crash test reads logs of a killed child. */
	atomic_signal_fence(memory_order_seq_cst);
	log->n = seq + 1;
	if (ret > 0)
		log->ok++;
	else if (ret == -EAGAIN)
		log->eagain++;
	else if (ret == -ESHUTDOWN)
		log->eshutdown++;
	else if (ret == -ENOMEM)
		log->enomem++;
	else if (ret == -ENOSPC || ret == -EIO || ret == -EFBIG ||
		 ret == -EDQUOT)
		log->ioerr++;
	else {
		log->other++;
		fprintf(stderr, "%s: unexpected jitring_write() result %" PRId64
			" (%s)\n", name, ret,
			ret < 0 ? strerror((int)-ret) : "zero");
	}
	/* Release: a thread that reads done may flush and rely on it. */
	atomic_store_explicit(&log->done, log->n, memory_order_release);
	return ret;
}

void st_totals(struct st_log *const *logs, unsigned n, struct st_totals *t)
{
	memset(t, 0, sizeof(*t));
	for (unsigned i = 0; i < n; i++) {
		const struct st_log *l = logs[i];

		if (!l)
			continue;
		t->attempts += l->n;
		t->ok += l->ok;
		t->eagain += l->eagain;
		t->eshutdown += l->eshutdown;
		t->enomem += l->enomem;
		t->other += l->other;
		t->ioerr += l->ioerr;
	}
}

/* ------------------------------------------------------------------ */
/* Verification.                                                        */

struct vstate {
	const struct st_verify *v;
	unsigned long fails;
	unsigned long printed;
	uint64_t inflight; /* entries accepted ahead of their log */
};

#define VFAIL(vs, ...)                                                      \
	do {                                                                \
		(vs)->fails++;                                              \
		if ((vs)->printed++ < ST_VERIFY_PRINT_MAX) {                \
			fprintf(stderr, "verify %s: ", (vs)->v->path);      \
			fprintf(stderr, __VA_ARGS__);                       \
			fputc('\n', stderr);                                \
		}                                                           \
	} while (0)

/* "<prefix>t<thread>_s<seq>" exactly; false for anything else. */
static bool parse_name(const char *name, const char *prefix, unsigned *thread,
		       uint64_t *seq)
{
	size_t pl = strlen(prefix);
	const char *p;
	char *end;
	unsigned long long t, s;

	if (strncmp(name, prefix, pl))
		return false;
	p = name + pl;
	if (*p++ != 't' || *p < '0' || *p > '9')
		return false;
	t = strtoull(p, &end, 10);
	if (end[0] != '_' || end[1] != 's' || end[2] < '0' || end[2] > '9')
		return false;
	p = end + 2;
	s = strtoull(p, &end, 10);
	if (*end || t > UINT_MAX)
		return false;
	*thread = (unsigned)t;
	*seq = s;
	return true;
}

static int32_t rd_i32(const uint8_t *p)
{
	int32_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static void check_unw(struct vstate *vs, const struct jitring_rd_record *u,
		      const struct jitring_rd_record *l, const struct shape *s,
		      const char *name)
{
	const uint8_t *tpl = eh[s->size_idx].buf;
	uint32_t len = eh[s->size_idx].len, off = eh[s->size_idx].pc_begin_off;
	int32_t want = -(int32_t)(((s->code_size + 7) & ~7ull) + off);

	if (u->eh_frame_size != len) {
		VFAIL(vs, "%s: UNWINDING_INFO at %zu has %" PRIu64
		      " bytes of eh_frame, want %u", name, u->off,
		      u->eh_frame_size, len);
		return;
	}
	/* Every byte but pc_begin is the caller's template for this size. */
	if (memcmp(u->unwind, tpl, off) ||
	    memcmp(u->unwind + off + 4, tpl + off + 4, len - off - 4))
		VFAIL(vs, "%s: UNWINDING_INFO at %zu is not this entry's "
		      "eh_frame (code_size %" PRIu64 ")", name, u->off,
		      s->code_size);
	/* pc_begin must reach this CODE_LOAD's code_addr from where perf
	 * maps the data: code_addr + ALIGN_8(code_size). */
	if (rd_i32(u->unwind + off) != want)
		VFAIL(vs, "%s: UNWINDING_INFO at %zu: pc_begin %d, want %d "
		      "(code_addr of the CODE_LOAD at %zu)", name, u->off,
		      rd_i32(u->unwind + off), want, l->off);
}

static void check_dbg(struct vstate *vs, const struct jitring_rd_record *d,
		      const struct shape *s, uint64_t seq, const char *name)
{
	struct jitring_rd_line ln;
	size_t cur = 0;
	int n = 0, r;
	/* The two rows written, and the library's closing row at the code's
	 * end (repeating the second) when the second starts inside it. */
	int rows = 2 + (s->code_size > 8);

	if (d->code_addr != s->code_addr || d->nr_entry != (uint64_t)rows) {
		VFAIL(vs, "%s: DEBUG_INFO at %zu: code_addr %#" PRIx64
		      " nr_entry %" PRIu64 ", want %#" PRIx64 " and %d", name,
		      d->off, d->code_addr, d->nr_entry, s->code_addr, rows);
		return;
	}
	while ((r = jitring_reader_line(d, &cur, &ln)) == 1) {
		int k = n < 2 ? n : 1;
		uint64_t addr = n < 2 ? s->code_addr + 8u * (unsigned)n :
					s->code_addr + s->code_size;

		if (ln.addr != addr || ln.line != line_no(seq) + k ||
		    ln.discrim != k || strcmp(ln.file, line_file))
			VFAIL(vs, "%s: DEBUG_INFO at %zu: row %d is %#" PRIx64
			      " %s:%d/%d", name, d->off, n, ln.addr, ln.file,
			      ln.line, ln.discrim);
		n++;
	}
	if (r < 0 || n != rows)
		VFAIL(vs, "%s: DEBUG_INFO at %zu: %d rows (%d)", name, d->off,
		      n, r);
}

static void check_load(struct vstate *vs, const struct jitring_rd_record *l,
		       const struct jitring_rd_record *u,
		       const struct jitring_rd_record *d, uint8_t **seen,
		       int64_t *last)
{
	const struct st_verify *v = vs->v;
	const char *name = l->name;
	unsigned thread;
	uint64_t seq;
	struct st_log *log;
	struct shape s;

	if (v->forbid && strstr(name, v->forbid)) {
		VFAIL(vs, "CODE_LOAD at %zu: forbidden entry \"%s\"", l->off,
		      name);
		return;
	}
	if (!parse_name(name, v->spec->prefix, &thread, &seq)) {
		VFAIL(vs, "CODE_LOAD at %zu: foreign entry \"%s\"", l->off,
		      name);
		return;
	}
	if (thread >= v->nlogs || !v->logs[thread] ||
	    seq > v->logs[thread]->n ||
	    (seq == v->logs[thread]->n && !v->inflight_ok)) {
		VFAIL(vs, "CODE_LOAD at %zu: \"%s\" was never written", l->off,
		      name);
		return;
	}
	log = v->logs[thread];
	if (seq == log->n || (v->inflight_ok && log->ret[seq] == 0))
		/* Written, but the killed thread had not logged it yet. */
		vs->inflight++;
	else if (log->ret[seq] <= 0)
		VFAIL(vs, "CODE_LOAD at %zu: \"%s\" is present but its write "
		      "returned %" PRId64, l->off, name, log->ret[seq]);
	else if ((uint64_t)log->ret[seq] != l->code_index)
		VFAIL(vs, "CODE_LOAD at %zu: \"%s\" has code_index %" PRIu64
		      ", its write returned %" PRId64, l->off, name,
		      l->code_index, log->ret[seq]);
	if (seen[thread][seq]++)
		VFAIL(vs, "CODE_LOAD at %zu: \"%s\" appears again", l->off,
		      name);
	if ((int64_t)seq <= last[thread])
		VFAIL(vs, "CODE_LOAD at %zu: \"%s\" after seq %" PRId64
		      " of the same thread", l->off, name, last[thread]);
	else
		last[thread] = (int64_t)seq;
	if (l->tid != log->tid || l->pid != v->pid)
		VFAIL(vs, "CODE_LOAD at %zu: \"%s\" pid/tid %u/%u, want %u/%u",
		      l->off, name, l->pid, l->tid, v->pid, log->tid);

	shape_of(v->spec, thread, seq, &s);
	if (l->code_addr != s.code_addr || l->vma != s.code_addr ||
	    l->code_size != s.code_size) {
		VFAIL(vs, "CODE_LOAD at %zu: \"%s\" addr %#" PRIx64 " size %"
		      PRIu64 ", want %#" PRIx64 " %" PRIu64, l->off, name,
		      l->code_addr, l->code_size, s.code_addr, s.code_size);
		return;
	}
	for (uint64_t i = 0; i < s.code_size; i++) {
		if (l->code[i] != code_byte(thread, seq, i)) {
			VFAIL(vs, "CODE_LOAD at %zu: \"%s\" code byte %" PRIu64
			      " differs", l->off, name, i);
			break;
		}
	}
	if (s.unw != (u != NULL))
		VFAIL(vs, "CODE_LOAD at %zu: \"%s\" %s UNWINDING_INFO right "
		      "before it", l->off, name, s.unw ? "lacks" : "has an");
	else if (u)
		check_unw(vs, u, l, &s, name);
	if (s.dbg != (d != NULL))
		VFAIL(vs, "CODE_LOAD at %zu: \"%s\" %s DEBUG_INFO right before "
		      "it", l->off, name, s.dbg ? "lacks" : "has a");
	else if (d)
		check_dbg(vs, d, &s, seq, name);
	/* One group, one timestamp (rings); taken in order (mutex). */
	if ((u && u->ts > l->ts) || (d && d->ts > l->ts) ||
	    (v->engine == JITRING_ENGINE_RINGS &&
	     ((u && u->ts != l->ts) || (d && d->ts != l->ts))))
		VFAIL(vs, "CODE_LOAD at %zu: \"%s\" group timestamps differ",
		      l->off, name);
}

static const uint8_t *map_file(const char *path, size_t *len)
{
	struct stat st;
	void *p;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return NULL;
	if (fstat(fd, &st)) {
		close(fd);
		return NULL;
	}
	*len = (size_t)st.st_size;
	if (!*len) {
		close(fd);
		return (const uint8_t *)"";
	}
	p = mmap(NULL, *len, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	return p == MAP_FAILED ? NULL : p;
}

unsigned long st_verify(const struct st_verify *v)
{
	struct vstate vs = { .v = v };
	struct jitring_check_result res;
	struct jitring_rd_header h;
	struct jitring_reader rd;
	struct jitring_rd_record rec, u, d;
	bool have_u = false, have_d = false;
	uint64_t loads = 0, records = 0, prev_ts = 0, want_ok = 0;
	uint64_t missing = 0, must_checked = 0;
	bool cut_group = false;
	unsigned cflags = v->check_flags ? v->check_flags :
					   JITRING_CHECK_SORTED;
	uint8_t **seen;
	int64_t *last;
	size_t len = 0;
	const uint8_t *buf = map_file(v->path, &len);
	int r;

	if (!buf) {
		VFAIL(&vs, "cannot read: %s", strerror(errno));
		return vs.fails;
	}
	r = jitring_check(buf, len, cflags, &res);
	/*
	 * A kill can also cut a group exactly at a record boundary: whole
	 * records, with the group's UNWINDING_INFO/DEBUG_INFO last and no
	 * CODE_LOAD.  jitring_check() reports that as group-orphan before
	 * EOF even with ALLOW_TRUNCATED; it is the same cut tail.
	 */
	if (r == 1 && (cflags & JITRING_CHECK_ALLOW_TRUNCATED) && res.rule &&
	    !strcmp(res.rule, "group-orphan") &&
	    strstr(res.detail, "before EOF")) {
		cut_group = true;
		r = 0;
	}
	if (r != 0)
		VFAIL(&vs, "jitring_check (flags %#x): %d, rule %s at %" PRIu64
		      ": %s", cflags, r, res.rule ? res.rule : "-", res.off,
		      res.detail);
	if (res.header.pid != v->pid)
		VFAIL(&vs, "header pid %u, want %u", res.header.pid, v->pid);

	seen = calloc(v->nlogs ? v->nlogs : 1, sizeof(*seen));
	last = malloc(sizeof(*last) * (v->nlogs ? v->nlogs : 1));
	if (!seen || !last)
		abort();
	for (unsigned i = 0; i < v->nlogs; i++) {
		last[i] = -1;
		if (v->logs[i]) {
			/* +1: the in-flight write of a killed thread. */
			seen[i] = calloc(v->logs[i]->n + 1, 1);
			if (!seen[i])
				abort();
		}
	}

	r = jitring_reader_init(&rd, buf, len,
				cflags & JITRING_CHECK_ALLOW_TRUNCATED, &h);
	if (r)
		VFAIL(&vs, "reader: header: %s", rd.rule ? rd.rule : "?");
	while (r == 0 && (r = jitring_reader_next(&rd, &rec)) == 1) {
		r = 0;
		records++;
		if (rec.ts < prev_ts)
			VFAIL(&vs, "%s at %zu: timestamp %" PRIu64
			      " below the previous %" PRIu64,
			      jitring_reader_type_name(rec.id), rec.off,
			      rec.ts, prev_ts);
		prev_ts = rec.ts;
		switch (rec.id) {
		case JITRING_RD_CODE_UNWINDING_INFO:
			/* perf wants [UNWINDING_INFO][DEBUG_INFO]CODE_LOAD. */
			if (have_u || have_d)
				VFAIL(&vs, "UNWINDING_INFO at %zu does not "
				      "start a group", rec.off);
			u = rec;
			have_u = true;
			break;
		case JITRING_RD_CODE_DEBUG_INFO:
			if (have_d)
				VFAIL(&vs, "DEBUG_INFO at %zu follows another",
				      rec.off);
			d = rec;
			have_d = true;
			break;
		case JITRING_RD_CODE_LOAD:
			loads++;
			check_load(&vs, &rec, have_u ? &u : NULL,
				   have_d ? &d : NULL, seen, last);
			have_u = have_d = false;
			break;
		default:
			if (have_u || have_d)
				VFAIL(&vs, "%s at %zu inside a group",
				      jitring_reader_type_name(rec.id),
				      rec.off);
			have_u = have_d = false;
			break;
		}
	}
	if (r < 0)
		VFAIL(&vs, "reader stopped at %zu: %s: %s", rd.err_off,
		      rd.rule ? rd.rule : "?", rd.detail);
	/*
	 * A group cut short by a kill may leave its UNWINDING_INFO or
	 * DEBUG_INFO without the CODE_LOAD (perf drops those): allowed only
	 * where a truncated tail is.
	 */
	if ((have_u || have_d) && !(cflags & JITRING_CHECK_ALLOW_TRUNCATED))
		VFAIL(&vs, "group without CODE_LOAD at the end");

	/* Every write that returned a code_index is there. */
	for (unsigned i = 0; i < v->nlogs; i++) {
		const struct st_log *log = v->logs[i];
		int64_t first_missing = -1;

		if (!log)
			continue;
		for (uint64_t s = 0; s < log->n; s++) {
			bool must = !v->must || s < v->must[i];

			if (log->ret[s] <= 0)
				continue;
			want_ok++;
			if (v->must && must)
				must_checked++;
			if (!seen[i][s]) {
				if (must && !v->lost_ok)
					VFAIL(&vs, "%st%u_s%" PRIu64
					      " (code_index %" PRId64
					      ") is missing%s",
					      v->spec->prefix, i, s,
					      log->ret[s], v->must ?
					      " (a completed flush covered "
					      "it)" : "");
				missing++;
				if (first_missing < 0)
					first_missing = (int64_t)s;
			} else if (v->lost_ok && first_missing >= 0) {
				VFAIL(&vs, "%st%u_s%" PRIu64 " is in the file "
				      "but the earlier s%" PRId64
				      " of the same thread was lost (a hole)",
				      v->spec->prefix, i, s, first_missing);
				first_missing = -1;
			}
		}
		free(seen[i]);
	}
	free(seen);
	free(last);

	if (v->stats) {
		const struct jitring_stats *st = v->stats;
		struct st_totals t;

		st_totals(v->logs, v->nlogs, &t);
#define STAT_EQ(field, want)                                                \
	do {                                                                \
		if ((uint64_t)(st->field) != (uint64_t)(want))              \
			VFAIL(&vs, "stats." #field " = %" PRIu64            \
			      ", want %" PRIu64 " (" #want ")",             \
			      (uint64_t)(st->field), (uint64_t)(want));     \
	} while (0)
		STAT_EQ(entries_written, loads);
		STAT_EQ(entries_written, want_ok - missing);
		STAT_EQ(records_written, records);
		STAT_EQ(bytes_written, len);
		STAT_EQ(refused_dropped, t.eagain);
		STAT_EQ(refused_shutdown, t.eshutdown + v->extra_shutdown);
		STAT_EQ(refused_nomem, t.enomem);
		STAT_EQ(refused_invalid, 0);
		/* Writes that returned a code_index and are not in the file
		 * are exactly lost_io; refusals with the file's error are
		 * refused_io (both 0 unless a fault test says otherwise). */
		STAT_EQ(refused_io, t.ioerr);
		STAT_EQ(lost_io, missing);
		STAT_EQ(io_error, v->io_error);
		if (v->engine && st->engine != v->engine)
			VFAIL(&vs, "stats.engine %u, want %u", st->engine,
			      v->engine);
#undef STAT_EQ
	}
	if (len)
		munmap((void *)(uintptr_t)buf, len);
	if (v->out)
		*v->out = (struct st_vout){
			.present = loads,
			.verified = loads - vs.inflight,
			.missing = missing,
			.must_checked = must_checked,
			.records = records,
			.file_size = len,
			.truncated = rd.truncated,
			.zero_tail = rd.zero_tail,
			.cut_group = cut_group || have_u || have_d,
		};
	if (!v->quiet || vs.fails)
		printf("verify %s: %" PRIu64 " records, %" PRIu64
		       " entries, %" PRIu64 " missing, %lu violations\n",
		       v->path, records, loads, missing, vs.fails);
	return vs.fails;
}

void st_result(const char *scenario, uint32_t engine, uint64_t threads,
	       uint64_t written, uint64_t verified, uint64_t lost,
	       uint64_t faults, bool passed)
{
	printf("RESULT scenario=%s engine=%s threads=%" PRIu64
	       " written=%" PRIu64 " verified=%" PRIu64 " lost=%" PRIu64
	       " faults=%" PRIu64 " outcome=%s\n",
	       scenario, engine == JITRING_ENGINE_MUTEX ? "mutex" : "rings",
	       threads, written, verified, lost, faults,
	       passed ? "PASS" : "FAIL");
	fflush(stdout);
}

/* ------------------------------------------------------------------ */
/* Progress.                                                            */

static struct {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool running;
	bool stop;
	const char *what;
	struct st_log *const *logs;
	unsigned nlogs;
	uint64_t start;
} prog = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void *progress_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&prog.lock);
	while (!prog.stop) {
		struct timespec ts;
		uint64_t sum = 0;

		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 1;
		pthread_cond_timedwait(&prog.cond, &prog.lock, &ts);
		if (prog.stop)
			break;
		for (unsigned i = 0; i < prog.nlogs; i++)
			if (prog.logs[i])
				sum += atomic_load_explicit(
					&prog.logs[i]->done,
					memory_order_relaxed);
		printf("[%4.0fs] %s: %" PRIu64 "\n",
		       (double)(st_now_ns() - prog.start) / 1e9, prog.what,
		       sum);
		fflush(stdout);
	}
	pthread_mutex_unlock(&prog.lock);
	return NULL;
}

void st_progress_start(const struct st_opts *o, const char *what,
		       struct st_log *const *logs, unsigned nlogs)
{
	if (o->seconds <= ST_LONG_SECONDS || prog.running)
		return;
	pthread_cond_init(&prog.cond, NULL);
	prog.what = what;
	prog.logs = logs;
	prog.nlogs = nlogs;
	prog.stop = false;
	prog.start = st_now_ns();
	if (st_thread_create(&prog.thread, progress_main, NULL) == 0)
		prog.running = true;
}

void st_progress_stop(void)
{
	if (!prog.running)
		return;
	pthread_mutex_lock(&prog.lock);
	prog.stop = true;
	pthread_cond_signal(&prog.cond);
	pthread_mutex_unlock(&prog.lock);
	pthread_join(prog.thread, NULL);
	pthread_cond_destroy(&prog.cond);
	prog.running = false;
}

unsigned st_child_finish(struct jitring *jr, const char *who,
			 const char *dir, const struct st_spec *spec,
			 struct st_log *const *logs, unsigned nlogs,
			 uint32_t engine)
{
	struct jitring_stats st = { .struct_size = sizeof(st) };
	struct st_totals tot;
	char path[4200];
	unsigned fails = 0;
	int ret;

	ret = jitring_flush(jr);
	if (ret) {
		fprintf(stderr, "%s: flush %d\n", who, ret);
		fails++;
	}
	ret = jitring_close(jr);
	if (ret) {
		fprintf(stderr, "%s: close %d\n", who, ret);
		fails++;
	}
	jitring_stats(jr, &st);
	st_totals(logs, nlogs, &tot);
	if (tot.ok != tot.attempts) {
		fprintf(stderr, "%s: %" PRIu64 " of %" PRIu64
			" writes refused\n", who, tot.attempts - tot.ok,
			tot.attempts);
		fails++;
	}
	st_dump_path(dir, getpid(), path, sizeof(path));
	struct st_verify v = {
		.path = path,
		.pid = (uint32_t)getpid(),
		.spec = spec,
		.logs = logs,
		.nlogs = nlogs,
		.stats = &st,
		.engine = engine,
		.quiet = true,
	};
	fails += (unsigned)st_verify(&v);
	if (fails)
		fprintf(stderr, "%s (pid %d): %u failures\n", who,
			(int)getpid(), fails);
	else
		unlink(path);
	return fails;
}
