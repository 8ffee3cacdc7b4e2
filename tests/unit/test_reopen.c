/* SPDX-License-Identifier: MIT */
/*
 * jitring_open() after jitring_close() in the same process (a
 * runtime that deactivates and reactivates profiling):
 *
 *  1. a new writer on the same directory continues the same dump, for
 *     every pair of engines and with and without JITRING_F_WRITE_CLOSE:
 *     one header, every entry of both sessions once, code_index unique in
 *     the file, timestamps sorted, CLOSE only at the very end (the first
 *     session's is cut off), a fresh marker mapping, bytes_written the
 *     file's size; a third session goes on the same way;
 *  2. moves: an index of an earlier writer gets -ENOENT from the new one;
 *  3. two writers open at once (one per engine) never hand out the same
 *     code_index, from 4 threads writing to both;
 *  4. an open that fails after taking the closed writer's dump over (its
 *     perf map path is planted) gives it back unchanged (CLOSE restored),
 *     and the next open continues it;
 *  5. descriptors stay bounded: 30 open/close cycles keep one descriptor
 *     for the dump, also when the dump is removed between cycles (a
 *     removed dump is then started afresh), and 30 writers in directories
 *     removed after each close keep at most the last ones; 30 writers
 *     with JITRING_F_RELEASE in directories that stay keep none, each
 *     dump whole, and a later open in the first replaces its dump;
 *  6. an open writer whose dump was removed still owns the name: a second
 *     open in its directory gets -EEXIST;
 *  7. threads that live across the cycles leave nothing behind per cycle:
 *     4 threads write to each of 1000 writers (200 under TSan;
 *     ready_rings 1, so three
 *     take spare rings, whose control blocks pin their slab) and never
 *     detach, and 8 threads are born, write once and end in each cycle;
 *     after a warm-up (a tenth) the mapping count and the resident set
 *     stay put but for the closed writers' handles (each thread's next
 *     attach frees what closed writers left on its list).
 *     $JITRING_REOPEN_CYCLES runs more cycles (the soak of `make stress`:
 *     10,000);
 *  8. a close with JITRING_F_RELEASE racing an open on the same directory
 *     (two threads taking turns, one with the flag): every open succeeds
 *     or finds the name owned (-EEXIST) and then succeeds once the close
 *     is done, the dump stays whole, no descriptor piles up.
 */
#include <dirent.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/stat.h>

#include "../safety/filesafety.h"

static long long fsize(const char *path)
{
	struct stat st;

	return stat(path, &st) ? -1 : (long long)st.st_size;
}

/* Executable mappings of @path in this process. */
static int markers(const char *path)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[1024];
	int n = 0;

	T_REQUIRE(f);
	while (fgets(line, sizeof(line), f)) {
		char *p = strchr(line, '/');

		if (p && strstr(line, "r-xp") &&
		    !strncmp(p, path, strlen(path)) &&
		    p[strlen(path)] == '\n')
			n++;
	}
	fclose(f);
	return n;
}

static int nfds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	T_REQUIRE(d);
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

struct wr {
	struct jitring *jr[2];
	const char *prefix;
	int t;
	unsigned int n;
	int64_t *idx;
};

static void *writer_thread(void *arg)
{
	struct wr *w = arg;
	static const unsigned char code[64];

	for (unsigned int i = 0; i < w->n; i++) {
		char name[64];
		struct jitring *jr = w->jr[i & 1] ? w->jr[i & 1] : w->jr[0];
		struct jitring_entry e = {
			.name = name, .code_addr = code + (i % 32),
			.code_size = 16,
		};

		snprintf(name, sizeof(name), "%st%d_%u", w->prefix, w->t, i);
		w->idx[i] = jitring_write(jr, &e);
		T_CHECK(w->idx[i] > 0);
	}
	return NULL;
}

/* @threads threads x @n writes to @jr (and @jr2 alternately if set). */
static void write_threads(struct jitring *jr, struct jitring *jr2,
			  const char *prefix, int threads, unsigned int n,
			  int64_t *idx)
{
	pthread_t tid[8];
	struct wr w[8];

	for (int t = 0; t < threads; t++) {
		w[t] = (struct wr){ { jr, jr2 }, prefix, t, n, idx + t * n };
		T_REQUIRE(pthread_create(&tid[t], NULL, writer_thread,
					 &w[t]) == 0);
	}
	for (int t = 0; t < threads; t++)
		pthread_join(tid[t], NULL);
}

static int cmp64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return x < y ? -1 : x > y;
}

