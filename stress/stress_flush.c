/* SPDX-License-Identifier: MIT */
/*
 * Flush storm: --threads N producers write --entries K entries each (or
 * for --seconds S) while --count F other threads each loop: write one
 * entry, call jitring_flush(), check.  Checks after every flush:
 *  - it returned 0;
 *  - it covered what was written before it: entries_written is at least
 *    the number of writes (by anyone) that had returned a code_index
 *    before the flush began (a global count raised after each such write),
 *    and entries_written never goes backwards as seen by one thread;
 *  - every 8th flush of a thread (and its last), the thread reads the dump
 *    from disk, from where its previous look stopped, and finds all of its
 *    own entries so far in it, in order, with the code_index each write
 *    returned (it reads only whole records: a batch the flusher is writing
 *    at that moment may be cut short at EOF).  Only the first 4 flushing
 *    threads look, so the reading stays linear in the dump's size.
 * On timed runs (--seconds) producers pause 2 ms after every 8 writes: the
 * storm is of flushes, and the dump stays a few hundred MB.
 * At the end, after a last flush and jitring_close(): stats.flushes equals
 * the flushes that returned 0, and the full verifier (stress_common.h)
 * checks the dump against every thread's log.  Lossless mode: every write
 * must succeed.
 *
 * Usage: stress_flush [--threads N] [--count F] [--entries K] [--seconds S]
 *	[--seed X] [--engine rings|mutex] [--dir D]
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "reader/reader.h"
#include "stress_common.h"

static struct jitring *jr;
static struct st_opts opts;
static struct st_spec spec;
static struct st_gate go = ST_GATE_INIT;
static char path[4200];
static uint64_t deadline;
static _Atomic uint64_t ok_done; /* writes that returned a code_index */
static _Atomic unsigned producers_left;

struct flusher {
	struct st_log log;
	uint64_t flushes, bad_ret, bad_cover, bad_mono, bad_scan, scans;
	uint64_t scan_off;   /* a record boundary: where the next look starts */
	uint64_t found;      /* own entries found on disk so far */
	uint64_t last_written;
	unsigned char hdr[40];
	bool have_hdr;
};

static void *producer(void *arg)
{
	struct st_log *log = arg;

	st_gate_wait(&go);
	for (;;) {
		if (opts.entries && log->n >= opts.entries)
			break;
		if (deadline && (log->n & 15) == 0 && st_now_ns() >= deadline)
			break;
		if (st_write(jr, &spec, log) <= 0)
			break;
		atomic_fetch_add_explicit(&ok_done, 1, memory_order_release);
		if (deadline && log->n % 8 == 0) {
			struct timespec ts = { 0, 2000000 };

			nanosleep(&ts, NULL);
		}
	}
	atomic_fetch_sub(&producers_left, 1);
	return NULL;
}

/* Is @name "t<thread>_s<seq>" for this thread?  Sets *seq. */
static bool own_name(const char *name, unsigned thread, uint64_t *seq)
{
	unsigned t;
	unsigned long long s;
	int n = 0;

	if (sscanf(name, "t%u_s%llu%n", &t, &s, &n) != 2 || name[n] ||
	    t != thread)
		return false;
	*seq = s;
	return true;
}

/*
 * Read the dump from f->scan_off to EOF and match this thread's entries,
 * which must appear in order.  Returns false on a violation.
 */
