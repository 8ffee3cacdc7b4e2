/* SPDX-License-Identifier: MIT */
/*
 * Shared harness of the stress programs (stress/stress_*.c).
 *
 * Every stress program:
 *  - parses --threads N --seconds S --seed X --engine rings|mutex --dir D
 *    (plus --entries K per thread, --count N, --alive N and --mode NAME
 *    whose meaning each program documents), prints the seed first, and
 *    prints a progress line each second on long runs (--seconds above
 *    ST_LONG_SECONDS);
 *  - keeps, per producer thread, what every jitring_write() returned
 *    (struct st_log): entry number `seq` of thread `thread` is named
 *    "<prefix>t<thread>_s<seq>", and its shape (code size, unwinding and
 *    line information, code bytes, code address) is a pure function of
 *    (seed, thread, seq), so the verifier can recompute what each record
 *    must hold;
 *  - verifies the dump with the project's independent reader
 *    (src/reader/reader.h):
 *    jitring_check(JITRING_CHECK_SORTED), then record by record: every write
 *    that returned a code_index is present exactly once, with its name, its
 *    thread's tid, its code address, size and bytes; each thread's sequence
 *    numbers increase in file order; UNWINDING_INFO (and DEBUG_INFO) come
 *    right before their own CODE_LOAD and describe exactly that code;
 *    timestamps never decrease; nothing refused is present; nothing foreign
 *    is present; and the writer's counters equal what the producers saw;
 *  - exits 0 (pass), 1 (fail) or 77 (skip): T_EXIT_* of tests/harness.h.
 *
 * The environment variable JITRING_STRESS_SECONDS (set by `make stress`,
 * stress/run-long.sh, from STRESS_SECONDS) overrides --seconds.
 */
#ifndef JITRING_STRESS_STRESS_COMMON_H
#define JITRING_STRESS_STRESS_COMMON_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "harness.h"
#include "jitring.h"

/* Runs longer than this print a progress line each second. */
#define ST_LONG_SECONDS 10.0

/**
 * struct st_opts - Command line of a stress program.
 * @threads: --threads N: producer threads.
 * @seconds: --seconds S: time limit of the producing phase (0: none).
 * @entries: --entries K: entries per producer thread (0: no limit).
 * @count: --count N: program-specific (threads churned, children forked).
 * @alive: --alive N: program-specific (threads alive at once).
 * @mode: --mode NAME: program-specific scenario selector ("" if none).
 * @seed: --seed X: seed of every pseudo-random choice.
 * @engine: --engine rings|mutex.
 * @dir: --dir D: directory for the dumps (kept); default: a fresh
 *	directory under $TMPDIR or /tmp, removed after a passing run.
 * @own_dir: @dir was made by the harness (remove it after a pass).
 */
struct st_opts {
	unsigned threads;
	double seconds;
	uint64_t entries;
	uint64_t count;
	unsigned alive;
	char mode[32];
	uint64_t seed;
	uint32_t engine;
	char dir[4096];
	bool own_dir;
};

/*
 * Parse argv over the program's defaults in @o, print the seed and the
 * settings, build the entries' eh_frame (st_spec_init()), make the dump
 * directory.  Exits 1 on a bad command line, 77 (skip) where the host has
 * no call frame preset.
 */
void st_setup(int argc, char **argv, struct st_opts *o, const char *prog);
/* Remove the dumps and the directory if the harness made it and @passed. */
void st_cleanup(const struct st_opts *o, bool passed);
/* Make @parent/@name (for a second writer in the same process). */
int st_subdir(const char *parent, const char *name, char *out, size_t len);
/* "<dir>/jit-<pid>.dump" */
void st_dump_path(const char *dir, pid_t pid, char *out, size_t len);

/* CLOCK_MONOTONIC in ns. */
uint64_t st_now_ns(void);
/* splitmix64: the hash and the PRNG step of every choice. */
uint64_t st_mix(uint64_t x);
/* pthread_create with a small explicit stack; returns 0 or an errno. */
int st_thread_create(pthread_t *t, void *(*fn)(void *), void *arg);