static void sessions(uint32_t e1, uint32_t e2, uint32_t f1, uint32_t f2)
{
	char dir[128], dump[256];
	struct jitring *jr;
	int64_t idx1[100], idx2[100];
	uint64_t closes = 9;
	long long size;
	int other;

	sf_mkdtemp(dir, NULL);
	snprintf(dump, sizeof(dump), "%s/jit-%d.dump", dir, (int)getpid());

	T_REQUIRE(t_open(e1, dir, f1, &jr) == 0);
	write_threads(jr, NULL, "s1_", 2, 50, idx1);
	T_CHECK_EQ(jitring_close(jr), 0);
	T_CHECK_EQ(markers(dump), 0);
	size = fsize(dump);
	T_CHECK_EQ(t_stats(jr).bytes_written, size);

	/* 1. */
	T_REQUIRE(t_open(e2, dir, f2, &jr) == 0);
	T_CHECK_EQ(markers(dump), 1);
	if (f1 & JITRING_F_WRITE_CLOSE)
		size -= 16; /* the CLOSE record is cut off */
	T_CHECK_EQ(fsize(dump), size);
	T_CHECK_EQ(t_stats(jr).bytes_written, size);
	write_threads(jr, NULL, "s2_", 2, 50, idx2);
	/* 2. */
	T_CHECK_EQ(jitring_move(jr, (uint64_t)idx2[7], &other, NULL, 8), 0);
	T_CHECK_EQ(jitring_move(jr, (uint64_t)idx1[7], &other, NULL, 8),
		   -ENOENT);
	T_CHECK_EQ(jitring_close(jr), 0);
	T_CHECK_EQ(t_stats(jr).bytes_written, fsize(dump));
	T_CHECK_EQ(t_dump_loads(dump, "s1_", &closes), 100);
	T_CHECK_EQ(closes, (f2 & JITRING_F_WRITE_CLOSE) ? 1 : 0);
	T_CHECK_EQ(t_dump_loads(dump, "s2_", NULL), 100);
	/* The engines agree on indices: none of one session in the other. */
	for (int i = 0; i < 100; i++)
		for (int j = 0; j < 100; j++)
			T_CHECK(idx1[i] != idx2[j]);

	/* A third session, rings, no flags. */
	T_REQUIRE(t_open(JITRING_ENGINE_RINGS, dir, 0, &jr) == 0);
	sf_write(jr, "s3_", 10, NULL);
	T_CHECK_EQ(jitring_close(jr), 0);
	T_CHECK_EQ(t_dump_loads(dump, "s1_", &closes), 100);
	T_CHECK_EQ(t_dump_loads(dump, "s2_", NULL), 100);
	T_CHECK_EQ(t_dump_loads(dump, "s3_", NULL), 10);
	T_CHECK_EQ(closes, 0);
	t_rmtree(dir);
	jitring_thread_detach(NULL);
}

/* 3. */
static void concurrent(void)
{
	char d1[128], d2[128], p1[256], p2[256];
	struct jitring *a, *b;
	static int64_t idx[4 * 400];

	sf_mkdtemp(d1, NULL);
	sf_mkdtemp(d2, NULL);
	snprintf(p1, sizeof(p1), "%s/jit-%d.dump", d1, (int)getpid());
	snprintf(p2, sizeof(p2), "%s/jit-%d.dump", d2, (int)getpid());
	T_REQUIRE(t_open(JITRING_ENGINE_RINGS, d1, 0, &a) == 0);
	T_REQUIRE(t_open(JITRING_ENGINE_MUTEX, d2, 0, &b) == 0);
	write_threads(a, b, "c_", 4, 400, idx);
	T_CHECK_EQ(jitring_close(a), 0);
	T_CHECK_EQ(jitring_close(b), 0);
	qsort(idx, 4 * 400, sizeof(idx[0]), cmp64);
	for (int i = 1; i < 4 * 400; i++)
		T_CHECK(idx[i] != idx[i - 1]);
	T_CHECK_EQ(t_dump_loads(p1, "c_", NULL), 800);
	T_CHECK_EQ(t_dump_loads(p2, "c_", NULL), 800);
	t_rmtree(d1);
	t_rmtree(d2);
	jitring_thread_detach(NULL);
}