static bool scan(struct flusher *f)
{
	struct jitring_reader rd;
	struct jitring_rd_record rec;
	struct stat sb;
	unsigned char *buf;
	size_t len;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC), r;
	bool ok = true;

	if (fd < 0 || fstat(fd, &sb)) {
		if (fd >= 0)
			close(fd);
		return false;
	}
	if (!f->have_hdr) {
		if (pread(fd, f->hdr, 40, 0) != 40) {
			close(fd);
			return false;
		}
		f->have_hdr = true;
		f->scan_off = 40;
	}
	if ((uint64_t)sb.st_size < f->scan_off) {
		close(fd);
		return false;
	}
	len = 40 + (size_t)((uint64_t)sb.st_size - f->scan_off);
	buf = malloc(len);
	if (!buf) {
		close(fd);
		return false;
	}
	memcpy(buf, f->hdr, 40);
	n = pread(fd, buf + 40, len - 40, (off_t)f->scan_off);
	close(fd);
	if (n < 0) {
		free(buf);
		return false;
	}
	len = 40 + (size_t)n;
	/* A header, then whole records from a record boundary. */
	r = jitring_reader_init(&rd, buf, len, JITRING_CHECK_ALLOW_TRUNCATED,
				NULL);
	while (r == 0 && (r = jitring_reader_next(&rd, &rec)) == 1) {
		uint64_t seq;

		r = 0;
		if (rec.id != JITRING_RD_CODE_LOAD ||
		    !own_name(rec.name, f->log.thread, &seq))
			continue;
		if (seq != f->found || seq >= f->log.n ||
		    f->log.ret[seq] != (int64_t)rec.code_index) {
			fprintf(stderr, "t%u: on disk: seq %" PRIu64
				" index %" PRIu64 ", expected seq %" PRIu64
				"\n", f->log.thread, seq, rec.code_index,
				f->found);
			ok = false;
			break;
		}
		f->found++;
	}
	if (r < 0) {
		fprintf(stderr, "t%u: reading %s from %" PRIu64 ": %s: %s\n",
			f->log.thread, path, f->scan_off,
			rd.rule ? rd.rule : "?", rd.detail);
		ok = false;
	}
	/* Resume after the last whole record next time. */
	f->scan_off += (rd.truncated ? len - rd.truncated - rd.zero_tail :
				       len - rd.zero_tail) - 40;
	free(buf);
	return ok;
}

