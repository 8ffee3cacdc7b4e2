/* SPDX-License-Identifier: MIT */
/*
 * I/O faults under load (docs/design.md section 8, docs/reliability.md).
 * --threads N producers write --entries K entries each (or for --seconds
 * S) while --alive F flushing threads (default 1; 0 lets the mutex
 * engine's own buffer-full flush meet the fault inside a jitring_write())
 * call jitring_flush() in a loop; one fault is injected per run, chosen by
 * --mode:
 *
 *  enospc    the dump lives on a 1 MiB tmpfs the test mounts (root only;
 *            otherwise RLIMIT_FSIZE stands in and the error is -EFBIG):
 *            the disk fills up.  Both engines.
 *  efbig     RLIMIT_FSIZE of 512 KiB with SIGXFSZ ignored.  Both engines.
 *  eio       jitring_io_hook (testpoint builds, rings engine): after a
 *            seeded number of bytes one call writes only part of its
 *            batch (tearing a group) and the next fails with EIO.
 *  eio-zero  the same, but the next call makes no progress (returns 0),
 *            which the library must treat as -EIO.
 *  eintr     the hook fails its first call, and about half of the rest,
 *            with EINTR before writing anything (rings).  No loss
 *            allowed.
 *  short     the hook writes only a seeded, often tiny, prefix of each
 *            batch (rings).  No loss allowed.
 *  slow      the hook sleeps 100 ms before each write; 4 KiB rings, so
 *            lossless producers keep waiting for space (rings).
 *  slow-drop the same with JITRING_F_DROP: producers get -EAGAIN instead.
 *  readonly  the directory is a read-only tmpfs (root; as a non-root user
 *            a mode 0555 directory): jitring_open() fails with -EROFS
 *            (-EACCES), creates nothing, and a writable directory still
 *            works afterwards.  Both engines.
 *
 * For the failing modes (enospc, efbig, eio) the checks are:
 *  - no crash, no deadlock (an alarm ends a hung run as a failure);
 *  - every jitring_write() after a thread's first refusal with the file's
 *    error is refused the same way; flushes that return 0 cover every
 *    write that returned before they began (entries_written at least the
 *    number of such writes), and once one returns the error all later ones
 *    return it; at the end jitring_flush() returns it (-ENOSPC, -EFBIG,
 *    -EIO), so does one more jitring_write() and then jitring_close(); a
 *    second close returns -EBADF;
 *  - the file passes jitring_check(JITRING_CHECK_SORTED): whole records
 *    and groups only, nothing but zero bytes after the last one, and its
 *    size is bytes_written;
 *  - every write that returned a code_index is in the file or counted in
 *    lost_io, and the lost ones are a suffix of each thread's writes (no
 *    hole); entries_written + lost_io + refused_* == writes attempted.
 * For eintr, short and slow nothing may be lost: the full verifier
 * (stress_common.h) passes, and flush and close return 0.
 *
 * Timed runs (--seconds) pace the producers (1 ms pause every 8 writes,
 * 0.1 ms after a drop) so that dumps and logs stay bounded.
 *
 * Usage: stress_faults --mode M [--threads N] [--entries K] [--seconds S]
 *	[--alive F] [--seed X] [--engine rings|mutex] [--dir D]
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "stress_common.h"
#include "common/testpoint.h"

#define FS_SIZE "1m"
#define FSIZE_LIMIT (512u << 10)
#define SLOW_MS 100

enum mode {
	M_ENOSPC,
	M_EFBIG,
	M_EIO,
	M_EIO_ZERO,
	M_EINTR,
	M_SHORT,
	M_SLOW,
	M_SLOW_DROP,
	M_READONLY,
};

static const char *const mode_names[] = {
	"enospc", "efbig", "eio", "eio-zero", "eintr", "short", "slow",
	"slow-drop", "readonly",
};

static struct jitring *jr;
static struct st_opts opts;
static struct st_spec spec;
static struct st_gate go = ST_GATE_INIT;
static enum mode mode;
static uint64_t deadline;
static _Atomic bool stop_flusher;
static _Atomic uint64_t ok_done; /* writes that returned a code_index */

/* What the flushing threads saw (under fl.lock). */
static struct {
	pthread_mutex_t lock;
	uint64_t ok, failed, bad;
	int first_err;
	uint64_t max_ns;
} fl = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* ------------------------------------------------------------------ */
/* The I/O hook (testpoint builds).                                     */