/* 4. */
static void give_back(uint32_t engine)
{
	char dir[128], dump[256], map[64];
	struct jitring *jr;
	uint64_t closes = 9;
	long long size;

	sf_mkdtemp(dir, NULL);
	snprintf(dump, sizeof(dump), "%s/jit-%d.dump", dir, (int)getpid());
	snprintf(map, sizeof(map), "/tmp/perf-%d.map", (int)getpid());
	unlink(map);
	T_REQUIRE(t_open(engine, dir, JITRING_F_WRITE_CLOSE, &jr) == 0);
	sf_write(jr, "kept_", 5, NULL);
	T_CHECK_EQ(jitring_close(jr), 0);
	size = fsize(dump);
	T_REQUIRE(symlink(dir, map) == 0);
	T_CHECK_EQ(t_open(engine, dir, JITRING_F_PERF_MAP, &jr), -EEXIST);
	T_CHECK_EQ(fsize(dump), size);
	T_CHECK_EQ(t_dump_loads(dump, "kept_", &closes), 5);
	T_CHECK_EQ(closes, 1);
	T_CHECK_EQ(markers(dump), 0);
	unlink(map);
	T_REQUIRE(t_open(engine, dir, 0, &jr) == 0);
	sf_write(jr, "more_", 5, NULL);
	T_CHECK_EQ(jitring_close(jr), 0);
	T_CHECK_EQ(t_dump_loads(dump, "kept_", &closes), 5);
	T_CHECK_EQ(t_dump_loads(dump, "more_", NULL), 5);
	T_CHECK_EQ(closes, 0);
	t_rmtree(dir);
	jitring_thread_detach(NULL);
}

/* 5. and 6. */
static void bounded(uint32_t engine)
{
	char dir[128], dump[256];
	struct jitring *jr, *jr2;
	int fds1 = 0;

	sf_mkdtemp(dir, NULL);
	snprintf(dump, sizeof(dump), "%s/jit-%d.dump", dir, (int)getpid());
	for (int i = 0; i < 30; i++) {
		T_REQUIRE(t_open(engine, dir, 0, &jr) == 0);
		sf_write(jr, "cycle_", 1, NULL);
		T_CHECK_EQ(jitring_close(jr), 0);
		if (i == 0)
			fds1 = nfds();
	}
	T_CHECK_EQ(nfds(), fds1);
	T_CHECK_EQ(t_dump_loads(dump, "cycle_", NULL), 30);
	for (int i = 0; i < 30; i++) {
		T_REQUIRE(unlink(dump) == 0);
		T_REQUIRE(t_open(engine, dir, 0, &jr) == 0);
		T_CHECK_EQ(fsize(dump), 40);
		sf_write(jr, "fresh_", 1, NULL);
		T_CHECK_EQ(jitring_close(jr), 0);
	}
	T_CHECK_EQ(nfds(), fds1);
	T_CHECK_EQ(t_dump_loads(dump, "fresh_", NULL), 1);

	/* Writers in ever new directories, each removed after close. */
	for (int i = 0; i < 30; i++) {
		char d[128];

		sf_mkdtemp(d, NULL);
		T_REQUIRE(t_open(engine, d, JITRING_F_PERF_MAP, &jr) == 0);
		T_CHECK_EQ(jitring_close(jr), 0);
		t_rmtree(d);
	}
	T_CHECK(nfds() <= fds1 + 2);

	/*
	 * JITRING_F_RELEASE: writers in new directories that stay (a window
	 * each) keep no descriptor, and each dump is whole; a later open in
	 * the first directory takes that dump for stale and starts afresh.
	 */
	{
		char d[30][128], p[4096];
		int after1 = 0;

		for (int i = 0; i < 30; i++) {
			sf_mkdtemp(d[i], NULL);
			T_REQUIRE(t_open(engine, d[i],
					 JITRING_F_RELEASE |
						 JITRING_F_WRITE_CLOSE,
					 &jr) == 0);
			sf_write(jr, "window_", 1, NULL);
			T_CHECK_EQ(jitring_close(jr), 0);
			/* (The first open dropped what the loop above left.) */
			if (i == 0)
				after1 = nfds();
		}
		T_CHECK_EQ(nfds(), after1);
		for (int i = 0; i < 30; i++) {
			snprintf(p, sizeof(p), "%s/jit-%d.dump", d[i],
				 (int)getpid());
			T_CHECK_EQ(t_dump_loads(p, "window_", NULL), 1);
		}
		snprintf(p, sizeof(p), "%s/jit-%d.dump", d[0], (int)getpid());
		T_REQUIRE(t_open(engine, d[0], 0, &jr) == 0);
		T_CHECK_EQ(fsize(p), 40);
		T_CHECK_EQ(jitring_close(jr), 0);
		for (int i = 0; i < 30; i++)
			t_rmtree(d[i]);
	}

	/* 6. */
	T_REQUIRE(t_open(engine, dir, 0, &jr) == 0);
	T_REQUIRE(unlink(dump) == 0);
	T_CHECK_EQ(t_open(engine, dir, 0, &jr2), -EEXIST);
	T_CHECK_EQ(fsize(dump), -1);
	T_CHECK_EQ(jitring_close(jr), 0);
	snprintf(dump, sizeof(dump), "/tmp/perf-%d.map", (int)getpid());
	unlink(dump);
	t_rmtree(dir);
	jitring_thread_detach(NULL);
}