static void *flusher(void *arg)
{
	struct flusher *f = arg;
	unsigned every = 8;

	st_gate_wait(&go);
	for (uint64_t k = 0;; k++) {
		struct jitring_stats st = { .struct_size = sizeof(st) };
		uint64_t before;
		bool last = atomic_load(&producers_left) == 0;
		int r;

		if (st_write(jr, &spec, &f->log) <= 0)
			break;
		atomic_fetch_add_explicit(&ok_done, 1, memory_order_release);
		before = atomic_load_explicit(&ok_done, memory_order_acquire);
		r = jitring_flush(jr);
		jitring_stats(jr, &st);
		if (r != 0) {
			if (f->bad_ret++ < 3)
				fprintf(stderr, "t%u: jitring_flush() = %d\n",
					f->log.thread, r);
			continue;
		}
		f->flushes++;
		if (st.entries_written < before && f->bad_cover++ < 3)
			fprintf(stderr, "t%u: flush returned with %" PRIu64
				" entries written, %" PRIu64 " writes had "
				"returned before it\n", f->log.thread,
				st.entries_written, before);
		if (st.entries_written < f->last_written && f->bad_mono++ < 3)
			fprintf(stderr, "t%u: entries_written went back from %"
				PRIu64 " to %" PRIu64 "\n", f->log.thread,
				f->last_written, st.entries_written);
		f->last_written = st.entries_written;
		if ((k % every == every - 1 || last) &&
		    f->log.thread < opts.threads + 4) {
			f->scans++;
			if (!scan(f) || f->found != f->log.ok) {
				if (f->bad_scan++ < 3)
					fprintf(stderr, "t%u: after a flush, "
						"%" PRIu64 " of its %" PRIu64
						" entries are on disk\n",
						f->log.thread, f->found,
						f->log.ok);
			}
		}
		if (last)
			break;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct jitring_config cfg;
	struct jitring_stats st = { .struct_size = sizeof(st) };
	struct st_log **lp, *plogs;
	struct flusher *fl;
	struct st_totals tot;
	struct st_vout out = { 0 };
	pthread_t *th;
	unsigned n, created = 0;
	uint64_t flushes = 0, bad = 0, scans = 0, t0, t1;

	opts = (struct st_opts){ .threads = 16, .count = 16, .entries = 2000 };
	st_setup(argc, argv, &opts, "stress_flush");
	T_REQUIRE(opts.count > 0);
	spec = (struct st_spec){ opts.seed, ST_F_UNW | ST_F_DBG, "" };

	jitring_config_init(&cfg);
	cfg.engine = opts.engine;
	cfg.dir = opts.dir;
	T_REQUIRE(jitring_open(&cfg, &jr) == 0);
	st_dump_path(opts.dir, getpid(), path, sizeof(path));

	/* Thread numbers: producers 0..N-1, flushing threads N..N+F-1. */
	n = opts.threads + (unsigned)opts.count;
	plogs = calloc(opts.threads + 1, sizeof(*plogs));
	fl = calloc(opts.count, sizeof(*fl));
	lp = calloc(n, sizeof(*lp));
	th = calloc(n, sizeof(*th));
	T_REQUIRE(plogs && fl && lp && th);
	for (unsigned i = 0; i < opts.threads; i++) {
		st_log_init(&plogs[i], i, opts.entries);
		lp[i] = &plogs[i];
	}
	for (unsigned j = 0; j < opts.count; j++) {
		st_log_init(&fl[j].log, opts.threads + j, 0);
		lp[opts.threads + j] = &fl[j].log;
	}
	atomic_store(&producers_left, opts.threads);
	for (; created < opts.threads; created++)
		T_REQUIRE(st_thread_create(&th[created], producer,
					   &plogs[created]) == 0);
	for (unsigned j = 0; j < opts.count; j++, created++)
		T_REQUIRE(st_thread_create(&th[created], flusher, &fl[j]) ==
			  0);
	t0 = st_now_ns();
	if (opts.seconds > 0)
		deadline = t0 + (uint64_t)(opts.seconds * 1e9);
	st_progress_start(&opts, "entries", lp, n);
	st_gate_open(&go);
	for (unsigned i = 0; i < created; i++)
		pthread_join(th[i], NULL);
	t1 = st_now_ns();
	st_progress_stop();

	T_CHECK_EQ(jitring_flush(jr), 0);
	T_CHECK_EQ(jitring_close(jr), 0);
	jitring_stats(jr, &st);
	st_totals(lp, n, &tot);
	for (unsigned j = 0; j < opts.count; j++) {
		flushes += fl[j].flushes;
		scans += fl[j].scans;
		bad += fl[j].bad_ret + fl[j].bad_cover + fl[j].bad_mono +
		       fl[j].bad_scan;
	}
	printf("%u producers and %" PRIu64 " flushing threads: %" PRIu64
	       " entries, %" PRIu64 " flushes (%.0f/s) all returned 0 and "
	       "covered what came before; %" PRIu64 " on-disk looks\n",
	       opts.threads, opts.count, tot.ok, flushes,
	       (double)flushes * 1e9 / (double)(t1 - t0 + 1), scans);
	T_CHECK_EQ(bad, 0);
	T_CHECK_EQ(tot.ok, tot.attempts);
	T_CHECK(flushes >= opts.count);
	/* Every flush that returned 0, and the final one, is counted. */
	T_CHECK_EQ(st.flushes, flushes + 1);

	struct st_verify v = {
		.path = path,
		.pid = (uint32_t)getpid(),
		.spec = &spec,
		.logs = lp,
		.nlogs = n,
		.stats = &st,
		.engine = opts.engine,
		.out = &out,
	};
	T_CHECK_EQ(st_verify(&v), 0);
	st_result("flush-storm", opts.engine, n, st.entries_written,
		  out.verified, st.lost_io, flushes, t_failed == 0);

	for (unsigned i = 0; i < opts.threads; i++)
		st_log_fini(&plogs[i]);
	for (unsigned j = 0; j < opts.count; j++)
		st_log_fini(&fl[j].log);
	free(plogs);
	free(fl);
	free(lp);
	free(th);
	st_cleanup(&opts, t_failed == 0);
	return t_report();
}