static struct {
	_Atomic uint64_t written;  /* bytes the hook let through */
	uint64_t budget;           /* eio: bytes before the fault */
	_Atomic int fired;         /* eio: 1 after the torn write */
	_Atomic uint64_t faults;   /* faults injected */
	_Atomic uint64_t calls;
	_Atomic uint64_t rng;
} io;

static uint64_t io_rand(void)
{
	return st_mix(atomic_fetch_add(&io.rng, 1));
}

static size_t iov_total(const struct iovec *iov, int cnt)
{
	size_t n = 0;

	for (int i = 0; i < cnt; i++)
		n += iov[i].iov_len;
	return n;
}

/* pwritev of the first @len bytes of @iov. */
static ssize_t pwritev_prefix(int fd, const struct iovec *iov, int cnt,
			      off_t off, size_t len)
{
	struct iovec v[64];
	int k = 0;

	for (int i = 0; i < cnt && len && k < 64; i++, k++) {
		v[k] = iov[i];
		if (v[k].iov_len > len)
			v[k].iov_len = len;
		len -= v[k].iov_len;
	}
	return pwritev(fd, v, k, off);
}

/* Installed as the I/O hook in testpoint builds only. */
static __attribute__((unused)) ssize_t
fault_pwritev(int fd, const struct iovec *iov, int cnt, off_t off)
{
	size_t total = iov_total(iov, cnt);
	ssize_t n;

	atomic_fetch_add(&io.calls, 1);
	switch (mode) {
	case M_EIO:
	case M_EIO_ZERO: {
		uint64_t w = atomic_load(&io.written);

		if (atomic_load(&io.fired)) {
			atomic_fetch_add(&io.faults, 1);
			if (mode == M_EIO_ZERO)
				return 0;
			errno = EIO;
			return -1;
		}
		if (w + total <= io.budget)
			break;
		/* Tear the batch: part of it, then the failure. */
		atomic_store(&io.fired, 1);
		atomic_fetch_add(&io.faults, 1);
		if (io.budget > w) {
			n = pwritev_prefix(fd, iov, cnt, off,
					   (size_t)(io.budget - w));
			if (n > 0)
				atomic_fetch_add(&io.written, (uint64_t)n);
			return n;
		}
		errno = EIO;
		return -1;
	}
	case M_EINTR:
		/* The first call always: a short run may make only a few. */
		if (!atomic_load(&io.faults) || io_rand() & 1) {
			atomic_fetch_add(&io.faults, 1);
			errno = EINTR;
			return -1;
		}
		break;
	case M_SHORT:
		if (total > 1) {
			uint64_t r = io_rand();
			/* Often a few bytes, sometimes most of the batch. */
			size_t len = r & 1 ? 1 + (r >> 8) % 17 :
				     1 + (r >> 8) % (total - 1);

			atomic_fetch_add(&io.faults, 1);
			n = pwritev_prefix(fd, iov, cnt, off, len);
			if (n > 0)
				atomic_fetch_add(&io.written, (uint64_t)n);
			return n;
		}
		break;
	case M_SLOW:
	case M_SLOW_DROP: {
		struct timespec ts = { 0, SLOW_MS * 1000000L };

		atomic_fetch_add(&io.faults, 1);
		while (nanosleep(&ts, &ts) && errno == EINTR)
			;
		break;
	}
	default:
		break;
	}
	n = pwritev(fd, iov, cnt, off);
	if (n > 0)
		atomic_fetch_add(&io.written, (uint64_t)n);
	return n;
}

/* ------------------------------------------------------------------ */
/* Producers and the flushing thread.                                   */

struct producer {
	struct st_log log;
	uint64_t ok_after_err; /* must stay 0 */
	uint64_t unexpected;
};