/* A one-shot start line: threads wait until the main thread opens it. */
struct st_gate {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool open;
};
#define ST_GATE_INIT { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, \
		       false }
void st_gate_wait(struct st_gate *g);
void st_gate_open(struct st_gate *g);

/* ------------------------------------------------------------------ */
/* What producers write and what they got back.                         */

#define ST_F_UNW (1u << 0)   /* every entry carries UNWINDING_INFO */
#define ST_F_DBG (1u << 1)   /* one entry in four carries DEBUG_INFO */
#define ST_F_JUMBO (1u << 2) /* one entry in ~1000 is larger than 32 KiB */

/**
 * struct st_spec - How a set of producers shapes its entries.
 * @seed: the run's seed.
 * @flags: ST_F_*.
 * @prefix: names are "<prefix>t<thread>_s<seq>" ("" or e.g. "child3_").
 */
struct st_spec {
	uint64_t seed;
	unsigned flags;
	const char *prefix;
};

/* Build the eh_frame table for the host preset; false if there is none. */
bool st_spec_init(void);

#define ST_LOG_INLINE 8

/**
 * struct st_log - What one producer thread got back.
 * @thread: its number, embedded in the names.
 * @tid: its kernel tid (what CODE_LOAD must carry).
 * @n: writes attempted so far (the next seq).
 * @cap: room at @ret.
 * @ret: @ret[seq] is the code_index returned (> 0) or the -errno.
 * @ok, @eagain, @eshutdown, @enomem, @other: results by kind.
 * @ioerr: refusals with the file's error (-ENOSPC, -EIO, -EFBIG, -EDQUOT);
 *	counted apart from @other and not printed (the fault programs).
 * @attaches: rings this thread is expected to have taken (see churn).
 * @done: @n, readable by the progress thread.
 * @inl: storage for small logs.
 */
struct st_log {
	unsigned thread;
	uint32_t tid;
	uint64_t n;
	uint64_t cap;
	int64_t *ret;
	uint64_t ok, eagain, eshutdown, enomem, other;
	uint64_t ioerr;
	uint64_t attaches;
	_Atomic uint64_t done;
	int64_t inl[ST_LOG_INLINE];
};

/* Prepare @log for thread number @thread; @cap_hint 0 means "grow". */
void st_log_init(struct st_log *log, unsigned thread, uint64_t cap_hint);
void st_log_fini(struct st_log *log);

/*
 * Write entry number log->n of thread log->thread, shaped by @spec, and
 * record the result.  Records the caller's tid on first use.  Returns what
 * jitring_write() returned.  Unexpected results (anything but a
 * code_index, -EAGAIN, -ESHUTDOWN, -ENOMEM or a file error) are printed.
 * Stores ret[seq], then n, then done (release), so a reader of a log in
 * shared memory (the crash test) never sees n cover an unset ret.
 */
int64_t st_write(struct jitring *jr, const struct st_spec *spec,
		 struct st_log *log);

/* ------------------------------------------------------------------ */
/* Verification.                                                        */

/**
 * struct st_verify - What a dump must hold.
 * @path: the dump.
 * @pid: pid its header and every CODE_LOAD must carry.
 * @spec: the producers' spec (prefix, flags, seed).
 * @logs: @logs[i] is the log of thread number i (NULL: none).
 * @nlogs: entries at @logs.
 * @forbid: names containing this must not appear (NULL: no check).
 * @stats: the writer's counters after a flush or close, or NULL to skip
 *	the counter checks.
 * @extra_shutdown: refusals with -ESHUTDOWN counted by the writer that
 *	did not come from st_write() (e.g. jitring_move() after close).
 * @engine: the writer's engine: RINGS demands one timestamp per group;
 *	0 skips that check and the stats.engine check.
 * @quiet: print nothing on success.
 * @check_flags: flags for jitring_check(); 0 means JITRING_CHECK_SORTED.
 *	With JITRING_CHECK_ALLOW_TRUNCATED (the crash test) the record walk
 *	tolerates a truncated last record too, and a last group cut at a
 *	record boundary (its UNWINDING_INFO/DEBUG_INFO without the CODE_LOAD:
 *	jitring_check() says group-orphan before EOF) counts as the same cut
 *	tail.
 * @must: crash test: @must[i] is how many of thread i's first writes a
 *	completed jitring_flush() covered; only those (that returned a
 *	code_index) must be present, later ones may be missing.  NULL: every
 *	write that returned a code_index must be present.
 * @inflight_ok: crash test: the logs may lag the file by one write per
 *	thread (killed between jitring_write() returning and the log update):
 *	an entry with seq == log->n, or with a zero ret, is accepted.
 * @lost_ok: fault tests: writes that returned a code_index may be missing,
 *	but only as a suffix of each thread's writes (never a hole), and then
 *	the counters must say so: lost_io == missing, refused_io == the
 *	writes refused with the file's error, io_error == @io_error.
 * @io_error: expected stats.io_error (with @lost_ok).
 * @out: if non-NULL, receives what was found.
 */