/*
 * 8.  Two threads take turns on one directory, one with JITRING_F_RELEASE
 * and one without: each turn, after a barrier, one closes the writer it
 * opened in the turn before while the other opens one, so a close that
 * lets go of the dump races an open that continues a held dump, replaces
 * a released one, or finds the name still owned (-EEXIST); an open
 * refused so is made again once the close is done, and must succeed.
 */
#define C8_TURNS (T_TSAN ? 100 : 300)

static struct {
	pthread_barrier_t bar;
	const char *dir;
	uint32_t engine;
	int opened[2], refused[2], bad[2];
} c8;

static void *c8_main(void *arg)
{
	int k = (int)(intptr_t)arg;
	uint32_t flags = k ? 0 : JITRING_F_RELEASE | JITRING_F_WRITE_CLOSE;
	struct jitring *jr = NULL;

	for (int i = 0; i < C8_TURNS; i++) {
		bool opener = (i + k) % 2;
		int ret = 0;

		pthread_barrier_wait(&c8.bar);
		if (opener) {
			ret = t_open(c8.engine, c8.dir, flags, &jr);
			c8.refused[k] += ret == -EEXIST;
			c8.bad[k] += ret && ret != -EEXIST;
		} else if (jr) {
			c8.bad[k] += jitring_close(jr) != 0;
			jr = NULL;
		}
		/* The close is done: an open refused meanwhile succeeds. */
		pthread_barrier_wait(&c8.bar);
		if (opener && ret == -EEXIST)
			c8.bad[k] += (ret = t_open(c8.engine, c8.dir, flags,
						&jr)) != 0;
		if (opener && ret == 0) {
			c8.opened[k]++;
			sf_write(jr, "race_", 1, NULL);
		}
	}
	if (jr)
		c8.bad[k] += jitring_close(jr) != 0;
	jitring_thread_detach(NULL);
	return NULL;
}

static void release_race(uint32_t engine)
{
	char dir[128], dump[256];
	pthread_t t[2];
	int fds0 = nfds();

	sf_mkdtemp(dir, NULL);
	snprintf(dump, sizeof(dump), "%s/jit-%d.dump", dir, (int)getpid());
	memset(&c8, 0, sizeof(c8));
	c8.dir = dir;
	c8.engine = engine;
	T_REQUIRE(pthread_barrier_init(&c8.bar, NULL, 2) == 0);
	for (int k = 0; k < 2; k++)
		T_REQUIRE(pthread_create(&t[k], NULL, c8_main,
					 (void *)(intptr_t)k) == 0);
	for (int k = 0; k < 2; k++)
		pthread_join(t[k], NULL);
	pthread_barrier_destroy(&c8.bar);
	T_CHECK_EQ(c8.bad[0] + c8.bad[1], 0);
	T_CHECK_EQ(c8.opened[0] + c8.opened[1], C8_TURNS);
	/* Whole, and holding the last session's entry at least. */
	T_CHECK(t_dump_loads(dump, "race_", NULL) >= 1);
	/* At most the last writer without the flag still holds it. */
	T_CHECK(nfds() <= fds0 + 1);
	printf("release race: %d turns, %d opens refused during the close\n",
	       C8_TURNS, c8.refused[0] + c8.refused[1]);
	t_rmtree(dir);
}

/* 7. */
#define C7_THREADS 4
/* An open costs about 30 ms under TSan (3 ms without): fewer there. */
#define C7_CYCLES (T_TSAN ? 200 : 1000)
/* Threads born, writing once and ended in each cycle (a storm). */
#define C7_STORM 8
/* What 900 cycles may add: the handles (tombstones, 640 B each plus
 * their paths) and the allocator's own slack.  A control block kept per
 * cycle and thread added a slab mapping (128 KiB, one page resident) for
 * most cycles: 5 MiB and 700 mappings. */
#define C7_MAPS_SLACK 16
#define C7_RSS_SLACK (2u << 20)

static struct {
	pthread_barrier_t bar;
	struct jitring *jr; /* set before the first barrier of a cycle */
	bool stop;
	_Atomic long bad;
} c7;

static void *c7_storm_main(void *arg)
{
	if (t_write_at(arg, "storm", 0x2000) <= 0)
		atomic_fetch_add(&c7.bad, 1);
	return NULL;
}