static void *producer(void *arg)
{
	struct producer *p = arg;
	struct st_log *log = &p->log;
	unsigned after = 0;

	st_gate_wait(&go);
	for (;;) {
		int64_t r;

		if (opts.entries && log->n >= opts.entries)
			break;
		if (deadline && (log->n & 15) == 0 && st_now_ns() >= deadline)
			break;
		r = st_write(jr, &spec, log);
		/* Timed runs pace themselves: the dump (and the logs) stay a
		 * few hundred MB however long the run. */
		if (deadline && (log->n % 8 == 0 || r == -EAGAIN)) {
			struct timespec ts = { 0, r == -EAGAIN ? 100000 :
							       1000000 };

			nanosleep(&ts, NULL);
		}
		if (r > 0) {
			if (log->ioerr)
				p->ok_after_err++;
			atomic_fetch_add_explicit(&ok_done, 1,
						  memory_order_release);
		} else if (r == -EAGAIN && mode == M_SLOW_DROP) {
			/* Drop mode: go on. */
		} else if (r == -ENOSPC || r == -EIO || r == -EFBIG ||
			   r == -EDQUOT) {
			/* Refused with the file's error: a few more, all of
			 * which must be refused too. */
			if (++after >= 8)
				break;
		} else {
			p->unexpected++;
			break;
		}
	}
	return NULL;
}

static void *flusher(void *arg)
{
	uint64_t seed = st_mix(opts.seed ^ 0xf1u ^ (uintptr_t)arg);


	st_gate_wait(&go);
	while (!atomic_load(&stop_flusher)) {
		struct jitring_stats st = { .struct_size = sizeof(st) };
		uint64_t before = atomic_load_explicit(&ok_done,
						       memory_order_acquire);
		uint64_t t0 = st_now_ns(), dt;
		int r = jitring_flush(jr);
		struct timespec ts;

		dt = st_now_ns() - t0;
		jitring_stats(jr, &st);
		pthread_mutex_lock(&fl.lock);
		if (dt > fl.max_ns)
			fl.max_ns = dt;
		if (r == 0) {
			fl.ok++;
			if (fl.failed) {
				fprintf(stderr, "flush returned 0 after it "
					"returned %d\n", fl.first_err);
				fl.bad++;
			}
			if (st.entries_written < before) {
				fprintf(stderr, "flush returned 0 but "
					"entries_written %" PRIu64 " < %" PRIu64
					" writes that returned before it\n",
					st.entries_written, before);
				fl.bad++;
			}
		} else {
			if (!fl.failed)
				fl.first_err = r;
			fl.failed++;
			if (r != fl.first_err || r != st.io_error) {
				fprintf(stderr, "flush returned %d (first %d, "
					"io_error %d)\n", r, fl.first_err,
					st.io_error);
				fl.bad++;
			}
		}
		pthread_mutex_unlock(&fl.lock);
		seed = st_mix(seed);
		ts = (struct timespec){ 0, (long)(seed % 500000u) };
		nanosleep(&ts, NULL);
	}
	return NULL;
}

/* ------------------------------------------------------------------ */
/* Setup of each fault.                                                  */

static char fsdir[4200];
static bool mounted;

/* A size-limited (or read-only) tmpfs at <dir>/fs; false if not allowed. */
static bool mount_tmpfs(const char *options, unsigned long flags)
{
	if (st_subdir(opts.dir, "fs", fsdir, sizeof(fsdir)))
		return false;
	if (mount("tmpfs", fsdir, "tmpfs", flags, options)) {
		printf("mount -t tmpfs -o %s%s %s: %s\n", options,
		       flags & MS_RDONLY ? ",ro" : "", fsdir, strerror(errno));
		rmdir(fsdir);
		return false;
	}
	mounted = true;
	return true;
}

static void unmount_tmpfs(bool passed)
{
	if (!mounted)
		return;
	if (!passed) {
		/* Keep the evidence outside the tmpfs. */
		char cmd[9000];

		snprintf(cmd, sizeof(cmd), "cp -a '%s'/. '%s'/ 2>/dev/null",
			 fsdir, opts.dir);
		if (system(cmd) != 0)
			fprintf(stderr, "could not copy the dump out\n");
	}
	if (umount2(fsdir, MNT_DETACH))
		fprintf(stderr, "umount %s: %s\n", fsdir, strerror(errno));
	rmdir(fsdir);
	mounted = false;
}

static void limit_fsize(void)
{
	struct rlimit rl;

	signal(SIGXFSZ, SIG_IGN);
	T_REQUIRE(getrlimit(RLIMIT_FSIZE, &rl) == 0);
	rl.rlim_cur = FSIZE_LIMIT;
	T_REQUIRE(setrlimit(RLIMIT_FSIZE, &rl) == 0);
}