struct st_verify {
	const char *path;
	uint32_t pid;
	const struct st_spec *spec;
	struct st_log *const *logs;
	unsigned nlogs;
	const char *forbid;
	const struct jitring_stats *stats;
	uint64_t extra_shutdown;
	uint32_t engine;
	bool quiet;
	unsigned check_flags;
	const uint64_t *must;
	bool inflight_ok;
	bool lost_ok;
	int32_t io_error;
	struct st_vout *out;
};

/**
 * struct st_vout - What st_verify() found.
 * @present: CODE_LOADs in the file.
 * @verified: of those, entries checked field by field against their log.
 * @missing: writes that returned a code_index and are not in the file.
 * @must_checked: writes that @must said must be present (crash test).
 * @records: records in the file.
 * @file_size: bytes in the file.
 * @truncated: bytes of a truncated last record (crash test).
 * @zero_tail: zero bytes at the end of the file.
 * @cut_group: the file ends inside a group (its CODE_LOAD is missing or
 *	truncated); only accepted with JITRING_CHECK_ALLOW_TRUNCATED.
 */
struct st_vout {
	uint64_t present, verified, missing, must_checked, records;
	uint64_t file_size, truncated, zero_tail;
	bool cut_group;
};

/* Check the dump; prints each violation (capped) and returns their count. */
unsigned long st_verify(const struct st_verify *v);

/*
 * The end of a fork child's run (fork and fork-storm tests): flush and
 * close @jr, demand that every write returned a code_index, and verify the
 * child's own dump in @dir (removed if it passed).  Problems are printed
 * with @who.  Return: the number of failures.
 */
unsigned st_child_finish(struct jitring *jr, const char *who,
			 const char *dir, const struct st_spec *spec,
			 struct st_log *const *logs, unsigned nlogs,
			 uint32_t engine);

/*
 * The machine-readable last word of a scenario, collected by
 * stress/run-long.sh into the summary table and docs/reliability.md:
 *   RESULT scenario=<s> engine=<e> threads=<n> written=<n> verified=<n>
 *          lost=<n> faults=<n> outcome=PASS|FAIL
 * @written: entries the writer reported in the file(s); @verified: entries
 * checked by the verifier; @lost: entries that returned a code_index but
 * are not in the file (counted in lost_io, or unflushed at a kill);
 * @faults: faults injected (errors, kills, signals, forks...).
 */
void st_result(const char *scenario, uint32_t engine, uint64_t threads,
	       uint64_t written, uint64_t verified, uint64_t lost,
	       uint64_t faults, bool passed);

/* Sum of log->ok etc. over @logs. */
struct st_totals {
	uint64_t attempts, ok, eagain, eshutdown, enomem, other, ioerr;
};
void st_totals(struct st_log *const *logs, unsigned n, struct st_totals *t);

/* ------------------------------------------------------------------ */
/* Progress on long runs.                                               */

/*
 * Start a thread that prints "[%3us] <what>: <sum of logs' done>" each
 * second while the run is long (o->seconds > ST_LONG_SECONDS); no-op
 * otherwise.  @logs is read while producers run.
 */
void st_progress_start(const struct st_opts *o, const char *what,
		       struct st_log *const *logs, unsigned nlogs);
void st_progress_stop(void);

#endif /* JITRING_STRESS_STRESS_COMMON_H */