static void *c7_main(void *arg)
{
	(void)arg;
	for (;;) {
		pthread_barrier_wait(&c7.bar); /* the writer is open */
		if (c7.stop)
			return NULL;
		if (t_write_at(c7.jr, "reopen", 0x1000) <= 0)
			atomic_fetch_add(&c7.bad, 1);
		pthread_barrier_wait(&c7.bar); /* written: close it */
	}
}

/* Lines of /proc/self/maps: the process's mappings. */
static int nmaps(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	int n = 0, c;

	T_REQUIRE(f);
	while ((c = fgetc(f)) != EOF)
		n += c == '\n';
	fclose(f);
	return n;
}

static void long_lived(void)
{
	pthread_t th[C7_THREADS];
	struct jitring_config cfg;
	char dir[128], dump[256];
	uint64_t rss0 = 0, rss1;
	int maps0 = 0, maps1;
	/* $JITRING_REOPEN_CYCLES: the soak of `make stress` runs 10,000. */
	const char *env = getenv("JITRING_REOPEN_CYCLES");
	int cycles = env && atoi(env) > C7_CYCLES ? atoi(env) : C7_CYCLES;
	int warm = cycles / 10;
	/* The handles past the default run's 900 cycles: 1 KiB each. */
	uint64_t slack = C7_RSS_SLACK + 1024u * (uint64_t)(cycles - C7_CYCLES);

	sf_mkdtemp(dir, NULL);
	snprintf(dump, sizeof(dump), "%s/jit-%d.dump", dir, (int)getpid());
	jitring_config_init(&cfg);
	cfg.dir = dir;
	cfg.ready_rings = 1;
	T_REQUIRE(pthread_barrier_init(&c7.bar, NULL, C7_THREADS + 1) == 0);
	for (int t = 0; t < C7_THREADS; t++)
		T_REQUIRE(pthread_create(&th[t], NULL, c7_main, NULL) == 0);
	for (int i = 0; i < cycles; i++) {
		pthread_t st[C7_STORM];

		T_REQUIRE(jitring_open(&cfg, &c7.jr) == 0);
		pthread_barrier_wait(&c7.bar);
		for (int k = 0; k < C7_STORM; k++)
			T_REQUIRE(pthread_create(&st[k], NULL, c7_storm_main,
						 c7.jr) == 0);
		for (int k = 0; k < C7_STORM; k++)
			pthread_join(st[k], NULL);
		pthread_barrier_wait(&c7.bar);
		T_CHECK_EQ(jitring_close(c7.jr), 0);
		if (i == warm) {
			maps0 = nmaps();
			rss0 = t_rss_bytes();
		}
	}
	maps1 = nmaps();
	rss1 = t_rss_bytes();
	c7.stop = true;
	pthread_barrier_wait(&c7.bar);
	for (int t = 0; t < C7_THREADS; t++)
		pthread_join(th[t], NULL);
	pthread_barrier_destroy(&c7.bar);
	printf("%d cycles x %d threads and %d born per cycle: %d -> %d "
	       "mappings, VmRSS %.1f -> %.1f MiB\n",
	       cycles - warm, C7_THREADS, C7_STORM, maps0, maps1,
	       (double)rss0 / (1 << 20), (double)rss1 / (1 << 20));
	T_CHECK_EQ(atomic_load(&c7.bad), 0);
	/* A sanitizer's runtime maps memory of its own per thread. */
	T_CHECK(maps1 <= maps0 + (T_SANITIZED ? 4 : 1) * C7_MAPS_SLACK);
	/* A sanitizer's allocator holds freed memory back (quarantine). */
	if (!T_SANITIZED)
		T_CHECK(rss1 <= rss0 + slack);
	T_CHECK_EQ(t_dump_loads(dump, "reopen", NULL),
		   (long)cycles * C7_THREADS);
	T_CHECK_EQ(t_dump_loads(dump, "storm", NULL), (long)cycles * C7_STORM);
	t_rmtree(dir);
}

int main(void)
{
	const uint32_t R = JITRING_ENGINE_RINGS, M = JITRING_ENGINE_MUTEX;
	const uint32_t C = JITRING_F_WRITE_CLOSE;

	sessions(R, R, 0, 0);
	sessions(M, M, C, C);
	sessions(R, M, C, 0);
	sessions(M, R, 0, C);
	sessions(R, R, C, C);
	concurrent();
	for (size_t i = 0; i < 2; i++) {
		give_back(t_engines[i]);
		bounded(t_engines[i]);
	}
	for (size_t i = 0; i < 2; i++)
		release_race(t_engines[i]);
	long_lived();
	return t_report();
}