static void unlimit_fsize(void)
{
	struct rlimit rl;

	T_REQUIRE(getrlimit(RLIMIT_FSIZE, &rl) == 0);
	rl.rlim_cur = rl.rlim_max;
	setrlimit(RLIMIT_FSIZE, &rl);
}

/* ------------------------------------------------------------------ */
/* readonly                                                              */

static int run_readonly(void)
{
	static const uint32_t engines[] = { JITRING_ENGINE_RINGS,
					    JITRING_ENGINE_MUTEX };
	struct jitring_config cfg;
	char path[4300];
	int want;

	if (geteuid() == 0) {
		if (!mount_tmpfs("size=64k", MS_RDONLY)) {
			st_cleanup(&opts, true);
			t_skip("root, but mounting a read-only tmpfs is not "
			       "permitted here");
		}
		want = -EROFS;
	} else {
		T_REQUIRE(st_subdir(opts.dir, "fs", fsdir, sizeof(fsdir)) ==
			  0);
		T_REQUIRE(chmod(fsdir, 0555) == 0);
		want = -EACCES;
	}
	for (unsigned i = 0; i < 2; i++) {
		struct jitring *w = (struct jitring *)&cfg;
		struct stat sb;

		jitring_config_init(&cfg);
		cfg.engine = engines[i];
		cfg.dir = fsdir;
		T_CHECK_EQ(jitring_open(&cfg, &w), want);
		T_CHECK(w == (struct jitring *)&cfg); /* untouched */
		st_dump_path(fsdir, getpid(), path, sizeof(path));
		T_CHECK(stat(path, &sb) == -1 && errno == ENOENT);
		/* A writable directory still works afterwards. */
		cfg.dir = opts.dir;
		T_CHECK_EQ(jitring_open(&cfg, &w), 0);
		if (w != (struct jitring *)&cfg) {
			T_CHECK_EQ(jitring_close(w), 0);
			st_dump_path(opts.dir, getpid(), path, sizeof(path));
			T_CHECK_EQ(unlink(path), 0);
		}
		printf("readonly, %s: jitring_open() returned %d as "
		       "expected (%s), nothing created\n",
		       i ? "mutex" : "rings", want, strerror(-want));
		st_result("readonly", engines[i], 0, 0, 0, 0, 1,
			  t_failed == 0);
	}
	if (mounted)
		unmount_tmpfs(true);
	else
		chmod(fsdir, 0700);
	st_cleanup(&opts, t_failed == 0);
	return t_report();
}

/* ------------------------------------------------------------------ */

int main(int argc, char **argv)
{
	struct jitring_config cfg;
	struct jitring_stats st = { .struct_size = sizeof(st) };
	struct st_log **lp, main_log;
	struct st_totals tot;
	struct st_vout out = { 0 };
	struct producer *prods;
	pthread_t *th, *fth;
	const char *dumpdir;
	unsigned created = 0;
	uint64_t ok_after = 0, unexpected = 0;
	bool failing, fell_back = false;
	int want_err = 0, ret_flush, ret_close;
	int64_t ret_after;
	char path[4300];
	unsigned alarm_s;

	opts = (struct st_opts){ .threads = 8, .entries = 1000, .alive = 1 };
	st_setup(argc, argv, &opts, "stress_faults");
	mode = M_ENOSPC;
	if (opts.mode[0]) {
		unsigned m;

		for (m = 0; m <= M_READONLY; m++)
			if (!strcmp(opts.mode, mode_names[m]))
				break;
		if (m > M_READONLY) {
			fprintf(stderr, "unknown --mode %s\n", opts.mode);
			return T_EXIT_FAIL;
		}
		mode = (enum mode)m;
	}
	if (mode == M_READONLY)
		return run_readonly();
	if (mode >= M_EIO && mode <= M_SLOW_DROP) {
		if (opts.engine == JITRING_ENGINE_MUTEX) {
			st_cleanup(&opts, true);
			t_skip("the mutex engine writes through stdio: no "
			       "pwritev hook; its faults are enospc and "
			       "efbig");
		}
#ifndef JITRING_TESTPOINTS
		st_cleanup(&opts, true);
		t_skip("needs the I/O hook (-Dtestpoints=true)");
#else
		jitring_io_hook = fault_pwritev; /* before the flusher runs */
#endif
	}
	/* A hang is a failure, not a stuck test. */
	alarm_s = 120 + (unsigned)(opts.seconds * 4);
	alarm(alarm_s);

	spec = (struct st_spec){ opts.seed, ST_F_UNW | ST_F_DBG, "" };
	io.rng = opts.seed;
	io.budget = (64u << 10) + st_mix(opts.seed ^ 0xb0d9e7) % (192u << 10);

	dumpdir = opts.dir;
	failing = mode == M_ENOSPC || mode == M_EFBIG || mode == M_EIO ||
		  mode == M_EIO_ZERO;
	if (mode == M_ENOSPC) {
		if (geteuid() == 0 && mount_tmpfs("size=" FS_SIZE, 0)) {
			dumpdir = fsdir;
			want_err = -ENOSPC;
		} else {
			printf("not allowed to mount a tmpfs: RLIMIT_FSIZE "
			       "stands in for the full disk\n");
			fell_back = true;
		}
	}
	if (mode == M_EFBIG || fell_back) {
		limit_fsize();
		want_err = -EFBIG;
	}
	if (mode == M_EIO || mode == M_EIO_ZERO)
		want_err = -EIO;

	jitring_config_init(&cfg);
	cfg.engine = opts.engine;
	cfg.dir = dumpdir;
	cfg.flags = JITRING_F_WRITE_CLOSE;
	if (mode == M_SLOW_DROP)
		cfg.flags |= JITRING_F_DROP;
	/* Small rings make lossless producers wait for space often. */
	if (mode == M_SLOW || mode == M_SLOW_DROP ||
	    st_mix(opts.seed ^ 0x5151) & 1)
		cfg.ring_size = 4096;
	T_REQUIRE(jitring_open(&cfg, &jr) == 0);
	st_dump_path(dumpdir, getpid(), path, sizeof(path));
	printf("mode %s, engine %s, ring_size %u, %u flushing threads\n",
	       mode_names[mode],
	       opts.engine == JITRING_ENGINE_MUTEX ? "mutex" : "rings",
	       cfg.ring_size, opts.alive);

	prods = calloc(opts.threads, sizeof(*prods));
	lp = calloc(opts.threads + 1, sizeof(*lp));
	th = calloc(opts.threads, sizeof(*th));
	fth = calloc(opts.alive + 1, sizeof(*fth));
	T_REQUIRE(prods && lp && th && fth);
	for (unsigned i = 0; i < opts.threads; i++) {
		st_log_init(&prods[i].log, i, opts.entries);
		lp[i] = &prods[i].log;
	}
	for (; created < opts.threads; created++)
		if (st_thread_create(&th[created], producer, &prods[created]))
			break;
	T_REQUIRE(created == opts.threads);
	for (unsigned i = 0; i < opts.alive; i++)
		T_REQUIRE(st_thread_create(&fth[i], flusher,
					   (void *)(uintptr_t)i) == 0);
	if (opts.seconds > 0)
		deadline = st_now_ns() + (uint64_t)(opts.seconds * 1e9);
	st_progress_start(&opts, "writes", lp, created);
	st_gate_open(&go);
	for (unsigned i = 0; i < created; i++)
		pthread_join(th[i], NULL);
	st_progress_stop();
	atomic_store(&stop_flusher, true);
	for (unsigned i = 0; i < opts.alive; i++)
		pthread_join(fth[i], NULL);

	ret_flush = jitring_flush(jr);
	/* One more write after the end of the run (thread number N): a
	 * failed file refuses it with its error; otherwise it is written. */
	st_log_init(&main_log, created, 0);
	lp[created] = &main_log;
	ret_after = st_write(jr, &spec, &main_log);
	ret_close = jitring_close(jr);
	T_CHECK_EQ(jitring_close(jr), -EBADF);
	jitring_stats(jr, &st);
	if (mode == M_EFBIG || fell_back)
		unlimit_fsize();
	st_totals(lp, created + 1, &tot);
	for (unsigned i = 0; i < created; i++) {
		ok_after += prods[i].ok_after_err;
		unexpected += prods[i].unexpected;
	}

	printf("writes: %" PRIu64 " attempted, %" PRIu64 " ok, %" PRIu64
	       " refused with the file's error, %" PRIu64 " dropped, %"
	       PRIu64 " other\n", tot.attempts, tot.ok, tot.ioerr, tot.eagain,
	       tot.other + tot.eshutdown + tot.enomem);
	printf("stats: entries_written %" PRIu64 ", lost_io %" PRIu64
	       ", refused_io %" PRIu64 ", refused_dropped %" PRIu64
	       ", ring_full_waits %" PRIu64 ", io_error %d\n",
	       st.entries_written, st.lost_io, st.refused_io,
	       st.refused_dropped, st.ring_full_waits, st.io_error);
	printf("flushes: %" PRIu64 " returned 0, %" PRIu64 " returned %d; "
	       "longest %.1f ms; final flush %d, a write after it %" PRId64
	       ", close %d; hook calls %" PRIu64 ", faults injected %" PRIu64
	       "\n", fl.ok, fl.failed, fl.first_err, (double)fl.max_ns / 1e6,
	       ret_flush, ret_after, ret_close,
	       atomic_load(&io.calls), atomic_load(&io.faults));

	T_CHECK_EQ(unexpected, 0);
	T_CHECK_EQ(tot.other + tot.eshutdown + tot.enomem, 0);
	T_CHECK_EQ(fl.bad, 0);
	if (failing) {
		/* The fault happened, everyone heard of it, and the error is
		 * the one the fault produces. */
		T_CHECK_EQ(st.io_error, want_err);
		T_CHECK_EQ(ret_flush, want_err);
		T_CHECK_EQ(ret_after, want_err);
		T_CHECK_EQ(ret_close, want_err);
		T_CHECK_EQ(ok_after, 0);
		if (fl.failed)
			T_CHECK_EQ(fl.first_err, want_err);
	} else {
		T_CHECK_EQ(ret_flush, 0);
		T_CHECK(ret_after > 0);
		T_CHECK_EQ(ret_close, 0);
		T_CHECK_EQ(st.io_error, 0);
		T_CHECK_EQ(tot.ioerr, 0);
		if (mode == M_EINTR || mode == M_SHORT || mode == M_SLOW ||
		    mode == M_SLOW_DROP)
			T_CHECK(atomic_load(&io.faults) > 0);
		if (mode == M_SLOW)
			T_CHECK(st.ring_full_waits > 0);
		if (mode == M_SLOW_DROP)
			T_CHECK(tot.eagain > 0);
		else
			T_CHECK_EQ(tot.eagain, 0);
	}
	/* Every attempt is accounted for, exactly once. */
	T_CHECK_EQ(st.entries_written + st.lost_io + st.refused_io +
			   st.refused_dropped + st.refused_invalid +
			   st.refused_nomem + st.refused_shutdown,
		   tot.attempts);

	struct st_verify v = {
		.path = path,
		.pid = (uint32_t)getpid(),
		.spec = &spec,
		.logs = lp,
		.nlogs = created + 1,
		.stats = &st,
		.engine = opts.engine,
		.lost_ok = failing,
		.io_error = failing ? want_err : 0,
		.out = &out,
	};
	T_CHECK_EQ(st_verify(&v), 0);
	T_CHECK_EQ(out.truncated, 0);
	if (failing)
		printf("file: %" PRIu64 " bytes, %" PRIu64 " records, ends at "
		       "a record boundary (%" PRIu64 " zero bytes after it); %"
		       PRIu64 " entries lost (counted in lost_io)\n",
		       out.file_size, out.records, out.zero_tail,
		       out.missing);

	{
		char scen[48];
		uint64_t faults = failing ? (mode == M_EIO ||
					     mode == M_EIO_ZERO ?
					     atomic_load(&io.faults) : 1) :
				  atomic_load(&io.faults);

		snprintf(scen, sizeof(scen), "fault-%s%s", mode_names[mode],
			 fell_back ? "(rlimit)" : "");
		st_result(scen, opts.engine, created, st.entries_written,
			  out.verified, st.lost_io, faults, t_failed == 0);
	}
	for (unsigned i = 0; i < created; i++)
		st_log_fini(&prods[i].log);
	st_log_fini(&main_log);
	free(prods);
	free(lp);
	free(th);
	free(fth);
	unmount_tmpfs(t_failed == 0);
	/* The summary line comes last. */
	st_cleanup(&opts, t_failed == 0);
	return t_report();
}
